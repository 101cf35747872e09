// CPU kernels of the pool family (kernels/pool.h): max_pool2d and avg_pool2d, forward and
// backward, over (P, H, W) planes, P = N * C.
//
// Forward: one task per plane, each output reading its window directly (out-of-range positions
// are padding: skipped, which is -inf for max and 0 for avg).
// Backward: a GATHER, not a scatter: each dx element adds the dy of the outputs whose window
// covers it, in row-major output order. Overlapping windows (stride < kernel) then never write
// the same element from two threads and need no atomics, and the order of the adds is fixed:
// bit-identical for any thread count, and the same order as the CUDA kernels
// (kernels/cuda/pool.cu), which gather the same way. Sums (avg windows, gathered gradients) run in
// the dispatch's acc_t and are stored as T once (no conversion for f32 and f64, where acc_t is T;
// bf16 and f16 widen to f32 on load and round once on store; a max is an input, stored unrounded).
#include <algorithm>
#include <cmath>
#include <limits>

#include "kernels/backends.h"
#include "kernels/cpu/parallel.h"

namespace reel::kernels::cpu {

namespace {

// The first output along one axis whose window covers input position i, and the window offset k
// at which it does: o * s - pad + k * d == i. Walking k down from kernel - 1 to 0 visits the
// covering outputs in increasing o; `fn(o)` runs for each with 0 <= o < O.
template <typename F>
void for_covering(int64_t i, int64_t kernel, int64_t s, int64_t pad, int64_t d, int64_t O, F&& fn) {
  for (int64_t k = kernel - 1; k >= 0; --k) {
    const int64_t t = i + pad - k * d;
    if (t < 0 || t % s != 0) continue;
    const int64_t o = t / s;
    if (o < O) fn(o);
  }
}

// The divisor of average window (oh, ow) (kernels/pool.h): the window clipped to the padded input,
// or, without count_include_pad, to the input.
int64_t avg_divisor(const Pool2d& p, int64_t oh, int64_t ow, int64_t H, int64_t W) {
  const int64_t o[2] = {oh, ow}, in[2] = {H, W};
  int64_t n = 1;
  for (int i = 0; i < 2; ++i) {
    int64_t start = o[i] * p.stride[i] - p.padding[i];
    int64_t end = std::min(start + p.kernel[i], in[i] + p.padding[i]);
    if (!p.count_include_pad) {
      start = std::max<int64_t>(start, 0);
      end = std::min(end, in[i]);
    }
    n *= end - start;
  }
  return n;
}

// x: (P, H, W); y, idx: (P, OH, OW).
template <typename T>
void max_forward_impl(const T* x, const Pool2d& p, T* y, int64_t* idx, int64_t P, int64_t H, int64_t W, int64_t OH,
                      int64_t OW) {
  parallel_for(P, P * OH * OW * p.kernel[0] * p.kernel[1] >= kMinParallelElements, [&](int64_t pl) {
    const T* xp = x + pl * H * W;
    for (int64_t oh = 0; oh < OH; ++oh)
      for (int64_t ow = 0; ow < OW; ++ow) {
        T best = static_cast<T>(-std::numeric_limits<double>::infinity());  // T may be bf16 or f16
        int64_t arg = -1;  // stays -1 only for a window all in padding (the rules exclude it)
        for (int64_t ki = 0; ki < p.kernel[0]; ++ki) {
          const int64_t ih = oh * p.stride[0] - p.padding[0] + ki * p.dilation[0];
          if (ih < 0 || ih >= H) continue;
          for (int64_t kj = 0; kj < p.kernel[1]; ++kj) {
            const int64_t iw = ow * p.stride[1] - p.padding[1] + kj * p.dilation[1];
            if (iw < 0 || iw >= W) continue;
            const T v = xp[ih * W + iw];
            // Strictly greater: the first maximum; NaN wins, and a window of -inf still picks its first
            // element, as PyTorch.
            if (arg < 0 || v > best || v != v) {
              best = v;
              arg = ih * W + iw;
            }
          }
        }
        y[(pl * OH + oh) * OW + ow] = best;
        idx[(pl * OH + oh) * OW + ow] = arg;
      }
  });
}

// dy, idx: (P, OH, OW); dx: (P, H, W).
template <typename T, typename acc_t>
void max_backward_impl(const T* dy, const int64_t* idx, const Pool2d& p, T* dx, int64_t P, int64_t H, int64_t W,
                       int64_t OH, int64_t OW) {
  parallel_for(P, P * H * W * p.kernel[0] * p.kernel[1] >= kMinParallelElements, [&](int64_t pl) {
    const T* dyp = dy + pl * OH * OW;
    const int64_t* ip = idx + pl * OH * OW;
    for (int64_t ih = 0; ih < H; ++ih)
      for (int64_t iw = 0; iw < W; ++iw) {
        acc_t acc = 0;
        for_covering(ih, p.kernel[0], p.stride[0], p.padding[0], p.dilation[0], OH, [&](int64_t oh) {
          for_covering(iw, p.kernel[1], p.stride[1], p.padding[1], p.dilation[1], OW, [&](int64_t ow) {
            if (ip[oh * OW + ow] == ih * W + iw) acc += static_cast<acc_t>(dyp[oh * OW + ow]);
          });
        });
        dx[(pl * H + ih) * W + iw] = static_cast<T>(acc);
      }
  });
}

// x: (P, H, W); y: (P, OH, OW). Dilation is (1, 1).
template <typename T, typename acc_t>
void avg_forward_impl(const T* x, const Pool2d& p, T* y, int64_t P, int64_t H, int64_t W, int64_t OH, int64_t OW) {
  parallel_for(P, P * OH * OW * p.kernel[0] * p.kernel[1] >= kMinParallelElements, [&](int64_t pl) {
    const T* xp = x + pl * H * W;
    for (int64_t oh = 0; oh < OH; ++oh)
      for (int64_t ow = 0; ow < OW; ++ow) {
        acc_t acc = 0;
        for (int64_t ki = 0; ki < p.kernel[0]; ++ki) {
          const int64_t ih = oh * p.stride[0] - p.padding[0] + ki;
          if (ih < 0 || ih >= H) continue;
          for (int64_t kj = 0; kj < p.kernel[1]; ++kj) {
            const int64_t iw = ow * p.stride[1] - p.padding[1] + kj;
            if (iw >= 0 && iw < W) acc += static_cast<acc_t>(xp[ih * W + iw]);
          }
        }
        y[(pl * OH + oh) * OW + ow] = static_cast<T>(acc / static_cast<acc_t>(avg_divisor(p, oh, ow, H, W)));
      }
  });
}

// dy: (P, OH, OW); dx: (P, H, W). Dilation is (1, 1).
template <typename T, typename acc_t>
void avg_backward_impl(const T* dy, const Pool2d& p, T* dx, int64_t P, int64_t H, int64_t W, int64_t OH, int64_t OW) {
  parallel_for(P, P * H * W * p.kernel[0] * p.kernel[1] >= kMinParallelElements, [&](int64_t pl) {
    const T* dyp = dy + pl * OH * OW;
    for (int64_t ih = 0; ih < H; ++ih)
      for (int64_t iw = 0; iw < W; ++iw) {
        acc_t acc = 0;
        for_covering(ih, p.kernel[0], p.stride[0], p.padding[0], 1, OH, [&](int64_t oh) {
          for_covering(iw, p.kernel[1], p.stride[1], p.padding[1], 1, OW, [&](int64_t ow) {
            acc += static_cast<acc_t>(dyp[oh * OW + ow]) / static_cast<acc_t>(avg_divisor(p, oh, ow, H, W));
          });
        });
        dx[(pl * H + ih) * W + iw] = static_cast<T>(acc);
      }
  });
}

}  // namespace

// ---- launchers ----------------------------------------------------------------------------------

void max_pool2d_forward(const Tensor& x, const Pool2d& p, const Tensor& y, const Tensor& indices) {
  REEL_DISPATCH_FLOATING_AND_16(x.dtype(), "max_pool2d_forward",
                         max_forward_impl<scalar_t>(x.data<scalar_t>(), p, y.data<scalar_t>(),
                                                    indices.data<int64_t>(), x.size(0), x.size(1), x.size(2),
                                                    y.size(1), y.size(2)))
}

void max_pool2d_backward(const Tensor& dy, const Tensor& indices, const Pool2d& p, const Tensor& dx) {
  REEL_DISPATCH_FLOATING_AND_16(dy.dtype(), "max_pool2d_backward",
                         max_backward_impl<scalar_t, acc_t>(dy.data<scalar_t>(), indices.data<int64_t>(), p,
                                                     dx.data<scalar_t>(), dx.size(0), dx.size(1), dx.size(2),
                                                     dy.size(1), dy.size(2)))
}

void avg_pool2d_forward(const Tensor& x, const Pool2d& p, const Tensor& y) {
  REEL_DISPATCH_FLOATING_AND_16(x.dtype(), "avg_pool2d_forward",
                         avg_forward_impl<scalar_t, acc_t>(x.data<scalar_t>(), p, y.data<scalar_t>(), x.size(0), x.size(1),
                                                    x.size(2), y.size(1), y.size(2)))
}

void avg_pool2d_backward(const Tensor& dy, const Pool2d& p, const Tensor& dx) {
  REEL_DISPATCH_FLOATING_AND_16(dy.dtype(), "avg_pool2d_backward",
                         avg_backward_impl<scalar_t, acc_t>(dy.data<scalar_t>(), p, dx.data<scalar_t>(), dx.size(0),
                                                     dx.size(1), dx.size(2), dy.size(1), dy.size(2)))
}

}  // namespace reel::kernels::cpu
