// tests/test_cuda_nn_ops.cpp: every entry point of kernels/nn_ops.h on cuda:0 against the same
// call on the CPU (whose kernels tests/test_nn_kernels_*.cpp check against f64 references and
// finite differences), forward and backward, f32 and f64, on awkward shapes: one row, C = 1, 31,
// 257, T = 1, 7, 64, 129, V prime, D not a multiple of a warp, lists with more tensors than one
// launch takes. Every allocation is poisoned (0xFF bytes: NaN, -1), so an output element a kernel
// forgets to write fails. The deterministic backward kernels (LayerNorm/RMSNorm weights,
// embedding, attention, the gradient norm) must give the same bits on every run, and in the
// emulated build under every scheduling order of the emulator. Bad indices (a token id, a
// target, an argmax index out of range) must raise the CPU's reel::Error on cuda without any
// out-of-bounds access (the ASan build runs this test too).
//
// Tolerances: |cuda - cpu| <= atol + rtol |cpu|. f32: the GPU sums rows in float where the CPU
// often uses double, in a different order, and FMA contraction differs; the error grows with the
// length of the sums, so it is scaled where rows are long. f64: a few ulps of the sums.
// Emulated, the whole file runs in ~10 s: sizes are small on purpose (emulation costs ~20 ns per
// CUDA thread and ~45 ns per barrier per thread).
#include <cmath>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "core/allocator.h"
#include "nn_kernels_testing.h"
#if defined(REEL_HAS_CUDA_BACKEND)
#include "kernels/backends.h"
#include "kernels/cuda/cuda_only.h"
#endif
#if defined(REEL_CUDA_EMULATED)
#include "kernels/simt/simt.h"  // simt::set_order, last: it defines the CUDA keywords as macros
#endif

REEL_TEST_REQUIRES_CUDA();

namespace {

const Device kCuda = Device::cuda(0);

// Poisoned allocations for the scope of a test case.
struct Poisoned {
  Poisoned() { set_poison_allocations(true); }
  ~Poisoned() { set_poison_allocations(false); }
};

double tol(DType dt, double f32, double f64 = 1e-12) { return dt == DType::f32 ? f32 : f64; }

Tensor cu(const Tensor& t) { return t.to(kCuda); }

// A result computed on cuda, compared with the cpu's.
void check_cuda(const Tensor& got, const Tensor& expected, double rtol, double atol) {
  CHECK(got.device() == kCuda);
  CHECK(got.dtype() == expected.dtype());
  check_close(got, expected, rtol, atol);
}

bool same_bits(const Tensor& a, const Tensor& b) {
  return bit_identical(a.to(Device::cpu()), b.to(Device::cpu()));
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

TEST_CASE("layernorm and rmsnorm on cuda match the cpu: forward, backward, awkward shapes") {
  Poisoned poison;
  const std::vector<Shape> shapes = {{1, 1}, {1, 257}, {5, 1}, {3, 31}, {2, 3, 33}, {7, 257}, {257}, {1100, 7}};
  for (const Shape& shape : shapes)
    for (DType dt : {DType::f32, DType::f64}) {
      CAPTURE(shape_str(shape));
      CAPTURE(dtype_name(dt));
      const int64_t C = shape.back(), R = shape_numel(shape) / C;
      const Tensor x = uniform_f64(shape, 1, -2, 3).to(dt), dy = uniform_f64(shape, 4).to(dt);
      const Tensor w = uniform_f64({C}, 2, 0.5, 1.5).to(dt), b = uniform_f64({C}, 3).to(dt);
      const double t = tol(dt, 2e-5), tr = tol(dt, 1e-5 * std::sqrt(static_cast<double>(R)) + 1e-5);

      const LayerNormForward f = layernorm_forward(x, w, b);
      const LayerNormForward g = layernorm_forward(cu(x), cu(w), cu(b));
      check_cuda(g.y, f.y, t, t);
      check_cuda(g.mean, f.mean, t, t);
      check_cuda(g.rstd, f.rstd, t, t);
      const LayerNormBackward fb = layernorm_backward(dy, x, w, f.mean, f.rstd);
      const LayerNormBackward gb = layernorm_backward(cu(dy), cu(x), cu(w), g.mean, g.rstd);
      check_cuda(gb.dx, fb.dx, tol(dt, 1e-4), tol(dt, 1e-4));
      check_cuda(gb.dw, fb.dw, tr, tr);
      check_cuda(gb.db, fb.db, tr, tr);

      const RMSNormForward rf = rmsnorm_forward(x, w);
      const RMSNormForward rg = rmsnorm_forward(cu(x), cu(w));
      check_cuda(rg.y, rf.y, t, t);
      check_cuda(rg.rstd, rf.rstd, t, t);
      const RMSNormBackward rfb = rmsnorm_backward(dy, x, w, rf.rstd);
      const RMSNormBackward rgb = rmsnorm_backward(cu(dy), cu(x), cu(w), rg.rstd);
      check_cuda(rgb.dx, rfb.dx, tol(dt, 1e-4), tol(dt, 1e-4));
      check_cuda(rgb.dw, rfb.dw, tr, tr);
    }
  // A strided (transposed) input is made contiguous by the entry point.
  const Tensor xt = uniform_f64({5, 33}, 7).to(DType::f32), w = ones({5}, DType::f32), b = zeros({5}, DType::f32);
  check_cuda(layernorm_forward(cu(xt).t(), cu(w), cu(b)).y, layernorm_forward(xt.t(), w, b).y, 2e-5, 2e-5);
}

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
      CHECK(same_bits(g.dx, ref.dx));
      CHECK(same_bits(g.dw, ref.dw));
      CHECK(same_bits(g.db, ref.db));
      CHECK(same_bits(rmsnorm_backward(dy, x, w, rf.rstd).dw, rms_ref.dw));
    }
  });
}

