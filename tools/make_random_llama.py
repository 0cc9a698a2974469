#!/usr/bin/env python3
"""A small llama-family GGUF (llama, qwen2, qwen3) with random weights, a different tensor type per tensor.

It exists to run the engine's run-time-shape kernels (any llama GGUF that is not the shipped
default model) and every supported weight type against the numpy reference
(tests/e2e/test_random_model.py). The tokenizer metadata and chat template are copied from a
real GGUF (SmolLM2's), so the engine's tokenizer and chat format load; hence vocab 49152.

    .venv/bin/python tools/make_random_llama.py --tokenizer-from "$(build/splash pull smollm2-135m)" \
        --out /tmp/random.gguf                      # the default type mix ("a")
    ... --mix b                                     # the same roles with the types rotated
    ... --all Q6_K                                  # every matrix one type (to isolate a type)
    ... --all F32 --set blk.1.ffn_down=Q4_K         # one tensor different

    ... --arch qwen2 --mix qwen                     # qwen2: q/k/v biases, NEOX RoPE
    ... --arch qwen3 --mix qwen                     # qwen3: q/k RMSNorm per head, head_dim 128
    ... --arch qwen3moe --mix qwen                  # qwen3 + a mixture-of-experts FFN
    ... --arch qwen35 --mix qwen                    # Qwen3.5: Gated DeltaNet + gated attention
    ... --arch qwen35moe --mix qwen                 # the same with experts and a shared expert
    ... --arch qwen3next --mix qwen                 # Qwen3-Next: qwen35moe's layers, grouped heads

The test imports it instead: read_tokenizer() once, tensor_types(), make_model().

Architectures (--arch; qwen shapes default to QWEN_SHAPES below: d_model 256, 4 heads / 2 kv
heads, ffn 512, 2 layers, rope base 1e6):
  llama  as below.
  qwen2  llama + F32 biases blk.N.attn_q/k/v.bias (added after the projections; random with
         deviation 0.5, so dropping or misplacing one shows), NEOX RoPE in the engine (the
         weights are written as they come, nothing is permuted: for random weights the layout
         only matters to how engine and reference agree on it). head_dim = d_model / heads = 64.
  qwen3  llama + blk.N.attn_q_norm/attn_k_norm.weight (F32 [head_dim], uniform in [0.5, 1.5]),
         an RMSNorm over each head of q and k after the projection and before RoPE; no biases;
         head_dim 128 written as qwen3.attention.key_length and value_length, so q is 512 wide
         (!= d_model 256), k/v 256, attn_output [512 -> 256]. rope.dimension_count = head_dim.
  qwen3moe  qwen3 with every FFN a mixture of 8 experts of width 256 (2 per token):
         blk.N.ffn_gate_inp.weight (F32 router [8][256]) and ffn_gate/up/down_exps stacks
         [8][256][256] in the ffn_gate/up/down roles' types; expert_count, expert_used_count,
         expert_feed_forward_length keys, as llama.cpp writes Qwen3-MoE.
  qwen35  Qwen3.5's hybrid in llama.cpp's layout: 4 layers, every full_attention_interval-th
         (2 here, 4 in the real models) full attention, the rest Gated DeltaNet. Attention:
         attn_q [2 x heads x 256 -> 256] giving each head's query and output gate side by side
         ([q | gate] per head), per-head q/k norms, NEOX RoPE on the first 64 of 256 dims
         (rope.dimension_count 64, rope base 1e7), no biases. DeltaNet (ssm.* keys): 2 key heads
         and 4 value heads of 128 (value head j reads key head j % 2, llama.cpp's tiled order),
         attn_qkv [q | k | v channels, 1024 -> 256], attn_gate (z) [512], ssm_beta / ssm_alpha
         [4], ssm_conv1d F32 [1024 channels][4 taps] (deviation 0.5), ssm_dt.bias F32 in
         [-2, 0], ssm_a F32 = -exp(A_log) with A_log in [log 0.05, 0] (so the state decays by
         0.4-0.995 a token and remembers), ssm_norm F32 in [0.5, 1.5], ssm_out [256 <- 512].
         Both kinds of layer: post_attention_norm before the FFN. The DeltaNet matrices take
         the types of the roles they stand for (attn_qkv: attn_q's, attn_gate: attn_v's,
         ssm_beta/ssm_alpha: attn_k's, ssm_out: attn_output's).
  qwen35moe  qwen35 with every FFN a mixture of 8 experts of width 256 (2 per token, as
         qwen3moe) plus a shared expert of width 256 (ffn_gate/up/down_shexp in the ffn roles'
         types) scaled by sigmoid(x . ffn_gate_inp_shexp) (F32 [256], deviation 1/sqrt(256));
         odd layers store each expert's gate and up as one ffn_gate_up_exps [8][512][256]
         (gate rows first), as llama.cpp's newer converter does; expert_shared_feed_forward_length.
  qwen3next  Qwen3-Next in llama.cpp's layout: qwen35moe's layers and sizes, but the DeltaNet's
         value heads in the model's grouped order (value head j reads key head j // 2) and
         beta/alpha in one ssm_ba [2 x 4 -> 256] holding each key head's [beta (2) | alpha (2)]
         rows; the first DeltaNet layer's in-projection as llama.cpp's converter writes it now
         (attn_qkv, attn_gate), the second's as older files hold it: one ssm_in [1536 -> 256]
         whose rows are each key head's [q (128) | k (128) | v (2 x 128) | z (2 x 128)] group.
         No rope.dimension_sections (plain NEOX RoPE).

Shapes (defaults): d_model 256, 4 heads / 2 kv heads of 64, ffn 768, 3 layers, rope base
10000, context 2048, untied output.weight. Every matrix width (256, 768) is a multiple of the
256-element K-quant super-block.

Weights are random with a fixed seed, scaled as a trained network roughly is: a matrix with
K inputs has standard deviation ~1/sqrt(K), so every projection of an RMS-normalised input
has outputs of order 1; norm weights are uniform in [0.8, 1.2]; the output head is scaled so
the logits have a standard deviation of about 2 (a peaked, not flat, distribution).
F32/F16/BF16/Q8_0/Q4_0/Q4_1 are quantized from Gaussian floats with gguf-py. gguf-py has no
Q4_K/Q6_K quantizer, so those blocks are built directly: random codes, random 6-bit (Q4_K) or
int8 (Q6_K) sub-block scales, fp16 super-block scales chosen for the target deviation, and for
Q4_K mins that roughly centre each sub-block on zero (so the min field matters).
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import dataclass

import numpy as np
from gguf import GGMLQuantizationType as T
from gguf import GGUFReader, GGUFValueType, GGUFWriter
from gguf.quants import quantize

TYPES = {t.name: t for t in [T.F32, T.F16, T.BF16, T.Q8_0, T.Q5_0, T.Q5_1, T.Q4_0, T.Q4_1, T.Q4_K, T.Q6_K]}
DEFAULT_SEED = 20260601
ROLES = ["attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down"]

# Type of each matrix, per layer (roles in ROLES order), plus the embedding and output head.
# Mix "a" covers every type in several roles, both stacked paths of the engine (q/k/v and
# gate/up of one type are packed as one matrix, of different types as separate ones), K-quants
# at width 256 and 768 (ffn_down), and a K-quant output head over the 49152-row vocabulary.
# Between them, a and b put every integer type at width 768 (ffn_down) and at width 256.
MIXES = {
    "a": {
        "token_embd": "Q6_K",
        "output": "Q4_K",
        "layers": [
            ["Q4_0", "Q4_0", "Q4_0", "Q8_0", "Q4_K", "Q4_K", "Q6_K"],  # stacked int qkv, stacked K gate/up
            ["F16", "BF16", "F32", "Q4_1", "Q6_K", "Q8_0", "Q4_K"],    # float q/k/v apart, mixed gate/up
            ["Q4_K", "Q6_K", "Q4_1", "BF16", "F16", "F16", "Q4_0"],    # K-quant q/k, stacked F16 gate/up
        ],
    },
    # The qwen models: Q8_0 and Q4_K only (the types real qwen GGUFs are mostly made of), both
    # stacking cases (layer 0: q/k/v and gate/up of one type; layer 1: apart), Q4_K at every
    # width used (256, and 512 for ffn_down and qwen3's attn_output).
    "qwen": {
        "token_embd": "Q8_0",
        "output": "Q4_K",
        "layers": [
            ["Q8_0", "Q8_0", "Q8_0", "Q4_K", "Q4_K", "Q4_K", "Q8_0"],
            ["Q4_K", "Q8_0", "Q4_K", "Q8_0", "Q8_0", "Q4_K", "Q4_K"],
        ],
    },
    # Float only (no int8 rounding of activations in the engine): the engine should match the
    # reference to float32 rounding, a sharp check of the qwen-specific arithmetic.
    "float": {
        "token_embd": "F16",
        "output": "BF16",
        "layers": [
            ["F32", "F16", "BF16", "F16", "BF16", "BF16", "F32"],
            ["BF16", "BF16", "BF16", "F32", "F16", "F16", "F16"],
        ],
    },
    # Every type moved to other roles (and the other stacking cases: Q6_K q/k/v, Q4_1 gate/up).
    "b": {
        "token_embd": "Q4_K",
        "output": "Q6_K",
        "layers": [
            ["Q6_K", "Q6_K", "Q6_K", "F16", "Q4_1", "Q4_1", "Q8_0"],
            ["BF16", "Q4_K", "Q8_0", "Q4_0", "F32", "BF16", "Q4_1"],
            ["Q4_1", "F32", "Q4_0", "Q4_K", "Q6_K", "Q6_K", "BF16"],
        ],
    },
}


def half_bytes(x: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(x.astype("<f2")).view(np.uint8).reshape(*x.shape, 2)


def q4_k_blocks(rng, rows: int, cols: int, std: float) -> np.ndarray:
    """Q4_K: per 256 weights d, dmin (fp16), 8 six-bit scales and mins (12 bytes), 128 bytes of
    nibbles; weight = d*sc_j*q - dmin*m_j. With dmin = 8d and m_j ~ 7.5 sc_j / 8 a sub-block
    is centred near zero; uniform q has deviation 4.6, so d = std / (4.6 * mean sc)."""
    nb = cols // 256
    sc = rng.integers(16, 64, size=(rows, nb, 8))
    mn = np.clip(np.rint(sc * 7.5 / 8 + rng.integers(-2, 3, size=sc.shape)), 0, 63).astype(np.int64)
    d = np.full((rows, nb), std / (4.6 * 40.0))
    blocks = np.zeros((rows, nb, 144), dtype=np.uint8)
    blocks[:, :, 0:2] = half_bytes(d)
    blocks[:, :, 2:4] = half_bytes(8.0 * d)
    s = np.zeros((rows, nb, 12), dtype=np.int64)
    s[..., 0:4] = (sc[..., 0:4] & 63) | ((sc[..., 4:8] >> 4) << 6)   # low scales + top bits of high
    s[..., 4:8] = (mn[..., 0:4] & 63) | ((mn[..., 4:8] >> 4) << 6)   # low mins + top bits of high
    s[..., 8:12] = (sc[..., 4:8] & 15) | ((mn[..., 4:8] & 15) << 4)  # low nibbles of high ones
    blocks[:, :, 4:16] = s.astype(np.uint8)
    blocks[:, :, 16:144] = rng.integers(0, 256, size=(rows, nb, 128), dtype=np.uint8)
    return blocks.reshape(rows, nb * 144)


def q6_k_blocks(rng, rows: int, cols: int, std: float) -> np.ndarray:
    """Q6_K: per 256 weights 128 bytes low nibbles, 64 bytes high 2-bit pairs, 16 int8 scales,
    fp16 d; weight = d*sc_j*(q - 32). Uniform q in 0..63 has deviation 18.5; signed scales of
    magnitude 8..32 (mean 20) give d = std / (18.5 * 20), a normal fp16 for every width here."""
    nb = cols // 256
    mag = rng.integers(8, 33, size=(rows, nb, 16))
    sc = np.where(rng.random(size=mag.shape) < 0.5, -mag, mag).astype(np.int8)
    d = np.full((rows, nb), std / (18.5 * 20.0))
    blocks = np.zeros((rows, nb, 210), dtype=np.uint8)
    blocks[:, :, 0:192] = rng.integers(0, 256, size=(rows, nb, 192), dtype=np.uint8)
    blocks[:, :, 192:208] = sc.view(np.uint8)
    blocks[:, :, 208:210] = half_bytes(d)
    return blocks.reshape(rows, nb * 210)


def matrix(rng, qtype: T, rows: int, cols: int, std: float) -> np.ndarray:
    """A [rows, cols] weight in qtype: float32/float16 values or uint8 block bytes."""
    if qtype == T.Q4_K:
        return q4_k_blocks(rng, rows, cols, std)
    if qtype == T.Q6_K:
        return q6_k_blocks(rng, rows, cols, std)
    w = (rng.standard_normal((rows, cols)) * std).astype(np.float32)
    if qtype == T.F32:
        return w
    if qtype == T.F16:
        return w.astype(np.float16)
    return np.ascontiguousarray(quantize(w, qtype))  # BF16, Q8_0, Q4_0, Q4_1: uint8 bytes


def read_tokenizer(source: str) -> list[tuple[str, object, GGUFValueType, GGUFValueType | None]]:
    """The tokenizer.* metadata of a GGUF (vocabulary, merges, token types, pre-tokenizer,
    special ids, chat template) as (key, value, type, array element type). Parsing it is the
    slow part (~3 s), so callers that write several models read it once."""
    reader = GGUFReader(source)
    fields = []
    for key, field in reader.fields.items():
        if key.startswith("tokenizer."):
            vtype = field.types[0]
            sub = field.types[-1] if vtype == GGUFValueType.ARRAY else None
            fields.append((key, field.contents(), vtype, sub))
    return fields


def tensor_types(mix: str = "a", all_type: str | None = None, overrides: dict[str, str] | None = None,
                 layers: int = 3) -> dict[str, str]:
    """Type name per matrix ("token_embd", "output", "blk.L.ROLE"): the mix, or all_type for
    every matrix, then the overrides."""
    m = MIXES[mix]
    types: dict[str, str] = {"token_embd": m["token_embd"], "output": m["output"]}
    for layer in range(layers):
        for role, name in zip(ROLES, m["layers"][layer % len(m["layers"])]):
            types[f"blk.{layer}.{role}"] = name
    if all_type:
        types = {k: all_type for k in types}
    for key, value in (overrides or {}).items():
        key = key.removesuffix(".weight")
        if key not in types or value not in TYPES:
            raise ValueError(f"unknown tensor {key!r} or type {value!r} (tensors: {', '.join(types)})")
        types[key] = value
    return types


ARCHS = ["llama", "qwen2", "qwen3", "qwen3moe", "qwen35", "qwen35moe", "qwen3next"]
HYBRID_ARCHS = {"qwen35", "qwen35moe", "qwen3next"}
# The role whose type each Gated DeltaNet matrix takes.
DELTA_NET_ROLES = {"attn_qkv": "attn_q", "attn_gate": "attn_v", "ssm_beta": "attn_k", "ssm_alpha": "attn_k",
                   "ssm_out": "attn_output", "ssm_in": "attn_q", "ssm_ba": "attn_k"}


@dataclass
class Shape:
    d_model: int = 256
    heads: int = 4
    kv_heads: int = 2
    ffn: int = 768
    layers: int = 3
    rope_base: float = 10000.0
    context: int = 2048
    arch: str = "llama"
    head_dim: int | None = None  # None: d_model // heads (and no key_length/value_length keys)
    eps: float = 1e-5            # layer_norm_rms_epsilon
    experts: int = 0             # qwen3moe: experts per layer (ffn is then each expert's width)
    experts_used: int = 0        # and how many each token is routed to
    # RoPE stretching stated in the file (llama.cpp's rope.scaling.* keys): "yarn" or "linear",
    # its factor and (YaRN) the original window; None: none stated.
    rope_scaling: str | None = None
    rope_scale: float = 1.0
    rope_original_context: int = 0
    # More metadata, as (key, value) pairs: str written as a string, float as float32, int as
    # uint32 (tests of how files with unusual keys are read).
    extra_keys: tuple = ()
    # qwen35: RoPE on the first rope_dims of each head (None: all), a full-attention layer every
    # full_attention_interval-th, Gated DeltaNet of delta_k_heads / delta_v_heads heads of
    # delta_head, a conv of conv_kernel taps.
    rope_dims: int | None = None
    full_attention_interval: int = 0
    delta_k_heads: int = 0
    delta_v_heads: int = 0
    delta_head: int = 0
    conv_kernel: int = 4
    shared_ffn: int = 0  # qwen35moe: the shared expert's width
    mtp: bool = False    # qwen35/qwen35moe: a multi-token-prediction block after the layers (blk.<layers>.*)

    def recurrent(self, layer: int) -> bool:
        return self.full_attention_interval > 0 and (layer + 1) % self.full_attention_interval != 0

    @property
    def dim(self) -> int:
        return self.head_dim or self.d_model // self.heads


# The qwen models of the tests: as llama, but 2 layers, ffn 512, rope base 1e6 (as Qwen2.5 and
# Qwen3), and for qwen3 a head_dim (128) that is not d_model / heads (64), as in Qwen3. The
# RMSNorm epsilon is 1e-3 (real qwen: 1e-6) so that an engine that ignores it (say a constant
# epsilon in the q/k norm) differs by far more than float32 rounding.
QWEN_SHAPES = {
    "qwen2": Shape(ffn=512, layers=2, rope_base=1e6, arch="qwen2", eps=1e-3),
    "qwen3": Shape(ffn=512, layers=2, rope_base=1e6, arch="qwen3", head_dim=128, eps=1e-3),
    # qwen3's attention; each layer's FFN 8 experts of width 256, 2 per token (Qwen3-MoE: 128
    # of 768, 8 per token).
    "qwen3moe": Shape(ffn=256, layers=2, rope_base=1e6, arch="qwen3moe", head_dim=128, eps=1e-3, experts=8,
                      experts_used=2),
    # Qwen3.5's head sizes (attention 256 with 64 rotated, DeltaNet 128) at a small width;
    # layers DeltaNet, attention, DeltaNet, attention.
    "qwen35": Shape(ffn=512, layers=4, rope_base=1e7, arch="qwen35", head_dim=256, eps=1e-3, rope_dims=64,
                    full_attention_interval=2, delta_k_heads=2, delta_v_heads=4, delta_head=128),
    "qwen35moe": Shape(ffn=256, layers=4, rope_base=1e7, arch="qwen35moe", head_dim=256, eps=1e-3, rope_dims=64,
                       full_attention_interval=2, delta_k_heads=2, delta_v_heads=4, delta_head=128, experts=8,
                       experts_used=2, shared_ffn=256),
    "qwen3next": Shape(ffn=256, layers=4, rope_base=1e7, arch="qwen3next", head_dim=256, eps=1e-3, rope_dims=64,
                       full_attention_interval=2, delta_k_heads=2, delta_v_heads=4, delta_head=128, experts=8,
                       experts_used=2, shared_ffn=256),
}


def make_tensors(types: dict[str, str], vocab: int, shape: Shape, seed: int,
                 favour: int | None = None) -> list[tuple[str, np.ndarray, T | None]]:
    """(name, data, raw type) of every tensor in file order; data is float32/float16 values or
    uint8 block bytes (then the raw type says which). With `favour` (a token id; float
    embedding and output only) the model writes that token after any input: every token's
    embedding gets +8 on dimension 0, which the layers' small updates never flip, and only
    the favoured token's output row reads that dimension (x50)."""
    rng = np.random.default_rng(seed)
    d, ffn = shape.d_model, shape.ffn
    qw = shape.heads * shape.dim      # q width (and attn_output's input width)
    kv = shape.kv_heads * shape.dim
    out = []

    def add(name: str, key: str, rows: int, cols: int, std: float):
        qtype = TYPES[types[key]]
        if cols % 256 and qtype in (T.Q4_K, T.Q6_K):
            raise ValueError(f"{name}: width {cols} is not a multiple of 256, as {qtype.name} needs")
        data = matrix(rng, qtype, rows, cols, std)
        out.append((name, data, qtype if data.dtype == np.uint8 else None))

    def experts(name: str, key: str, rows: int, cols: int, std: float):
        """A stack [experts][rows][cols] in the role's type, each expert drawn as one matrix."""
        qtype = TYPES[types[key]]
        stack = np.stack([matrix(rng, qtype, rows, cols, std) for _ in range(shape.experts)])
        out.append((name, stack, qtype if stack.dtype == np.uint8 else None))

    def norm(name: str, size: int = d, lo: float = 0.8, hi: float = 1.2):
        out.append((name, rng.uniform(lo, hi, size=size).astype(np.float32), None))

    def bias(name: str, size: int):
        out.append((name, (rng.standard_normal(size) * 0.5).astype(np.float32), None))

    # The embedding feeds an RMSNorm, so its scale only sets how much each token's own vector
    # weighs against what the layers add to the residual stream (of order 1 each).
    add("token_embd.weight", "token_embd", vocab, d, 1.0)
    if favour is not None:
        if out[-1][1].dtype == np.uint8:
            raise ValueError("--favour-token needs a float token_embd and output (e.g. --all F32)")
        out[-1][1][:, 0] += 8.0
    shapes = {"attn_q": (qw, d), "attn_k": (kv, d), "attn_v": (kv, d), "attn_output": (d, qw),
              "ffn_gate": (ffn, d), "ffn_up": (ffn, d), "ffn_down": (d, ffn)}
    hybrid = shape.arch in HYBRID_ARCHS

    def hybrid_ffn(p: str, layer: int):
        """A qwen35/qwen35moe layer's FFN: dense, or routed experts and a shared expert."""
        if not shape.experts:
            for role in ("ffn_gate", "ffn_up", "ffn_down"):
                rows, cols = shapes[role]
                add(p + role + ".weight", p + role, rows, cols, 1.0 / math.sqrt(cols))
            return
        out.append((p + "ffn_gate_inp.weight",
                    (rng.standard_normal((shape.experts, d)) * 2.0 / math.sqrt(d)).astype(np.float32), None))
        if layer % 2:  # each expert's [gate; up] as one matrix
            qtype = TYPES[types[p + "ffn_gate"]]
            stack = np.stack([matrix(rng, qtype, 2 * ffn, d, 1.0 / math.sqrt(d)) for _ in range(shape.experts)])
            out.append((p + "ffn_gate_up_exps.weight", stack, qtype if stack.dtype == np.uint8 else None))
        else:
            experts(p + "ffn_gate_exps.weight", p + "ffn_gate", ffn, d, 1.0 / math.sqrt(d))
            experts(p + "ffn_up_exps.weight", p + "ffn_up", ffn, d, 1.0 / math.sqrt(d))
        experts(p + "ffn_down_exps.weight", p + "ffn_down", d, ffn, 1.0 / math.sqrt(ffn))
        sw = shape.shared_ffn
        for role, rows, cols in (("ffn_gate", sw, d), ("ffn_up", sw, d), ("ffn_down", d, sw)):
            add(p + role + "_shexp.weight", p + role, rows, cols, 1.0 / math.sqrt(cols))
        out.append((p + "ffn_gate_inp_shexp.weight", (rng.standard_normal(d) / math.sqrt(d)).astype(np.float32), None))

    if hybrid:
        shapes["attn_q"] = (2 * qw, d)  # [q | gate] per head
    for layer in range(shape.layers):
        p = f"blk.{layer}."
        norm(p + "attn_norm.weight")
        if shape.recurrent(layer):
            delta_net_tensors(p, shape, rng, out, add, norm, fused_in=shape.arch == "qwen3next" and layer >= 2)
            hybrid_ffn(p, layer)
            norm(p + "post_attention_norm.weight")
            continue
        for role in ROLES:
            rows, cols = shapes[role]
            if hybrid and role.startswith("ffn_"):
                continue  # below
            if shape.experts and role.startswith("ffn_"):
                experts(p + role + "_exps.weight", p + role, rows, cols, 1.0 / math.sqrt(cols))
                continue
            add(p + role + ".weight", p + role, rows, cols, 1.0 / math.sqrt(cols))
            if shape.arch == "qwen2" and role in ("attn_q", "attn_k", "attn_v"):
                bias(p + role + ".bias", rows)
        if shape.experts and not hybrid:
            # The router (F32, as llama.cpp's quantizer leaves it): logits of deviation ~2, so
            # each token has clear favourites and near ties between its 2nd and 3rd are rare.
            out.append((p + "ffn_gate_inp.weight",
                        (rng.standard_normal((shape.experts, d)) * 2.0 / math.sqrt(d)).astype(np.float32), None))
        if shape.arch in ("qwen3", "qwen3moe") or hybrid:
            # A wider range than the layer norms so that a missing or misplaced one shows.
            norm(p + "attn_q_norm.weight", shape.dim, 0.5, 1.5)
            norm(p + "attn_k_norm.weight", shape.dim, 0.5, 1.5)
        if hybrid:
            hybrid_ffn(p, layer)
        norm(p + ("post_attention_norm.weight" if hybrid else "ffn_norm.weight"))
    if shape.mtp:
        mtp_tensors(f"blk.{shape.layers}.", shape, shapes, add, norm, hybrid_ffn)
    norm("output_norm.weight")
    add("output.weight", "output", vocab, d, 2.0 / math.sqrt(d))
    if favour is not None:
        if out[-1][1].dtype == np.uint8:
            raise ValueError("--favour-token needs a float token_embd and output (e.g. --all F32)")
        out[-1][1][:, 0] = 0.0
        out[-1][1][favour, 0] = 50.0
    return out


