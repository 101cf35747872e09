// CUDA kernels of the pool family (kernels/pool.h): max_pool2d and avg_pool2d, forward and
// backward, over (P, H, W) planes, P = N * C.
//
// Forward: a grid-stride loop over the outputs, a thread per output reading its window.
// Backward: a grid-stride loop over the INPUT elements, each thread gathering the dy of the outputs
// whose window covers its element in row-major output order, as the CPU kernels
// (kernels/cpu/pool.cpp) do. Overlapping windows need no atomics and the adds have one order:
// the same bits in every run, every scheduling order, and as the CPU backend.
#include <cmath>

#include "kernels/backends.h"
#include "kernels/cuda/launch.h"

namespace reel::kernels::cuda {

namespace {

// The window along one axis: kernel size, stride, padding, dilation. Plain scalars: the kernels
// take it by value (std::array is not device code).
struct Axis {
  int64_t k, s, pad, d;
};

Axis axis_of(const Pool2d& p, int i) { return Axis{p.kernel[i], p.stride[i], p.padding[i], p.dilation[i]}; }

// The output along `a` whose window covers input position i at window offset k, or -1.
__device__ __forceinline__ int64_t covering(int64_t i, int64_t k, Axis a, int64_t O) {
  const int64_t t = i + a.pad - k * a.d;
  if (t < 0 || t % a.s != 0) return -1;
  const int64_t o = t / a.s;
  return o < O ? o : -1;
}

// x: (P, H, W); y, idx: (P, OH, OW).
template <typename T>
__global__ void max_pool2d_forward_kernel(const T* x, T* y, int64_t* idx, int64_t P, int64_t H, int64_t W,
                                          int64_t OH, int64_t OW, Axis ah, Axis aw) {
  const int64_t total = P * OH * OW;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total; i += int64_t{blockDim.x} * gridDim.x) {
    const int64_t ow = i % OW, oh = i / OW % OH, pl = i / (OW * OH);
    const T* xp = x + pl * H * W;
    T best = static_cast<T>(-INFINITY);
    int64_t arg = -1;  // stays -1 only for a window all in padding (the rules exclude it)
    for (int64_t ki = 0; ki < ah.k; ++ki) {
      const int64_t ih = oh * ah.s - ah.pad + ki * ah.d;
      if (ih < 0 || ih >= H) continue;
      for (int64_t kj = 0; kj < aw.k; ++kj) {
        const int64_t iw = ow * aw.s - aw.pad + kj * aw.d;
        if (iw < 0 || iw >= W) continue;
        const T v = xp[ih * W + iw];
        if (arg < 0 || v > best || v != v) {  // the first maximum; NaN wins; an all -inf window: its first
          best = v;
          arg = ih * W + iw;
        }
      }
    }
    y[i] = best;
    idx[i] = arg;
  }
}


// x: (P, H, W); y: (P, OH, OW). Dilation is 1.
template <typename T>
__global__ void avg_pool2d_forward_kernel(const T* x, T* y, int64_t P, int64_t H, int64_t W, int64_t OH, int64_t OW,
                                          Axis ah, Axis aw) {
  const int64_t total = P * OH * OW;
  const T div = static_cast<T>(ah.k * aw.k);  // count_include_pad: always the full window
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total; i += int64_t{blockDim.x} * gridDim.x) {
    const int64_t ow = i % OW, oh = i / OW % OH, pl = i / (OW * OH);
    const T* xp = x + pl * H * W;
    T acc = 0;
    for (int64_t ki = 0; ki < ah.k; ++ki) {
      const int64_t ih = oh * ah.s - ah.pad + ki;
      if (ih < 0 || ih >= H) continue;
      for (int64_t kj = 0; kj < aw.k; ++kj) {
        const int64_t iw = ow * aw.s - aw.pad + kj;
        if (iw >= 0 && iw < W) acc += xp[ih * W + iw];
      }
    }
    y[i] = acc / div;
  }
}


// dx of max pooling: an output's dy goes to the input its saved argmax names. idx: (P, OH, OW).
template <typename T>
struct MaxTake {
  const T* dy;
  const int64_t* idx;
  __device__ __forceinline__ void operator()(int64_t o, int64_t in, T& acc) const {
    if (idx[o] == in) acc += dy[o];
  }
};
// dx of average pooling: every covering output's dy / (kh * kw) (count_include_pad).
template <typename T>
struct AvgTake {
  const T* dy;
  T div;
  __device__ __forceinline__ void operator()(int64_t o, int64_t, T& acc) const { acc += dy[o] / div; }
};

