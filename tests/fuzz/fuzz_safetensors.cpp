// Fuzzes the safetensors reader: nn::from_safetensors_bytes on arbitrary bytes.
#include "fuzz_target.h"
#include "nn/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return fuzz_one(data, size, [](const std::string& bytes) { reel::nn::from_safetensors_bytes(bytes); });
}
