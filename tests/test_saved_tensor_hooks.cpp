// The tape's extension points used as a user would: saved-tensor pack/unpack hooks that move every
// saved tensor (op saves and checkpoint boundaries) to another device and back give bit-identical
// gradients under every checkpoint policy (none, sqrt, selective, a planned budget) on every
// device, with the memory statistics showing where the bytes went; backward observers that count
// rules and replays, and one that installs a .grad at a rule's first write (before_leaf_grad) and
// hears Linear release its saved W before dW (saved_released); the version check through a packed
// slot; hooks that unpack the wrong tensor; a pack hook told whether it packs a parameter or an
// activation, with a slot id that is the same at every step.
#include <algorithm>
#include <any>
#include <cstring>
#include <memory>
#include <optional>
#include <utility>
#include <string>
#include <vector>

#include "autograd/functions.h"
#include "autograd/nn_functions.h"
#include "autograd/hooks.h"
#include "autograd/saved_tensor.h"
#include "autograd/tape.h"
#include "core/allocator.h"
#include "nn/sequential.h"
#include "testing.h"

using namespace reel;
using reel::testing::same_bits;

namespace {

// The device saves are moved to: the other one this build offers.
Device elsewhere(Device d) { return d.is_cpu() ? Device::cuda(0) : Device::cpu(); }

// A pair of hooks moving each saved tensor from `home` to `away` and back, counting both. The
// packed value is the moved Tensor itself, so the tape counts its bytes on `away`.
struct MoveHooks {
  Device home, away;
  int packed = 0, unpacked = 0;
  autograd::PackHook pack() {
    return [this](const Tensor& t) -> std::any {
      REQUIRE(t.device() == home);
      ++packed;
      return t.to(away);
    };
  }
  autograd::UnpackHook unpack() {
    return [this](const std::any& p) {
      ++unpacked;
      return std::any_cast<const Tensor&>(p).to(home);
    };
  }
};

std::shared_ptr<nn::MLP> make_mlp(Device d) {
  manual_seed(11);
  auto mlp = std::make_shared<nn::MLP>(std::vector<int64_t>{24, 32, 32, 32, 32, 32, 32, 10}, "gelu", 0.1);
  mlp->to(d);
  return mlp;
}

Tensor targets(Device d) {  // (16) class ids
  std::vector<int64_t> t(16);
  for (size_t i = 0; i < t.size(); ++i) t[i] = static_cast<int64_t>((i * 7) % 10);
  return from_vector<int64_t>(t, {16}).to(d);
}

struct Step {
  std::vector<std::vector<float>> grads;
  int64_t peak_here = 0;  // the activation peak on the model's device
};

// One forward + backward from the same data and dropout stream; the gradients as bits.
Step step(nn::MLP& mlp, Device d, MoveHooks* hooks) {
  Generator data(3);
  const Tensor x = randn({16, 24}, DType::f32, Device::cpu(), &data).to(d);
  const Tensor target = targets(d);
  autograd::zero_grad(mlp.parameters());
  manual_seed(42);
  reset_peak_memory(d);
  const int64_t before = memory_stats(d)[Category::Activation].current_bytes;
  Tensor loss;
  {
    std::optional<autograd::SavedTensorHooks> scope;
    if (hooks) scope.emplace(hooks->pack(), hooks->unpack());
    loss = cross_entropy(mlp(x), target);
  }
  Step s;
  s.peak_here = memory_stats(d)[Category::Activation].peak_bytes - before;
  autograd::backward(loss);
  for (const Tensor& p : mlp.parameters()) s.grads.push_back(p.grad().to(Device::cpu()).to_vector<float>());
  return s;
}

}  // namespace

