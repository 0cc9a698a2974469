#pragma once
// The local copy of a pinned model: fetched once, verified once, reused after that.
//
//   auto path = splash::hub::ensure_model(splash::hub::default_model_source(),
//                                         splash::hub::terminal_progress("SmolLM2-135M-Instruct"));
#include <filesystem>

#include "hub/model_source.h"
#include "hub/progress.h"

namespace splash::hub {

// Where ensure_model() keeps this source's file: <splash_home>/models/<file_name>.
std::filesystem::path cached_model_path(const ModelSource& source);

// Returns the path of the verified model file, downloading and extracting it first when
// it is missing or does not match the pinned size and SHA-256. A verified file is
// remembered in "<file>.verified" (size, mtime, inode, sha), so later starts do not hash
// it again unless it changed. Safe to call from several processes at once: one
// downloads, the others wait on "<file>.lock" and then reuse its result.
// Throws splash::Error with a message that says what to do; leaves no partial files.
std::filesystem::path ensure_model(const ModelSource& source, const ProgressFn& progress);

}  // namespace splash::hub
