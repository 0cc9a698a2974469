#!/usr/bin/env python3
"""A random SmolVLM (HF Idefics3) pair: a llama text GGUF and an "idefics3" mmproj GGUF.

It exists to test the engine's image input against the numpy reference
(tests/reference/vision_ref.py, and tests/reference/llama_ref.py for the text model) and,
on a machine with torch, against transformers itself (tools/check_vision_oracle.py). The two
files follow llama.cpp's conventions for SmolVLM (convert_hf_to_gguf.py + its --mmproj
output), so the engine can load them exactly as it would load ggml-org's SmolVLM GGUFs.

    .venv/bin/python tools/make_random_vlm.py \
        --tokenizer-from /root/.cache/splash/models/SmolLM2-135M-Instruct.Q4_1.gguf \
        --out-text /tmp/vlm/text.gguf --out-mmproj /tmp/vlm/mmproj.gguf
    ... --mmproj-type Q8_0              # 2-D vision/projector matrices as Q8_0 (F16 default)
    ... --embd-type F16                 # patch/position embeddings F16 (as older converters)
    ... --legacy-ffn-names              # fc1 written as ffn_down, fc2 as ffn_up (pre #13290)
    ... --real-shapes                   # SmolVLM-256M-Instruct's shapes (files ~0.3 GB)
    ... --text-reference-twin /tmp/vlm/text_ref.gguf   # same tensors, no tokenizer (fast to load)

Text GGUF (general.architecture "llama"): make_random_llama.make_model with every matrix of
--text-type (F16 default, or F32/BF16: exact float weights, so the engine matches the numpy
reference to float32 rounding). Default shapes are make_random_llama's (d_model 256, 4 heads /
2 kv heads of 64, ffn 768, 3 layers, rope base 10000); --real-shapes gives SmolLM2-135M's
(d_model 576, 9 heads / 3 kv heads, ffn 1536, 30 layers, rope base 100000, context 8192);
--text-* flags override single values. Q/K are random, so llama.cpp's q/k permutation is
only a convention here: the GGUF is read as a llama.cpp llama GGUF (ggml "normal" RoPE on the
weights as stored); tools/check_vision_oracle.py un-permutes them for transformers.
Tokenizer: SmolLM2's 49152 tokens, merges, pre-tokenizer copied from --tokenizer-from, plus
SmolVLM's 128 added tokens at their real ids, all token type 3 (CONTROL, as SmolLM2's own
special tokens 0..16 are marked):
    49152 <global-img>, 49153..49188 <row_R_col_C> (R, C in 1..6, row-major),
    49189 <fake_token_around_image>, 49190 <image>,
    49191..49278 <|reserved_special_token_0|>..<|reserved_special_token_87|>,
    49279 <end_of_utterance>
(the reserved names come from a third-party fixture of SmolVLM's added_tokens.json, not the
official file). eos = 49279 <end_of_utterance> (SmolVLM-Instruct's generation_config and
tokenizer eos); bos 1, pad 2, unk 0 and add_bos false as in SmolLM2. token_embd/output have
49280 rows. tokenizer.chat_template = SmolVLM-Instruct's chat_template.json (CHAT_TEMPLATE
below; its JSON file is the 429 bytes the HF listing shows), which renders a user message
[image, text "Describe"] with add_generation_prompt as
    "<|im_start|>User:<image>Describe<end_of_utterance>\\nAssistant:"

mmproj GGUF (general.architecture "clip", clip.projector_type "idefics3"): the keys
convert_hf_to_gguf.py's MmprojModel/SmolVLMModel write: general.file_type,
clip.has_vision_encoder, clip.projector_type, clip.use_gelu (true), clip.vision.{image_size,
patch_size, embedding_length, feed_forward_length, block_count, attention.head_count,
attention.layer_norm_epsilon, image_mean, image_std, projection_dim (= text d_model),
projector.scale_factor}; clip.vision.preproc_image_size only with --preproc-image-size
(ggml-org's Apr-2025 files lack it; with it llama.cpp tiles large images).
Tensors (numpy/torch shape; GGUF ne is the reverse), D = embedding_length, F = ffn, s = scale:
    v.patch_embd.weight     [D, 3, P, P]  conv kernel, 4-D     F32 (F16 with --embd-type F16)
    v.patch_embd.bias       [D]                                F32
    v.position_embd.weight  [(S/P)^2, D]                       --embd-type (F32 default)
    v.blk.N.ln1/ln2.{weight,bias} [D]                          F32
    v.blk.N.attn_{q,k,v,out}.weight [D, D], .bias [D]          --mmproj-type / F32
    v.blk.N.ffn_up.weight [F, D] (fc1), .bias [F]              --mmproj-type / F32
    v.blk.N.ffn_down.weight [D, F] (fc2), .bias [D]            --mmproj-type / F32
    v.post_ln.{weight,bias} [D]                                F32
    mm.model.fc.weight      [text_d, D*s*s]  (no bias)         --mmproj-type
Types follow the current converter: 1-D tensors F32, SmolVLMModel.tensor_force_quant makes
everything under ".embeddings." (patch and position embeddings) F32, other matrices the
output type. (Older converters wrote patch_embd F16 for an f16 output and position_embd in
the output type: --embd-type F16 / Q8_0 reproduces those; patch_embd, 16 wide, cannot be Q8_0
and stays F32 then, as the old rule did for non-f16 output types.)
Default (tiny) vision shapes: image 64, patch 16 (4x4 = 16 patches), D 128, 4 heads of 32,
F 256, 2 blocks, scale 2 (4 image tokens of 4*128 = 512 features -> text d_model), eps 1e-6,
mean = std = 0.5. --real-shapes: 512/16/768/12 heads/3072/12 blocks/scale 4 (64 tokens of
12288 -> 576).
Weights: fixed seed; a matrix with K inputs has deviation 1/sqrt(K) (the patch conv K = 3*P*P),
position embeddings deviation 0.5, LayerNorm weights uniform in [0.8, 1.2], LayerNorm and
linear biases deviation 0.1: activations stay of order 1 through the tower.
"""
from __future__ import annotations

