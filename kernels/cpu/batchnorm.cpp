// BatchNorm on the CPU: per-channel statistics, normalisation and backward, and the batch count.
//
// A channel's values are N runs of S contiguous values (x viewed as (N, C, S)), so every kernel
// that sums over a channel gives a task a block of channels (OpenMP over the blocks) that walks
// their runs in order: the sums are in double, in an order fixed by (N, S) alone, so the results
// are bit-identical run to run and for any number of threads, with no partials to combine. A
// block is one channel when the runs are long (S >= 16), 64 channels when they are short, so that
// an (N, C) activation is read row by row, 64 contiguous values at a time.
//
// Statistics: the two-pass variance (sum of (x - mean)^2), the mean summing x - x[0, c, 0] (as
// LayerNorm does): a channel far from 0 keeps its mean's low digits. The running-stat update is
// done by the same task, in double, then rounded once.
//
// Normalisation: one task per sample, y = (x - mean) * (rstd * w) + b: centring
// first keeps the accuracy of a channel far from 0 (x * scale + (b - mean * scale) would cancel).
//
// Backward: per channel block, one sweep for db = sum(dy) and dw = sum(dy * xhat) (double), then
// one sweep writing dx.
//
// The sums are double, wider than the dispatch's acc_t; the elementwise math (xhat, y, dx) runs
// in acc_t: loads convert T -> acc_t, stores acc_t -> T (no-ops for f32 and f64, where acc_t is T).
// The per-channel statistics (mean, rstd, the running ones) are acc_t: f32 for a bf16 or f16 x
// (kernels/batchnorm.h), rounded once from the double sums; dw and db are rounded once to T.
#include <algorithm>
#include <cmath>

#include "kernels/backends.h"
#include "kernels/cpu/parallel.h"

