// distributed/fsdp.h under `mpirun -np 2` (tests/CMakeLists.txt): ZeRO-2 and ZeRO-3 against one process over
// the whole global batch (f64 gradients to 1e-12, and after a few AdamW steps), with and without
// checkpointing, with accumulation in both reduce modes, with and without prefetch; leaf layers as
// units inside checkpointed blocks (a GPT's Linears and LayerNorms too) equal to one process and to
// block units; a replayed checkpoint segment re-gathers its freed parameters (gradients bit-identical
// to an unsharded checkpointed run); the all-gather and reduce-scatter counts of fsdp.h's formula
// (2U - 1 + R - S - N per micro-batch: a unit no rule reads is not gathered in backward); a Linear's
// weight released before its weight gradient exists; the backward observer events in order around
// ZeRO-3 (begin_backward, rules, replays and releases, end_backward with every unit released); per-rank parameter,
// gradient and optimizer bytes about half a single process's; a released parameter refused by
// kernels; gathered checkpoints loading into one process bit for bit, and back; every collective a
// span on the trace's communication lanes; gather_all keeping the model whole; mixed precision
// (param_dtype bf16 / f16: 16-bit gathers, f32 gradients and masters) bit for bit against one process's
// 16-bit model with f32 gradient buffers, its AdamW steps against f32 masters stepped from a bf16
// copy, its 16-bit parameter bytes, and f16 with the loss scaler skipping an overflowed window on both
// ranks; the same on cuda:0 (emulated, or a GPU). Every rank runs every case in the same order (each collective needs all ranks).
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "autograd/autocast.h"
#include "autograd/checkpoint.h"
#include "autograd/functions.h"
#include "autograd/hooks.h"
#include "autograd/nn_functions.h"
#include "autograd/tape.h"
#include "core/allocator.h"
#include "core/profile.h"
#include "distributed/fsdp.h"
#include "distributed/process_group.h"
#include "nn/gpt.h"
#include "nn/sequential.h"
#include "optim/accumulator.h"
#include "optim/grad_scaler.h"
#include "optim/optimizer.h"
#include "testing.h"

using namespace reel;
using distributed::ProcessGroup;
using FSDP = distributed::FullyShardedDataParallel;
using Phase = FSDP::Phase;

namespace {

ProcessGroup& world() { return ProcessGroup::world(); }

// y = act(x w^T + b), w (out, in): the transposed view makes backward read w through a view node.
class Dense final : public nn::Module {
 public:
  Dense(int64_t in, int64_t out, bool act, Generator& gen, DType dt, Device dev) : act_(act) {
    w = register_parameter("weight", (randn({out, in}, DType::f64, Device::cpu(), &gen) * 0.4).to(dt).to(dev));
    b = register_parameter("bias", (randn({out}, DType::f64, Device::cpu(), &gen) * 0.1).to(dt).to(dev));
  }
  std::string name() const override { return "Dense"; }
  Tensor w, b;

 protected:
  Tensor forward(const Tensor& x) override {
    const Tensor y = matmul(x, w.t()) + b;
    return act_ ? gelu(y) : y;
  }

 private:
  bool act_;
};

// 4 units: (n, 4, 6) -> 16 -> 16 -> 16 -> 3.
std::shared_ptr<nn::Sequential> make_model(DType dt, Device dev, uint64_t seed = 1) {
  Generator gen(seed);
  return std::make_shared<nn::Sequential>(std::vector<std::shared_ptr<nn::Module>>{
      std::make_shared<Dense>(6, 16, true, gen, dt, dev), std::make_shared<Dense>(16, 16, true, gen, dt, dev),
      std::make_shared<Dense>(16, 16, true, gen, dt, dev), std::make_shared<Dense>(16, 3, false, gen, dt, dev)});
}
std::vector<nn::Module*> units_of(nn::Sequential& m) {
  std::vector<nn::Module*> u;
  for (int64_t i = 0; i < m.size(); ++i) u.push_back(&m[i]);
  return u;
}

// Two Dense layers as one block: FSDP units either the blocks or the Dense leaves inside them.
class Pair final : public nn::Module {
 public:
  Pair(int64_t in, int64_t out, bool act, Generator& gen, DType dt, Device dev) {
    a = register_module("a", std::make_shared<Dense>(in, 16, true, gen, dt, dev));
    b = register_module("b", std::make_shared<Dense>(16, out, act, gen, dt, dev));
  }
  std::string name() const override { return "Pair"; }
  std::shared_ptr<Dense> a, b;

 protected:
  Tensor forward(const Tensor& x) override { return (*b)((*a)(x)); }
};
// 3 blocks of 2 leaves: (n, 4, 6) -> 16 -> 16 -> 16 -> 16 -> 16 -> 3.
std::shared_ptr<nn::Sequential> make_nested_model(DType dt, Device dev, uint64_t seed = 1) {
  Generator gen(seed);
  return std::make_shared<nn::Sequential>(std::vector<std::shared_ptr<nn::Module>>{
      std::make_shared<Pair>(6, 16, true, gen, dt, dev), std::make_shared<Pair>(16, 16, true, gen, dt, dev),
      std::make_shared<Pair>(16, 3, false, gen, dt, dev)});
}
std::vector<nn::Module*> leaves_of(nn::Sequential& m) {  // in forward order
  std::vector<nn::Module*> u;
  for (int64_t i = 0; i < m.size(); ++i) {
    Pair& p = static_cast<Pair&>(m[i]);
    u.push_back(p.a.get());
    u.push_back(p.b.get());
  }
  return u;
}
// fsdp.h's count of the all-gathers of one micro-batch (prefetch off, nothing kept): 2U - 1 + R - S - N,
// with `per_block` units in each of `blocks` blocks of a Sequential checkpointed by `policy` (R: the
// units of checkpointed runs, S: one per checkpointed run, the unit of its last op; N: `unread` units
// whose values no backward rule reads, none of them the last unit or a run's last: the first Dense,
// whose input needs no gradient, so its matmul saves no weight; a GPT's wpe, whose rule reads no table).
int64_t gathers_per_micro_batch(const autograd::CheckpointPolicy& policy, int64_t blocks, int64_t per_block,
                                int64_t root_units, int64_t unread) {
  int64_t replayed = 0, segments = 0;
  for (const auto& run : policy.plan(blocks))
    if (run.checkpointed) {
      replayed += (run.end - run.begin) * per_block;
      ++segments;
    }
  const int64_t U = blocks * per_block + root_units;
  return 2 * U - 1 + replayed - segments - unread;
}

struct Batch {
  Tensor x, y, mask;
};
// The same global batch of 32 on every rank; rank 0's half (rows 0..15) ignores every third token.
Batch global_batch(DType dt, Device dev) {
  Generator gen(7);
  Batch d;
  d.x = randn({32, 4, 6}, DType::f64, Device::cpu(), &gen).to(dt).to(dev);
  d.y = randn({32, 4, 3}, DType::f64, Device::cpu(), &gen).to(dt).to(dev);
  std::vector<double> m(32 * 4 * 3);
  for (int64_t s = 0; s < 32; ++s)
    for (int64_t t = 0; t < 4; ++t)
      for (int64_t c = 0; c < 3; ++c) m[(s * 4 + t) * 3 + c] = (s < 16 && (s * 4 + t) % 3 == 0) ? 0.0 : 1.0;
  d.mask = from_vector<double>(m, {32, 4, 3}).to(dt).to(dev);
  return d;
}
Batch rows(const Batch& d, int64_t begin, int64_t end) {
  return {d.x.slice(0, begin, end).clone(), d.y.slice(0, begin, end).clone(), d.mask.slice(0, begin, end).clone()};
}
int64_t tokens(const Batch& b) { return static_cast<int64_t>(std::llround(sum(b.mask).item())) / 3; }
Tensor loss_of(nn::Module& model, const Batch& b) {
  const Tensor diff = model(b.x) - b.y;
  return sum(diff * diff * b.mask) * (1.0 / 3);
}
// This rank's half of the global batch in micro-batches: rank 0 rows [0, 16) split as `split`, rank 1
// rows [16, 32) split in reverse order (the same number of micro-batches, of other sizes).
std::vector<Batch> my_window(const Batch& d, std::vector<int64_t> split) {
  if (world().rank() == 1) std::reverse(split.begin(), split.end());
  int64_t begin = world().rank() * 16;
  std::vector<Batch> out;
  for (int64_t n : split) {
    out.push_back(rows(d, begin, begin + n));
    begin += n;
  }
  return out;
}

// An optimizer that takes no step and keeps its parameters' gradients (the window's, after clipping).
class Capture final : public optim::Optimizer {
 public:
  explicit Capture(std::vector<Tensor> params) : Optimizer(std::move(params), 0.0) {}
  std::vector<Tensor> grads;

