// kernels/cuda/embedding.cu: embedding lookup (a row gather) and its backward (a row
// scatter-add) on a CUDA device, and the token + position embedding in one launch each way
// (embedding_pos: the position is the row index within T; its backward sums dpos over the batch
// in extra blocks beside the table's).
//
// Forward: out[n, c] = table[ids[n], c], one thread per output element (grid-stride), so a warp
// copies 32 consecutive floats of a row.
//
// Backward must add the dout rows of every position holding id v into dtable[v]; a token that
// repeats collides. llm.c's encoder backward uses float atomicAdd, whose order (and rounding)
// changes run to run. Strategy here: SORT-FREE ROW OWNERSHIP. Each block owns a range of table
// rows; it zeroes them, then scans ALL the ids in position order, 256 at a time: a ballot
// compacts the positions of the tile whose id falls in its range into shared memory, keeping
// their order, and thread t adds those dout rows into columns t, t + 256, ... of the owned rows.
// Every dtable element is thus written by one thread, as 0 + dout[p1] + dout[p2] + ... in
// increasing position p: no atomics, no race (a thread only ever touches its own columns of its
// own rows, so it needs no barrier between zeroing and adding), and the order does not depend on
// how rows are split among blocks. It is the CPU's order too (kernels/cpu/embedding.cpp), so the
// result equals the CPU's bit for bit (but for the sign of a zero sum).
// Why not sort: a counting sort by id (what the CPU does) needs a scan over V and a scatter on
// the device, three more kernels and O(N + V) scratch; scanning the ids instead costs
// (blocks x N) reads of 4-8 bytes that all hit L2 (8192 ids x 1024 blocks = 32 MB of L2 traffic
// at GPT-2 sizes, a few microseconds). The price of ownership is balance: a hot id (padding) is
// summed by one block, serially over its positions, like the CPU's owner thread.
// The sums run in the dispatch's acc_t: into dtable itself when acc_t is T (f32, f64), else (bf16,
// f16) into an f32 (V, C) buffer copied into dtable after, each sum rounded once.
//
// embedding_pos (token + position rows, GPT's input): forward as above with the position row
// pos[n % T] added (the sum: kernels/cuda/embedding_pos_row.h, which the LayerNorm kernel that fuses
// the embeddings in, kernels/cuda/layernorm.cu, makes too); backward is ONE launch for both gradients: the first blocks own table rows as
// above (summing into an acc_t buffer and finishing each owned element as dtable + sum when the
// gradient accumulates into a .grad), the blocks after them own position rows, each element the
// sum over the batch in b order, so both are deterministic and the CPU's bits.
// embedding_pos_layernorm_backward: the LayerNorm's backward kernel before the embeddings'
// (kernels/cuda/layernorm.cu, layernorm_backward_rows: dx, and dw/db partials per row chunk), then
// the embeddings' launch with blocks after the position rows' that add the partials into dw and db
// (kernels/cuda/norm_backward.h, the code of the LayerNorm's own second kernel): neither part needs
// the other, so the LayerNorm's second launch is gone and every value keeps its bits. (The grid's
// last block instead, kernels/cuda/last_block.h, would leave one block to scatter all B * T rows:
// slower than a launch.)
//
// Ids: the kernels check each id they read; an out-of-range one is never used as an index
// (forward writes zeros, backward skips it), its position goes to the launch's slot of the
// device's error slots, raised at the host's next read of the device (kernels/cuda/index_errors.h).
#include <algorithm>
#include <optional>
#include <type_traits>

#include "kernels/backends.h"
#include "kernels/cuda/block_reduce.h"
#include "kernels/cuda/embedding_pos_row.h"
#include "kernels/cuda/index_errors.h"
#include "kernels/cuda/launch.h"
#include "kernels/cuda/norm_backward.h"

