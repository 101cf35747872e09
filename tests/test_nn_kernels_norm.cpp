// LayerNorm, RMSNorm and GroupNorm kernels, the edge cases: f32 backward against f64 with dw/db bit-identical
// for any thread count, empty rows, bad inputs. (The forward against f64 reference loops on awkward
// shapes, strided inputs and rows of mean 1000, and the backward against finite differences, on
// every device, are rows of tests/op_table/norm.cpp, GroupNorm's too.)
#include "kernels/ops.h"
#include "testing.h"

using namespace reel;
using namespace reel::kernels;
using namespace reel::testing;

namespace {
// f32 backward runs (one per thread count): the first against the f64 reference, every one
// bit-identical to the first.
template <typename Backward>
void check_runs(const std::vector<Backward>& runs, const Backward& ref) {
  check_close(runs[0].dx, values(ref.dx), 1e-4, 1e-4);
  check_close(runs[0].dw, values(ref.dw), 1e-4, 1e-3);
  check_close(runs[0].db, values(ref.db), 1e-4, 1e-3);
  for (size_t i = 1; i < runs.size(); ++i) {
    CHECK(bit_identical(runs[i].dx, runs[0].dx));
    CHECK(bit_identical(runs[i].dw, runs[0].dw));
    CHECK(bit_identical(runs[i].db, runs[0].db));
  }
}
}  // namespace

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
  check_runs(runs, ref);
  for (size_t i = 1; i < rms_runs.size(); ++i) CHECK(bit_identical(rms_runs[i].dw, rms_runs[0].dw));
}

TEST_CASE("empty rows give empty outputs and zero weight gradients") {
  Tensor x = zeros({0, 4}), w = ones({4}), b = zeros({4});
  LayerNormForward f = layernorm_forward(x, w, b);
  CHECK(f.y.shape() == Shape{0, 4});
  LayerNormBackward g = layernorm_backward(x, x, w, f.mean, f.rstd);
  CHECK(values(g.dw) == std::vector<double>{0, 0, 0, 0});
  // Into buffers: written as zeros, or left as they are when added to.
  const Tensor dw = full({4}, 7.0), db = full({4}, 7.0);
  layernorm_backward(x, x, w, f.mean, f.rstd, {dw, false}, {db, true});
  CHECK(values(dw) == std::vector<double>{0, 0, 0, 0});
  CHECK(values(db) == std::vector<double>{7, 7, 7, 7});
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
  // add_layernorm and the backward's gradient buffers and added dx.
  CHECK_REEL_ERROR(add_layernorm_forward(x, zeros({1, 4}), w, b),
                   "add_layernorm_forward: x (3, 4) and the residual r (1, 4) differ in shape");
  CHECK_REEL_ERROR(add_layernorm_forward(x, zeros({3, 4}, DType::f64), w, b),
                   "add_layernorm_forward: dtypes differ: f32 and f64");
  CHECK_REEL_ERROR(layernorm_backward(x, x, w, f.mean, f.rstd, {zeros({5}), true}),
                   "layernorm_backward: the dw buffer (5) f32 on cpu must be contiguous (4) f32 on cpu (x (3, 4))");
  CHECK_REEL_ERROR(layernorm_backward(x, x, w, f.mean, f.rstd, {}, {zeros({8}).slice(0, 0, 8, 2), false}),
                   "layernorm_backward: the db buffer (4) f32 on cpu must be contiguous (4) f32 on cpu");
  CHECK_REEL_ERROR(layernorm_backward(x, x, w, f.mean, f.rstd, {}, {}, zeros({3, 1})),
                   "layernorm_backward: the gradient to add to dx (3, 1) and x (3, 4) differ in shape");
  if (cuda_available()) {
    const Device cuda = Device::cuda(0);
    CHECK_REEL_ERROR(layernorm_forward(x.to(cuda), w, b), "layernorm_forward: expected all tensors on one device");
  }
}

TEST_CASE("group_norm: f32 backward agrees with f64, dx/dw/db bit-identical for any thread count") {
  const Shape shape{64, 12, 9, 9};  // 4 groups of 3 channels, 243 values per (sample, group)
  Tensor x = uniform_f64(shape, 40, -1, 3), w = uniform_f64({12}, 41), b = uniform_f64({12}, 42);
  Tensor dy = uniform_f64(shape, 43);
  const GroupNormForward f64f = group_norm_forward(x, w, b, 4);
  const GroupNormBackward ref = group_norm_backward(dy, x, w, f64f.mean, f64f.rstd, 4);
  Tensor xf = x.to(DType::f32), wf = w.to(DType::f32), dyf = dy.to(DType::f32);
  const GroupNormForward ff = group_norm_forward(xf, wf, b.to(DType::f32), 4);
  check_close(ff.y, values(f64f.y), 1e-5, 1e-5);
  std::vector<GroupNormBackward> runs;
  for_thread_counts({1, 2, 3, 7}, [&] { runs.push_back(group_norm_backward(dyf, xf, wf, ff.mean, ff.rstd, 4)); });
  check_runs(runs, ref);
}

