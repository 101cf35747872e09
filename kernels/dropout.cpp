// Entry point of the dropout mask: validation, output allocation, device dispatch.
#include "kernels/dropout.h"

#include "kernels/entry_point.h"

namespace reel::kernels {

Tensor dropout_mask(const Shape& shape, DType dtype, Device device, double p, uint64_t seed, uint64_t offset) {
  REEL_CHECK(p >= 0 && p <= 1, "dropout_mask: p must be in [0, 1], got ", p, " (shape ", shape, ")");
  REEL_CHECK(is_floating(dtype), "dropout_mask: dtype ", dtype, " is not supported (f32, f64, bf16 or f16 expected)");
  Tensor out = empty(shape, dtype, device);
  if (out.numel() > 0)
    REEL_DEVICE_DISPATCH(device, dropout_mask, kernel_cost({}, {&out}, out.numel()), out, p, seed, offset, Tensor());
  return out;
}

Tensor dropout_mask(const Shape& shape, DType dtype, Device device, double p, const Tensor& stream, uint64_t delta) {
  REEL_CHECK(p >= 0 && p <= 1, "dropout_mask: p must be in [0, 1], got ", p, " (shape ", shape, ")");
  REEL_CHECK(is_floating(dtype), "dropout_mask: dtype ", dtype, " is not supported (f32, f64, bf16 or f16 expected)");
  REEL_CHECK(stream.defined() && stream.dtype() == DType::i64 && stream.numel() == 2 && stream.is_contiguous() &&
                 stream.device() == device,
             "dropout_mask: the stream must be a contiguous i64 tensor of 2 elements (seed, base) on ", device, ", got ",
             stream.defined() ? stream.shape() : Shape{}, " ", stream.defined() ? stream.dtype() : DType::i64, " on ",
             stream.defined() ? stream.device() : device, " (shape ", shape, ")");
  Tensor out = empty(shape, dtype, device);
  if (out.numel() > 0)
    REEL_DEVICE_DISPATCH(device, dropout_mask, kernel_cost({&stream}, {&out}, out.numel()), out, p, 0, delta, stream);
  return out;
}

}  // namespace reel::kernels
