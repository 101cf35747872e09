// tests/test_cuda_nn_ops.cpp: the CUDA edge cases of the neural-network kernel families
// (kernels/ops.h); every entry point's values on cuda against the CPU are rows of the op table
// (tests/op_table/). Here: the deterministic backward kernels (LayerNorm/RMSNorm weights,
// embedding, attention, the gradient norm, pooling, BatchNorm) must give the same bits on every run, and in
// the emulated build under every scheduling order of the emulator; cross-entropy with every row ignored
// and with logits of 1e4; bad indices (a token id, a target, an argmax index out of range) must
// raise the CPU's reel::Error on cuda without any out-of-bounds access (the ASan build runs this
// test too); other bad inputs. Every allocation is poisoned (0xFF bytes: NaN, -1).
#include <cmath>
#include <cstring>
#include <functional>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "core/stream.h"
#include "kernels/index_check.h"
#include "kernels/ops.h"
#include "testing.h"
#if defined(REEL_HAS_CUDA_BACKEND)
#include "kernels/backends.h"
#include "kernels/cuda/cuda_only.h"
#endif
#if defined(REEL_CUDA_EMULATED)
// simt::set_order; the launch log and the ticket counter (host code of the emulated flavour only, as
// in tests/test_replay_safe.cpp). Last: simt.h defines the CUDA keywords as macros.
#include "kernels/cuda/last_block.h"
#include "kernels/cuda/launch.h"
#include "kernels/simt/simt.h"
#endif

using namespace reel;
using namespace reel::kernels;
using namespace reel::testing;

REEL_TEST_REQUIRES_CUDA();

namespace {

const Device kCuda = Device::cuda(0);

Tensor cu(const Tensor& t) { return t.to(kCuda); }

// A result computed on cuda, compared with the cpu's.
void check_cuda(const Tensor& got, const Tensor& expected, double rtol, double atol) {
  CHECK(got.device() == kCuda);
  CHECK(got.dtype() == expected.dtype());
  check_close(got, expected, rtol, atol);
}

// Runs fn once per scheduling order of the emulator (forward, reverse, shuffle), or once on a GPU.
void for_each_order(const std::function<void()>& fn) {
#if defined(REEL_CUDA_EMULATED)
  const simt::Order saved = simt::order();
  for (simt::Order o : {simt::Order::forward, simt::Order::reverse, simt::Order::shuffle}) {
    simt::set_order(o);
    fn();
  }
  simt::set_order(saved);
#else
  fn();
#endif
}

Tensor make_ids(const std::vector<int64_t>& ids, const Shape& shape, DType dt) {
  return from_vector<int64_t>(ids, shape).to(dt);
}

}  // namespace

// ---- LayerNorm / RMSNorm -----------------------------------------------------------------------

TEST_CASE("layernorm and rmsnorm backward on cuda are bit-identical run to run and in every scheduling order") {
  Poisoned poison;
  const Shape shape{300, 37};  // 10 row chunks of 32: the dw/db partials are summed across blocks
  const Tensor x = cu(uniform_f64(shape, 1, -2, 3).to(DType::f32)), dy = cu(uniform_f64(shape, 2).to(DType::f32));
  const Tensor w = cu(uniform_f64({37}, 3).to(DType::f32)), b = cu(uniform_f64({37}, 5).to(DType::f32));
  const LayerNormForward f = layernorm_forward(x, w, b);
  const RMSNormForward rf = rmsnorm_forward(x, w);
  const LayerNormBackward ref = layernorm_backward(dy, x, w, f.mean, f.rstd);
  const RMSNormBackward rms_ref = rmsnorm_backward(dy, x, w, rf.rstd);
  for_each_order([&] {
    for (int run = 0; run < 2; ++run) {
      const LayerNormBackward g = layernorm_backward(dy, x, w, f.mean, f.rstd);
      CHECK(bit_identical(g.dx, ref.dx));
      CHECK(bit_identical(g.dw, ref.dw));
      CHECK(bit_identical(g.db, ref.db));
      CHECK(bit_identical(rmsnorm_backward(dy, x, w, rf.rstd).dw, rms_ref.dw));
    }
  });
}

