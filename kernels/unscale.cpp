// The entry points of the loss scaler's kernels (kernels/unscale.h): checks of the gradient list
// and of the device state, then one backend pass over all of it.
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


// The gradient list: defined, floating, contiguous, on one device (returned; the cpu for an empty list).
Device check_grads(const char* op, const std::vector<Tensor>& grads) {
  if (grads.empty()) return Device::cpu();
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
  return device;
}

// A tensor of the scaler's device side: `numel` elements of `dtype` (any floating one when
// floating_any), contiguous, on `device`.
void check_small(const char* op, const char* name, const Tensor& t, DType dtype, int64_t numel, Device device,
                 bool floating_any = false) {
  REEL_CHECK(t.defined() && (floating_any ? is_floating(t.dtype()) : t.dtype() == dtype) && t.numel() == numel &&
                 t.is_contiguous() && t.device() == device,
             op, ": ", name, " ", (t.defined() ? shape_str(t.shape()) : std::string("undefined")), " must be ",
             floating_any ? "a floating tensor" : dtype_name(dtype), " of ", numel, " element(s), contiguous, on ",
             device);
}

}  // namespace

bool unscale_grads_(const std::vector<Tensor>& grads, double inv_scale) {
  const char* op = "unscale_grads_";
  REEL_CHECK(std::isfinite(inv_scale) && inv_scale > 0, op, ": inv_scale ", inv_scale,
             " must be finite and > 0 (1 / the loss scale)");
  if (grads.empty()) return false;
  const Device device = check_grads(op, grads);
  return REEL_DEVICE_DISPATCH(device, unscale_grads_,
                              unscale_cost(grads),
                              grads, inv_scale);
}

void unscale_grads_(const std::vector<Tensor>& grads, const Tensor& state, const Tensor& found_inf) {
  const char* op = "unscale_grads_ (device scale)";
  if (grads.empty()) return;
  const Device device = check_grads(op, grads);
  check_small(op, "state", state, DType::f64, 3, device);
  check_small(op, "found_inf", found_inf, DType::i32, 1, device);
  found_inf.bump_version();
  REEL_DEVICE_DISPATCH(device, unscale_grads_, unscale_cost(grads), grads, state, found_inf);
}

void update_loss_scale_(const Tensor& state, const Tensor& found_inf, const Tensor& skipped_count,
                        double growth_factor, double backoff_factor, int64_t growth_interval) {
  const char* op = "update_loss_scale_";
  REEL_CHECK(state.defined(), op, ": state is undefined");
  const Device device = state.device();
  check_small(op, "state", state, DType::f64, 3, device);
  check_small(op, "found_inf", found_inf, DType::i32, 1, device);
  if (skipped_count.defined()) check_small(op, "skipped_count", skipped_count, DType::i64, 1, device);
  REEL_CHECK(growth_factor > 1 && backoff_factor > 0 && backoff_factor < 1 && growth_interval >= 1, op,
             ": growth_factor ", growth_factor, " (> 1), backoff_factor ", backoff_factor, " (in (0, 1)), growth_interval ",
             growth_interval, " (>= 1)");
  state.bump_version();
  if (skipped_count.defined()) skipped_count.bump_version();
  profile::KernelCost c;
  c.bytes_read = 3 * 8 + 4;
  c.bytes_written = 3 * 8 + (skipped_count.defined() ? 8 : 0);
  c.flops = 2;
  REEL_DEVICE_DISPATCH(device, update_loss_scale_, c, state, found_inf, skipped_count, growth_factor, backoff_factor,
                       growth_interval);
}

void loss_scale_seed_(const Tensor& seed, const Tensor& state, double inv_count, const Tensor& window_scale) {
  const char* op = "loss_scale_seed_";
  REEL_CHECK(seed.defined(), op, ": seed is undefined");
  const Device device = seed.device();
  check_small(op, "seed", seed, DType::f32, 1, device, true);
  check_small(op, "state", state, DType::f64, 3, device);
  if (window_scale.defined()) check_small(op, "window_scale", window_scale, DType::f64, 1, device);
  REEL_CHECK(std::isfinite(inv_count) && inv_count > 0, op, ": inv_count ", inv_count, " must be finite and > 0");
  seed.bump_version();
  if (window_scale.defined()) window_scale.bump_version();
  profile::KernelCost c;
  c.bytes_read = 8;
  c.bytes_written = static_cast<int64_t>(seed.nbytes()) + (window_scale.defined() ? 8 : 0);
  c.flops = 1;
  REEL_DEVICE_DISPATCH(device, loss_scale_seed_, c, seed, state, inv_count, window_scale);
}

}  // namespace reel::kernels
