// tests/op_table/matmul.cpp: the op table's matmul and linear family. Kernel rows: matmul with
// transposes (flags and views), 1-D operands, batched and broadcast batches, strided operands and
// sizes the CPU cuts into uneven blocks, against an f64 loop; the tiled teaching SGEMM on cuda.
// Tape rows: matmul in every layout, linear with and without bias and with frozen inputs.
// linear's fused GEMMs (kernels::linear_grad_into_, linear_gelu, linear_dgelu: cuBLASLt epilogues on
// cuda) against f64 loops, written and accumulated; the grouped GEMMs (kernels::matmul_group_into_)
// against the f64 loop and, bit for bit, the separate matmul_into_ calls; the tape op
// linear_gelu_linear (with b2 and without) against linear, gelu, linear.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "autograd/functions.h"
#include "autograd/nn_functions.h"
#include "kernels/ops.h"
#if defined(REEL_HAS_CUDA_BACKEND)
#include "kernels/cuda/cuda_only.h"  // matmul_tiled
#endif
#include "op_table.h"

namespace reel::op_table {
namespace {

using namespace reel::testing;

// The dtypes every row of this family runs in (rows that name their own keep them): one entry to add.
// bf16 and f16: the GEMM's 16-bit path (exact products, f32 sums, one rounding to the output type).
const std::vector<DType> kDTypes = {DType::f32, DType::f64, DType::bf16, DType::f16};

// The tolerances of a kernel row at bf16 and f16, added to its f32 / f64 ones. The runner rounds
// the inputs to the dtype before the f64 reference sees them, so what is left is (1) the f32
// accumulation, the row's f32 atol (f32_atol), and (2) the one rounding of each f32 result to the
// output type, at most half an ulp: a relative 2^-8 for bf16 (8 significant bits) and 2^-11 for f16
// (11 bits); |got - ref| <= u |ref| + (1 + u) f32_atol, covered by {u, f32_atol} since f32_atol has
// a factor 4 of slack. cpu vs cuda (the `device` tolerances, added to these against the reference):
// both round an f32 sum once, but in another order (oneDNN's blocking or the f32 GEMM on widened
// operands, against Eigen in the emulated cuBLAS), so an element whose two f32 sums fall either side
// of a rounding boundary differs by one ulp, 2u relative; they are bit-identical only where the two
// f32 sums are (not promised).
Tols with_16bit(Tols t, double f32_atol, bool device) {
  const double k = device ? 2 : 1;
  t.by_dtype.push_back({DType::bf16, Tol{k * 0x1p-8, k * f32_atol}});
  t.by_dtype.push_back({DType::f16, Tol{k * 0x1p-11, k * f32_atol}});
  return t;
}

// ==== matmul =======================================================================================

using reel::testing::ref_matmul;

// numpy.matmul of a and b (transposed by the flags first): batch dims broadcast, 1-D operands as
// a row / a column; each (M, K) @ (K, N) of the broadcast batch by ref_matmul.
std::vector<double> batched_matmul_ref(Tensor a, Tensor b, bool ta, bool tb) {
  if (a.dim() == 1) a = a.unsqueeze(0);
  if (b.dim() == 1) b = b.unsqueeze(1);
  if (ta) a = a.transpose(-2, -1);
  if (tb) b = b.transpose(-2, -1);
  const int64_t M = a.size(-2), K = a.size(-1), N = b.size(-1);
  Shape batch = kernels::broadcast_shapes(Shape(a.shape().begin(), a.shape().end() - 2),
                                 Shape(b.shape().begin(), b.shape().end() - 2), "reference");
  Shape sa = batch, sb = batch;
  sa.insert(sa.end(), {M, K});
  sb.insert(sb.end(), {K, N});
  const std::vector<double> av = values(a.expand(sa)), bv = values(b.expand(sb));  // row-major copies
  std::vector<double> out;
  for (int64_t i = 0; i < shape_numel(batch); ++i) {
    const std::vector<double> c = ref_matmul(std::vector<double>(av.begin() + i * M * K, av.begin() + (i + 1) * M * K),
                                             std::vector<double>(bv.begin() + i * K * N, bv.begin() + (i + 1) * K * N),
                                             M, K, N);
    out.insert(out.end(), c.begin(), c.end());
  }
  return out;
}

// The entry point's shape logic (kernels/matmul.cpp) in front of the tiled kernel, on cuda; the
// plain matmul elsewhere (the cpu run the tiled kernel is compared with).
Tensor tiled_matmul(const Tensor& a_in, const Tensor& b_in, bool ta, bool tb) {
#if defined(REEL_HAS_CUDA_BACKEND)
  if (a_in.device().is_cuda()) {
    Tensor a = a_in.dim() == 1 ? a_in.unsqueeze(0) : a_in;
    Tensor b = b_in.dim() == 1 ? b_in.unsqueeze(1) : b_in;
    if (ta) a = a.transpose(-2, -1);
    if (tb) b = b.transpose(-2, -1);
    const int64_t M = a.size(-2), K = a.size(-1), N = b.size(-1);
    Shape batch = kernels::broadcast_shapes(Shape(a.shape().begin(), a.shape().end() - 2),
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
  }
#endif
  return kernels::matmul(a_in, b_in, ta, tb);
}

std::vector<OpCase> matmul_cases() {
  using namespace kernels;
  struct Config {
    const char* name;
    Shape a, b;
    std::function<Tensor(const Tensor&)> view_a, view_b;
    bool ta, tb;  // the transpose flags of matmul
  };
  const auto t = [](const Tensor& x) { return x.transpose(-2, -1); };
  const std::vector<Config> configs = {
      {"(37, 53) @ (53, 41)", {37, 53}, {53, 41}, same, same, false, false},
      {"(53, 37).t() @ (53, 41)", {53, 37}, {53, 41}, t, same, false, false},
      {"(37, 53) @ (41, 53).t()", {37, 53}, {41, 53}, same, t, false, false},
      {"flags: (53, 37)^T @ (41, 53)^T", {53, 37}, {41, 53}, same, same, true, true},
      {"(53) @ (53, 41)", {53}, {53, 41}, same, same, false, false},
      {"(37, 53) @ (53)", {37, 53}, {53}, same, same, false, false},
      {"(53) @ (53)", {53}, {53}, same, same, false, false},
      {"(1, 64) @ (64, 1)", {1, 64}, {64, 1}, same, same, false, false},
      {"(31, 1) @ (1, 29)", {31, 1}, {1, 29}, same, same, false, false},
      {"(3, 0) @ (0, 4)", {3, 0}, {0, 4}, same, same, false, false},
      {"batched (3, 17, 19) @ (3, 19, 23)", {3, 17, 19}, {3, 19, 23}, same, same, false, false},
      {"batched, b^T flag (3, 17, 19) @ (3, 23, 19)^T", {3, 17, 19}, {3, 23, 19}, same, same, false, true},
      {"broadcast batch (2, 1, 5, 7) @ (3, 7, 4)", {2, 1, 5, 7}, {3, 7, 4}, same, same, false, false},
      {"shared weight (17, 19) @ (3, 19, 23)", {17, 19}, {3, 19, 23}, same, same, false, false},
      {"uncollapsible batch (2, 1, 5, 7) @ (2, 3, 7, 4)", {2, 1, 5, 7}, {2, 3, 7, 4}, same, same, false, false},
      {"permuted batch (5, 3, 7).permute(1, 0, 2) @ (3, 7, 6)", {5, 3, 7}, {3, 7, 6},
       [](const Tensor& x) { return x.permute({1, 0, 2}); }, same, false, false},
      {"strided operand (37, 106)[:, ::2] @ (53, 41)", {37, 106}, {53, 41},
       [](const Tensor& x) { return x.slice(1, 0, 106, 2); }, same, false, false},
      {"(129, 257) @ (257, 65)", {129, 257}, {257, 65}, same, same, false, false},
      {"broadcast batch (2, 1, 5, 3) @ (4, 3, 6)", {2, 1, 5, 3}, {4, 3, 6}, same, same, false, false},
      {"attention-shaped q k^T (2, 3, 7, 4) @ (2, 3, 7, 4)^T", {2, 3, 7, 4}, {2, 3, 7, 4}, same, same, false, true},
  };
  const Tols tol = tols(1e-4, 1e-11);
  std::vector<OpCase> cases;
  for (bool tiled : {false, true})
    for (const Config& m : configs) {
      cases.push_back(OpCase(std::string(tiled ? "tiled SGEMM on cuda: " : "matmul ") + m.name,
                             [m](Generator& g) { return Tensors{normal_f64(g, m.a), normal_f64(g, m.b)}; },
                             [m, tiled](const Tensors& in, Device) {
                               const Tensor a = m.view_a(in[0]), b = m.view_b(in[1]);
                               return Tensors{tiled ? tiled_matmul(a, b, m.ta, m.tb) : kernels::matmul(a, b, m.ta, m.tb)};
                             },
                             {with_16bit(tol, 1e-4, true)})
                          .with_reference(
                              [m](const Tensors& in) {
                                return Values{batched_matmul_ref(m.view_a(in[0]), m.view_b(in[1]), m.ta, m.tb)};
                              },
                              {with_16bit(tols(1e-4, 1e-12), 1e-4, false)}));
      if (tiled) cases.back().with_dtypes({DType::f32, DType::f64});  // the teaching SGEMM: f32 and f64 only
    }
  // 2-D products against the f64 loop, on sizes that the CPU cuts into blocks of rows (M >= N) or
  // of columns per thread (kernels/cpu/matmul.cpp), odd so the blocks are uneven; each through
  // transposed storage (flags and views) and a sliced (non-unit outer stride) operand.
  struct Layout {
    const char* name;
    std::function<Tensor(const Tensor&, const Tensor&)> f;
  };
  const std::vector<Layout> layouts = {
      {"", [](const Tensor& a, const Tensor& b) { return kernels::matmul(a, b); }},
      {"a^T flag ", [](const Tensor& a, const Tensor& b) { return kernels::matmul(a.t().contiguous(), b, true, false); }},
      {"b^T flag ", [](const Tensor& a, const Tensor& b) { return kernels::matmul(a, b.t().contiguous(), false, true); }},
      {"transposed views ", [](const Tensor& a, const Tensor& b) {
         return kernels::matmul(a.t().contiguous().t(), b.t().contiguous().t());
       }},
      {"sliced a ", [](const Tensor& a, const Tensor& b) {
         Tensor wide = zeros({a.size(0), a.size(1) + 3}, a.dtype(), a.device());
         wide.narrow(1, 1, a.size(1)).copy_(a);
         return kernels::matmul(wide.narrow(1, 1, a.size(1)), b);
       }},
  };
  for (auto [M, K, N] : std::vector<std::array<int64_t, 3>>{{1, 1, 1}, {4, 3, 2}, {31, 17, 33}, {64, 257, 5},
                                                           {128, 128, 128}, {201, 161, 151}, {97, 131, 333},
                                                           {3, 2001, 701}})
    for (const Layout& l : layouts) {
      // An f32 dot product of K N(0, 1) pairs rounds each addition by eps of a partial sum that
      // grows like sqrt(k): an absolute error of about eps K / sqrt(2), 8e-5 at K = 2001, which
      // a relative tolerance cannot absorb where the sum cancels to near 0. Summed in one chain
      // per output (oneDNN's brgemm), one element of (3, 2001) @ (2001, 701) was 1.35e-4 off.
      const double f32_atol = std::max(1e-4, 4 * 6e-8 * static_cast<double>(K));
      cases.push_back(
          OpCase("matmul " + std::string(l.name) + shape_str({M, K}) + " @ " + shape_str({K, N}),
                 [M = M, K = K, N = N](Generator& g) { return Tensors{normal_f64(g, {M, K}), normal_f64(g, {K, N})}; },
                 [f = l.f](const Tensors& in, Device) { return Tensors{f(in[0], in[1])}; },
                 {with_16bit(tols(Tol{1e-4, f32_atol}, tol.of(DType::f64)), f32_atol, true)})
              .with_reference(
                  [M = M, K = K, N = N](const Tensors& in) {
                    return Values{ref_matmul(values(in[0]), values(in[1]), M, K, N)};
                  },
                  {with_16bit(tols(Tol{1e-4, f32_atol}, Tol{1e-12, 1e-12}), f32_atol, false)}));
    }
  return cases;
}

// ==== linear's fused GEMMs ===========================================================================

double gelu_ref(double x) { return 0.5 * x * (1 + std::tanh(0.7978845608028654 * (x + 0.044715 * x * x * x))); }
double gelu_grad_ref(double x) {  // d/dx of gelu_ref
  const double k = 0.7978845608028654, c = 0.044715, t = std::tanh(k * (x + c * x * x * x));
  return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * k * (1 + 3 * c * x * x);
}

// Tolerances of a fused GEMM's outputs: f32 and f64 as matmul's (f32_atol for a K-term f32 sum);
// bf16 / f16 a relative 2^-7 / 2^-10 plus f32_atol scaled by `scale16`: two roundings where the cpu
// rounds the GEMM's output before the epilogue's GELU (the cuda epilogue computes on the f32 value),
// and sums over the rows of rounded values.
Tols fused_tols(double f32_atol, double scale16, bool device) {
  Tols t = tols(Tol{1e-4, f32_atol}, device ? Tol{1e-11, 1e-11} : Tol{1e-12, 1e-12});
  const double k = device ? 2 : 1;
  t.by_dtype.push_back({DType::bf16, Tol{k * 0x1p-7, k * scale16 * 0x1p-8}});
  t.by_dtype.push_back({DType::f16, Tol{k * 0x1p-10, k * scale16 * 0x1p-11}});
  return t;
}

std::vector<OpCase> linear_fused_cases() {
  std::vector<OpCase> cases;
  const auto t_view = [](const Tensor& x) { return x.t().contiguous().t(); };  // the same values, column-major
  // dW = G^T X and db = 1^T G in one kernel, written or added onto dw0 / db0.
  for (auto [N, out, in] : std::vector<std::array<int64_t, 3>>{{5, 3, 4}, {64, 33, 17}, {1030, 96, 40}, {1, 7, 2}})
    for (bool acc_w : {false, true})
      for (bool acc_b : {false, true})
        for (bool views : {false, true}) {
          if (views && (acc_w || acc_b)) continue;
          const double f32_atol = std::max(1e-4, 4 * 6e-8 * static_cast<double>(N));
          const std::string name = std::string("linear_grad_into_ ") + (views ? "transposed g and x " : "") +
                                   (acc_w ? "dw += " : "dw = ") + (acc_b ? "db += " : "db = ") + "g " +
                                   shape_str({N, out}) + ", x " + shape_str({N, in});
          cases.push_back(
              OpCase(name,
                     [N = N, out = out, in = in](Generator& g) {
                       return Tensors{normal_f64(g, {N, out}), normal_f64(g, {N, in}), normal_f64(g, {out, in}),
                                      normal_f64(g, {out})};
                     },
                     [=](const Tensors& x, Device) {
                       const Tensor dw = x[2].clone(), db = x[3].clone();
                       kernels::linear_grad_into_(dw, db, views ? t_view(x[0]) : x[0], views ? t_view(x[1]) : x[1],
                                                  acc_w, acc_b);
                       return Tensors{dw, db};
                     },
                     {fused_tols(f32_atol, 4 * std::sqrt(static_cast<double>(N)), true)})
                  .with_reference(
                      [=, N = N, out = out, in = in](const Tensors& x) {
                        const std::vector<double> g = values(x[0]), xv = values(x[1]), dw0 = values(x[2]),
                                                  db0 = values(x[3]);
                        std::vector<double> dw(static_cast<size_t>(out * in)), db(static_cast<size_t>(out));
                        for (int64_t o = 0; o < out; ++o) {
                          double s = acc_b ? db0[o] : 0;
                          for (int64_t n = 0; n < N; ++n) s += g[n * out + o];
                          db[o] = s;
                          for (int64_t i = 0; i < in; ++i) {
                            double w = acc_w ? dw0[o * in + i] : 0;
                            for (int64_t n = 0; n < N; ++n) w += g[n * out + o] * xv[n * in + i];
                            dw[o * in + i] = w;
                          }
                        }
                        return Values{dw, db};
                      },
                      {fused_tols(f32_atol, 4 * std::sqrt(static_cast<double>(N)), false)}));
        }
  // y = gelu(x w^T + b) and pre = x w^T + b.
  for (auto [N, in, out] : std::vector<std::array<int64_t, 3>>{{5, 4, 3}, {64, 33, 17}, {130, 96, 384}})
    for (bool views : {false, true}) {
      const double f32_atol = std::max(1e-4, 4 * 6e-8 * static_cast<double>(in));
      cases.push_back(
          OpCase(std::string("linear_gelu ") + (views ? "transposed x " : "") + "x " + shape_str({N, in}) + ", w " +
                     shape_str({out, in}),
                 [N = N, in = in, out = out](Generator& g) {
                   return Tensors{normal_f64(g, {N, in}), normal_f64(g, {out, in}), normal_f64(g, {out})};
                 },
                 [views, t_view](const Tensors& x, Device) {
                   const kernels::LinearGelu r = kernels::linear_gelu(views ? t_view(x[0]) : x[0], x[1], x[2]);
                   return Tensors{r.y, r.pre};
                 },
                 {fused_tols(f32_atol, 4 * std::sqrt(static_cast<double>(in)), true)})
              .with_reference(
                  [N = N, in = in, out = out](const Tensors& x) {
                    const std::vector<double> pre_mm = ref_matmul(values(x[0]), values(x[1].t()), N, in, out);
                    const std::vector<double> b = values(x[2]);
                    std::vector<double> y(pre_mm.size()), pre(pre_mm.size());
                    for (size_t i = 0; i < pre.size(); ++i) {
                      pre[i] = pre_mm[i] + b[i % static_cast<size_t>(out)];
                      y[i] = gelu_ref(pre[i]);
                    }
                    return Values{y, pre};
                  },
                  {fused_tols(f32_atol, 4 * std::sqrt(static_cast<double>(in)), false)}));
    }
  // dpre = (g w) * gelu'(pre) and db = 1^T dpre, written or added onto db0.
  for (auto [N, out, hidden] : std::vector<std::array<int64_t, 3>>{{5, 3, 4}, {64, 17, 33}, {130, 96, 384}})
    for (bool acc_b : {false, true}) {
      // dpre: an out-term sum times gelu'; db: N of those summed (the 16-bit error a random walk).
      const double f32_atol = std::max(1e-4, 4 * 6e-8 * static_cast<double>(out));
      const double db_atol = std::max(1e-4, 4 * 6e-8 * static_cast<double>(out) * static_cast<double>(N));
      const double scale16 = 4 * std::sqrt(static_cast<double>(out));
      const double db_scale16 = scale16 * std::sqrt(static_cast<double>(N));
      cases.push_back(
          OpCase(std::string("linear_dgelu ") + (acc_b ? "db += " : "db = ") + "g " + shape_str({N, out}) + ", w " +
                     shape_str({out, hidden}),
                 [N = N, out = out, hidden = hidden](Generator& g) {
                   return Tensors{normal_f64(g, {N, out}), normal_f64(g, {out, hidden}), normal_f64(g, {N, hidden}),
                                  normal_f64(g, {hidden})};
                 },
                 [acc_b](const Tensors& x, Device) {
                   const Tensor db = x[3].clone();
                   const Tensor dpre = kernels::linear_dgelu(x[0], x[1], x[2], db, acc_b);
                   return Tensors{dpre, db};
                 },
                 {fused_tols(f32_atol, scale16, true), fused_tols(db_atol, db_scale16, true)})
              .with_reference(
                  [=, N = N, out = out, hidden = hidden](const Tensors& x) {
                    const std::vector<double> dy = ref_matmul(values(x[0]), values(x[1]), N, out, hidden);
                    const std::vector<double> pre = values(x[2]), db0 = values(x[3]);
                    std::vector<double> dpre(dy.size()), db(static_cast<size_t>(hidden));
                    for (int64_t j = 0; j < hidden; ++j) db[j] = acc_b ? db0[j] : 0;
                    for (int64_t n = 0; n < N; ++n)
                      for (int64_t j = 0; j < hidden; ++j) {
                        const size_t i = static_cast<size_t>(n * hidden + j);
                        dpre[i] = dy[i] * gelu_grad_ref(pre[i]);
                        db[j] += dpre[i];
                      }
                    return Values{dpre, db};
                  },
                  {fused_tols(f32_atol, scale16, false), fused_tols(db_atol, db_scale16, false)}));
    }
  // Grouped GEMMs (kernels::matmul_group_into_: cublasGemmGroupedBatchedEx on cuda): linear's
  // dX = G W and dW = G^T X, and a third x W^T (the b^T flag), written or added onto out0s. Each
  // product must be the separate matmul_into_'s bit for bit on its device (checked in the run), and
  // the f64 loop's within matmul's tolerances.
  for (auto [N, out, in] : std::vector<std::array<int64_t, 3>>{{5, 3, 4}, {64, 33, 17}, {130, 96, 40}})
    for (bool acc : {false, true})
      for (bool three : {false, true}) {
        const double f32_atol = std::max(1e-4, 4 * 6e-8 * static_cast<double>(N));
        const std::string name = std::string("matmul_group_into_ ") + (acc ? "+= " : "= ") + "g " +
                                 shape_str({N, out}) + " w " + shape_str({out, in}) + " x " + shape_str({N, in}) +
                                 (three ? ", three products" : "");
        cases.push_back(
            OpCase(name,
                   [N = N, out = out, in = in](Generator& g) {
                     return Tensors{normal_f64(g, {N, out}), normal_f64(g, {out, in}), normal_f64(g, {N, in}),
                                    normal_f64(g, {N, in}),   normal_f64(g, {out, in}), normal_f64(g, {N, out})};
                   },
                   [=](const Tensors& x, Device) {
                     std::vector<kernels::GemmInto> gemms = {{x[3].clone(), x[0], x[1], false, false, acc},
                                                             {x[4].clone(), x[0], x[2], true, false, acc}};
                     if (three) gemms.push_back({x[5].clone(), x[2], x[1], false, true, acc});
                     Tensors got, separate;
                     for (const kernels::GemmInto& m : gemms) {
                       separate.push_back(m.out.clone());
                       kernels::matmul_into_(separate.back(), m.a, m.b, m.transpose_a, m.transpose_b, acc);
                     }
                     kernels::matmul_group_into_(gemms);
                     for (size_t i = 0; i < gemms.size(); ++i) {
                       const Tensor a = gemms[i].out.to(Device::cpu()), b = separate[i].to(Device::cpu());
                       CHECK_MESSAGE(std::memcmp(a.data_ptr(), b.data_ptr(), a.nbytes()) == 0,
                                     "product ", i, " differs from matmul_into_'s bits");
                       got.push_back(gemms[i].out);
                     }
                     return got;
                   },
                   {with_16bit(tols(1e-4, 1e-11), f32_atol, true)})
                .with_reference(
                    [=, N = N, out = out, in = in](const Tensors& x) {
                      const std::vector<double> g = values(x[0]), w = values(x[1]), xv = values(x[2]);
                      std::vector<double> gt(static_cast<size_t>(out * N)), wt(static_cast<size_t>(in * out));
                      for (int64_t n = 0; n < N; ++n)
                        for (int64_t o = 0; o < out; ++o) gt[o * N + n] = g[n * out + o];
                      for (int64_t o = 0; o < out; ++o)
                        for (int64_t i = 0; i < in; ++i) wt[i * out + o] = w[o * in + i];
                      std::vector<std::vector<double>> r = {ref_matmul(g, w, N, out, in), ref_matmul(gt, xv, out, N, in)};
                      if (three) r.push_back(ref_matmul(xv, wt, N, in, out));
                      for (size_t k = 0; k < r.size(); ++k)
                        if (acc) {
                          const std::vector<double> o0 = values(x[3 + k]);
                          for (size_t j = 0; j < r[k].size(); ++j) r[k][j] += o0[j];
                        }
                      return Values(r.begin(), r.end());
                    },
                    {with_16bit(tols(1e-4, 1e-12), f32_atol, false)}));
      }
  return cases;
}

std::vector<OpCase> matmul_tape_cases() {
  const TapeFn mlp = [](const Tensors& x) { return linear_gelu_linear(x[0], x[1], x[2], x[3], x[4]); };
  // Without b2: dW2 a plain GEMM, grouped with dX and dW1 (kernels::matmul_group_into_).
  const TapeFn mlp_no_b2 = [](const Tensors& x) { return linear_gelu_linear(x[0], x[1], x[2], x[3], Tensor()); };
  const auto composed_no_b2 = [](const Tensors& x) { return linear(gelu(linear(x[0], x[1], x[2])), x[3]); };
  auto mm = [](bool ta, bool tb) {
    return [ta, tb](const Tensor& a, const Tensor& b) { return matmul(a, b, ta, tb); };
  };
  return {
      tape_binary("matmul", mm(false, false), {3, 4}, {4, 5}),
      tape_binary("matmul", mm(false, false), {2, 3, 4}, {4, 5}),
      tape_binary("matmul", mm(false, false), {2, 3, 4}, {2, 4, 5}),
      tape_binary("matmul", mm(false, false), {2, 1, 3, 4}, {5, 4, 2}),
      tape_binary("matmul", mm(false, false), {4}, {4, 5}),
      tape_binary("matmul", mm(false, false), {3, 4}, {4}),
      tape_binary("matmul", mm(false, false), {4}, {4}),
      tape_binary("matmul", mm(false, false), {2, 3, 4}, {4}),
      tape_binary("matmul", mm(false, false), {3, 4}, {4, 5}, Domain::Any, {false, true}),
      tape_binary("matmul a^T", mm(true, false), {4, 3}, {4, 5}),
      tape_binary("matmul b^T", mm(false, true), {3, 4}, {5, 4}),
      tape_binary("matmul a^T b^T", mm(true, true), {4, 3}, {5, 4}),
      tape_binary("matmul q k^T", mm(false, true), {2, 3, 4}, {2, 5, 4}),
      tape_binary("matmul a^T batched", mm(true, false), {2, 4, 3}, {4, 5}),
      tape_ternary("linear", [](const Tensor& x, const Tensor& w, const Tensor& b) { return linear(x, w, b); }, {5, 4},
                   {3, 4}, {3}),
      tape_ternary("linear batched", [](const Tensor& x, const Tensor& w, const Tensor& b) { return linear(x, w, b); },
                   {2, 3, 4}, {6, 4}, {6}),
      tape_binary("linear without bias", [](const Tensor& x, const Tensor& w) { return linear(x, w); }, {2, 3, 4}, {5, 4}),
      tape_binary("linear of a vector", [](const Tensor& x, const Tensor& w) { return linear(x, w); }, {4}, {2, 4}),
      tape_ternary("linear of a transposed x",
                   [](const Tensor& x, const Tensor& w, const Tensor& b) { return linear(transpose(x, 0, 1), w, b); },
                   {4, 5}, {3, 4}, {3}),
      tape_ternary("linear, only W and b need grad",
                   [](const Tensor& x, const Tensor& w, const Tensor& b) { return linear(x, w, b); }, {5, 4}, {3, 4}, {3},
                   {false, true, true}),
      tape_ternary("linear, only x needs grad",
                   [](const Tensor& x, const Tensor& w, const Tensor& b) { return linear(x, w, b); }, {5, 4}, {3, 4}, {3},
                   {true, false, false}),
      // The MLP as one op, against linear, gelu, linear composed.
      with_composed(tape_row("linear_gelu_linear without b2", {{2, 3, 4}, {8, 4}, {8}, {5, 8}}, mlp_no_b2),
                    composed_no_b2),
      with_composed(tape_row("linear_gelu_linear without b2, x frozen", {{5, 4}, {6, 4}, {6}, {3, 6}}, mlp_no_b2,
                             Domain::Any, {false, true, true, true}),
                    composed_no_b2),
      with_composed(tape_row("linear_gelu_linear without b2, W1 frozen", {{5, 4}, {6, 4}, {6}, {3, 6}}, mlp_no_b2,
                             Domain::Any, {true, false, true, true}),
                    composed_no_b2),
      with_composed(tape_row("linear_gelu_linear without b2, W2 frozen", {{5, 4}, {6, 4}, {6}, {3, 6}}, mlp_no_b2,
                             Domain::Any, {true, true, true, false}),
                    composed_no_b2),
      with_composed(tape_row("linear_gelu_linear", {{5, 4}, {6, 4}, {6}, {3, 6}, {3}}, mlp),
                    [](const Tensors& x) { return linear(gelu(linear(x[0], x[1], x[2])), x[3], x[4]); }),
      with_composed(tape_row("linear_gelu_linear batched", {{2, 3, 4}, {8, 4}, {8}, {5, 8}, {5}}, mlp),
                    [](const Tensors& x) { return linear(gelu(linear(x[0], x[1], x[2])), x[3], x[4]); }),
      tape_row("linear_gelu_linear, only the weights and biases need grad", {{5, 4}, {6, 4}, {6}, {3, 6}, {3}}, mlp,
               Domain::Any, {false, true, true, true, true}),
      tape_row("linear_gelu_linear, W2 and b1 frozen", {{5, 4}, {6, 4}, {6}, {3, 6}, {3}}, mlp, Domain::Any,
               {true, true, false, false, true}),
      tape_row("linear_gelu_linear, only x needs grad", {{5, 4}, {6, 4}, {6}, {3, 6}, {3}}, mlp, Domain::Any,
               {true, false, false, false, false}),
      tape_row("linear_gelu_linear, only the proj needs grad", {{5, 4}, {6, 4}, {6}, {3, 6}, {3}}, mlp, Domain::Any,
               {false, false, false, true, true}),
  };
}

TEST_CASE("matmul: transposes, 1-D, batched, broadcast batch, strided; the tiled SGEMM on cuda") {
  run_cases(matmul_cases(), kDTypes);
}TEST_CASE("linear's fused GEMMs: dW with db, GELU with its pre-activation, dGELU with db; written and added") {
  run_cases(linear_fused_cases(), kDTypes);
}

TEST_CASE("matmul and linear tape ops: layouts, batches, bias, frozen inputs") {
  run_cases(matmul_tape_cases(), kDTypes);
}
}  // namespace
}  // namespace reel::op_table
