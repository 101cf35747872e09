// The backward observers' events in the order a lever sees them (begin_backward, the rules and
// replays, the saves a rule lets go of, end_backward) under gradient accumulation, a checkpoint
// replay, a rule that throws and a loss that is a leaf; the tape queries of autograd/inspect.h
// that a lever reads at those events; Offload's observer present only while an offload state lives,
// and still told of the replay during which its last state went.
// (ZeRO-3's view of the same events: tests/test_fsdp.cpp, under mpirun.)
#include <algorithm>
#include <any>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "autograd/checkpoint.h"
#include "autograd/functions.h"
#include "autograd/hooks.h"
#include "autograd/inspect.h"
#include "autograd/nn_functions.h"
#include "autograd/offload.h"
#include "autograd/saved_tensor.h"
#include "autograd/tape.h"
#include "testing.h"

using namespace reel;

namespace {

// One line per event: "begin <root> <accumulates>", "rule <op>", "replay", "replayed <op>",
// "released <op>", "end ok|threw" (and what the tape held then).
struct Log final : autograd::BackwardObserver {
  std::vector<std::string> lines;
  int64_t root = -2;
  size_t tape_at_end = 999;
  void begin_backward(const autograd::BackwardEvent& e) override {
    root = e.root;
    lines.push_back("begin " + std::to_string(e.root) + (e.accumulates ? " accumulates" : " fresh"));
  }
  void before_node(const autograd::NodeEvent& e) override {
    lines.push_back(std::string(e.pass == autograd::Pass::Backward ? "rule " : "replayed ") + e.op);
  }
  void before_replay(const autograd::ReplayEvent&) override { lines.push_back("replay"); }
  void saved_released(const autograd::NodeEvent& e, const Tensor&) override {
    lines.push_back(std::string("released ") + e.op);
  }
  void end_backward(const autograd::BackwardEvent&, bool threw) override {
    tape_at_end = autograd::recorded_ops();
    lines.push_back(threw ? "end threw" : "end ok");
  }
  size_t find(const std::string& line) const {
    return static_cast<size_t>(std::find(lines.begin(), lines.end(), line) - lines.begin());
  }
};

struct Params {
  Tensor w, b, c;
};
Params params(Device d) {
  Generator gen(11);
  Params p;
  p.w = randn({5, 4}, DType::f32, Device::cpu(), &gen).to(d).set_requires_grad();
  p.b = randn({5}, DType::f32, Device::cpu(), &gen).to(d).set_requires_grad();
  p.c = randn({3, 5}, DType::f32, Device::cpu(), &gen).to(d);
  return p;
}
Tensor loss_of(const Params& p, const Tensor& x) { return sum(linear(x, p.w, p.b) * p.c); }

}  // namespace

TEST_CASE("observer events in order: begin, the rules with their releases, end; accumulation seen at begin") {
  for (Device d : reel::testing::devices()) {
    CAPTURE(d);
    const Params p = params(d);
    const Tensor x = randn({3, 4}, DType::f32, d).set_requires_grad();  // Linear then releases W after dX
    auto log = std::make_shared<Log>();
    autograd::ObserveBackward observe(log);
    for (int micro = 0; micro < 2; ++micro) {  // two backwards into the same .grad
      CAPTURE(micro);
      log->lines.clear();
      const Tensor loss = loss_of(p, x);
      const size_t recorded = autograd::Tape::current().size();
      autograd::backward(loss);
      const std::vector<std::string> want{micro == 0 ? "begin " + std::to_string(recorded - 1) + " fresh"
                                                     : "begin " + std::to_string(recorded - 1) + " accumulates",
                                          "rule sum", "rule mul", "rule linear", "released linear", "end ok"};
      CHECK(log->lines == want);
      CHECK(log->tape_at_end == 0);  // end_backward comes once the tape is cleared
    }
    // zero_grad's deferred zeros are not a gradient to add to: a fresh window.
    autograd::zero_grad({p.w, p.b, x});
    log->lines.clear();
    autograd::backward(loss_of(p, x));
    REQUIRE(!log->lines.empty());
    CHECK(log->lines.front().find("fresh") != std::string::npos);
  }
}

