// cross_entropy over logits (N..., V) with integer targets (N...), on the fused kernel of
// kernels/cross_entropy.h: one sweep per row computes the log-sum-exp online and, in the same sweep,
// dlogits = (softmax - onehot(target)) * s, with s = 1/count for "mean" (0 where ignored).
//
// What is saved, and why: the dlogits of that forward sweep (llm.c's fused classifier), not the
// logits and lse. Counting the memory for N rows of V classes (GPT-2: V = 50257, N = B*T):
//   logits + lse:  N*V + N values, and backward re-reads the logits to recompute the softmax;
//   dlogits:       N*V values, and backward is one multiply by the incoming gradient (a scalar,
//                  or one value per row for "none"), none at all for backward(loss) (a seed of
//                  1, taken as a number: Op::accepts_host_seed); the logits are not kept by the tape at all,
//                  so they are freed as soon as the caller drops them.
// Equal memory, one exp per logit instead of two, and the fused path is the more precise one
// for large logits (see kernels/cpu/cross_entropy.cpp). The price: the forward writes N*V more
// when logits need a gradient, so the sweep only does it when the node keeps its saves (not in
// eval or under NoGrad, nor in a collapsed checkpoint segment, where the replay computes it).
//
// mse_loss(input, target), the family's other loss, saves its two inputs: its backward,
// 2 (input - target) g, is one pass over them, and a difference saved instead would cost the same
// memory as the two when target needs no gradient and a kernel of its own.
#pragma once
#include <optional>
#include <string>

#include "autograd/autocast.h"
#include "autograd/functions.h"
#include "autograd/op.h"
#include "kernels/cross_entropy.h"
#include "kernels/ops.h"

namespace reel {
namespace autograd::ops {
using kernels::Reduction;

struct CrossEntropy final : autograd::Op {
  Reduction reduction;
  int64_t ignore_index;
  CrossEntropy(Reduction reduction, int64_t ignore_index) : reduction(reduction), ignore_index(ignore_index) {}
  const char* name() const override { return "cross_entropy"; }
  std::string attributes() const override {
    return std::string("reduction=") + kernels::reduction_name(reduction) +
           " ignore_index=" + std::to_string(ignore_index);
  }
  Tensors forward(const Tensors& in, ForwardCtx& ctx) const override {
    const bool fused = ctx.keeps_saves() && ctx.needs_input_grad(0);
    kernels::CrossEntropyForward r = kernels::cross_entropy_forward(
        in[0], in[1], reduction, ignore_index, fused ? std::optional<double>(1.0) : std::nullopt);
    if (fused) ctx.save({r.dlogits});  // (N..., V): d(loss)/d(logits) for d(loss) = 1
    return {r.loss};
  }
  // backward(loss, s) hands s over as a number: no fill for it, and for s = 1 no launch at all.
  bool accepts_host_seed(size_t /*k*/) const override { return true; }
  Tensors backward(const Tensors& grad, BackwardCtx& ctx) const override {
    if (const std::optional<double> s = ctx.host_grad(0)) {  // the loss's seed (one element, any reduction)
      // s = 1: the save IS the gradient. Handed on as it is (dlogits * 1 would be the same bits):
      // this node's own tensor, which the tape drops right after this rule, and the tape never
      // writes into a gradient it receives (sums are out of place, a leaf's .grad is a copy).
      if (*s == 1.0) return {ctx.saved(0), Tensor()};
      // Otherwise one launch: s rounded to the dtype and multiplied as the filled seed would be.
      return {kernels::binary(kernels::BinaryOp::Mul, ctx.saved(0), *s), Tensor()};
    }
    // "none": the gradient of each row's loss scales that row; otherwise one scalar scales all.
    const Tensor g = reduction == Reduction::None ? grad[0].unsqueeze(-1) : grad[0];
    return {kernels::binary(kernels::BinaryOp::Mul, ctx.saved(0), g), Tensor()};
  }
};

struct MseLoss final : autograd::Op {
  Reduction reduction;
  explicit MseLoss(Reduction reduction) : reduction(reduction) {}
  const char* name() const override { return "mse_loss"; }
  std::string attributes() const override { return std::string("reduction=") + kernels::reduction_name(reduction); }
  Tensors forward(const Tensors& in, ForwardCtx& ctx) const override {
    ctx.save({in[0], in[1]});  // input, target (the same shape)
    return {kernels::mse_loss_forward(in[0], in[1], reduction)};
  }
  Tensors backward(const Tensors& grad, BackwardCtx& ctx) const override {
    const Tensor dinput = kernels::mse_loss_backward(grad[0], ctx.saved(0), ctx.saved(1), reduction);
    return {ctx.needs_input_grad(0) ? dinput : Tensor(),
            ctx.needs_input_grad(1) ? kernels::unary(kernels::UnaryOp::Neg, dinput) : Tensor()};
  }
};

}  // namespace autograd::ops

// ---- cross-entropy ----
// logits (N..., V) with classes along the LAST dim, targets (N...) i32 or i64 in [0, V) or equal to
// ignore_index. reduction "mean" (over the targets not ignored), "sum" or "none" (per-row losses,
// 0 where ignored). With every target ignored, "mean" gives loss 0 and zero gradients, not NaN
// (see kernels/cross_entropy.h: an all-padding micro-batch adds nothing to its accumulation window).
// Fused: one pass over the logits computes the loss and, when logits need a gradient, dlogits too.
inline Tensor cross_entropy(const Tensor& logits, const Tensor& targets, int64_t ignore_index = -100,
                            const std::string& reduction = "mean") {
  return autograd::apply(autograd::ops::CrossEntropy(kernels::parse_reduction(reduction), ignore_index),
                         autograd::autocast("cross_entropy", {logits, targets}));
}

// ---- mean squared error ----
// input and target of the same shape and floating dtype, on one device: the mean over every
// element of (input - target)^2 ("mean", a scalar), their sum ("sum") or the squares themselves
// ("none", input's shape). Both get gradients (target's is the negation of input's). An empty
// input gives 0 for "mean" (not NaN). Autocast F32: 16-bit inputs run in f32, the loss is f32.
inline Tensor mse_loss(const Tensor& input, const Tensor& target, const std::string& reduction = "mean") {
  return autograd::apply(autograd::ops::MseLoss(kernels::parse_reduction(reduction, "mse_loss")),
                         autograd::autocast("mse_loss", {input, target}));
}

}  // namespace reel
