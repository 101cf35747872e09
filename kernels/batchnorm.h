// The batchnorm family: BatchNorm over the batch and the positions of each channel of an (N, C) or
// (N, C, *spatial) tensor, as torch.nn.functional.batch_norm, forward and backward, in f32, f64,
// bf16 and f16. Plain kernels, no autograd: the tape (autograd/ops/batchnorm.h) decides what to save, and keeps the statistics
// of the first forward so that a checkpoint replay normalises with them (the first forward's bits)
// and does not update the running statistics again.
//
// The forward's parts, so that a checkpoint replay can redo the normalisation alone:
//   batch_norm_stats:   the per-channel statistics (batch ones in training, with the running-stat
//                       update; the running ones in eval);
//   batch_norm_apply:   y = (x - mean[c]) * rstd[c] * w[c] + b[c];
//   batch_norm_forward: both, as one backend kernel (the cuda backend runs cuDNN's fused training
//                       or inference call there, so the statistics and y come from one library
//                       call);
//   batch_norm_replay:  a replay's y, the bits of the first forward's, without the running-stat
//                       update (cpu: the apply kernel alone; cuda: see kernels/cuda/batchnorm.cu).
// And batch_norm_count, nn::BatchNorm's num_batches_tracked += 1 on the device (a CUDA graph's
// replay advances it as an eager step does; the host never reads or writes the value).
// Each entry point checks its inputs (shapes, dtypes, devices: reel::Error naming the op and
// them), makes them contiguous, allocates the outputs on the inputs' device and runs the backend
// kernel (declared at the end of this file) on cpu or cuda.
#ifndef REEL_KERNELS_BATCHNORM_H
#define REEL_KERNELS_BATCHNORM_H
#include "core/tensor.h"

namespace reel::kernels {

// Dtypes: x, w, b (and dy) one floating dtype, f32, f64, bf16 or f16; y, dx, dw and db are in it.
// The statistics (mean, rstd, running_mean, running_var, a replay's var) are in x's dtype for f32
// and f64 and in f32 for a bf16 or f16 x: 16-bit values are widened on load, the sums are double as
// for f32, the statistics are rounded once to f32 (a 16-bit running average would stall: a
// momentum step below half an ulp, 2^-9 to 2^-8 of the value in bf16, is lost), and each output is
// rounded once to x's dtype. A 16-bit x with f32 weights, or with statistics of another dtype, is a
// reel::Error naming the op and the dtypes (autocast casts x, w and b to the 16-bit type and leaves
// the running statistics, buffers of an f32 BatchNorm, in f32; Module::to(bf16) keeps them f32).
//
// The statistics a forward normalises with: mean and rstd = 1 / sqrt(var + eps), (C) each, in the
// statistics' dtype above.
struct BatchNormStats { Tensor mean, rstd; };        // (C), (C)
struct BatchNormForward { Tensor y, mean, rstd; };   // (N, C, *), (C), (C)
struct BatchNormBackward { Tensor dx, dw, db; };     // (N, C, *), (C), (C)

// x (N, C, *). running_mean and running_var: (C) tensors of the statistics' dtype on x's device,
// both or neither (undefined).
//   training: mean and var (biased, / n) over the n = N * prod(spatial) values of each channel,
//     summed in double in a fixed order (bit-identical for any thread count). Where running
//     statistics are given they are updated in place, as PyTorch does:
//       running_mean = (1 - momentum) * running_mean + momentum * mean
//       running_var  = (1 - momentum) * running_var  + momentum * var * n / (n - 1)   (unbiased)
//     n must be > 1 ("Expected more than 1 value per channel when training", PyTorch's words).
//   eval: mean = running_mean, rstd = 1 / sqrt(running_var + eps); both required, not modified.
BatchNormStats batch_norm_stats(const Tensor& x, const Tensor& running_mean, const Tensor& running_var,
                                bool training, double momentum, double eps = 1e-5);
// x (N, C, *), w and b (C), mean and rstd (C) -> y = (x - mean[c]) * (rstd[c] * w[c]) + b[c].
Tensor batch_norm_apply(const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& mean, const Tensor& rstd);
// batch_norm_stats then batch_norm_apply, in one backend kernel (the same checks, the same
// running-stat update; on the cpu the same bits as the two entry points).
BatchNormForward batch_norm_forward(const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& running_mean,
                                    const Tensor& running_var, bool training, double momentum = 0.1,
                                    double eps = 1e-5);
// A checkpoint replay of batch_norm_forward(x, w, b, ...) whose results were mean and rstd: y with
// the bits of that forward's y (given x with the bits of its x), running statistics untouched.
// var (C): in eval, the running_var that forward read (a copy taken then); undefined in training.
Tensor batch_norm_replay(const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& mean, const Tensor& rstd,
                         const Tensor& var, bool training, double eps);
// dy, x (N, C, *); w, mean, rstd (C) as the forward used them. With xhat = (x - mean) * rstd:
//   dw = sum(dy * xhat), db = sum(dy) over each channel's n values;
//   training (the statistics depend on x):  dx = w * rstd * (dy - db / n - xhat * dw / n)
//   eval (the statistics are constants):    dx = w * rstd * dy
// Per channel in a fixed order, in double: bit-identical run to run and for any thread count.
// eps: the forward's (the cuda backend hands it to cuDNN, which wants the forward's; mean and
// rstd are what the backward uses).
BatchNormBackward batch_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& mean,
                                      const Tensor& rstd, bool training, double eps = 1e-5);
