// CUDA kernels of the pool family (kernels/pool.h): max_pool2d and avg_pool2d, forward and
// backward, over (P, H, W) planes, P = N * C (C for unbatched x).
//
// Which calls go where:
//   avg_pool2d forward and backward: through cuDNN (cudnnPoolingForward / cudnnPoolingBackward,
//     CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING or _EXCLUDE_PADDING as count_include_pad says;
//     the real library under nvcc where CMake found it, kernels/simt/cudnn_emu_pooling.cpp in the
//     host build) whenever cuDNN computes exactly reel's result: cuDNN's own output size
//     (cudnnGetPooling2dForwardOutputDim, always the floor formula) equals reel's (OH, OW) and
//     the sizes fit cuDNN's int. With ceil_mode that holds when rounding up added no window;
//     when it did, the extra windows hang past the padded edge, where PyTorch's divisor
//     (kernels/pool.h) clips the window; whether cuDNN accepts a y descriptor larger than its own
//     formula, and what it would divide by there, its documentation does not say, so reel does not
//     rely on it: reel's kernels below take those calls. The planes go to
//     cuDNN as an (P, 1, H, W) tensor. cuDNN's backward takes x and y, which an average's
//     gradient does not read (it depends only on the windows): reel passes dy's buffer for y and
//     dx's for x, so the tape op saves nothing for avg pooling on any device.
//   max_pool2d forward and backward: always reel's kernels below, never cuDNN. max_pool2d's
//     contract returns the argmax indices (the tape saves them and routes dy by them; users may
//     ask for them), which cuDNN's pooling does not produce; its backward instead re-derives the
//     maximum from x and y, so routing it through cuDNN would mean saving x and y on cuda (and
//     indices on cpu), running reel's forward anyway for the indices, and trusting cuDNN's tie
//     and NaN rule (undocumented) to pick the same element as the forward's indices (the first
//     maximum, NaN winning). reel's gather kernels are deterministic (no atomics), which
//     CUDNN_POOLING_MAX is not; CUDNN_POOLING_MAX_DETERMINISTIC would be the only mode allowed.
//     dilation (max only) has no cuDNN equivalent either.
//
// reel's kernels: forward, a grid-stride loop over the outputs, a thread per output reading its
// window. Backward: a grid-stride loop over the INPUT elements, each thread gathering the dy of
// the outputs whose window covers its element in row-major output order, as the CPU kernels
// (kernels/cpu/pool.cpp) do. Overlapping windows need no atomics and the adds have one order:
// the same bits in every run, every scheduling order, and as the CPU backend. Window sums and
// gathered gradients accumulate in the dispatch's acc_t and are stored as T once (no conversion
// for f32 and f64, where acc_t is T). bf16 and f16 always run reel's kernels (avg pooling too, not
// cuDNN): loads widen to f32, a window's sum or gathered gradient is f32, rounded once on store
// (a max is one of the inputs: no rounding at all).
#include <climits>
#include <cmath>
#include <string>
#include <type_traits>

#include "kernels/backends.h"
#include "kernels/cuda/cudnn_common.h"
#include "kernels/cuda/launch.h"

