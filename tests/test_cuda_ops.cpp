// tests/test_cuda_ops.cpp: every op of the CUDA backend against the CPU backend, from one table
// of cases (the shape of ggml's test-backend-ops). A case names its input shapes, their dtype and
// value kind, and the op as a function of (inputs, device); the harness creates the inputs on the
// cpu, copies them to cuda:0, runs the op on both and compares with the case's tolerances:
// |cuda - cpu| <= atol + rtol * |cpu| per element, NaN only where the cpu has NaN. Inputs are
// checked unchanged afterwards. Every allocation is poisoned (0xFF bytes: NaN, -1), so an output
// element a kernel forgets to write fails. Sizes are awkward on purpose: 1, 31, 257, dims that
// are not multiples of a warp, a block or a 16x16 tile, size-1 broadcast dims, transposed and
// sliced views. Runs on the emulated device (kernels/simt) or a real GPU; skips without one.
#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "core/allocator.h"
#include "core/random.h"
#include "kernels/dropout.h"
#include "kernels/ops.h"
#include "testing.h"
#if defined(REEL_HAS_CUDA_BACKEND)
#include "cuda_test_kernels.h"
#include "kernels/cuda/cuda_kernels.h"
#endif

using namespace reel;
using namespace reel::kernels;
using reel::testing::check_close;
using reel::testing::values;

REEL_TEST_REQUIRES_CUDA();

namespace {

const Device kCuda = Device::cuda(0);

// Tolerances: elementwise math may differ by a few ulp between the device's libm and the CPU's
// (Eigen's vectorised exp/tanh, glibc); GEMM and sums round in a different order (and the GPU
// accumulates f32 in float where the CPU uses double).
constexpr double kF32Ulps = 1e-5, kF64Ulps = 1e-12;

enum class Init { Normal, Positive, WithNaN };

using RunFn = std::function<Tensor(const std::vector<Tensor>&, Device)>;

struct Case {
  std::string name;
  std::vector<Shape> shapes;  // inputs
  DType dtype;
  Init init;
  RunFn run;                  // the op on inputs living on `device`
  double rtol, atol;
  RunFn run_cuda;             // when set, runs on cuda instead of `run` (the tiled GEMM)

  Case(std::string name_, std::vector<Shape> shapes_, DType dtype_, Init init_, RunFn run_, double rtol_,
       double atol_, RunFn run_cuda_ = nullptr)
      : name(std::move(name_)), shapes(std::move(shapes_)), dtype(dtype_), init(init_), run(std::move(run_)),
        rtol(rtol_), atol(atol_), run_cuda(std::move(run_cuda_)) {}
};

uint64_t seed_of(const std::string& s) {  // FNV-1a: the same inputs on every run and machine
  uint64_t h = 1469598103934665603ull;
  for (char c : s) h = (h ^ static_cast<unsigned char>(c)) * 1099511628211ull;
  return h;
}

// Normal: N(0, 1) (times 100 for integer dtypes, then truncated); Positive: U[0.1, 2.1);
// WithNaN: N(0, 1) with every 7th element NaN.
Tensor make_input(const Shape& shape, DType dtype, Init init, Generator& g) {
  Tensor x = init == Init::Positive ? rand(shape, DType::f64, Device::cpu(), &g) : randn(shape, DType::f64, Device::cpu(), &g);
  std::vector<double> v = x.to_vector<double>();
  for (size_t i = 0; i < v.size(); ++i) {
    if (init == Init::Positive) v[i] = 2 * v[i] + 0.1;
    if (init == Init::WithNaN && i % 7 == 3) v[i] = std::nan("");
    if (!is_floating(dtype)) v[i] *= 100;
  }
  return from_vector(v, shape).to(dtype);
}

void run_case(const Case& c) {
  const std::string label = "case: " + c.name + " (" + dtype_name(c.dtype) + ")";
  INFO(label);
  Generator g(seed_of(c.name));
  std::vector<Tensor> cpu_in, cuda_in;
  for (const Shape& s : c.shapes) {
    cpu_in.push_back(make_input(s, c.dtype, c.init, g));
    cuda_in.push_back(cpu_in.back().to(kCuda));
  }
  const Tensor expected = c.run(cpu_in, Device::cpu());
  const Tensor got = c.run_cuda ? c.run_cuda(cuda_in, kCuda) : c.run(cuda_in, kCuda);
  CHECK(got.device() == kCuda);
  CHECK(got.dtype() == expected.dtype());
  check_close(got, expected, c.rtol, c.atol);
  for (size_t i = 0; i < cpu_in.size(); ++i) check_close(cuda_in[i], cpu_in[i], 0, 0);  // inputs untouched
}

void run_cases(const std::vector<Case>& cases) {
  set_poison_allocations(true);
  for (const Case& c : cases) run_case(c);
}

double rtol_of(DType dt, double f32 = kF32Ulps, double f64 = kF64Ulps) { return dt == DType::f32 ? f32 : f64; }

// A view applied to an input before the op: the same on both devices.
struct View {
  const char* name;
  Shape shape;  // of the input as created
  std::function<Tensor(const Tensor&)> apply;
};

std::vector<View> elementwise_views() {
  return {
      {"(1)", {1}, [](const Tensor& x) { return x; }},
      {"(257)", {257}, [](const Tensor& x) { return x; }},
      {"(31, 33)", {31, 33}, [](const Tensor& x) { return x; }},
      {"(33, 31).t()", {33, 31}, [](const Tensor& x) { return x.t(); }},
      {"(9, 4, 5).permute(2, 0, 1)[:, ::2]", {9, 4, 5}, [](const Tensor& x) { return x.permute({2, 0, 1}).slice(1, 0, 9, 2); }},
      {"(1, 31).expand(5, 31)", {1, 31}, [](const Tensor& x) { return x.expand({5, 31}); }},
      {"() scalar", {}, [](const Tensor& x) { return x; }},
  };
}

Tensor tiled_matmul(const Tensor& a_in, const Tensor& b_in, bool ta, bool tb);

}  // namespace

