// Scaled-dot-product attention on the CPU for bf16 and f16 operands, forward and backward: the
// 16-bit path of kernels/cpu/attention.cpp (which has the f32 and f64 kernels, the entry points and
// the algorithm; the pieces both use are in kernels/cpu/attention_common.h).
//
// bf16 and f16 (fast16 below, on AVX-512 builds): a task widens its (b, h)'s rows to f32 once, into
// per-thread scratch, and runs its own register-blocked loops on them, a few query rows at a time,
// with the whole causal key range of a row in one softmax; every score, softmax and product is f32
// (lse f32: kernels/attention.h) and each output element is rounded once to the 16-bit type. Its
// sums run in their own fixed order (not oneDNN's), so the 16-bit results are within an ulp of the
// f32 kernels' results rounded, not equal to them; they are the same for any thread count. At
// char_gpt's shape (T = 64, D = 24) the per-call overheads of the tile-by-tile gemm_serial calls
// dominated: widening whole tensors and running the f32 kernels made the 16-bit path slower than
// f32, where its own kernels, which read half the bytes, make it faster (bench_attention's kernel
// table, docs/benchmarks.md).
// Without AVX-512 (forward_16 / backward_16 at the end) the operands are widened whole and
// attention.cpp's f32 kernels run on them.
//
// fast16 in detail: one task widens its (b, h)'s rows once into per-thread f32 scratch (K also
// transposed, as
// (D, keys) with the key count padded to 16 with zeros; V likewise for the backward) and runs
// register-blocked AVX-512 loops on it, kRows query rows at a time:
//   scores  S[r, j] = sum_d A[r, d] Bt[d, j]   (Q K^T, and dO V^T in the backward), d ascending;
//   rows    C[r, :] = sum_j W[r, j] B[j, :]    (P V, dS K), j ascending;
//   update  C[j, :] += W[r, j] A[r, :]          (dK += dS^T Q, dV += P^T dO), queries ascending.
// Each sum is a chain of fused multiply-adds in that fixed order and the row max and sum of the
// softmax reduce their 16 lanes in a fixed order, so the bits depend on the shapes alone (not on
// the thread count nor on how rows fall into blocks). A row's softmax sees all its keys at once
// (no online rescaling); the per-thread scratch is one (b, h)'s K and V in f32, O(T (D + Dv)), and
// kRows rows of scores, never T x T. Everything is f32; out, dq, dk and dv are
// rounded once, lse stays f32. The 16-bit <-> f32 conversions are kernels/cpu/half_simd.h's
// load16 / store16 (core/half.h's bits).
#include <algorithm>
#include <cmath>
#include <limits>

#include "kernels/backends.h"
#include "kernels/cpu/attention_common.h"
#include "kernels/cpu/exp_ftz.h"
#include "kernels/cpu/half_simd.h"

