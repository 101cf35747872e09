// BatchNorm kernels and batch_norm, the edge cases: known values with PyTorch's formulas (the
// running-stat update with the unbiased variance), eval mode, f32 against f64 reference loops on an
// awkward (N, C, H, W) shape and a channel of mean 1000, strided running statistics, bit-identical
// results for any thread count, the cpu's fused forward equal to its two kernels, CUDA (emulated
// cuDNN) against the CPU in f32 and f64, (N, C) and (N, C, H, W), training and eval, the replay
// kernel giving the forward's bits on every device, the op under a checkpoint segment in training
// and eval, bf16 and f16 (16-bit y and gradients, f32 statistics and running statistics; a 16-bit
// BatchNorm2d from Module::to and under autocast), batch_norm_count (the device count: += 1 on
// every device, meta recording cuda's launches), and bad inputs. (The backward against finite differences, on every device, is a row of
// tests/op_table/norm.cpp; the checkpoint replay through segments and selective scopes,
// tests/test_checkpoint.cpp.)
#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include "autograd/autocast.h"
#include "autograd/checkpoint.h"
#include "autograd/functions.h"
#include "autograd/nn_functions.h"
#include "autograd/tape.h"
#include "core/profile.h"
#include "kernels/ops.h"
#include "nn/layers.h"
#include "testing.h"

using namespace reel;
using namespace reel::kernels;
using namespace reel::testing;

namespace {

// The f64 reference of a training forward: per channel of x (N, C, *) the mean, the biased and
// the unbiased variance, from plain loops over the values.
struct RefStats {
  std::vector<double> mean, var, var_unbiased;
};
RefStats ref_stats(const Tensor& x) {
  const std::vector<double> v = values(x);
  const int64_t N = x.size(0), C = x.size(1), S = x.numel() / (N * C);
  RefStats r;
  for (int64_t c = 0; c < C; ++c) {
    double s = 0, ss = 0;
    for (int64_t n = 0; n < N; ++n)
      for (int64_t k = 0; k < S; ++k) s += v[static_cast<size_t>((n * C + c) * S + k)];
    const double m = s / static_cast<double>(N * S);
    for (int64_t n = 0; n < N; ++n)
      for (int64_t k = 0; k < S; ++k) {
        const double d = v[static_cast<size_t>((n * C + c) * S + k)] - m;
        ss += d * d;
      }
    r.mean.push_back(m);
    r.var.push_back(ss / static_cast<double>(N * S));
    r.var_unbiased.push_back(ss / static_cast<double>(N * S - 1));
  }
  return r;
}

}  // namespace

TEST_CASE("batch_norm known values: PyTorch's normalisation and running-stat update (unbiased variance)") {
  Poisoned poison;
  // x (4, 2): channel 0 is 1 3 5 7 (mean 4, var 5, unbiased 20/3), channel 1 is 0 1 0 3 (mean 1,
  // var 1.5, unbiased 2). weight (2, -1), bias (0.5, 0), eps 1e-5, momentum 0.1, running stats
  // starting at PyTorch's (0, 1). Expected: y = (x - mean) / sqrt(var + eps) * w + b and
  //   running_mean = 0.9 * 0 + 0.1 * mean = (0.4, 0.1)
  //   running_var  = 0.9 * 1 + 0.1 * unbiased var = (1.5666667, 1.1)
  const std::vector<double> xv{1, 0, 3, 1, 5, 0, 7, 3};
  for (Device d : devices())
    for (DType dt : {DType::f32, DType::f64}) {
      if (dt == DType::f64 && d.is_cuda()) continue;
      CAPTURE(d);
      CAPTURE(dt);
      const Tensor x = from_vector(xv, {4, 2}).to(dt).to(d);
      const Tensor w = from_vector<double>({2, -1}, {2}).to(dt).to(d);
      const Tensor b = from_vector<double>({0.5, 0}, {2}).to(dt).to(d);
      const Tensor rm = zeros({2}, dt, d), rv = ones({2}, dt, d);
      const BatchNormForward f = batch_norm_forward(x, w, b, rm, rv, true, 0.1, 1e-5);
      const double tol = dt == DType::f32 ? 1e-6 : 1e-12;
      check_close(f.y, {-2.18327889, 0.816493859, -0.394426297, 0, 1.3944263, 0.816493859, 3.18327889, -1.63298772},
                  std::max(tol, 1e-8), tol);
      check_close(f.mean, {4, 1}, tol, tol);
      check_close(f.rstd, {0.44721314828703329, 0.81649385928606444}, tol, tol);
      check_close(rm, {0.4, 0.1}, tol, tol);
      check_close(rv, {0.9 + 0.1 * 20.0 / 3.0, 1.1}, tol, tol);
      // A second step moves them again from there (momentum 0.5 this time).
      batch_norm_forward(x, w, b, rm, rv, true, 0.5, 1e-5);
      check_close(rm, {0.5 * 0.4 + 0.5 * 4, 0.5 * 0.1 + 0.5 * 1}, tol, tol);
      check_close(rv, {0.5 * (0.9 + 0.1 * 20.0 / 3.0) + 0.5 * 20.0 / 3.0, 0.5 * 1.1 + 0.5 * 2}, tol, tol);

      // Eval: the running statistics, unchanged by the call.
      const std::vector<double> rm_before = values(rm), rv_before = values(rv);
      const BatchNormForward e = batch_norm_forward(x, w, b, rm, rv, false, 0.1, 1e-5);
      CHECK(values(rm) == rm_before);
      CHECK(values(rv) == rv_before);
      std::vector<double> expected;
      for (size_t i = 0; i < xv.size(); ++i) {
        const size_t c = i % 2;
        const double wc = c == 0 ? 2 : -1, bc = c == 0 ? 0.5 : 0;
        expected.push_back((xv[i] - rm_before[c]) / std::sqrt(rv_before[c] + 1e-5) * wc + bc);
      }
      check_close(e.y, expected, std::max(tol, 1e-6), tol);
      // Training without running statistics: the batch's, nothing updated.
      check_close(batch_norm_forward(x, w, b, Tensor(), Tensor(), true).y, values(f.y), tol, tol);
    }
}

