// Sequential (children applied in order, named "0", "1", ... as in torch), its checkpoint switch,
// and MLP built on it.
//
// The checkpoint switch runs chosen runs of children inside autograd::Checkpoint segments, so a
// user never writes a scope:
//   model.set_checkpoint(CheckpointPolicy::parse("sqrt"));  // or "every:4", "list:0,2", "none",
//                                                            // "selective", "budget:48MiB"
// Inside a segment only the segment's input is kept in forward; backward replays the segment. A
// budget is planned once from measurements: model.plan_checkpoint([&] { return loss_of(batch); }),
// with its units' times measured on this host or, after model.set_cost_device(&spec), predicted on
// a GPU from the measuring forward's kernel records (required on the meta device).
// Each planned run executes through its lever (autograd::run_lever): the lever opens its scopes
// (a segment, a selective scope, ...) around the run's children; set_inexact_levers(true) lets the
// planner choose levers whose gradients are not bit-identical.
//
// The offload switch moves saved activations to host memory during forward (autograd/offload.h):
//   model.set_offload(autograd::OffloadMode::Auto);        // the planner may offload runs
//   model.set_offload(autograd::OffloadMode::Boundaries);  // every checkpointed run's boundary
//   model.set_offload(autograd::OffloadMode::All);         // every run's saves
// An offloaded run's forward runs inside an autograd::Offload scope (Boundaries for a checkpointed
// run, All for a plain or selective one), with OffloadPrefetch::Scope: backward brings a run back
// whole, one run ahead. So under all with a fixed policy each plain run is split into one run per
// child (one scope over a whole chain would bring everything back at once, at the plain peak);
// segments and selective scopes stay whole. Boundaries and all are refused at set_offload when the
// model's parameters are on the cpu device, whose tensors are already in host memory (auto there
// plans without offload).
//
// Each child is called through its operator(), so its hooks (nn/module.h) run at forward, inside
// the segment when it is checkpointed; backward's replay re-runs the ops recorded on the tape, not
// the children, so their hooks do not run again there.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "autograd/checkpoint.h"
#include "autograd/checkpoint_planner.h"
#include "autograd/offload.h"
#include "core/kernel_price.h"
#include "nn/module.h"

namespace reel::nn {

// The policies live with the tape (autograd/checkpoint.h); here they count this Sequential's children.
using CheckpointPolicy = autograd::CheckpointPolicy;

class Sequential : public Module {
 public:
  Sequential() = default;
  explicit Sequential(const std::vector<std::shared_ptr<Module>>& modules);
  void push_back(std::shared_ptr<Module> module);  // registered as the next index
  int64_t size() const { return static_cast<int64_t>(children().size()); }
  Module& operator[](int64_t i) const;  // call it as seq[i](x), through its hooks

  std::string name() const override { return "Sequential"; }

  // reel::Error when a List entry is out of range for this Sequential. Drops a previous plan.
  void set_checkpoint(const CheckpointPolicy& policy);
  const CheckpointPolicy& checkpoint() const { return policy_; }

  // Which runs go to host memory during forward (see the top of this file): under a fixed policy
  // (sqrt, every:K, ...) boundaries offloads its checkpointed runs, all every run (plain runs one
  // child each), auto none; under a budget the plan says. max_inflight_bytes bounds the device bytes
  // waiting for their copy to the host (autograd::Offload). Drops a previous plan. reel::Error for
  // boundaries or all when the parameters are on cpu (naming the device; auto plans without offload
  // there), or a bound <= 0.
  void set_offload(autograd::OffloadMode mode, int64_t max_inflight_bytes = autograd::kDefaultOffloadInflightBytes);
  autograd::OffloadMode offload() const { return offload_; }
  // Whether plan_checkpoint may choose levers whose gradients are not bit-identical to the plain
  // run's (autograd::RunLever::exact false: saves kept in lower precision). Off by default: a plan
  // then changes memory and time only. Drops a previous plan.
  void set_inexact_levers(bool allow);
  bool inexact_levers() const { return inexact_; }
  int64_t offload_inflight_bytes() const { return max_inflight_bytes_; }