TEST_CASE("unary ops on cuda match the cpu: every op, f32 and f64, strided and broadcast views") {
  std::vector<Case> cases;
  for (DType dt : {DType::f32, DType::f64})
    for (UnaryOp op : kUnaryOps)  // [op-lists] every op of REEL_UNARY_OPS
      for (const View& v : elementwise_views()) {
        const bool positive = unary_domain(op) == UnaryDomain::Positive;  // log, sqrt, reciprocal
        cases.push_back({std::string(op_name(op)) + " " + v.name, {v.shape}, dt, positive ? Init::Positive : Init::Normal,
                         [op, f = v.apply](const std::vector<Tensor>& in, Device) { return unary(op, f(in[0])); },
                         rtol_of(dt), rtol_of(dt, 1e-6, 1e-14)});
      }
  for (UnaryOp op : {UnaryOp::Relu, UnaryOp::Exp, UnaryOp::Abs, UnaryOp::Tanh})
    cases.push_back({std::string(op_name(op)) + " with NaN (257)", {{257}}, DType::f32, Init::WithNaN,
                     [op](const std::vector<Tensor>& in, Device) { return unary(op, in[0]); }, kF32Ulps, 1e-6});
  run_cases(cases);
}

TEST_CASE("binary ops on cuda match the cpu: every op, NumPy broadcasting, strided inputs") {
  const BinaryOp ops[] = {BinaryOp::Add, BinaryOp::Sub, BinaryOp::Mul, BinaryOp::Div, BinaryOp::Maximum, BinaryOp::Minimum};
  struct Pair {
    Shape a, b;
    bool transpose_a;
  };
  const std::vector<Pair> pairs = {
      {{257}, {257}, false},        {{31, 1}, {1, 33}, false},   {{4, 1, 3}, {1, 5, 1}, false},
      {{}, {7, 5}, false},          {{1}, {257}, false},         {{2, 3, 4, 5}, {4, 1}, false},
      {{33, 31}, {33}, true},       {{0, 3}, {3}, false},        {{3, 1, 31}, {2, 1, 1, 1}, false},
  };
  std::vector<Case> cases;
  for (DType dt : {DType::f32, DType::f64})
    for (BinaryOp op : ops)
      for (const Pair& p : pairs)
        cases.push_back({std::string(op_name(op)) + " " + shape_str(p.a) + (p.transpose_a ? ".t()" : "") + " and " +
                             shape_str(p.b),
                         {p.a, p.b}, dt, Init::Normal,
                         [op, t = p.transpose_a](const std::vector<Tensor>& in, Device) {
                           return binary(op, t ? in[0].t() : in[0], in[1]);
                         },
                         rtol_of(dt, 1e-6, 1e-15), rtol_of(dt, 1e-7, 1e-15)});
  for (BinaryOp op : {BinaryOp::Maximum, BinaryOp::Minimum, BinaryOp::Add})
    cases.push_back({std::string(op_name(op)) + " with NaN (31, 1) and (1, 33)", {{31, 1}, {1, 33}}, DType::f32,
                     Init::WithNaN, [op](const std::vector<Tensor>& in, Device) { return binary(op, in[0], in[1]); },
                     1e-6, 1e-7});
  run_cases(cases);
}