TEST_CASE("batch_norm (N, C, H, W): f32 against f64 loops, a channel of mean 1000, strided running stats") {
  const Shape shape{3, 5, 7, 3};  // 63 values per channel, odd sizes
  Generator gen(8);
  std::vector<double> xv = values(normal_f64(gen, shape));
  for (size_t i = 0; i < xv.size(); ++i)
    if ((i / 21) % 5 == 2) xv[i] = 1000 + 0.5 * xv[i];  // channel 2 far from 0
  const Tensor x64 = from_vector(xv, shape);
  const RefStats ref = ref_stats(x64);
  const Tensor w = uniform_f64({5}, 9), b = uniform_f64({5}, 10);
  std::vector<double> y_ref;
  const std::vector<double> wv = values(w), bv = values(b);
  for (size_t i = 0; i < xv.size(); ++i) {
    const size_t c = (i / 21) % 5;
    y_ref.push_back((xv[i] - ref.mean[c]) / std::sqrt(ref.var[c] + 1e-5) * wv[c] + bv[c]);
  }
  for (Device d : devices()) {
    CAPTURE(d);
    // Running stats as every other element of a (10) buffer: updated through a copy, written back.
    const Tensor buf = full({10}, 0.5, DType::f32, d);
    const Tensor rm = buf.slice(0, 0, 10, 2), rv = buf.slice(0, 1, 10, 2);
    REQUIRE_FALSE(rm.is_contiguous());
    const BatchNormForward f = batch_norm_forward(x64.to(DType::f32).to(d), w.to(DType::f32).to(d),
                                                  b.to(DType::f32).to(d), rm, rv, true, 0.25);
    check_close(f.y, y_ref, 1e-4, 1e-4);
    check_close(f.mean, ref.mean, 1e-6, 1e-6);
    std::vector<double> rm_ref, rv_ref;
    for (size_t c = 0; c < 5; ++c) {
      rm_ref.push_back(0.75 * 0.5 + 0.25 * ref.mean[c]);
      rv_ref.push_back(0.75 * 0.5 + 0.25 * ref.var_unbiased[c]);
    }
    check_close(rm, rm_ref, 1e-6, 1e-6);
    check_close(rv, rv_ref, 1e-5, 1e-6);
  }
}