TEST_CASE("group_norm backward on cuda is bit-identical run to run and in every scheduling order") {
  Poisoned poison;
  const Shape shape{5, 8, 7, 11};  // 77 positions per channel: each block reduction spans partial warps
  const Tensor x = cu(uniform_f64(shape, 6, -2, 3).to(DType::f32)), dy = cu(uniform_f64(shape, 7).to(DType::f32));
  const Tensor w = cu(uniform_f64({8}, 8).to(DType::f32)), b = cu(uniform_f64({8}, 9).to(DType::f32));
  const GroupNormForward f = group_norm_forward(x, w, b, 2);
  const GroupNormBackward ref = group_norm_backward(dy, x, w, f.mean, f.rstd, 2);
  for_each_order([&] {
    for (int run = 0; run < 2; ++run) {
      const GroupNormBackward g = group_norm_backward(dy, x, w, f.mean, f.rstd, 2);
      CHECK(bit_identical(g.dx, ref.dx));
      CHECK(bit_identical(g.dw, ref.dw));
      CHECK(bit_identical(g.db, ref.db));
    }
  });
}

TEST_CASE("batch_norm stats, forward and backward on cuda are bit-identical run to run and in every scheduling order") {
  Poisoned poison;
  const Shape shape{5, 6, 7, 11};  // 385 values per channel: the block reductions span partial warps
  const Tensor x = cu(uniform_f64(shape, 12, -2, 3).to(DType::f32)), dy = cu(uniform_f64(shape, 13).to(DType::f32));
  const Tensor w = cu(uniform_f64({6}, 14).to(DType::f32)), b = cu(uniform_f64({6}, 15).to(DType::f32));
  const Tensor rm0 = cu(uniform_f64({6}, 16).to(DType::f32)), rv0 = cu(uniform_f64({6}, 17, 0.5, 2).to(DType::f32));
  auto run = [&] {
    const Tensor rm = rm0.clone(), rv = rv0.clone();
    const BatchNormForward f = batch_norm_forward(x, w, b, rm, rv, true);
    return std::make_tuple(f, batch_norm_backward(dy, x, w, f.mean, f.rstd, true), rm, rv);
  };
  const auto ref = run();
  for_each_order([&] {
    for (int i = 0; i < 2; ++i) {
      const auto r = run();
      CHECK(bit_identical(std::get<0>(r).y, std::get<0>(ref).y));
      CHECK(bit_identical(std::get<0>(r).rstd, std::get<0>(ref).rstd));
      CHECK(bit_identical(std::get<1>(r).dx, std::get<1>(ref).dx));
      CHECK(bit_identical(std::get<1>(r).dw, std::get<1>(ref).dw));
      CHECK(bit_identical(std::get<1>(r).db, std::get<1>(ref).db));
      CHECK(bit_identical(std::get<2>(r), std::get<2>(ref)));
      CHECK(bit_identical(std::get<3>(r), std::get<3>(ref)));
    }
  });
}

TEST_CASE("max_pool2d and avg_pool2d backward on cuda are bit-identical run to run and in every scheduling order") {
  Poisoned poison;
  const Shape shape{3, 5, 13, 11};  // 3x3 windows, stride 1, padding 1: each input in up to 9 windows
  const Pool2d p{{3, 3}, {1, 1}, {1, 1}, {1, 1}};
  const Tensor x = cu(uniform_f64(shape, 10, -2, 2).to(DType::f32)), dy = cu(uniform_f64(shape, 11).to(DType::f32));
  const MaxPool2dForward f = max_pool2d_forward(x, p);
  const Tensor max_ref = max_pool2d_backward(dy, f.indices, shape, p), avg_ref = avg_pool2d_backward(dy, shape, p);
  for_each_order([&] {
    for (int run = 0; run < 2; ++run) {
      const MaxPool2dForward g = max_pool2d_forward(x, p);
      CHECK(bit_identical(g.indices, f.indices));
      CHECK(bit_identical(max_pool2d_backward(dy, g.indices, shape, p), max_ref));
      CHECK(bit_identical(avg_pool2d_backward(dy, shape, p), avg_ref));
    }
  });
}

