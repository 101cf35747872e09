// LayerNorm and RMSNorm over the last dim, forward and backward, on the CPU, and LayerNorm with
// the residual add before it fused in (each row's s = x + r made first, then normalised); the
// LayerNorm with the embeddings before it is the two kernels one after the other (both ways).
//
// Forward: one task per row (OpenMP over rows); the row (C = 768 floats = 3 KB) stays in L1
// while it is swept three times (mean, variance, normalise), so memory sees one read of x and one
// write of y. The variance is the two-pass one (sum of (x - mean)^2): the one-pass
// E[x^2] - E[x]^2 cancels catastrophically when |mean| >> std. Row sums run in the dispatch's
// acc_t (f32 for f32, f64 for f64, f32 for a 16-bit type), spread over the SIMD lanes (16 partial
// sums for f32, so each lane adds C/16 terms): widening every element to double made the f32
// kernel compute-bound at half the memory speed. The mean sums x - x[0], so a row far from 0
// (mean 1000, std 1) keeps the mean's low digits. All the elementwise math runs in acc_t too. The
// saved mean and rstd are acc_t (f32 for bf16 and f16 x: kernels/layernorm.h), never rounded to
// 16 bits.
//
// bf16 and f16 (LayerNorm and RMSNorm, forward and backward; GroupNorm still converts per
// element): rows are widened to f32 a block at a time (block_rows: up to 8 rows, 16 KB) into
// per-thread buffers, the same f32 sweeps run on them, and each output (y, dx) is rounded once on
// store; w and b are widened once per call. The conversions are kernels/cpu/half_simd.h's vector
// code (the same bits as core/half.h).
// Converting per element inside the sweeps made the 16-bit rows several times slower than f32's at
// C = 96: the conversions, not the arithmetic, bounded the loop.
//
// Backward fuses dx with the weight/bias gradients: per row, one sweep for the two row sums
//   dxhat = dy * w,  a = mean(dxhat),  c = mean(dxhat * xhat)
// then one sweep that writes dx = rstd * (dxhat - a - xhat * c) and adds dy * xhat and dy into
// dw/db partials. Determinism without atomics: rows are cut into fixed chunks (their size
// depends on R only, never on the thread count); a chunk adds its rows, in order, into a (C)
// accumulator in acc_t that is flushed into the chunk's double partial every kFlush
// rows (so f32 never sums more than kFlush terms); the final dw/db add the chunks' partials in
// chunk order. The result is bit-identical run to run and for any number of threads. dw/db are
// written, or added to a parameter's .grad (its gradient sink, never zero-filled first); dx_add
// (add_layer_norm's other gradient of s) is added to each dx row right after it is made. With the
// residual's bias rb, the forward's s = x + (r + rb) (r + rb rounded first) and the backward then
// sums dx's columns (drb) in acc_t, rows in order: linear's bias-gradient loop
// (kernels/cpu/column_sums.h), so the folded bias gets the bits the unfused linear gave it.
//
// GroupNorm: the same sweeps with a (sample, group) in place of a row: its M = C/G * S values are
// contiguous, so the statistics are LayerNorm's over M, and the per-channel affine walks the run
// channel by channel. dw/db: each (sample, group) task sums its channels over the positions into
// (N, C) double partials, which are then added over the samples in order: deterministic too.
#include <algorithm>
#include <cmath>
#include <type_traits>
#include <utility>
#include <vector>

#include "kernels/backends.h"
#include "kernels/cpu/column_sums.h"
#include "kernels/cpu/half_simd.h"  // widen, narrow, kIs16
#include "kernels/cpu/parallel.h"

