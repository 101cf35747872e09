// Shape-only ops: view/reshape (and flatten), squeeze, unsqueeze, contiguous. Each output holds
// the input's elements in the same row-major order, so the gradient is the output gradient
// reshaped back to the input's shape. Nothing is saved (only the input's shape).
//
// Outputs are views sharing the input's storage (reshape and contiguous copy only when strides
// force them to). A replay re-makes the view from the replayed input: forward depends on nothing
// else. The Tensor methods x.view(...), x.reshape(...), ... land here when x requires grad (see
// core/tensor.cpp), and forward, run under NoGrad, calls them back to make the plain view.
#include "autograd/functions.h"
#include "autograd/op.h"

namespace reel {
namespace {

using autograd::BackwardCtx;
using autograd::ForwardCtx;
using autograd::Tensors;

// A view op may find nothing to do (squeeze of a dim that is not 1, contiguous of a contiguous
// tensor) and get its input back; the tape wants a fresh handle for the output.
Tensor fresh(const Tensor& out, const Tensor& in) { return out.same(in) ? in.detach() : out; }

// Every op of this file has this backward: the gradient takes the input's shape back.
struct ReshapeBack : autograd::Op {
  Tensors backward(const Tensors& grad, BackwardCtx& ctx) const override {
    return {grad[0].reshape(ctx.input_shape(0))};
  }
};

struct View final : ReshapeBack {
  Shape shape;     // as asked, with a -1 or not
  bool may_copy;   // reshape (a copy when no view fits) or view (an error then)
  View(Shape shape, bool may_copy) : shape(std::move(shape)), may_copy(may_copy) {}
  const char* name() const override { return may_copy ? "reshape" : "view"; }
  std::string attributes() const override { return "shape=" + shape_str(shape); }
  Tensors forward(const Tensors& in, ForwardCtx&) const override {
    return {fresh(may_copy ? in[0].reshape(shape) : in[0].view(shape), in[0])};
  }
};

struct Squeeze final : ReshapeBack {
  int64_t dim;
  explicit Squeeze(int64_t dim) : dim(dim) {}
  const char* name() const override { return "squeeze"; }
  std::string attributes() const override { return "dim=" + std::to_string(dim); }
  Tensors forward(const Tensors& in, ForwardCtx&) const override { return {fresh(in[0].squeeze(dim), in[0])}; }
};

struct Unsqueeze final : ReshapeBack {
  int64_t dim;
  explicit Unsqueeze(int64_t dim) : dim(dim) {}
  const char* name() const override { return "unsqueeze"; }
  std::string attributes() const override { return "dim=" + std::to_string(dim); }
  Tensors forward(const Tensors& in, ForwardCtx&) const override { return {fresh(in[0].unsqueeze(dim), in[0])}; }
};

struct Contiguous final : ReshapeBack {
  const char* name() const override { return "contiguous"; }
  Tensors forward(const Tensors& in, ForwardCtx&) const override { return {fresh(in[0].contiguous(), in[0])}; }
};

}  // namespace

Tensor view(const Tensor& x, Shape shape) { return autograd::apply(View(std::move(shape), false), {x}); }
Tensor reshape(const Tensor& x, Shape shape) { return autograd::apply(View(std::move(shape), true), {x}); }
Tensor flatten(const Tensor& x) { return reshape(x, {-1}); }

Tensor squeeze(const Tensor& x, int64_t dim) {
  const int64_t d = normalize_dim(dim, x.dim(), "squeeze");
  if (x.dim() == 0 || x.size(d) != 1) return x;  // nothing to squeeze: x itself, as x.squeeze(d)
  return autograd::apply(Squeeze(d), {x});
}

Tensor unsqueeze(const Tensor& x, int64_t dim) {
  return autograd::apply(Unsqueeze(normalize_dim(dim, x.dim() + 1, "unsqueeze")), {x});
}

Tensor contiguous(const Tensor& x) {
  if (x.is_contiguous()) return x;
  return autograd::apply(Contiguous{}, {x});
}

}  // namespace reel
