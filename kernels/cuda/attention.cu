// kernels/cuda/attention.cu: scaled-dot-product attention, flash-style, forward and backward,
// for q (B, H, Tq, D), k (B, H, Tk, D), v (B, H, Tk, Dv), D and Dv up to 128, causal or not.
//
// Layout: q, k, v, out, dout, dq, dk and dv are rank-4 with stride 1 along the last dim and any
// strides on (B, H, T), read from the tensors (Heads below): q, k, v are usually head views of
// one (B, T, 3C) projection, strides (T 3C, D, 3C, 1), and the outputs (B, T, H, D) memory seen
// as (B, H, T, D), so the model splits and merges heads with no copies. The kernels index heads
// by bh = b H + h; lse is contiguous (B H, Tq).
//
// Forward (one kernel): a block is one (b, h) and a tile of kWarps queries, one warp per query.
// It walks the key tiles of kBc keys, stopping at the causal diagonal; each tile of K and V is
// staged in shared memory once for all the block's queries. Per tile, lane j of a warp computes
// the score of key j (a dot product over D from shared memory, the query scaled on load as the
// CPU does), the warp updates the online softmax
//   m' = max(m, max_j s_j),  p_j = exp(s_j - m'),  l = l exp(m - m') + sum_j p_j,
// and each lane, owning output dims d = lane, lane + 32, ... (at most 4 registers), does
// o_d = o_d exp(m - m') + sum_j p_j V[j, d] with the p_j read back from shared memory. At the end
// out = o / l and lse = m + log l. Extra memory: lse, O(T) per (b, h); never the T x T scores.
//
// Backward (FlashAttention-2, one launch): P is recomputed from the saved lse, and with
// Di = rowsum(dout * out),
//   dV_j = sum_i P_ij dO_i,  dP_ij = dO_i . V_j,  dS_ij = P_ij (dP_ij - Di),
//   dK_j = scale sum_i dS_ij Q_i,  dQ_i = scale sum_j dS_ij K_j.
// The launch's first q_tiles blocks per (b, h) play the dq role, the rest the dkdv role; both
// make the Di they need themselves with one helper (row_di: lanes over the columns of the staged
// dO row and the out row, then warp_sum), so both see the same bits and neither waits on the other.
//   dq:    the forward's layout (warp per query, lane per key of a K/V tile in shared memory); each
//          query's warp makes its Di, then recomputes dS_ij and adds sum_j dS_ij K[j, d].
//   dkdv:  a block owns kKeyWarps keys of one (b, h), one warp per key, and loops over the
//          query tiles from the diagonal on; each query tile (scaled Q, dO, lse of kBr rows) is
//          staged in shared memory and its Di made there (a warp per row), lane i computes P_ij and
//          dS_ij for query i, and each lane, owning dims d, adds sum_i P_ij dO[i, d] and
//          sum_i dS_ij Q[i, d] into its registers. A key's dK and dV are written once, by the warp
//          that owns it.
// (Di was a launch of its own, then the dq kernel's output for a second dkdv launch: making it in
// both roles costs each dkdv block one more read of out's rows and saves two launches a backward.)
// FlashAttention-2 on a GPU computes dQ in the dkdv kernel with float atomicAdd, whose order
// changes the bits run to run; the separate dq role recomputes S and dP once more (about 40% more
// backward FLOPs) but every gradient is a fixed-order sum with no atomics: bit-identical runs.
//
// Tiles: a score is a full dot product by one lane (no shuffles per score), shared-memory rows
// that lanes read in parallel are padded to D + 1 (no bank conflicts), and every kernel stays
// under the default 48 KiB of dynamic shared memory at D = Dv = 128: f32 uses 32-key tiles and
// 8 queries per block, f64 16 and 4 (twice the bytes per value). The reuse of a staged tile is
// only kWarps queries (a production kernel would give each warp several rows and use mma); this
// is the readable version, checked against the CPU.
//
// Precision: everything past the loads is the dispatch's acc_t (the staged tiles in shared memory,
// scores, the running max and sum, the output and gradient registers, Di); global loads convert
// T -> acc_t and stores acc_t -> T, so f32 and f64 (where acc_t is T) compute exactly as before.
// The tile sizes follow acc_t, the type shared memory holds. lse is acc_t too (kernels/attention.h):
// for bf16 and f16 q, k, v, out the tiles, statistics and lse are f32 and only out, dq, dk, dv are
// rounded, once each, to the 16-bit type (core/half.h's conversions, the same bits as the CPU's).
#include <algorithm>
#include <cmath>
#include <type_traits>

