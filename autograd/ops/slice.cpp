// slice (and narrow) and select: views of part of one dim. The gradient lands in a zero tensor of
// the input's shape, copied into the same part of it (elements outside the slice get 0). Nothing
// is saved (only the input's shape).
#include "autograd/functions.h"
#include "autograd/op.h"

namespace reel {
namespace {

using autograd::BackwardCtx;
using autograd::ForwardCtx;
using autograd::Tensors;

struct Slice final : autograd::Op {
  int64_t dim, start, end, step;  // as given (python rules apply in Tensor::slice)
  Slice(int64_t dim, int64_t start, int64_t end, int64_t step) : dim(dim), start(start), end(end), step(step) {}
  const char* name() const override { return "slice"; }
  std::string attributes() const override {
    return "dim=" + std::to_string(dim) + " " + std::to_string(start) + ":" + std::to_string(end) + ":" +
           std::to_string(step);
  }
  Tensors forward(const Tensors& in, ForwardCtx&) const override { return {in[0].slice(dim, start, end, step)}; }
  Tensors backward(const Tensors& grad, BackwardCtx& ctx) const override {
    Tensor dx = zeros(ctx.input_shape(0), grad[0].dtype(), grad[0].device());
    dx.slice(dim, start, end, step).copy_(grad[0]);
    return {dx};
  }
};

struct Select final : autograd::Op {
  int64_t dim, index;
  Select(int64_t dim, int64_t index) : dim(dim), index(index) {}
  const char* name() const override { return "select"; }
  std::string attributes() const override { return "dim=" + std::to_string(dim) + " index=" + std::to_string(index); }
  Tensors forward(const Tensors& in, ForwardCtx&) const override { return {in[0].select(dim, index)}; }
  Tensors backward(const Tensors& grad, BackwardCtx& ctx) const override {
    Tensor dx = zeros(ctx.input_shape(0), grad[0].dtype(), grad[0].device());
    dx.select(dim, index).copy_(grad[0]);
    return {dx};
  }
};

}  // namespace

Tensor slice(const Tensor& x, int64_t dim, int64_t start, int64_t end, int64_t step) {
  return autograd::apply(Slice(dim, start, end, step), {x});
}

Tensor narrow(const Tensor& x, int64_t dim, int64_t start, int64_t length) {
  const int64_t d = normalize_dim(dim, x.dim(), "narrow");
  REEL_CHECK(x.dim() > 0 && start >= 0 && length >= 0 && start + length <= x.size(d), "narrow: [", start, ", ",
             start + length, ") is out of range for dim ", d, " of shape ", x.shape());
  return slice(x, d, start, start + length);
}

Tensor select(const Tensor& x, int64_t dim, int64_t index) { return autograd::apply(Select(dim, index), {x}); }

}  // namespace reel
