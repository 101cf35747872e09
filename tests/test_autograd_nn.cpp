// The tape ops of MLPs and transformers beyond the op table (tests/op_table/): views as tape
// ops (Tensor methods of a parameter carry gradients; saved views in the memory accounting; host
// access and kernel-internal views record nothing), cross-entropy edge cases (ignored targets, all
// ignored, large logits), fused against composed causal attention on T = 1, 7, 64, 129 with the
// mask checked, max/argmax, bad inputs, and a small GPT whose checkpointed gradients are
// bit-identical to the plain ones.
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <vector>

#include "autograd/functions.h"
#include "autograd/nn_functions.h"
#include "autograd/tape.h"
#include "core/allocator.h"
#include "testing.h"

using namespace reel;
using autograd::Tape;
using autograd::Tensors;
using reel::testing::check_close;
using reel::testing::values;

namespace {

Tensor param(const Shape& shape, Generator& gen, double scale = 1.0, Device d = Device::cpu(),
             DType dtype = DType::f32) {
  return (randn(shape, DType::f64, Device::cpu(), &gen) * scale).to(dtype).to(d).set_requires_grad();
}

int64_t activation_bytes(Device d) { return memory_stats(d)[Category::Activation].current_bytes; }

bool bit_identical(const Tensor& a, const Tensor& b) {
  const std::vector<double> va = values(a), vb = values(b);
  return va.size() == vb.size() && std::memcmp(va.data(), vb.data(), va.size() * sizeof(double)) == 0;
}

bool all_finite(const Tensor& t) {
  for (double v : values(t))
    if (!std::isfinite(v)) return false;
  return true;
}

}  // namespace

// ---- views are tape ops ---------------------------------------------------------------------

TEST_CASE("views of a parameter made with Tensor methods carry gradients back to it") {
  for (Device d : reel::testing::devices()) {
    CAPTURE(d);
    Generator gen(1);
    Tensor w = param({5, 4}, gen, 1.0, d);
    Tensor x = param({3, 4}, gen, 1.0, d);
    // Reference: the transpose as a matmul flag, no view.
    autograd::backward(sum(matmul(x, w, false, true) * matmul(x, w, false, true)));
    const Tensor w_ref = w.grad().clone(), x_ref = x.grad().clone();
    autograd::zero_grad({w, x});

    Tensor wt = w.t();
    CHECK(wt.requires_grad());
    CHECK_FALSE(wt.is_leaf());
    CHECK(wt.storage() == w.storage());  // still a view
    Tensor y = matmul(x, wt);
    autograd::backward(sum(y * y));
    check_close(w.grad(), w_ref, 1e-5, 1e-5);
    check_close(x.grad(), x_ref, 1e-5, 1e-5);

    // Every view method, chained: d(sum(v))/dw counts how often each element of w is read.
    autograd::zero_grad({w});
    // t = flat(w) as (4, 5), transposed: t[r][c] = flat[5 c + r]. Rows 1 and 3, column 1: flat[6]
    // and flat[8]; narrow keeps flat[8]; expand reads it 3 times.
    Tensor v = w.view({20}).reshape({4, 5}).transpose(0, 1).slice(0, 1, 5, 2).unsqueeze(0).expand({3, 2, 4})
                   .select(2, 1).narrow(1, 1, 1).squeeze(1).contiguous().flatten();  // (3)
    autograd::backward(sum(v));
    std::vector<double> expected(20, 0.0);
    expected[8] = 3;
    check_close(w.grad(), expected);
    CHECK(Tape::current().empty());
  }
}

TEST_CASE("views record only in grad mode, of tensors that require grad") {
  Generator gen(2);
  Tensor w = param({3, 4}, gen);
  {
    autograd::NoGrad no_grad;
    Tensor wt = w.t();
    CHECK_FALSE(wt.requires_grad());
    CHECK(Tape::current().empty());
  }
  Tensor plain = randn({3, 4});
  CHECK_FALSE(plain.t().requires_grad());
  CHECK_FALSE(w.detach().t().requires_grad());
  CHECK(Tape::current().empty());
  // A view that has nothing to do is the tensor itself, recorded or not.
  CHECK(w.squeeze(0).same(w));
  CHECK(squeeze(w, 1).same(w));
  CHECK(contiguous(w).same(w));
  CHECK(w.contiguous().same(w));
  CHECK(Tape::current().empty());
}