// ---- softmax / log-softmax / max ----------------------------------------------------------------

TEST_CASE("softmax and log-softmax on cuda match the cpu: forward, backward, large logits") {
  Poisoned poison;
  const std::vector<Shape> shapes = {{1, 1}, {1, 257}, {31, 1}, {3, 31}, {2, 3, 33}, {5, 257}, {4, 1013}, {257}};
  for (const Shape& shape : shapes)
    for (DType dt : {DType::f32, DType::f64})
      for (double offset : {0.0, 1000.0}) {  // logits near 1000: exp overflows unless the max is subtracted
        CAPTURE(shape_str(shape));
        CAPTURE(dtype_name(dt));
        CAPTURE(offset);
        const Tensor x = uniform_f64(shape, 1, offset - 8, offset + 8).to(dt), dy = uniform_f64(shape, 2).to(dt);
        const double t = tol(dt, 1e-5), at = tol(dt, offset > 0 ? 1e-4 : 1e-5);  // f32 x - lse: ulps of 1000
        const Tensor y = softmax_forward(x), ly = log_softmax_forward(x);
        const Tensor gy = softmax_forward(cu(x)), gly = log_softmax_forward(cu(x));
        check_cuda(gy, y, t, tol(dt, 1e-6));
        check_cuda(gly, ly, t, at);
        check_cuda(softmax_backward(cu(dy), gy), softmax_backward(dy, y), t, tol(dt, 1e-6));
        check_cuda(log_softmax_backward(cu(dy), gly), log_softmax_backward(dy, ly), t, at);
      }
}

