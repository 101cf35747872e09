// CPU implementations behind kernels/nn_ops.h; their declarations are the list in
// kernels/nn_kernel_decls.h, shared with kernels/cuda/nn_kernels.h. Inputs arrive validated by
// the entry points (kernels/nn_ops.cpp): one device (cpu), one floating dtype, index tensors
// i32/i64 with every index already checked in range, shapes consistent, and CONTIGUOUS, already
// viewed as the flat 2-D/3-D shapes written next to each argument. Outputs are contiguous and
// preallocated; the kernels fill every element (no output needs zeroing first). Kernels never
// throw from inside a parallel region: every check happens before.
#pragma once
#include <cstdint>
#include <vector>

#include "core/tensor.h"

namespace reel::kernels::cpu {

#include "kernels/nn_kernel_decls.h"

}  // namespace reel::kernels::cpu
