// The layernorm family: LayerNorm and RMSNorm over the last dim, GroupNorm over channel groups of
// (N, C, spatial...) tensors, forward and backward, in f32, f64, bf16 and f16. Plain
// kernels, no autograd: the tape (autograd/ops/layernorm.h) decides what to save.
//
// Each entry point checks its inputs (shapes, dtypes, devices: reel::Error naming the op and
// them), makes them contiguous where the kernel needs it, allocates the outputs on the inputs'
// device and runs the backend kernel (declared at the end of this file) on cpu or cuda.
#ifndef REEL_KERNELS_LAYERNORM_H
#define REEL_KERNELS_LAYERNORM_H
#include "core/tensor.h"

namespace reel::kernels {

// x (N..., C), w (C), b (C). mean and rstd have the rows' shape (N...) and x's dtype (f32 for a
// bf16 or f16 x: the statistics stay f32); they are what backward needs, so the tape saves them
// instead of recomputing the row statistics.
// Dtypes: x, w, b (and dy) one floating dtype, f32, f64, bf16 or f16; the outputs y, dx, dw, db
// are in it. 16-bit values are widened to f32 on load, the statistics and sums are f32 (dw/db
// partials f64, as for f32), and each output element is rounded once. A 16-bit x with f32 weights
// is rejected (dtypes differ): autocast casts x, w and b down together (the norms are Lower in
// autograd/autocast.cpp, statistics f32 inside the kernel), so the mixed case has no caller.
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

// GroupNorm (Wu & He 2018), as torch.nn.functional.group_norm: x (N, C, *) with C channels in
// `groups` groups of C / groups consecutive channels; each (sample, group) is normalised over its
// channels and all spatial positions, then scaled and shifted per channel:
//   y[n, c, s] = (x[n, c, s] - mean[n, g]) * rstd[n, g] * w[c] + b[c],  g = c / (C / groups),
//   rstd = 1 / sqrt(var + eps), var biased. No running statistics: the same in training and eval,
// and independent of the other samples of the batch (so gradient accumulation stays exact).
struct GroupNormForward { Tensor y, mean, rstd; };   // (N, C, *), (N, groups), (N, groups)
struct GroupNormBackward { Tensor dx, dw, db; };     // (N, C, *), (C), (C)

GroupNormForward group_norm_forward(const Tensor& x, const Tensor& w, const Tensor& b, int64_t groups,
                                    double eps = 1e-5);
// dw and db are summed over samples and positions in a fixed order: bit-identical run to run.
GroupNormBackward group_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& mean,
                                      const Tensor& rstd, int64_t groups);

}  // namespace reel::kernels
#endif  // REEL_KERNELS_LAYERNORM_H

// ---- Backend kernels --------------------------------------------------------------------------
// Declared once for both backends, outside the include guard: kernels/backends.h includes this
// file again with REEL_BACKEND_KERNELS defined, inside namespace reel::kernels::cpu
// (kernels/cpu/layernorm.cpp) and reel::kernels::cuda (kernels/cuda/layernorm.cu).
// Inputs arrive validated by the entry points (kernels/layernorm.cpp), CONTIGUOUS and viewed as the
// flat shapes written next to each argument; see kernels/backends.h for the common contract.
#ifdef REEL_BACKEND_KERNELS
void layernorm_forward(const Tensor& x,    // (R, C)
                       const Tensor& w,    // (C)
                       const Tensor& b,    // (C)
                       double eps,
                       const Tensor& y,    // (R, C) out
                       const Tensor& mean, // (R) out
                       const Tensor& rstd);// (R) out
void layernorm_backward(const Tensor& dy, const Tensor& x,  // (R, C)
                        const Tensor& w,                     // (C)
                        const Tensor& mean, const Tensor& rstd,  // (R)
                        const Tensor& dx,                    // (R, C) out
                        const Tensor& dw, const Tensor& db); // (C) out
void rmsnorm_forward(const Tensor& x, const Tensor& w, double eps, const Tensor& y, const Tensor& rstd);
void rmsnorm_backward(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& rstd, const Tensor& dx,
                      const Tensor& dw);
// GroupNorm: S is the product of the spatial dims (1 for an (N, C) x); group g of sample n is the
// contiguous run x[n, g*C/G : (g+1)*C/G, :] of M = C/G * S values.
void group_norm_forward(const Tensor& x,                        // (N, C, S)
                        const Tensor& w, const Tensor& b,       // (C)
                        int64_t groups, double eps,
                        const Tensor& y,                        // (N, C, S) out
                        const Tensor& mean, const Tensor& rstd);// (N, G) out
void group_norm_backward(const Tensor& dy, const Tensor& x,     // (N, C, S)
                         const Tensor& w,                       // (C)
                         const Tensor& mean, const Tensor& rstd,// (N, G)
                         int64_t groups,
                         const Tensor& dx,                      // (N, C, S) out
                         const Tensor& dw, const Tensor& db);   // (C) out
#endif  // REEL_BACKEND_KERNELS
