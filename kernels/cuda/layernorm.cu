// kernels/cuda/layernorm.cu: LayerNorm and RMSNorm over the last dim, forward and backward, and
// LayerNorm with what makes its input fused in: the residual add, or the token + position embeddings.
//
// Forward: one warp per row (8 rows per 256-thread block). The row is swept three times by the
// same warp (mean, variance, normalise), so after the first sweep it comes from L1: memory sees
// one read of x and one write of y. The variance is the two-pass sum of (x - mean)^2, and the
// mean sums x - x[0] (as the CPU does): a row far from 0 keeps the low digits of its mean. The
// row's mean and rstd are saved for backward, which then never recomputes them; they are the
// dispatch's acc_t (f32 for bf16 and f16 x), the elementwise math too, and each y, dx, dw, db is
// rounded once to T.
//
// Backward fuses dx with the weight/bias gradients, with no float atomics. Rows are cut into
// fixed chunks (their size depends on R only, never on the device), one 256-thread block per
// chunk, in two phases:
//   1. warp per row: the two row sums of dxhat = dy * w, a = mean(dxhat), c = mean(dxhat * xhat),
//      into shared memory (two values per row of the chunk);
//   2. thread per column: down the chunk's rows in order, dx = rstd * (dxhat - a - xhat * c) is
//      written and dy * xhat and dy are added into the column's dw/db partial (in double).
// Phase 2 reads the chunk a second time, from L2 (a chunk is at most 512 rows). The partials
// (chunks, C) go to a scratch buffer and are added in chunk order, one thread per column: the same
// bits on every run and every device. Rows of up to 256 columns (a block's worth) are added by the
// grid's last block (kernels/cuda/last_block.h), in the same launch; wider ones by a second kernel,
// norm_params_kernel, whose blocks share the columns. RMSNorm is the same kernel without the mean,
// without a (it has no mean to subtract) and without db. The sums write dw and db, or add them to a
// parameter's .grad (its gradient sink): no buffer is zero-filled first, and the partials are all
// written by the first kernel. add_layer_norm's backward passes dx_add, which
// phase 2 adds to each dx it writes. The embeddings' LayerNorm (embedding_pos_layernorm_backward,
// kernels/cuda/embedding.cu) runs the first kernel (layernorm_backward_rows) and finishes dw and db
// in the embeddings' backward launch (kernels/cuda/norm_backward.h): one launch fewer, the same bits.
//
// add_layernorm_forward is the forward kernel whose first sweep reads x and the residual r and
// writes s = x + r, normalising s: one launch for the add and the norm. With the residual branch's
// bias rb, s = x + (r + rb) (r + rb rounded first, as the two adds would), and the backward's
// phase 2 also sums each column of the dx it writes into a third slab of partials, finished into
// drb with dw and db (same launch for C <= 256, norm_params_kernel's third row of blocks wider). embedding_pos_layernorm_forward
// is the same kernel with the row s = table[id] + pos[t] gathered in the first sweep (the sum of
// kernels/cuda/embedding_pos_row.h, embedding_pos_forward's own): one launch for the embeddings and
// block 0's ln_1, a bad id reported as embedding_pos_forward reports it. One kernel for the three, so
// the statistics and y are the plain LayerNorm's bits of the s written.
//
// GroupNorm: one 256-thread block per (sample, group), whose M = C/G * S values are contiguous;
// block reductions (a fixed tree) give the statistics, as LayerNorm's warp does for a row. Backward
// is one block per (sample, group) too: the two group sums, dx, and each channel's sums over the
// positions of dy * xhat and dy (double, block reductions) into (N, C) partials, which
// norm_params_kernel then adds over the samples in order. No atomics: the same bits every run.
//
// Statistics, row sums and the elementwise math run in the dispatch's acc_t (loads T -> acc_t,
// stores acc_t -> T; no-ops for f32 and f64), the dw/db partials in double.
#include <algorithm>
#include <cmath>
#include <type_traits>