TEST_CASE("batch_norm: stats, forward and backward bit-identical for any thread count; cuda equals cpu") {
  Poisoned poison;  // an output element a kernel forgets to write is NaN
  // Long runs (a task per channel), an (N, C) activation and short runs (blocks of 64 channels,
  // the last one partial); each large enough for the CPU kernels to run in parallel.
  for (const Shape& shape : {Shape{32, 24, 5, 5}, Shape{512, 100}, Shape{64, 70, 4}}) {
    CAPTURE(shape_str(shape));
    const int64_t C = shape[1], S = shape.size() > 2 ? shape[2] * (shape.size() > 3 ? shape[3] : 1) : 1;
    const Tensor x = uniform_f64(shape, 20, -1, 3).to(DType::f32), dy = uniform_f64(shape, 21).to(DType::f32);
    const Tensor w = uniform_f64({C}, 22).to(DType::f32), b = uniform_f64({C}, 23).to(DType::f32);
    struct Run {
      BatchNormForward f;
      BatchNormBackward g, g_eval;
      Tensor rm, rv;
    };
    auto run = [&](Device d) {
      Run r;
      r.rm = zeros({C}, DType::f32, d);
      r.rv = ones({C}, DType::f32, d);
      r.f = batch_norm_forward(x.to(d), w.to(d), b.to(d), r.rm, r.rv, true);
      r.g = batch_norm_backward(dy.to(d), x.to(d), w.to(d), r.f.mean, r.f.rstd, true);
      r.g_eval = batch_norm_backward(dy.to(d), x.to(d), w.to(d), r.f.mean, r.f.rstd, false);
      return r;
    };
    std::vector<Run> runs;
    for_thread_counts({1, 2, 3, 7}, [&] { runs.push_back(run(Device::cpu())); });
    for (size_t i = 1; i < runs.size(); ++i)
      for (const auto& [a, b2] :
           {std::make_pair(runs[i].f.y, runs[0].f.y), std::make_pair(runs[i].f.rstd, runs[0].f.rstd),
            std::make_pair(runs[i].rv, runs[0].rv), std::make_pair(runs[i].g.dx, runs[0].g.dx),
            std::make_pair(runs[i].g.dw, runs[0].g.dw), std::make_pair(runs[i].g.db, runs[0].g.db),
            std::make_pair(runs[i].g_eval.dx, runs[0].g_eval.dx)})
        CHECK(bit_identical(a, b2));
    // The f32 results against f64 ones.
    const BatchNormForward f64f =
        batch_norm_forward(x.to(DType::f64), w.to(DType::f64), b.to(DType::f64), Tensor(), Tensor(), true);
    const BatchNormBackward ref =
        batch_norm_backward(dy.to(DType::f64), x.to(DType::f64), w.to(DType::f64), f64f.mean, f64f.rstd, true);
    check_close(runs[0].f.y, values(f64f.y), 1e-5, 1e-5);
    check_close(runs[0].g.dx, values(ref.dx), 1e-4, 1e-4);
    check_close(runs[0].g.dw, values(ref.dw), 1e-4, 1e-4);
    check_close(runs[0].g.db, values(ref.db), 1e-4, 1e-4);
    // Eval backward: dx = w * rstd * dy exactly as the formula says.
    {
      const std::vector<double> dyv = values(dy), wv = values(w), rsv = values(runs[0].f.rstd);
      std::vector<double> expected;
      for (size_t i = 0; i < dyv.size(); ++i) {
        const size_t c = (i / static_cast<size_t>(S)) % static_cast<size_t>(C);
        expected.push_back(wv[c] * rsv[c] * dyv[i]);
      }
      check_close(runs[0].g_eval.dx, expected, 1e-6, 1e-6);
      check_close(runs[0].g_eval.dw, values(runs[0].g.dw), 0, 0);  // dw and db do not depend on the mode
    }
    if (cuda_available()) {
      const Run c1 = run(Device::cuda(0)), c2 = run(Device::cuda(0));
      check_close(c1.f.y, runs[0].f.y, 1e-5, 1e-5);
      check_close(c1.f.mean, runs[0].f.mean, 1e-6, 1e-6);
      check_close(c1.f.rstd, runs[0].f.rstd, 1e-6, 1e-6);
      check_close(c1.rm, runs[0].rm, 1e-6, 1e-6);
      check_close(c1.rv, runs[0].rv, 1e-6, 1e-6);
      check_close(c1.g.dx, runs[0].g.dx, 1e-5, 1e-5);
      check_close(c1.g.dw, runs[0].g.dw, 1e-5, 1e-5);
      check_close(c1.g.db, runs[0].g.db, 1e-5, 1e-5);
      check_close(c1.g_eval.dx, runs[0].g_eval.dx, 1e-6, 1e-6);
      // Run to run on the device: the same bits.
      CHECK(bit_identical(c1.f.y, c2.f.y));
      CHECK(bit_identical(c1.rv, c2.rv));
      CHECK(bit_identical(c1.g.dx, c2.g.dx));
      CHECK(bit_identical(c1.g.dw, c2.g.dw));
    }
  }
}

