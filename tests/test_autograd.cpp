// The tape itself: what forward records and saves, how backward accumulates and frees, grad
// mode, detach, leaf gradients, memory categories, and every misuse raising reel::Error.
#include <cmath>

#include "autograd/functions.h"
#include "autograd/tape.h"
#include "core/allocator.h"
#include "kernels/ops.h"
#include "testing.h"

using namespace reel;
using reel::testing::check_close;
using reel::testing::values;

namespace {
Tensor leaf(const std::vector<double>& v, const Shape& shape, Device device) {
  return from_vector(v, shape).to(DType::f32).to(device).set_requires_grad();
}
int64_t activation_bytes(Device d) { return memory_stats(d)[Category::Activation].current_bytes; }
}  // namespace

TEST_CASE("backward gives the hand-derived gradients of a small expression") {
  for (Device d : reel::testing::devices()) {
    CAPTURE(d);
    Tensor a = leaf({1, 2, 3}, {3}, d), b = leaf({4, 5, 6}, {3}, d), c = leaf({0.5}, {1}, d);
    // L = sum(a * b + c * a - b / c) -> dL/da = b + c, dL/db = a - 1/c, dL/dc = sum(a) + sum(b)/c^2
    Tensor loss = sum(a * b + c * a - b / c);
    CHECK(loss.requires_grad());
    CHECK_FALSE(loss.is_leaf());
    CHECK(autograd::Tape::current().size() == 6);
    autograd::backward(loss);
    check_close(a.grad(), {4.5, 5.5, 6.5});
    check_close(b.grad(), {-1, 0, 1});
    check_close(c.grad(), {6 + 15 / 0.25});
    CHECK(autograd::Tape::current().empty());
  }
}

TEST_CASE("fan-out gradients accumulate: y = x * x + x") {
  for (Device d : reel::testing::devices()) {
    Tensor x = leaf({-1, 0.5, 2}, {3}, d);
    Tensor y = x * x + x;                 // x is used three times
    autograd::backward(sum(tanh(y) * 0.0 + y));  // a dead-end branch contributes 0
    check_close(x.grad(), {-1, 2, 5});
  }
}

TEST_CASE("backward adds into .grad; zero_grad keeps the buffer; scale and explicit gradients") {
  for (Device d : reel::testing::devices()) {
    CAPTURE(d);
    Tensor w = leaf({1, -2}, {2}, d);
    autograd::backward(sum(w * 3.0));
    const void* buffer = w.grad().data_ptr();
    CHECK(memory_stats(d)[Category::Gradient].current_bytes >= 8);
    autograd::backward(sum(w * w), 0.5);  // adds 0.5 * 2w = w
    check_close(w.grad(), {4, 1});
    CHECK(w.grad().data_ptr() == buffer);  // same persistent buffer, added into
    autograd::zero_grad({w});
    check_close(w.grad(), {0, 0});
    CHECK(w.grad().data_ptr() == buffer);
    // A non-scalar loss with an explicit gradient.
    Tensor y = w * 2.0;
    autograd::backward(y, from_vector(std::vector<float>{1, 10}, {2}).to(d));
    check_close(w.grad(), {2, 20});
  }
}

TEST_CASE("NoGrad, requires_grad propagation, detach and non-parameter leaves") {
  for (Device d : reel::testing::devices()) {
    Tensor w = leaf({2, 3}, {2}, d);
    Tensor x = from_vector(std::vector<float>{5, 7}, {2}).to(d);  // data: needs no gradient
    CHECK_FALSE(x.requires_grad());
    CHECK_FALSE((x * x).requires_grad());
    CHECK(autograd::Tape::current().empty());
    {
      autograd::NoGrad no_grad;
      CHECK_FALSE(autograd::grad_enabled());
      Tensor y = w * x;
      CHECK_FALSE(y.requires_grad());
      CHECK(autograd::Tape::current().empty());
    }
    CHECK(autograd::grad_enabled());
    // detach: same storage, cut from the graph.
    Tensor h = w * x;
    Tensor hd = h.detach();
    CHECK(hd.storage() == h.storage());
    CHECK_FALSE(hd.requires_grad());
    CHECK(hd.is_leaf());
    // An input can be a leaf that requires grad too (e.g. for saliency), alongside parameters.
    x.set_requires_grad();
    autograd::backward(sum(h * hd + x * w));
    check_close(w.grad(), {10 * 5 + 5, 21 * 7 + 7});  // d(h * hd)/dw = hd * x: hd acts as a constant
    check_close(x.grad(), {2, 3});
  }
}

