#pragma once
// GGUF reader: memory-maps a file and exposes its metadata and tensor infos without
// copying tensor data. Every offset and length read from the file is bounds-checked,
// so truncated, corrupted or hostile files raise splash::Error, never read out of range.
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "formats/ggml_types.h"

namespace splash::gguf {

enum class ValueType : uint32_t {
  UINT8 = 0, INT8 = 1, UINT16 = 2, INT16 = 3, UINT32 = 4, INT32 = 5, FLOAT32 = 6,
  BOOL = 7, STRING = 8, ARRAY = 9, UINT64 = 10, INT64 = 11, FLOAT64 = 12,
};

struct Value;
// Arrays keep their element type so that an empty array still says what it holds.
struct Array {
  ValueType element_type = ValueType::UINT8;
  std::vector<Value> items;
};

struct Value {
  std::variant<uint8_t, int8_t, uint16_t, int16_t, uint32_t, int32_t, float, bool, std::string,
               Array, uint64_t, int64_t, double>
      data;
  ValueType type() const { return static_cast<ValueType>(data.index()); }
};

struct TensorInfo {
  std::string name;
  std::vector<uint64_t> dims;  // GGUF order: dims[0] is the fastest-varying (row length)
  GgmlType type = GgmlType::F32;
  uint64_t offset = 0;  // relative to the data section
  uint64_t n_elements = 0;
  uint64_t n_bytes = 0;
  const uint8_t* data = nullptr;  // points into the mapping
};

class File {
 public:
  // Opens and validates the whole header; throws splash::Error naming the path and problem.
  static File open(const std::string& path);
  // Parses an in-memory image (used by the fuzz target and tests); the buffer must outlive File.
  static File parse(std::span<const uint8_t> bytes, std::string label = "<memory>");

  const std::string& path() const { return path_; }
  uint32_t version() const { return version_; }
  uint64_t alignment() const { return alignment_; }
  const std::map<std::string, Value>& metadata() const { return metadata_; }
  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  const TensorInfo* find_tensor(std::string_view name) const;
  const TensorInfo& tensor(std::string_view name) const;  // throws if absent

  const Value* find(std::string_view key) const;
  // Typed getters: throw splash::Error if the key is absent or has another type.
  // Integer getters accept any integer type whose value fits.
  std::string get_string(std::string_view key) const;
  uint64_t get_uint(std::string_view key) const;
  float get_float(std::string_view key) const;
  bool get_bool(std::string_view key) const;
  std::optional<std::string> opt_string(std::string_view key) const;
  std::optional<uint64_t> opt_uint(std::string_view key) const;
  std::optional<float> opt_float(std::string_view key) const;
  std::optional<bool> opt_bool(std::string_view key) const;
  std::vector<std::string> get_string_array(std::string_view key) const;
  std::vector<int32_t> get_int_array(std::string_view key) const;
  std::vector<float> get_float_array(std::string_view key) const;
  // An array of flags: bools, or integers 0 and 1.
  std::vector<bool> get_bool_array(std::string_view key) const;

  uint64_t file_size() const { return size_; }

 private:
  struct Mapping;
  std::shared_ptr<Mapping> mapping_;
  std::string path_;
  uint32_t version_ = 0;
  uint64_t alignment_ = 32;
  uint64_t size_ = 0;
  std::map<std::string, Value> metadata_;
  std::vector<TensorInfo> tensors_;
  std::map<std::string, size_t, std::less<>> tensor_index_;

  void parse_bytes(const uint8_t* base, uint64_t size);
};

}  // namespace splash::gguf
