// Loss scaling across ranks under `mpirun -np 2` (tests/CMakeLists.txt): an inf that only ONE rank
// plants, in one gradient element, which after the reduce-scatter lies in ONE rank's shard under
// ZeRO-1 and FSDP (so only that rank finds it; in plain data parallel the all-reduce gives it to
// both), makes EVERY rank skip the window
// together: parameters and optimizer state untouched on both, the scale halved on both, and the next
// window steps on both to the same values. The found flag is combined through the WindowSync
// (optim/accumulator.h). Then a gradient hook that plants an inf on rank 1 only, after the
// synchronisation (in .grad under plain data parallel, where every rank's gradient norm is taken
// locally; in the gradient shards under ZeRO-1; in the shard gradients under FSDP ZeRO-2/3), with
// the scaler, skip_nonfinite or both: every rank skips, and WindowResult, skipped_steps() and the
// scaler's counters agree on both. Every rank runs every case in the same order.
#include <cmath>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "autograd/functions.h"
#include "autograd/tape.h"
#include "distributed/data_parallel.h"
#include "distributed/fsdp.h"
#include "distributed/process_group.h"
#include "nn/sequential.h"
#include "optim/accumulator.h"
#include "optim/grad_scaler.h"
#include "optim/optimizer.h"
#include "testing.h"

// Which check the window asks for: the scaler alone, skip_nonfinite alone, or both.
enum class Check { Scaler, SkipNonfinite, Both };

using namespace reel;
using distributed::ProcessGroup;

namespace {

ProcessGroup& world() { return ProcessGroup::world(); }

// y = x w^T + b, w (out, in).
class Dense final : public nn::Module {
 public:
  Dense(int64_t in, int64_t out, Generator& gen, DType dt, Device dev) {
    w = register_parameter("weight", (randn({out, in}, DType::f64, Device::cpu(), &gen) * 0.4).to(dt).to(dev));
    b = register_parameter("bias", (randn({out}, DType::f64, Device::cpu(), &gen) * 0.1).to(dt).to(dev));
  }
  std::string name() const override { return "Dense"; }
  Tensor w, b;