TEST_CASE("ceil_mode pooling on cuda (reel's kernels: windows past the padded edge) is bit-identical in every order") {
  Poisoned poison;
  // 3x3 stride 2 padding 1 with ceil_mode on (12, 10): (7, 6) outputs, the last row and column of
  // windows hanging past the padded edge, so avg pooling stays on reel's kernel (not cuDNN).
  const Shape shape{3, 5, 12, 10}, out{3, 5, 7, 6};
  for (const bool include_pad : {true, false}) {
    const Pool2d p{{3, 3}, {2, 2}, {1, 1}, {1, 1}, true, include_pad};
    const Tensor x = cu(uniform_f64(shape, 12, -2, 2).to(DType::f32)), dy = cu(uniform_f64(out, 13).to(DType::f32));
    const MaxPool2dForward f = max_pool2d_forward(x, p);
    REQUIRE(f.y.shape() == out);
    const Tensor max_ref = max_pool2d_backward(dy, f.indices, shape, p), avg_ref = avg_pool2d_backward(dy, shape, p);
    const Tensor avg_y = avg_pool2d_forward(x, p);
    for_each_order([&] {
      const MaxPool2dForward g = max_pool2d_forward(x, p);
      CHECK(bit_identical(g.indices, f.indices));
      CHECK(bit_identical(max_pool2d_backward(dy, g.indices, shape, p), max_ref));
      CHECK(bit_identical(avg_pool2d_forward(x, p), avg_y));
      CHECK(bit_identical(avg_pool2d_backward(dy, shape, p), avg_ref));
    });
  }
}

// ---- cross-entropy ----------------------------------------------------------------------------

TEST_CASE("cross-entropy on cuda: all targets ignored give 0, logits of 1e4 stay finite") {
  Poisoned poison;
  const Tensor logits = uniform_f64({4, 6}, 2).to(DType::f32);
  const Tensor ignored = from_vector<int64_t>({-100, -100, -100, -100}, {4});
  const CrossEntropyForward f = cross_entropy_forward(cu(logits), cu(ignored), Reduction::Mean, -100, 1.0);
  CHECK(f.count.item() == 0.0);
  CHECK(f.loss.item() == 0.0);
  for (double d : values(f.dlogits)) CHECK(d == 0.0);
  const std::vector<double> x = {1e4, -1e4, 1e4 - 1, 0, -1e4, 2e4, 2e4, -2e4, 5, 5, 5, 1e4};
  const Tensor big = from_vector<double>(x, {3, 4}).to(DType::f32), t = from_vector<int64_t>({1, 2, 0}, {3});
  const CrossEntropyForward c = cross_entropy_forward(big, t, Reduction::None, -100, 1.0);
  const CrossEntropyForward g = cross_entropy_forward(cu(big), cu(t), Reduction::None, -100, 1.0);
  for (double v : values(g.dlogits)) CHECK(std::isfinite(v));
  check_cuda(g.loss, c.loss, 1e-6, 1e-6);
  check_cuda(g.dlogits, c.dlogits, 1e-6, 1e-6);
}

