// tests/test_matmul_group.cpp: kernels::matmul_group_into_ (a few 2-D GEMMs in one call:
// cublasGemmGroupedBatchedEx on cuda) and the backward rules that use it. Each product is the
// separate matmul_into_ call's, bit for bit, on the cpu and the emulated cuda, in every dtype, both
// transposes and accumulate; the group is ONE launch on cuda and on meta (separate GEMMs under a CUDA
// graph capture); bad inputs are a reel::Error naming the op. Linear's backward without a bias
// gradient, and linear_gelu_linear's with and without b2, make the launches expected and the
// gradients of the ungrouped composition, bit for bit; linear_gelu_linear without b2 is linear,
// gelu, linear.
#include <cstring>
#include <string>
#include <vector>

#include "autograd/functions.h"
#include "autograd/nn_functions.h"
#include "autograd/tape.h"
#include "core/graph.h"
#include "kernels/ops.h"
#include "testing.h"

using namespace reel;
using profile::KernelRecord;

namespace {

bool same_bytes(const Tensor& a, const Tensor& b) {
  const Tensor x = a.to(Device::cpu()).contiguous(), y = b.to(Device::cpu()).contiguous();
  return x.shape() == y.shape() && x.dtype() == y.dtype() && std::memcmp(x.data_ptr(), y.data_ptr(), x.nbytes()) == 0;
}

Tensor rnd(const Shape& shape, DType dtype, Device device, uint64_t seed) {
  Generator g(seed);
  return randn(shape, DType::f32, Device::cpu(), &g).to(dtype).to(device);
}

int64_t launches_of(const Profiler& p, const std::string& kernel, int64_t* records = nullptr) {
  int64_t n = 0, r = 0;
  for (const KernelRecord& k : p.kernels())
    if (k.kernel == kernel) n += k.launches, ++r;
  if (records) *records = r;
  return n;
}

int64_t all_launches(const Profiler& p) {
  int64_t n = 0;
  for (const KernelRecord& k : p.kernels()) n += k.launches;
  return n;
}

const std::vector<DType> kDTypes = {DType::f32, DType::f64, DType::bf16, DType::f16};

}  // namespace

TEST_CASE("matmul_group_into_: each product is matmul_into_'s, bit for bit") {
  for (const Device device : testing::devices())
    for (const DType dt : kDTypes)
      for (const bool tf32 : {false, true}) {
        if (tf32 && (dt != DType::f32 || !device.is_cuda())) continue;
        CAPTURE(device);
        CAPTURE(dt);
        CAPTURE(tf32);
        set_allow_tf32(tf32);
        for (const bool acc : {false, true})
          for (const int count : {2, 3}) {
            CAPTURE(acc);
            CAPTURE(count);
            // linear's shapes: dX (N, in) = G (N, out) W (out, in); dW (out, in) = G^T X (a flag);
            // a third with both flags and a strided (sliced) operand.
            const int64_t N = 37, in = 53, out = 41;
            const Tensor g = rnd({N, out}, dt, device, 1), w = rnd({out, in}, dt, device, 2),
                         x = rnd({N, in}, dt, device, 3);
            const Tensor p = rnd({in, 2 * N}, dt, device, 4).slice(1, 0, 2 * N, 2);  // (in, N), strided
            const Tensor q = rnd({29, in}, dt, device, 5);
            std::vector<kernels::GemmInto> gemms = {
                {rnd({N, in}, dt, device, 6), g, w, false, false, acc},
                {rnd({out, in}, dt, device, 7), g, x, true, false, acc}};
            if (count == 3) gemms.push_back({rnd({N, 29}, dt, device, 8), p, q, true, true, acc});
            std::vector<Tensor> want;
            for (const kernels::GemmInto& m : gemms) {
              want.push_back(m.out.clone());
              kernels::matmul_into_(want.back(), m.a, m.b, m.transpose_a, m.transpose_b, m.accumulate);
            }
            std::vector<uint64_t> versions;
            for (const kernels::GemmInto& m : gemms) versions.push_back(m.out.version());
            kernels::matmul_group_into_(gemms);
            for (size_t i = 0; i < gemms.size(); ++i) {
              CAPTURE(i);
              CHECK(same_bytes(gemms[i].out, want[i]));
              CHECK(gemms[i].out.version() > versions[i]);
            }
          }
        set_allow_tf32(false);
      }
}