TEST_CASE("saved tensors are activations and are freed, with every gradient, as backward goes") {
  for (Device d : reel::testing::devices()) {
    CAPTURE(d);
    const int64_t n = 1000, depth = 30;
    const int64_t bytes = n * 4;
    Tensor w = leaf(std::vector<double>(n, 0.1), {n}, d);
    const int64_t act0 = activation_bytes(d);
    Tensor h = w;
    for (int i = 0; i < depth; ++i) h = tanh(h * 1.5);  // tanh saves its output: one (n) per layer
    Tensor loss = sum(h);
    CHECK(activation_bytes(d) - act0 == depth * bytes);
    CHECK(autograd::Tape::current().saved_bytes() == depth * bytes);
    h = Tensor();  // the last output is still held (saved) by the tape
    const int64_t before = memory_stats(d).current_bytes;
    reset_peak_memory(d);
    autograd::backward(loss);
    // At any time during the walk: one or two output gradients and a few temporaries of the rule
    // being run. Keeping saved tensors or gradients until the end would add up to 30 (n) each.
    const int64_t peak = memory_stats(d).peak_bytes;
    CHECK(peak - before <= 5 * bytes);
    CHECK(activation_bytes(d) == act0);
    CHECK(memory_stats(d).current_bytes - before <= bytes - depth * bytes);  // + w.grad, - saved
  }
}

TEST_CASE("a tensor the tape saved is an activation until backward, then back to temporary") {
  for (Device d : reel::testing::devices()) {
    Tensor w = leaf({1, 2, 3}, {3}, d);
    Tensor x = from_vector(std::vector<float>{4, 5, 6}, {3}).to(d);  // e.g. an input batch
    CHECK(x.storage()->category() == Category::Temporary);
    Tensor y = exp(x * w);  // mul saves x (for dw); exp saves y
    CHECK(x.storage()->category() == Category::Activation);
    CHECK(y.storage()->category() == Category::Activation);
    CHECK(w.storage()->category() == Category::Temporary);  // a parameter is never an activation
    autograd::backward(sum(y));
    CHECK(x.storage()->category() == Category::Temporary);  // still held here, no longer saved
    CHECK(y.storage()->category() == Category::Temporary);
  }
}

TEST_CASE("the tape dump lists nodes, what they saved and their segments") {
  Tensor w = leaf({1, 2, 3, 4}, {2, 2}, Device::cpu());
  Tensor x = from_vector(std::vector<float>{1, 1}, {1, 2});
  Tensor y;
  {
    autograd::Checkpoint seg;
    y = gelu(matmul(x, w));
  }
  Tensor loss = sum(dropout(y, 0.5));
  const std::string dump = autograd::tape_dump();
  CHECK(dump.find("matmul") != std::string::npos);
  CHECK(dump.find("(collapsed)") != std::string::npos);
  CHECK(dump.find("dropout [p=0.5") != std::string::npos);
  autograd::Tape::current().clear();
}