TEST_CASE("batch_norm forward, replay and backward: cpu's fused forward is stats then apply; cuda (cuDNN) against cpu") {
  // (N, C) and (N, C, H, W), f32 and f64, training (with and without running statistics) and eval.
  for (const Shape& shape : {Shape{16, 5}, Shape{3, 4, 5, 6}})
    for (DType t : {DType::f32, DType::f64})
      for (int mode : {0, 1, 2}) {  // 0 training, 1 training without running stats, 2 eval
        CAPTURE(shape_str(shape));
        CAPTURE(dtype_name(t));
        CAPTURE(mode);
        const bool training = mode != 2, running = mode != 1;
        const int64_t C = shape[1];
        const double eps = 1e-3;
        const Tensor x = uniform_f64(shape, 40, -2, 3).to(t), dy = uniform_f64(shape, 41).to(t);
        const Tensor w = uniform_f64({C}, 42, 0.5, 1.5).to(t), b = uniform_f64({C}, 43).to(t);
        const Tensor rm0 = uniform_f64({C}, 44).to(t), rv0 = uniform_f64({C}, 45, 0.5, 2).to(t);
        struct Run {
          BatchNormForward f;
          Tensor replay, rm, rv;
          BatchNormBackward g;
        };
        auto run = [&](Device d) {
          Run r;
          r.rm = running ? rm0.to(d).clone() : Tensor();
          r.rv = running ? rv0.to(d).clone() : Tensor();
          r.f = batch_norm_forward(x.to(d), w.to(d), b.to(d), r.rm, r.rv, training, 0.2, eps);
          const std::vector<double> rm1 = running ? values(r.rm) : std::vector<double>();
          // A replay: the kept statistics (and, in eval, a copy of the running_var read).
          r.replay = batch_norm_replay(x.to(d), w.to(d), b.to(d), r.f.mean, r.f.rstd,
                                       training ? Tensor() : rv0.to(d).clone(), training, eps);
          if (running) CHECK(values(r.rm) == rm1);  // the replay updates nothing
          r.g = batch_norm_backward(dy.to(d), x.to(d), w.to(d), r.f.mean, r.f.rstd, training, eps);
          return r;
        };
        const Run cpu = run(Device::cpu());
        // The cpu's fused forward: the bits of the two entry points in turn.
        {
          const Tensor rm = running ? rm0.clone() : Tensor(), rv = running ? rv0.clone() : Tensor();
          const BatchNormStats st = batch_norm_stats(x, rm, rv, training, 0.2, eps);
          CHECK(bit_identical(batch_norm_apply(x, w, b, st.mean, st.rstd), cpu.f.y));
          CHECK(bit_identical(st.rstd, cpu.f.rstd));
          if (running) CHECK(bit_identical(rv, cpu.rv));
        }
        CHECK(bit_identical(cpu.replay, cpu.f.y));
        if (!cuda_available()) continue;
        const Run cu = run(Device::cuda(0)), cu2 = run(Device::cuda(0));
        // A replay on cuda gives the first forward's bits, and the device is deterministic.
        CHECK(bit_identical(cu.replay, cu.f.y));
        CHECK(bit_identical(cu.f.y, cu2.f.y));
        CHECK(bit_identical(cu.g.dx, cu2.g.dx));
        const double tol = t == DType::f32 ? 2e-5 : 1e-12;
        check_close(cu.f.y, cpu.f.y, tol, tol);
        check_close(cu.f.mean, cpu.f.mean, tol, tol);
        check_close(cu.f.rstd, cpu.f.rstd, tol, tol);
        if (running) {
          check_close(cu.rm, cpu.rm, tol, tol);
          check_close(cu.rv, cpu.rv, tol, tol);
        }
        check_close(cu.g.dx, cpu.g.dx, 10 * tol, 10 * tol);
        check_close(cu.g.dw, cpu.g.dw, 10 * tol, 10 * tol);
        check_close(cu.g.db, cpu.g.db, 10 * tol, 10 * tol);
      }
}

TEST_CASE("batch_norm through the tape: running stats updated once per call, eval gradients, no weight") {
  for (Device d : devices()) {
    CAPTURE(d);
    const Tensor x = uniform_f64({6, 3, 2}, 30).to(DType::f32).to(d).set_requires_grad();
    const Tensor rm = zeros({3}, DType::f32, d), rv = ones({3}, DType::f32, d);
    const uint64_t version = rm.version();
    Tensor y = batch_norm(x, rm, rv, Tensor(), Tensor(), true, 0.1);
    CHECK(rm.version() == version + 1);  // written in place, and its version says so
    const std::vector<double> rm1 = values(rm);
    autograd::backward(reel::sum(y * y));
    CHECK(values(rm) == rm1);  // backward does not touch them
    // Without weight and bias, y has zero mean and unit (biased) variance per channel.
    const RefStats s = ref_stats(y.detach());
    for (size_t c = 0; c < 3; ++c) {
      CHECK(std::fabs(s.mean[c]) < 1e-6);
      CHECK(std::fabs(s.var[c] - 1) < 1e-3);  // eps 1e-5 against variances ~ 1/3
    }
    // Eval through the tape: y = (x - rm) * rstd, so dx = rstd per element for sum(y).
    x.set_grad(Tensor());
    Tensor ye = batch_norm(x, rm, rv);
    autograd::backward(reel::sum(ye));
    CHECK(values(rm) == rm1);
    const std::vector<double> rvv = values(rv), gx = values(x.grad());
    for (size_t i = 0; i < gx.size(); ++i) CHECK(gx[i] == doctest::Approx(1 / std::sqrt(rvv[(i / 2) % 3] + 1e-5)));
  }
}

