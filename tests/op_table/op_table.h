// tests/op_table/op_table.h: the one op table's runner (the shape of ggml's test-backend-ops).
// Every op reel has, kernel entry point (kernels/ops.h) and tape op (autograd/functions.h,
// autograd/nn_functions.h), is a row (OpCase) in the file of its family, tests/op_table/*.cpp;
// a new op is ONE row there. A family's file lists the dtypes its rows run in, e.g.
//   const std::vector<DType> kDTypes = {DType::f32, DType::f64};
// so adding a dtype to a family is one entry there, and the tolerance a dtype gets where a row
// names none is one entry of the runner's dtype table (op_table.cpp, dtype_tolerance()).
//
// Two kinds of row share OpCase:
// * a kernel row (the constructor) names its inputs (made as f64 or integer CPU tensors from a
//   generator seeded by the row's name), the op as a function of (inputs, device) returning its
//   outputs, and per output the device tolerances |got - expected| <= atol + rtol |expected|.
//   For each dtype of the row the runner
//     1. runs the op on the CPU in that dtype and checks it against the row's f64 reference loop
//        when it has one (fed the inputs as rounded to the dtype), else (dtypes below f64)
//        against the f64 CPU run on the same rounded inputs;
//     2. runs it on every other device of the build (tests/testing.h devices(): cuda:0, emulated
//        by kernels/simt or real), compares every output with the CPU's and, where the row has a
//        reference, with the reference (the two tolerances added); inputs must come back unchanged;
//   and, where the row says so, checks the backward outputs against central finite differences
//   of L = sum(forward output * weights) in f64 on the CPU (tests/testing.h check_gradient).
// * a tape row (tape_unary/tape_binary/tape_ternary) is a differentiable function of f64 inputs
//   drawn N(0, 1) (Domain: positive, or away from relu's kink). The runner checks its backward
//   against f64 finite differences (autograd::gradcheck), where it has one its f64 values against
//   the same function composed from ops tested elsewhere (with_composed: what keeps a forward that
//   is wrong in the same way as its backward from passing), and then, in each dtype of the row on
//   every device, its values and the gradients of sum(w * f(x)) against the f64 CPU ones (inputs
//   that need no gradient must get none).
// Every allocation is poisoned (0xFF bytes: NaN, -1), so an output element a kernel forgets to
// write fails. Edge cases stay in the per-family files (tests/test_elementwise.cpp ...
// test_nn_kernels_*.cpp, test_cuda_nn_ops.cpp): NaN and ties rules, ignore_index corners,
// determinism across thread counts and emulator scheduling orders, bad inputs.
//
// REEL_OP_TABLE_STATS=1 in the environment prints, per test case, its rows and checks.
#pragma once
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "autograd/functions.h"  // softmax_last: exp, sum and the tensor operators, recorded
#include "core/random.h"
#include "core/tensor.h"
#include "testing.h"

namespace reel::op_table {

using Tensors = std::vector<Tensor>;
using Values = std::vector<std::vector<double>>;  // a reference's outputs, row-major

// ---- tolerances ---------------------------------------------------------------------------------

struct Tol {
  double rtol, atol;
};

// The runner's dtype table: one entry per floating dtype a row can run in (a future bf16 is one
// entry): its unit roundoff, which scales a row's f32 tolerance to a dtype the row does not name,
// and the tolerance of tape rows' values and gradients against the f64 CPU ones.
struct DTypeTolerance {
  DType dtype;
  double eps;
  Tol tape;
};
const DTypeTolerance& dtype_tolerance(DType dt);

// One output's tolerances, by the output's dtype: the row's own entry for that dtype, integer
// outputs f64's (they must be equal), any other floating dtype f32's scaled by its eps.
struct Tols {
  std::vector<std::pair<DType, Tol>> by_dtype;
  Tol of(DType dt) const;
};
Tols tols(double f32, double f64 = 1e-12);
Tols tols(Tol f32, Tol f64);
extern const Tols kExact;
// t with bf16 and f16 entries for a kernel that widens 16-bit inputs to f32, computes as in f32 and
// rounds each output once: the runner rounds the inputs to the dtype before the reference sees
// them, so what is left is t's f32 error plus half an ulp of the output type, a relative u = 2^-8
// (bf16, 8 significant bits) or 2^-11 (f16, 11 bits). cpu against cuda (`device`): two f32 results
// that differ in their last bits (another exp, another summation order) may round to neighbouring
// 16-bit values, one ulp apart: 2u. An output the kernel keeps in f32 (an lse, a mean) reads t's f32
// entry by its dtype. An exact row (tolerance 0: compare, where, max) stays exact. The families
// whose 16-bit error has another shape (the GEMMs' K-term sums,
// attention's rounded out, the optimizers' steps) state their own beside their rows.
Tols with_16bit(Tols t, bool device);

// ---- rows ---------------------------------------------------------------------------------------

// dL/d inputs[input] is outputs[output].
struct GradPair {
  size_t input, output;
};
// L = sum(outputs[loss] * inputs[weights]): for a scalar loss and a scalar weight, weight * loss.
struct FiniteDiff {
  size_t loss, weights;
  std::vector<GradPair> grads;
};

using MakeFn = std::function<Tensors(Generator&)>;
using RunFn = std::function<Tensors(const Tensors&, Device)>;
using RefFn = std::function<Values(const Tensors&)>;
using TapeFn = std::function<Tensor(const Tensors&)>;

// Where a tape row draws its inputs: N(0, 1), |N(0, 1)| + 0.5 (log, divisors), or N(0, 1) moved
// 0.1 away from 0 (relu's kink).
enum class Domain { Any, Positive, AwayFromZero };

struct OpCase {
  std::string name;
  MakeFn make;                 // f64 floating and integer CPU tensors
  // kernel rows
  RunFn run;                   // the op on inputs living on `device`, in the dtype under test
  std::vector<Tols> device;    // device vs cpu, per output (the last repeats)
  std::optional<std::vector<DType>> dtypes;  // unset: the family's; floating inputs converted; empty: as made
  RefFn reference;             // f64 loops: outputs 0..k-1 of the cpu run against them
  std::vector<Tols> precision;  // cpu vs reference (or below f64 vs f64 without one); empty: none
  std::vector<FiniteDiff> finite_diff;
  // tape rows
  TapeFn tape;                 // set: a tape row
  std::vector<bool> needs_grad;  // per input; empty: every input
  TapeFn composed;             // the same function composed from other ops (f64 values)

