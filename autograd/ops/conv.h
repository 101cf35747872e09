// conv2d over (N, C, H, W), on kernels/conv.h's kernels: torch.nn.functional.conv2d's semantics
// and weight layout (C_out, C_in / groups, kH, kW), bias (C_out) optional.
//   y  = conv(x, w) + b
//   dx = the transposed convolution of dy with w   (needs w)
//   dw = dy correlated with x over the batch       (needs x)
//   db = dy summed over the batch and the plane    (needs nothing saved)
// Saves w only when x needs its gradient and x only when w does, as linear does: a frozen first
// layer keeps no copy of the images alive for backward.
#pragma once
#include <array>
#include <string>

#include "autograd/autocast.h"
#include "autograd/functions.h"
#include "autograd/op.h"
#include "autograd/ops/pool.h"  // Pair2d: an int or an (h, w) pair
#include "kernels/conv.h"

namespace reel {
namespace autograd::ops {

struct Conv2d final : autograd::Op {
  kernels::Conv2d p;
  explicit Conv2d(kernels::Conv2d p) : p(p) {}
  const char* name() const override { return "conv2d"; }
  bool kept_by_selective() const override { return true; }  // remade only at a GEMM's cost
  std::string attributes() const override {
    auto pr = [](const std::array<int64_t, 2>& a) {
      return "(" + std::to_string(a[0]) + "," + std::to_string(a[1]) + ")";
    };
    return "stride=" + pr(p.stride) + " padding=" + pr(p.padding) + " dilation=" + pr(p.dilation) +
           " groups=" + std::to_string(p.groups);
  }
  Tensors forward(const Tensors& in, ForwardCtx& ctx) const override {
    // slot 0: w (for dx), slot 1: x (for dw)
    ctx.save({ctx.needs_input_grad(0) ? in[1] : Tensor(), ctx.needs_input_grad(1) ? in[0] : Tensor()});
    return {kernels::conv2d_forward(in[0], in[1], in.size() == 3 ? in[2] : Tensor(), p)};
  }
  Tensors backward(const Tensors& grad, BackwardCtx& ctx) const override {
    Tensors grads(ctx.num_inputs());
    if (ctx.needs_input_grad(0))
      grads[0] = kernels::conv2d_backward_input(grad[0], ctx.saved(0), ctx.input_shape(0), p);
    if (ctx.needs_input_grad(1))
      grads[1] = kernels::conv2d_backward_weight(grad[0], ctx.saved(1), ctx.input_shape(1), p);
    if (grads.size() == 3 && ctx.needs_input_grad(2)) grads[2] = kernels::conv2d_backward_bias(grad[0]);
    return grads;
  }
};

}  // namespace autograd::ops

// ---- convolution ----
// torch.nn.functional.conv2d: x (N, C_in, H, W), weight (C_out, C_in / groups, kH, kW), bias (C_out)
// or undefined -> (N, C_out, OH, OW), OH = floor((H + 2p - d(kH - 1) - 1) / s) + 1 (OW likewise).
// Zero padding; groups split the channels into groups convolved separately. Bad shapes or
// parameters (channel mismatch, a kernel larger than the padded input, groups not dividing the
// channels) raise reel::Error naming them.
inline Tensor conv2d(const Tensor& x_in, const Tensor& weight_in, const Tensor& bias_in = Tensor(), Pair2d stride = 1,
                     Pair2d padding = 0, Pair2d dilation = 1, int64_t groups = 1) {
  const autograd::Tensors cast = autograd::autocast("conv2d", {x_in, weight_in, bias_in});
  const Tensor &x = cast[0], &weight = cast[1], &bias = cast[2];
  REEL_CHECK(x.defined() && weight.defined(), "conv2d: x and weight must be defined tensors");
  const kernels::Conv2d p{stride.v, padding.v, dilation.v, groups};
  if (bias.defined()) return autograd::apply(autograd::ops::Conv2d(p), {x, weight, bias});
  return autograd::apply(autograd::ops::Conv2d(p), {x, weight});
}

}  // namespace reel