TEST_CASE("batch_norm under a checkpoint segment, training and eval: the replay gives the plain run's gradients") {
  // The op's replay path (autograd/ops/batchnorm.h): training replays with its kept statistics, eval
  // with its kept copy of the running statistics; on cuda both through cuDNN again.
  for (Device d : devices())
    for (bool training : {true, false}) {
      CAPTURE(d);
      CAPTURE(training);
      auto grads = [&](bool checkpointed) {
        const Tensor x = uniform_f64({4, 3, 2, 3}, 50).to(DType::f32).to(d).set_requires_grad();
        const Tensor w = uniform_f64({3}, 51, 0.5, 1.5).to(DType::f32).to(d).set_requires_grad();
        const Tensor b = uniform_f64({3}, 52).to(DType::f32).to(d).set_requires_grad();
        const Tensor rm = uniform_f64({3}, 53).to(DType::f32).to(d), rv = uniform_f64({3}, 54, 0.5, 2).to(DType::f32).to(d);
        Tensor h;
        {
          std::optional<autograd::Checkpoint> seg;
          if (checkpointed) seg.emplace();
          h = reel::relu(batch_norm(x * 2.0, rm, rv, w, b, training, 0.1));
        }
        autograd::backward(reel::sum(h * h));
        std::vector<Tensor> r{x.grad(), w.grad(), b.grad(), rm, rv};
        return r;
      };
      const std::vector<Tensor> plain = grads(false), ckpt = grads(true);
      for (size_t i = 0; i < plain.size(); ++i) {
        CAPTURE(i);
        CHECK(bit_identical(ckpt[i], plain[i]));
      }
      CHECK(autograd::Tape::current().empty());
    }
}

TEST_CASE("batch_norm_count: += 1 in place on every device, one launch (meta records cuda's), bad counts refused") {
  std::vector<Device> devs = devices();
#if defined(REEL_CUDA_EMULATED)  // the meta device exists in the emulated build only
  if (cuda_device_count() > 0) devs.push_back(Device::meta());
#endif
  std::vector<std::vector<std::string>> launches;  // per device: the kernels recorded
  for (Device d : devs) {
    CAPTURE(d);
    const Tensor count = full({}, 41.0, DType::i64, d);
    const Tensor in_vector = full({1}, 7.0, DType::i64, d);  // a one-element (1) counts too
    const uint64_t version = count.version();
    Profiler prof;
    batch_norm_count(count);
    batch_norm_count(count);
    batch_norm_count(in_vector);
    prof.stop();
    CHECK(count.version() == version + 2);
    if (!d.is_meta()) {
      CHECK(values(count) == std::vector<double>{43});
      CHECK(values(in_vector) == std::vector<double>{8});
    }
    std::vector<std::string> names;
    for (const auto& r : prof.kernels()) names.push_back(r.kernel);
    CHECK(names == std::vector<std::string>(3, "batch_norm_count"));
    if (!d.is_cpu()) launches.push_back(names);
  }
  for (const auto& l : launches) CHECK(l == launches.front());
  CHECK_REEL_ERROR(batch_norm_count(zeros({})),
                   "batch_norm_count: count () is f32: a one-element i64 tensor (num_batches_tracked) expected");
  CHECK_REEL_ERROR(batch_norm_count(zeros({2}, DType::i64)), "batch_norm_count: count (2) is i64");
  CHECK_REEL_ERROR(batch_norm_count(Tensor()), "batch_norm_count: count (num_batches_tracked) is undefined");
}

