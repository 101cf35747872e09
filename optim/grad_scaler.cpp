// Dynamic loss scaling (see grad_scaler.h): the scale's state machine and the unscale call.
#include "optim/grad_scaler.h"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "core/error.h"
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
  return kernels::unscale_grads_(grads, 1.0 / scale_);
}

void GradScaler::update(bool found_inf) {
  if (found_inf) {
    ++skipped_;
    growth_tracker_ = 0;
    // Never down to 0 or a subnormal: the unscale divides by it.
    scale_ = std::max(scale_ * options_.backoff_factor, 1e-30);
    return;
  }
  if (++growth_tracker_ < options_.growth_interval) return;
  growth_tracker_ = 0;
  const double grown = scale_ * options_.growth_factor;
  if (std::isfinite(grown)) scale_ = grown;  // as torch: a scale that would overflow stays
}

void GradScaler::load(double scale, int64_t clean_windows_in_a_row, int64_t skipped_windows) {
  check_scale("GradScaler::load", scale);
  REEL_CHECK(clean_windows_in_a_row >= 0 && skipped_windows >= 0, "GradScaler::load: clean window count ",
             clean_windows_in_a_row, " and skipped window count ", skipped_windows, " must be >= 0");
  scale_ = scale;
  growth_tracker_ = clean_windows_in_a_row;
  skipped_ = skipped_windows;
}

std::string scaler_summary(const GradScaler& scaler) {
  std::ostringstream os;
  os << "loss scale " << scaler.scale() << ", " << scaler.skipped_windows() << " skipped window"
     << (scaler.skipped_windows() == 1 ? "" : "s");
  return os.str();
}

}  // namespace reel::optim
