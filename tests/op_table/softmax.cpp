// tests/op_table/softmax.cpp: the op table's softmax and cross-entropy family. Kernel rows: softmax
// and log-softmax forward and backward (large, masked and huge logits), cross-entropy in every
// reduction with i32 and i64 targets, ignored rows, the fused and the separate dlogits; mse_loss
// forward and backward in every reduction. Tape rows: softmax and log_softmax along any dim,
// softmax composed from exp/sum/div, cross_entropy, mse_loss against mean((x - t)^2).
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "autograd/functions.h"
#include "autograd/nn_functions.h"
#include "kernels/ops.h"
#include "op_table.h"

namespace reel::op_table {
namespace {

using namespace reel::testing;

// The dtypes every row of this family runs in (rows that name their own keep them): one entry to add.
// bf16 and f16: rows widened to f32, the max, exp-sums and row sums in f32 (the cpu's cross-entropy
// sum of exps in double), each output rounded once to the 16-bit type. Cross-entropy on 16-bit
// logits returns loss, losses and dlogits in the logits' dtype and lse in f32 (kernels/cross_entropy.h).
const std::vector<DType> kDTypes = {DType::f32, DType::f64, DType::bf16, DType::f16};

// A row's tolerances at bf16 and f16, added to its f32 ones {rtol, atol} (an f32 output, such as
// cross-entropy's lse, keeps its f32 entry). The runner rounds the inputs to the dtype before the
// reference sees them, so against it what is left is the f32 computation's error (the row's f32
// tolerance) and the one rounding of each f32 result to the output type: half an ulp, a relative
// u = 2^-8 (bf16, 8 significant bits) or 2^-11 (f16, 11 bits). cpu vs cuda (`device`): two f32
// results that differ in their last f32 bits (Eigen's exp against libm's, another summation order)
// each rounded once, so one ulp apart where they straddle a rounding boundary: 2u relative.
// Probabilities below f16's normal range (6.1e-5) round to a multiple of 2^-24, within the atols.
// (op_table.h: with_16bit(t, device), shared by the families that round each output once.)
using kernels::Reduction;

// ==== softmax / log-softmax / max ==================================================================

Values softmax_ref(const Tensor& xt) {
  const std::vector<double> x = values(xt);
  const size_t C = static_cast<size_t>(xt.size(-1));
  Values y(2, std::vector<double>(x.size()));
  for (size_t r = 0; r < x.size() / C; ++r) {
    const double* xr = &x[r * C];
    double m = -INFINITY, s = 0;
    for (size_t c = 0; c < C; ++c) m = std::max(m, xr[c]);
    for (size_t c = 0; c < C; ++c) s += std::exp(xr[c] - m);
    for (size_t c = 0; c < C; ++c) {
      y[0][r * C + c] = std::exp(xr[c] - m) / s;
      y[1][r * C + c] = xr[c] - m - std::log(s);
    }
  }
  return y;
}

std::vector<OpCase> softmax_cases() {
  using namespace kernels;
  enum Kind { Uniform, Masked, Huge };
  struct Config {
    Shape shape;
    double lo, hi;
    bool fd;
    Kind kind = Uniform;
  };
  std::vector<Config> configs;
  for (const Shape& s : std::vector<Shape>{{1, 1}, {1, 257}, {31, 1}, {3, 31}, {2, 3, 33}, {5, 257}, {4, 1013}, {257}})
    for (double offset : {0.0, 1000.0}) configs.push_back({s, offset - 8, offset + 8, false});  // exp(1000) overflows
  for (const Shape& s : std::vector<Shape>{{1, 7}, {3, 257}, {2, 3, 7}, {64, 768}, {5}})
    configs.push_back({s, -5, 5, false});
  for (const Shape& s : std::vector<Shape>{{1, 1}, {3, 5}, {2, 257}, {2, 2, 7}}) configs.push_back({s, -3, 3, true});
  // Masked (-inf) entries in rows below, at and above a SIMD packet, and with a scalar tail:
  // softmax exactly 0, log_softmax -inf (tests/test_nn_kernels_softmax.cpp checks the bits).
  for (int64_t C : {3, 8, 16, 33, 257}) configs.push_back({{2, C}, -5, 5, false, Masked});
  configs.push_back({{2, 3}, 0, 0, false, Huge});  // logits of 1e4 and 3e4
  std::vector<OpCase> cases;
  for (const Config& c : configs) {
    // f32 x - lse near 1000 loses the ulps of 1000; near 3e4, those of 3e4.
    const double at = c.kind == Huge ? 4e-3 : c.hi > 100 ? 1e-4 : 1e-5;
    const Tols y = with_16bit(tols({1e-5, 1e-6}, {1e-12, 1e-12}), true),
               ly = with_16bit(tols({1e-5, at}, {1e-12, 1e-12}), true);
    const std::string kind = c.kind == Masked ? " masked" : c.kind == Huge ? " of 1e4" : "";
    OpCase row("softmax and log_softmax " + shape_str(c.shape) + kind + " in [" + str(c.lo) + ", " + str(c.hi) + ")",
               [c](Generator& g) {
                 std::vector<double> x = values(uniform_f64(g, c.shape, c.lo, c.hi));
                 const size_t C = static_cast<size_t>(c.shape.back());
                 for (size_t i = 0; i < x.size() && c.kind == Masked; ++i)
                   if (i % 3 == 1 || (i >= C && i % C > 1)) x[i] = -INFINITY;
                 if (c.kind == Huge) x = {1e4, -1e4, 9999, 3e4, 3e4, -3e4};
                 return Tensors{from_vector<double>(x, c.shape), uniform_f64(g, c.shape)};
               },
               [](const Tensors& in, Device d) {
                 const Tensor y = softmax_forward(in[0]), ly = log_softmax_forward(in[0]);
                 // The backward rows of a 16-bit run read the cpu's y and ly on every device: a y
                 // one ulp apart (cpu vs cuda forward) would move dx = y (dy - sum(dy y)) by more
                 // than the backward's own rounding; these two outputs test the backward.
                 const bool half = is_16bit_floating(in[0].dtype());
                 const Tensor x_cpu = in[0].to(Device::cpu());
                 const Tensor yb = half ? softmax_forward(x_cpu).to(d) : y;
                 const Tensor lyb = half ? log_softmax_forward(x_cpu).to(d) : ly;
                 return Tensors{y, ly, softmax_backward(in[1], yb), log_softmax_backward(in[1], lyb)};
               },
               {y, ly, y, ly});
    if (c.kind == Huge)
      row.with_dtypes({DType::f32}).with_reference([](const Tensors& in) { return softmax_ref(in[0]); },
                                                   {tols({1e-6, 1e-7}, {1e-12, 1e-12}), tols({1e-6, 1e-3}, {1e-12, 1e-12})});
    else
      row.with_reference([](const Tensors& in) { return softmax_ref(in[0]); },
                         {with_16bit(tols(1e-5), false), with_16bit(tols({1e-5, at}, {1e-12, 1e-12}), false)});
    if (c.fd) row.with_finite_diff({0, 1, {{0, 2}}}).with_finite_diff({1, 1, {{0, 3}}});
    cases.push_back(row);
  }
  return cases;
}

// ==== cross-entropy ================================================================================

// The reduced loss, the per-row losses, lse and the count of rows not ignored, of logits (N, V) with
// targets, in f64.
Values ce_ref(const Tensor& logits, const Tensor& targets, int64_t ignore, Reduction red) {
  const std::vector<double> x = values(logits), t = values(targets);
  const size_t V = static_cast<size_t>(logits.size(-1));
  std::vector<double> losses, lse;
  double sum = 0, count = 0;
  for (size_t n = 0; n < t.size(); ++n) {
    double m = -INFINITY, s = 0;
    for (size_t c = 0; c < V; ++c) m = std::max(m, x[n * V + c]);
    for (size_t c = 0; c < V; ++c) s += std::exp(x[n * V + c] - m);
    lse.push_back(m + std::log(s));
    const bool ignored = static_cast<int64_t>(t[n]) == ignore;
    losses.push_back(ignored ? 0.0 : lse.back() - x[n * V + static_cast<size_t>(t[n])]);
    sum += losses.back();
    count += ignored ? 0 : 1;
  }
  const std::vector<double> loss = red == Reduction::None ? losses
                                   : red == Reduction::Sum ? std::vector<double>{sum}
                                                           : std::vector<double>{count ? sum / count : 0};
  return {loss, losses, lse, {count}};
}

std::vector<OpCase> cross_entropy_cases() {
  using namespace kernels;
  enum Kind { Uniform, Ramp, Huge, Masked };
  struct Config {
    Shape shape;
    bool fd;
    Kind kind = Uniform;
    std::vector<int64_t> targets = {};  // else every third row ignored, the others spread over the classes
    double tol = 1e-5;                  // of the losses and lse, on the cpu and every device
  };
  const std::vector<Config> configs = {
      {{1, 1}, false}, {{4, 10}, false}, {{3, 257}, false}, {{2, 3, 11}, false}, {{5, 1013}, false}, {{33, 7}, false},
      {{5, 7}, true},
      {{5, 5000}, false, Ramp},                 // each 2048-wide block raises the running max (online rescaling)
      {{3, 4}, false, Huge, {1, 2, 0}, 1e-6},   // logits of 1e4: finite, exact losses
      {{2, 5000}, false, Masked, {4000, 1}},    // classes masked with -inf, a whole first block of them
  };
  const double g = 0.37;  // the fused grad_scale (a loss scale of an accumulation window) and dloss of Mean/Sum
  std::vector<OpCase> cases;
  for (const Config& c : configs)
    for (DType tt : {DType::i32, DType::i64})
      for (Reduction red : {Reduction::None, Reduction::Sum, Reduction::Mean}) {
        const int64_t V = c.shape.back(), N = shape_numel(c.shape) / V;
        const int64_t ignore = V == 11 ? 5 : -100;  // a custom ignore_index that is a valid class
        std::vector<int64_t> t = c.targets;
        for (int64_t n = 0; t.size() < static_cast<size_t>(N); ++n) t.push_back(N > 1 && n % 3 == 1 ? ignore : (n * 7 + 3) % V);
        const Tols tl = with_16bit(tols(c.tol), true), td = with_16bit(tols(std::min(c.tol, 2e-6)), true);
        OpCase row("cross_entropy " + shape_str(c.shape) + " " + dtype_name(tt) + " targets, " + reduction_name(red),
                   [c, t, tt, red, N, g](Generator& gen) {
                     std::vector<double> v = values(uniform_f64(gen, c.shape, -6, 6));
                     const size_t V = static_cast<size_t>(c.shape.back());
                     for (size_t i = 0; i < v.size(); ++i) {
                       if (c.kind == Ramp) v[i] += 0.01 * static_cast<double>(i % V);
                       if (c.kind == Masked && (i < 3000 || (i >= V && i % 2 == 0))) v[i] = -INFINITY;
                     }
                     if (c.kind == Huge) v = {1e4, -1e4, 1e4 - 1, 0, -1e4, 2e4, 2e4, -2e4, 5, 5, 5, 1e4};
                     const Tensor logits = from_vector<double>(v, c.shape);
                     const Tensor dloss = red == Reduction::None ? uniform_f64(gen, {N}).view(without_last(c.shape))
                                                                 : scalar_tensor(g, DType::f64);
                     return Tensors{logits, indices(t, without_last(c.shape), tt), dloss};
                   },
                   [red, ignore, g](const Tensors& in, Device d) {
                     const CrossEntropyForward f = cross_entropy_forward(in[0], in[1], red, ignore, g);
                     CHECK(f.loss.shape() == (red == Reduction::None ? in[1].shape() : Shape{}));
                     const CrossEntropyForward plain = cross_entropy_forward(in[0], in[1], red, ignore);
                     CHECK(!plain.dlogits.defined());
                     CHECK(bit_identical(plain.count, f.count));
                     CHECK(f.count.device() == d);  // counted where the logits live
                     return Tensors{f.loss, f.losses, f.lse, f.count,
                                    f.dlogits, plain.loss, cross_entropy_backward(in[2], in[0], in[1], f.lse, red, ignore)};
                   },
                   {tl, tl, tl, kExact, td, tl, td});
        row.with_reference([ignore, red](const Tensors& in) { return ce_ref(in[0], in[1], ignore, red); },
                           {with_16bit(tols(c.tol, 1e-12), false)});
        if (c.fd) {
          std::vector<GradPair> grads = {{0, 6}};  // the separate backward
          if (red != Reduction::None) grads.push_back({0, 4});  // the fused dlogits: grad_scale == dloss
          row.with_finite_diff({0, 2, grads});
        }
        cases.push_back(row);
      }
  return cases;
}

// ==== mse_loss =====================================================================================

// The loss of input x and target t in f64: the squares (None), their sum or their mean.
Values mse_ref(const Tensor& xt, const Tensor& tt, Reduction red) {
  const std::vector<double> x = values(xt), t = values(tt);
  std::vector<double> sq;
  double sum = 0;
  for (size_t i = 0; i < x.size(); ++i) sum += sq.emplace_back((x[i] - t[i]) * (x[i] - t[i]));
  if (red == Reduction::None) return {sq};
  return {{red == Reduction::Sum ? sum : x.empty() ? 0.0 : sum / static_cast<double>(x.size())}};
}

std::vector<OpCase> mse_loss_cases() {
  using namespace kernels;
  // {257, 160}: past the CPU's threshold for threads and many CUDA blocks of the grid-stride loop.
  const std::vector<std::pair<Shape, bool>> configs = {{{1}, true},       {{7}, true},        {{3, 5}, true},
                                                       {{2, 3, 33}, false}, {{4, 1013}, false}, {{257, 160}, false}};
  std::vector<OpCase> cases;
  for (const auto& [shape, fd] : configs)
    for (Reduction red : {Reduction::None, Reduction::Sum, Reduction::Mean}) {
      const Tols tl = with_16bit(tols(1e-5), true);
      OpCase row("mse_loss " + shape_str(shape) + " " + reduction_name(red),
                 [shape = shape, red](Generator& g) {
                   const Tensor dloss = red == Reduction::None ? uniform_f64(g, shape) : scalar_tensor(0.37, DType::f64);
                   // In [-1, 1): the sum over (257, 160), about 2.7e4, stays below f16's largest 65504.
                   return Tensors{uniform_f64(g, shape), uniform_f64(g, shape), dloss};
                 },
                 [red](const Tensors& in, Device) {
                   const Tensor loss = mse_loss_forward(in[0], in[1], red);
                   CHECK(loss.dtype() == in[0].dtype());
                   CHECK(loss.shape() == (red == Reduction::None ? in[0].shape() : Shape{}));
                   return Tensors{loss, mse_loss_backward(in[2], in[0], in[1], red)};
                 },
                 {tl, tl});
      row.with_reference([red](const Tensors& in) { return mse_ref(in[0], in[1], red); },
                         {with_16bit(tols(1e-5, 1e-12), false)});
      if (fd) row.with_finite_diff({0, 2, {{0, 1}}});
      cases.push_back(row);
    }
  return cases;
}

std::vector<OpCase> softmax_tape_cases() {
  // Integer inputs (targets, token ids) are constants captured by f, moved to its inputs' device.
  auto on = [](const Tensor& constant, const Tensor& like) { return constant.to(like.device()); };
  const Tensor targets6 = from_vector<int64_t>({2, 0, -100, 4, 4, 1}, {6});
  const Tensor targets23 = from_vector<int32_t>({1, 4, 0, 3, -100, 2}, {2, 3});
  const Tensor targets23_ignore3 = from_vector<int64_t>({3, 4, 0, 3, 1, 2}, {2, 3});
  return {
      tape_unary("softmax (exp/sum/div)", softmax_last, {3, 5}),
      tape_unary("softmax", [](const Tensor& x) { return softmax(x * 2.0); }, {3, 5}),
      tape_unary("softmax dim 1", [](const Tensor& x) { return softmax(x, 1); }, {2, 3, 4}),
      tape_unary("softmax of one class", [](const Tensor& x) { return softmax(x) * x; }, {4, 1}),
      tape_unary("log_softmax", [](const Tensor& x) { return log_softmax(x * 2.0); }, {3, 5}),
      tape_unary("log_softmax dim 0", [](const Tensor& x) { return log_softmax(x, 0); }, {4, 3}),

      // ---- cross-entropy (a target is ignore_index in each) ----
      tape_unary("cross_entropy mean", [=](const Tensor& x) { return cross_entropy(x, on(targets6, x)); }, {6, 5}),
      tape_unary("cross_entropy sum",
                 [=](const Tensor& x) { return cross_entropy(x * 3.0, on(targets6, x), -100, "sum"); }, {6, 5}),
      tape_unary("cross_entropy none",
                 [=](const Tensor& x) { return cross_entropy(x, on(targets6, x), -100, "none"); }, {6, 5}),
      tape_unary("cross_entropy (2, 3, V) i32 targets",
                 [=](const Tensor& x) { return cross_entropy(x, on(targets23, x)); }, {2, 3, 5}),
      tape_unary("cross_entropy none (2, 3, V) ignore_index 3",
                 [=](const Tensor& x) { return cross_entropy(x, on(targets23_ignore3, x), 3, "none"); }, {2, 3, 5}),

      // ---- mse_loss, against mean / sum of (x - t)^2 composed ----
      with_composed(tape_binary("mse_loss mean", [](const Tensor& x, const Tensor& t) { return mse_loss(x, t); },
                                {3, 5}, {3, 5}),
                    [](const Tensors& x) { return mean((x[0] - x[1]) * (x[0] - x[1])); }),
      with_composed(tape_binary("mse_loss sum", [](const Tensor& x, const Tensor& t) { return mse_loss(x, t, "sum"); },
                                {2, 3, 4}, {2, 3, 4}),
                    [](const Tensors& x) { return sum((x[0] - x[1]) * (x[0] - x[1])); }),
      with_composed(tape_binary("mse_loss none", [](const Tensor& x, const Tensor& t) { return mse_loss(x, t, "none"); },
                                {4, 3}, {4, 3}),
                    [](const Tensors& x) { return (x[0] - x[1]) * (x[0] - x[1]); }),
      tape_binary("mse_loss mean, target without a gradient",
                  [](const Tensor& x, const Tensor& t) { return mse_loss(x * 2.0, t); }, {5}, {5}, Domain::Any,
                  {true, false}),
  };
}

TEST_CASE("softmax and log-softmax: forward and backward, large logits") { run_cases(softmax_cases(), kDTypes); }
TEST_CASE("cross-entropy: every reduction, i32 and i64 targets, ignored rows, fused and separate dlogits") {
  run_cases(cross_entropy_cases(), kDTypes);
}
TEST_CASE("mse_loss: every reduction, forward and backward") { run_cases(mse_loss_cases(), kDTypes); }
TEST_CASE("softmax and cross-entropy tape ops") { run_cases(softmax_tape_cases(), kDTypes); }
}  // namespace
}  // namespace reel::op_table