#include "kernels/backends.h"
#include "kernels/cuda/block_reduce.h"
#include "kernels/cuda/embedding_pos_row.h"
#include "kernels/cuda/index_errors.h"
#include "kernels/cuda/last_block.h"
#include "kernels/cuda/launch.h"
#include "kernels/cuda/norm_backward.h"

namespace reel::kernels::cuda {

namespace {

constexpr int kRowsPerBlock = 8;    // forward: one warp per row, 256 threads
constexpr int kBackThreads = 256;   // backward: 8 warps in phase 1, 256 columns at a time in phase 2

// Rows per backward chunk: about 1024 chunks (enough blocks to fill a GPU), at least 32 rows
// each (partials stay small) and at most 512 (phase 1's shared memory, and L2 reuse in phase 2).
// A function of R only, so the summation order, hence the bits, are the same everywhere.
int64_t rows_per_chunk(int64_t R) { return std::min<int64_t>(512, std::max<int64_t>(32, (R + 1023) / 1024)); }

// ---- kernels ---------------------------------------------------------------------------------

// Where the forward kernel's rows come from (its template parameter Src):
//   XRows: x (R, C) itself, read in every sweep;
//   AddRows: s = x + res (x, res (R, C); each element rounded to T, as the add would), or where rb
//     (the residual's bias, (C)) is not null s = x + (res + rb), res + rb rounded to T first;
//   EmbeddingPosRows (kernels/cuda/embedding_pos_row.h): s = table[ids[row]] + pos[row % T].
// A source other than XRows makes its row s in the first sweep (row(r, report)(c): element c),
// writes it to s_out and normalises that.
template <typename T>
struct XRows {
  const T* x;
};
template <typename T>
struct AddRows {
  const T* x;
  const T* res;
  const T* rb;  // (C) or null
  int64_t C;
  struct Row {
    const T* x;    // (C)
    const T* res;  // (C)
    const T* rb;   // (C) or null
    __device__ __forceinline__ T operator()(int64_t c) const {
      using acc_t = acc_type_t<T>;
      const T rc = rb ? static_cast<T>(acc_t(res[c]) + acc_t(rb[c])) : res[c];
      return static_cast<T>(acc_t(x[c]) + acc_t(rc));
    }
  };
  __device__ __forceinline__ Row row(int64_t r, bool /*report*/) const { return Row{x + r * C, res + r * C, rb}; }
};

// Warp per row. y: (R, C); w, b: (C); mean, rstd: (R). kLayerNorm false: RMSNorm (no b, no
// mean; rstd from mean(x^2)). src: the rows (above); for a source that makes them (LayerNorm only),
// s_out (R, C): the first sweep writes row s of the source there and the row normalised is s; each
// lane reads back only the columns it wrote itself (the lane-to-column map is the same in every
// sweep), and the shift is s[0], made by every lane, so no lane reads another's write. The
// statistics and y are thus the same bits as those of the plain kernel run on s.
template <typename T, typename acc_t, bool kLayerNorm, typename Src>
__global__ void __launch_bounds__(kRowsPerBlock * 32) norm_forward_kernel(Src src, const T* w, const T* b, acc_t eps, T* y,
                                                                          acc_t* mean, acc_t* rstd, int64_t R, int64_t C,
                                                                          T* s_out) {
  using std::sqrt;
  const int lane = threadIdx.x & 31;
  const int64_t warps = int64_t{gridDim.x} * kRowsPerBlock;
  // The loop condition is uniform over the warp: all 32 lanes reach every shuffle.
  for (int64_t row = blockIdx.x * int64_t{kRowsPerBlock} + (threadIdx.x >> 5); row < R; row += warps) {
    const T* xr;  // (C): the row normalised
    T* yr = y + row * C;  // (C)
    acc_t m = 0;
    if constexpr (!std::is_same_v<Src, XRows<T>>) {
      const auto source = src.row(row, /*report=*/lane == 0);
      T* sr = s_out + row * C;
      const acc_t shift = acc_t(source(0));
      acc_t s = 0;
      for (int64_t c = lane; c < C; c += 32) {
        const T v = source(c);
        sr[c] = v;
        s += acc_t(v) - shift;
      }
      m = shift + warp_sum(s) / static_cast<acc_t>(C);
      xr = sr;
    } else {
      xr = src.x + row * C;
      if (kLayerNorm) {
        const acc_t shift = xr[0];
        acc_t s = 0;
        for (int64_t c = lane; c < C; c += 32) s += acc_t(xr[c]) - shift;
        m = shift + warp_sum(s) / static_cast<acc_t>(C);
      }
    }
    acc_t v = 0;  // sum of (x - m)^2; RMSNorm: of x^2
    for (int64_t c = lane; c < C; c += 32) v += (acc_t(xr[c]) - m) * (acc_t(xr[c]) - m);
    const acc_t rs = acc_t(1) / sqrt(warp_sum(v) / static_cast<acc_t>(C) + eps);
    for (int64_t c = lane; c < C; c += 32)
      yr[c] = static_cast<T>(kLayerNorm ? (acc_t(xr[c]) - m) * rs * acc_t(w[c]) + acc_t(b[c])
                                        : acc_t(xr[c]) * rs * acc_t(w[c]));
    if (lane == 0) {
      if (kLayerNorm) mean[row] = m;
      rstd[row] = rs;
    }
  }
}

// Block per chunk of `rows` rows (phases 1 and 2 above). dy, x, dx: (R, C); w: (C); mean,
// rstd: (R) (mean unused for RMSNorm); partial: (params, chunks, C) double, params = 2 (dw, db)
// for LayerNorm, 1 for RMSNorm, every element written. dx_add: null or (R, C): dx = dx_add + the
// norm's dx (rounded to T first, as the add would). Dynamic shared memory: 2 * rows acc_t.
// ticket (kernels/cuda/last_block.h) non-null: the grid's last block then adds the partials into
// dw and db itself (finish_norm_param, as norm_params_kernel does), with no launch of their own.
// with_drb (LayerNorm only): partial has a third slab, the chunk's column sums of dx as written
// (the residual's bias gradient, add_layer_norm's drb), finished into drb as dw and db are.
template <typename T, typename acc_t, bool kLayerNorm>
__global__ void __launch_bounds__(kBackThreads) norm_backward_kernel(const T* dy, const T* x, const T* w, const acc_t* mean, const acc_t* rstd, T* dx,
                                     double* partial, int64_t R, int64_t C, int64_t rows, const T* dx_add,
                                     unsigned* ticket, T* dw, T* db, bool add_dw, bool add_db, bool with_drb,
                                     T* drb, bool add_drb) {
  __shared__ bool last;
  SIMT_DYNAMIC_SHARED(acc_t, smem);
  acc_t* row_a = smem;         // (rows) mean(dxhat), LayerNorm only
  acc_t* row_c = smem + rows;  // (rows) mean(dxhat * xhat)
  const int64_t chunk = blockIdx.x, r0 = chunk * rows, r_end = r0 + rows < R ? r0 + rows : R;
  const acc_t inv_c = acc_t(1) / static_cast<acc_t>(C);
  // Phase 1: warp per row, the two row sums.
  const int lane = threadIdx.x & 31, warps = blockDim.x >> 5;
  for (int64_t r = r0 + (threadIdx.x >> 5); r < r_end; r += warps) {  // uniform over the warp
    const T* dyr = dy + r * C;
    const T* xr = x + r * C;
    const acc_t m = kLayerNorm ? acc_t(mean[r]) : acc_t(0), rs = rstd[r];
    acc_t sum_dxhat = 0, sum_dxhat_xhat = 0;
    for (int64_t c = lane; c < C; c += 32) {
      const acc_t dxhat = acc_t(dyr[c]) * acc_t(w[c]);
      sum_dxhat += dxhat;
      sum_dxhat_xhat += dxhat * ((acc_t(xr[c]) - m) * rs);
    }
    sum_dxhat = warp_sum(sum_dxhat);
    sum_dxhat_xhat = warp_sum(sum_dxhat_xhat);
    if (lane == 0) {
      row_a[r - r0] = kLayerNorm ? sum_dxhat * inv_c : acc_t(0);
      row_c[r - r0] = sum_dxhat_xhat * inv_c;
    }
  }
  __syncthreads();
  // Phase 2: thread per column, rows in order.
  double* part_dw = partial + chunk * C;                                             // (C)
  double* part_db = kLayerNorm ? partial + (gridDim.x + chunk) * C : nullptr;  // (C)
  double* part_drb = with_drb ? partial + (2 * int64_t{gridDim.x} + chunk) * C : nullptr;  // (C)
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
    const acc_t wc = w[c];
    double acc_dw = 0, acc_db = 0, acc_drb = 0;
    for (int64_t r = r0; r < r_end; ++r) {
      const acc_t m = kLayerNorm ? acc_t(mean[r]) : acc_t(0), rs = rstd[r];
      const acc_t d = dy[r * C + c];
      const acc_t xhat = (acc_t(x[r * C + c]) - m) * rs;
      const T g = static_cast<T>(rs * (d * wc - row_a[r - r0] - xhat * row_c[r - r0]));
      const T out = dx_add ? static_cast<T>(acc_t(dx_add[r * C + c]) + acc_t(g)) : g;
      dx[r * C + c] = out;
      acc_dw += static_cast<double>(d) * static_cast<double>(xhat);
      if (kLayerNorm) acc_db += static_cast<double>(d);
      if (with_drb) acc_drb += static_cast<double>(out);
    }
    part_dw[c] = acc_dw;
    if (kLayerNorm) part_db[c] = acc_db;
    if (with_drb) part_drb[c] = acc_drb;
  }
  if (ticket == nullptr) return;  // uniform: the partials are added by another kernel
  __syncthreads();  // the block's partials are written before its ticket
  if (threadIdx.x == 0) last = take_last_ticket(ticket);
  __syncthreads();
  if (!last) return;  // uniform over the block
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
    finish_norm_param(partial, 0, gridDim.x, C, c, dw, add_dw);
    if (kLayerNorm) finish_norm_param(partial, 1, gridDim.x, C, c, db, add_db);
    if (with_drb) finish_norm_param(partial, 2, gridDim.x, C, c, drb, add_drb);
  }
  if (threadIdx.x == 0) reset_ticket(ticket);
}