TEST_CASE("saved-tensor hooks move every save elsewhere and back: bit-identical gradients under every policy") {
  if (reel::testing::devices().size() < 2) return;  // needs a second device to move the saves to
  for (Device d : reel::testing::devices()) {
    CAPTURE(d);
    const Device away = elsewhere(d);
    auto mlp = make_mlp(d);
    const Step plain = step(*mlp, d, nullptr);
    for (const char* policy : {"none", "sqrt", "selective", "budget"}) {
      CAPTURE(policy);
      if (std::string(policy) == "budget") {
        mlp->set_checkpoint(nn::CheckpointPolicy::budget(plain.peak_here * 2 / 3));
        Generator data(3);
        const Tensor x = randn({16, 24}, DType::f32, Device::cpu(), &data).to(d);
        const Tensor target = targets(d);
        mlp->plan_checkpoint([&] { return cross_entropy((*mlp)(x), target); });
      } else {
        mlp->set_checkpoint(nn::CheckpointPolicy::parse(policy));
      }
      const Step unhooked = step(*mlp, d, nullptr);
      CHECK(same_bits(unhooked.grads, plain.grads));
      MoveHooks hooks{d, away};
      const int64_t away_before = memory_stats(away)[Category::Activation].current_bytes;
      reset_peak_memory(away);
      const Step hooked = step(*mlp, d, &hooks);
      CHECK(hooks.packed > 0);
      CHECK(hooks.unpacked == hooks.packed);  // every save read back once (none left after backward)
      CHECK(same_bits(hooked.grads, plain.grads));
      // Where the bytes went: the saves sat on `away` (its activation peak grew), and on the
      // model's device only what the forward itself allocated at once remains.
      CHECK(memory_stats(away)[Category::Activation].peak_bytes > away_before);
      CHECK(hooked.peak_here < unhooked.peak_here);
      CHECK(memory_stats(away)[Category::Activation].current_bytes == away_before);
    }
    CHECK(autograd::Tape::current().empty());
  }
}

TEST_CASE("saved-tensor hooks: the innermost pair applies; the version check sees through a packed slot") {
  for (Device d : reel::testing::devices()) {
    CAPTURE(d);
    const Tensor w = full({3}, 2.0, DType::f32, d).set_requires_grad();
    int outer = 0, inner = 0;
    const auto count = [](int& n) {
      return autograd::PackHook([&n](const Tensor& t) -> std::any {
        ++n;
        return t.clone();
      });
    };
    const autograd::UnpackHook back = [](const std::any& p) { return std::any_cast<const Tensor&>(p); };
    Tensor x = full({3}, 3.0, DType::f32, d);
    Tensor loss;
    {
      autograd::SavedTensorHooks a(count(outer), back);
      {
        autograd::SavedTensorHooks b(count(inner), back);
        loss = sum(w * x);  // mul saves x (for w's gradient)
      }
    }
    CHECK(inner >= 1);
    CHECK(outer == 0);
    x.fill_(5.0);  // the original was written after it was saved: the gradient would use 5, not 3
    CHECK_REEL_ERROR(autograd::backward(loss), "saved for backward was modified in place (version 0 when saved, 1 now)");
    // An unpack that gives back another tensor is refused, naming the op and both shapes.
    {
      const Tensor y = full({3}, 1.0, DType::f32, d);
      autograd::SavedTensorHooks wrong([](const Tensor& t) -> std::any { return t; },
                                      [](const std::any&) { return zeros({4}, DType::f32, Device::cpu()); });
      loss = sum(w * y);
    }
    CHECK_REEL_ERROR(autograd::backward(loss), "mul: the unpack hook returned (4) f32 on cpu for a tensor saved as (3)");
    CHECK_REEL_ERROR(autograd::SavedTensorHooks(nullptr, back), "both a pack and an unpack function are needed");
  }
}

