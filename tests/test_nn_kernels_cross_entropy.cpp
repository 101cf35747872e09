// Fused cross-entropy, the edge cases: all rows ignored (0, not NaN), the gradients of logits of
// 1e4, classes masked with -inf get exactly no gradient, the fused dlogits equal to the separate
// backward, bad targets and shapes. (Losses and lse against an f64 reference, for i32 and i64
// targets, ignored rows, each reduction, rows wider than the online-softmax block, huge and masked
// logits, and the backward against finite differences, on every device, are rows of
// tests/op_table/softmax.cpp.) bf16 / f16 logits: the outputs' dtypes, lse in f32.
// mse_loss, the family's other loss: values by hand, an empty input, 16-bit dtypes, and bad inputs
// (shapes, dtypes, devices, dloss, reduction) on every device (its values and gradients against
// f64 and finite differences are rows of tests/op_table/softmax.cpp).
#include <algorithm>
#include <cmath>
#include <string>

#include "autograd/nn_functions.h"
#include "autograd/tape.h"
#include "kernels/ops.h"
#include "testing.h"

using namespace reel;
using namespace reel::kernels;
using namespace reel::testing;

namespace {

// Targets for N rows of V classes: every third row ignored (when `ignore` is set).
std::vector<int64_t> targets_for(int64_t N, int64_t V, int64_t ignore, bool with_ignored) {
  std::vector<int64_t> t;
  for (int64_t n = 0; n < N; ++n) t.push_back(with_ignored && n % 3 == 1 ? ignore : (n * 7 + 3) % V);
  return t;
}

}  // namespace

TEST_CASE("all targets ignored: mean loss 0, zero gradients, no NaN") {
  Tensor logits = uniform_f64({4, 6}, 2).to(DType::f32);
  Tensor targets = from_vector<int64_t>({-100, -100, -100, -100}, {4});
  CrossEntropyForward f = cross_entropy_forward(logits, targets, Reduction::Mean, -100, 1.0);
  CHECK(f.count.item() == 0.0);
  CHECK(f.loss.item() == 0.0);
  for (double d : values(f.dlogits)) CHECK(d == 0.0);
  for (double d : values(cross_entropy_backward(scalar_tensor(1.0), logits, targets, f.lse))) CHECK(d == 0.0);
  CHECK(cross_entropy_forward(logits, targets, Reduction::Sum).loss.item() == 0.0);
}

TEST_CASE("logits of 1e4 give finite, exact losses and gradients") {
  const std::vector<double> x = {1e4, -1e4, 1e4 - 1, 0, -1e4, 2e4, 2e4, -2e4, 5, 5, 5, 1e4};
  const std::vector<int64_t> t = {1, 2, 0};
  for (DType dt : {DType::f32, DType::f64}) {
    Tensor logits = from_vector<double>(x, {3, 4}).to(dt);
    CrossEntropyForward f = cross_entropy_forward(logits, from_vector<int64_t>(t, {3}), Reduction::None, -100, 1.0);
    for (double v : values(f.loss)) CHECK(std::isfinite(v));
    for (double v : values(f.dlogits)) CHECK(std::isfinite(v));
    // Row 0: softmax (e^0, ~0, e^-1, ~0) / (1 + e^-1); target 1.
    const double p0 = 1 / (1 + std::exp(-1.0));
    const std::vector<double> d = values(f.dlogits);
    CHECK(d[0] == doctest::Approx(p0).epsilon(1e-6));
    CHECK(d[1] == doctest::Approx(-1.0).epsilon(1e-6));
  }
}

TEST_CASE("classes masked with -inf (a whole first block of them) add nothing") {
  const int64_t V = 5000;
  std::vector<double> x = values(uniform_f64({2, V}, 9, -3, 3));
  for (int64_t c = 0; c < 3000; ++c) x[c] = -INFINITY;           // row 0: the first blocks masked
  for (int64_t c = 0; c < V; c += 2) x[V + c] = -INFINITY;     // row 1: every other class masked
  const std::vector<int64_t> t = {4000, 1};
  for (DType dt : {DType::f64, DType::f32}) {
    Tensor logits = from_vector<double>(x, {2, V}).to(dt);
    CrossEntropyForward f = cross_entropy_forward(logits, from_vector<int64_t>(t, {2}), Reduction::None, -100, 1.0);
    for (double d : values(f.dlogits)) CHECK(std::isfinite(d));
    Tensor separate = cross_entropy_backward(ones({2}, dt), logits, from_vector<int64_t>(t, {2}), f.lse, Reduction::None);
    check_close(f.dlogits, separate, 1e-6, 1e-7);
    // A masked class gets exactly no gradient from either path (exp(-inf) is 0, not 5.6e-309).
    const std::vector<double> fused = values(f.dlogits), sep = values(separate);
    int leaks = 0;
    for (size_t i = 0; i < x.size(); ++i) leaks += x[i] == -INFINITY && (fused[i] != 0.0 || sep[i] != 0.0);
    CHECK(leaks == 0);
  }
}