TEST_CASE("matmul_group_into_ is one launch on cuda and on meta; separate GEMMs under a graph capture") {
  std::vector<Device> devs{Device::meta()};
  if (cuda_available()) devs.push_back(Device::cuda(0));
  for (const Device device : devs) {
    CAPTURE(device);
    const Tensor a = rnd({8, 6}, DType::f32, device, 1), b = rnd({6, 5}, DType::f32, device, 2);
    const Tensor o1 = empty({8, 5}, DType::f32, device), o2 = empty({6, 6}, DType::f32, device),
                 o3 = empty({5, 5}, DType::f32, device);
    Profiler prof;
    kernels::matmul_group_into_({{o1, a, b}, {o2, a, a, true, false, false}, {o3, b, b, true, false, false}});
    prof.stop();
    int64_t records = 0;
    CHECK(launches_of(prof, "matmul_group", &records) == 1);
    CHECK(records == 1);
    CHECK(all_launches(prof) == 1);
  }
  if (!cuda_available()) return;
  // Under a capture the ring's slots would be rewritten before a replay reads them: two GEMMs,
  // whose replay gives the same values as the eager group.
  const Device cuda = Device::cuda(0);
  const Tensor a = rnd({8, 6}, DType::f32, cuda, 1), b = rnd({6, 5}, DType::f32, cuda, 2);
  const Tensor o1 = empty({8, 5}, DType::f32, cuda), o2 = empty({6, 6}, DType::f32, cuda);
  const auto run = [&] { kernels::matmul_group_into_({{o1, a, b}, {o2, a, a, true, false, false}}); };
  run();
  const Tensor e1 = o1.clone(), e2 = o2.clone();
  o1.fill_(0.0), o2.fill_(0.0);
  CudaGraph graph;
  graph.capture(cuda, run);
  CHECK(graph.nodes() == 2);  // the two GEMMs apart
  graph.replay();
  CHECK(same_bytes(o1, e1));
  CHECK(same_bytes(o2, e2));
}

TEST_CASE("matmul_group_into_: bad inputs are a reel::Error naming the op") {
  const Tensor a = randn({4, 3}), b = randn({3, 5}), o = empty({4, 5});
  const auto throws = [](const std::vector<kernels::GemmInto>& g, const char* what) {
    CAPTURE(what);
    try {
      kernels::matmul_group_into_(g);
      FAIL("no error");
    } catch (const Error& e) {
      CHECK(std::string(e.what()).find("matmul_group_into_") != std::string::npos);
    }
  };
  throws({}, "no products");
  throws({{o, a, b}, {o.clone(), a, b}, {o.clone(), a, b}, {o.clone(), a, b}}, "four products");
  throws({{o, a, b}, {empty({4, 5}, DType::f64), a.to(DType::f64), b}}, "mixed dtypes");
  throws({{o, a, b}, {empty({4, 5}), a, randn({4, 5})}}, "inner dims");
  throws({{o, a, b}, {empty({5, 4}), a, b}}, "out shape");
  throws({{o, a, b}, {empty({5, 4}).transpose(0, 1), a, b}}, "out not contiguous");
  throws({{o, a, b}, {empty({4, 5}), randn({4}), b}}, "1-D operand");
  throws({{o, a, b}, {empty({4, 5}), o.view({4, 5}).slice(1, 0, 3), b}}, "an out read by another product");
  throws({{o, a, b}, {o, a, b}}, "one out twice");
  throws({{o, a, b}, {Tensor(), a, b}}, "undefined");
  if (cuda_available())
    throws({{o, a, b}, {empty({4, 5}, DType::f32, Device::cuda(0)), a.to(Device::cuda(0)), b.to(Device::cuda(0))}},
           "mixed devices");
}

TEST_CASE("Linear without a bias gradient: dX and dW in one grouped GEMM, the ungrouped bits") {
  std::vector<Device> devs = testing::devices();
  for (const Device device : devs)
    for (const DType dt : kDTypes) {
      CAPTURE(device);
      CAPTURE(dt);
      const int64_t in = 12, out = 7;
      const Tensor x = rnd({3, 5, in}, dt, device, 1).set_requires_grad(true);
      const Tensor w = rnd({out, in}, dt, device, 2).set_requires_grad(true);
      const Tensor r = rnd({3, 5, out}, dt, device, 3);  // the output gradient
      const Tensor grad0 = rnd({out, in}, dt, device, 4);
      w.set_grad(grad0.clone());  // an existing .grad: dW accumulates into it, grouped with dX
      Profiler prof;
      autograd::backward(linear(x, w), r);  // G = r
      prof.stop();
      if (device.is_cuda()) {
        CHECK(launches_of(prof, "matmul_group") == 1);
        CHECK(launches_of(prof, "matmul") == 1);  // the forward's alone
      }
      // The ungrouped composition: dX = G W, dW += G^T X.
      const Tensor g2 = r.reshape({-1, out}), x2 = x.detach().reshape({-1, in});
      const Tensor dx = kernels::matmul(g2, w.detach()).view(x.shape());
      const Tensor dw = grad0.clone();
      kernels::matmul_into_(dw, g2, x2, true, false, true);
      CHECK(same_bytes(x.grad(), dx));
      CHECK(same_bytes(w.grad(), dw));
      // No .grad yet (the first backward, or FSDP's gathered weight): the separate GEMMs, W
      // released before dW exists; the same bits.
      const Tensor w2 = w.detach().clone().set_requires_grad(true), x3 = x.detach().clone().set_requires_grad(true);
      Profiler prof2;
      autograd::backward(linear(x3, w2), r);
      prof2.stop();
      CHECK(launches_of(prof2, "matmul_group") == 0);
      CHECK(same_bytes(x3.grad(), dx));
      const Tensor dw_fresh = kernels::matmul(g2, x2, true, false);
      CHECK(same_bytes(w2.grad(), dw_fresh));
    }
}

