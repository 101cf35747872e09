// linear: y = x W^T + b, x (..., in), W (out, in), b (out). All rows of x go through one GEMM:
// x is viewed as X (N, in), N the product of its leading dims (a copy only if x's strides forbid
// the view), Y = X W^T + b (N, out) in one GEMM: the bias is added inside it (kernels::matmul's
// bias), not by a second pass over Y.
//   dX = G W          (N, out) @ (out, in)
//   dW = G^T X        one GEMM with a transpose flag, summed over all N rows
//   db = 1^T G        the column sums of G, in the same kernel as dW (kernels::linear_grad_into_:
//                     cuBLASLt's BGRADB epilogue on cuda) when both are wanted; alone (W frozen)
//                     a column reduction (kernels::sum over dim 0), or for bf16 / f16, whose
//                     reductions are not ported yet, the GEMM ones (1, N) @ G (f32 sums)
// dW and db go straight into W's and b's .grad when those exist (their gradient sinks): the GEMM
// and the column sum add into them (or, after zero_grad, write them), no temporary, no add pass.
// With no bias gradient wanted (no bias, or b frozen) and W's .grad existing, dX and dW are ONE
// grouped GEMM call (kernels::matmul_group_into_: cublasGemmGroupedBatchedEx on cuda, one launch),
// bit for bit the two GEMMs it replaces.
// Saves x only when W needs its gradient and W only when x does: the saved x is the input itself
// (often a view of a tensor another node saves anyway, e.g. attention's output), not its (N, in)
// copy, which backward re-makes when needed. Backward releases W once dX is made
// (BackwardCtx::release_saved), before dW is written, unless dW goes into W's existing .grad with
// dX in the grouped call (no allocation while W lives; BackwardCtx::has_grad_sink asks without
// waking FSDP's observer, whose flat gradient buffer then waits until W is released as before).
//
// linear_gelu_linear: the MLP z = gelu(x W1^T + b1) W2^T + b2 as one tape op, so that the GELU
// and its gradient ride on the GEMMs' epilogues (kernels/matmul.h) instead of passes of their own;
// b2 may be undefined (no bias on the down-projection):
//   forward   act, pre = kernels::linear_gelu(X, W1, b1)   act = gelu(pre), pre = X W1^T + b1
//             Z = act W2^T + b2                            (N, out)
//   backward  dpre, db1 = (G W2) * gelu'(pre), 1^T dpre    one kernel (kernels::linear_dgelu)
//             dW2, db2 = G^T act, 1^T G                    one kernel (as linear's), with b2
//             [dW2 = G^T act,] dX = dpre W1, dW1 = dpre^T X  one grouped GEMM call
//                                                          (kernels::matmul_group_into_); dW2
//                                                          joins it without b2; dW1 joins while
//                                                          W1 lives only into W1's existing .grad
// So a step's MLP backward is 3 launches with b2, 2 without.
// Saves x (for dW1), W1 (for dX), pre (for gelu'), W2 (for dpre) and act (for dW2), each only when
// a gradient reads it: what linear, gelu and linear save between them. Kept by selective
// checkpointing as linear is (its outputs cost GEMMs to remake): a kept node keeps its saves that
// are not its inputs (pre and act), where the unfused chain kept pre and Z and recomputed act.
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

// Input b's gradient alone (its W frozen): the column sums of G (N, out), into b's .grad sink or fresh.
inline Tensor linear_bias_grad(BackwardCtx& ctx, size_t b, const Tensor& g) {
  const int64_t n_out = g.size(1);
  if (is_16bit_floating(g.dtype())) {
    // db (1, out) = ones (1, N) @ G: the reductions have no 16-bit kernels yet, the GEMM sums in
    // f32 and rounds once.
    const Tensor ones = full({1, g.size(0)}, 1.0, g.dtype(), g.device());
    return ctx.grad_write_or_add(
        b, [&](const Tensor& sink, bool add) { kernels::matmul_into_(sink.view({1, n_out}), ones, g, false, false, add); },
        [&] { return kernels::matmul(ones, g).view({n_out}); });
  }
  return ctx.grad_write_or_add(
      b, [&](const Tensor& sink, bool add) { kernels::sum_into_(sink, g, {0}, add); },
      [&] { return kernels::sum(g, {0}); });
}