namespace reel::kernels::cpu {

using namespace attention_detail;

namespace {

#if defined(REEL_HALF_SIMD_AVX512)
#define REEL_ATTENTION_AVX512 1
namespace fast16 {

constexpr int64_t kRows = 4;        // query rows per register block
constexpr int64_t kQueryChunk = 64; // forward: query rows per task

inline int64_t pad16(int64_t n) { return (n + 15) / 16 * 16; }

// Part `part` of `parts` of rows [0, n) of a head (rows `ld` apart, X wide), prefetched into the
// cache: a task spreads the next task's rows over its own rows, so that the strided head rows (a
// cache line or two each, 3C apart in a (B, T, 3C) projection) arrive while it computes rather
// than when its products first read them. Only timing: no result depends on it.
template <typename T>
void prefetch_part(const T* head, int64_t ld, int64_t n, int64_t X, int64_t part, int64_t parts) {
  for (int64_t r = part * n / parts; r < (part + 1) * n / parts; ++r) {
    const char* p = reinterpret_cast<const char*>(head + r * ld);
    const char* last = reinterpret_cast<const char*>(head + r * ld + X) - 1;
    for (; p < last; p += 64) __builtin_prefetch(p);
    __builtin_prefetch(last);
  }
}

template <typename T>
void widen_row(const T* src, int64_t n, float* dst) {
  for (int64_t c = 0; c < n; c += 16) _mm512_mask_storeu_ps(dst + c, lanes(n - c), load16(src + c, lanes(n - c)));
}
template <typename T>
void narrow_row(const float* src, int64_t n, T* dst) {
  for (int64_t c = 0; c < n; c += 16) store16(dst + c, lanes(n - c), _mm512_maskz_loadu_ps(lanes(n - c), src + c));
}

// Rows [0, n) of a head (rows `ld` apart, X wide) into dst (n, X) row-major f32.
template <typename T>
void widen_rows(const T* src, int64_t ld, int64_t n, int64_t X, float* dst) {
  for (int64_t j = 0; j < n; ++j) widen_row(src + j * ld, X, dst + j * X);
}
// r[i] (16 rows of 16) becomes its transpose: r[c] holds lane i = old r[i][c]. 64 shuffles.
inline void transpose16(__m512 r[16]) {
  __m512 t[16];
  for (int i = 0; i < 8; ++i) {
    t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
  auto lo = [](__m512 a, __m512 b) { return _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(a), _mm512_castps_pd(b))); };
  auto hi = [](__m512 a, __m512 b) { return _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(a), _mm512_castps_pd(b))); };
  for (int i = 0; i < 4; ++i) {
    r[4 * i] = lo(t[4 * i], t[4 * i + 2]);
    r[4 * i + 1] = hi(t[4 * i], t[4 * i + 2]);
    r[4 * i + 2] = lo(t[4 * i + 1], t[4 * i + 3]);
    r[4 * i + 3] = hi(t[4 * i + 1], t[4 * i + 3]);
  }
  for (int h = 0; h < 2; ++h)
    for (int i = 0; i < 4; ++i) {
      t[8 * h + i] = _mm512_shuffle_f32x4(r[8 * h + i], r[8 * h + 4 + i], 0x88);
      t[8 * h + 4 + i] = _mm512_shuffle_f32x4(r[8 * h + i], r[8 * h + 4 + i], 0xdd);
    }
  for (int i = 0; i < 8; ++i) {
    r[i] = _mm512_shuffle_f32x4(t[i], t[8 + i], 0x88);
    r[8 + i] = _mm512_shuffle_f32x4(t[i], t[8 + i], 0xdd);
  }
}
// Rows [0, n) of a head (16-bit, rows `ld` apart, X wide) widened into dst (X, ldt) transposed, 16
// by 16 in registers, the columns [n, pad16(n)) zero; and into rows (n, X) row-major too unless null.
template <typename T>
void widen_transposed(const T* src, int64_t ld, int64_t n, int64_t X, float* dst, int64_t ldt, float* rows) {
  for (int64_t j0 = 0; j0 < n; j0 += 16) {
    const int64_t nj = std::min<int64_t>(16, n - j0);
    for (int64_t x0 = 0; x0 < X; x0 += 16) {
      const __mmask16 m = lanes(X - x0);
      __m512 r[16];
      for (int64_t i = 0; i < 16; ++i) {
        r[i] = i < nj ? load16(src + (j0 + i) * ld + x0, m) : _mm512_setzero_ps();
        if (rows && i < nj) _mm512_mask_storeu_ps(rows + (j0 + i) * X + x0, m, r[i]);
      }
      transpose16(r);
      for (int64_t c = 0; c < std::min<int64_t>(16, X - x0); ++c) _mm512_storeu_ps(dst + (x0 + c) * ldt + j0, r[c]);
    }
  }
}