 private:
  void update(const std::vector<size_t>&) override {
    grads.clear();
    for (const Tensor& p : params_) grads.push_back(p.grad().clone());
  }
  std::vector<std::string> state_slots() const override { return {}; }
};

// The reference gradients of one window on one process, flattened per unit as `fsdp` lays them out and
// cut to this rank's chunk (the padding is zero).
// Under `amp` (a 16-bit dtype: mixed precision) the forwards run under autograd::Autocast, and
// `scaler`, when given, scales the loss.
std::vector<Tensor> reference_chunks(const FSDP& fsdp, nn::Sequential& ref, const std::vector<Batch>& window,
                                     std::optional<DType> amp = std::nullopt, optim::GradScaler* scaler = nullptr) {
  Capture cap(ref.parameters());
  optim::Accumulator acc(cap, {0.0, nullptr, false, nullptr, scaler});
  REQUIRE(acc.step(window, tokens, [&](const Batch& b) {
                autograd::Autocast autocast(amp);
                return loss_of(ref, b);
              }).stepped);
  std::vector<Tensor> out;
  for (const FSDP::Unit& k : fsdp.units()) {
    const Tensor full = zeros({k.layout.padded}, k.shard.dtype(), k.shard.device());
    for (size_t j = 0; j < k.params.size(); ++j) {
      const Tensor& g = cap.grads[k.params[j]];
      untracked::slice(full, 0, k.offset[j], k.offset[j] + g.numel()).copy_(g.reshape({g.numel()}));
    }
    out.push_back(untracked::slice(full, 0, k.layout.begin, k.layout.begin + k.layout.chunk).clone());
  }
  return out;
}

void check_rel(const Tensor& got, const Tensor& want, double rel) {
  const std::vector<double> g = reel::testing::values(got), w = reel::testing::values(want);
  REQUIRE(g.size() == w.size());
  double scale = 0, err = 0;
  for (size_t e = 0; e < g.size(); ++e) {
    scale = std::max(scale, std::fabs(w[e]));
    err = std::max(err, std::fabs(g[e] - w[e]));
  }
  CHECK(err <= rel * std::max(scale, 1e-300));
}

struct Config {
  int stage = 3;
  FSDP::ReduceMode reduce = FSDP::ReduceMode::PerMicroBatch;
  std::string checkpoint = "none";
  bool prefetch = true;
  std::vector<int64_t> split{16};
};
std::string describe(const Config& c) {
  std::string s = "stage " + std::to_string(c.stage) +
                  (c.reduce == FSDP::ReduceMode::PerWindow ? " per-window" : " per-micro-batch") + " checkpoint " +
                  c.checkpoint + (c.prefetch ? " prefetch" : "") + " micro-batches";
  for (int64_t n : c.split) s += " " + std::to_string(n);
  return s;
}

// FSDP's window gradients (this rank's chunks) equal one process's over the whole batch; then a few
// AdamW steps give one process's parameters.
void check_against_one_process(const Config& c, DType dt, Device dev, double rel) {
  CAPTURE(describe(c));
  CAPTURE(dev);
  const Batch d = global_batch(dt, dev);
  const std::vector<Batch> window = my_window(d, c.split);
  const std::vector<Batch> whole{rows(d, 0, 32)};
  const auto policy = autograd::CheckpointPolicy::parse(c.checkpoint);

  // Gradients of one window.
  {
    auto model = make_model(dt, dev, 1 + world().rank());  // rank 0's values win
    model->set_checkpoint(policy);
    FSDP fsdp(*model, units_of(*model), {c.stage, c.reduce, c.prefetch, {}, {}});
    auto ref = make_model(dt, dev);
    ref->set_checkpoint(policy);
    const std::vector<Tensor> want = reference_chunks(fsdp, *ref, whole);
    Capture cap(fsdp.shard_parameters());
    optim::Accumulator acc(cap, {0.0, nullptr, false, &fsdp});
    REQUIRE(acc.step(window, tokens, [&](const Batch& b) { return loss_of(*model, b); }).stepped);
    REQUIRE(cap.grads.size() == want.size());
    for (size_t u = 0; u < want.size(); ++u) {
      CAPTURE(u);
      check_rel(cap.grads[u], want[u], rel);
    }
  }
  // Three AdamW steps with clipping (the global norm of the shards).
  auto model = make_model(dt, dev, 1 + world().rank());
  model->set_checkpoint(policy);
  FSDP fsdp(*model, units_of(*model), {c.stage, c.reduce, c.prefetch, {}, {}});
  optim::AdamW opt(fsdp.shard_parameters(), 0.01);
  optim::Accumulator acc(opt, {0.5, nullptr, false, &fsdp});
  auto ref = make_model(dt, dev);
  optim::AdamW ref_opt(ref->parameters(), 0.01);
  optim::Accumulator ref_acc(ref_opt, {0.5, nullptr, false, nullptr});
  for (int s = 0; s < 3; ++s) {
    const optim::WindowResult r = acc.step(window, tokens, [&](const Batch& b) { return loss_of(*model, b); });
    const optim::WindowResult w = ref_acc.step(whole, tokens, [&](const Batch& b) { return loss_of(*ref, b); });
    CHECK(r.count == w.count);
    CHECK(std::fabs(r.loss - w.loss) <= rel * std::fabs(w.loss));
    CHECK(std::fabs(r.grad_norm - w.grad_norm) <= rel * w.grad_norm);
  }
  const nn::TensorDict got = fsdp.full_state_dict();
  for (const auto& named : ref->named_parameters()) {
    const auto& [name, p] = named;
    CAPTURE(named.first);
    check_rel(got.at(name), p, rel);
  }
  // Stage 2 keeps the whole parameters, updated after each step.
  if (c.stage == 2)
    for (const auto& [name, p] : model->named_parameters()) CHECK(reel::testing::bit_identical(p, got.at(name)));
}

// One file for both ranks: rank 0's process id names it.
std::string shared_path(const std::string& stem) {
  const int64_t pid = world().all_reduce(world().rank() == 0 ? static_cast<int64_t>(getpid()) : int64_t{0});
  return (std::filesystem::temp_directory_path() / (stem + "_" + std::to_string(pid) + ".safetensors")).string();
}

}  // namespace

