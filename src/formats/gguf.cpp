#include "formats/gguf.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>

#include "common/error.h"

namespace splash::gguf {
namespace {

constexpr uint32_t kMagic = 0x46554747;  // "GGUF" little-endian
// Limits that no real model reaches but that stop a hostile header from making the
// reader allocate or loop without bound before the bounds checks catch it.
constexpr uint64_t kMaxStringBytes = 64ull << 20;
constexpr uint64_t kMaxArrayItems = 1ull << 26;
// Every metadata value is held as a ~40-byte Value, so the total count is capped too: a
// 256K-token vocabulary with merges is ~1M values; 8M bounds a hostile file to ~320 MB.
constexpr uint64_t kMaxMetadataValues = 1ull << 23;
constexpr uint64_t kMaxTensorCount = 1ull << 20;
constexpr uint64_t kMaxMetadataCount = 1ull << 20;
constexpr uint32_t kMaxDims = 4;
constexpr int kMaxArrayNesting = 4;

// A cursor over the mapped bytes that refuses every read past the end.
class Reader {
 public:
  Reader(const uint8_t* base, uint64_t size, const std::string& label)
      : base_(base), size_(size), label_(label) {}

  template <typename T>
  T read() {
    need(sizeof(T), "value");
    T value;
    std::memcpy(&value, base_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return value;
  }

  std::string read_string() {
    const uint64_t length = read<uint64_t>();
    if (length > kMaxStringBytes) fail("{}: string of {} bytes at offset {} is too long", label_, length, pos_);
    need(length, "string");
    std::string text(reinterpret_cast<const char*>(base_ + pos_), length);
    pos_ += length;
    return text;
  }

  uint64_t position() const { return pos_; }

  // Counts metadata values as they are read, against kMaxMetadataValues.
  void count_values(uint64_t n) {
    values_ += n;
    if (values_ > kMaxMetadataValues) fail("{}: more than {} metadata values", label_, kMaxMetadataValues);
  }

 private:
  void need(uint64_t bytes, const char* what) {
    if (bytes > size_ || pos_ > size_ - bytes)
      fail("{}: truncated file: {} of {} bytes at offset {} runs past the end ({} bytes)", label_, what,
           bytes, pos_, size_);
  }

  const uint8_t* base_;
  uint64_t size_;
  uint64_t pos_ = 0;
  const std::string& label_;
  uint64_t values_ = 0;
};

Value read_value(Reader& reader, ValueType type, const std::string& label, int depth);

Array read_array(Reader& reader, const std::string& label, int depth) {
  if (depth > kMaxArrayNesting) fail("{}: arrays nested deeper than {}", label, kMaxArrayNesting);
  Array array;
  const uint32_t element = reader.read<uint32_t>();
  if (element > static_cast<uint32_t>(ValueType::FLOAT64)) fail("{}: unknown array element type {}", label, element);
  array.element_type = static_cast<ValueType>(element);
  const uint64_t count = reader.read<uint64_t>();
  if (count > kMaxArrayItems) fail("{}: array of {} items is too long", label, count);
  reader.count_values(count);
  // Reserve only what the remaining bytes could possibly hold, so a huge count in a
  // tiny file fails on the bounds check rather than on allocation.
  array.items.reserve(std::min<uint64_t>(count, 1u << 16));
  for (uint64_t i = 0; i < count; ++i) array.items.push_back(read_value(reader, array.element_type, label, depth + 1));
  return array;
}

Value read_value(Reader& reader, ValueType type, const std::string& label, int depth) {
  Value value;
  switch (type) {
    case ValueType::UINT8: value.data.emplace<0>(reader.read<uint8_t>()); break;
    case ValueType::INT8: value.data.emplace<1>(reader.read<int8_t>()); break;
    case ValueType::UINT16: value.data.emplace<2>(reader.read<uint16_t>()); break;
    case ValueType::INT16: value.data.emplace<3>(reader.read<int16_t>()); break;
    case ValueType::UINT32: value.data.emplace<4>(reader.read<uint32_t>()); break;
    case ValueType::INT32: value.data.emplace<5>(reader.read<int32_t>()); break;
    case ValueType::FLOAT32: value.data.emplace<6>(reader.read<float>()); break;
    case ValueType::BOOL: {
      const uint8_t byte = reader.read<uint8_t>();
      if (byte > 1) fail("{}: bool value {} is neither 0 nor 1", label, byte);
      value.data.emplace<7>(byte == 1);
      break;
    }
    case ValueType::STRING: value.data.emplace<8>(reader.read_string()); break;
    case ValueType::ARRAY: value.data.emplace<9>(read_array(reader, label, depth)); break;
    case ValueType::UINT64: value.data.emplace<10>(reader.read<uint64_t>()); break;
    case ValueType::INT64: value.data.emplace<11>(reader.read<int64_t>()); break;
    case ValueType::FLOAT64: value.data.emplace<12>(reader.read<double>()); break;
    default: fail("{}: unknown metadata value type {}", label, static_cast<uint32_t>(type));
  }
  return value;
}

const char* type_label(ValueType type) {
  static constexpr const char* kNames[] = {"uint8", "int8",   "uint16", "int16", "uint32", "int32", "float32",
                                           "bool",  "string", "array",  "uint64", "int64", "float64"};
  const auto index = static_cast<uint32_t>(type);
  return index < std::size(kNames) ? kNames[index] : "unknown";
}

// Integer value of any integer-typed Value, if it is non-negative or fits int64.
std::optional<int64_t> as_integer(const Value& value) {
  return std::visit(
      [](const auto& v) -> std::optional<int64_t> {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, bool>) {
          return std::nullopt;
        } else if constexpr (std::is_integral_v<T>) {
          if constexpr (std::is_same_v<T, uint64_t>)
            if (v > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return std::nullopt;
          return static_cast<int64_t>(v);
        } else {
          return std::nullopt;
        }
      },
      value.data);
}

}  // namespace

struct File::Mapping {
  void* address = MAP_FAILED;
  size_t length = 0;
  ~Mapping() {
    if (address != MAP_FAILED) munmap(address, length);
  }
};

File File::open(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail("cannot open model file {}: {}", path, std::strerror(errno));
  struct stat st {};
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    fail("{} is not a regular file", path);
  }
  if (st.st_size == 0) {
    ::close(fd);
    fail("{} is empty, not a GGUF file", path);
  }
  auto mapping = std::make_shared<Mapping>();
  mapping->length = static_cast<size_t>(st.st_size);
  mapping->address = mmap(nullptr, mapping->length, PROT_READ, MAP_PRIVATE, fd, 0);
  const int map_errno = errno;
  ::close(fd);
  if (mapping->address == MAP_FAILED) fail("cannot map {}: {}", path, std::strerror(map_errno));
  File file;
  file.mapping_ = mapping;
  file.path_ = path;
  file.parse_bytes(static_cast<const uint8_t*>(mapping->address), mapping->length);
  return file;
}

File File::parse(std::span<const uint8_t> bytes, std::string label) {
  File file;
  file.path_ = std::move(label);
  file.parse_bytes(bytes.data(), bytes.size());
  return file;
}

void File::parse_bytes(const uint8_t* base, uint64_t size) {
  size_ = size;
  Reader reader(base, size, path_);
  if (size < 4 || reader.read<uint32_t>() != kMagic) fail("{} is not a GGUF file (bad magic)", path_);
  version_ = reader.read<uint32_t>();
  if (version_ != 2 && version_ != 3) fail("{}: unsupported GGUF version {} (supported: 2, 3)", path_, version_);
  const uint64_t tensor_count = reader.read<uint64_t>();
  const uint64_t metadata_count = reader.read<uint64_t>();
  if (tensor_count > kMaxTensorCount) fail("{}: implausible tensor count {}", path_, tensor_count);
  if (metadata_count > kMaxMetadataCount) fail("{}: implausible metadata count {}", path_, metadata_count);

  for (uint64_t i = 0; i < metadata_count; ++i) {
    std::string key = reader.read_string();
    const uint32_t type = reader.read<uint32_t>();
    if (type > static_cast<uint32_t>(ValueType::FLOAT64)) fail("{}: key '{}' has unknown type {}", path_, key, type);
    Value value = read_value(reader, static_cast<ValueType>(type), path_, 0);
    if (!metadata_.emplace(key, std::move(value)).second) fail("{}: duplicate metadata key '{}'", path_, key);
  }

  if (auto align = find("general.alignment")) {
    auto a = as_integer(*align);
    if (!a || *a <= 0 || *a > (1 << 20) || (*a & (*a - 1)) != 0)
      fail("{}: general.alignment must be a power of two up to 1 MiB", path_);
    alignment_ = static_cast<uint64_t>(*a);
  }

  // Each tensor info takes at least 32 bytes (name length, n_dims, one dim, type, offset):
  // reserve no more than the rest of the file could describe.
  tensors_.reserve(std::min<uint64_t>(tensor_count, (size - reader.position()) / 32));
  for (uint64_t i = 0; i < tensor_count; ++i) {
    TensorInfo info;
    info.name = reader.read_string();
    const uint32_t n_dims = reader.read<uint32_t>();
    if (n_dims == 0 || n_dims > kMaxDims) fail("{}: tensor '{}' has {} dimensions", path_, info.name, n_dims);
    info.n_elements = 1;
    for (uint32_t d = 0; d < n_dims; ++d) {
      const uint64_t dim = reader.read<uint64_t>();
      if (dim == 0 || dim > (1ull << 40) || info.n_elements > (1ull << 48) / dim)
        fail("{}: tensor '{}' has an implausible shape", path_, info.name);
      info.n_elements *= dim;
      info.dims.push_back(dim);
    }
    const uint32_t type_id = reader.read<uint32_t>();
    const auto traits = type_traits(type_id);
    if (!traits) fail("{}: tensor '{}' has unknown type id {}", path_, info.name, type_id);
    info.type = static_cast<GgmlType>(type_id);
    if (info.dims[0] % traits->block_elements != 0)
      fail("{}: tensor '{}' row of {} elements is not a multiple of the {} block ({})", path_, info.name,
           info.dims[0], traits->name, traits->block_elements);
    info.n_bytes = info.n_elements / traits->block_elements * traits->block_bytes;
    info.offset = reader.read<uint64_t>();
    if (info.offset % alignment_ != 0) fail("{}: tensor '{}' offset is not aligned", path_, info.name);
    if (tensor_index_.count(info.name)) fail("{}: duplicate tensor name '{}'", path_, info.name);
    tensor_index_.emplace(info.name, tensors_.size());
    tensors_.push_back(std::move(info));
  }

  const uint64_t data_start = (reader.position() + alignment_ - 1) / alignment_ * alignment_;
  for (auto& info : tensors_) {
    if (data_start > size || info.offset > size - data_start || info.n_bytes > size - data_start - info.offset)
      fail("{}: tensor '{}' data ({} bytes at {}) lies past the end of the file ({} bytes); the file is "
           "truncated or corrupt",
           path_, info.name, info.n_bytes, data_start + info.offset, size);
    info.data = base + data_start + info.offset;
  }
  // No two tensors may share bytes: no writer produces that (ggml's own reader refuses it),
  // so it marks a corrupt or crafted file whose weights would silently alias each other.
  std::vector<const TensorInfo*> by_offset;
  by_offset.reserve(tensors_.size());
  for (const auto& info : tensors_) by_offset.push_back(&info);
  std::sort(by_offset.begin(), by_offset.end(),
            [](const TensorInfo* a, const TensorInfo* b) { return a->offset < b->offset; });
  for (size_t i = 1; i < by_offset.size(); ++i) {
    const TensorInfo& previous = *by_offset[i - 1];
    if (previous.offset + previous.n_bytes > by_offset[i]->offset)
      fail("{}: tensors '{}' and '{}' overlap in the data section", path_, previous.name, by_offset[i]->name);
  }
}

const TensorInfo* File::find_tensor(std::string_view name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

const TensorInfo& File::tensor(std::string_view name) const {
  if (auto* info = find_tensor(name)) return *info;
  fail("{}: missing tensor '{}'", path_, name);
}

const Value* File::find(std::string_view key) const {
  auto it = metadata_.find(std::string(key));
  return it == metadata_.end() ? nullptr : &it->second;
}

namespace {
[[noreturn]] void wrong_type(const std::string& path, std::string_view key, const Value& value, const char* wanted) {
  fail("{}: metadata '{}' is {} but {} was expected", path, key, type_label(value.type()), wanted);
}
}  // namespace

std::optional<std::string> File::opt_string(std::string_view key) const {
  const Value* value = find(key);
  if (!value) return std::nullopt;
  if (auto* s = std::get_if<std::string>(&value->data)) return *s;
  wrong_type(path_, key, *value, "a string");
}

std::optional<uint64_t> File::opt_uint(std::string_view key) const {
  const Value* value = find(key);
  if (!value) return std::nullopt;
  // A uint64 above INT64_MAX still fits the uint64 returned here.
  if (auto* u = std::get_if<uint64_t>(&value->data)) return *u;
  auto integer = as_integer(*value);
  if (!integer || *integer < 0) wrong_type(path_, key, *value, "a non-negative integer");
  return static_cast<uint64_t>(*integer);
}

std::optional<float> File::opt_float(std::string_view key) const {
  const Value* value = find(key);
  if (!value) return std::nullopt;
  if (auto* f = std::get_if<float>(&value->data)) return *f;
  if (auto* d = std::get_if<double>(&value->data)) return static_cast<float>(*d);
  if (auto integer = as_integer(*value)) return static_cast<float>(*integer);
  wrong_type(path_, key, *value, "a number");
}

std::optional<bool> File::opt_bool(std::string_view key) const {
  const Value* value = find(key);
  if (!value) return std::nullopt;
  if (auto* b = std::get_if<bool>(&value->data)) return *b;
  wrong_type(path_, key, *value, "a bool");
}

std::string File::get_string(std::string_view key) const {
  if (auto v = opt_string(key)) return *v;
  fail("{}: missing metadata '{}'", path_, key);
}
uint64_t File::get_uint(std::string_view key) const {
  if (auto v = opt_uint(key)) return *v;
  fail("{}: missing metadata '{}'", path_, key);
}
float File::get_float(std::string_view key) const {
  if (auto v = opt_float(key)) return *v;
  fail("{}: missing metadata '{}'", path_, key);
}
bool File::get_bool(std::string_view key) const {
  if (auto v = opt_bool(key)) return *v;
  fail("{}: missing metadata '{}'", path_, key);
}

namespace {
const Array& require_array(const File& file, std::string_view key) {
  const Value* value = file.find(key);
  if (!value) fail("{}: missing metadata '{}'", file.path(), key);
  if (auto* array = std::get_if<Array>(&value->data)) return *array;
  wrong_type(file.path(), key, *value, "an array");
}
}  // namespace

std::vector<std::string> File::get_string_array(std::string_view key) const {
  const Array& array = require_array(*this, key);
  std::vector<std::string> out;
  out.reserve(array.items.size());
  for (const auto& item : array.items) {
    auto* s = std::get_if<std::string>(&item.data);
    if (!s) fail("{}: metadata '{}' is not an array of strings", path_, key);
    out.push_back(*s);
  }
  return out;
}

std::vector<int32_t> File::get_int_array(std::string_view key) const {
  const Array& array = require_array(*this, key);
  std::vector<int32_t> out;
  out.reserve(array.items.size());
  for (const auto& item : array.items) {
    auto integer = as_integer(item);
    if (!integer || *integer < std::numeric_limits<int32_t>::min() || *integer > std::numeric_limits<int32_t>::max())
      fail("{}: metadata '{}' is not an array of 32-bit integers", path_, key);
    out.push_back(static_cast<int32_t>(*integer));
  }
  return out;
}

std::vector<float> File::get_float_array(std::string_view key) const {
  const Array& array = require_array(*this, key);
  std::vector<float> out;
  out.reserve(array.items.size());
  for (const auto& item : array.items) {
    if (auto* f = std::get_if<float>(&item.data)) out.push_back(*f);
    else if (auto* d = std::get_if<double>(&item.data)) out.push_back(static_cast<float>(*d));
    else fail("{}: metadata '{}' is not an array of floats", path_, key);
  }
  return out;
}

std::vector<bool> File::get_bool_array(std::string_view key) const {
  const Array& array = require_array(*this, key);
  std::vector<bool> out;
  out.reserve(array.items.size());
  for (const auto& item : array.items) {
    if (auto* b = std::get_if<bool>(&item.data)) {
      out.push_back(*b);
    } else if (auto integer = as_integer(item); integer && (*integer == 0 || *integer == 1)) {
      out.push_back(*integer == 1);
    } else {
      fail("{}: metadata '{}' is not an array of flags", path_, key);
    }
  }
  return out;
}

}  // namespace splash::gguf