#if defined(REEL_CUDA_EMULATED)
TEST_CASE("cross-entropy's forward is one launch on cuda and meta (two when the count goes first), ticket reset") {
  // kernels/cross_entropy.h, CrossEntropyPlan: the rows, the count and the reduction in one launch,
  // whose last block counts and reduces (kernels/cuda/last_block.h); the Mean's fused gradient
  // counts in every block, or under the fallback in a launch of its own first.
  Poisoned poison;
  struct Case {
    int64_t N, V;
    DType tt;
    Reduction red;
    bool grad, all_ignored, count_first;
  };
  const std::vector<Case> cases = {
      {37, 13, DType::i32, Reduction::Mean, true, false, false},  // every block counts
      {37, 13, DType::i64, Reduction::Mean, true, true, false},   // every target ignored: loss 0, not NaN
      {37, 13, DType::i64, Reduction::Sum, true, false, false},   // the last block counts
      {300, 5, DType::i32, Reduction::Mean, false, false, false}, // Mean without the gradient: the last block
      {300, 5, DType::i64, Reduction::None, true, false, false},  // no reduction, the count all the same
      {300, 5, DType::i32, Reduction::Sum, false, true, false},
      // 730 blocks x 730 i64 targets: 4.3 MB, over kRecountBytes: the count goes first.
      {730, 3, DType::i64, Reduction::Mean, true, false, true},
      {730, 3, DType::i64, Reduction::Mean, true, true, true},
  };
  unsigned* const ticket = kernels::cuda::last_block_ticket(kCuda);
  for (const Case& c : cases) {
    CAPTURE(c.N);
    CAPTURE(c.tt);
    CAPTURE(std::string(reduction_name(c.red)));
    CAPTURE(c.all_ignored);
    const int64_t ib = c.tt == DType::i32 ? 4 : 8;
    REQUIRE(cross_entropy_plan(c.N, ib, c.red == Reduction::Mean && c.grad).count_first == c.count_first);
    std::vector<int64_t> t(static_cast<size_t>(c.N));
    for (int64_t n = 0; n < c.N; ++n) t[n] = c.all_ignored || n % 4 == 2 ? -100 : (n * 5) % c.V;
    const Tensor logits = uniform_f64({c.N, c.V}, 3).to(DType::f32), targets = make_ids(t, {c.N}, c.tt);
    const std::optional<double> g = c.grad ? std::optional<double>(0.37) : std::nullopt;
    const CrossEntropyForward cpu = cross_entropy_forward(logits, targets, c.red, -100, g);
    const std::vector<std::string> expected =
        c.count_first ? std::vector<std::string>{"cross_entropy_count_kernel", "cross_entropy_forward_kernel"}
                      : std::vector<std::string>{"cross_entropy_forward_kernel"};
    const auto run = [&](Device d, kernels::cuda::LaunchLog& log) {
      const Tensor x = logits.to(d), y = targets.to(d);
      kernels::cuda::launch_log = &log;
      CrossEntropyForward f = cross_entropy_forward(x, y, c.red, -100, g);
      kernels::cuda::launch_log = nullptr;
      std::vector<std::string> names;
      for (const auto& e : log.entries) names.push_back(e.kernel);
      CHECK(names == expected);
      return f;
    };
    kernels::cuda::LaunchLog on_meta;
    run(Device::meta(), on_meta);
    const auto check_run = [&] {
      kernels::cuda::LaunchLog first, second;
      const CrossEntropyForward f = run(kCuda, first);
      // The same grids as meta's (which records what cuda launches and computes nothing).
      REQUIRE(first.entries.size() == on_meta.entries.size());
      for (size_t i = 0; i < first.entries.size(); ++i) CHECK(first.entries[i].grid[0] == on_meta.entries[i].grid[0]);
      // The count equals the cpu's; the loss is the f64 sum of cuda's own per-row losses (which may
      // differ from the cpu's by an ulp: the rows' arithmetic differs) in kLossLanes' order, bit for bit.
      CHECK(bit_identical(f.count, cpu.count));
      if (c.red != Reduction::None) {
        const std::vector<double> rows = values(f.losses);
        std::vector<double> lanes(kLossLanes, 0.0);
        for (size_t i = 0; i < rows.size(); ++i) lanes[i % kLossLanes] += rows[i];
        for (int w = kLossLanes / 2; w > 0; w /= 2)
          for (int l = 0; l < w; ++l) lanes[l] += lanes[l + w];
        const double scale = c.red == Reduction::Mean ? REEL_MEAN_SCALE(cpu.count.item()) : 1.0;
        CHECK(bit_identical(f.loss, scalar_tensor(lanes[0] * scale, DType::f32)));
        check_cuda(f.loss, cpu.loss, 1e-6, 1e-6);
      }
      if (c.all_ignored) {
        CHECK(f.count.item() == 0.0);
        if (c.red != Reduction::None) CHECK(f.loss.item() == 0.0);
        if (c.grad)
          for (double v : values(f.dlogits)) CHECK(v == 0.0);
      }
      // The last block set the counter back to 0, so the next launch finds its last block again:
      // the same bits (an unreset counter would leave the poisoned loss unwritten).
      unsigned left = 1;
      REQUIRE(cudaMemcpy(&left, ticket, sizeof left, cudaMemcpyDeviceToHost) == cudaSuccess);
      CHECK(left == 0u);
      const CrossEntropyForward again = run(kCuda, second);
      CHECK(bit_identical(again.loss, f.loss));
      CHECK(bit_identical(again.count, f.count));
      CHECK(bit_identical(again.losses, f.losses));
      CHECK(bit_identical(again.lse, f.lse));
      if (c.grad) CHECK(bit_identical(again.dlogits, f.dlogits));
    };
    if (c.N > 300) check_run();  // the large grid once (the emulator's time)
    else for_each_order(check_run);
  }
}
#endif

