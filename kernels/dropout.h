// Dropout masks from Philox4x32-10. Element i (row-major) of the mask for stream (seed, offset) is
//   keep ? 1 / (1 - p) : 0,   keep = (double)philox_uniform(seed, offset, i) >= p
// (0 everywhere when p == 1). It is a pure function of (seed, offset, i): forward, backward and a
// replayed checkpoint segment all see the same mask, and so do the CPU and CUDA devices. In bf16
// and f16 the kept value is 1 / (1 - p) rounded once to the dtype (exact for p = 0.5, 0.75, ...),
// so that x * mask is the tape's ordinary 16-bit multiply.
#ifndef REEL_KERNELS_DROPOUT_H
#define REEL_KERNELS_DROPOUT_H
#include <cstdint>

#include "core/tensor.h"

namespace reel::kernels {

// A contiguous (shape) mask of `dtype` (floating) on `device`; p in [0, 1].
Tensor dropout_mask(const Shape& shape, DType dtype, Device device, double p, uint64_t seed, uint64_t offset);
// The same mask, its stream read from device memory (replay-safe: docs/design.md, "Replay-safe
// steps"): stream (i64 (2) on `device`: seed, base; core/random.h: Generator::next_device_stream)
// gives the stream (seed, base + delta), so only the delta, the same every window, is by value.
Tensor dropout_mask(const Shape& shape, DType dtype, Device device, double p, const Tensor& stream, uint64_t delta);

}  // namespace reel::kernels
#endif  // REEL_KERNELS_DROPOUT_H

// ---- Backend kernels --------------------------------------------------------------------------
// Declared once for both backends, outside the include guard: kernels/backends.h includes this
// file again with REEL_BACKEND_KERNELS defined, inside namespace reel::kernels::cpu
// (kernels/cpu/dropout.cpp) and reel::kernels::cuda (kernels/cuda/dropout.cu).
// out: contiguous, floating, on the backend's device; p in [0, 1]. The formula is in
// kernels/dropout.h: CPU and CUDA masks are bit-identical.
// stream: undefined (the stream is (seed, offset)), or i64 (2) on out's device holding (seed, base):
// the stream is then (stream[0], stream[1] + offset) and `seed` is ignored.
#ifdef REEL_BACKEND_KERNELS
void dropout_mask(const Tensor& out, double p, uint64_t seed, uint64_t offset, const Tensor& stream);
#endif  // REEL_BACKEND_KERNELS
