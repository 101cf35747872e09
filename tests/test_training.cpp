// Training through nn + optim: a 50-step smoke run whose loss must fall, the accumulation window
// on variable-length token batches with ignore_index padding (equal to one big batch; the naive
// per-micro-batch mean is shown to differ), checkpointing and accumulation giving the weights of
// the plain run, and the activation peak of a window being that of one micro-batch.
#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "reel.h"
#include "testing.h"

using namespace reel;
using reel::testing::check_close;
using reel::testing::values;

namespace {

// Three Gaussian blobs in 8-D, labels 0..2: (N, 8) f32 and (N) i32.
struct Blobs {
  Tensor x, y;
};
Blobs make_blobs(int64_t n, uint64_t seed) {
  Generator g(seed);
  const std::vector<double> noise = values(randn({n, 8}, DType::f64, Device::cpu(), &g));
  std::vector<float> x(static_cast<size_t>(n * 8));
  std::vector<int32_t> y(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    const int32_t label = static_cast<int32_t>(i % 3);
    y[static_cast<size_t>(i)] = label;
    for (int64_t j = 0; j < 8; ++j)
      x[static_cast<size_t>(i * 8 + j)] =
          static_cast<float>(noise[static_cast<size_t>(i * 8 + j)] + (j % 3 == label ? 2.0 : 0.0));
  }
  return {from_vector(x, {n, 8}), from_vector(y, {n})};
}

struct Batch {
  Tensor x, y;
};

// `steps` optimizer steps of `batch` samples over `data`, each window cut into `accum` equal
// micro-batches; returns the loss of every window.
std::vector<double> train_mlp(nn::Module& model, optim::Optimizer& opt, const Blobs& data, int64_t steps,
                              int64_t batch, int64_t accum) {
  optim::Accumulator window(opt);
  std::vector<double> losses;
  const int64_t n = data.x.size(0), micro = batch / accum;
  for (int64_t s = 0; s < steps; ++s) {
    std::vector<Batch> parts;
    for (int64_t m = 0; m < accum; ++m) {
      const int64_t start = (s * batch + m * micro) % n;
      // Copies, as a data loader hands out fresh batches (a view would keep all of `data` alive).
      parts.push_back({data.x.narrow(0, start, micro).clone(), data.y.narrow(0, start, micro).clone()});
    }
    const optim::WindowResult r = window.step(
        parts, [](const Batch& b) { return b.x.size(0); },
        [&](const Batch& b) { return cross_entropy(model(b.x), b.y, -100, "sum"); });
    losses.push_back(r.loss);
  }
  return losses;
}

std::vector<double> flat_parameters(const nn::Module& m) {
  std::vector<double> out;
  for (const Tensor& p : m.parameters()) {
    const std::vector<double> v = values(p);
    out.insert(out.end(), v.begin(), v.end());
  }
  return out;
}

double max_abs_diff(const std::vector<double>& a, const std::vector<double>& b) {
  REQUIRE(a.size() == b.size());
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::fabs(a[i] - b[i]));
  return worst;
}

}  // namespace

TEST_CASE("50 training steps on synthetic data: the loss falls (MLP on every device, GPT on cpu)") {
  const Blobs data = make_blobs(384, 1);
  for (const Device& device : reel::testing::devices()) {
    CAPTURE(device);
    manual_seed(2);
    nn::MLP mlp({8, 32, 32, 3});
    mlp.to(device);
    optim::Adam opt(mlp.parameters(), 1e-2);
    const Blobs on_device{data.x.to(device), data.y.to(device)};
    const std::vector<double> losses = train_mlp(mlp, opt, on_device, 50, 32, 2);
    CHECK(losses.front() > 0.9);  // about log(3) at the start
    CHECK(losses.back() < 0.25 * losses.front());
  }
  // A tiny GPT learns to continue a repeating sequence.
  manual_seed(3);
  const nn::GPTConfig c{/*vocab_size*/ 7, /*block_size*/ 12, /*n_layer*/ 2, /*n_head*/ 2, /*n_embd*/ 32};
  nn::GPT gpt(c);
  optim::AdamW opt(gpt.parameters(), 1e-2);
  std::vector<int64_t> seq;
  for (int i = 0; i < 64; ++i) seq.push_back((i * 3) % 7);
  double first = 0, last = 0;
  for (int step = 0; step < 50; ++step) {
    const int64_t start = step % 40;
    const Tensor ids = from_vector(std::vector<int64_t>(seq.begin() + start, seq.begin() + start + 12), {1, 12});
    const Tensor targets = from_vector(std::vector<int64_t>(seq.begin() + start + 1, seq.begin() + start + 13), {1, 12});
    const Tensor loss = cross_entropy(gpt(ids), targets);
    (step == 0 ? first : last) = loss.item();
    autograd::backward(loss);
    opt.step();
    opt.zero_grad();
  }
  CHECK(last < 0.1 * first);
}

