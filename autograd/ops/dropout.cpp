// dropout: y = x * mask, mask = 1/(1-p) where the Philox draw keeps the element, else 0; dx = g * mask.
// Saves nothing: the op records its Philox stream and regenerates the mask in backward (and in a
// checkpoint replay), since the mask is a pure function of (seed, offset, i). The stream is the
// generator's device stream (core/random.h: Generator::next_device_stream): (seed, base) read by the
// kernel from a device tensor the op holds, plus a delta by value that is the same every window, so
// a captured step replays with new masks (docs/design.md, "Replay-safe steps"). Its (seed, offset)
// are next_offset()'s: the masks are those of a by-value stream.
#include <utility>

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
  uint64_t seed, offset;  // the stream, for the tape dump
  Tensor stream;          // i64 (2) on the input's device: (seed, base)
  uint64_t delta;         // offset - base
  Dropout(double p, uint64_t seed, uint64_t offset, Tensor stream, uint64_t delta)
      : p(p), seed(seed), offset(offset), stream(std::move(stream)), delta(delta) {}
  const char* name() const override { return "dropout"; }
  std::string attributes() const override {
    return "p=" + std::to_string(p) + " seed=" + std::to_string(seed) + " offset=" + std::to_string(offset);
  }
  Tensor mask_like(const Tensor& t) const {
    return kernels::dropout_mask(t.shape(), t.dtype(), t.device(), p, stream, delta);
  }
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
  Tensor stream;
  uint64_t offset = 0;
  const uint64_t delta = g.next_device_stream(x.device(), &stream, &offset);
  return autograd::apply(Dropout(p, seed, offset, std::move(stream), delta), {x});
}

}  // namespace reel
