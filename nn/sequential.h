// Sequential (children applied in order, named "0", "1", ... as in torch), its checkpoint switch,
// and MLP built on it.
//
// The checkpoint switch runs chosen runs of children inside autograd::Checkpoint segments, so a
// user never writes a scope:
//   model.set_checkpoint(CheckpointPolicy::parse("sqrt"));  // or "every:4", "list:0,2", "none"
// Inside a segment only the segment's input is kept in forward; backward replays the segment.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "autograd/checkpoint.h"
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
  Module& operator[](int64_t i) const;

  Tensor forward(const Tensor& x) override;
  std::string name() const override { return "Sequential"; }

  // reel::Error when a List entry is out of range for this Sequential.
  void set_checkpoint(const CheckpointPolicy& policy);
  const CheckpointPolicy& checkpoint() const { return policy_; }

 private:
  CheckpointPolicy policy_;
};

// sizes {in, h1, ..., out}: Linear layers with `activation` (and Dropout when dropout > 0) between
// them, none after the last.
class MLP : public Sequential {
 public:
  MLP(const std::vector<int64_t>& sizes, const std::string& activation = "relu", double dropout = 0);
  std::string name() const override { return "MLP"; }
};

}  // namespace reel::nn
