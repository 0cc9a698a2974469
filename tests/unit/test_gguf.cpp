// GGUF reader: valid images built in memory (every value type, arrays, alignment, several
// tensor types), every getter, and hostile inputs that must fail with splash::Error.
// Hostile images are always copied into a buffer of exactly their size, so that under
// ASan any read past the end is caught rather than landing in the builder's spare capacity.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "common/error.h"
#include "formats/gguf.h"
#include "model_fixture.h"

namespace splash::gguf {
namespace {

using Bytes = std::vector<uint8_t>;
constexpr uint32_t kMagic = 0x46554747;  // "GGUF"

// ---------------------------------------------------------------------------------------
// A small GGUF writer, independent of the reader (its own type sizes, its own layout).

class Out {
 public:
  template <typename T>
  Out& put(T value) {
    uint8_t raw[sizeof(T)];
    std::memcpy(raw, &value, sizeof(T));
    bytes.insert(bytes.end(), raw, raw + sizeof(T));
    return *this;
  }
  Out& str(std::string_view text) {
    put<uint64_t>(text.size());
    bytes.insert(bytes.end(), text.begin(), text.end());
    return *this;
  }
  Out& type(ValueType t) { return put<uint32_t>(static_cast<uint32_t>(t)); }
  Bytes bytes;
};

// Bytes per block and elements per block of the tensor types the tests write.
struct Geometry {
  uint64_t block_elements, block_bytes;
};
Geometry geometry(uint32_t type) {
  switch (type) {
    case 0: return {1, 4};      // F32
    case 1: return {1, 2};      // F16
    case 2: return {32, 18};    // Q4_0
    case 3: return {32, 20};    // Q4_1
    case 8: return {32, 34};    // Q8_0
    case 12: return {256, 144}; // Q4_K
    case 14: return {256, 210}; // Q6_K
    case 24: return {1, 1};     // I8
    case 30: return {1, 2};     // BF16
    default: return {1, 1};     // hostile ids: any size, the reader must refuse them first
  }
}

struct TensorSpec {
  TensorSpec(std::string name_, std::vector<uint64_t> dims_, uint32_t type_,
             std::optional<uint64_t> offset_ = std::nullopt, std::optional<uint32_t> n_dims_ = std::nullopt)
      : name(std::move(name_)), dims(std::move(dims_)), type(type_), offset(offset_), n_dims(n_dims_) {}
  std::string name;
  std::vector<uint64_t> dims;
  uint32_t type = 0;
  std::optional<uint64_t> offset;     // default: laid out one after another, aligned
  std::optional<uint32_t> n_dims;     // default: dims.size()

  uint64_t n_bytes() const {
    uint64_t n = 1;
    for (uint64_t d : dims) n *= d;
    const auto g = geometry(type);
    return n / g.block_elements * g.block_bytes;
  }
};

// Byte i of tensor t's data, so that the test can check where data pointers land.
uint8_t pattern(size_t t, uint64_t i) { return static_cast<uint8_t>(t * 31 + i * 7 + 1); }

class Builder {
 public:
  uint32_t magic = kMagic;
  uint32_t version = 3;
  uint64_t alignment = 32;  // for layout; write general.alignment yourself to change the reader's
  std::optional<uint64_t> tensor_count, kv_count;  // override the real counts
  bool write_data = true;

  // Metadata: `value` writes the value bytes only (after the key and the type).
  Builder& kv(std::string_view key, ValueType type, const std::function<void(Out&)>& value) {
    kvs_.str(key).type(type);
    value(kvs_);
    ++n_kv_;
    return *this;
  }
  Builder& kv_raw_type(std::string_view key, uint32_t type, const std::function<void(Out&)>& value) {
    kvs_.str(key).put<uint32_t>(type);
    value(kvs_);
    ++n_kv_;
    return *this;
  }
  template <typename T>
  Builder& scalar(std::string_view key, ValueType type, T v) {
    return kv(key, type, [v](Out& o) { o.put<T>(v); });
  }
  Builder& string(std::string_view key, std::string_view v) {
    return kv(key, ValueType::STRING, [v](Out& o) { o.str(v); });
  }
  template <typename T>
  Builder& array(std::string_view key, ValueType element, const std::vector<T>& items) {
    return kv(key, ValueType::ARRAY, [&](Out& o) {
      o.type(element).put<uint64_t>(items.size());
      for (const T& item : items) o.put<T>(item);
    });
  }
  Builder& string_array(std::string_view key, const std::vector<std::string>& items) {
    return kv(key, ValueType::ARRAY, [&](Out& o) {
      o.type(ValueType::STRING).put<uint64_t>(items.size());
      for (const auto& item : items) o.str(item);
    });
  }
  Builder& tensor(TensorSpec spec) {
    tensors_.push_back(std::move(spec));
    return *this;
  }

  // Offsets (relative to the data section) the tensors get.
  std::vector<uint64_t> offsets() const {
    std::vector<uint64_t> out;
    uint64_t next = 0;
    for (const auto& t : tensors_) {
      next = (next + alignment - 1) / alignment * alignment;
      out.push_back(t.offset.value_or(next));
      next += t.n_bytes();
    }
    return out;
  }

  // Absolute position of the data section in the image build() returns.
  uint64_t data_start() const {
    const uint64_t header = build_header().size();
    return (header + alignment - 1) / alignment * alignment;
  }

  Bytes build() const {
    Bytes image = build_header();
    if (!write_data || tensors_.empty()) return image;
    const uint64_t start = (image.size() + alignment - 1) / alignment * alignment;
    image.resize(start, 0);
    const auto offs = offsets();
    // No padding after the last tensor: the file ends with its last byte, so that any
    // truncation removes something a valid file needs.
    for (size_t t = 0; t < tensors_.size(); ++t) {
      const uint64_t at = start + offs[t];
      const uint64_t n = tensors_[t].n_bytes();
      if (image.size() < at + n) image.resize(at + n, 0);
      for (uint64_t i = 0; i < n; ++i) image[at + i] = pattern(t, i);
    }
    return image;
  }