// S[r, j] (R rows, ld ldS) = sum_d A[r, d] Bt[d, j], d ascending, for j < pad16(n) (Bt is padded).
template <int R>
void scores(const float* A, int64_t lda, const float* Bt, int64_t ldb, int64_t K, int64_t n, float* S, int64_t ldS) {
  int64_t c = 0;
  for (; c + 32 <= pad16(n); c += 32) {
    __m512 a0[R], a1[R];
    for (int r = 0; r < R; ++r) a0[r] = a1[r] = _mm512_setzero_ps();
    for (int64_t d = 0; d < K; ++d) {
      const __m512 b0 = _mm512_loadu_ps(Bt + d * ldb + c), b1 = _mm512_loadu_ps(Bt + d * ldb + c + 16);
      for (int r = 0; r < R; ++r) {
        const __m512 x = _mm512_set1_ps(A[r * lda + d]);
        a0[r] = _mm512_fmadd_ps(x, b0, a0[r]);
        a1[r] = _mm512_fmadd_ps(x, b1, a1[r]);
      }
    }
    for (int r = 0; r < R; ++r) {
      _mm512_storeu_ps(S + r * ldS + c, a0[r]);
      _mm512_storeu_ps(S + r * ldS + c + 16, a1[r]);
    }
  }
  if (c < pad16(n)) {
    __m512 a0[R];
    for (int r = 0; r < R; ++r) a0[r] = _mm512_setzero_ps();
    for (int64_t d = 0; d < K; ++d) {
      const __m512 b0 = _mm512_loadu_ps(Bt + d * ldb + c);
      for (int r = 0; r < R; ++r) a0[r] = _mm512_fmadd_ps(_mm512_set1_ps(A[r * lda + d]), b0, a0[r]);
    }
    for (int r = 0; r < R; ++r) _mm512_storeu_ps(S + r * ldS + c, a0[r]);
  }
}

// acc[r] (X wide, chunks [c, c + 32)) = sum_{j < n} W[r, j] B[j, :], j ascending; then out(r, c, acc).
template <int R, typename Out>
void rows(const float* W, int64_t ldw, const float* B, int64_t X, int64_t n, Out out) {
  for (int64_t c = 0; c < X; c += 32) {
    const __mmask16 m0 = lanes(X - c), m1 = X - c > 16 ? lanes(X - c - 16) : __mmask16(0);
    __m512 a0[R], a1[R];
    for (int r = 0; r < R; ++r) a0[r] = a1[r] = _mm512_setzero_ps();
    if (m1) {
      for (int64_t j = 0; j < n; ++j) {
        const __m512 b0 = _mm512_maskz_loadu_ps(m0, B + j * X + c), b1 = _mm512_maskz_loadu_ps(m1, B + j * X + c + 16);
        for (int r = 0; r < R; ++r) {
          const __m512 w = _mm512_set1_ps(W[r * ldw + j]);
          a0[r] = _mm512_fmadd_ps(w, b0, a0[r]);
          a1[r] = _mm512_fmadd_ps(w, b1, a1[r]);
        }
      }
    } else {
      for (int64_t j = 0; j < n; ++j) {
        const __m512 b0 = _mm512_maskz_loadu_ps(m0, B + j * X + c);
        for (int r = 0; r < R; ++r) a0[r] = _mm512_fmadd_ps(_mm512_set1_ps(W[r * ldw + j]), b0, a0[r]);
      }
    }
    for (int r = 0; r < R; ++r) {
      out(r, c, m0, a0[r]);
      if (m1) out(r, c + 16, m1, a1[r]);
    }
  }
}

// C[j, :] (X wide) += W[r, j] A[r, :] for r = 0 .. R-1 in turn, for j < n.
template <int R>
void update(const float* W, int64_t ldw, const float* A, int64_t X, int64_t n, float* C) {
  for (int64_t c = 0; c < X; c += 16) {
    const __mmask16 m = lanes(X - c);
    __m512 a[R];
    for (int r = 0; r < R; ++r) a[r] = _mm512_maskz_loadu_ps(m, A + r * X + c);
    for (int64_t j = 0; j < n; ++j) {
      __m512 acc = _mm512_maskz_loadu_ps(m, C + j * X + c);
      for (int r = 0; r < R; ++r) acc = _mm512_fmadd_ps(_mm512_set1_ps(W[r * ldw + j]), a[r], acc);
      _mm512_mask_storeu_ps(C + j * X + c, m, acc);
    }
  }
}