#include "kernels/backends.h"
#include "kernels/cuda/block_reduce.h"
#include "kernels/cuda/launch.h"

namespace reel::kernels::cuda {

namespace {

constexpr int kMaxHead = 128;              // D and Dv
constexpr int kDimsPerLane = kMaxHead / 32;  // output dims a lane owns
constexpr size_t kSmemLimit = 48 * 1024;

// kBc: keys per K/V tile (lane per key); kWarps: queries per forward/dq block (warp per query);
// kBr: queries per dkdv query tile (lane per query); kKeyWarps: keys per dkdv block. Keyed by
// acc_t, the type of the staged tiles.
template <typename acc_t>
struct AttnTiles;
template <>
struct AttnTiles<float> {
  static constexpr int kBc = 32, kWarps = 8, kBr = 32, kKeyWarps = 8;
};
template <>
struct AttnTiles<double> {
  static constexpr int kBc = 16, kWarps = 4, kBr = 16, kKeyWarps = 4;
};

// The rows of one head of an operand: row t at p + t ld, its cols elements contiguous.
template <typename T>
struct Rows {
  T* p;
  int64_t ld;
  __device__ __forceinline__ T* operator[](int64_t t) const { return p + t * ld; }
};

// A rank-4 operand (B, H, T, cols) with stride 1 along cols and any strides sb, sh, st on the
// rest: element (b, h, t, c) is data[b sb + h sh + t st + c]. Passed to the kernels by value.
template <typename T>
struct Heads {
  T* data;
  int64_t sb, sh, st;
  // The rows of head bh = b H + h.
  __device__ __forceinline__ Rows<T> head(int64_t bh, int64_t H) const {
    return {data + (bh / H) * sb + (bh % H) * sh, st};
  }
};
static_assert(std::has_unique_object_representations_v<Heads<float>>);  // equal views are equal bytes

// Stages rows [r0, r0 + n) of src, cols elements each, into shared memory (acc_t) with row pitch
// `ld`, scaled by `scale`; rows past n are not touched. The whole block cooperates.
template <typename acc_t, typename T>
__device__ __forceinline__ void stage_rows(acc_t* dst, int ld, Rows<const T> src, int64_t r0, int n, int cols,
                                           acc_t scale) {
  const int threads = blockDim.x;
  for (int e = threadIdx.x; e < n * cols; e += threads) {
    const int r = e / cols, c = e - r * cols;
    dst[r * ld + c] = static_cast<acc_t>(src[r0 + r][c]) * scale;
  }
}

// sum_d a[d] b[d] over d < n, in order of d: a score or a dP, one lane's whole dot product.
template <typename T>
__device__ __forceinline__ T dot(const T* a, const T* b, int n) {
  T acc = 0;
  for (int d = 0; d < n; ++d) acc += a[d] * b[d];
  return acc;
}

// acc[kk] = acc[kk] alpha + sum_r w[r] X[r, d] over r < n, in order of r, for each dim
// d = lane + 32 kk < cols that the lane owns. w: (n), X: (n, ld), both in shared memory. The
// rescale and the first product stay one expression, as the forward wrote them (the host compiler
// fuses multiply-adds across statements; alpha = 1 folds away).
template <typename T>
__device__ __forceinline__ void add_weighted_rows(T (&acc)[kDimsPerLane], T alpha, const T* w, const T* X, int ld,
                                                  int n, int cols, int lane) {
  for (int kk = 0; kk < kDimsPerLane; ++kk) {
    const int d = lane + 32 * kk;
    if (d < cols) {
      T a = acc[kk] * alpha;
      for (int r = 0; r < n; ++r) a += w[r] * X[r * ld + d];
      acc[kk] = a;
    }
  }
}

// The queries of a forward or dq block: kWarps consecutive queries of head bh, block =
// bh * q_tiles + query tile. Warp w owns query i = q0 + w; in each K/V tile, lane l owns key j0 + l.
// T: the staged rows' type (acc_t).
template <typename T>
struct QueryTile {
  int lane, warp;
  int64_t bh, q0, i;
  bool active;     // i < Tq, uniform over the warp; an inactive warp still stages tiles and syncs
  int64_t kv_end;  // the block's queries see keys [0, kv_end): causal stops at the diagonal (Tq == Tk)

