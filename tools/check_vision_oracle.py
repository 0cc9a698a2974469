#!/usr/bin/env python3
"""Checks tests/reference/vision_ref.py (and llama_ref's image splicing) against transformers.

The random SmolVLM pair of tools/make_random_vlm.py is loaded into transformers'
Idefics3ForConditionalGeneration, built from an Idefics3Config made from the GGUF metadata,
and run on CPU in float64 (or float32) on the same pixels as the numpy references:
  1. image features: model.model.vision_model + model.model.connector (and, where the
     installed version's get_image_features works, that too) against
     vision_ref.image_embeddings;
  2. text: the last position's logits of the full model (input_ids with
     <fake><global-img><image>*n<fake> and pixel_values) against
     llama_ref.load(text).logits(ids, input_embeddings=<vision_ref features at the <image>
     positions>) (skip with --no-text).
It prints max abs difference and relative error (max abs difference / max |reference|) and
exits 1 if one is above the relative tolerance: 1e-4 (float64) / 1e-3 (float32), --tol to
change. (llama_ref computes in float32: against a float64 transcription of HF's llama it
differs by ~5e-7 relative, well inside 1e-4.)

Needs torch + transformers (any version with Idefics3, 4.46 on), numpy, gguf; no network.
    python tools/check_vision_oracle.py --text /tmp/vlm/text.gguf --mmproj /tmp/vlm/mmproj.gguf \
        [--pixels p.npy] [--dtype float64|float32] [--no-text]
Without --pixels, uniform random pixels in [-1, 1] (--seed) are used (--save-pixels keeps them).

    python tools/check_vision_oracle.py --text ... --mmproj ... --self-test
runs without torch: the GGUF -> HF name/shape mapping (against gguf-py's own HF -> GGUF
TensorNameMap and the config's shapes), the q/k un-permutation (inverse of llama.cpp's
convert_hf_to_gguf LlamaModel.permute), and a float64 numpy transcription of HF's
LlamaForCausalLM (rotate_half RoPE on the un-permuted weights) with the image features
spliced in, against llama_ref; and, if transformers imports, the Idefics3Config it builds.

Weight mapping (GGUF -> HF state dict):
  v.patch_embd.*            model.vision_model.embeddings.patch_embedding.*   (4-D kernel as is)
  v.position_embd.weight    model.vision_model.embeddings.position_embedding.weight
  v.blk.N.attn_{q,k,v,out}  model.vision_model.encoder.layers.N.self_attn.{q,k,v,out}_proj
  v.blk.N.ln1 / ln2         ... .layer_norm1 / .layer_norm2
  v.blk.N.ffn_up / ffn_down ... .mlp.fc1 / .mlp.fc2 (swapped for legacy files, by shape)
  v.post_ln                 model.vision_model.post_layernorm
  mm.model.fc.weight        model.connector.modality_projection.proj.weight
  token_embd / output / output_norm   model.text_model.embed_tokens / lm_head / model.text_model.norm
  blk.N.attn_q / attn_k     ...self_attn.q_proj / k_proj, UN-PERMUTED (llama.cpp stores them
                            permuted for ggml's adjacent-pair RoPE; HF rotates halves)
  blk.N.attn_v / attn_output / ffn_gate / ffn_up / ffn_down / attn_norm / ffn_norm
                            ...v_proj / o_proj / mlp.gate_proj / up_proj / down_proj /
                            input_layernorm / post_attention_layernorm
"""
from __future__ import annotations

import argparse
import math
import os
import sys

import numpy as np
from gguf import GGUFReader
from gguf.quants import dequantize

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "tests", "reference"))
import llama_ref  # noqa: E402
import vision_ref  # noqa: E402


def _field(reader, key, default=None):
    f = reader.fields.get(key)
    return default if f is None else f.contents()


def _dense(t) -> np.ndarray:
    return dequantize(t.data, t.tensor_type).astype(np.float64).reshape([int(d) for d in reversed(t.shape)])


