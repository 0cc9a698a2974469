"""The block draft (DFlash, issue 14) run by splash: its logits against an independent numpy
forward of the same GGUF (llama.cpp's `dflash` layout, as tools/dflash/train.py writes it),
the output with it identical to plain decoding (`eval --greedy`, and through the server), and
the drafts that cannot run refused with a clear message.

The draft here has random weights: what is checked is the arithmetic (context rows from the
taps, per-layer context keys and values, the non-causal block, NEOX RoPE at absolute
positions, the shared head), not guessing skill. Tolerance: the engine multiplies the F16
weights as Q8_0 (the reference rounds them alike) and every matrix with int8-rounded
activations (as the target model's own matmuls do), so each block row's logits are within 3%
(relative L2) of the float64 reference; the same reference without the context is far off (the check sees the context)."""
from __future__ import annotations

import json

import numpy as np
import pytest
import requests
from gguf import GGMLQuantizationType, GGUFReader, GGUFWriter
from gguf.quants import dequantize, quantize

from draft_checks import greedy_reply_in_every_draft_mode, run

TAPS = [1, 10, 18, 27]  # the target layers whose outputs the draft reads
BLOCK = 8
ROW_REL_MAX = 0.03


def write_draft(path, target_path: str, *, d_model: int | None = None, layers: int = 2, ffn: int = 256,
                seed: int = 0, shared_tables: bool = False, rope_dims: int | None = None,
                window: int | None = None, causal: bool = False) -> dict:
    """A random-weight dflash GGUF for the target (its embedding table copied raw; with
    shared_tables none, as llama.cpp's converter writes a draft without a learned mask embedding:
    the target's table and head serve), and the weights as float arrays (F16-rounded, as
    stored) for the reference."""
    rng = np.random.default_rng(seed)
    target = GGUFReader(target_path)
    embd = next(t for t in target.tensors if t.name == "token_embd.weight")
    arch = bytes(target.fields["general.architecture"].parts[-1]).decode()
    target_d = int(target.fields[f"{arch}.embedding_length"].parts[-1][0])
    vocab = int(embd.n_elements) // target_d
    d = d_model or target_d
    heads, kv_heads, head_dim = 9, 3, 64
    eps = 1e-5
    w = GGUFWriter(str(path), "dflash")
    for key, value in [("embedding_length", d), ("block_count", layers), ("feed_forward_length", ffn),
                       ("attention.head_count", heads), ("attention.head_count_kv", kv_heads),
                       ("attention.key_length", head_dim), ("attention.value_length", head_dim),
                       ("context_length", 8192), ("block_size", BLOCK), ("vocab_size", vocab)]:
        w.add_uint32(f"dflash.{key}", value)
    w.add_float32("dflash.attention.layer_norm_rms_epsilon", eps)
    w.add_float32("dflash.rope.freq_base", 100000.0)
    w.add_array("dflash.target_layers", [t + 1 for t in TAPS])
    if rope_dims:  # (llama.cpp's converter: partial_rotary_factor)
        w.add_uint32("dflash.rope.dimension_count", rope_dims)
    if window:  # (and a sliding window on every layer)
        w.add_uint32("dflash.attention.sliding_window", window)
    if causal:
        w.add_bool("dflash.attention.causal", True)
    w.add_uint32("tokenizer.ggml.mask_token_id", 0)
    weights = {}

    def matrix(name, rows, cols):
        m = (rng.standard_normal((rows, cols)) / np.sqrt(cols)).astype(np.float16)
        w.add_tensor(name, m)
        # (splash multiplies the draft's float matrices as Q8_0: the reference rounds them alike)
        weights[name] = dequantize(quantize(m.astype(np.float32), GGMLQuantizationType.Q8_0),
                                   GGMLQuantizationType.Q8_0).reshape(rows, cols).astype(np.float64)

    def vector(name, n):
        v = rng.uniform(0.5, 1.5, n).astype(np.float32)
        w.add_tensor(name, v)
        weights[name] = v.astype(np.float64)

    matrix("fc.weight", d, len(TAPS) * d)
    vector("enc.output_norm.weight", d)
    vector("output_norm.weight", d)
    for i in range(layers):
        p = f"blk.{i}."
        for name, n in [("attn_norm", d), ("ffn_norm", d), ("attn_q_norm", head_dim), ("attn_k_norm", head_dim)]:
            vector(p + name + ".weight", n)
        for name, rows, cols in [("attn_q", heads * head_dim, d), ("attn_k", kv_heads * head_dim, d),
                                 ("attn_v", kv_heads * head_dim, d), ("attn_output", d, heads * head_dim),
                                 ("ffn_gate", ffn, d), ("ffn_up", ffn, d), ("ffn_down", d, ffn)]:
            matrix(p + name + ".weight", rows, cols)
    if shared_tables:
        weights["token_embd.weight"] = dequantize(embd.data, embd.tensor_type).reshape(-1, d).astype(np.float64)
    elif d_model is None:
        w.add_tensor("token_embd.weight", np.array(embd.data, copy=True), raw_dtype=embd.tensor_type)
        weights["token_embd.weight"] = dequantize(embd.data, embd.tensor_type).reshape(-1, d).astype(np.float64)
    else:  # (a draft for another width: its own table)
        table = (rng.standard_normal((vocab, d)) * 0.02).astype(np.float32)
        w.add_tensor("token_embd.weight", table)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return {"weights": weights, "layers": layers, "heads": heads, "kv_heads": kv_heads, "head_dim": head_dim,
            "eps": eps, "base": 100000.0, "rope_dims": rope_dims or head_dim, "window": window}


