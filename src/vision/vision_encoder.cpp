#include "vision/vision_encoder.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <mutex>

#include "common/error.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/quant_formats.h"

namespace splash::vision {
namespace {

using kernels::PackedWeight;
using kernels::WeightSource;

struct Hyperparameters {
  VisionInfo info;
  float eps = 1e-6f;
  PixelNormalization norm;
};

Hyperparameters read_hyperparameters(const gguf::File& file) {
  Hyperparameters h;
  VisionInfo& v = h.info;
  v.projector = file.opt_string("clip.projector_type").value_or("");
  if (v.projector != "idefics3")
    fail("{}: vision projector '{}' is not supported (idefics3, as SmolVLM's mmproj files have, is)", file.path(),
         v.projector.empty() ? "none" : v.projector);
  if (!file.opt_bool("clip.has_vision_encoder").value_or(true)) fail("{}: the file has no vision encoder", file.path());
  auto get = [&](const char* key) { return static_cast<int>(std::min<uint64_t>(file.get_uint(key), 1u << 20)); };
  v.image_size = get("clip.vision.image_size");
  v.patch_size = get("clip.vision.patch_size");
  v.width = get("clip.vision.embedding_length");
  v.ffn = get("clip.vision.feed_forward_length");
  v.layers = get("clip.vision.block_count");
  v.heads = get("clip.vision.attention.head_count");
  v.projection_dim = get("clip.vision.projection_dim");
  v.scale_factor = static_cast<int>(std::min<uint64_t>(file.opt_uint("clip.vision.projector.scale_factor").value_or(0), 64));
  h.eps = file.opt_float("clip.vision.attention.layer_norm_epsilon").value_or(1e-6f);
  for (const auto& [key, target] : {std::pair{"clip.vision.image_mean", &h.norm.mean}, std::pair{"clip.vision.image_std", &h.norm.std}})
    if (file.find(key)) {
      const auto values = file.get_float_array(key);
      if (values.size() != 3) fail("{}: {} must hold 3 values", file.path(), key);
      std::copy(values.begin(), values.end(), target->begin());
    }
  for (float s : h.norm.std)
    if (!(s > 0.0f)) fail("{}: clip.vision.image_std must be positive", file.path());
  if (v.image_size <= 0 || v.patch_size <= 0 || v.image_size % v.patch_size != 0 || v.image_size > 4096)
    fail("{}: image size {} is not a multiple of the patch size {}", file.path(), v.image_size, v.patch_size);
  const int grid = v.image_size / v.patch_size;
  if (v.scale_factor <= 0 || grid % v.scale_factor != 0)
    fail("{}: the pixel-shuffle factor {} does not divide the {}x{} patch grid", file.path(), v.scale_factor, grid, grid);
  if (v.layers <= 0 || v.layers > 256 || v.heads <= 0 || v.width <= 0 || v.width % v.heads != 0 || v.ffn <= 0 ||
      v.projection_dim <= 0)
    fail("{}: inconsistent vision hyperparameters", file.path());
  if (v.width % 32 != 0 || v.ffn % 32 != 0 || (3 * v.patch_size * v.patch_size) % 32 != 0)
    fail("{}: vision widths must be multiples of 32", file.path());
  v.tokens_per_view = (grid / v.scale_factor) * (grid / v.scale_factor);
  return h;
}

// A matrix of the file with `rows` outputs and `cols` inputs; a 4-D convolution kernel
// [out][c][ky][kx] is the same matrix with its inputs flattened in that order.
WeightSource matrix(const gguf::File& file, const std::string& name, int rows, int cols) {
  const auto& t = file.tensor(name);
  uint64_t inputs = 1;
  for (size_t i = 0; i + 1 < t.dims.size(); ++i) inputs *= t.dims[i];
  if (t.dims.size() < 2 || inputs != static_cast<uint64_t>(cols) || t.dims.back() != static_cast<uint64_t>(rows))
    fail("{}: tensor '{}' has shape [{}], expected {} rows of {} inputs", file.path(), name, fmt::join(t.dims, ", "), rows,
         cols);
  if (!kernels::is_supported_weight_type(t.type))
    fail("{}: tensor '{}' has type {}, which has no CPU kernel", file.path(), name, type_name(t.type));
  return {t.type, t.data, rows, cols};
}

// A vector (bias, norm weight) or a small table, as floats whatever its stored type.
std::vector<float> floats(const gguf::File& file, const std::string& name, size_t n) {
  const auto& t = file.tensor(name);
  if (t.n_elements != n) fail("{}: tensor '{}' must have {} elements", file.path(), name, n);
  if (!kernels::is_supported_weight_type(t.type))
    fail("{}: tensor '{}' has type {}, which has no CPU kernel", file.path(), name, type_name(t.type));
  std::vector<float> out(n);
  kernels::dequantize_row(t.type, t.data, out.data(), n);
  return out;
}

struct Layer {
  std::vector<float> ln1_w, ln1_b, ln2_w, ln2_b, qkv_bias, out_bias, up_bias, down_bias;
  PackedWeight qkv, out, up, down;
};

size_t round_up(size_t n, size_t to) { return (n + to - 1) / to * to; }

class Idefics3Encoder final : public VisionEncoder {
 public:
  Idefics3Encoder(const std::string& path, int threads)
      : file_(gguf::File::open(path)), h_(read_hyperparameters(file_)), pool_(threads) {
    load_weights();
  }