namespace reel::kernels::cuda {

namespace {

constexpr int kScanThreads = 256;  // backward: ids scanned per tile, and columns per pass
constexpr int64_t kMaxOwnerBlocks = 1024;

// ---- kernels ---------------------------------------------------------------------------------

// ids: (N); table: (V, C); out: (N, C). Grid-stride over the N * C outputs.
template <typename T, typename I>
__global__ void __launch_bounds__(kThreads) embedding_forward_kernel(const I* ids, const T* table, T* out, int64_t N, int64_t V, int64_t C,
                                         unsigned long long* error) {
  const int64_t total = N * C;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total; i += int64_t{blockDim.x} * gridDim.x) {
    const int64_t n = i / C, c = i - n * C;
    const int64_t id = static_cast<int64_t>(ids[n]);
    if (id < 0 || id >= V) {
      if (c == 0) report_bad_index(error, n, id);
      out[i] = T(0);
    } else {
      out[i] = table[id * C + c];
    }
  }
}

// The table rows [v0, v1) of sums ((V, C) acc_t) set to the sum of dout's rows ((N, C)) whose id
// falls there, each row's sum in increasing position order (deterministic). Each tile of
// kScanThreads positions is compacted in order through shared memory: a thread's slot is the
// number of owned positions before it in the tile. Block 0 sees every id and reports a bad one
// (error null: the ids are vouched for). Called by a whole block (blockDim.x == kScanThreads).
template <typename T, typename acc_t, typename I>
__device__ void sum_owned_rows(const T* dout, const I* ids, acc_t* sums, int64_t N, int64_t V, int64_t C, int64_t v0,
                               int64_t v1, unsigned long long* error) {
  __shared__ int64_t s_pos[kScanThreads];           // owned positions of the tile, in order
  __shared__ int s_warp_count[kScanThreads / 32];  // owned positions per warp of the tile
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  for (int64_t v = v0; v < v1; ++v)
    for (int64_t c = tid; c < C; c += kScanThreads) sums[v * C + c] = acc_t(0);
  for (int64_t n0 = 0; n0 < N; n0 += kScanThreads) {  // uniform over the block
    const int64_t n = n0 + tid;
    const int64_t id = n < N ? static_cast<int64_t>(ids[n]) : -1;
    if (n < N && (id < 0 || id >= V) && blockIdx.x == 0 && error != nullptr) report_bad_index(error, n, id);
    const bool mine = n < N && id >= v0 && id < v1;
    const unsigned ballot = __ballot_sync(kFullMask, mine);
    if (lane == 0) s_warp_count[warp] = __popc(ballot);
    __syncthreads();
    int before = 0, total = 0;
    for (int w = 0; w < kScanThreads / 32; ++w) {
      before += w < warp ? s_warp_count[w] : 0;
      total += s_warp_count[w];
    }
    if (mine) s_pos[before + __popc(ballot & ((1u << lane) - 1u))] = n;
    __syncthreads();
    for (int j = 0; j < total; ++j) {  // positions in increasing order
      const int64_t p = s_pos[j];
      const int64_t pid = static_cast<int64_t>(ids[p]);
      for (int64_t c = tid; c < C; c += kScanThreads) sums[pid * C + c] += static_cast<acc_t>(dout[p * C + c]);
    }
    __syncthreads();  // s_pos and s_warp_count are rewritten by the next tile
  }
}

// Block b owns table rows [b * rows, min(V, (b + 1) * rows)). dout: (N, C); ids: (N);
// dtable: (V, C) acc_t. blockDim.x == kScanThreads. error: null when the ids are vouched for.
template <typename T, typename acc_t, typename I>
__global__ void __launch_bounds__(kScanThreads) embedding_backward_kernel(const T* dout, const I* ids, acc_t* dtable, int64_t N, int64_t V,
                                          int64_t C, int64_t rows, unsigned long long* error) {
  const int64_t v0 = blockIdx.x * rows, v1 = v0 + rows < V ? v0 + rows : V;
  sum_owned_rows(dout, ids, dtable, N, V, C, v0, v1, error);
}

// out[n, c] = table[ids[n], c] + pos[n % T, c], summed in acc_t (rows: kernels/cuda/
// embedding_pos_row.h, whose sum the LayerNorm with the embeddings fused in writes too).
// out: (N, C). Grid-stride over the N * C outputs.
template <typename T, typename I>
__global__ void __launch_bounds__(kThreads) embedding_pos_forward_kernel(EmbeddingPosRows<T, I> rows, T* out,
                                                                         int64_t N) {
  const int64_t C = rows.C, total = N * C;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total; i += int64_t{blockDim.x} * gridDim.x) {
    const int64_t n = i / C, c = i - n * C;
    out[i] = rows.row(n, /*report=*/c == 0)(c);
  }
}

