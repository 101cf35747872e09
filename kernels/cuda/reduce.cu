// kernels/cuda/reduce.cu: sum, mean and max along axes and in total. The entry point permutes
// the input so that kept dims lead and reduced dims trail; output o then reduces the R elements
// x[kept(o) + reduced(r)], r < R (two OffsetCalcs, any strides). Three kernels, by layout:
//   rows_warp   one warp per output, for short rows (R <= 512): shuffles only;
//   rows_block  one 256-thread block per output: per-thread partials, warp shuffles, then one
//               value per warp through shared memory and a last warp shuffle;
//   cols        the reduced elements of an output are strided but neighbouring outputs are
//               neighbours in memory (a column sum: the bias gradient of a linear layer): 32
//               outputs per block, so a warp reads 32 consecutive elements, and 8 threads per
//               output whose partials meet in shared memory.
// When those give too few blocks to fill the device (a total sum is one output), R is split
// into chunks: pass 1 writes partials (O, splits), pass 2 reduces each row of partials.
// Deterministic: every sum has a fixed tree (no float atomics), so a result is the same run to
// run. Every sum accumulates in the dispatch's acc_t (f32 for f32, f64 for f64, f32 for a 16-bit
// type; the CPU uses double: tests allow for that), the split partials are an acc_t tensor too,
// and only the final store rounds to T; mean divides once at the end.
#include <cmath>

#include "kernels/backends.h"
#include "kernels/cuda/indexing.h"
#include "kernels/indexing.h"
#include "kernels/cuda/launch.h"

