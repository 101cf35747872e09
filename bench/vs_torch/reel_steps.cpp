// reel_steps: reel's half of bench/vs_torch. Runs one workload's training step (the same work as
// torch_steps.py does in PyTorch) on synthetic data of the right shapes, times each step and
// prints one machine-readable line for run.sh.
//
//   reel_steps WORKLOAD STEPS [--warmup N] [--threads N] [--profile 1]
//
// --profile 1 times nothing: it runs the warm-up, then the steps under a reel::Profiler, and prints
// its kernel, op and phase tables (where a step's time goes) instead of the line.
//
// Workloads (CPU; f32 but for gpt_bf16):
//   mlp128, mlp512   nn::MLP 784-512-512-10 (ReLU) as examples/fashion_mnist_mlp builds it,
//                    cross-entropy, SGD (momentum 0.9) step at batch 128 / 512
//   accum8x16        the same MLP, 8 micro-batches of 16 accumulated, then one SGD step
//   gpt_tied,        examples/char_gpt's default GPT (3 blocks, 4 heads, n_embd 96, block_size 64,
//   gpt_untied       vocabulary 114, 32 sequences, dropout 0, biases) with its AdamW step and
//                    gradient clipping at 1.0, LM head tied to wte or not
//   gpt_bf16         gpt_tied in mixed precision, as char_gpt --precision bf16 trains: forward and
//                    loss under autograd::Autocast(bf16), f32 master weights, the backward and the
//                    AdamW step outside the scope (in the recorded dtypes), no loss scaler
//   chain            64 x [Linear(1024) + GELU] at batch 256 (bench/bench_memory_plan's chain),
//                    no checkpointing, loss = sum of the output, forward + backward only
//
// Output, one line: vs_torch {"framework": "reel", "workload": ..., "params": ..., "median_ms": ...,
// "ms": [per step], "loss": the last step's}. Every step goes through optim::Accumulator, as the examples train: a SUM loss
// per micro-batch, backward scaled by 1 / samples (or tokens) in the window, then one step.
#include <omp.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <iostream>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "bench/bench_util.h"
#include "reel.h"

using namespace reel;

