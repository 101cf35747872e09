// The max family: max along one axis with argmax, and its scatter backward. (The max reduction
// without indices is in kernels/reduce.h.) Plain kernels, no autograd. Floating dtypes f32, f64,
// bf16 and f16; exact in each (16-bit values compare as their f32 widenings).
//
// Each entry point checks its inputs (shapes, dtypes, devices: reel::Error naming the op and
// them), makes them contiguous where the kernel needs it, allocates the outputs on the inputs'
// device and runs the backend kernel (declared at the end of this file) on cpu or cuda.
#ifndef REEL_KERNELS_MAX_H
#define REEL_KERNELS_MAX_H
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
#endif  // REEL_KERNELS_MAX_H

// ---- Backend kernels --------------------------------------------------------------------------
// Declared once for both backends, outside the include guard: kernels/backends.h includes this
// file again with REEL_BACKEND_KERNELS defined, inside namespace reel::kernels::cpu
// (kernels/cpu/max.cpp) and reel::kernels::cuda (kernels/cuda/max.cu).
// Inputs arrive validated by the entry points (kernels/max.cpp), CONTIGUOUS and viewed as the
// flat shapes written next to each argument; see kernels/backends.h for the common contract.
#ifdef REEL_BACKEND_KERNELS
void max_with_indices(const Tensor& x,        // (O, A, I): reduce A
                      const Tensor& values,   // (O, I) out
                      const Tensor& indices); // (O, I) i64 out
void max_backward(const Tensor& dy,       // (O, I)
                  const Tensor& indices,  // (O, I) i64 in [0, A)
                  const Tensor& dx);      // (O, A, I) out
#endif  // REEL_BACKEND_KERNELS