namespace reel::kernels::cuda {

namespace {

// The window along one axis: kernel size, stride, padding, dilation. Plain scalars: the kernels
// take it by value (std::array is not device code).
struct Axis {
  int64_t k, s, pad, d;
};
static_assert(std::has_unique_object_representations_v<Axis>);  // equal axes are equal bytes

Axis axis_of(const Pool2d& p, int i) { return Axis{p.kernel[i], p.stride[i], p.padding[i], p.dilation[i]}; }

// The extent of average window o along `a` over an input of `in` (kernels/pool.h's divisor): the
// window clipped to the padded input, or, without count_include_pad, to the input.
__host__ __device__ __forceinline__ int64_t avg_extent(int64_t o, Axis a, int64_t in, bool include_pad) {
  int64_t start = o * a.s - a.pad, end = start + a.k < in + a.pad ? start + a.k : in + a.pad;
  if (!include_pad) {
    if (start < 0) start = 0;
    if (end > in) end = in;
  }
  return end - start;
}

// The output along `a` whose window covers input position i at window offset k, or -1.
__device__ __forceinline__ int64_t covering(int64_t i, int64_t k, Axis a, int64_t O) {
  const int64_t t = i + a.pad - k * a.d;
  if (t < 0 || t % a.s != 0) return -1;
  const int64_t o = t / a.s;
  return o < O ? o : -1;
}

// x: (P, H, W); y, idx: (P, OH, OW).
template <typename T>
__global__ void __launch_bounds__(kThreads) max_pool2d_forward_kernel(const T* x, T* y, int64_t* idx, int64_t P, int64_t H, int64_t W,
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
template <typename T, typename acc_t>
__global__ void __launch_bounds__(kThreads) avg_pool2d_forward_kernel(const T* x, T* y, int64_t P, int64_t H, int64_t W, int64_t OH, int64_t OW,
                                          Axis ah, Axis aw, bool include_pad) {
  const int64_t total = P * OH * OW;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total; i += int64_t{blockDim.x} * gridDim.x) {
    const int64_t ow = i % OW, oh = i / OW % OH, pl = i / (OW * OH);
    const T* xp = x + pl * H * W;
    acc_t acc = 0;
    for (int64_t ki = 0; ki < ah.k; ++ki) {
      const int64_t ih = oh * ah.s - ah.pad + ki;
      if (ih < 0 || ih >= H) continue;
      for (int64_t kj = 0; kj < aw.k; ++kj) {
        const int64_t iw = ow * aw.s - aw.pad + kj;
        if (iw >= 0 && iw < W) acc += static_cast<acc_t>(xp[ih * W + iw]);
      }
    }
    y[i] = static_cast<T>(acc / static_cast<acc_t>(avg_extent(oh, ah, H, include_pad) *
                                                   avg_extent(ow, aw, W, include_pad)));
  }
}


// dx of max pooling: an output's dy goes to the input its saved argmax names. idx: (P, OH, OW).
template <typename T, typename acc_t>
struct MaxTake {
  const T* dy;
  const int64_t* idx;
  __device__ __forceinline__ void operator()(int64_t o, int64_t, int64_t, int64_t in, acc_t& acc) const {
    if (idx[o] == in) acc += static_cast<acc_t>(dy[o]);
  }
};
// dx of average pooling: every covering output's dy / its window's divisor. H, W: the input plane.
template <typename T, typename acc_t>
struct AvgTake {
  const T* dy;
  Axis ah, aw;
  int64_t H, W;
  bool include_pad;
  __device__ __forceinline__ void operator()(int64_t o, int64_t oh, int64_t ow, int64_t, acc_t& acc) const {
    acc += static_cast<acc_t>(dy[o]) /
           static_cast<acc_t>(avg_extent(oh, ah, H, include_pad) * avg_extent(ow, aw, W, include_pad));
  }
};

// Thread per dx element (P, H, W): gathers from every output window covering it, window offsets
// walking down so outputs come in increasing order (the CPU's order: the same bits, no atomics).
// take(o, oh, ow, in, acc) adds output o's share for input `in` (flat in its plane); o indexes
// (P, OH, OW), (oh, ow) its place in the plane. acc accumulates in acc_t.
template <typename T, typename acc_t, typename Take>
__global__ void __launch_bounds__(kThreads) pool2d_backward_kernel(Take take, T* dx, int64_t P, int64_t H, int64_t W, int64_t OH, int64_t OW,
                                       Axis ah, Axis aw) {
  const int64_t total = P * H * W;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total; i += int64_t{blockDim.x} * gridDim.x) {
    const int64_t iw = i % W, ih = i / W % H, pl = i / (W * H);
    acc_t acc = 0;
    for (int64_t ki = ah.k - 1; ki >= 0; --ki) {
      const int64_t oh = covering(ih, ki, ah, OH);
      if (oh < 0) continue;
      for (int64_t kj = aw.k - 1; kj >= 0; --kj) {
        const int64_t ow = covering(iw, kj, aw, OW);
        if (ow >= 0) take((pl * OH + oh) * OW + ow, oh, ow, ih * W + iw, acc);
      }
    }
    dx[i] = static_cast<T>(acc);
  }
}

#if REEL_HAS_CUDNN
// A cuDNN pooling descriptor, set in the constructor and destroyed with the object.
struct CudnnPoolDesc {
  cudnnPoolingDescriptor_t d = nullptr;
  CudnnPoolDesc(const Pool2d& p, cudnnPoolingMode_t mode, const char* op, const std::string& ctx) {
    REEL_CUDNN(cudnnCreatePoolingDescriptor, ctx, &d);
    try {
      // The NaN option concerns max modes only; averages propagate NaN arithmetically.
      REEL_CUDNN(cudnnSetPooling2dDescriptor, ctx, d, mode, CUDNN_PROPAGATE_NAN, cudnn_int(p.kernel[0], op, ctx),
                 cudnn_int(p.kernel[1], op, ctx), cudnn_int(p.padding[0], op, ctx), cudnn_int(p.padding[1], op, ctx),
                 cudnn_int(p.stride[0], op, ctx), cudnn_int(p.stride[1], op, ctx));
    } catch (...) {  // no destructor runs for an object whose constructor throws
      cudnnDestroyPoolingDescriptor(d);
      throw;
    }
  }
  ~CudnnPoolDesc() { cudnnDestroyPoolingDescriptor(d); }
  CudnnPoolDesc(const CudnnPoolDesc&) = delete;
  CudnnPoolDesc& operator=(const CudnnPoolDesc&) = delete;
};

std::string pair_str(const std::array<int64_t, 2>& a) {
  return "(" + std::to_string(a[0]) + ", " + std::to_string(a[1]) + ")";
}

// Average pooling through cuDNN, when cuDNN computes reel's result (see the header comment);
// returns false, having run nothing, when it does not. x: (P, H, W), y: (P, OH, OW). Forward
// (backward false): y = pool(x). Backward: x is dx's buffer (out), y is dy, dx = pool^T(dy).
bool cudnn_avg_pool(const Tensor& x, const Pool2d& p, const Tensor& y, const Tensor& dx, bool backward) {
  const int64_t P = x.size(0), H = x.size(1), W = x.size(2), OH = y.size(1), OW = y.size(2);
  // bf16 and f16 run reel's kernels: kernels/cuda/cudnn_common.h describes f32 and f64 data only.
  if (is_16bit_floating(x.dtype())) return false;
  if (p.dilation[0] != 1 || p.dilation[1] != 1 || P * H * W > INT_MAX || P * OH * OW > INT_MAX) return false;
  const char* op = backward ? "avg_pool2d_backward" : "avg_pool2d_forward";
  const std::string ctx = std::string(backward ? "dx " : "x ") + shape_str(x.shape()) + (backward ? " dy " : " y ") +
                          shape_str(y.shape()) + " " + dtype_name(x.dtype()) + ", kernel " + pair_str(p.kernel) +
                          " stride " + pair_str(p.stride) + " padding " + pair_str(p.padding);
  const CudnnPoolDesc pool(
      p, p.count_include_pad ? CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING : CUDNN_POOLING_AVERAGE_COUNT_EXCLUDE_PADDING,
      op, ctx);
  const CudnnTensorDesc xd({P, 1, H, W}, x.dtype(), op, ctx);
  int n = 0, c = 0, h = 0, w = 0;
  REEL_CUDNN(cudnnGetPooling2dForwardOutputDim, ctx, pool.d, xd.d, &n, &c, &h, &w);
  if (n != P || c != 1 || h != OH || w != OW) return false;  // ceil_mode added windows: reel's kernels
  const CudnnTensorDesc yd({P, 1, OH, OW}, y.dtype(), op, ctx);
  REEL_DISPATCH_FLOATING(x.dtype(), op, {
    // cuDNN's blend factors: float for float (and 16-bit) data, double for double: acc_t.
    const acc_t one = 1, zero = 0;  // beta = 0: the output is written, never read
    if (!backward)
      REEL_CUDNN(cudnnPoolingForward, ctx, cudnn_handle(), pool.d, &one, xd.d, x.data<scalar_t>(), &zero, yd.d,
                 y.data<scalar_t>());
    else  // (y, dy, x, dx): an average's gradient reads neither y nor x (dy and dx stand for them)
      REEL_CUDNN(cudnnPoolingBackward, ctx, cudnn_handle(), pool.d, &one, yd.d, y.data<scalar_t>(), yd.d,
                 y.data<scalar_t>(), xd.d, dx.data<scalar_t>(), &zero, xd.d, dx.data<scalar_t>());
  })
  return true;
}
#endif  // REEL_HAS_CUDNN

}  // namespace