TEST_CASE("fused dlogits equal the separate backward") {
  for (DType dt : {DType::f64, DType::f32})
    for (Reduction red : {Reduction::None, Reduction::Sum, Reduction::Mean})
      for (const Shape& shape : std::vector<Shape>{{7, 13}, {3, 4100}}) {
        CAPTURE(dtype_name(dt));
        CAPTURE(reduction_name(red));
        CAPTURE(shape_str(shape));
        const int64_t V = shape[1], N = shape[0];
        Tensor logits = uniform_f64(shape, 3, -6, 6).to(dt);
        Tensor targets = from_vector<int64_t>(targets_for(N, V, -100, true), {N});
        const double g = 0.37;  // e.g. the loss scale of an accumulation window
        CrossEntropyForward f = cross_entropy_forward(logits, targets, red, -100, g);
        Tensor dloss = red == Reduction::None ? full({N}, g, dt) : scalar_tensor(g, dt);
        Tensor separate = cross_entropy_backward(dloss, logits, targets, f.lse, red, -100);
        const double tol = dt == DType::f32 ? 2e-6 : 1e-13;
        check_close(f.dlogits, separate, tol, tol);
      }
}

TEST_CASE("bf16 and f16 logits: loss, losses and dlogits in the logits' dtype, lse in f32; backward wants that lse") {
  for (Device d : devices())
    for (DType dt : {DType::bf16, DType::f16}) {
      CAPTURE(d);
      CAPTURE(dt);
      const Tensor logits = uniform_f64({4, 7}, 3, -4, 4).to(dt).to(d);
      const Tensor t = from_vector<int64_t>({1, -100, 6, 0}, {4}).to(d);
      const CrossEntropyForward f = cross_entropy_forward(logits, t, Reduction::Mean, -100, 1.0);
      CHECK(f.loss.dtype() == dt);
      CHECK(f.losses.dtype() == dt);
      CHECK(f.dlogits.dtype() == dt);
      CHECK(f.lse.dtype() == DType::f32);
      CHECK(f.count.item() == 3.0);
      // The f32 run on the widened logits: the same lse bits (the same f32 code on the same values),
      // and a loss that is the same f64 sum rounded once to the dtype, within half an ulp of f32's.
      const CrossEntropyForward w = cross_entropy_forward(logits.to(DType::f32), t, Reduction::Mean, -100, 1.0);
      CHECK(bit_identical(f.lse, w.lse));
      check_close(f.loss, values(w.loss), dt == DType::bf16 ? 0x1p-8 : 0x1p-11, 1e-7);
      const Tensor dl = cross_entropy_backward(scalar_tensor(1.0, dt, d), logits, t, f.lse);
      CHECK(dl.dtype() == dt);
      check_close(dl, values(f.dlogits), 0, 2e-2);  // exp(x - lse) against the fused product: an ulp or so
      const std::string msg = "cross_entropy_backward: lse (4) is " + std::string(dtype_name(dt)) +
                              " for logits (4, 7) of " + dtype_name(dt) + ": f32 expected";
      CHECK_REEL_ERROR(cross_entropy_backward(scalar_tensor(1.0, dt, d), logits, t, f.lse.to(dt)), msg.c_str());
    }
}