TEST_CASE("tensor-scalar ops on cuda match the cpu: scalar on either side") {
  const BinaryOp ops[] = {BinaryOp::Add, BinaryOp::Sub, BinaryOp::Mul, BinaryOp::Div, BinaryOp::Maximum, BinaryOp::Minimum};
  std::vector<Case> cases;
  for (DType dt : {DType::f32, DType::f64})
    for (BinaryOp op : ops)
      for (bool left : {false, true})
        for (const View& v : elementwise_views())
          cases.push_back({std::string(left ? "0.75 " : "x ") + op_name(op) + (left ? " x " : " 0.75 ") + v.name,
                           {v.shape}, dt, Init::Normal,
                           [op, left, f = v.apply](const std::vector<Tensor>& in, Device) {
                             return left ? binary(op, 0.75, f(in[0])) : binary(op, f(in[0]), 0.75);
                           },
                           rtol_of(dt, 1e-6, 1e-15), rtol_of(dt, 1e-7, 1e-15)});
  run_cases(cases);
}

// ---- [op-lists, issue 10] unary_backward, compare, where --------------------------------------

TEST_CASE("unary_backward on cuda matches the cpu: every op, f32 and f64, strided and broadcast views") {
  std::vector<Case> cases;
  for (DType dt : {DType::f32, DType::f64})
    for (UnaryOp op : kUnaryOps)
      for (const View& v : elementwise_views()) {
        const bool positive = unary_domain(op) == UnaryDomain::Positive;
        // in[0]: dy, in[1]: x; saved is x, y = f(x) computed on the device, or nothing.
        cases.push_back({std::string(op_name(op)) + "_backward " + v.name, {v.shape, v.shape}, dt,
                         positive ? Init::Positive : Init::Normal,
                         [op, f = v.apply](const std::vector<Tensor>& in, Device) {
                           const Tensor x = f(in[1]);
                           const UnarySaves saves = unary_saves(op);
                           const Tensor saved = saves == UnarySaves::Input    ? x
                                                : saves == UnarySaves::Output ? unary(op, x)
                                                                              : Tensor();
                           return unary_backward(op, f(in[0]), saved);
                         },
                         // GELU/SiLU recompute tanh / exp: the device's and Eigen's differ by ulps of
                         // O(1) terms that cancel near t = -1, hence an absolute tolerance.
                         rtol_of(dt), rtol_of(dt, 1e-5, 1e-13)});
      }
  for (UnaryOp op : {UnaryOp::Relu, UnaryOp::Abs, UnaryOp::Gelu, UnaryOp::Exp})
    cases.push_back({std::string(op_name(op)) + "_backward with NaN (257)", {{257}, {257}}, DType::f32,
                     Init::WithNaN,
                     [op](const std::vector<Tensor>& in, Device) {
                       const Tensor saved = unary_saves(op) == UnarySaves::Output ? unary(op, in[1]) : in[1];
                       return unary_backward(op, in[0], saved);
                     },
                     kF32Ulps, 1e-5});
  run_cases(cases);
}

