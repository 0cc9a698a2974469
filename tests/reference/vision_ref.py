"""Independent numpy (float64) reference for SmolVLM's image path (HF Idefics3 semantics).

Written from transformers' modeling_idefics3.py, not from llama.cpp or the engine, to be read
top to bottom: weights come from an "idefics3" mmproj GGUF (llama.cpp's layout), are
dequantized with gguf-py and computed on in float64.

    feats = image_embeddings("mmproj.gguf", pixels)   # pixels [3][S][S], already normalised
    ids = expand_image_tokens(len(feats))             # what HF's processor puts for one image
    m = llama_ref.load("text.gguf")
    logits = vlm_logits(m, prompt_ids, feats)         # text logits with the image spliced in

The pipeline (HF names):
  Idefics3VisionEmbeddings  Conv2d(3 -> D, kernel = stride = P, bias) over the pixels, patches
                            in raster order (flatten(2).transpose(1, 2)), + position_embedding
                            of HF's bucketised position ids (raster order 0..N-1 for a full
                            S = image_size image);
  Idefics3EncoderLayer x L  x += out_proj(attn(layer_norm1(x))); x += fc2(gelu_tanh(fc1(
                            layer_norm2(x)))); attention: q, k, v Linear with bias, heads of
                            D / H, scores * head_dim^-0.5, softmax over all patches (no mask);
  post_layernorm            LayerNorm (eps from the GGUF, HF layer_norm_eps);
  Idefics3Connector         pixel_shuffle (HF's view/permute/reshape sequence, reproduced
                            literally below) then modality_projection.proj, Linear, no bias.

GGUF names (llama.cpp): v.patch_embd.{weight,bias}, v.position_embd.weight,
v.blk.N.{ln1,ln2,attn_q,attn_k,attn_v,attn_out}.{weight,bias}, v.blk.N.ffn_up (fc1) and
ffn_down (fc2) .{weight,bias}, v.post_ln.{weight,bias}, mm.model.fc.weight. Files from before
llama.cpp PR #13290 hold fc1 under ffn_down and fc2 under ffn_up; as llama.cpp does, that is
detected by shape (ffn_down's input width is the embedding width) and swapped back.

Run as a script: prints the shape and a few values of the embeddings of random pixels.
    python tests/reference/vision_ref.py --mmproj /tmp/vlm/mmproj.gguf [--pixels p.npy]
"""
from __future__ import annotations

import argparse
import math
import sys
from dataclasses import dataclass, field

import numpy as np
from gguf import GGUFReader
from gguf.quants import dequantize

# SmolVLM's added tokens (the 49280-token vocabulary of SmolVLM / SmolVLM2).
GLOBAL_IMG_ID = 49152           # <global-img>
ROW_COL_BASE_ID = 49153         # <row_1_col_1>; <row_r_col_c> = 49153 + (r-1)*6 + (c-1)
FAKE_TOKEN_ID = 49189           # <fake_token_around_image>
IMAGE_TOKEN_ID = 49190          # <image> (config.image_token_id)
END_OF_UTTERANCE_ID = 49279     # <end_of_utterance>


@dataclass
class VisionModel:
    image_size: int
    patch_size: int
    d: int
    heads: int
    ffn: int
    n_layer: int
    eps: float
    scale: int
    text_d: int
    mean: list[float]
    std: list[float]
    w: dict[str, np.ndarray] = field(repr=False)  # GGUF name -> float64 array in torch order

    @property
    def patches_per_side(self) -> int:
        return self.image_size // self.patch_size

    @property
    def n_tokens(self) -> int:
        return self.patches_per_side ** 2 // self.scale ** 2


def _field(reader: GGUFReader, key: str, default=None):
    f = reader.fields.get(key)
    return default if f is None else f.contents()


