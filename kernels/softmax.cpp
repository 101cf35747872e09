// Entry points of the softmax family (kernels/softmax.h): softmax and log-softmax, forward and
// backward. Checks, contiguous (R, C) rows, outputs, then the backend kernel.
#include "kernels/softmax.h"

#include "kernels/entry_point.h"

namespace reel::kernels {

namespace {
Tensor softmax_forward_any(const char* op, const Tensor& x, bool log) {
  check_same_floating_dtype(op, {&x});
  REEL_CHECK(x.dim() >= 1, op, ": x ", x.shape(), " needs at least one dim (softmax runs along the last)");
  Tensor y = empty(x.shape(), x.dtype(), x.device());
  const int64_t C = x.size(-1);
  if (y.numel() > 0)
    // max, exp(x - max), sum, divide (or subtract the log-sum): 4 FLOPs per element
    REEL_DEVICE_DISPATCH(x.device(), softmax_forward, kernel_cost({&x}, {&y}, 4 * x.numel(), log ? "log" : nullptr),
                         as_rows(x, x.numel() / C, C), log,
                         as_rows(y, x.numel() / C, C));
  return y;
}

Tensor softmax_backward_any(const char* op, const Tensor& dy, const Tensor& y, bool log) {
  check_same_device(op, {&dy, &y});
  check_same_floating_dtype(op, {&dy, &y});
  REEL_CHECK(dy.shape() == y.shape() && y.dim() >= 1, op, ": dy ", dy.shape(), " and y ", y.shape(),
             " must have one shape of at least one dim");
  Tensor dx = empty(y.shape(), y.dtype(), y.device());
  const int64_t C = y.size(-1);
  if (dx.numel() > 0)
    // sum of dy * y (or of dy), then dx = y * (dy - sum) (or dy - exp(y) * sum): 4 FLOPs per element
    REEL_DEVICE_DISPATCH(y.device(), softmax_backward,
                         kernel_cost({&dy, &y}, {&dx}, 4 * y.numel(), log ? "log" : nullptr),
                         as_rows(dy, y.numel() / C, C),
                         as_rows(y, y.numel() / C, C), log, as_rows(dx, y.numel() / C, C));
  return dx;
}
}  // namespace

Tensor softmax_forward(const Tensor& x) { return softmax_forward_any("softmax_forward", x, false); }
Tensor log_softmax_forward(const Tensor& x) { return softmax_forward_any("log_softmax_forward", x, true); }
Tensor softmax_backward(const Tensor& dy, const Tensor& y) {
  return softmax_backward_any("softmax_backward", dy, y, false);
}
Tensor log_softmax_backward(const Tensor& dy, const Tensor& y) {
  return softmax_backward_any("log_softmax_backward", dy, y, true);
}

}  // namespace reel::kernels
