#!/usr/bin/env python3
"""Reference logits from Hugging Face transformers for a qwen2 or qwen3 GGUF of float weights.

The whole-model oracle of the GPU tests (tests/gpu/test_cuda_model.cpp, MatchesTransformers):
the GGUF's tensors are loaded into transformers' own Qwen2ForCausalLM / Qwen3ForCausalLM
(float32 on the GPU, eager attention, TF32 off), a fixed prompt is run, and greedy decoding
goes on for a few steps (each step the whole sequence again, no cache). Written next to the
GGUF: <stem>.tokens (the prompt and the greedy tokens, space-separated) and <stem>.logits
(float32, one row of vocab logits for the prompt's last position and one per step).

Both architectures use NEOX rotary pairs (rotate_half) in transformers and in splash, so the
GGUF's q/k rows are taken as they are (nothing permuted).

    python3 tools/hf_oracle.py --gguf /tmp/oracle/qwen3-8b-shape.gguf --prompt-tokens 24 --steps 4
"""
from __future__ import annotations

import argparse
import os

import numpy as np
import torch
from gguf import GGMLQuantizationType, GGUFReader


def field(reader: GGUFReader, key: str):
    f = reader.fields[key]
    value = f.parts[f.data[0]]
    return value[0].item() if len(value) == 1 else value


def tensor(t) -> torch.Tensor:
    if t.tensor_type not in (GGMLQuantizationType.F32, GGMLQuantizationType.F16):
        raise SystemExit(f"{t.name}: type {t.tensor_type.name}; the oracle reads F32 and F16 tensors only")
    data = np.asarray(t.data).astype(np.float32).reshape(list(reversed([int(d) for d in t.shape])))
    return torch.from_numpy(data.copy())


HF_NAMES = {
    "attn_norm.weight": "input_layernorm.weight", "ffn_norm.weight": "post_attention_layernorm.weight",
    "attn_q.weight": "self_attn.q_proj.weight", "attn_k.weight": "self_attn.k_proj.weight",
    "attn_v.weight": "self_attn.v_proj.weight", "attn_output.weight": "self_attn.o_proj.weight",
    "attn_q.bias": "self_attn.q_proj.bias", "attn_k.bias": "self_attn.k_proj.bias",
    "attn_v.bias": "self_attn.v_proj.bias",
    "attn_q_norm.weight": "self_attn.q_norm.weight", "attn_k_norm.weight": "self_attn.k_norm.weight",
    "ffn_gate.weight": "mlp.gate_proj.weight", "ffn_up.weight": "mlp.up_proj.weight",
    "ffn_down.weight": "mlp.down_proj.weight",
}


