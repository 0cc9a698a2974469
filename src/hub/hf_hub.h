#pragma once
// GGUF files from the Hugging Face hub: `--model owner/repo[:file]`. Resolved and cached the
// way huggingface_hub does, so the two share one cache:
//   $HF_HUB_CACHE (else $HF_HOME/hub, else ~/.cache/huggingface/hub)
//     models--owner--repo/refs/<revision>            the commit the revision named
//     models--owner--repo/blobs/<sha256>             the file's bytes
//     models--owner--repo/snapshots/<commit>/<file>  a relative link to its blob
// The hub's API says which files a commit has and each large file's size and sha256; a
// download is checked against both before it enters the cache. $HF_ENDPOINT names the hub
// (a mirror, or a test's mock), $HF_TOKEN (else $HF_HOME/token) is sent for gated and
// private repositories, and $HF_HUB_OFFLINE=1 resolves from the cache alone.
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>

#include "hub/progress.h"

namespace splash::hub {

struct HubReference {
  std::string repo;      // "owner/name"
  std::string file;      // a path in the repository; empty: its one GGUF (Q4_K_M among several)
  std::string revision = "main";
};

// "owner/repo" or "owner/repo:path/in/repo.gguf" (names of letters, digits, '-', '_', '.';
// no "..", no empty part). Anything else is not a hub reference: nullopt.
std::optional<HubReference> parse_hub_reference(std::string_view text);

// The cached file of the reference, downloaded first when the cache lacks it (online).
// Throws splash::Error saying what went wrong and what to do (a token for a gated repo, the
// file names when the choice is ambiguous, the cache path when offline).
std::filesystem::path ensure_hub_model(const HubReference& reference, const ProgressFn& progress);

// Where the cache lives (see above).
std::filesystem::path hub_cache_dir();

}  // namespace splash::hub