TEST_CASE("misuse raises reel::Error with a clear message") {
  for (Device d : reel::testing::devices()) {
    CAPTURE(d);
    Tensor w = leaf({1, 2}, {2}, d);
    Tensor data = from_vector(std::vector<float>{3, 4}, {2}).to(d);

    // A second backward over a cleared tape.
    Tensor loss = sum(w * w);
    autograd::backward(loss);
    CHECK_REEL_ERROR(autograd::backward(loss), "already cleared");
    // A loss that does not require grad.
    CHECK_REEL_ERROR(autograd::backward(sum(data)), "does not require grad");
    {
      autograd::NoGrad no_grad;
      CHECK_REEL_ERROR(autograd::backward(sum(w)), "does not require grad");
    }
    CHECK_REEL_ERROR(autograd::backward(sum(w).detach()), "does not require grad");
    // A non-scalar loss needs an explicit gradient, of the loss's shape, dtype and device.
    Tensor y = w * data;
    CHECK_REEL_ERROR(autograd::backward(y), "non-scalar loss needs an explicit gradient");
    CHECK_REEL_ERROR(autograd::backward(y, ones({3}, DType::f32, d)), "does not match the loss (2)");
    CHECK_REEL_ERROR(autograd::backward(y, ones({2}, DType::f64, d)), "does not match the loss");
    // A tensor from a tape that backward cleared cannot feed a new graph.
    autograd::backward(sum(y));
    CHECK_REEL_ERROR(y * w, "whose tape a backward already cleared");
    Tensor fresh = y.detach() * w;  // detach() is the way out
    CHECK(fresh.requires_grad());
    autograd::Tape::current().clear();
    // requires_grad only on floating leaves.
    CHECK_REEL_ERROR(fresh.set_requires_grad(false), "not a leaf");
    CHECK_REEL_ERROR(zeros({2}, DType::i64, d).set_requires_grad(), "cannot require grad");
    // backward inside an open checkpoint segment.
    {
      autograd::Checkpoint seg;
      Tensor z = sum(w * w);
      CHECK_REEL_ERROR(autograd::backward(z), "inside an autograd::Checkpoint scope");
    }
    autograd::Tape::current().clear();
    // A stale .grad buffer (wrong shape, dtype or device) is refused before anything is added.
    Tensor v = leaf({1, 2, 3}, {3}, d);
    v.set_grad(zeros({4}, DType::f32, d));
    CHECK_REEL_ERROR(autograd::backward(sum(v * v)), "has a .grad buffer (4) f32");
    autograd::Tape::current().clear();
    v.set_grad(Tensor());
    // Parameters on two devices: an op refuses the mix; a grad buffer left on another device
    // (e.g. a parameter moved without resetting its gradient) is refused by backward.
    for (Device other : reel::testing::devices()) {
      if (other == d) continue;
      Tensor p = leaf({1, 2}, {2}, other);
      CHECK_REEL_ERROR(w * p, "expected all tensors on one device");
      v.set_grad(zeros({3}, DType::f32, other));
      const std::string where = "on " + other.str();
      CHECK_REEL_ERROR(autograd::backward(sum(v * v)), where.c_str());
      autograd::Tape::current().clear();
      v.set_grad(Tensor());
    }
    // Shapes that do not broadcast name the op and both shapes.
    CHECK_REEL_ERROR(w + ones({3}, DType::f32, d), "add: shapes (2) and (3) cannot be broadcast");
    CHECK_REEL_ERROR(dropout(w, 1.5), "dropout: p must be in [0, 1]");
    CHECK(autograd::Tape::current().empty());
  }
}

TEST_CASE("kernel entry points never record on the tape, even on tensors that require grad") {
  // The entry points view, expand, transpose and copy their inputs; with grad mode on and inputs
  // that require grad, those views must not become tape nodes (kernels know nothing of the tape).
  for (Device d : reel::testing::devices()) {
    autograd::Tape::current().clear();
    REQUIRE(autograd::grad_enabled());
    Tensor x = randn({2, 3, 4}, DType::f32, d).set_requires_grad();
    Tensor w = ones({4}, DType::f32, d).set_requires_grad();
    Tensor b = zeros({4}, DType::f32, d).set_requires_grad();
    Tensor row = randn({4}, DType::f32, d).set_requires_grad();
    Tensor m = randn({3, 4}, DType::f32, d).set_requires_grad();
    Tensor m2 = randn({5, 3}, DType::f32, d).set_requires_grad();
    Tensor v = randn({4}, DType::f32, d).set_requires_grad();
    const kernels::LayerNormForward ln = kernels::layernorm_forward(x, w, b);  // (2, 3, 4) viewed as rows
    kernels::layernorm_backward(ln.y, x, w, ln.mean, ln.rstd);
    kernels::binary(kernels::BinaryOp::Add, x, row);        // row expanded to (2, 3, 4)
    kernels::matmul(x, m, false, true);                     // m^T: a transposed view
    kernels::matmul(x, m2, true, true);                     // both transposed, batch broadcast
    kernels::matmul(v, m, false, true);                     // a 1-D operand: unsqueeze and squeeze
    kernels::sum(x, {0, 2}, true);                          // permuted so reduced dims trail
    kernels::softmax_forward(x);
    kernels::attention_forward(x, x, x);
    CHECK(autograd::Tape::current().size() == 0);
  }
}

