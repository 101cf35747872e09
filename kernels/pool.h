// The pool family: 2-D max and average pooling over (N, C, H, W) tensors or unbatched (C, H, W)
// ones, as PyTorch's max_pool2d (with return_indices) and avg_pool2d (ceil_mode and
// count_include_pad), forward and backward, in f32, f64, bf16 and f16 (16-bit windows summed in
// f32, rounded once). Plain kernels, no autograd: the tape (autograd/ops/pool.h) decides what
// to save.
//
// Each entry point checks its inputs (shapes, dtypes, devices, window parameters: reel::Error
// naming the op and them), makes them contiguous, allocates the outputs on the inputs' device and
// runs the backend kernel (declared at the end of this file) on cpu or cuda.
#ifndef REEL_KERNELS_POOL_H
#define REEL_KERNELS_POOL_H
#include <array>

#include "core/tensor.h"

namespace reel::kernels {

// The window, each as (along H, along W). The output plane is (OH, OW) with, PyTorch's rule,
//   OH = rnd((H + 2 * padding[0] - dilation[0] * (kernel[0] - 1) - 1) / stride[0]) + 1
// (OW likewise), rnd being floor, or ceil with ceil_mode, in which case the last window is dropped when it
// would start past the input and its left padding ((OH - 1) * stride[0] >= H + padding[0]).
// Windows may then hang past the padded edge: that part is neither read nor counted.
// Rules, PyTorch's: kernel, stride, dilation positive; 0 <= padding <= kernel / 2; OH, OW >= 1
// (without ceil_mode: the dilated window fits in the padded input).
// count_include_pad (avg pooling only): the divisor of a window (ih0 = oh * stride[0] - padding[0]
// its first row) is (min(ih0 + kernel[0], H + padding[0]) - ih0) * (the same along W), padding
// counted and the part past the padded edge not (kernel[0] * kernel[1] without ceil_mode); false:
// the number of input elements in the window.
struct Pool2d {
  std::array<int64_t, 2> kernel, stride, padding = {0, 0}, dilation = {1, 1};
  bool ceil_mode = false;
  bool count_include_pad = true;
};

// Every x below is (N, C, H, W) or unbatched (C, H, W): the leading dims are the planes, kept in
// the output, (N, C, OH, OW) or (C, OH, OW).

// x (N, C, H, W) -> y (N, C, OH, OW), the maximum of each window (padding is -inf, never chosen;
// NaN wins, as in PyTorch), and indices (N, C, OH, OW) i64: the flat position ih * W + iw of the
// maximum in its input plane (the first one in row-major window order among equals).
struct MaxPool2dForward { Tensor y, indices; };
MaxPool2dForward max_pool2d_forward(const Tensor& x, const Pool2d& p);
// dy (N, C, OH, OW), indices from the forward -> dx (`x_shape`): each dy added at its index. Every
// dx element gathers the outputs whose window covers it in row-major output order: no atomics,
// bit-identical run to run, for any thread count and on either backend.
Tensor max_pool2d_backward(const Tensor& dy, const Tensor& indices, const Shape& x_shape, const Pool2d& p);

// x (N, C, H, W) -> y (N, C, OH, OW): each window's sum (padding counted as zeros) divided by its
// divisor (see count_include_pad above). No dilation (PyTorch's avg_pool2d has none).
Tensor avg_pool2d_forward(const Tensor& x, const Pool2d& p);
// dy (N, C, OH, OW) -> dx (`x_shape`): each dy / (its window's divisor) spread over its window;
// gathered per dx element in a fixed order, as max_pool2d_backward.
Tensor avg_pool2d_backward(const Tensor& dy, const Shape& x_shape, const Pool2d& p);

}  // namespace reel::kernels
#endif  // REEL_KERNELS_POOL_H

// ---- Backend kernels --------------------------------------------------------------------------
// Declared once for both backends, outside the include guard: kernels/backends.h includes this
// file again with REEL_BACKEND_KERNELS defined, inside namespace reel::kernels::cpu
// (kernels/cpu/pool.cpp) and reel::kernels::cuda (kernels/cuda/pool.cu).
// Inputs arrive validated by the entry points (kernels/pool.cpp), CONTIGUOUS and viewed as the
// flat shapes written next to each argument; see kernels/backends.h for the common contract.
// P = N * C planes (C for unbatched x); p is valid for (H, W) -> (OH, OW) (with ceil_mode, windows
// may hang past the padded edge) and avg pooling has dilation (1, 1).
#ifdef REEL_BACKEND_KERNELS
void max_pool2d_forward(const Tensor& x,        // (P, H, W)
                        const Pool2d& p,
                        const Tensor& y,        // (P, OH, OW) out
                        const Tensor& indices); // (P, OH, OW) i64 out
void max_pool2d_backward(const Tensor& dy,       // (P, OH, OW)
                         const Tensor& indices,  // (P, OH, OW) i64, each in [0, H * W)
                         const Pool2d& p,
                         const Tensor& dx);      // (P, H, W) out
void avg_pool2d_forward(const Tensor& x,   // (P, H, W)
                        const Pool2d& p,
                        const Tensor& y);  // (P, OH, OW) out
void avg_pool2d_backward(const Tensor& dy,  // (P, OH, OW)
                         const Pool2d& p,
                         const Tensor& dx); // (P, H, W) out
#endif  // REEL_BACKEND_KERNELS