def load(path: str) -> VisionModel:
    reader = GGUFReader(path)
    ptype = _field(reader, "clip.projector_type")
    if ptype != "idefics3":
        raise ValueError(f"{path}: clip.projector_type is {ptype!r}, not 'idefics3'")
    w = {}
    for t in reader.tensors:
        a = dequantize(t.data, t.tensor_type).astype(np.float64)
        w[t.name] = a.reshape([int(d) for d in reversed(t.shape)])  # GGUF ne reversed = torch
    d = int(_field(reader, "clip.vision.embedding_length"))
    n_layer = int(_field(reader, "clip.vision.block_count"))
    for i in range(n_layer):
        p = f"v.blk.{i}."
        # fc2 maps ffn -> d, so its torch shape is [d, ffn]; a file whose ffn_down is [ffn, d]
        # (input width d) named fc1 "ffn_down" (legacy naming): swap back.
        if w[p + "ffn_down.weight"].shape[1] == d and w[p + "ffn_up.weight"].shape[1] != d:
            for suffix in ("weight", "bias"):
                w[p + "ffn_up." + suffix], w[p + "ffn_down." + suffix] = (
                    w[p + "ffn_down." + suffix], w[p + "ffn_up." + suffix])
    return VisionModel(
        image_size=int(_field(reader, "clip.vision.image_size")),
        patch_size=int(_field(reader, "clip.vision.patch_size")),
        d=d,
        heads=int(_field(reader, "clip.vision.attention.head_count")),
        ffn=int(_field(reader, "clip.vision.feed_forward_length")),
        n_layer=n_layer,
        eps=float(_field(reader, "clip.vision.attention.layer_norm_epsilon")),
        scale=int(_field(reader, "clip.vision.projector.scale_factor", 2)),
        text_d=int(_field(reader, "clip.vision.projection_dim")),
        mean=[float(x) for x in _field(reader, "clip.vision.image_mean", [0.5] * 3)],
        std=[float(x) for x in _field(reader, "clip.vision.image_std", [0.5] * 3)],
        w=w,
    )


# --- the building blocks ---------------------------------------------------------------
def layer_norm(x: np.ndarray, w: np.ndarray, b: np.ndarray, eps: float) -> np.ndarray:
    mean = x.mean(axis=-1, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=-1, keepdims=True)  # biased, as torch
    return (x - mean) / np.sqrt(var + eps) * w + b


def gelu_tanh(x: np.ndarray) -> np.ndarray:
    """HF "gelu_pytorch_tanh" (and ggml_gelu): the tanh approximation."""
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def linear(x: np.ndarray, w: np.ndarray, b: np.ndarray | None = None) -> np.ndarray:
    y = x @ w.T  # torch nn.Linear: weight [out, in]
    return y if b is None else y + b


def position_ids(m: VisionModel, nb_h: int, nb_w: int) -> np.ndarray:
    """Idefics3VisionEmbeddings' ids for an unmasked nb_h x nb_w patch grid: fractional
    coordinates k / nb (float32, as torch), clamped below 1, bucketised (right=True) against
    the boundaries 1/nps, 2/nps, ..; id = bucket_h * nps + bucket_w. For nb_h = nb_w = nps
    these are 0..nps^2-1 in raster order."""
    nps = m.patches_per_side
    step = np.float32(1.0) / np.float32(nps)
    boundaries = (np.arange(1, nps, dtype=np.float64) * float(step)).astype(np.float32)
    def buckets(nb):
        frac = np.arange(nb, dtype=np.float32) * (np.float32(1.0) / np.float32(nb))
        frac = np.minimum(frac, np.float32(1.0 - 1e-6))
        return np.searchsorted(boundaries, frac, side="right")
    return (buckets(nb_h)[:, None] * nps + buckets(nb_w)[None, :]).reshape(-1)


