// batch_norm, as torch.nn.functional.batch_norm, on kernels/batchnorm.h's kernels: x (N, C, *)
// normalised per channel over the batch and the positions, then scaled and shifted per channel.
//
// What it saves: x, w and the (C) statistics it normalised with (mean, rstd), not the output:
// backward needs xhat = (x - mean) * rstd, which they give in one pass.
//
// Checkpoint replay. The forward has a side effect (in training, the running-stat update) and its
// statistics depend on the whole batch, so a replay must neither update the running statistics a
// second time nor normalise with other statistics. Like dropout, which records its Philox (seed,
// offset) in the op so that a replay draws the same mask, the op records the statistics of its
// first run: the first forward computes them (and updates the running statistics), and keeps the
// (C) mean and rstd in the op (in eval also a copy of the running_var it read); every later run of
// the same node (a checkpoint replay, a nested segment's second replay) goes through
// kernels::batch_norm_replay, which writes y alone, with the bits of the first forward's y, and
// saves the kept mean and rstd. The running statistics were then updated once, and the replayed
// output and saves are the first forward's bits. How the replay gets those bits is the backend's:
//   cpu: the apply kernel alone with the kept statistics (the first forward was stats then apply);
//   cuda (cuDNN): cuDNN has no "apply these statistics" call with the bits of its fused training
//     forward, so a training replay calls that forward again on the same x bits with NULL
//     running-stat pointers (no update; SPATIAL mode is deterministic, so the same y), recomputing
//     statistics it discards; an eval replay calls the inference call again with the kept
//     running-stat copies (kernels/cuda/batchnorm.cu).
// The kept tensors stay with the node while its segment is collapsed: 2C values (3C in eval), as
// dropout keeps its seed.
#pragma once
#include <string>

#include "autograd/autocast.h"
#include "autograd/functions.h"
#include "autograd/op.h"
#include "autograd/ops/channel_affine.h"
#include "kernels/batchnorm.h"

namespace reel {
namespace autograd::ops {

// Inputs: x, then the weight and the bias where given (their absence: ones and zeros, constants).
struct BatchNorm final : autograd::Op {
  bool training;
  double momentum, eps;
  bool has_weight, has_bias;
  Tensor running_mean, running_var;  // read (eval) or updated (training) by the first run only
  // The statistics of the first run, (C) each; undefined until it ran. Every later run uses them.
  // var: in eval, a copy of the running_var the first run read (a cuda replay normalises with it).
  mutable Tensor mean, rstd, var;

  BatchNorm(bool training, double momentum, double eps, bool has_weight, bool has_bias, Tensor running_mean,
            Tensor running_var)
      : training(training), momentum(momentum), eps(eps), has_weight(has_weight), has_bias(has_bias),
        running_mean(std::move(running_mean)), running_var(std::move(running_var)) {}
  const char* name() const override { return "batch_norm"; }
  std::string attributes() const override {
    return std::string("training=") + (training ? "1" : "0") + " momentum=" + std::to_string(momentum) +
           " eps=" + std::to_string(eps);
  }
  Tensors forward(const Tensors& in, ForwardCtx& ctx) const override {
    const Tensor& x = in[0];
    const ChannelAffine affine = channel_affine(in, has_weight, has_bias);
    const Tensor& w = affine.weight;
    const Tensor& b = affine.bias;
    Tensor y;
    if (!mean.defined()) {  // the first run: the statistics, and in training the running-stat update
      kernels::BatchNormForward r =
          kernels::batch_norm_forward(x, w, b, running_mean, running_var, training, momentum, eps);
      y = r.y;
      mean = r.mean;
      rstd = r.rstd;
      if (!training) var = running_var.clone();  // eval's mean is already a copy of running_mean
    } else {  // a replay: the first run's y bits and statistics, the running statistics left alone
      y = kernels::batch_norm_replay(x, w, b, mean, rstd, var, training, eps);
    }
    ctx.save({x, w, mean, rstd});
    return {y};
  }
  Tensors backward(const Tensors& grad, BackwardCtx& ctx) const override {
    kernels::BatchNormBackward r = kernels::batch_norm_backward(grad[0], ctx.saved(0), ctx.saved(1),
                                                                ctx.saved(2), ctx.saved(3), training, eps);
    Tensors grads{r.dx};
    if (has_weight) grads.push_back(r.dw);
    if (has_bias) grads.push_back(r.db);
    return grads;
  }
};

}  // namespace autograd::ops

// ---- batch normalisation ----
// torch.nn.functional.batch_norm: x (N, C) or (N, C, *spatial); per channel c,
//   y = (x - mean[c]) / sqrt(var[c] + eps) * weight[c] + bias[c]
// weight and bias (C) or undefined (1 and 0), of x's dtype; running_mean and running_var (C), both
// or neither (undefined), on x's device, of x's dtype for f32 and f64 and f32 for a bf16 or f16 x
// (kernels/batchnorm.h: the statistics stay f32), never requiring grad. Under autocast (Lower, as
// the other norms) x, weight and bias are cast to the 16-bit type and the running statistics are
// left as they are: f32 buffers, updated in f32; y is 16-bit, and what it saves is x in 16 bits
// with mean and rstd in f32.
//   training: mean and var (biased) of the batch, over N and the positions; the gradient flows
//     through them. Where running statistics are given they are updated in place, once per call
//     (a checkpoint replay does not update them again, and uses this call's statistics):
//       running_mean = (1 - momentum) running_mean + momentum mean
//       running_var  = (1 - momentum) running_var  + momentum var * n / (n - 1)  (unbiased)
//     reel::Error when a channel has a single value (n = N * positions = 1), as PyTorch.
//   eval (training false): the running statistics, required, as constants.
// Its statistics see the whole batch: N micro-batches accumulated do NOT give the gradients of one
// batch of all their samples (docs/design.md, "Optimizers and the accumulation window").
inline Tensor batch_norm(const Tensor& x, const Tensor& running_mean, const Tensor& running_var,
                         const Tensor& weight = Tensor(), const Tensor& bias = Tensor(), bool training = false,
                         double momentum = 0.1, double eps = 1e-5) {
  const autograd::Tensors cast = autograd::autocast("batch_norm", {x, weight, bias});
  autograd::Tensors inputs{cast[0]};
  if (weight.defined()) inputs.push_back(cast[1]);
  if (bias.defined()) inputs.push_back(cast[2]);
  return autograd::apply(autograd::ops::BatchNorm(training, momentum, eps, weight.defined(), bias.defined(),
                                                  running_mean, running_var),
                         inputs);
}

}  // namespace reel