TEST_CASE("compare on cuda matches the cpu exactly: every op, broadcasting, strided, NaN, scalar form") {
  struct Pair {
    Shape a, b;
    bool transpose_a;
  };
  const std::vector<Pair> pairs = {
      {{257}, {257}, false}, {{31, 1}, {1, 33}, false}, {{4, 1, 3}, {1, 5, 1}, false}, {{}, {7, 5}, false},
      {{33, 31}, {33}, true}, {{0, 3}, {3}, false},      {{3, 1, 31}, {2, 1, 1, 1}, false},
  };
  std::vector<Case> cases;
  for (DType dt : {DType::f32, DType::f64})
    for (CompareOp op : kCompareOps) {
      for (const Pair& p : pairs)
        cases.push_back({std::string(op_name(op)) + " " + shape_str(p.a) + (p.transpose_a ? ".t()" : "") + " and " +
                             shape_str(p.b),
                         {p.a, p.b}, dt, Init::Normal,
                         [op, t = p.transpose_a](const std::vector<Tensor>& in, Device) {
                           return compare(op, t ? in[0].t() : in[0], in[1]);
                         },
                         0, 0});
      // Equal operands (x with itself) and NaN: ne is the only op true at NaN.
      cases.push_back({std::string(op_name(op)) + " x with x, NaN (257)", {{257}}, dt, Init::WithNaN,
                       [op](const std::vector<Tensor>& in, Device) { return compare(op, in[0], in[0]); }, 0, 0});
      for (const View& v : elementwise_views())
        cases.push_back({std::string(op_name(op)) + " x, 0.25 " + v.name, {v.shape}, dt, Init::WithNaN,
                         [op, f = v.apply](const std::vector<Tensor>& in, Device) { return compare(op, f(in[0]), 0.25); },
                         0, 0});
    }
  run_cases(cases);
}

TEST_CASE("where on cuda matches the cpu exactly: broadcasting all three, masks and raw conditions") {
  struct Triple {
    Shape cond, a, b;
  };
  const std::vector<Triple> triples = {
      {{257}, {257}, {257}},         {{31, 1}, {1, 33}, {}},      {{4, 1, 3}, {1, 5, 1}, {4, 5, 3}},
      {{}, {7, 5}, {5}},             {{0, 3}, {3}, {1}},          {{2, 1, 1, 31}, {3, 1, 31}, {1, 5, 1}},
  };
  std::vector<Case> cases;
  for (DType dt : {DType::f32, DType::f64})
    for (const Triple& t : triples) {
      const std::string shapes = shape_str(t.cond) + " " + shape_str(t.a) + " " + shape_str(t.b);
      cases.push_back({"where(cond > 0) " + shapes, {t.cond, t.a, t.b}, dt, Init::Normal,
                       [](const std::vector<Tensor>& in, Device) {
                         return where(compare(CompareOp::Gt, in[0], 0.0), in[1], in[2]);
                       },
                       0, 0});
      // A raw condition with NaN (nonzero: picks a) and a transposed operand.
      cases.push_back({"where(raw cond with NaN) " + shapes, {t.cond, t.a, t.b}, dt, Init::WithNaN,
                       [](const std::vector<Tensor>& in, Device) { return where(in[0], in[1], in[2]); }, 0, 0});
    }
  cases.push_back({"where (33, 31).t() cond", {{33, 31}, {31, 33}, {31, 1}}, DType::f32, Init::Normal,
                   [](const std::vector<Tensor>& in, Device) {
                     return where(compare(CompareOp::Le, in[0].t(), in[1]), in[1], in[2]);
                   },
                   0, 0});
  run_cases(cases);
}

// ---- [op-lists, issue 10] end ------------------------------------------------------------------