namespace {

constexpr int64_t kPixels = 784, kClasses = 10;
// examples/char_gpt's defaults; 114 is the vocabulary of Debian's fortunes corpus it trains on
// (only the shapes matter here: the tokens are synthetic).
constexpr int64_t kVocab = 114, kBlockSize = 64, kGptBatch = 32;

// One micro-batch: inputs and integer targets.
struct Batch {
  Tensor x, y;
};

// A workload: its model's parameter count and one training step, which returns the step's loss
// (NaN for the chain, which reads none), printed beside the times as a sanity check.
struct Workload {
  int64_t params = 0;
  std::function<double()> step;
  std::shared_ptr<nn::Module> model;  // kept alive with the step that uses it
  std::shared_ptr<optim::Optimizer> optimizer;
  std::shared_ptr<optim::Accumulator> accumulator;
};

// Uniform integers in [0, n) as an i32 tensor, from a fixed seed (same data every run).
Tensor random_ids(const Shape& shape, int64_t n, std::mt19937_64& rng) {
  std::vector<int32_t> v(static_cast<size_t>(shape_numel(shape)));
  for (int32_t& x : v) x = static_cast<int32_t>(rng() % static_cast<uint64_t>(n));
  return from_vector(v, shape);
}

// `micro` micro-batches of `size` MNIST-shaped samples (normal pixels, random labels).
std::vector<Batch> mlp_batches(int64_t micro, int64_t size, std::mt19937_64& rng) {
  std::vector<Batch> batches;
  for (int64_t i = 0; i < micro; ++i) batches.push_back({randn({size, kPixels}), random_ids({size}, kClasses, rng)});
  return batches;
}

Workload mlp(int64_t micro, int64_t size) {
  manual_seed(1);
  std::mt19937_64 rng(1);
  Workload w;
  auto model = std::make_shared<nn::MLP>(std::vector<int64_t>{kPixels, 512, 512, kClasses});
  model->train();
  w.model = model;
  w.params = model->num_parameters();
  w.optimizer = optim::make_optimizer("sgd", model->parameters(), 0.01);  // momentum 0.9
  w.accumulator = std::make_shared<optim::Accumulator>(*w.optimizer);
  const std::vector<Batch> batches = mlp_batches(micro, size, rng);
  optim::Accumulator& acc = *w.accumulator;
  w.step = [&acc, model, batches] {
    return acc
        .step<Batch>(
            batches, [](const Batch& b) { return b.y.numel(); },
            [&](const Batch& b) { return cross_entropy((*model)(b.x), b.y, -100, "sum"); })
        .loss;
  };
  return w;
}

// `precision`: the dtype the forward and the loss run under (autograd::Autocast, as char_gpt's
// batch_loss does for --precision), or nullopt for plain f32.
Workload gpt(bool tied, std::optional<DType> precision = std::nullopt) {
  manual_seed(2);
  std::mt19937_64 rng(2);
  nn::GPTConfig c;
  c.vocab_size = kVocab;
  c.block_size = kBlockSize;
  c.n_layer = 3;
  c.n_head = 4;
  c.n_embd = 96;
  c.dropout = 0.0;
  c.bias = true;
  c.tie_weights = tied;
  Workload w;
  auto model = std::make_shared<nn::GPT>(c);
  model->train();
  w.model = model;
  w.params = model->num_parameters();
  // char_gpt's optimizer: AdamW at lr 4e-3 (weight decay 0.01), gradients clipped at norm 1.0. Its
  // cosine schedule only sets the rate once per step: left out, the rate stays constant.
  w.optimizer = optim::make_optimizer("adamw", model->parameters(), 4e-3);
  w.accumulator = std::make_shared<optim::Accumulator>(*w.optimizer, optim::Accumulator::Options{1.0, nullptr, false});
  const std::vector<Batch> batches = {
      {random_ids({kGptBatch, kBlockSize}, kVocab, rng), random_ids({kGptBatch, kBlockSize}, kVocab, rng)}};
  optim::Accumulator& acc = *w.accumulator;
  w.step = [&acc, model, batches, precision] {
    return acc
        .step<Batch>(
            batches, [](const Batch& b) { return b.y.numel(); },
            [&](const Batch& b) {
              autograd::Autocast amp(precision);  // closes before the Accumulator's backward
              return cross_entropy((*model)(b.x), b.y, -100, "sum");
            })
        .loss;
  };
  return w;
}

Workload chain() {
  constexpr int kBlocks = 64;
  constexpr int64_t kWidth = 1024, kBatch = 256;
  manual_seed(3);
  Workload w;
  auto model = std::make_shared<nn::Sequential>();
  for (int i = 0; i < kBlocks; ++i)
    model->push_back(std::make_shared<nn::Sequential>(std::vector<std::shared_ptr<nn::Module>>{
        std::make_shared<nn::Linear>(kWidth, kWidth), std::make_shared<nn::GELU>()}));
  model->train();
  w.model = model;
  w.params = model->num_parameters();
  const Tensor x = randn({kBatch, kWidth});
  // No optimizer: the gradients add into .grad step after step (torch_steps.py does the same).
  w.step = [model, x] {
    autograd::backward(sum((*model)(x)));
    return std::nan("");
  };
  return w;
}

Workload make(const std::string& name) {
  if (name == "mlp128") return mlp(1, 128);
  if (name == "mlp512") return mlp(1, 512);
  if (name == "accum8x16") return mlp(8, 16);
  if (name == "gpt_tied") return gpt(true);
  if (name == "gpt_untied") return gpt(false);
  if (name == "gpt_bf16") return gpt(true, DType::bf16);
  if (name == "chain") return chain();
  REEL_FAIL("unknown workload '", name, "' (mlp128, mlp512, accum8x16, gpt_tied, gpt_untied, gpt_bf16, chain)");
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr,
                 "usage: reel_steps WORKLOAD STEPS [--warmup N] [--threads N] [--profile 1]\n"
                 "  WORKLOAD: mlp128, mlp512, accum8x16, gpt_tied, gpt_untied, gpt_bf16, chain\n");
    return 2;
  }
  const std::string name = argv[1];
  const int steps = std::atoi(argv[2]);
  int warmup = 3, threads = 2, profile = 0;
  for (int i = 3; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--warmup") warmup = std::atoi(argv[i + 1]);
    else if (flag == "--threads") threads = std::atoi(argv[i + 1]);
    else if (flag == "--profile") profile = std::atoi(argv[i + 1]);
    else {
      std::fprintf(stderr, "reel_steps: unknown option '%s'\n", flag.c_str());
      return 2;
    }
  }
  if (steps < 1 || warmup < 0 || threads < 1) {
    std::fprintf(stderr, "reel_steps: STEPS and --threads must be positive, --warmup not negative\n");
    return 2;
  }
  try {
    omp_set_num_threads(threads);
    const Workload w = make(name);
    // Warm-up: the allocator's cache, the optimizer's state and first-touch page faults are paid
    // here, not in the timed steps (torch_steps.py warms up the same way).
    for (int i = 0; i < warmup; ++i) w.step();
    if (profile) {
      Profiler prof;
      for (int i = 0; i < steps; ++i) w.step();
      prof.stop();
      profile::print_table(std::cout, prof, 30);
      return 0;
    }
    std::vector<double> ms;
    double loss = 0;
    for (int i = 0; i < steps; ++i) ms.push_back(bench::timed_ms(Device::cpu(), [&] { loss = w.step(); }));
    std::string list;
    for (double t : ms) {
      char buf[32];
      std::snprintf(buf, sizeof buf, "%s%.3f", list.empty() ? "" : ", ", t);
      list += buf;
    }
    std::printf(
        "vs_torch {\"framework\": \"reel\", \"workload\": \"%s\", \"threads\": %d, \"params\": %lld, \"warmup\": %d, "
        "\"steps\": %d, \"median_ms\": %.3f, \"ms\": [%s], \"loss\": %s}\n",
        name.c_str(), threads, static_cast<long long>(w.params), warmup, steps, bench::median(ms), list.c_str(),
        std::isnan(loss) ? "null" : std::to_string(loss).c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "reel_steps: %s\n", e.what());
    return 1;
  }
  return 0;
}
