// BatchNorm on the CPU: per-channel statistics, normalisation and backward.
//
// A channel's values are N runs of S contiguous values (x viewed as (N, C, S)), so every kernel
// that sums over a channel is one task per channel (OpenMP over channels) that walks its runs in
// order: the sums are in double, in an order fixed by (N, S) alone, so the results are
// bit-identical run to run and for any number of threads, with no partials to combine.
//
// Statistics: the two-pass variance (sum of (x - mean)^2), the mean summing x - x[0, c, 0] (as
// LayerNorm does): a channel far from 0 keeps its mean's low digits. The running-stat update is
// done by the same task, in double, then rounded once.
//
// Normalisation: one task per (sample, channel) run, y = (x - mean) * (rstd * w) + b: centring
// first keeps the accuracy of a channel far from 0 (x * scale + (b - mean * scale) would cancel).
//
// Backward: per channel, one sweep for db = sum(dy) and dw = sum(dy * xhat) (double), then one
// sweep writing dx.
#include <cmath>

#include "kernels/backends.h"
#include "kernels/cpu/parallel.h"

namespace reel::kernels::cpu {

namespace {

// x: (N, C, S); mean, rstd: (C) out; running_mean, running_var: (C) in/out or null.
template <typename T>
void batch_norm_stats_train(const T* x, T* running_mean, T* running_var, double momentum, double eps, T* mean,
                            T* rstd, int64_t N, int64_t C, int64_t S) {
  const double n = static_cast<double>(N * S);
  parallel_for(C, C > 1 && N * C * S >= kMinParallelElements, [&](int64_t c) {
    const double shift = static_cast<double>(x[c * S]);
    double s = 0;
    for (int64_t i = 0; i < N; ++i) {
      const T* run = x + (i * C + c) * S;  // (S)
      double rs = 0;
#pragma omp simd reduction(+ : rs)
      for (int64_t k = 0; k < S; ++k) rs += static_cast<double>(run[k]) - shift;
      s += rs;
    }
    const double m = shift + s / n;
    double v = 0;
    for (int64_t i = 0; i < N; ++i) {
      const T* run = x + (i * C + c) * S;
      double rv = 0;
#pragma omp simd reduction(+ : rv)
      for (int64_t k = 0; k < S; ++k) rv += (static_cast<double>(run[k]) - m) * (static_cast<double>(run[k]) - m);
      v += rv;
    }
    const double var = v / n;  // biased: what the batch is normalised with
    mean[c] = static_cast<T>(m);
    rstd[c] = static_cast<T>(1.0 / std::sqrt(var + eps));
    if (running_mean) {
      running_mean[c] = static_cast<T>((1 - momentum) * static_cast<double>(running_mean[c]) + momentum * m);
      running_var[c] =
          static_cast<T>((1 - momentum) * static_cast<double>(running_var[c]) + momentum * var * n / (n - 1));
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

// x, y: (N, C, S); w, b, mean, rstd: (C).
template <typename T>
void batch_norm_apply_impl(const T* x, const T* w, const T* b, const T* mean, const T* rstd, T* y, int64_t N,
                           int64_t C, int64_t S) {
  parallel_for(N * C, N * C > 1 && N * C * S >= kMinParallelStreamElements, [&](int64_t nc) {
    const int64_t c = nc % C;
    const T m = mean[c], scale = rstd[c] * w[c], shift = b[c];
    const T* xr = x + nc * S;
    T* yr = y + nc * S;
#pragma omp simd
    for (int64_t k = 0; k < S; ++k) yr[k] = (xr[k] - m) * scale + shift;
  });
}

// dy, x, dx: (N, C, S); w, mean, rstd, dw, db: (C).
template <typename T>
void batch_norm_backward_impl(const T* dy, const T* x, const T* w, const T* mean, const T* rstd, bool training,
                              T* dx, T* dw, T* db, int64_t N, int64_t C, int64_t S) {
  const double n = static_cast<double>(N * S);
  parallel_for(C, C > 1 && N * C * S >= kMinParallelElements, [&](int64_t c) {
    const T m = mean[c], rs = rstd[c];
    double sum_dy = 0, sum_dy_xhat = 0;
    for (int64_t i = 0; i < N; ++i) {
      const T* dyr = dy + (i * C + c) * S;  // (S)
      const T* xr = x + (i * C + c) * S;
      double a = 0, bsum = 0;
#pragma omp simd reduction(+ : a, bsum)
      for (int64_t k = 0; k < S; ++k) {
        a += static_cast<double>(dyr[k]);
        bsum += static_cast<double>(dyr[k]) * static_cast<double>((xr[k] - m) * rs);
      }
      sum_dy += a;
      sum_dy_xhat += bsum;
    }
    db[c] = static_cast<T>(sum_dy);
    dw[c] = static_cast<T>(sum_dy_xhat);
    const T scale = w[c] * rs;
    // Eval: the statistics are constants, so neither mean term appears.
    const T mean_dy = training ? static_cast<T>(sum_dy / n) : T(0);
    const T mean_dy_xhat = training ? static_cast<T>(sum_dy_xhat / n) : T(0);
    for (int64_t i = 0; i < N; ++i) {
      const T* dyr = dy + (i * C + c) * S;
      const T* xr = x + (i * C + c) * S;
      T* dxr = dx + (i * C + c) * S;
#pragma omp simd
      for (int64_t k = 0; k < S; ++k) dxr[k] = scale * (dyr[k] - mean_dy - (xr[k] - m) * rs * mean_dy_xhat);
    }
  });
}

}  // namespace

// ---- launchers ----------------------------------------------------------------------------------

void batch_norm_stats(const Tensor& x, const Tensor& running_mean, const Tensor& running_var, bool training,
                      double momentum, double eps, const Tensor& mean, const Tensor& rstd) {
  const int64_t C = mean.size(0);
  REEL_DISPATCH_FLOATING(mean.dtype(), "batch_norm_stats", {
    if (training)
      batch_norm_stats_train<scalar_t>(
          x.data<scalar_t>(), running_mean.defined() ? running_mean.data<scalar_t>() : nullptr,
          running_var.defined() ? running_var.data<scalar_t>() : nullptr, momentum, eps, mean.data<scalar_t>(),
          rstd.data<scalar_t>(), x.size(0), C, x.size(2));
    else
      batch_norm_stats_eval<scalar_t>(running_mean.data<scalar_t>(), running_var.data<scalar_t>(), eps,
                                      mean.data<scalar_t>(), rstd.data<scalar_t>(), C);
  })
}

void batch_norm_apply(const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& mean, const Tensor& rstd,
                      const Tensor& y) {
  REEL_DISPATCH_FLOATING(x.dtype(), "batch_norm_apply",
                         batch_norm_apply_impl<scalar_t>(x.data<scalar_t>(), w.data<scalar_t>(), b.data<scalar_t>(),
                                                         mean.data<scalar_t>(), rstd.data<scalar_t>(),
                                                         y.data<scalar_t>(), x.size(0), x.size(1), x.size(2)))
}

void batch_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& mean, const Tensor& rstd,
                         bool training, const Tensor& dx, const Tensor& dw, const Tensor& db) {
  REEL_DISPATCH_FLOATING(x.dtype(), "batch_norm_backward",
                         batch_norm_backward_impl<scalar_t>(dy.data<scalar_t>(), x.data<scalar_t>(),
                                                            w.data<scalar_t>(), mean.data<scalar_t>(),
                                                            rstd.data<scalar_t>(), training, dx.data<scalar_t>(),
                                                            dw.data<scalar_t>(), db.data<scalar_t>(), x.size(0),
                                                            x.size(1), x.size(2)))
}

}  // namespace reel::kernels::cpu
