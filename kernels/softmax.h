// The softmax family: softmax and log-softmax along the last dim (max-subtracted), forward and
// backward. Plain kernels, no autograd.
//
// Each entry point checks its inputs (shapes, dtypes, devices: reel::Error naming the op and
// them), makes them contiguous where the kernel needs it, allocates the outputs on the inputs'
// device and runs the backend kernel (kernels/softmax_backend.h) on cpu or cuda.
#pragma once
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
