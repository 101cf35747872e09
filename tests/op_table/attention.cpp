// tests/op_table/attention.cpp: the op table's attention family. Kernel rows: the fused (flash)
// attention forward and backward for T = 1, 7, 64, 129, D up to 128, Tq != Tk, Dv != D, causal and
// not, against the textbook f64 reference. Tape rows: attention, attention_composed and attention
// written out as q k^T -> softmax -> v.
#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include "autograd/functions.h"
#include "autograd/nn_functions.h"
#include "kernels/ops.h"
#include "op_table.h"

namespace reel::op_table {
namespace {

using namespace reel::testing;

// The dtypes every row of this family runs in (rows that name their own keep them): one entry to add.
// bf16 and f16: the fused kernels widen the 16-bit operands to f32, compute in f32 and round each of
// out, dq, dk, dv once (lse stays f32); tolerances in with_16bit below.
const std::vector<DType> kDTypes = {DType::f32, DType::f64, DType::bf16, DType::f16};
// The tape rows need the elementwise and reduction families in 16 bits too (the runner's loss
// sum(w * f(x)), attention_composed's softmax); they run in f32 and f64 until those are ported.
const std::vector<DType> kTapeDTypes = {DType::f32, DType::f64};

// Tolerances of the kernel rows at bf16 and f16 (u = 2^-8, 2^-11: half an ulp, relative). The
// runner rounds the inputs to the dtype before the f64 reference sees them, so the forward's out
// is off by its one rounding (u |ref|) plus the f32 computation (the f32 atol); lse is f32 and gets
// the f32 tolerance. The backward reads out as rounded to 16 bits: Di = rowsum(dout * out) is off by
// up to u sum |dout out| (about u Dv |dout| |v|, with |dout|, |v| <= 1 here), and every dS_ij by P_ij
// times that, so dq (scale sum_j dS_ij K_j, |K| <= 2) and dk carry an absolute error of a few u
// where the true gradient cancels to near 0: an atol of 8u (the rows' Dv <= 128 sums stay below it
// as P sums to 1 over a row). dv = P^T dout does not read out: u |ref| plus the f32 atol. Against
// the CPU (`device`), both sides round an f32 result once but from sums in another order, so one
// ulp (2u relative) apart at most, plus the f32 atols.
Tols with_16bit(Tols t, double u_atol_bf16, double u_atol_f16, bool device) {
  const double k = device ? 2 : 1;
  t.by_dtype.push_back({DType::bf16, Tol{k * 0x1p-8, k * u_atol_bf16}});
  t.by_dtype.push_back({DType::f16, Tol{k * 0x1p-11, k * u_atol_f16}});
  return t;
}

// ==== attention ====================================================================================

// out, lse, dq, dk, dv of softmax(Q K^T scale + causal mask) V and its textbook backward, the whole
// score row materialised: the composed reference the fused kernels must reproduce.
Values attention_ref(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& dout, double scale,
                     bool causal) {
  const std::vector<double> Q = values(q), K = values(k), Vv = values(v), dO = values(dout);
  const int64_t Tq = q.size(-2), D = q.size(-1), Tk = k.size(-2), Dv = v.size(-1);
  const int64_t BH = q.numel() / (Tq * D);
  Values r{std::vector<double>(BH * Tq * Dv, 0.0), std::vector<double>(BH * Tq, 0.0),
           std::vector<double>(Q.size(), 0.0), std::vector<double>(K.size(), 0.0), std::vector<double>(Vv.size(), 0.0)};
  for (int64_t b = 0; b < BH; ++b) {
    const double* qb = &Q[b * Tq * D];
    const double* kb = &K[b * Tk * D];
    const double* vb = &Vv[b * Tk * Dv];
    const double* dob = &dO[b * Tq * Dv];
    for (int64_t i = 0; i < Tq; ++i) {
      std::vector<double> P(Tk, 0.0), dP(Tk, 0.0);
      double m = -INFINITY;
      for (int64_t j = 0; j < Tk; ++j) {
        double s = 0;
        for (int64_t d = 0; d < D; ++d) s += qb[i * D + d] * kb[j * D + d];
        P[j] = (causal && j > i) ? -INFINITY : s * scale;
        m = std::max(m, P[j]);
      }
      double sum = 0;
      for (int64_t j = 0; j < Tk; ++j) sum += (P[j] = std::exp(P[j] - m));
      for (int64_t j = 0; j < Tk; ++j) P[j] /= sum;
      r[1][b * Tq + i] = m + std::log(sum);
      for (int64_t j = 0; j < Tk; ++j)
        for (int64_t d = 0; d < Dv; ++d) r[0][(b * Tq + i) * Dv + d] += P[j] * vb[j * Dv + d];
      // backward: dP = dO V^T, dS = P (dP - sum(P dP)), dQ = scale dS K, dK = scale dS^T Q, dV = P^T dO
      double Di = 0;
      for (int64_t j = 0; j < Tk; ++j) {
        for (int64_t d = 0; d < Dv; ++d) dP[j] += dob[i * Dv + d] * vb[j * Dv + d];
        Di += P[j] * dP[j];
      }
      for (int64_t j = 0; j < Tk; ++j) {
        const double dS = P[j] * (dP[j] - Di);
        for (int64_t d = 0; d < D; ++d) {
          r[2][(b * Tq + i) * D + d] += scale * dS * kb[j * D + d];
          r[3][(b * Tk + j) * D + d] += scale * dS * qb[i * D + d];
        }
        for (int64_t d = 0; d < Dv; ++d) r[4][(b * Tk + j) * Dv + d] += P[j] * dob[i * Dv + d];
      }
    }
  }
  return r;
}

std::vector<OpCase> attention_cases() {
  using namespace kernels;
  struct Config {
    Shape q, k, v;
    bool causal;
    std::optional<double> scale;
    bool fd;
  };
  std::vector<Config> configs;
  for (int64_t T : {1, 7, 64, 129}) configs.push_back({{1, 2, T, 24}, {1, 2, T, 24}, {1, 2, T, 24}, true, {}, false});
  for (int64_t T : {1, 7, 64, 129})
    for (int64_t D : {1, 16}) {
      const Shape s = T > 64 ? Shape{1, 2, T, D} : Shape{2, 3, T, D};
      configs.push_back({s, s, s, true, {}, false});
    }
  configs.push_back({{2, 1, 33, 16}, {2, 1, 33, 16}, {2, 1, 33, 16}, true, {}, false});
  configs.push_back({{1, 1, 7, 128}, {1, 1, 7, 128}, {1, 1, 7, 128}, true, {}, false});  // the shared-memory budget
  configs.push_back({{2, 5, 8}, {2, 41, 8}, {2, 41, 12}, false, {}, false});             // Tq != Tk, Dv != D
  configs.push_back({{1, 3, 9, 33}, {1, 3, 9, 33}, {1, 3, 9, 65}, false, {}, false});
  configs.push_back({{2, 5, 8}, {2, 70, 8}, {2, 70, 3}, false, {}, false});  // (B, T, D): one batch dim
  configs.push_back({{1, 1, 130, 4}, {1, 1, 65, 4}, {1, 1, 65, 5}, false, {}, false});
  configs.push_back({{1, 2, 7, 4}, {1, 2, 7, 4}, {1, 2, 7, 4}, true, 0.8, true});
  configs.push_back({{1, 1, 66, 2}, {1, 1, 66, 2}, {1, 1, 66, 2}, true, 0.8, true});
  configs.push_back({{1, 3, 3}, {1, 9, 3}, {1, 9, 2}, false, 0.8, true});
  std::vector<OpCase> cases;
  for (const Config& c : configs) {
    Shape os = c.q;
    os.back() = c.v.back();
    OpCase row("attention q " + shape_str(c.q) + " k " + shape_str(c.k) + " v " + shape_str(c.v) +
                   (c.causal ? " causal" : " full") + (c.scale ? " scale " + str(*c.scale) : ""),
               [c, os](Generator& g) {
                 return Tensors{uniform_f64(g, c.q, -2, 2), uniform_f64(g, c.k, -2, 2), uniform_f64(g, c.v), uniform_f64(g, os)};
               },
               [c, os](const Tensors& in, Device) {
                 const AttentionForward f = attention_forward(in[0], in[1], in[2], c.scale, c.causal);
                 CHECK(f.out.shape() == os);
                 const AttentionBackward b =
                     attention_backward(in[3], in[0], in[1], in[2], f.out, f.lse, c.scale, c.causal);
                 return Tensors{f.out, f.lse, b.dq, b.dk, b.dv};
               },
               {with_16bit(tols(2e-5), 2e-5, 2e-5, true), tols(2e-5),
                with_16bit(tols(1e-4, 1e-11), 8 * 0x1p-8, 8 * 0x1p-11, true)});
    row.with_reference(
        [c](const Tensors& in) {
          const double scale = c.scale ? *c.scale : 1 / std::sqrt(static_cast<double>(c.q.back()));
          return attention_ref(in[0], in[1], in[2], in[3], scale, c.causal);
        },
        {with_16bit(tols(3e-5, 1e-11), 3e-5, 3e-5, false), tols(3e-5, 1e-11),
         with_16bit(tols(3e-5, 1e-11), 8 * 0x1p-8, 8 * 0x1p-11, false)});
    if (c.fd) row.with_finite_diff({0, 3, {{0, 2}, {1, 3}, {2, 4}}});
    cases.push_back(row);
  }
  return cases;
}

std::vector<OpCase> attention_tape_cases() {
  return {
      tape_row("attention (q k^T -> softmax -> v)", {{2, 3, 4}, {2, 5, 4}, {2, 5, 3}},
               [](const Tensors& x) { return matmul(softmax_last(matmul(x[0], x[1], false, true) * 0.5), x[2]); }),
      tape_ternary("attention causal",
                   [](const Tensor& q, const Tensor& k, const Tensor& v) { return attention(q, k, v); }, {1, 2, 5, 4},
                   {1, 2, 5, 4}, {1, 2, 5, 4}),
      tape_ternary("attention full, Dv != D, scale 0.3",
                   [](const Tensor& q, const Tensor& k, const Tensor& v) { return attention(q, k, v, false, 0.3); },
                   {2, 1, 3, 4}, {2, 1, 6, 4}, {2, 1, 6, 3}),
      tape_ternary("attention causal, only k needs grad",
                   [](const Tensor& q, const Tensor& k, const Tensor& v) { return attention(q, k, v); }, {2, 3, 4},
                   {2, 3, 4}, {2, 3, 2}, {false, true, false}),
      tape_ternary("attention_composed causal",
                   [](const Tensor& q, const Tensor& k, const Tensor& v) { return attention_composed(q, k, v); },
                   {1, 2, 5, 4}, {1, 2, 5, 4}, {1, 2, 5, 4}),
      tape_ternary("attention_composed full",
                   [](const Tensor& q, const Tensor& k, const Tensor& v) {
                     return attention_composed(q, k, v, false, 0.3);
                   },
                   {2, 1, 3, 4}, {2, 1, 6, 4}, {2, 1, 6, 3}),
  };
}

TEST_CASE("flash attention: T = 1, 7, 64, 129, D up to 128, causal and not") { run_cases(attention_cases(), kDTypes); }
TEST_CASE("attention tape ops: fused, composed, frozen inputs") { run_cases(attention_tape_cases(), kTapeDTypes); }
}  // namespace
}  // namespace reel::op_table
