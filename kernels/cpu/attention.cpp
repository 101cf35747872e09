// Scaled-dot-product attention, flash-style, forward and backward, on the CPU.
//
// Forward (FlashAttention-2 order): a task is one (b, h, tile of kBr queries). It walks the key
// tiles of kBc keys, stopping at the causal diagonal (the last tile is cut at key i0 + kBr, so
// causal attention computes half the scores); per tile, S = (scale Q) K^T is one Eigen GEMM into
// a (kBr, kBc) tile (64 KB, in L2), and the running row max m and row sum l are updated online
//   m' = max(m, rowmax(S)),  P = exp(S - m'),  l = l exp(m - m') + rowsum(P),  O = O exp(m - m') + P V
// and at the end out = O / l, lse = m + log l. Extra memory: one score tile and the (kBr, Dv)
// accumulator per thread, plus lse (T) per (b, h) saved for backward; never T x T.
// Tile sizes: the GEMMs are the cost, and Eigen's small GEMMs run at ~2/3 of its large-GEMM
// rate at 64 x 64 x 64 and better at 64 x 256 x 64, hence wide key tiles (one tile up to T = 256).
//
// Backward (FlashAttention-2): P is recomputed from the saved lse, P = exp(S - lse), with S scaled
// as in the forward; with Di = rowsum(dout * out),
//   dV += P^T dO,  dP = dO V^T,  dS = P * (dP - Di),  dK += scale dS^T Q,  dQ += scale dS K.
// A task is one (b, h): key tiles outer (dK, dV of the tile accumulate in a per-thread tile and
// are written once), query tiles inner, each cut at the diagonal (dQ rows accumulate in the
// output). On a GPU, FA-2 splits one (b, h) over key tiles and adds dQ with atomics; here one
// thread owns the whole (b, h), so dQ is added in a fixed order and the gradients are
// bit-identical for any thread count. B * H (96 for GPT-2 small at B = 8) is plenty of
// parallelism for a CPU; with fewer (b, h) than threads the backward leaves threads idle.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include <Eigen/Core>

#include "kernels/backends.h"
#include "kernels/cpu/exp_ftz.h"