namespace {
struct MatmulConfig {
  const char* name;
  Shape a, b;
  std::function<Tensor(const Tensor&)> view_a, view_b;  // null: as created
  bool ta, tb;                                          // the transpose flags of matmul
};

std::vector<MatmulConfig> matmul_configs() {
  const auto t = [](const Tensor& x) { return x.transpose(-2, -1); };
  return {
      {"(37, 53) @ (53, 41)", {37, 53}, {53, 41}, nullptr, nullptr, false, false},
      {"(53, 37).t() @ (53, 41)", {53, 37}, {53, 41}, t, nullptr, false, false},
      {"(37, 53) @ (41, 53).t()", {37, 53}, {41, 53}, nullptr, t, false, false},
      {"flags: (53, 37)^T @ (41, 53)^T", {53, 37}, {41, 53}, nullptr, nullptr, true, true},
      {"(53) @ (53, 41)", {53}, {53, 41}, nullptr, nullptr, false, false},
      {"(37, 53) @ (53)", {37, 53}, {53}, nullptr, nullptr, false, false},
      {"(53) @ (53)", {53}, {53}, nullptr, nullptr, false, false},
      {"(1, 64) @ (64, 1)", {1, 64}, {64, 1}, nullptr, nullptr, false, false},
      {"(31, 1) @ (1, 29)", {31, 1}, {1, 29}, nullptr, nullptr, false, false},
      {"(3, 0) @ (0, 4)", {3, 0}, {0, 4}, nullptr, nullptr, false, false},
      {"batched (3, 17, 19) @ (3, 19, 23)", {3, 17, 19}, {3, 19, 23}, nullptr, nullptr, false, false},
      {"batched, b^T flag (3, 17, 19) @ (3, 23, 19)^T", {3, 17, 19}, {3, 23, 19}, nullptr, nullptr, false, true},
      {"broadcast batch (2, 1, 5, 7) @ (3, 7, 4)", {2, 1, 5, 7}, {3, 7, 4}, nullptr, nullptr, false, false},
      {"shared weight (17, 19) @ (3, 19, 23)", {17, 19}, {3, 19, 23}, nullptr, nullptr, false, false},
      {"uncollapsible batch (2, 1, 5, 7) @ (2, 3, 7, 4)", {2, 1, 5, 7}, {2, 3, 7, 4}, nullptr, nullptr, false, false},
      {"permuted batch (5, 3, 7).permute(1, 0, 2) @ (3, 7, 6)", {5, 3, 7}, {3, 7, 6},
       [](const Tensor& x) { return x.permute({1, 0, 2}); }, nullptr, false, false},
      {"strided operand (37, 106)[:, ::2] @ (53, 41)", {37, 106}, {53, 41},
       [](const Tensor& x) { return x.slice(1, 0, 106, 2); }, nullptr, false, false},
      {"(129, 257) @ (257, 65)", {129, 257}, {257, 65}, nullptr, nullptr, false, false},
  };
}

std::vector<Case> matmul_cases(bool tiled) {
  std::vector<Case> cases;
  for (DType dt : {DType::f32, DType::f64})
    for (const MatmulConfig& m : matmul_configs()) {
      auto prep = [m](const std::vector<Tensor>& in, int i) {
        const auto& view = i == 0 ? m.view_a : m.view_b;
        return view ? view(in[i]) : in[i];
      };
      Case c{std::string(tiled ? "tiled " : "") + "matmul " + m.name, {m.a, m.b}, dt, Init::Normal,
             [m, prep](const std::vector<Tensor>& in, Device) { return matmul(prep(in, 0), prep(in, 1), m.ta, m.tb); },
             rtol_of(dt, 1e-4, 1e-11), rtol_of(dt, 1e-4, 1e-11)};
      if (tiled)
        c.run_cuda = [m, prep](const std::vector<Tensor>& in, Device) {
          return tiled_matmul(prep(in, 0), prep(in, 1), m.ta, m.tb);
        };
      cases.push_back(c);
    }
  return cases;
}
}  // namespace

TEST_CASE("matmul on cuda (cuBLAS) matches the cpu: transposes, 1-D, batched, broadcast batch, strided") {
  run_cases(matmul_cases(false));
}

TEST_CASE("the tiled SGEMM (teaching kernel) matches the cpu and cuBLAS") {
#if defined(REEL_HAS_CUDA_BACKEND)
  run_cases(matmul_cases(true));
  // Against cuBLAS on the device itself, f32, a size with partial tiles on every edge.
  set_poison_allocations(true);
  Generator g(5);
  Tensor a = randn({2, 45, 70}, DType::f32, kCuda, &g), b = randn({70, 33}, DType::f32, kCuda, &g);
  check_close(tiled_matmul(a, b, false, false), matmul(a, b), 1e-5, 1e-5);
#endif
}

