// layer_norm and rms_norm over the last dim, and group_norm over channel groups, on
// kernels/layernorm.h's fused kernels.
//   LayerNorm: y = (x - mean) * rstd * w + b;  RMSNorm: y = x * rstd * w.
// Saves x, w and the row statistics (mean and rstd for LayerNorm, rstd for RMSNorm: (N...) each,
// 1/C of x), not the output: backward needs x-hat = (x - mean) * rstd, which x and the statistics
// give in one pass without a second reduction, and the output would cost as much as x. The
// weight is a parameter, so saving it costs nothing. The backward kernel returns dx, dw and db
// together (dw and db summed over rows in a fixed order: bit-identical run to run). GroupNorm
// saves the same: x, w and its (N, groups) statistics.
#pragma once
#include <optional>
#include <string>

#include "autograd/autocast.h"
#include "autograd/functions.h"
#include "autograd/op.h"
#include "autograd/ops/channel_affine.h"
#include "kernels/layernorm.h"

namespace reel {
namespace autograd::ops {
struct LayerNorm final : autograd::Op {
  double eps;
  explicit LayerNorm(double eps) : eps(eps) {}
  const char* name() const override { return "layer_norm"; }
  std::string attributes() const override { return "eps=" + std::to_string(eps); }
  Tensors forward(const Tensors& in, ForwardCtx& ctx) const override {
    // Without a bias (inputs x, w) the kernel adds zeros: C values, nothing next to x.
    const Tensor b = in.size() == 3 ? in[2] : zeros({in[1].numel()}, in[1].dtype(), in[1].device());
    kernels::LayerNormForward r = kernels::layernorm_forward(in[0], in[1], b, eps);
    ctx.save({in[0], in[1], r.mean, r.rstd});
    return {r.y};
  }
  Tensors backward(const Tensors& grad, BackwardCtx& ctx) const override {
    kernels::LayerNormBackward r = kernels::layernorm_backward(grad[0], ctx.saved(0), ctx.saved(1),
                                                               ctx.saved(2), ctx.saved(3));
    if (ctx.num_inputs() == 3) return {r.dx, r.dw, r.db};
    return {r.dx, r.dw};
  }
};

struct RMSNorm final : autograd::Op {
  double eps;
  explicit RMSNorm(double eps) : eps(eps) {}
  const char* name() const override { return "rms_norm"; }
  std::string attributes() const override { return "eps=" + std::to_string(eps); }
  Tensors forward(const Tensors& in, ForwardCtx& ctx) const override {
    kernels::RMSNormForward r = kernels::rmsnorm_forward(in[0], in[1], eps);
    ctx.save({in[0], in[1], r.rstd});
    return {r.y};
  }
  Tensors backward(const Tensors& grad, BackwardCtx& ctx) const override {
    kernels::RMSNormBackward r =
        kernels::rmsnorm_backward(grad[0], ctx.saved(0), ctx.saved(1), ctx.saved(2));
    return {r.dx, r.dw};
  }
};

// Inputs: x, then the weight and the bias where given (their absence: ones and zeros, constants).
struct GroupNorm final : autograd::Op {
  int64_t groups;
  double eps;
  bool has_weight, has_bias;
  GroupNorm(int64_t groups, double eps, bool has_weight, bool has_bias)
      : groups(groups), eps(eps), has_weight(has_weight), has_bias(has_bias) {}
  const char* name() const override { return "group_norm"; }
  std::string attributes() const override {
    return "groups=" + std::to_string(groups) + " eps=" + std::to_string(eps);
  }
  Tensors forward(const Tensors& in, ForwardCtx& ctx) const override {
    const Tensor& x = in[0];
    const ChannelAffine affine = channel_affine(in, has_weight, has_bias);
    const Tensor& w = affine.weight;
    const Tensor& b = affine.bias;
    kernels::GroupNormForward r = kernels::group_norm_forward(x, w, b, groups, eps);
    ctx.save({x, w, r.mean, r.rstd});
    return {r.y};
  }
  Tensors backward(const Tensors& grad, BackwardCtx& ctx) const override {
    kernels::GroupNormBackward r = kernels::group_norm_backward(
        grad[0], ctx.saved(0), ctx.saved(1), ctx.saved(2), ctx.saved(3), groups);
    Tensors grads{r.dx};
    if (has_weight) grads.push_back(r.dw);
    if (has_bias) grads.push_back(r.db);
    return grads;
  }
};

}  // namespace autograd::ops

// ---- normalisation over the last dim ----
// y = (x - mean) / sqrt(var + eps) * weight + bias, var biased; weight, bias (C) for x (..., C);
// bias may be undefined (no bias). RMSNorm: y = x / sqrt(mean(x^2) + eps) * weight.
// Both save x and the row statistics (mean, rstd), not the output.
inline Tensor layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor(), double eps = 1e-5) {
  autograd::Tensors in = autograd::autocast("layer_norm", {x, weight, bias});
  if (!bias.defined()) in.pop_back();
  return autograd::apply(autograd::ops::LayerNorm(eps), in);
}

inline Tensor rms_norm(const Tensor& x, const Tensor& weight, double eps = 1e-6) {
  return autograd::apply(autograd::ops::RMSNorm(eps), autograd::autocast("rms_norm", {x, weight}));
}

// GroupNorm, as torch.nn.functional.group_norm: x (N, C, *) in `num_groups` groups of C / num_groups
// consecutive channels, each (sample, group) normalised over its channels and positions, then
// y * weight[c] + bias[c] per channel; weight and bias (C) or undefined (1 and 0). No running
// statistics, and no sample sees another: accumulating micro-batches equals the big batch.
inline Tensor group_norm(const Tensor& x, int64_t num_groups, const Tensor& weight = Tensor(),
                         const Tensor& bias = Tensor(), double eps = 1e-5) {
  const autograd::Tensors cast = autograd::autocast("group_norm", {x, weight, bias});
  autograd::Tensors inputs{cast[0]};
  if (weight.defined()) inputs.push_back(cast[1]);
  if (bias.defined()) inputs.push_back(cast[2]);
  return autograd::apply(autograd::ops::GroupNorm(num_groups, eps, weight.defined(), bias.defined()), inputs);
}

}  // namespace reel
