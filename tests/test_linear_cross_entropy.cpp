// linear_cross_entropy (autograd/ops/linear_cross_entropy.h), beyond its op table rows: values and
// gradients against cross_entropy(linear(h, W, b)) on every device at a size where chunks matter,
// what the tape saves (dh and dW, far below N*V) and the forward's peak, the loss-only path (NoGrad,
// frozen inputs), bit-identical gradients through a checkpoint replay, GPT::loss against
// cross_entropy(gpt(ids)), and each bad input's message.
#include <string>
#include <vector>

#include "reel.h"
#include "testing.h"

using namespace reel;
using reel::testing::bit_identical;
using reel::testing::check_close;
using reel::testing::devices;
using reel::testing::values;

namespace {

Tensor leaf(const Shape& shape, uint64_t seed, DType dt, Device d, double scale = 1.0) {
  Generator g(seed);
  return (randn(shape, DType::f64, Device::cpu(), &g) * scale).to(dt).to(d).set_requires_grad();
}

// Targets in [0, V), every 5th row ignored (`ignore`).
Tensor targets_for(int64_t n, int64_t v, uint64_t seed, Device d, DType dt = DType::i64, int64_t ignore = -100) {
  Generator g(seed);
  const std::vector<double> u = values(rand({n}, DType::f64, Device::cpu(), &g));
  std::vector<int64_t> t;
  for (size_t i = 0; i < u.size(); ++i) t.push_back(i % 5 == 3 ? ignore : static_cast<int64_t>(u[i] * static_cast<double>(v)));
  return from_vector(t, {n}, Device::cpu()).to(dt).to(d);
}

// Token ids in [0, V), none ignored.
Tensor ids_for(int64_t n, int64_t v, uint64_t seed) {
  Generator g(seed);
  std::vector<int64_t> t;
  for (double u : values(rand({n}, DType::f64, Device::cpu(), &g))) t.push_back(static_cast<int64_t>(u * static_cast<double>(v)));
  return from_vector(t, {n});
}

struct Result {
  Tensor loss, dh, dw, db;
};

// One forward and backward (d(loss) = 0.7) on fresh leaves of the same values.
template <typename Loss>
Result run(Loss f, const Tensor& h0, const Tensor& w0, const Tensor& b0) {
  const Tensor h = h0.detach().clone().set_requires_grad(), w = w0.detach().clone().set_requires_grad();
  const Tensor b = b0.defined() ? b0.detach().clone().set_requires_grad() : Tensor();
  Result r;
  r.loss = f(h, w, b);
  autograd::backward(r.loss, 0.7);
  r.dh = h.grad();
  r.dw = w.grad();
  if (b.defined()) r.db = b.grad();
  return r;
}

int64_t saved_bytes() { return autograd::Tape::current().saved_bytes(); }

}  // namespace

TEST_CASE("linear_cross_entropy equals cross_entropy(linear(h, W, b)): every device, f32 and f64, ragged chunks") {
  const int64_t N = 37, C = 16, V = 300;
  for (Device d : devices())
    for (DType dt : {DType::f32, DType::f64})
      for (const char* red : {"mean", "sum"})
        for (bool with_bias : {false, true})
          for (int64_t chunk : {1, 5, 37, 100, 0}) {
            CAPTURE(d);
            CAPTURE(dtype_name(dt));
            CAPTURE(red);
            CAPTURE(with_bias);
            CAPTURE(chunk);
            const Tensor h = leaf({N, C}, 1, dt, d), w = leaf({V, C}, 2, dt, d, 0.3);
            const Tensor b = with_bias ? leaf({V}, 3, dt, d) : Tensor();
            const Tensor t = targets_for(N, V, 4, d);
            const Result fused = run([&](const Tensor& x, const Tensor& wt, const Tensor& bt) {
              return linear_cross_entropy(x, wt, t, -100, red, chunk, bt);
            }, h, w, b);
            const Result plain = run([&](const Tensor& x, const Tensor& wt, const Tensor& bt) {
              return cross_entropy(linear(x, wt, bt), t, -100, red);
            }, h, w, b);
            const double rtol = dt == DType::f64 ? 1e-12 : 2e-5, atol = dt == DType::f64 ? 1e-14 : 1e-6;
            check_close(fused.loss, plain.loss, rtol, atol);
            check_close(fused.dh, plain.dh, rtol, atol);
            check_close(fused.dw, plain.dw, rtol, atol);
            if (with_bias) check_close(fused.db, plain.db, rtol, atol);
          }
}

