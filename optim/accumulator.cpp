// The end of an accumulation window (see accumulator.h): unscale, the gradient hook, the
// non-finite decision, clipping, the learning rate, the step and zeroing, in that order; decided on
// the host (finish) or on the device (finish_on_device).
#include "optim/accumulator.h"

#include <algorithm>
#include <cmath>

#include "kernels/optimizer.h"

namespace reel::optim {

std::vector<Tensor> Accumulator::step_grads() const {
  std::vector<Tensor> grads = options_.sync ? options_.sync->step_grads() : std::vector<Tensor>{};
  if (grads.empty())
    for (const Tensor& p : optimizer_.params())
      if (p.grad().defined()) grads.push_back(p.grad());
  return grads;
}

void Accumulator::skip(WindowResult& r) {
  optimizer_.zero_grad();
  r.skipped_nonfinite = true;
  skipped_ = skipped_steps() + 1;
  skipped_device_valid_ = false;
}

int64_t Accumulator::skipped_steps() const {
  if (skipped_pending_) {
    // The meta device skips nothing (its flags are placeholders): no read there.
    if (!skipped_device_.device().is_meta()) skipped_ = static_cast<int64_t>(skipped_device_.item());
    skipped_pending_ = false;
  }
  return skipped_;
}

void Accumulator::set_skipped_steps(int64_t skipped) {
  skipped_ = skipped;
  skipped_pending_ = false;
  skipped_device_valid_ = false;
}

const Tensor& Accumulator::skipped_counter(Device device) {
  if (!skipped_device_valid_ || skipped_device_.device() != device) {
    skipped_ = skipped_steps();
    skipped_device_ = from_vector<int64_t>({skipped_}, {1}).to(device);  // a copy from the host: no wait
    skipped_device_valid_ = true;
  }
  skipped_pending_ = true;
  return skipped_device_;
}

void Accumulator::add_loss(const Tensor& l, double scale, bool first) {
  if (first) window_losses_ = empty({2}, DType::f64, l.device());  // a new one: the last window's results keep theirs
  REEL_CHECK(l.device() == window_losses_.device(), "Accumulator: micro-batch losses on ", window_losses_.device(),
             " and ", l.device(), ": one device per window expected");
  kernels::accumulate_loss_(untracked::slice(window_losses_, 0, 0, 1), l, scale, first);
}

Tensor Accumulator::scaled_seed(const Tensor& l, double scale, bool first) {
  return options_.scaler->seed(l, scale, first ? untracked::slice(window_losses_, 0, 1, 2) : Tensor());
}

void Accumulator::end_losses(WindowResult& r) {
  if (!window_losses_.defined()) return;  // no micro-batch: nothing summed
  // Copied back on the copy stream while the optimizer runs: the loss is read on log lines only. A
  // graph being captured reads it from the device (the copy stream's work is outside the capture).
  if (capturing_) {
    outputs_.losses = window_losses_;
    r.loss = Lazy<double>::on_device(window_losses_, 0);
  } else {
    r.loss = Lazy<double>::copied_back(untracked::slice(window_losses_, 0, 0, 1));
  }
  if (options_.scaler) r.loss_scale = Lazy<double>::on_device(window_losses_, 1);
}

// Device decisions: the order of finish() below, every decision a device value that the next
// kernel reads (found_inf: the unscale and the norm write it; the scaler's update, the optimizer's
// kernels and the skip counters read it), so the host enqueues the whole window and waits for none
// of it. The hook is the one host step: what it reads of the gradients it reads itself.
void Accumulator::finish_on_device(WindowResult& r) {
  const profile::PhaseScope profiled(profile::Phase::Optimizer);  // the hook, clipping and zeroing too
  GradScaler* scaler = options_.scaler;
  const bool check = scaler || options_.skip_nonfinite;
  std::vector<Tensor> grads = step_grads();
  const std::vector<Tensor>& params = optimizer_.params();
  const Device device = !grads.empty() ? grads.front().device()
                        : window_losses_.defined() ? window_losses_.device()
                        : !params.empty() ? params.front().device() : Device::cpu();
  // 1. Unscale, writing the flag.
  Tensor found;
  if (check) found = zeros({1}, DType::i32, device);  // (1): 1 once a gradient is inf or NaN
  if (capturing_) outputs_.found = found;
  if (scaler) scaler->unscale(grads, found);
  // 2. The hook, on the unscaled gradients.
  if (grad_hook_) {
    grad_hook_(params, r);
    grads = step_grads();
  }
  // 3 and 4. The non-finite check (again, as the hook left them, when there is a hook; the only one
  // without a scaler) and the clip coefficient: one norm. A window skipped reports no norm.
  const bool recheck = check && (grad_hook_ || !scaler);
  const bool clip = options_.clip_norm > 0;
  Tensor coef;
  if ((clip || recheck) && !grads.empty()) {
    const Tensor out = empty({2}, DType::f64, device);  // (2): the norm, the clip coefficient
    kernels::global_grad_norm_(grads, out, clip ? options_.clip_norm : 0.0, found, recheck,
                               check && !scaler ? skipped_counter(device) : Tensor());
    if (capturing_) outputs_.norm = out;
    if (clip) {
      coef = untracked::slice(out, 0, 1, 2);
      r.grad_norm = Lazy<double>::on_device(out, 0);
    }
  }
  // The scaler's update once per window, the skip counted with it.
  if (scaler) scaler->update(found, skipped_counter(device));
  if (check) {
    r.skipped_nonfinite = Lazy<bool>::on_device(found, 0);
    r.stepped = Lazy<bool>::on_device(found, 0, true);
  } else {
    r.stepped = true;
  }
  // 5. The learning rate (a schedule with a device form: evaluated by the update kernels from the
  // device's count, the host's r.lr bit for bit; else copied when it changed), 6. the step (nothing
  // written when found), 7. zeroing.
  optimizer_.set_lr(r.lr);
  optimizer_.step(coef, found, device_schedule());
  optimizer_.zero_grad();
}

kernels::LrRule Accumulator::device_schedule() const {
  return options_.schedule ? options_.schedule->device_rule() : kernels::LrRule{};
}

void Accumulator::replayed(Device device) {
  const bool check = options_.scaler || options_.skip_nonfinite;
  if (options_.scaler) options_.scaler->device_updated(device);
  if (check) skipped_pending_ = true;  // the replay's deciding kernel advanced skipped_device_
  optimizer_.device_stepped(check);
}

void Accumulator::finish(WindowResult& r) {
  const profile::PhaseScope profiled(profile::Phase::Optimizer);  // the hook, clipping and zeroing too
  WindowSync* sync = options_.sync;
  // 1. Unscale what the optimizer will read; the pass also finds inf/NaN, the answer while no hook
  // changes the gradients after it.
  bool found = options_.scaler && options_.scaler->unscale(step_grads());
  // 2. The hook, on the unscaled gradients.
  if (grad_hook_) grad_hook_(optimizer_.params(), r);
  // 3. The non-finite decision, on the gradients as the hook left them (it may have written an inf,
  // replaced a .grad or cleaned one). Across ranks one rank's inf skips the window everywhere: the
  // flag is summed over the ranks, since a replicated gradient's norm is taken on each rank alone
  // and the hook may change one rank's gradients only.
  if (options_.scaler || options_.skip_nonfinite) {
    if (grad_hook_ || !options_.scaler) {
      const std::vector<Tensor> grads = step_grads();
      found = !grads.empty() && !std::isfinite(kernels::global_grad_norm(grads));
    }
    if (sync) found = sync->global_sum(found ? 1.0 : 0.0) > 0;
    if (options_.scaler) options_.scaler->update(found);  // once per window: back off, or one clean window
    if (found) return skip(r);
  }
  // 4. Clipping, clip_grad_norm's rule on the global norm.
  if (options_.clip_norm > 0 && sync) {
    r.grad_norm = sync->grad_norm();
    const double factor = options_.clip_norm / (r.grad_norm + 1e-6);
    const std::vector<Tensor>& params = optimizer_.params();
    if (!params.empty() && clip_scales(factor, params.front().device())) sync->scale_grads(std::min(factor, 1.0));
  } else if (options_.clip_norm > 0) {
    r.grad_norm = clip_grad_norm(optimizer_.params(), options_.clip_norm);
  }
  // 5. The learning rate, 6. the step, 7. zeroing.
  optimizer_.set_lr(r.lr);
  optimizer_.step();
  if (sync) sync->after_step();
  optimizer_.zero_grad();
  r.stepped = true;
}

}  // namespace reel::optim
