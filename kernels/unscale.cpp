// The entry point of the loss scaler's kernel (kernels/unscale.h): checks of the gradient list,
// then one backend pass over all of it.
#include "kernels/unscale.h"

#include <cmath>

#include "kernels/entry_point.h"

namespace reel::kernels {

namespace {
profile::KernelCost unscale_cost(const std::vector<Tensor>& grads) {
  profile::KernelCost c;
  c.flops = 2 * numel_of(grads);  // one multiply and one finiteness test per element
  c.bytes_read = c.bytes_written = bytes_of(grads);  // each gradient read and written once
  return c;
}
}  // namespace

bool unscale_grads_(const std::vector<Tensor>& grads, double inv_scale) {
  const char* op = "unscale_grads_";
  REEL_CHECK(std::isfinite(inv_scale) && inv_scale > 0, op, ": inv_scale ", inv_scale,
             " must be finite and > 0 (1 / the loss scale)");
  if (grads.empty()) return false;
  const Device device = grads[0].defined() ? grads[0].device() : Device::cpu();
  for (size_t i = 0; i < grads.size(); ++i) {
    const Tensor& g = grads[i];
    REEL_CHECK(g.defined(), op, ": gradient ", i, " is undefined");
    REEL_CHECK(is_floating(g.dtype()), op, ": gradient ", i, " ", g.shape(), " has dtype ", g.dtype(),
               " (f32, f64, bf16 or f16 expected)");
    REEL_CHECK(g.is_contiguous(), op, ": gradient ", i, " ", g.shape(), " is not contiguous (unscaled in place)");
    REEL_CHECK(g.device() == device, op, ": gradient ", i, " ", g.shape(), " is on ", g.device(),
               " but gradient 0 on ", device, ": one device per list expected");
  }
  for (const Tensor& g : grads) g.bump_version();
  return REEL_DEVICE_DISPATCH(device, unscale_grads_,
                              unscale_cost(grads),
                              grads, inv_scale);
}

}  // namespace reel::kernels