// ---- launchers -------------------------------------------------------------------------------

void max_pool2d_forward(const Tensor& x, const Pool2d& p, const Tensor& y, const Tensor& indices) {
  const int64_t P = x.size(0), H = x.size(1), W = x.size(2), OH = y.size(1), OW = y.size(2);
  set_device(x.device());
  REEL_DISPATCH_FLOATING_AND_16(x.dtype(), "max_pool2d_forward",
                         launch("max_pool2d_forward_kernel", max_pool2d_forward_kernel<scalar_t>,
                                grid_for(P * OH * OW, kThreads), kThreads, 0, x.data<scalar_t>(), y.data<scalar_t>(),
                                indices.data<int64_t>(), P, H, W, OH, OW, axis_of(p, 0), axis_of(p, 1)))
}

void max_pool2d_backward(const Tensor& dy, const Tensor& indices, const Pool2d& p, const Tensor& dx) {
  const int64_t P = dx.size(0), H = dx.size(1), W = dx.size(2), OH = dy.size(1), OW = dy.size(2);
  set_device(dy.device());
  REEL_DISPATCH_FLOATING_AND_16(dy.dtype(), "max_pool2d_backward",
                         launch("max_pool2d_backward_kernel", pool2d_backward_kernel<scalar_t, acc_t, MaxTake<scalar_t, acc_t>>,
                                grid_for(P * H * W, kThreads), kThreads, 0,
                                MaxTake<scalar_t, acc_t>{dy.data<scalar_t>(), indices.data<int64_t>()},
                                dx.data<scalar_t>(), P, H, W, OH, OW, axis_of(p, 0), axis_of(p, 1)))
}