namespace {
// Counts what a backward does, in the order the tape reports it.
struct Counter final : autograd::BackwardObserver {
  int rules = 0, replayed_nodes = 0, replays = 0, leaves = 0, open = 0, max_open = 0;
  std::vector<std::string> log;
  void before_node(const autograd::NodeEvent& e) override {
    (e.pass == autograd::Pass::Backward ? rules : replayed_nodes)++;
    max_open = std::max(max_open, ++open);
  }
  void after_node(const autograd::NodeEvent&, const autograd::Tensors* produced) override {
    --open;
    if (!produced) log.push_back("threw");
  }
  void before_replay(const autograd::ReplayEvent& e) override {
    ++replays;
    log.push_back("replay " + std::to_string(e.segment));
  }
  void after_replay(const autograd::ReplayEvent&, bool) override { log.push_back("replayed"); }
  void leaf_grad_ready(const AutogradMeta&) override { ++leaves; }
  bool wants_leaf_grad_ready() const override { return true; }
};
}  // namespace

TEST_CASE("a backward observer counts rules, replays and leaves whose gradient is final") {
  for (Device d : reel::testing::devices()) {
    CAPTURE(d);
    auto mlp = make_mlp(d);
    const size_t n_params = mlp->parameters().size();
    for (const char* policy : {"none", "every:2"}) {
      CAPTURE(policy);
      mlp->set_checkpoint(nn::CheckpointPolicy::parse(policy));
      auto counter = std::make_shared<Counter>();
      Generator data(3);
      const Tensor x = randn({4, 24}, DType::f32, Device::cpu(), &data).to(d);
      Tensor loss = sum((*mlp)(x));
      const size_t recorded = autograd::Tape::current().size();
      {
        autograd::ObserveBackward observe(counter);
        autograd::backward(loss);
      }
      CHECK(counter->rules == static_cast<int>(recorded));  // every node the loss reaches
      CHECK(counter->open == 0);
      CHECK(counter->max_open == 1);                        // rules and replayed forwards never nest
      CHECK(counter->leaves == static_cast<int>(n_params));
      if (std::string(policy) == "none") {
        CHECK(counter->replays == 0);
        CHECK(counter->replayed_nodes == 0);
      } else {
        // 19 children (7 Linear, 6 GELU, 6 Dropout), runs of 2: 9 checkpointed runs, the last
        // run kept; each replay re-runs its segment's forwards.
        CHECK(counter->replays == 9);
        CHECK(counter->replayed_nodes > 0);
        CHECK(counter->replayed_nodes < counter->rules);
      }
    }
    // Removed with its scope: the next backward reports nothing to it.
    auto counter = std::make_shared<Counter>();
    { autograd::ObserveBackward observe(counter); }
    autograd::backward(sum((*mlp)(randn({2, 24}, DType::f32, d))));
    CHECK(counter->rules == 0);
  }
}

TEST_CASE("a backward observer is told when a rule throws, and the walk's scopes stay balanced") {
  const Tensor w = full({2}, 1.0, DType::f32, Device::cpu()).set_requires_grad();
  struct Throwing final : autograd::BackwardObserver {
    void after_node(const autograd::NodeEvent& e, const autograd::Tensors* produced) override {
      if (produced && std::string(e.op) == "mul") REEL_FAIL("observer refuses ", e.op);
    }
  };
  auto counter = std::make_shared<Counter>();
  autograd::ObserveBackward a(counter);
  autograd::ObserveBackward b(std::make_shared<Throwing>());
  const Tensor loss = sum(w * w);
  CHECK_REEL_ERROR(autograd::backward(loss), "observer refuses mul");
  CHECK(counter->open == 0);  // told with null after the throw (later observers are told first)
  CHECK(autograd::Tape::current().empty());
}

