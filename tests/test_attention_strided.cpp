// The attention kernels on strided operands, on every device: q, k, v as head views of one
// (B, T, 3C) projection (split, view, transpose(1, 2), as nn/gpt.cpp's CausalSelfAttention makes
// them) are read in place, and out, dq, dk, dv come back as (B, T, H, D) memory seen as (B, H, T, D),
// so the model merges heads with a view. Values and gradients against the cpu on contiguous copies,
// f32 and f64, causal and not, Dv != D, Tq != Tk, operands of other layouts and ranks; then the
// autograd op in a GPT-style block, the gradient of the (B, T, 3C) projection on cuda against the cpu.
// The gradients of such q, k and v are the thirds of one (B, T, 3C) buffer, which split's backward
// hands on without concatenating.
#include <optional>
#include <vector>

#include "autograd/functions.h"
#include "autograd/nn_functions.h"
#include "autograd/tape.h"
#include "core/profile.h"
#include "kernels/attention.h"
#include "testing.h"

using namespace reel;
using namespace reel::testing;

namespace {
constexpr int64_t B = 2, H = 3, T = 37, D = 8, C = H * D;

double tol(DType dtype) { return dtype == DType::f32 ? 1e-5 : 1e-12; }

// A (B, T, 3C) projection's q, k and v as head views (B, H, T, D), strides (T 3C, D, 3C, 1)
// (for x of T rows; a narrowed x keeps its row stride).
struct Qkv {
  Tensor x, q, k, v;
};
Qkv qkv_views(const Tensor& x) {
  const int64_t t = x.size(1);
  const std::vector<Tensor> parts = split(x, {C, C, C}, -1);  // 3 x (B, T, C) views
  auto heads = [t](const Tensor& p) { return transpose(view(p, {B, t, H, D}), 1, 2); };
  return {x, heads(parts[0]), heads(parts[1]), heads(parts[2])};
}

// The strides of (B, T, H, cols) memory seen through transpose(1, 2) as (B, H, T, cols).
Shape merged_strides(int64_t t, int64_t cols) { return {t * H * cols, cols, H * cols, 1}; }

Tensor on(const Tensor& f64, DType dtype, Device device) { return f64.to(dtype).to(device); }
Tensor cpu_copy(const Tensor& t) { return t.to(Device::cpu()).contiguous(); }

// attention_forward and attention_backward on the operands' device as given against the cpu on
// contiguous copies of them; dout (B, H, Tq, Dv) is the transpose of (B, Tq, H, Dv) memory, as the
// gradient of a merged-heads output is. Returns the cuda results for stride checks.
struct Results {
  kernels::AttentionForward f;
  kernels::AttentionBackward g;
};
Results check_against_cpu(const Tensor& q, const Tensor& k, const Tensor& v, bool causal, uint64_t seed) {
  const DType dtype = q.dtype();
  const Device device = q.device();  // the device under test; the reference runs on the cpu
  const double atol = tol(dtype);
  const int64_t Tq = q.size(-2), Dv = v.size(-1);
  Shape dout_shape = v.shape();
  dout_shape[dout_shape.size() - 2] = Tq;
  Tensor dout = on(uniform_f64(dout_shape, seed), dtype, device);
  if (dout.dim() == 4) dout = on(uniform_f64({B, Tq, H, Dv}, seed), dtype, device).transpose(1, 2);

  Results r;
  r.f = kernels::attention_forward(q, k, v, std::nullopt, causal);
  r.g = kernels::attention_backward(dout, q, k, v, r.f.out, r.f.lse, std::nullopt, causal);
  const Tensor qc = cpu_copy(q), kc = cpu_copy(k), vc = cpu_copy(v);
  const kernels::AttentionForward f = kernels::attention_forward(qc, kc, vc, std::nullopt, causal);
  const kernels::AttentionBackward g =
      kernels::attention_backward(cpu_copy(dout), qc, kc, vc, f.out, f.lse, std::nullopt, causal);
  CHECK(r.f.out.device() == device);
  check_close(r.f.out, f.out, 0.0, atol);
  check_close(r.f.lse, f.lse, 0.0, atol);
  check_close(r.g.dq, g.dq, 0.0, atol);
  check_close(r.g.dk, g.dk, 0.0, atol);
  check_close(r.g.dv, g.dv, 0.0, atol);
  return r;
}
}  // namespace

TEST_CASE("attention reads head views of a qkv projection and writes merged-heads layouts") {
  for (Device device : testing::devices()) {
    CAPTURE(device);
  for (DType dtype : {DType::f32, DType::f64}) {
    for (bool causal : {true, false}) {
      CAPTURE(dtype_name(dtype));
      CAPTURE(causal);
      const Qkv a = qkv_views(on(uniform_f64({B, T, 3 * C}, 1), dtype, device));
      REQUIRE(a.q.strides() == Shape{T * 3 * C, D, 3 * C, 1});  // views, not copies
      const Results r = check_against_cpu(a.q, a.k, a.v, causal, 2);
      CHECK(r.f.out.strides() == merged_strides(T, D));
      CHECK(r.f.lse.is_contiguous());
      // The gradients are packed like q, k and v: the thirds of one (B, T, 3C) buffer.
      for (const Tensor* g : {&r.g.dq, &r.g.dk, &r.g.dv}) {
        CHECK(g->strides() == a.q.strides());
        CHECK(g->storage() == r.g.dq.storage());
      }
      CHECK(r.g.dk.offset() == r.g.dq.offset() + C);
      CHECK(r.g.dv.offset() == r.g.dq.offset() + 2 * C);
    }
  }
  }
}

