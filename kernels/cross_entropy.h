// The cross_entropy family, reel's losses: fused cross-entropy over logits with integer targets
// (i32 or i64), forward (optionally with the gradient in the same sweep) and backward; and the mean
// squared error of two tensors (mse_loss), forward and backward. Plain kernels, no autograd.
//
// Each entry point checks its inputs (shapes, dtypes, devices: reel::Error naming the op and
// them), makes them contiguous where the kernel needs it, allocates the outputs on the inputs'
// device and runs the backend kernel (declared at the end of this file) on cpu or cuda.
#ifndef REEL_KERNELS_CROSS_ENTROPY_H
#define REEL_KERNELS_CROSS_ENTROPY_H
#include <optional>
#include <string>

#include "core/tensor.h"

namespace reel::kernels {

enum class Reduction { None, Mean, Sum };
const char* reduction_name(Reduction r);
// "none" | "mean" | "sum", else reel::Error naming `op` (the loss the text was given to).
Reduction parse_reduction(const std::string& name, const char* op = "cross_entropy");

// Dtypes: loss, losses and dlogits have the logits' dtype; lse has the accumulation dtype
// (acc_dtype: f32 for bf16 / f16 logits, else the logits' own), so that the backward's
// exp(logit - lse) does not see an lse rounded to 8 or 11 bits. For 16-bit logits every sum, the
// log-sum-exp and dlogits are computed in f32 and each output rounded once; loss (Mean/Sum) is the
// f64 sum of the f32 per-row losses, rounded once.
struct CrossEntropyForward {
  Tensor loss;     // Mean/Sum: a scalar (); None: the per-row losses (N...)
  Tensor losses;   // (N...) per-row loss lse - logit[target], 0 for ignored rows
  Tensor lse;      // (N...) log-sum-exp of each row (acc dtype): what backward needs, instead of the softmax
  Tensor dlogits;  // (N..., V) when a fused grad_scale was given, else undefined
  Tensor count;    // () i64 on the logits' device: rows whose target is not ignore_index (the Mean
                   // divisor); counted there, so that nothing in the forward reads the device
};
// logits (N..., V) floating, classes along the LAST dim (llm.c's layout; PyTorch puts them in
// dim 1); targets (N...) i32 or i64, each in [0, V) or equal to ignore_index.
//   Mean averages over the non-ignored rows. When every row is ignored the mean is 0, not NaN as
//   in PyTorch: in an accumulation window a micro-batch that is all padding must add nothing to
//   the window's loss and gradients, not poison the sum with NaN.
// One pass per row computes the max and the log-sum-exp online (blockwise rescaling) and never
// materialises the probability matrix. With grad_scale set it also writes, in the same sweep,
//   dlogits[row] = (softmax(row) - onehot(target)) * g,   0 for ignored rows,
// where g = grad_scale / count for Mean and grad_scale for Sum and None (for None that is the
// gradient of the SUM of the per-row losses), i.e. the llm.c fused classifier: backward is free.
// Out-of-range targets and non-integer targets raise reel::Error (naming the value and row).
// No host read on any device: the count, the Mean's 1/count and the reduction of the per-row losses
// are computed where the logits live (on cuda in the forward's one launch, see CrossEntropyPlan
// below: no copy to or from the host in the step, and no launch of their own).
// The reduction: the per-row losses widened to f64 and added in the fixed order of kLossLanes
// below, on every device (so cpu and cuda give the same bits for the same per-row losses).
CrossEntropyForward cross_entropy_forward(const Tensor& logits, const Tensor& targets,
                                          Reduction reduction = Reduction::Mean, int64_t ignore_index = -100,
                                          std::optional<double> grad_scale = std::nullopt);
// dloss: for None the per-row gradient (N...); for Mean/Sum the scalar gradient (one element).
// lse from the forward (acc dtype). Returns dlogits (N..., V), the logits' dtype: softmax recomputed
// as exp(logit - lse).
Tensor cross_entropy_backward(const Tensor& dloss, const Tensor& logits, const Tensor& targets, const Tensor& lse,
                              Reduction reduction = Reduction::Mean, int64_t ignore_index = -100);

// Mean squared error: input and target of the same shape, the same floating dtype and device
// (reel::Error naming the op, both shapes, dtypes or devices otherwise). Returns, in their dtype,
//   None: (input - target)^2 elementwise, input's shape;
//   Sum:  the sum of those, a scalar ();   Mean: that sum / numel, a scalar (0 for an empty input).
// The squares are formed in the accumulation dtype (f32 for bf16 / f16) and, for Sum and Mean,
// summed there by kernels::sum (deterministic on every device) before the one rounding to the dtype.
Tensor mse_loss_forward(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::Mean);
// dloss: for None input's shape; for Mean/Sum one element. Returns dinput = 2 (input - target) g,
// input's shape and dtype, with g = dloss (None), dloss (Sum) or dloss / numel (Mean); d target is
// its negation (the caller's: the tape op negates it only when target needs a gradient).
Tensor mse_loss_backward(const Tensor& dloss, const Tensor& input, const Tensor& target,
                         Reduction reduction = Reduction::Mean);

// The order in which the forward adds the N per-row losses (f64) for Mean and Sum, the same on
// every backend: lane t (of kLossLanes) sums rows t, t + kLossLanes, t + 2 kLossLanes, ... in
// increasing order starting from 0, then lanes are folded pairwise, lane t += lane t + w for
// w = kLossLanes/2, ..., 1. (On cuda: the forward grid's last block, whose kLossLanes threads are
// the lanes, a shared-memory tree.)
constexpr int kLossLanes = 256;
// The Mean's row scale from the count c of non-ignored rows: 1 / c, 0 when c is 0. Evaluated on
// the device (cuda) and on the host (cpu) in the same double arithmetic.
#define REEL_MEAN_SCALE(c) ((c) > 0 ? 1.0 / static_cast<double>(c) : 0.0)

// How the forward of N > 0 rows runs: one launch, or two under the fallback below. Decided by the
// entry point (its launches and KernelCost) and passed to the backend (cuda's grid and count).
//   On cuda one launch does it all: blocks of kLossLanes threads take rows b, b + blocks, ...
// (blocks = min(N, kCrossEntropyMaxBlocks), one row per block up to there) and write each row's
// loss, lse and dlogits; the block that finishes last (a ticket taken from a per-device counter,
// kernels/cuda/last_block.h: no grid-wide barrier) then counts the targets not ignored and adds the
// per-row losses in kLossLanes' order. That count comes too late for one case: the Mean's fused
// gradient, whose g = grad_scale / count scales every row's dlogits as they are written. Writing
// them unscaled and scaling later would round differently (and cost a pass); so there every block
// counts all N targets itself before its rows (count_in_blocks; an exact integer count, the same
// in every block): the targets are read blocks more times, blocks x N x 4 (i32) or 8 (i64) bytes,
// mostly from L2. While that is at most kRecountBytes it is cheaper than the launch it saves (an
// H100/H200 reads 4 MiB from L2 in well under a microsecond, a launch costs about 3 us, and the
// blocks read in parallel); above it (e.g. N = 2048 i64 targets, 2048 blocks: 32 MiB) the count is
// a launch of its own before the forward (count_first, cross_entropy_count: two launches). The grid
// is never shrunk to fit the budget: rows per block, and so each row's arithmetic and the kernel's
// parallelism, stay as they are. On cpu the same launches run (the count is a host loop, once).
constexpr int64_t kCrossEntropyMaxBlocks = int64_t{1} << 16;  // more rows: the blocks loop over them
constexpr int64_t kRecountBytes = int64_t{4} << 20;
struct CrossEntropyPlan {
  int64_t blocks = 1;            // cuda's grid: min(N, kCrossEntropyMaxBlocks)
  bool count_in_blocks = false;  // every block counts the N targets before its rows (Mean's fused gradient)
  bool count_first = false;      // the fallback: cross_entropy_count first, a launch of its own
  int64_t count_reads = 1;       // how often the forward launch reads the N targets to count them:
                                 // 0 (count_first), blocks (count_in_blocks), else 1 (the last block)
};
// N > 0 rows; index_bytes: 4 (i32 targets) or 8 (i64); count_before_rows: Mean with the fused gradient.
CrossEntropyPlan cross_entropy_plan(int64_t N, int64_t index_bytes, bool count_before_rows);

}  // namespace reel::kernels
#endif  // REEL_KERNELS_CROSS_ENTROPY_H