// embedding_pos_backward's one launch. Blocks [0, table_blocks) own rows of the table, as
// embedding_backward_kernel's blocks do (sums: (V, C) acc_t, dtable itself when in_place), and
// when `finish` each thread then writes its own elements of its rows into dtable as
// (accumulate_table ? dtable + sum : sum), rounded once: no barrier, every element is one
// thread's. Blocks [table_blocks, table_blocks + pos_blocks) own `pos_rows` rows of dpos (P, C)
// each: row t < T = (dpos +) the sum over b of dout[b * T + t] in b order, rows >= T zero (kept
// when accumulating). The blocks after them (norm.blocks, the LayerNorm before the embeddings:
// embedding_pos_layernorm_backward) finish its dw and db from the partials of its first kernel, a
// column of one per thread (kernels/cuda/norm_backward.h): work that needs nothing of this kernel's.
template <typename T>
struct NormParams {
  const double* partial = nullptr;  // (2, chunks, C) double, or null: none
  T* dw = nullptr;                  // (C)
  T* db = nullptr;                  // (C)
  bool add_dw = false, add_db = false;
  int64_t chunks = 0, blocks = 0;  // blocks: 2 * ceil(C / kScanThreads), or 0
};
template <typename T, typename acc_t, typename I>
__global__ void __launch_bounds__(kScanThreads) embedding_pos_backward_kernel(
    const T* dout, const I* ids, acc_t* sums, T* dtable, bool finish, bool accumulate_table, T* dpos,
    bool accumulate_pos, int64_t N, int64_t V, int64_t C, int64_t T_, int64_t P, int64_t rows, int64_t table_blocks,
    int64_t pos_rows, unsigned long long* error, NormParams<T> norm) {
  const int tid = threadIdx.x;
  const int64_t norm_first = int64_t{gridDim.x} - norm.blocks;
  if (blockIdx.x >= norm_first) {  // a block of dw or db columns: uniform over the block
    const int64_t q = blockIdx.x - norm_first, per_param = norm.blocks / 2, p = q / per_param;
    const int64_t c = (q % per_param) * kScanThreads + tid;
    if (c < C) finish_norm_param(norm.partial, p, norm.chunks, C, c, p == 0 ? norm.dw : norm.db,
                                 p == 0 ? norm.add_dw : norm.add_db);
    return;
  }
  if (blockIdx.x >= table_blocks) {  // a block of position rows: uniform over the block
    const int64_t t0 = (blockIdx.x - table_blocks) * pos_rows, t1 = t0 + pos_rows < P ? t0 + pos_rows : P;
    const int64_t B = N / T_;
    for (int64_t t = t0; t < t1; ++t)
      for (int64_t c = tid; c < C; c += kScanThreads) {
        if (t >= T_) {
          if (!accumulate_pos) dpos[t * C + c] = T(0);
          continue;
        }
        acc_t sum = B > 0 ? static_cast<acc_t>(dout[t * C + c]) : acc_t(0);
        for (int64_t b = 1; b < B; ++b) sum += static_cast<acc_t>(dout[(b * T_ + t) * C + c]);
        dpos[t * C + c] = static_cast<T>(accumulate_pos ? static_cast<acc_t>(dpos[t * C + c]) + sum : sum);
      }
    return;
  }
  const int64_t v0 = blockIdx.x * rows, v1 = v0 + rows < V ? v0 + rows : V;
  sum_owned_rows(dout, ids, sums, N, V, C, v0, v1, error);
  if (!finish) return;
  for (int64_t v = v0; v < v1; ++v)
    for (int64_t c = tid; c < C; c += kScanThreads) {
      const acc_t sum = sums[v * C + c];
      dtable[v * C + c] = static_cast<T>(accumulate_table ? static_cast<acc_t>(dtable[v * C + c]) + sum : sum);
    }
}

}  // namespace