import argparse
import math
import os
import sys
from dataclasses import dataclass

import numpy as np
from gguf import GGMLQuantizationType as T
from gguf import GGUFValueType, GGUFWriter, LlamaFileType
from gguf.quants import quantize

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_random_llama as mrl  # noqa: E402

BASE_VOCAB = 49152
GLOBAL_IMG_ID = 49152
FAKE_TOKEN_ID = 49189
IMAGE_TOKEN_ID = 49190
END_OF_UTTERANCE_ID = 49279
VOCAB = 49280
N_RESERVED = END_OF_UTTERANCE_ID - IMAGE_TOKEN_ID - 1  # 88
TOKEN_TYPE_CONTROL = 3

CHAT_TEMPLATE = (
    "<|im_start|>{% for message in messages %}{{message['role'] | capitalize}}"
    "{% if message['content'][0]['type'] == 'image' %}{{':'}}{% else %}{{': '}}{% endif %}"
    "{% for line in message['content'] %}{% if line['type'] == 'text' %}{{line['text']}}"
    "{% elif line['type'] == 'image' %}{{ '<image>' }}{% endif %}{% endfor %}"
    "<end_of_utterance>\n{% endfor %}{% if add_generation_prompt %}{{ 'Assistant:' }}{% endif %}"
)


def added_tokens() -> list[str]:
    """SmolVLM's added tokens in id order, from 49152."""
    toks = ["<global-img>"]
    toks += [f"<row_{r}_col_{c}>" for r in range(1, 7) for c in range(1, 7)]
    toks += ["<fake_token_around_image>", "<image>"]
    toks += [f"<|reserved_special_token_{k}|>" for k in range(N_RESERVED)]
    toks += ["<end_of_utterance>"]
    assert len(toks) == VOCAB - BASE_VOCAB
    return toks


def vlm_tokenizer(base) -> list:
    """SmolLM2's tokenizer metadata (make_random_llama.read_tokenizer) turned into SmolVLM's."""
    out = []
    for key, value, vtype, sub in base:
        if key == "tokenizer.ggml.tokens":
            assert len(value) == BASE_VOCAB, len(value)
            value = list(value) + added_tokens()
        elif key == "tokenizer.ggml.token_type":
            value = list(value) + [TOKEN_TYPE_CONTROL] * (VOCAB - BASE_VOCAB)
        elif key == "tokenizer.ggml.eos_token_id":
            value = END_OF_UTTERANCE_ID
        elif key == "tokenizer.chat_template":
            value = CHAT_TEMPLATE
        out.append((key, value, vtype, sub))
    if not any(k == "tokenizer.chat_template" for k, *_ in out):
        out.append(("tokenizer.chat_template", CHAT_TEMPLATE, GGUFValueType.STRING, None))
    return out


@dataclass
class VisionShape:
    image_size: int = 64
    patch_size: int = 16
    d: int = 128
    heads: int = 4
    ffn: int = 256
    layers: int = 2
    scale: int = 2
    eps: float = 1e-6