TEST_CASE("linear_cross_entropy (B, T, C) with i32 targets and ignore_index 7 on every device") {
  for (Device d : devices()) {
    CAPTURE(d);
    const Tensor h = leaf({3, 5, 8}, 11, DType::f64, d), w = leaf({40, 8}, 12, DType::f64, d);
    const Tensor t = targets_for(15, 40, 13, Device::cpu(), DType::i32, 7).reshape({3, 5}).to(d);
    const Result fused = run([&](const Tensor& x, const Tensor& wt, const Tensor&) {
      return linear_cross_entropy(x, wt, t, 7, "mean", 4);
    }, h, w, Tensor());
    const Result plain = run([&](const Tensor& x, const Tensor& wt, const Tensor&) {
      return cross_entropy(linear(x, wt), t, 7);
    }, h, w, Tensor());
    check_close(fused.loss, plain.loss, 1e-12, 1e-14);
    check_close(fused.dh, plain.dh, 1e-12, 1e-14);
    check_close(fused.dw, plain.dw, 1e-12, 1e-14);
  }
}

TEST_CASE("linear_cross_entropy saves dh and dW only, far below the N x V of cross_entropy's dlogits") {
  // V >> C: dlogits (N, V) would be 1 MiB, dh + dW are 2 KiB + 128 KiB.
  const int64_t N = 64, C = 8, V = 4096, R = 8;
  const Device d = Device::cpu();
  const Tensor h = leaf({N, C}, 21, DType::f32, d), w = leaf({V, C}, 22, DType::f32, d);
  const Tensor t = targets_for(N, V, 23, d);
  autograd::Tape::current().clear();
  const int64_t act0 = memory_stats(d)[Category::Activation].current_bytes;
  const int64_t before = memory_stats(d).current_bytes;
  reset_peak_memory(d);
  {
    const Tensor loss = linear_cross_entropy(h, w, t, -100, "mean", R);
    const int64_t expected = (N * C + V * C) * 4;  // dh (N, C) + dW (V, C), f32
    CHECK(saved_bytes() == expected);
    CHECK(memory_stats(d)[Category::Activation].current_bytes - act0 == expected);
    // The forward's peak: dh, dW, one chunk's logits and dlogits (2 R V), and small change.
    const int64_t peak = memory_stats(d).peak_bytes - before;
    CHECK(peak <= expected + 2 * R * V * 4 + (64 << 10));
    CHECK(peak < N * V * 4 / 2);
    autograd::backward(loss);
    CHECK(memory_stats(d)[Category::Activation].current_bytes == act0);  // the tape let go of both
  }
  {  // backward scales the saves in place: with .grad buffers in place it allocates no (V, C)
    const Tensor loss = linear_cross_entropy(h, w, t, -100, "mean", R);
    const int64_t at_backward = memory_stats(d).current_bytes;
    reset_peak_memory(d);
    autograd::backward(loss, 0.5);
    CHECK(memory_stats(d).peak_bytes - at_backward < V * C * 4 / 2);
  }
  h.set_grad(Tensor());
  w.set_grad(Tensor());
  {  // the unfused head, for contrast: cross_entropy saves its dlogits (N, V)
    const Tensor loss = cross_entropy(linear(h, w), t);
    CHECK(saved_bytes() >= N * V * 4);
    autograd::Tape::current().clear();
  }
  {  // only W needs a gradient: dW alone
    const Tensor frozen = h.detach();
    const Tensor loss = linear_cross_entropy(frozen, w, t, -100, "sum", R);
    CHECK(saved_bytes() == V * C * 4);
    autograd::Tape::current().clear();
  }
}