TEST_CASE("accumulation over variable-length token batches with padding equals one big batch") {
  // Sequences of lengths 2..9 (targets padded with ignore_index -100, ids with 0): micro-batches
  // of different lengths and different numbers of real tokens, as a text loader makes them.
  const nn::GPTConfig c{/*vocab_size*/ 13, /*block_size*/ 10, /*n_layer*/ 2, /*n_head*/ 2, /*n_embd*/ 16};
  const std::vector<std::vector<int64_t>> lengths = {{9, 2}, {3}, {7, 5, 4}, {6, 8}};  // per micro-batch
  Generator g(4);
  struct TokenBatch {
    Tensor ids, targets;  // (B, T) each; T = the longest sequence of the micro-batch
  };
  std::vector<TokenBatch> micro;
  std::vector<std::vector<int64_t>> all_ids, all_targets;  // every sequence, padded to 10
  int64_t real_tokens = 0;
  for (const auto& group : lengths) {
    int64_t T = 0;
    for (int64_t len : group) T = std::max(T, len);
    std::vector<int64_t> ids, targets;
    for (int64_t len : group) {
      const std::vector<double> u = values(rand({len + 1}, DType::f64, Device::cpu(), &g));
      std::vector<int64_t> row_ids(10, 0), row_targets(10, -100);
      for (int64_t t = 0; t < len; ++t) {
        row_ids[static_cast<size_t>(t)] = static_cast<int64_t>(u[static_cast<size_t>(t)] * 13);
        row_targets[static_cast<size_t>(t)] = static_cast<int64_t>(u[static_cast<size_t>(t + 1)] * 13);
      }
      ids.insert(ids.end(), row_ids.begin(), row_ids.begin() + T);
      targets.insert(targets.end(), row_targets.begin(), row_targets.begin() + T);
      all_ids.push_back(row_ids);
      all_targets.push_back(row_targets);
      real_tokens += len;
    }
    const int64_t B = static_cast<int64_t>(group.size());
    micro.push_back({from_vector(ids, {B, T}), from_vector(targets, {B, T})});
  }
  std::vector<int64_t> big_ids, big_targets;
  for (size_t i = 0; i < all_ids.size(); ++i) {
    big_ids.insert(big_ids.end(), all_ids[i].begin(), all_ids[i].end());
    big_targets.insert(big_targets.end(), all_targets[i].begin(), all_targets[i].end());
  }
  const int64_t N = static_cast<int64_t>(all_ids.size());

  // Reference: one batch of every sequence, mean over the real tokens.
  manual_seed(5);
  nn::GPT ref(c);
  autograd::backward(cross_entropy(ref(from_vector(big_ids, {N, 10})), from_vector(big_targets, {N, 10})));
  std::vector<double> ref_grads;
  for (const Tensor& p : ref.parameters()) {
    const std::vector<double> v = values(p.grad());
    ref_grads.insert(ref_grads.end(), v.begin(), v.end());
  }

  // The window: counts the real tokens of all micro-batches first, sums, scales by 1/total.
  manual_seed(5);
  nn::GPT model(c);
  std::vector<double> window_grads;
  {
    optim::SGD opt(model.parameters(), 0.0);  // lr 0: keep the weights, look at the gradients
    optim::Accumulator window(opt);
    int64_t counted = 0;
    const optim::WindowResult r = window.step(
        micro,
        [&](const TokenBatch& b) {
          const std::vector<int64_t> t = b.targets.to_vector<int64_t>();
          const int64_t n = static_cast<int64_t>(std::count_if(t.begin(), t.end(), [](int64_t v) { return v != -100; }));
          counted += n;
          return n;
        },
        [&](const TokenBatch& b) {
          CHECK(counted == real_tokens);  // the whole window was counted before the first forward
          return cross_entropy(model(b.ids), b.targets, -100, "sum");
        });
    CHECK(r.count == real_tokens);
  }
  // The Accumulator zeroes the gradients after its step: redo the backward passes by hand with
  // the same scale to look at them.
  for (const TokenBatch& b : micro)
    autograd::backward(cross_entropy(model(b.ids), b.targets, -100, "sum"), 1.0 / static_cast<double>(real_tokens));
  for (const Tensor& p : model.parameters()) {
    const std::vector<double> v = values(p.grad());
    window_grads.insert(window_grads.end(), v.begin(), v.end());
  }
  CHECK(max_abs_diff(window_grads, ref_grads) < 2e-6);

  // The naive way: each micro-batch's mean, averaged over the micro-batches, weighs a token of a
  // short micro-batch more than one of a long one, and differs.
  for (const Tensor& p : model.parameters()) p.set_grad(Tensor());
  for (const TokenBatch& b : micro)
    autograd::backward(cross_entropy(model(b.ids), b.targets, -100, "mean"), 1.0 / static_cast<double>(micro.size()));
  std::vector<double> naive;
  for (const Tensor& p : model.parameters()) {
    const std::vector<double> v = values(p.grad());
    naive.insert(naive.end(), v.begin(), v.end());
  }
  CHECK(max_abs_diff(naive, ref_grads) > 1e-3);

  // A micro-batch of padding only adds nothing and does not turn the window's loss into NaN.
  for (const Tensor& p : model.parameters()) p.set_grad(Tensor());
  const std::vector<double> before = flat_parameters(model);
  optim::SGD opt(model.parameters(), 0.1);
  optim::Accumulator window(opt);
  std::vector<TokenBatch> padding_only = {{zeros({2, 3}, DType::i64), full({2, 3}, -100.0, DType::i64)}};
  const optim::WindowResult r = window.step(
      padding_only, [](const TokenBatch&) { return int64_t{0}; },
      [&](const TokenBatch& b) { return cross_entropy(model(b.ids), b.targets, -100, "sum"); });
  CHECK_FALSE(r.stepped);
  CHECK(flat_parameters(model) == before);
}