  // Where plan_checkpoint takes its units' times from. Null (the default): the measuring forward's
  // kernel times on this host. A spec (report/device_specs.cpp's table, profile::device_spec("h100")):
  // the times core/kernel_price.h predicts on that GPU for the kernel records the measuring forward
  // made, unit by unit, so the plan is the one for that GPU, whatever device measured it; the host
  // link's bandwidth and the device memory's (for inexact levers' casts) are the spec's too. On the
  // meta device, whose kernels never run (host times of nothing), a spec is required. The spec is
  // copied. Drops a previous plan.
  void set_cost_device(const profile::DeviceSpec* spec);
  const profile::DeviceSpec* cost_device() const { return cost_device_ ? &*cost_device_ : nullptr; }

  // Measures this chain once and plans its checkpointing for the budget of a Budget policy
  // (autograd/checkpoint_planner.h); forward runs the plan from then on. `forward_loss` runs the
  // step's forward, the code around this Sequential included (what it saves counts against the
  // budget too), and returns the loss, which is dropped again, so no gradient is touched. Two
  // forwards run: one selective (what each child keeps there), then one plain under a Profiler
  // (each child's saved bytes, input bytes and kernels, and which of its ops a selective scope
  // would recompute). A unit's time is its kernels' host time, or with set_cost_device their
  // predicted time on that GPU (its backward is taken as twice its forward either way). The
  // default generator and the buffers (BatchNorm's running statistics) are put back after each.
  // The offload mode says what the planner may offload (auto) or must (boundaries, all), at the
  // host link's bandwidth: the cost device's, else measured once (autograd::host_link_bytes_per_s).
  // reel::Error for another policy, while a Profiler collects, when no plan fits the budget (naming
  // the least peak), for offload boundaries or all on the cpu device, or on the meta device without
  // a cost device.
  const autograd::CheckpointPlan& plan_checkpoint(const std::function<Tensor()>& forward_loss);
  // The plan forward runs under a Budget policy; null before plan_checkpoint.
  const autograd::CheckpointPlan* checkpoint_plan() const { return plan_ ? &*plan_ : nullptr; }
  // What the last plan_checkpoint measured (the units' bytes and times, the host link): for
  // autograd::predict of other runs on this chain (examples/memory_lab sets sqrt beside a plan).
  // Null before plan_checkpoint.
  const autograd::ChainCost* chain_cost() const { return cost_ ? &*cost_ : nullptr; }
  // Runs a plan made earlier for this chain (by plan_checkpoint): the policy becomes its budget.
  // reel::Error when its runs do not cover this Sequential's children in order.
  void use_checkpoint_plan(const autograd::CheckpointPlan& plan);

 protected:
  // Runs the children in order through their operator() (their hooks), in checkpoint segments as
  // the policy says.
  Tensor forward(const Tensor& x) override;

 private:
  struct Measuring;  // what plan_checkpoint's forwards record, child by child
  std::vector<CheckpointPolicy::Run> runs() const;

  CheckpointPolicy policy_;
  autograd::OffloadMode offload_ = autograd::OffloadMode::None;
  bool inexact_ = false;
  int64_t max_inflight_bytes_ = autograd::kDefaultOffloadInflightBytes;
  std::optional<autograd::CheckpointPlan> plan_;
  std::optional<autograd::ChainCost> cost_;  // the last plan_checkpoint's measurements
  std::optional<profile::DeviceSpec> cost_device_;  // set_cost_device's; none: host times
  Measuring* measuring_ = nullptr;  // set while plan_checkpoint's forwards run
};

// sizes {in, h1, ..., out}: Linear layers with `activation` (and Dropout when dropout > 0) between
// them, none after the last.
class MLP : public Sequential {
 public:
  MLP(const std::vector<int64_t>& sizes, const std::string& activation = "relu", double dropout = 0);
  std::string name() const override { return "MLP"; }
};

}  // namespace reel::nn
