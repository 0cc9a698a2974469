#pragma once
// How deeply a JSON text nests arrays and objects, found by scanning its bytes (strings are
// skipped). Checked before any JSON from outside is parsed: recursive code downstream
// (serialising, schema compilers, the library's own recursion) must never meet a document
// that nests deeper than kMaxJsonDepth, or a 200 KB body of brackets would exhaust the stack.
#include <cstddef>
#include <string_view>

namespace splash {

inline constexpr size_t kMaxJsonDepth = 512;

// What one scan of a JSON text's bytes finds (strings skipped): how deeply it nests, and
// about how many values and members it holds (each container, each comma, one for the first
// value). What its parsed tree costs in memory is nodes x kParsedBytesPerJsonNode at most (a
// value, a member's map node and key), on top of its strings: it bounds the parsed form of a
// request body before it is parsed.
inline constexpr size_t kParsedBytesPerJsonNode = 128;

struct JsonShape {
  size_t depth = 0;
  size_t nodes = 1;
};

inline JsonShape json_shape(std::string_view text) {
  JsonShape shape;
  size_t depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') ++i;
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      ++shape.nodes;
      if (++depth > shape.depth) shape.depth = depth;
    } else if (c == ',') {
      ++shape.nodes;
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  return shape;
}

inline size_t json_nesting_depth(std::string_view text) { return json_shape(text).depth; }
inline size_t json_node_count(std::string_view text) { return json_shape(text).nodes; }

}  // namespace splash
