// The backend kernels of every op family, declared once (at the end of kernels/<family>.h, outside
// its include guard; kernels/ops.h lists the families) and included here twice: as
// reel::kernels::cpu (kernels/cpu/<family>.cpp) and as reel::kernels::cuda (kernels/cuda/<family>.cu,
// compiled by nvcc or, in the emulated build, on the host through kernels/simt). The entry points
// (kernels/<family>.cpp) call them through REEL_DEVICE_DISPATCH (kernels/dispatch.h).
//
// The contract common to both backends: inputs arrive validated by the entry point (one device,
// the backend's; the dtype it checked; index tensors i32/i64; shapes consistent), and where a
// family's list says so CONTIGUOUS and viewed as the flat shapes written next to each argument.
// Outputs are preallocated and contiguous (unless the family's list says otherwise: attention's
// outputs follow its inputs' strides), and the kernels write every element of them (no output
// needs zeroing first: the tests poison allocations). CPU kernels never throw from inside a
// parallel region: every check happens before. The CPU entry points range-check index tensors on
// the host; CUDA kernels check every index they read instead (kernels/cuda/cuda_only.h).
// Plain C++: no CUDA header is needed to call these. CUDA-only extras: kernels/cuda/cuda_only.h.
#pragma once
#include <cstdint>
#include <vector>

#include "core/tensor.h"
#include "kernels/op_kinds.h"

#include "kernels/ops.h"  // first at namespace scope: the entry points, result structs and guards

#define REEL_BACKEND_KERNELS  // now each family header yields only its backend declarations
namespace reel::kernels::cpu {
#include "kernels/ops.h"
}  // namespace reel::kernels::cpu

namespace reel::kernels::cuda {
#include "kernels/ops.h"
}  // namespace reel::kernels::cuda
#undef REEL_BACKEND_KERNELS