 private:
  Bytes build_header() const {
    Out o;
    o.put<uint32_t>(magic).put<uint32_t>(version);
    o.put<uint64_t>(tensor_count.value_or(tensors_.size()));
    o.put<uint64_t>(kv_count.value_or(n_kv_));
    o.bytes.insert(o.bytes.end(), kvs_.bytes.begin(), kvs_.bytes.end());
    const auto offs = offsets();
    for (size_t t = 0; t < tensors_.size(); ++t) {
      const auto& spec = tensors_[t];
      o.str(spec.name).put<uint32_t>(spec.n_dims.value_or(static_cast<uint32_t>(spec.dims.size())));
      for (uint64_t d : spec.dims) o.put<uint64_t>(d);
      o.put<uint32_t>(spec.type).put<uint64_t>(offs[t]);
    }
    return o.bytes;
  }

  Out kvs_;
  uint64_t n_kv_ = 0;
  std::vector<TensorSpec> tensors_;
};

// Parses a copy of exactly `size` bytes of `image` (a fresh heap block, so ASan sees its end).
File parse_exact(const Bytes& image, size_t size, const std::string& label = "test.gguf") {
  Bytes copy(image.begin(), image.begin() + static_cast<std::ptrdiff_t>(size));
  return File::parse(copy, label);
}

// Expects parsing to fail with splash::Error whose message contains `needle` (and the label).
void expect_parse_error(const Bytes& image, const std::string& needle) {
  try {
    Bytes copy = image;
    copy.shrink_to_fit();
    File::parse(copy, "hostile.gguf");
    ADD_FAILURE() << "parse succeeded; expected an error containing '" << needle << "'";
  } catch (const Error& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find(needle), std::string::npos) << "message: " << message;
    EXPECT_NE(message.find("hostile.gguf"), std::string::npos) << "message does not name the file: " << message;
  }
}

template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "no splash::Error thrown";
  return {};
}

// One of every value type, arrays of several kinds, and tensors of several types.
Builder full_builder() {
  Builder b;
  b.string("general.architecture", "llama")
      .scalar<uint8_t>("t.u8", ValueType::UINT8, 200)
      .scalar<int8_t>("t.i8", ValueType::INT8, -5)
      .scalar<uint16_t>("t.u16", ValueType::UINT16, 60000)
      .scalar<int16_t>("t.i16", ValueType::INT16, -30000)
      .scalar<uint32_t>("t.u32", ValueType::UINT32, 4000000000u)
      .scalar<int32_t>("t.i32", ValueType::INT32, -2000000000)
      .scalar<float>("t.f32", ValueType::FLOAT32, 1.5f)
      .scalar<uint8_t>("t.bool_true", ValueType::BOOL, 1)
      .scalar<uint8_t>("t.bool_false", ValueType::BOOL, 0)
      .string("t.string", "h\xC3\xA9llo \xE2\x9C\x93")
      .string("t.empty_string", "")
      .scalar<uint64_t>("t.u64", ValueType::UINT64, 0xFFFFFFFFFFFFFFF0ull)
      .scalar<int64_t>("t.i64", ValueType::INT64, -(int64_t{1} << 40))
      .scalar<double>("t.f64", ValueType::FLOAT64, 2.25)
      // small positive values of every integer type, for get_uint
      .scalar<int8_t>("p.i8", ValueType::INT8, 7)
      .scalar<int16_t>("p.i16", ValueType::INT16, 300)
      .scalar<int32_t>("p.i32", ValueType::INT32, 70000)
      .scalar<int64_t>("p.i64", ValueType::INT64, int64_t{1} << 50)
      .scalar<uint64_t>("p.u64", ValueType::UINT64, 12345)
      .array<int32_t>("a.i32", ValueType::INT32, {1, -2, 3, std::numeric_limits<int32_t>::min()})
      .array<uint8_t>("a.u8", ValueType::UINT8, {0, 255})
      .array<int64_t>("a.i64_fits", ValueType::INT64, {-1, 2147483647})
      .array<int64_t>("a.i64_big", ValueType::INT64, {int64_t{1} << 33})
      .array<uint32_t>("a.u32_big", ValueType::UINT32, {4000000000u})
      .array<float>("a.f32", ValueType::FLOAT32, {0.5f, -1.25f})
      .array<double>("a.f64", ValueType::FLOAT64, {3.5})
      .array<int32_t>("a.empty_i32", ValueType::INT32, {})
      .string_array("a.strings", {"a", "", "\xE4\xB8\xAD\xE6\x96\x87", std::string("nul\0byte", 8)})
      .string_array("a.empty_strings", {})
      .array<uint8_t>("a.bools", ValueType::BOOL, {1, 0, 1})
      // [[1, 2], [], [3]] as an array of int32 arrays
      .kv("a.nested", ValueType::ARRAY,
          [](Out& o) {
            o.type(ValueType::ARRAY).put<uint64_t>(3);
            o.type(ValueType::INT32).put<uint64_t>(2).put<int32_t>(1).put<int32_t>(2);
            o.type(ValueType::INT32).put<uint64_t>(0);
            o.type(ValueType::INT32).put<uint64_t>(1).put<int32_t>(3);
          })
      // [[["x"]]]: three levels
      .kv("a.nested3", ValueType::ARRAY,
          [](Out& o) {
            o.type(ValueType::ARRAY).put<uint64_t>(1);
            o.type(ValueType::ARRAY).put<uint64_t>(1);
            o.type(ValueType::STRING).put<uint64_t>(1).str("x");
          })
      .kv("a.empty_of_arrays", ValueType::ARRAY, [](Out& o) { o.type(ValueType::ARRAY).put<uint64_t>(0); });
  b.tensor({"f32.matrix", {4, 3}, 0})
      .tensor({"f16.vector", {8}, 1})
      .tensor({"q4_0.w", {64, 2}, 2})
      .tensor({"q8_0.w", {32, 3}, 8})
      .tensor({"q4_k.w", {256, 1, 2}, 12})
      .tensor({"f32.4d", {2, 2, 2, 3}, 0})
      .tensor({"bf16.odd", {5}, 30});
  return b;
}

// ---------------------------------------------------------------------------------------
// Valid files

