// The accumulation window: one optimizer step over the micro-batches of a window.
//
// The loss of the window must be normalised by the TOTAL number of samples (or non-ignored target
// tokens) in the whole window, not averaged per micro-batch: with variable-length batches the
// per-micro-batch mean weights a token of a short batch more than one of a long batch (the bug
// Hugging Face's Trainer had until 2024). So the window counts first, then runs each
// micro-batch's forward with a SUM-reduced loss and backward with scale 1/total; the gradients add
// up in the parameters' .grad buffers. Then it calls the gradient hook (set_grad_hook), checks
// for non-finite gradients, clips once, sets the learning rate from the schedule once, steps once
// and zeroes the gradients. A last, shorter window works the same way.
//
// The gradient hook sees the window's gradients where the optimizer will read them, in each
// parameter's .grad: the sum over the window's micro-batches, already normalised by the window's
// total count (so, the gradient of the window's mean loss, as one big batch would give), and
// across processes already synchronised. It may inspect or log them, or change them in place or
// with set_grad (scale them, zero one): the non-finite check, clipping and the step see what it
// leaves. A parameter no micro-batch reached may have no .grad (undefined). Not called for a window
// of count 0 (no step), nor for one the loss scaler skips; with a scaler it sees unscaled gradients.
//   acc.set_grad_hook([](const std::vector<Tensor>& params, const WindowResult& w) { log(params, w.count); });
//
// Across processes (Options::sync, set by distributed::DataParallel or distributed::FullyShardedDataParallel), the
// window spans every rank: the count is summed over the ranks before any backward, so every rank's
// loss is normalised by the global count (exact with uneven shards), the gradients are synchronised
// (DataParallel: once per window, during the window's last backward; FSDP: per micro-batch or per
// window, its option), and clipping and the non-finite check use the global norm.
// Across processes the hook runs on every rank with the same gradients; it must change them the same
// way on every rank, or the replicas drift apart. Under ZeRO-1 (distributed::ZeroAdamW) the summed
// gradients live in DataParallel's shards, not in .grad: there the hook sees only this rank's own,
// unsynchronised part of the window, and what it changes is not what the optimizer steps. Under
// distributed::FullyShardedDataParallel the optimizer's parameters ARE the shards: the hook sees each rank's
// shard of the summed gradients, and the sync's after_step() runs after the optimizer's step.
//
// Loss scaling (Options::scaler, an optim::GradScaler: f16 training): the window's loss is scaled
// once, by folding the scale into each backward's seed (backward(loss, scale / total)); at the
// window's end, before the hook, the gradients the optimizer will read are unscaled in one fused
// pass that also finds inf/NaN (kernels::unscale_grads_), and across processes the found flag is
// summed through the sync (global_sum), so every rank skips or none does. A window with an inf or
// NaN is skipped as a whole: no hook, no step (parameters, optimizer state and step count
// untouched), gradients zeroed, WindowResult::skipped_nonfinite set, counted in skipped_steps(),
// and the scaler backs off; a clean window counts towards its growth. The hook, the non-finite
// check and clipping then see the true (unscaled) gradients, and WindowResult::loss is unscaled.
// The scaler's scale() is read when the window starts and updated when it ends (not for a window
// of count 0, which takes no backward).
//
// Exact only for layers without batch statistics (no BatchNorm): those see each micro-batch alone.
#pragma once
#include <cstdint>
#include <functional>
#include <utility>
#include <vector>

#include "autograd/tape.h"
#include "core/profile.h"
#include "optim/grad_scaler.h"
#include "optim/lr_schedule.h"
#include "optim/optimizer.h"

