// add_layer_norm with the residual branch's bias rb (autograd/ops/layernorm.h): s = x + (r + rb),
// y = layer_norm(s), against the composition add_layer_norm(x, r + rb) on every device and dtype,
// rows of C <= 256 and wider: s, y and the gradients of x, r, w and b bit-identical, rb's within the
// column sum's rounding (cpu: bit-identical to the unfused linear's bias gradient, the same acc_t
// row-order sum); rb's gradient into its .grad, added to what it holds; no extra launch on cuda
// (the backward's launches with rb equal those without); bad rb: reel::Error naming the op,
// shapes, dtypes and devices. (The op-table rows of tests/op_table/norm.cpp check it against f64.)
#include <cmath>

#include "reel.h"
#include "testing.h"

using namespace reel;
using namespace reel::testing;

namespace {

// The loss's weights for s and y, and the inputs: (R, C) x and r, (C) w, b and rb, in `dtype` on `device`.
struct Inputs {
  Tensor x, r, w, b, rb, us, uy;
};

Inputs make_inputs(int64_t R, int64_t C, DType dtype, Device device, uint64_t seed) {
  Generator g(seed);
  const auto t = [&](const Shape& s) { return normal_f64(g, s).to(dtype).to(device); };
  return {t({R, C}), t({R, C}), t({C}), t({C}), t({C}), t({R, C}), t({R, C})};
}

// Leaves needing gradients, copies of `in`'s.
struct Leaves {
  Tensor x, r, w, b, rb;
};
Leaves leaves(const Inputs& in) {
  const auto leaf = [](const Tensor& t) { return t.clone().set_requires_grad(true); };
  return {leaf(in.x), leaf(in.r), leaf(in.w), leaf(in.b), leaf(in.rb)};
}

double rb_tol(DType d) {
  switch (d) {
    case DType::f64: return 1e-12;
    case DType::f32: return 1e-5;
    case DType::bf16: return 2e-2;
    default: return 4e-3;  // f16
  }
}

}  // namespace

TEST_CASE("add_layer_norm with rb: the composition's bits (s, y, dx, dr, dw, db), rb's gradient to its rounding") {
  for (const Device device : devices()) {
    for (const DType dtype : {DType::f32, DType::f64, DType::bf16, DType::f16}) {
      for (const int64_t C : {24, 300}) {  // the last block finishes the sums / norm_params_kernel
        CAPTURE(device);
        CAPTURE(dtype);
        CAPTURE(C);
        const int64_t R = 75;  // several row chunks on either backend
        const Inputs in = make_inputs(R, C, dtype, device, 40 + static_cast<uint64_t>(C));
        const Leaves f = leaves(in), c = leaves(in);
        // (One backward clears the whole tape: each forward is followed by its own.)
        const AddLayerNormResult fo = add_layer_norm(f.x, f.r, f.w, f.b, 1e-5, f.rb);
        autograd::backward(sum(fo.s * in.us) + sum(fo.y * in.uy));
        const AddLayerNormResult co = add_layer_norm(c.x, c.r + c.rb, c.w, c.b, 1e-5);
        autograd::backward(sum(co.s * in.us) + sum(co.y * in.uy));
        CHECK(bit_identical(fo.s, co.s));
        CHECK(bit_identical(fo.y, co.y));
        CHECK(bit_identical(f.x.grad(), c.x.grad()));
        CHECK(bit_identical(f.r.grad(), c.r.grad()));
        CHECK(bit_identical(f.w.grad(), c.w.grad()));
        CHECK(bit_identical(f.b.grad(), c.b.grad()));
        REQUIRE(f.rb.grad().defined());
        CHECK(f.rb.grad().dtype() == dtype);
        // Against the column sums of ds (r's gradient) in f64: the fused sum's own rounding.
        const std::vector<double> ds = values(f.r.grad());
        std::vector<double> want(static_cast<size_t>(C), 0.0);
        for (int64_t i = 0; i < R; ++i)
          for (int64_t j = 0; j < C; ++j) want[static_cast<size_t>(j)] += ds[static_cast<size_t>(i * C + j)];
        check_close(f.rb.grad(), want, rb_tol(dtype), rb_tol(dtype));
        check_close(f.rb.grad(), c.rb.grad(), rb_tol(dtype), rb_tol(dtype));
        if (device.is_cpu() && dtype != DType::f64) {
          // The cpu sums as linear's bias gradient does (acc_t, rows in order): the unfused bits.
          const Tensor g = f.r.grad().detach();
          const Tensor db = empty({C}, dtype);
          kernels::linear_grad_into_(empty({C, 1}, dtype), db, g, ones({R, 1}, dtype), false, false);
          CHECK(bit_identical(f.rb.grad(), db));
        }
        // A second backward adds to rb's .grad (its gradient sink), as it does to w's and b's.
        const std::vector<double> first = values(f.rb.grad());
        const Tensor rb_alone = in.rb.clone().set_requires_grad(true);
        autograd::backward(sum(add_layer_norm(f.x, f.r, f.w, f.b, 1e-5, f.rb).y * in.uy));
        autograd::backward(sum(add_layer_norm(in.x, in.r, in.w, in.b, 1e-5, rb_alone).y * in.uy));
        std::vector<double> sum2 = values(rb_alone.grad());
        for (size_t j = 0; j < sum2.size(); ++j) sum2[j] += first[j];
        check_close(f.rb.grad(), sum2, 2 * rb_tol(dtype), 2 * rb_tol(dtype));
      }
    }
  }
}

