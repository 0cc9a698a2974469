#!/usr/bin/env python3
"""Four-phase serving benchmark against any OpenAI-compatible chat completions server.

One run measures one server; run it against splash and against a peer (e.g. llama.cpp through
llama-cpp-python's server) on the same machine, one after the other, with the same prompts
(--prompts-out on the first run, --prompts-in on the second), then compare the two result
files with bench/compare_four_phase.py. bench/run_four_phase.sh does all of that.

  (a) decode tok/s at short, 4K and 8K context: one streamed greedy completion of
      --decode-tokens tokens; rate = (tokens - 1) / (last token time - first token time).
  (b) prefill tok/s at 2K/4K/8K: prompts unique at their start (a nonce line first) so no
      prefix cache helps; rate = prompt tokens / time to first token, max_tokens = 1.
  (c) time to first token on an exact replay of a cached 8K prompt, and on a next turn that
      appends the assistant's reply and a new ~200-token user message.
  (d) aggregate decode tok/s with 1, 4, 16 concurrent requests (distinct short prompts), and
      how many long requests are served at once (overlap of their decode intervals, plus the
      server's GET /status where it has one).

Prompts are coding tasks over excerpts of real source files (bench/corpus/, Python standard
library, PSF license) chosen by a seeded random.Random and sized by the server's tokenizer
(POST /tokenize {"content"} as splash and llama.cpp's llama-server have, or POST
/extras/tokenize {"input"} as llama-cpp-python's server has), else by a chars-per-token
estimate. A size is the whole chat prompt's; the chat template's tokens are measured once (a
tiny non-streamed request's usage.prompt_tokens minus its content's tokens) and subtracted.
Sizes are clamped to the server's context (--max-context; auto reads splash's /status).

Standard library only. A benchmark, never a test: it asserts nothing about speed.

  python bench/four_phase.py --url http://127.0.0.1:8000 --label splash --phases abcd --out r.json
"""
import argparse
import glob
import http.client
import json
import math
import os
import random
import re
import statistics
import sys
import threading
import time
import urllib.parse

HERE = os.path.dirname(os.path.abspath(__file__))
CORPUS_DIR = os.path.join(HERE, "corpus")
TEMPLATE_OVERHEAD_FALLBACK = 24  # tokens a chat template adds, when it cannot be measured
PER_MESSAGE_TOKENS = 5  # role markers of one more message (ChatML: <|im_start|>role\n ... <|im_end|>\n)

TASKS = [
    "Write a new function `{name}_fast` that behaves exactly like `{name}` above but runs faster. "
    "Give the complete code, then explain each change.",
    "Write a complete pytest test module for `{name}` from the code above, covering normal inputs, "
    "edge cases and errors. Give the whole file.",
    "Find a bug or an unhandled edge case in `{name}` and give a corrected version of the function "
    "with comments on every change.",
    "Add full type hints and a detailed docstring to `{name}` and to every helper it calls. "
    "Show the complete updated code.",
    "Refactor `{name}` into smaller functions without changing its behaviour and show the "
    "complete result, then list what each new function does.",
    "Explain step by step what `{name}` does, then rewrite it in idiomatic modern Python with "
    "the full code.",
]
FOLLOW_UPS = [
    "Thanks. Now apply the same idea to this code as well and show the full result:",
    "Good. Next, here is another part of the repository. Do the same for it:",
    "That works. Please also handle this code, keeping the same style:",
]


# ----------------------------------------------------------------------------- HTTP

