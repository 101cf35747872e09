// Fused cross-entropy: losses and lse against an f64 reference (i32 and i64 targets, ignored rows,
// each reduction, rows wider than the online-softmax block), all rows ignored (0, not NaN), huge
// logits, the fused dlogits equal to the separate backward, backward against finite differences in
// f64, bad targets and shapes.
#include <cmath>

#include "kernels/nn_ops.h"
#include "testing.h"

using namespace reel;
using namespace reel::kernels;
using namespace reel::testing;

namespace {

struct CeRef {
  std::vector<double> losses, lse;
  double sum = 0;
  int64_t count = 0;
};

CeRef ce_ref(const std::vector<double>& x, const std::vector<int64_t>& t, int64_t V, int64_t ignore) {
  CeRef r;
  for (size_t n = 0; n < t.size(); ++n) {
    double m = -INFINITY, s = 0;
    for (int64_t c = 0; c < V; ++c) m = std::max(m, x[n * V + c]);
    for (int64_t c = 0; c < V; ++c) s += std::exp(x[n * V + c] - m);
    const double lse = m + std::log(s);
    r.lse.push_back(lse);
    const bool ignored = t[n] == ignore;
    r.losses.push_back(ignored ? 0.0 : lse - x[n * V + t[n]]);
    r.sum += r.losses.back();
    r.count += ignored ? 0 : 1;
  }
  return r;
}

Tensor make_targets(const std::vector<int64_t>& t, const Shape& shape, DType dt) {
  Tensor t64 = from_vector<int64_t>(t, shape);
  if (dt == DType::i64) return t64;
  std::vector<int32_t> t32(t.begin(), t.end());
  return from_vector<int32_t>(t32, shape);
}

// Targets for N rows of V classes: every third row ignored (when `ignore` is set).
std::vector<int64_t> targets_for(int64_t N, int64_t V, int64_t ignore, bool with_ignored) {
  std::vector<int64_t> t;
  for (int64_t n = 0; n < N; ++n) t.push_back(with_ignored && n % 3 == 1 ? ignore : (n * 7 + 3) % V);
  return t;
}

}  // namespace

TEST_CASE("cross-entropy forward matches the f64 reference for every reduction") {
  const std::vector<Shape> shapes = {{1, 1}, {4, 10}, {3, 257}, {2, 3, 11}, {5, 5000}};
  for (const Shape& shape : shapes)
    for (DType dt : {DType::f64, DType::f32})
      for (DType tt : {DType::i32, DType::i64}) {
        CAPTURE(shape_str(shape));
        CAPTURE(dtype_name(dt));
        CAPTURE(dtype_name(tt));
        const int64_t V = shape.back(), N = shape_numel(shape) / V;
        Tensor logits = uniform_f64(shape, 1, -4, 4);
        if (V == 5000) {  // a rising ramp: each 2048-wide block raises the running max (rescaling)
          std::vector<double> v = values(logits);
          for (size_t i = 0; i < v.size(); ++i) v[i] += 0.01 * static_cast<double>(i % 5000);
          logits = from_vector<double>(v, shape);
        }
        logits = logits.to(dt);
        const int64_t ignore = V == 11 ? 5 : -100;  // a custom ignore_index that is a valid class
        const std::vector<int64_t> t = targets_for(N, V, ignore, N > 1);
        Tensor targets = make_targets(t, Shape(shape.begin(), shape.end() - 1), tt);
        const CeRef ref = ce_ref(values(logits), t, V, ignore);
        const double tol = dt == DType::f32 ? 1e-5 : 1e-12;

        CrossEntropyForward none = cross_entropy_forward(logits, targets, Reduction::None, ignore);
        CHECK(none.loss.shape() == targets.shape());
        check_close(none.loss, ref.losses, tol, tol);
        check_close(none.lse, ref.lse, tol, tol);
        CHECK(none.count == ref.count);
        CHECK(!none.dlogits.defined());
        CrossEntropyForward sum = cross_entropy_forward(logits, targets, Reduction::Sum, ignore);
        CHECK(sum.loss.dim() == 0);
        check_close(sum.loss, {ref.sum}, tol, tol);
        CrossEntropyForward mean = cross_entropy_forward(logits, targets, parse_reduction("mean"), ignore);
        check_close(mean.loss, {ref.sum / static_cast<double>(ref.count)}, tol, tol);
      }
}

