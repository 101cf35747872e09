// CUDA implementations behind kernels/nn_ops.h (kernels/cuda/nn_*.cu), with the signatures of
// kernels/nn_kernel_decls.h (the CPU's list) and the contracts of kernels/cpu/nn_kernels.h:
// inputs arrive validated by the entry points (one cuda device, one floating dtype, shapes
// consistent), CONTIGUOUS and viewed as the flat shapes written next to each argument there;
// outputs are contiguous, preallocated on the same device, and every element of them is written
// (no output needs zeroing first: the tests poison allocations).
//
// One difference: the CPU entry points range-check index tensors on the host before the kernel
// runs, which a device cannot do without copying the indices back. Here the kernels check every
// index they read, never use a bad one (no out-of-bounds access), and store the smallest flat
// position of a bad one in a device error buffer; the launcher checks that buffer after the
// launch and throws IndexOutOfRange, which kernels/nn_ops.cpp turns into the CPU's message.
// Plain C++: no CUDA header is needed to call these.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace reel::kernels::cuda {

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

#include "kernels/nn_kernel_decls.h"

// idx (N) i32/i64: how many indices are not `ignore` (when has_ignore); every other one must be in
// [0, limit), else IndexOutOfRange for the first that is not. The device side of the CPU entry
// points' host check, for the callers that need the count before the kernel (the Mean divisor).
int64_t check_indices(const Tensor& idx, int64_t limit, bool has_ignore, int64_t ignore);

}  // namespace reel::kernels::cuda