TEST_CASE("bad batch_norm inputs raise reel::Error naming op and shapes, before any running-stat update") {
  const Tensor x = zeros({4, 3, 2}), w = ones({3}), b = zeros({3});
  const Tensor rm = zeros({3}), rv = ones({3});
  CHECK_REEL_ERROR(batch_norm_forward(x, ones({4}), b, rm, rv, true),
                   "batch_norm: weight (4) does not match the 3 channels of x (4, 3, 2): (3) expected");
  CHECK_REEL_ERROR(batch_norm_forward(x, w, zeros({2}), rm, rv, true),
                   "batch_norm: bias (2) does not match the 3 channels of x (4, 3, 2)");
  CHECK_REEL_ERROR(batch_norm_forward(x, w, b, zeros({5}), rv, true),
                   "batch_norm: running_mean (5) does not match the 3 channels of x (4, 3, 2)");
  CHECK_REEL_ERROR(batch_norm_forward(x, w, b, rm, ones({3, 1}), true),
                   "batch_norm: running_var (3, 1) does not match the 3 channels");
  CHECK_REEL_ERROR(batch_norm_forward(x, w, b, rm, Tensor(), true),
                   "batch_norm: running_mean and running_var must both be given or both be absent");
  CHECK_REEL_ERROR(batch_norm_forward(x, w, b, Tensor(), Tensor(), false),
                   "batch_norm: running_mean and running_var must be given in eval mode");
  CHECK_REEL_ERROR(batch_norm_forward(zeros({1, 3}), w, b, rm, rv, true),
                   "batch_norm: Expected more than 1 value per channel when training, got input size (1, 3)");
  CHECK_REEL_ERROR(batch_norm_forward(zeros({1, 3, 1, 1}), w, b, rm, rv, true),
                   "Expected more than 1 value per channel when training, got input size (1, 3, 1, 1)");
  CHECK_REEL_ERROR(batch_norm_forward(zeros({3}), w, b, rm, rv, true), "batch_norm: x (3) needs (N, C, *) dims");
  CHECK_REEL_ERROR(batch_norm_forward(x, w, b, rm.to(DType::f64), rv.to(DType::f64), true),
                   "batch_norm: running_mean (3) is f64 but x (4, 3, 2) is f32: f32 expected");
  CHECK_REEL_ERROR(batch_norm_forward(x.to(DType::i32), w, b, rm, rv, true),
                   "batch_norm: dtype i32 of the (4, 3, 2) tensor is not supported (f32, f64, bf16 or f16 expected)");
  // 16 bits: x, w, b (and dy) of one dtype, the statistics f32 (PyTorch's mixed 16-bit x with f32
  // weights is refused, as by the other norms).
  for (DType h : {DType::bf16, DType::f16}) {
    CAPTURE(h);
    const std::string name = dtype_name(h);
    const Tensor xh = x.to(h), wh = w.to(h), bh = b.to(h);
    CHECK_REEL_ERROR(batch_norm_forward(xh, w, b, rm, rv, true),
                     ("batch_norm: dtypes differ: " + name + " and f32 (shapes (4, 3, 2) and (3))").c_str());
    CHECK_REEL_ERROR(batch_norm_forward(xh, wh, bh, rm.to(h), rv.to(h), true),
                     ("batch_norm: running_mean (3) is " + name + " but x (4, 3, 2) is " + name +
                      ": f32 expected (the statistics of a bf16 or f16 x are f32)")
                         .c_str());
    CHECK_REEL_ERROR(batch_norm_forward(xh, wh, bh, rm, rv.to(DType::f64), true),
                     ("batch_norm: running_var (3) is f64 but x (4, 3, 2) is " + name + ": f32 expected").c_str());
    const BatchNormForward fh = batch_norm_forward(xh, wh, bh, Tensor(), Tensor(), true);
    CHECK_REEL_ERROR(batch_norm_backward(x, xh, wh, fh.mean, fh.rstd, true),
                     ("batch_norm_backward: dtypes differ: f32 and " + name).c_str());
    CHECK_REEL_ERROR(batch_norm_backward(xh, xh, wh, fh.mean.to(h), fh.rstd, true),
                     ("batch_norm_backward: mean (3) is " + name + " but x (4, 3, 2) is " + name).c_str());
    CHECK_REEL_ERROR(batch_norm_apply(xh, wh, bh, fh.mean, fh.rstd.to(h)),
                     ("batch_norm_apply: rstd (3) is " + name + " but x (4, 3, 2) is " + name).c_str());
    CHECK_REEL_ERROR(batch_norm_replay(xh, wh, bh, fh.mean, fh.rstd, rv.to(h), false, 1e-5),
                     ("batch_norm_replay: var (3) is " + name + " but x (4, 3, 2) is " + name).c_str());
  }
  CHECK_REEL_ERROR(batch_norm_forward(x, w, b, zeros({3}).set_requires_grad(), rv, true),
                   "running_mean and running_var are statistics updated in place; they must not require grad");
  // Nothing above touched the running statistics; one value per channel is fine in eval.
  CHECK(values(rm) == std::vector<double>{0, 0, 0});
  CHECK(values(rv) == std::vector<double>{1, 1, 1});
  CHECK(batch_norm_forward(zeros({1, 3}), w, b, rm, rv, false).y.shape() == (Shape{1, 3}));
  // Through the user function too (the tape op's forward raises; nothing is left recorded).
  CHECK_REEL_ERROR(batch_norm(zeros({1, 3}).set_requires_grad(), rm, rv, Tensor(), Tensor(), true),
                   "Expected more than 1 value per channel when training");
  CHECK(autograd::Tape::current().empty());
  const BatchNormForward f = batch_norm_forward(x, w, b, rm, rv, true);
  CHECK_REEL_ERROR(batch_norm_backward(zeros({4, 3, 3}), x, w, f.mean, f.rstd, true),
                   "batch_norm_backward: dy (4, 3, 3) and x (4, 3, 2) differ in shape");
  CHECK_REEL_ERROR(batch_norm_backward(x, x, w, zeros({2}), f.rstd, true),
                   "batch_norm_backward: mean (2) does not match the 3 channels of x (4, 3, 2)");
  if (cuda_available())
    CHECK_REEL_ERROR(batch_norm_forward(x.to(Device::cuda(0)), w, b, rm, rv, true),
                     "batch_norm: expected all tensors on one device");
}