TEST_CASE("an op's forward and host access put no nodes of their own on the tape") {
  for (Device d : reel::testing::devices()) {
    CAPTURE(d);
    Generator gen(3);
    Tensor x = param({4, 3}, gen, 1.0, d);
    Tensor w = param({5, 4}, gen, 1.0, d);
    Tensor xt = x.t();  // (3, 4), not contiguous: one transpose node
    REQUIRE(Tape::current().size() == 1);
    // linear copies the non-contiguous x into (N, in) inside its forward (x.reshape, a view op);
    // the forward runs under NoGrad, so that copy is no node of its own.
    Tensor y = linear(xt, w);
    CHECK(Tape::current().size() == 2);
    // Reading a non-contiguous tensor that requires grad records nothing.
    (void)xt.to_vector<float>();
    (void)xt.str();
    (void)xt.to(Device::cpu());
    const Tensor element = xt.select(0, 0).select(0, 0);  // two select nodes (kept: element lives)
    (void)element.item();                                 // item itself none
    CHECK(Tape::current().size() == 4);
    autograd::backward(sum(y));
    CHECK(Tape::current().empty());
  }
}

TEST_CASE("split is one node with several outputs sharing the input's storage") {
  Generator gen(4);
  Tensor x = param({6, 2}, gen);
  const std::vector<Tensor> parts = split(x, {1, 3, 2}, 0);
  REQUIRE(parts.size() == 3);
  CHECK(Tape::current().size() == 1);
  for (const Tensor& p : parts) CHECK(p.storage() == x.storage());
  CHECK(parts[1].shape() == Shape{3, 2});
  const std::vector<Tensor> chunks = chunk(x, 4, 0);  // 2, 2, 2: torch.chunk gives 3 pieces here
  CHECK(chunks.size() == 3);
  autograd::backward(sum(parts[2] * 2.0) + sum(chunks[0]));
  check_close(x.grad(), {1, 1, 1, 1, 0, 0, 0, 0, 2, 2, 2, 2});
}

TEST_CASE("saved views: a parameter stays a parameter, a view counts the storage it keeps, once") {
  for (Device d : reel::testing::devices()) {
    CAPTURE(d);
    Generator gen(5);
    // A leaf created outside a MemoryCategory scope: its storage is Temporary, yet it is a
    // parameter, and so is its transpose that matmul saves.
    Tensor w = param({5, 4}, gen, 1.0, d);
    Tensor x = randn({3, 4}, DType::f32, d, &gen);
    const int64_t act0 = activation_bytes(d);
    Tensor y = matmul(x, w.t());  // saves x (for dW) ... and w^T only if x needed a gradient
    CHECK(w.storage()->category() == Category::Temporary);
    Tensor x_leaf = x.detach().set_requires_grad();
    Tensor y2 = matmul(x_leaf, w.t());  // saves w^T (for dx) and x (for dW): both leaves' storage
    CHECK(w.storage()->category() == Category::Temporary);
    CHECK(activation_bytes(d) - act0 == 3 * 4 * 4);  // only x, which the first matmul saved
    autograd::backward(sum(y) + sum(y2));

    // An expanded view is saved at the size of its storage, not its broadcast size; views of one
    // storage saved by two nodes count once.
    Tensor a = param({1000, 4}, gen, 1.0, d);
    Tensor b = randn({4}, DType::f32, d, &gen);  // needs no grad: mul saves it for da
    const int64_t act1 = activation_bytes(d);
    Tensor p1 = a * b.expand({1000, 4});
    Tensor p2 = a * b.unsqueeze(0);
    const Tape& tape = Tape::current();
    REQUIRE(tape.size() == 2);
    CHECK(tape.node(0).saved_bytes() == 4 * 4);
    CHECK(tape.node(1).saved_bytes() == 4 * 4);
    CHECK(tape.saved_bytes() == 4 * 4);
    CHECK(activation_bytes(d) - act1 == 4 * 4);
    // A slice keeps its whole storage alive, and is counted so.
    Tensor big = randn({100, 4}, DType::f32, d, &gen);
    Tensor p3 = a.slice(0, 0, 1) * big.slice(0, 10, 11);  // slice of a: a node; mul saves big's view
    CHECK(tape.size() == 4);
    CHECK(tape.node(3).saved_bytes() == 100 * 4 * 4);
    CHECK(tape.saved_bytes() == 4 * 4 + 100 * 4 * 4);
    autograd::backward(sum(p1) + sum(p2) + sum(p3));
    CHECK(activation_bytes(d) == act0);

    // The same in a checkpoint replay: the replayed w^T is still w's memory, not an activation.
    Tensor big_w = param({200, 100}, gen, 1.0, d);
    Tensor h;
    {
      autograd::Checkpoint seg;
      h = tanh(matmul(x_leaf, big_w.slice(1, 0, 4).t()));  // (3, 200); matmul saves the view for dx
    }
    reset_peak_memory(d);
    autograd::backward(sum(h));
    CHECK(memory_stats(d)[Category::Activation].peak_bytes - act0 < 200 * 100 * 4);
    CHECK(big_w.storage()->category() == Category::Temporary);
  }
}

