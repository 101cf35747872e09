// Entry point of matmul: numpy.matmul shape rules (1-D operands, broadcast batch dims) and
// optional transposes of the last two dims, an optional (N) bias added to every output row,
// then the device GEMM.
#include "kernels/matmul.h"

#include <algorithm>

#include "kernels/elementwise.h"  // broadcast_shapes
#include "kernels/entry_point.h"

namespace reel::kernels {

Tensor matmul(const Tensor& a_in, const Tensor& b_in, bool transpose_a, bool transpose_b, const Tensor& bias_in) {
  if (bias_in.defined()) {
    check_same_device("matmul", {&a_in, &b_in, &bias_in});
    check_same_floating_dtype("matmul", {&a_in, &b_in, &bias_in});
  } else {
    check_same_device("matmul", {&a_in, &b_in});
    check_same_floating_dtype("matmul", {&a_in, &b_in});
  }
  REEL_CHECK(a_in.dim() >= 1 && b_in.dim() >= 1, "matmul: shapes ", a_in.shape(), " and ", b_in.shape(),
             ": both operands need at least one dim");
  REEL_CHECK(!(transpose_a && a_in.dim() < 2) && !(transpose_b && b_in.dim() < 2), "matmul: shapes ",
             a_in.shape(), " and ", b_in.shape(), ": a transpose needs a 2-D or higher operand");
  // 1-D operands: a vector (K) is a (1, K) row on the left, a (K, 1) column on the right.
  Tensor a = a_in.dim() == 1 ? untracked::unsqueeze(a_in, 0) : a_in;
  Tensor b = b_in.dim() == 1 ? untracked::unsqueeze(b_in, 1) : b_in;
  if (transpose_a) a = untracked::transpose(a, -2, -1);
  if (transpose_b) b = untracked::transpose(b, -2, -1);
  const int64_t M = a.size(-2), K = a.size(-1), K2 = b.size(-2), N = b.size(-1);
  REEL_CHECK(K == K2, "matmul: shapes ", a_in.shape(), (transpose_a ? "^T" : ""), " and ", b_in.shape(),
             (transpose_b ? "^T" : ""), " are not compatible: inner dims ", K, " != ", K2);
  const Shape batch_a(a.shape().begin(), a.shape().end() - 2);
  const Shape batch_b(b.shape().begin(), b.shape().end() - 2);
  // broadcast_shapes would name the batch dims alone; the full shapes say which operand is which.
  for (size_t i = 1; i <= std::min(batch_a.size(), batch_b.size()); ++i) {
    const int64_t da = batch_a[batch_a.size() - i], db = batch_b[batch_b.size() - i];
    REEL_CHECK(da == db || da == 1 || db == 1, "matmul: shapes ", a_in.shape(), (transpose_a ? "^T" : ""), " and ",
               b_in.shape(), (transpose_b ? "^T" : ""), ": batch dims ", batch_a, " and ", batch_b,
               " cannot be broadcast");
  }
  // The bias is one value per output column: (N), N = b's last dim (1 for a 1-D b).
  REEL_CHECK(!bias_in.defined() || bias_in.shape() == Shape{N}, "matmul: shapes ", a_in.shape(),
             (transpose_a ? "^T" : ""), " and ", b_in.shape(), (transpose_b ? "^T" : ""), ": bias ", bias_in.shape(),
             " on ", bias_in.device(), " does not match: (", N, ") expected");
  Shape batch = broadcast_shapes(batch_a, batch_b, "matmul");
  Shape a_shape = batch, b_shape = batch, out_shape = batch;
  a_shape.insert(a_shape.end(), {M, K});
  b_shape.insert(b_shape.end(), {K, N});
  out_shape.insert(out_shape.end(), {M, N});
  Tensor out = empty(out_shape, a.dtype(), a.device());
  // The backends read the bias densely; a strided (N) view costs one small copy.
  const Tensor bias = bias_in.defined() ? untracked::contiguous(bias_in) : Tensor();
  if (out.numel() > 0)
    REEL_DEVICE_DISPATCH(a.device(), matmul,
                         kernel_cost({&a, &b, &bias}, {&out}, 2 * out.numel() * K + (bias.defined() ? out.numel() : 0)),
                         untracked::expand(a, a_shape), untracked::expand(b, b_shape), out, bias);
  // Drop the dims that 1-D operands added.
  if (a_in.dim() == 1) out = untracked::squeeze(out, -2);
  if (b_in.dim() == 1) out = untracked::squeeze(out, -1);
  return out;
}

}  // namespace reel::kernels
