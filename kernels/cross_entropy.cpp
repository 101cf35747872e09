// Entry points of the cross_entropy family (kernels/cross_entropy.h): checks (targets in range:
// kernels/index_check.h), the forward's plan (one launch that also counts the Mean's divisor and
// reduces the per-row losses on the device, or the count first), contiguous (N, V) rows, outputs,
// the backend kernels; mse_loss's checks, its squares' kernel and their sum.
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

// count () i64 on the targets' device = how many of the N (> 0) targets are not ignore_index: a
// launch of its own on cuda (the forward's fallback, and the separate backward's Mean divisor).
void count_targets(const Tensor& targets, int64_t N, int64_t ignore_index, const Tensor& count) {
  const Tensor t = contiguous_as(targets, {N});
  // Reads the targets, writes one integer.
  REEL_DEVICE_DISPATCH(targets.device(), cross_entropy_count, kernel_cost({&t}, {&count}, N), t, ignore_index, count);
}

}  // namespace

CrossEntropyPlan cross_entropy_plan(int64_t N, int64_t index_bytes, bool count_before_rows) {
  CrossEntropyPlan p;
  p.blocks = std::min(N, kCrossEntropyMaxBlocks);
  if (!count_before_rows) return p;  // the last block counts: the rows do not need it
  // Every block reading the N targets: blocks x N x index_bytes, within kRecountBytes (the division
  // keeps blocks x N from overflowing for any N).
  if (p.blocks <= kRecountBytes / (N * index_bytes)) {
    p.count_in_blocks = true;
    p.count_reads = p.blocks;
  } else {
    p.count_first = true;
    p.count_reads = 0;
  }
  return p;
}

CrossEntropyForward cross_entropy_forward(const Tensor& logits, const Tensor& targets, Reduction reduction,
                                          int64_t ignore_index, std::optional<double> grad_scale) {
  const char* op = "cross_entropy_forward";
  check_cross_entropy(op, logits, targets, ignore_index);
  CrossEntropyForward r;
  const int64_t V = logits.size(-1), N = logits.numel() / V;
  const Shape rows = rows_of(logits.shape());
  // The kernels write lse and the per-row losses in the accumulation dtype (f32 for bf16 / f16
  // logits; the logits' dtype otherwise, so nothing changes there); the losses are rounded to the
  // logits' dtype once, after the reduction has read them wide.
  const DType acc = acc_dtype(logits.dtype());
  const Tensor losses = empty(rows, acc, logits.device());
  r.lse = empty(rows, acc, logits.device());
  // The count of targets not ignored, () i64 where the logits live: the Mean's divisor (0 when every
  // row is ignored: loss 0 and gradient 0, see kernels/cross_entropy.h, never 0/0).
  r.count = empty({}, DType::i64, logits.device());
  if (grad_scale) r.dlogits = empty(logits.shape(), logits.dtype(), logits.device());
  const bool reduced = reduction != Reduction::None;
  if (N == 0) {
    r.count.fill_(0.0);
    r.losses = acc == logits.dtype() ? losses : losses.to(logits.dtype());
    r.loss = reduced ? scalar_tensor(0.0, logits.dtype(), logits.device()) : r.losses;
    return r;
  }
  const Tensor loss = reduced ? empty({}, logits.dtype(), logits.device()) : Tensor();  // ()
  const Tensor t = contiguous_as(targets, {N});                                         // (N)
  const bool mean = reduction == Reduction::Mean;
  const CrossEntropyPlan plan =
      cross_entropy_plan(N, static_cast<int64_t>(dtype_size(targets.dtype())), mean && grad_scale.has_value());
  if (plan.count_first) count_targets(targets, N, ignore_index, r.count);
  run_indexed(target_range(op, logits, ignore_index), targets.shape(), [&] {
    // Per logit: max, exp(x - max), sum (4 FLOPs); with the gradient also softmax - onehot, scaled
    // (2); per row the count's compare and the reduction's add. Bytes: beyond the inputs read and
    // the outputs written once, what the count reads (the N targets count_reads times: on cuda every
    // block's reads under count_in_blocks, the cpu's host loop reads them once) and the reduction
    // re-reads (the N per-row losses, by cuda's last block).
    profile::KernelCost cost = kernel_cost({&logits, &targets}, {&losses, &r.lse, &r.dlogits, &r.count, &loss},
                                           (grad_scale ? 6 : 4) * N * V + 2 * N);
    const int64_t count_reads = logits.device().is_cpu() ? std::min<int64_t>(plan.count_reads, 1) : plan.count_reads;
    cost.bytes_read += count_reads * bytes_of(t) + (reduced ? bytes_of(losses) : 0);
    REEL_DEVICE_DISPATCH(logits.device(), cross_entropy_forward, cost, as_rows(logits, N, V), t, ignore_index,
                         untracked::view(losses, {N}), untracked::view(r.lse, {N}),
                         grad_scale ? as_rows(r.dlogits, N, V) : Tensor(), grad_scale.value_or(0.0), mean, plan,
                         r.count, loss);
  });
  r.losses = acc == logits.dtype() ? losses : losses.to(logits.dtype());
  r.loss = reduced ? loss : r.losses;
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
  Tensor mean_count;
  if (reduction == Reduction::Mean) {
    mean_count = empty({}, DType::i64, logits.device());
    count_targets(targets, N, ignore_index, mean_count);
  }
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
