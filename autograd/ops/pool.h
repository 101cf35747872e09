// max_pool2d and avg_pool2d over (N, C, H, W) or unbatched (C, H, W), on kernels/pool.h's kernels, and flatten(x,
// start_dim, end_dim), the reshape that follows them in a CNN.
//   MaxPool2d saves the argmax indices (N, C, OH, OW) i64, not x, on every device (cuda's max
//   pooling runs reel's kernels, not cuDNN: kernels/cuda/pool.cu says why): backward routes each
//   dy to its index. AvgPool2d saves nothing: backward needs only the window and x's recorded
//   shape (cuDNN's average backward, where cuda uses it, reads neither x nor y).
// Both backward kernels gather per dx element in a fixed order (no atomics): bit-identical run to
// run, for any thread count, so checkpointed and plain backward agree to the bit.
#pragma once
#include <array>
#include <optional>
#include <string>

#include "autograd/functions.h"
#include "autograd/op.h"
#include "kernels/pool.h"

namespace reel {
namespace autograd::ops {

inline std::string pool_attributes(const kernels::Pool2d& p, bool is_max) {
  auto pr = [](const std::array<int64_t, 2>& a) {
    return "(" + std::to_string(a[0]) + "," + std::to_string(a[1]) + ")";
  };
  return "kernel=" + pr(p.kernel) + " stride=" + pr(p.stride) + " padding=" + pr(p.padding) +
         (is_max ? " dilation=" + pr(p.dilation) : "") + (p.ceil_mode ? " ceil_mode" : "") +
         (!is_max && !p.count_include_pad ? " count_include_pad=false" : "");
}

struct MaxPool2d final : autograd::Op {
  kernels::Pool2d p;
  explicit MaxPool2d(kernels::Pool2d p) : p(p) {}
  const char* name() const override { return "max_pool2d"; }
  std::string attributes() const override { return pool_attributes(p, true); }
  Tensors forward(const Tensors& in, ForwardCtx& ctx) const override {
    kernels::MaxPool2dForward r = kernels::max_pool2d_forward(in[0], p);
    ctx.save({r.indices});
    return {r.y};
  }
  Tensors backward(const Tensors& grad, BackwardCtx& ctx) const override {
    return {kernels::max_pool2d_backward(grad[0], ctx.saved(0), ctx.input_shape(0), p)};
  }
};

struct AvgPool2d final : autograd::Op {
  kernels::Pool2d p;
  explicit AvgPool2d(kernels::Pool2d p) : p(p) {}
  const char* name() const override { return "avg_pool2d"; }
  std::string attributes() const override { return pool_attributes(p, false); }
  Tensors forward(const Tensors& in, ForwardCtx&) const override { return {kernels::avg_pool2d_forward(in[0], p)}; }
  Tensors backward(const Tensors& grad, BackwardCtx& ctx) const override {
    return {kernels::avg_pool2d_backward(grad[0], ctx.input_shape(0), p)};
  }
};

}  // namespace autograd::ops

// ---- pooling ----
// A window size, stride, padding or dilation: (along H, along W), or one int for both.
struct Pair2d {
  std::array<int64_t, 2> v;
  Pair2d(int64_t both) : v{both, both} {}  // NOLINT: implicit, as PyTorch's int-or-tuple arguments
  Pair2d(int64_t h, int64_t w) : v{h, w} {}
  Pair2d(std::array<int64_t, 2> hw) : v(hw) {}  // NOLINT
};

// torch.nn.functional.max_pool2d (no return_indices): x (N, C, H, W) or (C, H, W) ->
// (N, C, OH, OW) or (C, OH, OW), each window's maximum (padding is -inf;
// OH = floor((H + 2p - d(k-1) - 1) / s) + 1, or ceil with ceil_mode under PyTorch's rule,
// kernels/pool.h; stride defaults to the kernel). The gradient goes to each window's first maximum.
inline Tensor max_pool2d(const Tensor& x, Pair2d kernel_size, std::optional<Pair2d> stride = std::nullopt,
                         Pair2d padding = 0, Pair2d dilation = 1, bool ceil_mode = false) {
  const kernels::Pool2d p{kernel_size.v, stride ? stride->v : kernel_size.v, padding.v, dilation.v, ceil_mode};
  return autograd::apply(autograd::ops::MaxPool2d(p), {x});
}

// torch.nn.functional.avg_pool2d (no divisor_override): each window's sum, padding counted as
// zeros, over its divisor: with count_include_pad the window clipped to the padded input
// (kernel_size[0] * kernel_size[1] without ceil_mode), else its number of input elements.
// x (N, C, H, W) or (C, H, W), as max_pool2d.
inline Tensor avg_pool2d(const Tensor& x, Pair2d kernel_size, std::optional<Pair2d> stride = std::nullopt,
                         Pair2d padding = 0, bool ceil_mode = false, bool count_include_pad = true) {
  const kernels::Pool2d p{kernel_size.v, stride ? stride->v : kernel_size.v, padding.v, {1, 1}, ceil_mode,
                          count_include_pad};
  return autograd::apply(autograd::ops::AvgPool2d(p), {x});
}

// torch.flatten(x, start_dim, end_dim): dims start_dim..end_dim (negative: from the end) merged
// into one, by reshape (a view when possible). flatten(x) (every dim) is autograd/functions.h's.
inline Tensor flatten(const Tensor& x, int64_t start_dim, int64_t end_dim = -1) {
  const int64_t n = x.dim();
  const int64_t s = start_dim < 0 ? start_dim + n : start_dim, e = end_dim < 0 ? end_dim + n : end_dim;
  REEL_CHECK(n == 0 ? (s == 0 || s == -1) && (e == 0 || e == -1) : 0 <= s && s <= e && e < n, "flatten: dims ",
             start_dim, "..", end_dim, " do not name an ordered range of the dims of x ", x.shape());
  if (n == 0) return reshape(x, {1});
  Shape shape(x.shape().begin(), x.shape().begin() + s);
  int64_t merged = 1;
  for (int64_t i = s; i <= e; ++i) merged *= x.size(i);
  shape.push_back(merged);
  shape.insert(shape.end(), x.shape().begin() + e + 1, x.shape().end());
  return reshape(x, shape);
}

}  // namespace reel
