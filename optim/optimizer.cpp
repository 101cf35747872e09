// Optimizer base, SGD, Adam/AdamW and gradient clipping (see optimizer.h; make_optimizer is in registry.cpp).
#include "optim/optimizer.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <utility>

#include "autograd/tape.h"
#include "core/allocator.h"
#include "core/profile.h"
#include "kernels/optimizer.h"

namespace reel::optim {

namespace {
std::vector<Tensor> grads_of(const std::vector<Tensor>& params) {
  std::vector<Tensor> grads;
  for (const Tensor& p : params)
    if (p.grad().defined()) grads.push_back(p.grad());
  return grads;
}
}  // namespace

Optimizer::Optimizer(std::vector<Tensor> params, double lr) : params_(std::move(params)), lr_(lr) {
  // A parameter listed twice would be updated twice per step (and get two sets of state), so it is
  // refused. "The same" is the same data: one tensor, or another handle whose update would write the
  // same elements (a detached alias made a leaf again).
  std::map<std::pair<const void*, int64_t>, size_t> seen;  // (storage or tensor, offset) -> index
  for (size_t i = 0; i < params_.size(); ++i) {
    const Tensor& p = params_[i];
    REEL_CHECK(p.defined() && p.requires_grad(), "optimizer: parameter ", i,
               " does not require grad (call set_requires_grad() on parameters)");
    REEL_CHECK(p.is_contiguous(), "optimizer: parameter ", i, " of shape ", p.shape(), " is not contiguous");
    const void* data = p.storage() ? static_cast<const void*>(p.storage().get()) : p.impl_ptr();
    const auto [it, first] = seen.emplace(std::make_pair(data, p.offset()), i);
    REEL_CHECK(first, "optimizer: parameters ", it->second, " and ", i, " (shape ", p.shape(),
               ") are the same tensor; it would be stepped twice (list each parameter once)");
  }
}

void Optimizer::check_lr(const char* who, double lr) {
  REEL_CHECK(std::isfinite(lr) && lr >= 0, who, ": lr (", lr, ") must be a finite number >= 0");
}

void Optimizer::set_lr(double lr) {
  check_lr("set_lr", lr);
  lr_ = lr;
}

void Optimizer::step() {
  std::vector<size_t> with_grad;
  for (size_t i = 0; i < params_.size(); ++i)
    if (params_[i].grad().defined()) with_grad.push_back(i);
  read_device_steps();
  ++steps_;
  device_steps_valid_ = false;  // counted on the host
  const profile::PhaseScope profiled(profile::Phase::Optimizer);
  if (!with_grad.empty()) update(with_grad);
}

void Optimizer::step(const Tensor& coef, const Tensor& found_inf, const kernels::LrRule& schedule) {
  REEL_CHECK(device_control(), "optimizer: step(coef, found_inf) is not supported by this optimizer "
                               "(its decisions are taken on the host: use step())");
  std::vector<size_t> with_grad;
  int64_t elements = 0;
  for (size_t i = 0; i < params_.size(); ++i)
    if (params_[i].grad().defined()) {
      with_grad.push_back(i);
      elements += params_[i].numel();
    }
  const profile::PhaseScope profiled(profile::Phase::Optimizer);
  // Nothing to update (no gradient, or only empty parameters: the update would launch nothing, so
  // nothing would advance the device's count): the host's count stays exact.
  if (elements == 0) {
    read_device_steps();
    ++steps_;
    device_steps_valid_ = false;
    if (!with_grad.empty()) update(with_grad);  // the checks and versions of an update of nothing
    return;
  }
  const Device device = params_[with_grad.front()].device();
  if (!device_steps_valid_ || device_steps_.device() != device) {
    // The host's exact count, to the device (an asynchronous copy: no wait).
    read_device_steps();
    MemoryCategory scope(Category::OptimizerState);
    device_steps_ = empty({1}, DType::i64, device);
    upload_.write(device_steps_, &steps_, sizeof steps_);
    device_steps_valid_ = true;
  }
  // The rate: evaluated by the kernels from the count they read (a schedule with a device form), or
  // read from the device scalar that device_lr keeps.
  const bool scheduled = schedule.kind != kernels::LrRule::kNone;
  control_ = kernels::StepControl{coef, found_inf, device_steps_, scheduled ? Tensor() : device_lr(device), schedule};
  ++steps_;  // exact without a found_inf (nothing skips); else an upper bound until read_device_steps()
  if (found_inf.defined()) steps_pending_ = true;
  // The update's kernels advance the device's count themselves (kernels/optimizer.h: StepControl).
  try {
    update(with_grad);
  } catch (...) {
    control_ = kernels::StepControl{};
    throw;
  }
  control_ = kernels::StepControl{};
}

void Optimizer::device_stepped(bool may_skip) {
  ++steps_;
  if (may_skip) steps_pending_ = true;
}

const Tensor& Optimizer::device_lr(Device device) {
  if (!device_lr_.defined() || device_lr_.device() != device) {
    MemoryCategory scope(Category::OptimizerState);
    device_lr_ = empty({1}, DType::f64, device);
    device_lr_written_ = false;
  }
  if (!device_lr_written_ || device_lr_value_ != lr_) {  // a schedule's new rate: one small copy
    upload_.write(device_lr_, &lr_, sizeof lr_);
    device_lr_value_ = lr_;
    device_lr_written_ = true;
  }
  return device_lr_;
}

int64_t Optimizer::steps() const {
  read_device_steps();
  return steps_;
}

void Optimizer::read_device_steps() const {
  if (!steps_pending_) return;
  // The meta device computes nothing and skips nothing (its found_inf is a placeholder 0): the
  // upper bound is its count, and no read is recorded.
  if (!device_steps_.device().is_meta()) steps_ = device_steps_.to(Device::cpu()).data<int64_t>()[0];
  steps_pending_ = false;
}

void Optimizer::zero_grad() { autograd::zero_grad(params_); }

const Tensor& Optimizer::state(const std::string& slot, size_t i) {
  std::vector<Tensor>& tensors = state_[slot];
  tensors.resize(params_.size());
  if (!tensors[i].defined()) {
    MemoryCategory scope(Category::OptimizerState);
    const Tensor& p = params_[i];
    tensors[i] = zeros(p.shape(), acc_dtype(p.dtype()), p.device());  // f32 state for a 16-bit parameter
  }
  return tensors[i];
}

StateDict Optimizer::state_dict() const {
  StateDict out;
  out["step"] = from_vector<int64_t>({steps()}, {});
  for (const auto& [slot, tensors] : state_)
    for (size_t i = 0; i < tensors.size(); ++i)
      if (tensors[i].defined()) out[slot + "." + std::to_string(i)] = tensors[i];
  return out;
}

void Optimizer::load_state_dict(const StateDict& state) {
  REEL_CHECK(state.count("step") && state.at("step").numel() == 1, "optimizer load_state_dict: missing key 'step'");
  std::map<std::string, std::vector<Tensor>> loaded;
  const std::vector<std::string> slots = state_slots();
  for (const auto& [key, t] : state) {
    if (key == "step") continue;
    const size_t dot = key.rfind('.');
    const std::string slot = dot == std::string::npos ? key : key.substr(0, dot);
    bool known = dot != std::string::npos && std::find(slots.begin(), slots.end(), slot) != slots.end();
    size_t i = 0;
    if (known) {
      try {
        i = std::stoul(key.substr(dot + 1));
      } catch (const std::exception&) {
        known = false;
      }
    }
    REEL_CHECK(known && i < params_.size(), "optimizer load_state_dict: unexpected key '", key, "'");
    REEL_CHECK(t.shape() == params_[i].shape(), "optimizer load_state_dict: '", key, "' has shape ", t.shape(),
               " but parameter ", i, " has shape ", params_[i].shape());
    std::vector<Tensor>& tensors = loaded[slot];
    tensors.resize(params_.size());
    MemoryCategory scope(Category::OptimizerState);
    tensors[i] = t.to(params_[i].device()).to(acc_dtype(params_[i].dtype())).clone();
  }
  steps_ = static_cast<int64_t>(state.at("step").item());
  steps_pending_ = false;
  device_steps_valid_ = false;
  state_ = std::move(loaded);
}

// ---- SGD ---------------------------------------------------------------------

SGD::SGD(std::vector<Tensor> params, double lr, Options options)
    : Optimizer(std::move(params), lr), options_(options) {
  check_lr("SGD", lr);
  REEL_CHECK(options.momentum >= 0 && options.weight_decay >= 0, "SGD: momentum (", options.momentum,
             ") and weight_decay (", options.weight_decay, ") must be >= 0");
  REEL_CHECK(!options.nesterov || (options.momentum > 0 && options.dampening == 0),
             "SGD: nesterov needs momentum > 0 and dampening 0");
}

std::vector<std::string> SGD::state_slots() const { return {"momentum_buffer"}; }

void SGD::update(const std::vector<size_t>& with_grad) {
  std::vector<Tensor> p, g, buf;
  for (size_t i : with_grad) {
    p.push_back(params_[i]);
    g.push_back(params_[i].grad());
    if (options_.momentum != 0) buf.push_back(state("momentum_buffer", i));
  }
  kernels::sgd_update(p, g, buf, lr_, options_.momentum, options_.dampening, options_.weight_decay,
                      options_.nesterov, steps_, control());
}

// ---- Adam / AdamW ------------------------------------------------------------

Adam::Adam(std::vector<Tensor> params, double lr, Options options) : Adam(std::move(params), lr, options, false) {}

Adam::Adam(std::vector<Tensor> params, double lr, Options options, bool decoupled)
    : Optimizer(std::move(params), lr), options_(options), decoupled_(decoupled) {
  check_lr(decoupled ? "AdamW" : "Adam", lr);
  REEL_CHECK(options.eps >= 0 && options.weight_decay >= 0, decoupled ? "AdamW" : "Adam", ": eps (", options.eps,
             ") and weight_decay (", options.weight_decay, ") must be >= 0");
  REEL_CHECK(options.beta1 >= 0 && options.beta1 < 1 && options.beta2 >= 0 && options.beta2 < 1,
             decoupled ? "AdamW" : "Adam", ": betas (", options.beta1, ", ", options.beta2, ") must be in [0, 1)");
}

void Adam::update(const std::vector<size_t>& with_grad) {
  std::vector<Tensor> p, g, m, v;
  for (size_t i : with_grad) {
    p.push_back(params_[i]);
    g.push_back(params_[i].grad());
    m.push_back(state("exp_avg", i));
    v.push_back(state("exp_avg_sq", i));
  }
  kernels::adamw_update(p, g, m, v, lr_, options_.beta1, options_.beta2, options_.eps, options_.weight_decay, steps_,
                        decoupled_, control());
}

// ---- clipping ----------------------------------------------------------------

double clip_grad_norm(const std::vector<Tensor>& params, double max_norm) {
  REEL_CHECK(max_norm > 0, "clip_grad_norm: max_norm must be > 0, got ", max_norm);
  const std::vector<Tensor> grads = grads_of(params);
  if (grads.empty()) return 0.0;
  const double norm = kernels::global_grad_norm(grads);
  const double factor = max_norm / (norm + 1e-6);
  if (clip_scales(factor, grads.front().device())) kernels::scale_(grads, std::min(factor, 1.0));
  return norm;
}

bool clip_scales(double factor, Device device) { return factor < 1.0 || device.is_meta(); }

}  // namespace reel::optim