  // Copies row i of src (Tq rows of cols), times scale, into the warp's row of S (kWarps, cols)
  // (zeros for an inactive warp) and returns that row. The warp's lanes read it after the next
  // barrier.
  template <typename In>
  __device__ __forceinline__ T* stage_row(T* S, Rows<const In> src, int cols, T scale) const {
    T* row = S + warp * cols;
    for (int d = lane; d < cols; d += 32) row[d] = active ? static_cast<T>(src[i][d]) * scale : T(0);
    return row;
  }
  // Whether query i sees the lane's key j = j0 + lane of a tile of bc keys (the causal mask).
  __device__ __forceinline__ bool sees(int64_t j0, int bc, bool causal) const {
    const int64_t j = j0 + lane;
    return active && lane < bc && (!causal || j <= i);
  }
};

template <typename T>
__device__ __forceinline__ QueryTile<T> query_tile(int64_t block, int64_t Tq, int64_t Tk, bool causal, int64_t q_tiles) {
  constexpr int kWarps = AttnTiles<T>::kWarps;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t bh = block / q_tiles, q0 = (block % q_tiles) * kWarps, i = q0 + warp;
  return {lane, warp, bh, q0, i, i < Tq, causal ? min_i64(Tk, q0 + kWarps) : Tk};
}

// The K/V tile of a forward or dq block, at the start of its dynamic shared memory: Ks (kBc, D + 1)
// (lane j reads row j: padded), then Vs (kBc, ldv); the kernel's own buffers start at end(). T: the
// staged type (acc_t).
template <typename T>
struct KvTile {
  T* Ks;
  int ldk;
  T* Vs;
  int ldv;

