// LayerNorm and RMSNorm kernels, the edge cases: f32 backward against f64 with dw/db bit-identical
// for any thread count, empty rows, bad inputs. (The forward against f64 reference loops on awkward
// shapes, strided inputs and rows of mean 1000, and the backward against finite differences, on
// every device, are rows of tests/test_ops.cpp.)
#include "kernels/ops.h"
#include "testing.h"

using namespace reel;
using namespace reel::kernels;
using namespace reel::testing;

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
