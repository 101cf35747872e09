// Flash-style attention, the edge cases: the causal mask (future keys/values never change earlier
// outputs), determinism across thread counts (f32, bf16, f16), bad shapes. (The fused kernels against a naive
// composed f64 reference, softmax(Q K^T scale + causal mask) V and its textbook backward, for
// T = 1, 7, 64, 129 and D = 1, 16, causal and not (Tq != Tk, Dv != D), and the backward against
// finite differences, on every device, are rows of tests/op_table/attention.cpp.)
#include "kernels/ops.h"
#include "testing.h"

using namespace reel;
using namespace reel::kernels;
using namespace reel::testing;

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

// Forward and backward on 1, 2 and 5 threads give the same bits (out, lse, dq, dk, dv).
static void check_same_bits_across_threads(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& dout) {
  std::vector<AttentionForward> fs;
  std::vector<AttentionBackward> gs;
  for_thread_counts({1, 2, 5}, [&] {
    fs.push_back(attention_forward(q, k, v));
    gs.push_back(attention_backward(dout, q, k, v, fs.back().out, fs.back().lse));
  });
  for (size_t i = 1; i < fs.size(); ++i) {
    CHECK(bit_identical(fs[i].out, fs[0].out));
    CHECK(bit_identical(fs[i].lse, fs[0].lse));
    CHECK(bit_identical(gs[i].dq, gs[0].dq));
    CHECK(bit_identical(gs[i].dk, gs[0].dk));
    CHECK(bit_identical(gs[i].dv, gs[0].dv));
  }
}

TEST_CASE("attention is bit-identical across thread counts") {
  Tensor q = uniform_f64({2, 3, 100, 8}, 31).to(DType::f32), k = uniform_f64({2, 3, 100, 8}, 32).to(DType::f32);
  Tensor v = uniform_f64({2, 3, 100, 8}, 33).to(DType::f32), dout = uniform_f64({2, 3, 100, 8}, 34).to(DType::f32);
  check_same_bits_across_threads(q, k, v, dout);
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

TEST_CASE("bf16 and f16 attention on the cpu: within an ulp of the f32 kernels on the same values") {
  // Widths past one and two 16-lane chunks (D 24, Dv 40), T not a multiple of the row block, causal
  // and not (Tq != Tk). The f32 backward gets the 16-bit out (widened) and lse, so the two differ only
  // in the order of their f32 sums and the 16-bit path's one rounding.
  struct Case { int64_t Tq, Tk; bool causal; };
  for (const Case c : {Case{70, 70, true}, Case{37, 45, false}}) {
    for (DType dt : {DType::bf16, DType::f16}) {
      CAPTURE(dt);
      CAPTURE(c.Tk);
      const double u = dt == DType::bf16 ? 0x1p-8 : 0x1p-11;
      Tensor q = uniform_f64({2, 3, c.Tq, 24}, 51).to(dt), k = uniform_f64({2, 3, c.Tk, 24}, 52).to(dt);
      Tensor v = uniform_f64({2, 3, c.Tk, 40}, 53).to(dt), dout = uniform_f64({2, 3, c.Tq, 40}, 54).to(dt);
      const AttentionForward f = attention_forward(q, k, v, std::nullopt, c.causal);
      const AttentionBackward g = attention_backward(dout, q, k, v, f.out, f.lse, std::nullopt, c.causal);
      const Tensor q32 = q.to(DType::f32), k32 = k.to(DType::f32), v32 = v.to(DType::f32);
      const AttentionForward f32 = attention_forward(q32, k32, v32, std::nullopt, c.causal);
      check_close(f.out, f32.out.to(dt), 2 * u, 1e-6);
      check_close(f.lse, f32.lse, 1e-6, 1e-6);
      const AttentionBackward g32 = attention_backward(dout.to(DType::f32), q32, k32, v32, f.out.to(DType::f32), f.lse,
                                                       std::nullopt, c.causal);
      check_close(g.dq, g32.dq.to(dt), 2 * u, 1e-5);
      check_close(g.dk, g32.dk.to(dt), 2 * u, 1e-5);
      check_close(g.dv, g32.dv.to(dt), 2 * u, 1e-5);
    }
  }
}

TEST_CASE("bf16 and f16 attention: lse stays f32, outputs in the input dtype, cuda within an ulp of cpu") {
  for (DType dt : {DType::bf16, DType::f16}) {
    CAPTURE(dt);
    Tensor q = uniform_f64({2, 2, 40, 16}, 41).to(dt), k = uniform_f64({2, 2, 40, 16}, 42).to(dt);
    Tensor v = uniform_f64({2, 2, 40, 16}, 43).to(dt), dout = uniform_f64({2, 2, 40, 16}, 44).to(dt);
    const AttentionForward f = attention_forward(q, k, v);
    CHECK(f.out.dtype() == dt);
    CHECK(f.lse.dtype() == DType::f32);
    const AttentionBackward g = attention_backward(dout, q, k, v, f.out, f.lse);
    CHECK((g.dq.dtype() == dt && g.dk.dtype() == dt && g.dv.dtype() == dt));
    // The f32 run on the same (exactly widened) values: the cpu's 16-bit kernels compute in f32 too,
    // in their own order of summation (kernels/cpu/attention.cpp), and round each output once, so out
    // is within an ulp of the f32 result rounded (2u relative), lse within a few f32 ulps.
    const double u = dt == DType::bf16 ? 0x1p-8 : 0x1p-11;
    const Tensor q32 = q.to(DType::f32), k32 = k.to(DType::f32), v32 = v.to(DType::f32);
    const AttentionForward f32 = attention_forward(q32, k32, v32);
    check_close(f.out, f32.out.to(dt), 2 * u, 1e-6);
    check_close(f.lse, f32.lse, 1e-6, 1e-6);
    check_same_bits_across_threads(q, k, v, dout);  // as the f32 kernels are
    // A saved lse must be f32 for 16-bit q.
    CHECK_REEL_ERROR(attention_backward(dout, q, k, v, f.out, f.lse.to(dt)),
                     dt == DType::bf16 ? "attention_backward: lse (2, 2, 40) is bf16" : "attention_backward: lse (2, 2, 40) is f16");
    CHECK_REEL_ERROR(attention_forward(q, k.to(DType::f32), v), "attention_forward: dtypes differ");
    if (cuda_available()) {
      const Device cuda = Device::cuda(0);
      const AttentionForward fc = attention_forward(q.to(cuda), k.to(cuda), v.to(cuda));
      CHECK(fc.lse.dtype() == DType::f32);
      check_close(fc.out.to(Device::cpu()), f.out, 2 * u, 1e-5);
      check_close(fc.lse.to(Device::cpu()), f.lse, 1e-5, 1e-5);
      const AttentionBackward gc =
          attention_backward(dout.to(cuda), q.to(cuda), k.to(cuda), v.to(cuda), fc.out, fc.lse);
      check_close(gc.dv.to(Device::cpu()), g.dv, 2 * u, 1e-5);
      check_close(gc.dq.to(Device::cpu()), g.dq, 2 * u, 16 * u);
      check_close(gc.dk.to(Device::cpu()), g.dk, 2 * u, 16 * u);
    }
  }
}