def mtp_tensors(p: str, shape: Shape, shapes: dict, add, norm, hybrid_ffn) -> None:
    """Qwen3.5's multi-token-prediction block in llama.cpp's layout: a gated full-attention
    layer of the model's kind (its own FFN: dense, or experts and a shared expert) behind
    nextn.eh_proj, which projects [enorm(embedding) | hnorm(hidden)] (2 d_model wide); its
    own shared head norm, the model's embedding table and LM head."""
    d = shape.d_model
    norm(p + "attn_norm.weight")
    for role in ("attn_q", "attn_k", "attn_v", "attn_output"):
        rows, cols = shapes[role]
        add(p + role + ".weight", p + role, rows, cols, 1.0 / math.sqrt(cols))
    norm(p + "attn_q_norm.weight", shape.dim, 0.5, 1.5)
    norm(p + "attn_k_norm.weight", shape.dim, 0.5, 1.5)
    hybrid_ffn(p, shape.layers)
    norm(p + "post_attention_norm.weight")
    add(p + "nextn.eh_proj.weight", p + "attn_q", d, 2 * d, 1.0 / math.sqrt(2 * d))
    norm(p + "nextn.enorm.weight")
    norm(p + "nextn.hnorm.weight")
    norm(p + "nextn.shared_head_norm.weight")


