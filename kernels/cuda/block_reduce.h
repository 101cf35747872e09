// kernels/cuda/block_reduce.h: the deterministic warp and block reductions the row-wise CUDA
// kernels share (layernorm, softmax, cross_entropy, attention, max, optimizer): sum and max with a
// fixed tree, and the online-softmax pair (running max, sum of exp) with its combine.
//
// Determinism: every reduction here is a fixed tree (shuffle-down within a warp, then the warp
// totals added in warp order), never a float atomic, so a result has the same bits whatever the
// scheduling. The total is computed once (by lane 0, by warp 0) and broadcast, so that every
// thread sees the same bits: a butterfly would have lane a compute x*ea + y*eb and lane b
// y*eb + x*ea, which FMA contraction can round differently.
//
// Every helper is generic in its value type; kernels call them with the dispatch's acc_t (loads
// converted from the element type first), so partials, shared-memory scratch and (m, s) pairs
// are acc_t: f32 for f32 and the 16-bit types, f64 for f64.
#pragma once
#include <cmath>
#include <cstdint>

#include "kernels/cuda/launch.h"

namespace reel::kernels::cuda {

// ---- device helpers --------------------------------------------------------------------------

// std::min is not a device function (without --expt-relaxed-constexpr).
__host__ __device__ __forceinline__ int64_t min_i64(int64_t a, int64_t b) { return a < b ? a : b; }

struct SumOp {
  template <typename T>
  __device__ __forceinline__ T operator()(T a, T b) const { return a + b; }
};
// fmax ignores a NaN operand on either side, so the combine is symmetric.
struct MaxOp {
  template <typename T>
  __device__ __forceinline__ T operator()(T a, T b) const {
    using std::fmax;
    return fmax(a, b);
  }
};

// Reduces v over the 32 lanes of a warp; every lane must call it and every lane gets the result.
template <typename T, typename Op>
__device__ __forceinline__ T warp_reduce(T v, Op op) {
  for (int offset = 16; offset > 0; offset >>= 1) v = op(v, __shfl_down_sync(kFullMask, v, offset));
  return __shfl_sync(kFullMask, v, 0);
}
template <typename T>
__device__ __forceinline__ T warp_sum(T v) { return warp_reduce(v, SumOp{}); }
template <typename T>
__device__ __forceinline__ T warp_max(T v) { return warp_reduce(v, MaxOp{}); }

// Reduces v over a 1-D block (blockDim.x a multiple of 32); every thread must call it, with the
// same `scratch` of 32 T in shared memory, and every thread gets the result. The leading barrier
// lets a block call it again right away: nobody still reads scratch from the previous call.
template <typename T, typename Op>
__device__ __forceinline__ T block_reduce(T v, Op op, T* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  v = warp_reduce(v, op);
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  T total = scratch[0];
  for (int w = 1; w < warps; ++w) total = op(total, scratch[w]);  // warp order: the same in every thread
  return total;
}

// The online softmax state of a set of values: their max m and s = sum(exp(x - m)). Combining
// two rescales each sum to the larger max (Milakov & Gimelshein 2018). An empty set is
// (-inf, 0); all -inf stays (-inf, 0) rather than exp(-inf - -inf) = NaN.
template <typename T>
struct MaxSum {
  T m, s;
};
template <typename T>
__device__ __forceinline__ MaxSum<T> max_sum_add(MaxSum<T> a, T x) {  // a plus one value x
  using std::exp;
  if (x > a.m) return {x, a.s * exp(a.m - x) + T(1)};  // exp(-inf) = 0 on the first value
  return {a.m, a.s + (x == -INFINITY ? T(0) : exp(x - a.m))};  // a NaN x lands here: s = NaN
}
struct MaxSumOp {
  template <typename T>
  __device__ __forceinline__ MaxSum<T> operator()(MaxSum<T> a, MaxSum<T> b) const {
    using std::exp;
    using std::fmax;
    const T m = fmax(a.m, b.m);
    if (m == -INFINITY) return {m, a.s + b.s};
    return {m, a.s * exp(a.m - m) + b.s * exp(b.m - m)};
  }
};
template <typename T>
__device__ __forceinline__ MaxSum<T> warp_max_sum(MaxSum<T> v) {  // every lane gets the total
  for (int offset = 16; offset > 0; offset >>= 1) {
    const MaxSum<T> o{__shfl_down_sync(kFullMask, v.m, offset), __shfl_down_sync(kFullMask, v.s, offset)};
    v = MaxSumOp{}(v, o);
  }
  return {__shfl_sync(kFullMask, v.m, 0), __shfl_sync(kFullMask, v.s, 0)};
}
// Over a 1-D block, as block_reduce; scratch: 32 MaxSum<T> in shared memory.
template <typename T>
__device__ __forceinline__ MaxSum<T> block_max_sum(MaxSum<T> v, MaxSum<T>* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  v = warp_max_sum(v);
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  MaxSum<T> total = scratch[0];
  for (int w = 1; w < warps; ++w) total = MaxSumOp{}(total, scratch[w]);
  return total;
}

}  // namespace reel::kernels::cuda