// Inputs w's and b's gradients (those a linear of G (N, out) over X (N, in) wants): dW = G^T X and
// db = 1^T G, in one kernel when both are wanted, each into its .grad sink or a fresh tensor.
inline void linear_param_grads(BackwardCtx& ctx, size_t w, size_t b, const Tensor& g, const Tensor& x,
                               Tensors& grads) {
  const bool want_w = ctx.needs_input_grad(w), want_b = b < grads.size() && ctx.needs_input_grad(b);
  const int64_t n_out = g.size(1), n_in = x.size(1);
  if (want_w && want_b && n_in > 0 && n_out > 0) {
    Tensor dw, db;
    bool add_w = false, add_b = false;
    grads[w] = ctx.grad_write_or_add(
        w, [&](const Tensor& sink, bool add) { dw = sink, add_w = add; },
        [&] { return dw = empty({n_out, n_in}, g.dtype(), g.device()); });
    grads[b] = ctx.grad_write_or_add(
        b, [&](const Tensor& sink, bool add) { db = sink, add_b = add; },
        [&] { return db = empty({n_out}, g.dtype(), g.device()); });
    kernels::linear_grad_into_(dw, db, g, x, add_w, add_b);  // (out, in) and (out)
    return;
  }
  if (want_w)  // dW (out, in) = G^T X
    grads[w] = ctx.grad_write_or_add(
        w, [&](const Tensor& sink, bool add) { kernels::matmul_into_(sink, g, x, true, false, add); },
        [&] { return kernels::matmul(g, x, true, false); });
  if (want_b) grads[b] = linear_bias_grad(ctx, b, g);
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
    const bool want_b = grads.size() == 3 && ctx.needs_input_grad(2);
    // dX and dW as one grouped GEMM (one launch) where dW is a plain GEMM (no bias gradient riding
    // on its epilogue) into W's existing .grad: W is still alive, and a fresh dW would be a second
    // weight-sized tensor beside it (a gathered FSDP weight, whose .grad does not exist yet, keeps
    // the order below: W released, then dW allocated).
    if (ctx.needs_input_grad(0) && ctx.needs_input_grad(1) && !want_b && ctx.has_grad_sink(1)) {
      Tensor dw;
      bool add = false;
      grads[1] = ctx.grad_write_or_add(
          1, [&](const Tensor& sink, bool a) { dw = sink, add = a; }, [] { return Tensor(); });
      if (dw.defined()) {  // (else an observer dropped the buffer: the separate GEMMs below)
        const Tensor dx = empty({g.size(0), n_in}, g.dtype(), g.device());  // (N, in)
        kernels::matmul_group_into_({{dx, g, ctx.saved(0)}, {dw, g, ctx.saved(1).reshape({-1, n_in}), true, false, add}});
        grads[0] = dx.view(x_shape);
        ctx.release_saved(0);
        return grads;
      }
    }
    if (ctx.needs_input_grad(0)) grads[0] = kernels::matmul(g, ctx.saved(0)).view(x_shape);
    ctx.release_saved(0);  // W is read no more: a sharded W (distributed/fsdp.h) is freed before dW exists
    if (ctx.needs_input_grad(1)) {
      linear_param_grads(ctx, 1, 2, g, ctx.saved(1).reshape({-1, n_in}), grads);
    } else if (grads.size() == 3 && ctx.needs_input_grad(2)) {
      grads[2] = linear_bias_grad(ctx, 2, g);
    }
    return grads;
  }
};

