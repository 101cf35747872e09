// Entry points of the elementwise family (kernels/elementwise.h): validation, broadcasting, output
// allocation, then the backend kernel.
#include "kernels/elementwise.h"

#include <algorithm>

#include "kernels/entry_point.h"

namespace reel::kernels {

const char* op_name(UnaryOp op) {
  switch (op) {
    case UnaryOp::Neg: return "neg";
    case UnaryOp::Exp: return "exp";
    case UnaryOp::Log: return "log";
    case UnaryOp::Tanh: return "tanh";
    case UnaryOp::Relu: return "relu";
    case UnaryOp::Gelu: return "gelu";
    case UnaryOp::Sigmoid: return "sigmoid";
    case UnaryOp::Silu: return "silu";
    case UnaryOp::Sqrt: return "sqrt";
    case UnaryOp::Abs: return "abs";
    case UnaryOp::Square: return "square";
    case UnaryOp::Reciprocal: return "reciprocal";
  }
  return "?";
}

const char* op_name(BinaryOp op) {
  switch (op) {
    case BinaryOp::Add: return "add";
    case BinaryOp::Sub: return "sub";
    case BinaryOp::Mul: return "mul";
    case BinaryOp::Div: return "div";
    case BinaryOp::Maximum: return "maximum";
    case BinaryOp::Minimum: return "minimum";
  }
  return "?";
}

const char* op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum: return "sum";
    case ReduceOp::Mean: return "mean";
    case ReduceOp::Max: return "max";
  }
  return "?";
}

Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op) {
  const size_t r = std::max(a.size(), b.size());
  Shape out(r);
  for (size_t i = 0; i < r; ++i) {
    const int64_t da = i < r - a.size() ? 1 : a[i - (r - a.size())];
    const int64_t db = i < r - b.size() ? 1 : b[i - (r - b.size())];
    REEL_CHECK(da == db || da == 1 || db == 1, op, ": shapes ", a, " and ", b,
               " cannot be broadcast: dim ", i, " has sizes ", da, " and ", db);
    out[i] = da == 1 ? db : da;
  }
  return out;
}

Tensor unary(UnaryOp op, const Tensor& x) {
  check_same_floating_dtype(op_name(op), {&x});
  Tensor out = empty(x.shape(), x.dtype(), x.device());
  if (out.numel() > 0) REEL_DEVICE_DISPATCH(x.device(), unary, op, x, out);
  return out;
}

Tensor binary(BinaryOp op, const Tensor& a, const Tensor& b) {
  check_same_device(op_name(op), {&a, &b});
  check_same_floating_dtype(op_name(op), {&a, &b});
  const Shape shape = broadcast_shapes(a.shape(), b.shape(), op_name(op));
  Tensor out = empty(shape, a.dtype(), a.device());
  if (out.numel() > 0)
    REEL_DEVICE_DISPATCH(a.device(), binary, op, untracked::expand(a, shape), untracked::expand(b, shape), out);
  return out;
}

Tensor binary(BinaryOp op, const Tensor& a, double b) {
  check_same_floating_dtype(op_name(op), {&a});
  Tensor out = empty(a.shape(), a.dtype(), a.device());
  if (out.numel() > 0) REEL_DEVICE_DISPATCH(a.device(), binary_scalar, op, a, b, false, out);
  return out;
}

Tensor binary(BinaryOp op, double a, const Tensor& b) {
  check_same_floating_dtype(op_name(op), {&b});
  Tensor out = empty(b.shape(), b.dtype(), b.device());
  if (out.numel() > 0) REEL_DEVICE_DISPATCH(b.device(), binary_scalar, op, b, a, true, out);
  return out;
}

}  // namespace reel::kernels