REAL_VISION = VisionShape(image_size=512, patch_size=16, d=768, heads=12, ffn=3072, layers=12, scale=4)
REAL_TEXT = mrl.Shape(d_model=576, heads=9, kv_heads=3, ffn=1536, layers=30, rope_base=100000.0,
                      context=8192)
MM_TYPES = {"F32": T.F32, "F16": T.F16, "Q8_0": T.Q8_0}
FILE_TYPES = {"F32": LlamaFileType.ALL_F32, "F16": LlamaFileType.MOSTLY_F16, "Q8_0": LlamaFileType.MOSTLY_Q8_0}


def _as_type(w: np.ndarray, qtype: T):
    """(data, raw_dtype) for GGUFWriter.add_tensor: float arrays as they are, blocks as bytes."""
    w = w.astype(np.float32)
    if qtype == T.F32:
        return w, None
    if qtype == T.F16:
        return w.astype(np.float16), None
    if w.shape[-1] % 32:
        raise ValueError(f"width {w.shape[-1]} is not a multiple of 32, as {qtype.name} needs")
    return np.ascontiguousarray(quantize(w, qtype)), qtype


def mmproj_tensors(vs: VisionShape, text_d: int, mm_type: str, embd_type: str, legacy_ffn: bool,
                   seed: int) -> list[tuple[str, np.ndarray, T | None]]:
    rng = np.random.default_rng(seed)
    D, F, P, s = vs.d, vs.ffn, vs.patch_size, vs.scale
    n_pos = (vs.image_size // P) ** 2
    mt = MM_TYPES[mm_type]
    out = []

    def add(name, w, qtype=T.F32):
        data, raw = _as_type(w, qtype)
        out.append((name, data, raw))

    def mat(rows, cols):
        return rng.standard_normal((rows, cols)) / math.sqrt(cols)

    def bias(n):
        return rng.standard_normal(n) * 0.1

    def ln(prefix):
        add(prefix + ".weight", rng.uniform(0.8, 1.2, size=D))
        add(prefix + ".bias", bias(D))

    patch = rng.standard_normal((D, 3, P, P)) / math.sqrt(3 * P * P)
    add("v.patch_embd.weight", patch, T.F16 if embd_type == "F16" else T.F32)
    add("v.patch_embd.bias", bias(D))
    add("v.position_embd.weight", rng.standard_normal((n_pos, D)) * 0.5, MM_TYPES[embd_type])
    for i in range(vs.layers):
        p = f"v.blk.{i}."
        ln(p + "ln1")
        for role in ("attn_q", "attn_k", "attn_v", "attn_out"):
            add(p + role + ".weight", mat(D, D), mt)
            add(p + role + ".bias", bias(D))
        ln(p + "ln2")
        fc1_w, fc1_b, fc2_w, fc2_b = mat(F, D), bias(F), mat(D, F), bias(D)
        up, down = ("ffn_down", "ffn_up") if legacy_ffn else ("ffn_up", "ffn_down")
        add(p + up + ".weight", fc1_w, mt)
        add(p + up + ".bias", fc1_b)
        add(p + down + ".weight", fc2_w, mt)
        add(p + down + ".bias", fc2_b)
    ln("v.post_ln")
    add("mm.model.fc.weight", mat(text_d, D * s * s), mt)
    return out


def write_mmproj(path: str, vs: VisionShape, text_d: int, mm_type: str = "F16", embd_type: str = "F32",
                 legacy_ffn: bool = False, seed: int = mrl.DEFAULT_SEED + 1,
                 preproc_image_size: int | None = None) -> None:
    if vs.image_size % vs.patch_size or (vs.image_size // vs.patch_size) % vs.scale or vs.d % vs.heads:
        raise ValueError(f"inconsistent vision shape {vs}")
    tensors = mmproj_tensors(vs, text_d, mm_type, embd_type, legacy_ffn, seed)
    w = GGUFWriter(path, "clip")
    w.add_name("random-smolvlm-mmproj")
    w.add_type("mmproj")
    w.add_file_type(FILE_TYPES[mm_type])
    w.add_clip_has_vision_encoder(True)
    w.add_clip_projector_type("idefics3")
    w.add_vision_projection_dim(text_d)
    w.add_vision_image_size(vs.image_size)
    w.add_vision_patch_size(vs.patch_size)
    w.add_vision_embedding_length(vs.d)
    w.add_vision_feed_forward_length(vs.ffn)
    w.add_vision_block_count(vs.layers)
    w.add_vision_head_count(vs.heads)
    w.add_vision_attention_layernorm_eps(vs.eps)
    w.add_vision_image_mean([0.5, 0.5, 0.5])
    w.add_vision_image_std([0.5, 0.5, 0.5])
    w.add_vision_use_gelu(True)
    w.add_vision_projector_scale_factor(vs.scale)
    if preproc_image_size:
        w.add_vision_preproc_image_size(preproc_image_size)
    for name, data, raw in tensors:
        w.add_tensor(name, data, raw_dtype=raw)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tokenizer-from", required=True, help="SmolLM2 GGUF whose tokenizer is copied")
    ap.add_argument("--out-text", required=True)
    ap.add_argument("--out-mmproj", required=True)
    ap.add_argument("--text-reference-twin", help="also write the text tensors without tokenizer here")
    ap.add_argument("--real-shapes", action="store_true", help="SmolVLM-256M-Instruct's shapes")
    ap.add_argument("--seed", type=int, default=mrl.DEFAULT_SEED)
    ap.add_argument("--text-type", choices=["F32", "F16", "BF16"], default="F16")
    ap.add_argument("--mmproj-type", choices=sorted(MM_TYPES), default="F16",
                    help="type of the 2-D vision and projector matrices")
    ap.add_argument("--embd-type", choices=sorted(MM_TYPES), default="F32",
                    help="position_embd type; patch_embd F16 if F16 else F32")
    ap.add_argument("--legacy-ffn-names", action="store_true",
                    help="write fc1 as ffn_down and fc2 as ffn_up (llama.cpp before PR #13290)")
    ap.add_argument("--preproc-image-size", type=int, help="write clip.vision.preproc_image_size")
    for flag in ("d-model", "heads", "kv-heads", "ffn", "layers", "context"):
        ap.add_argument(f"--text-{flag}", type=int)
    ap.add_argument("--text-rope-base", type=float)
    for flag in ("image-size", "patch-size", "d", "heads", "ffn", "layers", "scale"):
        ap.add_argument(f"--vision-{flag}", type=int)
    ap.add_argument("--vision-eps", type=float)
    args = ap.parse_args(argv)

    shape = REAL_TEXT if args.real_shapes else mrl.Shape()
    shape = mrl.Shape(**{**shape.__dict__, **{k: v for k, v in {
        "d_model": args.text_d_model, "heads": args.text_heads, "kv_heads": args.text_kv_heads,
        "ffn": args.text_ffn, "layers": args.text_layers, "context": args.text_context,
        "rope_base": args.text_rope_base}.items() if v is not None}})
    vs = REAL_VISION if args.real_shapes else VisionShape()
    vs = VisionShape(**{**vs.__dict__, **{k: v for k, v in {
        "image_size": args.vision_image_size, "patch_size": args.vision_patch_size, "d": args.vision_d,
        "heads": args.vision_heads, "ffn": args.vision_ffn, "layers": args.vision_layers,
        "scale": args.vision_scale, "eps": args.vision_eps}.items() if v is not None}})
    for path in (args.out_text, args.out_mmproj, args.text_reference_twin):
        if path and os.path.dirname(path):
            os.makedirs(os.path.dirname(path), exist_ok=True)
    try:
        tokenizer = vlm_tokenizer(mrl.read_tokenizer(args.tokenizer_from))
        types = mrl.tensor_types(all_type=args.text_type, layers=shape.layers)
        mrl.make_model(args.out_text, tokenizer, types, shape, args.seed, name="random-smolvlm-text",
                       reference_twin=args.text_reference_twin)
        write_mmproj(args.out_mmproj, vs, shape.d_model, args.mmproj_type, args.embd_type,
                     args.legacy_ffn_names, args.seed + 1, args.preproc_image_size)
    except ValueError as e:
        sys.exit(str(e))
    n_tok = (vs.image_size // vs.patch_size) ** 2 // vs.scale ** 2
    print(f"wrote {args.out_text}: llama d_model {shape.d_model}, {shape.layers} layers, "
          f"{shape.heads}/{shape.kv_heads} heads, ffn {shape.ffn}, vocab {VOCAB}, {args.text_type}\n"
          f"wrote {args.out_mmproj}: idefics3 image {vs.image_size}/patch {vs.patch_size}, D {vs.d}, "
          f"{vs.heads} heads, ffn {vs.ffn}, {vs.layers} blocks, scale {vs.scale} -> {n_tok} tokens x "
          f"{shape.d_model}; matrices {args.mmproj_type}, embeddings {args.embd_type}"
          + (", legacy ffn names" if args.legacy_ffn_names else ""), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