TEST_CASE("fsdp: stage 2 and 3, with and without checkpointing and accumulation, equal one process (f64)") {
  REQUIRE(world().size() == 2);
  for (const int stage : {2, 3})
    for (const auto reduce : {FSDP::ReduceMode::PerMicroBatch, FSDP::ReduceMode::PerWindow})
      for (const std::string checkpoint : {"none", "sqrt", "every:1"})
        for (const std::vector<int64_t>& split : {std::vector<int64_t>{16}, std::vector<int64_t>{6, 10}})
          check_against_one_process({stage, reduce, checkpoint, true, split}, DType::f64, Device::cpu(), 1e-12);
  check_against_one_process({3, FSDP::ReduceMode::PerMicroBatch, "sqrt", false, {5, 5, 6}}, DType::f64, Device::cpu(),
                            1e-12);
}

TEST_CASE("fsdp: f32 stage 3 with checkpointing equals one process to 1e-6") {
  check_against_one_process({3, FSDP::ReduceMode::PerMicroBatch, "sqrt", true, {6, 10}}, DType::f32, Device::cpu(),
                            1e-6);
  check_against_one_process({3, FSDP::ReduceMode::PerWindow, "every:1", true, {6, 10}}, DType::f32, Device::cpu(),
                            1e-6);
}

TEST_CASE("fsdp on cuda:0, through NCCL (or staged): stage 3 and 2 equal one process") {
  if (!cuda_available()) return;
  check_against_one_process({3, FSDP::ReduceMode::PerMicroBatch, "sqrt", true, {6, 10}}, DType::f64, Device::cuda(0),
                            1e-12);
  check_against_one_process({2, FSDP::ReduceMode::PerWindow, "none", true, {16}}, DType::f64, Device::cuda(0), 1e-12);
}

TEST_CASE("fsdp: a small GPT, its blocks or its leaf layers as units (wte in the root), equals one process") {
  // f32, stage 3 with sqrt checkpointing over the blocks, two micro-batches per rank (one on one process).
  const nn::GPTConfig config{/*vocab_size*/ 11, /*block_size*/ 8, /*n_layer*/ 4, /*n_head*/ 2, /*n_embd*/ 16};
  const auto random_ids = [](uint64_t seed) {  // (8, 8) in [0, 11)
    std::vector<int64_t> v;
    for (double x : reel::testing::uniform_f64({64}, seed, 0.0, 1.0).to_vector<double>())
      v.push_back(std::min<int64_t>(10, static_cast<int64_t>(x * 11)));
    return from_vector(v, {8, 8});
  };
  const Tensor ids = random_ids(3), targets = random_ids(4);  // (B, T)
  struct Tokens {
    Tensor ids, targets;
  };
  const auto count = [](const Tokens& t) { return t.targets.numel(); };
  const auto slice = [&](int64_t b, int64_t e) {
    return Tokens{ids.slice(0, b, e).clone(), targets.slice(0, b, e).clone()};
  };
  const int r = world().rank();
  const std::vector<Tokens> mine{slice(4 * r, 4 * r + 1), slice(4 * r + 1, 4 * r + 4)};
  const std::vector<Tokens> whole{slice(0, 8)};
  const auto policy = autograd::CheckpointPolicy::parse("sqrt");

  for (const bool layers : {false, true}) {
    CAPTURE(layers);
    manual_seed(5);
    nn::GPT ref(config);
    ref.set_checkpoint(policy);
    manual_seed(5);
    nn::GPT gpt(config);
    gpt.set_checkpoint(policy);
    std::vector<nn::Module*> units;
    if (layers) {  // every leaf with parameters but wte, which the tied head reads outside its forward
      for (const auto& [name, m] : gpt.named_modules())
        if (m->children().empty() && !m->parameters().empty() && m != gpt.wte.get()) units.push_back(m);
    } else {
      for (int64_t i = 0; i < gpt.h->size(); ++i) units.push_back(&(*gpt.h)[i]);
    }
    FSDP fsdp(gpt, units, {3, FSDP::ReduceMode::PerMicroBatch, true, {}, {}});
    // Blocks: 4 and the root (wte (tied head), wpe, ln_f). Layers: wpe, 6 per block, ln_f and the root (wte).
    REQUIRE(fsdp.units().size() == (layers ? 27u : 5u));
    CHECK(fsdp.units().back().name.empty());
    CHECK(fsdp.units().back().params.size() == (layers ? 1u : 4u));

    Capture ref_cap(ref.parameters());
    optim::Accumulator ref_acc(ref_cap);
    ref_acc.step(whole, count, [&](const Tokens& t) { return cross_entropy(ref(t.ids), t.targets, -100, "sum"); });
    Capture cap(fsdp.shard_parameters());
    optim::Accumulator acc(cap, {0.0, nullptr, false, &fsdp});
    acc.step(mine, count, [&](const Tokens& t) { return cross_entropy(gpt(t.ids), t.targets, -100, "sum"); });
    // Per block 1 or 6 units; the units outside the blocks: the root, or wpe, ln_f and the root. With
    // layer units wpe is not gathered in backward (the embedding's rule reads no table); the root
    // holds wte, which the tied head's rule reads.
    CHECK(fsdp.all_gathers() == 2 * gathers_per_micro_batch(policy, 4, layers ? 6 : 1, layers ? 3 : 1, layers ? 1 : 0));
    for (size_t u = 0; u < fsdp.units().size(); ++u) {
      const FSDP::Unit& k = fsdp.units()[u];
      CAPTURE(k.name);
      const Tensor full = zeros({k.layout.padded}, DType::f32);
      for (size_t j = 0; j < k.params.size(); ++j) {
        const Tensor& g = ref_cap.grads[k.params[j]];
        untracked::slice(full, 0, k.offset[j], k.offset[j] + g.numel()).copy_(g.reshape({g.numel()}));
      }
      check_rel(cap.grads[u], untracked::slice(full, 0, k.layout.begin, k.layout.begin + k.layout.chunk), 1e-5);
    }
  }
}

