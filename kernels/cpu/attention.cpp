// Scaled-dot-product attention, flash-style, forward and backward, on the CPU: the f32 and f64
// kernels and the entry points. bf16 and f16 operands go to kernels/cpu/attention_16.cpp (their
// own AVX-512 kernels, or these kernels on widened operands); what both files share is in
// kernels/cpu/attention_common.h.
//
// Operands (kernels/attention.h): (B, H, T, X) with unit stride along X and any strides on B, H
// and T, so the head views of one (B, T, 3C) projection are read in place and the outputs are
// written straight into the (B, T, H, X) memory the caller merges heads from: no split or merge
// copies. Every product below is one kernels/cpu/gemm.h call on a (b, h)'s rows through their row
// stride, on the calling thread (oneDNN's sgemm for f32, Eigen otherwise).
//
// Forward (FlashAttention-2 order): a task is one (b, h, tile of kBr queries). It walks the key
// tiles of up to kBc keys, stopping at the causal diagonal (the last tile is cut at key i0 + br,
// so causal attention computes about half the scores: with kBr = 32, T = 64 takes 3/4 of them and
// T = 256 9/16); per tile S = (Q K^T) * scale goes into a (kBr, kBc) buffer, and the running row
// max m and row sum l are updated online
//   m' = max(m, rowmax(S)),  P = exp(S - m'),  l = l exp(m - m') + rowsum(P),  O = O exp(m - m') + P V
// and at the end out = O / l, lse = m + log l. Extra memory: one score tile and the (kBr, Dv)
// accumulator per thread, plus lse (T) per (b, h) saved for backward; never T x T.
//
// Backward (FlashAttention-2's recomputation, in the forward's order): P is recomputed from the
// saved lse, P = exp(S - lse) with S as in the forward; with Di = rowsum(dout * out),
//   dV += P^T dO,  dP = dO V^T,  dS = scale P * (dP - Di),  dQ = dS K,  dK += dS^T Q.
// A task is one (b, h): query tiles of kBrBackward outer, each walking its key tiles up to the
// diagonal; dK and dV (zeroed first) accumulate in the outputs, dQ rows are written by their
// tile. On a GPU, FA-2 splits one (b, h) over key tiles and adds dQ with atomics; here one thread owns the whole
// (b, h), so every sum runs in a fixed order and the gradients are bit-identical for any thread
// count. The score and output tiles, the running max and sum, lse, Di and the scale are the
// dispatch's acc_t (T itself for f32 and f64, whose products are gemm_serial<T>).
//
// B * H (96 for GPT-2 small at B = 8) is plenty of parallelism for a CPU; with fewer (b, h) than
// threads the backward leaves threads idle.
//
// Tile sizes, chosen on bench/bench_attention's kernel table at 1 thread (docs/benchmarks.md, "Fused
// attention against the composed op"): the forward takes kBr = 32 queries, which keeps the causal
// waste (the scores above the diagonal inside a diagonal tile) at a quarter of a tile while a
// (32, T) score product still runs near oneDNN's large-GEMM rate. The backward's dK and dV products
// sum over the tile's queries, so they want more of them: 64, the fastest of 32, 64 and 128 at
// GPT-2 small's T = 256. kBc = 512 keys puts the whole key range of T <= 512 in one tile.
#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include <Eigen/Core>

#include "kernels/backends.h"
#include "kernels/cpu/attention_common.h"
#include "kernels/cpu/exp_ftz.h"
#include "kernels/cpu/gemm.h"