// Thread per column: dw, db or drb (p = blockIdx.y: 0, 1 or 2) from the (params, chunks, C) double
// partials (kernels/cuda/norm_backward.h finish_norm_param); dw, db, drb: (C), written, or where
// add_dw / add_db / add_drb added to (a parameter's .grad holding a gradient). No zero-fill is
// needed before: without add, out is never read.
template <typename T>
__global__ void __launch_bounds__(kThreads) norm_params_kernel(const double* partial, T* dw, T* db, int64_t chunks,
                                                               int64_t C, bool add_dw, bool add_db, T* drb,
                                                               bool add_drb) {
  const int64_t p = blockIdx.y;
  T* const out = p == 0 ? dw : p == 1 ? db : drb;
  const bool add = p == 0 ? add_dw : p == 1 ? add_db : add_drb;
  for (int64_t c = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; c < C; c += int64_t{blockDim.x} * gridDim.x)
    finish_norm_param(partial, p, chunks, C, c, out, add);
}

// ---- GroupNorm -------------------------------------------------------------------------------

constexpr int kGroupThreads = 256;

// Block per (sample, group) ng (a block-uniform loop); x, y: (N*G, M) with M = Cg * S; w, b: (C);
// mean, rstd: (N*G).
template <typename T, typename acc_t>
__global__ void __launch_bounds__(kGroupThreads) group_norm_forward_kernel(const T* x, const T* w, const T* b, acc_t eps, T* y, acc_t* mean, acc_t* rstd,
                                          int64_t NG, int64_t G, int64_t Cg, int64_t S) {
  using std::sqrt;
  __shared__ acc_t scratch[32];
  const int64_t M = Cg * S;
  for (int64_t ng = blockIdx.x; ng < NG; ng += gridDim.x) {
    const T* xr = x + ng * M;
    T* yr = y + ng * M;
    const acc_t shift = xr[0];
    acc_t s = 0;
    for (int64_t i = threadIdx.x; i < M; i += blockDim.x) s += acc_t(xr[i]) - shift;
    const acc_t m = shift + block_reduce(s, SumOp{}, scratch) / static_cast<acc_t>(M);
    acc_t v = 0;
    for (int64_t i = threadIdx.x; i < M; i += blockDim.x) v += (acc_t(xr[i]) - m) * (acc_t(xr[i]) - m);
    const acc_t rs = acc_t(1) / sqrt(block_reduce(v, SumOp{}, scratch) / static_cast<acc_t>(M) + eps);
    const int64_t c0 = (ng % G) * Cg;
    for (int64_t i = threadIdx.x; i < M; i += blockDim.x) {
      const int64_t c = c0 + i / S;
      yr[i] = static_cast<T>((acc_t(xr[i]) - m) * rs * acc_t(w[c]) + acc_t(b[c]));
    }
    if (threadIdx.x == 0) {
      mean[ng] = m;
      rstd[ng] = rs;
    }
  }
}

