// The CUDA kernels against float64 references on fresh random inputs, outputs poisoned
// (NaN) before each run so an unwritten element fails: the GEMV family and the tensor-core
// path for every GGUF weight type (references from the CPU dequantizer, itself checked
// against gguf-py's goldens), and the QKV epilogue + paged attention for every KV element
// type, decode and causal prefill, across context splits; the best tokens of logits rows.
#include <algorithm>
#include <numeric>
#include <optional>
#include <tuple>

#include "common/error.h"
#include "gpu_fixture.h"
#include "kernels/cpu/half.h"
#include "kernels/cpu/kv_layout.h"
#include "kernels/cpu/quant_formats.h"
#include "kernels/cuda/delta_net.h"
#include "kernels/cuda/experts.h"
#include "kernels/cuda/ops.h"
#include "model/model.h"

namespace splash::testing {
namespace {

// Random blocks of a type whose scale fields are set so weights have a deviation near 0.05
// (random bits there would give infinities); every other byte is random.
std::vector<uint8_t> random_matrix(GgmlType type, int rows, int cols, std::mt19937_64& rng) {
  const auto traits = *type_traits(static_cast<uint32_t>(type));
  const size_t blocks = static_cast<size_t>(rows) * cols / traits.block_elements;
  std::vector<uint8_t> bytes(blocks * traits.block_bytes);
  for (auto& b : bytes) b = static_cast<uint8_t>(rng());
  std::uniform_real_distribution<float> scale(0.004f, 0.012f), offset(-0.05f, 0.05f);
  auto put_half = [&](uint8_t* p, float v) {
    const uint16_t h = kernels::fp32_to_fp16(v);
    std::memcpy(p, &h, 2);
  };
  if (type == GgmlType::F32 || type == GgmlType::F16 || type == GgmlType::BF16) {
    const auto values = random_floats(rng, static_cast<size_t>(rows) * cols, 0.05f);
    for (size_t i = 0; i < values.size(); ++i) {
      if (type == GgmlType::F32) std::memcpy(bytes.data() + 4 * i, &values[i], 4);
      else if (type == GgmlType::F16) put_half(bytes.data() + 2 * i, values[i]);
      else {
        const uint16_t b = static_cast<uint16_t>(std::bit_cast<uint32_t>(values[i]) >> 16);
        std::memcpy(bytes.data() + 2 * i, &b, 2);
      }
    }
    return bytes;
  }
  for (size_t b = 0; b < blocks; ++b) {
    uint8_t* block = bytes.data() + b * traits.block_bytes;
    switch (type) {
      case GgmlType::Q4_0: case GgmlType::Q5_0: case GgmlType::Q8_0:
        put_half(block, type == GgmlType::Q8_0 ? scale(rng) / 8 : scale(rng));
        break;
      case GgmlType::Q4_1: case GgmlType::Q5_1:
        put_half(block, scale(rng)), put_half(block + 2, offset(rng) - 0.05f);
        break;
      case GgmlType::Q4_K:
        put_half(block, scale(rng) / 32), put_half(block + 2, scale(rng) / 32);
        break;
      case GgmlType::Q6_K:
        put_half(block + 208, scale(rng) / 64);
        break;
      default:
        break;
    }
  }
  return bytes;
}

std::vector<double> dequantized(GgmlType type, const std::vector<uint8_t>& bytes, int rows, int cols) {
  std::vector<float> row(cols);
  std::vector<double> out(static_cast<size_t>(rows) * cols);
  const size_t row_bytes = cu::gguf_row_bytes(type, cols);
  for (int r = 0; r < rows; ++r) {
    kernels::dequantize_row(type, bytes.data() + r * row_bytes, row.data(), cols);
    std::copy(row.begin(), row.end(), out.begin() + static_cast<size_t>(r) * cols);
  }
  return out;
}

// The matrix on the device in the kernels' layout: uploaded as the file holds it, then
// repacked there as the model loader does.
cu::DeviceBuffer packed_on_device(GgmlType type, const std::vector<uint8_t>& bytes, int rows, int cols) {
  const auto raw = to_device(bytes);
  cu::DeviceBuffer packed(cu::weight_row_bytes(type, cols) * rows);
  cu::Stream stream;
  cu::pack_weight(type, rows, cols, raw.data(), packed.data(), stream);
  stream.synchronize("pack_weight");
  return packed;
}

constexpr GgmlType kWeightTypes[] = {GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q5_0, GgmlType::Q5_1, GgmlType::Q8_0,
                                     GgmlType::Q4_K, GgmlType::Q6_K, GgmlType::F32,  GgmlType::F16,  GgmlType::BF16};

class CudaMatmulTest : public GpuTest {};

// The activations as the GEMV of integer types reads them: int8 per group of 16 with a
// float scale (amax / 127), rounded half to even, as the kernel computes them.
std::vector<double> int8_activations(const std::vector<float>& x, int n, int cols) {
  std::vector<double> out(x.size());
  for (int t = 0; t < n; ++t)
    for (int g = 0; g < cols / 16; ++g) {
      const float* v = x.data() + static_cast<size_t>(t) * cols + g * 16;
      float amax = 0.0f;
      for (int j = 0; j < 16; ++j) amax = std::max(amax, std::abs(v[j]));
      const float inverse = amax > 0.0f ? 127.0f / amax : 0.0f, scale = amax / 127.0f;
      for (int j = 0; j < 16; ++j)
        out[static_cast<size_t>(t) * cols + g * 16 + j] = static_cast<double>(scale) * std::nearbyint(v[j] * inverse);
    }
  return out;
}

bool is_float_type(GgmlType type) { return type == GgmlType::F32 || type == GgmlType::F16 || type == GgmlType::BF16; }

// y = W x (+ y0) for every type, at decode widths (GEMV up to kGemvLargestBatch rows, then the
// small GEMM for integer types: 8, 11, 40 rows) and prompt widths (77 rows: f16 copies +
// cuBLAS). Tolerances against
// float64: the GEMV of float types, 1e-5; of integer types, 1e-5 against the int8
// activations it reads (the kernel's own arithmetic) and 1.5e-2 against the float ones
// (the int8 rounding, a half step of amax/127 per group of 16); f16 operands, 3e-3.
TEST_F(CudaMatmulTest, EveryTypeAgainstFloat64) {
  const int rows = 100, cols = 768;  // rows not a multiple of the 8 rows of a thread block
  cu::Stream stream;
  cu::MatmulScratch scratch;
  for (const GgmlType type : kWeightTypes) {
    const auto bytes = random_matrix(type, rows, cols, rng_);
    const auto w = dequantized(type, bytes, rows, cols);
    const auto device_bytes = packed_on_device(type, bytes, rows, cols);
    const cu::DeviceWeight weight{type, device_bytes.as<uint8_t>(), rows, cols};
    for (const int n : {1, 2, 3, 8, 11, 40, 77}) {
      for (const bool accumulate : {false, true}) {
        const auto x = random_floats(rng_, static_cast<size_t>(n) * cols);
        std::vector<float> y0 = accumulate ? random_floats(rng_, static_cast<size_t>(n) * rows)
                                           : std::vector<float>(static_cast<size_t>(n) * rows, NAN);
        auto reference = [&](const auto& xs) {
          std::vector<double> ref(static_cast<size_t>(n) * rows);
          for (int t = 0; t < n; ++t)
            for (int r = 0; r < rows; ++r) {
              double sum = accumulate ? y0[static_cast<size_t>(t) * rows + r] : 0.0;
              for (int c = 0; c < cols; ++c)
                sum += w[static_cast<size_t>(r) * cols + c] * xs[static_cast<size_t>(t) * cols + c];
              ref[static_cast<size_t>(t) * rows + r] = sum;
            }
          return ref;
        };
        const auto ref = reference(x);
        const auto dx = to_device(x);
        auto dy = to_device(y0);
        cu::matmul(weight, dx.as<float>(), cols, n, dy.as<float>(), rows, accumulate, scratch, stream);
        stream.synchronize("matmul");
        const auto out = to_host<float>(dy, ref.size());
        const bool int8_gemv = n <= cu::kGemvLargestBatch && !is_float_type(type);
        const double tolerance = n > cu::kGemvLargestBatch ? 3e-3 : int8_gemv ? 1.5e-2 : 1e-5;  // (f16 operands)
        EXPECT_LT(relative_error(out, ref), tolerance) << type_name(type) << " n=" << n << " accumulate=" << accumulate;
        if (int8_gemv) {
          EXPECT_LT(relative_error(out, reference(int8_activations(x, n, cols))), 1e-5)
              << type_name(type) << " n=" << n << " accumulate=" << accumulate << " (against its int8 activations)";
        }
      }
    }
  }
}

// The tensor-core path's f16 copy holds each weight's value rounded to f16: within half an
// f16 ulp plus the one rounding of the CPU's own float arithmetic (a zero may be -0).
TEST_F(CudaMatmulTest, DequantizeToF16IsTheCpuValueRounded) {
  const int rows = 16, cols = 512;
  cu::Stream stream;
  for (const GgmlType type : kWeightTypes) {
    const auto bytes = random_matrix(type, rows, cols, rng_);
    const auto w = dequantized(type, bytes, rows, cols);
    const auto device_bytes = packed_on_device(type, bytes, rows, cols);
    cu::DeviceBuffer out(static_cast<size_t>(rows) * cols * 2);
    stream.fill(out.data(), 0xFF, out.size());
    cu::dequantize_to_f16({type, device_bytes.as<uint8_t>(), rows, cols}, out.data(), stream);
    stream.synchronize("dequantize");
    const auto halves = to_host<uint16_t>(out, static_cast<size_t>(rows) * cols);
    for (size_t i = 0; i < halves.size(); ++i)
      ASSERT_NEAR(kernels::fp16_to_fp32(halves[i]), w[i], std::abs(w[i]) * 1e-3 + 1e-7)
          << type_name(type) << " element " << i;
  }
}

// Every GEMV launch shape the tuner may choose, for every integer type, against float64 over
// the int8 activations it reads (1e-5), with partial passes (3 of 4 rows, 5 of 8) and rows
// that leave a thread block part empty.
TEST_F(CudaMatmulTest, EveryGemvVariantAgainstFloat64) {
  cu::Stream stream;
  cu::MatmulScratch scratch;
  const auto variants = cu::gemv_variants();
  // Also one block of 256 columns (the random test models' d_model: fewer parts than lanes).
  for (const auto& [type, rows, cols] : [] {
         std::vector<std::tuple<GgmlType, int, int>> cases;
         for (const GgmlType type : kWeightTypes)
           if (!is_float_type(type)) cases.emplace_back(type, 100, 768), cases.emplace_back(type, 72, 256);
         return cases;
       }()) {
    const auto bytes = random_matrix(type, rows, cols, rng_);
    const auto w = dequantized(type, bytes, rows, cols);
    const auto device_bytes = packed_on_device(type, bytes, rows, cols);
    const cu::DeviceWeight weight{type, device_bytes.as<uint8_t>(), rows, cols};
    for (size_t v = 0; v < variants.size(); ++v) {
      constexpr int kRowsOfPass[cu::kGemvBuckets] = {1, 2, 3, 5};  // partial passes of 4 and 8
      const int n = kRowsOfPass[cu::gemv_bucket(variants[v].tokens)];
      const auto x = random_floats(rng_, static_cast<size_t>(n) * cols);
      const auto xq = int8_activations(x, n, cols);
      std::vector<double> ref(static_cast<size_t>(n) * rows);
      for (int t = 0; t < n; ++t)
        for (int r = 0; r < rows; ++r) {
          double sum = 0.0;
          for (int c = 0; c < cols; ++c) sum += w[static_cast<size_t>(r) * cols + c] * xq[static_cast<size_t>(t) * cols + c];
          ref[static_cast<size_t>(t) * rows + r] = sum;
        }
      const auto dx = to_device(x);
      auto dy = to_device(std::vector<float>(static_cast<size_t>(n) * rows, NAN));
      cu::gemv(weight, dx.as<float>(), cols, n, dy.as<float>(), rows, false, scratch, stream, nullptr,
               static_cast<int>(v));
      stream.synchronize("gemv");
      EXPECT_LT(relative_error(to_host<float>(dy, ref.size()), ref), 1e-5)
          << type_name(type) << " " << rows << "x" << cols << " variant " << v << " (" << variants[v].tokens
          << " tokens, " << variants[v].rows << " rows, " << variants[v].parts << " parts) n=" << n;
    }
  }
}

// The small GEMM for every integer type against float64: 1e-4 over the operands it
// multiplies (weights and activations rounded to f16, float accumulation; 1e-3 for K-quants,
// whose sub-block scales it rounds to f16 first) and 3e-3 over the exact ones; every token-tile width (1-64 rows, partial tiles), a partial thread block of
// rows (200 of 256), a partial column tile (864 = 6.75 x 128, 32-weight block types), split K
// by hand (one split: plain stores; two; seven, the same bits on a second run) and automatic,
// with and without accumulation.
TEST_F(CudaMatmulTest, SmallGemmAgainstFloat64) {
  const int rows = 200;
  cu::Stream stream;
  cu::MatmulScratch scratch;
  for (const GgmlType type : kWeightTypes) {
    if (!cu::small_gemm_reads(type)) continue;
    const bool k_quant = type == GgmlType::Q4_K || type == GgmlType::Q6_K;
    const int cols = k_quant ? 1792 : 864;
    const auto bytes = random_matrix(type, rows, cols, rng_);
    const auto w = dequantized(type, bytes, rows, cols);
    std::vector<double> w16(w.size());
    for (size_t i = 0; i < w.size(); ++i) w16[i] = kernels::fp16_to_fp32(kernels::fp32_to_fp16(static_cast<float>(w[i])));
    const auto device_bytes = packed_on_device(type, bytes, rows, cols);
    const cu::DeviceWeight weight{type, device_bytes.as<uint8_t>(), rows, cols};
    for (const int n : {1, 5, 9, 16, 23, 32, 41, 64}) {
      for (const bool accumulate : {false, true}) {
        const auto x = random_floats(rng_, static_cast<size_t>(n) * cols);
        std::vector<double> x16(x.size());
        for (size_t i = 0; i < x.size(); ++i) x16[i] = kernels::fp16_to_fp32(kernels::fp32_to_fp16(x[i]));
        const auto y0 = random_floats(rng_, static_cast<size_t>(n) * rows);
        auto reference = [&](const std::vector<double>& ws, const auto& xs) {
          std::vector<double> ref(static_cast<size_t>(n) * rows);
          for (int t = 0; t < n; ++t)
            for (int r = 0; r < rows; ++r) {
              double sum = accumulate ? y0[static_cast<size_t>(t) * rows + r] : 0.0;
              for (int c = 0; c < cols; ++c)
                sum += ws[static_cast<size_t>(r) * cols + c] * xs[static_cast<size_t>(t) * cols + c];
              ref[static_cast<size_t>(t) * rows + r] = sum;
            }
          return ref;
        };
        const auto exact = reference(w, x), operands = reference(w16, x16);
        const auto dx = to_device(x);
        // K-quants: the streamed kernel (Auto; from 32 rows its activations through a ring) and the staged one.
        const bool streamed = (type == GgmlType::Q4_K || type == GgmlType::Q6_K) && n <= cu::kSmallGemmStreamedLargestBatch;
        // The two kernels multiply the same f16 operands: they differ only in the order of
        // the float sums (1e-5).
        std::vector<double> staged_out;
        if (streamed) {
          auto dy = to_device(accumulate ? y0 : std::vector<float>(y0.size(), NAN));
          cu::small_gemm(weight, dx.as<float>(), cols, n, dy.as<float>(), rows, accumulate, scratch, stream, 1,
                         cu::SmallGemmKernel::Staged);
          stream.synchronize("small_gemm (staged)");
          const auto out = to_host<float>(dy, exact.size());
          staged_out.assign(out.begin(), out.end());
        }
        for (const auto kernel : {cu::SmallGemmKernel::Auto, cu::SmallGemmKernel::Staged}) {
          if (kernel == cu::SmallGemmKernel::Staged && !streamed) continue;  // (Auto was the staged kernel)
          const char* name = kernel == cu::SmallGemmKernel::Staged || !streamed ? "staged" : "streamed";
          for (const int splits : {0, 1, 2, 7}) {
            auto dy = to_device(accumulate ? y0 : std::vector<float>(y0.size(), NAN));
            cu::small_gemm(weight, dx.as<float>(), cols, n, dy.as<float>(), rows, accumulate, scratch, stream, splits,
                           kernel);
            stream.synchronize("small_gemm");
            const auto out = to_host<float>(dy, exact.size());
            if (splits == 7) {  // split K adds the splits up in a fixed order: the same bits again
              auto again = to_device(accumulate ? y0 : std::vector<float>(y0.size(), NAN));
              cu::small_gemm(weight, dx.as<float>(), cols, n, again.as<float>(), rows, accumulate, scratch, stream,
                             splits, kernel);
              stream.synchronize("small_gemm");
              EXPECT_EQ(to_host<float>(again, exact.size()), out) << type_name(type) << " n=" << n << " " << name;
            }
            // K-quants: the kernel forms d * sc and the fused d q + m in f16 arithmetic, a
            // rounding or two more than the reference's single rounding of each weight (2^-11
            // each; a single row came out at 5.0e-4 once, so the bound is 1e-3).
            EXPECT_LT(relative_error(out, operands), k_quant ? 1e-3 : 1e-4)
                << type_name(type) << " n=" << n << " accumulate=" << accumulate << " splits=" << splits << " " << name;
            EXPECT_LT(relative_error(out, exact), 3e-3)
                << type_name(type) << " n=" << n << " accumulate=" << accumulate << " splits=" << splits << " " << name;
            if (streamed && kernel == cu::SmallGemmKernel::Auto) {
              EXPECT_LT(relative_error(out, staged_out), 1e-5)
                  << "streamed vs staged, n=" << n << " accumulate=" << accumulate << " splits=" << splits;
            }
          }
        }
      }
    }
  }
}

// rms_norm and silu_mul writing the int8 copy as they go: their float rows against float64
// (1e-6), and the copy byte for byte what quantize_rows makes of those rows. silu_mul also
// at 32 rows (a mixture of experts' pairs taken one by one).
TEST_F(CudaMatmulTest, FusedQuantizedCopiesMatchQuantizeRows) {
  const int d = 1024, ffn = 768;  // (the copies serve the GEMV)
  cu::Stream stream;
  const auto compare_copies = [&](cu::DeviceBuffer& fused, const float* rows_on_device, int n, int cols,
                                  const char* what) {
    cu::DeviceBuffer separate;
    cu::quantize_rows(rows_on_device, cols, n, cols, separate, stream);
    stream.synchronize(what);
    const size_t bytes = cu::quantized_activation_bytes(n, cols);
    EXPECT_EQ(to_host<uint8_t>(fused, bytes), to_host<uint8_t>(separate, bytes)) << what;
  };
  {
    const int n = cu::kGemvLargestBatch;
    const auto x = random_floats(rng_, static_cast<size_t>(n) * d), weight = random_floats(rng_, d);
    const auto dx = to_device(x), dw = to_device(weight);
    cu::DeviceBuffer out(static_cast<size_t>(n) * d * sizeof(float)), copy;
    const cu::QuantizedRowsBuffer q = cu::quantized_rows_in(copy, n, d);
    cu::rms_norm(dx.as<float>(), dw.as<float>(), out.as<float>(), n, d, 1e-6f, stream, &q);
    stream.synchronize("rms_norm");
    std::vector<double> ref(static_cast<size_t>(n) * d);
    for (int t = 0; t < n; ++t) {
      double sum = 0.0;
      for (int i = 0; i < d; ++i) sum += static_cast<double>(x[t * d + i]) * x[t * d + i];
      const double scale = 1.0 / std::sqrt(sum / d + 1e-6);
      for (int i = 0; i < d; ++i) ref[t * d + i] = x[t * d + i] * scale * weight[i];
    }
    EXPECT_LT(relative_error(to_host<float>(out, ref.size()), ref), 1e-6);
    compare_copies(copy, out.as<float>(), n, d, "rms_norm");
  }
  for (const int n : {cu::kGemvLargestBatch, 32}) {
    const auto gate_up = random_floats(rng_, static_cast<size_t>(n) * 2 * ffn);
    const auto dg = to_device(gate_up);
    cu::DeviceBuffer out(static_cast<size_t>(n) * ffn * sizeof(float)), copy;
    const cu::QuantizedRowsBuffer q = cu::quantized_rows_in(copy, n, ffn);
    cu::silu_mul(dg.as<float>(), out.as<float>(), n, ffn, stream, &q);
    stream.synchronize("silu_mul");
    std::vector<double> ref(static_cast<size_t>(n) * ffn);
    for (int t = 0; t < n; ++t)
      for (int i = 0; i < ffn; ++i) {
        const double g = gate_up[t * 2 * ffn + i], u = gate_up[t * 2 * ffn + ffn + i];
        ref[t * ffn + i] = g / (1.0 + std::exp(-g)) * u;
      }
    EXPECT_LT(relative_error(to_host<float>(out, ref.size()), ref), 1e-6);
    compare_copies(copy, out.as<float>(), n, ffn, "silu_mul");
  }
}

// The fused batch-1 GEMVs (gemv_residual_norm, gemv_swiglu) for every integer type in every
// launch shape they take (each weight's GEMV choice at one row), chained as a layer chains them (the output projection's residual step leaves the
// next norm pending; gate/up reads it and applies it): against float64 (1e-5 over the int8
// activations each reads; the sums of squares 1e-6), and bit for bit what the kernel-per-step
// layer computes from the same inputs (the plain GEMV, quantize_rows of x * norm, silu_mul):
// the same dot products in the same order, the same int8 rounding.
TEST_F(CudaMatmulTest, FusedGemvsAgainstFloat64AndTheSeparateKernels) {
  const int k = 768, d = 512, ffn = 256;  // in: k wide; the residual d; the hidden ffn
  cu::Stream stream;
  cu::MatmulScratch scratch;
  for (const GgmlType type : kWeightTypes) {
    if (is_float_type(type)) continue;
    const auto o_bytes = random_matrix(type, d, k, rng_), gu_bytes = random_matrix(type, 2 * ffn, d, rng_);
    const auto wo = dequantized(type, o_bytes, d, k), wgu = dequantized(type, gu_bytes, 2 * ffn, d);
    const auto o_dev = packed_on_device(type, o_bytes, d, k), gu_dev = packed_on_device(type, gu_bytes, 2 * ffn, d);
    cu::DeviceWeight o{type, o_dev.as<uint8_t>(), d, k}, gate_up{type, gu_dev.as<uint8_t>(), 2 * ffn, d};
    ASSERT_TRUE(cu::gemv_fused_reads(o) && cu::gemv_fused_reads(gate_up)) << type_name(type);
    for (const int variant : {0, 1, 2, 3}) {  // (rows a warp, parts in flight): 1,4 2,4 1,8 2,2
      const auto shape = cu::gemv_variants()[variant];
      ASSERT_EQ(shape.tokens, 1);
      SCOPED_TRACE(std::string(type_name(type)) + " shape " + std::to_string(shape.rows) + "," +
                   std::to_string(shape.parts));
      o.gemv_choice[0] = gate_up.gemv_choice[0] = static_cast<int8_t>(variant);
      const int n = 1;
      const auto a = random_floats(rng_, static_cast<size_t>(n) * k), x0 = random_floats(rng_, static_cast<size_t>(n) * d);
      const auto norm = random_floats(rng_, d);
      const auto da = to_device(a), dnorm = to_device(norm);
      cu::DeviceBuffer a_q8, next_q8, hidden_q8;
      const cu::QuantizedRows in = cu::quantize_rows(da.as<float>(), k, n, k, a_q8, stream);
      // The residual step: x += o . a, then the int8 copy of x * norm with its sums of squares.
      auto dx = to_device(x0);
      const cu::QuantizedRowsBuffer next = cu::normed_rows_in(next_q8, n, d);
      stream.fill(next_q8.data(), 0xFF, next_q8.size());
      cu::gemv_residual_norm(o, in, dx.as<float>(), dnorm.as<float>(), &next, stream);
      stream.synchronize("gemv_residual_norm");
      const auto x = to_host<float>(dx, static_cast<size_t>(n) * d);
      const auto aq = int8_activations(a, n, k);
      std::vector<double> x_ref(x.size()), sumsq_ref(static_cast<size_t>(n) * (d / 16), 0.0);
      for (int t = 0; t < n; ++t)
        for (int r = 0; r < d; ++r) {
          double sum = x0[t * d + r];
          for (int c = 0; c < k; ++c) sum += wo[static_cast<size_t>(r) * k + c] * aq[static_cast<size_t>(t) * k + c];
          x_ref[t * d + r] = sum;
          sumsq_ref[t * (d / 16) + r / 16] += static_cast<double>(x[t * d + r]) * x[t * d + r];
        }
      EXPECT_LT(relative_error(x, x_ref), 1e-5) << "residual";
      const size_t q8_bytes = cu::quantized_activation_bytes(n, d);
      const auto sumsq = to_host<float>(next_q8, q8_bytes / 4 + sumsq_ref.size());
      EXPECT_LT(relative_error(std::vector<float>(sumsq.end() - sumsq_ref.size(), sumsq.end()), sumsq_ref), 1e-6);
      // The separate kernels from the same inputs: the plain GEMV accumulating, then
      // quantize_rows of x * norm.
      auto dx_plain = to_device(x0);
      cu::gemv(o, nullptr, k, n, dx_plain.as<float>(), d, true, scratch, stream, &in);
      stream.synchronize("gemv");
      EXPECT_EQ(to_host<float>(dx_plain, x.size()), x) << "residual, against the plain GEMV";
      std::vector<float> scaled(x.size());
      for (size_t i = 0; i < x.size(); ++i) scaled[i] = x[i] * norm[i % d];
      const auto dscaled = to_device(scaled);
      cu::DeviceBuffer separate;
      cu::quantize_rows(dscaled.as<float>(), d, n, d, separate, stream);
      stream.synchronize("quantize_rows");
      EXPECT_EQ(to_host<uint8_t>(next_q8, q8_bytes), to_host<uint8_t>(separate, q8_bytes)) << "the next input's copy";

      // SwiGLU over the pending norm: hidden = silu(s gate . u) * (s up . u), s = 1 / rms(x).
      const cu::QuantizedRows pending = next.pending_norm(n, d, 1e-6f);
      const cu::QuantizedRowsBuffer hidden = cu::quantized_rows_in(hidden_q8, n, ffn);
      stream.fill(hidden_q8.data(), 0xFF, hidden_q8.size());
      cu::gemv_swiglu(gate_up, pending, hidden, stream);
      stream.synchronize("gemv_swiglu");
      const auto uq = int8_activations(scaled, n, d);
      std::vector<double> gu_ref(static_cast<size_t>(n) * 2 * ffn), h_ref(static_cast<size_t>(n) * ffn);
      for (int t = 0; t < n; ++t) {
        double total = 0.0;
        for (int i = 0; i < d; ++i) total += static_cast<double>(x[t * d + i]) * x[t * d + i];
        const double inv_rms = 1.0 / std::sqrt(total / d + 1e-6);
        for (int r = 0; r < 2 * ffn; ++r) {
          double sum = 0.0;
          for (int c = 0; c < d; ++c) sum += wgu[static_cast<size_t>(r) * d + c] * uq[static_cast<size_t>(t) * d + c];
          gu_ref[static_cast<size_t>(t) * 2 * ffn + r] = sum * inv_rms;
        }
        for (int i = 0; i < ffn; ++i) {
          const double g = gu_ref[t * 2 * ffn + i], u = gu_ref[t * 2 * ffn + ffn + i];
          h_ref[t * ffn + i] = g / (1.0 + std::exp(-g)) * u;
        }
      }
      // The pending norm applied by the plain GEMV: its gate/up rows against float64.
      cu::DeviceBuffer dgu(gu_ref.size() * sizeof(float));
      stream.fill(dgu.data(), 0xFF, dgu.size());
      cu::gemv(gate_up, nullptr, d, n, dgu.as<float>(), 2 * ffn, false, scratch, stream, &pending);
      stream.synchronize("gemv, pending norm");
      EXPECT_LT(relative_error(to_host<float>(dgu, gu_ref.size()), gu_ref), 1e-5) << "pending norm";
      // The fused SwiGLU's copy: what silu_mul makes of those rows, byte for byte, and
      // within the int8 rounding of float64.
      cu::DeviceBuffer silu_out(static_cast<size_t>(n) * ffn * sizeof(float)), separate_hidden;
      const cu::QuantizedRowsBuffer separate_copy = cu::quantized_rows_in(separate_hidden, n, ffn);
      cu::silu_mul(dgu.as<float>(), silu_out.as<float>(), n, ffn, stream, &separate_copy);
      stream.synchronize("silu_mul");
      const size_t hidden_bytes = cu::quantized_activation_bytes(n, ffn);
      EXPECT_EQ(to_host<uint8_t>(hidden_q8, hidden_bytes), to_host<uint8_t>(separate_hidden, hidden_bytes)) << "SwiGLU";
      const auto codes = to_host<int8_t>(hidden_q8, static_cast<size_t>(n) * ffn);
      const auto scales = to_host<float>(hidden_q8, hidden_bytes / 4);
      const size_t scale0 = (static_cast<size_t>(n) * ffn + 15) / 16 * 16 / 4;
      std::vector<float> h(codes.size());
      for (size_t i = 0; i < h.size(); ++i) h[i] = codes[i] * scales[scale0 + i / 16];
      EXPECT_LT(relative_error(h, h_ref), 1.5e-2) << "SwiGLU against float64";
    }
  }
}

// Verify rows are computed as batch-1 decode computes a token (llama_model_cuda.cpp,
// launch_exact_rows), which rests on this: a row's results from the fused GEMVs with 2-8
// activation rows, and from the plain GEMV in every variant and pass size (a pass of 11
// rows: passes of 8 and 3), are the bits that row gets alone. Every integer type, every
// batch-1 launch shape. Exact equality.
TEST_F(CudaMatmulTest, GemvRowsAreTheRowsAlone) {
  const int k = 768, d = 512, ffn = 256;
  cu::Stream stream;
  cu::MatmulScratch scratch;
  // One row of a quantized copy laid out for n rows (quantized_rows_in / normed_rows_in):
  // its codes, scales, sums and (normed) sums of squares, as bytes.
  const auto row_of = [&](const cu::DeviceBuffer& buffer, int n, int cols, int row, bool normed) {
    const size_t code_bytes = (static_cast<size_t>(n) * cols + 15) / 16 * 16, groups = cols / 16;
    const auto all = to_host<uint8_t>(buffer, code_bytes + (normed ? 3 : 2) * n * groups * sizeof(float));
    std::vector<uint8_t> out(all.begin() + static_cast<ptrdiff_t>(row) * cols, all.begin() + static_cast<ptrdiff_t>(row + 1) * cols);
    for (int part = 0; part < (normed ? 3 : 2); ++part) {
      const auto at = all.begin() + static_cast<ptrdiff_t>(code_bytes + ((part * n + row) * groups) * sizeof(float));
      out.insert(out.end(), at, at + static_cast<ptrdiff_t>(groups * sizeof(float)));
    }
    return out;
  };
  for (const GgmlType type : kWeightTypes) {
    if (is_float_type(type)) continue;
    const auto o_bytes = random_matrix(type, d, k, rng_), gu_bytes = random_matrix(type, 2 * ffn, d, rng_);
    const auto o_dev = packed_on_device(type, o_bytes, d, k), gu_dev = packed_on_device(type, gu_bytes, 2 * ffn, d);
    cu::DeviceWeight o{type, o_dev.as<uint8_t>(), d, k}, gate_up{type, gu_dev.as<uint8_t>(), 2 * ffn, d};
    for (const int n : {2, 4, 5, 8}) {
      const auto a = random_floats(rng_, static_cast<size_t>(n) * k), x0 = random_floats(rng_, static_cast<size_t>(n) * d);
      const auto norm = random_floats(rng_, d);
      const auto da = to_device(a), dnorm = to_device(norm);
      for (const int variant : {0, 1, 2, 3}) {
        SCOPED_TRACE(std::string(type_name(type)) + " rows " + std::to_string(n) + " shape " + std::to_string(variant));
        o.gemv_choice[0] = gate_up.gemv_choice[0] = static_cast<int8_t>(variant);
        // All n rows at once: residual, then SwiGLU over the pending norm it leaves.
        cu::DeviceBuffer a_q8, next_q8, hidden_q8;
        const cu::QuantizedRows in = cu::quantize_rows(da.as<float>(), k, n, k, a_q8, stream);
        auto dx = to_device(x0);
        const cu::QuantizedRowsBuffer next = cu::normed_rows_in(next_q8, n, d);
        cu::gemv_residual_norm(o, in, dx.as<float>(), dnorm.as<float>(), &next, stream);
        const cu::QuantizedRowsBuffer hidden = cu::quantized_rows_in(hidden_q8, n, ffn);
        cu::gemv_swiglu(gate_up, next.pending_norm(n, d, 1e-6f), hidden, stream);
        stream.synchronize("fused GEMVs over n rows");
        const auto x = to_host<float>(dx, static_cast<size_t>(n) * d);
        for (int row = 0; row < n; ++row) {
          cu::DeviceBuffer a1_q8, next1_q8, hidden1_q8;
          const auto da1 = to_device(std::vector<float>(a.begin() + row * k, a.begin() + (row + 1) * k));
          const cu::QuantizedRows in1 = cu::quantize_rows(da1.as<float>(), k, 1, k, a1_q8, stream);
          auto dx1 = to_device(std::vector<float>(x0.begin() + row * d, x0.begin() + (row + 1) * d));
          const cu::QuantizedRowsBuffer next1 = cu::normed_rows_in(next1_q8, 1, d);
          cu::gemv_residual_norm(o, in1, dx1.as<float>(), dnorm.as<float>(), &next1, stream);
          const cu::QuantizedRowsBuffer hidden1 = cu::quantized_rows_in(hidden1_q8, 1, ffn);
          cu::gemv_swiglu(gate_up, next1.pending_norm(1, d, 1e-6f), hidden1, stream);
          stream.synchronize("fused GEMVs over one row");
          EXPECT_EQ(to_host<float>(dx1, d), std::vector<float>(x.begin() + row * d, x.begin() + (row + 1) * d))
              << "residual row " << row;
          EXPECT_EQ(row_of(next1_q8, 1, d, 0, true), row_of(next_q8, n, d, row, true)) << "next input, row " << row;
          EXPECT_EQ(row_of(hidden1_q8, 1, ffn, 0, false), row_of(hidden_q8, n, ffn, row, false)) << "SwiGLU row " << row;
        }
      }
    }
    // The plain GEMV: 11 rows in each pass size's variants (passes of 8 and 3, or of 2s and
    // 4s where the variant says so) against every batch-1 variant on each row alone.
    const int n = 11;
    const auto a = random_floats(rng_, static_cast<size_t>(n) * k);
    const auto da = to_device(a);
    std::vector<std::vector<float>> alone(n);
    for (int variant = 0; variant < static_cast<int>(cu::gemv_variants().size()); ++variant) {
      const int tokens = cu::gemv_variants()[variant].tokens;
      SCOPED_TRACE(std::string(type_name(type)) + " plain GEMV variant " + std::to_string(variant));
      cu::DeviceBuffer y(static_cast<size_t>(n) * d * sizeof(float));
      for (int first = 0; first < n; first += tokens) {  // (gemv runs passes of up to 8: one variant's size a call)
        const int count = std::min(tokens, n - first);
        const int bucket_variant = cu::gemv_bucket(count) == cu::gemv_bucket(tokens) ? variant : -1;
        cu::gemv(o, da.as<float>() + static_cast<size_t>(first) * k, k, count, y.as<float>() + static_cast<size_t>(first) * d,
                 d, false, scratch, stream, nullptr, bucket_variant);
      }
      stream.synchronize("plain GEMV");
      const auto rows = to_host<float>(y, static_cast<size_t>(n) * d);
      for (int row = 0; row < n; ++row) {
        const std::vector<float> got(rows.begin() + row * d, rows.begin() + (row + 1) * d);
        if (alone[row].empty()) {
          cu::DeviceBuffer y1(d * sizeof(float));
          cu::gemv(o, da.as<float>() + static_cast<size_t>(row) * k, k, 1, y1.as<float>(), d, false, scratch, stream,
                   nullptr, 0);
          stream.synchronize("plain GEMV, one row");
          alone[row] = to_host<float>(y1, d);
        }
        EXPECT_EQ(got, alone[row]) << "row " << row;
      }
    }
  }
}

// --- Best tokens ----------------------------------------------------------------------------

// The GPU's best tokens of logits rows, exactly model::select_best_tokens's (ids and logits,
// in order): at the Qwen vocabulary, 1, 7 and 64 rows, rows of many ties (few distinct
// values, an all-equal row: the lowest ids win), -inf and NaN entries, and vocabularies
// shorter than a segment and than kBestTokens (padded with id -1). Outputs poisoned first.
class CudaBestTokensTest : public GpuTest {};

TEST_F(CudaBestTokensTest, AreTheHostSelection) {
  std::mt19937_64& rng = rng_;
  cu::Stream stream;
  for (const int vocab : {151936, 49152, 9000, 100, 40}) {
    for (const int rows : {1, 7, 64}) {
      std::vector<float> logits(static_cast<size_t>(rows) * vocab);
      for (int r = 0; r < rows; ++r) {
        float* row = logits.data() + static_cast<size_t>(r) * vocab;
        std::normal_distribution<float> normal(0.0f, 3.0f);
        for (int i = 0; i < vocab; ++i) {
          switch (r % 4) {
            case 0: row[i] = normal(rng); break;
            case 1: row[i] = std::round(normal(rng)) * 0.25f; break;  // few distinct values
            case 2: row[i] = 1.5f; break;                              // every token ties
            default: row[i] = normal(rng) - (i % 3 == 0 ? 1e4f : 0.0f); break;
          }
        }
        row[rng() % vocab] = -std::numeric_limits<float>::infinity();
        row[rng() % vocab] = std::numeric_limits<float>::quiet_NaN();
        if (r % 4 == 1) row[rng() % vocab] = -0.0f;
      }
      const auto device_logits = to_device(logits);
      cu::DeviceBuffer scratch(cu::best_tokens_scratch_bytes(rows, vocab));
      cu::DeviceBuffer best(sizeof(cu::BestToken) * rows * cu::kBestTokenCount);
      stream.fill(best.data(), 0xff, best.size());  // poisoned: id -1, logit NaN
      cu::best_tokens(device_logits.as<float>(), rows, vocab, scratch.as<int32_t>(), best.as<cu::BestToken>(), stream);
      stream.synchronize("best_tokens");
      const auto got = to_host<cu::BestToken>(best, static_cast<size_t>(rows) * cu::kBestTokenCount);
      for (int r = 0; r < rows; ++r) {
        std::vector<model::TokenLogit> want(model::kBestTokens);
        model::select_best_tokens(std::span(logits).subspan(static_cast<size_t>(r) * vocab, vocab), want);
        for (int k = 0; k < cu::kBestTokenCount; ++k) {
          const auto& g = got[static_cast<size_t>(r) * cu::kBestTokenCount + k];
          ASSERT_EQ(g.id, want[k].id) << "vocab " << vocab << ", row " << r << " of " << rows << ", rank " << k;
          ASSERT_EQ(std::bit_cast<uint32_t>(g.logit), std::bit_cast<uint32_t>(want[k].logit))
              << "vocab " << vocab << ", row " << r << ", rank " << k;
        }
      }
    }
  }
}

// --- QKV epilogue and attention -------------------------------------------------------------

struct AttentionCase {
  cu::KvElement element;
  int head_dim;
  bool neox;
  double tolerance;  // of the attention output against float64
  int n_heads = 8, n_kv_heads = 2;
};

void rope_reference(std::vector<double>& v, int head_dim, int pos, bool neox, double base) {
  std::vector<double> out(v);
  for (int i = 0; i < head_dim / 2; ++i) {
    const double angle = pos * std::pow(base, -2.0 * i / head_dim);
    const int a = neox ? i : 2 * i, b = neox ? i + head_dim / 2 : 2 * i + 1;
    out[a] = v[a] * std::cos(angle) - v[b] * std::sin(angle);
    out[b] = v[a] * std::sin(angle) + v[b] * std::cos(angle);
  }
  v = out;
}

class CudaAttentionTest : public GpuTest, public ::testing::WithParamInterface<AttentionCase> {};

// Three sequences (1, 300 and 3000 positions) on shuffled blocks of one pool, group 4
// (8 query heads over 2 kv heads) and the other group shapes of the shipped families (1, 3,
// 7, 12: padded head slots, two head blocks): every position's q/k/v goes through qkv_post
// (RoPE, KV append), then attention runs as one causal prefill over all positions and as a
// decode of each sequence's last token (split along the context, merged).
TEST_P(CudaAttentionTest, PrefillAndDecodeAgainstFloat64) {
  const auto param = GetParam();
  const int hd = param.head_dim, n_heads = param.n_heads, n_kv = param.n_kv_heads, layers = 2, layer = 1;
  const int qkv_w = (n_heads + 2 * n_kv) * hd;
  const std::vector<int> lengths{1, 300, 3000};
  const int blocks = 256;
  std::vector<int32_t> shuffled(blocks);
  std::iota(shuffled.begin(), shuffled.end(), 0);
  std::shuffle(shuffled.begin(), shuffled.end(), rng_);
  std::vector<int32_t> tables, positions, offsets;
  std::vector<int> first_token;
  std::vector<cu::SliceSpan> slices;
  int used = 0;
  for (const int length : lengths) {
    const int n_blocks = (length + kernels::kKvBlockTokens - 1) / kernels::kKvBlockTokens;
    first_token.push_back(static_cast<int>(positions.size()));
    slices.push_back({first_token.back(), length, 0});
    for (int p = 0; p < length; ++p) positions.push_back(p), offsets.push_back(static_cast<int32_t>(tables.size()));
    tables.insert(tables.end(), shuffled.begin() + used, shuffled.begin() + used + n_blocks);
    used += n_blocks;
  }
  const int n = static_cast<int>(positions.size());
  auto qkv = random_floats(rng_, static_cast<size_t>(n) * qkv_w);

  cu::Stream stream;
  cu::KvPool pool;
  pool.element = param.element;
  pool.blocks = blocks, pool.n_layers = layers, pool.n_kv_heads = n_kv, pool.head_dim = hd;
  cu::DeviceBuffer data(pool.bytes()), scales(std::max<size_t>(pool.scale_bytes(), 4));
  pool.data = data.as<uint8_t>();
  pool.scales = pool.element == cu::KvElement::I8 ? scales.as<float>() : nullptr;
  auto d_qkv = to_device(qkv);
  const DeviceBatch prompt(positions, offsets, tables, slices, n_heads, n_kv, hd);
  const cu::BatchLayout& all = prompt.layout;
  cu::QkvPostArgs post;
  post.qkv = d_qkv.as<float>();
  post.ld = qkv_w;
  post.n_heads = n_heads, post.n_kv_heads = n_kv, post.head_dim = hd;
  post.neox_rope = param.neox;
  std::vector<double> inv_freq(hd / 2);
  for (int i = 0; i < hd / 2; ++i) inv_freq[i] = std::pow(10000.0, -2.0 * i / hd);
  cu::DeviceBuffer d_inv_freq(inv_freq.size() * sizeof(double));
  stream.copy_to_device(d_inv_freq.data(), inv_freq.data(), inv_freq.size() * sizeof(double));
  post.rope_inv_freq = d_inv_freq.as<double>();
  post.layer = layer;
  cu::qkv_post(post, all, pool, stream);

  // Float64 reference: rotated q and k per position, then causal softmax attention.
  auto head_of = [&](int t, int h) {
    std::vector<double> v(hd);
    for (int i = 0; i < hd; ++i) v[i] = qkv[static_cast<size_t>(t) * qkv_w + h * hd + i];
    return v;
  };
  std::vector<std::vector<double>> q(static_cast<size_t>(n) * n_heads), k(static_cast<size_t>(n) * n_kv),
      v(static_cast<size_t>(n) * n_kv);
  for (int t = 0; t < n; ++t) {
    for (int h = 0; h < n_heads; ++h) {
      q[t * n_heads + h] = head_of(t, h);
      rope_reference(q[t * n_heads + h], hd, positions[t], param.neox, 10000.0);
    }
    for (int h = 0; h < n_kv; ++h) {
      k[t * n_kv + h] = head_of(t, n_heads + h);
      rope_reference(k[t * n_kv + h], hd, positions[t], param.neox, 10000.0);
      v[t * n_kv + h] = head_of(t, n_heads + n_kv + h);
    }
  }
  auto reference = [&](int t) {  // token t attends to its sequence's tokens up to itself
    const int start = t - positions[t];
    std::vector<double> out(static_cast<size_t>(n_heads) * hd, 0.0);
    for (int h = 0; h < n_heads; ++h) {
      const int g = h / (n_heads / n_kv);
      std::vector<double> scores;
      double best = -INFINITY;
      for (int u = start; u <= t; ++u) {
        double s = 0;
        for (int i = 0; i < hd; ++i) s += q[t * n_heads + h][i] * k[u * n_kv + g][i];
        scores.push_back(s / std::sqrt(static_cast<double>(hd)));
        best = std::max(best, scores.back());
      }
      double total = 0;
      for (auto& s : scores) total += (s = std::exp(s - best));
      for (int u = start; u <= t; ++u)
        for (int i = 0; i < hd; ++i) out[h * hd + i] += scores[u - start] / total * v[u * n_kv + g][i];
    }
    return out;
  };

  cu::AttentionScratch scratch;
  // Prefill: every token at once (the 1-token sequence as a decode, the others in tiles).
  cu::DeviceBuffer out(static_cast<size_t>(n) * n_heads * hd * sizeof(float));
  stream.fill(out.data(), 0xFF, out.size());
  cu::DeviceBuffer fused_q8;  // the int8 copy the split merge writes beside a decode pass's rows
  const cu::QuantizedRowsBuffer fused = cu::quantized_rows_in(fused_q8, n, n_heads * hd);
  // (a pass with prompt tiles leaves the copy to the matmul)
  EXPECT_FALSE(cu::attention(d_qkv.as<float>(), qkv_w, out.as<float>(), n_heads, all, pool, layer, scratch, stream, &fused));
  stream.synchronize("attention (prefill)");
  const auto prefill = to_host<float>(out, static_cast<size_t>(n) * n_heads * hd);
  std::vector<float> checked;
  std::vector<double> expected;
  for (int t = 0; t < n; t += 97) {  // a sample of tokens of every sequence
    const auto ref = reference(t);
    expected.insert(expected.end(), ref.begin(), ref.end());
    checked.insert(checked.end(), prefill.begin() + static_cast<size_t>(t) * n_heads * hd,
                   prefill.begin() + static_cast<size_t>(t + 1) * n_heads * hd);
  }
  EXPECT_LT(relative_error(checked, expected), param.tolerance) << "prefill";

  // Decode: each sequence's last token alone (its q rows gathered into a batch of three).
  std::vector<int32_t> d_pos, d_off;
  std::vector<cu::SliceSpan> singles;
  checked.clear(), expected.clear();
  for (size_t s = 0; s < lengths.size(); ++s) {
    const int t = first_token[s] + lengths[s] - 1;
    singles.push_back({static_cast<int>(s), 1, positions[t]});
    d_pos.push_back(positions[t]);
    d_off.push_back(offsets[t]);
    const auto ref = reference(t);
    expected.insert(expected.end(), ref.begin(), ref.end());
  }
  // Each sequence's last token's row of `rows` (n rows of qkv_w), in sequence order.
  const auto last_token_rows = [&](const std::vector<float>& rows) {
    std::vector<float> gathered;
    for (size_t s = 0; s < lengths.size(); ++s) {
      const int t = first_token[s] + lengths[s] - 1;
      gathered.insert(gathered.end(), rows.begin() + static_cast<size_t>(t) * qkv_w,
                      rows.begin() + static_cast<size_t>(t + 1) * qkv_w);
    }
    return gathered;
  };
  // The rotated q rows of those tokens, as qkv_post left them on the device.
  const auto dq = to_device(last_token_rows(to_host<float>(d_qkv, static_cast<size_t>(n) * qkv_w)));
  const DeviceBatch decode_batch(d_pos, d_off, tables, singles, n_heads, n_kv, hd);
  const cu::BatchLayout& decode = decode_batch.layout;
  cu::DeviceBuffer decode_out(3 * n_heads * hd * sizeof(float));
  stream.fill(decode_out.data(), 0xFF, decode_out.size());
  const cu::QuantizedRowsBuffer decode_fused = cu::quantized_rows_in(fused_q8, 3, n_heads * hd);
  stream.fill(fused_q8.data(), 0xFF, fused_q8.size());  // poisoned: every byte compared below is written
  EXPECT_TRUE(cu::attention(dq.as<float>(), qkv_w, decode_out.as<float>(), n_heads, decode, pool, layer, scratch, stream,
                            &decode_fused))
      << "the 3000-position context is merged from splits";
  stream.synchronize("attention (decode)");
  EXPECT_LT(relative_error(to_host<float>(decode_out, 3 * n_heads * hd), expected), param.tolerance) << "decode";
  // The merge's int8 copy, byte for byte what quantize_rows makes of the rows it wrote.
  cu::DeviceBuffer separate_q8;
  cu::quantize_rows(decode_out.as<float>(), n_heads * hd, 3, n_heads * hd, separate_q8, stream);
  stream.synchronize("quantize_rows");
  const size_t q8_bytes = cu::quantized_activation_bytes(3, n_heads * hd);
  EXPECT_EQ(to_host<uint8_t>(fused_q8, q8_bytes), to_host<uint8_t>(separate_q8, q8_bytes)) << "the merge's int8 copy";

  // The same decode with qkv_post's work inside the attention kernel (a pass of decode tokens
  // only): from the raw QKV rows, with the three tokens' keys and values poisoned in the
  // pool, it must give the same bits as qkv_post then attention, and write those keys and
  // values back exactly as qkv_post wrote them.
  if (!cu::attention_takes_qkv_post(decode, pool, n_heads)) {
    EXPECT_TRUE(pool.element == cu::KvElement::F32 || hd == 256) << "the tensor-core decode takes the epilogue";
    return;
  }
  const auto raw_rows = last_token_rows(qkv);
  const auto d_raw = to_device(raw_rows);
  const size_t element = pool.element_bytes();
  const auto kv_bytes = to_host<uint8_t>(data, pool.bytes());
  const size_t scale_count = pool.scale_bytes() / sizeof(float);
  const auto kv_scales = to_host<float>(scales, scale_count);
  auto poisoned = kv_bytes;
  auto poisoned_scales = kv_scales;
  for (size_t s = 0; s < lengths.size(); ++s) {
    const int t = first_token[s] + lengths[s] - 1, pos = positions[t];
    const size_t block = static_cast<size_t>(tables[offsets[t] + pos / kernels::kKvBlockTokens]);
    for (int which = 0; which < 2; ++which)
      for (int h = 0; h < n_kv; ++h) {
        const size_t slot = (((layer * pool.blocks + block) * 2 + which) * n_kv + h) * kernels::kKvBlockTokens +
                            pos % kernels::kKvBlockTokens;
        std::fill_n(poisoned.begin() + static_cast<std::ptrdiff_t>(slot * hd * element), hd * element, uint8_t{0x5A});
        if (scale_count) poisoned_scales[slot] = -1.0f;
      }
  }
  stream.copy_to_device(data.data(), poisoned.data(), poisoned.size());
  if (scale_count) stream.copy_to_device(scales.data(), poisoned_scales.data(), scale_count * sizeof(float));
  cu::QkvPostArgs in_attention = post;
  in_attention.qkv = d_raw.as<float>();
  cu::DeviceBuffer folded_out(3 * n_heads * hd * sizeof(float));
  stream.fill(folded_out.data(), 0xFF, folded_out.size());
  EXPECT_TRUE(cu::attention(d_raw.as<float>(), qkv_w, folded_out.as<float>(), n_heads, decode, pool, layer, scratch,
                            stream, &decode_fused, &in_attention));
  stream.synchronize("attention with the QKV epilogue");
  EXPECT_EQ(to_host<float>(folded_out, 3 * n_heads * hd), to_host<float>(decode_out, 3 * n_heads * hd))
      << "the same bits as qkv_post then attention";
  EXPECT_EQ(to_host<uint8_t>(data, pool.bytes()), kv_bytes) << "the keys and values qkv_post wrote";
  if (scale_count) {
    EXPECT_EQ(to_host<float>(scales, scale_count), kv_scales) << "their int8 scales";
  }
  EXPECT_EQ(to_host<float>(d_raw, raw_rows.size()), raw_rows) << "the raw QKV rows stay as they were";
}

INSTANTIATE_TEST_SUITE_P(KvTypes, CudaAttentionTest,
                         ::testing::Values(AttentionCase{cu::KvElement::F32, 128, true, 1e-5},
                                           AttentionCase{cu::KvElement::F32, 64, false, 1e-5},
                                           AttentionCase{cu::KvElement::F16, 128, true, 2e-3},
                                           AttentionCase{cu::KvElement::I8, 128, true, 2e-2},
                                           AttentionCase{cu::KvElement::I8, 256, false, 2e-2},
                                           AttentionCase{cu::KvElement::I8, 128, true, 2e-2, 14, 2},
                                           AttentionCase{cu::KvElement::F32, 64, true, 1e-5, 12, 1},
                                           AttentionCase{cu::KvElement::F16, 128, false, 2e-3, 3, 3},
                                           AttentionCase{cu::KvElement::F32, 128, true, 1e-5, 9, 3},
                                           // the tensor-core decode at head size 64 and with
                                           // groups over 8 heads (both row halves of the tile)
                                           AttentionCase{cu::KvElement::I8, 64, false, 2e-2, 12, 1},
                                           AttentionCase{cu::KvElement::F16, 64, true, 2e-3, 9, 3},
                                           AttentionCase{cu::KvElement::I8, 128, true, 2e-2, 16, 1}));

class CudaExpertsTest : public GpuTest {};

// The routing, exactly as the CPU path's (llama_model.cpp mixture_of_experts): each row's
// exp(logit - max) with NaN as -infinity, the `used` largest by std::partial_sort with equal
// ones by the lower expert, renormalised. Rows with ties, NaNs, an infinity, all NaN; expert
// counts that are and are not multiples of the warp. Ids exact, weights within 1e-6 (expf
// against std::exp).
TEST_F(CudaExpertsTest, RoutingPicksTheCpuPathsExperts) {
  cu::Stream stream;
  for (const auto& [experts, used] : {std::pair{128, 8}, std::pair{160, 6}, std::pair{8, 2}, std::pair{1024, 32}}) {
    const int n = 37;
    auto logits = random_floats(rng_, static_cast<size_t>(n) * experts, 2.0f);
    std::uniform_int_distribution<int> pick(0, experts - 1);
    for (int t = 0; t < n; ++t) {
      float* row = logits.data() + static_cast<size_t>(t) * experts;
      if (t % 3 == 0) row[pick(rng_)] = row[pick(rng_)];          // a tie
      if (t % 4 == 1) row[pick(rng_)] = NAN;                       // routes nowhere
      if (t % 5 == 2) std::fill(row, row + experts, row[0]);       // all equal: the lowest ids
      if (t == 7) std::fill(row, row + experts, NAN);              // nothing to choose by
      if (t == 8) row[pick(rng_)] = INFINITY;                      // one certain expert
    }
    std::vector<int32_t> ref_ids(static_cast<size_t>(n) * used);
    std::vector<double> ref_weights(ref_ids.size());
    for (int t = 0; t < n; ++t) {
      std::vector<float> p(logits.begin() + static_cast<size_t>(t) * experts, logits.begin() + static_cast<size_t>(t + 1) * experts);
      for (auto& v : p)
        if (std::isnan(v)) v = -INFINITY;
      const float top = *std::max_element(p.begin(), p.end());
      for (auto& v : p) v = std::isinf(top) ? (top < 0 ? 1.0f : (v == top ? 1.0f : 0.0f)) : std::exp(v - top);
      std::vector<int> order(experts);
      std::iota(order.begin(), order.end(), 0);
      std::partial_sort(order.begin(), order.begin() + used, order.end(),
                        [&](int a, int b) { return p[a] > p[b] || (p[a] == p[b] && a < b); });
      float sum = 0.0f;
      for (int k = 0; k < used; ++k) sum += p[order[k]];
      for (int k = 0; k < used; ++k) {
        ref_ids[static_cast<size_t>(t) * used + k] = order[k];
        ref_weights[static_cast<size_t>(t) * used + k] = p[order[k]] / sum;
      }
    }
    const auto d_logits = to_device(logits);
    cu::DeviceBuffer ids(ref_ids.size() * sizeof(int32_t)), weights(ref_ids.size() * sizeof(float));
    cu::route_experts(d_logits.as<float>(), n, experts, used, ids.as<int32_t>(), weights.as<float>(), stream);
    stream.synchronize("route_experts");
    EXPECT_EQ(to_host<int32_t>(ids, ref_ids.size()), ref_ids) << experts << " experts, " << used << " used";
    EXPECT_LT(relative_error(to_host<float>(weights, ref_ids.size()), ref_weights), 1e-6) << experts << " experts";
  }
  EXPECT_THROW(cu::route_experts(nullptr, 1, 1025, 8, nullptr, nullptr, stream), Error);
  EXPECT_THROW(cu::route_experts(nullptr, 1, 8, 9, nullptr, nullptr, stream), Error);
}

// The router and the routing in one launch: the logits against float64 (1e-6) for each float
// type a router may have, the ids and weights bit for bit what route_experts makes of those
// logits; run twice (the per-token counters the blocks meet at are left zero for the next
// launch, as a replayed graph needs).
TEST_F(CudaExpertsTest, RouteTokensAgainstFloat64AndTheRouting) {
  cu::Stream stream;
  const int n = 5;
  // (rows of 2080 and 4128: a lane's 16-byte loads end part way through a round of them, and
  // F32 and F16 rows take a second round)
  for (const int cols : {512, 2080, 4128})
  for (const auto& [experts, used] : {std::pair{70, 6}, std::pair{128, 8}, std::pair{1024, 32}})
    for (const GgmlType type : {GgmlType::F32, GgmlType::F16, GgmlType::BF16}) {
      SCOPED_TRACE(std::string(type_name(type)) + ", " + std::to_string(experts) + " experts of " + std::to_string(cols));
      const auto bytes = random_matrix(type, experts, cols, rng_);
      const auto w = dequantized(type, bytes, experts, cols);
      const auto device_bytes = packed_on_device(type, bytes, experts, cols);
      const auto x = random_floats(rng_, static_cast<size_t>(n) * cols);
      std::vector<double> ref(static_cast<size_t>(n) * experts);
      for (int t = 0; t < n; ++t)
        for (int e = 0; e < experts; ++e)
          for (int c = 0; c < cols; ++c)
            ref[static_cast<size_t>(t) * experts + e] += w[static_cast<size_t>(e) * cols + c] * x[static_cast<size_t>(t) * cols + c];
      const auto dx = to_device(x);
      cu::DeviceBuffer logits(ref.size() * sizeof(float)), arrivals(n * sizeof(unsigned));
      stream.fill(arrivals.data(), 0, arrivals.size());
      const cu::RoutingScratch scratch{logits.as<float>(), arrivals.as<unsigned>(), n};
      const size_t pairs = static_cast<size_t>(n) * used;
      cu::DeviceBuffer ids(pairs * sizeof(int32_t)), weights(pairs * sizeof(float));
      cu::DeviceBuffer ref_ids(pairs * sizeof(int32_t)), ref_weights(pairs * sizeof(float));
      for (int run = 0; run < 2; ++run) {  // (each run's logits start as NaN: a stale one would show)
        stream.fill(ids.data(), 0xFF, ids.size());
        stream.fill(logits.data(), 0xFF, logits.size());
        cu::route_tokens({type, device_bytes.as<uint8_t>(), experts, cols}, dx.as<float>(), cols, n, used, scratch,
                         ids.as<int32_t>(), weights.as<float>(), stream);
        cu::route_experts(logits.as<float>(), n, experts, used, ref_ids.as<int32_t>(), ref_weights.as<float>(), stream);
        stream.synchronize("route_tokens");
        EXPECT_LT(relative_error(to_host<float>(logits, ref.size()), ref), 1e-6) << "run " << run;
        EXPECT_EQ(to_host<int32_t>(ids, pairs), to_host<int32_t>(ref_ids, pairs)) << "run " << run;
        EXPECT_EQ(to_host<float>(weights, pairs), to_host<float>(ref_weights, pairs)) << "run " << run;
        EXPECT_EQ(to_host<unsigned>(arrivals, n), std::vector<unsigned>(n, 0u)) << "run " << run;
      }
    }
  const cu::RoutingScratch none{nullptr, nullptr, 1};
  EXPECT_THROW(cu::route_tokens({GgmlType::F32, nullptr, 8, 64}, nullptr, 64, 2, 2, none, nullptr, nullptr, stream), Error)
      << "more tokens than the scratch holds";
  EXPECT_THROW(cu::route_tokens({GgmlType::Q4_K, nullptr, 8, 256}, nullptr, 256, 1, 2, none, nullptr, nullptr, stream),
               Error);
  EXPECT_THROW(cu::route_tokens({GgmlType::F32, nullptr, 8, 48}, nullptr, 48, 1, 2, none, nullptr, nullptr, stream), Error)
      << "rows of 48";
}

// Each (token, expert) pair's matmul against float64 with the expert the pair names: the
// pairs of a token reading its row (x_divisor = used) and pairs reading rows of their own
// (x_divisor = 1). Integer types within 1e-5 of the int8 activations they read; float types
// within 1e-5. Rows not a multiple of a thread block's; rows of 512, 1536 and 4096 columns
// (each launch shape: 8 rows a warp for short rows, 4, then 2).
TEST_F(CudaExpertsTest, ExpertMatmulAgainstFloat64) {
  cu::Stream stream;
  cu::MatmulScratch scratch;
  const int experts = 5, rows = 101, used = 2, n = 3;  // (odd rows: a warp's last rows clamped)
  const std::vector<int32_t> ids{4, 0, 2, 4, 1, 3};  // token 0: experts 4, 0; token 1: 2, 4; token 2: 1, 3
  const int pairs = static_cast<int>(ids.size());
  const auto d_ids = to_device(ids);
  for (const int cols : {512, 1536, 4096}) {
    for (const GgmlType type : kWeightTypes) {
      SCOPED_TRACE(std::to_string(cols) + " columns");
      const auto bytes = random_matrix(type, experts * rows, cols, rng_);
      const auto w = dequantized(type, bytes, experts * rows, cols);
      const auto device_bytes = packed_on_device(type, bytes, experts * rows, cols);
      const cu::ExpertWeights stack{type, device_bytes.as<uint8_t>(), experts, rows, cols};
      for (const int divisor : {used, 1}) {
        const int x_rows = divisor == 1 ? pairs : n;
        const auto x = random_floats(rng_, static_cast<size_t>(x_rows) * cols);
        const auto xs = is_float_type(type) ? std::vector<double>(x.begin(), x.end()) : int8_activations(x, x_rows, cols);
        std::vector<double> ref(static_cast<size_t>(pairs) * rows);
        for (int p = 0; p < pairs; ++p)
          for (int r = 0; r < rows; ++r) {
            double sum = 0.0;
            for (int c = 0; c < cols; ++c)
              sum += w[(static_cast<size_t>(ids[p]) * rows + r) * cols + c] * xs[static_cast<size_t>(p / divisor) * cols + c];
            ref[static_cast<size_t>(p) * rows + r] = sum;
          }
        const auto dx = to_device(x);
        auto dy = to_device(std::vector<float>(ref.size(), NAN));
        std::optional<cu::QuantizedRows> xq;
        if (!is_float_type(type)) xq = cu::quantize_rows(dx.as<float>(), cols, x_rows, cols, scratch.activations_q8, stream);
        cu::expert_matmul(stack, dx.as<float>(), cols, xq ? &*xq : nullptr, divisor, d_ids.as<int32_t>(), pairs,
                          dy.as<float>(), rows, stream);
        stream.synchronize("expert_matmul");
        EXPECT_LT(relative_error(to_host<float>(dy, ref.size()), ref), 1e-5) << type_name(type) << " divisor " << divisor;
      }
    }
  }
}

// The pairs grouped by expert on the device (every pair placed once, each expert's rows
// contiguous in expert order, tiles covering them in order), then every tile's matmul in one
// launch, against float64 with the expert each pair names: f16 operands, 3e-3 (as the small
// GEMM). Tiles of 8, 16, 32 and 64 rows; an expert with no pairs, one with more than a tile
// of any size (every token's first); the output in the right half of wider rows (as up's
// rows lie after gate's).
TEST_F(CudaExpertsTest, GroupedExpertMatmulAgainstFloat64) {
  cu::Stream stream;
  cu::MatmulScratch scratch;
  cu::reserve_small_gemm(scratch, 256, stream);
  const int experts = 6, rows = 200, cols = 512, used = 3, n = 70, pairs = n * used, ldy = 2 * rows;
  std::vector<int32_t> ids(pairs);
  std::uniform_int_distribution<int> pick(0, experts - 2);  // expert 5 takes nothing
  for (int t = 0; t < n; ++t)
    for (int k = 0; k < used; ++k) ids[t * used + k] = k == 0 ? 0 : pick(rng_);  // expert 0: every token
  const auto d_ids = to_device(ids);
  cu::DeviceBuffer groups_buffer(cu::expert_groups_bytes(pairs, experts, 8));
  scratch.activations_f16.resize(sizeof(uint16_t) * pairs * cols);
  const auto x = random_floats(rng_, static_cast<size_t>(n) * cols);
  for (const GgmlType type : {GgmlType::Q4_K, GgmlType::Q6_K, GgmlType::Q8_0, GgmlType::Q4_0, GgmlType::Q5_1}) {
    const auto bytes = random_matrix(type, experts * rows, cols, rng_);
    const auto w = dequantized(type, bytes, experts * rows, cols);
    const auto device_bytes = packed_on_device(type, bytes, experts * rows, cols);
    const cu::ExpertWeights stack{type, device_bytes.as<uint8_t>(), experts, rows, cols};
    for (const int tile_rows : {8, 16, 32, 64}) {
      SCOPED_TRACE(std::string(type_name(type)) + ", tiles of " + std::to_string(tile_rows));
      const cu::ExpertGroups groups = cu::expert_groups_in(groups_buffer.data(), pairs, experts, tile_rows);
      cu::group_pairs(d_ids.as<int32_t>(), pairs, experts, used, tile_rows, groups, stream);
      stream.synchronize("group_pairs");
      const auto start = to_host_at<int32_t>(groups.start, experts + 1);
      const auto token_of_row = to_host_at<int32_t>(groups.token_of_row, pairs);
      const auto place = to_host_at<int32_t>(groups.place, pairs);
      const int tile_count = to_host_at<int32_t>(groups.tile_count, 1)[0];
      const auto tiles = to_host_at<int32_t>(groups.tiles, 4 * static_cast<size_t>(tile_count));
      std::vector<int> seen(pairs, 0);
      for (int p = 0; p < pairs; ++p) {
        ASSERT_GE(place[p], start[ids[p]]);
        ASSERT_LT(place[p], start[ids[p] + 1]);
        ++seen[place[p]];
        EXPECT_EQ(token_of_row[place[p]], p / used);
      }
      EXPECT_EQ(std::count(seen.begin(), seen.end(), 1), pairs) << "every row holds one pair";
      int covered = 0;
      for (int i = 0; i < tile_count; ++i) {
        const int e = tiles[4 * i], first = tiles[4 * i + 1], count = tiles[4 * i + 2];
        EXPECT_EQ(first, covered) << "tile " << i;
        EXPECT_TRUE(count >= 1 && count <= tile_rows && first >= start[e] && first + count <= start[e + 1]) << "tile " << i;
        covered += count;
      }
      EXPECT_EQ(covered, pairs);
      EXPECT_GT(tile_count, experts - 1) << "expert 0's rows span more than one tile";
      EXPECT_EQ(start[experts - 1], start[experts]) << "the unchosen expert has no rows";
      // The sorted rows' inputs, as the model gathers them.
      std::vector<float> sorted(static_cast<size_t>(pairs) * cols);
      for (int r = 0; r < pairs; ++r)
        std::copy_n(x.begin() + static_cast<size_t>(token_of_row[r]) * cols, cols, sorted.begin() + static_cast<size_t>(r) * cols);
      const auto d_sorted = to_device(sorted);
      auto dy = to_device(std::vector<float>(static_cast<size_t>(pairs) * ldy, NAN));
      cu::grouped_expert_matmul(stack, d_sorted.as<float>(), cols, pairs, groups, tile_rows, dy.as<float>() + rows, ldy,
                                scratch, stream);
      stream.synchronize("grouped_expert_matmul");
      const auto out = to_host<float>(dy, static_cast<size_t>(pairs) * ldy);
      std::vector<float> by_pair(static_cast<size_t>(pairs) * rows);
      std::vector<double> ref(by_pair.size());
      for (int p = 0; p < pairs; ++p)
        for (int r = 0; r < rows; ++r) {
          by_pair[static_cast<size_t>(p) * rows + r] = out[static_cast<size_t>(place[p]) * ldy + rows + r];
          EXPECT_TRUE(std::isnan(out[static_cast<size_t>(place[p]) * ldy + r])) << "the left half untouched";
          double sum = 0.0;
          for (int c = 0; c < cols; ++c)
            sum += w[(static_cast<size_t>(ids[p]) * rows + r) * cols + c] * x[static_cast<size_t>(p / used) * cols + c];
          ref[static_cast<size_t>(p) * rows + r] = sum;
        }
      EXPECT_LT(relative_error(by_pair, ref), 3e-3);
    }
  }
}

// x += the pairs' weighted rows, in ascending expert order whatever the pairs' order (the
// CPU path's order), each step one fused multiply-add: bit for bit that sum; equal ids
// (which routing never makes) in pair order; with and without a map from pairs to rows (the
// grouped path's sorted rows).
TEST_F(CudaExpertsTest, CombineAddsThePairsWeightedRows) {
  cu::Stream stream;
  const int n = 3, used = 3, d = 300, pairs = n * used;
  const std::vector<int32_t> ids{7, 2, 5, 0, 1, 9, 4, 3, 4};  // (token 2: expert 4 twice)
  const std::vector<int32_t> rows{8, 0, 4, 2, 6, 1, 7, 3, 5};  // pair p's row of y
  const auto weights = random_floats(rng_, pairs);
  const auto y = random_floats(rng_, static_cast<size_t>(pairs) * d);
  const auto x0 = random_floats(rng_, static_cast<size_t>(n) * d);
  const auto d_ids = to_device(ids), d_rows = to_device(rows), d_weights = to_device(weights), d_y = to_device(y);
  for (const bool mapped : {false, true}) {
    std::vector<float> ref(x0);
    for (int t = 0; t < n; ++t) {
      std::vector<int> order(used);  // the token's pairs by expert id
      std::iota(order.begin(), order.end(), t * used);
      std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return ids[a] < ids[b]; });
      for (const int p : order) {
        const int row = mapped ? rows[p] : p;
        for (int j = 0; j < d; ++j) {
          float& out = ref[static_cast<size_t>(t) * d + j];
          out = std::fma(weights[p], y[static_cast<size_t>(row) * d + j], out);
        }
      }
    }
    auto dx = to_device(x0);
    cu::combine_experts(d_y.as<float>(), d, mapped ? d_rows.as<int32_t>() : nullptr, d_ids.as<int32_t>(),
                        d_weights.as<float>(), n, used, d, dx.as<float>(), stream);
    stream.synchronize("combine_experts");
    EXPECT_EQ(to_host<float>(dx, ref.size()), ref) << (mapped ? "mapped" : "in order");
  }
}

