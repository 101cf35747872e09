// tests/op_table/dropout.cpp: the op table's dropout family. Kernel rows: dropout_mask against the
// Philox formula keep = philox_uniform(seed, offset, i) >= p, bit for bit on every device. Tape rows:
// dropout with a fixed stream, p = 0 and eval. And the mask the same in forward, backward, the
// kernel entry point and on every device.
#include <cmath>
#include <string>
#include <vector>

#include "autograd/functions.h"
#include "autograd/nn_functions.h"
#include "autograd/tape.h"
#include "core/philox.h"
#include "kernels/dropout.h"
#include "op_table.h"

namespace reel::op_table {
namespace {

using namespace reel::testing;

// The dtypes every row of this family runs in (the kernel rows name their own, the same list): one
// entry to add. bf16 and f16: the mask's kept value 1 / (1 - p) rounded once to the dtype.
const std::vector<DType> kDTypes = {DType::f32, DType::f64, DType::bf16, DType::f16};

// Dropout masks: the Philox formula keep = philox_uniform(seed, offset, i) >= p, bit for bit on
// every device.
std::vector<OpCase> dropout_cases() {
  using namespace kernels;
  std::vector<OpCase> cases;
  for (double p : {0.0, 0.1, 0.5, 1.0})
    for (const Shape& s : std::vector<Shape>{{1}, {257}, {31, 33}})
      for (DType dt : kDTypes)
        cases.push_back(
            OpCase("dropout_mask p=" + str(p) + " " + shape_str(s) + " " + dtype_name(dt),
                   [](Generator&) { return Tensors{}; },
                   [s, dt, p](const Tensors&, Device d) { return Tensors{dropout_mask(s, dt, d, p, 1234, 7)}; }, {kExact})
                .with_dtypes({})
                .with_reference(
                    [s, p](const Tensors&) {
                      std::vector<double> m(static_cast<size_t>(shape_numel(s)));
                      for (size_t i = 0; i < m.size(); ++i)
                        m[i] = p < 1 && static_cast<double>(philox_uniform(1234, 7, i)) >= p ? 1 / (1 - p) : 0;
                      return Values{m};
                    },
                    // f32: 1 / (1 - p) rounded to f32; bf16 / f16: rounded to 8 / 11 bits, half an
                    // ulp, a relative u = 2^-8 / 2^-11. Device vs cpu: bit for bit in every dtype.
                    {Tols{{{DType::f32, {1e-7, 1e-7}},
                           {DType::f64, {0, 0}},
                           {DType::bf16, {0x1p-8, 0}},
                           {DType::f16, {0x1p-11, 0}}}}}));
  // The stream read from device memory (replay-safe: kernels/dropout.h): (seed 1234, base 5) on the
  // device and delta 2 by value draw the stream (1234, 7), the same mask bit for bit.
  for (double p : {0.1, 0.5})
    for (const Shape& s : std::vector<Shape>{{257}, {31, 33}})
      for (DType dt : kDTypes)
        cases.push_back(
            OpCase("dropout_mask from a device stream p=" + str(p) + " " + shape_str(s) + " " + dtype_name(dt),
                   [](Generator&) { return Tensors{}; },
                   [s, dt, p](const Tensors&, Device d) {
                     return Tensors{dropout_mask(s, dt, d, p, from_vector<int64_t>({1234, 5}, {2}).to(d), 2)};
                   },
                   {kExact})
                .with_dtypes({})
                .with_reference(
                    [s, dt, p](const Tensors&) {
                      return Values{values(dropout_mask(s, dt, Device::cpu(), p, 1234, 7).to(DType::f64))};
                    },
                    {Tols{{{DType::f32, {0, 0}}, {DType::f64, {0, 0}}, {DType::bf16, {0, 0}}, {DType::f16, {0, 0}}}}}));
  return cases;
}

// The same stream inside f each call, so finite differences see one fixed mask.
Tensor fixed_dropout(const Tensor& x, double p) {
  Generator gen(7);
  return dropout(x, p, true, &gen);
}

std::vector<OpCase> dropout_tape_cases() {
  return {
      tape_unary("dropout p=0.3", [](const Tensor& x) { return fixed_dropout(x, 0.3); }, {4, 5}),
      tape_unary("dropout p=0", [](const Tensor& x) { return fixed_dropout(x * 1.0, 0.0); }, {4, 5}),
      tape_unary("dropout eval", [](const Tensor& x) { return dropout(x * 1.0, 0.5, false); }, {4, 5}),
  };
}

TEST_CASE("dropout masks: the Philox formula, bit for bit") { run_cases(dropout_cases(), kDTypes); }
TEST_CASE("dropout tape op: a fixed stream, p = 0, eval") { run_cases(dropout_tape_cases(), kDTypes); }

TEST_CASE("dropout: the mask is the Philox formula, the same in forward, backward and on every device") {
  const double p = 0.25;
  const Shape shape{64, 33};
  std::vector<float> reference_mask;
  for (Device d : reel::testing::devices()) {
    CAPTURE(d);
    Generator gen(11);
    const uint64_t seed = gen.seed(), offset = 0;  // the first stream of a fresh generator
    Tensor x = ones(shape, DType::f32, d).set_requires_grad();
    Tensor y = dropout(x, p, true, &gen);
    const std::vector<float> yv = y.to(Device::cpu()).to_vector<float>();
    int64_t kept = 0;
    for (size_t i = 0; i < yv.size(); ++i) {
      const bool keep = static_cast<double>(philox_uniform(seed, offset, i)) >= p;
      REQUIRE(yv[i] == (keep ? static_cast<float>(1 / (1 - p)) : 0.0f));
      kept += keep;
    }
    CHECK(std::fabs(static_cast<double>(kept) / yv.size() - (1 - p)) < 0.03);
    autograd::backward(sum(y));
    CHECK(x.grad().to(Device::cpu()).to_vector<float>() == yv);  // dx = mask, as y = 1 * mask
    // The kernel entry point agrees, and the next call of the generator draws a new mask.
    CHECK(kernels::dropout_mask(shape, DType::f32, d, p, seed, offset).to(Device::cpu()).to_vector<float>() == yv);
    CHECK(dropout(ones(shape, DType::f32, d), p, true, &gen).to(Device::cpu()).to_vector<float>() != yv);
    if (reference_mask.empty()) reference_mask = yv;
    CHECK(yv == reference_mask);  // the CPU's mask, bit for bit
    // p == 1 drops everything.
    check_close(dropout(ones({5}, DType::f32, d), 1.0, true, &gen), std::vector<double>(5, 0.0));
  }
}
}  // namespace
}  // namespace reel::op_table
