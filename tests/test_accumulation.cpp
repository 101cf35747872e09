// Gradient accumulation in the tape: N micro-batches, each sum-reduced and scaled by 1/(window
// total) at backward, add up in the parameters' .grad to exactly the gradient of one batch of
// the whole window (an MLP and a small attention block, f32 and f64, even and uneven
// micro-batches), while peak activation memory stays that of one micro-batch. And the exception:
// BatchNorm's statistics see each micro-batch alone, so there the window is not the big batch.
#include <algorithm>
#include <cmath>
#include <functional>

#include "autograd/functions.h"
#include "autograd/nn_functions.h"
#include "autograd/tape.h"
#include "core/allocator.h"
#include "core/profile.h"
#include "optim/optimizer.h"
#include "testing.h"

using namespace reel;

namespace {

struct Model {
  const char* name;
  std::vector<Tensor> params;
  Shape sample_shape, target_shape;  // one sample's input and target
  std::function<Tensor(const std::vector<Tensor>& p, const Tensor& x)> forward;
};

Tensor param(const Shape& shape, double scale, DType dt, Device d, Generator& gen) {
  MemoryCategory category(Category::Parameter);
  return (randn(shape, DType::f64, Device::cpu(), &gen) * scale).to(dt).to(d).set_requires_grad();
}

Tensor softmax_last(const Tensor& x) {
  Tensor e = exp(x);
  return e / sum(e, {-1}, true);
}

// (n, 6) -> Linear(6, 16) -> GELU -> Linear(16, 3)
Model mlp(DType dt, Device d, Generator& gen) {
  Model m{"mlp", {}, {6}, {3}, nullptr};
  m.params = {param({6, 16}, 0.4, dt, d, gen), param({16}, 0.1, dt, d, gen), param({16, 3}, 0.25, dt, d, gen),
              param({3}, 0.1, dt, d, gen)};
  m.forward = [](const std::vector<Tensor>& p, const Tensor& x) {
    return matmul(gelu(matmul(x, p[0]) + p[1]), p[2]) + p[3];
  };
  return m;
}

// (n, T=4, C=8): single-head self-attention, softmax(q k^T / sqrt(C)) v, then an output Linear.
Model attention(DType dt, Device d, Generator& gen) {
  Model m{"attention", {}, {4, 8}, {4, 8}, nullptr};
  for (int i = 0; i < 4; ++i) m.params.push_back(param({8, 8}, 0.35, dt, d, gen));
  m.params.push_back(param({8}, 0.1, dt, d, gen));
  m.forward = [](const std::vector<Tensor>& p, const Tensor& x) {
    Tensor q = matmul(x, p[0]), k = matmul(x, p[1]), v = matmul(x, p[2]);        // (n, T, C)
    Tensor att = softmax_last(matmul(q, k, false, true) * (1.0 / std::sqrt(8.0)));  // (n, T, T)
    return matmul(matmul(att, v), p[3]) + p[4];                                   // (n, T, C)
  };
  return m;
}

// Sum over the micro-batch of the per-sample squared error (sum-reduced, not averaged).
Tensor loss_of(const Model& m, const Tensor& x, const Tensor& target) {
  Tensor diff = m.forward(m.params, x) - target;
  return sum(diff * diff);
}

Shape with_rows(int64_t rows, const Shape& sample) {
  Shape s{rows};
  s.insert(s.end(), sample.begin(), sample.end());
  return s;
}

// max |grad - want| <= rel * max |want|, for every parameter's gradient.
void check_grads(const std::vector<Tensor>& params, const std::vector<std::vector<double>>& want, double rel) {
  for (size_t i = 0; i < params.size(); ++i) {
    CAPTURE(i);
    const std::vector<double> g = reel::testing::values(params[i].grad());
    double scale = 0, err = 0;
    for (size_t e = 0; e < g.size(); ++e) {
      scale = std::max(scale, std::fabs(want[i][e]));
      err = std::max(err, std::fabs(g[e] - want[i][e]));
    }
    CHECK(scale > 0);
    CHECK(err <= rel * scale);
  }
}

void check_accumulation(Model (*make)(DType, Device, Generator&), DType dt, Device d) {
  Generator gen(42);
  Model m = make(dt, d, gen);
  CAPTURE(m.name);
  const int64_t N = 4, b = 3, total = N * b;
  const Tensor X = randn(with_rows(total, m.sample_shape), DType::f64, Device::cpu(), &gen).to(dt).to(d);
  const Tensor T = randn(with_rows(total, m.target_shape), DType::f64, Device::cpu(), &gen).to(dt).to(d);
  // Micro-batch rows [begin, end) as tensors of their own (a step's inputs come and go with it).
  auto rows = [](const Tensor& t, int64_t begin, int64_t end) { return t.slice(0, begin, end).clone(); };

  // One batch of the whole window.
  autograd::backward(loss_of(m, X, T), 1.0 / total);
  std::vector<std::vector<double>> full;
  for (const Tensor& p : m.params) full.push_back(reel::testing::values(p.grad()));
  const double rel = dt == DType::f32 ? 1e-6 : 1e-12;

  // One micro-batch alone: its activation peak is the budget of the whole window.
  autograd::zero_grad(m.params);
  const int64_t act0 = memory_stats(d)[Category::Activation].current_bytes;
  reset_peak_memory(d);
  autograd::backward(loss_of(m, rows(X, 0, b), rows(T, 0, b)), 1.0 / total);
  const int64_t one_peak = memory_stats(d)[Category::Activation].peak_bytes - act0;
  CHECK(one_peak > 0);

  for (const std::vector<int64_t>& sizes : {std::vector<int64_t>{b, b, b, b}, std::vector<int64_t>{1, 5, 2, 4}}) {
    CAPTURE(sizes.size());
    CAPTURE(sizes[1]);
    autograd::zero_grad(m.params);
    reset_peak_memory(d);
    int64_t begin = 0;
    for (int64_t n : sizes) {
      autograd::backward(loss_of(m, rows(X, begin, begin + n), rows(T, begin, begin + n)), 1.0 / total);
      begin += n;
      CHECK(memory_stats(d)[Category::Activation].current_bytes == act0);  // the tape let go of everything
    }
    check_grads(m.params, full, rel);
    const int64_t window_peak = memory_stats(d)[Category::Activation].peak_bytes - act0;
    if (sizes[1] == b) CHECK(window_peak == one_peak);            // N micro-batches cost one
    else CHECK(window_peak == one_peak * 5 / b);                  // the largest (5 rows) sets it
  }
}

}  // namespace