TEST_CASE("a checkpoint replay re-makes views from the replayed inputs") {
  for (Device d : reel::testing::devices()) {
    CAPTURE(d);
    auto run = [&](bool checkpoint) {
      Generator gen(6);
      Tensor w = param({6, 4}, gen, 0.5, d);
      Tensor x = param({2, 3, 4}, gen, 1.0, d);
      Tensor loss;
      {
        std::unique_ptr<autograd::Checkpoint> seg;
        if (checkpoint) seg = std::make_unique<autograd::Checkpoint>();
        Tensor h = tanh(matmul(x, w.t()));                                  // (2, 3, 6)
        const std::vector<Tensor> qk = chunk(h.reshape({2, 3, 2, 3}), 2, 2);  // views of h
        Tensor s = qk[0].squeeze(2).transpose(0, 1) * qk[1].select(2, 0).permute({1, 0, 2});  // (3, 2, 3)
        Tensor e = expand(s.slice(2, 0, 1), {3, 2, 5});
        loss = sum(concat({e, s}, 2) * concat({e, s}, 2));
      }
      if (checkpoint) {  // nothing saved inside the segment, views included
        for (size_t i = 0; i < Tape::current().size(); ++i) CHECK(Tape::current().node(i).saved.empty());
      }
      autograd::backward(loss);
      return std::vector<Tensor>{loss.detach(), w.grad(), x.grad()};
    };
    const std::vector<Tensor> plain = run(false), replayed = run(true);
    for (size_t i = 0; i < plain.size(); ++i) {
      CAPTURE(i);
      CHECK(bit_identical(plain[i], replayed[i]));
    }
  }
}

// ---- cross-entropy ------------------------------------------------------------------------------

TEST_CASE("cross_entropy: ignored targets add nothing, and the mean is over the others") {
  for (Device d : reel::testing::devices()) {
    CAPTURE(d);
    const std::vector<double> x = {0.5, -1, 2, 0.1, 3, 3, 3, 3, -2, 0, 1, 4, 0.3, 0.2, 0.1, 0};
    const std::vector<int64_t> t = {2, -100, 3, -100};
    Tensor logits = from_vector(x, {4, 4}).to(DType::f32).to(d).set_requires_grad();
    Tensor loss = cross_entropy(logits, from_vector(t, {4}).to(d));
    // By hand: rows 0 and 2 count, lse - x[target] each, mean over 2.
    auto lse = [&](int r) {
      double s = 0;
      for (int c = 0; c < 4; ++c) s += std::exp(x[r * 4 + c]);
      return std::log(s);
    };
    const double expected = ((lse(0) - x[2]) + (lse(2) - x[11])) / 2;
    CHECK(loss.item() == doctest::Approx(expected).epsilon(1e-6));
    autograd::backward(loss);
    const std::vector<double> g = values(logits.grad());
    for (int r : {1, 3})
      for (int c = 0; c < 4; ++c) CHECK(g[r * 4 + c] == 0.0);
    for (int r : {0, 2})
      for (int c = 0; c < 4; ++c) {
        const double p = std::exp(x[r * 4 + c] - lse(r)) - (c == t[r] ? 1.0 : 0.0);
        CHECK(g[r * 4 + c] == doctest::Approx(p / 2).epsilon(1e-5));
      }
  }
}