inline float hsum(__m512 x) { return _mm512_reduce_add_ps(x); }
inline float hmax(__m512 x) { return _mm512_reduce_max_ps(x); }
inline __m512 exp16(__m512 x) { return ExpFtzOp<float>().packetOp(x); }

template <typename T>
void forward(Heads<const T> q, Heads<const T> k, Heads<const T> v, Heads<T> out, float* lse, int64_t BH, int64_t Tq,
             int64_t Tk, int64_t D, int64_t Dv, float scale, bool causal) {
  const int64_t chunks = (Tq + kQueryChunk - 1) / kQueryChunk, tasks = BH * chunks;
  const int64_t ldk = pad16(Tk);
  const float neg_inf = -std::numeric_limits<float>::infinity();
#pragma omp parallel if (tasks > 1 && BH * Tq * Tk * (D + Dv) >= kMinParallelFlops)
  {
    Tile<float> Kt(D * ldk + 16), Vf(Tk * Dv + 16), Qf(kRows * D + 16), S(kRows * ldk + 16);
#pragma omp for schedule(dynamic)
    for (int64_t task = 0; task < tasks; ++task) {
      const int64_t bh = task / chunks, ct = chunks - 1 - task % chunks;  // the longest chunks first
      const int64_t c0 = ct * kQueryChunk, c1 = std::min(Tq, c0 + kQueryChunk);
      const int64_t kv = causal ? c1 : Tk, ldt = pad16(kv);
      widen_transposed(k.head(bh), k.ld, kv, D, Kt.data(), ldt, static_cast<float*>(nullptr));
      widen_rows(v.head(bh), v.ld, kv, Dv, Vf.data());
      const int64_t blocks = (c1 - c0 + kRows - 1) / kRows;
      for (int64_t i0 = c0; i0 < c1; i0 += kRows) {
        const int64_t nr = std::min(kRows, c1 - i0), n = causal ? i0 + nr : Tk;
        if (task + 1 < tasks) {  // the next task's rows (likely this thread's next, or the other's)
          const int64_t bh2 = (task + 1) / chunks, ct2 = chunks - 1 - (task + 1) % chunks;
          const int64_t q0 = ct2 * kQueryChunk, q1 = std::min(Tq, q0 + kQueryChunk), kv2 = causal ? q1 : Tk;
          const int64_t b = (i0 - c0) / kRows;
          prefetch_part(q.head(bh2) + q0 * q.ld, q.ld, q1 - q0, D, b, blocks);
          prefetch_part(k.head(bh2), k.ld, kv2, D, b, blocks);
          prefetch_part(v.head(bh2), v.ld, kv2, Dv, b, blocks);
        }
        widen_rows(q.head(bh) + i0 * q.ld, q.ld, nr, D, Qf.data());
        float inv[kRows];
        auto softmax = [&](int64_t r) {  // row r of S: scores -> probabilities; 1 / l and lse
          float* s = S.data() + r * ldk;
          const int64_t nv = causal ? i0 + r + 1 : Tk;  // visible keys
          __m512 mx = _mm512_set1_ps(neg_inf);
          for (int64_t c = 0; c < nv; c += 16) {
            const __m512 x = _mm512_mul_ps(_mm512_loadu_ps(s + c), _mm512_set1_ps(scale));
            _mm512_storeu_ps(s + c, x);
            mx = _mm512_mask_max_ps(mx, lanes(nv - c), mx, x);
          }
          const float m = hmax(mx);
          __m512 sum = _mm512_setzero_ps();
          for (int64_t c = 0; c < pad16(n); c += 16) {
            const __m512 p = _mm512_maskz_mov_ps(lanes(nv - std::min(c, nv)), exp16(_mm512_sub_ps(_mm512_loadu_ps(s + c), _mm512_set1_ps(m))));
            _mm512_storeu_ps(s + c, p);
            sum = _mm512_add_ps(sum, p);
          }
          const float l = hsum(sum);
          inv[r] = 1.0f / l;
          lse[bh * Tq + i0 + r] = m + std::log(l);
        };
        T* orows = out.head(bh) + i0 * out.ld;
        auto store = [&](int64_t r, int64_t c, __mmask16 m, __m512 acc) {
          store16(orows + r * out.ld + c, m, _mm512_mul_ps(acc, _mm512_set1_ps(inv[r])));
        };
        switch (nr) {
          case 4: scores<4>(Qf.data(), D, Kt.data(), ldt, D, n, S.data(), ldk); break;
          case 3: scores<3>(Qf.data(), D, Kt.data(), ldt, D, n, S.data(), ldk); break;
          case 2: scores<2>(Qf.data(), D, Kt.data(), ldt, D, n, S.data(), ldk); break;
          default: scores<1>(Qf.data(), D, Kt.data(), ldt, D, n, S.data(), ldk); break;
        }
        for (int64_t r = 0; r < nr; ++r) softmax(r);
        switch (nr) {
          case 4: rows<4>(S.data(), ldk, Vf.data(), Dv, n, store); break;
          case 3: rows<3>(S.data(), ldk, Vf.data(), Dv, n, store); break;
          case 2: rows<2>(S.data(), ldk, Vf.data(), Dv, n, store); break;
          default: rows<1>(S.data(), ldk, Vf.data(), Dv, n, store); break;
        }
      }
    }
  }
}