TEST_CASE("observer events around a checkpoint replay; the saves query turns live when the replay re-makes them") {
  for (Device d : reel::testing::devices()) {
    CAPTURE(d);
    const Params p = params(d);
    const Tensor x = randn({3, 4}, DType::f32, d).set_requires_grad();
    Tensor h;
    {
      autograd::Checkpoint segment;
      h = linear(x, p.w, p.b);
    }
    const Tensor loss = sum(h * p.c);
    REQUIRE(std::string(autograd::recorded_op(0)) == "linear");
    // The op object itself, as a selective checkpoint's keep rule is asked about it.
    REQUIRE(autograd::recorded_op_object(0) != nullptr);
    CHECK(std::string(autograd::recorded_op_object(0)->name()) == "linear");
    CHECK(autograd::CheckpointPolicy::parse("selective").keep_rule()(*autograd::recorded_op_object(0)));
    CHECK_FALSE(autograd::CheckpointPolicy::parse("selective").keep_rule()(*autograd::recorded_op_object(1)));
    CHECK_REEL_ERROR((void)autograd::recorded_op_object(99), "recorded_op_object: tape position 99");
    CHECK_FALSE(autograd::recorded_saves_live(0));  // collapsed: re-made by the replay
    CHECK_FALSE(autograd::recorded_saves(0).live);
    CHECK(autograd::recorded_saves(0).storages.empty());

    struct Replay final : autograd::BackwardObserver {
      Tensor w;
      std::vector<std::string> seen;
      void after_node(const autograd::NodeEvent& e, const autograd::Tensors*) override {
        if (e.pass != autograd::Pass::Replay) return;
        const autograd::RecordedSaves saves = autograd::recorded_saves(static_cast<size_t>(e.index));
        const bool has_w = std::find(saves.storages.begin(), saves.storages.end(), w.storage().get()) !=
                           saves.storages.end();
        seen.push_back(std::string(saves.live ? "live" : "collapsed") + (has_w ? " with w" : " without w"));
      }
    };
    auto replay = std::make_shared<Replay>();
    replay->w = p.w;
    auto log = std::make_shared<Log>();
    {
      autograd::ObserveBackward a(log), b(replay);
      autograd::backward(loss);
    }
    const std::vector<std::string> want{"begin 2 fresh", "rule sum", "rule mul", "replay", "replayed linear",
                                        "rule linear", "released linear", "end ok"};
    CHECK(log->lines == want);
    CHECK(replay->seen == std::vector<std::string>{"live with w"});
  }
}

TEST_CASE("end_backward is told, with threw, when a rule throws; a backward its checks refuse gets neither event") {
  const Tensor w = full({4}, 1.0, DType::f32, Device::cpu()).set_requires_grad();
  auto log = std::make_shared<Log>();
  autograd::ObserveBackward observe(log);
  {
    // The unpack of mul's save throws inside mul's rule.
    Tensor loss;
    {
      autograd::SavedTensorHooks hooks([](const Tensor& t) -> std::any { return t; },
                                       [](const std::any&) -> Tensor { REEL_FAIL("unpack refuses"); });
      loss = sum(w * w);
    }
    CHECK_REEL_ERROR(autograd::backward(loss), "unpack refuses");
    REQUIRE(log->lines.size() == 4);
    CHECK(log->lines[0] == "begin 1 fresh");
    CHECK(log->lines[1] == "rule sum");
    CHECK(log->lines[2] == "rule mul");
    CHECK(log->lines[3] == "end threw");
    CHECK(log->tape_at_end == 0);
  }
  {
    // Written in place after it was saved: refused before the walk.
    log->lines.clear();
    const Tensor v = full({4}, 2.0, DType::f32, Device::cpu());
    const Tensor loss = sum(w * v);
    v.fill_(3.0);
    CHECK_REEL_ERROR(autograd::backward(loss), "modified in place");
    CHECK(log->lines.empty());
    autograd::Tape::current().clear();
  }
  {
    // A loss that is a leaf: begin (root -1) and end, nothing between.
    log->lines.clear();
    const Tensor leaf = full({1}, 1.0, DType::f32, Device::cpu()).set_requires_grad();
    autograd::backward(leaf);
    CHECK(log->lines == std::vector<std::string>{"begin -1 fresh", "end ok"});
    CHECK(log->root == -1);
  }
}

