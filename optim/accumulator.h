// The accumulation window: one optimizer step over the micro-batches of a window.
//
// The loss of the window must be normalised by the TOTAL number of samples (or non-ignored target
// tokens) in the whole window, not averaged per micro-batch: with variable-length batches the
// per-micro-batch mean weights a token of a short batch more than one of a long batch (the bug
// Hugging Face's Trainer had until 2024). So the window counts first, then runs each
// micro-batch's forward with a SUM-reduced loss and backward with scale 1/total; the gradients add
// up in the parameters' .grad buffers. A last, shorter window works the same way. The window's
// end (finish) then runs, in this order:
//   1. unscale (Options::scaler only): the gradients the optimizer will read are divided by the
//      scale, in place;
//   2. the gradient hook (set_grad_hook), on those unscaled gradients;
//   3. the non-finite decision (Options::scaler or Options::skip_nonfinite): an inf or NaN in the
//      gradients the optimizer will read, AS THE HOOK LEFT THEM, on any rank, skips the window;
//   4. clipping (Options::clip_norm), on the global norm;
//   5. the learning rate from the schedule;
//   6. the optimizer's step (and the sync's after_step);
//   7. zeroing the gradients.
// A window of count 0 runs none of it (no backward, no step, the scaler untouched). Every window
// starts with default_generator().begin_window(): dropout's streams in it are read by the kernels
// from device memory as a base plus a delta that is the same every window (core/random.h;
// docs/design.md, "Replay-safe steps").
//
// What the hook sees: the optimizer's parameters, and in each one's .grad the sum over the
// window's micro-batches, normalised by the window's total count (so, the gradient of the window's
// mean loss, as one big batch would give), across processes already synchronised, and with a
// scaler already unscaled (the true gradients, as without a scaler). A parameter no micro-batch
// reached may have no .grad (undefined). The hook runs on every window of count > 0, also one that
// step 3 will skip: it may see an inf or NaN there. It may inspect or log the gradients, or change
// them in place or with set_grad (scale them, zero one, write an inf): steps 3 to 6 see what it
// leaves. So an inf the hook writes skips the window, and an inf the hook overwrites with finite
// values does not (the step reads finite gradients, and the scaler counts the window clean).
//   acc.set_grad_hook([](const std::vector<Tensor>& params, const WindowResult& w) { log(params, w.count); });
//
// A skipped window: no clipping, no step (parameters, optimizer state and the optimizer's step
// count bit for bit untouched), the gradients zeroed, WindowResult::skipped_nonfinite set and
// stepped false, counted once in skipped_steps(), and with a scaler backed off once (counted once
// in GradScaler::skipped_windows()); every counter agrees, whether the scaler, skip_nonfinite or
// both asked for the check. A window that steps counts once towards the scaler's growth.
//
// Across processes (Options::sync, set by distributed::DataParallel or
// distributed::FullyShardedDataParallel), the window spans every rank: the count is summed over the
// ranks before any backward, so every rank's loss is normalised by the global count (exact with
// uneven shards), the gradients are synchronised (DataParallel: once per window, during the
// window's last backward; FSDP: per micro-batch or per window, its option), the non-finite flag is
// summed over the ranks (WindowSync::global_sum: one rank's inf, found in its shard or written by
// its hook alone, skips the window on every rank), and clipping uses the global norm. The hook runs
// on every rank with the same gradients; it must change them the same way on every rank, or the
// replicas drift apart. Under ZeRO-1 (distributed::ZeroAdamW) the summed gradients live in
// DataParallel's shards (WindowSync::step_grads()), not in .grad: there the hook's .grad are only
// this rank's own, unsynchronised part of the window (with a scaler, still scaled); the optimizer,
// the unscale and the non-finite decision read the shards, which a hook may reach through
// DataParallel::step_grads() (unscaled there, and each rank's own chunk). Under distributed::FullyShardedDataParallel the optimizer's parameters
// ARE the shards: the hook sees each rank's shard of the summed gradients, and the sync's
// after_step() runs after the optimizer's step.
//
// Loss scaling (Options::scaler, an optim::GradScaler: f16 training): the window's loss is scaled
// once, by folding the scale into each backward's seed (backward(loss, scale / total)); step 1
// unscales in one fused pass that also finds inf/NaN (kernels::unscale_grads_; without a hook that
// pass's answer is step 3's, with one the gradients are checked again after it). WindowResult::loss
// is unscaled. The scaler's scale() is read when the window starts and updated once when it ends
// (with device decisions: read and updated on the device).
//
// Device decisions (device_decisions(): no WindowSync, an optimizer with device_control() (SGD,
// Adam/AdamW, RuleOptimizer), Options::host_decisions false): the same steps in the same order with
// no read back to the host inside the window, as PyTorch's _amp_update_scale_ and fused optimizers
// reading found_inf. The loss is summed on the device (kernels::accumulate_loss_) and copied back
// asynchronously; the scaler's scale lives on the device (GradScaler's device side: each backward's
// seed is made from it, the unscale writes a device found_inf flag, the update runs there); one
// norm on the device gives the clip coefficient and, where needed (no scaler, or a hook), the
// flag (kernels::global_grad_norm_); the optimizer's update kernels read the coefficient (clipping
// folded into the update: no scale_ pass) and the flag (a skipped window writes no parameter, no
// state, and leaves the step count, which then lives on the device, as it was: Optimizer::step(coef,
// found_inf)); the skip counts are advanced by the kernel that decides. WindowResult's loss,
// grad_norm, stepped, skipped_nonfinite and loss_scale are then optim::Lazy values, read (the host
// waits) only when asked: the examples read them on their log lines. The results are the host
// path's bit for bit. The host path stays under a WindowSync (distributed/ sums the flag, the
// loss and the norm over the ranks on the host), with an optimizer without device control
// (distributed::ZeroAdamW), and with Options::host_decisions. The hook runs on either path (what it
// reads of the gradients, it reads itself). With a schedule, a window's lr comes from
// optimizer.steps(): after a window that may have been skipped that reads the device's count once,
// at the next window's start. The optimizer's lr() is set for a skipped window too. On the device,
// a schedule with a device form (LrSchedule::device_rule(): ConstantLr, WarmupCosineLr) is
// evaluated by the update kernels from the device's step count, the same rate bit for bit with no
// copy from the host; another schedule's rate is copied when it changes (Optimizer::device_lr).
//
// A whole window as one CUDA graph, replayed each step: optim::GraphedWindow (optim/graphed_window.h),
// over start() and run() below (the step's two parts: the host's prologue, and what the graph holds).
//
// Exact only for layers without batch statistics (no BatchNorm): those see each micro-batch alone.
#pragma once
#include <cstdint>
#include <functional>
#include <utility>
#include <vector>

