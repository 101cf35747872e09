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
// A window of count 0 runs none of it (no backward, no step, the scaler untouched).
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
// is unscaled. The scaler's scale() is read when the window starts and updated once when it ends.
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
  // Options::skip_nonfinite or Options::scaler: a gradient the optimizer would read was NaN or Inf
  // after the hook, on some rank; no step taken.
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
    // true: a window whose gradients are not all finite after the hook (an overflow, a bad batch)
    // zeroes them and takes no step, instead of writing NaN into every parameter; counted in
    // skipped_steps(). A scaler implies this check.
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

  // Called once per window of count > 0, after the unscale and before the non-finite decision
  // (see above), with the optimizer's parameters (their .grad the window's gradients) and the
  // window so far (loss, count, lr and loss_scale set; grad_norm, stepped and skipped_nonfinite
  // not yet). One hook: a new one replaces the last; an empty one removes it.
  using GradHook = std::function<void(const std::vector<Tensor>& params, const WindowResult& window)>;
  void set_grad_hook(GradHook hook) { grad_hook_ = std::move(hook); }

  int64_t steps() const { return optimizer_.steps(); }
  // Windows skipped for an inf or NaN gradient (Options::skip_nonfinite or Options::scaler); with a
  // scaler used by this Accumulator alone, from its start, the same as its skipped_windows().
  int64_t skipped_steps() const { return skipped_; }
  // A resumed run's count so far (optim/training_state.h).
  void set_skipped_steps(int64_t skipped) { skipped_ = skipped; }

 private:
  void finish(WindowResult& r);  // unscale, hook, non-finite decision, clip, set lr, step, zero_grad
  // The gradient buffers the optimizer will step from: the sync's step_grads() (ZeRO-1's shards),
  // else each of the optimizer's parameters' defined .grad.
  std::vector<Tensor> step_grads() const;
  void skip(WindowResult& r);    // zero the gradients, no step, counted

  Optimizer& optimizer_;
  Options options_;
  GradHook grad_hook_;
  int64_t skipped_ = 0;
};

}  // namespace reel::optim