TEST_CASE("accumulating micro-batches equals one big batch: MLP") {
  for (Device d : reel::testing::devices()) {
    CAPTURE(d);
    check_accumulation(mlp, DType::f32, d);
  }
  check_accumulation(mlp, DType::f64, Device::cpu());
}

TEST_CASE("accumulating micro-batches equals one big batch: attention block") {
  for (Device d : reel::testing::devices()) {
    CAPTURE(d);
    check_accumulation(attention, DType::f32, d);
  }
  check_accumulation(attention, DType::f64, Device::cpu());
}

namespace {

// The largest gradient difference, relative to the largest gradient, between one batch of 12
// samples and 4 accumulated micro-batches of 3, through (n, 6) -> Linear(6, 8) -> norm -> ReLU ->
// Linear(8, 3), the squared error summed and scaled by 1/12 (f64: rounding is ~1e-16).
double accumulation_gap(const std::function<Tensor(const Tensor&, const Tensor&, const Tensor&)>& norm) {
  Generator gen(50);
  const DType dt = DType::f64;
  const Device d = Device::cpu();
  const std::vector<Tensor> p{param({6, 8}, 0.5, dt, d, gen), param({8}, 0.1, dt, d, gen),
                              (param({8}, 0.2, dt, d, gen) + 1.0).detach().set_requires_grad(),
                              param({8}, 0.1, dt, d, gen), param({8, 3}, 0.4, dt, d, gen)};
  const Tensor X = randn({12, 6}, dt, d, &gen) * 2.0 + 0.5, T = randn({12, 3}, dt, d, &gen);
  auto loss = [&](const Tensor& x, const Tensor& t) {
    const Tensor diff = matmul(relu(norm(matmul(x, p[0]) + p[1], p[2], p[3])), p[4]) - t;
    return sum(diff * diff);
  };
  autograd::backward(loss(X, T), 1.0 / 12);
  std::vector<std::vector<double>> big;
  for (const Tensor& q : p) big.push_back(reel::testing::values(q.grad()));
  autograd::zero_grad(p);
  for (int64_t i = 0; i < 4; ++i)
    autograd::backward(loss(X.slice(0, 3 * i, 3 * i + 3).clone(), T.slice(0, 3 * i, 3 * i + 3).clone()), 1.0 / 12);
  double scale = 0, gap = 0;
  for (size_t i = 0; i < p.size(); ++i) {
    const std::vector<double> g = reel::testing::values(p[i].grad());
    for (size_t e = 0; e < g.size(); ++e) {
      scale = std::max(scale, std::fabs(big[i][e]));
      gap = std::max(gap, std::fabs(g[e] - big[i][e]));
    }
  }
  return gap / scale;
}

}  // namespace