  const VisionInfo& info() const override { return h_.info; }

  ImageLayout layout(int width, int height) const override {
    return idefics3_layout(width, height, h_.info.image_size);
  }

  ImageFeatures encode(const RgbImage& image, const std::function<bool()>& cancelled) override {
    const auto stop_if_cancelled = [&] {
      if (cancelled && cancelled()) throw EncodingCancelled();
    };
    const Idefics3Views views = idefics3_views(image, h_.info.image_size, h_.norm);
    ImageFeatures out;
    out.layout = {views.rows, views.cols};
    out.dim = h_.info.projection_dim;
    std::unique_lock lock(mutex_, std::defer_lock);
    while (!lock.try_lock_for(std::chrono::milliseconds(50))) stop_if_cancelled();  // another's turn
    for (const auto& view : views.views) {
      stop_if_cancelled();
      const ImageFeatures one = encode_view(view);
      out.values.insert(out.values.end(), one.values.begin(), one.values.end());
      out.tokens += one.tokens;
    }
    return out;
  }

  ImageFeatures encode_pixels(std::span<const float> pixels) override {
    std::lock_guard lock(mutex_);
    return encode_view(pixels);
  }

 private:
  // One [3][image_size][image_size] view; the caller holds mutex_.
  ImageFeatures encode_view(std::span<const float> pixels) {
    const VisionInfo& v = h_.info;
    if (pixels.size() != static_cast<size_t>(3) * v.image_size * v.image_size)
      fail("encode_pixels: {} values for a 3x{}x{} image", pixels.size(), v.image_size, v.image_size);
    const int n = patches();
    embed_patches(pixels);
    for (const Layer& layer : layers_) run_layer(layer, n);
    layer_norm(x_.data(), post_ln_w_.data(), post_ln_b_.data(), normed_.data(), n);
    return connect(normed_.data());
  }

  int grid() const { return h_.info.image_size / h_.info.patch_size; }
  int patches() const { return grid() * grid(); }
  int patch_inputs() const { return 3 * h_.info.patch_size * h_.info.patch_size; }
  int head_dim() const { return h_.info.width / h_.info.heads; }