TEST_CASE("max_with_indices and max_backward on cuda equal the cpu: ties, NaN, every axis") {
  Poisoned poison;
  struct Case {
    Shape shape;
    int64_t axis;
  };
  const std::vector<Case> cases = {{{257}, 0},       {{7, 33}, 1}, {{7, 33}, 0},     {{3, 5, 4}, 1},
                                   {{3, 5, 4}, -1},  {{1, 1}, 1},  {{2, 70, 3}, 1},  {{40, 1}, 0}};
  for (const Case& c : cases)
    for (DType dt : {DType::f32, DType::f64})
      for (int kind = 0; kind < 3; ++kind) {  // 0: distinct values, 1: many ties, 2: ties and NaN
        CAPTURE(shape_str(c.shape));
        CAPTURE(c.axis);
        CAPTURE(kind);
        std::vector<double> v = values(uniform_f64(c.shape, 9, -3, 3));
        for (size_t i = 0; i < v.size(); ++i) {
          if (kind >= 1) v[i] = std::floor(v[i]);  // 6 distinct values: the first maximum must win
          if (kind == 2 && i % 5 == 2) v[i] = std::nan("");
        }
        const Tensor x = from_vector<double>(v, c.shape).to(dt);
        for (bool keepdim : {false, true}) {
          const MaxWithIndices f = max_with_indices(x, c.axis, keepdim);
          const MaxWithIndices g = max_with_indices(cu(x), c.axis, keepdim);
          check_cuda(g.values, f.values, 0, 0);
          CHECK(values(g.indices) == values(f.indices));
          const Tensor dy = uniform_f64(f.values.shape(), 3).to(dt);
          check_cuda(max_backward(cu(dy), g.indices, c.shape, c.axis), max_backward(dy, f.indices, c.shape, c.axis),
                     0, 0);
        }
      }
}

// ---- cross-entropy ----------------------------------------------------------------------------

TEST_CASE("fused cross-entropy on cuda matches the cpu: every reduction, ignored rows, fused and separate dlogits") {
  Poisoned poison;
  const std::vector<Shape> shapes = {{1, 1}, {4, 10}, {3, 257}, {2, 3, 11}, {5, 1013}, {33, 7}};
  for (const Shape& shape : shapes)
    for (DType dt : {DType::f32, DType::f64})
      for (DType tt : {DType::i32, DType::i64}) {
        CAPTURE(shape_str(shape));
        CAPTURE(dtype_name(dt));
        CAPTURE(dtype_name(tt));
        const int64_t V = shape.back(), N = shape_numel(shape) / V;
        const Tensor logits = uniform_f64(shape, 1, -6, 6).to(dt);
        const int64_t ignore = V == 11 ? 5 : -100;  // a custom ignore_index that is a valid class
        std::vector<int64_t> t;
        for (int64_t n = 0; n < N; ++n) t.push_back(N > 1 && n % 3 == 1 ? ignore : (n * 7 + 3) % V);
        const Tensor targets = make_ids(t, Shape(shape.begin(), shape.end() - 1), tt);
        const double tl = tol(dt, 1e-5), td = tol(dt, 2e-6);
        for (Reduction red : {Reduction::None, Reduction::Sum, Reduction::Mean}) {
          CAPTURE(reduction_name(red));
          const CrossEntropyForward f = cross_entropy_forward(logits, targets, red, ignore, 0.37);
          const CrossEntropyForward g = cross_entropy_forward(cu(logits), cu(targets), red, ignore, 0.37);
          CHECK(g.count == f.count);
          check_cuda(g.loss, f.loss, tl, tl);
          check_cuda(g.losses, f.losses, tl, tl);
          check_cuda(g.lse, f.lse, tl, tl);
          check_cuda(g.dlogits, f.dlogits, td, td);
          const CrossEntropyForward plain = cross_entropy_forward(cu(logits), cu(targets), red, ignore);
          CHECK(!plain.dlogits.defined());
          check_cuda(plain.loss, f.loss, tl, tl);
          const Tensor dloss = red == Reduction::None ? uniform_f64(targets.shape(), 5).to(dt) : scalar_tensor(0.37, dt);
          check_cuda(cross_entropy_backward(cu(dloss), cu(logits), cu(targets), g.lse, red, ignore),
                     cross_entropy_backward(dloss, logits, targets, f.lse, red, ignore), td, td);
        }
      }
}

