#pragma once
// The local copy of a pinned model: fetched once, verified once, reused after that.
//
//   auto path = splash::hub::ensure_model(splash::hub::default_model_source(),
//                                         splash::hub::terminal_progress("SmolLM2-135M-Instruct"));
#include <filesystem>

#include <functional>
#include <string>

#include "hub/model_catalogue.h"
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

// A catalogue model's verified file, fetched first when missing. A model in one piece is
// ensure_model() of it. A model in pieces has the missing ones fetched four at a time, each
// verified by ensure_model (so a run that is stopped keeps the pieces it finished, and the
// next one resumes from there), then joined into the file, which appears only once its size
// and SHA-256 match; the pieces are removed after. `progress_for(model.title)` shows the
// pieces' downloads as one ("downloading": the bytes fetched in this run of all it fetches)
// and the join.
std::filesystem::path ensure_catalogue_model(const CatalogueModel& model,
                                             const std::function<ProgressFn(const std::string&)>& progress_for);
// Whether the model's file is in the cache with its pinned size (verified on use).
bool is_cached(const CatalogueModel& model);

// Whether `file` is the very file (size, mtime, inode) that its "<file>.verified" stamp says
// hashed to sha256, and writing that stamp after a verification: a large file is hashed once,
// not at every start.
bool verified_before(const std::filesystem::path& file, const std::string& sha256);
void remember_verified(const std::filesystem::path& file, const std::string& sha256);

}  // namespace splash::hub
