// The elementwise ops: one generic op per kind, over the lists of kernels/op_kinds.h.
//   unary  (reel::exp, gelu, relu, ... one per line of REEL_UNARY_OPS): y = f(x); saves x, y or
//          nothing as the list says; backward is ONE fused pass, kernels::unary_backward
//          (dx = dy * f'(saved)), GELU's and SiLU's included.
//   binary (a + b, a - b, a * b, a / b, broadcasting): each saves only what its rule reads and
//          sums its gradients down to each input's shape.
//   tensor-scalar (x + s, x - s, s - x, x * s, x / s, s / x): the scalar is an attribute.
//   where  (cond ? a : b, broadcasting): differentiable in a and b, never in cond.
//   compare (reel::eq, ne, lt, le, gt, ge): masks, not differentiable.
#include <string>

#include "autograd/autocast.h"
#include "autograd/functions.h"
#include "autograd/op.h"
#include "autograd/tape.h"
#include "kernels/ops.h"

namespace reel {
namespace {

using autograd::BackwardCtx;
using autograd::ForwardCtx;
using autograd::Tensors;
using kernels::BinaryOp;
using kernels::CompareOp;
using kernels::UnaryOp;
using kernels::UnarySaves;

struct Unary final : autograd::Op {
  UnaryOp op;
  explicit Unary(UnaryOp op) : op(op) {}
  const char* name() const override { return kernels::op_name(op); }
  Tensors forward(const Tensors& in, ForwardCtx& ctx) const override {
    Tensor y = kernels::unary(op, in[0]);
    switch (kernels::unary_saves(op)) {
      case UnarySaves::Input: ctx.save({in[0]}); break;
      case UnarySaves::Output: ctx.save({y}); break;
      case UnarySaves::Nothing: break;
    }
    return {y};
  }
  Tensors backward(const Tensors& grad, BackwardCtx& ctx) const override {
    const bool saved = kernels::unary_saves(op) != UnarySaves::Nothing;
    return {kernels::unary_backward(op, grad[0], saved ? ctx.saved(0) : Tensor())};
  }
};

// a op b for add, sub, mul, div (the ops the user functions below make).
struct Binary final : autograd::Op {
  BinaryOp op;
  explicit Binary(BinaryOp op) : op(op) {}
  const char* name() const override { return kernels::op_name(op); }
  Tensors forward(const Tensors& in, ForwardCtx& ctx) const override {
    Tensor y = kernels::binary(op, in[0], in[1]);
    if (op == BinaryOp::Mul)  // d(a*b)/da = b, d(a*b)/db = a: slot 0: b (for da), slot 1: a (for db)
      ctx.save({ctx.needs_input_grad(0) ? in[1] : Tensor(), ctx.needs_input_grad(1) ? in[0] : Tensor()});
    if (op == BinaryOp::Div)  // da = g / b, db = -g * y / b: slot 0: b, slot 1: y (only for db)
      ctx.save({ctx.any_input_needs_grad() ? in[1] : Tensor(), ctx.needs_input_grad(1) ? y : Tensor()});
    return {y};
  }
  Tensors backward(const Tensors& grad, BackwardCtx& ctx) const override {
    const Tensor& g = grad[0];
    Tensors dx(2);
    for (size_t i = 0; i < 2; ++i) {
      if (!ctx.needs_input_grad(i)) continue;
      switch (op) {
        case BinaryOp::Add: dx[i] = autograd::sum_to(g, ctx.input_shape(i)); break;
        case BinaryOp::Sub:
          dx[i] = autograd::sum_to(g, ctx.input_shape(i));
          if (i == 1) dx[i] = kernels::unary(UnaryOp::Neg, dx[i]);
          break;
        case BinaryOp::Mul:
          dx[i] = autograd::sum_to(kernels::binary(BinaryOp::Mul, g, ctx.saved(i)), ctx.input_shape(i));
          break;
        case BinaryOp::Div: {
          const Tensor& b = ctx.saved(0);
          if (i == 0) {
            dx[i] = autograd::sum_to(kernels::binary(BinaryOp::Div, g, b), ctx.input_shape(0));
          } else {
            const Tensor gy_over_b = kernels::binary(BinaryOp::Div, kernels::binary(BinaryOp::Mul, g, ctx.saved(1)), b);
            dx[i] = kernels::unary(UnaryOp::Neg, autograd::sum_to(gy_over_b, ctx.input_shape(1)));
          }
          break;
        }
        default: REEL_FAIL(kernels::op_name(op), ": no gradient rule");
      }
    }
    return dx;
  }
};

// x op s, or s op x when scalar_left (add, sub, mul, div).
struct BinaryScalar final : autograd::Op {
  BinaryOp op;
  double s;
  bool scalar_left;
  BinaryScalar(BinaryOp op, double s, bool scalar_left) : op(op), s(s), scalar_left(scalar_left) {}
  const char* name() const override {
    switch (op) {
      case BinaryOp::Add: return "add_scalar";
      case BinaryOp::Sub: return scalar_left ? "rsub_scalar" : "sub_scalar";
      case BinaryOp::Mul: return "mul_scalar";
      case BinaryOp::Div: return scalar_left ? "rdiv_scalar" : "div_scalar";
      default: return kernels::op_name(op);
    }
  }
  std::string attributes() const override { return "s=" + std::to_string(s); }
  Tensors forward(const Tensors& in, ForwardCtx& ctx) const override {
    if (op == BinaryOp::Div && scalar_left) ctx.save({in[0]});  // s / x: dx = -g * s / x^2
    return {scalar_left ? kernels::binary(op, s, in[0]) : kernels::binary(op, in[0], s)};
  }
  Tensors backward(const Tensors& grad, BackwardCtx& ctx) const override {
    const Tensor& g = grad[0];
    switch (op) {
      case BinaryOp::Add: return {g};
      case BinaryOp::Sub: return {scalar_left ? kernels::unary(UnaryOp::Neg, g) : g};
      case BinaryOp::Mul: return {kernels::binary(BinaryOp::Mul, g, s)};
      case BinaryOp::Div:
        if (!scalar_left) return {kernels::binary(BinaryOp::Div, g, s)};
        return {kernels::binary(BinaryOp::Div, kernels::binary(BinaryOp::Mul, g, -s),
                                kernels::unary(UnaryOp::Square, ctx.saved(0)))};
      default: REEL_FAIL(kernels::op_name(op), ": no gradient rule");
    }
  }
};

// cond ? a : b. Inputs {cond, a, b}, cond detached (it gets no gradient); saves cond.
struct Where final : autograd::Op {
  const char* name() const override { return "where"; }
  Tensors forward(const Tensors& in, ForwardCtx& ctx) const override {
    ctx.save({in[0]});
    return {kernels::where(in[0], in[1], in[2])};
  }
  Tensors backward(const Tensors& grad, BackwardCtx& ctx) const override {
    const Tensor& cond = ctx.saved(0);
    const Tensor zero = zeros({}, grad[0].dtype(), grad[0].device());
    Tensors g(3);
    if (ctx.needs_input_grad(1)) g[1] = autograd::sum_to(kernels::where(cond, grad[0], zero), ctx.input_shape(1));
    if (ctx.needs_input_grad(2)) g[2] = autograd::sum_to(kernels::where(cond, zero, grad[0]), ctx.input_shape(2));
    return g;
  }
};

Tensor apply_unary(UnaryOp op, const Tensor& x) { return autograd::apply(Unary(op), {x}); }

// A mask has no gradient: computed outside the tape (the kernel's views of a and b record nothing).
Tensor compare_mask(CompareOp op, const Tensor& a, const Tensor& b) {
  autograd::NoGrad no_grad;
  return kernels::compare(op, a, b);
}
Tensor compare_mask(CompareOp op, const Tensor& a, double b) {
  autograd::NoGrad no_grad;
  return kernels::compare(op, a, b);
}

}  // namespace

Tensor add(const Tensor& a, const Tensor& b) {
  return autograd::apply(Binary(BinaryOp::Add), autograd::autocast("add", {a, b}));
}
Tensor add(const Tensor& a, double b) { return autograd::apply(BinaryScalar(BinaryOp::Add, b, false), {a}); }
Tensor sub(const Tensor& a, const Tensor& b) {
  return autograd::apply(Binary(BinaryOp::Sub), autograd::autocast("sub", {a, b}));
}
Tensor sub(const Tensor& a, double b) { return autograd::apply(BinaryScalar(BinaryOp::Sub, b, false), {a}); }
Tensor sub(double a, const Tensor& b) { return autograd::apply(BinaryScalar(BinaryOp::Sub, a, true), {b}); }
Tensor mul(const Tensor& a, const Tensor& b) {
  return autograd::apply(Binary(BinaryOp::Mul), autograd::autocast("mul", {a, b}));
}
Tensor mul(const Tensor& a, double b) { return autograd::apply(BinaryScalar(BinaryOp::Mul, b, false), {a}); }
Tensor div(const Tensor& a, const Tensor& b) {
  return autograd::apply(Binary(BinaryOp::Div), autograd::autocast("div", {a, b}));
}
Tensor div(const Tensor& a, double b) { return autograd::apply(BinaryScalar(BinaryOp::Div, b, false), {a}); }
Tensor div(double a, const Tensor& b) { return autograd::apply(BinaryScalar(BinaryOp::Div, a, true), {b}); }

Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b) {
  const Tensors ab = autograd::autocast("where", {a, b});
  // Under autocast a floating mask follows a and b to their promoted dtype (0 and 1 are exact in all).
  const Tensor c = autograd::autocast_dtype() && cond.defined() && is_floating(cond.dtype()) && ab[0].defined()
                       ? cond.detach().to(ab[0].dtype())
                       : cond.detach();
  return autograd::apply(Where{}, {c, ab[0], ab[1]});
}

}  // namespace reel

// The user functions of the lists, defined qualified so that each needs its declaration in
// autograd/functions.h (the build fails on a list line without one).
#define REEL_DEFINE_UNARY(Name, name, ...) \
  reel::Tensor reel::name(const Tensor& x) { return apply_unary(kernels::UnaryOp::Name, x); }
REEL_UNARY_OPS(REEL_DEFINE_UNARY)
#undef REEL_DEFINE_UNARY

#define REEL_DEFINE_COMPARE(Name, name)                                                                  \
  reel::Tensor reel::name(const Tensor& a, const Tensor& b) { return compare_mask(kernels::CompareOp::Name, a, b); } \
  reel::Tensor reel::name(const Tensor& a, double b) { return compare_mask(kernels::CompareOp::Name, a, b); }
REEL_COMPARE_OPS(REEL_DEFINE_COMPARE)
#undef REEL_DEFINE_COMPARE