// Block per (sample, group) ng. dy, x, dx: (N*G, M); w: (C); mean, rstd: (N*G); partial: (2, N, C)
// double, the per-sample channel sums of dy * xhat (slab 0) and dy (slab 1).
template <typename T, typename acc_t>
__global__ void __launch_bounds__(kGroupThreads) group_norm_backward_kernel(const T* dy, const T* x, const T* w, const acc_t* mean, const acc_t* rstd, T* dx,
                                           double* partial, int64_t NG, int64_t G, int64_t Cg, int64_t S) {
  __shared__ acc_t scratch[32];
  __shared__ double scratch_d[32];
  const int64_t M = Cg * S, C = G * Cg, N = NG / G;
  for (int64_t ng = blockIdx.x; ng < NG; ng += gridDim.x) {
    const T* dyr = dy + ng * M;
    const T* xr = x + ng * M;
    T* dxr = dx + ng * M;
    const int64_t n = ng / G, c0 = (ng % G) * Cg;
    const acc_t m = mean[ng], rs = rstd[ng];
    acc_t sum_dxhat = 0, sum_dxhat_xhat = 0;
    for (int64_t i = threadIdx.x; i < M; i += blockDim.x) {
      const acc_t dxhat = acc_t(dyr[i]) * acc_t(w[c0 + i / S]);
      sum_dxhat += dxhat;
      sum_dxhat_xhat += dxhat * ((acc_t(xr[i]) - m) * rs);
    }
    const acc_t a = block_reduce(sum_dxhat, SumOp{}, scratch) / static_cast<acc_t>(M);
    const acc_t cc = block_reduce(sum_dxhat_xhat, SumOp{}, scratch) / static_cast<acc_t>(M);
    for (int64_t i = threadIdx.x; i < M; i += blockDim.x)
      dxr[i] = static_cast<T>(rs * (acc_t(dyr[i]) * acc_t(w[c0 + i / S]) - a - (acc_t(xr[i]) - m) * rs * cc));
    for (int64_t ci = 0; ci < Cg; ++ci) {  // block-uniform: every thread reaches each reduction
      double acc_dw = 0, acc_db = 0;
      for (int64_t i = ci * S + threadIdx.x; i < (ci + 1) * S; i += blockDim.x) {
        acc_dw += static_cast<double>(dyr[i]) * static_cast<double>((acc_t(xr[i]) - m) * rs);
        acc_db += static_cast<double>(dyr[i]);
      }
      acc_dw = block_reduce(acc_dw, SumOp{}, scratch_d);
      acc_db = block_reduce(acc_db, SumOp{}, scratch_d);
      if (threadIdx.x == 0) {
        partial[n * C + c0 + ci] = acc_dw;
        partial[(N + n) * C + c0 + ci] = acc_db;
      }
    }
  }
}