  OpCase(std::string name_, MakeFn make_, RunFn run_, std::vector<Tols> device_)
      : name(std::move(name_)), make(std::move(make_)), run(std::move(run_)), device(std::move(device_)) {}
  OpCase& with_dtypes(std::vector<DType> d) { return dtypes = std::move(d), *this; }
  OpCase& with_reference(RefFn f, std::vector<Tols> t) { return reference = std::move(f), precision = std::move(t), *this; }
  OpCase& with_precision(std::vector<Tols> t) { return precision = std::move(t), *this; }
  OpCase& with_finite_diff(FiniteDiff fd) { return finite_diff.push_back(std::move(fd)), *this; }
  OpCase& with_composed(TapeFn f) { return composed = std::move(f), *this; }
};

// Tape rows of one, two and three inputs; the name gets the input shapes appended.
OpCase tape_row(std::string name, std::vector<Shape> shapes, TapeFn f, Domain domain = Domain::Any,
                std::vector<bool> needs_grad = {});
OpCase tape_unary(const char* name, std::function<Tensor(const Tensor&)> f, Shape s, Domain domain = Domain::Any);
OpCase tape_binary(const char* name, std::function<Tensor(const Tensor&, const Tensor&)> f, Shape a, Shape b,
                   Domain domain = Domain::Any, std::vector<bool> needs_grad = {});
OpCase tape_ternary(const char* name, std::function<Tensor(const Tensor&, const Tensor&, const Tensor&)> f, Shape a,
                    Shape b, Shape c, std::vector<bool> needs_grad = {});

// c with a composed reference (OpCase::with_composed), for rows written as one expression.
inline OpCase with_composed(OpCase c, TapeFn f) { return c.with_composed(std::move(f)); }

// Runs every row of a family in its dtypes (rows that name their own keep them), under poisoned
// allocations. One doctest case per family calls it.
void run_cases(const std::vector<OpCase>& cases, const std::vector<DType>& dtypes);

// ---- inputs and references ----------------------------------------------------------------------

// N(0, 1) with every 7th element NaN.
Tensor normal_with_nan(Generator& g, const Shape& shape);
// Integer ids as a CPU tensor of dtype dt.
Tensor indices(const std::vector<int64_t>& ids, const Shape& shape, DType dt);
inline Tensor same(const Tensor& x) { return x; }
inline Shape without_last(const Shape& s) { return Shape(s.begin(), s.end() - 1); }
// Softmax over the last dim composed from tape ops: the reference of the softmax and attention rows.
inline Tensor softmax_last(const Tensor& x) {
  const Tensor e = exp(x);
  return e / sum(e, {-1}, true);
}
// A number as a short string for row names: 0.1, 1000, 0.37.
std::string str(double v);
// f applied to every value of x (any dtype, any device), in row-major order.
std::vector<double> map(const Tensor& x, const std::function<double(double)>& f);

}  // namespace reel::op_table