// Thread per dx element (P, H, W): gathers from every output window covering it, window offsets
// walking down so outputs come in increasing order (the CPU's order: the same bits, no atomics).
// take(o, in, acc) adds output o's share for input `in` (flat in its plane); o indexes (P, OH, OW).
template <typename T, typename Take>
__global__ void pool2d_backward_kernel(Take take, T* dx, int64_t P, int64_t H, int64_t W, int64_t OH, int64_t OW,
                                       Axis ah, Axis aw) {
  const int64_t total = P * H * W;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total; i += int64_t{blockDim.x} * gridDim.x) {
    const int64_t iw = i % W, ih = i / W % H, pl = i / (W * H);
    T acc = 0;
    for (int64_t ki = ah.k - 1; ki >= 0; --ki) {
      const int64_t oh = covering(ih, ki, ah, OH);
      if (oh < 0) continue;
      for (int64_t kj = aw.k - 1; kj >= 0; --kj) {
        const int64_t ow = covering(iw, kj, aw, OW);
        if (ow >= 0) take((pl * OH + oh) * OW + ow, ih * W + iw, acc);
      }
    }
    dx[i] = acc;
  }
}

}  // namespace

// ---- launchers -------------------------------------------------------------------------------

void max_pool2d_forward(const Tensor& x, const Pool2d& p, const Tensor& y, const Tensor& indices) {
  const int64_t P = x.size(0), H = x.size(1), W = x.size(2), OH = y.size(1), OW = y.size(2);
  set_device(x.device());
  REEL_DISPATCH_FLOATING(x.dtype(), "max_pool2d_forward",
                         launch("max_pool2d_forward_kernel", max_pool2d_forward_kernel<scalar_t>,
                                grid_for(P * OH * OW, kThreads), kThreads, 0, x.data<scalar_t>(), y.data<scalar_t>(),
                                indices.data<int64_t>(), P, H, W, OH, OW, axis_of(p, 0), axis_of(p, 1)))
}

void max_pool2d_backward(const Tensor& dy, const Tensor& indices, const Pool2d& p, const Tensor& dx) {
  const int64_t P = dx.size(0), H = dx.size(1), W = dx.size(2), OH = dy.size(1), OW = dy.size(2);
  set_device(dy.device());
  REEL_DISPATCH_FLOATING(dy.dtype(), "max_pool2d_backward",
                         launch("max_pool2d_backward_kernel", pool2d_backward_kernel<scalar_t, MaxTake<scalar_t>>,
                                grid_for(P * H * W, kThreads), kThreads, 0,
                                MaxTake<scalar_t>{dy.data<scalar_t>(), indices.data<int64_t>()},
                                dx.data<scalar_t>(), P, H, W, OH, OW, axis_of(p, 0), axis_of(p, 1)))
}

void avg_pool2d_forward(const Tensor& x, const Pool2d& p, const Tensor& y) {
  const int64_t P = x.size(0), H = x.size(1), W = x.size(2), OH = y.size(1), OW = y.size(2);
  set_device(x.device());
  REEL_DISPATCH_FLOATING(x.dtype(), "avg_pool2d_forward",
                         launch("avg_pool2d_forward_kernel", avg_pool2d_forward_kernel<scalar_t>,
                                grid_for(P * OH * OW, kThreads), kThreads, 0, x.data<scalar_t>(), y.data<scalar_t>(),
                                P, H, W, OH, OW, axis_of(p, 0), axis_of(p, 1)))
}

void avg_pool2d_backward(const Tensor& dy, const Pool2d& p, const Tensor& dx) {
  const int64_t P = dx.size(0), H = dx.size(1), W = dx.size(2), OH = dy.size(1), OW = dy.size(2);
  set_device(dy.device());
  REEL_DISPATCH_FLOATING(dy.dtype(), "avg_pool2d_backward",
                         launch("avg_pool2d_backward_kernel", pool2d_backward_kernel<scalar_t, AvgTake<scalar_t>>,
                                grid_for(P * H * W, kThreads), kThreads, 0,
                                AvgTake<scalar_t>{dy.data<scalar_t>(),
                                                  static_cast<scalar_t>(p.kernel[0] * p.kernel[1])},
                                dx.data<scalar_t>(), P, H, W, OH, OW, axis_of(p, 0), axis_of(p, 1)))
}

}  // namespace reel::kernels::cuda