def hf_name(name: str) -> str:
    if name == "token_embd.weight":
        return "model.embed_tokens.weight"
    if name == "output_norm.weight":
        return "model.norm.weight"
    if name == "output.weight":
        return "lm_head.weight"
    _, layer, rest = name.split(".", 2)
    return f"model.layers.{layer}.{HF_NAMES[rest]}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--gguf", required=True)
    ap.add_argument("--prompt-tokens", type=int, default=24)
    ap.add_argument("--steps", type=int, default=4)
    args = ap.parse_args()

    reader = GGUFReader(args.gguf)
    arch = bytes(field(reader, "general.architecture")).decode() if not isinstance(
        field(reader, "general.architecture"), str) else field(reader, "general.architecture")
    tensors = {t.name: t for t in reader.tensors}
    vocab, d_model = int(tensors["token_embd.weight"].shape[1]), int(tensors["token_embd.weight"].shape[0])
    heads = int(field(reader, f"{arch}.attention.head_count"))
    key_length = f"{arch}.attention.key_length"
    head_dim = int(field(reader, key_length)) if key_length in reader.fields else d_model // heads
    common = dict(
        vocab_size=vocab, hidden_size=d_model, intermediate_size=int(field(reader, f"{arch}.feed_forward_length")),
        num_hidden_layers=int(field(reader, f"{arch}.block_count")), num_attention_heads=heads,
        num_key_value_heads=int(field(reader, f"{arch}.attention.head_count_kv")), head_dim=head_dim,
        rms_norm_eps=float(field(reader, f"{arch}.attention.layer_norm_rms_epsilon")),
        max_position_embeddings=int(field(reader, f"{arch}.context_length")),
        tie_word_embeddings="output.weight" not in tensors)
    rope = float(field(reader, f"{arch}.rope.freq_base"))
    if arch == "qwen3":
        from transformers import Qwen3Config as Config, Qwen3ForCausalLM as Model
    elif arch == "qwen2":
        from transformers import Qwen2Config as Config, Qwen2ForCausalLM as Model
    else:
        raise SystemExit(f"{args.gguf}: architecture {arch}; the oracle knows qwen2 and qwen3")
    # RoPE stretching the file states (llama.cpp's rope.scaling.* keys) as transformers' own.
    scaling = field(reader, f"{arch}.rope.scaling.type") if f"{arch}.rope.scaling.type" in reader.fields else None
    scaling = bytes(scaling).decode() if scaling is not None and not isinstance(scaling, str) else scaling
    stretch = {}
    if scaling == "yarn":
        stretch = {"rope_type": "yarn", "factor": float(field(reader, f"{arch}.rope.scaling.factor")),
                   "original_max_position_embeddings": int(field(reader,
                                                                 f"{arch}.rope.scaling.original_context_length"))}
        for key, name in (("yarn_beta_fast", "beta_fast"), ("yarn_beta_slow", "beta_slow")):
            if f"{arch}.rope.scaling.{key}" in reader.fields:
                stretch[name] = float(field(reader, f"{arch}.rope.scaling.{key}"))
    elif scaling == "linear":
        stretch = {"rope_type": "linear", "factor": float(field(reader, f"{arch}.rope.scaling.factor"))}
    elif scaling not in (None, "none"):
        raise SystemExit(f"{args.gguf}: RoPE scaling {scaling}; the oracle knows yarn and linear")
    try:  # transformers 5 keeps the rotary settings in rope_parameters; 4.x took rope_theta
        config = Config(**common, rope_parameters={"rope_type": "default", "rope_theta": rope, **stretch})
    except TypeError:
        legacy = {"type": stretch.pop("rope_type"), **stretch} if stretch else None
        config = Config(**common, rope_theta=rope, rope_scaling=legacy)
    config._attn_implementation = "eager"
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
    with torch.device("cuda"):
        model = Model(config).float().eval()
    state = {hf_name(name): tensor(t) for name, t in tensors.items()}
    missing, unexpected = model.load_state_dict(state, strict=False)
    missing = [m for m in missing if not (common["tie_word_embeddings"] and m == "lm_head.weight")]
    if missing or unexpected:
        raise SystemExit(f"weights that did not map: missing {missing}, unexpected {unexpected}")
    print(f"{args.gguf}: {arch}, {common['num_hidden_layers']} layers, d_model {d_model}, {heads}/"
          f"{common['num_key_value_heads']} heads of {head_dim}, ffn {common['intermediate_size']}, vocab {vocab}, "
          f"rope base {rope}, eps {common['rms_norm_eps']}; config rope {getattr(config, 'rope_parameters', None)}")

    ids = [100 + (i * 2654435761) % (vocab - 100) for i in range(args.prompt_tokens)]
    rows = []
    with torch.no_grad():
        for step in range(args.steps + 1):
            logits = model(torch.tensor([ids], device="cuda")).logits[0, -1].float().cpu().numpy()
            rows.append(logits)
            if step < args.steps:
                ids.append(int(np.argmax(logits)))
    stem = os.path.splitext(args.gguf)[0]
    with open(stem + ".tokens", "w") as f:
        f.write(" ".join(str(i) for i in ids) + "\n")
    np.stack(rows).astype(np.float32).tofile(stem + ".logits")
    print(f"wrote {stem}.tokens ({len(ids)} tokens) and {stem}.logits ({len(rows)} rows)")


if __name__ == "__main__":
    main()
