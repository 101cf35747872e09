// Entry points of the elementwise family (kernels/elementwise.h): validation, broadcasting, output allocation. The op
// lists and their scalar math are kernels/op_kinds.h.
#include "kernels/elementwise.h"

#include <algorithm>
#include <string>

#include "kernels/dispatch.h"
#include "kernels/entry_point.h"

namespace reel::kernels {

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

namespace {

// Checks an op on x alone (a floating dtype) and allocates its output, shaped like x.
Tensor output_like(const char* op, const Tensor& x) {
  check_same_floating_dtype(op, {&x});
  return empty(x.shape(), x.dtype(), x.device());
}

// Checks a broadcasting op on a and b (one device, one floating dtype, shapes that broadcast) and
// allocates its output, of the broadcast shape.
Tensor broadcast_output(const char* op, const Tensor& a, const Tensor& b) {
  check_same_device(op, {&a, &b});
  check_same_floating_dtype(op, {&a, &b});
  return empty(broadcast_shapes(a.shape(), b.shape(), op), a.dtype(), a.device());
}

}  // namespace

Tensor unary(UnaryOp op, const Tensor& x) {
  Tensor out = output_like(op_name(op), x);
  if (out.numel() > 0) REEL_DEVICE_DISPATCH(x.device(), unary, kernel_cost({&x}, {&out}, out.numel(), op_name(op)), op, x, out);
  return out;
}

Tensor binary(BinaryOp op, const Tensor& a, const Tensor& b) {
  Tensor out = broadcast_output(op_name(op), a, b);
  if (out.numel() > 0)
    REEL_DEVICE_DISPATCH(a.device(), binary, kernel_cost({&a, &b}, {&out}, out.numel(), op_name(op)), op,
                         untracked::expand(a, out.shape()), untracked::expand(b, out.shape()), out);
  return out;
}

void binary_(BinaryOp op, const Tensor& a, const Tensor& b) {
  const std::string name = std::string(op_name(op)) + "_";
  REEL_CHECK(a.defined() && b.defined(), name, ": undefined tensor");
  check_same_device(name.c_str(), {&a, &b});
  check_same_floating_dtype(name.c_str(), {&a, &b});
  REEL_CHECK(a.is_contiguous(), name, ": the tensor written in place, ", a.shape(), " with strides ", a.strides(),
             ", is not contiguous");
  REEL_CHECK(broadcast_shapes(a.shape(), b.shape(), name.c_str()) == a.shape(), name, ": ", b.shape(),
             " does not broadcast to ", a.shape(), ", the shape written in place");
  // Element i of the output reads element i of a only, so a may be the output; another view of its
  // storage would be read after parts of it were overwritten.
  const Tensor rhs = b.storage() == a.storage() ? b.clone() : b;
  a.bump_version();
  if (a.numel() > 0)
    REEL_DEVICE_DISPATCH(a.device(), binary, kernel_cost({&a, &rhs}, {&a}, a.numel(), op_name(op)), op, a,
                         untracked::expand(rhs, a.shape()), a);
}

Tensor binary(BinaryOp op, const Tensor& a, double b) {
  Tensor out = output_like(op_name(op), a);
  if (out.numel() > 0) REEL_DEVICE_DISPATCH(a.device(), binary_scalar, kernel_cost({&a}, {&out}, out.numel(), op_name(op)), op, a, b,
                                            false, out);
  return out;
}

Tensor binary(BinaryOp op, double a, const Tensor& b) {
  Tensor out = output_like(op_name(op), b);
  if (out.numel() > 0) REEL_DEVICE_DISPATCH(b.device(), binary_scalar, kernel_cost({&b}, {&out}, out.numel(), op_name(op)), op, b, a,
                                            true, out);
  return out;
}

Tensor unary_backward(UnaryOp op, const Tensor& dy, const Tensor& saved) {
  const std::string name = std::string(op_name(op)) + "_backward";
  // An op whose derivative is constant reads no saved tensor: dy stands in for it.
  const Tensor& s = saved.defined() || unary_saves(op) != UnarySaves::Nothing ? saved : dy;
  REEL_CHECK(dy.defined() && s.defined(), name, ": undefined dy or saved tensor");
  check_same_device(name.c_str(), {&dy, &s});
  check_same_floating_dtype(name.c_str(), {&dy, &s});
  REEL_CHECK(dy.shape() == s.shape(), name, ": dy ", dy.shape(), " and the saved ", s.shape(),
             " differ in shape");
  Tensor out = empty(dy.shape(), dy.dtype(), dy.device());
  if (out.numel() > 0) REEL_DEVICE_DISPATCH(dy.device(), unary_backward, kernel_cost({&dy, &s}, {&out}, 2 * out.numel(), op_name(op)),
                         op, dy, s, out);
  return out;
}

Tensor compare(CompareOp op, const Tensor& a, const Tensor& b) {
  Tensor out = broadcast_output(op_name(op), a, b);
  if (out.numel() > 0)
    REEL_DEVICE_DISPATCH(a.device(), compare, kernel_cost({&a, &b}, {&out}, out.numel(), op_name(op)), op,
                         untracked::expand(a, out.shape()), untracked::expand(b, out.shape()), out);
  return out;
}

Tensor compare(CompareOp op, const Tensor& a, double b) {
  Tensor out = output_like(op_name(op), a);
  if (out.numel() > 0) REEL_DEVICE_DISPATCH(a.device(), compare_scalar, kernel_cost({&a}, {&out}, out.numel(), op_name(op)), op, a, b,
                         out);
  return out;
}

Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b) {
  check_same_device("where", {&cond, &a, &b});
  check_same_floating_dtype("where", {&cond, &a, &b});
  Shape shape;
  try {
    shape = broadcast_shapes(broadcast_shapes(cond.shape(), a.shape(), "where"), b.shape(), "where");
  } catch (const Error&) {  // name all three shapes, not the intermediate one
    REEL_FAIL("where: shapes ", cond.shape(), " (cond), ", a.shape(), " (a) and ", b.shape(),
              " (b) cannot be broadcast");
  }
  Tensor out = empty(shape, a.dtype(), a.device());
  if (out.numel() > 0)
    REEL_DEVICE_DISPATCH(a.device(), where, kernel_cost({&cond, &a, &b}, {&out}, 0), untracked::expand(cond, shape),
                         untracked::expand(a, shape), untracked::expand(b, shape), out);
  return out;
}

}  // namespace reel::kernels
