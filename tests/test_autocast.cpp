// Autocast (autograd/autocast.h): the per-op policy at bf16 and f16 (the dtype each op produces and
// the casts it records), the cast op's gradient, f32 master weights getting f32 gradients,
// checkpoint replays under autocast bit-identical to the plain autocast run (cpu and emulated cuda),
// Module::to(DType), a small MLP trained under bf16 and f16 close to f32, and a GPT step under bf16
// (loss and gradients near f32's, checkpointed blocks bit-identical). A GEMM's 16-bit copy of an f32
// parameter is not kept between forward and backward but cast again (same gradients).
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "autograd/autocast.h"
#include "autograd/checkpoint.h"
#include "autograd/functions.h"
#include "autograd/nn_functions.h"
#include "autograd/tape.h"
#include "core/allocator.h"
#include "nn/gpt.h"
#include "nn/layers.h"
#include "nn/sequential.h"
#include "optim/optimizer.h"
#include "testing.h"

using namespace reel;

namespace {

// How many nodes of op `name` the tape holds.
int count_nodes(const char* name) {
  const autograd::Tape& tape = autograd::Tape::current();
  int n = 0;
  for (size_t i = 0; i < tape.size(); ++i)
    if (tape.node(i).op && std::string(tape.node(i).op->name()) == name) ++n;
  return n;
}

Tensor randn_on(const Shape& s, uint64_t seed, Device d, double scale = 1.0) {
  Generator g(seed);
  return (randn(s, DType::f32, Device::cpu(), &g) * scale).to(d);
}

std::vector<float> f32_values(const Tensor& t) { return t.to(Device::cpu()).to(DType::f32).to_vector<float>(); }

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

}  // namespace

TEST_CASE("Autocast scopes: thread-local, nested, off inside, 16-bit dtypes only") {
  CHECK(!autograd::autocast_dtype());
  {
    autograd::Autocast outer(DType::bf16);
    CHECK(autograd::autocast_dtype() == DType::bf16);
    {
      autograd::Autocast inner(DType::f16);
      CHECK(autograd::autocast_dtype() == DType::f16);
      {
        autograd::Autocast off(std::nullopt);
        CHECK(!autograd::autocast_dtype());
      }
      CHECK(autograd::autocast_dtype() == DType::f16);
    }
    CHECK(autograd::autocast_dtype() == DType::bf16);
  }
  CHECK(!autograd::autocast_dtype());
  CHECK_REEL_ERROR((void)autograd::Autocast(DType::f32), "Autocast: dtype f32 is not a 16-bit floating type");
  CHECK_REEL_ERROR((void)autograd::Autocast(DType::i64), "Autocast: dtype i64");
  CHECK(!autograd::autocast_dtype());
  // An op with no row in the table cannot ask for a cast.
  autograd::Autocast amp(DType::bf16);
  CHECK_REEL_ERROR(autograd::autocast("gelu", {ones({2})}), "op \"gelu\" has no row in the autocast policy table");
}