// ---- launchers -------------------------------------------------------------------------------

void embedding_forward(const Tensor& ids, const Tensor& table, const Tensor& out) {
  const int64_t N = ids.numel(), V = table.size(0), C = table.size(1);
  set_device(table.device());
  const IndexErrorBuffer error(table.device());
  REEL_DISPATCH_FLOATING_AND_16(table.dtype(), "embedding_forward", {
    dispatch_index(ids.dtype(), [&](auto zero) {
      using I = decltype(zero);
      launch("embedding_forward_kernel", embedding_forward_kernel<scalar_t, I>, grid_for(N * C, kThreads), kThreads,
             0, ids.data<I>(), table.data<scalar_t>(), out.data<scalar_t>(), N, V, C, error.ptr());
    });
  })
  error.check(ids);
}

void embedding_backward(const Tensor& dout, const Tensor& ids, const Tensor& dtable, bool check_ids) {
  const int64_t N = ids.numel(), V = dtable.size(0), C = dtable.size(1);
  set_device(dtable.device());
  // Rows per owner block: up to kMaxOwnerBlocks blocks, each scanning all N ids. The result does
  // not depend on this split (see above), only the balance does.
  const int64_t blocks = std::min(V, kMaxOwnerBlocks), rows = (V + blocks - 1) / blocks;
  std::optional<IndexErrorBuffer> error;  // none when the entry point vouches for the ids
  if (check_ids) error.emplace(dtable.device());
  REEL_DISPATCH_FLOATING_AND_16(dtable.dtype(), "embedding_backward", {
    constexpr bool in_place = std::is_same_v<scalar_t, acc_t>;
    const Tensor sums = in_place ? dtable : empty({V, C}, dtype_of<acc_t>::value, dtable.device());  // (V, C)
    dispatch_index(ids.dtype(), [&](auto zero) {
      using I = decltype(zero);
      launch("embedding_backward_kernel", embedding_backward_kernel<scalar_t, acc_t, I>,
             static_cast<unsigned>((V + rows - 1) / rows), kScanThreads, 0, dout.data<scalar_t>(), ids.data<I>(),
             sums.data<acc_t>(), N, V, C, rows, error ? error->ptr() : nullptr);
    });
    if (!in_place) dtable.copy_(sums);
  })
  if (error) error->check(ids);
}

void embedding_pos_forward(const Tensor& ids, const Tensor& table, const Tensor& pos, const Tensor& out, int64_t T) {
  const int64_t N = ids.numel(), V = table.size(0), C = table.size(1);
  set_device(table.device());
  const IndexErrorBuffer error(table.device());
  REEL_DISPATCH_FLOATING_AND_16(table.dtype(), "embedding_pos_forward", {
    dispatch_index(ids.dtype(), [&](auto zero) {
      using I = decltype(zero);
      launch("embedding_pos_forward_kernel", embedding_pos_forward_kernel<scalar_t, I>, grid_for(N * C, kThreads),
             kThreads, 0,
             EmbeddingPosRows<scalar_t, I>{ids.data<I>(), table.data<scalar_t>(), pos.data<scalar_t>(), V, C, T,
                                           error.ptr()},
             out.data<scalar_t>(), N);
    });
  })
  error.check(ids);
}