#include "autograd/tape.h"
#include "core/random.h"
#include "core/profile.h"
#include "optim/grad_scaler.h"
#include "optim/lazy_scalar.h"
#include "optim/lr_schedule.h"
#include "optim/optimizer.h"

namespace reel::optim {

class GraphedWindow;

// What a window did. The loss, the norm and whether it stepped stay on the device until read
// (optim/lazy_scalar.h: read with .get(), or as the double/bool they convert to) when the window
// decided on the device (see "Device decisions" above); host values otherwise.
struct WindowResult {
  Lazy<double> loss = 0;      // sum of the micro-batch losses / total: the window's mean loss
  int64_t count = 0;          // samples or non-ignored tokens in the window
  Lazy<double> grad_norm = 0; // global gradient norm before clipping (0 when not clipping, or skipped)
  double lr = 0;              // the learning rate this step used
  // false when the window held nothing to learn from (count 0), or was skipped
  Lazy<bool> stepped = false;
  // Options::skip_nonfinite or Options::scaler: a gradient the optimizer would read was NaN or Inf
  // after the hook, on some rank; no step taken.
  Lazy<bool> skipped_nonfinite = false;
  Lazy<double> loss_scale = 1;  // what the window's loss was multiplied by (Options::scaler's scale, else 1)
};

// What a data-parallel wrapper does around a window (distributed::DataParallel implements it; optim knows
// only this interface). Every rank calls each function once per window, in this order.
class WindowSync {
 public:
  virtual ~WindowSync() = default;
  virtual int64_t global_count(int64_t local) = 0;  // the window's count summed over every rank
  // Around the window's last backward. A rank without micro-batches in the window calls both with
  // no backward between (its gradients are zero), so every rank joins the synchronisation.
  virtual void before_last_backward() = 0;
  virtual void after_last_backward() = 0;  // the gradients are those of the whole window now
  virtual double global_sum(double local) = 0;  // the window's loss over every rank
  // The global L2 norm of the synchronised gradients, and their scaling (clipping).
  virtual double grad_norm() = 0;
  virtual void scale_grads(double factor) = 0;
  // After the optimizer's step (only when it stepped; every rank steps or none does): a wrapper
  // whose optimizer steps shards brings the updated values into the whole parameters here
  // (distributed::FullyShardedDataParallel's all-gather under ZeRO-2). Nothing by default.
  virtual void after_step() {}
  // The gradient buffers this rank's optimizer will step from, for the loss scaler's unscale
  // (Options::scaler). Empty (the default): the .grad of each of the optimizer's parameters.
  // distributed::DataParallel under ZeRO-1 returns its gradient shards.
  virtual std::vector<Tensor> step_grads() { return {}; }
};

class Accumulator {
 public:
  struct Options {
    double clip_norm = 0;                  // > 0: clip the global gradient norm once per window
    const LrSchedule* schedule = nullptr;  // null: keep the optimizer's learning rate
    // true: a window whose gradients are not all finite after the hook (an overflow, a bad batch)
    // zeroes them and takes no step, instead of writing NaN into every parameter; counted in
    // skipped_steps(). A scaler implies this check.
    bool skip_nonfinite = false;
    WindowSync* sync = nullptr;  // distributed::DataParallel or FSDP: the window spans every rank (see above)
    // Dynamic loss scaling (see above); not owned, must outlive the Accumulator. null: none.
    GradScaler* scaler = nullptr;
    // true: decide every window on the host even where the device could (see "Device decisions"
    // above): the loss, the norm and the skip read back inside the window, as before device
    // decisions existed (the same results bit for bit; the tests compare the two).
    bool host_decisions = false;
  };
  Accumulator(Optimizer& optimizer, Options options) : optimizer_(optimizer), options_(options) {}
  explicit Accumulator(Optimizer& optimizer) : Accumulator(optimizer, Options{}) {}

