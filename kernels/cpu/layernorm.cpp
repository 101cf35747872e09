// LayerNorm and RMSNorm over the last dim, forward and backward, on the CPU.
//
// Forward: one task per row (OpenMP over rows); the row (C = 768 floats = 3 KB) stays in L1
// while it is swept three times (mean, variance, normalise), so memory sees one read of x and one
// write of y. The variance is the two-pass one (sum of (x - mean)^2): the one-pass
// E[x^2] - E[x]^2 cancels catastrophically when |mean| >> std. Row sums run in the dispatch's
// acc_t (f32 for f32, f64 for f64, f32 for a 16-bit type), spread over the SIMD lanes (16 partial
// sums for f32, so each lane adds C/16 terms): widening every element to double made the f32
// kernel compute-bound at half the memory speed. The mean sums x - x[0], so a row far from 0
// (mean 1000, std 1) keeps the mean's low digits. All the elementwise math runs in acc_t too:
// loads convert T -> acc_t, stores acc_t -> T (no-ops for f32 and f64). The saved mean and rstd are
// acc_t (f32 for bf16 and f16 x: kernels/layernorm.h), never rounded to 16 bits.
//
// Backward fuses dx with the weight/bias gradients: per row, one sweep for the two row sums
//   dxhat = dy * w,  a = mean(dxhat),  c = mean(dxhat * xhat)
// then one sweep that writes dx = rstd * (dxhat - a - xhat * c) and adds dy * xhat and dy into
// dw/db partials. Determinism without atomics: rows are cut into fixed chunks (their size
// depends on R only, never on the thread count); a chunk adds its rows, in order, into a (C)
// accumulator in acc_t that is flushed into the chunk's double partial every kFlush
// rows (so f32 never sums more than kFlush terms); the final dw/db add the chunks' partials in
// chunk order. The result is bit-identical run to run and for any number of threads.
//
// GroupNorm: the same sweeps with a (sample, group) in place of a row: its M = C/G * S values are
// contiguous, so the statistics are LayerNorm's over M, and the per-channel affine walks the run
// channel by channel. dw/db: each (sample, group) task sums its channels over the positions into
// (N, C) double partials, which are then added over the samples in order: deterministic too.
#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

#include "kernels/backends.h"
#include "kernels/cpu/parallel.h"

