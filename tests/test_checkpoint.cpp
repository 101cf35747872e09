// Segment recomputation in the tape. Checkpointed forward/backward gives bit-identical gradients
// to the plain one (a 20-layer MLP with dropout: segments of 1, 4 and 5 layers, nested ones,
// partial ones, selective scopes), and the measured activation peak of a chain of N Linear+GELU
// blocks is exactly the bytes the saved tensors of the shapes add up to: 2N tensors without
// checkpointing, (S - 1) + 2k with S segments of k = sqrt(N) blocks, N + 1 selective.
#include <cmath>
#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>

#include "autograd/checkpoint_planner.h"
#include "autograd/functions.h"
#include "autograd/nn_functions.h"
#include "autograd/tape.h"
#include "core/allocator.h"
#include "core/profile.h"
#include "nn/gpt.h"
#include "testing.h"

using namespace reel;

namespace {

// Layers [begin, end) form one checkpoint segment, or one selective scope (keep_costly_outputs);
// spans nest or are disjoint.
struct Span {
  int begin, end;
  bool selective = false;
};

struct Net {
  std::vector<Tensor> params;  // W0, b0, W1, b1, ...
  Tensor scale_data;           // a constant (no grad) the layers use: held at segment boundaries
};

Net make_net(int layers, int64_t width, Device d) {
  Generator gen(5);
  Net net;
  MemoryCategory category(Category::Parameter);
  for (int i = 0; i < layers; ++i) {
    net.params.push_back((randn({width, width}, DType::f32, Device::cpu(), &gen) * (1.5 / std::sqrt(width)))
                             .to(d).set_requires_grad());
    net.params.push_back((randn({width}, DType::f32, Device::cpu(), &gen) * 0.1).to(d).set_requires_grad());
  }
  net.scale_data = (rand({width}, DType::f32, Device::cpu(), &gen) * 0.2).to(d);
  return net;
}

// h = dropout(gelu(h @ W + b) * exp(scale), 0.1) per layer, with Checkpoint scopes opened and
// closed around the layers as `spans` say. Returns sum(h * h).
Tensor forward(const Net& net, const Tensor& x, const std::vector<Span>& spans, Generator& gen) {
  std::vector<std::pair<Span, std::unique_ptr<autograd::Checkpoint>>> open;  // innermost last
  const int layers = static_cast<int>(net.params.size() / 2);
  Tensor h = x;
  for (int i = 0; i < layers; ++i) {
    for (const Span& s : spans)  // spans are listed outer before inner
      if (s.begin == i)
        open.emplace_back(s, s.selective ? std::make_unique<autograd::Checkpoint>(autograd::keep_costly_outputs)
                                         : std::make_unique<autograd::Checkpoint>());
    const Tensor scale = exp(net.scale_data);  // computed inside the segment, needs no grad
    h = dropout(gelu(matmul(h, net.params[2 * i]) + net.params[2 * i + 1]) * scale, 0.1, true, &gen);
    while (!open.empty() && open.back().first.end == i + 1) open.pop_back();
  }
  return sum(h * h);
}

std::vector<Span> every(int k, int layers, int offset = 0) {
  std::vector<Span> spans;
  for (int b = offset; b + k <= layers; b += k) spans.push_back({b, b + k});
  return spans;
}

struct Result {
  std::vector<std::vector<float>> grads;  // every parameter's, then the input's
  float loss;
};

Result train_step(const Net& net, Device d, const std::vector<Span>& spans) {
  Generator data_gen(9), dropout_gen(1234);
  Tensor x = randn({8, 16}, DType::f32, Device::cpu(), &data_gen).to(d).set_requires_grad();
  autograd::zero_grad(net.params);
  Tensor loss = forward(net, x, spans, dropout_gen);
  autograd::backward(loss);
  Result r;
  r.loss = static_cast<float>(loss.item());
  for (const Tensor& p : net.params) r.grads.push_back(p.grad().to(Device::cpu()).to_vector<float>());
  r.grads.push_back(x.grad().to(Device::cpu()).to_vector<float>());
  return r;
}

bool bit_identical(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

}  // namespace

TEST_CASE("checkpointing gives bit-identical gradients: 20-layer MLP with dropout") {
  const int layers = 20;
  for (Device d : reel::testing::devices()) {
    CAPTURE(d);
    const Net net = make_net(layers, 16, d);
    const Result plain = train_step(net, d, {});
    struct Scheme {
      const char* name;
      std::vector<Span> spans;
    };
    std::vector<Scheme> schemes = {
        {"segments of 1", every(1, layers)},
        {"segments of 4", every(4, layers)},
        {"segments of 5", every(5, layers)},
        {"partial: layers 3..10 and 12..19", {{3, 10}, {12, 19}}},
        {"nested: 10 around 5 + 5", {{0, 10}, {0, 5}, {5, 10}, {10, 20}, {10, 15}, {15, 20}}},
        {"nested irregular: 20 around (3, [4 around 1 + 2], plain 2, 6)",
         {{0, 20}, {0, 3}, {3, 7}, {3, 4}, {5, 7}, {9, 15}}},
        {"three levels", {{0, 20}, {2, 18}, {4, 9}, {9, 16}, {10, 12}}},
        // Selective: matmul outputs kept, the adds, GELUs, scalings and dropouts recomputed.
        {"selective over all 20", {{0, 20, true}}},
        {"selective runs between plain layers", {{2, 9, true}, {12, 13, true}}},
        {"selective inside segments", {{0, 10}, {0, 10, true}, {10, 20}, {12, 17, true}}},
        {"segments inside a selective scope", {{0, 20, true}, {3, 6}, {6, 7}, {14, 20}}},
    };
    for (const Scheme& s : schemes) {
      CAPTURE(s.name);
      const Result r = train_step(net, d, s.spans);
      CHECK(std::memcmp(&r.loss, &plain.loss, sizeof(float)) == 0);
      REQUIRE(r.grads.size() == plain.grads.size());
      for (size_t i = 0; i < r.grads.size(); ++i) {
        CAPTURE(i);
        CHECK(bit_identical(r.grads[i], plain.grads[i]));
      }
      CHECK(autograd::Tape::current().empty());
    }
  }
}

TEST_CASE("forward inside a segment keeps no saved tensors, only boundary inputs") {
  for (Device d : reel::testing::devices()) {
    const Net net = make_net(3, 8, d);
    Generator data_gen(1), gen(2);
    Tensor x = randn({4, 8}, DType::f32, Device::cpu(), &data_gen).to(d);
    const int64_t act0 = memory_stats(d)[Category::Activation].current_bytes;
    Tensor loss = forward(net, x, {{0, 3}}, gen);
    const autograd::Tape& tape = autograd::Tape::current();
    // Every node of the segment saves nothing. The activations left are the boundary input x
    // (4, 8), the exp(scale) constants made inside the segment (8) per layer, and the last h
    // (4, 8), which sum(h * h) outside the segment saves.
    for (size_t i = 0; i < tape.size(); ++i)
      if (tape.node(i).segment) CHECK(tape.node(i).saved.empty());
    const int64_t batch_bytes = 4 * 8 * 4, scale_bytes = 8 * 4;
    CHECK(memory_stats(d)[Category::Activation].current_bytes - act0 == 2 * batch_bytes + 3 * scale_bytes);
    autograd::backward(loss);  // x, still held here, is no longer an activation
    CHECK(memory_stats(d)[Category::Activation].current_bytes == act0);
  }
}

TEST_CASE("segments: dead branches, unused outputs, nested replay only up to what backward needs") {
  for (Device d : reel::testing::devices()) {
    Generator gen(3);
    Tensor w = randn({6}, DType::f32, Device::cpu(), &gen).to(d).set_requires_grad();
    Tensor v = randn({6}, DType::f32, Device::cpu(), &gen).to(d).set_requires_grad();
    auto run = [&](bool checkpoint) {
      autograd::zero_grad({w, v});
      Tensor used, unused;
      {
        std::unique_ptr<autograd::Checkpoint> outer;
        if (checkpoint) outer = std::make_unique<autograd::Checkpoint>();
        Tensor a = tanh(w * v);
        {
          std::unique_ptr<autograd::Checkpoint> inner;
          if (checkpoint) inner = std::make_unique<autograd::Checkpoint>();
          used = exp(a) * w;
          unused = log(exp(a) + 2.0);  // recorded after `used`, never reaches the loss
        }
        Tensor dead = relu(a - v);  // also never used
      }
      autograd::backward(sum(used * used));
      return std::make_pair(w.grad().to(Device::cpu()).to_vector<float>(), v.grad().to(Device::cpu()).to_vector<float>());
    };
    const auto plain = run(false);
    const auto checkpointed = run(true);
    CHECK(bit_identical(plain.first, checkpointed.first));
    CHECK(bit_identical(plain.second, checkpointed.second));
  }
}

TEST_CASE("Checkpoint under NoGrad is a no-op") {
  for (Device d : reel::testing::devices()) {
    Tensor w = ones({3}, DType::f32, d).set_requires_grad();
    autograd::NoGrad no_grad;
    {
      autograd::Checkpoint seg;
      Tensor y = gelu(w * 2.0);
      CHECK_FALSE(y.requires_grad());
    }
    CHECK(autograd::Tape::current().empty());
    CHECK(autograd::Tape::current().open_segment() == nullptr);
  }
}

namespace {
// w * w -> tanh -> exp * w, its loss, and the gradient of w without any checkpoint.
std::vector<float> plain_grad(const Tensor& w) {
  autograd::zero_grad({w});
  autograd::backward(sum(exp(tanh(w * w)) * w));
  return w.grad().to(Device::cpu()).to_vector<float>();
}
std::vector<float> grad_of(const Tensor& w) { return w.grad().to(Device::cpu()).to_vector<float>(); }
// The parameter the tests below share, on `device`, after clearing the thread's tape.
Tensor fresh_param(Device device = Device::cpu()) {
  autograd::Tape::current().clear();
  return from_vector(std::vector<float>{0.5f, -1.0f, 2.0f}, {3}).to(device).set_requires_grad();
}
}  // namespace

TEST_CASE("closing an outer Checkpoint before an inner one raises at the close; the tape stays usable") {
  autograd::Tape& tape = autograd::Tape::current();
  for (Device d : reel::testing::devices()) {
    CAPTURE(d);
    Tensor w = fresh_param(d);
    const std::vector<float> expected = plain_grad(w);
    autograd::zero_grad({w});
    auto outer = std::make_unique<autograd::Checkpoint>();
    const int outer_id = tape.open_segment()->id;
    auto inner = std::make_unique<autograd::Checkpoint>();
    Tensor a = tanh(w * w);  // inside both segments
    const std::string message = "Checkpoint: segment " + std::to_string(outer_id) + " closed while segment " +
                                std::to_string(outer_id + 1) + ", opened inside it, is still open";
    CHECK_REEL_ERROR(outer->close(), message.c_str());
    CHECK(tape.open_segment() == nullptr);  // both segments end at the refused close
    Tensor loss = sum(exp(a) * w);          // recorded outside any segment
    inner.reset();                          // already ended: nothing left to close, no error
    outer.reset();
    CHECK(tape.open_segment() == nullptr);
    autograd::backward(loss);
    CHECK(bit_identical(grad_of(w), expected));
    CHECK(tape.empty());
    // Two scopes left open inside the one closed: both are named, and all three end.
    {
      autograd::Checkpoint first;
      const int first_id = tape.open_segment()->id;
      autograd::Checkpoint second, third;
      const std::string three = "segment " + std::to_string(first_id) + " closed while segments " +
                                std::to_string(first_id + 1) + ", " + std::to_string(first_id + 2) +
                                ", opened inside it, are still open";
      CHECK_REEL_ERROR(first.close(), three.c_str());
      CHECK(tape.open_segment() == nullptr);
    }
    CHECK(tape.open_segment() == nullptr);
    // Closed in order, close() ends the scope early and the destructor has nothing left to do.
    autograd::zero_grad({w});
    autograd::Checkpoint seg;
    loss = sum(exp(tanh(w * w)) * w);
    seg.close();
    CHECK(tape.open_segment() == nullptr);
    autograd::backward(loss);
    CHECK(bit_identical(grad_of(w), expected));
  }
}

TEST_CASE("Checkpoint scopes destroyed out of order: the next backward raises, the tape stays usable") {
  autograd::Tape& tape = autograd::Tape::current();
  for (Device d : reel::testing::devices()) {
    CAPTURE(d);
    Tensor w = fresh_param(d);
    const std::vector<float> expected = plain_grad(w);
    autograd::zero_grad({w});
    Tensor loss;
    int outer_id = 0;
    {
      // Declared in the wrong order: `outer` is destroyed first, while `inner` is still open. A
      // std::optional's destructor is noexcept, so the close cannot throw there.
      std::optional<autograd::Checkpoint> inner;
      std::optional<autograd::Checkpoint> outer;
      outer.emplace();
      outer_id = tape.open_segment()->id;
      inner.emplace();
      loss = sum(exp(tanh(w * w)) * w);
    }
    CHECK(tape.open_segment() == nullptr);  // the tape is not left inside a segment
    const std::string message = "Checkpoint: segment " + std::to_string(outer_id) + " closed while segment " +
                                std::to_string(outer_id + 1) + ", opened inside it, is still open";
    CHECK_REEL_ERROR(autograd::backward(loss), message.c_str());
    const bool untouched = !w.grad().defined() || grad_of(w) == std::vector<float>(3, 0.0f);
    CHECK(untouched);  // nothing was accumulated
    autograd::backward(loss);  // raised once; the recorded forward is still there to backward
    CHECK(bit_identical(grad_of(w), expected));
    CHECK(tape.empty());
    // The same with unique_ptrs reset in the wrong order; a clear() drops the pending error.
    {
      auto outer = std::make_unique<autograd::Checkpoint>();
      auto inner = std::make_unique<autograd::Checkpoint>();
      outer.reset();
      inner.reset();
    }
    tape.clear();
    CHECK(tape.open_segment() == nullptr);
    CHECK(bit_identical(plain_grad(w), expected));
  }
}

TEST_CASE("an exception unwinding through out-of-order scopes leaves a usable tape and no pending error") {
  autograd::Tape& tape = autograd::Tape::current();
  Tensor w = fresh_param();
  const std::vector<float> expected = plain_grad(w);
  bool caught = false;
  try {
    std::optional<autograd::Checkpoint> inner;
    std::optional<autograd::Checkpoint> outer;
    outer.emplace();
    inner.emplace();
    Tensor y = tanh(w * w);
    throw std::runtime_error("a forward failed");
  } catch (const std::runtime_error&) {
    caught = true;
  }
  CHECK(caught);
  CHECK(tape.open_segment() == nullptr);
  tape.clear();  // the failed forward's nodes
  CHECK(bit_identical(plain_grad(w), expected));
}

TEST_CASE("clear() ends the segments of scopes still open, so a leaked scope cannot block backward") {
  autograd::Tape& tape = autograd::Tape::current();
  Tensor w = fresh_param();
  const std::vector<float> expected = plain_grad(w);
  auto forgotten = std::make_unique<autograd::Checkpoint>();  // e.g. kept in a member by mistake
  Tensor y = tanh(w * w);
  CHECK_REEL_ERROR(autograd::backward(sum(y)), "inside an autograd::Checkpoint scope");
  tape.clear();
  CHECK(tape.open_segment() == nullptr);
  CHECK(bit_identical(plain_grad(w), expected));
  forgotten.reset();  // its segment was ended by clear(): nothing to close, no error
  CHECK(tape.open_segment() == nullptr);
  CHECK(bit_identical(plain_grad(w), expected));
}

TEST_CASE("activation peak: O(N) without checkpointing, O(sqrt N) with sqrt N segments, N + 1 selective, to the byte") {
  const int64_t B = 4, D = 8;
  const int64_t tensor_bytes = B * D * 4;  // every saved tensor of the chain is (B, D) f32
  enum class Mode { Plain, Segments, Selective };
  for (Device d : reel::testing::devices()) {
    CAPTURE(d);
    for (int N : {16, 64}) {
      CAPTURE(N);
      const int k = static_cast<int>(std::lround(std::sqrt(N)));  // blocks per segment
      const int S = N / k;                                         // segments
      Generator gen(8);
      std::vector<Tensor> params;
      {
        MemoryCategory category(Category::Parameter);
        for (int i = 0; i < N; ++i) {
          params.push_back((randn({D, D}, DType::f32, Device::cpu(), &gen) * 0.3).to(d).set_requires_grad());
          params.push_back(zeros({D}, DType::f32, d).set_requires_grad());
        }
      }
      std::vector<float> plain_grad;
      for (Mode mode : {Mode::Plain, Mode::Segments, Mode::Selective}) {
        CAPTURE(static_cast<int>(mode));
        Generator data_gen(77);
        Tensor x = randn({B, D}, DType::f32, Device::cpu(), &data_gen).to(d);
        const int64_t act0 = memory_stats(d)[Category::Activation].current_bytes;
        reset_peak_memory(d);
        Tensor h = x;
        {
          std::optional<autograd::Checkpoint> selective;  // pieces [matmul] [add, gelu, matmul] ... [add, gelu]
          if (mode == Mode::Selective) selective.emplace(autograd::keep_costly_outputs);
          std::unique_ptr<autograd::Checkpoint> segment;
          for (int i = 0; i < N; ++i) {
            if (mode == Mode::Segments && i % k == 0) segment = std::make_unique<autograd::Checkpoint>();
            h = gelu(matmul(h, params[2 * i]) + params[2 * i + 1]);  // Linear + GELU
            if (mode == Mode::Segments && i % k == k - 1) segment.reset();
          }
        }
        if (mode == Mode::Selective) {
          const autograd::Tape& tape = autograd::Tape::current();
          int kept = 0;
          for (size_t i = 0; i < tape.size(); ++i) kept += tape.node(i).kept;
          CHECK(kept == N);
          CHECK(autograd::tape_dump().find("output kept") != std::string::npos);
        }
        Tensor loss = sum(h);
        h = Tensor();
        x = Tensor();
        const int64_t forward_bytes = memory_stats(d)[Category::Activation].current_bytes - act0;
        autograd::backward(loss);
        const int64_t peak = memory_stats(d)[Category::Activation].peak_bytes - act0;
        switch (mode) {
          case Mode::Plain:  // each block saves its matmul's input and GELU's input: 2N tensors
            CHECK(forward_bytes == 2 * N * tensor_bytes);
            CHECK(peak == 2 * N * tensor_bytes);
            break;
          case Mode::Segments:
            // Forward keeps one boundary input per segment (S); backward then rebuilds one segment
            // at a time (its 2k saved tensors, its own boundary among them) while the S - 1 earlier
            // boundaries wait: S - 1 + 2k.
            CHECK(forward_bytes == S * tensor_bytes);
            CHECK(peak == (S - 1 + 2 * k) * tensor_bytes);
            break;
          case Mode::Selective:
            // Forward keeps x (the first piece's boundary) and the N matmul outputs, each held by
            // the piece after it. Replaying a piece frees its boundary once the add consumed it
            // and saves the GELU's input and the refilled matmul input instead: never above the
            // forward's level.
            CHECK(forward_bytes == (N + 1) * tensor_bytes);
            CHECK(peak == (N + 1) * tensor_bytes);
            break;
        }
        CHECK(memory_stats(d)[Category::Activation].current_bytes == act0);
        // Same gradients either way (the first weight's is enough here).
        const std::vector<float> g = params[0].grad().to(Device::cpu()).to_vector<float>();
        if (mode == Mode::Plain) plain_grad = g;
        else CHECK(bit_identical(g, plain_grad));
        autograd::zero_grad(params);
      }
    }
  }
}

// ---- version counters and the tape's lifetime rule with segments (issue 14) ---------------------

TEST_CASE("a segment's held input modified in place before backward raises at the replay") {
  for (Device d : reel::testing::devices()) {
    CAPTURE(d);
    autograd::Tape::current().clear();
    Tensor w = from_vector(std::vector<float>{0.5f, -1.0f, 2.0f}, {3}).to(d).set_requires_grad();
    Tensor x = from_vector(std::vector<float>{1.0f, 2.0f, 3.0f}, {3}).to(d);
    Tensor y;
    {
      autograd::Checkpoint seg;
      y = tanh(mul(x, w));  // mul holds x and w (the segment's boundary) instead of saving them
    }
    Tensor l = sum(y);
    x.fill_(5);  // before version counters, the replay silently used 5
    CHECK_REEL_ERROR(autograd::backward(l),
                     "mul: a tensor of shape (3) that a checkpoint segment holds for the replay (input 0 of "
                     "mul) was modified in place (version 0 when held, 1 now)");
    CHECK_FALSE(w.grad().defined());
    // Refused before the walk: the tape is left as it was, and goes with the tensors (tape.h).
    l = Tensor();
    CHECK(autograd::Tape::current().size() == 2);  // y still depends on the segment's two nodes
    y = Tensor();
    CHECK(autograd::Tape::current().empty());

    // A parameter (held as well) changed under NoGrad between forward and backward.
    {
      autograd::Checkpoint seg;
      y = tanh(mul(x, w));
    }
    l = sum(y);
    {
      autograd::NoGrad no_grad;
      w.fill_(1);
    }
    CHECK_REEL_ERROR(autograd::backward(l), "(input 1 of mul) was modified in place (version 0 when held, 1 now)");
    // Unchanged, the replay runs and gives the plain gradient.
    {
      autograd::Checkpoint seg;
      y = tanh(mul(x, w));
    }
    autograd::backward(sum(y));
    const double t = std::tanh(5.0);
    reel::testing::check_close(w.grad(), std::vector<double>(3, 5 * (1 - t * t)), 1e-5, 1e-5);
  }
}

TEST_CASE("a checkpointed forward whose loss is dropped leaves no activations, and a live one replays") {
  for (Device d : reel::testing::devices()) {
    CAPTURE(d);
    autograd::Tape::current().clear();
    const Net net = make_net(4, 8, d);
    Generator data_gen(1);
    Tensor x = randn({4, 8}, DType::f32, Device::cpu(), &data_gen).to(d);
    const int64_t act0 = memory_stats(d)[Category::Activation].current_bytes;
    for (const std::vector<Span>& spans : {std::vector<Span>{}, every(2, 4), std::vector<Span>{{0, 4}, {1, 3}}}) {
      for (int i = 0; i < 3; ++i) {
        Generator gen(2);
        { Tensor l = forward(net, x, spans, gen); }
        CHECK(autograd::Tape::current().empty());
        CHECK(memory_stats(d)[Category::Activation].current_bytes == act0);
        CHECK(autograd::Tape::current().open_segment() == nullptr);
      }
    }
    // Inside an open segment, a dropped temporary is released and later ops still join the segment.
    Tensor w = net.params[1];
    Tensor y;
    Tensor before = exp(w);  // recorded before the scope opens, dropped inside it
    {
      autograd::Checkpoint seg;
      before = Tensor();     // the tape shrinks below where the segment began: it begins there now
      { Tensor tmp = exp(w * 2.0); }
      CHECK(autograd::Tape::current().empty());
      Tensor z = w * 3.0;  // the segment's first node: the replay must start from it
      Tensor side = exp(w);  // dead at the close: released in the middle of a collapsed segment
      y = tanh(z);
      Tensor after = exp(y);  // dead at the close too: at the end of the tape, removed
    }
    autograd::zero_grad({w});
    autograd::backward(sum(y));
    std::vector<float> with_segment = w.grad().to(Device::cpu()).to_vector<float>();
    autograd::zero_grad({w});
    autograd::backward(sum(tanh(w * 3.0)));
    CHECK(bit_identical(with_segment, w.grad().to(Device::cpu()).to_vector<float>()));
    CHECK(memory_stats(d)[Category::Activation].current_bytes == act0);
  }
}

TEST_CASE("GPT: forwards whose loss is dropped, or that throw, keep no activations; training still works") {
  for (Device d : reel::testing::devices()) {
    CAPTURE(d);
    autograd::Tape::current().clear();
    nn::GPTConfig c{/*vocab_size*/ 11, /*block_size*/ 8, /*n_layer*/ 4, /*n_head*/ 2, /*n_embd*/ 16};
    c.dropout = 0.1;
    nn::GPT gpt(c);
    gpt.to(d);
    const Tensor ids = from_vector(std::vector<int64_t>{1, 2, 3, 4, 5, 6, 7, 8}, {2, 4}).to(d);
    const Tensor bad_ids = from_vector(std::vector<int64_t>{1, 2, 30, 4}, {1, 4}).to(d);  // 30 >= vocab
    const int64_t act0 = memory_stats(d)[Category::Activation].current_bytes;
    for (const char* policy : {"none", "sqrt", "every:1"}) {
      CAPTURE(policy);
      gpt.set_checkpoint(autograd::CheckpointPolicy::parse(policy));
      for (int i = 0; i < 3; ++i) {
        { Tensor l = sum(gpt(ids)); }  // a validation pass without NoGrad
        CHECK(autograd::Tape::current().empty());
        CHECK(memory_stats(d)[Category::Activation].current_bytes == act0);
        // cpu: throws half-way (the embedding checks ids); cuda: at the read of the output (the
        // deferred index check, kernels/index_check.h), the output dropped as it unwinds
        CHECK_THROWS_AS(reel::testing::values(gpt(bad_ids)), Error);
        CHECK(autograd::Tape::current().empty());
        CHECK(memory_stats(d)[Category::Activation].current_bytes == act0);
      }
      // A live loss keeps everything its backward needs, replays included.
      autograd::zero_grad(gpt.parameters());
      Tensor l = sum(gpt(ids));
      { Tensor side = sum(gpt(ids)); }  // a second forward dropped while the first is alive
      autograd::backward(l);
      CHECK(autograd::Tape::current().empty());
      CHECK(memory_stats(d)[Category::Activation].current_bytes == act0);
    }
  }
}

// ---- selective checkpointing (issue 12) ---------------------------------------------------------

TEST_CASE("selective: the kept op is not run again in backward; a user rule chooses what is kept") {
  for (Device d : reel::testing::devices()) {
    CAPTURE(d);
    autograd::Tape::current().clear();
    const Net net = make_net(4, 8, d);
    Generator data_gen(1);
    const Tensor x = randn({4, 8}, DType::f32, Device::cpu(), &data_gen).to(d);
    auto step = [&](const autograd::KeepRule& keep) {
      autograd::zero_grad(net.params);
      Tensor h = x;
      {
        std::optional<autograd::Checkpoint> scope;
        if (keep) scope.emplace(keep);
        for (int i = 0; i < 4; ++i) h = tanh(matmul(h, net.params[2 * i]) + net.params[2 * i + 1]);
      }
      Profiler prof;
      autograd::backward(sum(h * h));
      prof.stop();
      std::map<std::string, int> replayed;  // op -> kernels run in replays
      for (const profile::KernelRecord& k : prof.kernels())
        if (k.phase == profile::Phase::Replay) ++replayed[k.op];
      std::vector<float> g;
      for (const Tensor& p : net.params) {
        const std::vector<float> pg = p.grad().to(Device::cpu()).to_vector<float>();
        g.insert(g.end(), pg.begin(), pg.end());
      }
      return std::make_pair(replayed, g);
    };
    const auto plain = step(nullptr);
    CHECK(plain.first.empty());
    const auto selective = step(autograd::keep_costly_outputs);
    CHECK(selective.first.count("matmul") == 0);  // kept: never recomputed
    CHECK(selective.first.at("add") > 0);
    CHECK(selective.first.at("tanh") > 0);
    CHECK(bit_identical(selective.second, plain.second));
    // A user rule: keep the tanh outputs instead; now the matmuls and adds are recomputed.
    const auto keep_tanh = step([](const autograd::Op& op) { return std::string(op.name()) == "tanh"; });
    CHECK(keep_tanh.first.count("tanh") == 0);
    CHECK(keep_tanh.first.at("matmul") > 0);
    CHECK(bit_identical(keep_tanh.second, plain.second));
    CHECK_REEL_ERROR(autograd::Checkpoint{autograd::KeepRule{}}, "a selective scope needs a keep rule");
  }
}

TEST_CASE("checkpoint policies: every kind prints as text that parses back to the same policy") {
  using P = autograd::CheckpointPolicy;
  std::vector<P> policies = {P::parse("none"), P::parse("sqrt"), P::parse("selective"), P::parse("every:1"),
                             P::parse("every:7"), P::parse("list:3,0,5"), P::parse("list:"), P::budget(1),
                             P::budget(4096), P::budget(1000), P::budget(1536 * 1024), P::budget(int64_t{3} << 29),
                             P::budget((int64_t{5} << 30) + 1), P::parse("budget:48MiB"), P::parse("budget:0.5KiB")};
  P empty_list;
  empty_list.kind = P::Kind::List;
  policies.push_back(empty_list);
  for (const P& p : policies) {
    CAPTURE(p.str());
    CHECK(P::parse(p.str()) == p);
    CHECK(P::parse(p.str()).str() == p.str());
  }
  CHECK(P::parse("list:3,0,5").str() == "list:0,3,5");
  CHECK(P::budget(1000).str() == "budget:1000");
  // A rule of its own prints as selective (code is not text), and parses back with the default rule.
  const P own = P::selective([](const autograd::Op&) { return true; });
  CHECK(own.str() == "selective");
  CHECK(P::parse(own.str()) != own);
  CHECK(P::parse(own.str()).kind == P::Kind::Selective);
}

TEST_CASE("checkpoint policies: selective and budget parse, print and refuse bad sizes") {
  using P = autograd::CheckpointPolicy;
  CHECK(P::parse("selective").kind == P::Kind::Selective);
  CHECK(P::parse("selective").str() == "selective");
  const std::vector<P::Run> runs = P::parse("selective").plan(5);
  REQUIRE(runs.size() == 1);
  CHECK((runs[0].begin == 0 && runs[0].end == 5 && runs[0].selective && !runs[0].checkpointed));
  CHECK(P::parse("budget:48MiB").budget_bytes == 48 << 20);
  CHECK(P::parse("budget:1.5GiB").budget_bytes == int64_t{3} << 29);
  CHECK(P::parse("budget:4096").budget_bytes == 4096);
  CHECK(P::parse("budget:512KiB").str() == "budget:512KiB");
  CHECK(P::parse("budget:1.5GiB").str() == "budget:1536MiB");
  for (const char* bad : {"budget:", "budget:-3MiB", "budget:12XB", "budget:0", "budget:nan"})
    CHECK_REEL_ERROR(P::parse(bad), "is not a positive size");
  CHECK_REEL_ERROR(P::parse("budget:1MiB").plan(4), "a budget has no plan before the chain is measured");
  // Decimal units (1000^n) as well as binary ones (1024^n), read exactly.
  CHECK(P::parse("budget:300MB").budget_bytes == 300000000);
  CHECK(P::parse("budget:1.5GB").budget_bytes == 1500000000);
  CHECK(P::parse("budget:2KB").budget_bytes == 2000);
  CHECK(P::parse("budget:1.005KB").budget_bytes == 1005);  // 1.005 * 1000 in double is 1004.999...
  CHECK(P::parse("budget:0.5KiB").budget_bytes == 512);
  CHECK(P::parse("budget:1.50GiB").budget_bytes == int64_t{3} << 29);
  CHECK(P::parse("budget:64B").budget_bytes == 64);
  CHECK(P::parse("budget:8589934591GiB").budget_bytes == (int64_t{8589934591} << 30));  // 2^63 - 2^30
  for (const char* text : {"budget:300MB", "budget:1.5GB", "budget:1.005KB", "budget:7"}) {
    CAPTURE(text);
    const P p = P::parse(text);
    CHECK(P::parse(p.str()) == p);  // decimal sizes print as bytes, and parse back
  }
  // A size whose byte count is not whole is refused, not truncated (budget:0.4 was 0 bytes).
  for (const char* bad : {"budget:1.5", "budget:0.4", "budget:0.3KiB", "budget:1.0005KB", "budget:1.5B"}) {
    CAPTURE(bad);
    CHECK_REEL_ERROR(P::parse(bad), (std::string("checkpoint policy '") + bad + "'").c_str());
    CHECK_REEL_ERROR(P::parse(bad), "is not a whole number of bytes");
  }
  for (const char* bad : {"budget:.", "budget:1.", "budget:1.5.2MiB", "budget: 5MiB", "budget:+5", "budget:1e6",
                          "budget:0x10", "budget:inf", "budget:5mb", "budget:5 MiB", "budget:0.0GiB"}) {
    CAPTURE(bad);
    CHECK_REEL_ERROR(P::parse(bad), (std::string("checkpoint policy '") + bad + "'").c_str());
    CHECK_REEL_ERROR(P::parse(bad), "is not a positive size");
  }
  CHECK_REEL_ERROR(P::parse("budget:8589934592GiB"), "'8589934592GiB' is too large");
  // Every byte count str() prints parses back, 19 digits included (a fuzzer found budget:8582934593GB,
  // printed as 8582934593000000000 bytes, refused as more than 18 digits).
  CHECK(P::parse("budget:1234567890123456789").budget_bytes == 1234567890123456789);
  for (const char* text : {"budget:8582934593GB", "budget:1234567890123456.78KB", "budget:9223372036854775807"}) {
    CAPTURE(text);
    const P p = P::parse(text);
    CHECK(P::parse(p.str()) == p);
  }
  CHECK_REEL_ERROR(P::parse("budget:9223372036854775808"), "is too large");
  CHECK_REEL_ERROR(P::parse("budget:12345678901234567890"), "has more than 19 digits");
  CHECK_REEL_ERROR(P::parse("budget:0.1234567890123456789KiB"), "18 after the point");
  CHECK_REEL_ERROR(P::selective(nullptr), "the keep rule is empty");
  CHECK_REEL_ERROR(P::budget(0), "the budget must be positive");
}

TEST_CASE("checkpoint policies: every parse error quotes the text it refused") {
  using P = autograd::CheckpointPolicy;
  for (const char* bad : {"every:", "every:0", "every:-3", "every:x", "every:99999999999999999999", "list:1,,2",
                          "list:-1", "list:a", "budget:", "budget:0", "budget:0.4", "budget:12XB", "half", ":",
                          "sqrt:2", "None"}) {
    CAPTURE(bad);
    CHECK_REEL_ERROR(P::parse(bad), (std::string("checkpoint policy '") + bad + "'").c_str());
  }
  for (const char* bad : {"host", "", "All", "auto "}) {
    CAPTURE(bad);
    CHECK_REEL_ERROR(autograd::parse_offload_mode(bad), (std::string("offload mode '") + bad + "'").c_str());
  }
}

namespace {

// A conv-free net with BatchNorm, trained with plain SGD: (N, 5) -> linear 6 -> batch_norm ->
// relu -> linear 3, or (N, 3, 2, 5) -> linear over the last dim to 6 -> batch_norm over the 3
// channels -> relu -> linear to 2; the loss is sum(h * h). The block runs plain, inside one
// segment, inside a selective scope (the linears kept, batch_norm and relu recomputed), or inside
// a segment around a selective scope (batch_norm then runs three times: forward, the segment's
// replay, its piece's replay).
enum class BnCheckpoint { None, Segment, Selective, SegmentAroundSelective };

struct BnRun {
  std::vector<std::vector<float>> grads;  // per step: every parameter's gradient, then the input's
  std::vector<float> running_mean, running_var;
  std::map<std::string, int> replayed;  // backend kernel -> runs in replays (op batch_norm), all steps
};

BnRun train_bn(Device d, bool spatial, BnCheckpoint mode) {
  Generator gen(21);
  const int64_t C = spatial ? 3 : 6, out = spatial ? 2 : 3;
  auto param = [&](Shape s, double scale, double shift) {
    return (randn(std::move(s), DType::f32, Device::cpu(), &gen) * scale + shift).to(d).set_requires_grad();
  };
  // W1 (6, 5), b1 (6), gamma (C), beta (C), W2 (out, 6)
  const std::vector<Tensor> leaves{param({6, 5}, 0.5, 0), param({6}, 0.1, 0), param({C}, 0.3, 1), param({C}, 0.1, 0),
                                   param({out, 6}, 0.4, 0)};
  const Tensor rm = zeros({C}, DType::f32, d), rv = ones({C}, DType::f32, d);
  BnRun run;
  Generator data_gen(22);
  for (int step = 0; step < 3; ++step) {
    const Shape xs = spatial ? Shape{4, 3, 2, 5} : Shape{8, 5};
    const Tensor x = randn(xs, DType::f32, Device::cpu(), &data_gen).to(d).set_requires_grad();
    autograd::zero_grad(leaves);
    Tensor h;
    {
      std::optional<autograd::Checkpoint> outer, inner;
      if (mode == BnCheckpoint::Segment || mode == BnCheckpoint::SegmentAroundSelective) outer.emplace();
      if (mode == BnCheckpoint::Selective || mode == BnCheckpoint::SegmentAroundSelective)
        inner.emplace(autograd::keep_costly_outputs);
      h = linear(x, leaves[0], leaves[1]);
      h = relu(batch_norm(h, rm, rv, leaves[2], leaves[3], true, 0.1));
      h = linear(h, leaves[4]);
      inner.reset();
      outer.reset();
    }
    Profiler prof;
    autograd::backward(sum(h * h));
    prof.stop();
    for (const profile::KernelRecord& k : prof.kernels())
      if (k.phase == profile::Phase::Replay && k.op == "batch_norm") ++run.replayed[k.kernel];
    std::vector<float> g;
    for (const Tensor& p : leaves) {
      const std::vector<float> pg = p.grad().to(Device::cpu()).to_vector<float>();
      g.insert(g.end(), pg.begin(), pg.end());
    }
    const std::vector<float> xg = x.grad().to(Device::cpu()).to_vector<float>();
    g.insert(g.end(), xg.begin(), xg.end());
    run.grads.push_back(g);
    autograd::NoGrad no_grad;
    for (const Tensor& p : leaves) p.copy_(p - p.grad() * 0.1);  // SGD, lr 0.1
  }
  run.running_mean = rm.to(Device::cpu()).to_vector<float>();
  run.running_var = rv.to(Device::cpu()).to_vector<float>();
  return run;
}

}  // namespace

TEST_CASE("batch_norm under checkpointing: the replay reuses the forward's statistics, running stats updated once") {
  for (Device d : reel::testing::devices())
    for (bool spatial : {false, true}) {
      CAPTURE(d);
      CAPTURE(spatial);
      const BnRun plain = train_bn(d, spatial, BnCheckpoint::None);
      CHECK(plain.replayed.empty());
      // Three steps of momentum 0.1 moved the running statistics away from (0, 1).
      for (float m : plain.running_mean) CHECK(m != 0.0f);
      for (const BnCheckpoint mode :
           {BnCheckpoint::Segment, BnCheckpoint::Selective, BnCheckpoint::SegmentAroundSelective}) {
        CAPTURE(static_cast<int>(mode));
        const BnRun r = train_bn(d, spatial, mode);
        // batch_norm was replayed (normalising again) through its replay kernel alone: neither the
        // statistics kernel nor the forward (with its running-stat update) ran in any replay. On
        // the cpu the replay kernel is the apply kernel with the kept statistics; on cuda (cuDNN)
        // it is cuDNN's training forward without running statistics, which does recompute the
        // statistics internally and discards them (kernels/cuda/batchnorm.cu).
        const int replays = mode == BnCheckpoint::SegmentAroundSelective ? 2 : 1;
        CHECK(r.replayed.size() == 1);
        CHECK(r.replayed.count("batch_norm_replay") == 1);
        if (r.replayed.count("batch_norm_replay")) CHECK(r.replayed.at("batch_norm_replay") == 3 * replays);
        CHECK(r.replayed.count("batch_norm_stats") == 0);
        CHECK(r.replayed.count("batch_norm_forward") == 0);
        CHECK(bit_identical(r.running_mean, plain.running_mean));
        CHECK(bit_identical(r.running_var, plain.running_var));
        REQUIRE(r.grads.size() == plain.grads.size());
        for (size_t i = 0; i < r.grads.size(); ++i) {
          CAPTURE(i);
          CHECK(bit_identical(r.grads[i], plain.grads[i]));
        }
        CHECK(autograd::Tape::current().empty());
      }
    }
}
