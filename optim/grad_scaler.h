// Dynamic loss scaling for training in f16 (as torch.amp.GradScaler), applied by the accumulation
// window (optim/accumulator.h, Accumulator::Options::scaler):
//   * the window's loss is scaled once: the scale is folded into each micro-batch's backward seed,
//     backward(loss, scale / total), so the gradients accumulate as scale x the true ones (small
//     f16 gradients that would flush to zero stay representable);
//   * at the window's end its gradients are unscaled once, in ONE fused pass over all of them that
//     also finds any inf or NaN (kernels::unscale_grads_); then the window's gradient hook runs on
//     the unscaled gradients, and the window decides on the gradients as the hook left them
//     (checked again when there is a hook), the found flag summed over the ranks through the
//     WindowSync, so every rank skips or none does;
//   * a window with an inf or NaN is skipped as a whole (no step: parameters, optimizer state and
//     its step count untouched; gradients zeroed) and update(true) multiplies the scale by
//     backoff_factor, once per skipped window, whether the scaler or Options::skip_nonfinite asked
//     for the check; after growth_interval clean windows in a row it is multiplied by
//     growth_factor.
// Clipping and the gradient hook run after the unscale, on the true gradients (the order:
// optim/accumulator.h). A power-of-two scale (the defaults keep it one) makes the scaling exact:
// the unscaled gradients are bit for bit those of the unscaled run, unless a scaled value
// overflows (the window is then skipped) or an unscaled one falls below the dtype's smallest
// normal.
//
//   optim::GradScaler scaler;                                     // 2^16, x2 after 2000 clean, x0.5
//   optim::Accumulator::Options options;
//   options.scaler = &scaler;
//   optim::Accumulator acc(opt, options);
//   WindowResult w = acc.step(batches, count, loss);              // w.skipped_nonfinite, w.loss_scale
//   std::cout << optim::scaler_summary(scaler) << "\n";           // "loss scale 32768, 3 skipped windows"
//
// Device decisions (what optim::Accumulator does without a WindowSync, as PyTorch's
// _amp_update_scale_): the scale and the clean/skipped counts then live in a device tensor (f64
// (3): kernels/unscale.h), the unscale writes a device found_inf flag, update(found_inf) updates
// the state on the device in one launch, and seed() makes each backward's seed from it: nothing is
// read back inside a window. The host getters (scale(), skipped_windows(),
// clean_windows_in_a_row()) read the device state when asked (the host waits then), once per
// change. Host and device follow one rule (kernels/loss_scale_rule.h), so either path gives the
// same scales bit for bit. On the meta device, which skips nothing (its flag is a placeholder 0),
// the host follows the clean-window rule itself and reads nothing.
//
// bf16 has f32's range and needs no scaler; with it the scaler only costs the unscale pass.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace reel::optim {

class GradScaler {
 public:
  struct Options {
    double init_scale = 65536.0;   // 2^16, PyTorch's default
    double growth_factor = 2.0;    // > 1
    double backoff_factor = 0.5;   // in (0, 1)
    int64_t growth_interval = 2000;  // clean windows in a row before the scale grows (>= 1)
  };
  // reel::Error for a non-finite or non-positive scale, growth_factor <= 1, backoff_factor outside
  // (0, 1) or growth_interval < 1.
  explicit GradScaler(Options options);
  GradScaler() : GradScaler(Options{}) {}

  // The scale the next window's loss is multiplied by (read from the device state when a device
  // update() has changed it since the last read).
  double scale() const;
  const Options& options() const { return options_; }

  // In place, one pass: every gradient divided by scale(); true when any is inf or NaN (this
  // process's gradients only: the window combines the flag over ranks). Does not change the scale.
  bool unscale(const std::vector<Tensor>& grads) const;
  // After a window (found_inf agreed by every rank): back off and restart the clean count, or count
  // one clean window and grow once growth_interval of them are in a row.
  void update(bool found_inf);

  // ---- the device side (see above); every tensor on the gradients' device ----
  // A backward's seed for a loss (one element, any floating dtype): inv_count * scale rounded once
  // to the loss's dtype, as backward(loss, inv_count * scale()) seeds it; and the scale written to
  // window_scale (f64 (1), or undefined) for the window's report. One launch.
  Tensor seed(const Tensor& loss, double inv_count, const Tensor& window_scale);
  // unscale() with the flag left on the device: found_inf (i32 (1), zeroed by the caller) is set
  // when any result is non-finite. One launch per dtype.
  void unscale(const std::vector<Tensor>& grads, const Tensor& found_inf);
  // update(found_inf[0] != 0) on the device, one launch; skipped_count (i64 (1), or undefined) is
  // incremented with a skip (the window's own counter: optim/accumulator.h).
  void update(const Tensor& found_inf, const Tensor& skipped_count);
  // The host's part of update(found_inf, skipped_count) alone, for a CUDA graph's replay of it
  // (optim/graphed_window.h): the host values are the device's now, read when asked (on meta, the
  // host follows a clean window, as update does there).
  void device_updated(Device device);

  int64_t skipped_windows() const;        // windows update() saw with an inf/NaN
  int64_t clean_windows_in_a_row() const;

  // For checkpoints: the scale and the clean count (torch's "scale" and "_growth_tracker"), and the
  // skipped windows counted so far (for the report).
  void load(double scale, int64_t clean_windows_in_a_row, int64_t skipped_windows = 0);

 private:
  void read_device() const;             // the host values from the device state, when not known
  const Tensor& device_state(Device device);  // the state on `device`, from the host values when stale

  Options options_;
  mutable double scale_;
  mutable int64_t growth_tracker_ = 0;
  mutable int64_t skipped_ = 0;
  Tensor state_;                    // f64 (3) on the device: scale, clean windows in a row, skipped windows
  bool state_valid_ = false;        // state_ holds the host values (or newer ones)
  mutable bool host_known_ = true;  // the host values are the latest (false after a device update())
};

// One line for the examples' per-step or final report: "loss scale 65536, 0 skipped windows".
std::string scaler_summary(const GradScaler& scaler);

}  // namespace reel::optim