def delta_net_tensors(p: str, shape: Shape, rng, out, add, norm, fused_in: bool = False) -> None:
    """A Gated DeltaNet layer's tensors in llama.cpp's qwen35 or qwen3next layout (see the
    module docstring); fused_in: qwen3next's older ssm_in instead of attn_qkv and attn_gate."""
    d, kw = shape.d_model, shape.delta_k_heads * shape.delta_head
    vw, vh = shape.delta_v_heads * shape.delta_head, shape.delta_v_heads
    if fused_in:
        matrices = [("ssm_in", 2 * kw + 2 * vw, d)]
    else:
        matrices = [("attn_qkv", 2 * kw + vw, d), ("attn_gate", vw, d)]
    if shape.arch == "qwen3next":
        matrices.append(("ssm_ba", 2 * vh, d))
    else:
        matrices += [("ssm_beta", vh, d), ("ssm_alpha", vh, d)]
    for name, rows, cols in matrices:
        add(p + name + ".weight", p + DELTA_NET_ROLES[name], rows, cols, 1.0 / math.sqrt(cols))
    out.append((p + "ssm_conv1d.weight",
                (rng.standard_normal((2 * kw + vw, shape.conv_kernel)) * 0.5).astype(np.float32), None))
    out.append((p + "ssm_dt.bias", rng.uniform(-2.0, 0.0, size=vh).astype(np.float32), None))
    out.append((p + "ssm_a", (-np.exp(rng.uniform(math.log(0.05), 0.0, size=vh))).astype(np.float32), None))
    norm(p + "ssm_norm.weight", shape.delta_head, 0.5, 1.5)
    add(p + "ssm_out.weight", p + DELTA_NET_ROLES["ssm_out"], d, vw, 1.0 / math.sqrt(vw))