TEST_CASE("fsdp: a Linear's gathered weight is released inside its rule, before its weight gradient exists") {
  // Layer units of a small GPT, no prefetch: each Linear's rule releases W once dX is made
  // (BackwardCtx::release_saved), so the unit's storage is gone when its flat gradient is installed.
  const nn::GPTConfig config{/*vocab_size*/ 11, /*block_size*/ 8, /*n_layer*/ 2, /*n_head*/ 2, /*n_embd*/ 16};
  manual_seed(5);
  nn::GPT gpt(config);
  std::vector<nn::Module*> units;
  std::vector<Tensor> weights;  // the blocks' Linear weights
  for (const auto& [name, m] : gpt.named_modules())
    if (m->children().empty() && !m->parameters().empty() && m != gpt.wte.get()) {
      units.push_back(m);
      if (m->name() == "Linear") weights.push_back(m->named_parameters().front().second);
    }
  REQUIRE(weights.size() == 8u);
  FSDP fsdp(gpt, units, {3, FSDP::ReduceMode::PerMicroBatch, false, {}, {}});
  struct Watch final : autograd::BackwardObserver {
    std::vector<Tensor> weights;
    int installed = 0, released_first = 0, released_saves = 0;
    void before_leaf_grad(const AutogradMeta& leaf) override {  // after FSDP's: the .grad is installed
      for (const Tensor& w : weights)
        if (&leaf == w.autograd_meta().get()) {
          ++installed;
          released_first += w.storage()->released();
        }
    }
    void saved_released(const autograd::NodeEvent&, const Tensor& value) override {
      for (const Tensor& w : weights) released_saves += value.storage() == w.storage();
    }
  };
  auto watch = std::make_shared<Watch>();
  watch->weights = weights;
  autograd::ObserveBackward observe(watch);
  const Tensor ids = from_vector<int64_t>(std::vector<int64_t>(16, 3), {2, 8});
  Capture cap(fsdp.shard_parameters());
  optim::Accumulator acc(cap, {0.0, nullptr, false, &fsdp});
  const std::vector<Tensor> batches{ids};
  acc.step(batches, [](const Tensor& t) { return t.numel(); },
           [&](const Tensor& t) { return cross_entropy(gpt(t), t, -100, "sum"); });
  CHECK(watch->installed == 8);
  CHECK(watch->released_first == 8);   // W gone when its gradient buffer comes
  CHECK(watch->released_saves == 8);   // each released by its own rule
}

TEST_CASE("fsdp: ZeRO-3 hears begin_backward, the rules, replays and releases, then end_backward, per micro-batch") {
  // Two micro-batches per window (PerWindow: the second adds to the first's gradients), every layer
  // checkpointed: each backward is one begin ... end, and FSDP has released every unit by its end.
  const Batch d = global_batch(DType::f64, Device::cpu());
  const std::vector<Batch> window = my_window(d, {6, 10});
  auto model = make_model(DType::f64, Device::cpu(), 1 + world().rank());
  model->set_checkpoint(autograd::CheckpointPolicy::parse("every:1"));
  FSDP fsdp(*model, units_of(*model), {3, FSDP::ReduceMode::PerWindow, false, {}, {}});
  struct Watch final : autograd::BackwardObserver {  // added after FSDP's: told after it, ends before it
    const FSDP* fsdp = nullptr;
    std::vector<std::string> lines;
    void begin_backward(const autograd::BackwardEvent& e) override {
      lines.push_back(e.accumulates ? "begin accumulates" : "begin fresh");
    }
    void before_node(const autograd::NodeEvent& e) override {
      if (e.pass == autograd::Pass::Backward) lines.push_back("rule");
    }
    void before_replay(const autograd::ReplayEvent&) override { lines.push_back("replay"); }
    void saved_released(const autograd::NodeEvent&, const Tensor&) override { lines.push_back("released"); }
    void end_backward(const autograd::BackwardEvent&, bool threw) override {
      int gathered = 0;
      for (const FSDP::Unit& k : fsdp->units()) gathered += !k.flat.storage()->released();
      lines.push_back(std::string(threw ? "end threw, " : "end ok, ") + std::to_string(gathered) + " gathered");
    }
  };
  auto watch = std::make_shared<Watch>();
  watch->fsdp = &fsdp;
  autograd::ObserveBackward observe(watch);
  Capture cap(fsdp.shard_parameters());
  optim::Accumulator acc(cap, {0.0, nullptr, false, &fsdp});
  REQUIRE(acc.step(window, tokens, [&](const Batch& b) { return loss_of(*model, b); }).stepped);
  const std::vector<std::string>& lines = watch->lines;
  std::vector<size_t> begins, ends;
  for (size_t i = 0; i < lines.size(); ++i) {
    if (lines[i].rfind("begin", 0) == 0) begins.push_back(i);
    if (lines[i].rfind("end", 0) == 0) ends.push_back(i);
  }
  REQUIRE(begins.size() == 2);
  REQUIRE(ends.size() == 2);
  CHECK(begins[0] == 0);
  CHECK(ends[1] == lines.size() - 1);
  CHECK(lines[begins[0]] == "begin fresh");
  CHECK(lines[begins[1]] == "begin accumulates");  // the first micro-batch's gradients wait in the units
  for (int b = 0; b < 2; ++b) {
    CAPTURE(b);
    CHECK(begins[b] < ends[b]);
    if (b == 0) CHECK(ends[0] < begins[1]);
    CHECK(lines[ends[b]] == "end ok, 0 gathered");
    CHECK(lines[begins[b] + 1] == "rule");  // the loss's own rule comes first
    const auto from = lines.begin() + static_cast<std::ptrdiff_t>(begins[b]);
    const auto to = lines.begin() + static_cast<std::ptrdiff_t>(ends[b]);
    CHECK(std::count(from, to, "replay") == 3);  // every Dense its own segment but the last (kept)
    const auto first_release = std::find(from, to, "released");
    CHECK(first_release != to);                      // matmul lets W go after dX
    CHECK(std::find(from, first_release, "rule") != first_release);  // inside a rule
  }
}

TEST_CASE("fsdp: leaf layers as units give one process's gradients (f64 1e-12); all-gathers as fsdp.h counts") {
  // Units smaller than the blocks that are checkpointed: a replayed block gathers its leaves one at a
  // time, releases each after its last replayed op (but the block's last), and backward gathers them
  // again. The gradients must not notice.
  const Batch d = global_batch(DType::f64, Device::cpu());
  const std::vector<Batch> whole{rows(d, 0, 32)};
  const std::vector<Batch> window = my_window(d, {6, 10});
  const int64_t M = 2;
  for (const std::string checkpoint : {"none", "sqrt", "every:1"})
    for (const auto reduce : {FSDP::ReduceMode::PerMicroBatch, FSDP::ReduceMode::PerWindow})
      for (const int prefetch : {0, 1, 2})  // none, ahead of use, after the gradients
        for (const bool layers : {true, false}) {
          CAPTURE(checkpoint);
          CAPTURE(prefetch);
          CAPTURE(layers);
          CAPTURE(reduce == FSDP::ReduceMode::PerWindow);
          const auto policy = autograd::CheckpointPolicy::parse(checkpoint);
          auto model = make_nested_model(DType::f64, Device::cpu(), 1 + world().rank());  // rank 0's values win
          model->set_checkpoint(policy);
          FSDP::Options options{3, reduce, prefetch != 0, {}, {}};
          options.prefetch_after_grads = prefetch == 2;
          FSDP fsdp(*model, layers ? leaves_of(*model) : units_of(*model), options);
          REQUIRE(fsdp.units().size() == (layers ? 6u : 3u));
          auto ref = make_nested_model(DType::f64, Device::cpu());
          ref->set_checkpoint(policy);
          const std::vector<Tensor> want = reference_chunks(fsdp, *ref, whole);
          Capture cap(fsdp.shard_parameters());
          optim::Accumulator acc(cap, {0.0, nullptr, false, &fsdp});
          REQUIRE(acc.step(window, tokens, [&](const Batch& b) { return loss_of(*model, b); }).stepped);
          for (size_t u = 0; u < want.size(); ++u) {
            CAPTURE(u);
            check_rel(cap.grads[u], want[u], 1e-12);
          }
          // The first leaf's weight is saved by no rule (its input needs no gradient); a block unit
          // holds the second leaf too, whose weight is.
          const int64_t per_micro_batch = gathers_per_micro_batch(policy, 3, layers ? 2 : 1, 0, layers ? 1 : 0);
          CHECK(fsdp.all_gathers() == M * per_micro_batch);
          CHECK(fsdp.all_gathers(Phase::Forward) == M * static_cast<int64_t>(fsdp.units().size()));
          if (!prefetch) {
            int64_t replayed = 0;
            for (const auto& run : policy.plan(3))
              if (run.checkpointed) replayed += (run.end - run.begin) * (layers ? 2 : 1);
            CHECK(fsdp.all_gathers(Phase::Replay) == M * replayed);
          }
        }
}

