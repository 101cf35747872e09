// cast: x converted to another floating dtype (Tensor::to's rounding: to bf16/f16 round to nearest
// even, NaN/inf kept; up to f32 exact). A recorded op, so that autocast's casts (autograd/autocast.h)
// are nodes a checkpoint replay repeats. Backward casts the gradient back to x's dtype: the
// gradient of an f32 master weight whose bf16 copy fed a GEMM is f32. Nothing is saved.
#include "autograd/functions.h"
#include "autograd/op.h"

namespace reel {
namespace {

using autograd::BackwardCtx;
using autograd::ForwardCtx;
using autograd::Tensors;

struct Cast final : autograd::Op {
  DType from, to;  // x's dtype (the gradient's), the output's
  Cast(DType from, DType to) : from(from), to(to) {}
  const char* name() const override { return "cast"; }
  std::string attributes() const override { return std::string(dtype_name(from)) + "->" + dtype_name(to); }
  Tensors forward(const Tensors& in, ForwardCtx&) const override { return {in[0].to(to)}; }
  Tensors backward(const Tensors& grad, BackwardCtx&) const override { return {grad[0].to(from)}; }
};

}  // namespace

Tensor cast(const Tensor& x, DType dtype) {
  REEL_CHECK(x.defined(), "cast: x is an undefined tensor");
  REEL_CHECK(is_floating(x.dtype()) && is_floating(dtype), "cast: x ", x.shape(), " ", x.dtype(), " to ", dtype,
             ": only floating dtypes are cast (the gradient goes back through the cast)");
  if (x.dtype() == dtype) return x;  // no cast, nothing recorded
  return autograd::apply(Cast(x.dtype(), dtype), {x});
}

}  // namespace reel