namespace reel::kernels::cpu {

namespace {

constexpr int64_t kBr = 64;   // queries per tile
constexpr int64_t kBc = 256;  // keys per tile
constexpr int64_t kMinParallelFlops = 1 << 18;

template <typename T>
using Mat = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
template <typename T>
using CMap = Eigen::Map<const Mat<T>>;  // a contiguous row-major (rows, cols) block of a tensor
template <typename T>
using MMap = Eigen::Map<Mat<T>>;

template <typename T>
void forward_impl(const T* q,  // (BH, Tq, D)
                  const T* k,  // (BH, Tk, D)
                  const T* v,  // (BH, Tk, Dv)
                  T* out,      // (BH, Tq, Dv)
                  T* lse,      // (BH, Tq)
                  int64_t BH, int64_t Tq, int64_t Tk, int64_t D, int64_t Dv, T scale, bool causal) {
  const T neg_inf = -std::numeric_limits<T>::infinity();
  const int64_t q_tiles = (Tq + kBr - 1) / kBr;
  const int64_t tasks = BH * q_tiles;
#pragma omp parallel if (tasks > 1 && BH * Tq * Tk * (D + Dv) >= kMinParallelFlops)
  {
    Mat<T> Qs(kBr, D), S(kBr, kBc), O(kBr, Dv);  // per-thread tiles
    std::vector<T> m(kBr), l(kBr);                // running row max and row sum
#pragma omp for schedule(dynamic)
    for (int64_t task = 0; task < tasks; ++task) {
      // Under a causal mask the last query tiles see the most keys: hand those out first.
      const int64_t bh = task / q_tiles, qt = q_tiles - 1 - task % q_tiles;
      const int64_t i0 = qt * kBr, br = std::min(kBr, Tq - i0);
      auto Q = Qs.topRows(br);
      Q = CMap<T>(q + (bh * Tq + i0) * D, br, D) * scale;
      auto Ot = O.topRows(br);
      std::fill(m.begin(), m.end(), neg_inf);
      std::fill(l.begin(), l.end(), T(0));
      const int64_t kv_end = causal ? i0 + br : Tk;  // causal implies Tq == Tk
      for (int64_t j0 = 0; j0 < kv_end; j0 += kBc) {
        const int64_t bc = std::min(kBc, kv_end - j0);
        CMap<T> Kj(k + (bh * Tk + j0) * D, bc, D), Vj(v + (bh * Tk + j0) * Dv, bc, Dv);
        auto St = S.topLeftCorner(br, bc);
        St.noalias() = Q * Kj.transpose();
        for (int64_t r = 0; r < br; ++r) {
          auto srow = St.row(r).array();
          // Causal: key j0 + c is hidden from query i0 + r when j0 + c > i0 + r.
          if (causal)
            for (int64_t c = std::max<int64_t>(0, i0 + r - j0 + 1); c < bc; ++c) srow(c) = neg_inf;
          const T m_new = std::max(m[r], srow.maxCoeff());
          if (m_new == neg_inf) {  // every key so far hidden: nothing to add yet
            srow.setZero();
            continue;
          }
          const T alpha = std::exp(m[r] - m_new);  // 0 on the first visible tile
          srow = exp_ftz(srow - m_new);  // hidden keys (-inf) exactly 0
          l[r] = l[r] * alpha + srow.sum();
          if (j0 > 0) Ot.row(r) *= alpha;  // the first tile writes O below instead of adding
          m[r] = m_new;
        }
        if (j0 == 0) Ot.noalias() = St * Vj;
        else Ot.noalias() += St * Vj;
      }
      MMap<T> Out(out + (bh * Tq + i0) * Dv, br, Dv);
      for (int64_t r = 0; r < br; ++r) {
        Out.row(r) = Ot.row(r) * (T(1) / l[r]);
        lse[bh * Tq + i0 + r] = m[r] + std::log(l[r]);
      }
    }
  }
}

template <typename T>
void backward_impl(const T* dout, const T* q, const T* k, const T* v, const T* out, const T* lse, T* dq, T* dk,
                   T* dv, int64_t BH, int64_t Tq, int64_t Tk, int64_t D, int64_t Dv, T scale, bool causal) {
#pragma omp parallel if (BH > 1 && BH * Tq * Tk * (D + Dv) >= kMinParallelFlops)
  {
    Mat<T> Qs(kBr, D), S(kBr, kBc), dP(kBr, kBc), dK(kBc, D), dV(kBc, Dv);  // per-thread tiles
    std::vector<T> Di(static_cast<size_t>(Tq));                            // O(T) per (b, h)
#pragma omp for schedule(dynamic)
    for (int64_t bh = 0; bh < BH; ++bh) {
      const T* qb = q + bh * Tq * D;
      const T* kb = k + bh * Tk * D;
      const T* vb = v + bh * Tk * Dv;
      const T* dob = dout + bh * Tq * Dv;
      const T* lb = lse + bh * Tq;
      CMap<T> dO(dob, Tq, Dv), Ob(out + bh * Tq * Dv, Tq, Dv);
      for (int64_t i = 0; i < Tq; ++i) Di[static_cast<size_t>(i)] = dO.row(i).dot(Ob.row(i));
      MMap<T> dQ(dq + bh * Tq * D, Tq, D);
      dQ.setZero();
      for (int64_t j0 = 0; j0 < Tk; j0 += kBc) {
        const int64_t bc = std::min(kBc, Tk - j0);
        CMap<T> Kj(kb + j0 * D, bc, D), Vj(vb + j0 * Dv, bc, Dv);
        auto dKt = dK.topRows(bc);
        auto dVt = dV.topRows(bc);
        dKt.setZero();
        dVt.setZero();
        // Causal: only query tiles holding a row i >= j0 see this key tile, and query tile i0 sees
        // only its first bce = i0 + br - j0 keys: the GEMMs stop at the diagonal.
        for (int64_t i0 = causal ? (j0 / kBr) * kBr : 0; i0 < Tq; i0 += kBr) {
          const int64_t br = std::min(kBr, Tq - i0);
          const int64_t bce = causal ? std::min(bc, i0 + br - j0) : bc;
          auto Q = Qs.topRows(br);
          Q = CMap<T>(qb + i0 * D, br, D) * scale;  // scaled as in the forward
          auto dOi = dO.middleRows(i0, br);
          auto Kje = Kj.topRows(bce);
          auto St = S.topLeftCorner(br, bce);
          St.noalias() = Q * Kje.transpose();
          for (int64_t r = 0; r < br; ++r) {  // P = exp(S - lse), hidden keys 0
            auto srow = St.row(r).array();
            srow = exp_ftz(srow - lb[i0 + r]);
            if (causal)
              for (int64_t c = std::max<int64_t>(0, i0 + r - j0 + 1); c < bce; ++c) srow(c) = T(0);
          }
          dVt.topRows(bce).noalias() += St.transpose() * dOi;
          auto dPt = dP.topLeftCorner(br, bce);
          dPt.noalias() = dOi * Vj.topRows(bce).transpose();
          for (int64_t r = 0; r < br; ++r)  // dS = P * (dP - Di), in place of P
            St.row(r).array() *= dPt.row(r).array() - Di[static_cast<size_t>(i0 + r)];
          dKt.topRows(bce).noalias() += St.transpose() * Q;  // Q is already scaled: scale dS^T Q
          dQ.middleRows(i0, br).noalias() += scale * (St * Kje);
        }
        MMap<T>(dk + (bh * Tk + j0) * D, bc, D) = dKt;
        MMap<T>(dv + (bh * Tk + j0) * Dv, bc, Dv) = dVt;
      }
    }
  }
}

}  // namespace

// ---- launchers ----------------------------------------------------------------------------------

void attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, double scale, bool causal,
                       const Tensor& out, const Tensor& lse) {
  const int64_t BH = q.size(0), Tq = q.size(1), D = q.size(2), Tk = k.size(1), Dv = v.size(2);
  REEL_DISPATCH_FLOATING(q.dtype(), "attention_forward",
                         forward_impl<scalar_t>(q.data<scalar_t>(), k.data<scalar_t>(), v.data<scalar_t>(),
                                                out.data<scalar_t>(), lse.data<scalar_t>(), BH, Tq, Tk, D, Dv,
                                                static_cast<scalar_t>(scale), causal))
}

void attention_backward(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                        const Tensor& lse, double scale, bool causal, const Tensor& dq, const Tensor& dk,
                        const Tensor& dv) {
  const int64_t BH = q.size(0), Tq = q.size(1), D = q.size(2), Tk = k.size(1), Dv = v.size(2);
  REEL_DISPATCH_FLOATING(q.dtype(), "attention_backward",
                         backward_impl<scalar_t>(dout.data<scalar_t>(), q.data<scalar_t>(), k.data<scalar_t>(),
                                                 v.data<scalar_t>(), out.data<scalar_t>(), lse.data<scalar_t>(),
                                                 dq.data<scalar_t>(), dk.data<scalar_t>(), dv.data<scalar_t>(), BH,
                                                 Tq, Tk, D, Dv, static_cast<scalar_t>(scale), causal))
}

}  // namespace reel::kernels::cpu
