// Dropout masks from Philox4x32-10. Element i (row-major) of the mask for stream (seed, offset) is
//   keep ? 1 / (1 - p) : 0,   keep = (double)philox_uniform(seed, offset, i) >= p
// (0 everywhere when p == 1). It is a pure function of (seed, offset, i): forward, backward and a
// replayed checkpoint segment all see the same mask, and so do the CPU and CUDA devices.
#pragma once
#include <cstdint>

#include "core/tensor.h"

namespace reel::kernels {

// A contiguous (shape) mask of `dtype` (floating) on `device`; p in [0, 1].
Tensor dropout_mask(const Shape& shape, DType dtype, Device device, double p, uint64_t seed, uint64_t offset);

}  // namespace reel::kernels
