// tests/op_table/norm.cpp: the op table's normalisation family. Kernel rows: layernorm and rmsnorm
// forward (with their row statistics) and backward against f64 loops, strided inputs, a row mean of
// 1000; add_layernorm (the residual add fused in) forward and backward with a gradient added to dx
// and dw/db written into or added to buffers, against the add and the unfused kernels in f64;
// batchnorm (training with the running-stat update, eval) forward, statistics, replay and
// backward against f64 loops, (N, C) to (N, C, H, W), a channel mean of 1000; batchnorm count
// (num_batches_tracked += 1), exact. Tape rows: layer_norm, rms_norm, group_norm and batch_norm (training, with running
// statistics, eval, without affine parameters, frozen inputs), GroupNorm and BatchNorm against the
// same function composed from mean, sqrt and broadcasting; add_layer_norm against x + r then
// layer_norm (both outputs, y alone, no bias, frozen inputs), and with the residual's bias rb
// against x + (r + rb) then layer_norm (C <= 256 and wider), in every dtype layer_norm takes.
#include <algorithm>
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "autograd/functions.h"
#include "autograd/nn_functions.h"
#include "kernels/ops.h"
#include "op_table.h"

namespace reel::op_table {
namespace {

using namespace reel::testing;

// The dtypes every row of this family runs in (rows that name their own keep them): one entry to add.
// bf16 and f16: the kernel rows (x, w, b of one dtype; mean and rstd f32, and batchnorm's running
// statistics f32). The tape rows name f32 and f64 only: their 16-bit versions (possible now that the
// elementwise and reduction families run in 16 bits) are not written yet.
const std::vector<DType> kDTypes = {DType::f32, DType::f64, DType::bf16, DType::f16};
const std::vector<DType> kTapeDTypes = {DType::f32, DType::f64};

// A kernel row's tolerances t (f32, f64) with bf16 and f16 added. The runner rounds the inputs to
// the dtype first, so a 16-bit output is the f32 computation (t's f32 error) rounded once to the
// type: half an ulp, a relative u = 2^-8 (bf16) or 2^-11 (f16) more. mean and rstd are f32 outputs
// and keep t's f32 entry. cpu against cuda (device): the two f32 results (t apart) may round to
// neighbouring 16-bit values: one ulp, 2u relative.
// (op_table.h: with_16bit(t, device), shared by the families that round each output once.)

// ==== LayerNorm / RMSNorm ==========================================================================

// outputs y, mean, rstd (rms: mean 0) of rows of C, in f64.
Values norm_ref(const Tensor& xt, const Tensor& wt, const Tensor* bt, double eps) {
  const std::vector<double> x = values(xt), w = values(wt), b = bt ? values(*bt) : std::vector<double>{};
  const int64_t C = xt.size(-1), R = xt.numel() / C;
  Values r{std::vector<double>(x.size()), {}, {}};
  for (int64_t i = 0; i < R; ++i) {
    double m = 0, v = 0;
    for (int64_t c = 0; c < C; ++c) m += x[i * C + c];
    m = bt ? m / C : 0;
    for (int64_t c = 0; c < C; ++c) v += (x[i * C + c] - m) * (x[i * C + c] - m);
    const double rs = 1 / std::sqrt(v / C + eps);
    for (int64_t c = 0; c < C; ++c) r[0][i * C + c] = (x[i * C + c] - m) * rs * w[c] + (bt ? b[c] : 0);
    r[1].push_back(m);
    r[2].push_back(rs);
  }
  if (!bt) r.erase(r.begin() + 1);  // rms: y, rstd
  return r;
}

std::vector<OpCase> norm_cases() {
  using namespace kernels;
  struct Config {
    Shape shape;
    bool transpose;  // the op sees x.t() (a strided input, made contiguous by the entry point)
    bool fd;         // small enough for finite differences (RMSNorm: not of C = 1, whose gradient is ~eps)
    double offset = 0;  // added to x: a row mean far from 0
  };
  const std::vector<Config> configs = {
      {{1, 1}, false, true},      {{1, 257}, false, false}, {{5, 1}, false, false},  {{3, 31}, false, false},
      {{2, 3, 33}, false, false}, {{7, 257}, false, false}, {{257}, false, false},   {{1100, 7}, false, false},
      {{3, 4, 257}, false, false}, {{7, 33}, false, false}, {{64, 768}, false, false}, {{3, 5}, false, true},
      {{4, 1}, false, true},      {{2, 257}, false, true},  {{2, 3, 7}, false, true}, {{5, 33}, true, false},
      {{6, 5}, true, false},
      // Mean 1000, std 0.58: E[x^2] - E[x]^2 would lose every digit in f32 (the two-pass variance).
      {{16, 768}, false, false, 1000},
  };
  std::vector<OpCase> cases;
  for (const Config& c : configs) {
    const Shape s = c.transpose ? Shape{c.shape[1], c.shape[0]} : c.shape;  // what the op sees
    const int64_t C = s.back(), R = shape_numel(s) / C;
    // dw, db: sums over R rows.
    const Tols tr = with_16bit(tols(1e-5 * std::sqrt(static_cast<double>(R)) + 1e-5), true),
               t = with_16bit(tols(2e-5), true), tdx = with_16bit(tols(1e-4), true);
    auto make = [c, C](bool bias) {
      return [c, C, bias](Generator& g) {
        Tensors in{uniform_f64(g, c.shape, c.offset - 2, c.offset + 3), uniform_f64(g, {C}, 0.5, 1.5)};  // mean not 0
        if (bias) in.push_back(uniform_f64(g, {C}));
        Shape seen = c.shape;
        if (c.transpose) std::swap(seen[0], seen[1]);
        in.push_back(uniform_f64(g, seen));  // dy
        return in;
      };
    };
    auto x_of = [tr = c.transpose](const Tensor& x) { return tr ? x.t() : x; };
    const std::string name = shape_str(c.shape) + (c.transpose ? ".t()" : "") + (c.offset ? " + " + str(c.offset) : "");
    const Tols pt = with_16bit(tols(c.offset ? 1e-4 : 2e-5, 1e-12), false);  // f32 x near 1000: its ulps
    OpCase ln("layernorm " + name, make(true),
              [x_of](const Tensors& in, Device) {
                const Tensor x = x_of(in[0]);
                const LayerNormForward f = layernorm_forward(x, in[1], in[2]);
                CHECK(f.y.shape() == x.shape());
                CHECK(f.mean.shape() == without_last(x.shape()));
                const LayerNormBackward b = layernorm_backward(in[3], x, in[1], f.mean, f.rstd);
                return Tensors{f.y, f.mean, f.rstd, b.dx, b.dw, b.db};
              },
              {t, t, t, tdx, tr, tr});
    ln.with_reference([x_of](const Tensors& in) { return norm_ref(x_of(in[0]), in[1], &in[2], 1e-5); }, {pt});
    OpCase rms("rmsnorm " + name, make(false),
               [x_of](const Tensors& in, Device) {
                 const Tensor x = x_of(in[0]);
                 const RMSNormForward f = rmsnorm_forward(x, in[1]);
                 const RMSNormBackward b = rmsnorm_backward(in[2], x, in[1], f.rstd);
                 return Tensors{f.y, f.rstd, b.dx, b.dw};
               },
               {t, t, tdx, tr});
    rms.with_reference([x_of](const Tensors& in) { return norm_ref(x_of(in[0]), in[1], nullptr, 1e-6); }, {pt});
    if (c.fd) {
      ln.with_finite_diff({0, 3, {{0, 3}, {1, 4}, {2, 5}}});
      if (C > 1 || R == 1) rms.with_finite_diff({0, 2, {{0, 2}, {1, 3}}});
    }
    cases.push_back(ln);
    cases.push_back(rms);
  }
  return cases;
}

// ==== add_layernorm: the residual add fused into LayerNorm =========================================

// Inputs x, r (R.., C), w, b, dw0, db0 (C), dy, ds (x's shape). Outputs s, y, then the backward
// with ds added to dx and dw/db added to dw0/db0 (buffers of the row's, copies: the runner checks
// that inputs come back unchanged), then dw/db written into fresh buffers (poisoned by the runner:
// a kernel that added to them instead would read NaN), then mean and rstd. y, mean and rstd are
// checked bit for bit against layernorm_forward of the kernel's s on the same device (the add
// rounds s to the dtype; the reference's s, the exact sum of the rounded inputs, moves a 16-bit
// run's f32 statistics by more than their f32 tolerance, so they have no reference).
std::vector<OpCase> add_norm_cases() {
  using namespace kernels;
  const std::vector<Shape> shapes = {{1, 1}, {3, 31}, {2, 3, 33}, {7, 257}, {1100, 7}, {64, 768}};
  std::vector<OpCase> cases;
  for (const Shape& shape : shapes) {
    const int64_t C = shape.back(), R = shape_numel(shape) / C;
    const Tols tr = with_16bit(tols(1e-5 * std::sqrt(static_cast<double>(R)) + 1e-5), true),
               t = with_16bit(tols(2e-5), true), tdx = with_16bit(tols(1e-4), true);
    // dx + ds in 16 bits: the kernel rounds dx to the dtype, then adds ds (as the unfused add reads
    // a rounded dx). cpu and cuda may round dx to neighbouring values (tdx), one ulp of dx (|dx| < 4:
    // at most 2^-9 in f16, 2^-6 in bf16), and where ds cancels part of dx that ulp is many of the
    // smaller sum's: an absolute tolerance of dx's ulp, not a relative one of the sum.
    Tols tdx_add = tdx;
    for (auto& [dt, tol] : tdx_add.by_dtype) {
      if (dt == DType::f16) tol.atol = std::max(tol.atol, 0x1p-9);
      if (dt == DType::bf16) tol.atol = std::max(tol.atol, 0x1p-6);
    }
    // Against the f64 reference: in f32 and f64 layernorm's own errors. In 16 bits the reference's
    // s is the exact sum of the rounded x and r while the kernel's is rounded once more (as the add
    // would): half an ulp of s (|s| < 4) in every x - mean, so y, dx and each term of dw/db carry a
    // few ulps of the type, absolute (R-term sums: sqrt(R) times that).
    const auto p16 = [R](double f32, bool sum) {
      const double k = sum ? std::sqrt(static_cast<double>(R)) : 1.0;
      Tols p = tols(f32, 1e-12);
      p.by_dtype.push_back({DType::bf16, {0x1p-7, k * 0x1p-5}});
      p.by_dtype.push_back({DType::f16, {0x1p-10, k * 0x1p-8}});
      return p;
    };
    const Tols pt = p16(2e-5, false), pdx = p16(1e-4, false),
               psum = p16(1e-5 * std::sqrt(static_cast<double>(R)) + 1e-5, true);
    OpCase c("add_layernorm " + shape_str(shape),
             [shape, C](Generator& g) {
               return Tensors{uniform_f64(g, shape, -2, 3), uniform_f64(g, shape, -1, 1),
                              uniform_f64(g, {C}, 0.5, 1.5), uniform_f64(g, {C}), uniform_f64(g, {C}),
                              uniform_f64(g, {C}), uniform_f64(g, shape), uniform_f64(g, shape)};
             },
             [](const Tensors& in, Device) {
               const AddLayerNormForward f = add_layernorm_forward(in[0], in[1], in[2], in[3]);
               const LayerNormForward plain = layernorm_forward(f.s, in[2], in[3]);
               CHECK(bit_identical(f.y, plain.y));
               CHECK(bit_identical(f.mean, plain.mean));
               CHECK(bit_identical(f.rstd, plain.rstd));
               const Tensor dw = in[4].clone(), db = in[5].clone();
               const LayerNormBackward b =
                   layernorm_backward(in[6], f.s, in[2], f.mean, f.rstd, {dw, true}, {db, true}, in[7]);
               CHECK(b.dw.data_ptr() == dw.data_ptr());  // into the buffers, no temporary
               CHECK(b.db.data_ptr() == db.data_ptr());
               const Tensor dw_w = empty({in[2].numel()}, in[2].dtype(), in[2].device()), db_w = empty_like(dw_w);
               const LayerNormBackward w = layernorm_backward(in[6], f.s, in[2], f.mean, f.rstd, {dw_w, false},
                                                              {db_w, false});
               return Tensors{f.s, f.y, b.dx, dw, db, w.dx, dw_w, db_w, f.mean, f.rstd};
             },
             {t, t, tdx_add, tr, tr, tdx, tr, tr, t, t});
    // f64: the add, then the unfused kernels (checked against f64 loops above).
    c.with_reference(
        [](const Tensors& in) {
          const Tensor s = in[0] + in[1];
          const LayerNormForward f = layernorm_forward(s, in[2], in[3]);
          const LayerNormBackward b = layernorm_backward(in[6], s, in[2], f.mean, f.rstd);
          return Values{values(s),    values(f.y),  values(b.dx + in[7]), values(b.dw + in[4]),
                        values(b.db + in[5]), values(b.dx), values(b.dw),         values(b.db)};
        },
        {pt, pt, pdx, psum, psum, pdx, psum, psum});
    cases.push_back(c);
  }
  return cases;
}

// ==== BatchNorm ====================================================================================

// in: x (N, C, *), w, b, running mean rm, running var rv (C), dy (x's shape), in f64. Outputs as
// batch_norm_cases' run: y, mean, rstd, (training: rm and rv after the momentum step), dx, dw, db,
// y again (the replay's). Training: the batch's mean and biased variance, the running variance
// moved with the unbiased one; eval: the running statistics, constants for the backward.
Values batch_norm_ref(const Tensors& in, bool training, double momentum, double eps) {
  const std::vector<double> x = values(in[0]), w = values(in[1]), b = values(in[2]), rm = values(in[3]),
                            rv = values(in[4]), dy = values(in[5]);
  const int64_t N = in[0].size(0), C = in[0].size(1), S = in[0].numel() / (N * C);
  const double n = static_cast<double>(N * S);
  auto at = [&](int64_t i, int64_t c, int64_t k) { return static_cast<size_t>((i * C + c) * S + k); };
  std::vector<double> y(x.size()), mean(C), rstd(C), rm1(C), rv1(C), dx(x.size()), dw(C), db(C);
  for (int64_t c = 0; c < C; ++c) {
    double m = rm[c], var = rv[c];
    if (training) {
      double s = 0, q = 0;
      for (int64_t i = 0; i < N; ++i)
        for (int64_t k = 0; k < S; ++k) s += x[at(i, c, k)];
      m = s / n;
      for (int64_t i = 0; i < N; ++i)
        for (int64_t k = 0; k < S; ++k) q += (x[at(i, c, k)] - m) * (x[at(i, c, k)] - m);
      var = q / n;
      rm1[c] = (1 - momentum) * rm[c] + momentum * m;
      rv1[c] = (1 - momentum) * rv[c] + momentum * var * n / (n - 1);
    }
    const double rs = 1 / std::sqrt(var + eps);
    mean[c] = m;
    rstd[c] = rs;
    for (int64_t i = 0; i < N; ++i)
      for (int64_t k = 0; k < S; ++k) {
        const size_t j = at(i, c, k);
        y[j] = (x[j] - m) * rs * w[c] + b[c];
        db[c] += dy[j];
        dw[c] += dy[j] * (x[j] - m) * rs;
      }
    for (int64_t i = 0; i < N; ++i)
      for (int64_t k = 0; k < S; ++k) {
        const size_t j = at(i, c, k);
        const double xhat = (x[j] - m) * rs;
        dx[j] = w[c] * rs * (dy[j] - (training ? db[c] / n + xhat * dw[c] / n : 0));
      }
  }
  Values r{y, mean, rstd};
  if (training) r.insert(r.end(), {rm1, rv1});
  r.insert(r.end(), {dx, dw, db, y});
  return r;
}

std::vector<OpCase> batch_norm_cases() {
  using namespace kernels;
  struct Config {
    Shape shape;
    bool fd;            // small enough for finite differences
    double offset = 0;  // added to x and to the running mean: a channel mean far from 0
  };
  const std::vector<Config> configs = {
      {{6, 3}, true},         {{2, 3, 2, 3}, true},  {{3, 2, 4}, true},
      {{16, 70}, false},      // (N, C): blocks of 64 channels on the cpu, the last one partial
      {{4, 5, 5, 5}, false},  // runs of 25: a task per channel
      {{32, 24, 5, 5}, false},  // large enough for the cpu kernels to run in parallel
      // Mean 1000, std ~1.4 (f32) or the 16-bit grid's (bf16: ulps of 4 and 8): the two-pass variance.
      {{8, 3, 4, 4}, false, 1000},
  };
  const double momentum = 0.1, eps = 1e-5;
  std::vector<OpCase> cases;
  for (const Config& c : configs)
    for (bool training : {true, false}) {
      const int64_t C = c.shape[1], n = shape_numel(c.shape) / C;
      const double off = c.offset;
      auto make = [c, C](Generator& g) {
        return Tensors{uniform_f64(g, c.shape, c.offset - 2, c.offset + 3), uniform_f64(g, {C}, 0.5, 1.5),
                       uniform_f64(g, {C}), uniform_f64(g, {C}, c.offset - 1, c.offset + 1),
                       uniform_f64(g, {C}, 0.5, 2), uniform_f64(g, c.shape)};
      };
      // The statistics are f32 outputs at bf16 and f16 (with_16bit leaves them at their f32
      // entry): the double sums rounded once. y and dx: acc_t math rounded once to the type. dw and
      // db: double sums of n terms whose xhat is f32, rounded once to the type. The mean-1000 rows:
      // the f32 mean's ulp (6e-5) in every x - mean.
      const Tols ty = with_16bit(tols(off ? 1e-4 : 2e-5), true), ts = with_16bit(tols(1e-6), true),
                 tdx = with_16bit(tols(1e-4), true),
                 tsum = with_16bit(tols((off ? 1e-4 : 1e-5) * std::sqrt(static_cast<double>(n)) + 1e-5), true);
      const Tols py = with_16bit(tols(off ? 1e-4 : 2e-5, 1e-12), false), ps = with_16bit(tols(1e-6, 1e-12), false),
                 pdx = with_16bit(tols(1e-4, 1e-12), false),
                 psum = with_16bit(tols((off ? 1e-4 : 1e-5) * std::sqrt(static_cast<double>(n)) + 1e-5, 1e-12), false);
      std::vector<Tols> dev{ty, ts, ts}, prec{py, ps, ps};
      if (training) {  // the running statistics after the step
        dev.insert(dev.end(), {ts, ts});
        prec.insert(prec.end(), {ps, ps});
      }
      dev.insert(dev.end(), {tdx, tsum, tsum, ty});
      prec.insert(prec.end(), {pdx, psum, psum, py});
      OpCase bn(std::string("batchnorm ") + (training ? "training " : "eval ") + shape_str(c.shape) +
                    (off ? " + " + str(off) : ""),
                make,
                [training, momentum, eps](const Tensors& in, Device) {
                  const Tensor& x = in[0];
                  // The statistics' dtype: x's, f32 for a 16-bit x. Copies: the runner checks that
                  // its inputs come back unchanged.
                  const DType st = is_16bit_floating(x.dtype()) ? DType::f32 : x.dtype();
                  const Tensor rm = in[3].to(st).clone(), rv = in[4].to(st).clone();
                  const BatchNormForward f = batch_norm_forward(x, in[1], in[2], rm, rv, training, momentum, eps);
                  CHECK(f.y.dtype() == x.dtype());
                  CHECK(f.mean.dtype() == st);
                  CHECK(f.rstd.dtype() == st);
                  CHECK(rm.dtype() == st);
                  const BatchNormBackward g = batch_norm_backward(in[5], x, in[1], f.mean, f.rstd, training, eps);
                  const Tensor replay = batch_norm_replay(x, in[1], in[2], f.mean, f.rstd,
                                                         training ? Tensor() : in[4].to(st), training, eps);
                  CHECK(bit_identical(replay, f.y));  // a checkpoint replay: the forward's bits
                  Tensors out{f.y, f.mean, f.rstd};
                  if (training) out.insert(out.end(), {rm, rv});
                  out.insert(out.end(), {g.dx, g.dw, g.db, replay});
                  return out;
                },
                dev);
      bn.with_reference([training, momentum, eps](const Tensors& in) {
        return batch_norm_ref(in, training, momentum, eps);
      }, prec);
      if (c.fd) {
        const size_t dx = training ? 5 : 3;  // the output index of dx, then dw, db
        bn.with_finite_diff({0, 5, {{0, dx}, {1, dx + 1}, {2, dx + 2}}});
      }
      cases.push_back(bn);
    }
  // BatchNorm's num_batches_tracked += 1 on its device (nn::BatchNorm's count), twice: 41 -> 43.
  cases.push_back(OpCase("batchnorm count", [](Generator&) { return Tensors{full({}, 41.0, DType::i64)}; },
                         [](const Tensors& in, Device) {
                           const Tensor count = in[0].clone();  // the runner checks its inputs come back unchanged
                           batch_norm_count(count);
                           batch_norm_count(count);
                           return Tensors{count};
                         },
                         {kExact})
                      .with_dtypes({})
                      .with_reference([](const Tensors& in) { return Values{{values(in[0])[0] + 2}}; }, {kExact}));
  return cases;
}

// GroupNorm from reshape, mean, sqrt and broadcasting: x (N, C, *), w and b (C).
Tensor group_norm_composed(const Tensor& x, int64_t groups, const Tensor& w, const Tensor& b) {
  const Tensor g = x.reshape({x.size(0), groups, -1});  // (N, G, M)
  const Tensor centred = g - mean(g, {2}, true);
  const Tensor var = mean(centred * centred, {2}, true);
  Shape per_channel(static_cast<size_t>(x.dim()), 1);
  per_channel[1] = x.size(1);
  return (centred / sqrt(var + 1e-5)).reshape(x.shape()) * w.reshape(per_channel) + b.reshape(per_channel);
}

// BatchNorm from mean, sqrt and broadcasting: x (N, C, *), w and b (C); training: the batch's
// statistics over every dim but 1; eval: running mean rm and variance rv (C).
Tensor batch_norm_composed(const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& rm = Tensor(),
                           const Tensor& rv = Tensor()) {
  Shape per_channel(static_cast<size_t>(x.dim()), 1);
  per_channel[1] = x.size(1);
  if (rm.defined()) return (x - rm.reshape(per_channel)) / sqrt(rv.reshape(per_channel) + 1e-5) *
                           w.reshape(per_channel) + b.reshape(per_channel);
  std::vector<int64_t> axes{0};
  for (int64_t i = 2; i < x.dim(); ++i) axes.push_back(i);
  const Tensor centred = x - mean(x, axes, true);
  const Tensor var = mean(centred * centred, axes, true);
  return centred / sqrt(var + 1e-5) * w.reshape(per_channel) + b.reshape(per_channel);
}

std::vector<OpCase> norm_tape_cases() {
  // Integer inputs (targets, token ids) are constants captured by f, moved to its inputs' device.
  auto on = [](const Tensor& constant, const Tensor& like) { return constant.to(like.device()); };
  const Tensor bn_rm = from_vector<double>({0.5, -1, 2}, {3}), bn_rv = from_vector<double>({0.25, 2, 1}, {3});
  return {
      tape_ternary("layer_norm", [](const Tensor& x, const Tensor& w, const Tensor& b) { return layer_norm(x, w, b); },
                   {4, 7}, {7}, {7}),
      tape_ternary("layer_norm batched, eps 1e-3",
                   [](const Tensor& x, const Tensor& w, const Tensor& b) { return layer_norm(x, w, b, 1e-3); },
                   {2, 3, 5}, {5}, {5}),
      tape_binary("layer_norm without bias", [](const Tensor& x, const Tensor& w) { return layer_norm(x, w); }, {3, 6},
                  {6}),
      tape_ternary("layer_norm of a transposed x",
                   [](const Tensor& x, const Tensor& w, const Tensor& b) { return layer_norm(transpose(x, 0, 1), w, b); },
                   {3, 5}, {3}, {3}, {true, false, false}),
      tape_binary("rms_norm", [](const Tensor& x, const Tensor& w) { return rms_norm(x, w); }, {3, 6}, {6}),
      tape_binary("rms_norm batched", [](const Tensor& x, const Tensor& w) { return rms_norm(x, w, 1e-4); },
                  {2, 2, 5}, {5}),
      with_composed(tape_ternary("group_norm, 2 groups of 3 channels",
                                 [](const Tensor& x, const Tensor& w, const Tensor& b) { return group_norm(x, 2, w, b); },
                                 {2, 6, 2, 3}, {6}, {6}),
                    [](const Tensors& x) { return group_norm_composed(x[0], 2, x[1], x[2]); }),
      with_composed(tape_ternary("group_norm, one channel per group, (N, C)",
                                 [](const Tensor& x, const Tensor& w, const Tensor& b) { return group_norm(x, 4, w, b); },
                                 {3, 4}, {4}, {4}),
                    [](const Tensors& x) { return group_norm_composed(x[0], 4, x[1], x[2]); }),
      with_composed(tape_unary("group_norm, one group, no weight or bias",
                               [](const Tensor& x) { return group_norm(x, 1); }, {2, 3, 5}),
                    [](const Tensors& x) {
                      const Tensor one = ones({3}, x[0].dtype(), x[0].device());
                      return group_norm_composed(x[0], 1, one, one * 0.0);
                    }),

      // ---- batch_norm (training: batch statistics; eval: constant running ones) ----
      with_composed(tape_ternary("batch_norm training, (N, C)",
                                 [](const Tensor& x, const Tensor& w, const Tensor& b) {
                                   return batch_norm(x, Tensor(), Tensor(), w, b, true);
                                 },
                                 {5, 3}, {3}, {3}),
                    [](const Tensors& x) { return batch_norm_composed(x[0], x[1], x[2]); }),
      with_composed(tape_ternary("batch_norm training, (N, C, H, W), running stats updated",
                                 [](const Tensor& x, const Tensor& w, const Tensor& b) {
                                   const Tensor rm = zeros({3}, x.dtype(), x.device()), rv = ones({3}, x.dtype(), x.device());
                                   return batch_norm(x, rm, rv, w, b, true, 0.1);
                                 },
                                 {2, 3, 2, 3}, {3}, {3}),
                    [](const Tensors& x) { return batch_norm_composed(x[0], x[1], x[2]); }),
      with_composed(tape_unary("batch_norm training, no weight or bias, (N, C, L)",
                               [](const Tensor& x) { return batch_norm(x, Tensor(), Tensor(), Tensor(), Tensor(), true); },
                               {3, 2, 4}),
                    [](const Tensors& x) {
                      const Tensor one = ones({2}, x[0].dtype(), x[0].device());
                      return batch_norm_composed(x[0], one, one * 0.0);
                    }),
      with_composed(tape_ternary("batch_norm eval, running stats",
                                 [=](const Tensor& x, const Tensor& w, const Tensor& b) {
                                   return batch_norm(x, on(bn_rm.to(x.dtype()), x), on(bn_rv.to(x.dtype()), x), w, b);
                                 },
                                 {4, 3, 2}, {3}, {3}),
                    [=](const Tensors& x) { return batch_norm_composed(x[0], x[1], x[2], bn_rm, bn_rv); }),
      tape_ternary("batch_norm training, only w and b need grad",
                   [](const Tensor& x, const Tensor& w, const Tensor& b) {
                     return batch_norm(x, Tensor(), Tensor(), w, b, true);
                   },
                   {4, 3}, {3}, {3}, {false, true, true}),
  };
}

// add_layer_norm's rows: f gives both outputs side by side (concat: s's gradient, ds_ext, is then
// the loss weights' and reaches the fused backward) or y alone (ds_ext zeros); each against x + r
// followed by layer_norm, and with the residual's bias rb against x + (r + rb). In every dtype
// layer_norm takes.
std::vector<OpCase> add_norm_tape_cases() {
  const auto both = [](const Tensors& in) {
    const AddLayerNormResult o = add_layer_norm(in[0], in[1], in[2], in.size() > 3 ? in[3] : Tensor());
    return concat({o.s, o.y}, -1);
  };
  const auto both_composed = [](const Tensors& in) {
    const Tensor s = in[0] + in[1];
    return concat({s, layer_norm(s, in[2], in.size() > 3 ? in[3] : Tensor())}, -1);
  };
  const auto y_only = [](const Tensors& in) { return add_layer_norm(in[0], in[1], in[2], in[3]).y; };
  const auto y_only_composed = [](const Tensors& in) { return layer_norm(in[0] + in[1], in[2], in[3]); };
  std::vector<OpCase> rows = {
      tape_row("add_layer_norm, s and y", {{4, 7}, {4, 7}, {7}, {7}}, both).with_composed(both_composed),
      tape_row("add_layer_norm batched, s and y", {{2, 3, 5}, {2, 3, 5}, {5}, {5}}, both)
          .with_composed(both_composed),
      tape_row("add_layer_norm, y only", {{3, 6}, {3, 6}, {6}, {6}}, y_only).with_composed(y_only_composed),
      tape_row("add_layer_norm without bias", {{3, 6}, {3, 6}, {6}}, both).with_composed(both_composed),
      tape_row("add_layer_norm, x and b frozen", {{3, 5}, {3, 5}, {5}, {5}}, both, Domain::Any,
               {false, true, true, false})
          .with_composed(both_composed),
  };
  // With the residual branch's bias rb (the last input): against add_layer_norm(x, r + rb). On every
  // device and dtype s, y and the gradients of x, r, w and b are the composition's bits (checked
  // bitwise in tests/test_layernorm_residual_bias.cpp); rb's gradient, the column sums of ds, is
  // within the sum's rounding: on cuda double per row chunk, chunks in order (the LayerNorm's dw/db
  // sums, in the norm's own launch), on the cpu acc_t in row order (linear's bias gradient bits).
  // C = 7 is finished by the rows kernel's last block on cuda, C = 260 by norm_params_kernel.
  const auto with_rb = [](const Tensors& in) {
    const AddLayerNormResult o = add_layer_norm(in[0], in[1], in[2], in[3], 1e-5, in[4]);
    return concat({o.s, o.y}, -1);
  };
  const auto with_rb_composed = [](const Tensors& in) {
    const Tensor s = in[0] + (in[1] + in[4]);
    return concat({s, layer_norm(s, in[2], in[3])}, -1);
  };
  const auto rb_no_bias_y = [](const Tensors& in) {
    return add_layer_norm(in[0], in[1], in[2], Tensor(), 1e-5, in[3]).y;
  };
  const auto rb_no_bias_y_composed = [](const Tensors& in) { return layer_norm(in[0] + (in[1] + in[3]), in[2]); };
  rows.push_back(tape_row("add_layer_norm with rb, s and y", {{5, 7}, {5, 7}, {7}, {7}, {7}}, with_rb)
                     .with_composed(with_rb_composed));
  rows.push_back(tape_row("add_layer_norm with rb, wide rows", {{3, 260}, {3, 260}, {260}, {260}, {260}}, with_rb)
                     .with_composed(with_rb_composed));
  rows.push_back(tape_row("add_layer_norm with rb, no bias, y only", {{2, 3, 6}, {2, 3, 6}, {6}, {6}}, rb_no_bias_y)
                     .with_composed(rb_no_bias_y_composed));
  rows.push_back(tape_row("add_layer_norm with rb, x and w frozen", {{4, 5}, {4, 5}, {5}, {5}, {5}}, with_rb,
                          Domain::Any, {false, true, false, true, true})
                     .with_composed(with_rb_composed));
  for (OpCase& c : rows) c.with_dtypes(kDTypes);
  return rows;
}

TEST_CASE("layernorm and rmsnorm: forward and backward") { run_cases(norm_cases(), kDTypes); }
TEST_CASE("add_layernorm: the residual add fused into LayerNorm, dw/db into buffers") {
  run_cases(add_norm_cases(), kDTypes);
}
TEST_CASE("add_layer_norm tape op: against x + r then layer_norm") { run_cases(add_norm_tape_cases(), kDTypes); }
TEST_CASE("batchnorm: statistics, running-stat update, forward, replay and backward") {
  run_cases(batch_norm_cases(), kDTypes);
}
TEST_CASE("norm tape ops: layer_norm, rms_norm, group_norm, batch_norm") { run_cases(norm_tape_cases(), kTapeDTypes); }
}  // namespace
}  // namespace reel::op_table
