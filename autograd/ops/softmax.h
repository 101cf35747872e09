// softmax and log_softmax along the last dim (max-subtracted, so any logits stay finite).
//   softmax:     dx = y * (g - sum(g * y))
//   log_softmax: dx = g - exp(y) * sum(g)
// Both backward rules read the output y, not x, so the op saves y: the output's memory, which the
// next op (a matmul with v in attention) usually saves anyway. Another dim goes through transpose
// views around the same op.
#pragma once
#include <optional>
#include <string>

#include "autograd/autocast.h"
#include "autograd/functions.h"
#include "autograd/op.h"
#include "kernels/softmax.h"

namespace reel {
namespace autograd::ops {
struct Softmax final : autograd::Op {
  bool log;
  explicit Softmax(bool log) : log(log) {}
  const char* name() const override { return log ? "log_softmax" : "softmax"; }
  Tensors forward(const Tensors& in, ForwardCtx& ctx) const override {
    Tensor y = log ? kernels::log_softmax_forward(in[0]) : kernels::softmax_forward(in[0]);
    ctx.save({y});
    return {y};
  }
  Tensors backward(const Tensors& grad, BackwardCtx& ctx) const override {
    const Tensor& y = ctx.saved(0);
    return {log ? kernels::log_softmax_backward(grad[0], y) : kernels::softmax_backward(grad[0], y)};
  }
};

inline Tensor softmax_along(const Tensor& x_in, int64_t dim, bool log) {
  const Tensor x = autograd::autocast(log ? "log_softmax" : "softmax", x_in);
  const int64_t last = x.dim() - 1;
  const int64_t d = normalize_dim(dim, x.dim(), log ? "log_softmax" : "softmax");
  if (x.dim() == 0 || d == last) return autograd::apply(Softmax(log), {x});
  return transpose(autograd::apply(Softmax(log), {transpose(x, d, last)}), d, last);
}

}  // namespace autograd::ops

// ---- softmax and log-softmax ----
// Along `dim` (the last by default; another dim goes through a transpose); both save the output.
inline Tensor softmax(const Tensor& x, int64_t dim = -1) { return autograd::ops::softmax_along(x, dim, false); }
inline Tensor log_softmax(const Tensor& x, int64_t dim = -1) { return autograd::ops::softmax_along(x, dim, true); }

}  // namespace reel