TEST_CASE("reductions on cuda match the cpu: sum, mean, max along each axis and in total, keepdim") {
  struct Red {
    Shape shape;
    std::vector<int64_t> axes;
    bool transpose;  // reduce x.t() (a strided input)
    Init init;
  };
  const std::vector<Red> reds = {
      {{1}, {}, false, Init::Normal},           {{257}, {}, false, Init::Normal},
      {{257}, {0}, false, Init::Normal},        {{31, 33}, {0}, false, Init::Normal},
      {{31, 33}, {1}, false, Init::Normal},     {{31, 33}, {}, false, Init::Normal},
      {{4, 5, 6}, {0}, false, Init::Normal},    {{4, 5, 6}, {1}, false, Init::Normal},
      {{4, 5, 6}, {2}, false, Init::Normal},    {{4, 5, 6}, {0, 2}, false, Init::Normal},
      {{4, 5, 6}, {1, 2}, false, Init::Normal}, {{33, 31}, {0}, true, Init::Normal},
      {{33, 31}, {1}, true, Init::Normal},      {{3, 1100}, {1}, false, Init::Normal},    // block per row
      {{3, 4099}, {-1}, false, Init::Normal},   {{100, 300}, {}, false, Init::Normal},    // split rows
      {{2000, 3}, {0}, false, Init::Normal},    {{5000, 7}, {0}, false, Init::Normal},    // columns, split
      {{2, 3, 1, 5}, {2}, false, Init::Normal}, {{31, 33}, {1}, false, Init::WithNaN},
      {{3, 1100}, {1}, false, Init::WithNaN},   {{700, 5}, {0}, false, Init::WithNaN},
  };
  std::vector<Case> cases;
  for (DType dt : {DType::f32, DType::f64})
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
          const double rtol = op == ReduceOp::Max ? 0 : rtol_of(dt, 1e-5, 1e-12);
          const double atol = rtol * std::sqrt(static_cast<double>(R));
          cases.push_back({std::string(op_name(op)) + " " + shape_str(r.shape) + (r.transpose ? ".t() " : " ") + axes +
                               ")" + (keepdim ? " keepdim" : "") + (r.init == Init::WithNaN ? " with NaN" : ""),
                           {r.shape}, dt, r.init,
                           [op, r, keepdim](const std::vector<Tensor>& in, Device) {
                             return reduce(op, r.transpose ? in[0].t() : in[0], r.axes, keepdim);
                           },
                           rtol, atol});
        }
  run_cases(cases);
}

TEST_CASE("fill, full and fill_ of a strided view on cuda match the cpu, every dtype") {
  std::vector<Case> cases;
  for (DType dt : {DType::f32, DType::f64, DType::i32, DType::i64})
    for (const Shape& s : std::vector<Shape>{{1}, {257}, {31, 33}, {}}) {
      cases.push_back({"full " + shape_str(s), {}, dt, Init::Normal,
                       [s, dt](const std::vector<Tensor>&, Device d) { return full(s, -3.25, dt, d); }, 0, 0});
    }
  for (DType dt : {DType::f32, DType::f64, DType::i32, DType::i64})
    cases.push_back({"fill_ of (9, 31).t()[::2]", {{9, 31}}, dt, Init::Normal,
                     [](const std::vector<Tensor>& in, Device) {
                       Tensor x = in[0].clone();
                       x.t().slice(0, 0, 31, 2).fill_(7.0);
                       return x;
                     },
                     0, 0});
  run_cases(cases);
}

TEST_CASE("strided copies on cuda match the cpu: contiguous() of views, copy_ into views, every dtype") {
  struct Copy {
    const char* name;
    Shape shape;
    std::function<Tensor(const Tensor&)> run;
  };
  const std::vector<Copy> copies = {
      {"(4, 5, 6).permute(2, 0, 1).contiguous()", {4, 5, 6}, [](const Tensor& x) { return x.permute({2, 0, 1}).contiguous(); }},
      {"(33, 31).t().contiguous()", {33, 31}, [](const Tensor& x) { return x.t().contiguous(); }},
      {"(257)[3::5].contiguous()", {257}, [](const Tensor& x) { return x.slice(0, 3, 257, 5).contiguous(); }},
      {"(1, 31).expand(7, 31).contiguous()", {1, 31}, [](const Tensor& x) { return x.expand({7, 31}).contiguous(); }},
      {"(6, 7, 8).select(1, 3).contiguous()", {6, 7, 8}, [](const Tensor& x) { return x.select(1, 3).contiguous(); }},
      {"9-d (2, ..., 2) reversed permute .contiguous()", Shape(9, 2),
       [](const Tensor& x) { return x.permute({8, 7, 6, 5, 4, 3, 2, 1, 0}).contiguous(); }},
      {"10-d (3, 2, ..., 2) odd permute .contiguous()", {3, 2, 2, 2, 2, 2, 2, 2, 2, 2},
       [](const Tensor& x) { return x.permute({9, 0, 8, 1, 7, 2, 6, 3, 5, 4}).contiguous(); }},
      {"copy_ into (31, 33).t()", {33, 31},
       [](const Tensor& x) {
         Tensor y = zeros({31, 33}, x.dtype(), x.device());
         y.t().copy_(x);
         return y;
       }},
      {"copy_ from the cpu into a cuda view", {5, 31},
       [](const Tensor& x) {
         Tensor y = zeros({31, 10}, x.dtype(), x.device());
         y.slice(1, 0, 10, 2).t().copy_(x.to(Device::cpu()));
         return y;
       }},
  };
  std::vector<Case> cases;
  for (DType dt : {DType::f32, DType::f64, DType::i32, DType::i64})
    for (const Copy& c : copies)
      cases.push_back({c.name, {c.shape}, dt, Init::Normal,
                       [f = c.run](const std::vector<Tensor>& in, Device) { return f(in[0]); }, 0, 0});
  run_cases(cases);
}