// Gated DeltaNet (delta_net.h): two sequences in one pass, one at position 0 whose slot holds
// NaN (a fresh slice must not read it) and one continuing a random state, against a float64
// reference of the conv, the delta rule and the gated RMSNorm; the readout rows (poisoned
// before) and both slots' states after, within 1e-5 relative, for Qwen3.5's tiled value heads
// (128-dim heads) and Qwen3-Next's grouped ones (64-dim keys).
class CudaDeltaNetTest : public GpuTest {};

TEST_F(CudaDeltaNetTest, ConvRuleAndGatedNormAgainstFloat64) {
  for (const cu::DeltaNetDims d : {cu::DeltaNetDims{4, 2, 4, 128, 128, true}, cu::DeltaNetDims{4, 2, 6, 64, 32, false}}) {
    SCOPED_TRACE(d.head_k);
    const int width = d.mixed_width(), taps = d.conv_kernel;
    const std::vector<int32_t> slices = {0, 5, 0, 0, 5, 3, 1, 7};  // {first row, tokens, slot, position}
    const int rows = 8;
    const size_t slot_floats = d.state_floats() + 16;  // (a slot holds more than this layer's state)
    auto mixed = random_floats(rng_, static_cast<size_t>(rows) * width, 1.0f);
    auto states = random_floats(rng_, 2 * slot_floats, 0.3f);
    std::fill(states.begin(), states.begin() + d.state_floats(), NAN);  // slot 0: a fresh slice ignores it
    auto conv = random_floats(rng_, static_cast<size_t>(d.conv_channels()) * taps, 0.5f);
    auto dt_bias = random_floats(rng_, d.v_heads, 1.0f), norm = random_floats(rng_, d.head_v, 1.0f);
    std::vector<float> a(d.v_heads);
    for (auto& v : a) v = -std::exp(std::uniform_real_distribution<float>(-3.0f, 0.0f)(rng_));
    const float eps = 1e-3f;
    // float64 reference
    std::vector<double> ref_out(static_cast<size_t>(rows) * d.value_width());
    std::vector<double> ref_states(states.begin(), states.end());
    std::vector<double> m(mixed.begin(), mixed.end());
    const auto sigmoid = [](double x) { return 1.0 / (1.0 + std::exp(-x)); };
    for (int sl = 0; sl < 2; ++sl) {
      const int first = slices[4 * sl], tokens = slices[4 * sl + 1], slot = slices[4 * sl + 2];
      const bool fresh = slices[4 * sl + 3] == 0;
      double* state = ref_states.data() + slot * slot_floats;
      if (fresh) std::fill(state, state + d.state_floats(), 0.0);
      double* history = state + d.rule_floats();
      for (int c = 0; c < d.conv_channels(); ++c)
        for (int t = 0; t < tokens; ++t) {
          std::vector<double> window(taps);
          for (int i = 0; i < taps - 1; ++i) {
            const int back = t - (taps - 1) + i;  // the input this tap sees
            window[i] = back >= 0 ? mixed[(first + back) * width + c] : history[c * (taps - 1) + (taps - 1 + back)];
          }
          window[taps - 1] = mixed[(first + t) * width + c];
          double acc = 0.0;
          for (int i = 0; i < taps; ++i) acc += conv[c * taps + i] * window[i];
          m[(first + t) * width + c] = acc * sigmoid(acc);
          if (t == tokens - 1)
            for (int i = 0; i < taps - 1; ++i) history[c * (taps - 1) + i] = window[i + 1];
        }
      for (int head = 0; head < d.v_heads; ++head) {
        const int key = d.tiled_key_heads ? head % d.k_heads : head / (d.v_heads / d.k_heads);
        double* S = state + static_cast<size_t>(head) * d.head_v * d.head_k;
        for (int t = 0; t < tokens; ++t) {
          const double* row = m.data() + (first + t) * width;
          std::vector<double> q(row + key * d.head_k, row + (key + 1) * d.head_k);
          std::vector<double> k(row + d.key_width() + key * d.head_k, row + d.key_width() + (key + 1) * d.head_k);
          for (auto* v : {&q, &k}) {
            double sum = 0.0;
            for (double x : *v) sum += x * x;
            for (double& x : *v) x /= std::sqrt(sum + eps);
          }
          const double beta = sigmoid(row[d.conv_channels() + d.value_width() + head]);
          const double x = row[d.conv_channels() + d.value_width() + d.v_heads + head] + dt_bias[head];
          const double decay = std::exp(a[head] * (x > 20.0 ? x : std::log1p(std::exp(x))));
          std::vector<double> o(d.head_v);
          double squares = 0.0;
          for (int j = 0; j < d.head_v; ++j) {
            double* s = S + static_cast<size_t>(j) * d.head_k;
            double predicted = 0.0;
            for (int i = 0; i < d.head_k; ++i) s[i] *= decay, predicted += s[i] * k[i];
            const double delta = (row[2 * d.key_width() + head * d.head_v + j] - predicted) * beta;
            double read = 0.0;
            for (int i = 0; i < d.head_k; ++i) s[i] += delta * k[i], read += s[i] * q[i];
            o[j] = read / std::sqrt(static_cast<double>(d.head_k));
            squares += o[j] * o[j];
          }
          const double rms = 1.0 / std::sqrt(squares / d.head_v + eps);
          for (int j = 0; j < d.head_v; ++j) {
            const double z = row[d.conv_channels() + head * d.head_v + j];
            ref_out[(first + t) * d.value_width() + head * d.head_v + j] = o[j] * rms * norm[j] * z * sigmoid(z);
          }
        }
      }
    }
    auto mixed_d = to_device(mixed), states_d = to_device(states), slices_d = to_device(slices);
    auto conv_d = to_device(conv), dt_d = to_device(dt_bias), a_d = to_device(a), norm_d = to_device(norm);
    auto out_d = to_device(std::vector<float>(ref_out.size(), NAN));
    cu::DeltaNetPass pass{slices_d.as<int32_t>(), 2, mixed_d.as<float>(), width, states_d.as<float>(), slot_floats,
                          out_d.as<float>(), d.value_width()};
    cu::Stream stream;
    cu::gated_delta_net(d, {conv_d.as<float>(), dt_d.as<float>(), a_d.as<float>(), norm_d.as<float>(), eps}, pass, stream);
    stream.synchronize("gated_delta_net");
    EXPECT_LT(relative_error(to_host<float>(out_d, ref_out.size()), ref_out), 1e-5) << "readout";
    const auto got_states = to_host<float>(states_d, states.size());
    for (int slot = 0; slot < 2; ++slot) {
      const size_t at = slot * slot_floats;
      EXPECT_LT(relative_error(std::vector<float>(got_states.begin() + at, got_states.begin() + at + slot_floats),
                               std::vector<double>(ref_states.begin() + at, ref_states.begin() + at + slot_floats)),
                1e-5)
          << "state of slot " << slot;
    }
  }
}

}  // namespace
}  // namespace splash::testing