// ---- embedding ----------------------------------------------------------------------------------

TEST_CASE("embedding backward on cuda with repeated ids is bit-identical in every scheduling order") {
  Poisoned poison;
  struct Case {
    Shape ids;
    int64_t V, C;
  };
  // 300 positions: two scan tiles; V = 1100: more rows than owner blocks (several rows a block).
  const std::vector<Case> cases = {{{1}, 1, 1}, {{2, 7}, 13, 31}, {{300}, 257, 1}, {{3, 100}, 1100, 5},
                                   {{64}, 5, 257}};
  for (const Case& c : cases) {
    CAPTURE(shape_str(c.ids));
    const int64_t N = shape_numel(c.ids);
    std::vector<int64_t> ids;
    for (int64_t n = 0; n < N; ++n) ids.push_back(n % 4 == 0 ? c.V / 2 : (n * 7919) % c.V);  // a hot id
    const Tensor idt = cu(make_ids(ids, c.ids, DType::i32));
    Shape out_shape = c.ids;
    out_shape.push_back(c.C);
    const Tensor dout = cu(uniform_f64(out_shape, 2).to(DType::f32));
    const Tensor got = embedding_backward(dout, idt, c.V);
    for_each_order([&] { CHECK(bit_identical(embedding_backward(dout, idt, c.V), got)); });
  }
}

// ---- attention ----------------------------------------------------------------------------------

TEST_CASE("flash attention backward on cuda is bit-identical run to run and in every scheduling order") {
  Poisoned poison;
  const Tensor q = cu(uniform_f64({1, 2, 45, 20}, 1).to(DType::f32)), k = cu(uniform_f64({1, 2, 45, 20}, 2).to(DType::f32));
  const Tensor v = cu(uniform_f64({1, 2, 45, 20}, 3).to(DType::f32)), dout = cu(uniform_f64({1, 2, 45, 20}, 4).to(DType::f32));
  const AttentionForward f = attention_forward(q, k, v);
  const AttentionBackward ref = attention_backward(dout, q, k, v, f.out, f.lse);
  for_each_order([&] {
    CHECK(bit_identical(attention_forward(q, k, v).out, f.out));
    const AttentionBackward b = attention_backward(dout, q, k, v, f.out, f.lse);
    CHECK(bit_identical(b.dq, ref.dq));
    CHECK(bit_identical(b.dk, ref.dk));
    CHECK(bit_identical(b.dv, ref.dv));
  });
}

// ---- the gradient norm -------------------------------------------------------------------------

