// kernels/cuda/batchnorm.cu: BatchNorm's per-channel statistics, normalisation and backward, and
// its batch count.
//
// A channel's n = N * S values are N runs of S contiguous values (x viewed as (N, C, S)). The
// kernels that sum over a channel give it one 256-thread block (a block-uniform grid-stride loop
// over channels): each thread sums a strided share of the channel's values, in double, and
// block_reduce (kernels/cuda/block_reduce.h: a fixed tree, no atomics) adds the shares. The same
// bits on every run and in every scheduling order; not the CPU's bits (another summation order),
// within rounding of them.
//
// Statistics (training): the two-pass variance, the mean summing x - x[0, c, 0] (as the CPU and
// LayerNorm); thread 0 writes the channel's mean and rstd and updates its running statistics.
// Eval: a thread per channel from the running statistics.
// Normalisation: a grid-stride loop over the elements, y = (x - mean) * (rstd * w) + b.
// Backward: block per channel, the sums of dy and dy * xhat, then the block writes the channel's dx.
// Count: one thread adds 1 to num_batches_tracked where it lives (its address and the 1 are the
// launch's only arguments, the same every step: a CUDA graph's replay counts its batch too).
// The sums are double (wider than the dispatch's acc_t); the elementwise math of apply and dx runs
// in acc_t (loads T -> acc_t, stores acc_t -> T: no-ops for f32 and f64, where acc_t is T). The
// per-channel statistics (mean, rstd, the running ones) are acc_t: f32 for a bf16 or f16 x
// (kernels/batchnorm.h), rounded once from the double sums; dw and db are rounded once to T.
// bf16 and f16 always run these kernels, never cuDNN (below): the training forward is the stats
// kernel then the apply kernel, a replay the apply kernel alone with the kept statistics (the
// first forward's y bits, as on the cpu).
//
// One block per channel leaves a GPU half idle when C is small and N * S large (a CNN's first
// layers): a split of each channel over several blocks with partials added in order would fill it.
//
// ---- cuDNN (where the build has it: REEL_HAS_CUDNN; the emulated one in the host build) --------
// For f32 and f64 data (kernels/cuda/cudnn_common.h describes those only; cuDNN's 16-bit batch
// normalization would take f32 scale and bias, and the emulated cuDNN answers NOT_SUPPORTED for
// 16-bit data), the fused forward and the training backward go through cuDNN's batch normalization in SPATIAL
// mode (never SPATIAL_PERSISTENT, which may sum with atomics: not the same bits run to run), x
// viewed as the NCHW tensor (N, C, S, 1) and the per-channel tensors as (1, C, 1, 1) of x's dtype
// (cuDNN's "derived" type is double for double data and float for float: reel's dtype in both):
//   training forward: cudnnBatchNormalizationForwardTraining; its resultSaveMean /
//     resultSaveInvVariance are reel's mean / rstd, exponentialAverageFactor the momentum, and the
//     running statistics are updated by cuDNN with the unbiased variance, as PyTorch's (whose cuDNN
//     path hands its running_var to this call unchanged); undefined ones are passed as NULL, which
//     cuDNN takes as "do not update".
//   eval forward: y from cudnnBatchNormalizationForwardInference with the running statistics;
//     mean and rstd (what the backward needs) from the eval stats kernel above.
//   training backward: cudnnBatchNormalizationBackward with the saved mean and rstd.
//   eval backward: cuDNN has no call for constant statistics; the kernel above gives
//     dx = w * rstd * dy (its mean terms are exact zeros), dw, db.
// epsilon below CUDNN_BN_MIN_EPSILON (0.0 in cuDNN 9, so only a negative one, which the entry
// points already refuse) would keep the kernels above, as PyTorch falls back.
//
// Checkpoint replay (batch_norm_replay). cuDNN has no "normalise with these statistics" call
// whose y has the bits of ForwardTraining's y (ForwardInference rounds 1 / sqrt(var + eps) its
// own way, and reel's apply kernel is another formula's rounding). So a training replay calls
// ForwardTraining again on the same x bits with NULL running-stat pointers (no running-stat
// update; its saved statistics go to scratch buffers): SPATIAL mode is deterministic, so y has
// the bits of the first forward's (checked on the device by tests/test_nn_kernels_batchnorm.cpp
// and tests/test_checkpoint.cpp: verified against the emulated cuDNN, to be confirmed on a GPU
// wherever the real library is present), and the op (autograd/ops/batchnorm.h) keeps the first
// run's mean and rstd for the backward. The replay thus recomputes the statistics inside cuDNN (and discards them): a
// replayed training batch norm costs a full forward on cuda, the apply alone on the cpu. An eval
// replay calls ForwardInference again with the running statistics the first run read (the op
// keeps copies), the same bits again.
#include <cmath>