TEST(GgufParse, EveryValueTypeRoundTrips) {
  const Bytes image = full_builder().build();
  const File file = File::parse(image, "full.gguf");
  EXPECT_EQ(file.path(), "full.gguf");
  EXPECT_EQ(file.version(), 3u);
  EXPECT_EQ(file.alignment(), 32u);
  EXPECT_EQ(file.file_size(), image.size());
  EXPECT_EQ(file.metadata().size(), 34u);

  auto value = [&](const char* key) -> const Value& {
    const Value* v = file.find(key);
    EXPECT_NE(v, nullptr) << key;
    static const Value none{};
    return v ? *v : none;
  };
  EXPECT_EQ(value("t.u8").type(), ValueType::UINT8);
  EXPECT_EQ(std::get<uint8_t>(value("t.u8").data), 200);
  EXPECT_EQ(value("t.i8").type(), ValueType::INT8);
  EXPECT_EQ(std::get<int8_t>(value("t.i8").data), -5);
  EXPECT_EQ(value("t.u16").type(), ValueType::UINT16);
  EXPECT_EQ(std::get<uint16_t>(value("t.u16").data), 60000);
  EXPECT_EQ(value("t.i16").type(), ValueType::INT16);
  EXPECT_EQ(std::get<int16_t>(value("t.i16").data), -30000);
  EXPECT_EQ(value("t.u32").type(), ValueType::UINT32);
  EXPECT_EQ(std::get<uint32_t>(value("t.u32").data), 4000000000u);
  EXPECT_EQ(value("t.i32").type(), ValueType::INT32);
  EXPECT_EQ(std::get<int32_t>(value("t.i32").data), -2000000000);
  EXPECT_EQ(value("t.f32").type(), ValueType::FLOAT32);
  EXPECT_EQ(std::get<float>(value("t.f32").data), 1.5f);
  EXPECT_EQ(value("t.bool_true").type(), ValueType::BOOL);
  EXPECT_TRUE(std::get<bool>(value("t.bool_true").data));
  EXPECT_FALSE(std::get<bool>(value("t.bool_false").data));
  EXPECT_EQ(value("t.string").type(), ValueType::STRING);
  EXPECT_EQ(std::get<std::string>(value("t.string").data), "h\xC3\xA9llo \xE2\x9C\x93");
  EXPECT_EQ(std::get<std::string>(value("t.empty_string").data), "");
  EXPECT_EQ(value("t.u64").type(), ValueType::UINT64);
  EXPECT_EQ(std::get<uint64_t>(value("t.u64").data), 0xFFFFFFFFFFFFFFF0ull);
  EXPECT_EQ(value("t.i64").type(), ValueType::INT64);
  EXPECT_EQ(std::get<int64_t>(value("t.i64").data), -(int64_t{1} << 40));
  EXPECT_EQ(value("t.f64").type(), ValueType::FLOAT64);
  EXPECT_EQ(std::get<double>(value("t.f64").data), 2.25);

  const Value& a = value("a.i32");
  ASSERT_EQ(a.type(), ValueType::ARRAY);
  const Array& array = std::get<Array>(a.data);
  EXPECT_EQ(array.element_type, ValueType::INT32);
  ASSERT_EQ(array.items.size(), 4u);
  EXPECT_EQ(std::get<int32_t>(array.items[1].data), -2);

  const Array& bools = std::get<Array>(value("a.bools").data);
  EXPECT_EQ(bools.element_type, ValueType::BOOL);
  ASSERT_EQ(bools.items.size(), 3u);
  EXPECT_TRUE(std::get<bool>(bools.items[0].data));
  EXPECT_FALSE(std::get<bool>(bools.items[1].data));

  EXPECT_EQ(file.find("no.such.key"), nullptr);
  EXPECT_EQ(file.find(""), nullptr);
}

TEST(GgufParse, EmptyAndNestedArraysKeepTheirStructure) {
  const Bytes image = full_builder().build();
  const File file = File::parse(image);

  const Array& empty = std::get<Array>(file.find("a.empty_i32")->data);
  EXPECT_EQ(empty.element_type, ValueType::INT32);
  EXPECT_TRUE(empty.items.empty());
  const Array& empty_strings = std::get<Array>(file.find("a.empty_strings")->data);
  EXPECT_EQ(empty_strings.element_type, ValueType::STRING);
  EXPECT_TRUE(empty_strings.items.empty());
  const Array& empty_of_arrays = std::get<Array>(file.find("a.empty_of_arrays")->data);
  EXPECT_EQ(empty_of_arrays.element_type, ValueType::ARRAY);
  EXPECT_TRUE(empty_of_arrays.items.empty());

  const Array& nested = std::get<Array>(file.find("a.nested")->data);
  EXPECT_EQ(nested.element_type, ValueType::ARRAY);
  ASSERT_EQ(nested.items.size(), 3u);
  const Array& first = std::get<Array>(nested.items[0].data);
  EXPECT_EQ(first.element_type, ValueType::INT32);
  ASSERT_EQ(first.items.size(), 2u);
  EXPECT_EQ(std::get<int32_t>(first.items[0].data), 1);
  EXPECT_EQ(std::get<int32_t>(first.items[1].data), 2);
  EXPECT_TRUE(std::get<Array>(nested.items[1].data).items.empty());
  EXPECT_EQ(std::get<int32_t>(std::get<Array>(nested.items[2].data).items.at(0).data), 3);

  const Array& level1 = std::get<Array>(file.find("a.nested3")->data);
  const Array& level2 = std::get<Array>(level1.items.at(0).data);
  const Array& level3 = std::get<Array>(level2.items.at(0).data);
  EXPECT_EQ(level3.element_type, ValueType::STRING);
  EXPECT_EQ(std::get<std::string>(level3.items.at(0).data), "x");
}

TEST(GgufGetters, StringGetters) {
  const Bytes image = full_builder().build();
  const File file = File::parse(image, "full.gguf");
  EXPECT_EQ(file.get_string("general.architecture"), "llama");
  EXPECT_EQ(file.get_string("t.empty_string"), "");
  EXPECT_EQ(file.opt_string("t.string"), std::optional<std::string>("h\xC3\xA9llo \xE2\x9C\x93"));
  EXPECT_EQ(file.opt_string("missing"), std::nullopt);

  const std::string wrong = error_of([&] { file.get_string("t.u32"); });
  EXPECT_NE(wrong.find("full.gguf"), std::string::npos) << wrong;
  EXPECT_NE(wrong.find("'t.u32'"), std::string::npos) << wrong;
  EXPECT_NE(wrong.find("uint32"), std::string::npos) << wrong;
  EXPECT_NE(wrong.find("string"), std::string::npos) << wrong;
  EXPECT_THROW(file.opt_string("a.strings"), Error);  // an array of strings is not a string

  const std::string missing = error_of([&] { file.get_string("no.such.key"); });
  EXPECT_NE(missing.find("missing metadata 'no.such.key'"), std::string::npos) << missing;
}