class Server:
    """Minimal OpenAI-compatible client over http.client (one connection per request)."""

    def __init__(self, url, api_key=None, timeout=1800.0):
        url = url.rstrip("/")
        if url.endswith("/v1"):
            url = url[:-3]
        parts = urllib.parse.urlsplit(url)
        self.scheme = parts.scheme or "http"
        self.host = parts.hostname or "127.0.0.1"
        self.port = parts.port or (443 if self.scheme == "https" else 80)
        self.prefix = parts.path.rstrip("/")
        self.api_key = api_key
        self.timeout = timeout
        self.base = url

    def _connection(self, timeout=None):
        cls = http.client.HTTPSConnection if self.scheme == "https" else http.client.HTTPConnection
        return cls(self.host, self.port, timeout=timeout or self.timeout)

    def _headers(self):
        headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
        if self.api_key:
            headers["Authorization"] = "Bearer " + self.api_key
        return headers

    def request(self, method, path, body=None, timeout=None):
        """Returns (status, parsed JSON or None, raw text)."""
        conn = self._connection(timeout)
        try:
            data = json.dumps(body).encode() if body is not None else None
            conn.request(method, self.prefix + path, body=data, headers=self._headers())
            resp = conn.getresponse()
            raw = resp.read().decode("utf-8", "replace")
            try:
                parsed = json.loads(raw)
            except ValueError:
                parsed = None
            return resp.status, parsed, raw
        finally:
            conn.close()

    def try_json(self, method, path, body=None, timeout=10.0):
        try:
            status, parsed, _ = self.request(method, path, body, timeout=timeout)
        except (OSError, http.client.HTTPException):
            return None
        return parsed if status == 200 else None

    def stream_chat(self, payload):
        """Streams one chat completion; returns a dict of timings and counts (never raises)."""
        result = {"t_send": time.perf_counter(), "t_first": None, "t_last": None, "t_done": None,
                  "content_chunks": 0, "text": "", "finish_reason": None, "usage": None,
                  "status": None, "error": None}
        conn = self._connection()
        try:
            conn.request("POST", self.prefix + "/v1/chat/completions", body=json.dumps(payload).encode(),
                         headers=self._headers())
            resp = conn.getresponse()
            result["status"] = resp.status
            if resp.status != 200:
                result["error"] = f"HTTP {resp.status}: {resp.read().decode('utf-8', 'replace')[:500]}"
                return result
            pieces = []
            for raw in resp:
                now = time.perf_counter()
                line = raw.decode("utf-8", "replace").strip()
                if not line.startswith("data:"):
                    continue  # blank separators, ": keep-alive" / ": ping" comments, event: lines
                data = line[5:].strip()
                if data == "[DONE]":
                    break
                try:
                    chunk = json.loads(data)
                except ValueError:
                    continue
                if isinstance(chunk, dict) and chunk.get("error"):
                    result["error"] = json.dumps(chunk["error"])[:500]
                    break
                if chunk.get("usage"):
                    result["usage"] = chunk["usage"]
                for choice in chunk.get("choices") or []:
                    delta = choice.get("delta") or {}
                    text = (delta.get("content") or "") + (delta.get("reasoning_content") or "")
                    if delta.get("tool_calls"):
                        text += json.dumps(delta["tool_calls"])
                    if text:
                        if result["t_first"] is None:
                            result["t_first"] = now
                        result["t_last"] = now
                        result["content_chunks"] += 1
                        pieces.append(text)
                    if choice.get("finish_reason"):
                        result["finish_reason"] = choice["finish_reason"]
                        if result["t_first"] is None:  # the one token decoded to no text
                            result["t_first"] = result["t_last"] = now
            result["text"] = "".join(pieces)
        except (OSError, http.client.HTTPException) as e:
            result["error"] = f"{type(e).__name__}: {e}"
        finally:
            result["t_done"] = time.perf_counter()
            conn.close()
        return result


# ----------------------------------------------------------------------------- tokens

class Tokenizer:
    """Counts tokens of a text with the server's tokenizer, or estimates them."""

    def __init__(self, server, mode, chars_per_token):
        self.server = server
        self.chars_per_token = chars_per_token
        self.mode = self._detect(mode)
        self.baseline = self._raw_count("") if self.mode != "estimate" else 0  # e.g. a BOS token

    def _detect(self, mode):
        mode = {"splash": "tokenize", "llamacpp": "extras", "llama-cpp-python": "extras"}.get(mode, mode)
        if mode != "auto":
            if mode != "estimate" and self._probe(mode) is None:
                sys.exit(f"error: the server has no working tokenizer endpoint for --tokenizer {mode}")
            return mode
        for candidate in ("tokenize", "extras"):
            if self._probe(candidate) is not None:
                return candidate
        return "estimate"

    def _probe(self, mode):
        try:
            return self._raw_count("def main():\n    return 0\n", mode)
        except (OSError, http.client.HTTPException, ValueError, KeyError, TypeError):
            return None

    def _raw_count(self, text, mode=None):
        mode = mode or self.mode
        if mode == "tokenize":
            status, parsed, raw = self.server.request("POST", "/tokenize", {"content": text}, timeout=60)
        elif mode == "extras":
            status, parsed, raw = self.server.request("POST", "/extras/tokenize", {"input": text}, timeout=60)
        else:
            return math.ceil(len(text) / self.chars_per_token)
        if status != 200 or not isinstance(parsed, dict) or not isinstance(parsed.get("tokens"), list):
            raise ValueError(f"tokenize failed: HTTP {status} {raw[:200]}")
        return len(parsed["tokens"])

    def count(self, text):
        if self.mode == "estimate":
            return math.ceil(len(text) / self.chars_per_token)
        return self._raw_count(text) - self.baseline


# ----------------------------------------------------------------------------- prompts

def load_corpus():
    files = []
    for path in sorted(glob.glob(os.path.join(CORPUS_DIR, "*.py"))):
        with open(path, encoding="utf-8") as f:
            lines = f.read().splitlines()
        starts = [i for i, line in enumerate(lines) if re.match(r"\s*(async\s+)?(def|class)\s+\w+", line)]
        files.append({"path": "Lib/" + os.path.basename(path), "lines": lines, "starts": starts or [0]})
    if not files:
        sys.exit(f"error: no corpus files in {CORPUS_DIR}")
    return files


