// Dynamic loss scaling (see grad_scaler.h): the scale's state machine on the host and on the
// device, and the unscale calls.
#include "optim/grad_scaler.h"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "core/error.h"
#include "kernels/loss_scale_rule.h"
#include "kernels/unscale.h"

namespace reel::optim {

namespace {
void check_scale(const char* who, double scale) {
  REEL_CHECK(std::isfinite(scale) && scale > 0, who, ": loss scale ", scale, " must be finite and > 0");
}
}  // namespace

GradScaler::GradScaler(Options options) : options_(options), scale_(options.init_scale) {
  check_scale("GradScaler", options.init_scale);
  REEL_CHECK(options.growth_factor > 1 && std::isfinite(options.growth_factor), "GradScaler: growth_factor ",
             options.growth_factor, " must be finite and > 1");
  REEL_CHECK(options.backoff_factor > 0 && options.backoff_factor < 1, "GradScaler: backoff_factor ",
             options.backoff_factor, " must be in (0, 1)");
  REEL_CHECK(options.growth_interval >= 1, "GradScaler: growth_interval ", options.growth_interval,
             " must be >= 1 (clean windows before the scale grows)");
}

bool GradScaler::unscale(const std::vector<Tensor>& grads) const {
  return kernels::unscale_grads_(grads, 1.0 / scale());
}

void GradScaler::update(bool found_inf) {
  read_device();
  // The rule of kernels/loss_scale_rule.h, the device's, on the host values.
  double s[3] = {scale_, static_cast<double>(growth_tracker_), static_cast<double>(skipped_)};
  kernels::update_loss_scale(s, found_inf, nullptr, options_.growth_factor, options_.backoff_factor,
                             options_.growth_interval);
  scale_ = s[0];
  growth_tracker_ = static_cast<int64_t>(s[1]);
  skipped_ = static_cast<int64_t>(s[2]);
  state_valid_ = false;  // the device state, if any, is behind now
}

double GradScaler::scale() const {
  read_device();
  return scale_;
}
int64_t GradScaler::skipped_windows() const {
  read_device();
  return skipped_;
}
int64_t GradScaler::clean_windows_in_a_row() const {
  read_device();
  return growth_tracker_;
}

void GradScaler::read_device() const {
  if (host_known_) return;
  const Tensor host = state_.to(Device::cpu());  // (3): the host waits for the device here
  const double* s = host.data<double>();
  scale_ = s[0];
  growth_tracker_ = static_cast<int64_t>(s[1]);
  skipped_ = static_cast<int64_t>(s[2]);
  host_known_ = true;
}

const Tensor& GradScaler::device_state(Device device) {
  if (!state_valid_ || state_.device() != device) {
    read_device();
    state_ = from_vector<double>({scale_, static_cast<double>(growth_tracker_), static_cast<double>(skipped_)}, {3})
                 .to(device);  // a copy from the host: no wait
    state_valid_ = true;
  }
  return state_;
}

Tensor GradScaler::seed(const Tensor& loss, double inv_count, const Tensor& window_scale) {
  REEL_CHECK(loss.defined() && loss.numel() == 1, "GradScaler::seed: the loss must be one element, got ",
             loss.defined() ? shape_str(loss.shape()) : std::string("undefined"));
  const Tensor out = empty(loss.shape(), loss.dtype(), loss.device());
  kernels::loss_scale_seed_(out, device_state(loss.device()), inv_count, window_scale);
  return out;
}

void GradScaler::unscale(const std::vector<Tensor>& grads, const Tensor& found_inf) {
  if (grads.empty()) return;
  kernels::unscale_grads_(grads, device_state(grads.front().device()), found_inf);
}

void GradScaler::update(const Tensor& found_inf, const Tensor& skipped_count) {
  REEL_CHECK(found_inf.defined(), "GradScaler::update: found_inf is undefined");
  const Device device = found_inf.device();
  kernels::update_loss_scale_(device_state(device), found_inf, skipped_count, options_.growth_factor,
                              options_.backoff_factor, options_.growth_interval);
  device_updated(device);
}

void GradScaler::device_updated(Device device) {
  if (device.is_meta()) {  // nothing computed there, nothing skipped: the host follows a clean window
    double s[3] = {scale_, static_cast<double>(growth_tracker_), static_cast<double>(skipped_)};
    kernels::update_loss_scale(s, false, nullptr, options_.growth_factor, options_.backoff_factor,
                               options_.growth_interval);
    scale_ = s[0];
    growth_tracker_ = static_cast<int64_t>(s[1]);
    skipped_ = static_cast<int64_t>(s[2]);
    return;
  }
  host_known_ = false;
}

void GradScaler::load(double scale, int64_t clean_windows_in_a_row, int64_t skipped_windows) {
  check_scale("GradScaler::load", scale);
  REEL_CHECK(clean_windows_in_a_row >= 0 && skipped_windows >= 0, "GradScaler::load: clean window count ",
             clean_windows_in_a_row, " and skipped window count ", skipped_windows, " must be >= 0");
  scale_ = scale;
  growth_tracker_ = clean_windows_in_a_row;
  skipped_ = skipped_windows;
  host_known_ = true;
  state_valid_ = false;
}

std::string scaler_summary(const GradScaler& scaler) {
  std::ostringstream os;
  os << "loss scale " << scaler.scale() << ", " << scaler.skipped_windows() << " skipped window"
     << (scaler.skipped_windows() == 1 ? "" : "s");
  return os.str();
}

}  // namespace reel::optim