TEST_CASE("add_layer_norm with rb, frozen inputs and no LayerNorm bias: each gradient only where asked") {
  for (const Device device : devices()) {
    CAPTURE(device);
    const Inputs in = make_inputs(9, 7, DType::f32, device, 3);
    const Tensor rb = in.rb.clone().set_requires_grad(true), r = in.r.clone().set_requires_grad(true);
    const AddLayerNormResult o = add_layer_norm(in.x, r, in.w, Tensor(), 1e-5, rb);
    CHECK(bit_identical(o.y, add_layer_norm(in.x, in.r + in.rb, in.w, Tensor(), 1e-5).y));
    autograd::backward(sum(o.y * in.uy));
    CHECK_FALSE(in.x.grad().defined());
    REQUIRE(rb.grad().defined());
    const std::vector<double> dr = values(r.grad());
    std::vector<double> want(7, 0.0);
    for (size_t i = 0; i < dr.size(); ++i) want[i % 7] += dr[i];
    check_close(rb.grad(), want, 1e-5, 1e-5);
    // rb frozen: no gradient made for it, r's still.
    const Tensor rb2 = in.rb.clone(), r2 = in.r.clone().set_requires_grad(true);
    autograd::backward(sum(add_layer_norm(in.x, r2, in.w, in.b, 1e-5, rb2).y * in.uy));
    CHECK_FALSE(rb2.grad().defined());
    CHECK(r2.grad().defined());
  }
}

TEST_CASE("add_layer_norm with rb: the backward's launches are those without it (one for C <= 256)") {
  for (const Device device : {Device::meta(), Device::cuda()}) {
    if (device.is_cuda() && !cuda_available()) continue;
    for (const int64_t C : {64, 300}) {
      CAPTURE(device);
      CAPTURE(C);
      const auto launches = [&](bool with_rb) {
        const Tensor x = zeros({40, C}, DType::f32, device).set_requires_grad(true);
        const Tensor r = zeros({40, C}, DType::f32, device).set_requires_grad(true);
        const Tensor w = ones({C}, DType::f32, device).set_requires_grad(true);
        const Tensor b = zeros({C}, DType::f32, device).set_requires_grad(true);
        const Tensor rb = zeros({C}, DType::f32, device).set_requires_grad(true);
        const AddLayerNormResult o = add_layer_norm(x, r, w, b, 1e-5, with_rb ? rb : Tensor());
        const Tensor loss = sum(o.y);
        Profiler prof;
        autograd::backward(loss);
        prof.stop();
        int64_t norm = -1;
        for (const profile::KernelRecord& k : prof.kernels())
          if (k.kernel == "layernorm_backward") norm = k.launches;
        CHECK(rb.grad().defined() == with_rb);
        return norm;
      };
      const int64_t with = launches(true), without = launches(false);
      CHECK(with == without);
      if (C <= 256) CHECK(with == 1);
      else CHECK(with == 2);
    }
  }
}

TEST_CASE("add_layer_norm and add_layernorm_forward reject a bad rb, naming the op, shapes, dtypes and devices") {
  const Tensor x = zeros({3, 4}), r = zeros({3, 4}), w = ones({4}), b = zeros({4});
  CHECK_REEL_ERROR(add_layer_norm(x, r, w, b, 1e-5, zeros({5})),
                   "add_layer_norm: the residual's bias rb (5) f32 on cpu does not match x (3, 4) f32 on cpu");
  CHECK_REEL_ERROR(add_layer_norm(x, r, w, b, 1e-5, zeros({3, 4})), "add_layer_norm: the residual's bias rb (3, 4)");
  CHECK_REEL_ERROR(add_layer_norm(x, r, w, b, 1e-5, zeros({4}, DType::f64)),
                   "add_layer_norm: the residual's bias rb (4) f64 on cpu does not match x (3, 4) f32 on cpu");
  CHECK_REEL_ERROR(kernels::add_layernorm_forward(x, r, w, b, 1e-5, zeros({2})),
                   "add_layernorm_forward: the residual's bias rb (2) f32 on cpu does not match x (3, 4) f32 on cpu");
  if (cuda_available()) {
    const Tensor rb = zeros({4}, DType::f32, Device::cuda(0));
    CHECK_REEL_ERROR(add_layer_norm(x, r, w, b, 1e-5, rb),
                     "add_layer_norm: the residual's bias rb (4) f32 on cuda:0 does not match x (3, 4) f32 on cpu");
    CHECK_REEL_ERROR(kernels::add_layernorm_forward(x, r, w, b, 1e-5, rb),
                     "add_layernorm_forward: the residual's bias rb (4) f32 on cuda:0 does not match x (3, 4) f32 on cpu");
  }
}