  void load_weights() {
    const VisionInfo& v = h_.info;
    const int d = v.width;
    std::map<std::string, int> type_counts;
    for (const auto& t : file_.tensors()) ++type_counts[std::string(type_name(t.type))];
    std::vector<std::string> parts;
    for (const auto& [name, count] : type_counts) parts.push_back(fmt::format("{} ({})", name, count));
    h_.info.weight_types = fmt::format("{}", fmt::join(parts, ", "));

    patch_embd_ = kernels::pack_weight(matrix(file_, "v.patch_embd.weight", d, patch_inputs()));
    patch_bias_ = file_.find_tensor("v.patch_embd.bias") ? floats(file_, "v.patch_embd.bias", d) : std::vector<float>(d);
    position_ = floats(file_, "v.position_embd.weight", static_cast<size_t>(patches()) * d);
    layers_.resize(v.layers);
    for (int l = 0; l < v.layers; ++l) {
      Layer& layer = layers_[l];
      const std::string p = fmt::format("v.blk.{}.", l);
      layer.ln1_w = floats(file_, p + "ln1.weight", d);
      layer.ln1_b = floats(file_, p + "ln1.bias", d);
      layer.ln2_w = floats(file_, p + "ln2.weight", d);
      layer.ln2_b = floats(file_, p + "ln2.bias", d);
      const WeightSource q = matrix(file_, p + "attn_q.weight", d, d), k = matrix(file_, p + "attn_k.weight", d, d),
                         vv = matrix(file_, p + "attn_v.weight", d, d);
      if (q.type == k.type && k.type == vv.type) {
        const WeightSource stacked[] = {q, k, vv};
        layer.qkv = kernels::pack_weights(stacked);
      } else {
        fail("{}: attn_q/k/v of block {} have different types", file_.path(), l);
      }
      for (const char* part : {"attn_q.bias", "attn_k.bias", "attn_v.bias"}) {
        const auto bias = floats(file_, p + part, d);
        layer.qkv_bias.insert(layer.qkv_bias.end(), bias.begin(), bias.end());
      }
      layer.out = kernels::pack_weight(matrix(file_, p + "attn_out.weight", d, d));
      layer.out_bias = floats(file_, p + "attn_out.bias", d);
      // The first MLP matrix (fc1, width -> ffn) is ffn_up; files converted before llama.cpp
      // fixed the names (May 2025) call it ffn_down. Its input width tells them apart.
      std::string up = "ffn_up", down = "ffn_down";
      if (file_.tensor(p + "ffn_down.weight").dims[0] == static_cast<uint64_t>(d) && d != v.ffn) std::swap(up, down);
      layer.up = kernels::pack_weight(matrix(file_, p + up + ".weight", v.ffn, d));
      layer.up_bias = floats(file_, p + up + ".bias", v.ffn);
      layer.down = kernels::pack_weight(matrix(file_, p + down + ".weight", d, v.ffn));
      layer.down_bias = floats(file_, p + down + ".bias", d);
    }
    post_ln_w_ = floats(file_, "v.post_ln.weight", d);
    post_ln_b_ = floats(file_, "v.post_ln.bias", d);
    const int shuffled = d * v.scale_factor * v.scale_factor;
    connector_ = kernels::pack_weight(matrix(file_, "mm.model.fc.weight", v.projection_dim, shuffled));

    size_t bytes = patch_embd_.bytes() + connector_.bytes() + position_.size() * sizeof(float);
    for (const Layer& layer : layers_) bytes += layer.qkv.bytes() + layer.out.bytes() + layer.up.bytes() + layer.down.bytes();
    h_.info.weight_bytes = bytes;

    const size_t n = patches();
    x_.resize(n * d);
    normed_.resize(n * d);
    qkv_.resize(n * 3 * d);
    attn_.resize(n * d);
    projected_.resize(n * d);
    hidden_.resize(n * v.ffn);
    // Attention buffers, padded so each matmul's inner dimension is a multiple of 32.
    head_pad_ = round_up(head_dim(), 32);
    patch_pad_ = round_up(n, 32);
    q_head_.assign(n * head_pad_, 0.0f);
    k_head_.assign(n * head_pad_, 0.0f);
    v_t_.assign(head_pad_ * patch_pad_, 0.0f);
    scores_.assign(n * patch_pad_, 0.0f);
    head_out_.resize(n * head_pad_);
  }

  // Patch embedding (the convolution as a matmul over flattened patches) plus positions: a
  // whole image at the encoder's size has positions 0 .. patches-1 in raster order.
  void embed_patches(std::span<const float> pixels) {
    const int s = h_.info.image_size, p = h_.info.patch_size, g = grid(), d = h_.info.width;
    std::vector<float> flat(static_cast<size_t>(patches()) * patch_inputs());
    for (int py = 0; py < g; ++py)
      for (int px = 0; px < g; ++px) {
        float* out = flat.data() + static_cast<size_t>(py * g + px) * patch_inputs();
        for (int c = 0; c < 3; ++c)
          for (int ky = 0; ky < p; ++ky) {
            const float* src = pixels.data() + (static_cast<size_t>(c) * s + py * p + ky) * s + px * p;
            std::memcpy(out + (c * p + ky) * p, src, sizeof(float) * p);
          }
      }
    prepare(patch_embd_, flat.data(), patches(), patch_inputs());
    kernels::matmul(patch_embd_, activations_, x_.data(), d, pool_);
    for (int t = 0; t < patches(); ++t) {
      float* row = x_.data() + static_cast<size_t>(t) * d;
      const float* pos = position_.data() + static_cast<size_t>(t) * d;
      for (int i = 0; i < d; ++i) row[i] += patch_bias_[i] + pos[i];
    }
  }