def write_gguf(path: str, tensors, shape: Shape, tokenizer, name: str, vocab: int) -> None:
    """Writes the model; with tokenizer=None the tokenizer metadata is left out (a twin file
    for the numpy reference, which reads only tensors and hyperparameters, and loads fast)."""
    writer = GGUFWriter(path, shape.arch)
    writer.add_name(name)
    writer.add_block_count(shape.layers + (1 if shape.mtp else 0))
    if shape.mtp:
        writer.add_uint32(f"{shape.arch}.nextn_predict_layers", 1)
    writer.add_context_length(shape.context)
    writer.add_embedding_length(shape.d_model)
    writer.add_feed_forward_length(shape.ffn)
    if shape.experts:
        writer.add_expert_count(shape.experts)
        writer.add_expert_used_count(shape.experts_used)
        writer.add_expert_feed_forward_length(shape.ffn)
    writer.add_head_count(shape.heads)
    writer.add_head_count_kv(shape.kv_heads)
    writer.add_rope_freq_base(shape.rope_base)
    writer.add_layer_norm_rms_eps(shape.eps)
    writer.add_rope_dimension_count(shape.rope_dims or shape.dim)
    if shape.shared_ffn:
        writer.add_uint32(f"{shape.arch}.expert_shared_feed_forward_length", shape.shared_ffn)
    if shape.arch in HYBRID_ARCHS:
        if shape.arch != "qwen3next":
            # Qwen3.5's MRoPE sections, which llama.cpp requires (text positions make them plain RoPE).
            writer.add_array(f"{shape.arch}.rope.dimension_sections", [11, 11, 10, 0])
        writer.add_uint32(f"{shape.arch}.full_attention_interval", shape.full_attention_interval)
        writer.add_ssm_conv_kernel(shape.conv_kernel)
        writer.add_ssm_state_size(shape.delta_head)
        writer.add_ssm_group_count(shape.delta_k_heads)
        writer.add_ssm_time_step_rank(shape.delta_v_heads)
        writer.add_ssm_inner_size(shape.delta_v_heads * shape.delta_head)
    if shape.rope_scaling:
        writer.add_string(f"{shape.arch}.rope.scaling.type", shape.rope_scaling)
        writer.add_float32(f"{shape.arch}.rope.scaling.factor", shape.rope_scale)
        if shape.rope_original_context:
            writer.add_uint32(f"{shape.arch}.rope.scaling.original_context_length", shape.rope_original_context)
    for key, value in shape.extra_keys:
        if isinstance(value, str):
            writer.add_string(key, value)
        elif isinstance(value, float):
            writer.add_float32(key, value)
        else:
            writer.add_uint32(key, value)
    if shape.head_dim is not None:
        writer.add_key_length(shape.head_dim)
        writer.add_value_length(shape.head_dim)
    writer.add_vocab_size(vocab)
    for key, value, vtype, sub in tokenizer or []:
        writer.add_key_value(key, value, vtype, sub_type=sub)
    for tensor_name, data, raw in tensors:
        writer.add_tensor(tensor_name, data, raw_dtype=raw)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def with_tokens(tokenizer, added: list[str], chat_template: str | None):
    """The tokenizer metadata with `added` tokens appended to the vocabulary (user-defined, as
    converters mark a model's added text tokens such as Qwen3's <think>) and, if given, another
    chat template."""
    out = []
    for key, value, vtype, sub in tokenizer:
        if key == "tokenizer.ggml.tokens":
            value = list(value) + added
        elif key == "tokenizer.ggml.token_type":
            value = list(value) + [4] * len(added)  # USER_DEFINED
        elif key == "tokenizer.ggml.scores":
            value = list(value) + [0.0] * len(added)
        elif key == "tokenizer.chat_template" and chat_template is not None:
            value = chat_template
        out.append((key, value, vtype, sub))
    return out