TEST_CASE("tape queries: a recorded op's inputs and the storages its saves hold; a bad position is refused") {
  const Params p = params(Device::cpu());
  const Tensor x = randn({3, 4}, DType::f32, Device::cpu());
  const Tensor wt = p.w.t();  // a view of a leaf, made by a recorded op
  const Tensor loss = sum(matmul(x, wt));
  REQUIRE(autograd::recorded_ops() == 3);
  CHECK(std::string(autograd::recorded_op(1)) == "matmul");
  const std::vector<autograd::RecordedInput> in = autograd::recorded_inputs(1);
  REQUIRE(in.size() == 2);
  CHECK(in[0].meta == nullptr);  // x needs no gradient
  CHECK(in[1].meta == wt.autograd_meta().get());
  CHECK_FALSE(in[1].leaf);
  CHECK(in[1].views_leaf);
  CHECK(in[1].producer == 0);  // the transpose
  const std::vector<autograd::RecordedInput> t_in = autograd::recorded_inputs(0);
  REQUIRE(t_in.size() == 1);
  CHECK(t_in[0].leaf);
  CHECK(t_in[0].meta == p.w.autograd_meta().get());
  // matmul's rule needs x for dW only (its other input needs no gradient, so wt is not saved).
  const autograd::RecordedSaves saves = autograd::recorded_saves(1);
  CHECK(saves.live);
  CHECK(std::find(saves.storages.begin(), saves.storages.end(), x.storage().get()) != saves.storages.end());
  CHECK(std::find(saves.storages.begin(), saves.storages.end(), p.w.storage().get()) == saves.storages.end());
  CHECK_REEL_ERROR(autograd::recorded_saves(3), "recorded_saves: tape position 3 is out of range (the tape holds 3 ops)");
  CHECK_REEL_ERROR(autograd::recorded_inputs(7), "recorded_inputs: tape position 7 is out of range");
  autograd::backward(loss);
  CHECK(autograd::recorded_ops() == 0);
}

TEST_CASE("Offload's observer is added by the Offload that turns offload on and goes with its last state") {
  const Device cuda = Device::cuda(0);
  const auto offload_listed = [] {
    const auto& list = autograd::backward_observers();
    return std::count(list.begin(), list.end(), autograd::offload_observer());
  };
  CHECK(offload_listed() == 0);  // not a built-in observer
  const size_t built_in = autograd::backward_observers().size();
  const Tensor w = randn({16, 16}, DType::f32, cuda).set_requires_grad();
  const Tensor x = randn({8, 16}, DType::f32, cuda);
  Tensor loss;
  {
    autograd::Offload outer;
    CHECK(offload_listed() == 1);
    {
      autograd::Offload inner;  // a second state: still one observer
      CHECK(offload_listed() == 1);
      loss = sum(gelu(matmul(x, w)));
      CHECK(inner.stats().tensors > 0);
    }
    CHECK(offload_listed() == 1);
  }
  // The scopes closed, but the tape still holds what the inner one packed: its state (and so the
  // observer, which brings the saves back during the backward) stays.
  CHECK(offload_listed() == 1);
  autograd::backward(loss);
  CHECK(offload_listed() == 0);  // the tape let go of the last save: the last state went
  CHECK(autograd::backward_observers().size() == built_in);
}

TEST_CASE("Offload's observer removed inside a replay still hears that replay end: the next step offloads again") {
  // The held input is the segment's boundary: its unpack at the replay frees the last entry of the
  // closed scope's state, which removes the observer mid-replay. Its after_replay must still come
  // (it counts the replays whose saves stay on the device), else the next scope offloads nothing.
  const Device cuda = Device::cuda(0);
  const Tensor w = randn({16, 16}, DType::f32, cuda).set_requires_grad();
  for (int step = 0; step < 2; ++step) {
    CAPTURE(step);
    const Tensor x = randn({8, 16}, DType::f32, cuda);
    Tensor loss;
    int64_t offloaded = 0;
    {
      autograd::Offload scope(autograd::OffloadWhat::Boundaries);
      {
        autograd::Checkpoint segment;
        loss = sum(gelu(matmul(gelu(x), w)));
      }
      offloaded = scope.stats().tensors;
    }
    CHECK(offloaded > 0);
    autograd::backward(loss);
    const auto& list = autograd::backward_observers();
    CHECK(std::count(list.begin(), list.end(), autograd::offload_observer()) == 0);
  }
}