  void layer_norm(const float* x, const float* w, const float* b, float* out, int n) {
    const int d = h_.info.width;
    const float eps = h_.eps;
    pool_.run(n, [&](int t) {
      const float* row = x + static_cast<size_t>(t) * d;
      double mean = 0.0, var = 0.0;
      for (int i = 0; i < d; ++i) mean += row[i];
      mean /= d;
      for (int i = 0; i < d; ++i) var += (row[i] - mean) * (row[i] - mean);
      const float inv = static_cast<float>(1.0 / std::sqrt(var / d + eps));
      float* o = out + static_cast<size_t>(t) * d;
      for (int i = 0; i < d; ++i) o[i] = (row[i] - static_cast<float>(mean)) * inv * w[i] + b[i];
    });
  }

  // The next matmul's activations: float weights read the floats as they are; integer ones
  // (a Q8_0 mmproj) need them quantized.
  void prepare(const PackedWeight& w, const float* x, int n, int k) {
    if (kernels::packed_kind_info(w.kind).integer) activations_.quantize(x, n, k, pool_);
    else activations_.use_floats(x, n, k);
  }

  static void add_bias(float* y, int n, int width, const std::vector<float>& bias) {
    for (int t = 0; t < n; ++t) {
      float* row = y + static_cast<size_t>(t) * width;
      for (int i = 0; i < width; ++i) row[i] += bias[i];
    }
  }

  void run_layer(const Layer& layer, int n) {
    const int d = h_.info.width;
    layer_norm(x_.data(), layer.ln1_w.data(), layer.ln1_b.data(), normed_.data(), n);
    prepare(layer.qkv, normed_.data(), n, d);
    kernels::matmul(layer.qkv, activations_, qkv_.data(), 3 * d, pool_);
    add_bias(qkv_.data(), n, 3 * d, layer.qkv_bias);
    attention(n);
    prepare(layer.out, attn_.data(), n, d);
    kernels::matmul(layer.out, activations_, projected_.data(), d, pool_);
    add_bias(projected_.data(), n, d, layer.out_bias);
    for (size_t i = 0; i < static_cast<size_t>(n) * d; ++i) x_[i] += projected_[i];

    layer_norm(x_.data(), layer.ln2_w.data(), layer.ln2_b.data(), normed_.data(), n);
    prepare(layer.up, normed_.data(), n, d);
    kernels::matmul(layer.up, activations_, hidden_.data(), h_.info.ffn, pool_);
    add_bias(hidden_.data(), n, h_.info.ffn, layer.up_bias);
    kernels::gelu_tanh(hidden_.data(), n, h_.info.ffn, pool_);  // SigLIP's gelu_pytorch_tanh
    prepare(layer.down, hidden_.data(), n, h_.info.ffn);
    kernels::matmul(layer.down, activations_, projected_.data(), d, pool_);
    add_bias(projected_.data(), n, d, layer.down_bias);
    for (size_t i = 0; i < static_cast<size_t>(n) * d; ++i) x_[i] += projected_[i];
  }

