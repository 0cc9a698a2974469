#include "model/llama/llama_cpu_weights.h"

#include "common/error.h"
#include "kernels/cpu/quant_formats.h"
#include "model/llama/llama_hparams.h"

namespace splash::model::llama {

using kernels::PackedWeight;
using kernels::WeightSource;

void check_cpu_type(const gguf::File& file, const gguf::TensorInfo& t, const std::string& name) {
  if (!kernels::is_supported_weight_type(t.type))
    fail("{}: tensor '{}' has type {}, which has no CPU kernel (supported: F32, F16, BF16, Q8_0, Q5_0, Q5_1, Q4_0, Q4_1, "
         "Q4_K, Q6_K)",
         file.path(), name, type_name(t.type));
}

WeightSource weight(const gguf::File& file, const std::string& name, int rows, int cols) {
  const WeightSource source = matrix_source(file, name, rows, cols);
  check_cpu_type(file, file.tensor(name), name);
  return source;
}

std::vector<WeightSource> expert_weights(const gguf::File& file, const std::string& name, int experts, int rows,
                                         int cols) {
  const auto& t = matrix_stack_tensor(file, name, experts, rows, cols);
  check_cpu_type(file, t, name);
  const size_t bytes = t.n_bytes / experts;
  std::vector<WeightSource> out;
  for (int e = 0; e < experts; ++e) out.push_back({t.type, t.data + e * bytes, rows, cols});
  return out;
}

WeightSource router_weight(const gguf::File& file, const std::string& name, int experts, int d_model) {
  const auto& t = matrix_tensor(file, name, experts, d_model);
  if (t.type != GgmlType::F32 && t.type != GgmlType::F16 && t.type != GgmlType::BF16)
    fail("{}: tensor '{}' has type {}; a router must be F32, F16 or BF16", file.path(), name, type_name(t.type));
  return {t.type, t.data, experts, d_model};
}

namespace {
template <typename Each>
void for_each_type_run(std::span<const WeightSource> sources, Each&& each) {
  for (size_t first = 0; first < sources.size();) {
    size_t end = first + 1;
    while (end < sources.size() && sources[end].type == sources[first].type) ++end;
    each(sources.subspan(first, end - first));
    first = end;
  }
}
}  // namespace

std::vector<PackedWeight> pack_group(std::span<const WeightSource> sources) {
  std::vector<PackedWeight> packed;
  for_each_type_run(sources, [&](std::span<const WeightSource> run) { packed.push_back(kernels::pack_weights(run)); });
  return packed;
}
std::vector<PackedWeight> pack_group(std::initializer_list<WeightSource> sources) {
  return pack_group(std::span(sources.begin(), sources.size()));
}
size_t packed_group_bytes(std::span<const WeightSource> sources) {
  size_t bytes = 0;
  for_each_type_run(sources, [&](std::span<const WeightSource> run) {
    int rows = 0;
    for (const auto& source : run) rows += source.rows;
    bytes += kernels::packed_weight_bytes(run[0].type, rows, run[0].cols);
  });
  return bytes;
}

void matmul_group(const std::vector<PackedWeight>& group, const kernels::QuantizedActivations& activations, float* y,
                  int ldy, kernels::ThreadPool& pool) {
  int column = 0;
  for (const auto& w : group) {
    kernels::matmul(w, activations, y + column, ldy, pool);
    column += w.rows;
  }
}

}  // namespace splash::model::llama