TEST_CASE("attention's q, k, v gradients reach the qkv projection with no concatenation") {
  for (Device device : testing::devices()) {
    CAPTURE(device);
    const Tensor w = on(uniform_f64({3 * C, C}, 31), DType::f64, device);
    const Tensor x = on(uniform_f64({B, T, C}, 32), DType::f64, device);
    const Tensor g = on(uniform_f64({B, T, C}, 33), DType::f64, device);
    w.set_requires_grad();
    auto block = [&](const Tensor& weight, bool fused) {  // CausalSelfAttention's heads, without c_proj
      const Qkv a = qkv_views(linear(x, weight));
      const Tensor y = fused ? attention(a.q, a.k, a.v, true) : attention_composed(a.q, a.k, a.v, true);
      return reshape(transpose(y, 1, 2), {B, T, C});
    };
    Profiler prof;
    autograd::backward(block(w, true), g);
    prof.stop();
    int split_kernels = 0;
    for (const profile::KernelRecord& k : prof.kernels()) split_kernels += k.op == "split" && k.op_backward;
    CHECK(split_kernels == 0);  // the packed gradient is handed on as it is
    const Tensor fused_grad = w.grad().clone();
    const Tensor w2 = w.detach().clone();
    w2.set_requires_grad();
    autograd::backward(block(w2, false), g);  // the composed reference, whose split concatenates
    check_close(fused_grad, w2.grad(), 0.0, tol(DType::f64));
  }
}

TEST_CASE("attention with Dv != D: v a narrowed head view of its own projection") {
  for (Device device : testing::devices()) {
    CAPTURE(device);
  const int64_t Dv = 5;
  for (DType dtype : {DType::f32, DType::f64}) {
    for (bool causal : {true, false}) {
      CAPTURE(dtype_name(dtype));
      CAPTURE(causal);
      const Qkv a = qkv_views(on(uniform_f64({B, T, 3 * C}, 3), dtype, device));
      // (B, T, H, Dv + 3) narrowed to Dv: strides (T H (Dv + 3), Dv + 3, H (Dv + 3), 1).
      const Tensor v = on(uniform_f64({B, T, H, Dv + 3}, 4), dtype, device).narrow(3, 1, Dv).transpose(1, 2);
      const Results r = check_against_cpu(a.q, a.k, v, causal, 5);
      CHECK(r.f.out.shape() == Shape{B, H, T, Dv});
      CHECK(r.f.out.strides() == merged_strides(T, Dv));
      CHECK(r.g.dq.strides() == merged_strides(T, D));
      CHECK(r.g.dv.strides() == merged_strides(T, Dv));
    }
  }
  }
}

TEST_CASE("attention on other layouts: Tq != Tk, contiguous, last dim strided, rank 3") {
  for (Device device : testing::devices()) {
    CAPTURE(device);
  const int64_t Tk = 20;
  for (DType dtype : {DType::f32, DType::f64}) {
    CAPTURE(dtype_name(dtype));
    // Contiguous q (B, H, T, D) against k, v head views of a (B, Tk, 3C) projection; full attention.
    const Qkv kv = qkv_views(on(uniform_f64({B, T, 3 * C}, 6), dtype, device).narrow(1, 0, Tk));
    const Tensor q = on(uniform_f64({B, H, T, D}, 7), dtype, device);
    Results r = check_against_cpu(q, kv.k, kv.v, false, 8);
    CHECK(r.g.dk.strides() == merged_strides(Tk, D));
    // q with stride D along its last dim (a transposed (B, H, D, T) tensor): copied, same values.
    const Tensor qt = on(uniform_f64({B, H, D, T}, 9), dtype, device).transpose(2, 3);
    REQUIRE(qt.stride(3) != 1);
    check_against_cpu(qt, kv.k, kv.v, false, 10);
    // Rank 3, (BH, T, D): one batch dim; the outputs keep their shapes.
    const Tensor q3 = on(uniform_f64({B * H, T, D}, 11), dtype, device);
    const Tensor k3 = on(uniform_f64({B * H, T, D}, 12), dtype, device);
    const Tensor v3 = on(uniform_f64({B * H, T, D}, 13), dtype, device);
    r = check_against_cpu(q3, k3, v3, true, 14);
    CHECK(r.f.out.shape() == Shape{B * H, T, D});
    CHECK(r.g.dq.shape() == Shape{B * H, T, D});
  }
  }
}

TEST_CASE("attention op in a GPT-style block: the qkv projection's gradient on cuda matches the cpu") {
  for (DType dtype : {DType::f32, DType::f64}) {
    CAPTURE(dtype_name(dtype));
    const Tensor x64 = uniform_f64({B, T, 3 * C}, 21), w64 = uniform_f64({B, T, C}, 22);
    std::vector<Tensor> ys, grads;
    if (!cuda_available()) return;
    for (Device device : {Device::cpu(), Device::cuda(0)}) {
      const Tensor x = on(x64, dtype, device);
      x.set_requires_grad();
      const Qkv a = qkv_views(x);
      const Tensor y = attention(a.q, a.k, a.v, true);  // (B, H, T, D)
      CHECK(y.strides() == merged_strides(T, D));
      const Tensor merged = reshape(transpose(y, 1, 2), {B, T, C});
      autograd::backward(merged, on(w64, dtype, device));
      ys.push_back(merged.detach());
      grads.push_back(x.grad());
    }
    REQUIRE(grads[0].defined());
    REQUIRE(grads[1].defined());
    CHECK(grads[1].device() == Device::cuda(0));
    check_close(ys[1], ys[0], 0.0, tol(dtype));
    check_close(grads[1], grads[0], 0.0, tol(dtype));
  }
}