namespace reel::kernels::cuda {

namespace {

struct ReduceArgs {
  int64_t outputs = 0;   // O
  int64_t length = 0;    // R: elements reduced into one output
  int64_t chunk = 0;     // elements per split; splits = gridDim.y
  OffsetCalc<1> kept;    // o -> offset of output o's first element in x
  OffsetCalc<1> reduced; // r -> offset of its r-th element relative to that
  int64_t accumulate = 0;   // 1: the final pass adds into out instead of writing it (sums only).
                            // Not a bool: no padding, so equal arguments are equal bytes.
};
static_assert(std::has_unique_object_representations_v<ReduceArgs>);

constexpr int kRowsWarpMax = 512;  // rows this short take one warp each
constexpr int kWarpsPerBlock = 8;  // rows_warp: block (32, 8), 8 outputs per block
constexpr int kColsPerBlock = 32;  // cols: block (32, 8), 32 outputs per block
constexpr int kColsThreadsY = 8;
constexpr int64_t kMinChunk = 1024;

// ---- kernels ---------------------------------------------------------------------------------

// A sum, or a max that propagates NaN (binary_fn<Maximum> returns a NaN operand, either side).
template <bool IsMax, typename T>
__device__ __forceinline__ T combine(T a, T b) {
  return IsMax ? binary_fn<BinaryOp::Maximum>(a, b) : a + b;
}
template <bool IsMax, typename T>
__device__ __forceinline__ T identity() {
  return IsMax ? static_cast<T>(-INFINITY) : T(0);
}
// Tree over the 32 lanes of a warp (every lane must call it); lane 0 gets the result.
template <bool IsMax, typename T>
__device__ __forceinline__ T warp_reduce(T v) {
  for (int offset = 16; offset > 0; offset >>= 1) v = combine<IsMax>(v, __shfl_down_sync(kFullMask, v, offset));
  return v;
}

// This thread's share of output o's elements in split s: r = first, first + step, ... < end,
// each loaded as acc_t.
template <bool IsMax, typename acc_t, typename In>
__device__ __forceinline__ acc_t accumulate(const In* x, const ReduceArgs& args, int64_t o, int64_t s, int64_t first,
                                            int64_t step) {
  int64_t koff[1];
  args.kept.get(o, koff);
  const In* base = x + koff[0];
  const int64_t begin = s * args.chunk + first;
  const int64_t end = (s + 1) * args.chunk < args.length ? (s + 1) * args.chunk : args.length;
  acc_t acc = identity<IsMax, acc_t>();
  for (int64_t r = begin; r < end; r += step) {
    int64_t roff[1];
    args.reduced.get(r, roff);
    acc = combine<IsMax>(acc, static_cast<acc_t>(base[roff[0]]));
  }
  return acc;
}

// out[i] = acc (divided by divisor: a mean), or out[i] += acc when the pass accumulates; the sum
// runs in acc_t and is rounded to Out once.
template <bool IsMax, typename Out, typename acc_t>
__device__ __forceinline__ void store(Out* out, int64_t i, acc_t acc, acc_t divisor, bool accumulate) {
  const acc_t r = IsMax ? acc : acc / divisor;
  out[i] = static_cast<Out>(accumulate ? static_cast<acc_t>(out[i]) + r : r);
}

// Block (32, 8): warp y reduces output blockIdx.x * 8 + y, split blockIdx.y.
// x: as described by args; out: (O, splits) contiguous; divisor: R for a final mean, else 1.
// In -> Out: T -> T in one pass; T -> acc_t then acc_t -> T with splits.
template <bool IsMax, typename In, typename Out, typename acc_t>
__global__ void __launch_bounds__(32 * kWarpsPerBlock) reduce_rows_warp_kernel(const In* x, Out* out, ReduceArgs args, acc_t divisor) {
  const int64_t o = blockIdx.x * int64_t{blockDim.y} + threadIdx.y, s = blockIdx.y;
  const bool active = o < args.outputs;  // uniform over the warp: all 32 lanes reach the shuffles
  acc_t acc = active ? accumulate<IsMax, acc_t>(x, args, o, s, threadIdx.x, 32) : identity<IsMax, acc_t>();
  acc = warp_reduce<IsMax>(acc);
  if (active && threadIdx.x == 0) store<IsMax>(out, o * gridDim.y + s, acc, divisor, args.accumulate);
}

// Block (256): reduces output blockIdx.x, split blockIdx.y. out, divisor: as above.
template <bool IsMax, typename In, typename Out, typename acc_t>
__global__ void __launch_bounds__(256) reduce_rows_block_kernel(const In* x, Out* out, ReduceArgs args, acc_t divisor) {
  __shared__ acc_t warp_results[32];  // one per warp of the block
  const int64_t o = blockIdx.x, s = blockIdx.y;
  acc_t acc = accumulate<IsMax, acc_t>(x, args, o, s, threadIdx.x, blockDim.x);
  acc = warp_reduce<IsMax>(acc);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) warp_results[warp] = acc;
  __syncthreads();
  if (warp == 0) {
    const int warps = blockDim.x >> 5;
    acc = lane < warps ? warp_results[lane] : identity<IsMax, acc_t>();
    acc = warp_reduce<IsMax>(acc);
    if (lane == 0) store<IsMax>(out, o * gridDim.y + s, acc, divisor, args.accumulate);
  }
}

// Block (32, 8): thread (x, y) reduces every 8th element of output blockIdx.x * 32 + x (split
// blockIdx.y) starting at y; thread (x, 0) then combines the 8 partials in order.
template <bool IsMax, typename In, typename Out, typename acc_t>
__global__ void __launch_bounds__(kColsPerBlock * kColsThreadsY) reduce_cols_kernel(const In* x, Out* out, ReduceArgs args, acc_t divisor) {
  __shared__ acc_t partial[kColsThreadsY][kColsPerBlock + 1];  // +1: no bank conflicts
  const int64_t o = blockIdx.x * int64_t{kColsPerBlock} + threadIdx.x, s = blockIdx.y;
  const bool active = o < args.outputs;
  partial[threadIdx.y][threadIdx.x] =
      active ? accumulate<IsMax, acc_t>(x, args, o, s, threadIdx.y, kColsThreadsY) : identity<IsMax, acc_t>();
  __syncthreads();
  if (active && threadIdx.y == 0) {
    acc_t acc = partial[0][threadIdx.x];
    for (int k = 1; k < kColsThreadsY; ++k) acc = combine<IsMax>(acc, partial[k][threadIdx.x]);
    store<IsMax>(out, o * gridDim.y + s, acc, divisor, args.accumulate);
  }
}

// ---- launchers -------------------------------------------------------------------------------

enum class Layout { RowsWarp, RowsBlock, Cols };

template <bool IsMax, typename In, typename Out, typename acc_t>
void launch_pass(Layout layout, const In* x, Out* out, const ReduceArgs& args, int64_t splits, acc_t divisor) {
  const unsigned sy = static_cast<unsigned>(splits);
  switch (layout) {
    case Layout::RowsWarp: {
      const dim3 grid(static_cast<unsigned>((args.outputs + kWarpsPerBlock - 1) / kWarpsPerBlock), sy);
      launch("reduce_rows_warp_kernel", reduce_rows_warp_kernel<IsMax, In, Out, acc_t>, grid, dim3(32, kWarpsPerBlock), 0, x, out,
             args, divisor);
      break;
    }
    case Layout::RowsBlock:
      launch("reduce_rows_block_kernel", reduce_rows_block_kernel<IsMax, In, Out, acc_t>,
             dim3(static_cast<unsigned>(args.outputs), sy), dim3(256), 0, x, out, args, divisor);
      break;
    case Layout::Cols: {
      const dim3 grid(static_cast<unsigned>((args.outputs + kColsPerBlock - 1) / kColsPerBlock), sy);
      launch("reduce_cols_kernel", reduce_cols_kernel<IsMax, In, Out, acc_t>, grid, dim3(kColsPerBlock, kColsThreadsY), 0, x, out,
             args, divisor);
      break;
    }
  }
}

// Kept/reduced OffsetCalcs of x; false when either has more than kMaxDims coalesced dims.
bool make_args(const Tensor& x, int64_t reduced_dims, ReduceArgs& args) {
  const ReducedSplit s = split_reduced(x, reduced_dims);
  args.outputs = shape_numel(s.kept_shape);
  args.length = shape_numel(s.reduced_shape);
  return make_offset_calc<1>(s.kept_shape, {&s.kept_strides}, args.kept) &&
         make_offset_calc<1>(s.reduced_shape, {&s.reduced_strides}, args.reduced);
}

template <bool IsMax, typename T, typename acc_t>
void reduce_impl(bool mean, const Tensor& x_in, int64_t reduced_dims, const Tensor& out, bool accumulate) {
  Tensor x = x_in;
  ReduceArgs args;
  if (!make_args(x, reduced_dims, args)) {
    x = untracked::contiguous(x);
    const bool ok = make_args(x, reduced_dims, args);
    REEL_CHECK(ok, "reduce: cannot index shape ", x.shape());
  }
  const int64_t O = args.outputs, R = args.length;
  REEL_CHECK(O == out.numel() && R > 0, "reduce: ", O, " outputs of ", R, " elements for an output of shape ",
             out.shape());
  const int rk = args.reduced.rank, kk = args.kept.rank;
  const bool rows_contiguous = rk == 0 || args.reduced.strides[rk - 1][0] == 1;
  const bool outputs_adjacent = kk > 0 && args.kept.strides[kk - 1][0] == 1;
  const Layout layout = !rows_contiguous && outputs_adjacent ? Layout::Cols
                        : R <= kRowsWarpMax                  ? Layout::RowsWarp
                                                             : Layout::RowsBlock;
  const int64_t blocks = layout == Layout::RowsWarp  ? (O + kWarpsPerBlock - 1) / kWarpsPerBlock
                         : layout == Layout::Cols    ? (O + kColsPerBlock - 1) / kColsPerBlock
                                                     : O;
  // Too few blocks for the device and long rows: split each row into chunks of >= kMinChunk.
  const int64_t target = 2 * int64_t{sm_count()};
  int64_t splits = 1;
  if (blocks < target) splits = std::max<int64_t>(1, std::min({(target + blocks - 1) / blocks, R / kMinChunk, int64_t{65535}}));
  args.chunk = (R + splits - 1) / splits;
  splits = (R + args.chunk - 1) / args.chunk;  // no empty split
  const acc_t divisor = mean ? static_cast<acc_t>(R) : acc_t(1);
  const T* px = x.data<T>();
  if (splits == 1) {
    args.accumulate = accumulate ? 1 : 0;
    launch_pass<IsMax>(layout, px, out.data<T>(), args, 1, divisor);
    return;
  }
  // Pass 1: acc_t partials (O, splits); pass 2: each row of partials, a contiguous (O, splits) tensor.
  Tensor partial = empty({O, splits}, dtype_of<acc_t>::value, out.device());
  launch_pass<IsMax>(layout, px, partial.data<acc_t>(), args, splits, acc_t(1));
  ReduceArgs rows;
  rows.outputs = O;
  rows.length = splits;
  rows.chunk = splits;
  rows.accumulate = accumulate ? 1 : 0;
  const Shape kshape{O}, kstride{splits}, rshape{splits}, rstride{1};
  make_offset_calc<1>(kshape, {&kstride}, rows.kept);
  make_offset_calc<1>(rshape, {&rstride}, rows.reduced);
  launch_pass<IsMax>(splits <= kRowsWarpMax ? Layout::RowsWarp : Layout::RowsBlock, partial.data<acc_t>(),
                     out.data<T>(), rows, 1, divisor);
}

}  // namespace

void reduce(ReduceOp op, const Tensor& x, int64_t reduced_dims, const Tensor& out, bool accumulate) {
  if (out.numel() == 0) return;
  set_device(out.device());
  REEL_DISPATCH_FLOATING_AND_16(x.dtype(), op_name(op), {
    if (op == ReduceOp::Max) reduce_impl<true, scalar_t, acc_t>(false, x, reduced_dims, out, false);
    else reduce_impl<false, scalar_t, acc_t>(op == ReduceOp::Mean, x, reduced_dims, out, accumulate);
  })
}

}  // namespace reel::kernels::cuda