TEST_CASE("cross_entropy: every target ignored gives loss 0 and zero gradients, never NaN") {
  for (Device d : reel::testing::devices()) {
    CAPTURE(d);
    for (const char* reduction : {"mean", "sum", "none"}) {
      CAPTURE(reduction);
      Generator gen(7);
      Tensor logits = param({3, 5}, gen, 1.0, d);
      Tensor loss = cross_entropy(logits, full({3}, -1, DType::i64, d), -1, reduction);
      check_close(loss, std::vector<double>(static_cast<size_t>(loss.numel()), 0.0), 0, 0);
      autograd::backward(sum(loss));
      check_close(logits.grad(), std::vector<double>(15, 0.0), 0, 0);
    }
  }
}

TEST_CASE("cross_entropy: logits of 1e4 give finite, exact losses and gradients (f32)") {
  for (Device d : reel::testing::devices()) {
    CAPTURE(d);
    const std::vector<float> x = {1e4f, 0, -1e4f, 1e4f - 1, -1e4f, -1e4f, -1e4f, -1e4f + 2};
    Tensor logits = from_vector(x, {2, 4}).to(d).set_requires_grad();
    Tensor loss = cross_entropy(logits, from_vector<int64_t>({3, 0}, {2}).to(d), -100, "none");
    // Row 0: lse = 1e4 + log(1 + e^-1); target 3 (1e4 - 1): loss = 1 + log(1 + e^-1).
    // Row 1: lse = -1e4 + 2 + log(1 + 3 e^-2); target 0 (-1e4): loss = 2 + log(1 + 3 e^-2).
    check_close(loss, {1 + std::log1p(std::exp(-1.0)), 2 + std::log1p(3 * std::exp(-2.0))}, 1e-5, 1e-3);
    autograd::backward(sum(loss));
    CHECK(all_finite(logits.grad()));
    const double p = 1 / (1 + std::exp(-1.0));  // softmax of row 0 at 0; 1 - p at the target 3
    const std::vector<double> g = values(logits.grad());
    CHECK(g[0] == doctest::Approx(p).epsilon(1e-5));
    CHECK(g[3] == doctest::Approx(-p).epsilon(1e-5));  // (1 - p) - 1
    CHECK(g[1] == 0.0);
  }
}

TEST_CASE("cross_entropy: reduction none takes a gradient per row, sum the plain total") {
  for (Device d : reel::testing::devices()) {
    CAPTURE(d);
    Generator gen(8);
    Tensor logits = param({4, 6}, gen, 1.0, d);
    const Tensor targets = from_vector<int32_t>({5, 0, -100, 2}, {4}).to(d);
    Tensor rows = cross_entropy(logits, targets, -100, "none");
    Tensor total = cross_entropy(logits, targets, -100, "sum");
    CHECK(total.item() == doctest::Approx(sum(rows).item()).epsilon(1e-6));
    const Tensor row_weights = from_vector(std::vector<float>{1, 2, 3, 0.5f}, {4}).to(d);
    autograd::backward(rows, row_weights);
    const Tensor g_none = logits.grad().clone();
    autograd::zero_grad({logits});
    autograd::backward(sum(cross_entropy(logits, targets, -100, "none") * row_weights));
    check_close(g_none, logits.grad(), 1e-6, 1e-7);
  }
}

// ---- attention ----------------------------------------------------------------------------------

