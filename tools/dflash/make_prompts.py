#!/usr/bin/env python3
"""Coding prompts for a block draft's training data (issue 14), built from code anyone can get
from PyPI's world: the Python standard library of the interpreter running this (or any
directories of Python sources given, e.g. unpacked sdists). Each prompt is one of the tasks a
coding agent sends (implement a function from its signature and docstring, add type hints,
refactor, write tests, find an injected bug, explain), as a chat in the JSONL that
`splash draft-data --prompts` reads. Deterministic for a given seed and source tree.

    python3 tools/dflash/make_prompts.py --count 2000 --out prompts.jsonl [--source DIR ...]
"""
from __future__ import annotations

import argparse
import ast
import json
import random
import sys
import sysconfig
from pathlib import Path

TASKS = {
    "implement": "Implement this function. Reply with the complete function in one Python code block.\n\n"
                 "```python\n{stub}\n```",
    "types": "Add type hints to this function. Show the whole function.\n\n```python\n{source}\n```",
    "refactor": "Rewrite this function to be easier to read without changing what it does. "
                "Show the whole function.\n\n```python\n{source}\n```",
    "tests": "Write pytest tests for this function.\n\n```python\n{source}\n```",
    "bug": "This function has a bug. Find it and show the corrected function.\n\n```python\n{buggy}\n```",
    "explain": "Explain what this function does, step by step.\n\n```python\n{source}\n```",
}
SYSTEM = "You are a coding assistant. Answer with code where code is asked for."
SWAPS = [(" < ", " <= "), (" <= ", " < "), (" > ", " >= "), (" == ", " != "), (" + 1", " - 1"), (" and ", " or ")]


def functions(path: Path):
    """(source, stub) of each function in the file with a docstring and 5-60 lines of body."""
    try:
        text = path.read_text(encoding="utf-8")
        tree = ast.parse(text)
    except (SyntaxError, UnicodeDecodeError, ValueError, OSError):
        return
    lines = text.splitlines()
    for node in ast.walk(tree):
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) or not ast.get_docstring(node):
            continue
        if node.end_lineno is None or not 5 <= node.end_lineno - node.lineno <= 60 or node.col_offset > 4:
            continue
        source_lines = lines[node.lineno - 1 - len(node.decorator_list):node.end_lineno]
        indent = node.col_offset
        source = "\n".join(line[indent:] for line in source_lines)
        doc = node.body[0]
        stub = "\n".join(line[indent:] for line in lines[node.lineno - 1:doc.end_lineno]) + "\n" + " " * 4 + "..."
        yield source, stub


def buggy(source: str, rng: random.Random) -> str | None:
    body = source.split("\n", 1)[-1]
    options = [(a, b) for a, b in SWAPS if a in body]
    if not options:
        return None
    a, b = rng.choice(options)
    spots = [i for i in range(len(body)) if body.startswith(a, i)]
    at = rng.choice(spots)
    return source.split("\n", 1)[0] + "\n" + body[:at] + b + body[at + len(a):]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--count", type=int, default=1000, help="prompts to write")
    ap.add_argument("--out", required=True, help="JSONL file to write")
    ap.add_argument("--source", action="append", help="directory of Python sources (default: the standard library)")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    roots = [Path(s) for s in (args.source or [sysconfig.get_paths()["stdlib"]])]
    files = sorted(p for root in roots for p in root.rglob("*.py")
                   if not any(part in ("test", "tests", "idlelib", "site-packages") for part in p.parts))
    pool = [fn for f in files for fn in functions(f)]
    if not pool:
        print(f"make_prompts: no documented functions under {', '.join(map(str, roots))}", file=sys.stderr)
        return 1
    rng = random.Random(args.seed)
    rng.shuffle(pool)
    written = 0
    with open(args.out, "w", encoding="utf-8") as out:
        for i in range(len(pool) * len(TASKS)):
            if written == args.count:
                break
            source, stub = pool[i % len(pool)]  # (round r gives function j task j + r: each its every task)
            task = list(TASKS)[(i % len(pool) + i // len(pool)) % len(TASKS)]
            fields = {"source": source, "stub": stub}
            if task == "bug":
                fields["buggy"] = buggy(source, rng)
                if fields["buggy"] is None:
                    continue
            user = TASKS[task].format(**fields)
            out.write(json.dumps({"messages": [{"role": "system", "content": SYSTEM},
                                               {"role": "user", "content": user}], "task": task}) + "\n")
            written += 1
    print(f"make_prompts: {written} prompts from {len(pool)} functions in {len(files)} files -> {args.out}",
          file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