TEST_CASE("all targets ignored: mean loss 0, zero gradients, no NaN") {
  Tensor logits = uniform_f64({4, 6}, 2).to(DType::f32);
  Tensor targets = from_vector<int64_t>({-100, -100, -100, -100}, {4});
  CrossEntropyForward f = cross_entropy_forward(logits, targets, Reduction::Mean, -100, 1.0);
  CHECK(f.count == 0);
  CHECK(f.loss.item() == 0.0);
  for (double d : values(f.dlogits)) CHECK(d == 0.0);
  for (double d : values(cross_entropy_backward(scalar_tensor(1.0), logits, targets, f.lse))) CHECK(d == 0.0);
  CHECK(cross_entropy_forward(logits, targets, Reduction::Sum).loss.item() == 0.0);
}

TEST_CASE("logits of 1e4 give finite, exact losses and gradients") {
  const std::vector<double> x = {1e4, -1e4, 1e4 - 1, 0, -1e4, 2e4, 2e4, -2e4, 5, 5, 5, 1e4};
  const std::vector<int64_t> t = {1, 2, 0};
  const CeRef ref = ce_ref(x, t, 4, -100);
  for (DType dt : {DType::f32, DType::f64}) {
    Tensor logits = from_vector<double>(x, {3, 4}).to(dt);
    CrossEntropyForward f = cross_entropy_forward(logits, from_vector<int64_t>(t, {3}), Reduction::None, -100, 1.0);
    for (double v : values(f.loss)) CHECK(std::isfinite(v));
    for (double v : values(f.dlogits)) CHECK(std::isfinite(v));
    check_close(f.loss, ref.losses, 1e-6, 1e-6);
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
  const CeRef ref = ce_ref(x, t, V, -100);
  for (DType dt : {DType::f64, DType::f32}) {
    Tensor logits = from_vector<double>(x, {2, V}).to(dt);
    CrossEntropyForward f = cross_entropy_forward(logits, from_vector<int64_t>(t, {2}), Reduction::None, -100, 1.0);
    check_close(f.loss, ref.losses, 1e-5, 1e-5);
    check_close(f.lse, ref.lse, 1e-5, 1e-5);
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
        Tensor targets = make_targets(targets_for(N, V, -100, true), {N}, DType::i64);
        const double g = 0.37;  // e.g. the loss scale of an accumulation window
        CrossEntropyForward f = cross_entropy_forward(logits, targets, red, -100, g);
        Tensor dloss = red == Reduction::None ? full({N}, g, dt) : scalar_tensor(g, dt);
        Tensor separate = cross_entropy_backward(dloss, logits, targets, f.lse, red, -100);
        const double tol = dt == DType::f32 ? 2e-6 : 1e-13;
        check_close(f.dlogits, separate, tol, tol);
      }
}

TEST_CASE("cross-entropy backward matches finite differences in f64") {
  const int64_t N = 5, V = 7;
  Tensor logits = uniform_f64({N, V}, 4, -3, 3);
  for (DType tt : {DType::i32, DType::i64}) {
    Tensor targets = make_targets({3, -100, 0, 6, 2}, {N}, tt);
    Tensor w = uniform_f64({N}, 5);
    CrossEntropyForward f = cross_entropy_forward(logits, targets, Reduction::None);
    check_gradient("dlogits (none)", logits, cross_entropy_backward(w, logits, targets, f.lse, Reduction::None),
                   [&] { return weighted_sum(cross_entropy_forward(logits, targets, Reduction::None).loss, w); });
    for (Reduction red : {Reduction::Sum, Reduction::Mean}) {
      CAPTURE(reduction_name(red));
      Tensor dl = scalar_tensor(0.7, DType::f64);
      CrossEntropyForward fr = cross_entropy_forward(logits, targets, red, -100, 0.7);
      check_gradient("dlogits", logits, cross_entropy_backward(dl, logits, targets, fr.lse, red),
                     [&] { return 0.7 * cross_entropy_forward(logits, targets, red).loss.item(); });
      check_gradient("fused dlogits", logits, fr.dlogits,
                     [&] { return 0.7 * cross_entropy_forward(logits, targets, red).loss.item(); });
    }
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