// count (a one-element i64, BatchNorm's num_batches_tracked) += 1 in place, on its device, one
// launch whose arguments are the same every call (so a captured CUDA graph's replay counts too);
// bumps its version. Nothing is read back: the host does not wait.
void batch_norm_count(const Tensor& count);

}  // namespace reel::kernels
#endif  // REEL_KERNELS_BATCHNORM_H

// ---- Backend kernels --------------------------------------------------------------------------
// Declared once for both backends, outside the include guard: kernels/backends.h includes this
// file again with REEL_BACKEND_KERNELS defined, inside namespace reel::kernels::cpu
// (kernels/cpu/batchnorm.cpp) and reel::kernels::cuda (kernels/cuda/batchnorm.cu).
// Inputs arrive validated by the entry points (kernels/batchnorm.cpp), CONTIGUOUS and viewed as the
// flat shapes written next to each argument, S the product of the spatial dims (1 for (N, C)):
// channel c of sample n is the contiguous run x[n, c, 0:S]. See kernels/backends.h for the common
// contract. The per-channel statistics (mean, rstd, running_mean, running_var, var) are of the
// statistics' dtype (acc_t: f32 for a 16-bit x), w, b, dw, db of x's.
#ifdef REEL_BACKEND_KERNELS
// training: batch statistics, and where running_mean is defined the in-place update of
// running_mean and running_var; eval: from running_mean and running_var (x is not read).
void batch_norm_stats(const Tensor& x,                                   // (N, C, S)
                      const Tensor& running_mean, const Tensor& running_var,  // (C) in/out, or undefined
                      bool training, double momentum, double eps,
                      const Tensor& mean, const Tensor& rstd);           // (C) out
void batch_norm_apply(const Tensor& x,                                   // (N, C, S)
                      const Tensor& w, const Tensor& b,                  // (C)
                      const Tensor& mean, const Tensor& rstd,            // (C)
                      const Tensor& y);                                  // (N, C, S) out
// training: the statistics (and, where running_mean is defined, the running-stat update) and y;
// eval: mean and rstd from running_mean and running_var, and y. N * S > 0 and C > 0.
void batch_norm_forward(const Tensor& x,                                 // (N, C, S)
                        const Tensor& w, const Tensor& b,                // (C)
                        const Tensor& running_mean, const Tensor& running_var,  // (C) in/out, or undefined
                        bool training, double momentum, double eps,
                        const Tensor& y,                                 // (N, C, S) out
                        const Tensor& mean, const Tensor& rstd);         // (C) out
// y as batch_norm_forward wrote it for these x, w, b (its mean and rstd given; var: the running_var
// it read in eval, undefined in training); no statistic is written.
void batch_norm_replay(const Tensor& x,                                  // (N, C, S)
                       const Tensor& w, const Tensor& b,                 // (C)
                       const Tensor& mean, const Tensor& rstd, const Tensor& var,  // (C); var: eval only
                       bool training, double eps,
                       const Tensor& y);                                 // (N, C, S) out
void batch_norm_backward(const Tensor& dy, const Tensor& x,              // (N, C, S)
                         const Tensor& w, const Tensor& mean, const Tensor& rstd,  // (C)
                         bool training, double eps,
                         const Tensor& dx,                               // (N, C, S) out
                         const Tensor& dw, const Tensor& db);            // (C) out
void batch_norm_count(const Tensor& count);                              // () or (1) i64 in/out: += 1
#endif  // REEL_BACKEND_KERNELS