TEST_CASE("global grad norm on cuda: the same bits every run and order, 0 for no tensors") {
  Poisoned poison;
  // More tensors than one launch holds (64 slots) and one past the 320 chunks of 16384 of a launch.
  std::vector<Tensor> grads;
  Generator g(7);
  for (int64_t n : {int64_t{1}, int64_t{1023}, int64_t{20000}, int64_t{321 * 16384 + 5}})
    grads.push_back(rand({n}, DType::f32, kCuda, &g));
  for (int64_t i = 0; i < 65; ++i) grads.push_back(rand({3 + i}, i == 2 ? DType::f64 : DType::f32, kCuda, &g));
  const double got = global_grad_norm(grads);
  CHECK(std::isfinite(got));
  for_each_order([&] { CHECK(global_grad_norm(grads) == got); });
  CHECK(global_grad_norm({}) == 0.0);
  // The device path (the fold in the list's last launch, over every launch's partials): the same bits.
  const Tensor out = full({2}, -1.0, DType::f64, kCuda);
  global_grad_norm_(grads, out, 0.0, Tensor(), false);
  CHECK(out.to(Device::cpu()).data<double>()[0] == got);
  global_grad_norm_({}, out, 0.0, Tensor(), false);
  CHECK(out.to(Device::cpu()).data<double>()[0] == 0.0);
}

// ---- bad inputs ---------------------------------------------------------------------------------