def rms(x, weight, eps):
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * weight


def rope(x, positions, base, dims=None):
    """NEOX RoPE of x [n, heads, dim] at absolute positions, on the first `dims` of each head."""
    dim = dims or x.shape[-1]
    angles = positions[:, None] * base ** (-np.arange(0, dim, 2) / dim)[None, :]
    cos, sin = np.cos(angles)[:, None, :], np.sin(angles)[:, None, :]
    a, b = x[..., : dim // 2], x[..., dim // 2: dim]
    return np.concatenate([a * cos - b * sin, a * sin + b * cos, x[..., dim:]], axis=-1)


def reference_block(draft: dict, taps: np.ndarray, token: int, position: int, with_context: bool = True,
                    window: int | None = None):
    """The block [token, MASK...] at `position` seeing the context rows of positions 0 .. position - 1
    (taps [position][taps][d]; with a sliding window, block row r those less than `window` before
    position + r): its logits [BLOCK][vocab], float64."""
    W, eps, base, dims = draft["weights"], draft["eps"], draft["base"], draft.get("rope_dims")
    H, K, hd = draft["heads"], draft["kv_heads"], draft["head_dim"]
    table = W["token_embd.weight"]
    ctx = rms(taps.reshape(taps.shape[0], -1).astype(np.float64) @ W["fc.weight"].T, W["enc.output_norm.weight"], eps)
    if not with_context:
        ctx = ctx[:0]
    ctx_pos = np.arange(ctx.shape[0], dtype=np.float64)
    pos = position + np.arange(BLOCK, dtype=np.float64)
    h = np.stack([table[token]] + [table[0]] * (BLOCK - 1))  # (the mask vector: token 0's row)
    for i in range(draft["layers"]):
        p = f"blk.{i}."

        def kv(x, positions):
            k = rope(rms((x @ W[p + "attn_k.weight"].T).reshape(-1, K, hd), W[p + "attn_k_norm.weight"], eps),
                     positions, base, dims)
            return k, (x @ W[p + "attn_v.weight"].T).reshape(-1, K, hd)

        x = rms(h, W[p + "attn_norm.weight"], eps)
        q = rope(rms((x @ W[p + "attn_q.weight"].T).reshape(BLOCK, H, hd), W[p + "attn_q_norm.weight"], eps), pos, base,
                 dims)
        ck, cv = kv(ctx, ctx_pos)
        bk, bv = kv(x, pos)
        keys, values = np.concatenate([ck, bk]), np.concatenate([cv, bv])
        out = np.zeros((BLOCK, H, hd))
        for head in range(H):
            g = head // (H // K)
            scores = q[:, head] @ keys[:, g].T / np.sqrt(hd)
            if window:
                seen = (pos[:, None] - ctx_pos[None, :]) < window
                scores[:, : ctx.shape[0]] = np.where(seen, scores[:, : ctx.shape[0]], -np.inf)
            scores = np.exp(scores - scores.max(-1, keepdims=True))
            out[:, head] = (scores / scores.sum(-1, keepdims=True)) @ values[:, g]
        h = h + out.reshape(BLOCK, -1) @ W[p + "attn_output.weight"].T
        x = rms(h, W[p + "ffn_norm.weight"], eps)
        gate = x @ W[p + "ffn_gate.weight"].T
        h = h + (gate / (1 + np.exp(-gate)) * (x @ W[p + "ffn_up.weight"].T)) @ W[p + "ffn_down.weight"].T
    return rms(h, W["output_norm.weight"], eps) @ table.T


@pytest.fixture(scope="module")
def draft_file(tmp_path_factory, model_path):
    path = tmp_path_factory.mktemp("draft") / "draft.gguf"
    return path, write_draft(path, model_path)


def block_after(splash_binary, model_path, path, draft, ids, tmp_path):
    """The draft's block logits after the prompt `ids` (eval --draft-logits-out), and the
    target's taps of every position (for the reference)."""
    hidden, logits = tmp_path / "hidden.f32", tmp_path / "draft.f32"
    run(splash_binary, "eval", "--device", "cpu", "--model", model_path, "--tokens", ",".join(map(str, ids)),
        "--hidden-layers", ",".join(map(str, TAPS)), "--hidden-out", str(hidden),
        "--draft-model", str(path), "--draft-logits-out", str(logits))
    table = draft["weights"]["token_embd.weight"]
    taps = np.fromfile(hidden, dtype="<f4").reshape(len(ids), len(TAPS), table.shape[1])
    return np.fromfile(logits, dtype="<f4").reshape(BLOCK, table.shape[0]), taps


def test_block_logits_match_reference(splash_binary, model_path, draft_file, tmp_path):
    path, draft = draft_file
    ids = np.random.default_rng(7).integers(2, 49152, 300).tolist()  # (past one 256-row context chunk)
    eng, taps = block_after(splash_binary, model_path, path, draft, ids, tmp_path)
    want = reference_block(draft, taps[:-1], ids[-1], len(ids) - 1)
    rel = np.linalg.norm(eng - want, axis=1) / np.linalg.norm(want, axis=1)
    print("block rows' relative error:", np.round(rel, 4))
    assert rel.max() <= ROW_REL_MAX, rel
    top2 = np.sort(want, axis=1)[:, -2:]
    clear = (top2[:, 1] - top2[:, 0]) > 0.05 * want.std(axis=1)  # (rows without a near tie)
    assert (eng.argmax(1) == want.argmax(1))[clear].all(), (eng.argmax(1), want.argmax(1))
    blind = reference_block(draft, taps[:-1], ids[-1], len(ids) - 1, with_context=False)
    assert (np.linalg.norm(eng - blind, axis=1) / np.linalg.norm(blind, axis=1)).min() > 3 * ROW_REL_MAX


def test_a_draft_without_tables_takes_the_targets(splash_binary, model_path, draft_file, tmp_path):
    """A draft in llama.cpp's converted layout (no token_embd, no output: the target's table, its
    mask token's row and the target's head) guesses exactly what the same draft carrying the
    target's table does, and is refused where no target can lend them."""
    path, _ = draft_file
    shared = tmp_path / "shared.gguf"
    write_draft(shared, model_path, shared_tables=True)  # (the same seed: the same weights)
    assert "token_embd.weight" not in {t.name for t in GGUFReader(str(shared)).tensors}
    ids = ",".join(str(i) for i in np.random.default_rng(5).integers(2, 49152, 60).tolist())
    logits = {}
    for name, draft in [("own", path), ("shared", shared)]:
        out = tmp_path / f"{name}.f32"
        run(splash_binary, "eval", "--device", "cpu", "--model", model_path, "--tokens", ids,
            "--draft-model", str(draft), "--draft-logits-out", str(out))
        logits[name] = np.fromfile(out, dtype="<f4")
    assert logits["own"].size > 0 and np.array_equal(logits["own"], logits["shared"])
    # ... and drafts with it through decoding: the output of plain decoding.
    replies = {}
    for mode in ["none", "model"]:
        out = run(splash_binary, "eval", "--device", "cpu", "--model", model_path, "--tokens", ids, "--greedy", "32",
                  "--draft", mode, "--draft-model", str(shared)).stdout
        replies[mode] = json.loads(out.strip().splitlines()[-1])
    assert replies["model"]["generated"] == replies["none"]["generated"] and replies["model"]["drafted"] > 0


def test_partial_rope_and_a_sliding_window_match_reference(splash_binary, model_path, tmp_path):
    """What llama.cpp's converter states for other drafts: RoPE on part of each head
    (dflash.rope.dimension_count) and sliding-window layers (dflash.attention.sliding_window),
    against the reference with both; the window's absence is far off (the check sees it)."""
    path = tmp_path / "windowed.gguf"
    draft = write_draft(path, model_path, seed=1, rope_dims=32, window=40)
    ids = np.random.default_rng(11).integers(2, 49152, 120).tolist()
    eng, taps = block_after(splash_binary, model_path, path, draft, ids, tmp_path)
    want = reference_block(draft, taps[:-1], ids[-1], len(ids) - 1, window=40)
    rel = np.linalg.norm(eng - want, axis=1) / np.linalg.norm(want, axis=1)
    assert rel.max() <= ROW_REL_MAX, rel
    unwindowed = reference_block(draft, taps[:-1], ids[-1], len(ids) - 1)
    assert (np.linalg.norm(eng - unwindowed, axis=1) / np.linalg.norm(unwindowed, axis=1)).min() > ROW_REL_MAX


def test_a_causal_draft_is_refused(splash_binary, model_path, tmp_path):
    path = tmp_path / "causal.gguf"
    write_draft(path, model_path, causal=True)
    proc = run(splash_binary, "eval", "--device", "cpu", "--model", model_path, "--tokens", "1,2,3", "--greedy", "2",
               "--draft", "model", "--draft-model", str(path), check=False)
    assert proc.returncode != 0 and "causal attention" in proc.stderr, proc.stderr[-500:]


CODE_PROMPT = ("Repeat this function exactly, then write it again with `total` renamed to `acc`:\n\n"
               "def add_all(values):\n    total = 0\n    for v in values:\n        total = total + v\n"
               "    return total\n")


def test_output_identical_with_the_block_draft(splash_binary, model_path, draft_file):
    path, _ = draft_file
    replies = greedy_reply_in_every_draft_mode(splash_binary, model_path, 64, "--draft-model", str(path))
    # The block draft guesses where lookup has nothing (random weights: refused, never a wrong output; after
    # its first blocks it is only asked now and then, BlockDrafter::kPaysFrom), so it ran, fed with the hidden
    # states of every committed position.
    assert replies["model"]["drafted"] > replies["lookup"]["drafted"] + 10, replies
    assert replies["auto"]["drafted"] == replies["model"]["drafted"]


def test_served_with_the_block_draft(splash_server, draft_file):
    path, _ = draft_file
    with_draft = splash_server("--draft-model", str(path), "--device", "cpu")
    plain = splash_server("--draft", "lookup", "--device", "cpu")
    body = {"messages": [{"role": "user", "content": CODE_PROMPT}], "max_tokens": 96, "temperature": 0}
    replies = [requests.post(f"{server.url}/v1/chat/completions", json=body, timeout=120).json()
               for server in (with_draft, plain)]
    assert replies[0]["choices"][0]["message"]["content"] == replies[1]["choices"][0]["message"]["content"]
    status = [requests.get(f"{server.url}/status", timeout=10).json() for server in (with_draft, plain)]
    assert "block draft after lookup" in json.dumps(status[0])
    drafted = [s["speculative_decoding"]["draft_tokens"] for s in status]
    assert drafted[0] > drafted[1] + 10, drafted  # (the engine fed the draft: it guessed where lookup had nothing)
    # The memory plan counts the draft: its weights (two layers at the target's width, its
    # own head: Q8_0), each running sequence's context (64 of them, 2048 + 512 + 256 rows of
    # keys and values a layer) and the contexts kept beside the prefix cache.
    memory = [s["memory"] for s in status]
    caches = [{c["name"]: c["budget_bytes"] for c in m["caches"]} for m in memory]
    assert "block draft contexts" not in caches[1] and "block draft states" not in caches[1]
    kv_width = 3 * 64  # SmolLM2-135M: 3 KV heads of 64
    assert caches[0]["block draft contexts"] == 64 * 2816 * (4 + 2 * 2 * kv_width * 4), caches[0]
    assert caches[0]["block draft states"] == 128 << 20
    # (the table read in place, its Q8_0 copy as the draft's tied head, the F16 matrices as
    # Q8_0: about half their bytes)
    extra = sum(memory[0][k] - memory[1][k] for k in ("weights_bytes", "mapped_weights_bytes"))
    assert path.stat().st_size < extra < 2 * path.stat().st_size, (extra, path.stat().st_size)


def test_drafts_that_cannot_run_are_refused(splash_binary, model_path, draft_file, tmp_path):
    path, _ = draft_file
    base = ["eval", "--device", "cpu", "--model", model_path, "--tokens", "1,2,3", "--greedy", "4"]
    cases = [
        (["--draft", "model"], "--draft-model"),
        (["--draft-model", model_path], "architecture 'dflash'"),
        (["--draft-model", str(path), "--hidden-layers", "0", "--hidden-out", "/dev/null"], "other layers"),
    ]
    narrow = tmp_path / "narrow.gguf"
    write_draft(narrow, model_path, d_model=64, ffn=64)
    cases.append((["--draft-model", str(narrow)], "made for a model of width 64"))
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    cases.append((["--draft-model", str(cut)], str(cut)))
    cases.append((["--draft-model", str(path), "--device", "cuda"], "CPU"))
    for extra, message in cases:
        args = base + extra
        if "--device" in extra:
            args = [a for a in base if a not in ("--device", "cpu")] + extra
        proc = run(splash_binary, *args, check=False)
        assert proc.returncode != 0 and message in proc.stderr, (extra, proc.stderr[-800:])


def test_a_cached_prefix_brings_the_drafts_context_back(splash_server, draft_file):
    """The second request reuses the first one's cached system prompt: the block draft's context
    of those positions comes back from what the first request's draft computed (no hidden states
    are computed for a cached prefix; the engine's side of this is checked exactly by the unit
    test DrafterStateComesBackWithACachedPrefix). Here, through the server: the reply and the
    counts of guesses kept and refused are those of the same request on a fresh server."""
    path, _ = draft_file
    system = "You are a careful Python reviewer. " + " ".join(f"Rule {i}: keep functions short." for i in range(40))

    def ask(server, question):
        body = {"messages": [{"role": "system", "content": system}, {"role": "user", "content": question}],
                "max_tokens": 48, "temperature": 0}
        return requests.post(f"{server.url}/v1/chat/completions", json=body, timeout=120).json()

    warm = splash_server("--draft-model", str(path), "--device", "cpu")
    ask(warm, "Is `def f(): pass` fine?")
    reused = ask(warm, CODE_PROMPT)
    fresh = ask(splash_server("--draft-model", str(path), "--device", "cpu"), CODE_PROMPT)
    assert reused["usage"]["prompt_tokens_details"]["cached_tokens"] >= 256, reused["usage"]
    assert fresh["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
    assert reused["choices"][0]["message"]["content"] == fresh["choices"][0]["message"]["content"]
    assert reused["usage"]["completion_tokens_details"] == fresh["usage"]["completion_tokens_details"]
    assert fresh["usage"]["completion_tokens_details"]["rejected_prediction_tokens"] > 0