 protected:
  Tensor forward(const Tensor& x) override { return matmul(x, w.t()) + b; }
};

// (n, 6) -> 16 -> 3: two units for FSDP.
std::shared_ptr<nn::Sequential> make_model(Device dev) {
  Generator gen(3);
  return std::make_shared<nn::Sequential>(std::vector<std::shared_ptr<nn::Module>>{
      std::make_shared<Dense>(6, 16, gen, DType::f32, dev), std::make_shared<Dense>(16, 3, gen, DType::f32, dev)});
}

struct Batch {
  Tensor x, y;
  bool poison;  // this micro-batch's loss puts an inf into the gradient of the last bias's element 2
};

// This rank's window: two micro-batches of 4 rows (different on each rank).
std::vector<Batch> my_window(Device dev, uint64_t seed, bool poison_second) {
  Generator gen(seed * 10 + static_cast<uint64_t>(world().rank()));
  std::vector<Batch> w;
  for (int i = 0; i < 2; ++i)
    w.push_back({randn({4, 6}, DType::f32, Device::cpu(), &gen).to(dev),
                 randn({4, 3}, DType::f32, Device::cpu(), &gen).to(dev), poison_second && i == 1});
  return w;
}

int64_t rows(const Batch& b) { return b.x.shape()[0]; }

Tensor loss_of(nn::Sequential& model, const Dense& last, const Batch& b) {
  const Tensor e = model(b.x) - b.y;
  Tensor l = sum(e * e);
  if (b.poison) {  // d(loss)/d(b[2]) = inf: one element of one parameter, on this rank only
    const Tensor mark = from_vector<float>({0, 0, std::numeric_limits<float>::infinity()}, {3}).to(b.x.device());
    l = l + sum(last.b * mark);
  }
  return l;
}

std::vector<std::vector<double>> values_of(const std::vector<Tensor>& ts) {
  std::vector<std::vector<double>> v;
  for (const Tensor& t : ts) v.push_back(reel::testing::values(t));
  return v;
}

// Runs a clean window, a window where only rank 1 plants the inf, and a clean one again.
void check_skip_together(optim::Accumulator& acc, optim::GradScaler& scaler, const optim::Optimizer& opt,
                         const std::vector<Tensor>& stepped, const std::function<Tensor(const Batch&)>& loss,
                         Device dev) {
  REQUIRE(acc.step(my_window(dev, 1, false), rows, loss).stepped);
  const auto params = values_of(stepped);
  std::vector<Tensor> state;
  for (const auto& [key, t] : opt.state_dict()) state.push_back(t);
  const auto state_values = values_of(state);

  const optim::WindowResult r = acc.step(my_window(dev, 2, world().rank() == 1), rows, loss);
  CHECK(r.skipped_nonfinite);
  CHECK_FALSE(r.stepped);
  CHECK(r.loss_scale == 256.0);
  CHECK(scaler.scale() == 128.0);
  CHECK(acc.skipped_steps() == 1);
  CHECK(opt.steps() == 1);
  CHECK(values_of(stepped) == params);
  std::vector<Tensor> state_after;
  for (const auto& [key, t] : opt.state_dict()) state_after.push_back(t);
  CHECK(values_of(state_after) == state_values);

  const optim::WindowResult next = acc.step(my_window(dev, 3, false), rows, loss);
  CHECK(next.stepped);
  CHECK(next.loss_scale == 128.0);
  CHECK(opt.steps() == 2);
}

// A clean window, a window whose hook plants an inf into element 0 of `target()` on rank 1 only,
// and a clean one again; `scaler` null when the window has none.
void check_hook_skips_together(optim::Accumulator& acc, optim::GradScaler* scaler, const optim::Optimizer& opt,
                               const std::vector<Tensor>& stepped, const std::function<Tensor(const Batch&)>& loss,
                               const std::function<Tensor()>& target, Device dev) {
  REQUIRE(acc.step(my_window(dev, 1, false), rows, loss).stepped);
  const auto params = values_of(stepped);
  std::vector<Tensor> state;
  for (const auto& [key, t] : opt.state_dict()) state.push_back(t);
  const auto state_values = values_of(state);

  int calls = 0;
  acc.set_grad_hook([&](const std::vector<Tensor>&, const optim::WindowResult&) {
    ++calls;
    if (world().rank() != 1) return;
    const Tensor g = target();
    std::vector<double> v = reel::testing::values(g);
    v[0] = std::numeric_limits<double>::infinity();
    g.copy_(from_vector(v, g.shape()));
  });
  const optim::WindowResult r = acc.step(my_window(dev, 2, false), rows, loss);
  CHECK(calls == 1);
  CHECK(r.skipped_nonfinite);
  CHECK_FALSE(r.stepped);
  CHECK(acc.skipped_steps() == 1);
  CHECK(opt.steps() == 1);
  CHECK(values_of(stepped) == params);
  std::vector<Tensor> state_after;
  for (const auto& [key, t] : opt.state_dict()) state_after.push_back(t);
  CHECK(values_of(state_after) == state_values);
  if (scaler) {
    CHECK(r.loss_scale == 256.0);
    CHECK(scaler->scale() == 128.0);
    CHECK(scaler->skipped_windows() == 1);
    CHECK(scaler->clean_windows_in_a_row() == 0);
  }
  // Every rank skipped: the sum of the ranks' skipped counts is the world's size.
  CHECK(world().all_reduce(static_cast<double>(acc.skipped_steps()), distributed::ReduceOp::Sum) ==
        static_cast<double>(world().size()));

  acc.set_grad_hook({});
  const optim::WindowResult next = acc.step(my_window(dev, 3, false), rows, loss);
  CHECK(next.stepped);
  CHECK(opt.steps() == 2);
  if (scaler) {
    CHECK(next.loss_scale == 128.0);
    CHECK(scaler->clean_windows_in_a_row() == 1);  // the skip restarted the count
  }
  bool finite = true;  // CHECK, not REQUIRE: a rank leaving the case early would hang the other's collectives
  for (const auto& v : values_of(stepped))
    for (double x : v) finite = finite && std::isfinite(x);
  CHECK(finite);
}

const char* name(Check c) {
  return c == Check::Scaler ? "scaler" : c == Check::SkipNonfinite ? "skip_nonfinite" : "scaler + skip_nonfinite";
}

}  // namespace

