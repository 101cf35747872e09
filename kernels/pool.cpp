// Entry points of the pool family (kernels/pool.h): max_pool2d and avg_pool2d, forward and
// backward. Checks (shapes, window rules, dtypes, devices), contiguous (N*C, H, W) planes (C for
// unbatched x),
// outputs, then the backend kernel.
#include "kernels/pool.h"

#include <string>

#include "kernels/entry_point.h"

namespace reel::kernels {

namespace {

std::string pair_str(const std::array<int64_t, 2>& a) {
  return "(" + std::to_string(a[0]) + ", " + std::to_string(a[1]) + ")";
}

// floor(a / b) for b > 0 (C++ division truncates toward zero).
int64_t floor_div(int64_t a, int64_t b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }

// Checks x_shape (N, C, H, W) or (C, H, W) and the window p; returns the output shape, x_shape
// with (H, W) replaced by (OH, OW).
Shape pool_output_shape(const char* op, const char* what, const Shape& x_shape, const Pool2d& p) {
  REEL_CHECK(x_shape.size() == 4 || x_shape.size() == 3, op, ": ", what, " ", x_shape,
             " must be 4-D (N, C, H, W) or 3-D (C, H, W)");
  for (int i = 0; i < 2; ++i) {
    REEL_CHECK(p.kernel[i] > 0, op, ": kernel_size ", pair_str(p.kernel), " must be positive");
    REEL_CHECK(p.stride[i] > 0, op, ": stride ", pair_str(p.stride), " must be positive");
    REEL_CHECK(p.dilation[i] > 0, op, ": dilation ", pair_str(p.dilation), " must be positive");
    REEL_CHECK(p.padding[i] >= 0 && p.padding[i] <= p.kernel[i] / 2, op, ": padding ", pair_str(p.padding),
               " must be in [0, kernel_size / 2] for kernel_size ", pair_str(p.kernel));
  }
  const size_t h = x_shape.size() - 2;  // the dim of H
  Shape out = x_shape;
  for (int i = 0; i < 2; ++i) {
    const int64_t in = x_shape[h + i];
    const int64_t span = p.dilation[i] * (p.kernel[i] - 1) + 1;  // the dilated window's extent
    const int64_t room = in + 2 * p.padding[i] - span;
    // PyTorch's pooling_output_shape: with ceil_mode, round up, then drop a last window that
    // would start past the input and its left padding.
    int64_t o = floor_div(room + (p.ceil_mode ? p.stride[i] - 1 : 0), p.stride[i]) + 1;
    if (p.ceil_mode && o > 0 && (o - 1) * p.stride[i] >= in + p.padding[i]) --o;
    REEL_CHECK(o >= 1, op, ": kernel_size ", pair_str(p.kernel), " with dilation ", pair_str(p.dilation),
               " is larger than ", what, " ", x_shape, " padded by ", pair_str(p.padding),
               p.ceil_mode ? " (ceil_mode)" : "");
    out[h + i] = o;
  }
  return out;
}

// The number of planes (N * C, or C unbatched) of a pooling shape checked above.
int64_t planes(const Shape& s) { return s.size() == 4 ? s[0] * s[1] : s[0]; }

// The backward's dy: on one device with x's shape known; returns (N, C, OH, OW).
Shape check_backward(const char* op, const Tensor& dy, const Shape& x_shape, const Pool2d& p) {
  check_same_floating_dtype(op, {&dy});
  const Shape out = pool_output_shape(op, "x", x_shape, p);
  REEL_CHECK(dy.shape() == out, op, ": dy ", dy.shape(), " does not match the output ", out, " of x ", x_shape,
             " pooled by kernel_size ", pair_str(p.kernel));
  return out;
}

// dx (x_shape) of a pooling backward: zeros when there is no output (an empty dy), else what
// run(dx, P, H, W) writes, P the planes N * C.
template <typename Run>
Tensor gather_backward(const Tensor& dy, const Shape& x_shape, const Shape& out, Run run) {
  Tensor dx = empty(x_shape, dy.dtype(), dy.device());
  if (dx.numel() == 0) return dx;
  if (dy.numel() == 0) {
    dx.fill_(0.0);
    return dx;
  }
  run(dx, planes(out), x_shape[x_shape.size() - 2], x_shape.back());
  return dx;
}

}  // namespace

MaxPool2dForward max_pool2d_forward(const Tensor& x, const Pool2d& p) {
  const char* op = "max_pool2d_forward";
  check_same_floating_dtype(op, {&x});
  const Shape out = pool_output_shape(op, "x", x.shape(), p);
  MaxPool2dForward r{empty(out, x.dtype(), x.device()), empty(out, DType::i64, x.device())};
  const int64_t P = planes(out), H = x.size(-2), W = x.size(-1), OH = out[out.size() - 2], OW = out.back();
  if (P > 0)
    // Per output: one compare per window element.
    REEL_DEVICE_DISPATCH(x.device(), max_pool2d_forward,
                         kernel_cost({&x}, {&r.y, &r.indices}, P * OH * OW * p.kernel[0] * p.kernel[1]),
                         contiguous_as(x, {P, H, W}), p, untracked::view(r.y, {P, OH, OW}),
                         untracked::view(r.indices, {P, OH, OW}));
  return r;
}

Tensor max_pool2d_backward(const Tensor& dy, const Tensor& indices, const Shape& x_shape, const Pool2d& p) {
  const char* op = "max_pool2d_backward";
  check_same_device(op, {&dy, &indices});
  const Shape out = check_backward(op, dy, x_shape, p);
  REEL_CHECK(indices.dtype() == DType::i64 && indices.shape() == out, op, ": indices ", indices.shape(), " ",
             dtype_name(indices.dtype()), " must be i64 shaped like dy ", dy.shape());
  return gather_backward(dy, x_shape, out, [&](Tensor& dx, int64_t P, int64_t H, int64_t W) {
    // Per dx element: one index compare and add per covering window.
    REEL_DEVICE_DISPATCH(dy.device(), max_pool2d_backward,
                         kernel_cost({&dy, &indices}, {&dx}, dx.numel() * p.kernel[0] * p.kernel[1]),
                         contiguous_as(dy, {P, out[out.size() - 2], out.back()}), contiguous_as(indices, {P, out[out.size() - 2], out.back()}), p,
                         untracked::view(dx, {P, H, W}));
  });
}

Tensor avg_pool2d_forward(const Tensor& x, const Pool2d& p) {
  const char* op = "avg_pool2d_forward";
  check_same_floating_dtype(op, {&x});
  REEL_CHECK(p.dilation == (std::array<int64_t, 2>{1, 1}), op, ": dilation ", pair_str(p.dilation),
             " is not supported (avg_pool2d has none)");
  const Shape out = pool_output_shape(op, "x", x.shape(), p);
  Tensor y = empty(out, x.dtype(), x.device());
  const int64_t P = planes(out), H = x.size(-2), W = x.size(-1), OH = out[out.size() - 2], OW = out.back();
  if (P > 0)
    // Per output: one add per window element and the division.
    REEL_DEVICE_DISPATCH(x.device(), avg_pool2d_forward,
                         kernel_cost({&x}, {&y}, P * OH * OW * (p.kernel[0] * p.kernel[1] + 1)),
                         contiguous_as(x, {P, H, W}), p, untracked::view(y, {P, OH, OW}));
  return y;
}

Tensor avg_pool2d_backward(const Tensor& dy, const Shape& x_shape, const Pool2d& p) {
  const char* op = "avg_pool2d_backward";
  REEL_CHECK(p.dilation == (std::array<int64_t, 2>{1, 1}), op, ": dilation ", pair_str(p.dilation),
             " is not supported (avg_pool2d has none)");
  const Shape out = check_backward(op, dy, x_shape, p);
  return gather_backward(dy, x_shape, out, [&](Tensor& dx, int64_t P, int64_t H, int64_t W) {
    // Per dx element: a division and an add per covering window.
    REEL_DEVICE_DISPATCH(dy.device(), avg_pool2d_backward,
                         kernel_cost({&dy}, {&dx}, 2 * dx.numel() * p.kernel[0] * p.kernel[1]),
                         contiguous_as(dy, {P, out[out.size() - 2], out.back()}), p, untracked::view(dx, {P, H, W}));
  });
}

}  // namespace reel::kernels