TEST_CASE("batch_norm in bf16 and f16: 16-bit y and gradients, f32 statistics and running statistics") {
  Poisoned poison;
  // Long runs (a task per channel), an (N, C) activation (blocks of 64 channels) and a small one.
  for (DType h : {DType::bf16, DType::f16})
    for (const Shape& shape : {Shape{32, 24, 5, 5}, Shape{512, 100}, Shape{16, 5}}) {
      CAPTURE(h);
      CAPTURE(shape_str(shape));
      const int64_t C = shape[1];
      const double u = h == DType::bf16 ? 0x1p-8 : 0x1p-11;  // half an ulp, relative
      const Tensor x = uniform_f64(shape, 70, -1, 3).to(h), dy = uniform_f64(shape, 71).to(h);
      const Tensor w = uniform_f64({C}, 72, 0.5, 1.5).to(h), b = uniform_f64({C}, 73).to(h);
      const Tensor rm0 = uniform_f64({C}, 74).to(DType::f32), rv0 = uniform_f64({C}, 75, 0.5, 2).to(DType::f32);
      struct Run {
        BatchNormForward f, e;
        BatchNormBackward g;
        Tensor rm, rv, replay;
      };
      // The forward in training (updating rm, rv), its replay, the eval forward with the updated
      // running statistics and the training backward, in dtype t (h, or f32 on the same values).
      auto run = [&](Device d, DType t) {
        Run r;
        r.rm = rm0.to(d).clone();
        r.rv = rv0.to(d).clone();
        const Tensor xd = x.to(t).to(d), wd = w.to(t).to(d), bd = b.to(t).to(d);
        r.f = batch_norm_forward(xd, wd, bd, r.rm, r.rv, true, 0.1);
        r.replay = batch_norm_replay(xd, wd, bd, r.f.mean, r.f.rstd, Tensor(), true, 1e-5);
        r.e = batch_norm_forward(xd, wd, bd, r.rm, r.rv, false);
        r.g = batch_norm_backward(dy.to(t).to(d), xd, wd, r.f.mean, r.f.rstd, true);
        return r;
      };
      std::vector<Run> runs;
      for_thread_counts({1, 2, 3, 7}, [&] { runs.push_back(run(Device::cpu(), h)); });
      const Run& r = runs[0];
      for (const Tensor& t : {r.f.y, r.e.y, r.replay, r.g.dx, r.g.dw, r.g.db}) CHECK(t.dtype() == h);
      for (const Tensor& t : {r.f.mean, r.f.rstd, r.e.mean, r.e.rstd, r.rm, r.rv}) CHECK(t.dtype() == DType::f32);
      for (size_t i = 1; i < runs.size(); ++i)  // any thread count: the same bits
        for (const auto& [a, b2] :
             {std::make_pair(runs[i].f.y, r.f.y), std::make_pair(runs[i].f.rstd, r.f.rstd),
              std::make_pair(runs[i].rv, r.rv), std::make_pair(runs[i].g.dx, r.g.dx),
              std::make_pair(runs[i].g.dw, r.g.dw), std::make_pair(runs[i].g.db, r.g.db)})
          CHECK(bit_identical(a, b2));
      CHECK(bit_identical(r.replay, r.f.y));  // a checkpoint replay: the forward's bits
      // Against f32 on the same values: the statistics are the same double sums rounded to f32
      // (within an f32 ulp: not bits, which FMA contraction may vary between the two
      // instantiations); y, dx (f32 math) and dw, db (double sums) rounded once to the 16-bit type.
      const Run f = run(Device::cpu(), DType::f32);
      for (const auto& [a, b2] : {std::make_pair(r.f.mean, f.f.mean), std::make_pair(r.f.rstd, f.f.rstd),
                                  std::make_pair(r.rm, f.rm), std::make_pair(r.rv, f.rv),
                                  std::make_pair(r.e.rstd, f.e.rstd)})
        check_close(a, b2, 0x1p-23, 1e-12);
      check_close(r.f.y, f.f.y, u, 1e-6);
      check_close(r.e.y, f.e.y, u, 1e-6);
      check_close(r.g.dx, f.g.dx, u, 1e-6);
      check_close(r.g.dw, f.g.dw, u, 1e-6);
      check_close(r.g.db, f.g.db, u, 1e-6);
      if (!cuda_available()) continue;
      // cuda: reel's kernels for 16-bit data (not cuDNN), against the cpu; deterministic; the
      // replay gives the forward's bits.
      const Run c1 = run(Device::cuda(0), h), c2 = run(Device::cuda(0), h);
      for (const Tensor& t : {c1.f.y, c1.replay, c1.g.dx, c1.g.dw, c1.g.db}) CHECK(t.dtype() == h);
      for (const Tensor& t : {c1.f.mean, c1.f.rstd, c1.rm, c1.rv}) CHECK(t.dtype() == DType::f32);
      check_close(c1.f.mean, r.f.mean, 1e-6, 1e-6);
      check_close(c1.f.rstd, r.f.rstd, 1e-6, 1e-6);
      check_close(c1.rm, r.rm, 1e-6, 1e-6);
      check_close(c1.rv, r.rv, 1e-6, 1e-6);
      // Two f32 results a few ulps apart may round to neighbouring 16-bit values: 2u.
      check_close(c1.f.y, r.f.y, 2 * u, 1e-6);
      check_close(c1.e.y, r.e.y, 2 * u, 1e-6);
      check_close(c1.g.dx, r.g.dx, 2 * u, 1e-6);
      check_close(c1.g.dw, r.g.dw, 2 * u, 1e-6);
      check_close(c1.g.db, r.g.db, 2 * u, 1e-6);
      CHECK(bit_identical(c1.replay, c1.f.y));
      CHECK(bit_identical(c1.f.y, c2.f.y));
      CHECK(bit_identical(c1.rv, c2.rv));
      CHECK(bit_identical(c1.g.dx, c2.g.dx));
      CHECK(bit_identical(c1.g.dw, c2.g.dw));
    }
}