// ---- launchers -------------------------------------------------------------------------------

template <typename T, typename acc_t, bool kLayerNorm>
void forward_launch(const Tensor& x, const Tensor& w, const Tensor& b, double eps, const Tensor& y,
                    const Tensor& mean, const Tensor& rstd) {
  const int64_t R = x.size(0), C = x.size(1);
  const unsigned grid = grid_for(R, kRowsPerBlock);
  launch(kLayerNorm ? "layernorm_forward_kernel" : "rmsnorm_forward_kernel",
         norm_forward_kernel<T, acc_t, kLayerNorm, XRows<T>>, grid, kRowsPerBlock * 32, 0, XRows<T>{x.data<T>()},
         w.data<T>(), kLayerNorm ? b.data<T>() : nullptr, static_cast<acc_t>(eps), y.data<T>(),
         kLayerNorm ? mean.data<acc_t>() : nullptr, rstd.data<acc_t>(), R, C, static_cast<T*>(nullptr));
}

template <typename T, typename acc_t>
void add_forward_launch(const Tensor& x, const Tensor& r, const Tensor& rb, const Tensor& w, const Tensor& b, double eps,
                        const Tensor& s, const Tensor& y, const Tensor& mean, const Tensor& rstd) {
  const int64_t R = x.size(0), C = x.size(1);
  launch("add_layernorm_forward_kernel", norm_forward_kernel<T, acc_t, true, AddRows<T>>, grid_for(R, kRowsPerBlock),
         kRowsPerBlock * 32, 0, AddRows<T>{x.data<T>(), r.data<T>(), rb.defined() ? rb.data<T>() : nullptr, C},
         w.data<T>(), b.data<T>(),
         static_cast<acc_t>(eps), y.data<T>(), mean.data<acc_t>(), rstd.data<acc_t>(), R, C, s.data<T>());
}

