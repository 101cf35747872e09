// tests/op_table/conv.cpp: the op table's conv2d family. Kernel rows: forward and the input, weight
// and bias backward in f32, f64, bf16 and f16 against the f64 run. Tape rows: conv2d with padding, stride,
// dilation, groups (depthwise), 1x1, frozen inputs, against the same convolution composed from
// padding (concat), strided slices and matmul.
#include <vector>

#include "autograd/functions.h"
#include "autograd/nn_functions.h"
#include "kernels/conv.h"
#include "op_table.h"

namespace reel::op_table {
namespace {

using namespace reel::testing;

// The dtypes every row of this family runs in (rows that name their own keep them): one entry to add.
// bf16 and f16: the kernel rows (conv_kernel_cases); the tape rows need the elementwise and
// reduction families in 16 bits too (the runner's loss sum(w * f(x)), the composed convolution) and
// run in f32 and f64 until those are ported.
const std::vector<DType> kDTypes = {DType::f32, DType::f64, DType::bf16, DType::f16};
const std::vector<DType> kTapeDTypes = {DType::f32, DType::f64};

// ==== kernel rows ==================================================================================

// The kernel rows' tolerances (y, dx, dw, db), against the f64 run on the same rounded inputs
// (precision) and cpu against cuda (device). f32: sums of at most a few hundred products of values
// in [-1, 1] (dw: over the batch and the output plane), a few ulps of 2^-24 of the summed
// magnitudes: 2e-5 absolute and relative. bf16 and f16: the products of 16-bit values are exact in
// f32, so the same f32 sums, then one rounding to the type: half an ulp, a relative u = 2^-8 (bf16)
// or 2^-11 (f16) more. cpu (oneDNN's 16-bit matmul or the f32 GEMM on widened values) and cuda (the
// emulated cuDNN's float loops) sum in other orders, so their f32 sums may round to neighbouring
// 16-bit values: one ulp, 2u.
Tols conv_tols(bool device) {
  const double k = device ? 2 : 1;
  Tols t = tols(2e-5, 1e-12);
  t.by_dtype.push_back({DType::bf16, Tol{k * 0x1p-8 + 2e-5, 2e-5}});
  t.by_dtype.push_back({DType::f16, Tol{k * 0x1p-11 + 2e-5, 2e-5}});
  return t;
}

std::vector<OpCase> conv_kernel_cases() {
  using namespace kernels;
  struct Config {
    Shape x, w;
    Conv2d p;
    bool bias;
  };
  const std::vector<Config> configs = {
      {{2, 3, 5, 4}, {4, 3, 3, 3}, {{1, 1}, {1, 1}, {1, 1}, 1}, true},
      {{2, 4, 7, 6}, {6, 2, 3, 2}, {{2, 2}, {1, 0}, {1, 2}, 2}, true},  // stride, dilation, groups
      {{2, 3, 4, 4}, {5, 3, 1, 1}, {}, false},                          // 1x1: the col matrix is x
      {{1, 3, 5, 5}, {3, 1, 3, 3}, {{1, 2}, {2, 2}, {1, 1}, 3}, true},  // depthwise
  };
  std::vector<OpCase> cases;
  for (const Config& c : configs) {
    const Shape ys = conv2d_output_shape("conv rows", c.x, c.w, c.p);
    OpCase row("conv2d x " + shape_str(c.x) + " w " + shape_str(c.w) + " stride " +
                   shape_str({c.p.stride[0], c.p.stride[1]}) + " padding " + shape_str({c.p.padding[0], c.p.padding[1]}) +
                   " dilation " + shape_str({c.p.dilation[0], c.p.dilation[1]}) + " groups " + str(c.p.groups) +
                   (c.bias ? " bias" : ""),
               [c, ys](Generator& g) {
                 return Tensors{uniform_f64(g, c.x), uniform_f64(g, c.w), uniform_f64(g, {c.w[0]}), uniform_f64(g, ys)};
               },
               [c](const Tensors& in, Device) {
                 const Tensor y = conv2d_forward(in[0], in[1], c.bias ? in[2] : Tensor(), c.p);
                 return Tensors{y, conv2d_backward_input(in[3], in[1], c.x, c.p),
                                conv2d_backward_weight(in[3], in[0], c.w, c.p), conv2d_backward_bias(in[3])};
               },
               {conv_tols(true)});
    row.with_precision({conv_tols(false)});
    cases.push_back(row);
  }
  return cases;
}

// conv2d from pad (concat), strided slices and matmul: for each kernel tap (i, j), the
// (N, C, OH, OW) slice of the zero-padded x it reads; per group, that slice's channels (N, C_g, L)
// multiplied by the tap's weights (O_g, C_g) and summed over the taps; groups concatenated.
Tensor conv_composed(const Tensor& x, const Tensor& w, const Tensor* b, kernels::Conv2d p) {
  Tensor xp = x;
  for (int i = 0; i < 2; ++i) {
    if (p.padding[i] == 0) continue;
    Shape pad_shape = xp.shape();
    pad_shape[static_cast<size_t>(2 + i)] = p.padding[i];
    const Tensor pad = zeros(pad_shape, x.dtype(), x.device());
    xp = concat({pad, xp, pad}, 2 + i);
  }
  const int64_t N = x.size(0), C = x.size(1), O = w.size(0), G = p.groups, Cg = C / G, Og = O / G;
  int64_t out[2];
  for (int i = 0; i < 2; ++i)
    out[i] = (xp.size(2 + i) - p.dilation[i] * (w.size(2 + i) - 1) - 1) / p.stride[i] + 1;
  std::vector<Tensor> per_group;  // (N, O_g, L) each
  for (int64_t g = 0; g < G; ++g) {
    Tensor acc;
    for (int64_t i = 0; i < w.size(2); ++i)
      for (int64_t j = 0; j < w.size(3); ++j) {
        const int64_t h0 = i * p.dilation[0], w0 = j * p.dilation[1];
        const Tensor t = slice(slice(slice(xp, 1, g * Cg, (g + 1) * Cg), 2, h0, h0 + (out[0] - 1) * p.stride[0] + 1,
                                     p.stride[0]),
                               3, w0, w0 + (out[1] - 1) * p.stride[1] + 1, p.stride[1]);
        const Tensor tap = reshape(slice(slice(slice(w, 0, g * Og, (g + 1) * Og), 2, i, i + 1), 3, j, j + 1), {Og, Cg});
        const Tensor term = matmul(tap, reshape(t, {N, Cg, out[0] * out[1]}));
        acc = acc.defined() ? acc + term : term;
      }
    per_group.push_back(acc);
  }
  Tensor y = reshape(concat(per_group, 1), {N, O, out[0], out[1]});
  if (b) y = y + reshape(*b, {1, O, 1, 1});
  return y;
}

std::vector<OpCase> conv_tape_cases() {
  return {
      with_composed(tape_ternary("conv2d 3x3 padding 1 with bias",
                                 [](const Tensor& x, const Tensor& w, const Tensor& b) { return conv2d(x, w, b, 1, 1); },
                                 {2, 3, 5, 4}, {4, 3, 3, 3}, {4}),
                    [](const Tensors& x) { return conv_composed(x[0], x[1], &x[2], {{1, 1}, {1, 1}, {1, 1}, 1}); }),
      with_composed(tape_ternary("conv2d (3, 2) stride 2 padding (1, 0) dilation (1, 2) groups 2",
                                 [](const Tensor& x, const Tensor& w, const Tensor& b) {
                                   return conv2d(x, w, b, 2, Pair2d(1, 0), Pair2d(1, 2), 2);
                                 },
                                 {2, 4, 7, 6}, {6, 2, 3, 2}, {6}),
                    [](const Tensors& x) { return conv_composed(x[0], x[1], &x[2], {{2, 2}, {1, 0}, {1, 2}, 2}); }),
      with_composed(tape_binary("conv2d 1x1 (x itself is the col matrix), no bias",
                                [](const Tensor& x, const Tensor& w) { return conv2d(x, w); }, {2, 3, 4, 4}, {5, 3, 1, 1}),
                    [](const Tensors& x) { return conv_composed(x[0], x[1], nullptr, {}); }),
      with_composed(tape_ternary("conv2d depthwise 3x3 stride (1, 2) padding 2, x needs no grad",
                                 [](const Tensor& x, const Tensor& w, const Tensor& b) {
                                   return conv2d(x, w, b, Pair2d(1, 2), 2, 1, 3);
                                 },
                                 {1, 3, 5, 5}, {3, 1, 3, 3}, {3}, {false, true, true}),
                    [](const Tensors& x) { return conv_composed(x[0], x[1], &x[2], {{1, 2}, {2, 2}, {1, 1}, 3}); }),
      tape_ternary("conv2d 2x2 stride 2, weight frozen",
                   [](const Tensor& x, const Tensor& w, const Tensor& b) { return conv2d(x, w, b, 2); }, {3, 2, 6, 4},
                   {3, 2, 2, 2}, {3}, {true, false, true}),
  };
}

TEST_CASE("conv2d kernels: forward, input, weight and bias backward, in every dtype") {
  run_cases(conv_kernel_cases(), kDTypes);
}
TEST_CASE("conv2d tape op: padding, stride, dilation, groups, 1x1, frozen inputs") {
  run_cases(conv_tape_cases(), kTapeDTypes);
}
}  // namespace
}  // namespace reel::op_table