template <typename T>
void backward(Heads<const T> dout, Heads<const T> q, Heads<const T> k, Heads<const T> v, Heads<const T> out,
              const float* lse, Heads<T> dq, Heads<T> dk, Heads<T> dv, int64_t BH, int64_t Tq, int64_t Tk, int64_t D,
              int64_t Dv, float scale, bool causal) {
  const int64_t ldk = pad16(Tk);
#pragma omp parallel if (BH > 1 && BH * Tq * Tk * (D + Dv) >= kMinParallelFlops)
  {
    Tile<float> Kt(D * ldk + 16), Kf(Tk * D + 16), Vt(Dv * ldk + 16), dKf(Tk * D + 16), dVf(Tk * Dv + 16),
        Qf(kRows * D + 16), dOf(kRows * Dv + 16), S(kRows * ldk + 16), dP(kRows * ldk + 16), row(Dv + 16);
#pragma omp for schedule(dynamic)
    for (int64_t bh = 0; bh < BH; ++bh) {
      widen_transposed(k.head(bh), k.ld, Tk, D, Kt.data(), ldk, Kf.data());
      widen_transposed(v.head(bh), v.ld, Tk, Dv, Vt.data(), ldk, static_cast<float*>(nullptr));
      std::fill_n(dKf.data(), Tk * D, 0.0f);
      std::fill_n(dVf.data(), Tk * Dv, 0.0f);
      const T* Qb = q.head(bh);
      const T* dOb = dout.head(bh);
      const T* Ob = out.head(bh);
      T* dQb = dq.head(bh);
      const int64_t blocks = (Tq + kRows - 1) / kRows;
      for (int64_t i0 = 0; i0 < Tq; i0 += kRows) {
        const int64_t nr = std::min(kRows, Tq - i0), n = causal ? i0 + nr : Tk;
        if (bh + 1 < BH) {  // the next (b, h)'s rows
          const int64_t b = i0 / kRows;
          prefetch_part(q.head(bh + 1), q.ld, Tq, D, b, blocks);
          prefetch_part(dout.head(bh + 1), dout.ld, Tq, Dv, b, blocks);
          prefetch_part(out.head(bh + 1), out.ld, Tq, Dv, b, blocks);
          prefetch_part(k.head(bh + 1), k.ld, Tk, D, b, blocks);
          prefetch_part(v.head(bh + 1), v.ld, Tk, Dv, b, blocks);
        }
        widen_rows(Qb + i0 * q.ld, q.ld, nr, D, Qf.data());
        widen_rows(dOb + i0 * dout.ld, dout.ld, nr, Dv, dOf.data());
        switch (nr) {
          case 4: scores<4>(Qf.data(), D, Kt.data(), ldk, D, n, S.data(), ldk);
                  scores<4>(dOf.data(), Dv, Vt.data(), ldk, Dv, n, dP.data(), ldk); break;
          case 3: scores<3>(Qf.data(), D, Kt.data(), ldk, D, n, S.data(), ldk);
                  scores<3>(dOf.data(), Dv, Vt.data(), ldk, Dv, n, dP.data(), ldk); break;
          case 2: scores<2>(Qf.data(), D, Kt.data(), ldk, D, n, S.data(), ldk);
                  scores<2>(dOf.data(), Dv, Vt.data(), ldk, Dv, n, dP.data(), ldk); break;
          default: scores<1>(Qf.data(), D, Kt.data(), ldk, D, n, S.data(), ldk);
                   scores<1>(dOf.data(), Dv, Vt.data(), ldk, Dv, n, dP.data(), ldk); break;
        }
        for (int64_t r = 0; r < nr; ++r) {
          // Di = rowsum(dout * out), lanes in a fixed order
          float* orow = row.data();
          widen_row(Ob + (i0 + r) * out.ld, Dv, orow);
          __m512 di = _mm512_setzero_ps();
          for (int64_t c = 0; c < Dv; c += 16)
            di = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(lanes(Dv - c), dOf.data() + r * Dv + c),
                                 _mm512_maskz_loadu_ps(lanes(Dv - c), orow + c), di);
          const __m512 Di = _mm512_set1_ps(hsum(di)), vscale = _mm512_set1_ps(scale),
                       vlse = _mm512_set1_ps(lse[bh * Tq + i0 + r]);
          // P = exp(S scale - lse) (hidden keys 0) in S; dS = P ((dP - Di) scale) in dP
          const int64_t nv = causal ? i0 + r + 1 : Tk;
          float* s = S.data() + r * ldk;
          float* ds = dP.data() + r * ldk;
          for (int64_t c = 0; c < pad16(n); c += 16) {
            const __mmask16 m = lanes(nv - std::min(c, nv));
            const __m512 p = _mm512_maskz_mov_ps(m, exp16(_mm512_fmsub_ps(_mm512_loadu_ps(s + c), vscale, vlse)));
            _mm512_storeu_ps(s + c, p);
            _mm512_storeu_ps(ds + c, _mm512_mul_ps(p, _mm512_mul_ps(_mm512_sub_ps(_mm512_loadu_ps(ds + c), Di), vscale)));
          }
        }
        T* dQrows = dQb + i0 * dq.ld;
        auto store_dq = [&](int64_t r, int64_t c, __mmask16 m, __m512 acc) { store16(dQrows + r * dq.ld + c, m, acc); };
        switch (nr) {
          case 4: rows<4>(dP.data(), ldk, Kf.data(), D, n, store_dq);
                  update<4>(dP.data(), ldk, Qf.data(), D, n, dKf.data());
                  update<4>(S.data(), ldk, dOf.data(), Dv, n, dVf.data()); break;
          case 3: rows<3>(dP.data(), ldk, Kf.data(), D, n, store_dq);
                  update<3>(dP.data(), ldk, Qf.data(), D, n, dKf.data());
                  update<3>(S.data(), ldk, dOf.data(), Dv, n, dVf.data()); break;
          case 2: rows<2>(dP.data(), ldk, Kf.data(), D, n, store_dq);
                  update<2>(dP.data(), ldk, Qf.data(), D, n, dKf.data());
                  update<2>(S.data(), ldk, dOf.data(), Dv, n, dVf.data()); break;
          default: rows<1>(dP.data(), ldk, Kf.data(), D, n, store_dq);
                   update<1>(dP.data(), ldk, Qf.data(), D, n, dKf.data());
                   update<1>(S.data(), ldk, dOf.data(), Dv, n, dVf.data()); break;
        }
      }
      for (int64_t j = 0; j < Tk; ++j) {
        narrow_row(dKf.data() + j * D, D, dk.head(bh) + j * dk.ld);
        narrow_row(dVf.data() + j * Dv, Dv, dv.head(bh) + j * dv.ld);
      }
    }
  }
}

}  // namespace fast16
#endif  // AVX-512

