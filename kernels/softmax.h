// The softmax family: softmax and log-softmax along the last dim (max-subtracted), forward and
// backward. Plain kernels, no autograd. f32, f64, bf16 and f16: a 16-bit row is widened to f32, its
// max, exp-sum and row sums computed in f32 (acc_t), each output rounded once to its dtype.
//
// Each entry point checks its inputs (shapes, dtypes, devices: reel::Error naming the op and
// them), makes them contiguous where the kernel needs it, allocates the outputs on the inputs'
// device and runs the backend kernel (declared at the end of this file) on cpu or cuda.
#ifndef REEL_KERNELS_SOFTMAX_H
#define REEL_KERNELS_SOFTMAX_H
#include "core/tensor.h"

namespace reel::kernels {

// x (N..., C) -> y (N..., C). Backward takes the saved OUTPUT y, not x:
//   softmax:     dx = y * (dy - sum(dy * y))
//   log_softmax: dx = dy - exp(y) * sum(dy)
Tensor softmax_forward(const Tensor& x);
Tensor log_softmax_forward(const Tensor& x);
Tensor softmax_backward(const Tensor& dy, const Tensor& y);
Tensor log_softmax_backward(const Tensor& dy, const Tensor& y);

}  // namespace reel::kernels
#endif  // REEL_KERNELS_SOFTMAX_H

// ---- Backend kernels --------------------------------------------------------------------------
// Declared once for both backends, outside the include guard: kernels/backends.h includes this
// file again with REEL_BACKEND_KERNELS defined, inside namespace reel::kernels::cpu
// (kernels/cpu/softmax.cpp) and reel::kernels::cuda (kernels/cuda/softmax.cu).
// Inputs arrive validated by the entry points (kernels/softmax.cpp), CONTIGUOUS and viewed as the
// flat shapes written next to each argument; see kernels/backends.h for the common contract.
#ifdef REEL_BACKEND_KERNELS
void softmax_forward(const Tensor& x, bool log, const Tensor& y);                       // (R, C)
void softmax_backward(const Tensor& dy, const Tensor& y, bool log, const Tensor& dx);   // (R, C)
#endif  // REEL_BACKEND_KERNELS