  // Full attention, head by head: scores = Q K^T and out = P V both run as matmuls with the
  // head's keys (then its transposed values) packed as a float weight; inner dimensions are
  // zero-padded to multiples of 32.
  void attention(int n) {
    const int d = h_.info.width, hd = head_dim();
    const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
    for (int head = 0; head < h_.info.heads; ++head) {
      for (int t = 0; t < n; ++t) {
        const float* row = qkv_.data() + static_cast<size_t>(t) * 3 * d + head * hd;
        std::memcpy(q_head_.data() + static_cast<size_t>(t) * head_pad_, row, sizeof(float) * hd);
        std::memcpy(k_head_.data() + static_cast<size_t>(t) * head_pad_, row + d, sizeof(float) * hd);
        for (int i = 0; i < hd; ++i) v_t_[static_cast<size_t>(i) * patch_pad_ + t] = row[2 * d + i];
      }
      const PackedWeight keys = kernels::pack_weight({GgmlType::F32, reinterpret_cast<const uint8_t*>(k_head_.data()), n,
                                                      static_cast<int>(head_pad_)});
      prepare(keys, q_head_.data(), n, static_cast<int>(head_pad_));
      kernels::matmul(keys, activations_, scores_.data(), static_cast<int>(patch_pad_), pool_);
      // Padding columns become 0: they must weigh nothing in P V.
      kernels::softmax_rows(scores_.data(), n, n, static_cast<int>(patch_pad_), scale, pool_);
      const PackedWeight values = kernels::pack_weight(
          {GgmlType::F32, reinterpret_cast<const uint8_t*>(v_t_.data()), hd, static_cast<int>(patch_pad_)});
      prepare(values, scores_.data(), n, static_cast<int>(patch_pad_));
      kernels::matmul(values, activations_, head_out_.data(), static_cast<int>(head_pad_), pool_);
      for (int t = 0; t < n; ++t)
        std::memcpy(attn_.data() + static_cast<size_t>(t) * d + head * hd,
                    head_out_.data() + static_cast<size_t>(t) * head_pad_, sizeof(float) * hd);
    }
  }

  // Pixel shuffle, then the projection: output row r gathers the s x s patches of super-patch
  // (r / (g/s), r % (g/s)), each patch's features contiguous, in row-major order within the
  // group (Idefics3Connector.pixel_shuffle).
  ImageFeatures connect(const float* x) {
    const VisionInfo& v = h_.info;
    const int g = grid(), s = v.scale_factor, d = v.width, out_grid = g / s;
    const int shuffled = d * s * s;
    std::vector<float> rows(static_cast<size_t>(v.tokens_per_view) * shuffled);
    for (int r = 0; r < v.tokens_per_view; ++r) {
      const int gy = r / out_grid, gx = r % out_grid;
      for (int j = 0; j < s; ++j)
        for (int k = 0; k < s; ++k) {
          const int patch = (gy * s + j) * g + gx * s + k;
          std::memcpy(rows.data() + static_cast<size_t>(r) * shuffled + (j * s + k) * d,
                      x + static_cast<size_t>(patch) * d, sizeof(float) * d);
        }
    }
    ImageFeatures out;
    out.tokens = v.tokens_per_view;
    out.dim = v.projection_dim;
    out.values.resize(static_cast<size_t>(out.tokens) * out.dim);
    prepare(connector_, rows.data(), out.tokens, shuffled);
    kernels::matmul(connector_, activations_, out.values.data(), out.dim, pool_);
    return out;
  }

  gguf::File file_;
  Hyperparameters h_;
  kernels::ThreadPool pool_;
  std::timed_mutex mutex_;  // one encoding at a time (each uses the whole thread pool)
  kernels::QuantizedActivations activations_;
  PackedWeight patch_embd_, connector_;
  std::vector<float> patch_bias_, position_, post_ln_w_, post_ln_b_;
  std::vector<Layer> layers_;
  std::vector<float> x_, normed_, qkv_, attn_, projected_, hidden_;
  size_t head_pad_ = 0, patch_pad_ = 0;
  std::vector<float> q_head_, k_head_, v_t_, scores_, head_out_;
};

}  // namespace

std::unique_ptr<VisionEncoder> VisionEncoder::load(const std::string& path, int threads) {
  return std::make_unique<Idefics3Encoder>(path, threads);
}

VisionMemory estimate_vision_memory(const gguf::File& file) {
  const VisionInfo v = read_hyperparameters(file).info;
  VisionMemory memory;
  // Packed matrices take about their file size; vectors and the position table become floats.
  const size_t n = static_cast<size_t>(v.image_size / v.patch_size) * (v.image_size / v.patch_size);
  for (const auto& t : file.tensors()) memory.weight_bytes += t.dims.size() >= 2 ? t.n_bytes : t.n_elements * sizeof(float);
  memory.weight_bytes += n * v.width * sizeof(float);
  const size_t floats = n * (3 * v.patch_size * v.patch_size)  // flattened patches
                        + n * v.width * 6 + n * v.ffn          // residual, norms, q/k/v, attention, MLP
                        + n * round_up(n, 32) * 2;             // scores and a head's values
  memory.activation_bytes = floats * sizeof(float);
  return memory;
}

}  // namespace splash::vision
