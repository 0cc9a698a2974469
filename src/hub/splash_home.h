#pragma once
// The one directory splash writes to on its own: downloaded models and their stamps.
#include <filesystem>

namespace splash::hub {

// $SPLASH_HOME when set and non-empty, else $HOME/.cache/splash. Not created here.
std::filesystem::path splash_home();

// <splash_home>/models, where ensure_model() keeps verified model files.
std::filesystem::path models_dir();

}  // namespace splash::hub