def make_model(path: str, tokenizer, types: dict[str, str], shape: Shape = Shape(), seed: int = DEFAULT_SEED,
               name: str = "random-llama", reference_twin: str | None = None, favour: str | None = None) -> None:
    """Writes the model to path (and, if asked, the same tensors without tokenizer to
    reference_twin)."""
    tokens = next(v for k, v, _, _ in tokenizer if k == "tokenizer.ggml.tokens")
    vocab = len(tokens)
    favour_id = None
    if favour is not None:
        if favour not in tokens:
            raise ValueError(f"--favour-token {favour!r} is not in the vocabulary")
        favour_id = list(tokens).index(favour)
    tensors = make_tensors(types, vocab, shape, seed, favour_id)
    write_gguf(path, tensors, shape, tokenizer, name, vocab)
    if reference_twin:
        write_gguf(reference_twin, tensors, shape, None, name, vocab)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokenizer-from", required=True, help="GGUF whose tokenizer and chat template are copied")
    ap.add_argument("--out", required=True)
    ap.add_argument("--arch", choices=ARCHS, default="llama",
                    help="qwen2/qwen3 default to their QWEN_SHAPES (flags below override)")
    ap.add_argument("--mix", choices=sorted(MIXES), default="a")
    ap.add_argument("--all", choices=sorted(TYPES), help="every matrix this type (overrides --mix)")
    ap.add_argument("--set", action="append", default=[], metavar="TENSOR=TYPE",
                    help="one tensor's type, e.g. blk.1.ffn_down=Q4_K (repeatable)")
    ap.add_argument("--seed", type=int, default=DEFAULT_SEED)
    ap.add_argument("--d-model", type=int)
    ap.add_argument("--heads", type=int)
    ap.add_argument("--kv-heads", type=int)
    ap.add_argument("--head-dim", type=int, help="written as key_length/value_length (default d_model/heads)")
    ap.add_argument("--ffn", type=int)
    ap.add_argument("--layers", type=int)
    ap.add_argument("--experts", type=int, help="qwen3moe/qwen35moe: experts per layer (--ffn is then each one's width)")
    ap.add_argument("--experts-used", type=int, help="and how many each token is routed to")
    ap.add_argument("--shared-ffn", type=int, help="qwen35moe/qwen3next: the shared expert's width")
    ap.add_argument("--rope-base", type=float)
    ap.add_argument("--context", type=int)
    ap.add_argument("--eps", type=float, help="RMSNorm epsilon (default 1e-5; qwen 1e-3)")
    ap.add_argument("--rope-scaling", choices=["yarn", "linear"], help="RoPE stretching stated in the file")
    ap.add_argument("--rope-scale", type=float, help="its factor")
    ap.add_argument("--rope-original-context", type=int, help="YaRN: the original window")
    ap.add_argument("--add-token", action="append", default=[], metavar="TEXT",
                    help="a token appended to the vocabulary, user-defined (repeatable; e.g. <think>)")
    ap.add_argument("--chat-template", metavar="PATH",
                    help="the chat template instead of the tokenizer's: a .jinja file or a golden JSON's 'template'")
    ap.add_argument("--delta-heads", metavar="K,V", help="hybrids: the Gated DeltaNet's key and value heads")
    ap.add_argument("--delta-head-dim", type=int, help="hybrids: the Gated DeltaNet's head size")
    ap.add_argument("--attention-every", type=int, help="hybrids: every N-th layer is full attention")
    ap.add_argument("--mtp", action="store_true", default=None,
                    help="qwen35/qwen35moe: a multi-token-prediction block after the layers (llama.cpp's nextn layout)")
    ap.add_argument("--favour-token", metavar="TEXT",
                    help="the model writes this token after any input (float embedding and output only)")
    args = ap.parse_args(argv)
    shape = QWEN_SHAPES.get(args.arch, Shape())
    shape = Shape(**{**shape.__dict__, **{k: v for k, v in {
        "d_model": args.d_model, "heads": args.heads, "kv_heads": args.kv_heads, "head_dim": args.head_dim,
        "ffn": args.ffn, "layers": args.layers, "rope_base": args.rope_base, "context": args.context,
        "eps": args.eps, "rope_scaling": args.rope_scaling, "rope_scale": args.rope_scale,
        "rope_original_context": args.rope_original_context, "experts": args.experts,
        "experts_used": args.experts_used, "delta_head": args.delta_head_dim, "shared_ffn": args.shared_ffn,
        "full_attention_interval": args.attention_every, "mtp": args.mtp,
        "delta_k_heads": int(args.delta_heads.split(",")[0]) if args.delta_heads else None,
        "delta_v_heads": int(args.delta_heads.split(",")[1]) if args.delta_heads else None,
    }.items() if v is not None}})
    if args.mtp and args.arch not in ("qwen35", "qwen35moe"):
        sys.exit(f"--mtp: {args.arch} has no MTP block in llama.cpp's layout")
    if (args.delta_heads or args.delta_head_dim or args.attention_every) and args.arch not in HYBRID_ARCHS:
        sys.exit(f"--delta-heads / --delta-head-dim / --attention-every: {args.arch} is no hybrid")
    if (args.experts or args.experts_used) and not QWEN_SHAPES.get(args.arch, Shape()).experts:
        sys.exit(f"--experts / --experts-used: {args.arch} has no mixture of experts")
    if shape.experts_used > shape.experts:
        sys.exit(f"--experts-used {shape.experts_used} is more than the {shape.experts} experts")
    try:
        types = tensor_types(args.mix, args.all, dict(item.partition("=")[::2] for item in args.set),
                             shape.layers + (1 if shape.mtp else 0))
        template = None
        if args.chat_template:
            with open(args.chat_template, encoding="utf-8") as f:
                template = f.read()
            if args.chat_template.endswith(".json"):
                template = json.loads(template)["template"]
        tokenizer = with_tokens(read_tokenizer(args.tokenizer_from), args.add_token, template)
        make_model(args.out, tokenizer, types, shape, args.seed, name=f"random-{args.arch}-{args.all or args.mix}",
                   favour=args.favour_token)
    except ValueError as e:
        sys.exit(str(e))
    print(f"wrote {args.out}: " + ", ".join(f"{k}={v}" for k, v in types.items()), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
