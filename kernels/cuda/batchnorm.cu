// kernels/cuda/batchnorm.cu: BatchNorm's per-channel statistics, normalisation and backward.
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
//
// One block per channel leaves a GPU half idle when C is small and N * S large (a CNN's first
// layers): a split of each channel over several blocks with partials added in order would fill it.
#include <cmath>

#include "kernels/backends.h"
#include "kernels/cuda/block_reduce.h"
#include "kernels/cuda/launch.h"

namespace reel::kernels::cuda {

namespace {

constexpr int kChannelThreads = 256;

// ---- kernels ---------------------------------------------------------------------------------

// Block per channel c. x: (N, C, S); mean, rstd: (C) out; running_mean, running_var: (C) in/out,
// or null.
template <typename T>
__global__ void batch_norm_stats_kernel(const T* x, T* running_mean, T* running_var, double momentum, double eps,
                                        T* mean, T* rstd, int64_t N, int64_t C, int64_t S) {
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
      mean[c] = static_cast<T>(m);
      rstd[c] = static_cast<T>(1.0 / sqrt(var + eps));
      if (running_mean) {
        running_mean[c] = static_cast<T>((1 - momentum) * static_cast<double>(running_mean[c]) + momentum * m);
        running_var[c] =
            static_cast<T>((1 - momentum) * static_cast<double>(running_var[c]) + momentum * var * n / (n - 1));
      }
    }
  }
}

// Thread per channel: mean, rstd (C) from running_mean, running_var (C).
template <typename T>
__global__ void batch_norm_stats_eval_kernel(const T* running_mean, const T* running_var, double eps, T* mean,
                                             T* rstd, int64_t C) {
  using std::sqrt;
  for (int64_t c = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; c < C; c += int64_t{blockDim.x} * gridDim.x) {
    mean[c] = running_mean[c];
    rstd[c] = static_cast<T>(1.0 / sqrt(static_cast<double>(running_var[c]) + eps));
  }
}

// Grid-stride over the elements. x, y: (N, C, S); w, b, mean, rstd: (C).
template <typename T>
__global__ void batch_norm_apply_kernel(const T* x, const T* w, const T* b, const T* mean, const T* rstd, T* y,
                                        int64_t total, int64_t C, int64_t S) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total; i += int64_t{blockDim.x} * gridDim.x) {
    const int64_t c = i / S % C;
    y[i] = (x[i] - mean[c]) * (rstd[c] * w[c]) + b[c];
  }
}

// Block per channel c. dy, x, dx: (N, C, S); w, mean, rstd, dw, db: (C).
template <typename T>
__global__ void batch_norm_backward_kernel(const T* dy, const T* x, const T* w, const T* mean, const T* rstd,
                                           bool training, T* dx, T* dw, T* db, int64_t N, int64_t C, int64_t S) {
  __shared__ double scratch[32];
  const int64_t M = N * S;
  const double n = static_cast<double>(M);
  for (int64_t c = blockIdx.x; c < C; c += gridDim.x) {  // uniform over the block
    const T m = mean[c], rs = rstd[c];
    double sum_dy = 0, sum_dy_xhat = 0;
    for (int64_t i = threadIdx.x; i < M; i += blockDim.x) {
      const int64_t at = (i / S * C + c) * S + i % S;
      sum_dy += static_cast<double>(dy[at]);
      sum_dy_xhat += static_cast<double>(dy[at]) * static_cast<double>((x[at] - m) * rs);
    }
    sum_dy = block_reduce(sum_dy, SumOp{}, scratch);
    sum_dy_xhat = block_reduce(sum_dy_xhat, SumOp{}, scratch);
    if (threadIdx.x == 0) {
      db[c] = static_cast<T>(sum_dy);
      dw[c] = static_cast<T>(sum_dy_xhat);
    }
    const T scale = w[c] * rs;
    // Eval: the statistics are constants, so neither mean term appears.
    const T mean_dy = training ? static_cast<T>(sum_dy / n) : T(0);
    const T mean_dy_xhat = training ? static_cast<T>(sum_dy_xhat / n) : T(0);
    for (int64_t i = threadIdx.x; i < M; i += blockDim.x) {
      const int64_t at = (i / S * C + c) * S + i % S;
      dx[at] = scale * (dy[at] - mean_dy - (x[at] - m) * rs * mean_dy_xhat);
    }
  }
}

// ---- launchers -------------------------------------------------------------------------------

// A block per channel, capped as grid_for caps (the kernels loop over the rest).
unsigned channel_grid(int64_t C) { return grid_for(C * kChannelThreads, kChannelThreads); }

template <typename T>
void stats_launch(const Tensor& x, const Tensor& running_mean, const Tensor& running_var, bool training,
                  double momentum, double eps, const Tensor& mean, const Tensor& rstd) {
  const int64_t C = mean.size(0);
  if (training) {
    launch("batch_norm_stats_kernel", batch_norm_stats_kernel<T>, channel_grid(C), kChannelThreads, 0, x.data<T>(),
           running_mean.defined() ? running_mean.data<T>() : nullptr,
           running_var.defined() ? running_var.data<T>() : nullptr, momentum, eps, mean.data<T>(), rstd.data<T>(),
           x.size(0), C, x.size(2));
  } else {
    launch("batch_norm_stats_eval_kernel", batch_norm_stats_eval_kernel<T>, grid_for(C, kThreads), kThreads, 0,
           running_mean.data<T>(), running_var.data<T>(), eps, mean.data<T>(), rstd.data<T>(), C);
  }
}

}  // namespace

void batch_norm_stats(const Tensor& x, const Tensor& running_mean, const Tensor& running_var, bool training,
                      double momentum, double eps, const Tensor& mean, const Tensor& rstd) {
  set_device(mean.device());
  REEL_DISPATCH_FLOATING(mean.dtype(), "batch_norm_stats",
                         stats_launch<scalar_t>(x, running_mean, running_var, training, momentum, eps, mean, rstd))
}

void batch_norm_apply(const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& mean, const Tensor& rstd,
                      const Tensor& y) {
  set_device(x.device());
  const int64_t total = x.numel();
  REEL_DISPATCH_FLOATING(x.dtype(), "batch_norm_apply",
                         launch("batch_norm_apply_kernel", batch_norm_apply_kernel<scalar_t>,
                                grid_for(total, kThreads), kThreads, 0, x.data<scalar_t>(), w.data<scalar_t>(),
                                b.data<scalar_t>(), mean.data<scalar_t>(), rstd.data<scalar_t>(), y.data<scalar_t>(),
                                total, x.size(1), x.size(2)))
}

void batch_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& mean, const Tensor& rstd,
                         bool training, const Tensor& dx, const Tensor& dw, const Tensor& db) {
  set_device(x.device());
  REEL_DISPATCH_FLOATING(x.dtype(), "batch_norm_backward",
                         launch("batch_norm_backward_kernel", batch_norm_backward_kernel<scalar_t>,
                                channel_grid(x.size(1)), kChannelThreads, 0, dy.data<scalar_t>(), x.data<scalar_t>(),
                                w.data<scalar_t>(), mean.data<scalar_t>(), rstd.data<scalar_t>(), training,
                                dx.data<scalar_t>(), dw.data<scalar_t>(), db.data<scalar_t>(), x.size(0), x.size(1),
                                x.size(2)))
}

}  // namespace reel::kernels::cuda
