// Entry points of the conv family (kernels/conv.h): conv2d forward and its input, weight and bias
// backward. Checks (shapes, the convolution's rules, dtypes, devices), contiguous inputs, outputs,
// then the backend kernel.
#include "kernels/conv.h"

#include <string>

#include "kernels/entry_point.h"

namespace reel::kernels {

namespace {

std::string pair_str(const std::array<int64_t, 2>& a) {
  return "(" + std::to_string(a[0]) + ", " + std::to_string(a[1]) + ")";
}

// FLOPs of the convolution's product, the same for forward and each of its two backward GEMMs:
// a multiply and an add per output element, input channel of its group and kernel tap.
int64_t conv_flops(const Shape& y_shape, const Shape& w_shape) {
  return 2 * y_shape[0] * y_shape[1] * y_shape[2] * y_shape[3] * w_shape[1] * w_shape[2] * w_shape[3];
}

// dy's shape against the output x and w give: (N, C_out, OH, OW).
Shape check_dy(const char* op, const Tensor& dy, const Shape& x_shape, const Shape& w_shape, const Conv2d& p) {
  const Shape out = conv2d_output_shape(op, x_shape, w_shape, p);
  REEL_CHECK(dy.shape() == out, op, ": dy ", dy.shape(), " does not match the output ", out, " of x ", x_shape,
             " convolved with weight ", w_shape);
  return out;
}

}  // namespace

Shape conv2d_output_shape(const char* op, const Shape& x_shape, const Shape& w_shape, const Conv2d& p) {
  REEL_CHECK(x_shape.size() == 4, op, ": x ", x_shape, " must be 4-D (N, C_in, H, W)");
  REEL_CHECK(w_shape.size() == 4, op, ": weight ", w_shape, " must be 4-D (C_out, C_in / groups, kH, kW)");
  for (int i = 0; i < 2; ++i) {
    REEL_CHECK(p.stride[i] > 0, op, ": stride ", pair_str(p.stride), " must be positive");
    REEL_CHECK(p.dilation[i] > 0, op, ": dilation ", pair_str(p.dilation), " must be positive");
    REEL_CHECK(p.padding[i] >= 0, op, ": padding ", pair_str(p.padding), " must not be negative");
    REEL_CHECK(w_shape[2 + i] > 0, op, ": weight ", w_shape, " has an empty kernel");
  }
  const int64_t C = x_shape[1], C_out = w_shape[0], G = p.groups;
  REEL_CHECK(G > 0, op, ": groups ", G, " must be positive");
  REEL_CHECK(C > 0, op, ": x ", x_shape, " has no input channels");
  REEL_CHECK(C % G == 0 && C_out % G == 0, op, ": groups ", G, " must divide the input channels of x ", x_shape,
             " and the output channels of weight ", w_shape);
  REEL_CHECK(C_out > 0 && w_shape[1] * G == C, op, ": weight ", w_shape, " does not match the ", C,
             " input channels of x ", x_shape, " in ", G, " groups: (C_out > 0, ", C / G, ", kH, kW) expected");
  Shape out{x_shape[0], C_out, 0, 0};
  for (int i = 0; i < 2; ++i) {
    const int64_t span = p.dilation[i] * (w_shape[2 + i] - 1) + 1;  // the dilated kernel's extent
    const int64_t room = x_shape[2 + i] + 2 * p.padding[i] - span;
    REEL_CHECK(room >= 0, op, ": kernel (", w_shape[2], ", ", w_shape[3], ") with dilation ", pair_str(p.dilation),
               " is larger than x ", x_shape, " padded by ", pair_str(p.padding));
    out[2 + i] = room / p.stride[i] + 1;
  }
  return out;
}

Tensor conv2d_forward(const Tensor& x, const Tensor& w, const Tensor& b, const Conv2d& p) {
  const char* op = "conv2d_forward";
  check_same_device(op, {&x, &w});
  check_same_floating_dtype(op, {&x, &w});
  const Shape out = conv2d_output_shape(op, x.shape(), w.shape(), p);
  if (b.defined()) {
    check_same_device(op, {&x, &b});
    check_same_floating_dtype(op, {&x, &b});
    REEL_CHECK(b.shape() == Shape{out[1]}, op, ": bias ", b.shape(), " does not match the output channels of weight ",
               w.shape(), ": (", out[1], ") expected");
  }
  Tensor y = empty(out, x.dtype(), x.device());
  if (y.numel() == 0) return y;
  const Tensor bc = b.defined() ? untracked::contiguous(b) : Tensor();
  // The product, plus the bias add.
  REEL_DEVICE_DISPATCH(x.device(), conv2d_forward,
                       kernel_cost({&x, &w, &b}, {&y}, conv_flops(out, w.shape()) + (b.defined() ? y.numel() : 0)),
                       untracked::contiguous(x), untracked::contiguous(w), bc, p, y);
  return y;
}

Tensor conv2d_backward_input(const Tensor& dy, const Tensor& w, const Shape& x_shape, const Conv2d& p) {
  const char* op = "conv2d_backward_input";
  check_same_device(op, {&dy, &w});
  check_same_floating_dtype(op, {&dy, &w});
  const Shape out = check_dy(op, dy, x_shape, w.shape(), p);
  Tensor dx = empty(x_shape, dy.dtype(), dy.device());
  if (dx.numel() == 0) return dx;
  REEL_DEVICE_DISPATCH(dy.device(), conv2d_backward_input, kernel_cost({&dy, &w}, {&dx}, conv_flops(out, w.shape())),
                       untracked::contiguous(dy), untracked::contiguous(w), p, dx);
  return dx;
}

Tensor conv2d_backward_weight(const Tensor& dy, const Tensor& x, const Shape& w_shape, const Conv2d& p) {
  const char* op = "conv2d_backward_weight";
  check_same_device(op, {&dy, &x});
  check_same_floating_dtype(op, {&dy, &x});
  const Shape out = check_dy(op, dy, x.shape(), w_shape, p);
  if (dy.numel() == 0) return zeros(w_shape, dy.dtype(), dy.device());  // an empty batch: no contribution
  Tensor dw = empty(w_shape, dy.dtype(), dy.device());
  REEL_DEVICE_DISPATCH(dy.device(), conv2d_backward_weight,
                       kernel_cost({&dy, &x}, {&dw}, conv_flops(out, w_shape)), untracked::contiguous(dy),
                       untracked::contiguous(x), p, dw);
  return dw;
}

Tensor conv2d_backward_bias(const Tensor& dy) {
  const char* op = "conv2d_backward_bias";
  check_same_floating_dtype(op, {&dy});
  REEL_CHECK(dy.dim() == 4, op, ": dy ", dy.shape(), " must be 4-D (N, C_out, OH, OW)");
  if (dy.numel() == 0) return zeros({dy.size(1)}, dy.dtype(), dy.device());
  Tensor db = empty({dy.size(1)}, dy.dtype(), dy.device());
  // One add per dy element.
  REEL_DEVICE_DISPATCH(dy.device(), conv2d_backward_bias, kernel_cost({&dy}, {&db}, dy.numel()),
                       untracked::contiguous(dy), db);
  return db;
}

}  // namespace reel::kernels