// A (B, H, T, X) operand widened to f32 (exact for bf16 and f16): a contiguous copy.
Tensor widened(const Tensor& t) { return t.to(DType::f32); }

}  // namespace

// ---- launchers ----------------------------------------------------------------------------------

namespace attention_detail {

// bf16 and f16: fast16's kernels on AVX-512 builds; otherwise the operands are widened to f32 once
// (exact), the f32 kernel runs (lse is f32 already), and each output element is rounded once to the
// 16-bit type (copy_: to nearest even). Either way dK and dV accumulate in f32, so the one rounding
// comes last.
void forward_16(const Tensor& q, const Tensor& k, const Tensor& v, double scale, bool causal, const Tensor& out,
                const Tensor& lse) {
#ifdef REEL_ATTENTION_AVX512
  {
    const int64_t BH = q.size(0) * q.size(1), Tq = q.size(2), D = q.size(3), Tk = k.size(2), Dv = v.size(3);
    if (q.dtype() == DType::bf16)
      fast16::forward<bf16>(Heads<const bf16>(q), Heads<const bf16>(k), Heads<const bf16>(v), Heads<bf16>(out),
                            lse.data<float>(), BH, Tq, Tk, D, Dv, static_cast<float>(scale), causal);
    else
      fast16::forward<f16>(Heads<const f16>(q), Heads<const f16>(k), Heads<const f16>(v), Heads<f16>(out),
                           lse.data<float>(), BH, Tq, Tk, D, Dv, static_cast<float>(scale), causal);
    return;
  }
#endif
  const Tensor out32 = empty(out.shape(), DType::f32, out.device());
  forward_f32_or_f64(widened(q), widened(k), widened(v), scale, causal, out32, lse);
  out.copy_(out32);
}

void backward_16(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                 const Tensor& lse, double scale, bool causal, const Tensor& dq, const Tensor& dk, const Tensor& dv) {
#ifdef REEL_ATTENTION_AVX512
  {
    const int64_t BH = q.size(0) * q.size(1), Tq = q.size(2), D = q.size(3), Tk = k.size(2), Dv = v.size(3);
    if (q.dtype() == DType::bf16)
      fast16::backward<bf16>(Heads<const bf16>(dout), Heads<const bf16>(q), Heads<const bf16>(k), Heads<const bf16>(v),
                             Heads<const bf16>(out), lse.data<float>(), Heads<bf16>(dq), Heads<bf16>(dk),
                             Heads<bf16>(dv), BH, Tq, Tk, D, Dv, static_cast<float>(scale), causal);
    else
      fast16::backward<f16>(Heads<const f16>(dout), Heads<const f16>(q), Heads<const f16>(k), Heads<const f16>(v),
                            Heads<const f16>(out), lse.data<float>(), Heads<f16>(dq), Heads<f16>(dk), Heads<f16>(dv),
                            BH, Tq, Tk, D, Dv, static_cast<float>(scale), causal);
    return;
  }
#endif
  const Tensor dq32 = empty(dq.shape(), DType::f32, dq.device()), dk32 = empty(dk.shape(), DType::f32, dk.device()),
               dv32 = empty(dv.shape(), DType::f32, dv.device());
  backward_f32_or_f64(widened(dout), widened(q), widened(k), widened(v), widened(out), lse, scale, causal, dq32, dk32,
                      dv32);
  dq.copy_(dq32);
  dk.copy_(dk32);
  dv.copy_(dv32);
}

}  // namespace attention_detail

}  // namespace reel::kernels::cpu
