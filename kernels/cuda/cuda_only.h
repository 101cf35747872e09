// The CUDA backend's functions that have no CPU twin (the shared list is kernels/backends.h): the
// teaching tiled SGEMM, and the device side of index-range checking.
//
// Index tensors: the CPU entry points range-check them on the host before the kernel runs, which
// a device cannot do without copying the indices back. The CUDA kernels check every index they
// read instead, never use a bad one (no out-of-bounds access), and store the smallest flat
// position of a bad one in the device's error slots (kernels/cuda/index_errors.h); the host
// reads them at its next wait for the device and throws IndexOutOfRange, which the entry points
// (kernels/index_check.h) turn into the CPU's message.
// Plain C++: no CUDA header is needed to call these.
#pragma once
#include <cstdint>
#include <string>

#include "core/tensor.h"

namespace reel::kernels::cuda {

// a (B..., M, K) @ b (B..., K, N) -> out (B..., M, N), as cuda::matmul, through the hand-written
// 16x16 shared-memory tiled kernel: the teaching version (see matmul.cu), checked against cuBLAS
// and the CPU; f32 and f64.
void matmul_tiled(const Tensor& a, const Tensor& b, const Tensor& out);

// An index read by a kernel was out of range: `value` at flat `position` of the index tensor.
// Derives from reel::Error so that a caller who does not translate it still gets a reel::Error.
struct IndexOutOfRange : Error {
  IndexOutOfRange(int64_t position_, int64_t value_)
      : Error("index " + std::to_string(value_) + " at flat position " + std::to_string(position_) +
              " is out of range"),
        position(position_),
        value(value_) {}
  int64_t position, value;
};

// idx (N) i32/i64: how many indices are not `ignore` (when has_ignore); every other one must be in
// [0, limit), else IndexOutOfRange for the first that is not. The device side of the CPU entry
// points' host check, for the callers that need the count before the kernel (the Mean divisor).
int64_t check_indices(const Tensor& idx, int64_t limit, bool has_ignore, int64_t ignore);

}  // namespace reel::kernels::cuda