TEST_CASE("BatchNorm2d in 16 bits: Module::to(bf16) keeps the running statistics f32; autocast runs it in bf16") {
  for (Device d : devices())
    for (DType h : {DType::bf16, DType::f16}) {
      CAPTURE(d);
      CAPTURE(h);
      const Tensor x = uniform_f64({4, 3, 2, 2}, 80, -1, 3).to(h).to(d);
      // The functional f32 op's running statistics on the same values (the reference of both).
      const Tensor rm = zeros({3}, DType::f32, d), rv = ones({3}, DType::f32, d);
      batch_norm_forward(x.to(DType::f32), ones({3}, DType::f32, d), zeros({3}, DType::f32, d), rm, rv, true, 0.1);

      // A 16-bit model: parameters in h, floating buffers f32, the batch count i64.
      nn::BatchNorm2d bn(3);
      bn.to(d);
      bn.to(h);
      CHECK(bn.weight.dtype() == h);
      CHECK(bn.bias.dtype() == h);
      CHECK(bn.running_mean.dtype() == DType::f32);
      CHECK(bn.running_var.dtype() == DType::f32);
      CHECK(bn.num_batches_tracked.dtype() == DType::i64);
      const Tensor y = bn(x);
      CHECK(y.dtype() == h);
      check_close(bn.running_mean, rm, 1e-6, 1e-6);
      check_close(bn.running_var, rv, 1e-6, 1e-6);
      CHECK(values(bn.num_batches_tracked) == std::vector<double>{1});
      const std::vector<double> rv1 = values(bn.running_var);
      bn.eval();
      CHECK(bn(x).dtype() == h);
      CHECK(values(bn.running_var) == rv1);  // eval leaves them alone
      bn.to(DType::f64);  // to f64: the buffers too
      CHECK(bn.running_mean.dtype() == DType::f64);
      autograd::Tape::current().clear();  // the forwards above were recorded (parameters need grad)

      // An f32 BatchNorm2d under autocast: x, weight, bias cast to h, y in h; the running statistics
      // stay f32 buffers, updated; the f32 parameters and the f32 input get f32 gradients.
      nn::BatchNorm2d amp_bn(3);
      amp_bn.to(d);
      const Tensor xf = x.to(DType::f32).set_requires_grad();
      Tensor ya;
      {
        autograd::Autocast amp(h);
        ya = amp_bn(xf);
      }
      CHECK(ya.dtype() == h);
      CHECK(amp_bn.running_mean.dtype() == DType::f32);
      check_close(amp_bn.running_mean, rm, 1e-6, 1e-6);  // x cast to h is x: the same statistics
      check_close(amp_bn.running_var, rv, 1e-6, 1e-6);
      autograd::backward(reel::sum(ya * x));
      REQUIRE(amp_bn.weight.grad().defined());
      CHECK(amp_bn.weight.grad().dtype() == DType::f32);
      CHECK(amp_bn.bias.grad().dtype() == DType::f32);
      CHECK(xf.grad().dtype() == DType::f32);
      // The same gradients as the bf16 model's (weight 1, bias 0 in both), through the casts.
      nn::BatchNorm2d low(3);
      low.to(d);
      low.to(h);
      const Tensor xl = x.clone().set_requires_grad();
      autograd::backward(reel::sum(low(xl) * x));
      CHECK(bit_identical(xf.grad(), xl.grad().to(DType::f32)));
      CHECK(bit_identical(amp_bn.weight.grad(), low.weight.grad().to(DType::f32)));
      CHECK(autograd::Tape::current().empty());
    }
}
