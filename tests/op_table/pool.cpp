// tests/op_table/pool.cpp: the op table's pooling family. Kernel rows: max and avg pooling forward
// and backward in f32, f64, bf16 and f16 against the f64 run. Tape rows: max_pool2d and avg_pool2d
// with overlapping windows, padding, dilation, ceil_mode, count_include_pad, unbatched inputs,
// against the same pooling composed from padding (concat), strided slices and max or sum.
#include <algorithm>
#include <limits>
#include <vector>

#include "autograd/functions.h"
#include "autograd/nn_functions.h"
#include "kernels/pool.h"
#include "op_table.h"

namespace reel::op_table {
namespace {

using namespace reel::testing;

// The dtypes every row of this family runs in (rows that name their own keep them): one entry to add.
// bf16 and f16: the kernel rows (pool_kernel_cases); the tape rows need the elementwise and
// reduction families in 16 bits too (the runner's loss sum(w * f(x)), the composed pooling) and run
// in f32 and f64 until those are ported.
const std::vector<DType> kDTypes = {DType::f32, DType::f64, DType::bf16, DType::f16};
const std::vector<DType> kTapeDTypes = {DType::f32, DType::f64};

// ==== kernel rows ==================================================================================

// A kernel row's tolerances (y, then dx), against the f64 run on the same rounded inputs (precision)
// and cpu against cuda (device). f32: a window of at most 9 terms, or a gather of at most 9 dy, each
// summed in f32 (a few ulps of 2^-24). bf16 and f16: the same f32 sums rounded once to the 16-bit
// type, half an ulp: a relative u = 2^-8 (bf16) or 2^-11 (f16), plus the f32 error; cpu and cuda add
// in the same order (both gather in row-major output order), so they agree but for the f32 sums'
// last bits, whose rounding may still land on either side: one ulp, 2u. A max is one of the inputs
// (exact in every dtype) and its indices are integers: exact.
Tols pool_tols(bool device) {
  const double k = device ? 2 : 1;
  Tols t = tols(1e-6, 1e-12);
  t.by_dtype.push_back({DType::bf16, Tol{k * 0x1p-8, 1e-6}});
  t.by_dtype.push_back({DType::f16, Tol{k * 0x1p-11, 1e-6}});
  return t;
}

std::vector<OpCase> pool_kernel_cases() {
  using namespace kernels;
  struct Config {
    Shape x;
    Pool2d p;
  };
  const std::vector<Config> configs = {
      {{2, 3, 4, 6}, {{2, 2}, {2, 2}}},
      {{2, 2, 5, 4}, {{3, 3}, {1, 1}, {1, 1}}},                  // overlapping, padded
      {{1, 3, 7, 6}, {{3, 2}, {2, 1}, {1, 0}, {1, 1}}},
      {{2, 2, 6, 5}, {{3, 3}, {2, 2}, {1, 1}, {1, 1}, true}},    // ceil_mode: a window past the edge
      {{1, 2, 5, 4}, {{3, 3}, {1, 1}, {1, 1}, {1, 1}, false, false}},  // count_include_pad = false
  };
  std::vector<OpCase> cases;
  for (const Config& c : configs) {
    const std::string name = shape_str(c.x) + " kernel " + shape_str({c.p.kernel[0], c.p.kernel[1]}) + " stride " +
                             shape_str({c.p.stride[0], c.p.stride[1]}) + " padding " +
                             shape_str({c.p.padding[0], c.p.padding[1]}) + (c.p.ceil_mode ? " ceil_mode" : "") +
                             (c.p.count_include_pad ? "" : " count_include_pad=false");
    for (bool is_max : {true, false}) {
      const Shape ys = is_max ? max_pool2d_forward(zeros(c.x, DType::f64), c.p).y.shape()
                              : avg_pool2d_forward(zeros(c.x, DType::f64), c.p).shape();
      OpCase row(std::string(is_max ? "max_pool2d " : "avg_pool2d ") + name,
                 [c, ys](Generator& g) { return Tensors{uniform_f64(g, c.x, -2, 2), uniform_f64(g, ys)}; },
                 [c, is_max](const Tensors& in, Device) {
                   if (is_max) {
                     const MaxPool2dForward f = max_pool2d_forward(in[0], c.p);
                     return Tensors{f.y, f.indices, max_pool2d_backward(in[1], f.indices, c.x, c.p)};
                   }
                   return Tensors{avg_pool2d_forward(in[0], c.p), avg_pool2d_backward(in[1], c.x, c.p)};
                 },
                 {pool_tols(true)});
      row.with_precision({pool_tols(false)});
      cases.push_back(row);
    }
  }
  return cases;
}

// 2-D pooling from pad (concat), strided slices and max or sum over the stacked window offsets:
// x (N, C, H, W) or (C, H, W) padded with -inf (max) or 0 (avg) on the left and right, and on the
// right further for ceil_mode's windows that hang past the padded edge, then for each window
// offset (ki, kj) the (N, C, OH, OW) slice it reads, stacked on a last dim of kh * kw. avg divides
// the window sums by those of a constant mask: 1 on the input and (count_include_pad) its padding.
Tensor pool_composed(const Tensor& x_in, kernels::Pool2d p, bool is_max) {
  const Tensor x = x_in.dim() == 3 ? reshape(x_in, {1, x_in.size(0), x_in.size(1), x_in.size(2)}) : x_in;
  Tensor xp = x;
  const double fill = is_max ? -std::numeric_limits<double>::infinity() : 0.0;
  int64_t out[2];
  std::vector<double> axis_mask[2];  // along the padded H and W: 1 where the divisor counts
  for (int i = 0; i < 2; ++i) {
    // PyTorch's output size (kernels/pool.h), then the right padding that the last window reads.
    const int64_t in = x.size(2 + i), pad = p.padding[i], span = p.dilation[i] * (p.kernel[i] - 1) + 1;
    const int64_t room = in + 2 * pad - span;
    out[i] = (room + (p.ceil_mode ? p.stride[i] - 1 : 0)) / p.stride[i] + 1;
    if (p.ceil_mode && (out[i] - 1) * p.stride[i] >= in + pad) --out[i];
    const int64_t right = std::max<int64_t>(pad, (out[i] - 1) * p.stride[i] + span - in - pad);
    std::vector<Tensor> parts;
    for (int64_t n : {pad, int64_t{-1}, right}) {
      if (n == 0) continue;
      if (n < 0) {
        parts.push_back(xp);
        continue;
      }
      Shape s = xp.shape();
      s[static_cast<size_t>(2 + i)] = n;
      parts.push_back(full(s, fill, x.dtype(), x.device()));
    }
    xp = concat(parts, 2 + i);
    const double edge = p.count_include_pad ? 1.0 : 0.0;
    axis_mask[i].assign(static_cast<size_t>(pad), edge);
    axis_mask[i].resize(static_cast<size_t>(pad + in), 1.0);
    axis_mask[i].resize(static_cast<size_t>(2 * pad + in), edge);
    axis_mask[i].resize(static_cast<size_t>(pad + in + right), 0.0);  // past the padded edge
  }
  auto stack = [&](const Tensor& t) {
    std::vector<Tensor> taps;  // (N, C, OH, OW, 1) each
    for (int64_t ki = 0; ki < p.kernel[0]; ++ki)
      for (int64_t kj = 0; kj < p.kernel[1]; ++kj) {
        const int64_t h0 = ki * p.dilation[0], w0 = kj * p.dilation[1];
        const Tensor tap = slice(slice(t, 2, h0, h0 + (out[0] - 1) * p.stride[0] + 1, p.stride[0]), 3, w0,
                                 w0 + (out[1] - 1) * p.stride[1] + 1, p.stride[1]);
        taps.push_back(reshape(tap, {x.size(0), x.size(1), out[0], out[1], 1}));
      }
    return concat(taps, 4);
  };
  if (is_max) {
    const Tensor y = max(stack(xp), 4);
    return x_in.dim() == 3 ? reshape(y, {x_in.size(0), out[0], out[1]}) : y;
  }
  // The divisor: the window sums of the constant mask (padded H) x (padded W), broadcast to xp.
  const int64_t hp = static_cast<int64_t>(axis_mask[0].size()), wp = static_cast<int64_t>(axis_mask[1].size());
  const Tensor mask = from_vector<double>(axis_mask[0], {1, 1, hp, 1}).to(x.dtype()).to(x.device()) *
                          from_vector<double>(axis_mask[1], {1, 1, 1, wp}).to(x.dtype()).to(x.device()) +
                      zeros(xp.shape(), x.dtype(), x.device());
  const Tensor y = sum(stack(xp), {4}) / sum(stack(mask), {4});
  return x_in.dim() == 3 ? reshape(y, {x_in.size(0), out[0], out[1]}) : y;
}

std::vector<OpCase> pool_tape_cases() {
  return {
      // Random inputs have no ties, so max_pool2d is differentiable where gradcheck probes it.
      with_composed(tape_unary("max_pool2d 2x2 (non-overlapping)", [](const Tensor& x) { return max_pool2d(x, 2); },
                               {2, 3, 4, 6}),
                    [](const Tensors& x) {  // (N, C, OH, 2, OW, 2) -> (N, C, OH, OW, 4), max over the last
                      const Tensor w = permute(reshape(x[0], {2, 3, 2, 2, 3, 2}), {0, 1, 2, 4, 3, 5});
                      return max(reshape(w, {2, 3, 2, 3, 4}), 4);
                    }),
      with_composed(tape_unary("max_pool2d 3x3 stride 1 padding 1 (overlapping)",
                               [](const Tensor& x) { return max_pool2d(x, 3, 1, 1); }, {2, 2, 5, 4}),
                    [](const Tensors& x) { return pool_composed(x[0], {{3, 3}, {1, 1}, {1, 1}, {1, 1}}, true); }),
      with_composed(tape_unary("max_pool2d (3, 2) stride (2, 1) padding (1, 0) dilation (1, 2)",
                               [](const Tensor& x) { return max_pool2d(x, Pair2d(3, 2), Pair2d(2, 1), Pair2d(1, 0), Pair2d(1, 2)); },
                               {1, 3, 7, 6}),
                    [](const Tensors& x) { return pool_composed(x[0], {{3, 2}, {2, 1}, {1, 0}, {1, 2}}, true); }),
      with_composed(tape_unary("max_pool2d 2x2 stride 1 dilation 2", [](const Tensor& x) { return max_pool2d(x, 2, 1, 0, 2); },
                               {2, 1, 5, 5}),
                    [](const Tensors& x) { return pool_composed(x[0], {{2, 2}, {1, 1}, {0, 0}, {2, 2}}, true); }),
      with_composed(tape_unary("avg_pool2d 2x2 (non-overlapping)", [](const Tensor& x) { return avg_pool2d(x, 2); },
                               {2, 3, 4, 6}),
                    [](const Tensors& x) { return mean(reshape(x[0], {2, 3, 2, 2, 3, 2}), {3, 5}); }),
      with_composed(tape_unary("avg_pool2d 3x3 stride 1 padding 1 (overlapping, pad counted)",
                               [](const Tensor& x) { return avg_pool2d(x, 3, 1, 1); }, {2, 2, 5, 4}),
                    [](const Tensors& x) { return pool_composed(x[0], {{3, 3}, {1, 1}, {1, 1}, {1, 1}}, false); }),
      with_composed(tape_unary("avg_pool2d (3, 2) stride (2, 1) padding (1, 1)",
                               [](const Tensor& x) { return avg_pool2d(x, Pair2d(3, 2), Pair2d(2, 1), Pair2d(1, 1)); },
                               {1, 3, 7, 5}),
                    [](const Tensors& x) { return pool_composed(x[0], {{3, 2}, {2, 1}, {1, 1}, {1, 1}}, false); }),
      // ceil_mode: (6, 5) under 3x3 stride 2 padding 1 gives (4, 3), the last row of windows hanging
      // past the padded edge (floor: (3, 3)); (5, 5) under 2x2 stride 2 padding 1 drops the window
      // that would start past the padding ((3, 3), as floor). On cuda, avg pooling goes through
      // cuDNN unless ceil_mode adds windows (kernels/cuda/pool.cu): rows of both kinds.
      with_composed(tape_unary("max_pool2d 3x3 stride 2 padding 1 ceil_mode",
                               [](const Tensor& x) { return max_pool2d(x, 3, 2, 1, 1, true); }, {2, 2, 6, 5}),
                    [](const Tensors& x) {
                      return pool_composed(x[0], {{3, 3}, {2, 2}, {1, 1}, {1, 1}, true}, true);
                    }),
      with_composed(tape_unary("max_pool2d (2, 3) stride (2, 2) dilation (2, 1) ceil_mode",
                               [](const Tensor& x) { return max_pool2d(x, Pair2d(2, 3), 2, 0, Pair2d(2, 1), true); },
                               {1, 2, 6, 6}),
                    [](const Tensors& x) {
                      return pool_composed(x[0], {{2, 3}, {2, 2}, {0, 0}, {2, 1}, true}, true);
                    }),
      with_composed(tape_unary("avg_pool2d 3x3 stride 2 padding 1 ceil_mode (divisor clipped at the padded edge)",
                               [](const Tensor& x) { return avg_pool2d(x, 3, 2, 1, true); }, {2, 2, 6, 5}),
                    [](const Tensors& x) {
                      return pool_composed(x[0], {{3, 3}, {2, 2}, {1, 1}, {1, 1}, true}, false);
                    }),
      with_composed(tape_unary("avg_pool2d 2x2 stride 2 padding 1 ceil_mode (last window dropped)",
                               [](const Tensor& x) { return avg_pool2d(x, 2, 2, 1, true); }, {1, 2, 5, 5}),
                    [](const Tensors& x) {
                      return pool_composed(x[0], {{2, 2}, {2, 2}, {1, 1}, {1, 1}, true}, false);
                    }),
      with_composed(tape_unary("avg_pool2d 3x3 stride 1 padding 1 count_include_pad=false",
                               [](const Tensor& x) { return avg_pool2d(x, 3, 1, 1, false, false); }, {2, 2, 5, 4}),
                    [](const Tensors& x) {
                      return pool_composed(x[0], {{3, 3}, {1, 1}, {1, 1}, {1, 1}, false, false}, false);
                    }),
      with_composed(tape_unary("avg_pool2d (3, 2) stride 2 padding 1 ceil_mode count_include_pad=false",
                               [](const Tensor& x) { return avg_pool2d(x, Pair2d(3, 2), 2, 1, true, false); },
                               {1, 3, 6, 5}),
                    [](const Tensors& x) {
                      return pool_composed(x[0], {{3, 2}, {2, 2}, {1, 1}, {1, 1}, true, false}, false);
                    }),
      // Unbatched (C, H, W).
      with_composed(tape_unary("max_pool2d 3x3 stride 2 padding 1, unbatched",
                               [](const Tensor& x) { return max_pool2d(x, 3, 2, 1); }, {3, 5, 6}),
                    [](const Tensors& x) { return pool_composed(x[0], {{3, 3}, {2, 2}, {1, 1}, {1, 1}}, true); }),
      with_composed(tape_unary("avg_pool2d 2x2 stride 1 padding 1 ceil_mode, unbatched",
                               [](const Tensor& x) { return avg_pool2d(x, 2, 1, 1, true); }, {2, 4, 5}),
                    [](const Tensors& x) {
                      return pool_composed(x[0], {{2, 2}, {1, 1}, {1, 1}, {1, 1}, true}, false);
                    }),
      tape_unary("flatten(x, 1) of a pooled strided view",
                 [](const Tensor& x) { return flatten(max_pool2d(transpose(x, 2, 3), 2), 1); }, {2, 3, 4, 6}),
  };
}

TEST_CASE("pooling kernels: max and avg, forward and backward, in every dtype") { run_cases(pool_kernel_cases(), kDTypes); }
TEST_CASE("pooling tape ops: max and avg, padding, dilation, ceil_mode, unbatched") {
  run_cases(pool_tape_cases(), kTapeDTypes);
}
}  // namespace
}  // namespace reel::op_table
