// tests/op_table/views.cpp: the op table's shape ops: reshape, view, flatten, transpose, permute,
// contiguous, slice, narrow, select, squeeze, unsqueeze, expand, concat, split and chunk, through
// reel:: functions and through Tensor methods, as tape rows.
#include <vector>

#include "autograd/functions.h"
#include "op_table.h"

namespace reel::op_table {
namespace {

using namespace reel::testing;

// The dtypes every row of this family runs in (rows that name their own keep them): one entry to add.
const std::vector<DType> kDTypes = {DType::f32, DType::f64};

std::vector<OpCase> view_tape_cases() {
  return {
      tape_unary("reshape -1", [](const Tensor& x) { return reshape(x, {4, -1}); }, {2, 3, 4}),
      tape_unary("reshape of a transpose (copies)", [](const Tensor& x) { return reshape(transpose(x, 0, 1), {-1}); },
                 {3, 5}),
      tape_unary("view", [](const Tensor& x) { return view(x, {6, 1, 4}); }, {2, 3, 4}),
      tape_unary("flatten", [](const Tensor& x) { return flatten(x); }, {2, 3, 2}),
      tape_unary("transpose 0,2", [](const Tensor& x) { return transpose(x, 0, 2); }, {2, 3, 4}),
      tape_unary("transpose -1,-2", [](const Tensor& x) { return transpose(x, -1, -2); }, {3, 5}),
      tape_unary("permute 2,0,1", [](const Tensor& x) { return permute(x, {2, 0, 1}); }, {2, 3, 4}),
      tape_unary("permute -1,0,1 then contiguous", [](const Tensor& x) { return contiguous(permute(x, {-1, 0, 1})); },
                 {2, 3, 4}),
      tape_unary("contiguous (already)", [](const Tensor& x) { return contiguous(x * 2.0); }, {3, 4}),
      tape_unary("slice step 2", [](const Tensor& x) { return slice(x, 1, 1, 6, 2); }, {3, 7}),
      tape_unary("slice negative start, end past the size", [](const Tensor& x) { return slice(x, -1, -3, 100); },
                 {2, 3, 5}),
      tape_unary("slice empty", [](const Tensor& x) { return sum(slice(x, 0, 2, 2)) + sum(x); }, {3, 2}),
      tape_unary("narrow", [](const Tensor& x) { return narrow(x, 0, 1, 2); }, {4, 3}),
      tape_unary("select -1", [](const Tensor& x) { return select(x, 1, -1); }, {2, 3, 4}),
      tape_unary("select of a vector", [](const Tensor& x) { return select(x, 0, 2) * x; }, {5}),
      tape_unary("squeeze", [](const Tensor& x) { return squeeze(x, 1); }, {3, 1, 4}),
      tape_unary("squeeze (no size-1 dim)", [](const Tensor& x) { return squeeze(x * 1.0, 0); }, {3, 4}),
      tape_unary("unsqueeze -1", [](const Tensor& x) { return unsqueeze(x, -1); }, {3, 4}),
      tape_unary("unsqueeze 0 of a scalar", [](const Tensor& x) { return unsqueeze(x, 0); }, {}),
      tape_unary("expand (3, 1) -> (2, 3, 4)", [](const Tensor& x) { return expand(x, {2, 3, 4}); }, {3, 1}),
      tape_unary("expand -1", [](const Tensor& x) { return expand(x, {3, -1}); }, {1, 4}),
      tape_ternary("concat dim 1", [](const Tensor& a, const Tensor& b, const Tensor& c) { return concat({a, b, c}, 1); },
                   {2, 1, 3}, {2, 4, 3}, {2, 2, 3}),
      tape_ternary("concat dim -1, one input without grad",
                   [](const Tensor& a, const Tensor& b, const Tensor& c) { return concat({a, b, c}, -1); }, {2, 2},
                   {2, 3}, {2, 1}, {true, false, true}),
      tape_binary("concat of views of one tensor",
                  [](const Tensor& a, const Tensor& b) {
                    return concat({transpose(a, 0, 1), b, transpose(slice(a, 1, 1, 3), 0, 1)}, 0);
                  },
                  {2, 3}, {1, 2}),
      tape_unary("split, one piece unused",
                 [](const Tensor& x) {
                   const std::vector<Tensor> p = split(x, {1, 3, 2}, 1);
                   return concat({p[2], p[0] * 3.0}, 1);
                 },
                 {2, 6, 2}),
      tape_unary("chunk 7 into 3",
                 [](const Tensor& x) {
                   const std::vector<Tensor> c = chunk(x, 3, 0);  // 3, 3, 1 rows
                   return concat({c[2], c[0] * c[1]}, 0);
                 },
                 {7, 2}),
      tape_binary("Tensor methods: w.t() of a parameter", [](const Tensor& x, const Tensor& w) { return matmul(x, w.t()); },
                  {3, 4}, {5, 4}),
      tape_unary("Tensor methods: a chain of views",
                 [](const Tensor& x) {  // (2, 3, 4) -> (4, 3, 2) -> (24) -> (1, 4, 6) -> (3, 4, 6) -> (4, 6) -> ...
                   return x.permute({2, 1, 0}).contiguous().flatten().view({1, 4, 6}).expand({3, 4, 6}).select(0, 1)
                              .slice(1, 1, 5).narrow(0, 1, 2).transpose(0, 1).reshape({-1}).unsqueeze(0).squeeze(0) *
                          x.reshape({-1}).narrow(0, 0, 8);
                 },
                 {2, 3, 4}),
  };
}

TEST_CASE("shape ops: views, concat, split, chunk, Tensor methods") { run_cases(view_tape_cases(), kDTypes); }
}  // namespace
}  // namespace reel::op_table
