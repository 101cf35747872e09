// Flash-style attention: the fused kernels against a naive composed f64 reference
// (softmax(Q K^T scale + causal mask) V and its textbook backward) for T = 1, 7, 64, 129 and
// D = 1, 16, causal and not (Tq != Tk, Dv != D); backward against finite differences in f64; the
// causal mask (future keys/values never change earlier outputs); determinism across thread
// counts; bad shapes.
#include <cmath>

#include "kernels/nn_ops.h"
#include "testing.h"

using namespace reel;
using namespace reel::kernels;
using namespace reel::testing;

namespace {

struct AttnRef {
  std::vector<double> out, lse, dq, dk, dv;
};

// Materialises the whole score row: the composed reference the fused kernel must reproduce.
AttnRef attention_ref(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& dout, double scale,
                      bool causal) {
  const std::vector<double> Q = values(q), K = values(k), Vv = values(v), dO = values(dout);
  const int64_t Tq = q.size(-2), D = q.size(-1), Tk = k.size(-2), Dv = v.size(-1);
  const int64_t BH = q.numel() / (Tq * D);
  AttnRef r{std::vector<double>(BH * Tq * Dv, 0.0), std::vector<double>(BH * Tq, 0.0),
            std::vector<double>(Q.size(), 0.0), std::vector<double>(K.size(), 0.0),
            std::vector<double>(Vv.size(), 0.0)};
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
      r.lse[b * Tq + i] = m + std::log(sum);
      for (int64_t j = 0; j < Tk; ++j)
        for (int64_t d = 0; d < Dv; ++d) r.out[(b * Tq + i) * Dv + d] += P[j] * vb[j * Dv + d];
      // backward: dP = dO V^T, dS = P (dP - sum(P dP)), dQ = scale dS K, dK = scale dS^T Q, dV = P^T dO
      double Di = 0;
      for (int64_t j = 0; j < Tk; ++j) {
        for (int64_t d = 0; d < Dv; ++d) dP[j] += dob[i * Dv + d] * vb[j * Dv + d];
        Di += P[j] * dP[j];
      }
      for (int64_t j = 0; j < Tk; ++j) {
        const double dS = P[j] * (dP[j] - Di);
        for (int64_t d = 0; d < D; ++d) {
          r.dq[(b * Tq + i) * D + d] += scale * dS * kb[j * D + d];
          r.dk[(b * Tk + j) * D + d] += scale * dS * qb[i * D + d];
        }
        for (int64_t d = 0; d < Dv; ++d) r.dv[(b * Tk + j) * Dv + d] += P[j] * dob[i * Dv + d];
      }
    }
  }
  return r;
}

void check_against_ref(const Shape& qs, const Shape& ks, const Shape& vs, bool causal, DType dt, uint64_t seed) {
  Tensor q = uniform_f64(qs, seed, -2, 2).to(dt), k = uniform_f64(ks, seed + 1, -2, 2).to(dt);
  Tensor v = uniform_f64(vs, seed + 2).to(dt);
  Shape os = qs;
  os.back() = vs.back();
  Tensor dout = uniform_f64(os, seed + 3).to(dt);
  const double scale = 1 / std::sqrt(static_cast<double>(qs.back()));
  const AttnRef ref = attention_ref(q, k, v, dout, scale, causal);
  AttentionForward f = attention_forward(q, k, v, std::nullopt, causal);
  AttentionBackward g = attention_backward(dout, q, k, v, f.out, f.lse, std::nullopt, causal);
  const double tol = dt == DType::f32 ? 3e-5 : 1e-11;
  CHECK(f.out.shape() == os);
  check_close(f.out, ref.out, tol, tol);
  check_close(f.lse, ref.lse, tol, tol);
  check_close(g.dq, ref.dq, tol, tol);
  check_close(g.dk, ref.dk, tol, tol);
  check_close(g.dv, ref.dv, tol, tol);
}

}  // namespace

TEST_CASE("causal attention matches the naive reference for T = 1, 7, 64, 129 and D = 1, 16") {
  for (int64_t T : {1, 7, 64, 129})
    for (int64_t D : {1, 16})
      for (DType dt : {DType::f64, DType::f32}) {
        CAPTURE(T);
        CAPTURE(D);
        CAPTURE(dtype_name(dt));
        const Shape s = T > 64 ? Shape{1, 2, T, D} : Shape{2, 3, T, D};
        check_against_ref(s, s, s, true, dt, static_cast<uint64_t>(T * 100 + D));
      }
}

TEST_CASE("non-causal attention with Tq != Tk and Dv != D matches the naive reference") {
  for (DType dt : {DType::f64, DType::f32}) {
    check_against_ref({2, 5, 8}, {2, 70, 8}, {2, 70, 3}, false, dt, 7);    // (B, T, D): one batch dim
    check_against_ref({1, 1, 130, 4}, {1, 1, 65, 4}, {1, 1, 65, 5}, false, dt, 8);
  }
}