  __device__ __forceinline__ T* end() const { return Vs + AttnTiles<T>::kBc * ldv; }
  // One step of the key-tile loop, by the whole block with the same j0: waits until nobody reads
  // the previous tile (the first time: until the warps' staged rows are written), stages keys
  // [j0, j0 + bc) of k (Tk rows of D) and v (Tk rows of Dv), and waits until they are written.
  // Returns bc.
  template <typename In>
  __device__ __forceinline__ int stage(Rows<const In> k, Rows<const In> v, int64_t j0, int64_t kv_end, int D,
                                       int Dv) const {
    const int bc = static_cast<int>(min_i64(AttnTiles<T>::kBc, kv_end - j0));
    __syncthreads();
    stage_rows(Ks, ldk, k, j0, bc, D, T(1));
    stage_rows(Vs, ldv, v, j0, bc, Dv, T(1));
    __syncthreads();
    return bc;
  }
};

template <typename T>
__device__ __forceinline__ KvTile<T> kv_tile(T* smem, int D, int ldv) {
  return {smem, D + 1, smem + AttnTiles<T>::kBc * (D + 1), ldv};
}

// Di = sum_d dO[d] out[d] for one query row by one warp: dorow (Dv) staged in shared memory,
// orow (Dv) in global memory; lanes over d = lane, lane + 32, ..., then warp_sum. Both backward
// roles make Di with this one function, so they agree bit for bit.
template <typename A, typename T>
__device__ __forceinline__ A row_di(const A* dorow, const T* orow, int Dv, int lane) {
  A di = 0;
  for (int d = lane; d < Dv; d += 32) di += dorow[d] * static_cast<A>(orow[d]);
  return warp_sum(di);
}

// ---- kernels ---------------------------------------------------------------------------------

// q: (B, H, Tq, D), k: (B, H, Tk, D), v: (B, H, Tk, Dv) -> out: (B, H, Tq, Dv), lse: (B H, Tq)
// contiguous. Block: kWarps warps; blockIdx.x = bh * q_tiles + query tile. Dynamic shared memory:
//   Ks (kBc, D + 1), Vs (kBc, Dv), Qs (kWarps, D) scaled, Ps (kWarps, kBc).
template <typename T, typename acc_t>
__global__ void __launch_bounds__(AttnTiles<acc_t>::kWarps * 32) attention_forward_kernel(Heads<const T> q, Heads<const T> k, Heads<const T> v, Heads<T> out, acc_t* lse,
                                         int64_t H, int64_t Tq, int64_t Tk, int D, int Dv, acc_t scale, bool causal,
                                         int64_t q_tiles) {
  using std::exp;
  using std::log;
  using std::fmax;
  using A = acc_t;
  constexpr int kBc = AttnTiles<A>::kBc, kWarps = AttnTiles<A>::kWarps;
  SIMT_DYNAMIC_SHARED(A, smem);
  const KvTile<A> kv = kv_tile(smem, D, Dv);  // lanes read V by columns: no padding
  A* Qs = kv.end();
  A* Ps = Qs + kWarps * D;
  const QueryTile<A> qt = query_tile<A>(blockIdx.x, Tq, Tk, causal, q_tiles);
  const int lane = qt.lane;
  const Rows<const T> qh = q.head(qt.bh, H), kh = k.head(qt.bh, H), vh = v.head(qt.bh, H);
  const A* qrow = qt.stage_row(Qs, qh, D, scale);
  A* prow = Ps + qt.warp * kBc;
  A m = static_cast<A>(-INFINITY), l = 0;
  A o[kDimsPerLane] = {};
  for (int64_t j0 = 0; j0 < qt.kv_end; j0 += kBc) {  // uniform over the block
    const int bc = kv.stage(kh, vh, j0, qt.kv_end, D, Dv);
    const A s = qt.sees(j0, bc, causal) ? dot(qrow, kv.Ks + lane * kv.ldk, D) : static_cast<A>(-INFINITY);
    const A m_new = fmax(m, warp_max(s));
    const A p = s == -INFINITY ? A(0) : exp(s - m_new);
    const A alpha = m == -INFINITY ? A(0) : exp(m - m_new);  // 0 before the first visible key
    l = l * alpha + warp_sum(p);
    m = m_new;
    if (lane < kBc) prow[lane] = p;
    __syncwarp();
    add_weighted_rows(o, alpha, prow, kv.Vs, kv.ldv, bc, Dv, lane);
  }
  if (qt.active) {
    T* orow = out.head(qt.bh, H)[qt.i];
    for (int kk = 0; kk < kDimsPerLane; ++kk)
      if (lane + 32 * kk < Dv) orow[lane + 32 * kk] = static_cast<T>(o[kk] / l);
    if (lane == 0) lse[qt.bh * Tq + qt.i] = m + log(l);
  }
}

// The dkdv role: dK, dV for kKeyWarps keys of one (b, h); block = bh * k_tiles + key tile. q, k,
// v as in the forward; dout and out (B, H, Tq, Dv); lse (B H, Tq) contiguous; dk (B, H, Tk, D),
// dv (B, H, Tk, Dv). Dynamic shared memory: Qs (kBr, D + 1) scaled, dOs (kBr, Dv + 1),
// Kr (kKeyWarps, D), Vr (kKeyWarps, Dv), Ps (kKeyWarps, kBr), dSs (kKeyWarps, kBr), Ls (kBr), Ds (kBr).
template <typename T, typename acc_t>
__device__ __forceinline__ void attention_backward_dkdv(int64_t block, Heads<const T> dout, Heads<const T> q,
                                                        Heads<const T> k, Heads<const T> v, Heads<const T> out,
                                                        const acc_t* lse, Heads<T> dk, Heads<T> dv, int64_t H,
                                                        int64_t Tq, int64_t Tk, int D, int Dv, acc_t scale,
                                                        bool causal, int64_t k_tiles) {
  using std::exp;
  using A = acc_t;
  constexpr int kBr = AttnTiles<A>::kBr, kKeyWarps = AttnTiles<A>::kKeyWarps;
  SIMT_DYNAMIC_SHARED(A, smem);
  const int ldq = D + 1, ldo = Dv + 1;
  A* Qs = smem;
  A* dOs = Qs + kBr * ldq;
  A* Kr = dOs + kBr * ldo;
  A* Vr = Kr + kKeyWarps * D;
  A* Ps = Vr + kKeyWarps * Dv;
  A* dSs = Ps + kKeyWarps * kBr;
  A* Ls = dSs + kKeyWarps * kBr;
  A* Ds = Ls + kBr;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t bh = block / k_tiles, k0 = (block % k_tiles) * kKeyWarps, j = k0 + warp;
  const bool active = j < Tk;  // uniform over the warp
  const Rows<const T> qh = q.head(bh, H), doh = dout.head(bh, H), oh = out.head(bh, H);
  lse += bh * Tq;
  if (active) {
    const T* krow = k.head(bh, H)[j];
    const T* vrow = v.head(bh, H)[j];
    for (int d = lane; d < D; d += 32) Kr[warp * D + d] = static_cast<A>(krow[d]);
    for (int d = lane; d < Dv; d += 32) Vr[warp * Dv + d] = static_cast<A>(vrow[d]);
  } else {
    for (int d = lane; d < D; d += 32) Kr[warp * D + d] = A(0);
    for (int d = lane; d < Dv; d += 32) Vr[warp * Dv + d] = A(0);
  }
  A acc_dk[kDimsPerLane] = {}, acc_dv[kDimsPerLane] = {};
  // Causal: only queries i >= k0 see these keys; start at the query tile that holds k0.
  for (int64_t i0 = causal ? (k0 / kBr) * kBr : 0; i0 < Tq; i0 += kBr) {  // uniform over the block
    const int br = static_cast<int>(min_i64(kBr, Tq - i0));
    __syncthreads();  // the previous tile is no longer read (and Kr, Vr are written)
    stage_rows(Qs, ldq, qh, i0, br, D, scale);
    stage_rows(dOs, ldo, doh, i0, br, Dv, A(1));
    for (int r = threadIdx.x; r < br; r += blockDim.x) Ls[r] = lse[i0 + r];
    __syncthreads();
    for (int r = warp; r < br; r += kKeyWarps) {  // Di of the tile's rows, a warp per row
      const acc_t di = row_di(dOs + r * ldo, oh[i0 + r], Dv, lane);
      if (lane == 0) Ds[r] = di;
    }
    __syncthreads();
    const int64_t i = i0 + lane;
    A p = 0, ds = 0;
    if (active && lane < br && (!causal || j <= i)) {
      const A s = dot(Qs + lane * ldq, Kr + warp * D, D), dp = dot(dOs + lane * ldo, Vr + warp * Dv, Dv);
      p = exp(s - Ls[lane]);
      ds = p * (dp - Ds[lane]);
    }
    if (lane < kBr) {
      Ps[warp * kBr + lane] = p;
      dSs[warp * kBr + lane] = ds;
    }
    __syncwarp();
    add_weighted_rows(acc_dv, A(1), Ps + warp * kBr, dOs, ldo, br, Dv, lane);
    add_weighted_rows(acc_dk, A(1), dSs + warp * kBr, Qs, ldq, br, D, lane);  // Qs is scaled: scale sum_i dS_ij Q_i
  }
  if (active) {
    T* dkrow = dk.head(bh, H)[j];
    T* dvrow = dv.head(bh, H)[j];
    for (int kk = 0; kk < kDimsPerLane; ++kk) {
      const int d = lane + 32 * kk;
      if (d < D) dkrow[d] = static_cast<T>(acc_dk[kk]);
      if (d < Dv) dvrow[d] = static_cast<T>(acc_dv[kk]);
    }
  }
}

// The dq role: dQ for kWarps queries of one (b, h); block = bh * q_tiles + query tile. q, k, v,
// dout, out, lse as in the dkdv role; dq (B, H, Tq, D). Each query's warp makes its Di first.
// Dynamic shared memory:
//   Ks (kBc, D + 1), Vs (kBc, Dv + 1), Qs (kWarps, D) scaled, dOs (kWarps, Dv), dSs (kWarps, kBc).
template <typename T, typename acc_t>
__device__ __forceinline__ void attention_backward_dq(int64_t block, Heads<const T> dout, Heads<const T> q,
                                                      Heads<const T> k, Heads<const T> v, Heads<const T> out,
                                                      const acc_t* lse, Heads<T> dq, int64_t H, int64_t Tq,
                                                      int64_t Tk, int D, int Dv, acc_t scale, bool causal,
                                                      int64_t q_tiles) {
  using std::exp;
  using A = acc_t;
  constexpr int kBc = AttnTiles<A>::kBc, kWarps = AttnTiles<A>::kWarps;
  SIMT_DYNAMIC_SHARED(A, smem);
  const KvTile<A> kv = kv_tile(smem, D, Dv + 1);  // lane j reads row j of V too: padded
  A* Qs = kv.end();
  A* dOs = Qs + kWarps * D;
  A* dSs = dOs + kWarps * Dv;
  const QueryTile<A> qt = query_tile<A>(block, Tq, Tk, causal, q_tiles);
  const int lane = qt.lane;
  const Rows<const T> kh = k.head(qt.bh, H), vh = v.head(qt.bh, H);
  const A* qrow = qt.stage_row(Qs, q.head(qt.bh, H), D, scale);
  const A* dorow = qt.stage_row(dOs, dout.head(qt.bh, H), Dv, A(1));
  const A lse_i = qt.active ? lse[qt.bh * Tq + qt.i] : A(0);
  const A di_i = qt.active ? row_di(dorow, out.head(qt.bh, H)[qt.i], Dv, lane) : A(0);  // active is uniform over the warp
  A* dsrow = dSs + qt.warp * kBc;
  A acc[kDimsPerLane] = {};
  for (int64_t j0 = 0; j0 < qt.kv_end; j0 += kBc) {  // uniform over the block
    const int bc = kv.stage(kh, vh, j0, qt.kv_end, D, Dv);
    A ds = 0;
    if (qt.sees(j0, bc, causal)) {
      const A s = dot(qrow, kv.Ks + lane * kv.ldk, D), dp = dot(dorow, kv.Vs + lane * kv.ldv, Dv);
      ds = exp(s - lse_i) * (dp - di_i);
    }
    if (lane < kBc) dsrow[lane] = ds;
    __syncwarp();
    add_weighted_rows(acc, A(1), dsrow, kv.Ks, kv.ldk, bc, D, lane);
  }
  if (qt.active) {
    T* dqrow = dq.head(qt.bh, H)[qt.i];
    for (int kk = 0; kk < kDimsPerLane; ++kk)
      if (lane + 32 * kk < D) dqrow[lane + 32 * kk] = static_cast<T>(scale * acc[kk]);
  }
}

// The whole backward, one launch: blocks [0, BH q_tiles) play the dq role, the next BH k_tiles the
// dkdv role (kWarps == kKeyWarps: one block size serves both). Dynamic shared memory: the larger
// of the two roles' layouts.
static_assert(AttnTiles<float>::kWarps == AttnTiles<float>::kKeyWarps &&
              AttnTiles<double>::kWarps == AttnTiles<double>::kKeyWarps);
template <typename T, typename acc_t>
__global__ void __launch_bounds__(AttnTiles<acc_t>::kWarps * 32) attention_backward_kernel(Heads<const T> dout, Heads<const T> q, Heads<const T> k,
                                          Heads<const T> v, Heads<const T> out, const acc_t* lse, Heads<T> dq,
                                          Heads<T> dk, Heads<T> dv, int64_t H, int64_t Tq, int64_t Tk, int D,
                                          int Dv, acc_t scale, bool causal, int64_t q_tiles, int64_t k_tiles,
                                          int64_t dq_blocks) {
  const int64_t block = blockIdx.x;  // uniform over the block: each block plays one role
  if (block < dq_blocks)
    attention_backward_dq<T, acc_t>(block, dout, q, k, v, out, lse, dq, H, Tq, Tk, D, Dv, scale, causal, q_tiles);
  else
    attention_backward_dkdv<T, acc_t>(block - dq_blocks, dout, q, k, v, out, lse, dk, dv, H, Tq, Tk, D, Dv, scale,
                                      causal, k_tiles);
}

// ---- launchers -------------------------------------------------------------------------------

void check_heads(const char* op, int64_t D, int64_t Dv) {
  REEL_CHECK(D <= kMaxHead && Dv <= kMaxHead, op, ": head dims D = ", D, " and Dv = ", Dv,
             " exceed the cuda kernels' limit of ", kMaxHead);
}

// The kernels' view of a rank-4 operand (B, H, T, cols); the entry points guarantee stride 1 along
// cols, checked here too because a wrong layout would read the wrong elements silently.
template <typename T>
Heads<T> heads_of(const char* op, const Tensor& t) {
  REEL_CHECK(t.dim() == 4 && t.stride(3) == 1, op, ": the cuda kernels take rank-4 operands with stride 1 along the "
             "last dim, got ", t.shape(), " with strides ", t.strides());
  return {t.data<std::remove_const_t<T>>(), t.stride(0), t.stride(1), t.stride(2)};
}

template <typename T>
size_t forward_smem(int D, int Dv) {
  using C = AttnTiles<T>;
  return sizeof(T) * (size_t{C::kBc} * (D + 1) + size_t{C::kBc} * Dv + size_t{C::kWarps} * D + C::kWarps * C::kBc);
}
template <typename T>
size_t dkdv_smem(int D, int Dv) {
  using C = AttnTiles<T>;
  return sizeof(T) * (size_t{C::kBr} * (D + 1) + size_t{C::kBr} * (Dv + 1) + size_t{C::kKeyWarps} * (D + Dv) +
                      2 * C::kKeyWarps * C::kBr + 2 * C::kBr);
}
template <typename T>
size_t dq_smem(int D, int Dv) {
  using C = AttnTiles<T>;
  return sizeof(T) * (size_t{C::kBc} * (D + 1) + size_t{C::kBc} * (Dv + 1) + size_t{C::kWarps} * (D + Dv) +
                      C::kWarps * C::kBc);
}

int64_t tiles(int64_t n, int per_tile) { return (n + per_tile - 1) / per_tile; }

unsigned grid_of(int64_t BH, int64_t per_bh) {
  REEL_CHECK(BH * per_bh <= int64_t{0x7fffffff}, "attention: ", BH, " x ", per_bh, " blocks exceed CUDA's grid");
  return static_cast<unsigned>(BH * per_bh);
}

template <typename T, typename acc_t>
void forward_launch(const Tensor& q, const Tensor& k, const Tensor& v, double scale, bool causal, const Tensor& out,
                    const Tensor& lse) {
  const char* op = "attention_forward";
  const int64_t H = q.size(1), BH = q.size(0) * H, Tq = q.size(2), Tk = k.size(2);
  const int D = static_cast<int>(q.size(3)), Dv = static_cast<int>(v.size(3));
  const size_t smem = forward_smem<acc_t>(D, Dv);
  REEL_CHECK(smem <= kSmemLimit, "attention_forward: ", smem, " bytes of shared memory");
  const int64_t q_tiles = tiles(Tq, AttnTiles<acc_t>::kWarps);
  launch("attention_forward_kernel", attention_forward_kernel<T, acc_t>, grid_of(BH, q_tiles),
         AttnTiles<acc_t>::kWarps * 32, smem, heads_of<const T>(op, q), heads_of<const T>(op, k),
         heads_of<const T>(op, v), heads_of<T>(op, out), lse.data<acc_t>(), H, Tq, Tk, D, Dv, static_cast<acc_t>(scale),
         causal, q_tiles);
}

template <typename T, typename acc_t>
void backward_launch(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                     const Tensor& lse, double scale, bool causal, const Tensor& dq, const Tensor& dk,
                     const Tensor& dv) {
  const char* op = "attention_backward";
  const int64_t H = q.size(1), BH = q.size(0) * H, Tq = q.size(2), Tk = k.size(2);
  const int D = static_cast<int>(q.size(3)), Dv = static_cast<int>(v.size(3));
  const acc_t s = static_cast<acc_t>(scale);
  const Heads<const T> dout_h = heads_of<const T>(op, dout), q_h = heads_of<const T>(op, q),
                       k_h = heads_of<const T>(op, k), v_h = heads_of<const T>(op, v);
  const size_t smem = std::max(dkdv_smem<acc_t>(D, Dv), dq_smem<acc_t>(D, Dv));
  REEL_CHECK(smem <= kSmemLimit, "attention_backward: ", smem, " bytes of shared memory");
  const int64_t k_tiles = tiles(Tk, AttnTiles<acc_t>::kKeyWarps), q_tiles = tiles(Tq, AttnTiles<acc_t>::kWarps);
  const int64_t dq_blocks = BH * q_tiles;
  launch("attention_backward_kernel", attention_backward_kernel<T, acc_t>, grid_of(BH, q_tiles + k_tiles),
         AttnTiles<acc_t>::kWarps * 32, smem, dout_h, q_h, k_h, v_h, heads_of<const T>(op, out), lse.data<acc_t>(),
         heads_of<T>(op, dq), heads_of<T>(op, dk), heads_of<T>(op, dv), H, Tq, Tk, D, Dv, s, causal, q_tiles, k_tiles,
         dq_blocks);
}

}  // namespace

void attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, double scale, bool causal,
                       const Tensor& out, const Tensor& lse) {
  check_heads("attention_forward", q.size(-1), v.size(-1));
  set_device(q.device());
  REEL_DISPATCH_FLOATING_AND_16(q.dtype(), "attention_forward", forward_launch<scalar_t, acc_t>(q, k, v, scale, causal, out, lse))
}

void attention_backward(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                        const Tensor& lse, double scale, bool causal, const Tensor& dq, const Tensor& dk,
                        const Tensor& dv) {
  check_heads("attention_backward", q.size(-1), v.size(-1));
  set_device(q.device());
  REEL_DISPATCH_FLOATING_AND_16(q.dtype(), "attention_backward",
                         backward_launch<scalar_t, acc_t>(dout, q, k, v, out, lse, scale, causal, dq, dk, dv))
}

}  // namespace reel::kernels::cuda
