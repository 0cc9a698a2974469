#!/usr/bin/env python3
"""Writes a GGUF that holds only another GGUF's tokenizer metadata (vocabulary, merges, token
types, special ids, chat template): a few MB instead of the model's hundreds, for making
random-weight models of real shapes where the real file is too large to bring along
(tools/make_random_llama.py --tokenizer-from OUT).

    .venv/bin/python tools/tokenizer_gguf.py qwen2.5-coder-0.5b.gguf .gpu/tokenizer-qwen2.gguf
"""
import sys

from gguf import GGUFWriter

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from make_random_llama import read_tokenizer  # noqa: E402


def main() -> int:
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    source, out = sys.argv[1], sys.argv[2]
    writer = GGUFWriter(out, "tokenizer")
    for key, value, vtype, sub in read_tokenizer(source):
        writer.add_key_value(key, value, vtype, sub_type=sub)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