TEST_CASE("the policy table: every row, at bf16 and f16, on the inputs it casts") {
  for (DType low : {DType::bf16, DType::f16}) {
    const char* low_name = dtype_name(low);
    CAPTURE(low_name);
    const DType other = low == DType::bf16 ? DType::f16 : DType::bf16;
    const Tensor a = ones({2, 3}), b16 = ones({2, 3}).to(low), o16 = ones({2, 3}).to(other),
                 d = ones({2, 3}, DType::f64);
    const Tensor ids = zeros({2}, DType::i64);
    autograd::Autocast amp(low);
    for (const char* op :
         {"linear", "matmul", "conv2d", "attention", "layer_norm", "rms_norm", "group_norm", "batch_norm"}) {
      CAPTURE(op);
      CHECK(*autograd::autocast_policy(op) == autograd::CastPolicy::Lower);
      const autograd::Tensors r = autograd::autocast(op, {a, o16, Tensor(), d, ids});
      CHECK(r[0].dtype() == low);
      CHECK(r[1].dtype() == low);
      CHECK(!r[2].defined());
      CHECK(r[3].dtype() == DType::f64);  // f64 is never cast
      CHECK(r[4].dtype() == DType::i64);  // nor are indices
    }
    for (const char* op :
         {"softmax", "log_softmax", "cross_entropy", "linear_cross_entropy", "mse_loss", "sum", "mean"}) {
      CAPTURE(op);
      CHECK(*autograd::autocast_policy(op) == autograd::CastPolicy::F32);
      const autograd::Tensors r = autograd::autocast(op, {b16, a, d, ids});
      CHECK(r[0].dtype() == DType::f32);
      CHECK(r[1].same(a));  // already f32: the tensor itself
      CHECK(r[2].dtype() == DType::f64);
      CHECK(r[3].dtype() == DType::i64);
    }
    for (const char* op : {"add", "sub", "mul", "div", "where", "concat"}) {
      CAPTURE(op);
      CHECK(*autograd::autocast_policy(op) == autograd::CastPolicy::Promote);
      CHECK(autograd::autocast(op, {b16, b16})[0].same(b16));  // one dtype: nothing to do
      CHECK(autograd::autocast(op, {b16, a})[0].dtype() == DType::f32);
      CHECK(autograd::autocast(op, {b16, o16})[1].dtype() == DType::f32);  // bf16 with f16: f32
      CHECK(autograd::autocast(op, {a, d})[0].dtype() == DType::f64);
      CHECK(autograd::autocast(op, {b16, ids})[1].dtype() == DType::i64);
    }
    for (const char* op : {"gelu", "relu", "dropout", "embedding", "view", "cast"})
      CHECK(!autograd::autocast_policy(op));
  }
}

TEST_CASE("the dtype each op produces under autocast, and the casts it records") {
  for (Device dev : reel::testing::devices()) {
    for (DType low : {DType::bf16, DType::f16}) {
      CAPTURE(dev);
      const char* low_name = dtype_name(low);
      CAPTURE(low_name);
      const Tensor x = randn_on({4, 8}, 1, dev).set_requires_grad();
      const Tensor w = randn_on({6, 8}, 2, dev, 0.3).set_requires_grad();
      const Tensor bias = randn_on({6}, 3, dev, 0.1).set_requires_grad();
      const Tensor g = ones({8}, DType::f32, dev).set_requires_grad();
      const Tensor targets = from_vector<int64_t>({0, 5, 2, 1}, {4}).to(dev);
      const Tensor table = randn_on({10, 8}, 4, dev).set_requires_grad();
      autograd::Tape::current().clear();
      autograd::Autocast amp(low);
      // Lower: the GEMMs run in the low type; each f32 input is cast once (x, w, bias).
      const Tensor y = linear(x, w, bias);
      CHECK(y.dtype() == low);
      CHECK(count_nodes("cast") == 3);
      const Tensor m1 = matmul(x, w, false, true), m2 = matmul(y, y, true, false);  // y already low: no cast
      CHECK(m1.dtype() == low);
      CHECK(m2.dtype() == low);
      CHECK(count_nodes("cast") == 5);
      const Tensor q = randn_on({1, 2, 4, 8}, 5, dev);  // (B, H, T, D)
      CHECK(attention(q, q, q).dtype() == low);
      const Tensor img = randn_on({2, 3, 5, 5}, 6, dev), filt = randn_on({4, 3, 3, 3}, 7, dev, 0.2);
      CHECK(conv2d(img, filt, bias.narrow(0, 0, 4)).dtype() == low);
      // F32: statistics and losses from a low input.
      CHECK(softmax(y).dtype() == DType::f32);
      CHECK(log_softmax(y).dtype() == DType::f32);
      CHECK(sum(y).dtype() == DType::f32);
      CHECK(mean(y, {1}).dtype() == DType::f32);
      CHECK(cross_entropy(y, targets).dtype() == DType::f32);
      CHECK(mse_loss(y, y.detach() * 0.5).dtype() == DType::f32);  // both low, up to f32
      CHECK(mse_loss(y, zeros({4, 6}, DType::f32, dev), "none").dtype() == DType::f32);
      const Tensor h = matmul(x, w, false, true);  // (4, 6) low
      // The norms: 16-bit in and out, whatever the dtypes of x and the weights (statistics in f32).
      CHECK(layer_norm(h, ones({6}, DType::f32, dev), zeros({6}, DType::f32, dev)).dtype() == low);
      CHECK(layer_norm(x, g).dtype() == low);
      // batch_norm too; its running statistics (not cast) stay f32 and are updated in f32.
      const Tensor rm = zeros({6}, DType::f32, dev), rv = ones({6}, DType::f32, dev);
      CHECK(batch_norm(h, rm, rv, ones({6}, DType::f32, dev), bias, true).dtype() == low);
      CHECK(rm.dtype() == DType::f32);
      CHECK(reel::testing::values(rm) != std::vector<double>(6, 0.0));
      CHECK(linear_cross_entropy(x.to(low), w, targets).dtype() == DType::f32);
      // Promote: a low block output added to an f32 residual is f32; two lows stay low.
      CHECK((h + bias).dtype() == DType::f32);
      CHECK((h * bias).dtype() == DType::f32);
      CHECK(where(gt(bias, 0.0), h, bias).dtype() == DType::f32);
      CHECK(concat({h, bias.view({1, 6})}, 0).dtype() == DType::f32);
      // The rest runs in its input's type: views, embedding (an f32 table), scalar arithmetic.
      CHECK(h.view({24}).dtype() == low);
      CHECK(transpose(h, 0, 1).dtype() == low);
      CHECK(embedding(targets, table).dtype() == DType::f32);
      // Off inside: plain dtypes.
      {
        autograd::Autocast off(std::nullopt);
        CHECK(linear(x, w, bias).dtype() == DType::f32);
        CHECK(softmax(x).dtype() == DType::f32);
      }
      autograd::Tape::current().clear();
    }
  }
}