TEST_CASE("BatchNorm breaks accumulation (per-micro-batch statistics); GroupNorm and LayerNorm do not") {
  const double bn = accumulation_gap([](const Tensor& h, const Tensor& w, const Tensor& b) {
    return batch_norm(h, Tensor(), Tensor(), w, b, true);
  });
  const double gn = accumulation_gap([](const Tensor& h, const Tensor& w, const Tensor& b) {
    return group_norm(h, 2, w, b);
  });
  const double ln = accumulation_gap([](const Tensor& h, const Tensor& w, const Tensor& b) {
    return layer_norm(h, w, b);
  });
  MESSAGE("max |accumulated - big batch| / max |big batch| gradient: batch_norm " << bn << ", group_norm " << gn
                                                                                   << ", layer_norm " << ln);
  // Each micro-batch of 3 is normalised with its own mean and variance: another function of the
  // parameters than the big batch's, so another gradient, far beyond rounding.
  CHECK(bn > 1e-2);
  // Per-sample normalisations: the sum of the micro-batches' gradients is the big batch's.
  CHECK(gn < 1e-12);
  CHECK(ln < 1e-12);
}

TEST_CASE("a Linear's weight and bias gradients are added into .grad by one fused GEMM (sinks)") {
  using testing::check_close;
  using testing::devices;
  using testing::uniform_f64;
  for (Device device : devices()) {
    for (DType dtype : {DType::f64, DType::f32}) {
      CAPTURE(device);
      const std::string dtype_label = dtype_name(dtype);
      CAPTURE(dtype_label);
      const Tensor w = uniform_f64({5, 7}, 41).to(dtype).to(device);
      const Tensor b = uniform_f64({5}, 44).to(dtype).to(device);
      const Tensor x = uniform_f64({2, 3, 7}, 42).to(dtype).to(device);  // (B, T, in): db sums B and T
      w.set_requires_grad();
      b.set_requires_grad();
      const Tensor g_out = uniform_f64({2, 3, 5}, 43).to(dtype).to(device);
      autograd::backward(linear(x, w, b), g_out);  // first backward: no buffers yet, the gradients are cloned
      const Tensor first = w.grad().clone(), first_b = b.grad().clone();
      const void* buffer = w.grad().data_ptr();
      const void* buffer_b = b.grad().data_ptr();
      const uint64_t version = w.grad().version(), version_b = b.grad().version();
      Profiler prof;
      autograd::backward(linear(x, w, b), g_out);  // second: added into the buffers by the fused GEMM
      prof.stop();
      int adds = 0, matmuls = 0, fused = 0, sums = 0;
      for (const profile::KernelRecord& k : prof.kernels()) {
        adds += k.kernel.rfind("binary", 0) == 0;
        matmuls += k.kernel == "matmul" && k.op_backward;
        fused += k.kernel == "matmul_bgrad" && k.op_backward;
        sums += k.kernel == "reduce.sum" && k.op_backward;
      }
      CHECK(adds == 0);     // no separate pass adding a temporary into .grad
      CHECK(fused == 1);    // dW and db in one kernel (x needs no gradient)
      CHECK(matmuls == 0);
      CHECK(sums == 0);
      CHECK(w.grad().data_ptr() == buffer);
      CHECK(b.grad().data_ptr() == buffer_b);
      CHECK(w.grad().version() > version);  // an in-place write, seen by saved-tensor checks
      CHECK(b.grad().version() > version_b);
      check_close(w.grad(), first * 2.0, 0.0, dtype == DType::f64 ? 1e-12 : 1e-5);
      check_close(b.grad(), first_b * 2.0, 0.0, dtype == DType::f64 ? 1e-12 : 1e-5);
      // A .grad the user replaced with a strided layout is not a sink: the tape adds into it.
      w.grad().copy_(first);
      const Tensor strided = zeros({7, 5}, dtype, device).transpose(0, 1);
      strided.copy_(first);
      w.autograd_meta()->grad = strided;
      autograd::backward(linear(x, w), g_out);
      check_close(w.grad(), first * 2.0, 0.0, dtype == DType::f64 ? 1e-12 : 1e-5);
    }
  }
}