class PromptBuilder:
    """Deterministic coding-task prompts sized to a token target. Each prompt has its own
    random.Random seeded from (--seed, key), so a prompt does not depend on which others were
    built before it."""

    def __init__(self, corpus, tokenizer, seed):
        self.corpus = corpus
        self.tokenizer = tokenizer
        self.seed = seed

    def _rng(self, key):
        return random.Random(f"{self.seed}:{key}")

    def _excerpts(self, rng):
        while True:
            f = rng.choice(self.corpus)
            start = rng.choice(f["starts"])
            end = min(len(f["lines"]), start + rng.randint(30, 110))
            yield f["path"], start, f["lines"][start:end]

    @staticmethod
    def _render(head, blocks, budget, tail):
        """head + the first `budget` excerpt lines (blocks cut where the budget ends) + tail."""
        parts = [head]
        for path, start, lines in blocks:
            if budget <= 0:
                break
            take = lines[:budget]
            budget -= len(take)
            parts.append(f"{path} (lines {start + 1}-{start + len(take)}):\n```python\n" + "\n".join(take) + "\n```\n\n")
        parts.append(tail)
        return "".join(parts)

    def build(self, key, target_tokens, kind="task"):
        """A user message of about target_tokens tokens (content tokens, no template)."""
        rng = self._rng(key)
        nonce = f"{rng.getrandbits(64):016x}"
        blocks = []
        excerpts = self._excerpts(rng)
        if kind == "follow_up":
            head = f"[{key} {nonce}] {rng.choice(FOLLOW_UPS)}\n\n"
        else:
            head = f"Request {key} {nonce}.\nHere is part of a repository:\n\n"
        # The task names a function from the first excerpt, the one surely kept.
        first = next(excerpts)
        blocks.append(first)
        names = [m.group(2) for line in first[2] for m in [re.match(r"\s*(async\s+)?def\s+(\w+)", line)] if m]
        name = names[0] if names else "the code above"
        tail = "Task: " + rng.choice(TASKS).format(name=name) + "\n"
        # Enough lines to overshoot the target by the chars-per-token estimate (x2 margin).
        want_chars = target_tokens * self.tokenizer.chars_per_token * 2 + 2000
        while sum(len(line) + 1 for _, _, lines in blocks for line in lines) < want_chars:
            blocks.append(next(excerpts))
        total_lines = sum(len(lines) for _, _, lines in blocks)

        counts = {}

        def tokens(budget):
            if budget not in counts:
                counts[budget] = self.tokenizer.count(self._render(head, blocks, budget, tail))
            return counts[budget]

        # Largest line budget whose prompt fits the target (token count grows with the budget).
        lo, hi = 0, total_lines
        if tokens(hi) <= target_tokens:
            lo = hi
        else:
            full = tokens(hi)
            guess = max(0, min(hi - 1, int(hi * target_tokens / max(full, 1))))
            if tokens(guess) <= target_tokens:
                lo = guess
                step = max(1, hi // 50)
                while lo + step < hi and tokens(lo + step) <= target_tokens:
                    lo += step
                    step *= 2
                hi = min(hi, lo + step)
            else:
                hi = guess
                step = max(1, hi // 50)
                while hi - step > 0 and tokens(hi - step) > target_tokens:
                    hi -= step
                    step *= 2
                lo = max(0, hi - step)
                if tokens(lo) > target_tokens:
                    lo = 0
            while hi - lo > 1:
                mid = (lo + hi) // 2
                if tokens(mid) <= target_tokens:
                    lo = mid
                else:
                    hi = mid
        text = self._render(head, blocks, lo, tail)
        return {"key": key, "target_tokens": target_tokens, "content": text, "content_tokens": tokens(lo),
                "tokens_counted_by": self.tokenizer.mode}


# ----------------------------------------------------------------------------- helpers

def median(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def parse_sizes(text, allow_short=False):
    out = []
    for item in filter(None, (s.strip() for s in text.split(","))):
        if allow_short and item == "short":
            out.append("short")
        else:
            value = item.lower()
            mult = 1024 if value.endswith("k") else 1
            out.append(int(float(value.rstrip("k")) * mult))
    return out


def log(*args):
    print(*args, file=sys.stderr, flush=True)


class Bench:
    def __init__(self, args):
        self.args = args
        self.server = Server(args.url, args.api_key or os.environ.get("OPENAI_API_KEY"), args.timeout)
        self.results = {"label": args.label, "url": self.server.base, "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                        "config": {k: v for k, v in vars(args).items() if k != "api_key"}, "server": {},
                        "phases": {}, "metrics": {}, "notes": []}
        self.stream_usage = True  # cleared if the server refuses stream_options

    # -- setup

    def wait_ready(self):
        deadline = time.time() + self.args.wait
        while True:
            models = self.server.try_json("GET", "/v1/models", timeout=5)
            if models is not None:
                return models
            if time.time() > deadline:
                sys.exit(f"error: no answer from {self.server.base}/v1/models")
            time.sleep(0.5)

    def setup(self):
        models = self.wait_ready()
        ids = [m.get("id") for m in (models.get("data") or []) if isinstance(m, dict)]
        self.model = self.args.model or (ids[0] if ids else None)
        self.results["server"]["models"] = ids
        self.results["server"]["model"] = self.model
        status = self.server.try_json("GET", self.args.status_path) if self.args.status_path else None
        self.results["server"]["status_before"] = status
        if self.args.max_context == "auto":
            ctx = None
            if isinstance(status, dict):
                ctx = status.get("maximum_context_tokens") or status.get("n_ctx")
            if ctx is None:
                props = self.server.try_json("GET", "/props")  # llama.cpp's llama-server
                if isinstance(props, dict):
                    ctx = (props.get("default_generation_settings") or {}).get("n_ctx")
            self.max_context = int(ctx) if ctx else None
        elif self.args.max_context in ("none", "0"):
            self.max_context = None
        else:
            self.max_context = int(self.args.max_context)
        self.results["server"]["max_context"] = self.max_context
        self.tokenizer = Tokenizer(self.server, self.args.tokenizer, self.args.chars_per_token)
        self.results["server"]["tokenizer"] = self.tokenizer.mode
        log(f"[{self.args.label}] {self.server.base} model={self.model} tokenizer={self.tokenizer.mode} "
            f"max_context={self.max_context}")
        # Warm-up (the first request may map the weights), and whether streamed usage works.
        probe = "Write a Python function that returns the sum of a list."
        r = self.chat([{"role": "user", "content": probe}], 4)
        if r["error"] and r["status"] in (400, 422):
            self.stream_usage = False
            self.results["notes"].append(f"server refused stream_options ({r['error'][:120]}); counting chunks")
            r = self.chat([{"role": "user", "content": probe}], 4)
        if r["error"]:
            sys.exit(f"error: warm-up request failed: {r['error']}")
        self.results["server"]["stream_usage"] = bool(r["usage"])
        # Template overhead: a non-streamed request's prompt_tokens minus its content's tokens.
        overhead = None
        if self.tokenizer.mode != "estimate":
            status_code, parsed, _ = self.server.request("POST", "/v1/chat/completions", {
                "model": self.model, "messages": [{"role": "user", "content": probe}], "max_tokens": 1,
                "temperature": 0})
            usage = (parsed or {}).get("usage") if status_code == 200 and isinstance(parsed, dict) else None
            if usage and usage.get("prompt_tokens"):
                overhead = usage["prompt_tokens"] - self.tokenizer.count(probe)
        if self.args.template_overhead != "auto":
            overhead = int(self.args.template_overhead)
        self.overhead = overhead if overhead is not None else TEMPLATE_OVERHEAD_FALLBACK
        self.results["server"]["template_overhead_tokens"] = self.overhead
        self.results["server"]["template_overhead_measured"] = overhead is not None

    def chat(self, messages, max_tokens):
        payload = {"model": self.model, "messages": messages, "max_tokens": max_tokens, "temperature": 0,
                   "stream": True}
        if self.model is None:
            del payload["model"]
        if self.stream_usage:
            payload["stream_options"] = {"include_usage": True}
        return self.server.stream_chat(payload)

    # -- prompts

    def clamp(self, target, reserve):
        """The largest prompt size <= target that leaves `reserve` tokens of the context free."""
        if self.max_context is None:
            return target
        return max(16, min(target, self.max_context - reserve - 8))

    def build_prompts(self):
        a, builder = self.args, PromptBuilder(load_corpus(), self.tokenizer, self.args.seed)
        prompts = {}
        short = a.short_size

        def user(key, total_tokens):
            # total_tokens is the whole chat prompt's size; the template takes its share.
            return builder.build(key, max(8, total_tokens - self.overhead))

        reps = a.repetitions
        if "a" in a.phases:
            for ctx in parse_sizes(a.decode_contexts, allow_short=True):
                size = short if ctx == "short" else self.clamp(ctx, a.decode_tokens)
                prompts[f"a:{ctx}"] = user(f"decode-{ctx}", size)
        if "b" in a.phases:
            for size in parse_sizes(a.prefill_sizes):
                for r in range(reps):
                    prompts[f"b:{size}:{r}"] = user(f"prefill-{size}-{r}", self.clamp(size, 1))
        if "c" in a.phases:
            # Room for the reply, the next user message (its template too) and its reply.
            reserve = 2 * a.reply_tokens + a.next_turn_tokens + 2 * self.overhead
            for r in range(reps):
                prompts[f"c:base:{r}"] = user(f"replay-{a.replay_size}-{r}", self.clamp(a.replay_size, reserve))
                prompts[f"c:next:{r}"] = builder.build(f"next-turn-{r}", a.next_turn_tokens, kind="follow_up")
        if "d" in a.phases:
            for level in parse_sizes(a.concurrency):
                for r in range(reps):
                    for i in range(level):
                        prompts[f"d:{level}:{r}:{i}"] = user(f"concurrent-{level}-{r}-{i}", short)
            for i in range(a.long_requests):
                prompts[f"d:long:{i}"] = user(f"long-{a.long_size}-{i}", self.clamp(a.long_size, a.long_decode_tokens))
        return prompts

    def prompt_tokens(self, run, messages):
        """Server-reported prompt tokens; else content tokens + measured template overhead."""
        if run.get("usage") and run["usage"].get("prompt_tokens"):
            return run["usage"]["prompt_tokens"], "usage"
        # The measured overhead covers one message (and any default system prompt); each further
        # message adds its role markers, about PER_MESSAGE_TOKENS.
        total = sum(self.tokenizer.count(m["content"]) for m in messages)
        return total + self.overhead + PER_MESSAGE_TOKENS * (len(messages) - 1), "tokenizer+template"

    @staticmethod
    def completion_tokens(run):
        if run.get("usage") and run["usage"].get("completion_tokens") is not None:
            return run["usage"]["completion_tokens"], "usage"
        return run["content_chunks"], "chunks"

    def record(self, run, messages=None):
        """The per-request record kept in the JSON (no text, times relative to the send)."""
        out = {"status": run["status"], "error": run["error"], "finish_reason": run["finish_reason"]}
        if run["t_first"] is not None:
            out["ttft_s"] = run["t_first"] - run["t_send"]
            out["decode_window_s"] = run["t_last"] - run["t_first"]
        out["total_s"] = run["t_done"] - run["t_send"]
        out["completion_tokens"], out["completion_tokens_from"] = self.completion_tokens(run)
        if messages is not None:
            out["prompt_tokens"], out["prompt_tokens_from"] = self.prompt_tokens(run, messages)
        n = out["completion_tokens"]
        if run["t_first"] is not None and n and n > 1 and run["t_last"] > run["t_first"]:
            out["decode_tok_s"] = (n - 1) / (run["t_last"] - run["t_first"])
        if run["error"]:
            log(f"  request failed: {run['error']}")
        elif run["finish_reason"] is None:
            out["error"] = "stream ended without a finish_reason (interrupted?)"
            log("  warning: " + out["error"])
        return out

    # -- phases

    def phase_a(self, prompts):
        a, out = self.args, {}
        for ctx in parse_sizes(a.decode_contexts, allow_short=True):
            p = prompts[f"a:{ctx}"]
            messages = [{"role": "user", "content": p["content"]}]
            runs = []
            # Same prompt each repetition: after the first, a prefix cache may skip the prefill,
            # which decode speed does not depend on.
            for r in range(a.repetitions):
                runs.append(self.record(self.chat(messages, a.decode_tokens), messages))
                log(f"  (a) decode ctx={ctx} rep {r}: prompt={runs[-1]['prompt_tokens']} "
                    f"gen={runs[-1]['completion_tokens']} {fmt(runs[-1].get('decode_tok_s'))} tok/s")
            rate = median([x.get("decode_tok_s") for x in runs])
            out[str(ctx)] = {"target_tokens": ctx, "prompt_tokens": runs[0].get("prompt_tokens"),
                             "decode_tok_s": rate, "runs": runs}
            self.results["metrics"][f"decode_tok_s@{ctx}"] = rate
            if runs and max(x["completion_tokens"] or 0 for x in runs) < a.decode_tokens // 2:
                self.results["notes"].append(f"decode ctx={ctx}: the model stopped early "
                                             f"(< {a.decode_tokens // 2} tokens); rate is over fewer tokens")
        return out

    def phase_b(self, prompts):
        a, out = self.args, {}
        for size in parse_sizes(a.prefill_sizes):
            runs = []
            for r in range(a.repetitions):
                messages = [{"role": "user", "content": prompts[f"b:{size}:{r}"]["content"]}]
                x = self.record(self.chat(messages, 1), messages)
                if x.get("ttft_s"):
                    x["prefill_tok_s"] = x["prompt_tokens"] / x["ttft_s"]
                runs.append(x)
                log(f"  (b) prefill {size} rep {r}: prompt={x['prompt_tokens']} ttft={fmt(x.get('ttft_s'), 3)} s "
                    f"{fmt(x.get('prefill_tok_s'))} tok/s")
            rate = median([x.get("prefill_tok_s") for x in runs])
            out[str(size)] = {"target_tokens": size, "prompt_tokens": median([x["prompt_tokens"] for x in runs]),
                              "ttft_s": median([x.get("ttft_s") for x in runs]), "prefill_tok_s": rate,
                              "runs": runs}
            self.results["metrics"][f"prefill_tok_s@{size}"] = rate
        return out

    def phase_c(self, prompts):
        a, runs = self.args, []
        for r in range(a.repetitions):
            base = [{"role": "user", "content": prompts[f"c:base:{r}"]["content"]}]
            cold = self.chat(base, a.reply_tokens)
            replay = self.chat(base, a.reply_tokens)  # identical request
            reply = replay["text"] or cold["text"] or "OK."
            turn = base + [{"role": "assistant", "content": reply},
                           {"role": "user", "content": prompts[f"c:next:{r}"]["content"]}]
            nxt = self.chat(turn, a.reply_tokens)
            x = {"cold": self.record(cold, base), "replay": self.record(replay, base),
                 "next_turn": self.record(nxt, turn)}
            x["next_turn"]["appended_tokens"] = x["next_turn"]["prompt_tokens"] - x["replay"]["prompt_tokens"]
            runs.append(x)
            log(f"  (c) rep {r}: prompt={x['cold']['prompt_tokens']} cold ttft={fmt(x['cold'].get('ttft_s'), 3)} s, "
                f"replay ttft={fmt(x['replay'].get('ttft_s'), 3)} s, next turn (+{x['next_turn']['appended_tokens']} "
                f"tokens) ttft={fmt(x['next_turn'].get('ttft_s'), 3)} s")
        out = {"target_tokens": a.replay_size, "prompt_tokens": runs[0]["cold"]["prompt_tokens"] if runs else None,
               "next_turn_prompt_tokens": runs[0]["next_turn"]["prompt_tokens"] if runs else None,
               "cold_ttft_s": median([x["cold"].get("ttft_s") for x in runs]),
               "replay_ttft_s": median([x["replay"].get("ttft_s") for x in runs]),
               "next_turn_ttft_s": median([x["next_turn"].get("ttft_s") for x in runs]), "runs": runs}
        m = self.results["metrics"]
        m["cold_ttft_s"], m["replay_ttft_s"], m["next_turn_ttft_s"] = (
            out["cold_ttft_s"], out["replay_ttft_s"], out["next_turn_ttft_s"])
        return out

    def concurrent(self, message_lists, max_tokens, poll_status=False):
        """Fires all requests at once (one thread each); returns the raw runs and /status samples."""
        runs = [None] * len(message_lists)
        barrier = threading.Barrier(len(message_lists) + 1)

        def worker(i):
            barrier.wait()
            runs[i] = self.chat(message_lists[i], max_tokens)

        threads = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(len(message_lists))]
        for t in threads:
            t.start()
        samples, stop = [], threading.Event()

        def poller():
            while not stop.is_set():
                s = self.server.try_json("GET", self.args.status_path, timeout=5)
                if not isinstance(s, dict):
                    return
                samples.append({"t": time.perf_counter(), "requests_running": s.get("requests_running"),
                                "requests_queued": s.get("requests_queued")})
                stop.wait(self.args.status_interval)

        poll = threading.Thread(target=poller, daemon=True) if poll_status and self.args.status_path else None
        barrier.wait()
        if poll:
            poll.start()
        for t in threads:
            t.join()
        stop.set()
        if poll:
            poll.join()
        return runs, samples

    def phase_d(self, prompts):
        a, out = self.args, {"concurrency": {}}
        for level in parse_sizes(a.concurrency):
            reps = []
            for r in range(a.repetitions):
                lists = [[{"role": "user", "content": prompts[f"d:{level}:{r}:{i}"]["content"]}] for i in range(level)]
                raw, _ = self.concurrent(lists, a.decode_tokens)
                recs = [self.record(x) for x in raw]
                ok = [(x, rec) for x, rec in zip(raw, recs) if x["t_first"] is not None]
                total = sum(rec["completion_tokens"] or 0 for _, rec in ok)
                agg = None
                if ok and total > 1:
                    window = max(x["t_last"] for x, _ in ok) - min(x["t_first"] for x, _ in ok)
                    agg = (total - 1) / window if window > 0 else None
                wall = max(x["t_done"] for x in raw) - min(x["t_send"] for x in raw)
                rep = {"aggregate_tok_s": agg, "generated_tokens": total, "wall_s": wall,
                       "end_to_end_tok_s": total / wall if wall > 0 else None,
                       "failed": sum(1 for rec in recs if rec.get("error")),
                       "decode_overlap": max_overlap([(x["t_first"], x["t_last"]) for x, _ in ok]),
                       "requests": recs}
                reps.append(rep)
                log(f"  (d) {level} concurrent rep {r}: {total} tokens, aggregate {fmt(agg)} tok/s, "
                    f"overlap {rep['decode_overlap']}, failed {rep['failed']}")
            agg = median([x["aggregate_tok_s"] for x in reps])
            out["concurrency"][str(level)] = {"aggregate_tok_s": agg,
                                              "end_to_end_tok_s": median([x["end_to_end_tok_s"] for x in reps]),
                                              "reps": reps}
            self.results["metrics"][f"aggregate_tok_s@{level}"] = agg
        if a.long_requests > 0:
            lists = [[{"role": "user", "content": prompts[f"d:long:{i}"]["content"]}] for i in range(a.long_requests)]
            log(f"  (d) {a.long_requests} concurrent long requests of ~{a.long_size} tokens ...")
            raw, samples = self.concurrent(lists, a.long_decode_tokens, poll_status=True)
            recs = [self.record(x, m) for x, m in zip(raw, lists)]
            ok = [x for x in raw if x["t_first"] is not None and not x["error"]]
            t0 = min(x["t_send"] for x in raw)
            running = [s["requests_running"] for s in samples if isinstance(s.get("requests_running"), int)]
            out["long"] = {
                "requests": a.long_requests, "target_tokens": a.long_size,
                "prompt_tokens": median([r.get("prompt_tokens") for r in recs]),
                "completed": sum(1 for r in recs if not r.get("error")),
                "served_concurrently": max_overlap([(x["t_first"], x["t_last"]) for x in ok]),
                "in_flight_after_first_token": max_overlap([(x["t_first"], x["t_done"]) for x in ok]),
                "status_max_requests_running": max(running) if running else None,
                "status_samples": [{**s, "t": s["t"] - t0} for s in samples],
                "wall_s": max(x["t_done"] for x in raw) - t0,
                "ttft_s": [r.get("ttft_s") for r in recs],
                "requests_detail": recs}
            self.results["metrics"]["long_served_concurrently"] = out["long"]["served_concurrently"]
            if running:
                self.results["metrics"]["long_status_max_running"] = max(running)
            log(f"  (d) long: {out['long']['completed']}/{a.long_requests} completed, "
                f"{out['long']['served_concurrently']} decoding at once, /status max running "
                f"{out['long']['status_max_requests_running']}")
        return out

    def run(self):
        self.setup()
        if self.args.prompts_in:
            with open(self.args.prompts_in, encoding="utf-8") as f:
                saved = json.load(f)
            prompts = saved["prompts"]
            self.results["notes"].append(f"prompts loaded from {self.args.prompts_in} "
                                         f"(built against {saved.get('built_by')})")
        else:
            t = time.perf_counter()
            prompts = self.build_prompts()
            log(f"[{self.args.label}] built {len(prompts)} prompts in {time.perf_counter() - t:.1f} s")
        if self.args.prompts_out:
            with open(self.args.prompts_out, "w", encoding="utf-8") as f:
                json.dump({"built_by": {"label": self.args.label, "tokenizer": self.tokenizer.mode,
                                        "template_overhead": self.overhead, "max_context": self.max_context},
                           "prompts": prompts}, f)
        for phase in self.args.phases:
            fn = getattr(self, "phase_" + phase, None)
            if fn is None:
                sys.exit(f"error: unknown phase '{phase}'")
            log(f"[{self.args.label}] phase {phase}")
            t = time.perf_counter()
            try:
                self.results["phases"][phase] = fn(prompts)
            except KeyError as e:
                sys.exit(f"error: phase {phase} needs prompt {e} (--prompts-in built with other sizes?)")
            self.results["phases"][phase + "_seconds"] = time.perf_counter() - t
        if self.args.status_path:
            self.results["server"]["status_after"] = self.server.try_json("GET", self.args.status_path)
        self.results["finished"] = time.strftime("%Y-%m-%dT%H:%M:%S%z")
        return self.results


def max_overlap(intervals):
    """Largest number of [start, end] intervals that share a moment (touching ends don't count)."""
    events = []
    for start, end in intervals:
        if start is None or end is None:
            continue
        events.append((start, 1))
        events.append((end, -1))
    events.sort(key=lambda e: (e[0], e[1]))  # at equal times ends (-1) before starts
    best = cur = 0
    for _, d in events:
        cur += d
        best = max(best, cur)
    return best


def fmt(value, digits=1):
    return "-" if value is None else f"{value:.{digits}f}"


def fmt_tokens(value):
    return "-" if value is None else f"{value:.0f}"


def summary(results):
    lines = [f"\n== {results['label']} ({results['url']}, model {results['server'].get('model')}, "
             f"tokenizer {results['server'].get('tokenizer')}, stream usage "
             f"{'yes' if results['server'].get('stream_usage') else 'no'}) =="]
    lines.append(f"{'metric':<34}{'value':>12}  {'unit':<6} detail")
    ph = results["phases"]
    for ctx, x in (ph.get("a") or {}).items():
        lines.append(f"{'decode @ ' + ctx:<34}{fmt(x['decode_tok_s']):>12}  tok/s  prompt {fmt_tokens(x['prompt_tokens'])} tokens")
    for size, x in (ph.get("b") or {}).items():
        lines.append(f"{'prefill @ ' + size:<34}{fmt(x['prefill_tok_s']):>12}  tok/s  prompt {fmt_tokens(x['prompt_tokens'])} "
                     f"tokens, ttft {fmt(x['ttft_s'], 3)} s")
    c = ph.get("c")
    if c:
        lines.append(f"{'cold ttft @ ' + str(c['target_tokens']):<34}{fmt(c['cold_ttft_s'], 3):>12}  s      "
                     f"prompt {fmt_tokens(c['prompt_tokens'])} tokens")
        speed = (f", {c['cold_ttft_s'] / c['replay_ttft_s']:.1f}x faster than cold"
                 if c['cold_ttft_s'] and c['replay_ttft_s'] else "")
        lines.append(f"{'cached replay ttft':<34}{fmt(c['replay_ttft_s'], 3):>12}  s      exact replay{speed}")
        lines.append(f"{'next turn ttft':<34}{fmt(c['next_turn_ttft_s'], 3):>12}  s      "
                     f"prompt {fmt_tokens(c['next_turn_prompt_tokens'])} tokens")
    d = ph.get("d")
    if d:
        for level, x in d["concurrency"].items():
            lines.append(f"{'aggregate decode x' + level:<34}{fmt(x['aggregate_tok_s']):>12}  tok/s  "
                         f"end to end {fmt(x['end_to_end_tok_s'])} tok/s")
        if d.get("long"):
            lg = d["long"]
            lines.append(f"{'long requests decoding at once':<34}{lg['served_concurrently']:>12}  reqs   "
                         f"{lg['completed']}/{lg['requests']} completed, ~{fmt_tokens(lg['prompt_tokens'])} tokens each, "
                         f"/status max running {lg['status_max_requests_running']}, wall {lg['wall_s']:.1f} s")
    for note in results["notes"]:
        lines.append("note: " + note)
    return "\n".join(lines)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--url", default="http://127.0.0.1:8000", help="server base URL (a trailing /v1 is accepted)")
    p.add_argument("--model", default=None, help="model name to send (default: the first of GET /v1/models)")
    p.add_argument("--label", default="server", help="name of this server in the results")
    p.add_argument("--phases", default="abcd", help="which phases to run, e.g. abc")
    p.add_argument("--out", default=None, help="write the results JSON here")
    p.add_argument("--decode-contexts", default="short,4096,8192", help="(a) prompt sizes; 'short' = --short-size")
    p.add_argument("--prefill-sizes", default="2048,4096,8192", help="(b) prompt sizes")
    p.add_argument("--replay-size", type=int, default=8192, help="(c) cached prompt size")
    p.add_argument("--next-turn-tokens", type=int, default=200, help="(c) tokens of the new user message")
    p.add_argument("--reply-tokens", type=int, default=32, help="(c) max_tokens of each phase-c request")
    p.add_argument("--concurrency", default="1,4,16", help="(d) concurrent request counts")
    p.add_argument("--decode-tokens", type=int, default=128, help="max_tokens for (a) and (d)")
    p.add_argument("--short-size", type=int, default=128, help="prompt size of 'short' prompts (a, d)")
    p.add_argument("--long-requests", type=int, default=4, help="(d) concurrent long requests; 0 skips")
    p.add_argument("--long-size", type=int, default=8192, help="(d) prompt size of each long request")
    p.add_argument("--long-decode-tokens", type=int, default=64, help="(d) max_tokens of each long request")
    p.add_argument("--repetitions", type=int, default=3, help="repetitions of each measurement (median kept)")
    p.add_argument("--tokenizer", default="auto", choices=["auto", "tokenize", "splash", "extras", "llamacpp",
                                                           "estimate"],
                   help="size prompts by POST /tokenize {content} (splash, llama-server), POST /extras/tokenize "
                        "{input} (llama-cpp-python), or a chars-per-token estimate")
    p.add_argument("--chars-per-token", type=float, default=3.5)
    p.add_argument("--template-overhead", default="auto", help="tokens the chat template adds (auto: measured)")
    p.add_argument("--max-context", default="auto", help="clamp prompt sizes to fit this context "
                   "(auto: splash's /status or llama-server's /props; none: no clamp)")
    p.add_argument("--seed", type=int, default=20261129, help="prompt builder seed")
    p.add_argument("--prompts-out", default=None, help="save the built prompts (for --prompts-in on a peer)")
    p.add_argument("--prompts-in", default=None, help="use prompts saved by --prompts-out instead of building")
    p.add_argument("--status-path", default="/status", help="GET path polled in (d); empty to skip")
    p.add_argument("--status-interval", type=float, default=0.25)
    p.add_argument("--api-key", default=None, help="bearer token (default: $OPENAI_API_KEY)")
    p.add_argument("--timeout", type=float, default=1800.0, help="seconds per request")
    p.add_argument("--wait", type=float, default=60.0, help="seconds to wait for the server to answer")
    args = p.parse_args()
    results = Bench(args).run()
    if args.out:
        with open(args.out, "w", encoding="utf-8") as f:
            json.dump(results, f, indent=1)
    print(summary(results))
    if args.out:
        print(f"results: {args.out}")


if __name__ == "__main__":
    main()