TEST_CASE("cast: recorded, a no-op to the same dtype, gradient cast back to the input's dtype") {
  for (Device dev : reel::testing::devices()) {
    CAPTURE(dev);
    autograd::Tape::current().clear();
    const Tensor x = randn_on({3, 5}, 7, dev).set_requires_grad();
    CHECK(cast(x, DType::f32).same(x));
    CHECK(autograd::Tape::current().empty());
    const Tensor y = cast(x, DType::bf16);
    CHECK(y.dtype() == DType::bf16);
    CHECK(y.requires_grad());
    CHECK(count_nodes("cast") == 1);
    CHECK(autograd::tape_dump().find("f32->bf16") != std::string::npos);
    // The values: Tensor::to's rounding.
    CHECK(same_bits(f32_values(y), f32_values(x.detach().to(DType::bf16))));
    // d/dx sum(cast(x) widened * c) = c rounded to bf16 and back (the gradient passes through
    // bf16 once, as the downstream op's gradient is bf16), in f32.
    const Tensor c = randn_on({3, 5}, 8, dev);
    Tensor loss = sum(cast(y, DType::f32) * c);
    autograd::backward(loss);
    REQUIRE(x.grad().defined());
    CHECK(x.grad().dtype() == DType::f32);
    CHECK(same_bits(f32_values(x.grad()), f32_values(c.to(DType::bf16))));
    CHECK_REEL_ERROR(cast(from_vector<int64_t>({1}, {1}), DType::f32), "cast: x (1) i64 to f32");
    CHECK_REEL_ERROR(cast(x, DType::i32), "to i32: only floating dtypes");
  }
}

