"""Independent numpy reference forward pass for llama-family GGUF models.

This file is the yardstick the engine is measured against, so it is written to be
read top to bottom and checked by eye rather than to be fast: weights are
dequantized once to float32 with the `gguf` package, every step below is plain
numpy, and nothing is shared with the C++ code.

    m = load("SmolLM2-135M-Instruct.Q4_1.gguf")
    m.logits([1, 2, 3])            # float32 logits of the last position, shape [vocab]
    m.greedy([1, 2, 3], 64)        # (64 token ids, 64 top-2 logit margins)
    m.logits(ids, input_embeddings={5: v})   # position 5's embedding replaced by v (images)

Two optional knobs reproduce the rounding a quantized engine does, so that the
tolerance of tests/e2e/test_reference.py can be calibrated from measurements:
  act_quant: round the input of every matmul with a quantized weight to int8 per
             32-element block (q = round(x/d), d = max|x|/127, d kept as float16),
             as ggml does before its Q4_1 x Q8_1 / Q8_0 x Q8_0 integer dot products.
  kv_f16:    store the attention keys and values as float16, as a float16 KV cache does.

Run as a script for a sanity check (greedy continuation of a chat prompt):
    python tests/reference/llama_ref.py --model M.gguf --prompt "What is the capital of France?"
"""
from __future__ import annotations

import argparse
import math
import sys
from dataclasses import dataclass

import numpy as np
from gguf import GGMLQuantizationType, GGUFReader
from gguf.quants import dequantize

# Architectures whose GGUF Q/K weights are stored permuted for ggml's "normal" RoPE
# (rotate adjacent pairs); the converter leaves qwen weights unpermuted, so ggml runs
# them with NEOX RoPE (rotate the first half against the second half).
NEOX_ROPE_ARCHS = {"qwen2", "qwen3", "qwen3moe", "qwen35", "qwen35moe", "qwen3next"}
HYBRID_ARCHS = {"qwen35", "qwen35moe", "qwen3next"}
UNQUANTIZED = {GGMLQuantizationType.F32, GGMLQuantizationType.F16, GGMLQuantizationType.BF16}


@dataclass
class Config:
    arch: str
    n_layer: int
    d_model: int
    n_head: int
    n_kv_head: int
    head_dim: int
    n_rot: int  # how many leading dims of each head RoPE rotates (== head_dim here)
    ffn: int
    vocab: int
    rope_base: float
    eps: float
    # RoPE stretching (transformers' rope_parameters): None, or {"type": "yarn" | "linear",
    # "factor": f, "original_context": n, "beta_fast": 32, "beta_slow": 1}.
    rope_scaling: dict | None = None


class Linear:
    """y = x @ W.T for a GGUF weight stored [out, in]; remembers whether it was quantized,
    because only matmuls against quantized weights have their input rounded to int8."""

    def __init__(self, w: np.ndarray, quantized: bool, bias: np.ndarray | None = None):
        self.w = w
        self.quantized = quantized
        self.bias = bias

    def __call__(self, x: np.ndarray, act_quant: bool) -> np.ndarray:
        if act_quant and self.quantized:
            x = quantize_activations(x)
        y = x @ self.w.T
        return y if self.bias is None else y + self.bias


def quantize_activations(x: np.ndarray) -> np.ndarray:
    """Round x to what an int8 block (Q8_0/Q8_1) holds: per 32 values, d = max|x|/127
    stored as float16, q = round-half-away-from-zero(x/d). Returns q*d in float32."""
    blocks = x.astype(np.float32).reshape(*x.shape[:-1], -1, 32)
    d = np.abs(blocks).max(axis=-1, keepdims=True) / np.float32(127)
    inv = np.divide(1.0, d, out=np.zeros_like(d), where=d > 0)
    scaled = blocks * inv
    q = np.sign(scaled) * np.floor(np.abs(scaled) + 0.5)  # C roundf, not banker's rounding
    return (q * d.astype(np.float16).astype(np.float32)).reshape(x.shape)


def rms_norm(x: np.ndarray, w: np.ndarray, eps: float) -> np.ndarray:
    x64 = x.astype(np.float64)  # the mean of squares is cheap to do exactly
    scale = 1.0 / np.sqrt(np.mean(x64 * x64, axis=-1, keepdims=True) + eps)
    return (x64 * scale).astype(np.float32) * w


