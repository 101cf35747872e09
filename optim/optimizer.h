// Optimizers: they read each parameter's persistent .grad buffer (filled, possibly over several
// micro-batches, by autograd::backward) and update the parameters in place with the fused update
// kernels of kernels/optimizer.h (SGD, Adam, AdamW, and RuleOptimizer over the rules of
// kernels/optimizer_rules.h); optim/registry.h names them for command lines. They never touch the tape. Their state (momentum, Adam moments)
// is allocated on first use under Category::OptimizerState, so the memory report shows it. A bf16
// or f16 parameter (a model held in 16 bits, Module::to) keeps its state in f32 and is updated in
// f32, rounded once to its type; f32 and f64 parameters keep state in their own type.
#pragma once
#include <cstdint>
#include <iterator>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/staged_upload.h"
#include "core/tensor.h"
#include "kernels/optimizer.h"
#include "kernels/optimizer_rules.h"

namespace reel::optim {

using StateDict = std::map<std::string, Tensor>;

class Optimizer {
 public:
  Optimizer(std::vector<Tensor> params, double lr);
  virtual ~Optimizer() = default;

  // One update from the current gradients; parameters without a gradient are left alone.
  void step();
  // One update whose decisions stay on the device (optim/accumulator.h's window, as PyTorch's fused
  // optimizers read found_inf), on the params' device: each gradient is first multiplied by
  // coef[0] (f64 (1): clipping's coefficient, kernels::global_grad_norm_; undefined: not), exactly
  // as kernels::scale_ before step() would, without writing the .grad; and when found_inf[0] (i32
  // (1); undefined: never) is nonzero nothing is written: parameters, state and the step count
  // stay as they were. The step count then lives on the device (kernels::StepControl::steps, i64
  // (1): the update kernels read it for bias correction and advance it themselves, no launch of
  // its own) until steps() reads it back: the host does not wait here. The learning rate is
  // computed on the device too: with `schedule` (kind other than kNone: an LrSchedule's
  // device_rule()) by the update kernels from the count they read, the schedule's lr(count) bit for
  // bit (lr() is then only what the host reports); else read from a device scalar
  // (kernels::StepControl::lr, written by an asynchronous copy when set_lr changed it). So no kernel
  // takes a value by value that changes from step to step (docs/design.md, "Replay-safe steps").
  // Without a found_inf the host's count stays exact. reel::Error for an optimizer without
  // device_control().
  void step(const Tensor& coef, const Tensor& found_inf, const kernels::LrRule& schedule = kernels::LrRule{});
  // The host's part of step(coef, found_inf) alone, for a CUDA graph's replay of it
  // (optim/graphed_window.h): the count advanced (an upper bound, read from the device when asked,
  // when the step read a found_inf: may_skip).
  void device_stepped(bool may_skip);
  // The f64 (1) tensor on `device` that step(coef, found_inf)'s kernels read the learning rate from
  // when no schedule is given (kernels::StepControl::lr), holding lr() (made on first use; an
  // asynchronous copy when lr() changed since it was written). A graph's replay prologue calls it
  // after set_lr, outside the graph, so that the captured step finds it written and copies nothing.
  const Tensor& device_lr(Device device);
  // Whether step(coef, found_inf) is supported: SGD, Adam/AdamW and RuleOptimizer; not by default
  // (distributed::ZeroAdamW decides on the host).
  virtual bool device_control() const { return false; }
  // Zeros every parameter's gradient buffer (kept allocated for the next window).
  void zero_grad();

  double lr() const { return lr_; }
  // reel::Error for a NaN, infinite or negative rate (the constructors' check), leaving lr() as it was.
  void set_lr(double lr);
  // The steps taken; after a step(coef, found_inf) that might have been skipped, a read of the
  // device's count (the host waits for it), once.
  int64_t steps() const;
  const std::vector<Tensor>& params() const { return params_; }

  // "step" (a 0-d i64 tensor) plus each state tensor as "<slot>.<parameter index>".
  StateDict state_dict() const;
  // reel::Error for a missing or unexpected key, or a state tensor of the wrong shape. State is
  // converted to the parameter's state dtype (f32 for a 16-bit parameter).
  void load_state_dict(const StateDict& state);

 protected:
  // The update over the parameters that have gradients; state(slot, i) gives slot's tensor for
  // parameter i, created zero-filled (Category::OptimizerState, acc_dtype of the parameter's) on
  // first use.
  virtual void update(const std::vector<size_t>& with_grad) = 0;
  virtual std::vector<std::string> state_slots() const = 0;
  const Tensor& state(const std::string& slot, size_t i);
  // The one check of a learning rate, for the constructors ("SGD", ...) and set_lr ("set_lr").
  static void check_lr(const char* who, double lr);
  // What update() passes its kernels: StepControl{} in step(), the device's decisions in
  // step(coef, found_inf).
  const kernels::StepControl& control() const { return control_; }

  std::vector<Tensor> params_;
  double lr_;
  // The step count, passed to the kernels (which ignore it when control().steps is defined). While
  // steps_pending_, an upper bound (every window counted) and the device's count is the true one.
  mutable int64_t steps_ = 0;