#include <string>
#include <type_traits>

#include "kernels/backends.h"
#include "kernels/cuda/block_reduce.h"
#include "kernels/cuda/cudnn_common.h"
#include "kernels/cuda/launch.h"

namespace reel::kernels::cuda {

namespace {

constexpr int kChannelThreads = 256;

// ---- kernels ---------------------------------------------------------------------------------

// Block per channel c. x: (N, C, S); mean, rstd: (C) out; running_mean, running_var: (C) in/out,
// or null; the statistics acc_t.
template <typename T, typename acc_t>
__global__ void __launch_bounds__(kChannelThreads) batch_norm_stats_kernel(const T* x, acc_t* running_mean, acc_t* running_var, double momentum, double eps,
                                        acc_t* mean, acc_t* rstd, int64_t N, int64_t C, int64_t S) {
  using std::sqrt;
  __shared__ double scratch[32];
  const int64_t M = N * S;
  const double n = static_cast<double>(M);
  for (int64_t c = blockIdx.x; c < C; c += gridDim.x) {  // uniform over the block
    const double shift = static_cast<double>(x[c * S]);
    double s = 0;
    for (int64_t i = threadIdx.x; i < M; i += blockDim.x) s += static_cast<double>(x[(i / S * C + c) * S + i % S]) - shift;
    const double m = shift + block_reduce(s, SumOp{}, scratch) / n;
    double v = 0;
    for (int64_t i = threadIdx.x; i < M; i += blockDim.x) {
      const double d = static_cast<double>(x[(i / S * C + c) * S + i % S]) - m;
      v += d * d;
    }
    const double var = block_reduce(v, SumOp{}, scratch) / n;  // biased
    if (threadIdx.x == 0) {
      mean[c] = static_cast<acc_t>(m);
      rstd[c] = static_cast<acc_t>(1.0 / sqrt(var + eps));
      if (running_mean) {
        running_mean[c] = static_cast<acc_t>((1 - momentum) * static_cast<double>(running_mean[c]) + momentum * m);
        running_var[c] =
            static_cast<acc_t>((1 - momentum) * static_cast<double>(running_var[c]) + momentum * var * n / (n - 1));
      }
    }
  }
}

// Thread per channel: mean, rstd (C) from running_mean, running_var (C), all of the statistics'
// dtype T (f32 or f64).
template <typename T>
__global__ void __launch_bounds__(kThreads) batch_norm_stats_eval_kernel(const T* running_mean, const T* running_var, double eps, T* mean,
                                             T* rstd, int64_t C) {
  using std::sqrt;
  for (int64_t c = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; c < C; c += int64_t{blockDim.x} * gridDim.x) {
    mean[c] = running_mean[c];
    rstd[c] = static_cast<T>(1.0 / sqrt(static_cast<double>(running_var[c]) + eps));
  }
}

// One thread: count (one i64, num_batches_tracked) += 1.
__global__ void __launch_bounds__(1) batch_norm_count_kernel(int64_t* count) { *count += 1; }

// Grid-stride over the elements. x, y: (N, C, S); w, b, mean, rstd: (C).
template <typename T, typename acc_t>
__global__ void __launch_bounds__(kThreads) batch_norm_apply_kernel(const T* x, const T* w, const T* b, const acc_t* mean, const acc_t* rstd, T* y,
                                        int64_t total, int64_t C, int64_t S) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total; i += int64_t{blockDim.x} * gridDim.x) {
    const int64_t c = i / S % C;
    y[i] = static_cast<T>((acc_t(x[i]) - acc_t(mean[c])) * (acc_t(rstd[c]) * acc_t(w[c])) + acc_t(b[c]));
  }
}