TEST_CASE("out-of-range ids, targets and indices on cuda raise the cpu's reel::Error at the next read, with no out-of-bounds read") {
  Poisoned poison;
  // The report is deferred (kernels/index_check.h): the op returns, and the next host read of the
  // device (here values(), a copy to the host) raises the message the cpu raises at the op.
  const Tensor table = cu(zeros({10, 3}));
  CHECK_REEL_ERROR(values(embedding_forward(cu(from_vector<int64_t>({1, 2, 3, 10}, {2, 2})), table)),
                   "embedding_forward: id 10 at position (1, 1) of (2, 2) is out of range [0, 10) of the table's rows");
  CHECK_REEL_ERROR(values(embedding_forward(cu(from_vector<int32_t>({-1}, {1})), table)),
                   "embedding_forward: id -1 at position (0) of (1) is out of range [0, 10)");
  // Two bad ids: the first position is named, as on the cpu.
  CHECK_REEL_ERROR(values(embedding_forward(cu(from_vector<int64_t>({1, 99, 3, -7}, {4})), table)),
                   "embedding_forward: id 99 at position (1) of (4)");
  CHECK_REEL_ERROR(values(embedding_backward(cu(zeros({2, 3})), cu(from_vector<int64_t>({1, 12}, {2})), 10)),
                   "embedding_backward: id 12 at position (1) of (2) is out of range [0, 10)");
  CHECK_REEL_ERROR(embedding_forward(cu(from_vector<int64_t>({0, 5000000000}, {2})), cu(zeros({10, 0}))),
                   "embedding_forward: id 5000000000 at position (1) of (2)");  // no kernel: the host check, at once
  const Tensor logits = cu(zeros({4, 10}));
  CHECK_REEL_ERROR(cross_entropy_forward(logits, cu(from_vector<int64_t>({1, 2, 10, 3}, {4}))).loss.item(),
                   "cross_entropy_forward: target 10 at position (2) of (4) is out of range [0, 10) of the classes and "
                   "is not ignore_index (-100)");
  CHECK_REEL_ERROR(values(cross_entropy_forward(logits, cu(from_vector<int32_t>({1, -1, 0, 3}, {4}))).lse),
                   "cross_entropy_forward: target -1 at position (1) of (4) is out of range");
  const Tensor t = cu(from_vector<int64_t>({1, 2, 3, 4}, {4}));
  const CrossEntropyForward f = cross_entropy_forward(logits, t, Reduction::None);
  CHECK_REEL_ERROR(values(cross_entropy_backward(cu(zeros({4})), logits, cu(from_vector<int64_t>({0, 0, 0, 11}, {4})),
                                                 f.lse, Reduction::None)),
                   "cross_entropy_backward: target 11 at position (3) of (4) is out of range [0, 10)");
  CHECK_REEL_ERROR(values(max_backward(cu(zeros({2})), cu(from_vector<int64_t>({0, 3}, {2})), {2, 3}, 1)),
                   "max_backward: index 3 at position (1) of (2) is out of range [0, 3)");
  // Raised at an explicit check too, and then only once: the first bad launch of several, in
  // launch order; the slots are cleared, so the next correct op and read work.
  Tensor bad1, bad2;
  CHECK_NOTHROW(bad1 = embedding_forward(cu(from_vector<int64_t>({0, 11}, {2})), table));
  CHECK_NOTHROW(bad2 = embedding_forward(cu(from_vector<int64_t>({12, 0}, {2})), table));
  CHECK_REEL_ERROR(check_device_errors(Device::cuda(0)), "embedding_forward: id 11 at position (1) of (2)");
  CHECK_NOTHROW(check_device_errors(Device::cuda(0)));
  CHECK_NOTHROW(values(bad2));
  // And at a synchronize of the compute stream.
  CHECK_NOTHROW(embedding_forward(cu(from_vector<int64_t>({10}, {1})), table));
  CHECK_REEL_ERROR(Stream::compute(Device::cuda(0)).synchronize(), "embedding_forward: id 10 at position (0) of (1)");
#if defined(REEL_HAS_CUDA_BACKEND)
  // The kernels themselves, without the entry point's checks: a bad target or id is recorded, not
  // read (ASan would catch the read in the emulated build), and raised as IndexOutOfRange.
  Tensor losses = cu(empty({4})), lse = cu(empty({4})), dlogits = cu(empty({4, 10}));
  Tensor count = cu(empty({}, DType::i64)), loss = cu(empty({}));
  try {
    kernels::cuda::cross_entropy_forward(logits, cu(from_vector<int64_t>({1, 2, 1000000, -5}, {4})), -100, losses,
                                         lse, dlogits, 1.0, false, cross_entropy_plan(4, 8, false), count, loss);
    check_device_errors(Device::cuda(0));
    FAIL("no error");
  } catch (const kernels::cuda::IndexOutOfRange& e) {
    CHECK(e.position == 2);
    CHECK(e.value == 1000000);
  }
  try {
    kernels::cuda::embedding_backward(cu(zeros({3, 3})), cu(from_vector<int32_t>({1, -100000, 2}, {3})),
                                      cu(empty({10, 3})), true);
    check_device_errors(Device::cuda(0));
    FAIL("no error");
  } catch (const kernels::cuda::IndexOutOfRange& e) {
    CHECK(e.position == 1);
    CHECK(e.value == -100000);
  }
#endif
  // The device is fine afterwards.
  check_cuda(embedding_forward(cu(from_vector<int64_t>({9}, {1})), table), zeros({1, 3}), 0, 0);
}

TEST_CASE("other bad inputs on cuda: mixed devices, head dims above the kernels' limit") {
  const Tensor x = cu(zeros({2, 4}));
  CHECK_REEL_ERROR(layernorm_forward(x, ones({4}), cu(zeros({4}))), "expected all tensors on one device");
  CHECK_REEL_ERROR(sgd_update({cu(zeros({3})), zeros({3})}, {cu(zeros({3})), zeros({3})}, {}, 0.1, 0, 0, 0, false, 1),
                   "sgd_update: param 1 (3) is on cpu but param 0 on cuda:0");
  CHECK_REEL_ERROR(scale_({zeros({3}), cu(zeros({3}))}, 2.0), "scale_: tensor 1 (3) is on cuda:0 but tensor 0 on cpu");
  const Tensor q = cu(zeros({1, 1, 4, 129}));
  CHECK_REEL_ERROR(attention_forward(q, q, q), "exceed the cuda kernels' limit of 128");
}