TEST_CASE("attention: the fused op and the composed one agree in values and gradients, T = 1, 7, 64, 129") {
  for (int64_t T : {1, 7, 64, 129}) {
    CAPTURE(T);
    const Shape shape{1, 2, T, 8};
    for (bool causal : {true, false}) {
      CAPTURE(causal);
      // f64 on the CPU: to rounding; f32 on every device.
      std::vector<std::pair<Device, DType>> runs{{Device::cpu(), DType::f64}};
      for (Device d : reel::testing::devices()) runs.emplace_back(d, DType::f32);
      for (const auto& run : runs) {
        const Device d = run.first;  // not a structured binding: doctest's CAPTURE is a lambda
        const DType dtype = run.second;
        CAPTURE(d);
        CAPTURE(dtype);
        const double tol = dtype == DType::f64 ? 1e-12 : 2e-5;
        Generator gen(static_cast<uint64_t>(T));
        Tensor q = param(shape, gen, 1.0, d, dtype), k = param(shape, gen, 1.0, d, dtype);
        Tensor v = param(shape, gen, 1.0, d, dtype), w = randn(shape, dtype, d, &gen);
        Tensors outs, grads;
        for (bool fused : {true, false}) {
          autograd::zero_grad({q, k, v});
          Tensor out = fused ? attention(q, k, v, causal) : attention_composed(q, k, v, causal);
          autograd::backward(out, w);
          outs.push_back(out.detach());
          for (const Tensor& t : {q, k, v}) grads.push_back(t.grad().clone());
        }
        check_close(outs[0], outs[1], tol, tol);
        for (int i = 0; i < 3; ++i) check_close(grads[i], grads[3 + i], tol, tol);
      }
    }
  }
}

TEST_CASE("attention: query i sees exactly the keys j <= i") {
  for (int64_t T : {7, 64}) {
    CAPTURE(T);
    const Shape shape{2, 1, T, 4};
    const int64_t i = T / 2;
    for (bool fused : {true, false}) {
      CAPTURE(fused);
      Generator gen(9);
      const Device cpu = Device::cpu();
      Tensor q = param(shape, gen, 1.0, cpu, DType::f64), k = param(shape, gen, 1.0, cpu, DType::f64);
      Tensor v = param(shape, gen, 1.0, cpu, DType::f64);
      auto attend = [&](const Tensor& a, const Tensor& b, const Tensor& c, bool causal) {
        return fused ? attention(a, b, c, causal) : attention_composed(a, b, c, causal);
      };
      // Row i of causal attention is full attention of query i over the prefix 0..i.
      Tensor row = attend(q, k, v, true).select(2, i);
      {
        autograd::NoGrad no_grad;
        Tensor prefix = attend(q.slice(2, i, i + 1), k.slice(2, 0, i + 1), v.slice(2, 0, i + 1), false);
        check_close(row, prefix.select(2, 0), 1e-12, 1e-12);
      }
      // And no gradient at all reaches a later key or value, nor another query, through either
      // path: the composed path's softmax gives exp(-inf) exactly 0 in rows of any width.
      autograd::backward(sum(row));
      const std::vector<double> dq = values(q.grad()), dk = values(k.grad()), dv = values(v.grad());
      int leaks = 0, reached = 0;
      for (int64_t b = 0; b < 2; ++b)
        for (int64_t j = 0; j < T; ++j)
          for (int64_t c = 0; c < 4; ++c) {
            const size_t e = static_cast<size_t>((b * T + j) * 4 + c);
            if (j > i) leaks += dk[e] != 0.0 || dv[e] != 0.0;
            else reached += dv[e] != 0.0;
            if (j != i) leaks += dq[e] != 0.0;
          }
      CHECK(leaks == 0);
      CHECK(reached == 2 * (i + 1) * 4);
    }
  }
}

// ---- max ------------------------------------------------------------------------------------------

TEST_CASE("max along an axis: the gradient goes to the first maximum; argmax records nothing") {
  for (Device d : reel::testing::devices()) {
    CAPTURE(d);
    Tensor x = from_vector(std::vector<float>{1, 3, 3, -1, 7, 2}, {2, 3}).to(d).set_requires_grad();
    Tensor m = max(x, 1);
    check_close(m, {3, 7});
    check_close(max(x, 0, true), {1, 7, 3});
    CHECK(max(x, 0, true).shape() == Shape{1, 3});
    const size_t nodes = Tape::current().size();
    Tensor idx = argmax(x, -1);
    CHECK(idx.dtype() == DType::i64);
    CHECK_FALSE(idx.requires_grad());
    CHECK(idx.to(Device::cpu()).to_vector<int64_t>() == std::vector<int64_t>{1, 1});
    CHECK(Tape::current().size() == nodes);
    autograd::backward(sum(m * 2.0));
    check_close(x.grad(), {0, 2, 0, 0, 2, 0});
  }
}