// Block per channel c. dy, x, dx: (N, C, S); w, mean, rstd, dw, db: (C).
template <typename T, typename acc_t>
__global__ void __launch_bounds__(kChannelThreads) batch_norm_backward_kernel(const T* dy, const T* x, const T* w, const acc_t* mean, const acc_t* rstd,
                                           bool training, T* dx, T* dw, T* db, int64_t N, int64_t C, int64_t S) {
  __shared__ double scratch[32];
  const int64_t M = N * S;
  const double n = static_cast<double>(M);
  for (int64_t c = blockIdx.x; c < C; c += gridDim.x) {  // uniform over the block
    const acc_t m = mean[c], rs = rstd[c];
    double sum_dy = 0, sum_dy_xhat = 0;
    for (int64_t i = threadIdx.x; i < M; i += blockDim.x) {
      const int64_t at = (i / S * C + c) * S + i % S;
      sum_dy += static_cast<double>(dy[at]);
      sum_dy_xhat += static_cast<double>(dy[at]) * static_cast<double>((acc_t(x[at]) - m) * rs);
    }
    sum_dy = block_reduce(sum_dy, SumOp{}, scratch);
    sum_dy_xhat = block_reduce(sum_dy_xhat, SumOp{}, scratch);
    if (threadIdx.x == 0) {
      db[c] = static_cast<T>(sum_dy);
      dw[c] = static_cast<T>(sum_dy_xhat);
    }
    const acc_t scale = acc_t(w[c]) * rs;
    // Eval: the statistics are constants, so neither mean term appears.
    const acc_t mean_dy = training ? static_cast<acc_t>(sum_dy / n) : acc_t(0);
    const acc_t mean_dy_xhat = training ? static_cast<acc_t>(sum_dy_xhat / n) : acc_t(0);
    for (int64_t i = threadIdx.x; i < M; i += blockDim.x) {
      const int64_t at = (i / S * C + c) * S + i % S;
      dx[at] = static_cast<T>(scale * (acc_t(dy[at]) - mean_dy - (acc_t(x[at]) - m) * rs * mean_dy_xhat));
    }
  }
}

// ---- launchers -------------------------------------------------------------------------------

// A block per channel, capped as grid_for caps (the kernels loop over the rest). The launchers
// below sit under several entry points; they take acc_t from reel::AccType, the mapping the
// dispatch binds.
unsigned channel_grid(int64_t C) { return grid_for(C * kChannelThreads, kChannelThreads); }

// T: x's type (training reads x; eval reads the running statistics alone). The statistics are
// acc_type_t<T>.
template <typename T>
void stats_launch(const Tensor& x, const Tensor& running_mean, const Tensor& running_var, bool training,
                  double momentum, double eps, const Tensor& mean, const Tensor& rstd) {
  using A = acc_type_t<T>;
  const int64_t C = mean.size(0);
  if (training) {
    launch("batch_norm_stats_kernel", batch_norm_stats_kernel<T, A>, channel_grid(C), kChannelThreads, 0, x.data<T>(),
           running_mean.defined() ? running_mean.data<A>() : nullptr,
           running_var.defined() ? running_var.data<A>() : nullptr, momentum, eps, mean.data<A>(), rstd.data<A>(),
           x.size(0), C, x.size(2));
  } else {
    launch("batch_norm_stats_eval_kernel", batch_norm_stats_eval_kernel<A>, grid_for(C, kThreads), kThreads, 0,
           running_mean.data<A>(), running_var.data<A>(), eps, mean.data<A>(), rstd.data<A>(), C);
  }
}

template <typename T>
void apply_launch(const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& mean, const Tensor& rstd,
                  const Tensor& y) {
  const int64_t total = x.numel();
  using A = acc_type_t<T>;
  launch("batch_norm_apply_kernel", batch_norm_apply_kernel<T, A>, grid_for(total, kThreads), kThreads, 0, x.data<T>(),
         w.data<T>(), b.data<T>(), mean.data<A>(), rstd.data<A>(), y.data<T>(), total, x.size(1), x.size(2));
}

template <typename T>
void backward_launch(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& mean, const Tensor& rstd,
                     bool training, const Tensor& dx, const Tensor& dw, const Tensor& db) {
  using A = acc_type_t<T>;
  launch("batch_norm_backward_kernel", batch_norm_backward_kernel<T, A>, channel_grid(x.size(1)), kChannelThreads, 0,
         dy.data<T>(), x.data<T>(), w.data<T>(), mean.data<A>(), rstd.data<A>(), training, dx.data<T>(), dw.data<T>(),
         db.data<T>(), x.size(0), x.size(1), x.size(2));
}

