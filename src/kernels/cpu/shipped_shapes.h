#pragma once
// The matrix widths (dot-product lengths K) of the models splash ships. The matmul kernels
// are instantiated once per width with K as a compile-time constant, so loop trip counts
// and activation strides are known to the compiler; any other width runs on the same kernel
// code instantiated with a run-time K. model/<family>/ static_asserts that its shapes are
// listed here, so adding a model without its kernels fails to compile.
namespace splash::kernels {

// SmolLM2-135M (model/llama/smollm2_shapes.h): d_model 576, ffn 1536; Qwen2.5-Coder-1.5B:
// d_model and the attention width 1536, ffn 8960.
inline constexpr int kShippedWidths[] = {576, 1536, 8960};

constexpr bool is_shipped_width(int k) {
  for (int width : kShippedWidths)
    if (width == k) return true;
  return false;
}

}  // namespace splash::kernels
