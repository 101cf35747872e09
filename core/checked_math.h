// Overflow-checked arithmetic for sizes, strides, offsets and byte counts.
//
// Every shape reel meets may come from a user or a file: a product of dims that does not fit in
// int64 must raise a reel::Error naming the op and the shape, never wrap into a small, zero or
// negative size that later code trusts (zeros({1 << 32, 1 << 32}) once made a tensor of 0 bytes).
// shape_numel and contiguous_strides (core/tensor.h) are built on these two; the readers
// (nn/safetensors.cpp, nn/datasets.cpp) use them for what they compute themselves.
#pragma once
#include <cstdint>
#include <string_view>

#include "core/error.h"

namespace reel {

// a * b; raises "op: shape (..) is too large: a * b overflows int64" when it does not fit.
inline int64_t checked_mul(int64_t a, int64_t b, std::string_view op, const Shape& shape) {
  int64_t r;
  if (__builtin_mul_overflow(a, b, &r))
    REEL_FAIL(op, ": shape ", shape, " is too large: ", a, " * ", b, " overflows int64");
  return r;
}

// a + b; raises "op: shape (..) is too large: a + b overflows int64" when it does not fit.
inline int64_t checked_add(int64_t a, int64_t b, std::string_view op, const Shape& shape) {
  int64_t r;
  if (__builtin_add_overflow(a, b, &r))
    REEL_FAIL(op, ": shape ", shape, " is too large: ", a, " + ", b, " overflows int64");
  return r;
}

}  // namespace reel
