// Entry point of the dropout mask: validation, output allocation, device dispatch.
#include "kernels/dropout.h"

#include "kernels/entry_point.h"

namespace reel::kernels {

Tensor dropout_mask(const Shape& shape, DType dtype, Device device, double p, uint64_t seed, uint64_t offset) {
  REEL_CHECK(p >= 0 && p <= 1, "dropout_mask: p must be in [0, 1], got ", p, " (shape ", shape, ")");
  REEL_CHECK(is_floating(dtype), "dropout_mask: dtype ", dtype, " is not supported (f32, f64, bf16 or f16 expected)");
  Tensor out = empty(shape, dtype, device);
  if (out.numel() > 0) REEL_DEVICE_DISPATCH(device, dropout_mask, kernel_cost({}, {&out}, out.numel()), out, p, seed, offset);
  return out;
}

}  // namespace reel::kernels