TEST_CASE("fsdp: a replayed segment re-gathers its freed parameters; gradients bit-identical to unsharded") {
  // Both ranks train on the SAME 16 rows: each rank's gradient is exactly half the one-process gradient
  // (the loss scale halves, a power of two), so their sum is bit for bit the unsharded one.
  const Batch d = global_batch(DType::f64, Device::cpu());
  const std::vector<Batch> window{rows(d, 16, 32)};
  for (const bool prefetch : {false, true}) {
    CAPTURE(prefetch);
    auto model = make_model(DType::f64, Device::cpu());
    model->set_checkpoint(autograd::CheckpointPolicy::parse("every:1"));  // units 0..2 replayed
    FSDP fsdp(*model, units_of(*model), {3, FSDP::ReduceMode::PerMicroBatch, prefetch, {}, {}});
    auto ref = make_model(DType::f64, Device::cpu());
    ref->set_checkpoint(autograd::CheckpointPolicy::parse("every:1"));
    const std::vector<Tensor> want = reference_chunks(fsdp, *ref, window);
    Capture cap(fsdp.shard_parameters());
    optim::Accumulator acc(cap, {0.0, nullptr, false, &fsdp});
    acc.step(window, tokens, [&](const Batch& b) {
      const Tensor l = loss_of(*model, b);
      // After forward only the last unit is whole: the others' storages are released.
      for (size_t u = 0; u + 1 < fsdp.units().size(); ++u) {
        CHECK(!fsdp.units()[u].gathered);
        CHECK(fsdp.units()[u].flat.storage()->released());
      }
      CHECK(fsdp.units().back().gathered);
      return l;
    });
    // Without prefetch the replays gather; with it, backward has gathered them ahead.
    CHECK(fsdp.all_gathers(prefetch ? Phase::Prefetch : Phase::Replay) > 0);
    for (size_t u = 0; u < want.size(); ++u) {
      CAPTURE(u);
      CHECK(reel::testing::bit_identical(cap.grads[u], want[u]));
    }
  }
}

TEST_CASE("fsdp: all-gathers per window = micro-batches x (2U - 1 + R - S - N); reduce-scatters by mode") {
  const Batch d = global_batch(DType::f64, Device::cpu());
  const std::vector<Batch> window = my_window(d, {6, 10});
  const int64_t M = 2;
  for (const std::string checkpoint : {"none", "sqrt"})
    for (const bool prefetch : {false, true})
      for (const auto reduce : {FSDP::ReduceMode::PerMicroBatch, FSDP::ReduceMode::PerWindow}) {
        CAPTURE(checkpoint);
        CAPTURE(prefetch);
        auto model = make_model(DType::f64, Device::cpu());
        model->set_checkpoint(autograd::CheckpointPolicy::parse(checkpoint));
        FSDP fsdp(*model, units_of(*model), {3, reduce, prefetch, {}, {}});
        const int64_t U = static_cast<int64_t>(fsdp.units().size());
        REQUIRE(U == 4);
        optim::SGD opt(fsdp.shard_parameters(), 0.01);
        optim::Accumulator acc(opt, {0.0, nullptr, false, &fsdp});
        const int64_t issued = world().issued(distributed::Collective::AllGather);
        for (int s = 0; s < 2; ++s) acc.step(window, tokens, [&](const Batch& b) { return loss_of(*model, b); });
        const int64_t windows = 2;
        const auto policy = autograd::CheckpointPolicy::parse(checkpoint);
        CHECK(fsdp.all_gathers() == windows * M * gathers_per_micro_batch(policy, U, 1, 0, 1));
        CHECK(world().issued(distributed::Collective::AllGather) - issued == fsdp.all_gathers());
        CHECK(fsdp.all_gathers(Phase::Forward) == windows * M * U);
        CHECK(fsdp.all_gathers(Phase::AfterStep) == 0);
        // sqrt over 4 units checkpoints units 0 and 1 (one segment): replayed, so gathered for the
        // replay; unit 0 is released after it and not gathered in backward (no rule reads its weight:
        // its input needs no gradient), unit 1 (the segment's last op reads it, and so does its rule)
        // stays gathered. Backward gathers the units a rule reads (U - 1) but the last and unit 1.
        const int64_t replayed = checkpoint == "sqrt" ? 2 : 0, segments = checkpoint == "sqrt" ? 1 : 0;
        if (!prefetch) {
          CHECK(fsdp.all_gathers(Phase::Replay) == windows * M * replayed);
          CHECK(fsdp.all_gathers(Phase::Backward) == windows * M * (U - 1 - 1 - segments));
          CHECK(fsdp.all_gathers(Phase::Prefetch) == 0);
        } else {
          CHECK(fsdp.all_gathers(Phase::Prefetch) > 0);
        }
        CHECK(fsdp.reduce_scatters() == windows * (reduce == FSDP::ReduceMode::PerWindow ? 1 : M) * U);
      }
  // Stage 2: one all-gather per unit per step, after it; a kept unit under stage 3 is gathered there too.
  auto model = make_model(DType::f64, Device::cpu());
  FSDP two(*model, units_of(*model), {2, FSDP::ReduceMode::PerWindow, true, {}, {}});
  optim::SGD opt(two.shard_parameters(), 0.01);
  optim::Accumulator acc(opt, {0.0, nullptr, false, &two});
  acc.step(window, tokens, [&](const Batch& b) { return loss_of(*model, b); });
  CHECK(two.all_gathers() == 4);
  CHECK(two.all_gathers(Phase::AfterStep) == 4);
  auto kept_model = make_model(DType::f64, Device::cpu());
  FSDP kept(*kept_model, units_of(*kept_model), {3, FSDP::ReduceMode::PerMicroBatch, false, {&(*kept_model)[1]}, {}});
  optim::SGD kept_opt(kept.shard_parameters(), 0.01);
  optim::Accumulator kept_acc(kept_opt, {0.0, nullptr, false, &kept});
  kept_acc.step(window, tokens, [&](const Batch& b) { return loss_of(*kept_model, b); });
  CHECK(kept.all_gathers() == M * (2 * (4 - 1) - 1 - 1) + 1);  // M (2 (U - K) - 1 - N) + K
}