// ---- Backend kernels --------------------------------------------------------------------------
// Declared once for both backends, outside the include guard: kernels/backends.h includes this
// file again with REEL_BACKEND_KERNELS defined, inside namespace reel::kernels::cpu
// (kernels/cpu/cross_entropy.cpp) and reel::kernels::cuda (kernels/cuda/cross_entropy.cu).
// Inputs arrive validated by the entry points (kernels/cross_entropy.cpp), CONTIGUOUS and viewed as the
// flat shapes written next to each argument; see kernels/backends.h for the common contract.
#ifdef REEL_BACKEND_KERNELS
// targets (N) i32/i64 -> count () i64: how many are not ignore_index. Deterministic (integers).
// The forward's first launch under CrossEntropyPlan::count_first (otherwise the forward counts),
// and the separate backward's Mean divisor.
void cross_entropy_count(const Tensor& targets, int64_t ignore_index, const Tensor& count);
// One launch (CrossEntropyPlan). logits (N, V), targets (N) i32/i64 (in [0, V) or ignore_index) ->
// losses (N), lse (N) (both of the dispatch's acc_t); when dlogits (N, V) is defined also
// dlogits = (softmax - onehot) * g per non-ignored row, g = grad_scale, times REEL_MEAN_SCALE(count)
// when `mean`. count () i64: read when plan.count_first (cross_entropy_count wrote it), else written
// (how many targets are not ignore_index). loss (), the logits' dtype, when defined (Mean and Sum):
// the f64 sum of the losses in the order of kLossLanes, times REEL_MEAN_SCALE(count) when `mean`,
// rounded once.
void cross_entropy_forward(const Tensor& logits, const Tensor& targets, int64_t ignore_index,
                           const Tensor& losses, const Tensor& lse, const Tensor& dlogits, double grad_scale,
                           bool mean, const CrossEntropyPlan& plan, const Tensor& count, const Tensor& loss);
// dloss (N) or one element (the same for every row), times REEL_MEAN_SCALE(count) when count (()
// i64) is defined (else 1), and lse (N) of acc_t -> dlogits (N, V).
void cross_entropy_backward(const Tensor& dloss, const Tensor& count, const Tensor& logits, const Tensor& targets,
                            const Tensor& lse, int64_t ignore_index, const Tensor& dlogits);
// input, target (N) -> sq (N) of the dispatch's acc_t: (input - target)^2, the difference and its
// square in acc_t.
void mse_loss_forward(const Tensor& input, const Tensor& target, const Tensor& sq);
// dloss (N) or one element (the same for every element), times `scale`, input, target (N) ->
// dinput (N) = 2 (input - target) g in acc_t, g = dloss * scale rounded to T first, stored as T.
void mse_loss_backward(const Tensor& dloss, double scale, const Tensor& input, const Tensor& target,
                       const Tensor& dinput);
#endif  // REEL_BACKEND_KERNELS