TEST_CASE("data parallel (plain and ZeRO-1): an inf on one rank skips the window on every rank") {
  for (Device dev : reel::testing::devices())
    for (const int zero : {0, 1}) {
      CAPTURE(dev);
      CAPTURE(zero);
      auto model = make_model(dev);
      const Dense& last = static_cast<const Dense&>((*model)[1]);
      const std::vector<Tensor> p = model->parameters();
      distributed::DataParallel dp(p, {512, true, zero});
      std::unique_ptr<optim::Optimizer> opt;
      if (zero == 1) opt = std::make_unique<distributed::ZeroAdamW>(dp, 0.01);
      else opt = std::make_unique<optim::AdamW>(p, 0.01);
      optim::GradScaler scaler({256.0, 2.0, 0.5, 100});
      optim::Accumulator acc(*opt, {1.0, nullptr, false, &dp, &scaler});
      check_skip_together(acc, scaler, *opt, p, [&](const Batch& b) { return loss_of(*model, last, b); }, dev);
    }
}

TEST_CASE("FSDP (ZeRO-2 and ZeRO-3): an inf in one rank's shard skips the window on every rank") {
  for (Device dev : reel::testing::devices())
    for (const int stage : {2, 3}) {
      CAPTURE(dev);
      CAPTURE(stage);
      auto model = make_model(dev);
      const Dense& last = static_cast<const Dense&>((*model)[1]);
      distributed::FullyShardedDataParallel fsdp(*model, {&(*model)[0], &(*model)[1]}, {stage, {}, true, {}, {}});
      optim::AdamW opt(fsdp.shard_parameters(), 0.01);
      optim::GradScaler scaler({256.0, 2.0, 0.5, 100});
      optim::Accumulator acc(opt, {1.0, nullptr, false, &fsdp, &scaler});
      check_skip_together(acc, scaler, opt, fsdp.shard_parameters(),
                          [&](const Batch& b) { return loss_of(*model, last, b); }, dev);
    }
}

TEST_CASE("data parallel (plain and ZeRO-1): a hook's inf on one rank skips the window on every rank") {
  for (Device dev : reel::testing::devices())
    for (const int zero : {0, 1})
      for (Check check : {Check::Scaler, Check::SkipNonfinite, Check::Both}) {
        CAPTURE(dev);
        CAPTURE(zero);
        CAPTURE(std::string(name(check)));
        auto model = make_model(dev);
        const Dense& last = static_cast<const Dense&>((*model)[1]);
        const std::vector<Tensor> p = model->parameters();
        distributed::DataParallel dp(p, {512, true, zero});
        std::unique_ptr<optim::Optimizer> opt;
        if (zero == 1) opt = std::make_unique<distributed::ZeroAdamW>(dp, 0.01);
        else opt = std::make_unique<optim::AdamW>(p, 0.01);
        optim::GradScaler scaler({256.0, 2.0, 0.5, 100});
        optim::GradScaler* s = check == Check::SkipNonfinite ? nullptr : &scaler;
        optim::Accumulator acc(*opt, {1.0, nullptr, check != Check::Scaler, &dp, s});
        // What the optimizer reads: the synchronised .grad (plain), this rank's gradient shard (ZeRO-1).
        const std::function<Tensor()> target = [&] { return zero == 1 ? dp.step_grads()[0] : p[0].grad(); };
        check_hook_skips_together(acc, s, *opt, p, [&](const Batch& b) { return loss_of(*model, last, b); }, target,
                                  dev);
      }
}

TEST_CASE("FSDP (ZeRO-2 and ZeRO-3): a hook's inf in one rank's shard skips the window on every rank") {
  for (Device dev : reel::testing::devices())
    for (const int stage : {2, 3})
      for (Check check : {Check::Scaler, Check::SkipNonfinite, Check::Both}) {
        CAPTURE(dev);
        CAPTURE(stage);
        CAPTURE(std::string(name(check)));
        auto model = make_model(dev);
        const Dense& last = static_cast<const Dense&>((*model)[1]);
        distributed::FullyShardedDataParallel fsdp(*model, {&(*model)[0], &(*model)[1]}, {stage, {}, true, {}, {}});
        const std::vector<Tensor> shards = fsdp.shard_parameters();
        optim::AdamW opt(shards, 0.01);
        optim::GradScaler scaler({256.0, 2.0, 0.5, 100});
        optim::GradScaler* s = check == Check::SkipNonfinite ? nullptr : &scaler;
        optim::Accumulator acc(opt, {1.0, nullptr, check != Check::Scaler, &fsdp, s});
        check_hook_skips_together(acc, s, opt, shards, [&](const Batch& b) { return loss_of(*model, last, b); },
                                  [&] { return shards[0].grad(); }, dev);
      }
}