TEST_CASE("cross-entropy on cuda: all targets ignored give 0, logits of 1e4 stay finite") {
  Poisoned poison;
  const Tensor logits = uniform_f64({4, 6}, 2).to(DType::f32);
  const Tensor ignored = from_vector<int64_t>({-100, -100, -100, -100}, {4});
  const CrossEntropyForward f = cross_entropy_forward(cu(logits), cu(ignored), Reduction::Mean, -100, 1.0);
  CHECK(f.count == 0);
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

// ---- embedding ----------------------------------------------------------------------------------

TEST_CASE("embedding on cuda equals the cpu bit for bit: gather, and the scatter-add of repeated ids") {
  Poisoned poison;
  struct Case {
    Shape ids;
    int64_t V, C;
  };
  // 300 positions: two scan tiles; V = 1100: more rows than owner blocks (several rows a block).
  const std::vector<Case> cases = {{{1}, 1, 1}, {{2, 7}, 13, 31}, {{300}, 257, 1}, {{3, 100}, 1100, 5},
                                   {{64}, 5, 257}};
  for (const Case& c : cases)
    for (DType dt : {DType::f32, DType::f64})
      for (DType it : {DType::i32, DType::i64}) {
        CAPTURE(shape_str(c.ids));
        CAPTURE(c.V);
        CAPTURE(c.C);
        const int64_t N = shape_numel(c.ids);
        std::vector<int64_t> ids;
        for (int64_t n = 0; n < N; ++n) ids.push_back(n % 4 == 0 ? c.V / 2 : (n * 7919) % c.V);  // a hot id
        const Tensor idt = make_ids(ids, c.ids, it), table = uniform_f64({c.V, c.C}, 1).to(dt);
        Shape out_shape = c.ids;
        out_shape.push_back(c.C);
        const Tensor dout = uniform_f64(out_shape, 2).to(dt);
        check_cuda(embedding_forward(cu(idt), cu(table)), embedding_forward(idt, table), 0, 0);
        // The same additions in the same order (position order, in the data type): exact.
        const Tensor expected = embedding_backward(dout, idt, c.V);
        const Tensor got = embedding_backward(cu(dout), cu(idt), c.V);
        check_cuda(got, expected, 0, 0);
        if (dt == DType::f32 && it == DType::i32)
          for_each_order([&] { CHECK(same_bits(embedding_backward(cu(dout), cu(idt), c.V), got)); });
      }
}

// ---- attention ----------------------------------------------------------------------------------

TEST_CASE("flash attention on cuda matches the cpu: T = 1, 7, 64, 129, D up to 128, causal and not") {
  Poisoned poison;
  struct Case {
    Shape q, k, v;
    bool causal;
    DType dt;
  };
  std::vector<Case> cases;
  for (int64_t T : {1, 7, 64, 129}) cases.push_back({{1, 2, T, 24}, {1, 2, T, 24}, {1, 2, T, 24}, true, DType::f32});
  cases.push_back({{2, 1, 33, 16}, {2, 1, 33, 16}, {2, 1, 33, 16}, true, DType::f64});
  cases.push_back({{1, 1, 7, 128}, {1, 1, 7, 128}, {1, 1, 7, 128}, true, DType::f32});   // the shared-memory
  cases.push_back({{1, 1, 7, 128}, {1, 1, 7, 128}, {1, 1, 7, 128}, true, DType::f64});   // budget at D = 128
  cases.push_back({{2, 5, 8}, {2, 41, 8}, {2, 41, 12}, false, DType::f32});                // Tq != Tk, Dv != D
  cases.push_back({{1, 3, 9, 33}, {1, 3, 9, 33}, {1, 3, 9, 65}, false, DType::f64});
  for (const Case& c : cases) {
    CAPTURE(shape_str(c.q));
    CAPTURE(shape_str(c.v));
    CAPTURE(c.causal);
    CAPTURE(dtype_name(c.dt));
    const Tensor q = uniform_f64(c.q, 1, -2, 2).to(c.dt), k = uniform_f64(c.k, 2, -2, 2).to(c.dt);
    const Tensor v = uniform_f64(c.v, 3).to(c.dt);
    const AttentionForward f = attention_forward(q, k, v, std::nullopt, c.causal);
    const AttentionForward g = attention_forward(cu(q), cu(k), cu(v), std::nullopt, c.causal);
    const double t = tol(c.dt, 2e-5);
    check_cuda(g.out, f.out, t, t);
    check_cuda(g.lse, f.lse, t, t);
    const Tensor dout = uniform_f64(f.out.shape(), 4).to(c.dt);
    const AttentionBackward fb = attention_backward(dout, q, k, v, f.out, f.lse, std::nullopt, c.causal);
    const AttentionBackward gb =
        attention_backward(cu(dout), cu(q), cu(k), cu(v), g.out, g.lse, std::nullopt, c.causal);
    const double tb = tol(c.dt, 1e-4, 1e-11);
    check_cuda(gb.dq, fb.dq, tb, tb);
    check_cuda(gb.dk, fb.dk, tb, tb);
    check_cuda(gb.dv, fb.dv, tb, tb);
  }
}

TEST_CASE("flash attention backward on cuda is bit-identical run to run and in every scheduling order") {
  Poisoned poison;
  const Tensor q = cu(uniform_f64({1, 2, 45, 20}, 1).to(DType::f32)), k = cu(uniform_f64({1, 2, 45, 20}, 2).to(DType::f32));
  const Tensor v = cu(uniform_f64({1, 2, 45, 20}, 3).to(DType::f32)), dout = cu(uniform_f64({1, 2, 45, 20}, 4).to(DType::f32));
  const AttentionForward f = attention_forward(q, k, v);
  const AttentionBackward ref = attention_backward(dout, q, k, v, f.out, f.lse);
  for_each_order([&] {
    CHECK(same_bits(attention_forward(q, k, v).out, f.out));
    const AttentionBackward b = attention_backward(dout, q, k, v, f.out, f.lse);
    CHECK(same_bits(b.dq, ref.dq));
    CHECK(same_bits(b.dk, ref.dk));
    CHECK(same_bits(b.dv, ref.dv));
  });
}

// ---- optimizer updates --------------------------------------------------------------------------

namespace {
// A parameter list with what one launch does not hold: 20 tensors (a launch has 16 slots), a
// tensor of 2 chunks of 16384 and, when `big`, one past the 320 chunks of a launch (5.3M
// elements: only the norm and scale_ test takes it, the other kernels share its list walk);
// sizes 1, 31 x 33, 257, and one f64 tensor among the f32 ones.
std::vector<Shape> param_shapes(bool big) {
  std::vector<Shape> s = {{1}, {31, 33}, {257}, {20000}, {big ? 321 * 16384 + 5 : 5}};
  for (int i = 0; i < 15; ++i) s.push_back({3 + i});
  return s;
}
DType param_dtype(size_t i) { return i == 2 ? DType::f64 : DType::f32; }

std::vector<Tensor> make_list(uint64_t seed, double lo = -1, double hi = 1, bool big = false) {
  std::vector<Tensor> l;
  const std::vector<Shape> shapes = param_shapes(big);
  for (size_t i = 0; i < shapes.size(); ++i) {
    if (shape_numel(shapes[i]) > 1000000) {  // rand in f32 directly: uniform_f64 would cost seconds here
      Generator g(seed + i);
      l.push_back(rand(shapes[i], DType::f32, Device::cpu(), &g));
    } else {
      l.push_back(uniform_f64(shapes[i], seed + i, lo, hi).to(param_dtype(i)));
    }
  }
  return l;
}
std::vector<Tensor> to_cuda(const std::vector<Tensor>& l) {
  std::vector<Tensor> r;
  for (const Tensor& t : l) r.push_back(cu(t));
  return r;
}
std::vector<Tensor> clones(const std::vector<Tensor>& l) {
  std::vector<Tensor> r;
  for (const Tensor& t : l) r.push_back(t.clone());
  return r;
}
void check_lists(const std::vector<Tensor>& got, const std::vector<Tensor>& expected, double rtol, double atol) {
  REQUIRE(got.size() == expected.size());
  for (size_t i = 0; i < got.size(); ++i) {
    CAPTURE(i);
    check_cuda(got[i], expected[i], rtol, atol);
  }
}
}  // namespace

TEST_CASE("sgd and adamw updates on cuda match the cpu over a long mixed-dtype list") {
  Poisoned poison;
  struct Sgd {
    double momentum, dampening, wd;
    bool nesterov;
  };
  for (const Sgd& s : {Sgd{0, 0, 0, false}, Sgd{0, 0, 0.01, false}, Sgd{0.9, 0, 0.01, false}, Sgd{0.9, 0.1, 0, false},
                       Sgd{0.9, 0, 0.001, true}}) {
    CAPTURE(s.momentum);
    CAPTURE(s.nesterov);
    std::vector<Tensor> p = make_list(1), g = make_list(100), buf = make_list(200);
    std::vector<Tensor> cp = to_cuda(p), cg = to_cuda(g), cbuf = to_cuda(buf);
    for (int64_t step : {1, 2}) {  // step 1 starts the buffer at the gradient
      sgd_update(p, g, s.momentum != 0 ? buf : std::vector<Tensor>{}, 0.1, s.momentum, s.dampening, s.wd,
                 s.nesterov, step);
      sgd_update(cp, cg, s.momentum != 0 ? cbuf : std::vector<Tensor>{}, 0.1, s.momentum, s.dampening, s.wd,
                 s.nesterov, step);
    }
    check_lists(cp, p, 1e-6, 1e-7);
    if (s.momentum != 0) check_lists(cbuf, buf, 1e-6, 1e-7);
  }
  for (bool decoupled : {true, false}) {
    CAPTURE(decoupled);
    std::vector<Tensor> p = make_list(1), g = make_list(100), m = make_list(300, -0.1, 0.1), v = make_list(400, 0, 0.01);
    std::vector<Tensor> cp = to_cuda(p), cg = to_cuda(g), cm = to_cuda(m), cv = to_cuda(v);
    for (int64_t step : {1, 2, 3}) {
      adamw_update(p, g, m, v, 1e-3, 0.9, 0.95, 1e-8, 0.1, step, decoupled);
      adamw_update(cp, cg, cm, cv, 1e-3, 0.9, 0.95, 1e-8, 0.1, step, decoupled);
    }
    check_lists(cp, p, 1e-6, 1e-7);
    check_lists(cm, m, 1e-6, 1e-7);
    check_lists(cv, v, 1e-6, 1e-9);
  }
}

TEST_CASE("global grad norm on cuda: the cpu's value, the same bits every run and order; scale_ matches") {
  Poisoned poison;
  const std::vector<Tensor> g = make_list(7, -1, 1, true);
  const std::vector<Tensor> cg = to_cuda(g);
  const double expected = global_grad_norm(g), got = global_grad_norm(cg);
  CHECK(got == doctest::Approx(expected).epsilon(1e-12));
  for_each_order([&] { CHECK(global_grad_norm(cg) == got); });
  // Strided gradients are made contiguous by the entry point.
  const Tensor s = uniform_f64({31, 33}, 3).to(DType::f32);
  CHECK(global_grad_norm({cu(s).t()}) == doctest::Approx(global_grad_norm({s.t()})).epsilon(1e-12));
  CHECK(global_grad_norm({}) == 0.0);
  std::vector<Tensor> a = clones(g), ca = to_cuda(g);
  scale_(a, 0.37);
  scale_(ca, 0.37);
  check_lists(ca, a, 0, 0);
}

// ---- bad inputs ---------------------------------------------------------------------------------

TEST_CASE("out-of-range ids, targets and indices on cuda raise the cpu's reel::Error, with no out-of-bounds read") {
  Poisoned poison;
  const Tensor table = cu(zeros({10, 3}));
  CHECK_REEL_ERROR(embedding_forward(cu(from_vector<int64_t>({1, 2, 3, 10}, {2, 2})), table),
                   "embedding_forward: id 10 at position (1, 1) of (2, 2) is out of range [0, 10) of the table's rows");
  CHECK_REEL_ERROR(embedding_forward(cu(from_vector<int32_t>({-1}, {1})), table),
                   "embedding_forward: id -1 at position (0) of (1) is out of range [0, 10)");
  // Two bad ids: the first position is named, as on the cpu.
  CHECK_REEL_ERROR(embedding_forward(cu(from_vector<int64_t>({1, 99, 3, -7}, {4})), table),
                   "embedding_forward: id 99 at position (1) of (4)");
  CHECK_REEL_ERROR(embedding_backward(cu(zeros({2, 3})), cu(from_vector<int64_t>({1, 12}, {2})), 10),
                   "embedding_backward: id 12 at position (1) of (2) is out of range [0, 10)");
  CHECK_REEL_ERROR(embedding_forward(cu(from_vector<int64_t>({0, 5000000000}, {2})), cu(zeros({10, 0}))),
                   "embedding_forward: id 5000000000 at position (1) of (2)");  // no kernel: the host check
  const Tensor logits = cu(zeros({4, 10}));
  CHECK_REEL_ERROR(cross_entropy_forward(logits, cu(from_vector<int64_t>({1, 2, 10, 3}, {4}))),
                   "cross_entropy_forward: target 10 at position (2) of (4) is out of range [0, 10) of the classes and "
                   "is not ignore_index (-100)");
  CHECK_REEL_ERROR(cross_entropy_forward(logits, cu(from_vector<int32_t>({1, -1, 0, 3}, {4}))),
                   "cross_entropy_forward: target -1 at position (1) of (4) is out of range");
  const Tensor t = cu(from_vector<int64_t>({1, 2, 3, 4}, {4}));
  const CrossEntropyForward f = cross_entropy_forward(logits, t, Reduction::None);
  CHECK_REEL_ERROR(cross_entropy_backward(cu(zeros({4})), logits, cu(from_vector<int64_t>({0, 0, 0, 11}, {4})), f.lse,
                                          Reduction::None),
                   "cross_entropy_backward: target 11 at position (3) of (4) is out of range [0, 10)");
  CHECK_REEL_ERROR(max_backward(cu(zeros({2})), cu(from_vector<int64_t>({0, 3}, {2})), {2, 3}, 1),
                   "max_backward: index 3 at position (1) of (2) is out of range [0, 3)");
#if defined(REEL_HAS_CUDA_BACKEND)
  // The kernels themselves, without the entry point's checks: a bad target or id is reported, not
  // read (ASan would catch the read in the emulated build).
  Tensor losses = cu(empty({4})), lse = cu(empty({4})), dlogits = cu(empty({4, 10}));
  try {
    kernels::cuda::cross_entropy_forward(logits, cu(from_vector<int64_t>({1, 2, 1000000, -5}, {4})), -100, losses,
                                         lse, dlogits, 1.0);
    FAIL("no error");
  } catch (const kernels::cuda::IndexOutOfRange& e) {
    CHECK(e.position == 2);
    CHECK(e.value == 1000000);
  }
  try {
    kernels::cuda::embedding_backward(cu(zeros({3, 3})), cu(from_vector<int32_t>({1, -100000, 2}, {3})),
                                      cu(empty({10, 3})));
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