namespace reel::kernels::cpu {

namespace {

constexpr int64_t kFlush = 16;             // rows summed in acc_t before a flush to double

// Rows per dw/db partial: at most ~64 partials (so the final sum stays cheap and the partials
// (64, C) doubles fit in L2) and at least 32 rows each. Never a function of the thread count.
int64_t rows_per_chunk(int64_t R) { return std::max<int64_t>(32, (R + 63) / 64); }

// The mean of x's n values and 1 / sqrt(var + eps), var the biased two-pass variance. It sums
// x - x[0], not x: values far from 0 (mean 1000, std 1) would otherwise lose the mean's low digits
// to the rounding of large partial sums.
template <typename acc_t, typename T>
std::pair<acc_t, acc_t> mean_rstd(const T* x, int64_t n, double eps) {
  const acc_t shift = x[0];
  acc_t s = 0;
#pragma omp simd reduction(+ : s)
  for (int64_t i = 0; i < n; ++i) s += acc_t(x[i]) - shift;
  const acc_t m = shift + s / static_cast<acc_t>(n);
  acc_t var = 0;
#pragma omp simd reduction(+ : var)
  for (int64_t i = 0; i < n; ++i) var += (acc_t(x[i]) - m) * (acc_t(x[i]) - m);
  return {m, static_cast<acc_t>(1.0 / std::sqrt(static_cast<double>(var) / static_cast<double>(n) + eps))};
}

template <typename T, typename acc_t>
void layernorm_forward_impl(const T* x, const T* w, const T* b, double eps, T* y, acc_t* mean, acc_t* rstd, int64_t R,
                            int64_t C) {
  parallel_for(R, R > 1 && R * C >= kMinParallelElements, [&](int64_t r) {
    const T* xr = x + r * C;  // (C)
    T* yr = y + r * C;        // (C)
    const std::pair<acc_t, acc_t> stats = mean_rstd<acc_t>(xr, C, eps);
    const acc_t m = stats.first, rs = stats.second;
#pragma omp simd
    for (int64_t c = 0; c < C; ++c) yr[c] = static_cast<T>((acc_t(xr[c]) - m) * rs * acc_t(w[c]) + acc_t(b[c]));
    mean[r] = m;
    rstd[r] = rs;
  });
}

// Shared by LayerNorm (xhat = (x - mean) * rstd, has db) and RMSNorm (xhat = x * rstd).
template <typename T, typename acc_t, bool kLayerNorm>
void norm_backward_impl(const T* dy, const T* x, const T* w, const acc_t* mean, const acc_t* rstd, T* dx, T* dw, T* db,
                        int64_t R, int64_t C) {
  const int64_t rows = rows_per_chunk(R);
  const int64_t chunks = (R + rows - 1) / rows;
  // (chunks, C) double partial sums of dy * xhat and of dy, one slice per chunk. Scratch from the
  // caching allocator, not std::vector: 2 x 384 KB at GPT-2 sizes is above malloc's mmap
  // threshold, and fresh pages every call (page faults + kernel zeroing) cost more than the sweep.
  const Tensor scratch = empty({kLayerNorm ? 2 : 1, chunks, C}, DType::f64);
  double* part_dw = scratch.data<double>();
  double* part_db = kLayerNorm ? part_dw + chunks * C : nullptr;
  const acc_t inv_c = acc_t(1) / static_cast<acc_t>(C);

#pragma omp parallel if (chunks > 1 && R * C >= kMinParallelElements)
  {
    std::vector<acc_t> acc_dw(static_cast<size_t>(C)), acc_db(kLayerNorm ? static_cast<size_t>(C) : 0);  // per thread
    acc_t* adw = acc_dw.data();
    acc_t* adb = acc_db.data();
#pragma omp for schedule(static)
    for (int64_t k = 0; k < chunks; ++k) {
      double* pdw = part_dw + k * C;
      double* pdb = kLayerNorm ? part_db + k * C : nullptr;
      bool first_flush = true;  // the first flush stores, so the partials need no zeroing
      std::fill(acc_dw.begin(), acc_dw.end(), acc_t(0));
      std::fill(acc_db.begin(), acc_db.end(), acc_t(0));
      const int64_t r0 = k * rows, r_end = std::min(R, r0 + rows);
      for (int64_t r = r0; r < r_end; ++r) {
        const T* dyr = dy + r * C;
        const T* xr = x + r * C;
        T* dxr = dx + r * C;
        const acc_t m = kLayerNorm ? acc_t(mean[r]) : acc_t(0);
        const acc_t rs = rstd[r];
        acc_t sum_dxhat = 0, sum_dxhat_xhat = 0;
#pragma omp simd reduction(+ : sum_dxhat, sum_dxhat_xhat)
        for (int64_t c = 0; c < C; ++c) {
          const acc_t dxhat = acc_t(dyr[c]) * acc_t(w[c]);
          sum_dxhat += dxhat;
          sum_dxhat_xhat += dxhat * ((acc_t(xr[c]) - m) * rs);
        }
        // RMSNorm has no mean to subtract, so no mean(dxhat) term.
        const acc_t a = kLayerNorm ? sum_dxhat * inv_c : acc_t(0);
        const acc_t cc = sum_dxhat_xhat * inv_c;
#pragma omp simd
        for (int64_t c = 0; c < C; ++c) {
          const acc_t xhat = (acc_t(xr[c]) - m) * rs;
          dxr[c] = static_cast<T>(rs * (acc_t(dyr[c]) * acc_t(w[c]) - a - xhat * cc));
          adw[c] += acc_t(dyr[c]) * xhat;
          if constexpr (kLayerNorm) adb[c] += acc_t(dyr[c]);
        }
        if ((r - r0) % kFlush == kFlush - 1 || r == r_end - 1) {  // fixed by r: deterministic
          if (first_flush) {  // (uninitialised memory may hold NaN: store, never 0 * old + new)
            std::copy(adw, adw + C, pdw);
            if constexpr (kLayerNorm) std::copy(adb, adb + C, pdb);
          } else {
#pragma omp simd
            for (int64_t c = 0; c < C; ++c) {
              pdw[c] += adw[c];
              if constexpr (kLayerNorm) pdb[c] += adb[c];
            }
          }
          first_flush = false;
          std::fill(adw, adw + C, acc_t(0));
          if constexpr (kLayerNorm) std::fill(adb, adb + C, acc_t(0));
        }
      }
    }
  }
  // Sum the partials in chunk order (the same order for every column and any thread count),
  // streaming whole partial rows: a column walk down the (chunks, C) partials would stride by
  // C doubles and thrash L1.
  std::vector<double> sum_dw(static_cast<size_t>(C), 0.0), sum_db(kLayerNorm ? static_cast<size_t>(C) : 0, 0.0);
  for (int64_t k = 0; k < chunks; ++k) {
    const double* pdw = part_dw + k * C;
#pragma omp simd
    for (int64_t c = 0; c < C; ++c) sum_dw[static_cast<size_t>(c)] += pdw[c];
    if constexpr (kLayerNorm) {
      const double* pdb = part_db + k * C;
#pragma omp simd
      for (int64_t c = 0; c < C; ++c) sum_db[static_cast<size_t>(c)] += pdb[c];
    }
  }
  for (int64_t c = 0; c < C; ++c) {
    dw[c] = static_cast<T>(sum_dw[static_cast<size_t>(c)]);
    if constexpr (kLayerNorm) db[c] = static_cast<T>(sum_db[static_cast<size_t>(c)]);
  }
}

// The sum of squares is double, wider than acc_t.
template <typename T, typename acc_t>
void rmsnorm_forward_impl(const T* x, const T* w, double eps, T* y, acc_t* rstd, int64_t R, int64_t C) {
  parallel_for(R, R > 1 && R * C >= kMinParallelElements, [&](int64_t r) {
    const T* xr = x + r * C;
    T* yr = y + r * C;
    double ss = 0;
#pragma omp simd reduction(+ : ss)
    for (int64_t c = 0; c < C; ++c) ss += static_cast<double>(xr[c]) * static_cast<double>(xr[c]);
    const acc_t rt = static_cast<acc_t>(1.0 / std::sqrt(ss / static_cast<double>(C) + eps));
#pragma omp simd
    for (int64_t c = 0; c < C; ++c) yr[c] = static_cast<T>(acc_t(xr[c]) * rt * acc_t(w[c]));
    rstd[r] = rt;
  });
}

// x, y: (N, C, S); w, b: (C); mean, rstd: (N, G). One task per (sample, group).
template <typename T, typename acc_t>
void group_norm_forward_impl(const T* x, const T* w, const T* b, double eps, T* y, acc_t* mean, acc_t* rstd, int64_t N,
                             int64_t C, int64_t S, int64_t G) {
  const int64_t Cg = C / G, M = Cg * S;
  parallel_for(N * G, N * G > 1 && N * C * S >= kMinParallelElements, [&](int64_t ng) {
    const T* xr = x + ng * M;  // (Cg, S): the group's channels, contiguous
    T* yr = y + ng * M;
    const std::pair<acc_t, acc_t> stats = mean_rstd<acc_t>(xr, M, eps);
    const acc_t m = stats.first, rs = stats.second;
    const int64_t c0 = (ng % G) * Cg;
    for (int64_t ci = 0; ci < Cg; ++ci) {
      const acc_t scale = rs * acc_t(w[c0 + ci]), shift_c = acc_t(b[c0 + ci]) - m * scale;
#pragma omp simd
      for (int64_t i = ci * S; i < (ci + 1) * S; ++i) yr[i] = static_cast<T>(acc_t(xr[i]) * scale + shift_c);
    }
    mean[ng] = m;
    rstd[ng] = rs;
  });
}

// dy, x, dx: (N, C, S); w: (C); mean, rstd: (N, G); dw, db: (C).
template <typename T, typename acc_t>
void group_norm_backward_impl(const T* dy, const T* x, const T* w, const acc_t* mean, const acc_t* rstd, T* dx, T* dw,
                              T* db, int64_t N, int64_t C, int64_t S, int64_t G) {
  const int64_t Cg = C / G, M = Cg * S;
  // (2, N, C) double: per sample and channel, the sums over positions of dy * xhat and of dy.
  const Tensor scratch = empty({2, N, C}, DType::f64);
  double* part_dw = scratch.data<double>();
  double* part_db = part_dw + N * C;
  const acc_t inv_m = acc_t(1) / static_cast<acc_t>(M);
  parallel_for(N * G, N * G > 1 && N * C * S >= kMinParallelElements, [&](int64_t ng) {
    const T* dyr = dy + ng * M;
    const T* xr = x + ng * M;
    T* dxr = dx + ng * M;
    const int64_t c0 = (ng % G) * Cg;
    const acc_t m = mean[ng], rs = rstd[ng];
    acc_t sum_dxhat = 0, sum_dxhat_xhat = 0;
    for (int64_t ci = 0; ci < Cg; ++ci) {
      const acc_t wc = w[c0 + ci];
      double acc_dw = 0, acc_db = 0;  // this channel's sums over the positions (double: wider than acc_t)
#pragma omp simd reduction(+ : sum_dxhat, sum_dxhat_xhat, acc_dw, acc_db)
      for (int64_t i = ci * S; i < (ci + 1) * S; ++i) {
        const acc_t g = dyr[i], xhat = (acc_t(xr[i]) - m) * rs;
        sum_dxhat += g * wc;
        sum_dxhat_xhat += g * wc * xhat;
        acc_dw += static_cast<double>(g * xhat);
        acc_db += static_cast<double>(g);
      }
      part_dw[ng / G * C + c0 + ci] = acc_dw;
      part_db[ng / G * C + c0 + ci] = acc_db;
    }
    const acc_t a = sum_dxhat * inv_m, cc = sum_dxhat_xhat * inv_m;
    for (int64_t ci = 0; ci < Cg; ++ci) {
      const acc_t wc = w[c0 + ci];
#pragma omp simd
      for (int64_t i = ci * S; i < (ci + 1) * S; ++i)
        dxr[i] = static_cast<T>(rs * (acc_t(dyr[i]) * wc - a - (acc_t(xr[i]) - m) * rs * cc));
    }
  });
  for (int64_t c = 0; c < C; ++c) {  // samples in order: the same bits for any thread count
    double sw = 0, sb = 0;
    for (int64_t n = 0; n < N; ++n) {
      sw += part_dw[n * C + c];
      sb += part_db[n * C + c];
    }
    dw[c] = static_cast<T>(sw);
    db[c] = static_cast<T>(sb);
  }
}

}  // namespace

// ---- launchers ----------------------------------------------------------------------------------

void layernorm_forward(const Tensor& x, const Tensor& w, const Tensor& b, double eps, const Tensor& y,
                       const Tensor& mean, const Tensor& rstd) {
  const int64_t R = x.size(0), C = x.size(1);
  REEL_DISPATCH_FLOATING_AND_16(x.dtype(), "layernorm_forward",
                         layernorm_forward_impl<scalar_t, acc_t>(x.data<scalar_t>(), w.data<scalar_t>(), b.data<scalar_t>(),
                                                          eps, y.data<scalar_t>(), mean.data<acc_t>(),
                                                          rstd.data<acc_t>(), R, C))
}

void layernorm_backward(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& mean, const Tensor& rstd,
                        const Tensor& dx, const Tensor& dw, const Tensor& db) {
  const int64_t R = x.size(0), C = x.size(1);
  REEL_DISPATCH_FLOATING_AND_16(x.dtype(), "layernorm_backward",
                         norm_backward_impl<scalar_t, acc_t, true>(dy.data<scalar_t>(), x.data<scalar_t>(), w.data<scalar_t>(),
                                                            mean.data<acc_t>(), rstd.data<acc_t>(),
                                                            dx.data<scalar_t>(), dw.data<scalar_t>(),
                                                            db.data<scalar_t>(), R, C))
}

void rmsnorm_forward(const Tensor& x, const Tensor& w, double eps, const Tensor& y, const Tensor& rstd) {
  const int64_t R = x.size(0), C = x.size(1);
  REEL_DISPATCH_FLOATING_AND_16(x.dtype(), "rmsnorm_forward",
                         rmsnorm_forward_impl<scalar_t, acc_t>(x.data<scalar_t>(), w.data<scalar_t>(), eps,
                                                        y.data<scalar_t>(), rstd.data<acc_t>(), R, C))
}

void rmsnorm_backward(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& rstd, const Tensor& dx,
                      const Tensor& dw) {
  const int64_t R = x.size(0), C = x.size(1);
  REEL_DISPATCH_FLOATING_AND_16(x.dtype(), "rmsnorm_backward",
                         norm_backward_impl<scalar_t, acc_t, false>(dy.data<scalar_t>(), x.data<scalar_t>(),
                                                             w.data<scalar_t>(), nullptr, rstd.data<acc_t>(),
                                                             dx.data<scalar_t>(), dw.data<scalar_t>(), nullptr, R, C))
}

void group_norm_forward(const Tensor& x, const Tensor& w, const Tensor& b, int64_t groups, double eps, const Tensor& y,
                        const Tensor& mean, const Tensor& rstd) {
  const int64_t N = x.size(0), C = x.size(1), S = x.size(2);
  REEL_DISPATCH_FLOATING_AND_16(x.dtype(), "group_norm_forward",
                         group_norm_forward_impl<scalar_t, acc_t>(x.data<scalar_t>(), w.data<scalar_t>(), b.data<scalar_t>(),
                                                           eps, y.data<scalar_t>(), mean.data<acc_t>(),
                                                           rstd.data<acc_t>(), N, C, S, groups))
}

void group_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& mean, const Tensor& rstd,
                         int64_t groups, const Tensor& dx, const Tensor& dw, const Tensor& db) {
  const int64_t N = x.size(0), C = x.size(1), S = x.size(2);
  REEL_DISPATCH_FLOATING_AND_16(x.dtype(), "group_norm_backward",
                         group_norm_backward_impl<scalar_t, acc_t>(dy.data<scalar_t>(), x.data<scalar_t>(),
                                                            w.data<scalar_t>(), mean.data<acc_t>(),
                                                            rstd.data<acc_t>(), dx.data<scalar_t>(),
                                                            dw.data<scalar_t>(), db.data<scalar_t>(), N, C, S, groups))
}

}  // namespace reel::kernels::cpu