TEST_CASE("fsdp: under a Profiler every all-gather and reduce-scatter is a span on the communication track") {
  const Batch d = global_batch(DType::f64, Device::cpu());
  const std::vector<Batch> window = my_window(d, {6, 10});
  auto model = make_model(DType::f64, Device::cpu());
  FSDP fsdp(*model, units_of(*model), {3, FSDP::ReduceMode::PerMicroBatch, true, {}, {}});
  optim::SGD opt(fsdp.shard_parameters(), 0.01);
  optim::Accumulator acc(opt, {0.0, nullptr, false, &fsdp});
  Profiler prof;
  acc.step(window, tokens, [&](const Batch& b) { return loss_of(*model, b); });
  prof.stop();
  int64_t gathers = 0, prefetches = 0, scatters = 0;
  for (const profile::SpanRecord& s : prof.spans()) {
    if (s.track < profile::kInFlightTrack) continue;
    CHECK(prof.track_name(s.track).rfind("in flight, lane ", 0) == 0);
    CHECK(s.dur_ns >= 0);
    gathers += s.name.rfind("fsdp: all_gather unit ", 0) == 0;
    prefetches += s.name.find("(prefetch)") != std::string::npos;
    scatters += s.name.rfind("fsdp: reduce_scatter unit ", 0) == 0;
  }
  CHECK(gathers == fsdp.all_gathers());
  CHECK(prefetches == fsdp.all_gathers(Phase::Prefetch));
  CHECK(prefetches > 0);
  CHECK(scatters == fsdp.reduce_scatters());
}

TEST_CASE("fsdp: gather_all keeps every unit whole: evaluation after training needs no collective") {
  const Batch d = global_batch(DType::f64, Device::cpu());
  const std::vector<Batch> window = my_window(d, {6, 10});
  auto model = make_model(DType::f64, Device::cpu());
  FSDP fsdp(*model, units_of(*model), {3, FSDP::ReduceMode::PerMicroBatch, false, {}, {}});
  optim::SGD opt(fsdp.shard_parameters(), 0.01);
  optim::Accumulator acc(opt, {0.0, nullptr, false, &fsdp});
  acc.step(window, tokens, [&](const Batch& b) { return loss_of(*model, b); });
  const nn::TensorDict whole = fsdp.full_state_dict();
  fsdp.gather_all();
  for (const FSDP::Unit& u : fsdp.units()) CHECK(u.gathered);
  const int64_t issued = world().issued(distributed::Collective::AllGather);
  {
    autograd::NoGrad no_grad;
    (void)loss_of(*model, window.front());  // forward: no gather, no release
  }
  CHECK(world().issued(distributed::Collective::AllGather) == issued);
  for (const FSDP::Unit& u : fsdp.units()) CHECK(u.gathered);
  for (const auto& named : model->named_parameters()) reel::testing::check_close(named.second, whole.at(named.first), 0, 0);
}

TEST_CASE("fsdp: stage 3 per-rank parameter + gradient + optimizer bytes are at most 0.55x one process's") {
  const Batch d = global_batch(DType::f64, Device::cpu());
  const auto model_bytes = [] {
    const MemoryStats m = memory_stats(Device::cpu());
    return m[Category::Parameter].current_bytes + m[Category::Gradient].current_bytes +
           m[Category::OptimizerState].current_bytes;
  };
  int64_t single = 0;
  {
    const int64_t before = model_bytes();
    auto ref = make_model(DType::f64, Device::cpu());
    optim::AdamW opt(ref->parameters(), 0.01);
    optim::Accumulator acc(opt);
    acc.step(std::vector<Batch>{rows(d, 0, 32)}, tokens, [&](const Batch& b) { return loss_of(*ref, b); });
    single = model_bytes() - before;
  }
  for (const auto reduce : {FSDP::ReduceMode::PerMicroBatch, FSDP::ReduceMode::PerWindow}) {
    const int64_t before = model_bytes();
    auto model = make_model(DType::f64, Device::cpu());
    FSDP fsdp(*model, units_of(*model), {3, reduce, true, {}, {}});
    optim::AdamW opt(fsdp.shard_parameters(), 0.01);
    optim::Accumulator acc(opt, {0.0, nullptr, false, &fsdp});
    acc.step(my_window(d, {6, 10}), tokens, [&](const Batch& b) { return loss_of(*model, b); });
    const int64_t sharded = model_bytes() - before;
    CAPTURE(single);
    CAPTURE(sharded);
    // parameters, gradients and two AdamW moments of 707 f64 elements, and the optimizer's step
    // count (one i64) and rate (one f64: no schedule) on the device (optim/optimizer.h, StepControl)
    CHECK(single == 4 * 707 * 8 + 16);
    CHECK(sharded <= 0.55 * static_cast<double>(single));
  }
}

TEST_CASE("fsdp: a released parameter is refused by kernels, naming it") {
  auto model = make_model(DType::f64, Device::cpu());
  FSDP fsdp(*model, units_of(*model), {3, FSDP::ReduceMode::PerMicroBatch, true, {}, {}});
  const Tensor w = static_cast<Dense&>((*model)[0]).w;
  CHECK(w.storage()->released());
  CHECK(w.storage()->bytes() > 0);
  bool threw = false;
  try {
    autograd::NoGrad no_grad;
    (void)(w * 2.0);
  } catch (const Error& e) {
    threw = true;
    CHECK(std::string(e.what()).find("(16, 6)") != std::string::npos);
    CHECK(std::string(e.what()).find("released its storage") != std::string::npos);
  }
  CHECK(threw);
}

TEST_CASE("fsdp: a sharded save loads into one process bit for bit, and a one-process file into a sharded run") {
  const Batch d = global_batch(DType::f64, Device::cpu());
  const std::string path = shared_path("reel_fsdp");
  for (const int stage : {2, 3}) {
    CAPTURE(stage);
    auto model = make_model(DType::f64, Device::cpu());
    FSDP fsdp(*model, units_of(*model), {stage, FSDP::ReduceMode::PerMicroBatch, true, {}, {}});
    optim::AdamW opt(fsdp.shard_parameters(), 0.01);
    optim::Accumulator acc(opt, {0.0, nullptr, false, &fsdp});
    for (int s = 0; s < 2; ++s)
      acc.step(my_window(d, {16}), tokens, [&](const Batch& b) { return loss_of(*model, b); });
    const nn::TensorDict trained = fsdp.full_state_dict();
    fsdp.save(path);
    // One process (each rank alone) loads it bit for bit.
    auto plain = make_model(DType::f64, Device::cpu(), 99);
    nn::load(*plain, path);
    for (const auto& named : plain->named_parameters()) {
      const auto& [name, p] = named;
      CAPTURE(named.first);
      CHECK(reel::testing::bit_identical(p, trained.at(name)));
    }
    world().barrier();  // every rank has read it before rank 0 writes the next
    // And back: a one-process file (rank 0's plain model, other values) into the sharded run.
    auto other = make_model(DType::f64, Device::cpu(), 42);
    if (world().rank() == 0) nn::save(*other, path);
    world().barrier();
    fsdp.load(path);
    const nn::TensorDict loaded = fsdp.full_state_dict();
    for (const auto& named : other->named_parameters()) {
      const auto& [name, p] = named;
      CAPTURE(named.first);
      CHECK(reel::testing::bit_identical(loaded.at(name), p));
    }
    if (stage == 2)
      for (const auto& [name, p] : model->named_parameters()) CHECK(reel::testing::bit_identical(p, loaded.at(name)));
    // The loaded run trains on (a fresh optimizer, as the file holds no optimizer state), as the plain
    // model does on one process.
    optim::AdamW fresh(fsdp.shard_parameters(), 0.01);
    optim::Accumulator fresh_acc(fresh, {0.0, nullptr, false, &fsdp});
    optim::AdamW other_opt(other->parameters(), 0.01);
    optim::Accumulator other_acc(other_opt);
    fresh_acc.step(my_window(d, {16}), tokens, [&](const Batch& b) { return loss_of(*model, b); });
    other_acc.step(std::vector<Batch>{rows(d, 0, 32)}, tokens, [&](const Batch& b) { return loss_of(*other, b); });
    const nn::TensorDict after = fsdp.full_state_dict();
    for (const auto& [name, p] : other->named_parameters()) check_rel(after.at(name), p, 1e-12);
    // A dict that does not fit is refused, naming the key, and changes nothing.
    nn::TensorDict bad = after;
    bad.erase("0.bias");
    bad["extra"] = zeros({1}, DType::f64);
    bool threw = false;
    try {
      fsdp.load_full_state_dict(bad);
    } catch (const Error& e) {
      threw = true;
      CHECK(std::string(e.what()).find("missing '0.bias'") != std::string::npos);
      CHECK(std::string(e.what()).find("unexpected 'extra'") != std::string::npos);
    }
    CHECK(threw);
    world().barrier();
  }
  if (world().rank() == 0) std::filesystem::remove(path);
}

