#include "hub/splash_home.h"

#include <cstdlib>

#include "common/error.h"

namespace splash::hub {

namespace {

const char* non_empty_env(const char* name) {
  const char* value = std::getenv(name);
  return (value != nullptr && value[0] != '\0') ? value : nullptr;
}

}  // namespace

std::filesystem::path splash_home() {
  if (const char* home = non_empty_env("SPLASH_HOME")) {
    // Absolute, so that a later chdir (or a message quoting the path) does not change it.
    return std::filesystem::absolute(home);
  }
  if (const char* user_home = non_empty_env("HOME")) {
    return std::filesystem::path(user_home) / ".cache" / "splash";
  }
  fail(
      "cannot find a directory for downloaded models: neither SPLASH_HOME nor HOME is set; "
      "set SPLASH_HOME to a writable directory or pass --model PATH");
}

std::filesystem::path models_dir() { return splash_home() / "models"; }

}  // namespace splash::hub