TEST_CASE("layer_norm's and add_layer_norm's dw and db go into .grad from the backward kernel (sinks)") {
  using testing::check_close;
  using testing::devices;
  using testing::uniform_f64;
  for (Device device : devices()) {
    for (DType dtype : {DType::f64, DType::f32}) {
      CAPTURE(device);
      const std::string dtype_label = dtype_name(dtype);
      CAPTURE(dtype_label);
      const Tensor w = uniform_f64({7}, 61).to(dtype).to(device), b = uniform_f64({7}, 62).to(dtype).to(device);
      const Tensor x = uniform_f64({2, 3, 7}, 63).to(dtype).to(device);
      const Tensor r = uniform_f64({2, 3, 7}, 64).to(dtype).to(device);
      const Tensor g_out = uniform_f64({2, 3, 7}, 65).to(dtype).to(device);
      w.set_requires_grad();
      b.set_requires_grad();
      Tensor ln_first;  // layer_norm(x, w, b)'s dw
      for (bool fused : {false, true}) {
        CAPTURE(fused);
        const auto step = [&] {
          autograd::backward(fused ? add_layer_norm(x, r, w, b).y : layer_norm(x, w, b), g_out);
        };
        autograd::zero_grad({w, b});
        for (const Tensor* p : {&w, &b}) {  // no buffers: the first backward hands fresh gradients to the tape
          p->autograd_meta()->grad = Tensor();
          p->autograd_meta()->grad_is_zero = false;  // (else grad() would fill the clone with zeros)
        }
        step();
        const Tensor first = w.grad().clone(), first_b = b.grad().clone();
        if (!fused) ln_first = first;
        const void* buffer = w.grad().data_ptr();
        const void* buffer_b = b.grad().data_ptr();
        const uint64_t version = w.grad().version(), version_b = b.grad().version();
        // What the backward runs besides the norm's kernel: fills, copies and adds, in the rule or
        // after it (the tape's), except the tape's zeros for add_layer_norm's unused output s.
        const auto extra = [](const Profiler& prof) {
          int n = 0;
          for (const profile::KernelRecord& k : prof.kernels())
            if (k.phase == profile::Phase::Backward)
              n += (k.kernel == "fill" && !k.op.empty()) || k.kernel.rfind("copy", 0) == 0 ||
                   k.kernel.rfind("binary", 0) == 0;
          return n;
        };
        Profiler prof;
        step();  // added into the buffers by the backward kernel's column sums
        prof.stop();
        CHECK(extra(prof) == 0);
        CHECK(w.grad().data_ptr() == buffer);
        CHECK(b.grad().data_ptr() == buffer_b);
        CHECK(w.grad().version() > version);  // an in-place write, seen by saved-tensor checks
        CHECK(b.grad().version() > version_b);
        // first + first: the sum rounded first, then added, as the tape's add would.
        CHECK(testing::bit_identical(w.grad(), first + first));
        CHECK(testing::bit_identical(b.grad(), first_b + first_b));
        autograd::zero_grad({w, b});
        Profiler prof2;
        step();  // written, not added: the buffers' stale values are never read
        prof2.stop();
        CHECK(extra(prof2) == 0);
        CHECK(w.grad().data_ptr() == buffer);
        CHECK(testing::bit_identical(w.grad(), first));
        CHECK(testing::bit_identical(b.grad(), first_b));
      }
      // A frozen bias: no sink asked for it, no gradient; w's written as before.
      const Tensor frozen = b.detach();
      autograd::zero_grad({w});
      autograd::backward(layer_norm(x, w, frozen), g_out);
      CHECK_FALSE(frozen.grad().defined());
      CHECK(testing::bit_identical(w.grad(), ln_first));
    }
  }
}