TEST(GgufGetters, UintAcceptsEveryIntegerTypeThatFits) {
  const Bytes image = full_builder().build();
  const File file = File::parse(image, "full.gguf");
  EXPECT_EQ(file.get_uint("t.u8"), 200u);
  EXPECT_EQ(file.get_uint("t.u16"), 60000u);
  EXPECT_EQ(file.get_uint("t.u32"), 4000000000u);
  EXPECT_EQ(file.get_uint("p.u64"), 12345u);
  EXPECT_EQ(file.get_uint("p.i8"), 7u);
  EXPECT_EQ(file.get_uint("p.i16"), 300u);
  EXPECT_EQ(file.get_uint("p.i32"), 70000u);
  EXPECT_EQ(file.get_uint("p.i64"), uint64_t{1} << 50);
  // A uint64 above INT64_MAX still fits the uint64 the getter returns.
  EXPECT_EQ(file.get_uint("t.u64"), 0xFFFFFFFFFFFFFFF0ull);
  EXPECT_EQ(file.opt_uint("missing"), std::nullopt);
  EXPECT_EQ(file.opt_uint("t.u8"), std::optional<uint64_t>(200));

  // Negative values do not fit; non-integers are the wrong type.
  for (const char* key : {"t.i8", "t.i16", "t.i32", "t.i64"}) {
    const std::string message = error_of([&] { file.get_uint(key); });
    EXPECT_NE(message.find(key), std::string::npos) << message;
    EXPECT_NE(message.find("non-negative integer"), std::string::npos) << message;
  }
  for (const char* key : {"t.f32", "t.f64", "t.bool_true", "t.string", "a.i32"})
    EXPECT_THROW(file.get_uint(key), Error) << key;
  const std::string missing = error_of([&] { file.get_uint("no.such.key"); });
  EXPECT_NE(missing.find("missing metadata 'no.such.key'"), std::string::npos) << missing;
}

TEST(GgufGetters, FloatAndBool) {
  const Bytes image = full_builder().build();
  const File file = File::parse(image, "full.gguf");
  EXPECT_EQ(file.get_float("t.f32"), 1.5f);
  EXPECT_EQ(file.get_float("t.f64"), 2.25f);
  EXPECT_EQ(file.get_float("t.i8"), -5.0f);  // integers are numbers too
  EXPECT_EQ(file.get_float("t.u16"), 60000.0f);
  EXPECT_EQ(file.opt_float("missing"), std::nullopt);
  EXPECT_THROW(file.get_float("t.string"), Error);
  EXPECT_THROW(file.get_float("t.bool_true"), Error);
  EXPECT_THROW(file.get_float("a.f32"), Error);
  EXPECT_NE(error_of([&] { file.get_float("t.string"); }).find("number"), std::string::npos);
  EXPECT_THROW(file.get_float("no.such.key"), Error);

  EXPECT_TRUE(file.get_bool("t.bool_true"));
  EXPECT_FALSE(file.get_bool("t.bool_false"));
  EXPECT_EQ(file.opt_bool("missing"), std::nullopt);
  EXPECT_EQ(file.opt_bool("t.bool_false"), std::optional<bool>(false));
  const std::string wrong = error_of([&] { file.get_bool("t.u8"); });
  EXPECT_NE(wrong.find("'t.u8'"), std::string::npos) << wrong;
  EXPECT_NE(wrong.find("bool"), std::string::npos) << wrong;
  EXPECT_THROW(file.get_bool("t.string"), Error);
  EXPECT_THROW(file.get_bool("no.such.key"), Error);
}

TEST(GgufGetters, ArrayGetters) {
  const Bytes image = full_builder().build();
  const File file = File::parse(image, "full.gguf");
  EXPECT_EQ(file.get_string_array("a.strings"),
            (std::vector<std::string>{"a", "", "\xE4\xB8\xAD\xE6\x96\x87", std::string("nul\0byte", 8)}));
  EXPECT_TRUE(file.get_string_array("a.empty_strings").empty());
  EXPECT_EQ(file.get_int_array("a.i32"), (std::vector<int32_t>{1, -2, 3, std::numeric_limits<int32_t>::min()}));
  EXPECT_EQ(file.get_int_array("a.u8"), (std::vector<int32_t>{0, 255}));
  EXPECT_EQ(file.get_int_array("a.i64_fits"), (std::vector<int32_t>{-1, 2147483647}));
  EXPECT_TRUE(file.get_int_array("a.empty_i32").empty());
  EXPECT_EQ(file.get_float_array("a.f32"), (std::vector<float>{0.5f, -1.25f}));
  EXPECT_EQ(file.get_float_array("a.f64"), (std::vector<float>{3.5f}));

  // Elements that do not fit or have another type.
  EXPECT_NE(error_of([&] { file.get_int_array("a.i64_big"); }).find("32-bit integers"), std::string::npos);
  EXPECT_THROW(file.get_int_array("a.u32_big"), Error);
  EXPECT_THROW(file.get_int_array("a.strings"), Error);
  EXPECT_THROW(file.get_int_array("a.f32"), Error);
  EXPECT_THROW(file.get_int_array("a.bools"), Error);
  EXPECT_THROW(file.get_int_array("a.nested"), Error);
  EXPECT_NE(error_of([&] { file.get_string_array("a.i32"); }).find("array of strings"), std::string::npos);
  EXPECT_THROW(file.get_string_array("a.nested3"), Error);
  EXPECT_THROW(file.get_float_array("a.strings"), Error);
  // Not an array at all, or missing.
  const std::string not_array = error_of([&] { file.get_string_array("t.string"); });
  EXPECT_NE(not_array.find("an array"), std::string::npos) << not_array;
  EXPECT_THROW(file.get_int_array("t.i32"), Error);
  EXPECT_THROW(file.get_float_array("t.f32"), Error);
  const std::string missing = error_of([&] { file.get_int_array("no.such.key"); });
  EXPECT_NE(missing.find("missing metadata 'no.such.key'"), std::string::npos) << missing;
  EXPECT_THROW(file.get_string_array("no.such.key"), Error);
  EXPECT_THROW(file.get_float_array("no.such.key"), Error);
}

