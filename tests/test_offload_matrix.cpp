// Offload never raises a peak: over every model the tests build (an MLP with dropout, a small GPT,
// a small CNN) x every checkpoint policy (none, every:1, sqrt, selective, budget:SIZE) x every
// OffloadMode (none, boundaries, all, auto), on emulated cuda, one training step's device peak (all
// memory, and the activations alone) with offload is at most the same policy's peak without, and
// the gradients are bit-identical to the plain run's.
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "autograd/functions.h"
#include "autograd/nn_functions.h"
#include "autograd/offload.h"
#include "autograd/tape.h"
#include "core/allocator.h"
#include "nn/gpt.h"
#include "nn/layers.h"
#include "nn/sequential.h"
#include "testing.h"

using namespace reel;
using reel::testing::same_bits;

REEL_TEST_REQUIRES_CUDA();

namespace {

const Device kCuda = Device::cuda(0);

// One model under test: its parameters, its switches and one step's loss (from fixed data; the
// dropout stream is re-seeded by the caller).
struct Model {
  std::string name;
  std::shared_ptr<nn::Module> module;
  std::function<void(const nn::CheckpointPolicy&, autograd::OffloadMode)> set;
  std::function<void(const std::function<Tensor()>&)> plan;
  std::function<Tensor()> loss;
};

Tensor ids(int64_t rows, int64_t cols, int64_t vocab, int64_t mul, int64_t add) {
  std::vector<int64_t> v(static_cast<size_t>(rows * cols));
  for (size_t i = 0; i < v.size(); ++i) v[i] = (static_cast<int64_t>(i) * mul + add) % vocab;
  return from_vector(v, {rows, cols}, kCuda);
}

Model mlp() {
  manual_seed(11);
  auto m = std::make_shared<nn::MLP>(std::vector<int64_t>{24, 32, 32, 32, 32, 10}, "gelu", 0.1);
  m->to(kCuda);
  Generator g(3);
  const Tensor x = randn({16, 24}, DType::f32, Device::cpu(), &g).to(kCuda);  // held by the caller
  const Tensor y = ids(1, 16, 10, 7, 0).reshape({16});
  return {"mlp", m, [m](const nn::CheckpointPolicy& p, autograd::OffloadMode o) { m->set_checkpoint(p), m->set_offload(o); },
          [m](const std::function<Tensor()>& f) { m->plan_checkpoint(f); },
          [m, x, y] { return cross_entropy((*m)(x), y); }};
}

Model gpt() {
  nn::GPTConfig c{/*vocab_size*/ 11, /*block_size*/ 8, /*n_layer*/ 3, /*n_head*/ 2, /*n_embd*/ 16};
  c.dropout = 0.2;
  manual_seed(8);
  auto m = std::make_shared<nn::GPT>(c);
  m->to(kCuda);
  const Tensor x = ids(2, 8, 11, 5, 1), y = ids(2, 8, 11, 3, 2);
  return {"gpt", m, [m](const nn::CheckpointPolicy& p, autograd::OffloadMode o) { m->set_checkpoint(p), m->set_offload(o); },
          [m](const std::function<Tensor()>& f) { m->plan_checkpoint(f); },
          [m, x, y] { return cross_entropy((*m)(x), y); }};
}

Model cnn() {
  manual_seed(5);
  auto m = std::make_shared<nn::Sequential>(std::vector<std::shared_ptr<nn::Module>>{
      std::make_shared<nn::Conv2d>(1, 4, 3, 1, 1), std::make_shared<nn::ReLU>(), std::make_shared<nn::Conv2d>(4, 4, 3, 1, 1),
      std::make_shared<nn::ReLU>(), std::make_shared<nn::Flatten>(), std::make_shared<nn::Linear>(4 * 8 * 8, 10)});
  m->to(kCuda);
  Generator g(4);
  const Tensor x = randn({4, 1, 8, 8}, DType::f32, Device::cpu(), &g).to(kCuda);
  const Tensor y = ids(1, 4, 10, 3, 1).reshape({4});
  return {"cnn", m, [m](const nn::CheckpointPolicy& p, autograd::OffloadMode o) { m->set_checkpoint(p), m->set_offload(o); },
          [m](const std::function<Tensor()>& f) { m->plan_checkpoint(f); },
          [m, x, y] { return cross_entropy((*m)(x), y); }};
}

struct Step {
  std::vector<std::vector<float>> grads;
  int64_t peak = 0, activation_peak = 0;  // on the device, over the step, above its start
};

Step step(Model& model) {
  for (const Tensor& p : model.module->parameters()) p.set_grad(Tensor());
  reset_peak_memory(kCuda);
  const MemoryStats before = memory_stats(kCuda);
  manual_seed(42);
  autograd::backward(model.loss());
  const MemoryStats after = memory_stats(kCuda);
  Step s;
  s.peak = after.peak_bytes - before.current_bytes;
  s.activation_peak = after[Category::Activation].peak_bytes - before[Category::Activation].current_bytes;
  for (const Tensor& p : model.module->parameters()) s.grads.push_back(p.grad().to(Device::cpu()).to_vector<float>());
  return s;
}

}  // namespace

TEST_CASE("offload never raises the device peak: every model x every policy x every OffloadMode, gradients bit-identical") {
  using autograd::OffloadMode;
  int cases = 0, lowered = 0;
  for (Model model : {mlp(), gpt(), cnn()}) {
    CAPTURE(model.name);
    model.set(nn::CheckpointPolicy::parse("none"), OffloadMode::None);
    const Step plain = step(model);
    // A budget every mode can meet: the plain step's activation peak and a half more.
    const std::string budget = "budget:" + std::to_string(plain.activation_peak * 3 / 2);
    for (const std::string& policy : {std::string("none"), std::string("every:1"), std::string("sqrt"),
                                      std::string("selective"), budget}) {
      CAPTURE(policy);
      Step without;
      for (OffloadMode mode : {OffloadMode::None, OffloadMode::Boundaries, OffloadMode::All, OffloadMode::Auto}) {
        const std::string mode_name = autograd::offload_mode_name(mode);
        CAPTURE(mode_name);
        model.set(nn::CheckpointPolicy::parse(policy), mode);
        if (policy == budget) model.plan([&] { return model.loss(); });
        const Step s = step(model);
        CHECK(same_bits(s.grads, plain.grads));
        if (mode == OffloadMode::None) {
          without = s;
          continue;
        }
        ++cases;
        CHECK(s.peak <= without.peak);
        CHECK(s.activation_peak <= without.activation_peak);
        lowered += s.activation_peak < without.activation_peak;
      }
    }
    model.set(nn::CheckpointPolicy::parse("none"), OffloadMode::None);
  }
  MESSAGE(cases << " cases with offload, " << lowered << " with a lower activation peak than without");
  CHECK(lowered > cases / 3);  // (none and auto under a fixed policy offload nothing)
  CHECK(autograd::Tape::current().size() == 0);
}