TEST_CASE("an observer installs a .grad at a rule's first write to it, and hears Linear release W before dW") {
  for (Device d : reel::testing::devices()) {
    CAPTURE(d);
    Generator gen(5);
    const Tensor x = randn({3, 4}, DType::f32, Device::cpu(), &gen).to(d).set_requires_grad();
    const Tensor w = randn({5, 4}, DType::f32, Device::cpu(), &gen).to(d).set_requires_grad();
    const Tensor b = randn({5}, DType::f32, Device::cpu(), &gen).to(d).set_requires_grad();
    const Tensor c = randn({3, 5}, DType::f32, Device::cpu(), &gen).to(d);
    autograd::backward(sum(linear(x, w, b) * c));
    const Tensor want = w.grad().clone();
    for (const Tensor& t : {x, w, b}) t.set_grad(Tensor());

    // Installs w's buffer lazily (as FSDP does), filled with stale values zero_grad marks as zeros:
    // the rule writes it in place, the tape's add never sees them.
    struct Lazy final : autograd::BackwardObserver {
      Tensor w, buffer;
      std::vector<std::string> log;
      void before_leaf_grad(const AutogradMeta& leaf) override {
        if (&leaf != w.autograd_meta().get()) {
          log.push_back("grad other");
          return;
        }
        log.push_back(std::string("grad w, ") + (leaf.grad.defined() ? "a buffer" : "no buffer"));
        buffer = full(w.shape(), 7.0, w.dtype(), w.device());
        w.set_grad(buffer);
        autograd::zero_grad({w});
      }
      void saved_released(const autograd::NodeEvent& e, const Tensor& value) override {
        log.push_back(std::string(e.op) + " released " + (value.storage() == w.storage() ? "w" : "other"));
      }
    };
    auto lazy = std::make_shared<Lazy>();
    lazy->w = w;
    {
      autograd::ObserveBackward observe(lazy);
      autograd::backward(sum(linear(x, w, b) * c));
    }
    // dX, then W released, then dW written into the buffer installed at that moment, then db; x's
    // gradient is added by the tape after the rule.
    REQUIRE(lazy->log.size() == 4);
    CHECK(lazy->log[0] == "linear released w");
    CHECK(lazy->log[1] == "grad w, no buffer");
    CHECK(lazy->log[2] == "grad other");
    CHECK(lazy->log[3] == "grad other");
    CHECK(w.grad().same(lazy->buffer));
    CHECK(reel::testing::bit_identical(w.grad(), want));
  }
}

TEST_CASE("a pack hook is told what it packs: parameter or activation, and a slot id stable across steps") {
  auto mlp = make_mlp(Device::cpu());
  mlp->set_checkpoint(nn::CheckpointPolicy::parse("every:2"));  // held inputs too (segment >= 0)
  const auto one_step = [&] {
    std::vector<std::pair<int64_t, autograd::SavedKind>> seen;  // (slot id, kind) in pack order
    int held = 0;
    Generator data(3);
    const Tensor x = randn({16, 24}, DType::f32, Device::cpu(), &data);
    manual_seed(42);
    Tensor loss;
    {
      autograd::SavedTensorHooks scope(
          autograd::PackHookBy([&](const Tensor& t, const autograd::KeptBy& by) -> std::any {
            seen.emplace_back(by.slot_id(), by.kind);
            held += by.segment >= 0;
            const auto& m = t.autograd_meta();
            const bool leaf = m && ((m->is_leaf && m->requires_grad) || m->views_leaf);
            CHECK((by.kind == autograd::SavedKind::Parameter) == leaf);  // a Linear's W, not its input
            return t;
          }),
          [](const std::any& p) { return std::any_cast<const Tensor&>(p); });
      loss = cross_entropy((*mlp)(x), targets(Device::cpu()));
    }
    autograd::backward(loss);
    CHECK(held > 0);
    return seen;
  };
  const auto first = one_step(), second = one_step();
  CHECK(first == second);  // the same slots, named alike, every step
  std::vector<int64_t> ids;
  int parameters = 0;
  for (const auto& [id, kind] : first) {
    CHECK(id >= 0);
    ids.push_back(id);
    parameters += kind == autograd::SavedKind::Parameter;
  }
  std::sort(ids.begin(), ids.end());
  CHECK(std::adjacent_find(ids.begin(), ids.end()) == ids.end());  // one id per slot
  CHECK(parameters > 0);
  CHECK(parameters < static_cast<int>(first.size()));
  CHECK(std::string(autograd::saved_kind_name(autograd::SavedKind::Parameter)) == "parameter");
}