def patch_embeddings(m: VisionModel, pixels: np.ndarray) -> np.ndarray:
    """Conv2d with kernel = stride = P and no padding as one matmul: patch (y, x) is the
    [3, P, P] block at rows y*P.., cols x*P..; row index y * W/P + x (raster)."""
    c, h, w_ = pixels.shape
    P = m.patch_size
    nh, nw = h // P, w_ // P
    blocks = pixels[:, :nh * P, :nw * P].reshape(c, nh, P, nw, P).transpose(1, 3, 0, 2, 4)
    kernel = m.w["v.patch_embd.weight"].reshape(m.d, c * P * P)  # [D, 3, P, P] -> [D, 3*P*P]
    x = blocks.reshape(nh * nw, c * P * P) @ kernel.T + m.w["v.patch_embd.bias"]
    return x + m.w["v.position_embd.weight"][position_ids(m, nh, nw)]


def attention(m: VisionModel, x: np.ndarray, p: str) -> np.ndarray:
    n = x.shape[0]
    hd = m.d // m.heads
    q = linear(x, m.w[p + "attn_q.weight"], m.w[p + "attn_q.bias"]).reshape(n, m.heads, hd)
    k = linear(x, m.w[p + "attn_k.weight"], m.w[p + "attn_k.bias"]).reshape(n, m.heads, hd)
    v = linear(x, m.w[p + "attn_v.weight"], m.w[p + "attn_v.bias"]).reshape(n, m.heads, hd)
    out = np.empty((n, m.heads, hd))
    for h in range(m.heads):
        s = (q[:, h] @ k[:, h].T) * hd ** -0.5           # every patch sees every patch
        e = np.exp(s - s.max(axis=-1, keepdims=True))
        out[:, h] = (e / e.sum(axis=-1, keepdims=True)) @ v[:, h]
    return linear(out.reshape(n, m.d), m.w[p + "attn_out.weight"], m.w[p + "attn_out.bias"])


def vision_tower(m: VisionModel, pixels: np.ndarray) -> np.ndarray:
    """Idefics3VisionTransformer: [patches][D] after post_layernorm."""
    W = m.w
    x = patch_embeddings(m, pixels)
    for i in range(m.n_layer):
        p = f"v.blk.{i}."
        x = x + attention(m, layer_norm(x, W[p + "ln1.weight"], W[p + "ln1.bias"], m.eps), p)
        h = layer_norm(x, W[p + "ln2.weight"], W[p + "ln2.bias"], m.eps)
        h = gelu_tanh(linear(h, W[p + "ffn_up.weight"], W[p + "ffn_up.bias"]))      # fc1
        x = x + linear(h, W[p + "ffn_down.weight"], W[p + "ffn_down.bias"])          # fc2
    return layer_norm(x, W["v.post_ln.weight"], W["v.post_ln.bias"], m.eps)


def pixel_shuffle(x: np.ndarray, scale_factor: int) -> np.ndarray:
    """Idefics3Connector.pixel_shuffle line by line (torch view/reshape on a contiguous
    tensor = numpy reshape in C order; permute = transpose, then reshape copies)."""
    bsz, seq, embed_dim = x.shape
    height = width = int(seq ** 0.5)
    x = x.reshape(bsz, height, width, embed_dim)
    x = x.reshape(bsz, height, int(width / scale_factor), embed_dim * scale_factor)
    x = x.transpose(0, 2, 1, 3)
    x = x.reshape(bsz, int(width / scale_factor), int(height / scale_factor), embed_dim * (scale_factor ** 2))
    x = x.transpose(0, 2, 1, 3)
    x = x.reshape(bsz, int(seq / (scale_factor ** 2)), embed_dim * (scale_factor ** 2))
    return x


def connector(m: VisionModel, hidden: np.ndarray) -> np.ndarray:
    shuffled = pixel_shuffle(hidden[None], m.scale)[0]
    return linear(shuffled, m.w["mm.model.fc.weight"])  # modality_projection.proj, no bias