TEST_CASE("attention backward matches finite differences in f64") {
  struct Case {
    Shape q, k, v;
    bool causal;
  };
  for (const Case& c : std::vector<Case>{{{1, 2, 7, 4}, {1, 2, 7, 4}, {1, 2, 7, 4}, true},
                                         {{1, 1, 66, 2}, {1, 1, 66, 2}, {1, 1, 66, 2}, true},
                                         {{1, 3, 3}, {1, 9, 3}, {1, 9, 2}, false}}) {
    CAPTURE(shape_str(c.q));
    Tensor q = uniform_f64(c.q, 11, -2, 2), k = uniform_f64(c.k, 12, -2, 2), v = uniform_f64(c.v, 13);
    AttentionForward f = attention_forward(q, k, v, 0.8, c.causal);
    Tensor w = uniform_f64(f.out.shape(), 14);
    AttentionBackward g = attention_backward(w, q, k, v, f.out, f.lse, 0.8, c.causal);
    auto loss = [&] { return weighted_sum(attention_forward(q, k, v, 0.8, c.causal).out, w); };
    check_gradient("dq", q, g.dq, loss);
    check_gradient("dk", k, g.dk, loss);
    check_gradient("dv", v, g.dv, loss);
  }
}

TEST_CASE("causal mask: future keys and values never change earlier outputs") {
  const int64_t T = 129, t0 = 70;  // t0 sits inside the second 64-query tile
  Tensor q = uniform_f64({2, 2, T, 16}, 21), k = uniform_f64({2, 2, T, 16}, 22), v = uniform_f64({2, 2, T, 16}, 23);
  AttentionForward f = attention_forward(q, k, v);
  Tensor k2 = k.clone(), v2 = v.clone();
  k2.narrow(2, t0 + 1, T - t0 - 1).fill_(100.0);
  v2.narrow(2, t0 + 1, T - t0 - 1).fill_(-50.0);
  AttentionForward f2 = attention_forward(q, k2, v2);
  CHECK(bit_identical(f.out.narrow(2, 0, t0 + 1), f2.out.narrow(2, 0, t0 + 1)));
  CHECK(bit_identical(f.lse.narrow(2, 0, t0 + 1), f2.lse.narrow(2, 0, t0 + 1)));
  CHECK(!bit_identical(f.out.narrow(2, t0 + 1, 1), f2.out.narrow(2, t0 + 1, 1)));
  // Query 0 sees only key 0: its output is v[0].
  check_close(f.out.narrow(2, 0, 1), v.narrow(2, 0, 1), 1e-14, 1e-14);
}

TEST_CASE("attention is bit-identical across thread counts") {
  Tensor q = uniform_f64({2, 3, 100, 8}, 31).to(DType::f32), k = uniform_f64({2, 3, 100, 8}, 32).to(DType::f32);
  Tensor v = uniform_f64({2, 3, 100, 8}, 33).to(DType::f32), dout = uniform_f64({2, 3, 100, 8}, 34).to(DType::f32);
  std::vector<AttentionForward> fs;
  std::vector<AttentionBackward> gs;
  for_thread_counts({1, 2, 5}, [&] {
    fs.push_back(attention_forward(q, k, v));
    gs.push_back(attention_backward(dout, q, k, v, fs.back().out, fs.back().lse));
  });
  for (size_t i = 1; i < fs.size(); ++i) {
    CHECK(bit_identical(fs[i].out, fs[0].out));
    CHECK(bit_identical(gs[i].dq, gs[0].dq));
    CHECK(bit_identical(gs[i].dk, gs[0].dk));
    CHECK(bit_identical(gs[i].dv, gs[0].dv));
  }
}

TEST_CASE("bad attention inputs raise reel::Error naming op and shapes") {
  Tensor q = zeros({2, 3, 8, 4});
  CHECK_REEL_ERROR(attention_forward(q, zeros({2, 3, 8, 5}), q),
                   "attention_forward: q (2, 3, 8, 4), k (2, 3, 8, 5) and v (2, 3, 8, 4) do not match");
  CHECK_REEL_ERROR(attention_forward(q, zeros({2, 4, 8, 4}), zeros({2, 4, 8, 4})),
                   "attention_forward: q (2, 3, 8, 4), k (2, 4, 8, 4)");
  CHECK_REEL_ERROR(attention_forward(q, zeros({2, 3, 9, 4}), zeros({2, 3, 9, 4})),
                   "attention_forward: causal attention needs as many queries as keys: q (2, 3, 8, 4), k (2, 3, 9, 4)");
  CHECK_REEL_ERROR(attention_forward(q, q, zeros({3, 8, 4})), "must have one rank of at least 2");
  CHECK_REEL_ERROR(attention_forward(q, q.to(DType::f64), q), "attention_forward: dtypes differ: f32 and f64");
  AttentionForward f = attention_forward(q, q, q);
  CHECK_REEL_ERROR(attention_backward(zeros({2, 3, 8, 5}), q, q, q, f.out, f.lse),
                   "attention_backward: dout (2, 3, 8, 5), out (2, 3, 8, 4) and lse (2, 3, 8) do not match q");
}