// ---- bad inputs ---------------------------------------------------------------------------------

TEST_CASE("bad inputs raise reel::Error naming the op and the shapes") {
  Generator gen(10);
  Tensor x = param({3, 4}, gen);
  // linear
  CHECK_REEL_ERROR(linear(x, param({5, 3}, gen)), "linear: x (3, 4) and weight (5, 3) do not match");
  CHECK_REEL_ERROR(linear(x, param({5, 4}, gen), param({4}, gen)), "linear: bias (4) does not match weight (5, 4)");
  CHECK_REEL_ERROR(linear(x, param({5, 4}, gen, 1.0, Device::cpu(), DType::f64)), "linear: x (3, 4) f32");
  // cross-entropy: dtype and shape of targets, out-of-range targets, the reduction's name
  CHECK_REEL_ERROR(cross_entropy(x, zeros({3})), "targets (3) have dtype f32");
  CHECK_REEL_ERROR(cross_entropy(x, zeros({4}, DType::i64)), "logits (3, 4) and targets (4) do not match");
  CHECK_REEL_ERROR(cross_entropy(x, from_vector<int64_t>({0, 4, 1}, {3})), "target 4 at position (1) of (3)");
  CHECK_REEL_ERROR(cross_entropy(x, from_vector<int64_t>({0, -100, -1}, {3})), "target -1");
  CHECK_REEL_ERROR(cross_entropy(x, zeros({3}, DType::i64), -100, "avg"), "reduction \"avg\"");
  // embedding: out-of-range ids (and negative ones), float ids, a table that is not 2-D
  Tensor table = param({7, 2}, gen);
  CHECK_REEL_ERROR(embedding(from_vector<int64_t>({1, 9}, {2}), table), "id 9 at position (1) of (2)");
  CHECK_REEL_ERROR(embedding(from_vector<int32_t>({-1}, {1}), table), "id -1");
  CHECK_REEL_ERROR(embedding(zeros({2}), table), "ids (2) have dtype f32");
  CHECK_REEL_ERROR(embedding(zeros({2}, DType::i64), param({7}, gen)), "table (7) must be 2-D");
  // normalisation, softmax, max
  CHECK_REEL_ERROR(layer_norm(x, param({5}, gen), param({5}, gen)), "weight (5) does not match x (3, 4)");
  CHECK_REEL_ERROR(layer_norm(x, param({4}, gen), param({3}, gen)), "bias (3) does not match x (3, 4)");
  CHECK_REEL_ERROR(rms_norm(x, param({3}, gen)), "weight (3) does not match x (3, 4)");
  CHECK_REEL_ERROR(softmax(x, 2), "softmax: dim 2 is out of range");
  CHECK_REEL_ERROR(max(zeros({2, 0}).set_requires_grad(), 1), "empty axis 1 of shape (2, 0)");
  // attention
  Tensor q = param({1, 2, 5, 4}, gen);
  CHECK_REEL_ERROR(attention(q, param({1, 2, 5, 3}, gen), q), "q (1, 2, 5, 4), k (1, 2, 5, 3)");
  CHECK_REEL_ERROR(attention(q, param({1, 2, 6, 4}, gen), param({1, 2, 6, 4}, gen)), "as many queries as keys");
  CHECK_REEL_ERROR(attention_composed(q, param({1, 2, 5, 3}, gen), q), "attention_composed: q (1, 2, 5, 4)");
  CHECK_REEL_ERROR(attention_composed(q, param({1, 2, 6, 4}, gen), param({1, 2, 6, 4}, gen)),
                   "as many queries as keys");
  // shape ops
  CHECK_REEL_ERROR(reshape(x, {5, -1}), "reshape: cannot reshape (3, 4)");
  CHECK_REEL_ERROR(view(x.t(), {12}), "view: a tensor of shape (4, 3)");
  CHECK_REEL_ERROR(expand(x, {3, 5}), "expand: cannot expand shape (3, 4) to (3, 5)");
  CHECK_REEL_ERROR(transpose(x, 0, 2), "transpose: dim 2 is out of range");
  CHECK_REEL_ERROR(permute(x, {0, 0}), "permute: dim 0 repeated");
  CHECK_REEL_ERROR(select(x, 0, 3), "select: index 3 is out of range for dim 0 of shape (3, 4)");
  CHECK_REEL_ERROR(narrow(x, 1, 2, 3), "narrow: [2, 5) is out of range for dim 1 of shape (3, 4)");
  CHECK_REEL_ERROR(concat({x, param({2, 5}, gen)}, 0),
                   "concat: along dim 0, tensor 1 (2, 5) does not match tensor 0 (3, 4)");
  CHECK_REEL_ERROR(concat({}, 0), "concat: no tensors");
  CHECK_REEL_ERROR(split(x, {2, 2}, 0), "split: sizes (2, 2) add up to 4, not to the size 3 of dim 0 of (3, 4)");
  CHECK_REEL_ERROR(chunk(x, 0, 0), "chunk: the number of chunks must be positive");
  Tape::current().clear();  // x.t() above recorded a node before view refused it
}