TEST_CASE("linear_cross_entropy without gradients computes the loss alone, the same bits") {
  const int64_t N = 64, C = 8, V = 4096, R = 8;
  for (Device d : devices()) {
    CAPTURE(d);
    const Tensor h = leaf({N, C}, 31, DType::f32, d), w = leaf({V, C}, 32, DType::f32, d);
    const Tensor t = targets_for(N, V, 33, d);
    const Tensor with_grad = linear_cross_entropy(h, w, t, -100, "mean", R);
    autograd::Tape::current().clear();
    const int64_t before = memory_stats(d).current_bytes;
    reset_peak_memory(d);
    Tensor no_grad;
    {
      autograd::NoGrad guard;
      no_grad = linear_cross_entropy(h, w, t, -100, "mean", R);
    }
    CHECK(autograd::Tape::current().empty());
    CHECK(bit_identical(no_grad, with_grad));
    // No dW (128 KiB) and no dlogits: one chunk's logits (128 KiB) and small change.
    CHECK(memory_stats(d).peak_bytes - before <= R * V * 4 + (64 << 10));
    CHECK(bit_identical(linear_cross_entropy(h.detach(), w.detach(), t, -100, "mean", R), with_grad));
    CHECK(autograd::Tape::current().empty());
  }
}

TEST_CASE("linear_cross_entropy in a checkpoint segment (replayed) and a selective one (kept): bit-identical gradients") {
  const int64_t N = 20, C = 8, V = 64;
  for (Device d : devices())
    for (int64_t chunk : {3, 0}) {
      CAPTURE(d);
      CAPTURE(chunk);
      const Tensor x0 = leaf({N, C}, 41, DType::f32, d), w0 = leaf({V, C}, 42, DType::f32, d);
      const Tensor t = targets_for(N, V, 43, d);
      auto f = [&](const Tensor& x, const Tensor& w) { return linear_cross_entropy(tanh(x), w, t, -100, "mean", chunk); };
      const Result plain = run([&](const Tensor& x, const Tensor& w, const Tensor&) { return f(x, w); }, x0, w0, Tensor());
      const Result ckpt = run([&](const Tensor& x, const Tensor& w, const Tensor&) {
        autograd::Checkpoint seg;
        Tensor loss = f(x, w);
        return loss;
      }, x0, w0, Tensor());
      CHECK(bit_identical(ckpt.loss, plain.loss));
      CHECK(bit_identical(ckpt.dh, plain.dh));
      CHECK(bit_identical(ckpt.dw, plain.dw));
      // Selective: the op is kept (three GEMMs to remake), tanh recomputed.
      int64_t selective_saved = 0;
      const Result selective = run([&](const Tensor& x, const Tensor& w, const Tensor&) {
        Tensor loss;
        {
          autograd::Checkpoint seg(autograd::keep_costly_outputs);
          loss = f(x, w);
        }
        selective_saved = saved_bytes();
        return loss;
      }, x0, w0, Tensor());
      CHECK(selective_saved >= (N * C + V * C) * 4);  // dh and dW kept
      CHECK(bit_identical(selective.dh, plain.dh));
      CHECK(bit_identical(selective.dw, plain.dw));
    }
}

TEST_CASE("GPT::loss equals cross_entropy(gpt(ids), targets): tied and untied head, every device") {
  for (Device d : devices())
    for (bool tie : {true, false}) {
      CAPTURE(d);
      CAPTURE(tie);
      nn::GPTConfig c{/*vocab_size*/ 29, /*block_size*/ 8, /*n_layer*/ 2, /*n_head*/ 2, /*n_embd*/ 16};
      c.tie_weights = tie;
      manual_seed(5);
      nn::GPT gpt(c);
      gpt.to(d);
      const Tensor ids = ids_for(16, 29, 51).reshape({2, 8}).to(d);
      const Tensor y = targets_for(16, 29, 52, d).reshape({2, 8});
      auto grads = [&] {
        std::vector<double> out;
        for (const Tensor& p : gpt.parameters()) {
          const std::vector<double> g = values(p.grad());
          out.insert(out.end(), g.begin(), g.end());
          p.set_grad(Tensor());
        }
        return out;
      };
      const Tensor plain = cross_entropy(gpt(ids), y);
      autograd::backward(plain);
      const std::vector<double> plain_grads = grads();
      const Tensor fused = gpt.loss(ids, y, -100, "mean", 3);
      autograd::backward(fused);
      check_close(fused, plain, 1e-6, 1e-7);
      const Tensor g = from_vector(grads(), {static_cast<int64_t>(plain_grads.size())});
      check_close(g, plain_grads, 1e-4, 1e-7);

      // The head and loss in f64 on the GPT's features: equal to rounding.
      const Tensor feats = gpt.features(ids).detach().to(DType::f64);
      const Tensor head = (tie ? gpt.wte->weight : gpt.lm_head->weight).detach().to(DType::f64);
      const Result f64_fused = run([&](const Tensor& x, const Tensor& w, const Tensor&) {
        return linear_cross_entropy(x, w, y, -100, "mean", 5);
      }, feats, head, Tensor());
      const Result f64_plain = run([&](const Tensor& x, const Tensor& w, const Tensor&) {
        return cross_entropy(linear(x, w), y);
      }, feats, head, Tensor());
      check_close(f64_fused.loss, f64_plain.loss, 1e-12, 1e-14);
      check_close(f64_fused.dh, f64_plain.dh, 1e-12, 1e-14);
      check_close(f64_fused.dw, f64_plain.dw, 1e-12, 1e-14);
      autograd::Tape::current().clear();
    }
}

