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

#include "nn/module.h"

namespace reel::nn {

struct CheckpointPolicy {
  enum class Kind { None, Every, Sqrt, List };
  Kind kind = Kind::None;
  int64_t every = 0;           // Every: children per segment
  std::vector<int64_t> list;   // List: the children that each get their own segment

  // "none" | "every:K" (K >= 1) | "sqrt" | "list:i,j,..." ; reel::Error naming the accepted forms.
  static CheckpointPolicy parse(const std::string& text);
  std::string str() const;

  struct Run {
    int64_t begin = 0, end = 0;  // children [begin, end)
    bool checkpointed = false;
  };
  // How n children run. Every:K and Sqrt (K = ceil(sqrt(n))) cut the children into runs of K and
  // checkpoint all but the last run: backward would replay the last one at once, so keeping its
  // activations costs no more memory at the peak and saves a recompute (as
  // torch.utils.checkpoint.checkpoint_sequential). List checkpoints exactly the listed children.
  std::vector<Run> plan(int64_t n) const;
};

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