TEST_CASE("checkpoint sqrt and accumulation over 4 micro-batches give the plain run's weights") {
  const Blobs data = make_blobs(256, 6);
  for (const std::string optimizer : {"sgd", "adam"}) {
    CAPTURE(optimizer);
    std::vector<std::vector<double>> finals;
    for (const std::string policy : {"none", "sqrt"}) {
      manual_seed(7);
      nn::MLP mlp({8, 64, 64, 64, 3}, "gelu", 0.1);  // dropout: checkpoint replays must reuse masks
      mlp.set_checkpoint(nn::CheckpointPolicy::parse(policy));
      auto opt = optim::make_optimizer(optimizer, mlp.parameters(), optimizer == "sgd" ? 0.05 : 1e-3);
      default_generator().manual_seed(8);
      train_mlp(mlp, *opt, data, 20, 32, 1);
      finals.push_back(flat_parameters(mlp));
    }
    CHECK(finals[1] == finals[0]);  // checkpointing: bit-identical
  }
  // Accumulation draws dropout masks per micro-batch, so it is compared without dropout.
  for (const std::string optimizer : {"sgd", "adam"}) {
    CAPTURE(optimizer);
    std::vector<std::vector<double>> finals;
    for (int64_t accum : {1, 4}) {
      manual_seed(9);
      nn::MLP mlp({8, 64, 64, 3});
      auto opt = optim::make_optimizer(optimizer, mlp.parameters(), optimizer == "sgd" ? 0.05 : 1e-3);
      train_mlp(mlp, *opt, data, 20, 32, accum);
      finals.push_back(flat_parameters(mlp));
    }
    // f32 sums in another order: a few ulps per step (Adam normalises each update, so its
    // differences stay of the size of the rounding of the gradients, not the learning rate).
    CHECK(max_abs_diff(finals[1], finals[0]) < (optimizer == "sgd" ? 1e-5 : 1e-4));
  }
}

TEST_CASE("the activation peak of a window is that of one micro-batch") {
  const Blobs data = make_blobs(512, 10);
  std::vector<int64_t> peaks;
  for (int64_t accum : {1, 4}) {
    manual_seed(11);
    nn::MLP mlp({8, 256, 256, 3});
    optim::SGD opt(mlp.parameters(), 0.01);
    train_mlp(mlp, opt, data, 1, 256, accum);  // allocates gradients once
    reset_peak_memory(Device::cpu());
    const int64_t base = memory_stats(Device::cpu())[Category::Activation].current_bytes;
    train_mlp(mlp, opt, data, 1, 256, accum);
    peaks.push_back(memory_stats(Device::cpu())[Category::Activation].peak_bytes - base);
  }
  CAPTURE(peaks[0]);
  CAPTURE(peaks[1]);
  CHECK(peaks[1] * 4 == doctest::Approx(peaks[0]).epsilon(0.02));
}