TEST_CASE("f32 parameters get f32 gradients: the GEMM's in bf16, rounded, against an f64 reference") {
  for (Device dev : reel::testing::devices()) {
    for (DType low : {DType::bf16, DType::f16}) {
      CAPTURE(dev);
      const char* low_name = dtype_name(low);
      CAPTURE(low_name);
      const Tensor x = randn_on({5, 7}, 11, dev);
      const Tensor w = randn_on({4, 7}, 12, dev, 0.5).set_requires_grad();
      const Tensor b = randn_on({4}, 13, dev, 0.1).set_requires_grad();
      const Tensor c = randn_on({5, 4}, 14, dev);
      Tensor loss;
      {
        autograd::Autocast amp(low);
        loss = sum(linear(x, w, b) * c);  // linear low, * c promotes to f32, sum f32
      }
      CHECK(loss.dtype() == DType::f32);
      autograd::backward(loss);
      REQUIRE(w.grad().defined());
      CHECK(w.grad().dtype() == DType::f32);
      CHECK(b.grad().dtype() == DType::f32);
      // dW = c_low^T x_low: the gradient reaching the GEMM is c rounded to the low type (the
      // promoting mul's gradient to its low input is cast down), x rounded too; f32 accumulation
      // and one rounding of dW to the low type, then exactly widened.
      const std::vector<double> cl = reel::testing::values(c.to(low)), xl = reel::testing::values(x.to(low));
      std::vector<double> ct(20);
      for (int i = 0; i < 5; ++i)
        for (int j = 0; j < 4; ++j) ct[j * 5 + i] = cl[i * 4 + j];
      const double u = low == DType::bf16 ? 1.0 / 256 : 1.0 / 2048;  // unit roundoff
      reel::testing::check_close(w.grad(), reel::testing::ref_matmul(ct, xl, 4, 5, 7), 2 * u, 2 * u);
      w.set_grad(Tensor());
      b.set_grad(Tensor());
    }
  }
}

namespace {

// Layer i: h = linear(tanh(h + b_i), W_i): the add promotes (f32 after a bf16 layer output), tanh
// runs in f32, the linear casts h and W_i down and returns the low type, so every segment boundary
// holds a low tensor. A layer_norm (low) and dropout (on its low output) every third layer. Loss: mean of the
// cross-entropy of the last layer's output (f32).
struct Chain {
  std::vector<Tensor> params;  // W0, b0, W1, b1, ..., gain
};

Chain make_chain(int layers, int64_t width, Device d) {
  Chain c;
  for (int i = 0; i < layers; ++i) {
    c.params.push_back(
        randn_on({width, width}, 100 + i, d, 1.2 / std::sqrt(static_cast<double>(width))).set_requires_grad());
    c.params.push_back(randn_on({width}, 200 + i, d, 0.1).set_requires_grad());
  }
  c.params.push_back(ones({width}, DType::f32, d).set_requires_grad());
  return c;
}

// `every`: layers per checkpoint segment (0: none); `selective`: one selective scope around all.
Tensor chain_loss(const Chain& c, const Tensor& x, const Tensor& targets, int every, bool selective, Generator& gen) {
  const int layers = static_cast<int>(c.params.size() / 2);
  std::unique_ptr<autograd::Checkpoint> sel, seg;
  if (selective) sel = std::make_unique<autograd::Checkpoint>(autograd::keep_costly_outputs);
  Tensor h = x;
  for (int i = 0; i < layers; ++i) {
    if (every > 0 && i % every == 0) seg = std::make_unique<autograd::Checkpoint>();
    Tensor a = tanh(h + c.params[2 * i + 1]);
    if (i % 3 == 2) a = dropout(layer_norm(a, c.params.back()), 0.1, true, &gen);
    h = linear(a, c.params[2 * i]);
    if (every > 0 && (i % every == every - 1 || i == layers - 1)) seg.reset();
  }
  sel.reset();
  return cross_entropy(h, targets);
}

struct Step {
  float loss;
  std::vector<std::vector<float>> grads;  // every parameter's, then x's
};

Step chain_step(const Chain& c, Device d, DType low, int every, bool selective, std::optional<DType> at_backward) {
  const Tensor x = randn_on({6, 16}, 42, d).set_requires_grad();
  const Tensor targets = from_vector<int64_t>({1, 0, 15, 7, 3, 9}, {6}).to(d);
  Generator gen(77);
  autograd::zero_grad(c.params);
  Tensor loss;
  {
    autograd::Autocast amp(low);
    loss = chain_loss(c, x, targets, every, selective, gen);
  }
  {
    // Backward under another (or no) autocast state: the replays re-run the recorded casts.
    std::optional<autograd::Autocast> scope;
    if (at_backward) scope.emplace(*at_backward);
    autograd::backward(loss);
  }
  Step s;
  s.loss = static_cast<float>(loss.item());
  for (const Tensor& p : c.params) {
    CHECK(p.grad().dtype() == DType::f32);
    s.grads.push_back(f32_values(p.grad()));
  }
  CHECK(x.grad().dtype() == DType::f32);
  s.grads.push_back(f32_values(x.grad()));
  return s;
}

}  // namespace

