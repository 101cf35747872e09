// Entry points of the cross_entropy family (kernels/cross_entropy.h): checks (targets in range:
// kernels/index_check.h), the Mean divisor counted on the device, contiguous (N, V) rows, outputs,
// the backend kernel, and the reduction of the per-row losses (a kernel too); mse_loss's checks,
// its squares' kernel and their sum.
#include "kernels/cross_entropy.h"

#include <algorithm>

#include "kernels/elementwise.h"
#include "kernels/entry_point.h"
#include "kernels/index_check.h"
#include "kernels/reduce.h"

namespace reel::kernels {

const char* reduction_name(Reduction r) {
  switch (r) {
    case Reduction::None: return "none";
    case Reduction::Mean: return "mean";
    case Reduction::Sum: return "sum";
  }
  return "?";
}

Reduction parse_reduction(const std::string& name, const char* op) {
  if (name == "none") return Reduction::None;
  if (name == "mean") return Reduction::Mean;
  if (name == "sum") return Reduction::Sum;
  REEL_FAIL(op, ": reduction \"", name, "\" is not one of \"none\", \"mean\", \"sum\"");
}

namespace {
IndexRange target_range(const char* op, const Tensor& logits, int64_t ignore_index) {
  return {op, "target", logits.size(-1), ignore_index, "of the classes"};
}

// Shared checks of forward and backward. The targets' range: on the CPU a host loop here; on cuda
// the kernels check what they read (kernels/index_check.h), so nothing reads the device here.
void check_cross_entropy(const char* op, const Tensor& logits, const Tensor& targets, int64_t ignore_index) {
  check_same_device(op, {&logits, &targets});
  check_same_floating_dtype(op, {&logits});
  check_index_dtype(op, "targets", targets);
  REEL_CHECK(logits.dim() >= 1 && logits.size(-1) > 0, op, ": logits ", logits.shape(),
             " need a non-empty last dim of classes");
  REEL_CHECK(targets.shape() == rows_of(logits.shape()), op, ": logits ", logits.shape(), " and targets ",
             targets.shape(), " do not match: targets of shape ", rows_of(logits.shape()),
             " expected (one class index per row, classes along the last dim)");
  // The kernels run whenever there are rows (V > 0 was checked).
  check_range_before(target_range(op, logits, ignore_index), untracked::contiguous(targets), logits.numel() > 0);
}

// () i64 on the targets' device: how many of the N targets are not ignore_index (a kernel on cuda).
Tensor count_targets(const Tensor& targets, int64_t N, int64_t ignore_index) {
  Tensor count = empty({}, DType::i64, targets.device());
  if (N == 0) {
    count.fill_(0.0);
    return count;
  }
  // Reads the targets, writes one integer.
  REEL_DEVICE_DISPATCH(targets.device(), cross_entropy_count, kernel_cost({&targets}, {&count}, N),
                       contiguous_as(targets, {N}), ignore_index, count);
  return count;
}
}  // namespace

CrossEntropyForward cross_entropy_forward(const Tensor& logits, const Tensor& targets, Reduction reduction,
                                          int64_t ignore_index, std::optional<double> grad_scale) {
  const char* op = "cross_entropy_forward";
  check_cross_entropy(op, logits, targets, ignore_index);
  CrossEntropyForward r;
  const int64_t V = logits.size(-1), N = logits.numel() / V;
  const Shape rows = rows_of(logits.shape());
  r.count = count_targets(targets, N, ignore_index);
  // The Mean divides by the count (0 when every row is ignored: loss 0 and gradient 0, see
  // kernels/cross_entropy.h, never 0/0); the kernels read it where it was counted.
  const Tensor mean_count = reduction == Reduction::Mean ? r.count : Tensor();
  // The kernels write lse and the per-row losses in the accumulation dtype (f32 for bf16 / f16
  // logits; the logits' dtype otherwise, so nothing changes there); the losses are rounded to the
  // logits' dtype once, after the reduction has read them wide.
  const DType acc = acc_dtype(logits.dtype());
  const Tensor losses = empty(rows, acc, logits.device());
  r.lse = empty(rows, acc, logits.device());
  if (grad_scale) r.dlogits = empty(logits.shape(), logits.dtype(), logits.device());
  if (N > 0)
    run_indexed(target_range(op, logits, ignore_index), targets.shape(), [&] {
      // Per logit: max, exp(x - max), sum (4 FLOPs); with the gradient also softmax - onehot, scaled (2).
      REEL_DEVICE_DISPATCH(logits.device(), cross_entropy_forward,
                           kernel_cost({&logits, &targets}, {&r.losses, &r.lse, &r.dlogits}, (grad_scale ? 6 : 4) * N * V),
                           as_rows(logits, N, V), contiguous_as(targets, {N}),
                           ignore_index, untracked::view(losses, {N}), untracked::view(r.lse, {N}),
                           grad_scale ? as_rows(r.dlogits, N, V) : Tensor(), grad_scale.value_or(0.0), mean_count);
    });
  r.losses = acc == logits.dtype() ? losses : losses.to(logits.dtype());
  if (reduction == Reduction::None) {
    r.loss = r.losses;
  } else if (N == 0) {
    r.loss = scalar_tensor(0.0, logits.dtype(), logits.device());
  } else {
    // N values widened and added in f64 in the fixed lane order (kLossLanes): deterministic, and
    // cheap next to the N x V pass; on cuda one block, so the loss never leaves the device.
    r.loss = empty({}, logits.dtype(), logits.device());
    REEL_DEVICE_DISPATCH(logits.device(), cross_entropy_reduce, kernel_cost({&losses}, {&r.loss}, N),
                         untracked::view(losses, {N}), mean_count, r.loss);
  }
  return r;
}

Tensor cross_entropy_backward(const Tensor& dloss, const Tensor& logits, const Tensor& targets, const Tensor& lse,
                              Reduction reduction, int64_t ignore_index) {
  const char* op = "cross_entropy_backward";
  check_same_device(op, {&dloss, &logits, &targets, &lse});
  check_same_floating_dtype(op, {&logits, &dloss});
  REEL_CHECK(lse.dtype() == acc_dtype(logits.dtype()), op, ": lse ", lse.shape(), " is ", lse.dtype(), " for logits ",
             logits.shape(), " of ", logits.dtype(), ": ", acc_dtype(logits.dtype()),
             " expected (the accumulation dtype, as cross_entropy_forward writes it)");
  check_cross_entropy(op, logits, targets, ignore_index);
  const Shape rows = rows_of(logits.shape());
  REEL_CHECK(lse.shape() == rows, op, ": lse ", lse.shape(), " does not match logits ", logits.shape(), ": ", rows,
             " expected");
  if (reduction == Reduction::None)
    REEL_CHECK(dloss.shape() == rows, op, ": dloss ", dloss.shape(),
               " with reduction \"none\" must have the rows' shape ", rows, " of logits ", logits.shape());
  else
    REEL_CHECK(dloss.numel() == 1, op, ": dloss ", dloss.shape(), " with reduction \"", reduction_name(reduction),
               "\" must be a single value");
  const int64_t V = logits.size(-1), N = logits.numel() / V;
  Tensor dlogits = empty(logits.shape(), logits.dtype(), logits.device());
  if (N == 0) return dlogits;
  // Mean: 1/count, counted on the device (no host read).
  const Tensor mean_count = reduction == Reduction::Mean ? count_targets(targets, N, ignore_index) : Tensor();
  run_indexed(target_range(op, logits, ignore_index), targets.shape(), [&] {
    // Per logit: exp(x - lse), minus the one-hot, times the row's scale: 3 FLOPs.
    REEL_DEVICE_DISPATCH(logits.device(), cross_entropy_backward,
                         kernel_cost({&dloss, &logits, &targets, &lse}, {&dlogits}, 3 * N * V),
                         contiguous_as(dloss, {dloss.numel()}), mean_count,
                         as_rows(logits, N, V), contiguous_as(targets, {N}),
                         contiguous_as(lse, {N}), ignore_index, as_rows(dlogits, N, V));
  });
  return dlogits;
}

namespace {
void check_mse_loss(const char* op, const Tensor& input, const Tensor& target) {
  check_same_device(op, {&input, &target});
  check_same_floating_dtype(op, {&input, &target});
  REEL_CHECK(input.shape() == target.shape(), op, ": input ", input.shape(), " and target ", target.shape(),
             " do not match: target of the input's shape ", input.shape(), " expected");
}
}  // namespace

Tensor mse_loss_forward(const Tensor& input, const Tensor& target, Reduction reduction) {
  const char* op = "mse_loss_forward";
  check_mse_loss(op, input, target);
  const int64_t N = input.numel();
  const DType acc = acc_dtype(input.dtype());
  if (N == 0 && reduction != Reduction::None) return scalar_tensor(0.0, input.dtype(), input.device());
  const Tensor sq = empty(input.shape(), acc, input.device());
  if (N > 0)
    // Per element: a difference and a square, 2 FLOPs.
    REEL_DEVICE_DISPATCH(input.device(), mse_loss_forward, kernel_cost({&input, &target}, {&sq}, 2 * N),
                         contiguous_as(input, {N}), contiguous_as(target, {N}), untracked::view(sq, {N}));
  if (reduction == Reduction::None) return acc == input.dtype() ? sq : sq.to(input.dtype());
  Tensor total = sum(sq);  // () in acc, deterministic on every device
  if (reduction == Reduction::Mean) total = binary(BinaryOp::Div, total, static_cast<double>(N));
  return acc == input.dtype() ? total : total.to(input.dtype());
}

Tensor mse_loss_backward(const Tensor& dloss, const Tensor& input, const Tensor& target, Reduction reduction) {
  const char* op = "mse_loss_backward";
  check_mse_loss(op, input, target);
  check_same_device(op, {&input, &dloss});
  check_same_floating_dtype(op, {&input, &dloss});
  if (reduction == Reduction::None)
    REEL_CHECK(dloss.shape() == input.shape(), op, ": dloss ", dloss.shape(),
               " with reduction \"none\" must have the input's shape ", input.shape());
  else
    REEL_CHECK(dloss.numel() == 1, op, ": dloss ", dloss.shape(), " with reduction \"", reduction_name(reduction),
               "\" must be a single value");
  const int64_t N = input.numel();
  Tensor dinput = empty(input.shape(), input.dtype(), input.device());
  const double scale = reduction == Reduction::Mean ? 1.0 / static_cast<double>(std::max<int64_t>(N, 1)) : 1.0;
  if (N > 0)
    // Per element: a difference and two multiplies, 3 FLOPs.
    REEL_DEVICE_DISPATCH(input.device(), mse_loss_backward,
                         kernel_cost({&dloss, &input, &target}, {&dinput}, 3 * N),
                         contiguous_as(dloss, {dloss.numel()}), scale, contiguous_as(input, {N}),
                         contiguous_as(target, {N}), untracked::view(dinput, {N}));
  return dinput;
}

}  // namespace reel::kernels