struct LinearGeluLinear final : autograd::Op {
  const char* name() const override { return "linear_gelu_linear"; }
  bool kept_by_selective() const override { return true; }  // remade only at two GEMMs' cost
  // in: x (..., in), W1 (hidden, in), b1 (hidden), W2 (out, hidden), b2 (out) or no fifth input
  Tensors forward(const Tensors& in, ForwardCtx& ctx) const override {
    const Tensor& x = in[0];
    const int64_t n_in = in[1].size(1), n_out = in[3].size(0);
    const bool up = ctx.needs_input_grad(0) || ctx.needs_input_grad(1) || ctx.needs_input_grad(2);
    const kernels::LinearGelu h = kernels::linear_gelu(x.reshape({-1, n_in}), in[1], in[2]);  // (N, hidden) each
    const Tensor b2 = in.size() == 5 ? in[4] : Tensor();
    const Tensor z = kernels::matmul(h.y, in[3], false, true, b2);                          // (N, out)
    // slots: 0 W1 (dX), 1 x (dW1), 2 pre (gelu'), 3 W2 (dpre), 4 act (dW2)
    ctx.save({ctx.needs_input_grad(0) ? in[1] : Tensor(), ctx.needs_input_grad(1) ? x : Tensor(),
              up ? h.pre : Tensor(), up ? in[3] : Tensor(), ctx.needs_input_grad(3) ? h.y : Tensor()});
    return {z.view(rows_with(x.shape(), n_out))};
  }
  Tensors backward(const Tensors& grad, BackwardCtx& ctx) const override {
    const Shape& x_shape = ctx.input_shape(0);
    const int64_t n_in = x_shape.back(), hidden = ctx.input_shape(1)[0], n_out = ctx.input_shape(3)[0];
    const Tensor g = grad[0].reshape({-1, n_out});  // G (N, out)
    Tensors grads(ctx.num_inputs());
    const bool has_b2 = grads.size() == 5;
    const bool want_x = ctx.needs_input_grad(0), want_w1 = ctx.needs_input_grad(1), want_w2 = ctx.needs_input_grad(3),
               want_b2 = has_b2 && ctx.needs_input_grad(4);
    const bool up = want_x || want_w1 || ctx.needs_input_grad(2);
    Tensor dpre;  // (N, hidden)
    if (up) {
      // dpre = (G W2) * gelu'(pre) and db1 = its column sums, in one GEMM; db1 into b1's .grad
      // sink, a fresh tensor, or (b1 frozen) a scratch one.
      Tensor db1;
      bool add = false;
      if (ctx.needs_input_grad(2))
        grads[2] = ctx.grad_write_or_add(
            2, [&](const Tensor& sink, bool a) { db1 = sink, add = a; },
            [&] { return db1 = empty({hidden}, g.dtype(), g.device()); });
      else
        db1 = empty({hidden}, g.dtype(), g.device());
      dpre = kernels::linear_dgelu(g, ctx.saved(3), ctx.saved(2), db1, add);
      ctx.release_saved(3);  // W2 (a sharded W2 is freed before more is made)
      ctx.release_saved(2);
    }
    // The plain GEMMs left go as one grouped call (kernels::matmul_group_into_, one launch):
    // dW2 = G^T act when no bias gradient rides on it (no b2), dX = dpre W1, and dW1 = dpre^T X.
    std::vector<kernels::GemmInto> group;
    if (want_w2 && !has_b2) {  // dW2 (out, hidden): W2 is released already, as in the order below
      Tensor dw2;
      bool add = false;
      grads[3] = ctx.grad_write_or_add(
          3, [&](const Tensor& sink, bool a) { dw2 = sink, add = a; },
          [&] { return dw2 = empty({n_out, hidden}, g.dtype(), g.device()); });
      group.push_back({dw2, g, ctx.saved(4), true, false, add});
    } else if (want_w2) {  // dW2 and db2 in one kernel (BGRADB)
      linear_param_grads(ctx, 3, 4, g, ctx.saved(4), grads);
    } else if (want_b2) {
      grads[4] = linear_bias_grad(ctx, 4, g);
    }
    Tensor dx, dw1;  // (N, in), (hidden, in)
    if (want_x) {
      dx = empty({g.size(0), n_in}, g.dtype(), g.device());
      group.push_back({dx, dpre, ctx.saved(0)});
    }
    // dW1 joins while W1 is alive only into its existing .grad (as Linear's dW); with no dX
    // wanted W1 was never saved, and a fresh dW1 is what the order below allocates anyway.
    if (want_w1 && (!want_x || ctx.has_grad_sink(1))) {
      bool add = false;
      grads[1] = ctx.grad_write_or_add(
          1, [&](const Tensor& sink, bool a) { dw1 = sink, add = a; },
          [&] { return want_x ? Tensor() : (dw1 = empty({hidden, n_in}, g.dtype(), g.device())); });
      if (dw1.defined()) group.push_back({dw1, dpre, ctx.saved(1).reshape({-1, n_in}), true, false, add});
    }
    if (!group.empty()) kernels::matmul_group_into_(group);
    if (want_x) grads[0] = dx.view(x_shape);
    ctx.release_saved(0);
    if (want_w1 && !dw1.defined()) {  // dW1 (hidden, in) = dpre^T X, W1 released
      const Tensor x = ctx.saved(1).reshape({-1, n_in});
      grads[1] = ctx.grad_write_or_add(
          1, [&](const Tensor& sink, bool add) { kernels::matmul_into_(sink, dpre, x, true, false, add); },
          [&] { return kernels::matmul(dpre, x, true, false); });
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

// ---- linear_gelu_linear ----
// The transformer MLP, linear(gelu(linear(x, w1, b1)), w2, b2), as one op whose GELU and GELU
// gradient are GEMM epilogues (the op above): x (..., in), w1 (hidden, in), b1 (hidden),
// w2 (out, hidden), b2 (out) or undefined (no bias on the down-projection: its weight gradient is
// then a plain GEMM, grouped with dX and dW1 into one launch) -> (..., out). b1 is required (a
// bias-less up-projection composes linear and gelu). Autocast treats it as linear.
inline Tensor linear_gelu_linear(const Tensor& x_in, const Tensor& w1_in, const Tensor& b1_in, const Tensor& w2_in,
                                 const Tensor& b2_in = Tensor()) {
  const autograd::Tensors cast = autograd::autocast("linear", {x_in, w1_in, b1_in, w2_in, b2_in});
  const Tensor &x = cast[0], &w1 = cast[1], &b1 = cast[2], &w2 = cast[3], &b2 = cast[4];
  for (const Tensor* t : {&x, &w1, &b1, &w2})
    REEL_CHECK(t->defined(), "linear_gelu_linear: x, w1, b1 and w2 must be defined tensors (b2 may be undefined)");
  REEL_CHECK(x.dim() >= 1 && w1.dim() == 2 && w2.dim() == 2 && x.size(-1) == w1.size(1) && w1.size(1) > 0 &&
                 b1.shape() == Shape{w1.size(0)} && w2.size(1) == w1.size(0) && w2.size(0) > 0 &&
                 (!b2.defined() || b2.shape() == Shape{w2.size(0)}),
             "linear_gelu_linear: x ", x.shape(), ", w1 ", w1.shape(), ", b1 ", b1.shape(), ", w2 ", w2.shape(),
             ", b2 ", b2.defined() ? shape_str(b2.shape()) : std::string("undefined"),
             " do not match: x (..., in), w1 (hidden, in), b1 (hidden), w2 (out, hidden), b2 (out) or undefined",
             " with in, out > 0 expected");
  for (const Tensor* t : {&w1, &b1, &w2, &b2})
    REEL_CHECK(!t->defined() || (t->dtype() == x.dtype() && t->device() == x.device()), "linear_gelu_linear: x ",
               x.shape(), " ", x.dtype(), " on ", x.device(), " and ", t->shape(), " ", t->dtype(), " on ",
               t->device(), ": one dtype and device expected");
  if (!b2.defined()) return autograd::apply(autograd::ops::LinearGeluLinear{}, {x, w1, b1, w2});
  return autograd::apply(autograd::ops::LinearGeluLinear{}, {x, w1, b1, w2, b2});
}

}  // namespace reel