TEST_CASE("a GEMM's 16-bit copy of an f32 parameter is cast again in backward, not kept: same gradients, fewer bytes") {
  for (Device d : reel::testing::devices()) {
    for (DType low : {DType::bf16, DType::f16}) {
      CAPTURE(d);
      const std::string low_name = dtype_name(low);
      CAPTURE(low_name);
      const Tensor w = randn_on({32, 48}, 1, d, 0.2).set_requires_grad();  // f32 parameters
      const Tensor b = randn_on({32}, 2, d).set_requires_grad();
      const Tensor x0 = randn_on({8, 48}, 3, d).set_requires_grad();  // the GEMM saves W only when x needs a gradient
      const Tensor c = randn_on({8, 32}, 4, d);
      struct Run {
        int64_t kept = 0;  // activation bytes the tape keeps after forward
        std::vector<float> loss, gw, gb, gx;
      };
      // through_nonleaf: the weight reaches the cast as a non-leaf (w * 1, exact), whose copy the GEMM
      // keeps as any save; else the cast is of the parameter itself (or of a view of it).
      const auto run = [&](int how) {
        w.set_grad(Tensor());
        b.set_grad(Tensor());
        x0.set_grad(Tensor());
        autograd::Tape::current().clear();
        const Tensor x = x0 * 1.0;  // an activation, not a leaf: its copy is saved
        const int64_t before = memory_stats(d)[Category::Activation].current_bytes;
        Tensor loss;
        {
          autograd::Autocast amp(low);
          const Tensor weight = how == 0 ? w : how == 1 ? w.t().t() : w * 1.0;
          loss = sum(cast(linear(x, weight, b), DType::f32) * c);
        }
        Run r;
        r.kept = memory_stats(d)[Category::Activation].current_bytes - before;
        r.loss = f32_values(loss);
        autograd::backward(loss);
        r.gw = f32_values(w.grad());
        r.gb = f32_values(b.grad());
        r.gx = f32_values(x0.grad());
        return r;
      };
      const Run saved_copy = run(2), param = run(0), view = run(1);
      // The copy is (32, 48) 16-bit values: kept by the reference, not by the other two.
      CHECK(saved_copy.kept - param.kept == 32 * 48 * 2);
      CHECK(view.kept == param.kept);
      for (const Run* r : {&param, &view}) {
        CHECK(same_bits(r->loss, saved_copy.loss));
        CHECK(same_bits(r->gw, saved_copy.gw));
        CHECK(same_bits(r->gb, saved_copy.gb));
        CHECK(same_bits(r->gx, saved_copy.gx));
      }
      // A write to the parameter between forward and backward is refused, as for an f32 save of it.
      autograd::Tape::current().clear();
      Tensor loss;
      {
        autograd::Autocast amp(low);
        loss = sum(cast(linear(x0 * 1.0, w, b), DType::f32) * c);
      }
      {
        autograd::NoGrad no_grad;
        w.fill_(0.5);
      }
      CHECK_REEL_ERROR(autograd::backward(loss), "linear: the parameter of shape (32, 48) whose");
      autograd::Tape::current().clear();
    }
  }
}