template <typename T, typename acc_t>
void embedding_pos_forward_launch(const Tensor& ids, const Tensor& table, const Tensor& pos, int64_t T_,
                                  const Tensor& w, const Tensor& b, double eps, const Tensor& s, const Tensor& y,
                                  const Tensor& mean, const Tensor& rstd) {
  const int64_t R = ids.numel(), V = table.size(0), C = table.size(1);
  const IndexErrorBuffer error(table.device());
  dispatch_index(ids.dtype(), [&](auto zero) {
    using I = decltype(zero);
    using Src = EmbeddingPosRows<T, I>;
    const Src src{ids.data<I>(), table.data<T>(), pos.data<T>(), V, C, T_, error.ptr()};
    launch("embedding_pos_layernorm_forward_kernel", norm_forward_kernel<T, acc_t, true, Src>,
           grid_for(R, kRowsPerBlock), kRowsPerBlock * 32, 0, src, w.data<T>(), b.data<T>(), static_cast<acc_t>(eps),
           y.data<T>(), mean.data<acc_t>(), rstd.data<acc_t>(), R, C, s.data<T>());
  });
  error.check(ids);
}

// The first kernel of the backward: dx, and the (params, chunks, C) double partials returned.
// With `ticket` (the device's last-block counter) its last block also adds the partials into dw
// and db (add_dw, add_db as norm_params_kernel takes them). with_drb (LayerNorm): a third slab of
// partials, dx's column sums, finished into drb where the last block finishes dw and db.
template <typename T, typename acc_t, bool kLayerNorm>
Tensor backward_rows_launch(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& mean, const Tensor& rstd,
                            const Tensor& dx_add, const Tensor& dx, unsigned* ticket = nullptr, T* dw = nullptr,
                            T* db = nullptr, bool add_dw = false, bool add_db = false, bool with_drb = false,
                            T* drb = nullptr, bool add_drb = false) {
  const int64_t R = x.size(0), C = x.size(1);
  const int64_t rows = rows_per_chunk(R), chunks = (R + rows - 1) / rows;
  const int params = kLayerNorm ? (with_drb ? 3 : 2) : 1;
  // (params, chunks, C) double partials from the caching allocator: at most ~1024 x C per param.
  const Tensor partial = empty({params, chunks, C}, DType::f64, x.device());
  launch(kLayerNorm ? "layernorm_backward_kernel" : "rmsnorm_backward_kernel", norm_backward_kernel<T, acc_t, kLayerNorm>,
         dim3(static_cast<unsigned>(chunks)), kBackThreads, 2 * rows * sizeof(acc_t), dy.data<T>(), x.data<T>(),
         w.data<T>(), kLayerNorm ? mean.data<acc_t>() : nullptr, rstd.data<acc_t>(), dx.data<T>(), partial.data<double>(), R,
         C, rows, dx_add.defined() ? dx_add.data<T>() : nullptr, ticket, dw, db, add_dw, add_db, with_drb, drb,
         add_drb);
  return partial;
}