namespace {
// embedding_pos_backward's launch, with the blocks of `norm` (none, or the LayerNorm's dw and db
// finished beside it) after its own.
template <typename T>
void pos_backward_launch(const Tensor& dout, const Tensor& ids, const Tensor& dtable, bool accumulate_table,
                         const Tensor& dpos, bool accumulate_pos, int64_t T_, bool check_ids, const NormParams<T>& norm) {
  const int64_t N = ids.numel(), C = dout.size(1);
  const int64_t V = dtable.defined() ? dtable.size(0) : 0, P = dpos.defined() ? dpos.size(0) : 0;
  // Table rows: as embedding_backward; position rows: 4 a block (P = block_size, up to thousands).
  const int64_t table_blocks = dtable.defined() && V > 0 ? std::min(V, kMaxOwnerBlocks) : 0;
  const int64_t rows = table_blocks > 0 ? (V + table_blocks - 1) / table_blocks : 1;
  const int64_t used_table_blocks = table_blocks > 0 ? (V + rows - 1) / rows : 0;
  const int64_t pos_rows = 4, pos_blocks = P > 0 ? (P + pos_rows - 1) / pos_rows : 0;
  if (used_table_blocks + pos_blocks + norm.blocks == 0) return;
  std::optional<IndexErrorBuffer> error;
  if (check_ids && dtable.defined()) error.emplace(dout.device());
  using acc_t = acc_type_t<T>;
  // The sums go into dtable itself when it is of acc_t and written (not added to); else into an
  // acc_t buffer that the owner threads finish into dtable.
  const bool in_place = std::is_same_v<T, acc_t> && !accumulate_table;
  const Tensor sums = !dtable.defined() || in_place ? dtable : empty({V, C}, dtype_of<acc_t>::value, dout.device());
  dispatch_index(ids.dtype(), [&](auto zero) {
    using I = decltype(zero);
    launch(norm.blocks > 0 ? "embedding_pos_layernorm_backward_kernel" : "embedding_pos_backward_kernel",
           embedding_pos_backward_kernel<T, acc_t, I>,
           static_cast<unsigned>(used_table_blocks + pos_blocks + norm.blocks), kScanThreads, 0, dout.data<T>(),
           ids.data<I>(), sums.defined() ? sums.data<acc_t>() : nullptr, dtable.defined() ? dtable.data<T>() : nullptr,
           !in_place, accumulate_table, dpos.defined() ? dpos.data<T>() : nullptr, accumulate_pos, N, V, C, T_, P,
           rows, used_table_blocks, pos_rows, error ? error->ptr() : nullptr, norm);
  });
  if (error) error->check(ids);
}
}  // namespace

void embedding_pos_backward(const Tensor& dout, const Tensor& ids, const Tensor& dtable, bool accumulate_table,
                            const Tensor& dpos, bool accumulate_pos, int64_t T, bool check_ids) {
  set_device(dout.device());
  REEL_DISPATCH_FLOATING_AND_16(dout.dtype(), "embedding_pos_backward",
                                pos_backward_launch<scalar_t>(dout, ids, dtable, accumulate_table, dpos,
                                                              accumulate_pos, T, check_ids, NormParams<scalar_t>{}))
}

void embedding_pos_layernorm_backward(const Tensor& dy, const Tensor& s, const Tensor& w, const Tensor& mean,
                                      const Tensor& rstd, const Tensor& ds, const Tensor& dx, const Tensor& dw,
                                      const Tensor& db, bool add_dw, bool add_db, const Tensor& ids,
                                      const Tensor& dtable, bool accumulate_table, const Tensor& dpos,
                                      bool accumulate_pos, int64_t T, bool check_ids) {
  set_device(dy.device());
  const Tensor partial = layernorm_backward_rows(dy, s, w, mean, rstd, ds, dx);  // (2, chunks, C)
  const int64_t C = s.size(1);
  REEL_DISPATCH_FLOATING_AND_16(dy.dtype(), "embedding_pos_layernorm_backward", {
    NormParams<scalar_t> norm;
    norm.partial = partial.data<double>();
    norm.dw = dw.data<scalar_t>();
    norm.db = db.data<scalar_t>();
    norm.add_dw = add_dw;
    norm.add_db = add_db;
    norm.chunks = partial.size(1);
    norm.blocks = 2 * ((C + kScanThreads - 1) / kScanThreads);
    pos_backward_launch<scalar_t>(dx, ids, dtable, accumulate_table, dpos, accumulate_pos, T, check_ids, norm);
  })
}

}  // namespace reel::kernels::cuda
