#!/usr/bin/env python3
"""Golden data for the CPU weight formats: raw GGUF blocks and their dequantization by the
`gguf` PyPI package (an implementation independent of ours).

Run: .venv/bin/python tools/make_quant_golden.py   (writes tests/golden/quant/)

For each type, an 18 x 512 matrix (18 rows: one full 16-row tile plus a partial one):
  <TYPE>.raw  the GGUF bytes, row-major
  <TYPE>.f32  gguf.quants.dequantize of those bytes, float32 little-endian
  manifest.json  rows, cols and this command.
Q4_K and Q6_K have no quantizer in gguf-py, so their blocks are random bytes with the
fp16 scale fields overwritten by sane values (every bit pattern of the rest is valid).
"""
import json
import pathlib

import numpy as np
from gguf import GGMLQuantizationType as T
from gguf.quants import dequantize, quantize

ROWS, COLS = 18, 512
OUT = pathlib.Path(__file__).resolve().parent.parent / "tests" / "golden" / "quant"


def random_k_blocks(rng, qtype, block_bytes, scale_offsets):
    blocks = rng.integers(0, 256, size=(ROWS, COLS // 256, block_bytes), dtype=np.uint8)
    for offset in scale_offsets:
        scales = rng.uniform(0.001, 0.05, size=(ROWS, COLS // 256)).astype(np.float16)
        blocks[:, :, offset:offset + 2] = scales.view(np.uint8).reshape(ROWS, COLS // 256, 2)
    return blocks.reshape(ROWS, -1)


def main():
    rng = np.random.default_rng(20261129)
    weights = rng.standard_normal((ROWS, COLS)).astype(np.float32) * 0.05
    OUT.mkdir(parents=True, exist_ok=True)
    manifest = {"command": "tools/make_quant_golden.py", "rows": ROWS, "cols": COLS, "types": []}
    for qtype in [T.F32, T.F16, T.BF16, T.Q8_0, T.Q4_0, T.Q4_1, T.Q4_K, T.Q6_K, T.Q5_0, T.Q5_1]:
        if qtype == T.Q4_K:
            raw = random_k_blocks(rng, qtype, 144, [0, 2])  # d, dmin
        elif qtype == T.Q6_K:
            raw = random_k_blocks(rng, qtype, 210, [208])  # d
        else:
            raw = quantize(weights, qtype)
        raw = np.ascontiguousarray(raw).view(np.uint8).reshape(ROWS, -1)
        deq = dequantize(raw, qtype).astype(np.float32).reshape(ROWS, COLS)
        (OUT / f"{qtype.name}.raw").write_bytes(raw.tobytes())
        (OUT / f"{qtype.name}.f32").write_bytes(deq.astype("<f4").tobytes())
        manifest["types"].append(qtype.name)
    (OUT / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")


if __name__ == "__main__":
    main()