void check_tensors(const Builder& b, const Bytes& image, const File& file) {
  const auto offsets = b.offsets();
  const uint64_t data_start = b.data_start();
  ASSERT_EQ(data_start % file.alignment(), 0u);
  struct Expected {
    const char* name;
    std::vector<uint64_t> dims;
    GgmlType type;
    uint64_t n_elements, n_bytes;
  };
  const std::vector<Expected> expected = {
      {"f32.matrix", {4, 3}, GgmlType::F32, 12, 48},
      {"f16.vector", {8}, GgmlType::F16, 8, 16},
      {"q4_0.w", {64, 2}, GgmlType::Q4_0, 128, 4 * 18},
      {"q8_0.w", {32, 3}, GgmlType::Q8_0, 96, 3 * 34},
      {"q4_k.w", {256, 1, 2}, GgmlType::Q4_K, 512, 2 * 144},
      {"f32.4d", {2, 2, 2, 3}, GgmlType::F32, 24, 96},
      {"bf16.odd", {5}, GgmlType::BF16, 5, 10},
  };
  ASSERT_EQ(file.tensors().size(), expected.size());
  for (size_t t = 0; t < expected.size(); ++t) {
    SCOPED_TRACE(expected[t].name);
    const TensorInfo& info = file.tensors()[t];  // file order is kept
    EXPECT_EQ(info.name, expected[t].name);
    EXPECT_EQ(info.dims, expected[t].dims);
    EXPECT_EQ(info.type, expected[t].type);
    EXPECT_EQ(info.n_elements, expected[t].n_elements);
    EXPECT_EQ(info.n_bytes, expected[t].n_bytes);
    EXPECT_EQ(info.offset, offsets[t]);
    EXPECT_EQ(info.offset % file.alignment(), 0u);
    ASSERT_NE(info.data, nullptr);
    EXPECT_EQ(static_cast<uint64_t>(info.data - image.data()), data_start + offsets[t]);
    for (uint64_t i = 0; i < info.n_bytes; ++i) ASSERT_EQ(info.data[i], pattern(t, i)) << "byte " << i;
    EXPECT_EQ(file.find_tensor(expected[t].name), &info);
    EXPECT_EQ(&file.tensor(expected[t].name), &info);
  }
  EXPECT_EQ(file.find_tensor("no.such.tensor"), nullptr);
  const std::string message = error_of([&] { file.tensor("no.such.tensor"); });
  EXPECT_NE(message.find("missing tensor 'no.such.tensor'"), std::string::npos) << message;
}

TEST(GgufParse, TensorsOfSeveralTypes) {
  const Builder b = full_builder();
  const Bytes image = b.build();
  const File file = File::parse(image, "full.gguf");
  check_tensors(b, image, file);
  // The last tensor ends exactly at the end of the file (no trailing padding).
  const TensorInfo& last = file.tensors().back();
  EXPECT_EQ(last.data + last.n_bytes, image.data() + image.size());
}

TEST(GgufParse, GeneralAlignmentMovesDataAndOffsets) {
  for (uint64_t alignment : {1u, 8u, 64u, 256u, 4096u}) {
    SCOPED_TRACE(alignment);
    Builder b = full_builder();
    b.alignment = alignment;
    b.scalar<uint32_t>("general.alignment", ValueType::UINT32, static_cast<uint32_t>(alignment));
    const Bytes image = b.build();
    const File file = File::parse(image, "aligned.gguf");
    EXPECT_EQ(file.alignment(), alignment);
    check_tensors(b, image, file);
  }
  // Any integer type is accepted for the alignment.
  Builder b = full_builder();
  b.alignment = 16;
  b.scalar<uint64_t>("general.alignment", ValueType::UINT64, 16);
  const Bytes image = b.build();
  EXPECT_EQ(File::parse(image).alignment(), 16u);
}

TEST(GgufParse, VersionTwoAndEmptyFilesAreAccepted) {
  Builder b = full_builder();
  b.version = 2;
  const Bytes image = b.build();
  EXPECT_EQ(File::parse(image).version(), 2u);

  // A header with no metadata and no tensors is a valid (if useless) file.
  const Bytes empty = Builder{}.build();
  EXPECT_EQ(empty.size(), 24u);
  const File file = parse_exact(empty, empty.size());
  EXPECT_TRUE(file.metadata().empty());
  EXPECT_TRUE(file.tensors().empty());
}

TEST(GgufParse, FileIsMovableAndKeepsItsData) {
  const Builder b = full_builder();
  const Bytes image = b.build();
  File file = File::parse(image, "full.gguf");
  File moved = std::move(file);
  EXPECT_EQ(moved.get_string("general.architecture"), "llama");
  check_tensors(b, image, moved);
}

// ---------------------------------------------------------------------------------------
// Hostile input

TEST(GgufHostile, BadMagic) {
  Builder b = full_builder();
  b.magic = 0x46554748;  // "HGUF"
  expect_parse_error(b.build(), "bad magic");
  b.magic = 0x47475546;  // "FUGG": byte-swapped
  expect_parse_error(b.build(), "bad magic");
  expect_parse_error(Bytes{'G', 'G', 'U'}, "bad magic");
  expect_parse_error(Bytes{}, "bad magic");
  const std::string text = "{\"not\": \"a gguf file\"}";
  expect_parse_error(Bytes(text.begin(), text.end()), "not a GGUF file");
}

TEST(GgufHostile, UnsupportedVersions) {
  for (uint32_t version : {0u, 1u, 4u, 0xFFFFFFFFu}) {
    Builder b = full_builder();
    b.version = version;
    expect_parse_error(b.build(), "unsupported GGUF version " + std::to_string(version));
  }
}

TEST(GgufHostile, TruncationAtEveryByteOffset) {
  Builder b = full_builder();
  b.scalar<uint32_t>("general.alignment", ValueType::UINT32, 64);
  b.alignment = 64;
  const Bytes image = b.build();
  ASSERT_NO_THROW(parse_exact(image, image.size()));
  ASSERT_GT(image.size(), 1000u);
  for (size_t size = 0; size < image.size(); ++size) {
    try {
      parse_exact(image, size, "cut.gguf");
      ADD_FAILURE() << "a file cut to " << size << " of " << image.size() << " bytes parsed";
    } catch (const Error& e) {
      const std::string message = e.what();
      EXPECT_NE(message.find("cut.gguf"), std::string::npos) << size << ": " << message;
      // Past the magic, every message says what went wrong: truncated, or data past the end.
      if (size >= 4) {
        EXPECT_TRUE(message.find("truncated") != std::string::npos ||
                    message.find("past the end") != std::string::npos)
            << size << ": " << message;
      }
    }
  }
}