TEST_CASE("linear_cross_entropy and GPT::loss: bad inputs name the op, shapes, dtypes and devices") {
  const Tensor h = randn({6, 4}), w = randn({5, 4});
  const Tensor t = from_vector<int64_t>({0, 1, 2, 3, 4, -100}, {6});
  CHECK_REEL_ERROR(linear_cross_entropy(h, randn({5, 3}), t),
                   "linear_cross_entropy: h (6, 4) and weight (5, 3) do not match");
  CHECK_REEL_ERROR(linear_cross_entropy(h, randn({4}), t), "linear_cross_entropy: h (6, 4) and weight (4) do not match");
  CHECK_REEL_ERROR(linear_cross_entropy(h, w, from_vector<int64_t>({0, 1, 2}, {3})),
                   "linear_cross_entropy: h (6, 4) and targets (3) do not match: targets of shape (6) expected");
  CHECK_REEL_ERROR(linear_cross_entropy(h, w, t.to(DType::f32)),
                   "linear_cross_entropy: targets (6) have dtype f32; integer indices (i32 or i64) expected");
  CHECK_REEL_ERROR(linear_cross_entropy(h, w.to(DType::f64), t), "one dtype and device expected");
  CHECK_REEL_ERROR(linear_cross_entropy(h.to(DType::i64), w, t), "linear_cross_entropy: h (6, 4) is i64");
  CHECK_REEL_ERROR(linear_cross_entropy(h, w, t, -100, "none"), "linear_cross_entropy: reduction \"none\" is not supported");
  CHECK_REEL_ERROR(linear_cross_entropy(h, w, t, -100, "avg"), "reduction \"avg\"");
  CHECK_REEL_ERROR(linear_cross_entropy(h, w, t, -100, "mean", -1), "linear_cross_entropy: chunk_rows -1 must be >= 0");
  CHECK_REEL_ERROR(linear_cross_entropy(h, w, t, -100, "mean", 0, randn({4})),
                   "linear_cross_entropy: bias (4) does not match weight (5, 4)");
  CHECK_REEL_ERROR(linear_cross_entropy(h, w, from_vector<int64_t>({0, 1, 5, 3, 4, -100}, {6})),
                   "linear_cross_entropy: target 5 at position");
  CHECK_REEL_ERROR(linear_cross_entropy(h, w, from_vector<int64_t>({0, 1, 5, 3, 4, -100}, {6})),
                   "is out of range [0, 5) of the classes");
  for (Device d : devices())
    if (d != Device::cpu()) {
      CHECK_REEL_ERROR(linear_cross_entropy(h, w.to(d), t), "one dtype and device expected");
      CHECK_REEL_ERROR(linear_cross_entropy(h, w, t.to(d)), "linear_cross_entropy: targets (6) on cuda:0 and h (6, 4) on cpu");
      CHECK_REEL_ERROR(linear_cross_entropy(h.to(d), w.to(d), from_vector<int64_t>({0, 1, 9, 3, 4, -100}, {6}, d)),
                       "linear_cross_entropy: target 9 at position");
    }
  nn::GPTConfig c{/*vocab_size*/ 11, /*block_size*/ 8, /*n_layer*/ 1, /*n_head*/ 2, /*n_embd*/ 8};
  nn::GPT gpt(c);
  CHECK_REEL_ERROR(gpt.loss(from_vector<int64_t>({1, 2, 3}, {1, 3}), from_vector<int64_t>({1, 2}, {1, 2})),
                   "GPT::loss: targets (1, 2) do not match ids (1, 3)");
}