TEST_CASE("zero_grad defers its fill: the next backward writes .grad, a read before it sees zeros") {
  using testing::check_close;
  using testing::devices;
  using testing::uniform_f64;
  for (Device device : devices()) {
    CAPTURE(device);
    const Tensor w = uniform_f64({5, 7}, 51).to(device), b = uniform_f64({5}, 52).to(device);
    const Tensor x = uniform_f64({6, 7}, 53).to(device), g_out = uniform_f64({6, 5}, 54).to(device);
    w.set_requires_grad();
    b.set_requires_grad();
    const auto step = [&] { autograd::backward(linear(x, w, b), g_out); };
    step();
    const Tensor w_grad = w.grad().clone(), b_grad = b.grad().clone();
    step();  // .grad now holds twice the gradient
    autograd::zero_grad({w, b});
    Profiler prof;
    step();  // written, not added: w's by its GEMM (a sink with beta = 0), b's by its column sum
    prof.stop();
    int fills = 0, adds = 0;
    for (const profile::KernelRecord& k : prof.kernels()) {
      fills += k.kernel == "fill" && k.phase == profile::Phase::Backward && k.op.empty();
      adds += k.kernel.rfind("binary", 0) == 0;
    }
    CHECK(adds == 0);
    CHECK(fills == 0);
    check_close(w.grad(), w_grad, 0.0, 1e-6);
    check_close(b.grad(), b_grad, 0.0, 1e-6);
    // Read before any backward: Tensor::grad() fills the deferred zeros.
    autograd::zero_grad({w, b});
    check_close(w.grad(), zeros({5, 7}), 0.0, 0.0);
    step();  // now added onto those zeros
    check_close(w.grad(), w_grad, 0.0, 1e-6);
    check_close(b.grad(), b_grad, 0.0, 1e-6);
    // An optimizer's zero_grad too, and its step reads the gradient through grad().
    optim::SGD sgd({w, b}, 0.1);
    sgd.zero_grad();
    const Tensor w_before = w.detach().clone();
    sgd.step();  // gradients read as zeros: nothing moves
    check_close(w, w_before, 0.0, 0.0);
  }
}

TEST_CASE("a 16-bit parameter with an f32 .grad buffer accumulates its gradients in f32") {
  // distributed/fsdp.h's mixed precision: bf16 / f16 parameters, f32 gradient buffers set with set_grad.
  for (const DType low : {DType::bf16, DType::f16}) {
    CAPTURE(low);
    Generator gen(11);
    const Tensor w = param({4, 6}, 0.5, DType::f32, Device::cpu(), gen).detach().to(low).set_requires_grad();
    const Tensor x1 = randn({3, 6}, DType::f64, Device::cpu(), &gen).to(low);
    const Tensor x2 = randn({5, 6}, DType::f64, Device::cpu(), &gen).to(low);
    const auto loss = [&](const Tensor& x) { return sum(cast(matmul(x, w.t()), DType::f32)); };
    // The 16-bit gradients of each micro-batch alone, as the plain tape gives them.
    Tensor g1, g2;
    for (const auto& [x, g] : {std::pair<Tensor, Tensor*>{x1, &g1}, std::pair<Tensor, Tensor*>{x2, &g2}}) {
      w.set_grad(Tensor());
      autograd::backward(loss(x));
      REQUIRE(w.grad().dtype() == low);
      *g = w.grad().to(DType::f32);
    }
    // An f32 buffer: the first gradient written (zero_grad's deferred fill), the second added in f32.
    w.set_grad(full({4, 6}, 7.0, DType::f32));
    autograd::zero_grad({w});
    autograd::backward(loss(x1));
    autograd::backward(loss(x2));
    REQUIRE(w.grad().dtype() == DType::f32);
    CHECK(reel::testing::bit_identical(w.grad(), g1 + g2));
    // Added to a live buffer too, and no other dtype is accepted.
    autograd::backward(loss(x1));
    CHECK(reel::testing::bit_identical(w.grad(), (g1 + g2) + g1));
    w.set_grad(zeros({4, 6}, DType::f64));
    bool threw = false;
    try {
      autograd::backward(loss(x1));
    } catch (const Error& e) {
      threw = true;
      CHECK(std::string(e.what()).find("has a .grad buffer (4, 6) f64") != std::string::npos);
    }
    CHECK(threw);
  }
}
