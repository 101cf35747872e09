// The layernorm family: LayerNorm and RMSNorm over the last dim, forward and backward. Plain
// kernels, no autograd: the tape (autograd/ops/layer_norm.cpp) decides what to save.
//
// Each entry point checks its inputs (shapes, dtypes, devices: reel::Error naming the op and
// them), makes them contiguous where the kernel needs it, allocates the outputs on the inputs'
// device and runs the backend kernel (kernels/layernorm_backend.h) on cpu or cuda.
#pragma once
#include "core/tensor.h"

namespace reel::kernels {

// x (N..., C), w (C), b (C). mean and rstd have the rows' shape (N...) and x's dtype; they are
// what backward needs, so the tape saves them instead of recomputing the row statistics.
//   LayerNorm: y = (x - mean) * rstd * w + b,  rstd = 1 / sqrt(var + eps), var biased (/ C)
//   RMSNorm:   y = x * rstd * w,               rstd = 1 / sqrt(mean(x^2) + eps)
struct LayerNormForward { Tensor y, mean, rstd; };   // (N..., C), (N...), (N...)
struct LayerNormBackward { Tensor dx, dw, db; };     // (N..., C), (C), (C)
struct RMSNormForward { Tensor y, rstd; };           // (N..., C), (N...)
struct RMSNormBackward { Tensor dx, dw; };           // (N..., C), (C)

LayerNormForward layernorm_forward(const Tensor& x, const Tensor& w, const Tensor& b, double eps = 1e-5);
// dy (N..., C); x, w, mean, rstd as saved by the forward. dw and db are summed over all rows in
// a fixed order (fixed row chunks, partials added in chunk order): bit-identical run to run and
// for any number of threads.
LayerNormBackward layernorm_backward(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& mean,
                                     const Tensor& rstd);
RMSNormForward rmsnorm_forward(const Tensor& x, const Tensor& w, double eps = 1e-6);
RMSNormBackward rmsnorm_backward(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& rstd);

}  // namespace reel::kernels
