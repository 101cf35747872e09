// layer_norm and rms_norm over the last dim, and group_norm over channel groups, on
// kernels/layernorm.h's fused kernels.
//   LayerNorm: y = (x - mean) * rstd * w + b;  RMSNorm: y = x * rstd * w.
// Saves x, w and the row statistics (mean and rstd for LayerNorm, rstd for RMSNorm: (N...) each,
// 1/C of x), not the output: backward needs x-hat = (x - mean) * rstd, which x and the statistics
// give in one pass without a second reduction, and the output would cost as much as x. The
// weight is a parameter, so saving it costs nothing. The backward kernel returns dx, dw and db
// together (dw and db summed over rows in a fixed order: bit-identical run to run), dw and db
// straight into the weight's and bias's .grad where those exist (their gradient sinks,
// autograd/op.h): the kernel writes them (after zero_grad) or adds to them, no zero-fill, no
// temporary, no copy by the tape. GroupNorm saves the same: x, w and its (N, groups) statistics.
//
// add_layer_norm is the residual add fused with the LayerNorm after it (a pre-LN transformer's
// h = x + f(x) followed by ln(h)): (s, y) = (x + r, layer_norm(x + r)) in one kernel launch, and
// a backward of one launch (plus the dw/db column sums) computing ds = ds_ext + the LayerNorm's dx,
// where ds_ext is the gradient reaching s from its other users; ds is x's and r's gradient both
// (the same tensor). It saves s (its own output), w and the statistics: what layer_norm(s) saves.
// With the residual branch's bias rb (C) (a linear's bias left out of the linear that made r),
// s = x + (r + rb) in the same forward kernel, and rb's gradient (the column sums of ds) comes out
// of the same backward launch (for C <= 256 on cuda; kernels/layernorm.h layernorm_backward's drb),
// into rb's .grad sink as dw and db go: the linear's backward then has no bias gradient to make.
#pragma once
#include <memory>
#include <optional>
#include <string>

#include "autograd/autocast.h"
#include "autograd/functions.h"
#include "autograd/op.h"
#include "autograd/ops/channel_affine.h"
#include "kernels/layernorm.h"

namespace reel {
namespace autograd::ops {
// Where a norm's backward kernel puts input i's (C) weight or bias gradient: the input's .grad
// buffer when the tape offers it as a sink (grad_write_or_add: the kernel then writes it, or adds
// to it when it holds a gradient already), else a fresh tensor the kernel makes (returned to the
// tape). Nothing is asked for an input that needs no gradient. The sink is claimed here, before the
// kernel runs; the kernel fills it before the rule returns.
inline kernels::NormGradOut norm_grad_sink(BackwardCtx& ctx, size_t i) {
  kernels::NormGradOut out;
  if (i >= ctx.num_inputs() || !ctx.needs_input_grad(i)) return out;
  ctx.grad_write_or_add(i, [&](const Tensor& sink, bool add) { out = {sink, add}; }, [] { return Tensor(); });
  return out;
}

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
    const kernels::NormGradOut dw = norm_grad_sink(ctx, 1), db = norm_grad_sink(ctx, 2);
    kernels::LayerNormBackward r = kernels::layernorm_backward(grad[0], ctx.saved(0), ctx.saved(1),
                                                               ctx.saved(2), ctx.saved(3), dw, db);
    Tensors grads{r.dx, ctx.needs_input_grad(1) ? r.dw : Tensor()};
    if (ctx.num_inputs() == 3) grads.push_back(ctx.needs_input_grad(2) ? r.db : Tensor());
    return grads;
  }
};

