// The op kinds of the elementwise and reduction families, and their scalar math, shared by the
// CPU loops and the CUDA kernels (host/device functions) so both compute the same formula.
#pragma once
#include <cmath>

#include "core/philox.h"  // REEL_HOST_DEVICE

namespace reel::kernels {

enum class UnaryOp { Neg, Exp, Log, Tanh, Relu, Gelu, Sigmoid, Silu, Sqrt, Abs, Square, Reciprocal };
enum class BinaryOp { Add, Sub, Mul, Div, Maximum, Minimum };
enum class ReduceOp { Sum, Mean, Max };

const char* op_name(UnaryOp op);
const char* op_name(BinaryOp op);
const char* op_name(ReduceOp op);

template <UnaryOp op, typename T>
REEL_HOST_DEVICE inline T unary_fn(T x) {
  using std::exp; using std::log; using std::tanh; using std::sqrt; using std::fabs;
  if constexpr (op == UnaryOp::Neg) return -x;
  else if constexpr (op == UnaryOp::Exp) return exp(x);
  else if constexpr (op == UnaryOp::Log) return log(x);
  else if constexpr (op == UnaryOp::Tanh) return tanh(x);
  else if constexpr (op == UnaryOp::Relu) return x > T(0) ? x : T(0);
  else if constexpr (op == UnaryOp::Gelu) {  // tanh approximation, as GPT-2
    const T k = T(0.7978845608028654);       // sqrt(2 / pi)
    return T(0.5) * x * (T(1) + tanh(k * (x + T(0.044715) * x * x * x)));
  } else if constexpr (op == UnaryOp::Sigmoid) return T(1) / (T(1) + exp(-x));
  else if constexpr (op == UnaryOp::Silu) return x / (T(1) + exp(-x));
  else if constexpr (op == UnaryOp::Sqrt) return sqrt(x);
  else if constexpr (op == UnaryOp::Abs) return fabs(x);
  else if constexpr (op == UnaryOp::Square) return x * x;
  else return T(1) / x;  // Reciprocal
}

template <BinaryOp op, typename T>
REEL_HOST_DEVICE inline T binary_fn(T a, T b) {
  if constexpr (op == BinaryOp::Add) return a + b;
  else if constexpr (op == BinaryOp::Sub) return a - b;
  else if constexpr (op == BinaryOp::Mul) return a * b;
  else if constexpr (op == BinaryOp::Div) return a / b;
  // NaN propagates, as in torch.maximum / torch.minimum.
  else if constexpr (op == BinaryOp::Maximum) return (a != a || a > b) ? a : b;
  else return (a != a || a < b) ? a : b;  // Minimum
}

}  // namespace reel::kernels