TEST_CASE("dtype casts on cuda match the cpu: all 16 pairs, contiguous and strided") {
  const DType all[] = {DType::f32, DType::f64, DType::i32, DType::i64};
  std::vector<Case> cases;
  for (DType from : all)
    for (DType to : all)
      for (bool strided : {false, true})
        cases.push_back({std::string(dtype_name(from)) + " -> " + dtype_name(to) + (strided ? " of (33, 31).t()" : " of (257)"),
                         {strided ? Shape{33, 31} : Shape{257}}, from, Init::Normal,
                         [to, strided](const std::vector<Tensor>& in, Device) { return (strided ? in[0].t() : in[0]).to(to); },
                         0, 0});
  // Fractional values: float -> int truncates toward zero on both devices.
  Generator g(3);
  Tensor x = binary(BinaryOp::Mul, randn({257}, DType::f64, Device::cpu(), &g), 7.3);
  for (DType to : {DType::i32, DType::i64})
    CHECK(values(x.to(kCuda).to(to)) == values(x.to(to)));
  run_cases(cases);
}

TEST_CASE("rand and randn on cuda equal the cpu's: uniform bit for bit, normal to rounding") {
  std::vector<Case> cases;
  for (DType dt : {DType::f32, DType::f64})
    for (const Shape& s : std::vector<Shape>{{1}, {3}, {5}, {257}, {31, 33}}) {
      cases.push_back({"rand " + shape_str(s), {}, dt, Init::Normal,
                       [s, dt](const std::vector<Tensor>&, Device d) {
                         Generator g(42);
                         g.next_offset();  // a stream id other than 0
                         return rand(s, dt, d, &g);
                       },
                       0, 0});
      cases.push_back({"randn " + shape_str(s), {}, dt, Init::Normal,
                       [s, dt](const std::vector<Tensor>&, Device d) {
                         Generator g(43);
                         return randn(s, dt, d, &g);
                       },
                       rtol_of(dt, 1e-6, 1e-13), rtol_of(dt, 1e-6, 1e-13)});
    }
  run_cases(cases);
}

TEST_CASE("dropout masks on cuda equal the cpu's bit for bit") {
  std::vector<Case> cases;
  for (DType dt : {DType::f32, DType::f64})
    for (double p : {0.0, 0.1, 0.5, 1.0})
      for (const Shape& s : std::vector<Shape>{{1}, {257}, {31, 33}})
        cases.push_back({"dropout_mask p=" + std::to_string(p) + " " + shape_str(s), {}, dt, Init::Normal,
                         [s, dt, p](const std::vector<Tensor>&, Device d) { return dropout_mask(s, dt, d, p, 1234, 7); },
                         0, 0});
  run_cases(cases);
}

TEST_CASE("poisoned allocations: a fresh cuda tensor reads NaN (floats) or -1 (integers)") {
  set_poison_allocations(true);
  for (const double v : values(empty({37}, DType::f32, kCuda))) CHECK(std::isnan(v));
  for (const double v : values(empty({37}, DType::f64, kCuda))) CHECK(std::isnan(v));
  for (const double v : values(empty({37}, DType::i32, kCuda))) CHECK(v == -1);
  for (const double v : values(empty({37}, DType::i64, kCuda))) CHECK(v == -1);
}