def rope_frequencies(cfg: Config) -> tuple[np.ndarray, float]:
    """RoPE's inverse frequencies and the factor on cos/sin, as transformers computes them
    (modeling_rope_utils: default, linear, and yarn with its correction range truncated to
    whole dims), in float64."""
    dim = cfg.n_rot
    pos_freqs = cfg.rope_base ** (np.arange(0, dim, 2, dtype=np.float64) / dim)
    scaling = cfg.rope_scaling
    if not scaling:
        return 1.0 / pos_freqs, 1.0
    factor = float(scaling["factor"])
    multiplier = scaling.get("attention_multiplier", 1.0)
    if scaling["type"] == "linear":
        return 1.0 / (factor * pos_freqs), multiplier
    assert scaling["type"] == "yarn", scaling
    beta_fast, beta_slow = scaling.get("beta_fast", 32.0), scaling.get("beta_slow", 1.0)
    original = scaling["original_context"]

    def correction_dim(rotations: float) -> float:
        return dim * math.log(original / (rotations * 2 * math.pi)) / (2 * math.log(cfg.rope_base))

    low = max(math.floor(correction_dim(beta_fast)), 0)
    high = min(math.ceil(correction_dim(beta_slow)), dim - 1)
    if low == high:
        high += 0.001
    ramp = np.clip((np.arange(dim // 2, dtype=np.float64) - low) / (high - low), 0.0, 1.0)
    extrapolation = 1.0 - ramp  # the share of each pair's own (unstretched) frequency
    inv_freq = 1.0 / (factor * pos_freqs) * (1.0 - extrapolation) + 1.0 / pos_freqs * extrapolation
    attention_factor = 0.1 * math.log(factor) + 1.0 if factor > 1 else 1.0
    return inv_freq, attention_factor * multiplier


def rope(x: np.ndarray, positions: np.ndarray, cfg: Config) -> np.ndarray:
    """Rotate x [tokens, heads, head_dim] by position. Pair i is rotated by the angle
    pos * base^(-2i/n_rot); which two elements form pair i depends on the layout."""
    half = cfg.n_rot // 2
    inv_freq, attention_factor = rope_frequencies(cfg)
    angle = positions.astype(np.float64)[:, None] * inv_freq[None, :]  # [tokens, half]
    cos = (np.cos(angle) * attention_factor)[:, None, :].astype(np.float32)
    sin = (np.sin(angle) * attention_factor)[:, None, :].astype(np.float32)
    out = x.copy()
    if cfg.arch in NEOX_ROPE_ARCHS:
        a, b = x[..., :half], x[..., half:cfg.n_rot]
        out[..., :half] = a * cos - b * sin
        out[..., half:cfg.n_rot] = a * sin + b * cos
    else:  # ggml LLAMA_ROPE_TYPE_NORM: (x[2i], x[2i+1])
        a, b = x[..., 0:cfg.n_rot:2], x[..., 1:cfg.n_rot:2]
        out[..., 0:cfg.n_rot:2] = a * cos - b * sin
        out[..., 1:cfg.n_rot:2] = a * sin + b * cos
    return out


def silu(x: np.ndarray) -> np.ndarray:
    return x / (1.0 + np.exp(-x))


@dataclass
class Layer:
    attn_norm: np.ndarray
    wq: Linear
    wk: Linear
    wv: Linear
    wo: Linear
    q_norm: np.ndarray | None  # qwen3: RMSNorm over each head before RoPE
    k_norm: np.ndarray | None
    ffn_norm: np.ndarray
    w_gate: Linear | None  # a dense SwiGLU FFN, or
    w_up: Linear | None
    w_down: Linear | None
    router: np.ndarray | None = None     # qwen3moe: [experts, d_model] and
    experts: list | None = None          # per expert (gate, up, down) Linears
    experts_used: int = 0
    delta_net: "DeltaNet | None" = None  # qwen35: a Gated DeltaNet instead of attention
    output_gate: bool = False            # qwen35's attention: wq gives [q | gate] per head
    shared_expert: tuple | None = None   # qwen35moe: (gate, up, down) Linears of every token's expert,
    shared_gate: np.ndarray | None = None  # scaled by sigmoid(h . shared_gate)

    def ffn(self, h: np.ndarray, aq: bool) -> np.ndarray:
        if self.experts is None:
            return self.w_down(silu(self.w_gate(h, aq)) * self.w_up(h, aq), aq)
        out = mixture_of_experts(self, h, aq)
        if self.shared_expert is not None:
            gate, up, down = self.shared_expert
            scale = 1.0 / (1.0 + np.exp(-(h.astype(np.float64) @ self.shared_gate.astype(np.float64))))
            out = out + (scale[:, None] * down(silu(gate(h, aq)) * up(h, aq), aq)).astype(np.float32)
        return out


@dataclass
class DeltaNet:
    """Qwen3.5's Gated DeltaNet (transformers' Qwen3_5GatedDeltaNet with its recurrent rule,
    torch_recurrent_gated_delta_rule), on the tensors as llama.cpp's converter writes them:
    ssm_a is -exp(A_log), the conv kernel [channels, taps], and the value heads reordered so
    that value head j reads key head j % k_heads (transformers: j // (v_heads // k_heads) in
    its own order; the converter's reordering makes the two the same model).

    Qwen3-Next (grouped): transformers' Qwen3NextGatedDeltaNet, whose value heads stay in the
    model's order, value head j reading key head j // (v_heads // k_heads); its beta and alpha
    come from one projection (w_ba) holding each key head's [beta | alpha], and in files from
    before llama.cpp split it, q, k, v and z from one (w_qkvz) holding each key head's
    [q | k | v | z] (transformers' fix_query_key_value_ordering)."""
    w_qkv: Linear | None    # -> [q (k_heads x head_k) | k (same) | v (v_heads x head_v)]
    w_z: Linear | None      # -> [v_heads x head_v], the output gate
    w_beta: Linear | None   # -> [v_heads]
    w_alpha: Linear | None  # -> [v_heads]
    w_out: Linear
    conv: np.ndarray  # [channels, taps]
    dt_bias: np.ndarray
    a: np.ndarray     # -exp(A_log)
    norm: np.ndarray  # [head_v]
    k_heads: int
    v_heads: int
    head_k: int
    head_v: int
    grouped: bool = False
    w_qkvz: Linear | None = None  # instead of w_qkv and w_z
    w_ba: Linear | None = None    # instead of w_beta and w_alpha

    def __call__(self, h: np.ndarray, state: dict, eps: float, aq: bool) -> np.ndarray:
        """h [n, d_model] normalised input; state {"conv": [taps-1, channels], "S": [v_heads,
        head_k, head_v]} carried between calls (created zero on the first)."""
        n, taps = h.shape[0], self.conv.shape[1]
        kw = self.k_heads * self.head_k
        per_key = self.v_heads // self.k_heads
        if self.w_qkvz is not None:
            group = self.w_qkvz(h, aq).reshape(n, self.k_heads, 2 * self.head_k + 2 * per_key * self.head_v)
            qg, kg, vg, zg = np.split(group, [self.head_k, 2 * self.head_k, 2 * self.head_k + per_key * self.head_v],
                                      axis=-1)
            mixed = np.concatenate([qg.reshape(n, -1), kg.reshape(n, -1), vg.reshape(n, -1)], axis=1)
            z = zg.reshape(n, self.v_heads, self.head_v)
        else:
            mixed = self.w_qkv(h, aq)  # [n, channels]
            z = self.w_z(h, aq).reshape(n, self.v_heads, self.head_v)
        if self.w_ba is not None:
            ba = self.w_ba(h, aq).reshape(n, self.k_heads, 2 * per_key)
            b, a = ba[..., :per_key].reshape(n, self.v_heads), ba[..., per_key:].reshape(n, self.v_heads)
        else:
            b, a = self.w_beta(h, aq), self.w_alpha(h, aq)
        if "conv" not in state:
            state["conv"] = np.zeros((taps - 1, mixed.shape[1]), dtype=np.float32)
            state["S"] = np.zeros((self.v_heads, self.head_k, self.head_v), dtype=np.float64)
        padded = np.concatenate([state["conv"], mixed])  # causal: taps-1 earlier inputs first
        state["conv"] = padded[-(taps - 1):]
        conv = np.stack([(padded[t:t + taps] * self.conv.T).sum(axis=0) for t in range(n)])
        conv = silu(conv)
        q = conv[:, :kw].reshape(n, self.k_heads, self.head_k).astype(np.float64)
        k = conv[:, kw:2 * kw].reshape(n, self.k_heads, self.head_k).astype(np.float64)
        v = conv[:, 2 * kw:].reshape(n, self.v_heads, self.head_v).astype(np.float64)
        q = q / np.sqrt((q * q).sum(axis=-1, keepdims=True) + eps)  # l2norm
        k = k / np.sqrt((k * k).sum(axis=-1, keepdims=True) + eps)
        heads = np.arange(self.v_heads)
        key_head = heads // per_key if self.grouped else heads % self.k_heads
        q, k = q[:, key_head], k[:, key_head]  # [n, v_heads, head_k]
        q = q / math.sqrt(self.head_k)
        beta = 1.0 / (1.0 + np.exp(-b.astype(np.float64)))  # [n, v_heads]
        x = a.astype(np.float64) + self.dt_bias
        g = self.a * np.where(x > 20, x, np.log1p(np.exp(np.minimum(x, 20))))  # a * softplus
        S = state["S"]
        out = np.empty((n, self.v_heads, self.head_v))
        for t in range(n):
            S = S * np.exp(g[t])[:, None, None]
            remembered = np.einsum("hk,hkv->hv", k[t], S)
            delta = (v[t] - remembered) * beta[t][:, None]
            S = S + np.einsum("hk,hv->hkv", k[t], delta)
            out[t] = np.einsum("hk,hkv->hv", q[t], S)
        state["S"] = S
        out = out.astype(np.float32)
        normed = out / np.sqrt((out * out).mean(axis=-1, keepdims=True) + eps) * self.norm
        return self.w_out((normed * silu(z)).reshape(n, self.v_heads * self.head_v), aq)


def mixture_of_experts(layer: Layer, h: np.ndarray, aq: bool) -> np.ndarray:
    """Qwen3-MoE's sparse block as transformers writes it: softmax over all router logits (in
    float), the top-k probabilities renormalised to sum to 1 (norm_topk_prob), and the sum of
    the chosen experts' SwiGLU outputs weighted by them."""
    logits = h.astype(np.float64) @ layer.router.T.astype(np.float64)  # [n, experts]
    probs = np.exp(logits - logits.max(axis=-1, keepdims=True))
    probs /= probs.sum(axis=-1, keepdims=True)
    top = np.argsort(-probs, axis=-1, kind="stable")[:, :layer.experts_used]
    out = np.zeros_like(h)
    for t in range(h.shape[0]):
        chosen = probs[t, top[t]]
        chosen = chosen / chosen.sum()
        for e, w in zip(top[t], chosen):
            gate, up, down = layer.experts[e]
            row = h[t:t + 1]
            out[t] += np.float32(w) * down(silu(gate(row, aq)) * up(row, aq), aq)[0]
    return out


class KVCache:
    """Keys and values per layer, [positions, kv_heads, head_dim], grown by appending."""

    def __init__(self, n_layer: int):
        self.k: list[np.ndarray | None] = [None] * n_layer
        self.v: list[np.ndarray | None] = [None] * n_layer
        self.states: list[dict] = [{} for _ in range(n_layer)]  # Gated DeltaNet layers' recurrent states
        self.length = 0

    def append(self, layer: int, k: np.ndarray, v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        if self.k[layer] is None:
            self.k[layer], self.v[layer] = k, v
        else:
            self.k[layer] = np.concatenate([self.k[layer], k])
            self.v[layer] = np.concatenate([self.v[layer], v])
        return self.k[layer], self.v[layer]


@dataclass
class MtpBlock:
    """Qwen3.5's multi-token-prediction block (llama.cpp's nextn tensors): a gated attention
    layer behind eh_proj, which reads [enorm(embedding of x_q) | hnorm(h_{q-1})]."""
    layer: Layer
    eh_proj: Linear
    enorm: np.ndarray
    hnorm: np.ndarray
    head_norm: np.ndarray
    embed: np.ndarray  # [vocab, d_model]
    head: Linear


class Model:
    def __init__(self, cfg, tok_embd, layers, out_norm, output, act_quant=False, kv_f16=False, mtp=None):
        self.cfg = cfg
        self.tok_embd = tok_embd  # [vocab, d_model] float32
        self.layers: list[Layer] = layers
        self.out_norm = out_norm
        self.output: Linear = output
        self.act_quant = act_quant
        self.kv_f16 = kv_f16
        self.mtp: MtpBlock | None = mtp

    # --- one forward pass over new tokens, appending to the cache -----------------------
    def forward(self, token_ids, cache: KVCache, input_embeddings=None, hidden: dict | None = None) -> np.ndarray:
        """Runs the tokens at positions cache.length.. and returns the last position's logits.
        input_embeddings {position: vector [d_model]} replaces those positions' token
        embeddings (how a vision model splices image features in); positions count from the
        start of the sequence, those outside this call's tokens are ignored. `hidden`, a dict,
        receives each layer's output rows [n, d_model] under the layer's index."""
        cfg, aq = self.cfg, self.act_quant
        n = len(token_ids)
        positions = np.arange(cache.length, cache.length + n)
        x = self.tok_embd[np.asarray(token_ids)]  # [n, d_model] (a copy: fancy indexing)
        for pos, vec in (input_embeddings or {}).items():
            if cache.length <= pos < cache.length + n:
                x[pos - cache.length] = np.asarray(vec, dtype=np.float32)
        for li, layer in enumerate(self.layers):
            h = rms_norm(x, layer.attn_norm, cfg.eps)
            if layer.delta_net is not None:
                x = x + layer.delta_net(h, cache.states[li], cfg.eps, aq)
                x = x + layer.ffn(rms_norm(x, layer.ffn_norm, cfg.eps), aq)
                if hidden is not None:
                    hidden[li] = x.copy()
                continue
            gate = None
            if layer.output_gate:  # [q | gate] per head
                qg = layer.wq(h, aq).reshape(n, cfg.n_head, 2 * cfg.head_dim)
                q, gate = qg[..., :cfg.head_dim], qg[..., cfg.head_dim:].reshape(n, cfg.n_head * cfg.head_dim)
            else:
                q = layer.wq(h, aq).reshape(n, cfg.n_head, cfg.head_dim)
            k = layer.wk(h, aq).reshape(n, cfg.n_kv_head, cfg.head_dim)
            v = layer.wv(h, aq).reshape(n, cfg.n_kv_head, cfg.head_dim)
            if layer.q_norm is not None:
                q = rms_norm(q, layer.q_norm, cfg.eps)
                k = rms_norm(k, layer.k_norm, cfg.eps)
            q, k = rope(q, positions, cfg), rope(k, positions, cfg)
            if self.kv_f16:
                k, v = k.astype(np.float16).astype(np.float32), v.astype(np.float16).astype(np.float32)
            keys, values = cache.append(li, k, v)
            attended = self.attention(q, keys, values, positions)
            if gate is not None:
                attended = attended / (1.0 + np.exp(-gate))  # * sigmoid(gate)
            x = x + layer.wo(attended, aq)
            x = x + layer.ffn(rms_norm(x, layer.ffn_norm, cfg.eps), aq)
            if hidden is not None:
                hidden[li] = x.copy()
        cache.length += n
        last = rms_norm(x[-1:], self.out_norm, cfg.eps)
        return self.output(last, aq)[0].astype(np.float32)

    def attention(self, q, keys, values, positions) -> np.ndarray:
        """Causal grouped-query attention: query head h reads kv head h // group."""
        cfg = self.cfg
        group = cfg.n_head // cfg.n_kv_head
        n, total = q.shape[0], keys.shape[0]
        # Query at position p may see cache positions 0..p.
        visible = np.arange(total)[None, :] <= positions[:, None]  # [n, total]
        out = np.empty((n, cfg.n_head, cfg.head_dim), dtype=np.float32)
        scale = 1.0 / math.sqrt(cfg.head_dim)
        for h in range(cfg.n_head):
            kv = h // group
            scores = (q[:, h, :] @ keys[:, kv, :].T).astype(np.float64) * scale
            scores = np.where(visible, scores, -np.inf)
            p = np.exp(scores - scores.max(axis=-1, keepdims=True))
            p /= p.sum(axis=-1, keepdims=True)
            out[:, h, :] = (p @ values[:, kv, :]).astype(np.float32)
        return out.reshape(n, cfg.n_head * cfg.head_dim)

    def mtp_guesses(self, token_ids, trunk_rows: np.ndarray, steps: int, context: bool = True) -> np.ndarray:
        """The MTP block's logits after token_ids [steps, vocab]. trunk_rows: the trunk's last
        layer output (before the output norm) at positions 0 .. len - 2. The block's entry at
        position q reads x_q beside h_{q-1} = out_norm(trunk row q - 1) (what predicted x_q),
        so entries exist for positions 1 .. len - 1, each attending causally to those before;
        the last token's entry gives the first guess, and each later step reads the previous
        guess beside the block's own normed output, at the next position. context=False: without
        the entries before the last token (to show a check sees them)."""
        cfg, aq, m = self.cfg, self.act_quant, self.mtp
        layer, hd, eps = m.layer, cfg.head_dim, cfg.eps
        last = len(token_ids) - 1
        keys = np.zeros((0, cfg.n_kv_head, hd), np.float32)
        values = keys.copy()
        key_positions = np.zeros(0, np.int64)

        def entries(tokens, hidden, positions):
            nonlocal keys, values, key_positions
            n = len(tokens)
            e = rms_norm(m.embed[np.asarray(tokens)], m.enorm, eps)
            x = m.eh_proj(np.concatenate([e, rms_norm(hidden, m.hnorm, eps)], axis=-1).astype(np.float32), aq)
            a = rms_norm(x, layer.attn_norm, eps)
            qg = layer.wq(a, aq).reshape(n, cfg.n_head, 2 * hd)
            q, gate = qg[..., :hd], qg[..., hd:].reshape(n, cfg.n_head * hd)
            k = rms_norm(layer.wk(a, aq).reshape(n, cfg.n_kv_head, hd), layer.k_norm, eps)
            v = layer.wv(a, aq).reshape(n, cfg.n_kv_head, hd)
            q, k = rope(rms_norm(q, layer.q_norm, eps), positions, cfg), rope(k, positions, cfg)
            keys, values = np.concatenate([keys, k]), np.concatenate([values, v])
            key_positions = np.concatenate([key_positions, positions])
            group = cfg.n_head // cfg.n_kv_head
            attended = np.empty((n, cfg.n_head, hd), np.float32)
            visible = key_positions[None, :] <= positions[:, None]
            for h in range(cfg.n_head):
                scores = (q[:, h, :] @ keys[:, h // group, :].T).astype(np.float64) / math.sqrt(hd)
                scores = np.where(visible, scores, -np.inf)
                p = np.exp(scores - scores.max(axis=-1, keepdims=True))
                attended[:, h, :] = ((p / p.sum(axis=-1, keepdims=True)) @ values[:, h // group, :]).astype(np.float32)
            x = x + layer.wo(attended.reshape(n, -1) / (1.0 + np.exp(-gate)), aq)
            x = x + layer.ffn(rms_norm(x, layer.ffn_norm, eps), aq)
            return rms_norm(x, m.head_norm, eps)

        h = rms_norm(trunk_rows[:last], self.out_norm, eps)
        if last > 1 and context:
            entries(token_ids[1:last], h[:last - 1], np.arange(1, last))
        rows, token, hidden = [], token_ids[last], h[last - 1:last]
        for step in range(steps):
            out = entries([token], hidden, np.array([last + step]))
            rows.append(m.head(out, aq)[0].astype(np.float32))
            token, hidden = int(np.argmax(rows[-1])), out
        return np.stack(rows)

    # --- the API the tests use ----------------------------------------------------------
    def logits(self, token_ids, input_embeddings=None) -> np.ndarray:
        return self.forward(list(token_ids), KVCache(self.cfg.n_layer), input_embeddings)

    def greedy(self, token_ids, n: int, keep_logits: bool = False, input_embeddings=None):
        """Greedy continuation of n tokens (never stops early). Returns (tokens, margins):
        per step, the gap between the best and second-best logit, since a small gap is a
        near tie that rounding differences may legitimately flip. With keep_logits, also
        the logits of every step, as a third element. input_embeddings: as in forward, for
        the prompt."""
        cache = KVCache(self.cfg.n_layer)
        out = self.forward(list(token_ids), cache, input_embeddings)
        tokens, margins, steps = [], [], []
        for step in range(n):
            top2 = np.argsort(out)[-2:]
            best = int(top2[1])
            tokens.append(best)
            margins.append(float(out[top2[1]] - out[top2[0]]))
            if keep_logits:
                steps.append(out)
            if step + 1 < n:
                out = self.forward([best], cache)
        return (tokens, margins, steps) if keep_logits else (tokens, margins)


# --- loading ---------------------------------------------------------------------------
def _field(reader: GGUFReader, key: str, default=None):
    f = reader.fields.get(key)
    return default if f is None else f.contents()


def _rope_scaling(reader: GGUFReader, arch: str) -> dict | None:
    """llama.cpp's reading of the rope.scaling keys: no type but a factor is linear; the factor
    from rope.scaling.factor or the older rope.scale_linear; YaRN's betas 0 or absent as 32 / 1."""
    kind = _field(reader, f"{arch}.rope.scaling.type", "linear")
    factor = float(_field(reader, f"{arch}.rope.scaling.factor", _field(reader, f"{arch}.rope.scale_linear", 1.0)))
    attn = float(_field(reader, f"{arch}.rope.scaling.attn_factor", 1.0))
    if kind == "none" or (factor == 1.0 and attn == 1.0):
        return None
    return {"type": kind, "factor": factor, "attention_multiplier": attn,
            "original_context": int(_field(reader, f"{arch}.rope.scaling.original_context_length",
                                           _field(reader, f"{arch}.context_length"))),
            "beta_fast": float(_field(reader, f"{arch}.rope.scaling.yarn_beta_fast", 0.0)) or 32.0,
            "beta_slow": float(_field(reader, f"{arch}.rope.scaling.yarn_beta_slow", 0.0)) or 1.0}


def load(path: str, act_quant: bool = False, kv_f16: bool = False, rope_scaling: dict | None = None) -> Model:
    """rope_scaling: RoPE stretching to apply (as in Config) when the file states none."""
    reader = GGUFReader(path)
    arch = _field(reader, "general.architecture")
    n_head = int(_field(reader, f"{arch}.attention.head_count"))
    d_model = int(_field(reader, f"{arch}.embedding_length"))
    head_dim = int(_field(reader, f"{arch}.attention.key_length", d_model // n_head))
    tensors = {t.name: t for t in reader.tensors}

    def dense(name):  # dequantized [out, in] float32 (GGUF dims are reversed numpy dims)
        t = tensors[name]
        w = dequantize(t.data, t.tensor_type).astype(np.float32)
        return w.reshape([int(d) for d in reversed(t.shape)])

    def linear(name, bias_name=None):
        bias = dense(bias_name) if bias_name in tensors else None
        return Linear(dense(name), tensors[name].tensor_type not in UNQUANTIZED, bias)

    def expert_linears(name):  # a stack [experts, out, in] as one Linear per expert
        quantized = tensors[name].tensor_type not in UNQUANTIZED
        return [Linear(w, quantized) for w in dense(name)]

    def ffn_fields(p: str) -> dict:
        """The FFN of layer p: dense, or experts (each expert's gate and up apart, or as one
        [gate; up] matrix in newer files) with, for qwen35moe, a shared expert."""
        if p + "ffn_gate_inp.weight" not in tensors:
            return {"w_gate": linear(p + "ffn_gate.weight"), "w_up": linear(p + "ffn_up.weight"),
                    "w_down": linear(p + "ffn_down.weight")}
        if p + "ffn_gate_up_exps.weight" in tensors:
            quantized = tensors[p + "ffn_gate_up_exps.weight"].tensor_type not in UNQUANTIZED
            fused = dense(p + "ffn_gate_up_exps.weight")  # [experts, 2 * ffn, d_model]: gate rows, then up
            half = fused.shape[1] // 2
            gates = [Linear(w[:half], quantized) for w in fused]
            ups = [Linear(w[half:], quantized) for w in fused]
        else:
            gates, ups = expert_linears(p + "ffn_gate_exps.weight"), expert_linears(p + "ffn_up_exps.weight")
        fields = {"w_gate": None, "w_up": None, "w_down": None, "router": dense(p + "ffn_gate_inp.weight"),
                  "experts": list(zip(gates, ups, expert_linears(p + "ffn_down_exps.weight"))),
                  "experts_used": int(_field(reader, f"{arch}.expert_used_count", 0))}
        if p + "ffn_gate_inp_shexp.weight" in tensors:
            fields["shared_expert"] = (linear(p + "ffn_gate_shexp.weight"), linear(p + "ffn_up_shexp.weight"),
                                       linear(p + "ffn_down_shexp.weight"))
            fields["shared_gate"] = dense(p + "ffn_gate_inp_shexp.weight").reshape(-1)
        return fields

    tok_embd = dense("token_embd.weight")
    nextn = int(_field(reader, f"{arch}.nextn_predict_layers", 0) or 0)  # (MTP blocks after the trunk)
    cfg = Config(
        arch=arch,
        n_layer=int(_field(reader, f"{arch}.block_count")) - nextn,
        d_model=d_model,
        n_head=n_head,
        n_kv_head=int(_field(reader, f"{arch}.attention.head_count_kv", n_head)),
        head_dim=head_dim,
        n_rot=int(_field(reader, f"{arch}.rope.dimension_count", head_dim)),
        ffn=int(_field(reader, f"{arch}.expert_feed_forward_length", 0) or _field(reader, f"{arch}.feed_forward_length")),
        vocab=tok_embd.shape[0],
        rope_base=float(_field(reader, f"{arch}.rope.freq_base", 10000.0)),
        eps=float(_field(reader, f"{arch}.attention.layer_norm_rms_epsilon")),
        rope_scaling=_rope_scaling(reader, arch) or rope_scaling,
    )
    layers = []
    for i in range(cfg.n_layer):
        p = f"blk.{i}."
        opt = lambda name: dense(p + name) if p + name in tensors else None  # noqa: E731
        if p + "ssm_out.weight" in tensors:  # qwen35, qwen3next: a Gated DeltaNet layer
            head = int(_field(reader, f"{arch}.ssm.state_size"))
            v_heads = int(_field(reader, f"{arch}.ssm.time_step_rank"))
            some = lambda name: linear(p + name) if p + name in tensors else None  # noqa: E731
            layers.append(Layer(
                attn_norm=dense(p + "attn_norm.weight"), wq=None, wk=None, wv=None, wo=None, q_norm=None, k_norm=None,
                ffn_norm=dense(p + "post_attention_norm.weight"), **ffn_fields(p),
                delta_net=DeltaNet(
                    w_qkv=some("attn_qkv.weight"), w_z=some("attn_gate.weight"),
                    w_beta=some("ssm_beta.weight"), w_alpha=some("ssm_alpha.weight"),
                    w_qkvz=some("ssm_in.weight"), w_ba=some("ssm_ba.weight"), grouped=arch == "qwen3next",
                    w_out=linear(p + "ssm_out.weight"), conv=dense(p + "ssm_conv1d.weight"),
                    dt_bias=dense(p + "ssm_dt.bias").astype(np.float64), a=dense(p + "ssm_a").astype(np.float64),
                    norm=dense(p + "ssm_norm.weight"), k_heads=int(_field(reader, f"{arch}.ssm.group_count")),
                    v_heads=v_heads, head_k=head,
                    head_v=int(_field(reader, f"{arch}.ssm.inner_size")) // v_heads)))
            continue
        layers.append(Layer(
            attn_norm=dense(p + "attn_norm.weight"),
            wq=linear(p + "attn_q.weight", p + "attn_q.bias"),
            wk=linear(p + "attn_k.weight", p + "attn_k.bias"),
            wv=linear(p + "attn_v.weight", p + "attn_v.bias"),
            wo=linear(p + "attn_output.weight"),
            q_norm=opt("attn_q_norm.weight"),
            k_norm=opt("attn_k_norm.weight"),
            ffn_norm=dense(p + ("post_attention_norm.weight" if arch in HYBRID_ARCHS else "ffn_norm.weight")),
            **ffn_fields(p),
            output_gate=arch in HYBRID_ARCHS,
        ))
    # Tied embeddings: without output.weight the embedding matrix is also the output head.
    if "output.weight" in tensors:
        output = linear("output.weight")
    else:
        output = Linear(tok_embd, tensors["token_embd.weight"].tensor_type not in UNQUANTIZED)
    out_norm = dense("output_norm.weight")
    mtp = None
    if nextn:
        p = f"blk.{cfg.n_layer}."
        mtp = MtpBlock(
            layer=Layer(attn_norm=dense(p + "attn_norm.weight"), wq=linear(p + "attn_q.weight"),
                        wk=linear(p + "attn_k.weight"), wv=linear(p + "attn_v.weight"),
                        wo=linear(p + "attn_output.weight"), q_norm=dense(p + "attn_q_norm.weight"),
                        k_norm=dense(p + "attn_k_norm.weight"), ffn_norm=dense(p + "post_attention_norm.weight"),
                        **ffn_fields(p), output_gate=True),
            eh_proj=linear(p + "nextn.eh_proj.weight"), enorm=dense(p + "nextn.enorm.weight"),
            hnorm=dense(p + "nextn.hnorm.weight"),
            head_norm=dense(p + "nextn.shared_head_norm.weight") if p + "nextn.shared_head_norm.weight" in tensors
            else out_norm,
            embed=dense(p + "nextn.embed_tokens.weight") if p + "nextn.embed_tokens.weight" in tensors else tok_embd,
            head=linear(p + "nextn.shared_head_head.weight") if p + "nextn.shared_head_head.weight" in tensors
            else output)
    return Model(cfg, tok_embd, layers, out_norm, output, act_quant, kv_f16, mtp)


def with_rounding(model: Model, act_quant: bool, kv_f16: bool = False) -> Model:
    """The same weights with other rounding knobs (no second dequantization)."""
    return Model(model.cfg, model.tok_embd, model.layers, model.out_norm, model.output,
                 act_quant, kv_f16, model.mtp)


def sanity_tokenizer(path: str):
    """A `tokenizers` BPE built from the GGUF's own vocabulary and merges, for the sanity
    check only. (transformers' gguf_file= loader needs torch, which is not installed.)
    Pre-tokenization as for SmolLM2: every digit alone, then the GPT-2 byte-level split."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

    reader = GGUFReader(path)
    tokens = _field(reader, "tokenizer.ggml.tokens")
    merges = [tuple(m.split(" ", 1)) for m in _field(reader, "tokenizer.ggml.merges")]
    tok = Tokenizer(models.BPE({t: i for i, t in enumerate(tokens)}, merges))
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
    ])
    tok.decoder = decoders.ByteLevel()
    control = [t for t, kind in zip(tokens, _field(reader, "tokenizer.ggml.token_type")) if kind == 3]
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in control])
    return tok


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--prompt", default="What is the capital of France?")
    ap.add_argument("-n", type=int, default=64)
    args = ap.parse_args(argv)
    tok = sanity_tokenizer(args.model)
    text = ("<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face"
            f"<|im_end|>\n<|im_start|>user\n{args.prompt}<|im_end|>\n<|im_start|>assistant\n")
    ids = tok.encode(text).ids
    model = load(args.model)
    tokens, margins = model.greedy(ids, args.n)
    print(text + tok.decode(tokens, skip_special_tokens=False))
    print(f"prompt ids: {ids}\ngenerated: {tokens}\nmin top-2 margin: {min(margins):.4f}",
          file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