namespace reel::kernels::cpu {

namespace {

constexpr int64_t kFlush = 16;             // rows summed in acc_t before a flush to double

// Rows per dw/db partial: at most ~64 partials (so the final sum stays cheap and the partials
// (64, C) doubles fit in L2) and at least 32 rows each. Never a function of the thread count.
int64_t rows_per_chunk(int64_t R) { return std::max<int64_t>(32, (R + 63) / 64); }

// n floats of `buf`, starting on a 64-byte boundary (buf grows to fit), so that the vector loads
// and stores of a widened row do not straddle cache lines.
inline float* aligned_floats(std::vector<float>& buf, int64_t n) {
  buf.resize(static_cast<size_t>(n) + 16);
  const uintptr_t p = reinterpret_cast<uintptr_t>(buf.data());
  return buf.data() + ((64 - p % 64) % 64) / sizeof(float);
}

// n rounded up to a whole number of 64-byte lines of floats: the stride of widened rows.
inline int64_t round_up_16(int64_t n) { return (n + 15) / 16 * 16; }

// Rows per block of a 16-bit path (at most kBlockRows): the block's widened rows (Cp floats each)
// fill at most 16 KB of L1. A row's statistics end in a chain of dependent adds (the lane sums
// folded one by one), a divide and a square root, which in the f32 loop overlap the next rows'
// loads; with a widen and a narrow between them the out-of-order window no longer reached the next
// row, and the bf16 forward ran well behind the f32 one. Widening a block first and then running its rows'
// chains back to back lets them overlap again.
constexpr int64_t kBlockRows = 8;
inline int64_t block_rows(int64_t Cp) { return std::max<int64_t>(1, std::min<int64_t>(kBlockRows, 4096 / Cp)); }

// Row `row` of s = x + res (x, res, s: (R, C)), each element rounded once to T, as the add would:
// add_layernorm_forward's residual add, done in the sweep that first reads the row. rb: null or
// (C), the residual's bias: s = x + (res + rb), res + rb rounded to T first (the two adds' bits).
template <typename T>
void add_row(const T* x, const T* res, const T* rb, T* s, int64_t row, int64_t C) {
  using acc_t = acc_type_t<T>;
  const T* xr = x + row * C;
  const T* rr = res + row * C;
  T* sr = s + row * C;
  if (rb) {
#pragma omp simd
    for (int64_t c = 0; c < C; ++c) {
      const T rc = static_cast<T>(static_cast<acc_t>(rr[c]) + static_cast<acc_t>(rb[c]));
      sr[c] = static_cast<T>(static_cast<acc_t>(xr[c]) + static_cast<acc_t>(rc));
    }
    return;
  }
#pragma omp simd
  for (int64_t c = 0; c < C; ++c) sr[c] = static_cast<T>(static_cast<acc_t>(xr[c]) + static_cast<acc_t>(rr[c]));
}

// The 16-bit forwards' rows, in parallel over blocks of block_rows(Cp) rows: each block widened to
// f32 into a per-thread (n, Cp) buffer xb (rows r0 .. r0 + n), then fn(r0, n, xb, Cp) runs the f32
// sweeps on it and rounds its results into the output. With `res` (add_layernorm_forward), each
// row of s = x + res (+ rb, where not null) is made first and s's row is the one widened.
template <typename T, typename F>
void for_widened_blocks(const T* x, int64_t R, int64_t C, F&& fn, const T* res = nullptr, T* s = nullptr,
                        const T* rb = nullptr) {
  const int64_t Cp = round_up_16(C), nb = block_rows(Cp), blocks = (R + nb - 1) / nb;
  parallel_for(blocks, blocks > 1 && R * C >= kMinParallelElements, [&](int64_t k) {
    thread_local std::vector<float> buf;
    const int64_t r0 = k * nb, n = std::min(nb, R - r0);
    float* const xb = aligned_floats(buf, n * Cp);  // (n, Cp): the block's rows in f32
    for (int64_t i = 0; i < n; ++i) {
      if (res) add_row(x, res, rb, s, r0 + i, C);
      widen((res ? s : x) + (r0 + i) * C, xb + i * Cp, C);
    }
    fn(r0, n, xb, Cp);
  });
}

// w (and b) as acc_t: the tensors themselves when T is acc_t, else widened once per call into `buf`.
template <typename T, typename acc_t>
const acc_t* as_acc(const T* p, std::vector<acc_t>& buf, int64_t n) {
  if constexpr (std::is_same_v<T, acc_t>) {
    return p;
  } else {
    buf.resize(static_cast<size_t>(n));
    widen(p, buf.data(), n);
    return buf.data();
  }
}

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

// res and s: null, or add_layernorm_forward's residual (R, C) and the sum s = x + res (R, C) out,
// which is then normalised in place of x; rb: null or the residual's bias (C), s = x + (res + rb).
template <typename T, typename acc_t>
void layernorm_forward_impl(const T* x, const T* w_t, const T* b_t, double eps, T* y, acc_t* mean, acc_t* rstd,
                            int64_t R, int64_t C, const T* res = nullptr, T* s = nullptr, const T* rb = nullptr) {
  std::vector<acc_t> wbuf, bbuf;
  const acc_t* w = as_acc(w_t, wbuf, C);  // (C)
  const acc_t* b = as_acc(b_t, bbuf, C);  // (C)
  if constexpr (kIs16<T>) {
    // The f32 sweeps on rows widened a block at a time, each result rounded once on store.
    for_widened_blocks(x, R, C, [&](int64_t r0, int64_t n, float* xb, int64_t Cp) {
      for (int64_t i = 0; i < n; ++i) {  // n independent latency chains, back to back
        const std::pair<float, float> stats = mean_rstd<float>(xb + i * Cp, C, eps);
        mean[r0 + i] = stats.first;
        rstd[r0 + i] = stats.second;
      }
      for (int64_t i = 0; i < n; ++i) {
        const float m = mean[r0 + i], rs = rstd[r0 + i];
        float* xr = xb + i * Cp;
#pragma omp simd
        for (int64_t c = 0; c < C; ++c) xr[c] = (xr[c] - m) * rs * w[c] + b[c];
        narrow(xr, y + (r0 + i) * C, C);
      }
    }, res, s, rb);
  } else {
    parallel_for(R, R > 1 && R * C >= kMinParallelElements, [&](int64_t r) {
      if (res) add_row(x, res, rb, s, r, C);
      const T* xr = (res ? s : x) + r * C;  // (C)
      T* yr = y + r * C;                    // (C)
      const std::pair<acc_t, acc_t> stats = mean_rstd<acc_t>(xr, C, eps);
      const acc_t m = stats.first, rs = stats.second;
#pragma omp simd
      for (int64_t c = 0; c < C; ++c) yr[c] = (xr[c] - m) * rs * w[c] + b[c];
      mean[r] = m;
      rstd[r] = rs;
    });
  }
}

// Shared by LayerNorm (xhat = (x - mean) * rstd, has db) and RMSNorm (xhat = x * rstd).
// dx_add: null or (R, C), added to dx (the norm's dx rounded to T first). add_dw / add_db: dw / db
// hold a gradient to add the sums to (each sum rounded to T first), else they are written.
template <typename T, typename acc_t, bool kLayerNorm>
void norm_backward_impl(const T* dy, const T* x, const T* w_t, const acc_t* mean, const acc_t* rstd, T* dx, T* dw,
                        T* db, int64_t R, int64_t C, const T* dx_add = nullptr, bool add_dw = false,
                        bool add_db = false) {
  const int64_t rows = rows_per_chunk(R);
  const int64_t chunks = (R + rows - 1) / rows;
  // (chunks, C) double partial sums of dy * xhat and of dy, one slice per chunk. Scratch from the
  // caching allocator, not std::vector: 2 x 384 KB at GPT-2 sizes is above malloc's mmap
  // threshold, and fresh pages every call (page faults + kernel zeroing) cost more than the sweep.
  const Tensor scratch = empty({kLayerNorm ? 2 : 1, chunks, C}, DType::f64);
  double* part_dw = scratch.data<double>();
  double* part_db = kLayerNorm ? part_dw + chunks * C : nullptr;
  const acc_t inv_c = acc_t(1) / static_cast<acc_t>(C);
  std::vector<acc_t> wbuf;
  const acc_t* w = as_acc(w_t, wbuf, C);  // (C)

#pragma omp parallel if (chunks > 1 && R * C >= kMinParallelElements)
  {
    // Per thread: the dw/db accumulators and, for a 16-bit T, a block of dy and x rows and one dx
    // row in f32 (the rows Cp apart, each on a 64-byte boundary).
    std::vector<acc_t> acc_dw(static_cast<size_t>(C)), acc_db(kLayerNorm ? static_cast<size_t>(C) : 0);
    const int64_t Cp = round_up_16(C), nb = kIs16<T> ? block_rows(2 * Cp) : 1;  // rows per block
    std::vector<float> rows16;
    float* const buf16 = kIs16<T> ? aligned_floats(rows16, (2 * nb + 1) * Cp) : nullptr;
    acc_t* adw = acc_dw.data();
    acc_t* adb = acc_db.data();
    acc_t a_blk[kBlockRows], cc_blk[kBlockRows];  // a block's mean(dxhat) and mean(dxhat * xhat)
#pragma omp for schedule(static)
    for (int64_t k = 0; k < chunks; ++k) {
      double* pdw = part_dw + k * C;
      double* pdb = kLayerNorm ? part_db + k * C : nullptr;
      bool first_flush = true;  // the first flush stores, so the partials need no zeroing
      std::fill(acc_dw.begin(), acc_dw.end(), acc_t(0));
      std::fill(acc_db.begin(), acc_db.end(), acc_t(0));
      const int64_t r0 = k * rows, r_end = std::min(R, r0 + rows);
      // A block of rows at a time (one row for f32 and f64): first each row's two sums, then each
      // row's dx and dw/db sweep, in row order.
      for (int64_t rb = r0; rb < r_end; rb += nb) {
        // (1 written as a constant for f32 and f64: GCC 12 otherwise vectorises the loop over the
        // block's rows instead of the row sums inside it, slower and in another summation order.)
        const int64_t n = kIs16<T> ? std::min(nb, r_end - rb) : 1;
        if constexpr (kIs16<T>) {
          for (int64_t i = 0; i < n; ++i) {
            widen(dy + (rb + i) * C, buf16 + i * Cp, C);
            widen(x + (rb + i) * C, buf16 + (nb + i) * Cp, C);
          }
        }
        for (int64_t i = 0; i < n; ++i) {
          const acc_t* dyr;  // row rb + i of dy and x as acc_t ((C) each)
          const acc_t* xr;
          if constexpr (kIs16<T>) dyr = buf16 + i * Cp, xr = buf16 + (nb + i) * Cp;
          else dyr = dy + (rb + i) * C, xr = x + (rb + i) * C;
          const acc_t m = kLayerNorm ? acc_t(mean[rb + i]) : acc_t(0);
          const acc_t rs = rstd[rb + i];
          acc_t sum_dxhat = 0, sum_dxhat_xhat = 0;
#pragma omp simd reduction(+ : sum_dxhat, sum_dxhat_xhat)
          for (int64_t c = 0; c < C; ++c) {
            const acc_t dxhat = dyr[c] * w[c];
            sum_dxhat += dxhat;
            sum_dxhat_xhat += dxhat * ((xr[c] - m) * rs);
          }
          // RMSNorm has no mean to subtract, so no mean(dxhat) term.
          a_blk[i] = kLayerNorm ? sum_dxhat * inv_c : acc_t(0);
          cc_blk[i] = sum_dxhat_xhat * inv_c;
        }
        for (int64_t i = 0; i < n; ++i) {
          const int64_t r = rb + i;
          const acc_t* dyr;  // row r of dy, x and dx as acc_t ((C) each)
          const acc_t* xr;
          acc_t* dxr;
          if constexpr (kIs16<T>) dyr = buf16 + i * Cp, xr = buf16 + (nb + i) * Cp, dxr = buf16 + 2 * nb * Cp;
          else dyr = dy + r * C, xr = x + r * C, dxr = dx + r * C;
          const acc_t m = kLayerNorm ? acc_t(mean[r]) : acc_t(0);
          const acc_t rs = rstd[r], a = a_blk[i], cc = cc_blk[i];
#pragma omp simd
          for (int64_t c = 0; c < C; ++c) {
            const acc_t xhat = (xr[c] - m) * rs;
            dxr[c] = rs * (dyr[c] * w[c] - a - xhat * cc);
            adw[c] += dyr[c] * xhat;
            if constexpr (kLayerNorm) adb[c] += dyr[c];
          }
          if constexpr (kIs16<T>) narrow(dxr, dx + r * C, C);
          if (dx_add) {  // a second sweep over the row (in L1): dx = dx_add + dx, as the add would
            const T* ar = dx_add + r * C;
            T* dr = dx + r * C;
#pragma omp simd
            for (int64_t c = 0; c < C; ++c) dr[c] = static_cast<T>(acc_t(ar[c]) + acc_t(dr[c]));
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
    const T gw = static_cast<T>(sum_dw[static_cast<size_t>(c)]);
    dw[c] = add_dw ? static_cast<T>(acc_t(dw[c]) + acc_t(gw)) : gw;
    if constexpr (kLayerNorm) {
      const T gb = static_cast<T>(sum_db[static_cast<size_t>(c)]);
      db[c] = add_db ? static_cast<T>(acc_t(db[c]) + acc_t(gb)) : gb;
    }
  }
}

// out (C) = the column sums of dx (R, C), the residual's bias gradient (layernorm_backward's drb):
// kernels/cpu/column_sums.h, the loop linear's bias gradient sums with (the same bits as the
// unfused linear's db). Written, or where add added to (the sum rounded to T first, as dw and db are).
template <typename T, typename acc_t>
void dx_column_sums(const T* dx, int64_t R, int64_t C, T* out, bool add) {
  column_sums<T, acc_t>(dx, R, C, C, R * C >= kMinParallelElements, [&](int64_t c, acc_t sum) {
    const T g = static_cast<T>(sum);
    out[c] = add ? static_cast<T>(acc_t(out[c]) + acc_t(g)) : g;
  });
}

// The sum of squares is double, wider than acc_t. 16-bit rows are widened a block at a time, as
// in layernorm_forward_impl.
template <typename T, typename acc_t>
void rmsnorm_forward_impl(const T* x, const T* w_t, double eps, T* y, acc_t* rstd, int64_t R, int64_t C) {
  std::vector<acc_t> wbuf;
  const acc_t* w = as_acc(w_t, wbuf, C);  // (C)
  const auto rstd_of = [&](const acc_t* xr) {
    double ss = 0;
#pragma omp simd reduction(+ : ss)
    for (int64_t c = 0; c < C; ++c) ss += static_cast<double>(xr[c]) * static_cast<double>(xr[c]);
    return static_cast<acc_t>(1.0 / std::sqrt(ss / static_cast<double>(C) + eps));
  };
  if constexpr (kIs16<T>) {
    for_widened_blocks(x, R, C, [&](int64_t r0, int64_t n, float* xb, int64_t Cp) {
      for (int64_t i = 0; i < n; ++i) rstd[r0 + i] = rstd_of(xb + i * Cp);
      for (int64_t i = 0; i < n; ++i) {
        const float rt = rstd[r0 + i];
        float* xr = xb + i * Cp;
#pragma omp simd
        for (int64_t c = 0; c < C; ++c) xr[c] = xr[c] * rt * w[c];
        narrow(xr, y + (r0 + i) * C, C);
      }
    });
  } else {
    parallel_for(R, R > 1 && R * C >= kMinParallelElements, [&](int64_t r) {
      const T* xr = x + r * C;
      T* yr = y + r * C;
      const acc_t rt = rstd_of(xr);
#pragma omp simd
      for (int64_t c = 0; c < C; ++c) yr[c] = xr[c] * rt * w[c];
      rstd[r] = rt;
    });
  }
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

void add_layernorm_forward(const Tensor& x, const Tensor& r, const Tensor& rb, const Tensor& w, const Tensor& b,
                           double eps, const Tensor& s, const Tensor& y, const Tensor& mean, const Tensor& rstd) {
  const int64_t R = x.size(0), C = x.size(1);
  REEL_DISPATCH_FLOATING_AND_16(x.dtype(), "add_layernorm_forward",
                                layernorm_forward_impl<scalar_t, acc_t>(
                                    x.data<scalar_t>(), w.data<scalar_t>(), b.data<scalar_t>(), eps,
                                    y.data<scalar_t>(), mean.data<acc_t>(), rstd.data<acc_t>(), R, C,
                                    r.data<scalar_t>(), s.data<scalar_t>(),
                                    rb.defined() ? rb.data<scalar_t>() : nullptr))
}

// The composition itself, embedding_pos then the LayerNorm: the same bits as the two kernels, by
// construction (on the CPU a launch costs nothing; cuda fuses them).
void embedding_pos_layernorm_forward(const Tensor& ids, const Tensor& table, const Tensor& pos, int64_t T,
                                     const Tensor& w, const Tensor& b, double eps, const Tensor& s, const Tensor& y,
                                     const Tensor& mean, const Tensor& rstd) {
  embedding_pos_forward(ids, table, pos, s, T);
  layernorm_forward(s, w, b, eps, y, mean, rstd);
}

void layernorm_backward(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& mean, const Tensor& rstd,
                        const Tensor& dx_add, const Tensor& dx, const Tensor& dw, const Tensor& db, bool add_dw,
                        bool add_db, const Tensor& drb, bool add_drb) {
  const int64_t R = x.size(0), C = x.size(1);
  REEL_DISPATCH_FLOATING_AND_16(x.dtype(), "layernorm_backward", {
    norm_backward_impl<scalar_t, acc_t, true>(dy.data<scalar_t>(), x.data<scalar_t>(), w.data<scalar_t>(),
                                              mean.data<acc_t>(), rstd.data<acc_t>(), dx.data<scalar_t>(),
                                              dw.data<scalar_t>(), db.data<scalar_t>(), R, C,
                                              dx_add.defined() ? dx_add.data<scalar_t>() : nullptr, add_dw, add_db);
    if (drb.defined()) dx_column_sums<scalar_t, acc_t>(dx.data<scalar_t>(), R, C, drb.data<scalar_t>(), add_drb);
  })
}

void embedding_pos_layernorm_backward(const Tensor& dy, const Tensor& s, const Tensor& w, const Tensor& mean,
                                      const Tensor& rstd, const Tensor& ds, const Tensor& dx, const Tensor& dw,
                                      const Tensor& db, bool add_dw, bool add_db, const Tensor& ids,
                                      const Tensor& dtable, bool accumulate_table, const Tensor& dpos,
                                      bool accumulate_pos, int64_t T, bool check_ids) {
  layernorm_backward(dy, s, w, mean, rstd, ds, dx, dw, db, add_dw, add_db, Tensor(), false);
  embedding_pos_backward(dx, ids, dtable, accumulate_table, dpos, accumulate_pos, T, check_ids);
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