namespace reel::kernels::cpu {

namespace {

// Channels per task: a block of channels walks the rows together, so that for S = 1 ((N, C)
// activations) each row contributes a contiguous run of kBlock values instead of one value at a
// stride of C (one cache miss per value). With long runs (S >= 16) a task per channel already
// reads contiguous memory. A function of S only, never of the thread count; and a channel's sums
// run over its values in the same order (n, then k) whatever the block.
constexpr int64_t kBlock = 64;
int64_t channels_per_task(int64_t S) { return S >= 16 ? 1 : kBlock; }

// fn(c0, c1) over the channel blocks [c0, c1) of C channels, in parallel when the work pays.
template <typename F>
void for_channel_blocks(int64_t C, int64_t S, int64_t total, F&& fn) {
  const int64_t per = channels_per_task(S), tasks = (C + per - 1) / per;
  parallel_for(tasks, tasks > 1 && total >= kMinParallelElements,
               [&](int64_t t) { fn(t * per, std::min(C, (t + 1) * per)); });
}

// acc[c - c0] += sum over k of f(run[k]) for each channel c of [c0, c1) and each sample n, in the
// order n, then k: x is (N, C, S), acc (c1 - c0) doubles.
template <typename T, typename F>
void channel_sums(const T* x, int64_t N, int64_t C, int64_t S, int64_t c0, int64_t c1, double* acc, F&& f) {
  for (int64_t n = 0; n < N; ++n) {
    if (S == 1) {  // contiguous over the channels: one SIMD sweep of the row's block
      const T* row = x + n * C;
#pragma omp simd
      for (int64_t c = c0; c < c1; ++c) acc[c - c0] += f(row[c], c);
    } else {
      for (int64_t c = c0; c < c1; ++c) {
        const T* run = x + (n * C + c) * S;  // (S)
        double r = 0;
#pragma omp simd reduction(+ : r)
        for (int64_t k = 0; k < S; ++k) r += f(run[k], c);
        acc[c - c0] += r;
      }
    }
  }
}

// x: (N, C, S); mean, rstd: (C) out; running_mean, running_var: (C) in/out or null.
template <typename T, typename acc_t>
void batch_norm_stats_train(const T* x, acc_t* running_mean, acc_t* running_var, double momentum, double eps,
                            acc_t* mean, acc_t* rstd, int64_t N, int64_t C, int64_t S) {
  const double n = static_cast<double>(N * S);
  for_channel_blocks(C, S, N * C * S, [&](int64_t c0, int64_t c1) {
    double shift[kBlock], m[kBlock], acc[kBlock];
    for (int64_t c = c0; c < c1; ++c) {
      shift[c - c0] = static_cast<double>(x[c * S]);  // x[0, c, 0]
      acc[c - c0] = 0;
    }
    channel_sums(x, N, C, S, c0, c1, acc, [&](T v, int64_t c) { return static_cast<double>(v) - shift[c - c0]; });
    for (int64_t c = c0; c < c1; ++c) {
      m[c - c0] = shift[c - c0] + acc[c - c0] / n;
      acc[c - c0] = 0;
    }
    channel_sums(x, N, C, S, c0, c1, acc, [&](T v, int64_t c) {
      const double d = static_cast<double>(v) - m[c - c0];
      return d * d;
    });
    for (int64_t c = c0; c < c1; ++c) {
      const double mc = m[c - c0], var = acc[c - c0] / n;  // biased: what the batch is normalised with
      mean[c] = static_cast<acc_t>(mc);
      rstd[c] = static_cast<acc_t>(1.0 / std::sqrt(var + eps));
      if (running_mean) {
        running_mean[c] = static_cast<acc_t>((1 - momentum) * static_cast<double>(running_mean[c]) + momentum * mc);
        running_var[c] =
            static_cast<acc_t>((1 - momentum) * static_cast<double>(running_var[c]) + momentum * var * n / (n - 1));
      }
    }
  });
}

template <typename T>
void batch_norm_stats_eval(const T* running_mean, const T* running_var, double eps, T* mean, T* rstd, int64_t C) {
  for (int64_t c = 0; c < C; ++c) {
    mean[c] = running_mean[c];
    rstd[c] = static_cast<T>(1.0 / std::sqrt(static_cast<double>(running_var[c]) + eps));
  }
}

// x, y: (N, C, S); w, b, mean, rstd: (C). A task per sample (C * S contiguous values).
template <typename T, typename acc_t>
void batch_norm_apply_impl(const T* x, const T* w, const T* b, const acc_t* mean, const acc_t* rstd, T* y, int64_t N,
                           int64_t C, int64_t S) {
  parallel_for(N, N > 1 && N * C * S >= kMinParallelStreamElements, [&](int64_t n) {
    if (S == 1) {  // an (N, C) row: one SIMD sweep over the channels
      const T* xr = x + n * C;
      T* yr = y + n * C;
#pragma omp simd
      for (int64_t c = 0; c < C; ++c)
        yr[c] = static_cast<T>((acc_t(xr[c]) - acc_t(mean[c])) * (acc_t(rstd[c]) * acc_t(w[c])) + acc_t(b[c]));
      return;
    }
    for (int64_t c = 0; c < C; ++c) {
      const acc_t m = mean[c], scale = acc_t(rstd[c]) * acc_t(w[c]), shift = b[c];
      const T* xr = x + (n * C + c) * S;
      T* yr = y + (n * C + c) * S;
#pragma omp simd
      for (int64_t k = 0; k < S; ++k) yr[k] = static_cast<T>((acc_t(xr[k]) - m) * scale + shift);
    }
  });
}

// dy, x, dx: (N, C, S); w, mean, rstd, dw, db: (C).
template <typename T, typename acc_t>
void batch_norm_backward_impl(const T* dy, const T* x, const T* w, const acc_t* mean, const acc_t* rstd,
                              bool training, T* dx, T* dw, T* db, int64_t N, int64_t C, int64_t S) {
  const double n = static_cast<double>(N * S);
  for_channel_blocks(C, S, N * C * S, [&](int64_t c0, int64_t c1) {
    double sum_dy[kBlock], sum_dy_xhat[kBlock];
    for (int64_t c = c0; c < c1; ++c) sum_dy[c - c0] = sum_dy_xhat[c - c0] = 0;
    // One sweep for both sums: the (n, c, k) element of dy beside the same one of x.
    for (int64_t i = 0; i < N; ++i) {
      if (S == 1) {  // contiguous over the channels
        const T* dyr = dy + i * C;
        const T* xr = x + i * C;
#pragma omp simd
        for (int64_t c = c0; c < c1; ++c) {
          sum_dy[c - c0] += static_cast<double>(dyr[c]);
          sum_dy_xhat[c - c0] +=
              static_cast<double>(dyr[c]) * static_cast<double>((acc_t(xr[c]) - acc_t(mean[c])) * acc_t(rstd[c]));
        }
        continue;
      }
      for (int64_t c = c0; c < c1; ++c) {
        const acc_t m = mean[c], rs = rstd[c];
        const T* dyr = dy + (i * C + c) * S;  // (S)
        const T* xr = x + (i * C + c) * S;
        double a = 0, r = 0;
#pragma omp simd reduction(+ : a, r)
        for (int64_t k = 0; k < S; ++k) {
          a += static_cast<double>(dyr[k]);
          r += static_cast<double>(dyr[k]) * static_cast<double>((acc_t(xr[k]) - m) * rs);
        }
        sum_dy[c - c0] += a;
        sum_dy_xhat[c - c0] += r;
      }
    }
    acc_t scale[kBlock], mean_dy[kBlock], mean_dy_xhat[kBlock];
    for (int64_t c = c0; c < c1; ++c) {
      db[c] = static_cast<T>(sum_dy[c - c0]);
      dw[c] = static_cast<T>(sum_dy_xhat[c - c0]);
      scale[c - c0] = acc_t(w[c]) * acc_t(rstd[c]);
      // Eval: the statistics are constants, so neither mean term appears.
      mean_dy[c - c0] = training ? static_cast<acc_t>(sum_dy[c - c0] / n) : acc_t(0);
      mean_dy_xhat[c - c0] = training ? static_cast<acc_t>(sum_dy_xhat[c - c0] / n) : acc_t(0);
    }
    for (int64_t i = 0; i < N; ++i) {
      if (S == 1) {
        const T* dyr = dy + i * C;
        const T* xr = x + i * C;
        T* dxr = dx + i * C;
#pragma omp simd
        for (int64_t c = c0; c < c1; ++c)
          dxr[c] = static_cast<T>(scale[c - c0] * (acc_t(dyr[c]) - mean_dy[c - c0] -
                                                   (acc_t(xr[c]) - acc_t(mean[c])) * acc_t(rstd[c]) * mean_dy_xhat[c - c0]));
        continue;
      }
      for (int64_t c = c0; c < c1; ++c) {
        const acc_t m = mean[c], rs = rstd[c], sc = scale[c - c0], a = mean_dy[c - c0], cc = mean_dy_xhat[c - c0];
        const T* dyr = dy + (i * C + c) * S;
        const T* xr = x + (i * C + c) * S;
        T* dxr = dx + (i * C + c) * S;
#pragma omp simd
        for (int64_t k = 0; k < S; ++k) dxr[k] = static_cast<T>(sc * (acc_t(dyr[k]) - a - (acc_t(xr[k]) - m) * rs * cc));
      }
    }
  });
}

}  // namespace

// ---- launchers ----------------------------------------------------------------------------------

// Training reads x (its dtype picks the kernel; the statistics are its acc_t); eval reads the
// running statistics alone (x undefined), of the statistics' dtype: f32 or f64.
void batch_norm_stats(const Tensor& x, const Tensor& running_mean, const Tensor& running_var, bool training,
                      double momentum, double eps, const Tensor& mean, const Tensor& rstd) {
  const int64_t C = mean.size(0);
  if (training) {
    REEL_DISPATCH_FLOATING_AND_16(x.dtype(), "batch_norm_stats",
                                  batch_norm_stats_train<scalar_t, acc_t>(
                                      x.data<scalar_t>(), running_mean.defined() ? running_mean.data<acc_t>() : nullptr,
                                      running_var.defined() ? running_var.data<acc_t>() : nullptr, momentum, eps,
                                      mean.data<acc_t>(), rstd.data<acc_t>(), x.size(0), C, x.size(2)))
  } else {
    REEL_DISPATCH_FLOATING(mean.dtype(), "batch_norm_stats",
                           batch_norm_stats_eval<scalar_t>(running_mean.data<scalar_t>(), running_var.data<scalar_t>(),
                                                           eps, mean.data<scalar_t>(), rstd.data<scalar_t>(), C))
  }
}

void batch_norm_apply(const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& mean, const Tensor& rstd,
                      const Tensor& y) {
  REEL_DISPATCH_FLOATING_AND_16(x.dtype(), "batch_norm_apply",
                                batch_norm_apply_impl<scalar_t, acc_t>(x.data<scalar_t>(), w.data<scalar_t>(),
                                                                       b.data<scalar_t>(), mean.data<acc_t>(),
                                                                       rstd.data<acc_t>(), y.data<scalar_t>(),
                                                                       x.size(0), x.size(1), x.size(2)))
}

// The fused forward is the two kernels in turn (the same bits as batch_norm_stats then
// batch_norm_apply); a replay is the apply kernel alone, with the first forward's statistics: the
// same bits as that forward's y, and no statistic computed again.
void batch_norm_forward(const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& running_mean,
                        const Tensor& running_var, bool training, double momentum, double eps, const Tensor& y,
                        const Tensor& mean, const Tensor& rstd) {
  batch_norm_stats(training ? x : Tensor(), running_mean, running_var, training, momentum, eps, mean, rstd);
  batch_norm_apply(x, w, b, mean, rstd, y);
}

void batch_norm_replay(const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& mean, const Tensor& rstd,
                       const Tensor& /*var*/, bool /*training*/, double /*eps*/, const Tensor& y) {
  batch_norm_apply(x, w, b, mean, rstd, y);
}

void batch_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& mean, const Tensor& rstd,
                         bool training, double /*eps*/, const Tensor& dx, const Tensor& dw, const Tensor& db) {
  REEL_DISPATCH_FLOATING_AND_16(x.dtype(), "batch_norm_backward",
                                batch_norm_backward_impl<scalar_t, acc_t>(
                                    dy.data<scalar_t>(), x.data<scalar_t>(), w.data<scalar_t>(), mean.data<acc_t>(),
                                    rstd.data<acc_t>(), training, dx.data<scalar_t>(), dw.data<scalar_t>(),
                                    db.data<scalar_t>(), x.size(0), x.size(1), x.size(2)))
}

// num_batches_tracked += 1: the same operation as the cuda kernel (no host copy of the count).
void batch_norm_count(const Tensor& count) { *count.data<int64_t>() += 1; }

}  // namespace reel::kernels::cpu