 private:
  void read_device_steps() const;  // steps_ from the device when steps_pending_

  kernels::StepControl control_;
  Tensor device_steps_;  // i64 (1) on the params' device: kernels::StepControl::steps, the count
  bool device_steps_valid_ = false;  // device_steps_ matches steps_ (a host step() makes it stale)
  mutable bool steps_pending_ = false;
  StagedUpload upload_;    // device_steps_ and device_lr_ from the host, no host sync
  Tensor device_lr_;       // f64 (1) on the params' device: kernels::StepControl::lr
  double device_lr_value_ = 0;  // what device_lr_ holds once written
  bool device_lr_written_ = false;
  std::map<std::string, std::vector<Tensor>> state_;  // slot -> per parameter (undefined until used)
};

// torch.optim.SGD: momentum, dampening, Nesterov, L2 weight decay.
class SGD final : public Optimizer {
 public:
  struct Options {
    double momentum = 0, dampening = 0, weight_decay = 0;
    bool nesterov = false;
  };
  SGD(std::vector<Tensor> params, double lr, Options options);
  SGD(std::vector<Tensor> params, double lr) : SGD(std::move(params), lr, Options{}) {}
  bool device_control() const override { return true; }

 private:
  void update(const std::vector<size_t>& with_grad) override;
  std::vector<std::string> state_slots() const override;
  Options options_;
};

// torch.optim.Adam (L2 weight decay added to the gradient) and torch.optim.AdamW (decoupled).
class Adam : public Optimizer {
 public:
  struct Options {
    double beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0;
  };
  Adam(std::vector<Tensor> params, double lr, Options options);
  Adam(std::vector<Tensor> params, double lr) : Adam(std::move(params), lr, Options{}) {}
  bool device_control() const override { return true; }

 protected:
  Adam(std::vector<Tensor> params, double lr, Options options, bool decoupled);

 private:
  void update(const std::vector<size_t>& with_grad) override;
  std::vector<std::string> state_slots() const override { return {"exp_avg", "exp_avg_sq"}; }
  Options options_;
  bool decoupled_;
};

class AdamW final : public Adam {
 public:
  // torch's AdamW default weight decay is 0.01.
  AdamW(std::vector<Tensor> params, double lr, Options options = Options{0.9, 0.999, 1e-8, 0.01})
      : Adam(std::move(params), lr, options, true) {}
};

// An optimizer whose update is a rule of kernels/optimizer_rules.h: its hyper-parameters (Options,
// with their defaults), their checks, its state slots and its fused kernel on cpu and cuda all come
// from the rule. The aliases below name each one.
template <typename Rule>
class RuleOptimizer final : public Optimizer {
 public:
  using Options = typename Rule::Options;
  RuleOptimizer(std::vector<Tensor> params, double lr, Options options = Options{})
      : Optimizer(std::move(params), lr), options_(options) {
    check_lr(Rule::kTitle, lr);
    Rule::check(options);
  }
  const Options& options() const { return options_; }
  bool device_control() const override { return true; }

 private:
  void update(const std::vector<size_t>& with_grad) override {
    std::vector<Tensor> p, g;
    std::vector<std::vector<Tensor>> slots(static_cast<size_t>(Rule::kSlots));
    for (size_t i : with_grad) {
      p.push_back(params_[i]);
      g.push_back(params_[i].grad());
      for (int k = 0; k < Rule::kSlots; ++k) slots[static_cast<size_t>(k)].push_back(state(Rule::kSlotNames[k], i));
    }
    kernels::rule_update<Rule>(p, g, slots, options_, lr_, steps_, control());
  }
  std::vector<std::string> state_slots() const override {
    return std::vector<std::string>(std::begin(Rule::kSlotNames), std::end(Rule::kSlotNames));
  }
  Options options_;
};

// Lion (kernels/optimizer_rules.h): the sign of interpolated momentum; Options{beta1 0.9, beta2 0.99,
// weight_decay 0}, state "exp_avg".
using Lion = RuleOptimizer<kernels::Lion>;

// By name, for command lines: the optimizers of the registry (optim/registry.h: "sgd" with momentum
// 0.9, "adam", "adamw" with weight decay 0.01, ...), each with its help's settings;
// reel::Error quoting the name and listing the choices for anything else.
std::unique_ptr<Optimizer> make_optimizer(const std::string& name, std::vector<Tensor> params, double lr);

// Scales all gradients together so that their global L2 norm is at most max_norm (one pass to
// measure, one to scale, as torch.nn.utils.clip_grad_norm_). Returns the norm before clipping.
double clip_grad_norm(const std::vector<Tensor>& params, double max_norm);
// Whether clipping by `factor` (max_norm / (norm + 1e-6)) scales gradients on `device`: when the
// factor is below 1; and always on the meta device, whose norm is a placeholder (0), so that a dry
// run records the launches of a step that clips (the larger of the two steps; the scale is 1).
bool clip_scales(double factor, Device device);

}  // namespace reel::optim
