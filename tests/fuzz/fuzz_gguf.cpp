// libFuzzer target for the GGUF reader: any byte string must parse or raise splash::Error,
// never crash or read out of bounds (built with ASan+UBSan, see `make fuzz`).
#include <cstddef>
#include <cstdint>
#include <span>

#include "common/error.h"
#include "formats/gguf.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    auto file = splash::gguf::File::parse(std::span<const uint8_t>(data, size), "<fuzz>");
    // Exercise the typed getters the loaders use.
    for (const auto& [key, value] : file.metadata()) {
      try {
        (void)file.get_string(key);
      } catch (const splash::Error&) {
      }
      try {
        (void)file.get_int_array(key);
      } catch (const splash::Error&) {
      }
    }
    for (const auto& tensor : file.tensors()) {
      volatile uint8_t sink = 0;
      if (tensor.n_bytes) sink = tensor.data[0] ^ tensor.data[tensor.n_bytes - 1];
      (void)sink;
    }
  } catch (const splash::Error&) {
  }
  return 0;
}
