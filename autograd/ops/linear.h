// linear: y = x W^T + b, x (..., in), W (out, in), b (out). All rows of x go through one GEMM:
// x is viewed as X (N, in), N the product of its leading dims (a copy only if x's strides forbid
// the view), Y = X W^T + b (N, out) in one GEMM: the bias is added inside it (kernels::matmul's
// bias), not by a second pass over Y.
//   dX = G W          (N, out) @ (out, in)
//   dW = G^T X        one GEMM with a transpose flag, summed over all N rows
//   db = 1^T G        a column reduction (kernels::sum over dim 0); for bf16 / f16, whose
//                     reductions are not ported yet, the GEMM ones (1, N) @ G (f32 sums)
// dW and db go straight into W's and b's .grad when those exist (their gradient sinks): the GEMM
// and the column sum add into them (or, after zero_grad, write them), no temporary, no add pass.
// Saves x only when W needs its gradient and W only when x does: the saved x is the input itself
// (often a view of a tensor another node saves anyway, e.g. attention's output), not its (N, in)
// copy, which backward re-makes when needed. Backward releases W once dX is made
// (BackwardCtx::release_saved), before dW is written.
#pragma once
#include <optional>
#include <string>

#include "autograd/autocast.h"
#include "autograd/functions.h"
#include "autograd/op.h"
#include "kernels/ops.h"

namespace reel {
namespace autograd::ops {
inline Shape rows_with(const Shape& x, int64_t last) {
  Shape s(x.begin(), x.end() - 1);
  s.push_back(last);
  return s;
}

struct Linear final : autograd::Op {
  const char* name() const override { return "linear"; }
  bool kept_by_selective() const override { return true; }  // remade only at a GEMM's cost
  Tensors forward(const Tensors& in, ForwardCtx& ctx) const override {
    const Tensor& x = in[0];
    const Tensor& w = in[1];
    const int64_t n_in = w.size(1), n_out = w.size(0);
    // slot 0: W (for dx), slot 1: x (for dW)
    ctx.save({ctx.needs_input_grad(0) ? w : Tensor(), ctx.needs_input_grad(1) ? x : Tensor()});
    const Tensor bias = in.size() == 3 ? in[2] : Tensor();                        // (out) or none
    const Tensor y = kernels::matmul(x.reshape({-1, n_in}), w, false, true, bias);  // (N, out)
    return {y.view(rows_with(x.shape(), n_out))};
  }
  Tensors backward(const Tensors& grad, BackwardCtx& ctx) const override {
    const Shape& x_shape = ctx.input_shape(0);
    const int64_t n_in = x_shape.back(), n_out = ctx.input_shape(1)[0];
    const Tensor g = grad[0].reshape({-1, n_out});  // G (N, out)
    Tensors grads(ctx.num_inputs());
    if (ctx.needs_input_grad(0)) grads[0] = kernels::matmul(g, ctx.saved(0)).view(x_shape);
    ctx.release_saved(0);  // W is read no more: a sharded W (distributed/fsdp.h) is freed before dW exists
    if (ctx.needs_input_grad(1)) {  // dW (out, in) = G^T X
      const Tensor x = ctx.saved(1).reshape({-1, n_in});
      grads[1] = ctx.grad_write_or_add(
          1, [&](const Tensor& sink, bool add) { kernels::matmul_into_(sink, g, x, true, false, add); },
          [&] { return kernels::matmul(g, x, true, false); });
    }
    if (grads.size() == 3 && ctx.needs_input_grad(2) && is_16bit_floating(g.dtype())) {
      // db (1, out) = ones (1, N) @ G: the reductions have no 16-bit kernels yet, the GEMM sums in
      // f32 and rounds once.
      const Tensor ones = full({1, g.size(0)}, 1.0, g.dtype(), g.device());
      grads[2] = ctx.grad_write_or_add(
          2, [&](const Tensor& sink, bool add) { kernels::matmul_into_(sink.view({1, n_out}), ones, g, false, false, add); },
          [&] { return kernels::matmul(ones, g).view({n_out}); });
    } else if (grads.size() == 3 && ctx.needs_input_grad(2)) {  // db (out) = the column sums of G
      grads[2] = ctx.grad_write_or_add(
          2, [&](const Tensor& sink, bool add) { kernels::sum_into_(sink, g, {0}, add); },
          [&] { return kernels::sum(g, {0}); });
    }
    return grads;
  }
};

}  // namespace autograd::ops

// ---- linear ----
// x (..., in) @ W^T + b: W (out, in) as torch.nn.Linear stores it, b (out) or undefined (no bias).
// One GEMM over all rows of x; the bias gradient is a column sum of the output gradient.
inline Tensor linear(const Tensor& x_in, const Tensor& weight_in, const Tensor& bias_in = Tensor()) {
  const autograd::Tensors cast = autograd::autocast("linear", {x_in, weight_in, bias_in});
  const Tensor &x = cast[0], &weight = cast[1], &bias = cast[2];
  REEL_CHECK(x.defined() && weight.defined(), "linear: x and weight must be defined tensors");
  REEL_CHECK(weight.dim() == 2 && x.dim() >= 1 && x.size(-1) == weight.size(1), "linear: x ", x.shape(),
             " and weight ", weight.shape(), " do not match: x (..., in) and weight (out, in) expected");
  if (bias.defined())
    REEL_CHECK(bias.shape() == Shape{weight.size(0)}, "linear: bias ", bias.shape(), " does not match weight ",
               weight.shape(), ": (", weight.size(0), ") expected");
  for (const Tensor* t : {&weight, &bias})
    REEL_CHECK(!t->defined() || (t->dtype() == x.dtype() && t->device() == x.device()), "linear: x ", x.shape(), " ",
               x.dtype(), " on ", x.device(), " and ", t == &weight ? "weight " : "bias ", t->shape(), " ",
               t->dtype(), " on ", t->device(), ": one dtype and device expected");
  if (bias.defined()) return autograd::apply(autograd::ops::Linear{}, {x, weight, bias});
  return autograd::apply(autograd::ops::Linear{}, {x, weight});
}

}  // namespace reel