void avg_pool2d_forward(const Tensor& x, const Pool2d& p, const Tensor& y) {
  const int64_t P = x.size(0), H = x.size(1), W = x.size(2), OH = y.size(1), OW = y.size(2);
  set_device(x.device());
#if REEL_HAS_CUDNN
  if (cudnn_avg_pool(x, p, y, Tensor(), false)) return;
#endif
  REEL_DISPATCH_FLOATING_AND_16(x.dtype(), "avg_pool2d_forward",
                         launch("avg_pool2d_forward_kernel", avg_pool2d_forward_kernel<scalar_t, acc_t>,
                                grid_for(P * OH * OW, kThreads), kThreads, 0, x.data<scalar_t>(), y.data<scalar_t>(),
                                P, H, W, OH, OW, axis_of(p, 0), axis_of(p, 1), p.count_include_pad))
}

void avg_pool2d_backward(const Tensor& dy, const Pool2d& p, const Tensor& dx) {
  const int64_t P = dx.size(0), H = dx.size(1), W = dx.size(2), OH = dy.size(1), OW = dy.size(2);
  set_device(dy.device());
#if REEL_HAS_CUDNN
  if (cudnn_avg_pool(dx, p, dy, dx, true)) return;
#endif
  REEL_DISPATCH_FLOATING_AND_16(dy.dtype(), "avg_pool2d_backward",
                         launch("avg_pool2d_backward_kernel", pool2d_backward_kernel<scalar_t, acc_t, AvgTake<scalar_t, acc_t>>,
                                grid_for(P * H * W, kThreads), kThreads, 0,
                                AvgTake<scalar_t, acc_t>{dy.data<scalar_t>(), axis_of(p, 0), axis_of(p, 1), H, W,
                                                  p.count_include_pad},
                                dx.data<scalar_t>(), P, H, W, OH, OW, axis_of(p, 0), axis_of(p, 1)))
}

}  // namespace reel::kernels::cuda