TEST_CASE("transfers between cpu and cuda are exact; cuda memory is counted by category") {
  set_poison_allocations(true);
  Generator g(11);
  Tensor x = randn({31, 33}, DType::f64, Device::cpu(), &g);
  Tensor y = x.to(kCuda);
  CHECK(y.device() == kCuda);
  CHECK(y.to(Device::cpu()).to_vector<double>() == x.to_vector<double>());
  CHECK(y.select(0, 4).select(0, 7).item() == x.select(0, 4).select(0, 7).item());
  CHECK(y.clone().to_vector<double>() == x.to_vector<double>());
  const MemoryStats before = memory_stats(kCuda);
  {
    MemoryCategory scope(Category::Parameter);
    Tensor p = empty({1000}, DType::f32, kCuda);
    CHECK(memory_stats(kCuda)[Category::Parameter].current_bytes ==
          before[Category::Parameter].current_bytes + 4000);
  }
  CHECK(memory_stats(kCuda)[Category::Parameter].current_bytes == before[Category::Parameter].current_bytes);
}

TEST_CASE("a cpu tensor with a cuda tensor raises reel::Error naming both devices") {
  Tensor a = ones({3, 4});
  Tensor b = ones({3, 4}, DType::f32, kCuda);
  CHECK_REEL_ERROR(binary(BinaryOp::Add, a, b), "expected all tensors on one device");
  CHECK_REEL_ERROR(binary(BinaryOp::Mul, b, a), "cuda:0");
  CHECK_REEL_ERROR(matmul(a, b.t()), "expected all tensors on one device");
  // [op-lists] compare, where and unary_backward check devices too
  CHECK_REEL_ERROR(compare(CompareOp::Gt, a, b), "gt: expected all tensors on one device, got (3, 4) on cpu (3, 4) on cuda:0");
  CHECK_REEL_ERROR(where(b, a, b), "where: expected all tensors on one device");
  CHECK_REEL_ERROR(unary_backward(UnaryOp::Gelu, b, a), "gelu_backward: expected all tensors on one device");
  CHECK_REEL_ERROR(empty({2}, DType::f32, Device::cuda(7)), "cuda:7 is not available");
}

TEST_CASE("a failed launch or runtime call raises reel::Error naming the kernel or call and CUDA's error") {
#if defined(REEL_HAS_CUDA_BACKEND)
  CHECK_NOTHROW(reel::testing::launch_noop_kernel(256));
  // > 1024 threads per block: CUDA 13 says cudaErrorInvalidValue (older: ...InvalidConfiguration).
  CHECK_REEL_ERROR(reel::testing::launch_noop_kernel(4096), "cuda kernel noop_kernel");
  CHECK_REEL_ERROR(reel::testing::launch_noop_kernel(4096), "launch failed: cudaError");
  CHECK_REEL_ERROR(reel::testing::checked_set_device(99), "cudaSetDevice(index)");
  CHECK_REEL_ERROR(reel::testing::checked_set_device(99), "cudaErrorInvalidDevice");
  CHECK_NOTHROW(reel::testing::launch_noop_kernel(32));  // the errors were cleared
#endif
}

namespace {
// The entry point's shape logic (kernels/matmul.cpp) in front of the tiled kernel.
Tensor tiled_matmul(const Tensor& a_in, const Tensor& b_in, bool ta, bool tb) {
#if defined(REEL_HAS_CUDA_BACKEND)
  Tensor a = a_in.dim() == 1 ? a_in.unsqueeze(0) : a_in;
  Tensor b = b_in.dim() == 1 ? b_in.unsqueeze(1) : b_in;
  if (ta) a = a.transpose(-2, -1);
  if (tb) b = b.transpose(-2, -1);
  const int64_t M = a.size(-2), K = a.size(-1), N = b.size(-1);
  Shape batch = broadcast_shapes(Shape(a.shape().begin(), a.shape().end() - 2),
                                 Shape(b.shape().begin(), b.shape().end() - 2), "tiled_matmul");
  Shape sa = batch, sb = batch, so = batch;
  sa.insert(sa.end(), {M, K});
  sb.insert(sb.end(), {K, N});
  so.insert(so.end(), {M, N});
  Tensor out = empty(so, a.dtype(), a.device());
  kernels::cuda::matmul_tiled(a.expand(sa), b.expand(sb), out);
  if (a_in.dim() == 1) out = out.squeeze(-2);
  if (b_in.dim() == 1) out = out.squeeze(-1);
  return out;
#else
  (void)ta;
  (void)tb;
  return matmul(a_in, b_in);
#endif
}
}  // namespace
