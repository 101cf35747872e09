// kernels/loss_scale_rule.h: the loss scaler's update rule (optim/grad_scaler.h, as torch's
// _amp_update_scale_), written once for the host and the device: kernels/cpu/unscale.cpp and
// kernels/cuda/unscale.cu run it on the device's state (kernels/unscale.h: update_loss_scale_), and
// optim::GradScaler::update(bool) on its host state, so the three agree bit for bit.
#pragma once
#include <cmath>
#include <cstdint>

#include "core/host_device.h"  // REEL_HOST_DEVICE

namespace reel::kernels {

// s[0] the scale, s[1] the clean windows in a row, s[2] the skipped windows (counts held exactly
// in double). found: back off (never to 0 or a subnormal: the unscale divides by it) and restart
// the clean count, and ++*skipped_count when given; else one more clean window, and after
// growth_interval of them the scale grows unless that overflows (as torch).
REEL_HOST_DEVICE inline void update_loss_scale(double* s, bool found, int64_t* skipped_count, double growth_factor,
                                               double backoff_factor, int64_t growth_interval) {
  if (found) {
    s[2] += 1;
    s[1] = 0;
    const double backed = s[0] * backoff_factor;
    s[0] = backed > 1e-30 ? backed : 1e-30;
    if (skipped_count != nullptr) ++*skipped_count;
    return;
  }
  s[1] += 1;
  if (s[1] < static_cast<double>(growth_interval)) return;
  s[1] = 0;
  const double grown = s[0] * growth_factor;
  using std::isfinite;
  if (isfinite(grown)) s[0] = grown;
}

}  // namespace reel::kernels