TEST(GgufHostile, HugeStringLength) {
  // A key whose length is absurd.
  {
    Out o;
    o.put<uint32_t>(kMagic).put<uint32_t>(3).put<uint64_t>(0).put<uint64_t>(1);
    o.put<uint64_t>(uint64_t{1} << 62);
    expect_parse_error(o.bytes, "too long");
    Out p;
    p.put<uint32_t>(kMagic).put<uint32_t>(3).put<uint64_t>(0).put<uint64_t>(1);
    p.put<uint64_t>(std::numeric_limits<uint64_t>::max());
    expect_parse_error(p.bytes, "too long");
  }
  // A string value under the limit but longer than the file.
  Builder b;
  b.kv("k", ValueType::STRING, [](Out& o) { o.put<uint64_t>(1000).put<uint32_t>(0x41414141); });
  expect_parse_error(b.build(), "truncated");
  // A string in an array, and a tensor name.
  Builder c;
  c.kv("k", ValueType::ARRAY,
       [](Out& o) { o.type(ValueType::STRING).put<uint64_t>(1).put<uint64_t>(~uint64_t{0} - 3); });
  expect_parse_error(c.build(), "too long");
  Builder d;
  d.tensor({std::string(10, 'n'), {4}, 0});
  Bytes image = d.build();
  // Patch the tensor name's length (right after the 24-byte header) to 2^40.
  const uint64_t huge = uint64_t{1} << 40;
  std::memcpy(image.data() + 24, &huge, sizeof huge);
  expect_parse_error(image, "too long");
}

TEST(GgufHostile, HugeArrayCountInTinyFile) {
  for (ValueType element : {ValueType::UINT8, ValueType::STRING, ValueType::ARRAY, ValueType::UINT64}) {
    SCOPED_TRACE(static_cast<int>(element));
    Builder under_limit;  // plausible count (within every cap), but the bytes are missing
    under_limit.kv("k", ValueType::ARRAY, [&](Out& o) {
      o.type(element).put<uint64_t>(uint64_t{1} << 22);
      if (element == ValueType::ARRAY) o.type(ValueType::UINT8).put<uint64_t>(uint64_t{1} << 22);
    });
    expect_parse_error(under_limit.build(), "truncated");
    Builder too_many_values;  // under the per-array cap, over the total metadata value cap
    too_many_values.kv("k", ValueType::ARRAY, [&](Out& o) { o.type(element).put<uint64_t>(uint64_t{1} << 24); });
    expect_parse_error(too_many_values.build(), "metadata values");
    Builder absurd;
    absurd.kv("k", ValueType::ARRAY, [&](Out& o) { o.type(element).put<uint64_t>(~uint64_t{0}); });
    expect_parse_error(absurd.build(), "too long");
  }
}

Bytes nested_arrays(int depth) {
  Builder b;
  b.kv("deep", ValueType::ARRAY, [depth](Out& o) {
    for (int i = 1; i < depth; ++i) o.type(ValueType::ARRAY).put<uint64_t>(1);
    o.type(ValueType::UINT8).put<uint64_t>(1).put<uint8_t>(42);
  });
  return b.build();
}

TEST(GgufHostile, NestedArraysDeeperThanTheLimit) {
  ASSERT_NO_THROW(File::parse(nested_arrays(3)));
  expect_parse_error(nested_arrays(16), "nested deeper");
  // Deep enough to overflow the stack of a reader without a limit.
  expect_parse_error(nested_arrays(200000), "nested deeper");
}

TEST(GgufHostile, UnknownValueType) {
  for (uint32_t type : {13u, 14u, 0x80000000u, 0xFFFFFFFFu}) {
    Builder b;
    b.kv_raw_type("weird", type, [](Out& o) { o.put<uint64_t>(0); });
    expect_parse_error(b.build(), "unknown type " + std::to_string(type));
    Builder in_array;
    in_array.kv("weird", ValueType::ARRAY, [type](Out& o) { o.put<uint32_t>(type).put<uint64_t>(1).put<uint64_t>(0); });
    expect_parse_error(in_array.build(), "unknown array element type");
  }
}

TEST(GgufHostile, UnknownTensorType) {
  for (uint32_t type : {4u, 5u, 31u, 39u, 1000u, 0xFFFFFFFFu}) {
    Builder b;
    b.tensor({"t", {32}, type});
    expect_parse_error(b.build(), "unknown type id " + std::to_string(type));
  }
}

TEST(GgufHostile, ZeroAndHugeDimensions) {
  const std::vector<std::vector<uint64_t>> shapes = {
      {0}, {4, 0}, {uint64_t{1} << 41}, {~uint64_t{0}}, {uint64_t{1} << 30, uint64_t{1} << 30},
      {65536, 65536, 65536, 2}, {1u << 20, 1u << 20, 1u << 20, 1u << 20}, {2, 0, 2, 2}};
  for (const auto& dims : shapes) {
    Builder b;
    b.write_data = false;
    b.tensor({"t", dims, 0, uint64_t{0}});
    expect_parse_error(b.build(), "implausible shape");
  }
}

TEST(GgufHostile, DimensionCountZeroAndFive) {
  Builder zero;
  zero.tensor({"t", {}, 0, uint64_t{0}});
  expect_parse_error(zero.build(), "has 0 dimensions");
  Builder five;
  five.tensor({"t", {1, 1, 1, 1, 1}, 0});
  expect_parse_error(five.build(), "has 5 dimensions");
  Builder lying;  // says 0xFFFFFFFF dims
  lying.tensor({"t", {1}, 0, uint64_t{0}, 0xFFFFFFFFu});
  expect_parse_error(lying.build(), "dimensions");
}

