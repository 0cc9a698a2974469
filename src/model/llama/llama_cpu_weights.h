#pragma once
// The llama family's matrices as the CPU kernels read them: the file's tensors checked
// against the shapes the architecture expects and the types the kernels read, and matrices
// stacked row-wise into packed weights (one matmul computes every part). The CPU model
// (llama_model.cpp) and Qwen3.5's MTP block (mtp_head.cpp) build on this.
#include <initializer_list>
#include <span>
#include <string>
#include <vector>

#include "formats/gguf.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/packed_weight.h"
#include "kernels/cpu/thread_pool.h"

namespace splash::model::llama {

// Throws splash::Error unless the CPU kernels read the tensor's type.
void check_cpu_type(const gguf::File& file, const gguf::TensorInfo& t, const std::string& name);
// A matrix [rows][cols] of a type the CPU kernels read.
kernels::WeightSource weight(const gguf::File& file, const std::string& name, int rows, int cols);
// The experts' matrices of a stacked [experts][rows][cols] tensor, one source each.
std::vector<kernels::WeightSource> expert_weights(const gguf::File& file, const std::string& name, int experts,
                                                  int rows, int cols);
// The router of a mixture-of-experts layer [experts][d_model]: a float matrix, which the
// matmul kernels apply to float activations, so the choice of experts is free of int8
// rounding (llama.cpp's quantizer never quantizes a router either).
kernels::WeightSource router_weight(const gguf::File& file, const std::string& name, int experts, int d_model);

// Matrices stacked row-wise into packed weights, each run of one type as one (all of them
// when they share a type).
std::vector<kernels::PackedWeight> pack_group(std::span<const kernels::WeightSource> sources);
std::vector<kernels::PackedWeight> pack_group(std::initializer_list<kernels::WeightSource> sources);
size_t packed_group_bytes(std::span<const kernels::WeightSource> sources);
// A group's product with the quantized activations, each matrix's rows side by side in y.
void matmul_group(const std::vector<kernels::PackedWeight>& group, const kernels::QuantizedActivations& activations,
                  float* y, int ldy, kernels::ThreadPool& pool);

}  // namespace splash::model::llama