TEST_CASE("bad group_norm inputs raise reel::Error naming op and shapes") {
  Tensor x = zeros({2, 6, 3}), w = ones({6}), b = zeros({6});
  CHECK_REEL_ERROR(group_norm_forward(x, w, b, 4),
                   "group_norm_forward: 4 groups do not divide the 6 channels of x (2, 6, 3)");
  CHECK_REEL_ERROR(group_norm_forward(x, w, b, 0), "group_norm_forward: 0 groups do not divide");
  CHECK_REEL_ERROR(group_norm_forward(zeros({6}), w, b, 2), "group_norm_forward: x (6) needs (N, C, *) dims");
  CHECK_REEL_ERROR(group_norm_forward(x, ones({3}), b, 3),
                   "group_norm_forward: weight (3) does not match the channels of x (2, 6, 3): (6) expected");
  CHECK_REEL_ERROR(group_norm_forward(x, w, zeros({6, 1}), 3), "group_norm_forward: bias (6, 1) does not match");
  CHECK_REEL_ERROR(group_norm_forward(zeros({2, 6, 0}), w, b, 3), "group_norm_forward: x (2, 6, 0) has no positions");
  const GroupNormForward f = group_norm_forward(x, w, b, 3);
  CHECK(f.mean.shape() == (Shape{2, 3}));
  CHECK_REEL_ERROR(group_norm_backward(x, x, w, f.mean, f.rstd, 2),
                   "group_norm_backward: mean (2, 3) does not match x (2, 6, 3) in 2 groups: (2, 2) expected");
  CHECK_REEL_ERROR(group_norm_backward(zeros({2, 6, 4}), x, w, f.mean, f.rstd, 3),
                   "group_norm_backward: dy (2, 6, 4) and x (2, 6, 3) differ in shape");
  if (cuda_available())
    CHECK_REEL_ERROR(group_norm_forward(x.to(Device::cuda(0)), w, b, 3),
                     "group_norm_forward: expected all tensors on one device");
}

TEST_CASE("bf16 and f16 norms: statistics in f32, outputs in x's dtype, mixed dtypes rejected") {
  for (DType dt : {DType::bf16, DType::f16}) {
    CAPTURE(dt);
    const Tensor x = uniform_f64({6, 33}, 51, -2, 3).to(dt), w = uniform_f64({33}, 52, 0.5, 1.5).to(dt),
                 b = uniform_f64({33}, 53).to(dt), dy = uniform_f64({6, 33}, 54).to(dt);
    const LayerNormForward f = layernorm_forward(x, w, b);
    CHECK(f.y.dtype() == dt);
    CHECK((f.mean.dtype() == DType::f32 && f.rstd.dtype() == DType::f32));
    // The statistics are the f32 run's on the widened values (within f32 rounding: the compiler may
    // vectorise the widening loads' sums in another order); y is its result rounded once.
    const double u = dt == DType::bf16 ? 0x1p-8 : 0x1p-11;
    const LayerNormForward f32 = layernorm_forward(x.to(DType::f32), w.to(DType::f32), b.to(DType::f32));
    check_close(f.mean, f32.mean, 1e-6, 1e-6);
    check_close(f.rstd, f32.rstd, 1e-6, 1e-6);
    check_close(f.y, f32.y, u, 1e-6);
    const LayerNormBackward g = layernorm_backward(dy, x, w, f.mean, f.rstd);
    CHECK((g.dx.dtype() == dt && g.dw.dtype() == dt && g.db.dtype() == dt));
    CHECK_REEL_ERROR(layernorm_backward(dy, x, w, f.mean.to(dt), f.rstd),
                     dt == DType::bf16 ? "layernorm_backward: the saved statistic (6) is bf16"
                                       : "layernorm_backward: the saved statistic (6) is f16");
    CHECK_REEL_ERROR(layernorm_forward(x, w.to(DType::f32), b.to(DType::f32)), "layernorm_forward: dtypes differ");
    const RMSNormForward r = rmsnorm_forward(x, w);
    CHECK((r.y.dtype() == dt && r.rstd.dtype() == DType::f32));
    const GroupNormForward gn = group_norm_forward(x.reshape({2, 3, 33}), w.narrow(0, 0, 3), b.narrow(0, 0, 3), 3);
    CHECK((gn.y.dtype() == dt && gn.mean.dtype() == DType::f32));
    const GroupNormBackward gb = group_norm_backward(dy.reshape({2, 3, 33}), x.reshape({2, 3, 33}),
                                                     w.narrow(0, 0, 3), gn.mean, gn.rstd, 3);
    CHECK(gb.dw.dtype() == dt);
    if (cuda_available()) {
      const Device cuda = Device::cuda(0);
      const LayerNormForward fc = layernorm_forward(x.to(cuda), w.to(cuda), b.to(cuda));
      CHECK(fc.mean.dtype() == DType::f32);
      check_close(fc.y.to(Device::cpu()), f.y, 2 * u, 1e-5);
      check_close(fc.rstd.to(Device::cpu()), f.rstd, 1e-5, 1e-6);
      const LayerNormBackward gc = layernorm_backward(dy.to(cuda), x.to(cuda), w.to(cuda), fc.mean, fc.rstd);
      check_close(gc.dx.to(Device::cpu()), g.dx, 2 * u, 1e-4);
      check_close(gc.dw.to(Device::cpu()), g.dw, 2 * u, 1e-4);
      const GroupNormForward gnc =
          group_norm_forward(x.reshape({2, 3, 33}).to(cuda), w.narrow(0, 0, 3).to(cuda), b.narrow(0, 0, 3).to(cuda), 3);
      check_close(gnc.y.to(Device::cpu()), gn.y, 2 * u, 1e-5);
      const GroupNormBackward gbc = group_norm_backward(dy.reshape({2, 3, 33}).to(cuda), x.reshape({2, 3, 33}).to(cuda),
                                                        w.narrow(0, 0, 3).to(cuda), gnc.mean, gnc.rstd, 3);
      check_close(gbc.dx.to(Device::cpu()), gb.dx, 2 * u, 1e-4);
      check_close(gbc.dw.to(Device::cpu()), gb.dw, 2 * u, 1e-4);
    }
  }
}