  // count(batch) -> int64_t: samples / non-ignored tokens in the batch (reel::Error, naming the
  // micro-batch, for a negative one); loss(batch) -> Tensor: its SUM-reduced loss. Any callables
  // (lambdas, std::function) taking a const Batch&.
  template <typename Batch, typename CountFn, typename LossFn>
  WindowResult step(const std::vector<Batch>& micro_batches, CountFn&& count, LossFn&& loss) {
    WindowResult r = start(micro_batches, count);
    run(r, micro_batches, loss);
    return r;
  }

  // step() in two parts, for optim::GraphedWindow (optim/graphed_window.h), whose CUDA graph holds
  // run() and whose replay prologue is start(): the host's part of a window's start (the counts, the
  // window's dropout base, the learning rate: after a window that may have been skipped, a read of
  // the device's step count) ...
  template <typename Batch, typename CountFn>
  WindowResult start(const std::vector<Batch>& micro_batches, CountFn&& count) {
    WindowResult r;
    for (size_t i = 0; i < micro_batches.size(); ++i) {  // the whole window, before any backward
      const int64_t n = static_cast<int64_t>(count(micro_batches[i]));
      // A negative count makes 1/total (or a share of it) negative: the step would climb the loss.
      REEL_CHECK(n >= 0, "Accumulator: micro-batch ", i, " has a count of ", n,
                 "; the count callback must return the samples or non-ignored tokens in it (>= 0)");
      r.count += n;
    }
    if (options_.sync) r.count = options_.sync->global_count(r.count);
    default_generator().begin_window();  // dropout's device streams count from here (core/random.h)
    r.lr = options_.schedule ? options_.schedule->lr(optimizer_.steps()) : optimizer_.lr();
    return r;
  }
  // ... and the rest: forwards, backwards and the window's end, with r from start().
  template <typename Batch, typename LossFn>
  void run(WindowResult& r, const std::vector<Batch>& micro_batches, LossFn&& loss) {
    if (r.count == 0) return;
    const double scale = 1.0 / static_cast<double>(r.count);
    const bool on_device = device_decisions();
    if (options_.scaler && !on_device) r.loss_scale = options_.scaler->scale();
    const double seed = scale * r.loss_scale.get();  // the loss scaled once: in the seed, not in the loss
    double loss_sum = 0;  // host decisions
    for (size_t i = 0; i < micro_batches.size(); ++i) {
      const Tensor l = [&] {
        const profile::PhaseScope profiled(profile::Phase::Forward);
        return loss(micro_batches[i]);
      }();
      if (on_device) add_loss(l, scale, i == 0);
      else loss_sum += l.item() * scale;
      if (options_.sync && i + 1 == micro_batches.size()) options_.sync->before_last_backward();
      if (on_device && options_.scaler) autograd::backward(l, scaled_seed(l, scale, i == 0));
      else autograd::backward(l, seed);
    }
    if (options_.sync) {
      if (micro_batches.empty()) options_.sync->before_last_backward();
      options_.sync->after_last_backward();
      loss_sum = options_.sync->global_sum(loss_sum);
    }
    if (on_device) {
      end_losses(r);
      finish_on_device(r);
    } else {
      r.loss = loss_sum;
      finish(r);
    }
  }