def image_embeddings(mmproj, pixels) -> np.ndarray:
    """[tokens][text_d] float64 for one image. mmproj: a path or a loaded VisionModel;
    pixels: [3][S][S], normalised ((u8/255 - mean) / std), S = image_size."""
    m = mmproj if isinstance(mmproj, VisionModel) else load(mmproj)
    pixels = np.asarray(pixels, dtype=np.float64)
    if pixels.ndim != 3 or pixels.shape[0] != 3 or pixels.shape[1] != pixels.shape[2]:
        raise ValueError(f"pixels must be [3][S][S], got {pixels.shape}")
    return connector(m, vision_tower(m, pixels))


def normalize_u8(rgb: np.ndarray, m: VisionModel) -> np.ndarray:
    """[H][W][3] uint8 RGB -> [3][H][W] float64, (x/255 - mean) / std per channel."""
    x = np.asarray(rgb, dtype=np.float64).transpose(2, 0, 1) / 255.0
    return (x - np.array(m.mean)[:, None, None]) / np.array(m.std)[:, None, None]


# --- prompt side ------------------------------------------------------------------------
def image_prompt_string(image_seq_len: int, rows: int = 0, cols: int = 0) -> str:
    """Idefics3Processor's replacement text for one "<image>" (get_image_prompt_string)."""
    fake, img, glob = "<fake_token_around_image>", "<image>", "<global-img>"
    if rows == 0 and cols == 0:
        return f"{fake}{glob}{img * image_seq_len}{fake}"
    text = ""
    for r in range(rows):
        for c in range(cols):
            text += f"{fake}<row_{r + 1}_col_{c + 1}>{img * image_seq_len}"
        text += "\n"
    return text + f"\n{fake}{glob}{img * image_seq_len}{fake}"


def expand_image_tokens(image_seq_len: int) -> list[int]:
    """Token ids HF inserts for one image without splitting:
    <fake_token_around_image> <global-img> <image>*image_seq_len <fake_token_around_image>."""
    return [FAKE_TOKEN_ID, GLOBAL_IMG_ID] + [IMAGE_TOKEN_ID] * image_seq_len + [FAKE_TOKEN_ID]


def image_positions(token_ids, features, image_token_id: int = IMAGE_TOKEN_ID) -> dict[int, np.ndarray]:
    """Idefics3Model.inputs_merger: the i-th <image> token takes the i-th feature row (all
    images' rows concatenated in order). Returns {position: vector} for llama_ref."""
    pos = [i for i, t in enumerate(token_ids) if t == image_token_id]
    features = np.asarray(features).reshape(-1, np.asarray(features).shape[-1])
    if len(pos) != len(features):
        raise ValueError(f"{len(pos)} image tokens but {len(features)} image features")
    return {p: features[i] for i, p in enumerate(pos)}


def vlm_logits(text_model, token_ids, features, image_token_id: int = IMAGE_TOKEN_ID) -> np.ndarray:
    """Last-position logits of a llama_ref.Model with the image features spliced in."""
    return text_model.logits(token_ids, input_embeddings=image_positions(token_ids, features, image_token_id))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mmproj", required=True)
    ap.add_argument("--pixels", help=".npy [3][S][S] (default: uniform random in [-1, 1])")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", help="write the embeddings (float64 .npy) here")
    args = ap.parse_args(argv)
    m = load(args.mmproj)
    if args.pixels:
        pixels = np.load(args.pixels)
    else:
        pixels = np.random.default_rng(args.seed).uniform(-1, 1, size=(3, m.image_size, m.image_size))
    feats = image_embeddings(m, pixels)
    print(f"{m.image_size}px, patch {m.patch_size}, D {m.d}, {m.heads} heads, {m.n_layer} layers, "
          f"scale {m.scale} -> embeddings {feats.shape}, std {feats.std():.4f}", file=sys.stderr)
    print(np.array2string(feats[:, :6], precision=6))
    if args.out:
        np.save(args.out, feats)
    return 0


if __name__ == "__main__":
    sys.exit(main())