// ---- version counters: an in-place write to what backward needs raises (issue 14) --------------

TEST_CASE("in-place writes bump the storage's version; fresh tensors start at 0") {
  for (Device d : reel::testing::devices()) {
    Tensor x = zeros({3, 4}, DType::f32, d);
    CHECK(x.version() == 0);
    x.fill_(2);
    CHECK(x.version() == 1);
    Tensor row = x.select(0, 1);  // a view shares the storage, and so the version
    row.copy_(ones({4}, DType::f32, d));
    CHECK(x.version() == 2);
    CHECK(row.version() == 2);
    CHECK(x.clone().version() == 0);  // a copy is a new storage
  }
}

TEST_CASE("an in-place write to a tensor saved for backward raises at backward, naming the op") {
  for (Device d : reel::testing::devices()) {
    CAPTURE(d);
    autograd::Tape::current().clear();
    Tensor x = from_vector(std::vector<float>(12, 1.0f), {3, 4}).to(d);  // data: mul saves it for dw
    Tensor w = leaf(std::vector<double>(12, 0.5), {3, 4}, d);
    // The case: before version counters, w.grad silently became all 2.
    Tensor l = sum(mul(x, w));
    x.fill_(2);
    CHECK_REEL_ERROR(autograd::backward(l),
                     "mul: a tensor of shape (3, 4) that mul saved for backward was modified in place "
                     "(version 0 when saved, 1 now)");
    CHECK_FALSE(w.grad().defined());  // refused before anything was accumulated
    // Refused before the walk: the tape is left as it was, and goes with the loss (tape.h).
    CHECK_FALSE(autograd::Tape::current().empty());
    l = Tensor();
    CHECK(autograd::Tape::current().empty());

    // A parameter changed under NoGrad between forward and backward (x needs a gradient: mul saves w).
    x.set_requires_grad();
    l = sum(mul(x, w));
    {
      autograd::NoGrad no_grad;
      w.copy_(full({3, 4}, 3.0, DType::f32, d));
    }
    CHECK_REEL_ERROR(autograd::backward(l), "(version 0 when saved, 1 now)");
    // Refused before the walk: the tape is left as it was, and goes with the loss (tape.h).
    CHECK_FALSE(autograd::Tape::current().empty());
    l = Tensor();
    CHECK(autograd::Tape::current().empty());

    // An op's own saved output (exp saves y), written through a view.
    Tensor y = exp(w);
    l = sum(y);
    {
      autograd::NoGrad no_grad;
      y.select(0, 2).fill_(0);
    }
    CHECK_REEL_ERROR(autograd::backward(l), "exp: a tensor of shape (3, 4) that exp saved for backward");
  }
}

TEST_CASE("in-place writes that backward does not need are fine, and so is gradient accumulation") {
  for (Device d : reel::testing::devices()) {
    CAPTURE(d);
    Tensor w = leaf({1, 2}, {2}, d);
    Tensor x = from_vector(std::vector<float>{3, 4}, {2}).to(d);
    // add saves nothing: writing its input after the forward changes no gradient.
    Tensor l = sum(add(x, w));
    x.fill_(7);
    autograd::backward(l);
    check_close(w.grad(), {1, 1});
    // A write before the forward is seen by the forward.
    x.fill_(5);
    autograd::backward(sum(mul(x, w)));
    check_close(w.grad(), {6, 6});
    // Gradients are added into .grad in place, zero_grad fills it: later backwards still run.
    autograd::backward(sum(mul(w, w)));
    autograd::zero_grad({w});
    Tensor l2 = sum(mul(w, w));
    autograd::backward(l2);
    check_close(w.grad(), {2, 4});
  }
}

