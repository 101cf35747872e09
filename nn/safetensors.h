// Save and load tensors in the safetensors format, so weights move to and from Python's
// safetensors / PyTorch with the same names and shapes.
//
// Layout: an 8-byte little-endian header length N, N bytes of JSON
//   {"__metadata__": {"k": "v"}, "name": {"dtype": "F32", "shape": [2, 3], "data_offsets": [b, e]}, ...}
// (padded with spaces to a multiple of 8), then the raw little-endian data; offsets are relative
// to the first data byte. Reading treats the file as untrusted: the header's nesting depth (at
// most 64) before it is parsed, and every length, offset, dtype and shape (sizes with overflow
// checks) before use; a bad file raises reel::Error, never an out-of-bounds read, and its messages
// name the bad key and the form expected rather than repeating the value.
#pragma once
#include <map>
#include <string>

#include "core/tensor.h"

namespace reel::nn {

using TensorDict = std::map<std::string, Tensor>;
using Metadata = std::map<std::string, std::string>;

// Writes `tensors` (any device; copied to the host) to `path`. Every reel dtype has its safetensors
// name: f32 F32, f64 F64, bf16 BF16, f16 F16, i32 I32, i64 I64 (the names PyTorch's writer uses);
// the bytes are the values' bits, little-endian, so a load gives back the same bits.
void save_safetensors(const std::string& path, const TensorDict& tensors, const Metadata& metadata = {});

// The tensors in `path`, placed on `device`; the file's __metadata__ goes to *metadata if given.
TensorDict load_safetensors(const std::string& path, Device device = Device::cpu(), Metadata* metadata = nullptr);

// The same, from bytes in memory (what the file functions use; also handy for tests).
std::string to_safetensors_bytes(const TensorDict& tensors, const Metadata& metadata = {});
TensorDict from_safetensors_bytes(const std::string& bytes, Device device = Device::cpu(),
                                  Metadata* metadata = nullptr, const std::string& source = "<memory>");

}  // namespace reel::nn
