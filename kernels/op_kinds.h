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

// The switch from a runtime op to FN<op, scalar_t>(args...), for a backend's entry points (inside
// REEL_DISPATCH_FLOATING, which defines scalar_t): one list of cases for every backend.
#define REEL_OP_CASE(KIND, OP, FN, ...) \
  case ::reel::kernels::KIND::OP: FN<::reel::kernels::KIND::OP, scalar_t>(__VA_ARGS__); break;

#define REEL_UNARY_SWITCH(op, FN, ...)                                                                 \
  switch (op) {                                                                                        \
    REEL_OP_CASE(UnaryOp, Neg, FN, __VA_ARGS__) REEL_OP_CASE(UnaryOp, Exp, FN, __VA_ARGS__)            \
    REEL_OP_CASE(UnaryOp, Log, FN, __VA_ARGS__) REEL_OP_CASE(UnaryOp, Tanh, FN, __VA_ARGS__)           \
    REEL_OP_CASE(UnaryOp, Relu, FN, __VA_ARGS__) REEL_OP_CASE(UnaryOp, Gelu, FN, __VA_ARGS__)          \
    REEL_OP_CASE(UnaryOp, Sigmoid, FN, __VA_ARGS__) REEL_OP_CASE(UnaryOp, Silu, FN, __VA_ARGS__)       \
    REEL_OP_CASE(UnaryOp, Sqrt, FN, __VA_ARGS__) REEL_OP_CASE(UnaryOp, Abs, FN, __VA_ARGS__)           \
    REEL_OP_CASE(UnaryOp, Square, FN, __VA_ARGS__) REEL_OP_CASE(UnaryOp, Reciprocal, FN, __VA_ARGS__)  \
  }

#define REEL_BINARY_SWITCH(op, FN, ...)                                                                \
  switch (op) {                                                                                        \
    REEL_OP_CASE(BinaryOp, Add, FN, __VA_ARGS__) REEL_OP_CASE(BinaryOp, Sub, FN, __VA_ARGS__)          \
    REEL_OP_CASE(BinaryOp, Mul, FN, __VA_ARGS__) REEL_OP_CASE(BinaryOp, Div, FN, __VA_ARGS__)          \
    REEL_OP_CASE(BinaryOp, Maximum, FN, __VA_ARGS__) REEL_OP_CASE(BinaryOp, Minimum, FN, __VA_ARGS__)  \
  }

}  // namespace reel::kernels