// ---- the tape's lifetime rule: nodes no live tensor depends on are released (issue 14) ----------

TEST_CASE("a forward whose outputs are dropped leaves nothing on the tape") {
  for (Device d : reel::testing::devices()) {
    CAPTURE(d);
    autograd::Tape::current().clear();
    Tensor w = leaf(std::vector<double>(256, 0.1), {16, 16}, d);
    Tensor x = randn({4, 16}, DType::f32, d);
    const int64_t act0 = activation_bytes(d);
    // A validation pass run in grad mode, 200 times: each is released when its loss goes.
    for (int i = 0; i < 200; ++i) {
      { Tensor l = sum(tanh(matmul(x, w.t())) * 2.0); }
      CHECK(autograd::Tape::current().empty());
      CHECK(activation_bytes(d) == act0);
    }
    CHECK(x.storage()->category() == Category::Temporary);  // matmul saved it; no node does now
    // A live loss keeps its nodes; dropping it releases them.
    Tensor l = sum(tanh(matmul(x, w)));
    CHECK(autograd::Tape::current().size() == 3);
    CHECK(activation_bytes(d) > act0);
    l = Tensor();
    CHECK(autograd::Tape::current().empty());
    CHECK(activation_bytes(d) == act0);
  }
}

TEST_CASE("a forward that throws half-way leaves no nodes behind") {
  for (Device d : reel::testing::devices()) {
    CAPTURE(d);
    autograd::Tape::current().clear();
    Tensor w = leaf({1, 2, 3}, {3}, d);
    const int64_t act0 = activation_bytes(d);
    for (int i = 0; i < 50; ++i) {
      CHECK_REEL_ERROR(
          {
            Tensor h = exp(w * 2.0);
            Tensor bad = h + ones({4}, DType::f32, d);  // throws: shapes do not broadcast
          },
          "cannot be broadcast");
      CHECK(autograd::Tape::current().empty());
      CHECK(activation_bytes(d) == act0);
    }
  }
}

TEST_CASE("released nodes: dead branches go, what a live tensor depends on stays") {
  for (Device d : reel::testing::devices()) {
    CAPTURE(d);
    autograd::Tape::current().clear();
    const int64_t n = 100;
    Tensor w = leaf(std::vector<double>(n, 0.2), {n}, d);
    const int64_t act0 = activation_bytes(d);
    Tensor a = tanh(w);                // saves a (n)
    Tensor dead = exp(w * 3.0);        // a branch no one uses: exp saves its output (n)
    Tensor b = tanh(a * 2.0);          // saves b (n); a's node is needed through it
    CHECK(autograd::Tape::current().saved_bytes() == 3 * n * 4);
    dead = Tensor();                   // in the middle of the tape: what it saved goes now
    CHECK(autograd::Tape::current().saved_bytes() == 2 * n * 4);
    a = Tensor();                      // a's output is dead, but b depends on it: kept
    CHECK(autograd::Tape::current().saved_bytes() == 2 * n * 4);
    Tensor l = sum(b);
    b = Tensor();
    autograd::backward(l);
    // d/dw sum(tanh(2 tanh(w))) = 2 (1 - tanh(2 tanh w)^2) (1 - tanh(w)^2)
    const double t = std::tanh(0.2), u = std::tanh(2 * t);
    check_close(w.grad(), std::vector<double>(n, 2 * (1 - u * u) * (1 - t * t)), 1e-5, 1e-5);
    CHECK(activation_bytes(d) == act0);
  }
}

TEST_CASE("a long chain dropped at once is released in a loop, not a deep recursion") {
  autograd::Tape::current().clear();
  Tensor w = leaf({1, 2}, {2}, Device::cpu());
  Tensor h = w;
  for (int i = 0; i < 100000; ++i) h = h * 1.0;
  CHECK(autograd::Tape::current().size() == 100000);
  h = Tensor();  // each node held its predecessor's output: one destructor would start the cascade
  CHECK(autograd::Tape::current().empty());
}
