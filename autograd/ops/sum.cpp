// sum and mean over axes. The gradient of a reduced element goes back, unchanged (sum) or divided
// by the count (mean), to every element it summed: g reshaped with size-1 reduced dims, then
// broadcast to the input's shape. Nothing is saved (only the input's shape).
#include "autograd/autocast.h"
#include "autograd/functions.h"
#include "autograd/op.h"
#include "kernels/ops.h"

namespace reel {
namespace {

using autograd::BackwardCtx;
using autograd::ForwardCtx;
using autograd::Tensors;
using kernels::ReduceOp;

struct Reduce final : autograd::Op {
  ReduceOp op;
  std::vector<int64_t> axes;  // as given; empty = all dims
  bool keepdim;
  Reduce(ReduceOp op, std::vector<int64_t> axes, bool keepdim) : op(op), axes(std::move(axes)), keepdim(keepdim) {}
  const char* name() const override { return kernels::op_name(op); }
  std::string attributes() const override {
    std::string s = "axes=" + (axes.empty() ? std::string("all") : shape_str(axes));
    return keepdim ? s + " keepdim" : s;
  }
  Tensors forward(const Tensors& in, ForwardCtx&) const override { return {kernels::reduce(op, in[0], axes, keepdim)}; }
  Tensors backward(const Tensors& grad, BackwardCtx& ctx) const override {
    const Shape& in_shape = ctx.input_shape(0);
    Shape kept = in_shape;  // the input's shape with reduced dims set to 1
    int64_t count = 1;      // elements summed into each output element
    for (size_t d = 0; d < kept.size(); ++d) {
      bool reduced = axes.empty();
      for (int64_t a : axes) reduced = reduced || normalize_dim(a, static_cast<int64_t>(kept.size()), name()) == static_cast<int64_t>(d);
      if (reduced) {
        count *= kept[d];
        kept[d] = 1;
      }
    }
    Tensor g = grad[0].reshape(kept);
    if (op == ReduceOp::Mean) g = kernels::binary(kernels::BinaryOp::Div, g, static_cast<double>(count));
    return {g.expand(in_shape).contiguous()};
  }
};

}  // namespace

Tensor sum(const Tensor& x, std::vector<int64_t> axes, bool keepdim) {
  return autograd::apply(Reduce(ReduceOp::Sum, std::move(axes), keepdim), {autograd::autocast("sum", x)});
}
Tensor mean(const Tensor& x, std::vector<int64_t> axes, bool keepdim) {
  return autograd::apply(Reduce(ReduceOp::Mean, std::move(axes), keepdim), {autograd::autocast("mean", x)});
}

}  // namespace reel
