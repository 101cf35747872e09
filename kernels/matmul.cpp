// Entry point of matmul: numpy.matmul shape rules (1-D operands, broadcast batch dims) and
// optional transposes of the last two dims, an optional (N) bias added to every output row,
// then the device GEMM; matmul_group_into_ checks a short list of 2-D products and runs them as one.
#include "kernels/matmul.h"

#include <algorithm>
#include <atomic>

#include "kernels/cpu/gemm.h"     // gemm16_path
#include "kernels/elementwise.h"  // broadcast_shapes
#include "kernels/entry_point.h"

namespace reel::kernels {

namespace {

// A product's operands, as the backends take them: the transposes applied (views), 1-D operands
// made matrices, the batch dims broadcast.
struct MatmulPlan {
  Tensor a, b;                   // (..., M, K) and (..., K, N) before broadcasting
  Shape a_shape, b_shape, shape;  // broadcast: (B..., M, K), (B..., K, N), the product (B..., M, N)
  int64_t K = 0;
};

MatmulPlan plan_matmul(const Tensor& a_in, const Tensor& b_in, bool transpose_a, bool transpose_b,
                       const Tensor& bias_in) {
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
  MatmulPlan p;
  // 1-D operands: a vector (K) is a (1, K) row on the left, a (K, 1) column on the right.
  p.a = a_in.dim() == 1 ? untracked::unsqueeze(a_in, 0) : a_in;
  p.b = b_in.dim() == 1 ? untracked::unsqueeze(b_in, 1) : b_in;
  if (transpose_a) p.a = untracked::transpose(p.a, -2, -1);
  if (transpose_b) p.b = untracked::transpose(p.b, -2, -1);
  const int64_t M = p.a.size(-2), K = p.a.size(-1), K2 = p.b.size(-2), N = p.b.size(-1);
  REEL_CHECK(K == K2, "matmul: shapes ", a_in.shape(), (transpose_a ? "^T" : ""), " and ", b_in.shape(),
             (transpose_b ? "^T" : ""), " are not compatible: inner dims ", K, " != ", K2);
  const Shape batch_a(p.a.shape().begin(), p.a.shape().end() - 2);
  const Shape batch_b(p.b.shape().begin(), p.b.shape().end() - 2);
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
  const Shape batch = broadcast_shapes(batch_a, batch_b, "matmul");
  p.a_shape = p.b_shape = p.shape = batch;
  p.a_shape.insert(p.a_shape.end(), {M, K});
  p.b_shape.insert(p.b_shape.end(), {K, N});
  p.shape.insert(p.shape.end(), {M, N});
  p.K = K;
  return p;
}

// Runs the plan's product into out (contiguous, p.shape), onto what it holds when accumulating.
void run_matmul(const MatmulPlan& p, const Tensor& out, const Tensor& bias, bool accumulate) {
  if (out.numel() > 0)
    REEL_DEVICE_DISPATCH(p.a.device(), matmul,
                         kernel_cost({&p.a, &p.b, &bias}, {&out},
                                     2 * out.numel() * p.K + (bias.defined() || accumulate ? out.numel() : 0)),
                         untracked::expand(p.a, p.a_shape), untracked::expand(p.b, p.b_shape), out, bias, accumulate);
}

}  // namespace

Tensor matmul(const Tensor& a_in, const Tensor& b_in, bool transpose_a, bool transpose_b, const Tensor& bias_in) {
  const MatmulPlan p = plan_matmul(a_in, b_in, transpose_a, transpose_b, bias_in);
  Tensor out = empty(p.shape, p.a.dtype(), p.a.device());
  // The backends read the bias densely; a strided (N) view costs one small copy.
  run_matmul(p, out, bias_in.defined() ? untracked::contiguous(bias_in) : Tensor(), false);
  // Drop the dims that 1-D operands added.
  if (a_in.dim() == 1) out = untracked::squeeze(out, -2);
  if (b_in.dim() == 1) out = untracked::squeeze(out, -1);
  return out;
}

void matmul_into_(const Tensor& out, const Tensor& a, const Tensor& b, bool transpose_a, bool transpose_b,
                  bool accumulate) {
  REEL_CHECK(out.defined() && a.defined() && b.defined() && a.dim() >= 2 && b.dim() >= 2, "matmul_into_: shapes ",
             a.shape(), " and ", b.shape(), ": two operands of at least 2 dims expected");
  const MatmulPlan p = plan_matmul(a, b, transpose_a, transpose_b, Tensor());
  REEL_CHECK(out.shape() == p.shape && out.is_contiguous() && out.dtype() == a.dtype() && out.device() == a.device(),
             "matmul_into_: out ", out.shape(), " ", out.dtype(), " on ", out.device(),
             out.is_contiguous() ? "" : " (not contiguous)", " cannot take the product of ", a.shape(),
             (transpose_a ? "^T" : ""), " and ", b.shape(), (transpose_b ? "^T" : ""), ": a contiguous ", p.shape,
             " ", a.dtype(), " on ", a.device(), " expected");
  run_matmul(p, out, Tensor(), accumulate);
  out.bump_version();
}

namespace {
// The bytes t's elements may occupy: [first, last) from its data pointer over its strides (none
// negative in reel's views); empty for an empty tensor.
std::pair<uintptr_t, uintptr_t> byte_span(const Tensor& t) {
  if (t.numel() == 0) return {0, 0};
  int64_t last = 0;
  for (int64_t d = 0; d < t.dim(); ++d) last += (t.size(d) - 1) * t.stride(d);
  const uintptr_t first = reinterpret_cast<uintptr_t>(t.data_ptr());
  return {first, first + static_cast<uintptr_t>((last + 1) * static_cast<int64_t>(dtype_size(t.dtype())))};
}
bool overlap(const Tensor& x, const Tensor& y) {
  const auto [x0, x1] = byte_span(x);
  const auto [y0, y1] = byte_span(y);
  return x0 < x1 && y0 < y1 && x0 < y1 && y0 < x1;
}
}  // namespace

void matmul_group_into_(const std::vector<GemmInto>& gemms) {
  REEL_CHECK(!gemms.empty() && gemms.size() <= kMaxGemmGroup, "matmul_group_into_: ", gemms.size(),
             " products: 1 to ", kMaxGemmGroup, " expected");
  std::vector<GemmInto> plans;  // the transposes applied: what the backends take
  for (size_t i = 0; i < gemms.size(); ++i) {
    const GemmInto& g = gemms[i];
    REEL_CHECK(g.out.defined() && g.a.defined() && g.b.defined(), "matmul_group_into_: product ", i,
               ": out, a and b must be defined tensors");
    REEL_CHECK(g.a.dim() == 2 && g.b.dim() == 2, "matmul_group_into_: product ", i, ": shapes ", g.a.shape(), " and ",
               g.b.shape(), ": 2-D operands expected");
    const Tensor& first = gemms[0].a;
    for (const Tensor* t : {&g.out, &g.a, &g.b})
      REEL_CHECK(t->dtype() == first.dtype() && t->device() == first.device(), "matmul_group_into_: product ", i, ": ",
                 t->shape(), " ", t->dtype(), " on ", t->device(), " differs from product 0's a ", first.shape(), " ",
                 first.dtype(), " on ", first.device(), ": one dtype and device expected");
    const Tensor a = g.transpose_a ? untracked::transpose(g.a, 0, 1) : g.a;
    const Tensor b = g.transpose_b ? untracked::transpose(g.b, 0, 1) : g.b;
    REEL_CHECK(a.size(1) == b.size(0), "matmul_group_into_: product ", i, ": shapes ", g.a.shape(),
               (g.transpose_a ? "^T" : ""), " and ", g.b.shape(), (g.transpose_b ? "^T" : ""),
               " are not compatible: inner dims ", a.size(1), " != ", b.size(0));
    const Shape shape{a.size(0), b.size(1)};
    REEL_CHECK(g.out.shape() == shape && g.out.is_contiguous(), "matmul_group_into_: product ", i, ": out ",
               g.out.shape(), g.out.is_contiguous() ? "" : " (not contiguous)", " cannot take the product of ",
               g.a.shape(), (g.transpose_a ? "^T" : ""), " and ", g.b.shape(), (g.transpose_b ? "^T" : ""),
               ": a contiguous ", shape, " expected");
    plans.push_back({g.out, a, b, false, false, g.accumulate});
  }
  check_same_floating_dtype("matmul_group_into_", {&gemms[0].a});
  // The products may run at once (cuda) or in order (cpu): no out may be read or written by another.
  for (size_t i = 0; i < gemms.size(); ++i)
    for (size_t j = 0; j < gemms.size(); ++j)
      for (const Tensor* t : {&gemms[j].out, &gemms[j].a, &gemms[j].b})
        REEL_CHECK((i == j && t == &gemms[j].out) || !overlap(gemms[i].out, *t), "matmul_group_into_: product ", i,
                   "'s out ", gemms[i].out.shape(), " overlaps product ", j, "'s ",
                   t == &gemms[j].out ? "out" : t == &gemms[j].a ? "a" : "b", " ", t->shape(),
                   ": the products must not alias each other");
  // The cost: every product's as matmul_into_ counts it, summed.
  const auto cost = [&] {
    profile::KernelCost c;
    for (const GemmInto& g : plans) {
      const profile::KernelCost one = kernel_cost({&g.a, &g.b}, {&g.out}, 2 * g.out.numel() * g.a.size(1) +
                                                                             (g.accumulate ? g.out.numel() : 0));
      c.flops += one.flops, c.bytes_read += one.bytes_read, c.bytes_written += one.bytes_written;
    }
    return c;
  };
  REEL_DEVICE_DISPATCH(gemms[0].a.device(), matmul_group, cost(), plans);
  for (const GemmInto& g : gemms) g.out.bump_version();
}

namespace {
// The fused GEMMs' common checksnamespace {
// The fused GEMMs' common checks: one device and floating dtype, 2-D operands, named with op.
void check_fused(const char* op, std::initializer_list<const Tensor*> ts, std::initializer_list<const Tensor*> mats) {
  for (const Tensor* t : ts) REEL_CHECK(t->defined(), op, ": an undefined tensor");
  check_same_device(op, ts);
  check_same_floating_dtype(op, ts);
  for (const Tensor* t : mats) REEL_CHECK(t->dim() == 2, op, ": ", t->shape(), ": a 2-D operand expected");
}
}  // namespace

void linear_grad_into_(const Tensor& dw, const Tensor& db, const Tensor& g, const Tensor& x, bool accumulate_w,
                       bool accumulate_b) {
  check_fused("linear_grad_into_", {&dw, &db, &g, &x}, {&g, &x});
  const int64_t N = g.size(0), out = g.size(1), in = x.size(1);
  REEL_CHECK(x.size(0) == N && dw.shape() == Shape({out, in}) && db.shape() == Shape{out} && dw.is_contiguous() &&
                 db.is_contiguous(),
             "linear_grad_into_: g ", g.shape(), " and x ", x.shape(), " (N rows each) give dw (", out, ", ", in,
             ") and db (", out, "), contiguous; got dw ", dw.shape(), " and db ", db.shape());
  // The bias gradient rides on the GEMM's epilogue: with no product (no input features) there is
  // no GEMM to carry it (linear sums the columns itself then).
  REEL_CHECK(in > 0 && out > 0, "linear_grad_into_: g ", g.shape(), " and x ", x.shape(),
             ": in and out features must be positive");
  REEL_DEVICE_DISPATCH(g.device(), matmul_bgrad,
                       kernel_cost({&g, &x}, {&dw, &db}, 2 * N * out * in + N * out + (accumulate_w ? out * in : 0)),
                       g, x, dw, db, accumulate_w, accumulate_b);
  dw.bump_version();
  db.bump_version();
}

LinearGelu linear_gelu(const Tensor& x, const Tensor& w, const Tensor& b) {
  check_fused("linear_gelu", {&x, &w, &b}, {&x, &w});
  const int64_t N = x.size(0), in = x.size(1), out = w.size(0);
  REEL_CHECK(w.size(1) == in && b.shape() == Shape{out} && in > 0, "linear_gelu: x ", x.shape(), ", w ", w.shape(), " and b ",
             b.shape(), " do not match: x (N, in), w (out, in), b (out), in > 0 expected");
  LinearGelu r{empty({N, out}, x.dtype(), x.device()), empty({N, out}, x.dtype(), x.device())};
  const Tensor bias = untracked::contiguous(b);
  // 2 N out in for the product, one op for the bias and ~10 for the GELU per element.
  REEL_DEVICE_DISPATCH(x.device(), matmul_gelu, kernel_cost({&x, &w, &bias}, {&r.y, &r.pre}, 2 * N * out * in + 11 * N * out),
                       x, w, bias, r.y, r.pre);
  return r;
}

Tensor linear_dgelu(const Tensor& g, const Tensor& w, const Tensor& pre, const Tensor& db, bool accumulate_b) {
  check_fused("linear_dgelu", {&g, &w, &pre, &db}, {&g, &w, &pre});
  const int64_t N = g.size(0), out = g.size(1), hidden = w.size(1);
  REEL_CHECK(w.size(0) == out && pre.shape() == Shape({N, hidden}) && db.shape() == Shape{hidden} &&
                 db.is_contiguous() && out > 0,
             "linear_dgelu: g ", g.shape(), ", w ", w.shape(), ", pre ", pre.shape(), " and db ", db.shape(),
             " do not match: g (N, out), w (out, hidden), pre (N, hidden), db (hidden) contiguous, out > 0 expected");
  Tensor dpre = empty({N, hidden}, g.dtype(), g.device());
  // 2 N out hidden for the product, ~12 per element for gelu' and the product, one for the sums.
  REEL_DEVICE_DISPATCH(g.device(), matmul_dgelu,
                       kernel_cost({&g, &w, &pre}, {&dpre, &db}, 2 * N * out * hidden + 13 * N * hidden), g, w, pre,
                       dpre, db, accumulate_b);
  db.bump_version();
  return dpre;
}

const char* cpu_gemm16_path() { return cpu::gemm16_path(); }

}  // namespace reel::kernels

namespace reel {
namespace {
std::atomic<bool> tf32_allowed{false};
}
void set_allow_tf32(bool allow) { tf32_allowed.store(allow, std::memory_order_relaxed); }
bool allow_tf32() { return tf32_allowed.load(std::memory_order_relaxed); }
}  // namespace reel
