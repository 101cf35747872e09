// kernels/cuda/max.cu: max along an axis with its argmax (i64), and the backward scatter.
//
// The input arrives contiguous and viewed as (O, A, I): O outer rows, the reduced axis A, I inner
// positions. Two forward kernels, by layout:
//   rows   the last axis (I = 1): one warp per row, each lane scans its strided share, then the
//          32 (value, index) candidates meet in a shuffle tree;
//   cols   I > 1: one thread per output (o, i) walks a = 0..A-1; neighbouring threads read
//          neighbouring i, so every step of the walk is one coalesced row read.
// The rule is torch.max(x, dim)'s: the first maximum wins ties, a NaN is the maximum and the
// first NaN wins. Comparing (value, index) pairs makes the rule associative, so the tree gives
// the same answer as a scan.
// Backward: dx is zero except dx[o, indices[o, i], i] = dy[o, i]. One thread per dx element
// writes either dy or 0, so there is no separate zero fill and no scatter race. An index outside
// [0, A) is never used: the kernel records its position in the device's error slots (and writes
// zeros), raised at the host's next read of the device (kernels/cuda/index_errors.h).
// The forward compares and shuffles values as V = acc_t: T itself for f32 and f64, the exact f32
// widening for bf16 and f16 (the winner narrowed back is the input's bits).
#include <cstdint>

#include "kernels/backends.h"
#include "kernels/cuda/index_errors.h"
#include "kernels/cuda/launch.h"

namespace reel::kernels::cuda {

namespace {

constexpr int kRowsPerBlock = 8;  // rows kernel: warps per 256-thread block

// ---- kernels ---------------------------------------------------------------------------------

// Does candidate (v, vi) beat the current (cur, ci)? A NaN beats any number and the earlier of
// two NaNs wins; otherwise the larger value, and the earlier index on a tie.
template <typename T>
__device__ __forceinline__ bool beats(T v, int64_t vi, T cur, int64_t ci) {
  const bool v_nan = v != v, cur_nan = cur != cur;
  if (v_nan || cur_nan) return v_nan && (!cur_nan || vi < ci);
  return v > cur || (v == cur && vi < ci);
}

// x: (O, A) (I = 1); values, indices: (O). Warp per row.
template <typename T, typename V>
__global__ void __launch_bounds__(kRowsPerBlock * 32) max_rows_kernel(const T* x, T* values, int64_t* indices, int64_t O, int64_t A) {
  const int lane = threadIdx.x & 31;
  const int64_t warps = int64_t{gridDim.x} * kRowsPerBlock;
  for (int64_t o = blockIdx.x * int64_t{kRowsPerBlock} + (threadIdx.x >> 5); o < O; o += warps) {
    const T* row = x + o * A;  // (A)
    // (-inf, INT64_MAX) loses to every element: -inf ties and has the smaller index.
    V best = static_cast<V>(-INFINITY);
    int64_t best_i = INT64_MAX;
    for (int64_t a = lane; a < A; a += 32) {
      const V v = static_cast<V>(row[a]);
      if (beats(v, a, best, best_i)) {
        best = v;
        best_i = a;
      }
    }
    for (int offset = 16; offset > 0; offset >>= 1) {
      const V v = __shfl_down_sync(kFullMask, best, offset);
      const int64_t vi = __shfl_down_sync(kFullMask, best_i, offset);
      if (beats(v, vi, best, best_i)) {
        best = v;
        best_i = vi;
      }
    }
    if (lane == 0) {
      values[o] = static_cast<T>(best);
      indices[o] = best_i;
    }
  }
}

// x: (O, A, I); values, indices: (O, I). Thread per output, grid-stride.
template <typename T, typename V>
__global__ void __launch_bounds__(kThreads) max_cols_kernel(const T* x, T* values, int64_t* indices, int64_t O, int64_t A, int64_t I) {
  const int64_t total = O * I;
  for (int64_t e = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; e < total; e += int64_t{blockDim.x} * gridDim.x) {
    const int64_t o = e / I, i = e - o * I;
    const T* col = x + o * A * I + i;  // element a at col[a * I]
    V best = static_cast<V>(col[0]);
    int64_t best_i = 0;
    for (int64_t a = 1; a < A; ++a) {
      const V v = static_cast<V>(col[a * I]);
      if (beats(v, a, best, best_i)) {
        best = v;
        best_i = a;
      }
    }
    values[e] = static_cast<T>(best);
    indices[e] = best_i;
  }
}

// dy, indices: (O, I); dx: (O, A, I). Thread per dx element, grid-stride.
template <typename T>
__global__ void __launch_bounds__(kThreads) max_backward_kernel(const T* dy, const int64_t* indices, T* dx, int64_t O, int64_t A, int64_t I,
                                    unsigned long long* error) {
  const int64_t total = O * A * I;
  for (int64_t e = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; e < total; e += int64_t{blockDim.x} * gridDim.x) {
    const int64_t i = e % I, oa = e / I, a = oa % A, o = oa / A;
    const int64_t k = o * I + i;  // the output this element belongs to
    const int64_t idx = indices[k];
    if (idx < 0 || idx >= A) {
      if (a == 0) report_bad_index(error, k, idx);
      dx[e] = T(0);
    } else {
      dx[e] = idx == a ? dy[k] : T(0);
    }
  }
}

}  // namespace

// ---- launchers -------------------------------------------------------------------------------

void max_with_indices(const Tensor& x, const Tensor& values, const Tensor& indices) {
  const int64_t O = x.size(0), A = x.size(1), I = x.size(2);
  set_device(x.device());
  REEL_DISPATCH_FLOATING_AND_16(x.dtype(), "max_with_indices", {
    if (I == 1)
      launch("max_rows_kernel", max_rows_kernel<scalar_t, acc_t>, grid_for(O, kRowsPerBlock), kRowsPerBlock * 32, 0,
             x.data<scalar_t>(), values.data<scalar_t>(), indices.data<int64_t>(), O, A);
    else
      launch("max_cols_kernel", max_cols_kernel<scalar_t, acc_t>, grid_for(O * I, kThreads), kThreads, 0,
             x.data<scalar_t>(), values.data<scalar_t>(), indices.data<int64_t>(), O, A, I);
  })
}

void max_backward(const Tensor& dy, const Tensor& indices, const Tensor& dx) {
  const int64_t O = dx.size(0), A = dx.size(1), I = dx.size(2);
  set_device(dx.device());
  const IndexErrorBuffer error(dx.device());
  REEL_DISPATCH_FLOATING_AND_16(dx.dtype(), "max_backward", {
    launch("max_backward_kernel", max_backward_kernel<scalar_t>, grid_for(O * A * I, kThreads), kThreads, 0,
           dy.data<scalar_t>(), indices.data<int64_t>(), dx.data<scalar_t>(), O, A, I, error.ptr());
  })
  error.check(indices);
}

}  // namespace reel::kernels::cuda