#if REEL_HAS_CUDNN

constexpr const char* kOp = "batch_norm";

// The data types cuDNN runs here: f32 and f64 (T is its own acc_t); bf16 and f16 run the kernels
// above (see the file's header).
template <typename T>
constexpr bool kCudnnData = std::is_same_v<T, acc_type_t<T>>;

// cuDNN takes epsilon >= CUDNN_BN_MIN_EPSILON; below it the kernels above run.
bool use_cudnn(double eps) { return eps >= CUDNN_BN_MIN_EPSILON; }

// x (N, C, S) as the NCHW tensor (N, C, S, 1), the per-channel tensors as (1, C, 1, 1), and the
// context every error names.
struct BnDescs {
  std::string ctx;
  CudnnTensorDesc x, channel;
  BnDescs(const Tensor& xs, double eps)
      : ctx(describe(xs, eps)),
        x(Shape{xs.size(0), xs.size(1), xs.size(2), 1}, xs.dtype(), kOp, ctx),
        channel(Shape{1, xs.size(1), 1, 1}, xs.dtype(), kOp, ctx) {}
  static std::string describe(const Tensor& xs, double eps) {
    return "x " + shape_str(Shape{xs.size(0), xs.size(1), xs.size(2), 1}) + " " + dtype_name(xs.dtype()) +
           " eps " + std::to_string(eps);
  }
};

// cuDNN's blend factors: of the data type (double for double data, float otherwise).
template <typename T>
struct Blend {
  T one = T(1), zero = T(0);
};

template <typename T>
void cudnn_training(const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& running_mean,
                    const Tensor& running_var, double momentum, double eps, const Tensor& y, const Tensor& mean,
                    const Tensor& rstd) {
  const BnDescs d(x, eps);
  const Blend<T> k;
  REEL_CUDNN(cudnnBatchNormalizationForwardTraining, d.ctx, cudnn_handle(), CUDNN_BATCHNORM_SPATIAL, &k.one, &k.zero,
             d.x.d, x.data<T>(), d.x.d, y.data<T>(), d.channel.d, w.data<T>(), b.data<T>(), momentum,
             running_mean.defined() ? running_mean.data<T>() : nullptr,
             running_var.defined() ? running_var.data<T>() : nullptr, eps, mean.defined() ? mean.data<T>() : nullptr,
             rstd.defined() ? rstd.data<T>() : nullptr);
}

template <typename T>
void cudnn_inference(const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& running_mean,
                     const Tensor& running_var, double eps, const Tensor& y) {
  const BnDescs d(x, eps);
  const Blend<T> k;
  REEL_CUDNN(cudnnBatchNormalizationForwardInference, d.ctx, cudnn_handle(), CUDNN_BATCHNORM_SPATIAL, &k.one,
             &k.zero, d.x.d, x.data<T>(), d.x.d, y.data<T>(), d.channel.d, w.data<T>(), b.data<T>(),
             running_mean.data<T>(), running_var.data<T>(), eps);
}

#endif  // REEL_HAS_CUDNN

template <typename T>
void forward_launch(const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& running_mean,
                    const Tensor& running_var, bool training, double momentum, double eps, const Tensor& y,
                    const Tensor& mean, const Tensor& rstd) {
#if REEL_HAS_CUDNN
  if constexpr (kCudnnData<T>) {
    if (use_cudnn(eps)) {
      if (training) {
        cudnn_training<T>(x, w, b, running_mean, running_var, momentum, eps, y, mean, rstd);
      } else {
        stats_launch<T>(x, running_mean, running_var, false, momentum, eps, mean, rstd);
        cudnn_inference<T>(x, w, b, running_mean, running_var, eps, y);
      }
      return;
    }
  }
#endif
  stats_launch<T>(x, running_mean, running_var, training, momentum, eps, mean, rstd);
  apply_launch<T>(x, w, b, mean, rstd, y);
}

