// LayerNorm and RMSNorm kernels: forward against f64 reference loops (f32 and f64, awkward
// shapes: one row, C = 1, C = 257, strided input), backward against central finite differences
// in f64, dw/db bit-identical for any thread count, bad inputs.
#include <cmath>

#include "kernels/nn_ops.h"
#include "testing.h"

using namespace reel;
using namespace reel::kernels;
using namespace reel::testing;

namespace {

struct NormRef {
  std::vector<double> y, mean, rstd;
};

NormRef layernorm_ref(const std::vector<double>& x, const std::vector<double>& w, const std::vector<double>& b,
                      int64_t R, int64_t C, double eps, bool rms) {
  NormRef r{std::vector<double>(x.size()), {}, {}};
  for (int64_t i = 0; i < R; ++i) {
    double m = 0, v = 0;
    for (int64_t c = 0; c < C; ++c) m += x[i * C + c];
    m = rms ? 0 : m / C;
    for (int64_t c = 0; c < C; ++c) v += (x[i * C + c] - m) * (x[i * C + c] - m);
    const double rs = 1 / std::sqrt(v / C + eps);
    for (int64_t c = 0; c < C; ++c) r.y[i * C + c] = (x[i * C + c] - m) * rs * w[c] + (rms ? 0 : b[c]);
    r.mean.push_back(m);
    r.rstd.push_back(rs);
  }
  return r;
}

}  // namespace

TEST_CASE("layernorm and rmsnorm forward match the f64 reference") {
  const std::vector<Shape> shapes = {{1, 1}, {1, 257}, {5, 1}, {3, 4, 257}, {7, 33}, {64, 768}, {257}};
  for (const Shape& shape : shapes)
    for (DType dt : {DType::f64, DType::f32}) {
      CAPTURE(shape_str(shape));
      CAPTURE(dtype_name(dt));
      const int64_t C = shape.back(), R = shape_numel(shape) / C;
      Tensor x = uniform_f64(shape, 1, -2, 3).to(dt);  // mean far from 0: tests the two-pass variance
      Tensor w = uniform_f64({C}, 2, 0.5, 1.5).to(dt), b = uniform_f64({C}, 3).to(dt);
      const NormRef ref = layernorm_ref(values(x), values(w), values(b), R, C, 1e-5, false);
      const double tol = dt == DType::f32 ? 2e-5 : 1e-12;
      LayerNormForward f = layernorm_forward(x, w, b, 1e-5);
      CHECK(f.y.shape() == shape);
      CHECK(f.mean.shape() == Shape(shape.begin(), shape.end() - 1));
      check_close(f.y, ref.y, tol, tol);
      check_close(f.mean, ref.mean, tol, tol);
      check_close(f.rstd, ref.rstd, tol, tol);

      const NormRef rref = layernorm_ref(values(x), values(w), values(b), R, C, 1e-6, true);
      RMSNormForward g = rmsnorm_forward(x, w, 1e-6);
      check_close(g.y, rref.y, tol, tol);
      check_close(g.rstd, rref.rstd, tol, tol);
    }
}

TEST_CASE("f32 layernorm of rows with a large mean keeps its precision (two-pass variance)") {
  std::vector<double> v = values(uniform_f64({16, 768}, 7, -1, 1));
  for (double& x : v) x += 1000;  // mean 1000, std 0.58: E[x^2] - E[x]^2 would lose every digit in f32
  Tensor x = from_vector<double>(v, {16, 768}).to(DType::f32);
  Tensor w = ones({768}), b = zeros({768});
  const NormRef ref = layernorm_ref(values(x), values(w), values(b), 16, 768, 1e-5, false);
  LayerNormForward f = layernorm_forward(x, w, b);
  check_close(f.y, ref.y, 1e-4, 1e-4);
  check_close(f.rstd, ref.rstd, 1e-4, 1e-4);
}

TEST_CASE("layernorm reads strided inputs") {
  Tensor x = uniform_f64({6, 5}, 4);
  Tensor w = uniform_f64({6}, 5), b = uniform_f64({6}, 6);
  Tensor xt = x.t();  // (5, 6), not contiguous
  const NormRef ref = layernorm_ref(values(xt), values(w), values(b), 5, 6, 1e-5, false);
  check_close(layernorm_forward(xt, w, b).y, ref.y, 1e-12, 1e-12);
}

TEST_CASE("layernorm backward matches finite differences in f64") {
  for (const Shape& shape : std::vector<Shape>{{3, 5}, {1, 1}, {4, 1}, {2, 257}, {2, 3, 7}}) {
    CAPTURE(shape_str(shape));
    const int64_t C = shape.back();
    Tensor x = uniform_f64(shape, 10, -1, 2), w = uniform_f64({C}, 11, 0.5, 1.5), b = uniform_f64({C}, 12);
    Tensor wy = uniform_f64(shape, 13);  // dL/dy
    const double eps = 1e-5;
    LayerNormForward f = layernorm_forward(x, w, b, eps);
    LayerNormBackward g = layernorm_backward(wy, x, w, f.mean, f.rstd);
    auto loss = [&] { return weighted_sum(layernorm_forward(x, w, b, eps).y, wy); };
    check_gradient("dx", x, g.dx, loss);
    check_gradient("dw", w, g.dw, loss);
    check_gradient("db", b, g.db, loss);
  }
}

