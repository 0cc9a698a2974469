#include <fmt/format.h>

#include <cctype>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <system_error>

#include "kernels/cuda/gemv_tuner.h"
#include "model/cuda_gemv_tuning.h"

namespace splash::model {
namespace {

namespace cu = kernels::cuda;

std::string shape_name(const cu::DeviceWeight& w) {
  return fmt::format("{} {}x{}", type_name(w.type), w.rows, w.cols);
}

// The candidate table the choices index: a changed table (a new build) invalidates them.
std::string variants_signature() {
  std::string s;
  for (const auto& v : cu::gemv_variants()) s += fmt::format("{}.{}.{};", v.tokens, v.rows, v.parts);
  return s;
}

std::filesystem::path cache_file(const std::string& dir, const GemvTuningKey& key) {
  std::string gpu;
  for (const char c : key.gpu) gpu += std::isalnum(static_cast<unsigned char>(c)) ? c : '-';
  return std::filesystem::path(dir) / fmt::format("gemv-{}-driver{}-{}.json", gpu, key.driver, key.model);
}

}  // namespace

std::string tune_gemvs(std::span<cu::DeviceWeight* const> weights, const GemvTuningKey& key,
                       const std::string& cache_dir, cu::MatmulScratch& scratch, cu::Stream& stream) {
  std::map<std::string, std::array<int8_t, cu::kGemvBuckets>> chosen;
  std::string note;
  const std::filesystem::path path = cache_dir.empty() ? std::filesystem::path() : cache_file(cache_dir, key);
  if (!path.empty() && std::filesystem::exists(path)) {
    try {
      std::ifstream in(path);
      const auto cached = nlohmann::json::parse(in);
      if (cached.at("variants").get<std::string>() == variants_signature())
        for (const auto& [name, list] : cached.at("matrices").items()) {
          std::array<int8_t, cu::kGemvBuckets> c{};
          for (int b = 0; b < cu::kGemvBuckets; ++b) {
            const int v = list.at(b).get<int>();
            if (v < -1 || v >= static_cast<int>(cu::gemv_variants().size())) throw std::out_of_range("variant");
            c[b] = static_cast<int8_t>(v);
          }
          chosen[name] = c;
        }
    } catch (const std::exception& e) {
      chosen.clear();
      note = fmt::format(" (the cache {} was unreadable: {}; tuned again)", path.string(), e.what());
    }
  }
  int timed = 0;
  for (auto* w : weights) {
    const std::string name = shape_name(*w);
    if (!chosen.count(name)) chosen[name] = cu::tune_gemv(*w, scratch, stream), ++timed;
    const auto& c = chosen[name];
    for (int b = 0; b < cu::kGemvBuckets; ++b) w->gemv_choice[b] = c[b];
  }
  if (timed > 0 && !path.empty()) {
    nlohmann::json out{{"gpu", key.gpu}, {"driver", key.driver}, {"model", key.model}, {"variants", variants_signature()}};
    for (const auto& [name, c] : chosen) out["matrices"][name] = std::vector<int>(c.begin(), c.end());
    std::error_code error;
    std::filesystem::create_directories(path.parent_path(), error);
    const auto temporary = path.string() + ".tmp";
    std::ofstream file(temporary);
    file << out.dump(1) << '\n';
    file.close();
    if (!file || (std::filesystem::rename(temporary, path, error), error))
      note += fmt::format(" (could not remember them in {})", path.string());
  }
  std::string summary;
  for (const auto& [name, c] : chosen) {
    if (c[0] < 0) continue;  // float types: one GEMV
    summary += fmt::format("{}{}: {}", summary.empty() ? "" : "; ", name, fmt::join(std::vector<int>(c.begin(), c.end()), "/"));
  }
  const std::string how = timed == 0 ? fmt::format("read from {}", path.string())
                          : path.empty() ? fmt::format("timed now ({} matrices)", timed)
                                         : fmt::format("timed now ({} matrices), kept in {}", timed, path.string());
  return fmt::format("GEMV launch shapes per pass of 1/2/4/8 rows {}{}{}", how, note,
                     summary.empty() ? "" : " - " + summary);
}

}  // namespace splash::model