# --- metadata -> configuration -------------------------------------------------------------
def read_meta(text_path: str, mmproj_path: str) -> dict:
    tr, vr = GGUFReader(text_path), GGUFReader(mmproj_path)
    arch = _field(tr, "general.architecture")
    if arch != "llama":
        raise SystemExit(f"{text_path}: architecture {arch!r}, expected 'llama'")
    d = int(_field(tr, "llama.embedding_length"))
    heads = int(_field(tr, "llama.attention.head_count"))
    tensors = {t.name: t for t in tr.tensors}
    text = dict(
        vocab_size=int(tensors["token_embd.weight"].shape[1]),
        hidden_size=d,
        intermediate_size=int(_field(tr, "llama.feed_forward_length")),
        num_hidden_layers=int(_field(tr, "llama.block_count")),
        num_attention_heads=heads,
        num_key_value_heads=int(_field(tr, "llama.attention.head_count_kv", heads)),
        head_dim=int(_field(tr, "llama.attention.key_length", d // heads)),
        rms_norm_eps=float(_field(tr, "llama.attention.layer_norm_rms_epsilon")),
        rope_theta=float(_field(tr, "llama.rope.freq_base", 10000.0)),
        max_position_embeddings=int(_field(tr, "llama.context_length", 2048)),
        tie_word_embeddings="output.weight" not in tensors,
    )
    vision = dict(
        hidden_size=int(_field(vr, "clip.vision.embedding_length")),
        intermediate_size=int(_field(vr, "clip.vision.feed_forward_length")),
        num_hidden_layers=int(_field(vr, "clip.vision.block_count")),
        num_attention_heads=int(_field(vr, "clip.vision.attention.head_count")),
        image_size=int(_field(vr, "clip.vision.image_size")),
        patch_size=int(_field(vr, "clip.vision.patch_size")),
        layer_norm_eps=float(_field(vr, "clip.vision.attention.layer_norm_epsilon")),
    )
    scale = int(_field(vr, "clip.vision.projector.scale_factor", 2))
    proj = int(_field(vr, "clip.vision.projection_dim"))
    if proj != d:
        raise SystemExit(f"mmproj projection_dim {proj} != text embedding_length {d}")
    return dict(text=text, vision=vision, scale=scale, image_token_id=vision_ref.IMAGE_TOKEN_ID)


def make_config(meta: dict):
    """transformers.Idefics3Config (needs transformers, not torch)."""
    from transformers import Idefics3Config

    t = meta["text"]
    text_config = dict(model_type="llama", hidden_act="silu", attention_bias=False, mlp_bias=False,
                       pad_token_id=2, bos_token_id=1, eos_token_id=vision_ref.END_OF_UTTERANCE_ID, **t)
    vision_config = dict(num_channels=3, hidden_act="gelu_pytorch_tanh", attention_dropout=0.0,
                         **meta["vision"])
    config = Idefics3Config(vision_config=vision_config, text_config=text_config,
                            scale_factor=meta["scale"], image_token_id=meta["image_token_id"],
                            tie_word_embeddings=t["tie_word_embeddings"], use_cache=False)
    tc = config.text_config
    # transformers 5 keeps rope_theta in rope_parameters; 4.x as an attribute.
    theta = getattr(tc, "rope_theta", None)
    params = getattr(tc, "rope_parameters", None)
    if theta is None and isinstance(params, dict):
        theta = params.get("rope_theta")
    if theta is None or abs(float(theta) - t["rope_theta"]) > 1e-6 * t["rope_theta"]:
        raise SystemExit(f"rope theta did not reach the config ({theta} != {t['rope_theta']})")
    checks = {"text head_dim": (getattr(tc, "head_dim", t["head_dim"]), t["head_dim"]),
              "text vocab": (tc.vocab_size, t["vocab_size"]),
              "vision eps": (config.vision_config.layer_norm_eps, meta["vision"]["layer_norm_eps"]),
              "vision act": (config.vision_config.hidden_act, "gelu_pytorch_tanh"),
              "scale": (config.scale_factor, meta["scale"])}
    for what, (got, want) in checks.items():
        if got != want:
            raise SystemExit(f"config {what}: {got} != {want}")
    try:  # eager attention: the plainest arithmetic (sdpa would do in float64 as well)
        config._attn_implementation = "eager"
        config.vision_config._attn_implementation = "eager"
        config.text_config._attn_implementation = "eager"
    except Exception:  # noqa: BLE001
        pass
    return config


# --- GGUF tensors -> HF state dict (numpy) ------------------------------------------------
def unpermute(w: np.ndarray, n_head: int) -> np.ndarray:
    """Inverse of convert_hf_to_gguf's LlamaModel.permute (w.reshape(n_head, 2, rows/n_head/2,
    ...).swapaxes(1, 2).reshape(w.shape)): back from ggml's pair layout to HF's halves."""
    return w.reshape(n_head, w.shape[0] // n_head // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def permute(w: np.ndarray, n_head: int) -> np.ndarray:
    """convert_hf_to_gguf's LlamaModel.permute, for the self-test."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def vision_name_map(n_layer: int, legacy: bool) -> dict[str, str]:
    """GGUF name -> HF name for the mmproj."""
    m = {
        "v.patch_embd.weight": "model.vision_model.embeddings.patch_embedding.weight",
        "v.patch_embd.bias": "model.vision_model.embeddings.patch_embedding.bias",
        "v.position_embd.weight": "model.vision_model.embeddings.position_embedding.weight",
        "v.post_ln.weight": "model.vision_model.post_layernorm.weight",
        "v.post_ln.bias": "model.vision_model.post_layernorm.bias",
        "mm.model.fc.weight": "model.connector.modality_projection.proj.weight",
    }
    fc1, fc2 = ("ffn_down", "ffn_up") if legacy else ("ffn_up", "ffn_down")
    for i in range(n_layer):
        g, h = f"v.blk.{i}.", f"model.vision_model.encoder.layers.{i}."
        for ours, theirs in [("attn_q", "self_attn.q_proj"), ("attn_k", "self_attn.k_proj"),
                             ("attn_v", "self_attn.v_proj"), ("attn_out", "self_attn.out_proj"),
                             ("ln1", "layer_norm1"), ("ln2", "layer_norm2"),
                             (fc1, "mlp.fc1"), (fc2, "mlp.fc2")]:
            for s in ("weight", "bias"):
                m[f"{g}{ours}.{s}"] = f"{h}{theirs}.{s}"
    return m


def text_name_map(n_layer: int) -> dict[str, str]:
    m = {"token_embd.weight": "model.text_model.embed_tokens.weight",
         "output_norm.weight": "model.text_model.norm.weight",
         "output.weight": "lm_head.weight"}
    for i in range(n_layer):
        g, h = f"blk.{i}.", f"model.text_model.layers.{i}."
        for ours, theirs in [("attn_q", "self_attn.q_proj"), ("attn_k", "self_attn.k_proj"),
                             ("attn_v", "self_attn.v_proj"), ("attn_output", "self_attn.o_proj"),
                             ("ffn_gate", "mlp.gate_proj"), ("ffn_up", "mlp.up_proj"),
                             ("ffn_down", "mlp.down_proj"), ("attn_norm", "input_layernorm"),
                             ("ffn_norm", "post_attention_layernorm")]:
            m[f"{g}{ours}.weight"] = f"{h}{theirs}.weight"
    return m


def is_legacy_ffn(tensors: dict, d: int) -> bool:
    """llama.cpp's test: ffn_down whose input width (ggml ne[0]) is the embedding width."""
    t = tensors.get("v.blk.0.ffn_down.weight")
    return t is not None and int(t.shape[0]) == d and int(tensors["v.blk.0.ffn_up.weight"].shape[0]) != d


def hf_state_dict(text_path: str, mmproj_path: str, meta: dict, with_text: bool = True) -> dict[str, np.ndarray]:
    out = {}
    vr = GGUFReader(mmproj_path)
    vt = {t.name: t for t in vr.tensors}
    vmap = vision_name_map(meta["vision"]["num_hidden_layers"], is_legacy_ffn(vt, meta["vision"]["hidden_size"]))
    extra = set(vt) - set(vmap)
    if extra:
        raise SystemExit(f"mmproj tensors with no HF counterpart: {sorted(extra)}")
    for g, h in vmap.items():
        out[h] = _dense(vt[g])
    if with_text:
        t = meta["text"]
        tr = GGUFReader(text_path)
        tt = {x.name: x for x in tr.tensors}
        tmap = text_name_map(t["num_hidden_layers"])
        if t["tie_word_embeddings"]:
            del tmap["output.weight"]
        extra = set(tt) - set(tmap)
        if extra:
            raise SystemExit(f"text tensors with no HF counterpart: {sorted(extra)}")
        for g, h in tmap.items():
            w = _dense(tt[g])
            if g.endswith("attn_q.weight"):
                w = unpermute(w, t["num_attention_heads"])
            elif g.endswith("attn_k.weight"):
                w = unpermute(w, t["num_key_value_heads"])
            out[h] = w
    return out


def expected_shapes(meta: dict, with_text: bool = True) -> dict[str, tuple]:
    """HF parameter shapes implied by the configuration (what the torch model will have)."""
    v, s = meta["vision"], meta["scale"]
    D, F, P = v["hidden_size"], v["intermediate_size"], v["patch_size"]
    td = meta["text"]["hidden_size"]
    e = {"model.vision_model.embeddings.patch_embedding.weight": (D, 3, P, P),
         "model.vision_model.embeddings.patch_embedding.bias": (D,),
         "model.vision_model.embeddings.position_embedding.weight": ((v["image_size"] // P) ** 2, D),
         "model.vision_model.post_layernorm.weight": (D,), "model.vision_model.post_layernorm.bias": (D,),
         "model.connector.modality_projection.proj.weight": (td, D * s * s)}
    for i in range(v["num_hidden_layers"]):
        h = f"model.vision_model.encoder.layers.{i}."
        for p in ("q_proj", "k_proj", "v_proj", "out_proj"):
            e[h + f"self_attn.{p}.weight"], e[h + f"self_attn.{p}.bias"] = (D, D), (D,)
        for p in ("layer_norm1", "layer_norm2"):
            e[h + p + ".weight"], e[h + p + ".bias"] = (D,), (D,)
        e[h + "mlp.fc1.weight"], e[h + "mlp.fc1.bias"] = (F, D), (F,)
        e[h + "mlp.fc2.weight"], e[h + "mlp.fc2.bias"] = (D, F), (D,)
    if with_text:
        t = meta["text"]
        V, d, ff, hd = t["vocab_size"], t["hidden_size"], t["intermediate_size"], t["head_dim"]
        q, kv = t["num_attention_heads"] * hd, t["num_key_value_heads"] * hd
        e["model.text_model.embed_tokens.weight"] = (V, d)
        e["model.text_model.norm.weight"] = (d,)
        if not t["tie_word_embeddings"]:
            e["lm_head.weight"] = (V, d)
        for i in range(t["num_hidden_layers"]):
            h = f"model.text_model.layers.{i}."
            e.update({h + "self_attn.q_proj.weight": (q, d), h + "self_attn.k_proj.weight": (kv, d),
                      h + "self_attn.v_proj.weight": (kv, d), h + "self_attn.o_proj.weight": (d, q),
                      h + "mlp.gate_proj.weight": (ff, d), h + "mlp.up_proj.weight": (ff, d),
                      h + "mlp.down_proj.weight": (d, ff), h + "input_layernorm.weight": (d,),
                      h + "post_attention_layernorm.weight": (d,)})
    return e


# --- the prompt and the comparison --------------------------------------------------------
def prompt_ids(n_image_tokens: int) -> list[int]:
    """"<|im_start|>User:" + one image + "Describe<end_of_utterance>\\nAssistant:" in SmolVLM's
    vocabulary (ids as SmolLM2's tokenizer gives them)."""
    return [1, 11126, 42] + vision_ref.expand_image_tokens(n_image_tokens) + [37964, 49279, 198, 9519, 9531, 42]


def report(what: str, got: np.ndarray, want: np.ndarray, tol: float) -> bool:
    got, want = np.asarray(got, dtype=np.float64), np.asarray(want, dtype=np.float64)
    if got.shape != want.shape:
        print(f"FAIL {what}: shape {got.shape} != {want.shape}")
        return False
    diff = float(np.abs(got - want).max())
    rel = diff / max(float(np.abs(want).max()), 1e-30)
    ok = rel <= tol
    print(f"{'ok  ' if ok else 'FAIL'} {what}: max abs diff {diff:.3e}, relative {rel:.3e} (tolerance {tol:g})")
    return ok


# --- numpy transcription of HF's llama, for the self-test -------------------------------
def hf_llama_logits_numpy(sd: dict, meta: dict, ids: list[int], embeds: dict[int, np.ndarray]) -> np.ndarray:
    """LlamaForCausalLM as transformers writes it (RMSNorm, rotate_half RoPE with
    inv_freq = theta^(-2i/hd) on q/k as un-permuted, GQA, SiLU MLP), float64, last position."""
    t = meta["text"]
    H, KV, hd, eps = t["num_attention_heads"], t["num_key_value_heads"], t["head_dim"], t["rms_norm_eps"]
    pre = "model.text_model."
    x = sd[pre + "embed_tokens.weight"][ids].copy()
    for p, v in embeds.items():
        x[p] = v
    n = len(ids)
    inv = 1.0 / t["rope_theta"] ** (np.arange(0, hd, 2) / hd)
    ang = np.arange(n)[:, None] * inv[None, :]
    cos = np.concatenate([np.cos(ang)] * 2, axis=-1)[:, None, :]
    sin = np.concatenate([np.sin(ang)] * 2, axis=-1)[:, None, :]

    def rms(z, w):
        return z / np.sqrt((z * z).mean(-1, keepdims=True) + eps) * w

    def rot_half(z):
        return np.concatenate([-z[..., hd // 2:], z[..., :hd // 2]], axis=-1)

    mask = np.tril(np.ones((n, n), dtype=bool))
    for i in range(t["num_hidden_layers"]):
        L = f"{pre}layers.{i}."
        h = rms(x, sd[L + "input_layernorm.weight"])
        q = (h @ sd[L + "self_attn.q_proj.weight"].T).reshape(n, H, hd)
        k = (h @ sd[L + "self_attn.k_proj.weight"].T).reshape(n, KV, hd)
        v = (h @ sd[L + "self_attn.v_proj.weight"].T).reshape(n, KV, hd)
        q, k = q * cos + rot_half(q) * sin, k * cos + rot_half(k) * sin
        o = np.empty((n, H, hd))
        for hh in range(H):
            kk = hh // (H // KV)
            s = np.where(mask, q[:, hh] @ k[:, kk].T / math.sqrt(hd), -np.inf)
            e = np.exp(s - s.max(-1, keepdims=True))
            o[:, hh] = (e / e.sum(-1, keepdims=True)) @ v[:, kk]
        x = x + o.reshape(n, H * hd) @ sd[L + "self_attn.o_proj.weight"].T
        h = rms(x, sd[L + "post_attention_layernorm.weight"])
        g = h @ sd[L + "mlp.gate_proj.weight"].T
        x = x + ((g / (1 + np.exp(-g))) * (h @ sd[L + "mlp.up_proj.weight"].T)) @ sd[L + "mlp.down_proj.weight"].T
    last = rms(x[-1], sd[pre + "norm.weight"])
    head = sd.get("lm_head.weight", sd[pre + "embed_tokens.weight"])
    return last @ head.T


def self_test(args, meta, pixels) -> bool:
    import gguf

    ok = True
    sd = hf_state_dict(args.text, args.mmproj, meta, with_text=not args.no_text)
    want = expected_shapes(meta, with_text=not args.no_text)
    if set(sd) != set(want):
        print(f"FAIL names: missing {sorted(set(want) - set(sd))[:5]}, extra {sorted(set(sd) - set(want))[:5]}")
        ok = False
    bad = [k for k in want if k in sd and tuple(sd[k].shape) != want[k]]
    print(f"{'FAIL' if bad else 'ok  '} {len(sd)} HF tensors, shapes as the config implies" + (f": {bad[:5]}" if bad else ""))
    ok &= not bad
    # Our GGUF -> HF names against gguf-py's HF -> GGUF map (what the converter uses).
    vt = {t.name: t for t in GGUFReader(args.mmproj).tensors}
    nmap = gguf.get_tensor_name_map(gguf.MODEL_ARCH.MMPROJ, meta["vision"]["num_hidden_layers"])
    legacy = is_legacy_ffn(vt, meta["vision"]["hidden_size"])
    mism = []
    for g, h in vision_name_map(meta["vision"]["num_hidden_layers"], legacy).items():
        conv = nmap.get_name(h, try_suffixes=(".weight", ".bias"))
        if legacy:  # the converter of the time wrote fc1 as ffn_down
            conv = conv and conv.replace("ffn_up", "#").replace("ffn_down", "ffn_up").replace("#", "ffn_down")
        if conv != g:
            mism.append((g, h, conv))
    print(f"{'FAIL' if mism else 'ok  '} vision names agree with gguf-py's TensorNameMap" +
          (" (legacy ffn naming)" if legacy else "") + (f": {mism[:3]}" if mism else ""))
    ok &= not mism
    # Un-permutation.
    rng = np.random.default_rng(0)
    for nh in (1, 3, 4, 9):
        w = rng.standard_normal((nh * 64, 32))
        if not np.array_equal(unpermute(permute(w, nh), nh), w):
            print(f"FAIL unpermute is not permute's inverse (n_head {nh})")
            ok = False
    # Features and text.
    m = vision_ref.load(args.mmproj)
    feats = vision_ref.image_embeddings(m, pixels)
    print(f"     vision_ref: {feats.shape[0]} image tokens x {feats.shape[1]}")
    if not args.no_text:
        ids = prompt_ids(len(feats))
        emb = vision_ref.image_positions(ids, feats)
        hf = hf_llama_logits_numpy(sd, meta, ids, emb)
        ref = llama_ref.load(args.text).logits(ids, input_embeddings=emb)
        ok &= report("numpy HF-llama (un-permuted q/k, rotate_half) vs llama_ref, image spliced", hf, ref, 1e-3)
        wrong = hf_llama_logits_numpy({**sd, **{k: permute(v, meta["text"]["num_attention_heads"]) for k, v in sd.items()
                                                if k.endswith("q_proj.weight")}}, meta, ids, emb)
        rel = np.abs(wrong - ref).max() / np.abs(ref).max()
        print(f"{'ok  ' if rel > 1e-2 else 'FAIL'} (control: q left permuted differs by relative {rel:.2e})")
        ok &= rel > 1e-2
    try:
        config = make_config(meta)
        print(f"ok   Idefics3Config builds: text {type(config.text_config).__name__}, "
              f"vision {config.vision_config.hidden_size}x{config.vision_config.num_hidden_layers}, "
              f"scale {config.scale_factor}, image_token_id {config.image_token_id}")
    except ImportError as e:
        print(f"skip Idefics3Config ({e})")
    return ok


# --- the torch side ----------------------------------------------------------------------
def _norm_key(k: str) -> str:
    k = k.replace("language_model.", "text_model.")
    return k[len("model."):] if k.startswith("model.") else k


def build_hf_model(config, sd: dict, torch_dtype):
    import torch
    import transformers

    cls = getattr(transformers, "Idefics3ForConditionalGeneration")
    prev = torch.get_default_dtype()
    torch.set_default_dtype(torch_dtype)
    try:
        model = cls(config)
    finally:
        torch.set_default_dtype(prev)
    model = model.to(torch_dtype).eval()
    ours = {_norm_key(k): v for k, v in sd.items()}
    loaded, missing = set(), []
    with torch.no_grad():
        for name, param in model.named_parameters():
            arr = ours.get(_norm_key(name))
            if arr is None:
                missing.append(name)
                continue
            if tuple(param.shape) != arr.shape:
                raise SystemExit(f"{name}: model shape {tuple(param.shape)} != GGUF {arr.shape}")
            param.copy_(torch.from_numpy(np.ascontiguousarray(arr)).to(torch_dtype))
            loaded.add(_norm_key(name))
    unused = set(ours) - loaded
    # A tied lm_head is not a separate parameter; everything else must be loaded.
    unused.discard("lm_head.weight") if config.tie_word_embeddings else None
    if missing or unused:
        raise SystemExit(f"weights not loaded: model params without GGUF tensor {missing[:8]}, "
                         f"GGUF tensors without model param {sorted(unused)[:8]}")
    if "lm_head.weight" in ours:  # make sure no tying overwrote it
        got = model.lm_head.weight.detach().cpu().numpy()
        if not np.array_equal(got, ours["lm_head.weight"].astype(got.dtype)):
            raise SystemExit("lm_head.weight is not output.weight after loading (tied?)")
    print(f"     loaded {len(loaded)} tensors into {cls.__name__} (transformers {transformers.__version__})")
    return model


def _features_from(out, text_d: int):
    """get_image_features' result across versions: a tensor, a tuple, or a ModelOutput whose
    pooler_output (a list per image, or a tensor) holds the projected features."""
    import torch

    cand = getattr(out, "pooler_output", None)
    if cand is None and isinstance(out, (tuple, list)) and len(out) and not hasattr(out, "keys"):
        cand = out[0] if not isinstance(out[0], torch.Tensor) or out[0].shape[-1] == text_d else None
    if cand is None and isinstance(out, torch.Tensor):
        cand = out
    if isinstance(cand, (list, tuple)):
        cand = torch.cat([c.reshape(-1, c.shape[-1]) for c in cand])
    if cand is None or cand.shape[-1] != text_d:
        return None
    return cand.reshape(-1, text_d).detach().cpu().double().numpy()


def run_torch(args, meta, pixels) -> bool:
    import torch

    torch_dtype = torch.float64 if args.dtype == "float64" else torch.float32
    tol = args.tol or (1e-4 if args.dtype == "float64" else 1e-3)
    config = make_config(meta)
    sd = hf_state_dict(args.text, args.mmproj, meta, with_text=True)
    model = build_hf_model(config, sd, torch_dtype)
    S, P, td = meta["vision"]["image_size"], meta["vision"]["patch_size"], meta["text"]["hidden_size"]
    ref_feats = vision_ref.image_embeddings(args.mmproj, pixels)
    pv = torch.from_numpy(np.ascontiguousarray(pixels)).to(torch_dtype)[None]  # [1, 3, S, S]
    ok = True
    with torch.no_grad():
        # 1. vision tower + connector, called directly (stable across versions).
        pam = torch.ones((1, S // P, S // P), dtype=torch.bool)
        vm, conn = model.model.vision_model, model.model.connector
        try:
            vout = vm(pixel_values=pv, patch_attention_mask=pam)
        except TypeError:
            vout = vm(pv, pam)
        hidden = vout.last_hidden_state if hasattr(vout, "last_hidden_state") else vout[0]
        feats = conn(hidden).reshape(-1, td).double().numpy()
        ok &= report("image features: vision_model + connector vs vision_ref", feats, ref_feats, tol)
        # 1b. get_image_features where it exists and answers in a shape we understand.
        for owner in (model.model, model):
            fn = getattr(owner, "get_image_features", None)
            if fn is None:
                continue
            try:
                out = fn(pixel_values=pv[None], pixel_attention_mask=torch.ones((1, 1, S, S), dtype=torch.bool))
            except Exception as e:  # noqa: BLE001 (signatures differ across versions)
                print(f"     {type(owner).__name__}.get_image_features not usable here ({type(e).__name__}: {e})")
                continue
            f2 = _features_from(out, td)
            if f2 is None:
                print(f"     {type(owner).__name__}.get_image_features: unrecognised result {type(out).__name__}")
                continue
            ok &= report(f"image features: {type(owner).__name__}.get_image_features vs vision_ref", f2, ref_feats, tol)
            break
        if args.no_text:
            return ok
        # 2. the whole model's logits with the image in the prompt.
        ids = prompt_ids(len(ref_feats))
        input_ids = torch.tensor([ids])
        attn = torch.ones_like(input_ids)
        try:
            out = model(input_ids=input_ids, attention_mask=attn, pixel_values=pv[None],
                        pixel_attention_mask=torch.ones((1, 1, S, S), dtype=torch.bool), use_cache=False)
            logits = out.logits[0, -1].double().numpy()
            how = "model(input_ids, pixel_values)"
        except Exception as e:  # noqa: BLE001
            print(f"     full forward failed ({type(e).__name__}: {e}); splicing the features by hand")
            emb = model.get_input_embeddings()(input_ids).clone()
            mask = input_ids[0] == vision_ref.IMAGE_TOKEN_ID
            emb[0, mask] = torch.from_numpy(feats).to(emb.dtype)
            h = model.model.text_model(inputs_embeds=emb, attention_mask=attn, use_cache=False)
            h = h.last_hidden_state if hasattr(h, "last_hidden_state") else h[0]
            logits = model.lm_head(h)[0, -1].double().numpy()
            how = "text_model(inputs_embeds) + lm_head"
        ref = vision_ref.vlm_logits(llama_ref.load(args.text), ids, ref_feats)
        ok &= report(f"last logits: HF {how} vs llama_ref with vision_ref features", logits, ref, tol)
        if int(np.argmax(logits)) != int(np.argmax(ref)):
            print(f"     note: argmax differs (HF {int(np.argmax(logits))}, reference {int(np.argmax(ref))})")
    return ok


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--text", required=True, help="text GGUF (tools/make_random_vlm.py --out-text)")
    ap.add_argument("--mmproj", required=True)
    ap.add_argument("--pixels", help=".npy [3][S][S] normalised pixels (or [1][3][S][S])")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--save-pixels", help="write the pixels used here (.npy)")
    ap.add_argument("--dtype", choices=["float64", "float32"], default="float64")
    ap.add_argument("--tol", type=float, help="relative tolerance (default 1e-4 float64, 1e-3 float32)")
    ap.add_argument("--no-text", action="store_true", help="compare the image features only")
    ap.add_argument("--self-test", action="store_true", help="the checks that need no torch")
    args = ap.parse_args(argv)

    meta = read_meta(args.text, args.mmproj)
    S = meta["vision"]["image_size"]
    if args.pixels:
        pixels = np.load(args.pixels).astype(np.float64)
        pixels = pixels.reshape(pixels.shape[-3:])
    else:
        pixels = np.random.default_rng(args.seed).uniform(-1.0, 1.0, size=(3, S, S))
    if pixels.shape != (3, S, S):
        raise SystemExit(f"pixels {pixels.shape}, the mmproj wants (3, {S}, {S})")
    if args.save_pixels:
        np.save(args.save_pixels, pixels)
    ok = self_test(args, meta, pixels) if args.self_test else run_torch(args, meta, pixels)
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