// Inputs x, r, w, then b and rb where given; outputs s = x + r (x + (r + rb)) and y = layer_norm(s).
struct AddLayerNorm final : autograd::Op {
  double eps;
  bool has_b, has_rb;
  AddLayerNorm(double eps, bool has_b, bool has_rb) : eps(eps), has_b(has_b), has_rb(has_rb) {}
  const char* name() const override { return "add_layer_norm"; }
  std::string attributes() const override { return "eps=" + std::to_string(eps) + (has_rb ? " rb" : ""); }
  size_t rb_index() const { return has_b ? 4 : 3; }
  Tensors forward(const Tensors& in, ForwardCtx& ctx) const override {
    // Without a bias (no input b) the kernel adds zeros: C values, nothing next to x.
    const Tensor b = has_b ? in[3] : zeros({in[2].numel()}, in[2].dtype(), in[2].device());
    kernels::AddLayerNormForward f =
        kernels::add_layernorm_forward(in[0], in[1], in[2], b, eps, has_rb ? in[rb_index()] : Tensor());
    ctx.save({f.s, in[2], f.mean, f.rstd});  // layer_norm(s)'s saves: s is this op's output
    return {f.s, f.y};
  }
  // grad: ds_ext (what reaches s from elsewhere; undefined when nothing does: no fill), dy.
  bool accepts_absent_grad(size_t k) const override { return k == 0; }
  Tensors backward(const Tensors& grad, BackwardCtx& ctx) const override {
    const kernels::NormGradOut dw = norm_grad_sink(ctx, 2), db = has_b ? norm_grad_sink(ctx, 3) : kernels::NormGradOut{};
    const bool want_drb = has_rb && ctx.needs_input_grad(rb_index());
    const kernels::NormGradOut drb = want_drb ? norm_grad_sink(ctx, rb_index()) : kernels::NormGradOut{};
    kernels::LayerNormBackward r = kernels::layernorm_backward(grad[1], ctx.saved(0), ctx.saved(1), ctx.saved(2),
                                                               ctx.saved(3), dw, db, grad[0], want_drb ? &drb : nullptr);
    // ds reaches x and r unchanged: one tensor for both (the tape never writes into a returned
    // gradient: a leaf's .grad is a copy, a producer's slot sums out of place).
    Tensors grads{ctx.needs_input_grad(0) ? r.dx : Tensor(), ctx.needs_input_grad(1) ? r.dx : Tensor(),
                  ctx.needs_input_grad(2) ? r.dw : Tensor()};
    if (has_b) grads.push_back(ctx.needs_input_grad(3) ? r.db : Tensor());
    if (has_rb) grads.push_back(want_drb ? r.drb : Tensor());
    return grads;
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

// The residual add fused with the LayerNorm after it: {s, y} with s = x + r and
// y = layer_norm(s, weight, bias, eps); x and r (..., C) of one shape, dtype and device. One kernel
// forward, one backward (ds = the gradient reaching s + the LayerNorm's dx, given to x and r both).
// The same values as the composition; under an autocast scope, or for x and r of other dtypes or
// shapes (the add promotes and broadcasts, the norm casts its input down), it is that composition
// (x + r, then layer_norm), recorded as two ops.
// rb (C) or undefined: the residual branch's bias, s = x + (r + rb): the bits of
// add_layer_norm(x, r + rb, ...) forward, and x's, r's, weight's and bias's gradients; rb's gradient
// (ds summed over the rows) comes out of the norm's backward launch, its sums ordered as
// kernels::layernorm_backward's drb says (equal to the composition's within the sum's rounding).
// rb must be (C) on x's device, of x's dtype (except on the composition path: autocast, mixed
// inputs, where it is added to r first and the adds promote).
struct AddLayerNormResult {
  Tensor s, y;  // (..., C) each
};
inline AddLayerNormResult add_layer_norm(const Tensor& x, const Tensor& r, const Tensor& weight,
                                         const Tensor& bias = Tensor(), double eps = 1e-5,
                                         const Tensor& rb = Tensor()) {
  REEL_CHECK(x.defined() && r.defined() && weight.defined(), "add_layer_norm: x, r and weight must be defined tensors");
  const bool composed = autograd::autocast_dtype() || x.dtype() != r.dtype() || x.shape() != r.shape();
  if (rb.defined())  // (the composition's adds promote: there rb's dtype may differ)
    REEL_CHECK(x.dim() >= 1 && rb.shape() == Shape{x.size(-1)} && rb.device() == x.device() &&
                   (composed || rb.dtype() == x.dtype()),
               "add_layer_norm: the residual's bias rb ", rb.shape(), " ", rb.dtype(), " on ", rb.device(),
               " does not match x ", x.shape(), " ", x.dtype(), " on ", x.device(), " (r ", r.shape(), " ", r.dtype(),
               " on ", r.device(), "): (C) of x's dtype, on x's device, expected");
  if (composed) {
    const Tensor s = x + (rb.defined() ? r + rb : r);
    return {s, layer_norm(s, weight, bias, eps)};
  }
  autograd::Tensors in{x, r, weight};
  if (bias.defined()) in.push_back(bias);
  if (rb.defined()) in.push_back(rb);
  const autograd::Tensors out =
      autograd::record(std::make_unique<autograd::ops::AddLayerNorm>(eps, bias.defined(), rb.defined()), in);
  return {out[0], out[1]};
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
