// Entry points of the batchnorm family (kernels/batchnorm.h): BatchNorm's statistics (with the
// running-stat update), its normalisation, its backward and its batch count. Checks, contiguous
// (N, C, S) views, outputs, then the backend kernel.
#include "kernels/batchnorm.h"

#include "kernels/entry_point.h"

namespace reel::kernels {

namespace {

// The dtype of the statistics (mean, rstd, running_mean, running_var): x's for f32 and f64, f32
// (acc_t) for bf16 and f16.
DType stat_dtype(DType x) { return is_16bit_floating(x) ? DType::f32 : x; }

// A statistic (C) of x: in stat_dtype(x).
void check_stat_dtype(const char* op, const char* what, const Tensor& t, const Tensor& x) {
  REEL_CHECK(t.dtype() == stat_dtype(x.dtype()), op, ": ", what, " ", t.shape(), " is ", t.dtype(), " but x ",
             x.shape(), " is ", x.dtype(), ": ", stat_dtype(x.dtype()),
             " expected (the statistics of a bf16 or f16 x are f32)");
}

// x (N, C, *): returns S, the product of the spatial dims (1 for (N, C)).
int64_t check_x(const char* op, const Tensor& x) {
  REEL_CHECK(x.dim() >= 2, op, ": x ", x.shape(), " needs (N, C, *) dims: a batch and a channel dim");
  const int64_t N = x.size(0), C = x.size(1);
  return N * C == 0 ? 1 : x.numel() / (N * C);
}

// A per-channel tensor: shape (C), where defined.
void check_channels(const char* op, const char* what, const Tensor& t, const Tensor& x) {
  REEL_CHECK(t.shape() == Shape{x.size(1)}, op, ": ", what, " ", t.shape(), " does not match the ", x.size(1),
             " channels of x ", x.shape(), ": (", x.size(1), ") expected");
}

// The checks of the statistics' arguments (batch_norm_stats, batch_norm_forward).
void check_stats_args(const char* op, const Tensor& x, const Tensor& running_mean, const Tensor& running_var,
                      bool training, double eps) {
  const int64_t S = check_x(op, x);
  REEL_CHECK(running_mean.defined() == running_var.defined(), op,
             ": running_mean and running_var must both be given or both be absent (got ",
             running_mean.defined() ? "running_mean only" : "running_var only", ")");
  const bool running = running_mean.defined();
  REEL_CHECK(training || running, op, ": running_mean and running_var must be given in eval mode (training = false)");
  REEL_CHECK(eps >= 0, op, ": eps must be >= 0, got ", eps);
  if (running) {
    check_same_device(op, {&x, &running_mean, &running_var});
    check_same_floating_dtype(op, {&x});
    check_stat_dtype(op, "running_mean", running_mean, x);
    check_stat_dtype(op, "running_var", running_var, x);
    check_channels(op, "running_mean", running_mean, x);
    check_channels(op, "running_var", running_var, x);
    REEL_CHECK(!running_mean.requires_grad() && !running_var.requires_grad(), op,
               ": running_mean and running_var are statistics updated in place; they must not require grad");
  } else {
    check_same_floating_dtype(op, {&x});
  }
  if (training)
    // PyTorch's words (torch.nn.functional._verify_batch_size): one value has no variance, and its
    // unbiased variance n / (n - 1) would divide by zero.
    REEL_CHECK(x.size(0) * S > 1, op, ": Expected more than 1 value per channel when training, got input size ",
               x.shape());
}

// The running statistics as the kernels take them: contiguous (a strided one through a copy,
// written back by finish()); undefined where absent.
struct RunningStats {
  Tensor rm, rv;
  RunningStats(const Tensor& running_mean, const Tensor& running_var)
      : rm(running_mean.defined() ? untracked::contiguous(running_mean) : Tensor()),
        rv(running_var.defined() ? untracked::contiguous(running_var) : Tensor()) {}
  // After a training kernel updated them: a strided running statistic was updated through its
  // contiguous copy, written back (copy_ bumps the version); else the kernel wrote it in place and
  // its version is bumped here, so a node that saved it sees the write.
  void finish(const Tensor& running_mean, const Tensor& running_var) const {
    if (!running_mean.defined()) return;
    if (rm.storage() != running_mean.storage()) running_mean.copy_(rm);
    else running_mean.bump_version();
    if (rv.storage() != running_var.storage()) running_var.copy_(rv);
    else running_var.bump_version();
  }
};

// The checks of a normalisation with given statistics: x (N, C, *); w, b, mean, rstd (C), all on
// x's device; w and b of x's dtype, mean and rstd of stat_dtype(x). Returns S, the product of the
// spatial dims.
int64_t check_apply(const char* op, const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& mean,
                    const Tensor& rstd) {
  const int64_t S = check_x(op, x);
  check_same_device(op, {&x, &w, &b, &mean, &rstd});
  check_same_floating_dtype(op, {&x, &w, &b});
  check_stat_dtype(op, "mean", mean, x);
  check_stat_dtype(op, "rstd", rstd, x);
  check_channels(op, "weight", w, x);
  check_channels(op, "bias", b, x);
  check_channels(op, "mean", mean, x);
  check_channels(op, "rstd", rstd, x);
  return S;
}

}  // namespace

BatchNormStats batch_norm_stats(const Tensor& x, const Tensor& running_mean, const Tensor& running_var,
                                bool training, double momentum, double eps) {
  const char* op = "batch_norm";
  check_stats_args(op, x, running_mean, running_var, training, eps);
  const int64_t N = x.size(0), C = x.size(1), S = check_x(op, x);
  const DType st = stat_dtype(x.dtype());
  BatchNormStats r{empty({C}, st, x.device()), empty({C}, st, x.device())};
  if (C == 0) return r;
  const RunningStats run(running_mean, running_var);
  const Tensor& rm = run.rm;
  const Tensor& rv = run.rv;
  const Tensor none;  // eval reads no x and writes no running statistic
  // Training: the mean and the centred squares (3 FLOPs per element); eval: a few per channel.
  REEL_DEVICE_DISPATCH(x.device(), batch_norm_stats,
                       kernel_cost({training ? &x : &none, &rm, &rv},
                                   {&r.mean, &r.rstd, training ? &rm : &none, training ? &rv : &none},
                                   training ? 3 * x.numel() : 3 * C),
                       training ? contiguous_as(x, {N, C, S}) : none, rm, rv, training, momentum, eps, r.mean,
                       r.rstd);
  if (training) run.finish(running_mean, running_var);
  return r;
}

Tensor batch_norm_apply(const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& mean, const Tensor& rstd) {
  const char* op = "batch_norm_apply";
  const int64_t S = check_apply(op, x, w, b, mean, rstd);
  const int64_t N = x.size(0), C = x.size(1);
  Tensor y = empty(x.shape(), x.dtype(), x.device());
  if (x.numel() > 0)
    // Per element: centre, scale, shift (3 FLOPs).
    REEL_DEVICE_DISPATCH(x.device(), batch_norm_apply, kernel_cost({&x, &w, &b, &mean, &rstd}, {&y}, 3 * x.numel()),
                         contiguous_as(x, {N, C, S}), untracked::contiguous(w), untracked::contiguous(b),
                         untracked::contiguous(mean), untracked::contiguous(rstd), untracked::view(y, {N, C, S}));
  return y;
}

BatchNormForward batch_norm_forward(const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& running_mean,
                                    const Tensor& running_var, bool training, double momentum, double eps) {
  // The affine parameters are checked first: a bad one must raise before the running statistics
  // are updated.
  const char* op = "batch_norm";
  const int64_t S = check_x(op, x);
  check_same_device(op, {&x, &w, &b});
  check_same_floating_dtype(op, {&x, &w, &b});
  check_channels(op, "weight", w, x);
  check_channels(op, "bias", b, x);
  if (x.numel() == 0) {  // eval of an empty batch, or no channel: nothing for the fused kernel
    BatchNormStats s = batch_norm_stats(x, running_mean, running_var, training, momentum, eps);
    Tensor y = batch_norm_apply(x, w, b, s.mean, s.rstd);
    return {std::move(y), std::move(s.mean), std::move(s.rstd)};
  }
  check_stats_args(op, x, running_mean, running_var, training, eps);
  const int64_t N = x.size(0), C = x.size(1);
  const DType st = stat_dtype(x.dtype());
  BatchNormForward r{empty(x.shape(), x.dtype(), x.device()), empty({C}, st, x.device()), empty({C}, st, x.device())};
  const RunningStats run(running_mean, running_var);
  const Tensor& rm = run.rm;
  const Tensor& rv = run.rv;
  const Tensor none;
  // The statistics (3 FLOPs per element in training) and the normalisation (3).
  REEL_DEVICE_DISPATCH(x.device(), batch_norm_forward,
                       kernel_cost({&x, &w, &b, &rm, &rv},
                                   {&r.y, &r.mean, &r.rstd, training ? &rm : &none, training ? &rv : &none},
                                   (training ? 6 : 3) * x.numel()),
                       contiguous_as(x, {N, C, S}), untracked::contiguous(w), untracked::contiguous(b), rm, rv,
                       training, momentum, eps, untracked::view(r.y, {N, C, S}), r.mean, r.rstd);
  if (training) run.finish(running_mean, running_var);
  return r;
}

Tensor batch_norm_replay(const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& mean, const Tensor& rstd,
                         const Tensor& var, bool training, double eps) {
  const char* op = "batch_norm_replay";
  const int64_t S = check_apply(op, x, w, b, mean, rstd);
  REEL_CHECK(training != var.defined(), op, ": var (the running_var of the forward) is given in eval mode only");
  if (var.defined()) {
    check_same_device(op, {&x, &var});
    check_stat_dtype(op, "var", var, x);
    check_channels(op, "var", var, x);
  }
  const int64_t N = x.size(0), C = x.size(1);
  Tensor y = empty(x.shape(), x.dtype(), x.device());
  if (x.numel() > 0)
    // cpu: the normalisation (3 FLOPs per element); cuda's cuDNN training call also recomputes the
    // statistics it then discards (3 more).
    REEL_DEVICE_DISPATCH(x.device(), batch_norm_replay,
                         kernel_cost({&x, &w, &b, &mean, &rstd, &var}, {&y},
                                     (training && !x.device().is_cpu() ? 6 : 3) * x.numel()),
                         contiguous_as(x, {N, C, S}), untracked::contiguous(w), untracked::contiguous(b),
                         untracked::contiguous(mean), untracked::contiguous(rstd),
                         var.defined() ? untracked::contiguous(var) : Tensor(), training, eps,
                         untracked::view(y, {N, C, S}));
  return y;
}

BatchNormBackward batch_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& mean,
                                      const Tensor& rstd, bool training, double eps) {
  const char* op = "batch_norm_backward";
  const int64_t S = check_x(op, x);
  check_same_device(op, {&dy, &x, &w, &mean, &rstd});
  check_same_floating_dtype(op, {&dy, &x, &w});
  check_stat_dtype(op, "mean", mean, x);
  check_stat_dtype(op, "rstd", rstd, x);
  REEL_CHECK(dy.shape() == x.shape(), op, ": dy ", dy.shape(), " and x ", x.shape(), " differ in shape");
  check_channels(op, "weight", w, x);
  check_channels(op, "mean", mean, x);
  check_channels(op, "rstd", rstd, x);
  const int64_t N = x.size(0), C = x.size(1);
  BatchNormBackward r{empty(x.shape(), x.dtype(), x.device()), zeros({C}, x.dtype(), x.device()),
                      zeros({C}, x.dtype(), x.device())};
  if (x.numel() > 0)
    // Per element: xhat (2 FLOPs), the two channel sums (3), dx (4).
    REEL_DEVICE_DISPATCH(x.device(), batch_norm_backward,
                         kernel_cost({&dy, &x, &w, &mean, &rstd}, {&r.dx, &r.dw, &r.db}, 9 * x.numel()),
                         contiguous_as(dy, {N, C, S}), contiguous_as(x, {N, C, S}), untracked::contiguous(w),
                         untracked::contiguous(mean), untracked::contiguous(rstd), training, eps,
                         untracked::view(r.dx, {N, C, S}), r.dw, r.db);
  return r;
}

void batch_norm_count(const Tensor& count) {
  const char* op = "batch_norm_count";
  REEL_CHECK(count.defined(), op, ": count (num_batches_tracked) is undefined");
  REEL_CHECK(count.dtype() == DType::i64 && count.numel() == 1, op, ": count ", count.shape(), " is ", count.dtype(),
             ": a one-element i64 tensor (num_batches_tracked) expected");
  // One element read and written, one integer add.
  REEL_DEVICE_DISPATCH(count.device(), batch_norm_count, kernel_cost({&count}, {&count}, 1), count);
  count.bump_version();  // in place: what the tape saved of it is stale from here on
}

}  // namespace reel::kernels
