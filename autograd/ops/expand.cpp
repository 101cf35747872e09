// expand: a view broadcasting size-1 dims (stride 0) and adding leading dims. Every output element
// that reads one input element sends its gradient back to it: sum_to the input's shape. Nothing
// is saved. (A saved expanded view costs the storage it views, not its broadcast size: the tape
// counts storages.)
#include "autograd/functions.h"
#include "autograd/op.h"

namespace reel {
namespace {

using autograd::BackwardCtx;
using autograd::ForwardCtx;
using autograd::Tensors;

struct Expand final : autograd::Op {
  Shape shape;  // as asked (-1 keeps a dim)
  explicit Expand(Shape shape) : shape(std::move(shape)) {}
  const char* name() const override { return "expand"; }
  std::string attributes() const override { return "shape=" + shape_str(shape); }
  Tensors forward(const Tensors& in, ForwardCtx&) const override { return {in[0].expand(shape)}; }
  Tensors backward(const Tensors& grad, BackwardCtx& ctx) const override {
    return {autograd::sum_to(grad[0], ctx.input_shape(0))};
  }
};

}  // namespace

Tensor expand(const Tensor& x, Shape shape) { return autograd::apply(Expand(std::move(shape)), {x}); }

}  // namespace reel
