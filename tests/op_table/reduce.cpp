// tests/op_table/reduce.cpp: the op table's reduction family. Kernel rows: sum, mean and max along
// each axis and in total, keepdim, strided inputs, long and split rows, NaN; max_with_indices and
// max_backward on every axis with ties and NaN. Tape rows: sum, mean and max over axes.
#include <cmath>
#include <string>
#include <vector>

#include "autograd/functions.h"
#include "kernels/ops.h"
#include "op_table.h"

namespace reel::op_table {
namespace {

using namespace reel::testing;

// The dtypes every row of this family runs in (rows that name their own keep them): one entry to add.
// bf16 and f16: elements widened on load, summed in f32 on cuda (double on the cpu), the result
// rounded once to the 16-bit type; max and its argmax are exact in every dtype.
const std::vector<DType> kDTypes = {DType::f32, DType::f64, DType::bf16, DType::f16};

// A sum's tolerances at bf16 and f16, added to its f32 ones {rtol, atol}: the inputs are rounded
// to the dtype before the f64 run sees them, so what is left is the wide sum's error (the f32
// tolerance, which covers cuda's f32 tree; the cpu's double sum is well inside it) and the one
// rounding of the result to the output type, half an ulp: a relative u = 2^-8 (bf16) or 2^-11
// (f16). cpu vs cuda (`device`): two different wide sums each rounded once, so an output whose two
// sums straddle a rounding boundary differs by one ulp, 2u relative. A mean divides the wide sum
// before its one rounding: the same. Exact rows (max: tolerance 0) stay 0.
// (op_table.h: with_16bit(t, device), shared by the families that round each output once.)
using kernels::ReduceOp;

// ==== reductions ===================================================================================

std::vector<OpCase> reduce_cases() {
  using namespace kernels;
  struct Red {
    Shape shape;
    std::vector<int64_t> axes;
    bool transpose;  // reduce x.t() (a strided input)
    bool nan;
  };
  const std::vector<Red> reds = {
      {{1}, {}, false, false},           {{257}, {}, false, false},
      {{257}, {0}, false, false},        {{31, 33}, {0}, false, false},
      {{31, 33}, {1}, false, false},     {{31, 33}, {}, false, false},
      {{4, 5, 6}, {0}, false, false},    {{4, 5, 6}, {1}, false, false},
      {{4, 5, 6}, {2}, false, false},    {{4, 5, 6}, {0, 2}, false, false},
      {{4, 5, 6}, {1, 2}, false, false}, {{33, 31}, {0}, true, false},
      {{33, 31}, {1}, true, false},      {{3, 1100}, {1}, false, false},   // block per row
      {{3, 4099}, {-1}, false, false},   {{100, 300}, {}, false, false},   // split rows
      {{2000, 3}, {0}, false, false},    {{5000, 7}, {0}, false, false},   // columns, split
      {{2, 3, 1, 5}, {2}, false, false}, {{31, 33}, {1}, false, true},
      {{3, 1100}, {1}, false, true},     {{700, 5}, {0}, false, true},
      {{1000, 77}, {0}, false, false},   {{1000, 77}, {1}, false, false},  // long f32 sums
  };
  std::vector<OpCase> cases;
  for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Mean, ReduceOp::Max})
    for (const Red& r : reds)
      for (bool keepdim : {false, true}) {
        std::string axes = "axes (";
        for (int64_t a : r.axes) axes += std::to_string(a) + " ";
        // Max is exact. Sums round differently (a float tree on the GPU, double on the CPU):
        // allow for an error growing like sqrt(R), R the elements reduced into one output.
        const Shape in_shape = r.transpose ? Shape(r.shape.rbegin(), r.shape.rend()) : r.shape;  // 2-D
        const int64_t rank = static_cast<int64_t>(in_shape.size());
        int64_t R = 1;
        for (int64_t d = 0; d < rank; ++d) {
          bool reduced = r.axes.empty();
          for (int64_t a : r.axes) reduced |= (a < 0 ? a + rank : a) == d;
          if (reduced) R *= in_shape[d];
        }
        const double f32 = op == ReduceOp::Max ? 0 : 1e-5, f64 = op == ReduceOp::Max ? 0 : 1e-12;
        const double sq = std::sqrt(static_cast<double>(R));
        cases.push_back(OpCase(std::string(op_name(op)) + " " + shape_str(r.shape) + (r.transpose ? ".t() " : " ") +
                                   axes + ")" + (keepdim ? " keepdim" : "") + (r.nan ? " with NaN" : ""),
                               [r](Generator& g) { return Tensors{r.nan ? normal_with_nan(g, r.shape) : normal_f64(g, r.shape)}; },
                               [op, r, keepdim](const Tensors& in, Device) {
                                 return Tensors{reduce(op, r.transpose ? in[0].t() : in[0], r.axes, keepdim)};
                               },
                               {with_16bit(tols({f32, f32 * sq}, {f64, f64 * sq}), true)})
                            .with_precision({with_16bit(tols(f32, f64), false)}));
      }
  return cases;
}