// ---- a small GPT, checkpointed -------------------------------------------------------------------

namespace {

struct Block {
  Tensor ln1_w, ln1_b, w_qkv, b_qkv, w_proj, b_proj, ln2_w, ln2_b, w_fc, b_fc, w_out, b_out;
};

struct Gpt {
  int64_t V = 11, T = 7, C = 8, H = 2;
  Tensor wte, wpe, lnf_w, lnf_b;  // the token table is tied to the output projection
  std::vector<Block> blocks;
  std::vector<Tensor> params() const {
    std::vector<Tensor> p{wte, wpe, lnf_w, lnf_b};
    for (const Block& b : blocks)
      for (const Tensor& t : {b.ln1_w, b.ln1_b, b.w_qkv, b.b_qkv, b.w_proj, b.b_proj, b.ln2_w, b.ln2_b, b.w_fc,
                              b.b_fc, b.w_out, b.b_out})
        p.push_back(t);
    return p;
  }
};

Gpt make_gpt(int layers, Device d) {
  Gpt m;
  Generator gen(11);
  MemoryCategory category(Category::Parameter);
  auto ones_ish = [&](int64_t n) {
    return (randn({n}, DType::f32, Device::cpu(), &gen) * 0.1 + 1.0).to(d).set_requires_grad();
  };
  m.wte = param({m.V, m.C}, gen, 0.5, d);
  m.wpe = param({m.T + 3, m.C}, gen, 0.1, d);  // longer than the sequence: the model uses a slice
  m.lnf_w = ones_ish(m.C);
  m.lnf_b = param({m.C}, gen, 0.1, d);
  const double s = 1 / std::sqrt(static_cast<double>(m.C));
  for (int l = 0; l < layers; ++l)
    m.blocks.push_back({ones_ish(m.C), param({m.C}, gen, 0.1, d), param({3 * m.C, m.C}, gen, s, d),
                        param({3 * m.C}, gen, 0.1, d), param({m.C, m.C}, gen, s, d), param({m.C}, gen, 0.1, d),
                        ones_ish(m.C), param({m.C}, gen, 0.1, d), param({4 * m.C, m.C}, gen, s, d),
                        param({4 * m.C}, gen, 0.1, d), param({m.C, 4 * m.C}, gen, s / 2, d),
                        param({m.C}, gen, 0.1, d)});
  return m;
}

// layernorm -> causal attention -> linear, then layernorm -> linear -> gelu -> linear, each with a
// residual and dropout. Heads are split and merged with views (split, reshape, transpose).
Tensor block(const Gpt& m, const Block& b, const Tensor& x, bool fused, Generator& gen) {
  const int64_t B = x.size(0), T = x.size(1), C = m.C, H = m.H, D = C / H;
  const std::vector<Tensor> qkv = split(linear(layer_norm(x, b.ln1_w, b.ln1_b), b.w_qkv, b.b_qkv), {C, C, C}, -1);
  auto heads = [&](const Tensor& t) { return t.reshape({B, T, H, D}).transpose(1, 2); };  // (B, H, T, D)
  Tensor a = fused ? attention(heads(qkv[0]), heads(qkv[1]), heads(qkv[2]))
                   : attention_composed(heads(qkv[0]), heads(qkv[1]), heads(qkv[2]));
  a = a.transpose(1, 2).reshape({B, T, C});
  Tensor h = x + dropout(linear(a, b.w_proj, b.b_proj), 0.1, true, &gen);
  Tensor f = linear(gelu(linear(layer_norm(h, b.ln2_w, b.ln2_b), b.w_fc, b.b_fc)), b.w_out, b.b_out);
  return h + dropout(f, 0.1, true, &gen);
}

// Which parts run inside a checkpoint segment: part 0 the embeddings, 1..L the blocks, L+1 the head
// and loss. Segments are [begin, end) ranges of parts, outer before inner.
Tensor gpt_loss(const Gpt& m, const Tensor& ids, const Tensor& targets, bool fused,
                const std::vector<std::pair<int, int>>& spans, Generator& gen) {
  const int parts = static_cast<int>(m.blocks.size()) + 2;
  std::vector<std::pair<int, std::unique_ptr<autograd::Checkpoint>>> open;  // (end, scope)
  Tensor x, loss;
  for (int p = 0; p < parts; ++p) {
    for (const auto& [begin, end] : spans)
      if (begin == p) open.emplace_back(end, std::make_unique<autograd::Checkpoint>());
    if (p == 0) {
      x = embedding(ids, m.wte) + m.wpe.slice(0, 0, ids.size(1));  // a view of a parameter
    } else if (p < parts - 1) {
      x = block(m, m.blocks[static_cast<size_t>(p - 1)], x, fused, gen);
    } else {
      Tensor logits = linear(layer_norm(x, m.lnf_w, m.lnf_b), m.wte);  // (B, T, V), tied weights
      loss = cross_entropy(logits, targets);
    }
    while (!open.empty() && open.back().first == p + 1) open.pop_back();
  }
  return loss;
}

}  // namespace