TEST(GgufHostile, MisalignedTensorOffset) {
  for (uint64_t offset : {1u, 4u, 31u, 33u}) {
    Builder b;
    b.tensor({"a", {8}, 0}).tensor({"b", {8}, 0, offset + 64});
    expect_parse_error(b.build(), "'b' offset is not aligned");
  }
  Builder wide;
  wide.scalar<uint32_t>("general.alignment", ValueType::UINT32, 256);
  wide.alignment = 256;
  wide.tensor({"a", {8}, 0, uint64_t{32}});  // aligned to 32 but not to the file's 256
  expect_parse_error(wide.build(), "not aligned");
}

TEST(GgufHostile, TensorDataPastTheEnd) {
  // Offset just past the file, far past it, and near 2^64 (where offset + size wraps).
  for (uint64_t offset : {uint64_t{64}, uint64_t{1} << 40, ~uint64_t{0} - 31}) {
    Builder b;
    b.tensor({"a", {8}, 0}).tensor({"b", {8}, 0, offset});
    b.write_data = false;
    Bytes image = b.build();
    image.resize(b.data_start() + 32);  // holds "a" only
    expect_parse_error(image, "'b' data");
  }
  // The data section itself starts past the end (header ends mid-padding).
  Builder c;
  c.tensor({"a", {8}, 0});
  c.write_data = false;
  expect_parse_error(c.build(), "past the end");
  // One byte short of the last tensor.
  Builder d;
  d.tensor({"a", {8}, 0}).tensor({"b", {64, 4}, 8});
  Bytes image = d.build();
  image.pop_back();
  expect_parse_error(image, "'b' data");
}

TEST(GgufHostile, OverlappingTensors) {
  Builder same;
  same.tensor({"a", {16}, 0}).tensor({"b", {16}, 0, uint64_t{0}});
  expect_parse_error(same.build(), "overlap");
  Builder partial;  // a: [0, 64), b starts at 32
  partial.tensor({"a", {16}, 0}).tensor({"b", {8}, 0, uint64_t{32}});
  expect_parse_error(partial.build(), "overlap");
  Builder reversed;  // listed out of order: b at [0, 64), a at [32, 64 + 32)
  reversed.tensor({"a", {16}, 0, uint64_t{32}}).tensor({"b", {16}, 0, uint64_t{0}});
  expect_parse_error(reversed.build(), "overlap");
  // Out of file order but disjoint is fine.
  Builder disjoint;
  disjoint.tensor({"a", {8}, 0, uint64_t{32}}).tensor({"b", {8}, 0, uint64_t{0}});
  const Bytes image = disjoint.build();
  const File file = File::parse(image);
  EXPECT_EQ(file.tensor("a").offset, 32u);
  EXPECT_EQ(file.tensor("b").offset, 0u);
}

TEST(GgufHostile, DuplicateTensorNames) {
  Builder b;
  b.tensor({"w", {8}, 0}).tensor({"x", {8}, 0}).tensor({"w", {8}, 0});
  expect_parse_error(b.build(), "duplicate tensor name 'w'");
}

TEST(GgufHostile, DuplicateKeys) {
  Builder b;
  b.string("general.architecture", "llama").scalar<uint32_t>("n", ValueType::UINT32, 1).string(
      "general.architecture", "mamba");
  expect_parse_error(b.build(), "duplicate metadata key 'general.architecture'");
}

TEST(GgufHostile, BoolByteOtherThanZeroOrOne) {
  for (uint8_t byte : {2, 0x80, 0xFF}) {
    Builder b;
    b.scalar<uint8_t>("flag", ValueType::BOOL, byte);
    expect_parse_error(b.build(), "neither 0 nor 1");
    Builder in_array;
    in_array.array<uint8_t>("flags", ValueType::BOOL, {1, 0, byte});
    expect_parse_error(in_array.build(), "neither 0 nor 1");
  }
}

TEST(GgufHostile, BadGeneralAlignment) {
  std::vector<Builder> cases(9);
  cases[0].scalar<uint32_t>("general.alignment", ValueType::UINT32, 0);
  cases[1].scalar<uint32_t>("general.alignment", ValueType::UINT32, 3);
  cases[2].scalar<uint32_t>("general.alignment", ValueType::UINT32, 96);
  cases[3].scalar<int32_t>("general.alignment", ValueType::INT32, -32);
  cases[4].scalar<uint64_t>("general.alignment", ValueType::UINT64, uint64_t{1} << 40);
  cases[5].scalar<uint64_t>("general.alignment", ValueType::UINT64, ~uint64_t{0});
  cases[6].string("general.alignment", "32");
  cases[7].scalar<float>("general.alignment", ValueType::FLOAT32, 32.0f);
  cases[8].scalar<uint8_t>("general.alignment", ValueType::BOOL, 1);
  for (size_t i = 0; i < cases.size(); ++i) {
    SCOPED_TRACE(i);
    cases[i].tensor({"t", {8}, 0});
    expect_parse_error(cases[i].build(), "general.alignment");
  }
  Builder array;
  array.array<uint32_t>("general.alignment", ValueType::UINT32, {32});
  expect_parse_error(array.build(), "general.alignment");
}

TEST(GgufHostile, TensorRowNotAMultipleOfTheBlock) {
  const std::vector<std::pair<uint32_t, std::vector<uint64_t>>> cases = {
      {2, {33}}, {8, {16, 2}}, {12, {128, 2}}, {14, {255}}, {3, {31, 32}}};
  for (const auto& [type, dims] : cases) {
    Builder b;
    b.write_data = false;
    b.tensor({"t", dims, type, uint64_t{0}});
    expect_parse_error(b.build(), "not a multiple");
  }
}

TEST(GgufHostile, ImplausibleCounts) {
  for (uint64_t count : {uint64_t{1} << 40, ~uint64_t{0}}) {
    Builder tensors;
    tensors.tensor_count = count;
    expect_parse_error(tensors.build(), "implausible tensor count");
    Builder kvs;
    kvs.kv_count = count;
    expect_parse_error(kvs.build(), "implausible metadata count");
  }
  // Counts at the limit but with nothing behind them: a bounds failure, fast.
  Builder tensors;
  tensors.tensor_count = uint64_t{1} << 20;
  expect_parse_error(tensors.build(), "truncated");
  Builder kvs;
  kvs.kv_count = uint64_t{1} << 20;
  expect_parse_error(kvs.build(), "truncated");
}

// ---------------------------------------------------------------------------------------
// Files on disk