TEST_CASE("checkpoint replay under autocast: gradients bit-identical to the plain autocast run, cpu and cuda") {
  for (Device d : reel::testing::devices()) {
    for (DType low : {DType::bf16, DType::f16}) {
      CAPTURE(d);
      const char* low_name = dtype_name(low);
      CAPTURE(low_name);
      const Chain c = make_chain(7, 16, d);
      const Step plain = chain_step(c, d, low, 0, false, std::nullopt);
      // The run really is mixed: a different result from the f32 run.
      {
        const Tensor x = randn_on({6, 16}, 42, d);
        const Tensor targets = from_vector<int64_t>({1, 0, 15, 7, 3, 9}, {6}).to(d);
        Generator gen(77);
        autograd::NoGrad no_grad;
        CHECK(static_cast<float>(chain_loss(c, x, targets, 0, false, gen).item()) != plain.loss);
      }
      struct Scheme {
        const char* name;
        int every;
        bool selective;
        std::optional<DType> at_backward;
      };
      for (const Scheme& s :
           {Scheme{"segments of 1", 1, false, std::nullopt}, Scheme{"segments of 3", 3, false, std::nullopt},
            Scheme{"segments of 2, backward inside Autocast(f16)", 2, false, DType::f16},
            Scheme{"segments of 2, backward inside Autocast(bf16)", 2, false, DType::bf16},
            Scheme{"selective", 0, true, std::nullopt},
            Scheme{"selective around segments of 3", 3, true, std::nullopt}}) {
        CAPTURE(s.name);
        const Step r = chain_step(c, d, low, s.every, s.selective, s.at_backward);
        CHECK(std::memcmp(&r.loss, &plain.loss, sizeof(float)) == 0);
        REQUIRE(r.grads.size() == plain.grads.size());
        for (size_t i = 0; i < r.grads.size(); ++i) {
          CAPTURE(i);
          CHECK(same_bits(r.grads[i], plain.grads[i]));
        }
        CHECK(autograd::Tape::current().empty());
      }
    }
  }
}

TEST_CASE("Module::to(DType): parameters, gradients and buffers converted in place, handles follow") {
  nn::Linear lin(4, 3);
  const Tensor w = lin.parameters()[0];
  Tensor loss = sum(lin(ones({2, 4})));
  autograd::backward(loss);
  REQUIRE(w.grad().defined());
  const std::vector<double> before = reel::testing::values(w);
  lin.to(DType::bf16);
  for (const Tensor& p : lin.parameters()) {
    CHECK(p.dtype() == DType::bf16);
    CHECK(p.requires_grad());
    CHECK(p.grad().dtype() == DType::bf16);
  }
  CHECK(w.dtype() == DType::bf16);  // the handle taken before follows
  reel::testing::check_close(w, before, 1.0 / 256, 0);
  const Tensor y = lin(ones({2, 4}, DType::bf16));
  CHECK(y.dtype() == DType::bf16);
  lin.to(DType::f32);
  CHECK(w.dtype() == DType::f32);
  CHECK_REEL_ERROR(lin.to(DType::i32), "Module::to: dtype i32 is not floating");
  // Floating buffers (running statistics) go to f32 for a 16-bit dtype, where the kernels keep
  // statistics; to any other dtype with the parameters; integer buffers stay.
  nn::BatchNorm2d bn(2);
  for (DType t : {DType::bf16, DType::f16, DType::f64, DType::f32}) {
    bn.to(t);
    CHECK(bn.weight.dtype() == t);
    CHECK(bn.running_mean.dtype() == (t == DType::f64 ? DType::f64 : DType::f32));
    CHECK(bn.running_var.dtype() == bn.running_mean.dtype());
    CHECK(bn.num_batches_tracked.dtype() == DType::i64);
  }
  autograd::Tape::current().clear();
}

namespace {

// Relative L2 distance |a - b| / |b| of two equally long lists.
double rel_l2(const std::vector<float>& a, const std::vector<float>& b) {
  REQUIRE(a.size() == b.size());
  double d = 0, n = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    d += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    n += double(b[i]) * b[i];
  }
  return std::sqrt(d / std::max(n, 1e-30));
}

}  // namespace

