// layer_norm and rms_norm over the last dim, on kernels/layernorm.h's fused kernels.
//   LayerNorm: y = (x - mean) * rstd * w + b;  RMSNorm: y = x * rstd * w.
// Saves x, w and the row statistics (mean and rstd for LayerNorm, rstd for RMSNorm: (N...) each,
// 1/C of x), not the output: backward needs x-hat = (x - mean) * rstd, which x and the statistics
// give in one pass without a second reduction, and the output would cost as much as x. The
// weight is a parameter, so saving it costs nothing. The backward kernel returns dx, dw and db
// together (dw and db summed over rows in a fixed order: bit-identical run to run).
#pragma once
#include <optional>
#include <string>

#include "autograd/functions.h"
#include "autograd/op.h"
#include "kernels/layernorm.h"

namespace reel {
namespace autograd::ops {
struct LayerNorm final : autograd::Op {
  double eps;
  explicit LayerNorm(double eps) : eps(eps) {}
  const char* name() const override { return "layer_norm"; }
  std::string attributes() const override { return "eps=" + std::to_string(eps); }
  Tensors forward(const Tensors& in, Node& node) const override {
    // Without a bias (inputs x, w) the kernel adds zeros: C values, nothing next to x.
    const Tensor b = in.size() == 3 ? in[2] : zeros({in[1].numel()}, in[1].dtype(), in[1].device());
    kernels::LayerNormForward r = kernels::layernorm_forward(in[0], in[1], b, eps);
    node.save({in[0], in[1], r.mean, r.rstd});
    return {r.y};
  }
  Tensors backward(const Tensors& grad, const Node& node) const override {
    kernels::LayerNormBackward r = kernels::layernorm_backward(grad[0], node.saved_tensor(0), node.saved_tensor(1),
                                                               node.saved_tensor(2), node.saved_tensor(3));
    if (node.inputs.size() == 3) return {r.dx, r.dw, r.db};
    return {r.dx, r.dw};
  }
};

struct RMSNorm final : autograd::Op {
  double eps;
  explicit RMSNorm(double eps) : eps(eps) {}
  const char* name() const override { return "rms_norm"; }
  std::string attributes() const override { return "eps=" + std::to_string(eps); }
  Tensors forward(const Tensors& in, Node& node) const override {
    kernels::RMSNormForward r = kernels::rmsnorm_forward(in[0], in[1], eps);
    node.save({in[0], in[1], r.rstd});
    return {r.y};
  }
  Tensors backward(const Tensors& grad, const Node& node) const override {
    kernels::RMSNormBackward r =
        kernels::rmsnorm_backward(grad[0], node.saved_tensor(0), node.saved_tensor(1), node.saved_tensor(2));
    return {r.dx, r.dw};
  }
};


}  // namespace autograd::ops

// ---- normalisation over the last dim ----
// y = (x - mean) / sqrt(var + eps) * weight + bias, var biased; weight, bias (C) for x (..., C);
// bias may be undefined (no bias). RMSNorm: y = x / sqrt(mean(x^2) + eps) * weight.
// Both save x and the row statistics (mean, rstd), not the output.
inline Tensor layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor(), double eps = 1e-5) {
  if (bias.defined()) return autograd::apply(autograd::ops::LayerNorm(eps), {x, weight, bias});
  return autograd::apply(autograd::ops::LayerNorm(eps), {x, weight});
}

inline Tensor rms_norm(const Tensor& x, const Tensor& weight, double eps = 1e-6) {
  return autograd::apply(autograd::ops::RMSNorm(eps), {x, weight});
}

}  // namespace reel
