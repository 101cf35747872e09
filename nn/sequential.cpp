// Sequential (with its checkpoint switch and the measuring behind a budget plan) and MLP.
#include "nn/sequential.h"

#include <memory>
#include <optional>

#include "autograd/inspect.h"
#include "autograd/offload.h"
#include "autograd/tape.h"
#include "core/kernel_price.h"
#include "core/profile.h"
#include "core/random.h"
#include "nn/layers.h"

namespace reel::nn {

Sequential::Sequential(const std::vector<std::shared_ptr<Module>>& modules) {
  for (const auto& m : modules) push_back(m);
}

void Sequential::push_back(std::shared_ptr<Module> module) {
  register_module(std::to_string(children().size()), std::move(module));
}

Module& Sequential::operator[](int64_t i) const {
  REEL_CHECK(i >= 0 && i < size(), name(), "[", i, "]: index out of range for ", size(), " modules");
  return *children()[static_cast<size_t>(i)].second;
}

void Sequential::set_checkpoint(const CheckpointPolicy& policy) {
  for (int64_t i : policy.list)
    REEL_CHECK(i < size(), name(), ".set_checkpoint(", policy.str(), "): index ", i, " is out of range for ",
               size(), " modules");
  policy_ = policy;
  plan_.reset();
}

void Sequential::set_inexact_levers(bool allow) {
  inexact_ = allow;
  plan_.reset();
}

void Sequential::set_cost_device(const profile::DeviceSpec* spec) {
  if (spec) cost_device_ = *spec;
  else cost_device_.reset();
  plan_.reset();
}

void Sequential::set_offload(autograd::OffloadMode mode, int64_t max_inflight_bytes) {
  REEL_CHECK(max_inflight_bytes > 0, name(), ".set_offload(", autograd::offload_mode_name(mode),
             "): max_inflight_bytes must be > 0 (autograd::kNoOffloadInflightBound for no bound), got ",
             max_inflight_bytes);
  // auto may offload nothing (the planner offloads nothing without a host link); the others must.
  if ((mode == autograd::OffloadMode::Boundaries || mode == autograd::OffloadMode::All) && !parameters().empty()) {
    const Device device = parameters().front().device();
    REEL_CHECK(!device.is_cpu(), name(), ".set_offload(", autograd::offload_mode_name(mode), "): the model is on ",
               device.str(), ", and offload moves saved activations from device memory to host memory, which is "
               "where cpu tensors already are (nothing would be freed). Move the model to a cuda device first "
               "(model.to(Device::cuda(0))), or use offload none; on cpu, checkpointing is what lowers the "
               "activation memory");
  }
  offload_ = mode;
  max_inflight_bytes_ = max_inflight_bytes;
  plan_.reset();
}

// One measuring forward: the runs it uses, and per child the activation bytes it added, its
// input's bytes and the tape positions of its nodes.
struct Sequential::Measuring {
  struct Child {
    int64_t saved_bytes = 0, input_bytes = 0;
    size_t first_node = 0, end_node = 0;
  };
  std::vector<CheckpointPolicy::Run> runs;
  std::vector<Child> children;
  Device device;
  int64_t entry_level = -1;  // activation bytes in use when the first child started
  int64_t level_at_child = 0;