TEST_CASE("rmsnorm backward matches finite differences in f64") {
  for (const Shape& shape : std::vector<Shape>{{3, 5}, {1, 1}, {2, 257}, {2, 3, 7}}) {
    CAPTURE(shape_str(shape));
    const int64_t C = shape.back();
    Tensor x = uniform_f64(shape, 20, -1, 2), w = uniform_f64({C}, 21, 0.5, 1.5);
    Tensor wy = uniform_f64(shape, 23);
    RMSNormForward f = rmsnorm_forward(x, w);
    RMSNormBackward g = rmsnorm_backward(wy, x, w, f.rstd);
    auto loss = [&] { return weighted_sum(rmsnorm_forward(x, w).y, wy); };
    check_gradient("dx", x, g.dx, loss);
    check_gradient("dw", w, g.dw, loss);
  }
}

TEST_CASE("f32 backward agrees with f64 and dw/db are bit-identical for any thread count") {
  const Shape shape{4096, 96};  // 64 row chunks: the partial sums matter
  Tensor x = uniform_f64(shape, 30, -1, 2), w = uniform_f64({96}, 31), b = uniform_f64({96}, 32);
  Tensor dy = uniform_f64(shape, 33);
  LayerNormForward f64f = layernorm_forward(x, w, b);
  LayerNormBackward ref = layernorm_backward(dy, x, w, f64f.mean, f64f.rstd);
  Tensor xf = x.to(DType::f32), wf = w.to(DType::f32), bf = b.to(DType::f32), dyf = dy.to(DType::f32);
  LayerNormForward ff = layernorm_forward(xf, wf, bf);
  std::vector<LayerNormBackward> runs;
  std::vector<RMSNormBackward> rms_runs;
  RMSNormForward rf = rmsnorm_forward(xf, wf);
  for_thread_counts({1, 2, 3, 7}, [&] {
    runs.push_back(layernorm_backward(dyf, xf, wf, ff.mean, ff.rstd));
    rms_runs.push_back(rmsnorm_backward(dyf, xf, wf, rf.rstd));
  });
  check_close(runs[0].dx, values(ref.dx), 1e-4, 1e-4);
  check_close(runs[0].dw, values(ref.dw), 1e-4, 1e-3);
  check_close(runs[0].db, values(ref.db), 1e-4, 1e-3);
  for (size_t i = 1; i < runs.size(); ++i) {
    CHECK(bit_identical(runs[i].dx, runs[0].dx));
    CHECK(bit_identical(runs[i].dw, runs[0].dw));
    CHECK(bit_identical(runs[i].db, runs[0].db));
    CHECK(bit_identical(rms_runs[i].dw, rms_runs[0].dw));
  }
}

TEST_CASE("empty rows give empty outputs and zero weight gradients") {
  Tensor x = zeros({0, 4}), w = ones({4}), b = zeros({4});
  LayerNormForward f = layernorm_forward(x, w, b);
  CHECK(f.y.shape() == Shape{0, 4});
  LayerNormBackward g = layernorm_backward(x, x, w, f.mean, f.rstd);
  CHECK(values(g.dw) == std::vector<double>{0, 0, 0, 0});
}

TEST_CASE("bad norm inputs raise reel::Error naming op and shapes") {
  Tensor x = zeros({3, 4}), w = ones({4}), b = zeros({4});
  CHECK_REEL_ERROR(layernorm_forward(x, ones({5}), b),
                   "layernorm_forward: weight (5) does not match x (3, 4): (4) expected");
  CHECK_REEL_ERROR(layernorm_forward(x, w, zeros({4, 1})), "layernorm_forward: bias (4, 1) does not match x (3, 4)");
  CHECK_REEL_ERROR(layernorm_forward(x, w.to(DType::f64), b), "layernorm_forward: dtypes differ: f32 and f64");
  CHECK_REEL_ERROR(layernorm_forward(zeros({3, 4}, DType::i32), w, b), "layernorm_forward: dtype i32");
  CHECK_REEL_ERROR(layernorm_forward(zeros({3, 0}), zeros({0}), zeros({0})),
                   "layernorm_forward: x (3, 0) needs a non-empty last dim");
  LayerNormForward f = layernorm_forward(x, w, b);
  CHECK_REEL_ERROR(layernorm_backward(zeros({3, 5}), x, w, f.mean, f.rstd),
                   "layernorm_backward: dy (3, 5) and x (3, 4) differ in shape");
  CHECK_REEL_ERROR(layernorm_backward(x, x, w, zeros({4}), f.rstd),
                   "layernorm_backward: mean (4) does not match x (3, 4): (3) expected");
  CHECK_REEL_ERROR(rmsnorm_backward(x, x, w, zeros({3, 1})), "rmsnorm_backward: rstd (3, 1) does not match x (3, 4)");
  if (cuda_available()) {
    const Device cuda = Device::cuda(0);
    CHECK_REEL_ERROR(layernorm_forward(x.to(cuda), w, b), "layernorm_forward: expected all tensors on one device");
  }
}
