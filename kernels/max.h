// The max family: max along one axis with argmax, and its scatter backward. (The max reduction
// without indices is in kernels/reduce.h.) Plain kernels, no autograd.
//
// Each entry point checks its inputs (shapes, dtypes, devices: reel::Error naming the op and
// them), makes them contiguous where the kernel needs it, allocates the outputs on the inputs'
// device and runs the backend kernel (kernels/max_backend.h) on cpu or cuda.
#pragma once
#include "core/tensor.h"

namespace reel::kernels {

// x (..., A, ...) -> values and indices (i64) with the axis dropped (or kept as size 1 when
// keepdim). The index of the first maximum; a NaN is the maximum (the first NaN wins), as in
// torch.max(x, dim).
struct MaxWithIndices { Tensor values, indices; };
MaxWithIndices max_with_indices(const Tensor& x, int64_t axis, bool keepdim = false);
// dy and indices with the shape of values (keepdim or not: read from dy's rank) -> dx of
// input_shape: zero except dx[..., indices, ...] = dy (a scatter along `axis`).
Tensor max_backward(const Tensor& dy, const Tensor& indices, const Shape& input_shape, int64_t axis);

}  // namespace reel::kernels