namespace reel::optim {

struct WindowResult {
  double loss = 0;        // sum of the micro-batch losses / total: the window's mean loss
  int64_t count = 0;      // samples or non-ignored tokens in the window
  double grad_norm = 0;   // global gradient norm before clipping (0 when not clipping)
  double lr = 0;          // the learning rate this step used
  bool stepped = false;   // false when the window held nothing to learn from (count 0), or was skipped
  // Options::skip_nonfinite or Options::scaler: a gradient was NaN or Inf, no step taken.
  bool skipped_nonfinite = false;
  double loss_scale = 1;  // what the window's loss was multiplied by (Options::scaler's scale, else 1)
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
    // true: a window whose gradients are not all finite (an overflow, a bad batch) zeroes them and
    // takes no step, instead of writing NaN into every parameter; counted in skipped_steps().
    bool skip_nonfinite = false;
    WindowSync* sync = nullptr;  // distributed::DataParallel or FSDP: the window spans every rank (see above)
    // Dynamic loss scaling (see above); not owned, must outlive the Accumulator. null: none.
    GradScaler* scaler = nullptr;
  };
  Accumulator(Optimizer& optimizer, Options options) : optimizer_(optimizer), options_(options) {}
  explicit Accumulator(Optimizer& optimizer) : Accumulator(optimizer, Options{}) {}

  // count(batch) -> int64_t: samples / non-ignored tokens in the batch (reel::Error, naming the
  // micro-batch, for a negative one); loss(batch) -> Tensor: its SUM-reduced loss. Any callables
  // (lambdas, std::function) taking a const Batch&.
  template <typename Batch, typename CountFn, typename LossFn>
  WindowResult step(const std::vector<Batch>& micro_batches, CountFn&& count, LossFn&& loss) {
    WindowResult r;
    for (size_t i = 0; i < micro_batches.size(); ++i) {  // the whole window, before any backward
      const int64_t n = static_cast<int64_t>(count(micro_batches[i]));
      // A negative count makes 1/total (or a share of it) negative: the step would climb the loss.
      REEL_CHECK(n >= 0, "Accumulator: micro-batch ", i, " has a count of ", n,
                 "; the count callback must return the samples or non-ignored tokens in it (>= 0)");
      r.count += n;
    }
    if (options_.sync) r.count = options_.sync->global_count(r.count);
    r.lr = options_.schedule ? options_.schedule->lr(optimizer_.steps()) : optimizer_.lr();
    if (r.count == 0) return r;
    const double scale = 1.0 / static_cast<double>(r.count);
    r.loss_scale = options_.scaler ? options_.scaler->scale() : 1.0;
    const double seed = scale * r.loss_scale;  // the loss scaled once: in the seed, not in the loss
    for (size_t i = 0; i < micro_batches.size(); ++i) {
      const Tensor l = [&] {
        const profile::PhaseScope profiled(profile::Phase::Forward);
        return loss(micro_batches[i]);
      }();
      r.loss += l.item() * scale;
      if (options_.sync && i + 1 == micro_batches.size()) options_.sync->before_last_backward();
      autograd::backward(l, seed);
    }
    if (options_.sync) {
      if (micro_batches.empty()) options_.sync->before_last_backward();
      options_.sync->after_last_backward();
      r.loss = options_.sync->global_sum(r.loss);
    }
    finish(r);
    return r;
  }

  // Called once per window with the optimizer's parameters (their .grad the window's gradients,
  // see above) and the window so far (loss, count and lr set; grad_norm and stepped not yet). One
  // hook: a new one replaces the last; an empty one removes it.
  using GradHook = std::function<void(const std::vector<Tensor>& params, const WindowResult& window)>;
  void set_grad_hook(GradHook hook) { grad_hook_ = std::move(hook); }

  int64_t steps() const { return optimizer_.steps(); }
  // Windows skipped for an inf or NaN gradient (Options::skip_nonfinite or Options::scaler).
  int64_t skipped_steps() const { return skipped_; }

 private:
  void finish(WindowResult& r);  // unscale, the gradient hook, clip, set lr, step, zero_grad
  bool unscale_found_inf();      // Options::scaler: unscale, and whether any rank found inf/NaN
  void skip(WindowResult& r);    // zero the gradients, no step

  Optimizer& optimizer_;
  Options options_;
  GradHook grad_hook_;
  int64_t skipped_ = 0;
};

}  // namespace reel::optim