namespace {
// One process's model in the 16-bit dtype (Module::to), each parameter with an f32 .grad buffer: what
// a mixed-precision FSDP rank computes, forward (the 16-bit parameters, also where an op reads them
// without a cast: the biases added outside the GEMM) and backward (16-bit rules, f32 sums).
std::shared_ptr<nn::Sequential> low_model(DType low, Device dev = Device::cpu()) {
  auto m = make_model(DType::f32, dev);
  m->to(low);
  for (const Tensor& p : m->parameters()) p.set_grad(zeros(p.shape(), DType::f32, dev));
  return m;
}
}  // namespace

namespace {
// Mixed precision FSDP's window gradients (f32 shards) against one process's 16-bit model with f32
// .grad buffers, both ranks' micro-batches as its own: with one micro-batch per rank, each rank's
// f32 gradient is the reference's micro-batch gradient and the reduce-scatter's sum of the two is
// the reference's second accumulation, bit for bit; with two per rank the sums go in another order.
void check_mixed(DType low, int stage, const std::string& checkpoint, bool prefetch, std::vector<int64_t> split,
                 Device dev) {
  CAPTURE(low);
  CAPTURE(stage);
  CAPTURE(checkpoint);
  CAPTURE(prefetch);
  CAPTURE(split.size());
  CAPTURE(dev);
  const Batch d = global_batch(DType::f32, dev);
  const auto policy = autograd::CheckpointPolicy::parse(checkpoint);
  auto model = make_model(DType::f32, dev, 1 + world().rank());  // rank 0's values win
  model->set_checkpoint(policy);
  FSDP fsdp(*model, units_of(*model), {stage, FSDP::ReduceMode::PerMicroBatch, prefetch, {}, low});
  for (const auto& [name, p] : model->named_parameters()) CHECK(p.dtype() == low);
  for (const Tensor& s : fsdp.shard_parameters()) CHECK(s.dtype() == DType::f32);
  auto ref = low_model(low, dev);
  ref->set_checkpoint(policy);
  std::vector<Batch> ref_window;  // rank 0's micro-batches, then rank 1's
  for (int r = 0; r < 2; ++r) {
    std::vector<int64_t> parts = split;
    if (r == 1) std::reverse(parts.begin(), parts.end());
    int64_t begin = 16 * r;
    for (int64_t n : parts) {
      ref_window.push_back(rows(d, begin, begin + n));
      begin += n;
    }
  }
  const std::vector<Tensor> want = reference_chunks(fsdp, *ref, ref_window, low);
  Capture cap(fsdp.shard_parameters());
  optim::Accumulator acc(cap, {0.0, nullptr, false, &fsdp});
  REQUIRE(acc.step(my_window(d, split), tokens, [&](const Batch& b) {
                autograd::Autocast amp(low);
                return loss_of(*model, b);
              }).stepped);
  for (size_t u = 0; u < want.size(); ++u) {
    CAPTURE(u);
    CHECK(cap.grads[u].dtype() == DType::f32);
    if (split.size() == 1) CHECK(reel::testing::bit_identical(cap.grads[u], want[u]));
    else check_rel(cap.grads[u], want[u], 1e-6);
  }
}
}  // namespace

TEST_CASE("fsdp mixed precision: 16-bit gathers, f32 gradients and masters equal one process's 16-bit model") {
  for (const DType low : {DType::bf16, DType::f16})
    for (const int stage : {2, 3})
      for (const std::string checkpoint : {"none", "sqrt"})
        for (const bool prefetch : {false, true})
          for (const std::vector<int64_t>& split : {std::vector<int64_t>{16}, std::vector<int64_t>{6, 10}})
            check_mixed(low, stage, checkpoint, prefetch, split, Device::cpu());
}

TEST_CASE("fsdp: f32 parameters under autocast: the GEMMs' recast weights are gathered for their rules") {
  // The bf16 copies of the weights are not saved (the slots cast the parameter again in backward,
  // autograd/ops/cast.h), so the rules read the released f32 units: FSDP must gather them.
  const Batch d = global_batch(DType::f32, Device::cpu());
  const std::vector<Batch> whole{rows(d, 0, 32)};
  for (const std::string checkpoint : {"none", "sqrt"}) {
    CAPTURE(checkpoint);
    const auto policy = autograd::CheckpointPolicy::parse(checkpoint);
    auto model = make_model(DType::f32, Device::cpu(), 1 + world().rank());
    model->set_checkpoint(policy);
    FSDP fsdp(*model, units_of(*model), {3, FSDP::ReduceMode::PerMicroBatch, false, {}, {}});
    auto ref = make_model(DType::f32, Device::cpu());
    ref->set_checkpoint(policy);
    const std::vector<Tensor> want = reference_chunks(fsdp, *ref, whole, DType::bf16);
    Capture cap(fsdp.shard_parameters());
    optim::Accumulator acc(cap, {0.0, nullptr, false, &fsdp});
    REQUIRE(acc.step(my_window(d, {16}), tokens, [&](const Batch& b) {
                  autograd::Autocast amp(DType::bf16);
                  return loss_of(*model, b);
                }).stepped);
    // bf16 products summed over other rows on each rank: within bf16's relative precision.
    for (size_t u = 0; u < want.size(); ++u) {
      CAPTURE(u);
      check_rel(cap.grads[u], want[u], 2e-2);
    }
  }
}

TEST_CASE("fsdp mixed precision on cuda:0, through NCCL (or staged): bf16 gathers equal one process") {
  if (!cuda_available()) return;
  check_mixed(DType::bf16, 3, "sqrt", true, {16}, Device::cuda(0));
  check_mixed(DType::bf16, 2, "none", true, {6, 10}, Device::cuda(0));
}