namespace {
// linear_gelu_linear's gradients by the ungrouped kernels: dpre (and db1) by linear_dgelu, dW2 (and
// db2) by linear_grad_into_ or a GEMM, dX and dW1 by GEMMs; accumulated onto the .grad given.
struct MlpGrads {
  Tensor dx, dw1, db1, dw2, db2;
};
MlpGrads mlp_grads_ref(const Tensor& x, const Tensor& w1, const Tensor& b1, const Tensor& w2, bool has_b2,
                       const Tensor& g, const Tensor& dw1_0, const Tensor& dw2_0) {
  const int64_t in = w1.size(1), out = w2.size(0), hidden = w1.size(0);
  const Tensor x2 = x.reshape({-1, in}), g2 = g.reshape({-1, out});
  const kernels::LinearGelu h = kernels::linear_gelu(x2, w1, b1);
  MlpGrads r;
  r.db1 = empty({hidden}, x.dtype(), x.device());
  const Tensor dpre = kernels::linear_dgelu(g2, w2, h.pre, r.db1, false);
  r.dw2 = dw2_0.clone();
  if (has_b2) {
    r.db2 = empty({out}, x.dtype(), x.device());
    kernels::linear_grad_into_(r.dw2, r.db2, g2, h.y, true, false);
  } else {
    kernels::matmul_into_(r.dw2, g2, h.y, true, false, true);
  }
  r.dx = kernels::matmul(dpre, w1).view(x.shape());
  r.dw1 = dw1_0.clone();
  kernels::matmul_into_(r.dw1, dpre, x2, true, false, true);
  return r;
}
}  // namespace

TEST_CASE("linear_gelu_linear: dW2 (no b2), dX and dW1 grouped; the ungrouped bits; the launches") {
  for (const Device device : testing::devices())
    for (const DType dt : kDTypes)
      for (const bool has_b2 : {true, false}) {
        CAPTURE(device);
        CAPTURE(dt);
        CAPTURE(has_b2);
        const int64_t in = 10, hidden = 24, out = 9;
        const Tensor x = rnd({2, 7, in}, dt, device, 1).set_requires_grad(true);
        const Tensor w1 = (rnd({hidden, in}, dt, device, 2) * 0.3).detach().set_requires_grad(true);
        const Tensor b1 = rnd({hidden}, dt, device, 3).set_requires_grad(true);
        const Tensor w2 = (rnd({out, hidden}, dt, device, 4) * 0.3).detach().set_requires_grad(true);
        const Tensor b2 = has_b2 ? rnd({out}, dt, device, 5).set_requires_grad(true) : Tensor();
        const Tensor r = rnd({2, 7, out}, dt, device, 6);
        const Tensor dw1_0 = rnd({hidden, in}, dt, device, 7), dw2_0 = rnd({out, hidden}, dt, device, 8);
        w1.set_grad(dw1_0.clone());
        w2.set_grad(dw2_0.clone());
        Profiler prof;
        autograd::backward(linear_gelu_linear(x, w1, b1, w2, b2), r);  // G = r
        prof.stop();
        if (device.is_cuda()) {
          // Backward: linear_dgelu, (with b2) matmul_bgrad, one group; the forward's one matmul (an
          // f64 bias: the bias rows and the GEMM onto them, two).
          CHECK(launches_of(prof, "matmul_group") == 1);
          CHECK(launches_of(prof, "matmul_dgelu") == 1);
          CHECK(launches_of(prof, "matmul_bgrad") == (has_b2 ? 1 : 0));
          CHECK(launches_of(prof, "matmul") == (has_b2 && dt == DType::f64 ? 2 : 1));
        }
        const MlpGrads want = mlp_grads_ref(x.detach(), w1.detach(), b1.detach(), w2.detach(), has_b2, r, dw1_0, dw2_0);
        CHECK(same_bytes(x.grad(), want.dx));
        CHECK(same_bytes(w1.grad(), want.dw1));
        CHECK(same_bytes(b1.grad(), want.db1));
        CHECK(same_bytes(w2.grad(), want.dw2));
        if (has_b2) CHECK(same_bytes(b2.grad(), want.db2));
      }
}

