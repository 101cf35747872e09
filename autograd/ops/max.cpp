// max along one axis: y = the largest element of each slice. dx = g at the first maximum of each
// slice, 0 elsewhere (a scatter by the argmax). Saves the argmax indices (i64, shaped like y),
// which is less than saving x and needs no second search in backward.
#include "autograd/functions.h"
#include "autograd/op.h"
#include "autograd/tape.h"
#include "kernels/max.h"

namespace reel {
namespace {

using autograd::BackwardCtx;
using autograd::ForwardCtx;
using autograd::Tensors;

struct Max final : autograd::Op {
  int64_t axis;  // normalised
  bool keepdim;
  Max(int64_t axis, bool keepdim) : axis(axis), keepdim(keepdim) {}
  const char* name() const override { return "max"; }
  std::string attributes() const override { return "axis=" + std::to_string(axis) + (keepdim ? " keepdim" : ""); }
  Tensors forward(const Tensors& in, ForwardCtx& ctx) const override {
    kernels::MaxWithIndices r = kernels::max_with_indices(in[0], axis, keepdim);
    ctx.save({r.indices});
    return {r.values};
  }
  Tensors backward(const Tensors& grad, BackwardCtx& ctx) const override {
    return {kernels::max_backward(grad[0], ctx.saved(0), ctx.input_shape(0), axis)};
  }
};

}  // namespace

Tensor max(const Tensor& x, int64_t axis, bool keepdim) {
  return autograd::apply(Max(normalize_dim(axis, x.dim(), "max"), keepdim), {x});
}

Tensor argmax(const Tensor& x, int64_t axis, bool keepdim) {
  autograd::NoGrad no_grad;  // indices have no gradient; the kernel's views of x record nothing
  return kernels::max_with_indices(x, axis, keepdim).indices;
}

}  // namespace reel