TEST_CASE("bad cross-entropy inputs raise reel::Error naming op, values and shapes") {
  Tensor logits = zeros({4, 10});
  CHECK_REEL_ERROR(cross_entropy_forward(logits, zeros({4})),
                   "cross_entropy_forward: targets (4) have dtype f32; integer indices (i32 or i64) expected");
  CHECK_REEL_ERROR(cross_entropy_forward(logits, from_vector<int64_t>({1, 2, 10, 3}, {4})),
                   "cross_entropy_forward: target 10 at position (2) of (4) is out of range [0, 10) of the classes and "
                   "is not ignore_index (-100)");
  CHECK_REEL_ERROR(cross_entropy_forward(logits, from_vector<int32_t>({1, -1, 0, 3}, {4})),
                   "cross_entropy_forward: target -1 at position (1) of (4) is out of range");
  CHECK_REEL_ERROR(cross_entropy_forward(logits, from_vector<int64_t>({1, 2, 3}, {3})),
                   "cross_entropy_forward: logits (4, 10) and targets (3) do not match: targets of shape (4) expected");
  CHECK_REEL_ERROR(cross_entropy_forward(zeros({4, 0}), from_vector<int64_t>({0, 0, 0, 0}, {4})),
                   "cross_entropy_forward: logits (4, 0) need a non-empty last dim");
  CHECK_REEL_ERROR(cross_entropy_forward(zeros({4, 10}, DType::i32), from_vector<int64_t>({0, 0, 0, 0}, {4})),
                   "cross_entropy_forward: dtype i32");
  CHECK(parse_reduction("mean") == Reduction::Mean);
  CHECK_REEL_ERROR(parse_reduction("avg"), "reduction \"avg\" is not one of");
  Tensor t = from_vector<int64_t>({1, 2, 3, 4}, {4});
  CrossEntropyForward f = cross_entropy_forward(logits, t, Reduction::None);
  CHECK_REEL_ERROR(cross_entropy_backward(zeros({3}), logits, t, f.lse, Reduction::None),
                   "cross_entropy_backward: dloss (3) with reduction \"none\" must have the rows' shape (4)");
  CHECK_REEL_ERROR(cross_entropy_backward(zeros({4}), logits, t, f.lse, Reduction::Mean),
                   "cross_entropy_backward: dloss (4) with reduction \"mean\" must be a single value");
  CHECK_REEL_ERROR(cross_entropy_backward(zeros({4}), logits, t, zeros({5}), Reduction::None),
                   "cross_entropy_backward: lse (5) does not match logits (4, 10)");
}

TEST_CASE("mse_loss: values by hand, every reduction, an empty input, 16-bit dtypes") {
  for (Device dev : devices()) {
    CAPTURE(dev);
    const Tensor x = from_vector<double>({1, 2, 3, 4}, {2, 2}).to(dev), t = from_vector<double>({0, 2, 5, 1}, {2, 2}).to(dev);
    CHECK(values(mse_loss_forward(x, t, Reduction::None)) == std::vector<double>{1, 0, 4, 9});
    CHECK(mse_loss_forward(x, t, Reduction::Sum).item() == 14.0);
    CHECK(mse_loss_forward(x, t).item() == 3.5);
    CHECK(mse_loss_forward(x, t).shape() == Shape{});
    // d mean / dx = 2 (x - t) / 4, times dloss 2.
    CHECK(values(mse_loss_backward(scalar_tensor(2.0, DType::f64, dev), x, t)) == std::vector<double>{1, 0, -2, 3});
    CHECK(values(mse_loss_backward(from_vector<double>({1, 1, 0, 2}, {2, 2}).to(dev), x, t, Reduction::None)) ==
          std::vector<double>{2, 0, 0, 12});
    const Tensor e = zeros({0, 3}, DType::f32, dev);
    CHECK(mse_loss_forward(e, e).item() == 0.0);  // 0, not 0/0
    CHECK(mse_loss_forward(e, e, Reduction::None).shape() == Shape{0, 3});
    CHECK(mse_loss_backward(scalar_tensor(1.0, DType::f32, dev), e, e).shape() == Shape{0, 3});
    for (DType low : {DType::bf16, DType::f16}) {
      const Tensor l = mse_loss_forward(x.to(low), t.to(low));
      CHECK(l.dtype() == low);
      CHECK(l.item() == 3.5);
      CHECK(mse_loss_backward(scalar_tensor(1.0, low, dev), x.to(low), t.to(low)).dtype() == low);
    }
    // The tape op: both inputs get gradients, target's the negation of input's.
    const Tensor xr = x.detach().set_requires_grad(), tr = t.detach().set_requires_grad();
    autograd::backward(mse_loss(xr, tr, "sum"));
    CHECK(values(xr.grad()) == std::vector<double>{2, 0, -4, 6});
    CHECK(values(tr.grad()) == std::vector<double>{-2, 0, 4, -6});
  }
}

