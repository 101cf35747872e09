// dropout: y = x * mask, mask = 1/(1-p) where the Philox draw keeps the element, else 0; dx = g * mask.
// Saves nothing: the op records its Philox stream (seed, offset) and regenerates the mask in
// backward (and in a checkpoint replay), since the mask is a pure function of (seed, offset, i).
#include "autograd/functions.h"
#include "autograd/op.h"
#include "kernels/dropout.h"
#include "kernels/ops.h"

namespace reel {
namespace {

using autograd::BackwardCtx;
using autograd::ForwardCtx;
using autograd::Tensors;
using kernels::BinaryOp;

struct Dropout final : autograd::Op {
  double p;
  uint64_t seed, offset;
  Dropout(double p, uint64_t seed, uint64_t offset) : p(p), seed(seed), offset(offset) {}
  const char* name() const override { return "dropout"; }
  std::string attributes() const override {
    return "p=" + std::to_string(p) + " seed=" + std::to_string(seed) + " offset=" + std::to_string(offset);
  }
  Tensor mask_like(const Tensor& t) const { return kernels::dropout_mask(t.shape(), t.dtype(), t.device(), p, seed, offset); }
  Tensors forward(const Tensors& in, ForwardCtx&) const override {
    return {kernels::binary(BinaryOp::Mul, in[0], mask_like(in[0]))};
  }
  Tensors backward(const Tensors& grad, BackwardCtx&) const override {
    return {kernels::binary(BinaryOp::Mul, grad[0], mask_like(grad[0]))};
  }
};

}  // namespace

Tensor dropout(const Tensor& x, double p, bool training, Generator* gen) {
  REEL_CHECK(p >= 0 && p <= 1, "dropout: p must be in [0, 1], got ", p, " (input ", x.shape(), ")");
  if (!training || p == 0) return x;
  Generator& g = gen ? *gen : default_generator();
  const uint64_t seed = g.seed();
  return autograd::apply(Dropout(p, seed, g.next_offset()), {x});
}

}  // namespace reel
