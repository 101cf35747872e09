// kernels/cuda/softmax.cu: softmax and log-softmax along the last dim, forward and backward.
//
// One warp per row (8 rows per 256-thread block, grid-stride over rows). Forward is the online
// softmax: each lane sweeps its strided share of the row once, keeping the running max m and
// s = sum(exp(x - m)) (rescaled when m grows), the warp combines the 32 (m, s) pairs with
// shuffles, and a second sweep (from L1) writes
//   softmax:     y = exp(x - m) / s
//   log_softmax: y = x - (m + log s)
// so the max is subtracted before any exp and logits of any magnitude stay finite. Backward
// reads the saved OUTPUT y (what the tape keeps), one row sum and one sweep:
//   softmax:     dx = y * (dy - sum(dy * y))
//   log_softmax: dx = dy - exp(y) * sum(dy)
// Loads convert T -> acc_t (the dispatch's accumulation type), the (m, s) pairs, row sums and the
// arithmetic are acc_t, and stores convert back to T (no-ops for f32 and f64, where acc_t is T;
// bf16 and f16 widen to f32 and round once on store, core/half.h).
#include <cmath>

#include "kernels/backends.h"
#include "kernels/cuda/block_reduce.h"
#include "kernels/cuda/launch.h"

namespace reel::kernels::cuda {

namespace {

constexpr int kRowsPerBlock = 8;  // warps per 256-thread block

// ---- kernels ---------------------------------------------------------------------------------

// x, y: (R, C). Warp per row.
template <typename T, typename acc_t, bool kLog>
__global__ void __launch_bounds__(kRowsPerBlock * 32) softmax_forward_kernel(const T* x, T* y, int64_t R, int64_t C) {
  using std::exp;
  using std::log;
  const int lane = threadIdx.x & 31;
  const int64_t warps = int64_t{gridDim.x} * kRowsPerBlock;
  for (int64_t row = blockIdx.x * int64_t{kRowsPerBlock} + (threadIdx.x >> 5); row < R; row += warps) {
    const T* xr = x + row * C;  // (C)
    T* yr = y + row * C;        // (C)
    MaxSum<acc_t> ms{static_cast<acc_t>(-INFINITY), acc_t(0)};
    for (int64_t c = lane; c < C; c += 32) ms = max_sum_add(ms, static_cast<acc_t>(xr[c]));
    ms = warp_max_sum(ms);
    if (kLog) {
      const acc_t lse = ms.m + log(ms.s);
      for (int64_t c = lane; c < C; c += 32) yr[c] = static_cast<T>(static_cast<acc_t>(xr[c]) - lse);
    } else {
      const acc_t inv = acc_t(1) / ms.s;
      for (int64_t c = lane; c < C; c += 32) yr[c] = static_cast<T>(exp(static_cast<acc_t>(xr[c]) - ms.m) * inv);
    }
  }
}

// dy, y, dx: (R, C). Warp per row.
template <typename T, typename acc_t, bool kLog>
__global__ void __launch_bounds__(kRowsPerBlock * 32) softmax_backward_kernel(const T* dy, const T* y, T* dx, int64_t R, int64_t C) {
  using std::exp;
  const int lane = threadIdx.x & 31;
  const int64_t warps = int64_t{gridDim.x} * kRowsPerBlock;
  for (int64_t row = blockIdx.x * int64_t{kRowsPerBlock} + (threadIdx.x >> 5); row < R; row += warps) {
    const T* dyr = dy + row * C;
    const T* yr = y + row * C;
    T* dxr = dx + row * C;
    acc_t s = 0;
    for (int64_t c = lane; c < C; c += 32) {
      const acc_t g = static_cast<acc_t>(dyr[c]);
      s += kLog ? g : g * static_cast<acc_t>(yr[c]);
    }
    s = warp_sum(s);
    for (int64_t c = lane; c < C; c += 32) {
      const acc_t g = static_cast<acc_t>(dyr[c]), yc = static_cast<acc_t>(yr[c]);
      dxr[c] = static_cast<T>(kLog ? g - exp(yc) * s : yc * (g - s));
    }
  }
}

}  // namespace

// ---- launchers -------------------------------------------------------------------------------

void softmax_forward(const Tensor& x, bool log, const Tensor& y) {
  const int64_t R = x.size(0), C = x.size(1);
  set_device(x.device());
  const unsigned grid = grid_for(R, kRowsPerBlock);
  REEL_DISPATCH_FLOATING_AND_16(x.dtype(), log ? "log_softmax_forward" : "softmax_forward", {
    if (log)
      launch("log_softmax_forward_kernel", softmax_forward_kernel<scalar_t, acc_t, true>, grid, kRowsPerBlock * 32, 0,
             x.data<scalar_t>(), y.data<scalar_t>(), R, C);
    else
      launch("softmax_forward_kernel", softmax_forward_kernel<scalar_t, acc_t, false>, grid, kRowsPerBlock * 32, 0,
             x.data<scalar_t>(), y.data<scalar_t>(), R, C);
  })
}

void softmax_backward(const Tensor& dy, const Tensor& y, bool log, const Tensor& dx) {
  const int64_t R = y.size(0), C = y.size(1);
  set_device(y.device());
  const unsigned grid = grid_for(R, kRowsPerBlock);
  REEL_DISPATCH_FLOATING_AND_16(y.dtype(), log ? "log_softmax_backward" : "softmax_backward", {
    if (log)
      launch("log_softmax_backward_kernel", softmax_backward_kernel<scalar_t, acc_t, true>, grid, kRowsPerBlock * 32, 0,
             dy.data<scalar_t>(), y.data<scalar_t>(), dx.data<scalar_t>(), R, C);
    else
      launch("softmax_backward_kernel", softmax_backward_kernel<scalar_t, acc_t, false>, grid, kRowsPerBlock * 32, 0,
             dy.data<scalar_t>(), y.data<scalar_t>(), dx.data<scalar_t>(), R, C);
  })
}

}  // namespace reel::kernels::cuda