TEST_CASE("linear_gelu_linear: frozen weights and no input gradient stay correct, with and without b2") {
  for (const Device device : testing::devices())
    for (const bool has_b2 : {true, false})
      for (int frozen = 0; frozen < 4; ++frozen) {  // 0 none, 1 x, 2 w1, 3 w2
        CAPTURE(device);
        CAPTURE(has_b2);
        CAPTURE(frozen);
        const Tensor x = randn({6, 5}).to(device).set_requires_grad(frozen != 1);
        const Tensor w1 = (randn({8, 5}) * 0.3).to(device).set_requires_grad(frozen != 2);
        const Tensor b1 = randn({8}).to(device).set_requires_grad(true);
        const Tensor w2 = (randn({4, 8}) * 0.3).to(device).set_requires_grad(frozen != 3);
        const Tensor b2 = has_b2 ? randn({4}).to(device).set_requires_grad(true) : Tensor();
        const Tensor r = randn({6, 4}).to(device);
        autograd::backward(sum(linear_gelu_linear(x, w1, b1, w2, b2) * r));
        // The composition, on copies.
        const Tensor xc = x.detach().clone().set_requires_grad(true), w1c = w1.detach().clone().set_requires_grad(true),
                     b1c = b1.detach().clone().set_requires_grad(true),
                     w2c = w2.detach().clone().set_requires_grad(true);
        const Tensor b2c = has_b2 ? b2.detach().clone().set_requires_grad(true) : Tensor();
        autograd::backward(sum(linear(gelu(linear(xc, w1c, b1c)), w2c, b2c) * r));
        const auto close = [](const Tensor& got, const Tensor& want) {
          REQUIRE(got.defined());
          testing::check_close(got.to(Device::cpu()), want.to(Device::cpu()), 1e-4, 1e-5);
        };
        if (frozen != 1) close(x.grad(), xc.grad()); else CHECK(!x.grad().defined());
        if (frozen != 2) close(w1.grad(), w1c.grad()); else CHECK(!w1.grad().defined());
        if (frozen != 3) close(w2.grad(), w2c.grad()); else CHECK(!w2.grad().defined());
        close(b1.grad(), b1c.grad());
        if (has_b2) close(b2.grad(), b2c.grad());
      }
}

TEST_CASE("linear_gelu_linear without b2 is linear, gelu, linear: values and gradients") {
  for (const Device device : testing::devices()) {
    CAPTURE(device);
    const Tensor x = randn({3, 4, 6}).to(device).set_requires_grad(true);
    const Tensor w1 = (randn({16, 6}) * 0.3).to(device).set_requires_grad(true);
    const Tensor b1 = randn({16}).to(device).set_requires_grad(true);
    const Tensor w2 = (randn({5, 16}) * 0.3).to(device).set_requires_grad(true);
    const Tensor r = randn({3, 4, 5}).to(device);
    const Tensor z = linear_gelu_linear(x, w1, b1, w2, Tensor());
    CHECK(z.shape() == Shape({3, 4, 5}));
    autograd::backward(sum(z * r));
    const Tensor xc = x.detach().clone().set_requires_grad(true), w1c = w1.detach().clone().set_requires_grad(true),
                 b1c = b1.detach().clone().set_requires_grad(true), w2c = w2.detach().clone().set_requires_grad(true);
    const Tensor zc = linear(gelu(linear(xc, w1c, b1c)), w2c);
    autograd::backward(sum(zc * r));
    const auto cpu = [](const Tensor& t) { return t.to(Device::cpu()); };
    testing::check_close(cpu(z.detach()), cpu(zc.detach()), 1e-5, 1e-6);
    testing::check_close(cpu(x.grad()), cpu(xc.grad()), 1e-4, 1e-5);
    testing::check_close(cpu(w1.grad()), cpu(w1c.grad()), 1e-4, 1e-5);
    testing::check_close(cpu(b1.grad()), cpu(b1c.grad()), 1e-4, 1e-5);
    testing::check_close(cpu(w2.grad()), cpu(w2c.grad()), 1e-4, 1e-5);
  }
  // A b2 of the wrong shape is still refused; an undefined one is not.
  CHECK_THROWS_AS(linear_gelu_linear(randn({2, 3}), randn({4, 3}), randn({4}), randn({5, 4}), randn({4})), Error);
}
