// tests/op_table/linear_cross_entropy.cpp: the op table's rows of the fused, chunked LM head +
// cross-entropy (autograd/ops/linear_cross_entropy.h). Tape rows only (it has no kernel of its own:
// kernels::matmul and the cross_entropy kernel are tested by their families): backward against f64
// finite differences, values against cross_entropy(linear(h, W, b), targets) composed, and on every
// device in each dtype the values and gradients against the f64 CPU ones; chunks of 1, 3, N and
// more than N rows, and ragged ones (N = 6 in chunks of 4), both reductions, ignored targets.
#include <string>
#include <vector>

#include "autograd/functions.h"
#include "autograd/nn_functions.h"
#include "op_table.h"

namespace reel::op_table {
namespace {

const std::vector<DType> kDTypes = {DType::f32, DType::f64};

std::vector<OpCase> linear_cross_entropy_cases() {
  // Targets are constants captured by f, moved to its inputs' device; each has an ignored row.
  auto on = [](const Tensor& constant, const Tensor& like) { return constant.to(like.device()); };
  const Tensor targets6 = from_vector<int64_t>({2, 0, -100, 4, 4, 1}, {6});
  const Tensor targets23 = from_vector<int32_t>({1, 4, 0, 3, -100, 2}, {2, 3});
  const Tensor targets6_ignore3 = from_vector<int64_t>({3, 4, 0, 3, 1, 2}, {6});
  const Tensor all_ignored = from_vector<int64_t>({-100, -100, -100}, {3});
  std::vector<OpCase> cases;
  for (int64_t chunk : {1, 3, 4, 6, 8, 0})
    for (const char* red : {"mean", "sum"}) {
      const std::string name = std::string("linear_cross_entropy ") + red + " chunk_rows " + std::to_string(chunk);
      cases.push_back(with_composed(
          tape_binary(
              name.c_str(),
              [=](const Tensor& h, const Tensor& w) { return linear_cross_entropy(h, w, on(targets6, h), -100, red, chunk); },
              {6, 4}, {5, 4}),
          [=](const Tensors& x) { return cross_entropy(linear(x[0], x[1]), on(targets6, x[0]), -100, red); }));
    }
  cases.push_back(with_composed(
      tape_binary(
          "linear_cross_entropy (2, 3, C) i32 targets chunk_rows 4",
          [=](const Tensor& h, const Tensor& w) { return linear_cross_entropy(h, w, on(targets23, h), -100, "mean", 4); },
          {2, 3, 4}, {5, 4}),
      [=](const Tensors& x) { return cross_entropy(linear(x[0], x[1]), on(targets23, x[0])); }));
  cases.push_back(with_composed(
      tape_ternary("linear_cross_entropy with bias chunk_rows 4",
                   [=](const Tensor& h, const Tensor& w, const Tensor& b) {
                     return linear_cross_entropy(h, w, on(targets6, h), -100, "mean", 4, b);
                   },
                   {6, 4}, {5, 4}, {5}),
      [=](const Tensors& x) { return cross_entropy(linear(x[0], x[1], x[2]), on(targets6, x[0])); }));
  cases.push_back(with_composed(
      tape_binary(
          "linear_cross_entropy ignore_index 3 chunk_rows 2",
          [=](const Tensor& h, const Tensor& w) { return linear_cross_entropy(h, w, on(targets6_ignore3, h), 3, "mean", 2); },
          {6, 4}, {5, 4}),
      [=](const Tensors& x) { return cross_entropy(linear(x[0], x[1]), on(targets6_ignore3, x[0]), 3); }));
  cases.push_back(with_composed(
      tape_binary(
          "linear_cross_entropy every target ignored",
          [=](const Tensor& h, const Tensor& w) { return linear_cross_entropy(h, w, on(all_ignored, h), -100, "mean", 2); },
          {3, 4}, {5, 4}),
      [=](const Tensors& x) { return cross_entropy(linear(x[0], x[1]), on(all_ignored, x[0])); }));
  // One input frozen: only the other's gradient is computed and saved.
  for (std::vector<bool> needs : {std::vector<bool>{false, true}, std::vector<bool>{true, false}})
    cases.push_back(tape_binary(
        needs[0] ? "linear_cross_entropy, only h needs grad" : "linear_cross_entropy, only W needs grad",
        [=](const Tensor& h, const Tensor& w) { return linear_cross_entropy(h, w, on(targets6, h), -100, "sum", 4); },
        {6, 4}, {5, 4}, Domain::Any, needs));
  return cases;
}

TEST_CASE("linear_cross_entropy tape op: chunks of 1, 3, N, > N and ragged, both reductions, ignored targets, bias") {
  run_cases(linear_cross_entropy_cases(), kDTypes);
}

}  // namespace
}  // namespace reel::op_table
