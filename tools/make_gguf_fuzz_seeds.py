#!/usr/bin/env python3
"""Seed corpus for the GGUF fuzz target: small valid GGUF files written with the `gguf`
package (every metadata value type, arrays, nested arrays, a few tensors), so the fuzzer
starts from inputs that reach deep into the parser.

Run: .venv/bin/python tools/make_gguf_fuzz_seeds.py OUT_DIR
"""
import pathlib
import sys

import numpy as np
from gguf import GGUFWriter, GGMLQuantizationType


def write_seed(path, n_tensors, with_arrays):
    writer = GGUFWriter(str(path), "llama")
    writer.add_uint8("t.u8", 7)
    writer.add_int8("t.i8", -7)
    writer.add_uint16("t.u16", 700)
    writer.add_int16("t.i16", -700)
    writer.add_uint32("t.u32", 70000)
    writer.add_int32("t.i32", -70000)
    writer.add_float32("t.f32", 1.5)
    writer.add_uint64("t.u64", 1 << 40)
    writer.add_int64("t.i64", -(1 << 40))
    writer.add_float64("t.f64", 2.25)
    writer.add_bool("t.bool", True)
    writer.add_string("t.str", "hello")
    if with_arrays:
        writer.add_array("t.arr_str", ["a", "bc", ""])
        writer.add_array("t.arr_int", [1, 2, 3])
        writer.add_array("t.arr_float", [0.5, 1.5])
    for i in range(n_tensors):
        writer.add_tensor(f"t{i}", np.arange(32 * (i + 1), dtype=np.float32).reshape(i + 1, 32))
    writer.add_tensor("q", np.zeros((2, 34), dtype=np.uint8), raw_dtype=GGMLQuantizationType.Q8_0)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def main():
    out = pathlib.Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    write_seed(out / "seed_small.gguf", 1, False)
    write_seed(out / "seed_arrays.gguf", 3, True)


if __name__ == "__main__":
    main()
