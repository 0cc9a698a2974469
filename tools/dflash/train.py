#!/usr/bin/env python3
"""Trains a DFlash block draft (issue 14) for a target GGUF from `splash draft-data` samples, and
writes it as a GGUF in llama.cpp's `dflash` layout. PyTorch, CPU or GPU.

The draft (DFlash, arXiv 2602.06036): the target's tapped layer outputs at every committed
position are concatenated, projected by `fc` and RMS-normed (the context); each of the
draft's layers (Qwen3-style: pre-norm, q/k RMSNorm, NEOX RoPE, SwiGLU) attends, without a
causal mask, over the context's keys and values (its own k/v projections of the context)
before the block and over the block itself. A block is [the last sampled token, MASK x B-1]
at positions a..a+B-1, embedded with the target's table (MASK: a learned vector), and slot k
predicts the token at a+k through the draft's own final norm and the target's LM head
(shared, frozen). Training as SpecForge: random anchors in the
reply, the context strictly before each anchor, slot k >= 1 labelled with token a+k, the
cross-entropy weighted exp(-(k-1)/gamma).

    python3 tools/dflash/train.py --target MODEL.gguf --data DIR --out DRAFT.gguf \\
        [--layers 2 --block 8 --epochs 4 --lr 6e-4]

Reports, on held-out samples, the acceptance a greedy verifier would give: the mean length of
the run of slots whose argmax equals the reply's token (tau - 1).
"""
from __future__ import annotations

import argparse
import json
import math
import random
import sys
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from gguf import GGUFReader, GGUFWriter, GGMLQuantizationType
from gguf.quants import dequantize, quantize


# --- the target's pieces the draft shares -------------------------------------------------
def field(reader: GGUFReader, key: str, default=None):
    f = reader.fields.get(key)
    if f is None:
        return default
    value = f.contents()
    return value


class Target:
    """The target GGUF's shapes, its embedding table and LM head (dequantized), and the raw
    embedding tensor (copied into the draft file with the mask row replaced)."""

    def __init__(self, path: str):
        self.reader = reader = GGUFReader(path)
        arch = field(reader, "general.architecture")
        self.arch = arch
        self.d_model = int(field(reader, f"{arch}.embedding_length"))
        self.n_layers = int(field(reader, f"{arch}.block_count"))
        self.heads = int(field(reader, f"{arch}.attention.head_count"))
        self.eps = float(field(reader, f"{arch}.attention.layer_norm_rms_epsilon", 1e-6))
        self.rope_base = float(field(reader, f"{arch}.rope.freq_base", 10000.0))
        self.tensors = {t.name: t for t in reader.tensors}
        embd = self.tensors["token_embd.weight"]
        self.embedding = torch.from_numpy(dequantize(embd.data, embd.tensor_type).reshape(-1, self.d_model).copy())
        head = self.tensors.get("output.weight", embd)
        self.tied = "output.weight" not in self.tensors
        self.head = self.embedding if self.tied else torch.from_numpy(
            dequantize(head.data, head.tensor_type).reshape(-1, self.d_model).copy())
        self.vocab = self.embedding.shape[0]