template <typename T, typename acc_t, bool kLayerNorm>
void backward_launch(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& mean, const Tensor& rstd,
                     const Tensor& dx_add, const Tensor& dx, const Tensor& dw, const Tensor& db, bool add_dw,
                     bool add_db, const Tensor& drb = Tensor(), bool add_drb = false) {
  const int64_t C = x.size(1);
  T* const pdw = dw.data<T>();
  T* const pdb = kLayerNorm ? db.data<T>() : nullptr;
  const bool with_drb = kLayerNorm && drb.defined();
  T* const pdrb = with_drb ? drb.data<T>() : nullptr;
  // Where one block of norm_params_kernel would add the partials (C <= 256 columns), the rows
  // kernel's last block adds them instead: the same sums, one launch fewer. Wider rows keep the
  // kernel of their own, whose blocks share the columns. (On meta there is no counter: nothing runs.)
  if (C <= kBackThreads) {
    backward_rows_launch<T, acc_t, kLayerNorm>(dy, x, w, mean, rstd, dx_add, dx, last_block_ticket(x.device()), pdw, pdb,
                                               add_dw, add_db, with_drb, pdrb, add_drb);
    return;
  }
  const Tensor partial = backward_rows_launch<T, acc_t, kLayerNorm>(dy, x, w, mean, rstd, dx_add, dx, nullptr, nullptr,
                                                                    nullptr, false, false, with_drb);
  const int params = static_cast<int>(partial.size(0));
  const int64_t chunks = partial.size(1);
  launch("norm_params_kernel", norm_params_kernel<T>, dim3(grid_for(C, kThreads), params), kThreads, 0,
         partial.data<double>(), pdw, pdb, chunks, C, add_dw, add_db, pdrb, add_drb);
}

}  // namespace

void layernorm_forward(const Tensor& x, const Tensor& w, const Tensor& b, double eps, const Tensor& y,
                       const Tensor& mean, const Tensor& rstd) {
  set_device(x.device());
  REEL_DISPATCH_FLOATING_AND_16(x.dtype(), "layernorm_forward", forward_launch<scalar_t, acc_t, true>(x, w, b, eps, y, mean, rstd))
}

void add_layernorm_forward(const Tensor& x, const Tensor& r, const Tensor& rb, const Tensor& w, const Tensor& b,
                           double eps, const Tensor& s, const Tensor& y, const Tensor& mean, const Tensor& rstd) {
  set_device(x.device());
  REEL_DISPATCH_FLOATING_AND_16(x.dtype(), "add_layernorm_forward",
                                add_forward_launch<scalar_t, acc_t>(x, r, rb, w, b, eps, s, y, mean, rstd))
}

void embedding_pos_layernorm_forward(const Tensor& ids, const Tensor& table, const Tensor& pos, int64_t T,
                                     const Tensor& w, const Tensor& b, double eps, const Tensor& s, const Tensor& y,
                                     const Tensor& mean, const Tensor& rstd) {
  set_device(table.device());
  REEL_DISPATCH_FLOATING_AND_16(table.dtype(), "embedding_pos_layernorm_forward",
                                embedding_pos_forward_launch<scalar_t, acc_t>(ids, table, pos, T, w, b, eps, s, y,
                                                                              mean, rstd))
}

void layernorm_backward(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& mean, const Tensor& rstd,
                        const Tensor& dx_add, const Tensor& dx, const Tensor& dw, const Tensor& db, bool add_dw,
                        bool add_db, const Tensor& drb, bool add_drb) {
  set_device(x.device());
  REEL_DISPATCH_FLOATING_AND_16(x.dtype(), "layernorm_backward",
                                backward_launch<scalar_t, acc_t, true>(dy, x, w, mean, rstd, dx_add, dx, dw, db, add_dw,
                                                                       add_db, drb, add_drb))
}