template <typename T>
void replay_launch(const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& mean, const Tensor& rstd,
                   const Tensor& var, bool training, double eps, const Tensor& y) {
#if REEL_HAS_CUDNN
  if constexpr (kCudnnData<T>) {
    if (use_cudnn(eps)) {
      // The first forward's call again (see the file's header): no running statistics; the saved
      // statistics go to scratch (C) buffers, discarded, so that the call differs from the first
      // forward's in the running-stat pointers alone.
      if (training) {
        const Tensor scratch_mean = empty(mean.shape(), mean.dtype(), mean.device());
        const Tensor scratch_rstd = empty(rstd.shape(), rstd.dtype(), rstd.device());
        cudnn_training<T>(x, w, b, Tensor(), Tensor(), 0.0, eps, y, scratch_mean, scratch_rstd);
      } else {
        cudnn_inference<T>(x, w, b, mean, var, eps, y);
      }
      return;
    }
  }
#endif
  (void)var, (void)training, (void)eps;
  apply_launch<T>(x, w, b, mean, rstd, y);
}

template <typename T>
void backward_dispatch(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& mean, const Tensor& rstd,
                       bool training, double eps, const Tensor& dx, const Tensor& dw, const Tensor& db) {
#if REEL_HAS_CUDNN
  if constexpr (kCudnnData<T>) {
    if (training && use_cudnn(eps)) {
      const BnDescs d(x, eps);
      const Blend<T> k;
      REEL_CUDNN(cudnnBatchNormalizationBackward, d.ctx, cudnn_handle(), CUDNN_BATCHNORM_SPATIAL, &k.one, &k.zero,
                 &k.one, &k.zero, d.x.d, x.data<T>(), d.x.d, dy.data<T>(), d.x.d, dx.data<T>(), d.channel.d,
                 w.data<T>(), dw.data<T>(), db.data<T>(), eps, mean.data<T>(), rstd.data<T>());
      return;
    }
  }
#endif
  (void)eps;
  backward_launch<T>(dy, x, w, mean, rstd, training, dx, dw, db);
}

}  // namespace

void batch_norm_stats(const Tensor& x, const Tensor& running_mean, const Tensor& running_var, bool training,
                      double momentum, double eps, const Tensor& mean, const Tensor& rstd) {
  set_device(mean.device());
  // Training: x's dtype picks the kernel; eval reads no x, so the statistics' own dtype (f32, f64).
  if (training) {
    REEL_DISPATCH_FLOATING_AND_16(x.dtype(), "batch_norm_stats",
                                  stats_launch<scalar_t>(x, running_mean, running_var, true, momentum, eps, mean, rstd))
  } else {
    REEL_DISPATCH_FLOATING(mean.dtype(), "batch_norm_stats",
                           stats_launch<scalar_t>(x, running_mean, running_var, false, momentum, eps, mean, rstd))
  }
}

void batch_norm_apply(const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& mean, const Tensor& rstd,
                      const Tensor& y) {
  set_device(x.device());
  REEL_DISPATCH_FLOATING_AND_16(x.dtype(), "batch_norm_apply", apply_launch<scalar_t>(x, w, b, mean, rstd, y))
}

void batch_norm_forward(const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& running_mean,
                        const Tensor& running_var, bool training, double momentum, double eps, const Tensor& y,
                        const Tensor& mean, const Tensor& rstd) {
  set_device(x.device());
  REEL_DISPATCH_FLOATING_AND_16(
      x.dtype(), "batch_norm_forward",
      forward_launch<scalar_t>(x, w, b, running_mean, running_var, training, momentum, eps, y, mean, rstd))
}

void batch_norm_replay(const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& mean, const Tensor& rstd,
                       const Tensor& var, bool training, double eps, const Tensor& y) {
  set_device(x.device());
  REEL_DISPATCH_FLOATING_AND_16(x.dtype(), "batch_norm_replay",
                         replay_launch<scalar_t>(x, w, b, mean, rstd, var, training, eps, y))
}

void batch_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& mean, const Tensor& rstd,
                         bool training, double eps, const Tensor& dx, const Tensor& dw, const Tensor& db) {
  set_device(x.device());
  REEL_DISPATCH_FLOATING_AND_16(x.dtype(), "batch_norm_backward",
                         backward_dispatch<scalar_t>(dy, x, w, mean, rstd, training, eps, dx, dw, db))
}

void batch_norm_count(const Tensor& count) {
  set_device(count.device());
  launch("batch_norm_count_kernel", batch_norm_count_kernel, 1, 1, 0, count.data<int64_t>());
}

}  // namespace reel::kernels::cuda