class TempDir {
 public:
  TempDir() {
    std::string pattern = (std::filesystem::temp_directory_path() / "splash_gguf_XXXXXX").string();
    if (!mkdtemp(pattern.data())) throw std::runtime_error("mkdtemp failed");
    path_ = pattern;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  std::filesystem::path write(const std::string& name, const Bytes& bytes) const {
    const auto path = path_ / name;
    std::ofstream out(path, std::ios::binary);
    out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
    return path;
  }
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

TEST(GgufOpen, ValidFileOnDisk) {
  TempDir dir;
  const Builder b = full_builder();
  const Bytes image = b.build();
  const auto path = dir.write("full.gguf", image);
  const File file = File::open(path.string());
  EXPECT_EQ(file.path(), path.string());
  EXPECT_EQ(file.file_size(), image.size());
  EXPECT_EQ(file.get_string("general.architecture"), "llama");
  ASSERT_EQ(file.tensors().size(), 7u);
  for (size_t t = 0; t < file.tensors().size(); ++t) {
    const TensorInfo& info = file.tensors()[t];
    for (uint64_t i = 0; i < info.n_bytes; ++i) ASSERT_EQ(info.data[i], pattern(t, i)) << info.name;
  }
}

TEST(GgufOpen, DirectoryEmptyAndMissing) {
  TempDir dir;
  const std::string on_dir = error_of([&] { File::open(dir.path().string()); });
  EXPECT_NE(on_dir.find(dir.path().string()), std::string::npos) << on_dir;
  EXPECT_NE(on_dir.find("not a regular file"), std::string::npos) << on_dir;

  const auto empty = dir.write("empty.gguf", {});
  const std::string on_empty = error_of([&] { File::open(empty.string()); });
  EXPECT_NE(on_empty.find(empty.string()), std::string::npos) << on_empty;
  EXPECT_NE(on_empty.find("empty"), std::string::npos) << on_empty;

  const auto missing = dir.path() / "missing.gguf";
  const std::string on_missing = error_of([&] { File::open(missing.string()); });
  EXPECT_NE(on_missing.find(missing.string()), std::string::npos) << on_missing;
  EXPECT_NE(on_missing.find("No such file"), std::string::npos) << on_missing;

  const auto text = dir.write("notes.txt", Bytes{'h', 'e', 'l', 'l', 'o', '\n'});
  const std::string on_text = error_of([&] { File::open(text.string()); });
  EXPECT_NE(on_text.find("not a GGUF file"), std::string::npos) << on_text;

  // Truncated on disk: the mapping ends where the file does.
  Bytes image = full_builder().build();
  image.resize(image.size() - 1);
  const auto cut = dir.write("cut.gguf", image);
  const std::string on_cut = error_of([&] { File::open(cut.string()); });
  EXPECT_NE(on_cut.find("past the end"), std::string::npos) << on_cut;
}

// ---------------------------------------------------------------------------------------
// The real default model

TEST(GgufRealModel, KnownValuesOfSmolLM2) {
  SPLASH_REQUIRE_TEST_MODEL(path);
  const File file = File::open(path);
  EXPECT_EQ(file.version(), 3u);
  EXPECT_EQ(file.alignment(), 32u);
  EXPECT_EQ(file.get_string("general.architecture"), "llama");
  EXPECT_EQ(file.get_uint("llama.block_count"), 30u);
  EXPECT_EQ(file.get_uint("llama.embedding_length"), 576u);
  EXPECT_EQ(file.get_uint("llama.attention.head_count"), 9u);
  EXPECT_EQ(file.get_uint("llama.attention.head_count_kv"), 3u);
  EXPECT_EQ(file.get_uint("llama.context_length"), 8192u);
  EXPECT_FLOAT_EQ(file.get_float("llama.rope.freq_base"), 100000.0f);
  EXPECT_EQ(file.get_string("tokenizer.ggml.model"), "gpt2");
  EXPECT_EQ(file.get_string("tokenizer.ggml.pre"), "smollm");
  EXPECT_FALSE(file.get_bool("tokenizer.ggml.add_space_prefix"));
  EXPECT_EQ(file.get_string_array("tokenizer.ggml.tokens").size(), 49152u);
  EXPECT_EQ(file.get_int_array("tokenizer.ggml.token_type").size(), 49152u);
  EXPECT_EQ(file.get_string_array("tokenizer.ggml.merges").size(), 48900u);
  EXPECT_EQ(file.metadata().size(), 33u);

  ASSERT_EQ(file.tensors().size(), 272u);
  const TensorInfo& embd = file.tensor("token_embd.weight");
  EXPECT_EQ(embd.type, GgmlType::Q8_0);
  EXPECT_EQ(embd.dims, (std::vector<uint64_t>{576, 49152}));
  EXPECT_EQ(embd.n_elements, 576u * 49152u);
  EXPECT_EQ(embd.n_bytes, 576u / 32 * 34 * 49152u);
  EXPECT_EQ(file.tensor("blk.0.attn_q.weight").type, GgmlType::Q4_1);
  EXPECT_EQ(file.tensor("output_norm.weight").type, GgmlType::F32);
  EXPECT_EQ(file.tensor("output_norm.weight").dims, (std::vector<uint64_t>{576}));

  // Every tensor's data lies in the data section, at its offset, and no two share a byte.
  const uint8_t* data_section = embd.data - embd.offset;
  std::vector<std::pair<uint64_t, uint64_t>> ranges;
  std::set<std::string> names;
  for (const auto& info : file.tensors()) {
    EXPECT_TRUE(names.insert(info.name).second) << info.name;
    EXPECT_EQ(info.data, data_section + info.offset) << info.name;
    EXPECT_EQ(info.offset % 32, 0u) << info.name;
    ranges.emplace_back(info.offset, info.offset + info.n_bytes);
  }
  std::sort(ranges.begin(), ranges.end());
  for (size_t i = 1; i < ranges.size(); ++i) EXPECT_LE(ranges[i - 1].second, ranges[i].first);
  // The last tensor ends at the end of the file (98362432 bytes).
  EXPECT_EQ(file.file_size(), 98362432u);
  const uint64_t data_start = file.file_size() - ranges.back().second;
  EXPECT_EQ(data_start % 32, 0u);
  EXPECT_LT(data_start, 4u << 20);  // the header (vocab, merges) is a few MiB at most
}

}  // namespace
}  // namespace splash::gguf
