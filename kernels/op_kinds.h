// The op kinds of the elementwise and reduction families, each listed ONCE (an X-macro per kind),
// and their scalar math, shared by the CPU loops and the CUDA kernels (host/device functions) so
// both compute the same formula. From each list come: the enum, op_name(), the array of all ops
// (kUnaryOps, ... for tests and benchmarks), the switch a backend turns a runtime op into a
// template argument with (REEL_UNARY_SWITCH, ...), and, in autograd/ops/elementwise.cpp, the
// differentiable user functions (reel::gelu, reel::gt, ...).
//
// How to add a unary op, say softplus (three files):
//   1. here: one line in REEL_UNARY_OPS below: X(Softplus, softplus, Input, Real) (what backward
//      needs: the input x or the output y, or Nothing when f' is constant; where its tests draw
//      inputs: Real, Positive (x > 0: log, sqrt, 1/x) or Kink (kept away from a kink at 0));
//      then its forward in unary_fn and its backward dx = dy * f'(saved) in unary_backward_fn
//      (each chain of `if constexpr` ends in a static_assert: an op without its math does not
//      compile). Backends call them with T = the dispatch's acc_t (loads converted from the
//      element type, results stored back), so the math is written once for every dtype; the CPU's
//      contiguous loops call them with T = kernels/cpu/vec.h's Vec<float> (a SIMD register), so
//      write them with what both offer: + - * /, unary -, x > y and x < y inside select_fn (no
//      ?: on T: a register has no single truth value), T(constant), and the functions imported
//      by the `using std::` line (exp, log, log1p, tanh, sqrt, fabs; a new one needs its Vec
//      overload in vec.h).
//      Every backend, kernels::unary and kernels::unary_backward, and the autograd op pick it up.
//   2. autograd/functions.h: the declaration `Tensor softplus(const Tensor& x);` (the definition
//      is generated from the list; the build fails until the declaration exists).
//   3. tests/op_table/elementwise.cpp: its f64 reference in unary_refs() (a test fails until it
//      is there). The op table's kernel rows (forward and fused backward), its tape rows (finite
//      differences) and the unary_backward value test iterate the list by themselves.
#pragma once
#include <array>
#include <cmath>
#include <cstddef>
#include <iterator>
#include <type_traits>
#include <utility>

#include "core/dtype.h"   // dependent_false_v
#include "core/philox.h"  // REEL_HOST_DEVICE