TEST_CASE("fsdp mixed precision: AdamW steps the f32 masters as one process with f32 masters and a bf16 copy") {
  const Batch d = global_batch(DType::f32, Device::cpu());
  const std::vector<Batch> halves{rows(d, 0, 16), rows(d, 16, 32)};
  const int64_t count = tokens(halves[0]) + tokens(halves[1]);
  for (const int stage : {2, 3}) {
    CAPTURE(stage);
    auto model = make_model(DType::f32, Device::cpu());
    model->set_checkpoint(autograd::CheckpointPolicy::parse("every:1"));
    FSDP fsdp(*model, units_of(*model), {stage, FSDP::ReduceMode::PerMicroBatch, true, {}, DType::bf16});
    optim::AdamW opt(fsdp.shard_parameters(), 0.01);
    optim::Accumulator acc(opt, {0.0, nullptr, false, &fsdp});
    // The reference: f32 masters stepped by AdamW from the f32 gradients of a bf16 copy.
    auto masters = make_model(DType::f32, Device::cpu());
    auto copy = low_model(DType::bf16);
    copy->set_checkpoint(autograd::CheckpointPolicy::parse("every:1"));
    const std::vector<Tensor> master_params = masters->parameters(), copy_params = copy->parameters();
    optim::AdamW ref_opt(master_params, 0.01);
    for (int step = 0; step < 3; ++step) {
      acc.step(my_window(d, {16}), tokens, [&](const Batch& b) {
        autograd::Autocast amp(DType::bf16);
        return loss_of(*model, b);
      });
      {
        autograd::NoGrad no_grad;
        for (size_t i = 0; i < copy_params.size(); ++i) copy_params[i].copy_(master_params[i]);
      }
      autograd::zero_grad(copy_params);
      for (const Batch& b : halves) {
        Tensor l;
        {
          autograd::Autocast amp(DType::bf16);
          l = loss_of(*copy, b);
        }
        autograd::backward(l, 1.0 / static_cast<double>(count));
      }
      for (size_t i = 0; i < copy_params.size(); ++i) master_params[i].set_grad(copy_params[i].grad());
      ref_opt.step();
    }
    const nn::TensorDict got = fsdp.full_state_dict();  // the f32 masters
    for (const auto& named : masters->named_parameters()) {
      CAPTURE(named.first);
      CHECK(got.at(named.first).dtype() == DType::f32);
      CHECK(reel::testing::bit_identical(got.at(named.first), named.second));
    }
    // Stage 2 keeps the whole bf16 parameters: the masters rounded.
    if (stage == 2)
      for (const auto& [name, p] : model->named_parameters())
        CHECK(reel::testing::bit_identical(p, got.at(name).to(DType::bf16)));
    // gather_all: the model holds the f32 masters again, whole, for evaluation and nn::save.
    fsdp.gather_all();
    for (const auto& [name, p] : model->named_parameters()) {
      CHECK(p.dtype() == DType::f32);
      CHECK(reel::testing::bit_identical(p, got.at(name)));
    }
  }
}

TEST_CASE("fsdp mixed precision: stage 3 bf16 halves the gathered parameter bytes; bad param_dtype refused") {
  const Batch d = global_batch(DType::f32, Device::cpu());
  const auto peak_parameter = [&](std::optional<DType> low) {
    auto model = make_model(DType::f32, Device::cpu());
    FSDP fsdp(*model, units_of(*model), {3, FSDP::ReduceMode::PerMicroBatch, false, {}, low});
    optim::SGD opt(fsdp.shard_parameters(), 0.01);
    optim::Accumulator acc(opt, {0.0, nullptr, false, &fsdp});
    reset_peak_memory(Device::cpu());
    const int64_t base = memory_stats(Device::cpu())[Category::Parameter].current_bytes;
    acc.step(my_window(d, {16}), tokens, [&](const Batch& b) {
      autograd::Autocast amp(low);
      return loss_of(*model, b);
    });
    return memory_stats(Device::cpu())[Category::Parameter].peak_bytes - base;
  };
  const int64_t f32 = peak_parameter(std::nullopt), bf16 = peak_parameter(DType::bf16);
  CAPTURE(f32);
  CAPTURE(bf16);
  // Gathered units in bf16 (the last unit's 16-bit flat stays through backward), plus a 16-bit chunk.
  CHECK(bf16 < f32);
  CHECK(bf16 * 2 <= f32 + 64);

  auto f64_model = make_model(DType::f64, Device::cpu());
  bool threw = false;
  try {
    FSDP f(*f64_model, units_of(*f64_model), {3, FSDP::ReduceMode::PerMicroBatch, true, {}, DType::bf16});
  } catch (const Error& e) {
    threw = true;
    CHECK(std::string(e.what()).find("gathers f32 parameters") != std::string::npos);
  }
  CHECK(threw);
}

TEST_CASE("fsdp mixed precision f16 with the loss scaler: an overflow skips the window on both ranks") {
  const Batch d = global_batch(DType::f32, Device::cpu());
  for (const int stage : {2, 3}) {
    CAPTURE(stage);
    auto model = make_model(DType::f32, Device::cpu());
    model->set_checkpoint(autograd::CheckpointPolicy::parse("sqrt"));
    FSDP fsdp(*model, units_of(*model), {stage, FSDP::ReduceMode::PerMicroBatch, true, {}, DType::f16});
    // 2^40: the scaled gradients overflow f16 in the backward rules, and the f32 sums hold the inf.
    optim::GradScaler scaler({1099511627776.0, 2.0, 0.5, 2000});
    Capture cap(fsdp.shard_parameters());
    optim::Accumulator acc(cap, {0.0, nullptr, false, &fsdp, &scaler});
    const auto loss = [&](const Batch& b) {
      autograd::Autocast amp(DType::f16);
      return loss_of(*model, b);
    };
    const nn::TensorDict before = fsdp.full_state_dict();
    const optim::WindowResult skipped = acc.step(my_window(d, {16}), tokens, loss);
    CHECK(skipped.skipped_nonfinite);
    CHECK_FALSE(skipped.stepped);
    CHECK(scaler.scale() == 549755813888.0);
    CHECK(cap.grads.empty());
    const nn::TensorDict after = fsdp.full_state_dict();
    for (const auto& [name, t] : before) CHECK(reel::testing::bit_identical(after.at(name), t));
    // At 2^8 (this small model's f16 gradients overflow at the default 2^16) the window goes through,
    // with the gradients of one process's f16 model under the same scale, unscaled (bit for bit: both
    // ranks' halves as its micro-batches).
    scaler.load(256.0, 0);
    const optim::WindowResult ok = acc.step(my_window(d, {16}), tokens, loss);
    CHECK(ok.stepped);
    CHECK(ok.loss_scale == 256.0);
    auto ref = low_model(DType::f16);
    ref->set_checkpoint(autograd::CheckpointPolicy::parse("sqrt"));
    optim::GradScaler ref_scaler({256.0, 2.0, 0.5, 2000});
    const std::vector<Tensor> want =
        reference_chunks(fsdp, *ref, {rows(d, 0, 16), rows(d, 16, 32)}, DType::f16, &ref_scaler);
    REQUIRE(cap.grads.size() == want.size());
    for (size_t u = 0; u < want.size(); ++u) {
      CAPTURE(u);
      CHECK(reel::testing::bit_identical(cap.grads[u], want[u]));
    }
  }
}

TEST_CASE("fsdp: bad units are refused") {
  auto model = make_model(DType::f64, Device::cpu());
  auto stranger = make_model(DType::f64, Device::cpu());
  const auto refused = [&](const std::vector<nn::Module*>& units, FSDP::Options o, const std::string& part) {
    bool threw = false;
    try {
      FSDP f(*model, units, o);
    } catch (const Error& e) {
      threw = true;
      CAPTURE(e.what());
      CHECK(std::string(e.what()).find(part) != std::string::npos);
    }
    CHECK(threw);
  };
  refused({&(*stranger)[0]}, {}, "is not a module of the model");
  refused({&(*model)[0], &(*model)[0]}, {}, "listed twice");
  FSDP::Options one;
  one.stage = 1;
  refused({}, one, "stage 1 is not supported");
}