TEST_CASE("bad mse_loss inputs raise reel::Error naming op, shapes, dtypes and devices") {
  const Tensor x = zeros({4, 3});
  CHECK_REEL_ERROR(mse_loss_forward(x, zeros({3, 4})),
                   "mse_loss_forward: input (4, 3) and target (3, 4) do not match: target of the input's shape (4, 3) "
                   "expected");
  CHECK_REEL_ERROR(mse_loss_forward(x, zeros({4, 3}, DType::f64)), "mse_loss_forward: dtypes differ: f32 and f64");
  CHECK_REEL_ERROR(mse_loss_forward(zeros({4, 3}, DType::i32), zeros({4, 3}, DType::i32)),
                   "mse_loss_forward: dtype i32 of the (4, 3) tensor is not supported");
  CHECK_REEL_ERROR(mse_loss_backward(zeros({4}), x, x), "mse_loss_backward: dloss (4) with reduction \"mean\" must be a single value");
  CHECK_REEL_ERROR(mse_loss_backward(zeros({3}), x, x, Reduction::None),
                   "mse_loss_backward: dloss (3) with reduction \"none\" must have the input's shape (4, 3)");
  CHECK_REEL_ERROR(mse_loss_backward(scalar_tensor(1.0, DType::f64), x, x), "mse_loss_backward: dtypes differ: f32 and f64");
  CHECK_REEL_ERROR(mse_loss(x, x, "avg"), "mse_loss: reduction \"avg\" is not one of");
  CHECK_REEL_ERROR(mse_loss(x, zeros({4, 2})), "mse_loss_forward: input (4, 3) and target (4, 2) do not match");
  if (cuda_available()) {
    const Device cuda = Device::cuda(0);
    CHECK_REEL_ERROR(mse_loss_forward(x, zeros({4, 3}, DType::f32, cuda)),
                     "mse_loss_forward: expected all tensors on one device, got (4, 3) on cpu (4, 3) on cuda:0");
    CHECK_REEL_ERROR(mse_loss_backward(scalar_tensor(1.0, DType::f32, cuda), x, x),
                     "mse_loss_backward: expected all tensors on one device, got (4, 3) on cpu () on cuda:0");
  }
}

TEST_CASE("cross-entropy's reduction and count stay on the device; cuda's loss equals the cpu's bit for bit") {
  // 700 rows (more than the kLossLanes lanes, not a multiple of them), every 7th ignored.
  const int64_t N = 700, V = 13;
  std::vector<int64_t> t(N);
  for (int64_t n = 0; n < N; ++n) t[n] = n % 7 == 3 ? -100 : (n * 5) % V;
  for (DType dt : {DType::f32, DType::f64, DType::bf16}) {
    CAPTURE(dt);
    const Tensor logits = uniform_f64({N, V}, 11).to(dt), targets = from_vector<int64_t>(t, {N});
    for (Reduction red : {Reduction::Mean, Reduction::Sum}) {
      const CrossEntropyForward cpu = cross_entropy_forward(logits, targets, red, -100, 1.0);
      CHECK(cpu.count.item() == static_cast<double>(N - N / 7));
      for (Device d : devices()) {
        CAPTURE(d);
        const CrossEntropyForward f = cross_entropy_forward(logits.to(d), targets.to(d), red, -100, 1.0);
        CHECK(f.loss.device() == d);
        CHECK(f.count.device() == d);
        CHECK(bit_identical(f.loss, cpu.loss));
        CHECK(bit_identical(f.count, cpu.count));
        // The Mean's 1/count (here 1/600) scales the fused and the separate gradients alike (the
        // two paths agree to a few ulps, kernels/cpu/cross_entropy.cpp).
        check_close(cross_entropy_backward(scalar_tensor(1.0, dt, d), logits.to(d), targets.to(d), f.lse, red),
                    values(f.dlogits), 2e-2, 1e-6);
      }
    }
  }
}

TEST_CASE("cross_entropy_plan: one launch unless every block counting would read more than kRecountBytes") {
  // Without the Mean's fused gradient the grid's last block counts: one launch, whatever N.
  for (int64_t N : {1, 2048, 100000}) {
    const CrossEntropyPlan p = cross_entropy_plan(N, 8, false);
    CHECK(p.blocks == std::min<int64_t>(N, kCrossEntropyMaxBlocks));
    CHECK(!p.count_in_blocks);
    CHECK(!p.count_first);
    CHECK(p.count_reads == 1);
  }
  // With it every block counts all N targets while blocks x N x index bytes <= 4 MiB ...
  const CrossEntropyPlan small = cross_entropy_plan(1024, 4, true);  // 1024 x 1024 x 4 = 4 MiB
  CHECK(small.blocks == 1024);
  CHECK(small.count_in_blocks);
  CHECK(!small.count_first);
  CHECK(small.count_reads == 1024);
  // ... else the count goes first, and the grid stays one row per block.
  const CrossEntropyPlan big = cross_entropy_plan(1025, 4, true);
  CHECK(big.blocks == 1025);
  CHECK(!big.count_in_blocks);
  CHECK(big.count_first);
  CHECK(big.count_reads == 0);
  CHECK(cross_entropy_plan(724, 8, true).count_in_blocks);
  CHECK(cross_entropy_plan(725, 8, true).count_first);
  CHECK(cross_entropy_plan(int64_t{1} << 40, 8, true).count_first);  // no overflow of blocks x N
}