  int64_t level() const { return memory_stats(device)[Category::Activation].current_bytes; }
  void enter(int64_t i, const Tensor& input) {
    Child& c = children[static_cast<size_t>(i)];
    level_at_child = level();
    if (entry_level < 0) entry_level = level_at_child;
    c.input_bytes = input.storage() ? static_cast<int64_t>(input.storage()->bytes()) : 0;
    c.first_node = autograd::Tape::current().size();
  }
  void leave(int64_t i) {
    Child& c = children[static_cast<size_t>(i)];
    c.saved_bytes = level() - level_at_child;
    c.end_node = autograd::Tape::current().size();
  }
};

std::vector<CheckpointPolicy::Run> Sequential::runs() const {
  if (measuring_) return measuring_->runs;
  if (policy_.kind != CheckpointPolicy::Kind::Budget) {
    // A fixed policy's runs, offloaded as the mode says (auto: only a budget plan chooses); under
    // all, plain runs one child each (autograd::fixed_runs).
    return autograd::fixed_runs(policy_, size(), offload_);
  }
  REEL_CHECK(plan_, name(), ": checkpoint policy ", policy_.str(),
             " has no plan yet; call plan_checkpoint(forward_loss) once before training");
  return plan_->runs;
}

Tensor Sequential::forward(const Tensor& x) {
  Tensor h = x;
  for (const CheckpointPolicy::Run& run : runs()) {
    REEL_CHECK(!run.offloaded || !h.device().is_cpu(), name(), ": run [", run.begin, ", ", run.end,
               ") is offloaded (offload ", autograd::offload_mode_name(offload_), "), but its input is on ",
               h.device().str(), ": host memory is where cpu tensors already are, so there is nothing to move; "
               "use offload none there");
    // The run's lever (autograd::run_levers()) opens its scopes: a segment, a selective scope inside
    // it, or whatever an added lever needs. An offloaded run moves its saves (a checkpointed run:
    // only the boundary it holds) to host memory; that scope opens around the lever's and closes
    // after them. In backward the run comes back whole, with the offloaded run before it: the
    // planner's model of a run.
    const autograd::RunLever& lever = autograd::run_lever(run);
    std::optional<autograd::Offload> offload;
    if (run.offloaded)
      offload.emplace(run.checkpointed ? autograd::OffloadWhat::Boundaries : autograd::OffloadWhat::All, 0,
                      autograd::OffloadPrefetch::Scope, max_inflight_bytes_);
    std::unique_ptr<autograd::RunScope> scopes = lever.open ? lever.open(policy_) : nullptr;
    for (int64_t i = run.begin; i < run.end; ++i) {
      if (measuring_) measuring_->enter(i, h);
      h = (*this)[i](h);
      if (measuring_) measuring_->leave(i);
      autograd::release_landed_offloads();  // copies of earlier runs that landed free device memory now
    }
    scopes.reset();  // inside the offload scope
  }
  return h;
}

void Sequential::use_checkpoint_plan(const autograd::CheckpointPlan& plan) {
  int64_t next = 0;
  for (const CheckpointPolicy::Run& r : plan.runs) {
    REEL_CHECK(r.begin == next && r.end > r.begin, name(), ".use_checkpoint_plan: run [", r.begin, ", ", r.end,
               ") does not continue the runs before it");
    next = r.end;
  }
  REEL_CHECK(next == size(), name(), ".use_checkpoint_plan: the plan covers ", next, " children, this Sequential has ",
             size());
  policy_ = CheckpointPolicy::budget(plan.budget_bytes);
  plan_ = plan;
}

const autograd::CheckpointPlan& Sequential::plan_checkpoint(const std::function<Tensor()>& forward_loss) {
  REEL_CHECK(policy_.kind == CheckpointPolicy::Kind::Budget, name(), ".plan_checkpoint: the checkpoint policy is ",
             policy_.str(), ", not a budget (budget:SIZE)");
  REEL_CHECK(!profile::enabled(), name(),
             ".plan_checkpoint: a Profiler is collecting; plan before starting it (the plan times the chain with one)");
  REEL_CHECK(autograd::grad_enabled(), name(), ".plan_checkpoint: called under NoGrad, where nothing is saved to measure");
  const int64_t n = size();
  REEL_CHECK(n > 0, name(), ".plan_checkpoint: no children to plan");
  const Device model_device = parameters().empty() ? Device::cpu() : parameters().front().device();
  REEL_CHECK(!model_device.is_meta() || cost_device_, name(), ".plan_checkpoint(", policy_.str(), ") on ",
             model_device.str(), ": the meta device runs no kernel, so its host times are nothing to plan with; "
             "give the GPU to price the units on: set_cost_device(&profile::device_spec(\"h100\")) (in the "
             "examples, --predict DEVICE)");
  const bool forced = offload_ == autograd::OffloadMode::Boundaries || offload_ == autograd::OffloadMode::All;
  if (forced) {
    REEL_CHECK(!model_device.is_cpu(), name(), ".plan_checkpoint: offload ", autograd::offload_mode_name(offload_),
               " on ", model_device.str(), ": host memory is where cpu tensors already are, so there is nothing to "
               "move; use offload none (or auto, which offloads nothing there)");
  }
  // Runs forward_loss once with every child measured and `runs`; returns the activation bytes in
  // use at its end, counted from before it. The loss is dropped inside, and the tape with it.
  auto measure = [&](Measuring& m, std::vector<CheckpointPolicy::Run> runs, Profiler* prof,
                     std::vector<bool>* recomputed) {
    m.runs = std::move(runs);
    m.children.assign(static_cast<size_t>(n), {});
    struct Reset {
      Measuring*& slot;
      ~Reset() { slot = nullptr; }
    } reset{measuring_};
    Generator& gen = default_generator();
    const uint64_t offset = gen.offset();
    // The measuring forwards leave the model as they found it: BatchNorm's running statistics and
    // batch count (buffers a training forward updates) are put back, as the generator's offset is.
    std::vector<std::pair<Tensor, Tensor>> buffers;  // (buffer, its value before)
    {
      autograd::NoGrad no_grad;
      for (const auto& named : named_buffers()) buffers.emplace_back(named.second, named.second.clone());
    }
    const Device device = parameters().empty() ? Device::cpu() : parameters().front().device();
    m.device = device;
    const int64_t start = memory_stats(device)[Category::Activation].current_bytes;
    measuring_ = &m;
    Tensor loss = forward_loss();
    measuring_ = nullptr;
    if (prof) prof->stop();
    const int64_t end = memory_stats(device)[Category::Activation].current_bytes;
    if (recomputed) {  // per tape node: would a selective scope recompute its op?
      const autograd::KeepRule keep = policy_.keep_rule();
      recomputed->assign(autograd::recorded_ops(), false);
      for (size_t k = 0; k < recomputed->size(); ++k) {
        const autograd::Op* op = autograd::recorded_op_object(k);
        (*recomputed)[k] = op && !keep(*op);
      }
    }
    loss = Tensor();
    gen.set_offset(offset);
    {
      autograd::NoGrad no_grad;
      for (const auto& saved : buffers) saved.first.copy_(saved.second);
    }
    REEL_CHECK(m.entry_level >= 0, name(), ".plan_checkpoint: forward_loss did not run this Sequential");
    m.entry_level -= start;
    return end - start;
  };

  Measuring selective, plain;
  measure(selective, {{0, n, false, true}}, nullptr, nullptr);
  std::vector<bool> recomputed;
  std::unique_ptr<Profiler> prof = std::make_unique<Profiler>();
  const int64_t plain_end = measure(plain, {{0, n, false, false}}, prof.get(), &recomputed);

  autograd::ChainCost cost;
  int64_t chain_bytes = 0;
  for (int64_t i = 0; i < n; ++i) {
    const Measuring::Child& p = plain.children[static_cast<size_t>(i)];
    autograd::UnitCost u;
    u.saved_bytes = p.saved_bytes;
    u.input_bytes = p.input_bytes;
    // The first child's selective bytes include the scope's boundary (its input): a run that
    // starts there counts that boundary itself.
    u.selective_bytes = selective.children[static_cast<size_t>(i)].saved_bytes - (i == 0 ? p.input_bytes : 0);
    u.selective_bytes = std::max<int64_t>(0, u.selective_bytes);
    chain_bytes += p.saved_bytes;
    cost.units.push_back(u);
  }
  std::vector<int64_t> child_of(recomputed.size(), -1);  // tape node -> the child that recorded it
  for (int64_t i = 0; i < n; ++i) {
    const Measuring::Child& p = plain.children[static_cast<size_t>(i)];
    for (size_t node = p.first_node; node < p.end_node && node < child_of.size(); ++node) child_of[node] = i;
  }
  // A kernel run's time: measured on this host, or predicted on the cost device from its record
  // (core/kernel_price.h, the formula report/predict.h sums). Priced, a CUDA run's host records
  // but its copies back to the host are host work, which report/predict.h does not place either:
  // not a unit's device time.
  const profile::DeviceSpec* spec = cost_device();
  const auto run_ns = [&](const profile::KernelRecord& k) {
    if (!spec) return static_cast<double>(k.dur_ns);
    if (!plain.device.is_cpu() && k.device.is_cpu() && k.kernel != "copy_to_host") return 0.0;
    return profile::predict_record(*spec, k).seconds * 1e9;
  };
  for (const profile::KernelRecord& k : prof->kernels()) {
    if (k.op_backward || k.node < 0 || static_cast<size_t>(k.node) >= child_of.size()) continue;
    const size_t node = static_cast<size_t>(k.node);
    if (child_of[node] < 0) continue;  // before or after the chain
    autograd::UnitCost& u = cost.units[static_cast<size_t>(child_of[node])];
    const double ns = run_ns(k);
    u.forward_ns += ns;
    if (recomputed[node]) u.selective_ns += ns;
  }
  if (spec) cost.priced_on = spec->name;
  cost.before_bytes = plain.entry_level;
  cost.after_bytes = std::max<int64_t>(0, plain_end - plain.entry_level - chain_bytes);
  if (offload_ != autograd::OffloadMode::None && !plain.device.is_cpu())
    cost.host_bytes_per_s = spec ? spec->host_link_bytes_per_s : autograd::host_link_bytes_per_s(plain.device);
  cost.offload_inflight_bytes = max_inflight_bytes_;  // the bound its offloaded runs execute under
  if (inexact_ && spec) {
    cost.device_bytes_per_s = spec->bytes_per_s;  // the cost device's memory: its casts' roof
  } else if (inexact_) {
    // What an inexact lever's passes over the saves (casts) cost: the bandwidth the chain's
    // memory-bound ops reached in the measured forward (those a selective scope recomputes;
    // all of the chain's when there are none).
    double bytes[2] = {0, 0}, ns[2] = {0, 0};  // [0] the recomputed ops', [1] all the chain's
    for (const profile::KernelRecord& k : prof->kernels()) {
      if (k.op_backward || k.node < 0 || static_cast<size_t>(k.node) >= child_of.size() ||
          child_of[static_cast<size_t>(k.node)] < 0)
        continue;
      for (int a = recomputed[static_cast<size_t>(k.node)] ? 0 : 1; a < 2; ++a) {
        bytes[a] += static_cast<double>(k.cost.bytes());
        ns[a] += static_cast<double>(k.dur_ns);
      }
    }
    const int a = bytes[0] > 0 && ns[0] > 0 ? 0 : 1;
    if (ns[a] > 0) cost.device_bytes_per_s = bytes[a] * 1e9 / ns[a];
  }
  cost_ = cost;
  plan_ = autograd::plan_checkpoint(cost, policy_.budget_bytes, offload_, inexact_);
  return *plan_;
}

MLP::MLP(const std::vector<int64_t>& sizes, const std::string& activation, double dropout) {
  REEL_CHECK(sizes.size() >= 2, "MLP: needs at least {in, out} sizes, got ", sizes.size());
  for (size_t i = 0; i + 1 < sizes.size(); ++i) {
    push_back(std::make_shared<Linear>(sizes[i], sizes[i + 1]));
    if (i + 2 < sizes.size()) {
      push_back(make_activation(activation));
      if (dropout > 0) push_back(std::make_shared<Dropout>(dropout));
    }
  }
}

}  // namespace reel::nn