Tensor layernorm_backward_rows(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& mean,
                               const Tensor& rstd, const Tensor& dx_add, const Tensor& dx) {
  Tensor partial;
  REEL_DISPATCH_FLOATING_AND_16(x.dtype(), "layernorm_backward",
                                partial = backward_rows_launch<scalar_t, acc_t, true>(dy, x, w, mean, rstd, dx_add, dx))
  return partial;
}

void rmsnorm_forward(const Tensor& x, const Tensor& w, double eps, const Tensor& y, const Tensor& rstd) {
  set_device(x.device());
  REEL_DISPATCH_FLOATING_AND_16(x.dtype(), "rmsnorm_forward",
                         forward_launch<scalar_t, acc_t, false>(x, w, Tensor(), eps, y, Tensor(), rstd))
}

void rmsnorm_backward(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& rstd, const Tensor& dx,
                      const Tensor& dw) {
  set_device(x.device());
  REEL_DISPATCH_FLOATING_AND_16(x.dtype(), "rmsnorm_backward",
                         backward_launch<scalar_t, acc_t, false>(dy, x, w, Tensor(), rstd, Tensor(), dx, dw, Tensor(),
                                                                 false, false))
}

namespace {
template <typename T, typename acc_t>
void group_norm_forward_launch(const Tensor& x, const Tensor& w, const Tensor& b, int64_t G, double eps,
                               const Tensor& y, const Tensor& mean, const Tensor& rstd) {
  const int64_t N = x.size(0), C = x.size(1), S = x.size(2);
  const unsigned grid = grid_for(N * G * kGroupThreads, kGroupThreads);  // a block per (sample, group), capped
  launch("group_norm_forward_kernel", group_norm_forward_kernel<T, acc_t>, grid, kGroupThreads, 0, x.data<T>(),
         w.data<T>(), b.data<T>(), static_cast<acc_t>(eps), y.data<T>(), mean.data<acc_t>(), rstd.data<acc_t>(), N * G, G, C / G,
         S);
}

template <typename T, typename acc_t>
void group_norm_backward_launch(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& mean,
                                const Tensor& rstd, int64_t G, const Tensor& dx, const Tensor& dw, const Tensor& db) {
  const int64_t N = x.size(0), C = x.size(1), S = x.size(2);
  const Tensor partial = empty({2, N, C}, DType::f64, x.device());  // (dw, db) per sample and channel
  const unsigned grid = grid_for(N * G * kGroupThreads, kGroupThreads);
  launch("group_norm_backward_kernel", group_norm_backward_kernel<T, acc_t>, grid, kGroupThreads, 0, dy.data<T>(),
         x.data<T>(), w.data<T>(), mean.data<acc_t>(), rstd.data<acc_t>(), dx.data<T>(), partial.data<double>(), N * G, G,
         C / G, S);
  launch("norm_params_kernel", norm_params_kernel<T>, dim3(grid_for(C, kThreads), 2), kThreads, 0,
         partial.data<double>(), dw.data<T>(), db.data<T>(), N, C, false, false, static_cast<T*>(nullptr), false);
}
}  // namespace

void group_norm_forward(const Tensor& x, const Tensor& w, const Tensor& b, int64_t groups, double eps, const Tensor& y,
                        const Tensor& mean, const Tensor& rstd) {
  set_device(x.device());
  REEL_DISPATCH_FLOATING_AND_16(x.dtype(), "group_norm_forward",
                         group_norm_forward_launch<scalar_t, acc_t>(x, w, b, groups, eps, y, mean, rstd))
}

void group_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& mean, const Tensor& rstd,
                         int64_t groups, const Tensor& dx, const Tensor& dw, const Tensor& db) {
  set_device(x.device());
  REEL_DISPATCH_FLOATING_AND_16(x.dtype(), "group_norm_backward",
                         group_norm_backward_launch<scalar_t, acc_t>(dy, x, w, mean, rstd, groups, dx, dw, db))
}

}  // namespace reel::kernels::cuda