TEST_CASE("an MLP trained 30 Adam steps under bf16 and f16 stays close to f32 (master weights f32)") {
  // A teacher's labels for 64 random inputs; nn::MLP 20-32-32-5 with GELU (in the low type under
  // autocast: the 16-bit elementwise kernels), the same initial weights for each run.
  const Tensor x = randn_on({64, 20}, 5, Device::cpu());
  const Tensor teacher = randn_on({20, 5}, 6, Device::cpu());
  const Tensor targets = argmax(matmul(x, teacher), 1);
  nn::MLP init({20, 32, 32, 5}, "gelu");
  const auto train = [&](std::optional<DType> precision) {
    nn::MLP mlp({20, 32, 32, 5}, "gelu");
    mlp.load_state_dict(init.state_dict());
    optim::Adam opt(mlp.parameters(), 1e-2);
    std::vector<float> losses;
    for (int step = 0; step < 30; ++step) {
      Tensor loss;
      {
        autograd::Autocast amp(precision);
        loss = cross_entropy(mlp(x), targets);
      }
      CHECK(loss.dtype() == DType::f32);
      autograd::backward(loss);
      for (const Tensor& p : mlp.parameters()) CHECK(p.grad().dtype() == DType::f32);
      opt.step();
      opt.zero_grad();
      losses.push_back(static_cast<float>(loss.item()));
    }
    for (const Tensor& p : mlp.parameters()) CHECK(p.dtype() == DType::f32);
    return losses;
  };
  const std::vector<float> f32 = train(std::nullopt);
  CHECK(f32.back() < 0.5f * f32.front());  // it learns
  for (DType low : {DType::bf16, DType::f16}) {
    const char* low_name = dtype_name(low);
    CAPTURE(low_name);
    const std::vector<float> mixed = train(low);
    CHECK(mixed.front() != f32.front());  // really computed in 16 bits
    // Each step's loss within 3 % of f32's: bf16's unit roundoff is 2^-9 relative per rounding, a
    // few roundings per layer and 30 steps of Adam (which follows the gradient's sign, not its
    // size) keep the runs together; a missing cast back (a 16-bit master weight) drifts further.
    for (size_t i = 0; i < f32.size(); ++i) {
      CAPTURE(i);
      CHECK(std::fabs(mixed[i] - f32[i]) <= 0.03 * f32[i]);
    }
  }
}

TEST_CASE("a GPT step under bf16: f32 loss and gradients close to f32's; checkpointed blocks bit-identical") {
  nn::GPTConfig config;
  config.vocab_size = 11;
  config.block_size = 8;
  config.n_layer = 2;
  config.n_head = 2;
  config.n_embd = 16;
  std::vector<int64_t> id_values, target_values;
  for (int64_t i = 0; i < 16; ++i) {
    id_values.push_back((i * 7 + 3) % 11);
    target_values.push_back((i * 5 + 1) % 11);
  }
  const Tensor ids = from_vector<int64_t>(id_values, {2, 8}), targets = from_vector<int64_t>(target_values, {2, 8});
  for (bool fused_attention : {true, false}) {
    // false: the composed attention, matmul (bf16), softmax (f32), matmul (bf16)
    config.fused_attention = fused_attention;
    CAPTURE(fused_attention);
    nn::GPT gpt(config);
    const auto step = [&](std::optional<DType> precision, const char* checkpoint, bool fused_loss) {
      gpt.set_checkpoint(autograd::CheckpointPolicy::parse(checkpoint));
      autograd::zero_grad(gpt.parameters());
      Tensor loss;
      {
        autograd::Autocast amp(precision);
        loss = fused_loss ? gpt.loss(ids, targets) : cross_entropy(gpt(ids), targets);
      }
      CHECK(loss.dtype() == DType::f32);
      autograd::backward(loss);
      std::vector<std::vector<float>> r{{static_cast<float>(loss.item())}};
      for (const Tensor& p : gpt.parameters()) {
        CHECK(p.grad().dtype() == DType::f32);
        r.push_back(f32_values(p.grad()));
      }
      return r;
    };
    for (bool fused_loss : {false, true}) {
      CAPTURE(fused_loss);
      const auto f32 = step(std::nullopt, "none", fused_loss);
      const auto bf16 = step(DType::bf16, "none", fused_loss);
      CHECK(bf16[0][0] != f32[0][0]);
      CHECK(std::fabs(bf16[0][0] - f32[0][0]) <= 0.01 * f32[0][0]);
      // Every parameter's gradient within 10 % (relative L2) of f32's: two blocks of 16-bit GEMMs
      // with inputs rounded to 2^-9 relative, gradients summed over 16 tokens.
      for (size_t i = 1; i < f32.size(); ++i) {
        CAPTURE(i);
        CHECK(rel_l2(bf16[i], f32[i]) < 0.1);
      }
      for (const char* policy : {"sqrt", "every:1", "selective"}) {
        CAPTURE(policy);
        const auto ck = step(DType::bf16, policy, fused_loss);
        for (size_t i = 0; i < ck.size(); ++i) {
          CAPTURE(i);
          CHECK(same_bits(ck[i], bf16[i]));
        }
      }
    }
  }
}