# --- the draft ------------------------------------------------------------------------------
class RMSNorm(torch.nn.Module):
    def __init__(self, d: int, eps: float):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(d))
        self.eps = eps

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rope(x, positions, base: float):
    """NEOX RoPE (each head's first and second halves rotated as pairs). x [..., n, heads, dim]."""
    dim = x.shape[-1]
    inv = base ** (-torch.arange(0, dim, 2, dtype=torch.float32) / dim)
    angles = positions.float()[:, None] * inv[None, :]  # [n, dim/2]
    cos, sin = angles.cos()[:, None, :], angles.sin()[:, None, :]
    a, b = x[..., : dim // 2], x[..., dim // 2:]
    return torch.cat([a * cos - b * sin, a * sin + b * cos], dim=-1)


class DraftLayer(torch.nn.Module):
    def __init__(self, d: int, heads: int, kv_heads: int, head_dim: int, ffn: int, eps: float):
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = heads, kv_heads, head_dim
        self.attn_norm, self.ffn_norm = RMSNorm(d, eps), RMSNorm(d, eps)
        self.q = torch.nn.Linear(d, heads * head_dim, bias=False)
        self.k = torch.nn.Linear(d, kv_heads * head_dim, bias=False)
        self.v = torch.nn.Linear(d, kv_heads * head_dim, bias=False)
        self.o = torch.nn.Linear(heads * head_dim, d, bias=False)
        self.q_norm, self.k_norm = RMSNorm(head_dim, eps), RMSNorm(head_dim, eps)
        self.gate = torch.nn.Linear(d, ffn, bias=False)
        self.up = torch.nn.Linear(d, ffn, bias=False)
        self.down = torch.nn.Linear(ffn, d, bias=False)

    def kv(self, x, positions, base):
        n = x.shape[0]
        k = self.k_norm(self.k(x).view(n, self.kv_heads, self.head_dim))
        v = self.v(x).view(n, self.kv_heads, self.head_dim)
        return rope(k, positions, base), v

    def forward(self, h, positions, ctx_k, ctx_v, mask, base):
        """h [n, d] block rows; ctx_k/ctx_v [m, kv_heads, dim]; mask [n, m + n] (True: may see)."""
        n = h.shape[0]
        x = self.attn_norm(h)
        q = rope(self.q_norm(self.q(x).view(n, self.heads, self.head_dim)), positions, base)
        k, v = self.kv(x, positions, base)
        keys, values = torch.cat([ctx_k, k]), torch.cat([ctx_v, v])
        group = self.heads // self.kv_heads
        keys = keys.repeat_interleave(group, dim=1).transpose(0, 1)      # [heads, m+n, dim]
        values = values.repeat_interleave(group, dim=1).transpose(0, 1)
        out = F.scaled_dot_product_attention(q.transpose(0, 1), keys, values, attn_mask=mask[None])
        h = h + self.o(out.transpose(0, 1).reshape(n, -1))
        x = self.ffn_norm(h)
        return h + self.down(F.silu(self.gate(x)) * self.up(x))


class Draft(torch.nn.Module):
    def __init__(self, target: Target, taps: int, layers: int, heads: int, kv_heads: int, head_dim: int, ffn: int):
        super().__init__()
        d, eps = target.d_model, target.eps
        self.fc = torch.nn.Linear(taps * d, d, bias=False)
        self.hidden_norm = RMSNorm(d, eps)
        self.layers = torch.nn.ModuleList(DraftLayer(d, heads, kv_heads, head_dim, ffn, eps) for _ in range(layers))
        self.norm = RMSNorm(d, eps)
        self.mask_embedding = torch.nn.Parameter(target.embedding.mean(0).clone())
        self.register_buffer("embedding", target.embedding, persistent=False)
        self.register_buffer("head", target.head, persistent=False)
        self.base = target.rope_base
        for layer in self.layers:  # (a small start for the residual branches)
            torch.nn.init.normal_(layer.o.weight, std=0.02 / math.sqrt(2 * layers))
            torch.nn.init.normal_(layer.down.weight, std=0.02 / math.sqrt(2 * layers))

    def context(self, taps):
        """taps [T, taps, d] -> the context rows [T, d]."""
        return self.hidden_norm(self.fc(taps.reshape(taps.shape[0], -1)))

    def blocks(self, tokens, ctx, anchors, block: int):
        """Logits [A, block, vocab] of blocks [tokens[a], MASK...] at a..a+block-1, each seeing
        the context rows before its anchor and its own block."""
        A, T = len(anchors), ctx.shape[0]
        anchors_t = torch.tensor(anchors)
        positions = (anchors_t[:, None] + torch.arange(block)[None, :]).reshape(-1)
        h = self.mask_embedding.expand(A, block, -1).clone()
        h[:, 0] = self.embedding[tokens[anchors_t]]
        h = h.reshape(A * block, -1)
        sees_ctx = torch.arange(T)[None, :] < anchors_t[:, None]                      # [A, T]
        sees_ctx = sees_ctx.repeat_interleave(block, dim=0)                            # [A*B, T]
        block_of = torch.arange(A).repeat_interleave(block)
        sees_block = block_of[:, None] == block_of[None, :]                            # [A*B, A*B]
        mask = torch.cat([sees_ctx, sees_block], dim=1)
        ctx_positions = torch.arange(T)
        for layer in self.layers:
            ck, cv = layer.kv(ctx, ctx_positions, self.base)
            h = layer(h, positions, ck, cv, mask, self.base)
        return (self.norm(h) @ self.head.T).view(A, block, -1)


# --- data -----------------------------------------------------------------------------------
def samples(data: Path):
    manifest = [json.loads(line) for line in (data / "manifest.jsonl").read_text().splitlines() if line.strip()]
    if not manifest:
        sys.exit(f"train: {data}/manifest.jsonl lists no samples")
    layers = manifest[0]["layers"]
    return manifest, layers


def load(data: Path, entry):
    tokens = torch.from_numpy(np.load(data / f"{entry['name']}.tokens.npy").astype(np.int64))
    hidden = torch.from_numpy(np.load(data / f"{entry['name']}.hidden.npy").astype(np.float32))
    return tokens, hidden


def pick_anchors(entry, block: int, count: int, rng: random.Random):
    first, last = entry["prompt_tokens"], entry["tokens"] - block  # a block must end inside the sample
    if last < first:
        return []
    spots = list(range(max(first, 1), last + 1))
    return sorted(rng.sample(spots, min(count, len(spots))))


def weights(block: int, gamma: float):
    w = torch.tensor([0.0] + [math.exp(-(k - 1) / gamma) for k in range(1, block)])
    return w


@torch.no_grad()
def acceptance(draft: Draft, data: Path, entries, block: int, anchors: int, rng: random.Random):
    """Mean accepted run per block (greedy: slots 1.. while argmax == the reply's token)."""
    runs = []
    for entry in entries:
        spots = pick_anchors(entry, block, anchors, rng)
        if not spots:
            continue
        tokens, hidden = load(data, entry)
        logits = draft.blocks(tokens, draft.context(hidden), spots, block)
        guess = logits.argmax(-1)
        for i, a in enumerate(spots):
            run = 0
            for k in range(1, block):
                if guess[i, k].item() != tokens[a + k].item():
                    break
                run += 1
            runs.append(run)
    return float(np.mean(runs)) if runs else 0.0


# --- export -----------------------------------------------------------------------------------
def export(draft: Draft, target: Target, taps, args, path: str):
    """llama.cpp's dflash layout: the draft's tensors, its block size and target layers (each
    tap's index + 1: llama.cpp reads a layer's input), the mask as a token id whose row of the
    draft's own embedding table (the target's, copied in its own type) is the learned vector."""
    w = GGUFWriter(path, "dflash")
    layer0 = draft.layers[0]
    d = target.d_model
    w.add_uint32("dflash.embedding_length", d)
    w.add_uint32("dflash.block_count", len(draft.layers))
    w.add_uint32("dflash.feed_forward_length", layer0.gate.out_features)
    w.add_uint32("dflash.attention.head_count", layer0.heads)
    w.add_uint32("dflash.attention.head_count_kv", layer0.kv_heads)
    w.add_uint32("dflash.attention.key_length", layer0.head_dim)
    w.add_uint32("dflash.attention.value_length", layer0.head_dim)
    w.add_float32("dflash.attention.layer_norm_rms_epsilon", target.eps)
    w.add_float32("dflash.rope.freq_base", target.rope_base)
    w.add_uint32("dflash.context_length", int(field(target.reader, f"{target.arch}.context_length", 8192)))
    w.add_uint32("dflash.block_size", args.block)
    w.add_array("dflash.target_layers", [t + 1 for t in taps])
    w.add_uint32("dflash.vocab_size", target.vocab)
    w.add_uint32("tokenizer.ggml.mask_token_id", args.mask_token)
    w.add_string("general.name", f"DFlash draft for {Path(args.target).name}")

    def f32(name, t):
        w.add_tensor(name, t.detach().float().contiguous().numpy())

    def f16(name, t):
        w.add_tensor(name, t.detach().float().contiguous().numpy().astype(np.float16))

    f16("fc.weight", draft.fc.weight)
    f32("enc.output_norm.weight", draft.hidden_norm.weight)
    f32("output_norm.weight", draft.norm.weight)
    for i, layer in enumerate(draft.layers):
        p = f"blk.{i}."
        f32(p + "attn_norm.weight", layer.attn_norm.weight)
        f32(p + "ffn_norm.weight", layer.ffn_norm.weight)
        f32(p + "attn_q_norm.weight", layer.q_norm.weight)
        f32(p + "attn_k_norm.weight", layer.k_norm.weight)
        for name, lin in [("attn_q", layer.q), ("attn_k", layer.k), ("attn_v", layer.v), ("attn_output", layer.o),
                          ("ffn_gate", layer.gate), ("ffn_up", layer.up), ("ffn_down", layer.down)]:
            f16(p + name + ".weight", lin.weight)
    # The embedding table in the target's type, the mask row re-quantized from the learned vector.
    embd = target.tensors["token_embd.weight"]
    raw = np.array(embd.data, copy=True)
    row = quantize(draft.mask_embedding.detach().float().numpy()[None, :], embd.tensor_type)
    raw.reshape(target.vocab, -1)[args.mask_token] = row.reshape(-1)
    w.add_tensor("token_embd.weight", raw, raw_shape=list(embd.data.shape) if embd.tensor_type == GGMLQuantizationType.F32
                 else None, raw_dtype=embd.tensor_type)
    # The head, always: a tied target's head is its embedding table, whose mask row the draft's
    # copy no longer holds.
    head = target.tensors["output.weight" if not target.tied else "token_embd.weight"]
    w.add_tensor("output.weight", np.array(head.data, copy=True), raw_dtype=head.tensor_type)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--target", required=True)
    ap.add_argument("--data", required=True, help="a `splash draft-data` directory")
    ap.add_argument("--out", required=True, help="the draft GGUF to write")
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--block", type=int, default=8)
    ap.add_argument("--ffn", type=int, default=0, help="draft FFN width (default: 4 x d_model / 1.5, rounded)")
    ap.add_argument("--heads", type=int, default=0, help="query heads (default: the target's)")
    ap.add_argument("--kv-heads", type=int, default=0, help="key/value heads (default: query heads / 3, at least 1)")
    ap.add_argument("--epochs", type=int, default=4)
    ap.add_argument("--anchors", type=int, default=32, help="blocks per sample and step")
    ap.add_argument("--lr", type=float, default=6e-4)
    ap.add_argument("--gamma", type=float, default=4.0, help="slot k's loss weight exp(-(k-1)/gamma)")
    ap.add_argument("--held-out", type=float, default=0.1, help="share of samples kept for the acceptance figure")
    ap.add_argument("--mask-token", type=int, default=-1,
                    help="the id whose row of the draft's embedding table carries the mask vector (default: the "
                         "table's last row, a padding row or a rare token: a block whose first token is it reads "
                         "the mask vector in its place)")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)

    torch.manual_seed(args.seed)
    rng = random.Random(args.seed)
    data = Path(args.data)
    target = Target(args.target)
    if args.mask_token < 0:
        args.mask_token = target.vocab - 1
    if args.mask_token >= target.vocab:
        sys.exit(f"train: --mask-token {args.mask_token} is past the vocabulary of {target.vocab}")
    manifest, taps = samples(data)
    heads = args.heads or target.heads
    head_dim = target.d_model // target.heads
    kv_heads = args.kv_heads or max(1, heads // 3)
    ffn = args.ffn or int(round(target.d_model * 8 / 3 / 64)) * 64
    draft = Draft(target, len(taps), args.layers, heads, kv_heads, head_dim, ffn)
    params = [p for p in draft.parameters() if p.requires_grad]
    print(f"train: draft of {args.layers} layers, {sum(p.numel() for p in params) / 1e6:.1f}M parameters "
          f"(target {target.arch}, d_model {target.d_model}, taps {taps}, block {args.block})", file=sys.stderr)

    rng.shuffle(manifest)
    held = max(1, int(len(manifest) * args.held_out))
    test, train = manifest[:held], manifest[held:]
    steps = args.epochs * len(train)
    optimiser = torch.optim.AdamW(params, lr=args.lr, weight_decay=0.0)
    warmup = max(1, int(0.04 * steps))
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimiser, lambda s: min(1.0, (s + 1) / warmup) * 0.5 * (1 + math.cos(math.pi * min(1.0, s / steps))))
    weight = weights(args.block, args.gamma)
    start, step = time.time(), 0
    print(f"train: before training, held-out acceptance {acceptance(draft, data, test, args.block, 16, random.Random(1)):.3f} "
          "tokens a block", file=sys.stderr)
    for epoch in range(args.epochs):
        rng.shuffle(train)
        total, count = 0.0, 0
        for entry in train:
            spots = pick_anchors(entry, args.block, args.anchors, rng)
            if not spots:
                continue
            tokens, hidden = load(data, entry)
            logits = draft.blocks(tokens, draft.context(hidden), spots, args.block)
            labels = tokens[torch.tensor(spots)[:, None] + torch.arange(args.block)[None, :]]
            ce = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1), reduction="none")
            loss = (ce.view(len(spots), args.block) * weight).sum() / (weight.sum() * len(spots))
            optimiser.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(params, 1.0)
            optimiser.step()
            schedule.step()
            step += 1
            total, count = total + loss.item(), count + 1
        accepted = acceptance(draft, data, test, args.block, 16, random.Random(1))
        print(f"train: epoch {epoch + 1}/{args.epochs}: loss {total / max(count, 1):.3f}, held-out acceptance "
              f"{accepted:.3f} tokens a block, {time.time() - start:.0f} s", file=sys.stderr)
    export(draft, target, taps, args, args.out)
    print(f"train: wrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