namespace reel::kernels::cpu {

using namespace attention_detail;

namespace {

constexpr int64_t kBr = 32;          // queries per forward tile
constexpr int64_t kBrBackward = 64;  // queries per backward tile
constexpr int64_t kBc = 512;  // keys per tile


template <typename T>
using Row = Eigen::Map<Eigen::Array<T, 1, Eigen::Dynamic>>;  // one contiguous row of a buffer
template <typename T>
using ConstRow = Eigen::Map<const Eigen::Array<T, 1, Eigen::Dynamic>>;

template <typename T, typename acc_t>
void forward_impl(Heads<const T> q, Heads<const T> k, Heads<const T> v, Heads<T> out,
                  acc_t* lse,  // (BH, Tq)
                  int64_t BH, int64_t Tq, int64_t Tk, int64_t D, int64_t Dv, acc_t scale, bool causal) {
  const acc_t neg_inf = -std::numeric_limits<acc_t>::infinity();
  const int64_t q_tiles = (Tq + kBr - 1) / kBr;
  const int64_t tasks = BH * q_tiles;
#pragma omp parallel if (tasks > 1 && BH * Tq * Tk * (D + Dv) >= kMinParallelFlops)
  {
    // Per-thread tiles in acc_t: scores (kBr, kBc), output (kBr, Dv); running row max and row sum.
    Tile<acc_t> S(kBr * kBc), O(kBr * Dv);
    std::vector<acc_t> m(kBr), l(kBr);
#pragma omp for schedule(dynamic)
    for (int64_t task = 0; task < tasks; ++task) {
      // Under a causal mask the last query tiles see the most keys: hand those out first.
      const int64_t bh = task / q_tiles, qt = q_tiles - 1 - task % q_tiles;
      const int64_t i0 = qt * kBr, br = std::min(kBr, Tq - i0);
      const T* Q = q.head(bh) + i0 * q.ld;
      std::fill(m.begin(), m.end(), neg_inf);
      std::fill(l.begin(), l.end(), acc_t(0));
      const int64_t kv_end = causal ? i0 + br : Tk;  // causal implies Tq == Tk
      for (int64_t j0 = 0; j0 < kv_end; j0 += kBc) {
        const int64_t bc = std::min(kBc, kv_end - j0);
        const T* K = k.head(bh) + j0 * k.ld;
        gemm_serial<T>(false, true, br, bc, D, Q, q.ld, K, k.ld, false, S.data(), kBc);  // Q K^T (br, bc)
        for (int64_t r = 0; r < br; ++r) {
          Row<acc_t> srow(S.data() + r * kBc, bc);
          srow *= scale;
          // Causal: key j0 + c is hidden from query i0 + r when j0 + c > i0 + r.
          if (causal)
            for (int64_t c = std::max<int64_t>(0, i0 + r - j0 + 1); c < bc; ++c) srow(c) = neg_inf;
          const acc_t m_new = std::max(m[r], srow.maxCoeff());
          if (m_new == neg_inf) {  // every key so far hidden: nothing to add yet
            srow.setZero();
            continue;
          }
          const acc_t alpha = std::exp(m[r] - m_new);  // 0 on the first visible tile
          srow = exp_ftz(srow - m_new);            // hidden keys (-inf) exactly 0
          l[r] = l[r] * alpha + srow.sum();
          if (j0 > 0) Row<acc_t>(O.data() + r * Dv, Dv) *= alpha;  // the first tile writes O below
          m[r] = m_new;
        }
        // O (=, then +=) P V: (br, bc) @ (bc, Dv)
        gemm_serial<T>(false, false, br, Dv, bc, S.data(), kBc, v.head(bh) + j0 * v.ld, v.ld, j0 > 0, O.data(), Dv);
      }
      T* orows = out.head(bh) + i0 * out.ld;
      for (int64_t r = 0; r < br; ++r) {
        Row<T>(orows + r * out.ld, Dv) = (ConstRow<acc_t>(O.data() + r * Dv, Dv) * (acc_t(1) / l[r])).template cast<T>();
        lse[bh * Tq + i0 + r] = m[r] + std::log(l[r]);
      }
    }
  }
}

template <typename T, typename acc_t>
void backward_impl(Heads<const T> dout, Heads<const T> q, Heads<const T> k, Heads<const T> v, Heads<const T> out,
                   const acc_t* lse,  // (BH, Tq)
                   Heads<T> dq, Heads<T> dk, Heads<T> dv, int64_t BH, int64_t Tq, int64_t Tk, int64_t D, int64_t Dv,
                   acc_t scale, bool causal) {
#pragma omp parallel if (BH > 1 && BH * Tq * Tk * (D + Dv) >= kMinParallelFlops)
  {
    // Per-thread tiles (kBrBackward, kBc) in acc_t: P, then dS in its place; and dP.
    Tile<acc_t> S(kBrBackward * kBc), dP(kBrBackward * kBc);
    std::vector<acc_t> Di(static_cast<size_t>(Tq));  // O(T) per (b, h)
#pragma omp for schedule(dynamic)
    for (int64_t bh = 0; bh < BH; ++bh) {
      const T* dOb = dout.head(bh);
      const T* Ob = out.head(bh);
      for (int64_t i = 0; i < Tq; ++i)
        Di[static_cast<size_t>(i)] = (ConstRow<T>(dOb + i * dout.ld, Dv).template cast<acc_t>() *
                                      ConstRow<T>(Ob + i * out.ld, Dv).template cast<acc_t>())
                                         .sum();
      T* dKb = dk.head(bh);
      T* dVb = dv.head(bh);
      for (int64_t j = 0; j < Tk; ++j) {  // dK and dV accumulate over the query tiles
        std::fill_n(dKb + j * dk.ld, D, T(0));
        std::fill_n(dVb + j * dv.ld, Dv, T(0));
      }
      for (int64_t i0 = 0; i0 < Tq; i0 += kBrBackward) {
        const int64_t br = std::min(kBrBackward, Tq - i0);
        const T* Q = q.head(bh) + i0 * q.ld;
        const T* dO = dOb + i0 * dout.ld;
        T* dQ = dq.head(bh) + i0 * dq.ld;
        const int64_t kv_end = causal ? i0 + br : Tk;
        for (int64_t j0 = 0; j0 < kv_end; j0 += kBc) {
          const int64_t bc = std::min(kBc, kv_end - j0);
          const T* K = k.head(bh) + j0 * k.ld;
          const T* V = v.head(bh) + j0 * v.ld;
          gemm_serial<T>(false, true, br, bc, D, Q, q.ld, K, k.ld, false, S.data(), kBc);  // Q K^T
          for (int64_t r = 0; r < br; ++r) {  // P = exp(S scale - lse), hidden keys 0
            Row<acc_t> srow(S.data() + r * kBc, bc);
            srow = exp_ftz(srow * scale - lse[bh * Tq + i0 + r]);
            if (causal)
              for (int64_t c = std::max<int64_t>(0, i0 + r - j0 + 1); c < bc; ++c) srow(c) = acc_t(0);
          }
          // dV (bc, Dv) += P^T dO
          gemm_serial<T>(true, false, bc, Dv, br, S.data(), kBc, dO, dout.ld, true, dVb + j0 * dv.ld, dv.ld);
          gemm_serial<T>(false, true, br, bc, Dv, dO, dout.ld, V, v.ld, false, dP.data(), kBc);  // dP = dO V^T
          for (int64_t r = 0; r < br; ++r)  // dS = scale P * (dP - Di), in place of P
            Row<acc_t>(S.data() + r * kBc, bc) *=
                (ConstRow<acc_t>(dP.data() + r * kBc, bc) - Di[static_cast<size_t>(i0 + r)]) * scale;
          gemm_serial<T>(false, false, br, D, bc, S.data(), kBc, K, k.ld, j0 > 0, dQ, dq.ld);  // dQ (=, +=) dS K
          // dK (bc, D) += dS^T Q
          gemm_serial<T>(true, false, bc, D, br, S.data(), kBc, Q, q.ld, true, dKb + j0 * dk.ld, dk.ld);
        }
      }
    }
  }
}

}  // namespace

// ---- launchers ----------------------------------------------------------------------------------

namespace attention_detail {

void forward_f32_or_f64(const Tensor& q, const Tensor& k, const Tensor& v, double scale, bool causal,
                        const Tensor& out, const Tensor& lse) {
  const int64_t BH = q.size(0) * q.size(1), Tq = q.size(2), D = q.size(3), Tk = k.size(2), Dv = v.size(3);
  REEL_DISPATCH_FLOATING(q.dtype(), "attention_forward",
                         forward_impl<scalar_t, acc_t>(Heads<const scalar_t>(q), Heads<const scalar_t>(k),
                                                Heads<const scalar_t>(v), Heads<scalar_t>(out), lse.data<acc_t>(), BH, Tq, Tk, D, Dv,
                                                static_cast<acc_t>(scale), causal))
}

void backward_f32_or_f64(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                         const Tensor& lse, double scale, bool causal, const Tensor& dq, const Tensor& dk,
                         const Tensor& dv) {
  const int64_t BH = q.size(0) * q.size(1), Tq = q.size(2), D = q.size(3), Tk = k.size(2), Dv = v.size(3);
  REEL_DISPATCH_FLOATING(q.dtype(), "attention_backward",
                         backward_impl<scalar_t, acc_t>(Heads<const scalar_t>(dout), Heads<const scalar_t>(q),
                                                 Heads<const scalar_t>(k), Heads<const scalar_t>(v),
                                                 Heads<const scalar_t>(out), lse.data<acc_t>(), Heads<scalar_t>(dq),
                                                 Heads<scalar_t>(dk), Heads<scalar_t>(dv), BH, Tq, Tk, D, Dv,
                                                 static_cast<acc_t>(scale), causal))
}

}  // namespace attention_detail

// bf16 and f16 go to attention_16.cpp; f32 and f64 run the kernels above.
void attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, double scale, bool causal,
                       const Tensor& out, const Tensor& lse) {
  if (is_16bit_floating(q.dtype())) return forward_16(q, k, v, scale, causal, out, lse);
  forward_f32_or_f64(q, k, v, scale, causal, out, lse);
}

void attention_backward(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                        const Tensor& lse, double scale, bool causal, const Tensor& dq, const Tensor& dk,
                        const Tensor& dv) {
  if (is_16bit_floating(q.dtype())) return backward_16(dout, q, k, v, out, lse, scale, causal, dq, dk, dv);
  backward_f32_or_f64(dout, q, k, v, out, lse, scale, causal, dq, dk, dv);
}

}  // namespace reel::kernels::cpu