// The max along `axis` and its first index; a NaN is the maximum (the first NaN wins).
Values max_ref(const Tensor& xt, int64_t axis) {
  const std::vector<double> x = values(xt);
  const Shape& s = xt.shape();
  if (axis < 0) axis += static_cast<int64_t>(s.size());
  int64_t O = 1, I = 1;
  for (int64_t d = 0; d < axis; ++d) O *= s[d];
  for (size_t d = static_cast<size_t>(axis) + 1; d < s.size(); ++d) I *= s[d];
  const int64_t A = s[axis];
  Values r(2);
  for (int64_t o = 0; o < O; ++o)
    for (int64_t i = 0; i < I; ++i) {
      int64_t best = 0;
      for (int64_t a = 1; a < A; ++a) {
        const double v = x[(o * A + a) * I + i], b = x[(o * A + best) * I + i];
        if (!std::isnan(b) && (std::isnan(v) || v > b)) best = a;
      }
      r[0].push_back(x[(o * A + best) * I + i]);
      r[1].push_back(static_cast<double>(best));
    }
  return r;
}

std::vector<OpCase> max_cases() {
  using namespace kernels;
  struct Config {
    Shape shape;
    int64_t axis;
  };
  const std::vector<Config> configs = {{{257}, 0},      {{7, 33}, 1}, {{7, 33}, 0},    {{3, 5, 4}, 1},
                                       {{3, 5, 4}, -1}, {{1, 1}, 1},  {{2, 70, 3}, 1}, {{40, 1}, 0},
                                       {{3, 4, 5}, -3}, {{3, 4, 5}, -2}, {{3, 4, 5}, -1}, {{2, 3, 4}, 0}, {{2, 3, 4}, 1},
                                       {{2, 3, 4}, 2}};
  std::vector<OpCase> cases;
  for (const Config& c : configs)
    for (int kind = 0; kind < 3; ++kind)  // 0: distinct values, 1: many ties, 2: ties and NaN
      for (bool keepdim : {false, true}) {
        Shape vs = c.shape;
        const size_t a = static_cast<size_t>(c.axis < 0 ? c.axis + static_cast<int64_t>(vs.size()) : c.axis);
        if (keepdim) vs[a] = 1;
        else vs.erase(vs.begin() + static_cast<int64_t>(a));
        OpCase row("max_with_indices " + shape_str(c.shape) + " axis " + std::to_string(c.axis) +
                       (keepdim ? " keepdim" : "") + (kind == 0 ? "" : kind == 1 ? " ties" : " ties and NaN"),
                   [c, kind, vs](Generator& g) {
                     std::vector<double> v = values(uniform_f64(g, c.shape, -3, 3));
                     for (size_t i = 0; i < v.size(); ++i) {
                       if (kind >= 1) v[i] = std::floor(v[i]);  // 6 distinct values: the first maximum must win
                       if (kind == 2 && i % 5 == 2) v[i] = std::nan("");
                     }
                     return Tensors{from_vector<double>(v, c.shape), uniform_f64(g, vs)};
                   },
                   [c, keepdim](const Tensors& in, Device) {
                     const MaxWithIndices m = max_with_indices(in[0], c.axis, keepdim);
                     CHECK(m.indices.dtype() == DType::i64);
                     CHECK(m.values.shape() == in[1].shape());  // dy was made with the expected shape
                     return Tensors{m.values, m.indices, max_backward(in[1], m.indices, c.shape, c.axis)};
                   },
                   {kExact});
        row.with_reference([c](const Tensors& in) { return max_ref(in[0], c.axis); }, {kExact});
        if (kind == 0 && shape_numel(c.shape) <= 60) row.with_finite_diff({0, 1, {{0, 2}}});  // no ties within h
        cases.push_back(row);
      }
  return cases;
}

std::vector<OpCase> reduce_tape_cases() {
  return {
      tape_unary("sum all", [](const Tensor& x) { return sum(x); }, {3, 4}),
      tape_unary("sum axis 0", [](const Tensor& x) { return sum(x, {0}); }, {3, 4}),
      tape_unary("sum axis -1 keepdim", [](const Tensor& x) { return sum(x, {-1}, true); }, {3, 4}),
      tape_unary("sum axes 0,2", [](const Tensor& x) { return sum(x, {0, 2}); }, {2, 3, 4}),
      tape_unary("sum scalar", [](const Tensor& x) { return sum(x); }, {}),
      tape_unary("mean all", [](const Tensor& x) { return mean(x); }, {3, 4}),
      tape_unary("mean axis 1", [](const Tensor& x) { return mean(x, {1}); }, {2, 3, 4}),
      tape_unary("mean axes 0,-1 keepdim", [](const Tensor& x) { return mean(x, {0, -1}, true); }, {2, 3, 4}),
      tape_unary("max axis 1", [](const Tensor& x) { return max(x, 1); }, {3, 5}),
      tape_unary("max axis 0 keepdim", [](const Tensor& x) { return max(x, 0, true); }, {4, 3}),
      tape_unary("max axis -1", [](const Tensor& x) { return max(x, -1); }, {2, 3, 4}),
  };
}

TEST_CASE("reductions: sum, mean, max along each axis and in total, keepdim, NaN") { run_cases(reduce_cases(), kDTypes); }
TEST_CASE("max_with_indices and max_backward: every axis, keepdim, ties, NaN") { run_cases(max_cases(), kDTypes); }
TEST_CASE("reduction tape ops: sum, mean, max over axes") { run_cases(reduce_tape_cases(), kDTypes); }
}  // namespace
}  // namespace reel::op_table
