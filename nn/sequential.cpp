// Sequential (with its checkpoint switch) and MLP.
#include "nn/sequential.h"

#include <optional>

#include "autograd/tape.h"
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
}

Tensor Sequential::forward(const Tensor& x) {
  Tensor h = x;
  for (const CheckpointPolicy::Run& run : policy_.plan(size())) {
    std::optional<autograd::Checkpoint> segment, selective;  // the selective scope nests inside
    if (run.checkpointed) segment.emplace();
    if (run.selective) selective.emplace(policy_.keep_rule());
    for (int64_t i = run.begin; i < run.end; ++i) h = (*this)[i](h);
    selective.reset();  // innermost first
  }
  return h;
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