  // Called once per window of count > 0, after the unscale and before the non-finite decision
  // (see above), with the optimizer's parameters (their .grad the window's gradients) and the
  // window so far (loss, count, lr and loss_scale set; grad_norm, stepped and skipped_nonfinite
  // not yet). One hook: a new one replaces the last; an empty one removes it.
  using GradHook = std::function<void(const std::vector<Tensor>& params, const WindowResult& window)>;
  void set_grad_hook(GradHook hook) { grad_hook_ = std::move(hook); }

  int64_t steps() const { return optimizer_.steps(); }
  // Windows skipped for an inf or NaN gradient (Options::skip_nonfinite or Options::scaler); with a
  // scaler used by this Accumulator alone, from its start, the same as its skipped_windows(). After
  // device decisions, a read of the device's count (the host waits), once.
  int64_t skipped_steps() const;
  // A resumed run's count so far (optim/training_state.h).
  void set_skipped_steps(int64_t skipped);
  // Whether the windows decide on the device (see above): without a WindowSync, with an optimizer
  // that supports it (Optimizer::device_control()).
  bool device_decisions() const {
    return !options_.sync && !options_.host_decisions && optimizer_.device_control();
  }

 private:
  void finish(WindowResult& r);  // unscale, hook, non-finite decision, clip, set lr, step, zero_grad
  // The same, decided on the device (no host read).
  void finish_on_device(WindowResult& r);
  // Device decisions: micro-batch loss l (times scale) into the window's device sum (a new sum
  // when first); the seed of its backward from the scaler's device scale; the sum copied back.
  void add_loss(const Tensor& l, double scale, bool first);
  Tensor scaled_seed(const Tensor& l, double scale, bool first);
  void end_losses(WindowResult& r);
  // The window's skip counter on `device` (i64 (1)), from the host count when stale.
  const Tensor& skipped_counter(Device device);
  // The gradient buffers the optimizer will step from: the sync's step_grads() (ZeRO-1's shards),
  // else each of the optimizer's parameters' defined .grad.
  std::vector<Tensor> step_grads() const;
  void skip(WindowResult& r);    // zero the gradients, no step, counted

  friend class GraphedWindow;  // captures run() (outputs_) and replays it (replayed())
  // The device tensors a window's results read (window_losses_, found, the norm's out), kept while
  // a GraphedWindow captures (capturing_): its replays' static outputs. While capturing, the loss
  // is not copied back (the copy stream is outside the graph): read from window_losses_ instead.
  struct Outputs {
    Tensor losses, found, norm;
  };
  // The schedule's device form for Optimizer::step(coef, found_inf, schedule): kNone without a
  // schedule or for one without a device form (its rate then goes through Optimizer::device_lr).
  kernels::LrRule device_schedule() const;
  // The host's part of a window that a graph replayed: the counts that a captured run() advanced on
  // the host (the optimizer's step count, the scaler's state, the skip count) are the device's now.
  void replayed(Device device);

  Optimizer& optimizer_;
  Options options_;
  GradHook grad_hook_;
  bool capturing_ = false;
  Outputs outputs_;
  mutable int64_t skipped_ = 0;
  Tensor window_losses_;              // device decisions: this window's f64 (2): the loss sum, the loss scale
  Tensor skipped_device_;             // i64 (1): the skip count, advanced by the deciding kernel
  bool skipped_device_valid_ = false; // skipped_device_ holds skipped_ (or newer)
  mutable bool skipped_pending_ = false;  // skipped_device_ may be ahead of skipped_
};

}  // namespace reel::optim
