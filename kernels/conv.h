// The conv family: 2-D convolution over (N, C, H, W) tensors, as PyTorch's conv2d (cross-correlation,
// zero padding, stride, dilation, groups; weight (C_out, C_in / groups, kH, kW), optional bias
// (C_out)), forward and the three backward products (input, weight, bias). Plain kernels, no
// autograd: the tape (autograd/ops/conv.h) decides what to save.
//
// Each entry point checks its inputs (shapes, dtypes, devices, the convolution's parameters:
// reel::Error naming the op and them), makes them contiguous, allocates the outputs on the inputs'
// device and runs the backend kernel (declared at the end of this file): on cpu im2col + the CPU
// GEMM (kernels/cpu/conv.cpp), on cuda cuDNN (kernels/cuda/conv.cu; the emulated cuDNN of
// kernels/simt/cudnn_emu.cpp in the host build).
// Dtypes: x, w, b (and dy) one of f32, f64, bf16, f16. bf16 and f16 sum in f32 (exact products of
// the 16-bit values) and round each output element once: on cuda through cuDNN with 16-bit data
// and an f32 compute type; on cpu through kernels/cpu/gemm.h's 16-bit path (oneDNN's bf16 matmul
// where the CPU has AVX512-BF16 or AMX, else the operands widened to f32).
#ifndef REEL_KERNELS_CONV_H
#define REEL_KERNELS_CONV_H
#include <array>

#include "core/tensor.h"

namespace reel::kernels {

// The convolution's parameters, each pair as (along H, along W). The output plane is (OH, OW) with
//   OH = floor((H + 2 * padding[0] - dilation[0] * (kH - 1) - 1) / stride[0]) + 1
// (OW likewise). Rules, PyTorch's: stride and dilation positive, padding >= 0, groups positive and
// dividing both C_in and C_out, the dilated kernel fits in the padded input (OH, OW >= 1).
struct Conv2d {
  std::array<int64_t, 2> stride = {1, 1}, padding = {0, 0}, dilation = {1, 1};
  int64_t groups = 1;
};

// The output shape (N, C_out, OH, OW) of x (N, C_in, H, W) convolved with a weight of `w_shape`
// (C_out, C_in / groups, kH, kW); reel::Error naming `op` when the shapes or p break a rule.
Shape conv2d_output_shape(const char* op, const Shape& x_shape, const Shape& w_shape, const Conv2d& p);

// x (N, C_in, H, W), w (C_out, C_in / groups, kH, kW), b (C_out) or undefined (no bias)
//   -> y (N, C_out, OH, OW): y[n, o] = b[o] + sum over the group's input channels c and kernel taps
//      (i, j) of w[o, c, i, j] * x[n, c, oh * s0 - p0 + i * d0, ow * s1 - p1 + j * d1] (zero outside).
Tensor conv2d_forward(const Tensor& x, const Tensor& w, const Tensor& b, const Conv2d& p);
// dy (N, C_out, OH, OW), w -> dx (`x_shape`): the transposed convolution of dy with w.
Tensor conv2d_backward_input(const Tensor& dy, const Tensor& w, const Shape& x_shape, const Conv2d& p);
// dy (N, C_out, OH, OW), x -> dw (`w_shape`): sum over the batch and output positions of dy times the
// input each tap read. Summed in an order fixed by the shapes: bit-identical for any thread count.
Tensor conv2d_backward_weight(const Tensor& dy, const Tensor& x, const Shape& w_shape, const Conv2d& p);
// dy (N, C_out, OH, OW) -> db (C_out): dy summed over the batch and the output plane.
Tensor conv2d_backward_bias(const Tensor& dy);

}  // namespace reel::kernels
#endif  // REEL_KERNELS_CONV_H

// ---- Backend kernels --------------------------------------------------------------------------
// Declared once for both backends, outside the include guard: kernels/backends.h includes this
// file again with REEL_BACKEND_KERNELS defined, inside namespace reel::kernels::cpu
// (kernels/cpu/conv.cpp) and reel::kernels::cuda (kernels/cuda/conv.cu).
// Inputs arrive validated by the entry points (kernels/conv.cpp), CONTIGUOUS, with the shapes
// written next to each argument; p is valid for them, N > 0 and every output non-empty.
#ifdef REEL_BACKEND_KERNELS
void conv2d_forward(const Tensor& x,   // (N, C_in, H, W)
                    const Tensor& w,   // (C_out, C_in / groups, kH, kW)
                    const Tensor& b,   // (C_out), or undefined: no bias
                    const Conv2d& p,
                    const Tensor& y);  // (N, C_out, OH, OW) out
void conv2d_backward_input(const Tensor& dy,   // (N, C_out, OH, OW)
                           const Tensor& w,    // (C_out, C_in / groups, kH, kW)
                           const Conv2d& p,
                           const Tensor& dx);  // (N, C_in, H, W) out
void conv2d_backward_weight(const Tensor& dy,   // (N, C_out, OH, OW)
                            const Tensor& x,    // (N, C_in, H, W)
                            const Conv2d& p,
                            const Tensor& dw);  // (C_out, C_in / groups, kH, kW) out
void conv2d_backward_bias(const Tensor& dy,   // (N, C_out, OH, OW)
                          const Tensor& db);  // (C_out) out
#endif  // REEL_BACKEND_KERNELS