namespace reel::kernels {

// ---- the lists --------------------------------------------------------------------------------

// What the backward of a unary op reads besides dy (kernels::unary_backward's `saved`): the
// input x, the output y, or nothing (f' constant). Chosen per op as what is cheapest and exact:
// y where f' is a cheap function of y (exp, tanh, sigmoid, relu, sqrt, 1/x), x where y does not
// determine x (gelu, silu, abs, square) or f' of x is cheaper (log).
enum class UnarySaves { Nothing, Input, Output };
// Where tests draw the inputs of a unary op: anywhere, x > 0 (log, sqrt; 1/x away from its pole)
// or away from a kink at 0 where finite differences would straddle it (relu, abs).
enum class UnaryDomain { Real, Positive, Kink };

// X(Name, name, Saves, Domain). `name` is op_name() and the user function reel::name.
#define REEL_UNARY_OPS(X)                  \
  X(Neg, neg, Nothing, Real)               \
  X(Exp, exp, Output, Real)                \
  X(Log, log, Input, Positive)             \
  X(Tanh, tanh, Output, Real)              \
  X(Relu, relu, Output, Kink)              \
  X(Gelu, gelu, Input, Real)               \
  X(Sigmoid, sigmoid, Output, Real)        \
  X(Silu, silu, Input, Real)               \
  X(Sqrt, sqrt, Output, Positive)          \
  X(Abs, abs, Input, Kink)                 \
  X(Square, square, Input, Real)           \
  X(Reciprocal, reciprocal, Output, Positive) \
  X(Softplus, softplus, Input, Real)

// X(Name, name). Autograd (add, sub, mul, div) lives in autograd/ops/elementwise.cpp, one rule each.
#define REEL_BINARY_OPS(X) \
  X(Add, add)              \
  X(Sub, sub)              \
  X(Mul, mul)              \
  X(Div, div)              \
  X(Maximum, maximum)      \
  X(Minimum, minimum)

// X(Name, name). A comparison gives 1 or 0 in the inputs' dtype; `name` is the user function.
#define REEL_COMPARE_OPS(X) \
  X(Eq, eq)                 \
  X(Ne, ne)                 \
  X(Lt, lt)                 \
  X(Le, le)                 \
  X(Gt, gt)                 \
  X(Ge, ge)

#define REEL_REDUCE_OPS(X) \
  X(Sum, sum)              \
  X(Mean, mean)            \
  X(Max, max)

// ---- what the lists generate --------------------------------------------------------------------
// Enumerators are numbered 0, 1, ... in list order, so a list's attributes are arrays indexed by
// the op.

#define REEL_OP_ENUMERATOR(Name, ...) Name,
#define REEL_OP_STRING(Name, name, ...) #name,
#define REEL_UNARY_SAVES_ENTRY(Name, name, saves, domain) UnarySaves::saves,
#define REEL_UNARY_DOMAIN_ENTRY(Name, name, saves, domain) UnaryDomain::domain,

enum class UnaryOp { REEL_UNARY_OPS(REEL_OP_ENUMERATOR) };
enum class BinaryOp { REEL_BINARY_OPS(REEL_OP_ENUMERATOR) };
enum class CompareOp { REEL_COMPARE_OPS(REEL_OP_ENUMERATOR) };
enum class ReduceOp { REEL_REDUCE_OPS(REEL_OP_ENUMERATOR) };

inline constexpr const char* kUnaryOpNames[] = {REEL_UNARY_OPS(REEL_OP_STRING)};
inline constexpr const char* kBinaryOpNames[] = {REEL_BINARY_OPS(REEL_OP_STRING)};
inline constexpr const char* kCompareOpNames[] = {REEL_COMPARE_OPS(REEL_OP_STRING)};
inline constexpr const char* kReduceOpNames[] = {REEL_REDUCE_OPS(REEL_OP_STRING)};
inline constexpr UnarySaves kUnarySaves[] = {REEL_UNARY_OPS(REEL_UNARY_SAVES_ENTRY)};
inline constexpr UnaryDomain kUnaryDomains[] = {REEL_UNARY_OPS(REEL_UNARY_DOMAIN_ENTRY)};

#undef REEL_OP_ENUMERATOR
#undef REEL_OP_STRING
#undef REEL_UNARY_SAVES_ENTRY
#undef REEL_UNARY_DOMAIN_ENTRY

constexpr size_t op_count(UnaryOp) { return std::size(kUnaryOpNames); }
constexpr size_t op_count(BinaryOp) { return std::size(kBinaryOpNames); }
constexpr size_t op_count(CompareOp) { return std::size(kCompareOpNames); }
constexpr size_t op_count(ReduceOp) { return std::size(kReduceOpNames); }

// The name in the list (also the user function's and the tape dump's).
inline const char* op_name(UnaryOp op) { return kUnaryOpNames[static_cast<size_t>(op)]; }
inline const char* op_name(BinaryOp op) { return kBinaryOpNames[static_cast<size_t>(op)]; }
inline const char* op_name(CompareOp op) { return kCompareOpNames[static_cast<size_t>(op)]; }
inline const char* op_name(ReduceOp op) { return kReduceOpNames[static_cast<size_t>(op)]; }
constexpr UnarySaves unary_saves(UnaryOp op) { return kUnarySaves[static_cast<size_t>(op)]; }
constexpr UnaryDomain unary_domain(UnaryOp op) { return kUnaryDomains[static_cast<size_t>(op)]; }

// Every op of a kind, in list order (for tests and benchmarks): for (UnaryOp op : kUnaryOps).
template <typename Kind>
constexpr std::array<Kind, op_count(Kind{})> all_ops() {
  std::array<Kind, op_count(Kind{})> ops{};
  for (size_t i = 0; i < ops.size(); ++i) ops[i] = static_cast<Kind>(i);
  return ops;
}
inline constexpr auto kUnaryOps = all_ops<UnaryOp>();
inline constexpr auto kBinaryOps = all_ops<BinaryOp>();
inline constexpr auto kCompareOps = all_ops<CompareOp>();

// ---- scalar math --------------------------------------------------------------------------------
// Each formula is a template on T: a float or double (every backend's per-element code) or
// kernels/cpu/vec.h's Vec (the CPU's contiguous loops, a SIMD register at a time), which finds its
// own exp, tanh, select_fn, ... by argument-dependent lookup.

// c ? a : b, written as a call so that a formula also runs on a SIMD register (vec.h's overload
// takes a lane mask).
template <typename T>
REEL_HOST_DEVICE inline T select_fn(bool c, T a, T b) {
  return c ? a : b;
}

namespace gelu_constants {
constexpr double kSqrt2OverPi = 0.7978845608028654;  // k = sqrt(2 / pi)
constexpr double kCubic = 0.044715;                  // c
}  // namespace gelu_constants

template <UnaryOp op, typename T>
REEL_HOST_DEVICE inline T unary_fn(T x) {
  using std::exp; using std::log; using std::tanh; using std::sqrt; using std::fabs;
  if constexpr (op == UnaryOp::Neg) return -x;
  else if constexpr (op == UnaryOp::Exp) return exp(x);
  else if constexpr (op == UnaryOp::Log) return log(x);
  else if constexpr (op == UnaryOp::Tanh) return tanh(x);
  else if constexpr (op == UnaryOp::Relu) return select_fn(x > T(0), x, T(0));  // NaN -> 0
  else if constexpr (op == UnaryOp::Gelu) {  // tanh approximation, as GPT-2
    const T k = T(gelu_constants::kSqrt2OverPi);
    return T(0.5) * x * (T(1) + tanh(k * (x + T(gelu_constants::kCubic) * x * x * x)));
  } else if constexpr (op == UnaryOp::Sigmoid) return T(1) / (T(1) + exp(-x));
  else if constexpr (op == UnaryOp::Silu) return x / (T(1) + exp(-x));
  else if constexpr (op == UnaryOp::Sqrt) return sqrt(x);
  else if constexpr (op == UnaryOp::Abs) return fabs(x);
  else if constexpr (op == UnaryOp::Square) return x * x;
  else if constexpr (op == UnaryOp::Reciprocal) return T(1) / x;
  else if constexpr (op == UnaryOp::Softplus) {
    // log(1 + e^x) as max(x, 0) + log1p(e^-|x|), which neither overflows nor loses small x
    using std::log1p;
    return select_fn(x > T(0), x, T(0)) + log1p(exp(-fabs(x)));
  } else static_assert(dependent_false_v<op>, "unary_fn: a unary op without its forward math");
}

template <CompareOp op, typename T>
REEL_HOST_DEVICE inline bool compare_fn(T a, T b) {  // IEEE: NaN compares false, except ne
  if constexpr (op == CompareOp::Eq) return a == b;
  else if constexpr (op == CompareOp::Ne) return a != b;
  else if constexpr (op == CompareOp::Lt) return a < b;
  else if constexpr (op == CompareOp::Le) return a <= b;
  else if constexpr (op == CompareOp::Gt) return a > b;
  else if constexpr (op == CompareOp::Ge) return a >= b;
  else static_assert(dependent_false_v<op>, "compare_fn: a comparison without its math");
}

// where: cond nonzero (NaN included) picks a.
template <typename T>
REEL_HOST_DEVICE inline T where_fn(T cond, T a, T b) {
  return cond != T(0) ? a : b;
}

// dx = dy * f'(s), s being what the list says the op saves (x or y; dy itself for Nothing). The
// factors are grouped as the composed backward rules of autograd/ops once were (f' first, then
// times dy), so the fused pass rounds like them.
template <UnaryOp op, typename T>
REEL_HOST_DEVICE inline T unary_backward_fn(T dy, T s) {
  using std::exp; using std::tanh;
  if constexpr (op == UnaryOp::Neg) return -dy;
  else if constexpr (op == UnaryOp::Exp) return dy * s;                      // s = y = e^x
  else if constexpr (op == UnaryOp::Log) return dy / s;                      // s = x
  else if constexpr (op == UnaryOp::Tanh) return dy * (T(1) - s * s);        // s = y
  else if constexpr (op == UnaryOp::Relu) {                                  // s = y: where(y > 0, dy, 0)
    return select_fn(s > T(0), dy, T(0));
  } else if constexpr (op == UnaryOp::Gelu) {  // s = x; t = tanh(k (x + c x^3))
    // f' = 0.5 (1 + t) + 0.5 x (1 - t^2) k (1 + 3 c x^2)
    const T k = T(gelu_constants::kSqrt2OverPi);
    const T x2 = s * s;
    const T t = tanh((s + x2 * s * T(gelu_constants::kCubic)) * k);
    const T dinner = x2 * T(3 * gelu_constants::kCubic * gelu_constants::kSqrt2OverPi) + k;
    return dy * ((t + T(1)) * T(0.5) + s * (T(1) - t * t) * dinner * T(0.5));
  } else if constexpr (op == UnaryOp::Sigmoid) return dy * (s * (T(1) - s));  // s = y
  else if constexpr (op == UnaryOp::Silu) {  // s = x; f' = sg (1 + x (1 - sg)), sg = sigmoid(x)
    const T sg = T(1) / (T(1) + exp(-s));
    return dy * (sg * (s * (T(1) - sg) + T(1)));
  } else if constexpr (op == UnaryOp::Sqrt) return dy / (T(2) * s);          // s = y
  else if constexpr (op == UnaryOp::Abs) {  // s = x; sign(x), 0 at 0, NaN stays NaN
    return dy * select_fn(s > T(0), T(1), select_fn(s < T(0), T(-1), s * T(0)));
  } else if constexpr (op == UnaryOp::Square) return dy * (T(2) * s);       // s = x
  else if constexpr (op == UnaryOp::Reciprocal) return -(dy * (s * s));     // s = y
  else if constexpr (op == UnaryOp::Softplus) return dy * (T(1) / (T(1) + exp(-s)));  // s = x: sigmoid(x)
  else static_assert(dependent_false_v<op>, "unary_backward_fn: a unary op without its backward math");
}

template <BinaryOp op, typename T>
REEL_HOST_DEVICE inline T binary_fn(T a, T b) {
  if constexpr (op == BinaryOp::Add) return a + b;
  else if constexpr (op == BinaryOp::Sub) return a - b;
  else if constexpr (op == BinaryOp::Mul) return a * b;
  else if constexpr (op == BinaryOp::Div) return a / b;
  // NaN propagates, as in torch.maximum / torch.minimum.
  else if constexpr (op == BinaryOp::Maximum) return (a != a || a > b) ? a : b;
  else if constexpr (op == BinaryOp::Minimum) return (a != a || a < b) ? a : b;
  else static_assert(dependent_false_v<op>, "binary_fn: a binary op without its math");
}

// ---- runtime op -> template argument -------------------------------------------------------------

// Calls f(std::integral_constant<Kind, op>{}) for the runtime `op`, so a backend instantiates its
// templated loop once per op of the list without naming the ops (decltype(k)::value is the op).
template <typename Kind, typename F, size_t... I>
void visit_op(Kind op, F& f, std::index_sequence<I...>) {
  (void)((static_cast<size_t>(op) == I && (f(std::integral_constant<Kind, static_cast<Kind>(I)>{}), true)) || ...);
}
template <typename Kind, typename F>
void visit_op(Kind op, F&& f) {
  visit_op(op, f, std::make_index_sequence<op_count(Kind{})>{});
}

// FN<op, scalar_t, acc_t>(args...) for a runtime op, in a backend's entry points (inside
// REEL_DISPATCH_FLOATING, which defines scalar_t and acc_t): one list of cases for every backend.
// Unary and binary math runs in acc_t; a comparison is exact in T and gets FN<op, scalar_t>.
#define REEL_OP_SWITCH_ACC(op, FN, ...) \
  ::reel::kernels::visit_op(op, [&](auto op_k_) { FN<decltype(op_k_)::value, scalar_t, acc_t>(__VA_ARGS__); })
#define REEL_OP_SWITCH(op, FN, ...) \
  ::reel::kernels::visit_op(op, [&](auto op_k_) { FN<decltype(op_k_)::value, scalar_t>(__VA_ARGS__); })
#define REEL_UNARY_SWITCH(op, FN, ...) REEL_OP_SWITCH_ACC(op, FN, __VA_ARGS__)
#define REEL_BINARY_SWITCH(op, FN, ...) REEL_OP_SWITCH_ACC(op, FN, __VA_ARGS__)
#define REEL_COMPARE_SWITCH(op, FN, ...) REEL_OP_SWITCH(op, FN, __VA_ARGS__)

}  // namespace reel::kernels