TEST_CASE("a checkpointed GPT (views, attention, layernorm, dropout, cross-entropy) has bit-identical gradients") {
  for (Device d : reel::testing::devices()) {
    CAPTURE(d);
    const Gpt m = make_gpt(2, d);
    const std::vector<Tensor> params = m.params();
    const Tensor ids = from_vector<int64_t>({1, 5, 2, 9, 0, 3, 3, 10, 4, 4, 7, 1, 2, 6}, {2, 7}).to(d);
    const Tensor targets = from_vector<int64_t>({5, 2, 9, 0, 3, 3, -100, 4, 4, 7, 1, 2, 6, 8}, {2, 7}).to(d);
    for (bool fused : {true, false}) {
      CAPTURE(fused);
      auto step = [&](const std::vector<std::pair<int, int>>& spans) {
        Generator gen(99);  // the dropout streams
        autograd::zero_grad(params);
        Tensor loss = gpt_loss(m, ids, targets, fused, spans, gen);
        const int64_t saved = Tape::current().saved_bytes();
        autograd::backward(loss);
        std::vector<Tensor> out{loss.detach()};
        for (const Tensor& p : params) out.push_back(p.grad().clone());
        return std::make_pair(out, saved);
      };
      const auto [plain, plain_saved] = step({});
      struct Scheme {
        const char* name;
        std::vector<std::pair<int, int>> spans;
      };
      const std::vector<Scheme> schemes = {
          {"each block", {{1, 2}, {2, 3}}},
          {"embeddings with block 0, block 1 with the head and loss", {{0, 2}, {2, 4}}},
          {"everything, nested around each block", {{0, 4}, {1, 2}, {2, 3}}},
      };
      for (const Scheme& s : schemes) {
        CAPTURE(s.name);
        const auto [grads, saved] = step(s.spans);
        CHECK(saved < plain_saved);
        REQUIRE(grads.size() == plain.size());
        for (size_t i = 0; i < grads.size(); ++i) {
          CAPTURE(i);
          CHECK(bit_identical(grads[i], plain[i]));
        }
        CHECK(Tape::current().empty());
      }
    }
  }
}
