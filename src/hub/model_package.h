#pragma once
// A model package: a directory that holds a model's GGUF (and its draft model's, when it has
// one) beside manifest.json, which says what the package is and pins every byte of it:
//
//   {"format": "splash-model-package", "format_version": 1,
//    "model": {family, name, shapes, quantization, tokenizer, chat template, license...},
//    "files": [{"role": "model" | "draft", "name": "x.gguf", "size": N, "sha256": "..."}],
//    "baseline": {the figures measured when it was packed, and on what}}
//
// `splash pack` writes one (app/cli_pack.cpp: the model description and baseline come from
// loading the model); `--model DIR` opens one: the format version must be this build's, and
// every file must have its size and sha256 (hashed once; a ".verified" stamp beside each file
// spares later starts the hashing while the file is unchanged). The weights are then mapped
// from the package's own file, as any GGUF is (zero-copy).
#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "hub/progress.h"

namespace splash::hub {

inline constexpr int kPackageFormatVersion = 1;
inline constexpr const char* kPackageManifest = "manifest.json";

struct PackageFile {
  std::string role;  // "model" or "draft"
  std::string name;  // a plain file name inside the package
  std::uint64_t size = 0;
  std::string sha256;
};

struct PackageContents {
  std::filesystem::path model;                // the model's GGUF
  std::optional<std::filesystem::path> draft;  // the draft model's, when packed with one
  nlohmann::json manifest;
};

// Whether `dir` is a directory with a manifest (not whether it is valid: open_package says).
bool is_package(const std::filesystem::path& dir);

// Reads and checks the manifest and every file it lists; throws splash::Error naming what is
// wrong (another format version, a missing file, a size or sha256 that differs).
PackageContents open_package(const std::filesystem::path& dir, const ProgressFn& progress);

// Copies each source file into `dir` (created; refused when it already holds a manifest)
// under its own name, hashing as it copies, with progress; then writes the manifest with
// `model` and `baseline` as given and the files' sizes and sha256. Nothing is left on failure.
// Returns the manifest written.
nlohmann::json write_package(const std::filesystem::path& dir, const std::filesystem::path& model_file,
                             const std::optional<std::filesystem::path>& draft_file, const nlohmann::json& model,
                             const nlohmann::json& baseline, const ProgressFn& progress);

}  // namespace splash::hub
