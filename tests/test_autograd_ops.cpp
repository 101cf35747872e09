// Every differentiable op from one table of cases: its backward against central finite
// differences (autograd::gradcheck, f64 on the CPU), then, on every device, its f32 values and
// gradients against the f64 CPU ones. Broadcasting shapes, 1-D and batched matmul, transposes,
// inputs that do not need a gradient, reductions over several axes, dropout with a fixed stream;
// the shape ops (views, through reel:: functions and through Tensor methods), sigmoid/SiLU, max,
// linear, LayerNorm/RMSNorm, BatchNorm, softmax, cross-entropy, embedding and attention.
#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <string>

#include "autograd/functions.h"
#include "autograd/nn_functions.h"
#include "autograd/gradcheck.h"
#include "autograd/tape.h"
#include "core/philox.h"
#include "kernels/dropout.h"
#include "kernels/op_kinds.h"
#include "testing.h"

using namespace reel;
using autograd::Tensors;
using reel::testing::check_close;
using reel::testing::values;

namespace {

enum class Domain { Any, Positive, AwayFromZero };

struct OpCase {
  std::string name;
  std::vector<Shape> shapes;
  std::function<Tensor(const Tensors&)> f;
  Domain domain = Domain::Any;
  std::vector<bool> needs_grad = {};  // default: every input
  // Where set: the same function composed from other ops, which f's f64 values must match; what
  // keeps a forward that is wrong in the same way as its backward from passing.
  std::function<Tensor(const Tensors&)> reference = {};
};

Tensor make_input(const Shape& shape, Domain domain, Generator& gen) {
  std::vector<double> v = values(reel::testing::normal_f64(gen, shape));
  for (double& x : v) {
    if (domain == Domain::Positive) x = std::fabs(x) + 0.5;                        // log, divisors
    if (domain == Domain::AwayFromZero) x = x + (x >= 0 ? 0.1 : -0.1);             // relu's kink
  }
  return from_vector(v, shape);
}

// The same stream inside f each call, so finite differences see one fixed mask.
Tensor fixed_dropout(const Tensor& x, double p) {
  Generator gen(7);
  return dropout(x, p, true, &gen);
}

// Where the autograd table draws a list op's inputs (its Domain in kernels/op_kinds.h).
Domain domain_of(kernels::UnaryOp op) {
  switch (kernels::unary_domain(op)) {
    case kernels::UnaryDomain::Positive: return Domain::Positive;
    case kernels::UnaryDomain::Kink: return Domain::AwayFromZero;
    case kernels::UnaryDomain::Real: break;
  }
  return Domain::Any;
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

Tensor softmax_last(const Tensor& x) {
  Tensor e = exp(x);
  return e / sum(e, {-1}, true);
}

std::vector<OpCase> op_cases() {
  auto binary = [](const char* name, std::function<Tensor(const Tensor&, const Tensor&)> op, Shape a, Shape b,
                   Domain domain = Domain::Any, std::vector<bool> needs = {}) {
    return OpCase{name + (" " + shape_str(a) + " " + shape_str(b)), {a, b},
                  [op](const Tensors& x) { return op(x[0], x[1]); }, domain, needs};
  };
  auto unary = [](const char* name, std::function<Tensor(const Tensor&)> op, Shape s, Domain domain = Domain::Any) {
    return OpCase{name + (" " + shape_str(s)), {s}, [op](const Tensors& x) { return op(x[0]); }, domain};
  };
  auto add_ = [](const Tensor& a, const Tensor& b) { return a + b; };
  auto sub_ = [](const Tensor& a, const Tensor& b) { return a - b; };
  auto mul_ = [](const Tensor& a, const Tensor& b) { return a * b; };
  auto div_ = [](const Tensor& a, const Tensor& b) { return a / b; };
  auto mm = [](bool ta, bool tb) {
    return [ta, tb](const Tensor& a, const Tensor& b) { return matmul(a, b, ta, tb); };
  };
  // Integer inputs (targets, token ids) are constants captured by f, moved to its inputs' device.
  auto on = [](const Tensor& constant, const Tensor& like) { return constant.to(like.device()); };
  const Tensor targets6 = from_vector<int64_t>({2, 0, -100, 4, 4, 1}, {6});
  const Tensor targets23 = from_vector<int32_t>({1, 4, 0, 3, -100, 2}, {2, 3});
  const Tensor targets23_ignore3 = from_vector<int64_t>({3, 4, 0, 3, 1, 2}, {2, 3});
  const Tensor ids24 = from_vector<int64_t>({3, 0, 6, 3, 3, 1, 6, 2}, {2, 4});
  const Tensor ids5 = from_vector<int32_t>({4, 4, 0, 1, 4}, {5});
  const Tensor bn_rm = from_vector<double>({0.5, -1, 2}, {3}), bn_rv = from_vector<double>({0.25, 2, 1}, {3});
  auto with_reference = [](OpCase c, std::function<Tensor(const Tensors&)> reference) {
    c.reference = std::move(reference);
    return c;
  };
  auto ternary = [](const char* name, std::function<Tensor(const Tensor&, const Tensor&, const Tensor&)> op,
                    Shape a, Shape b, Shape c, std::vector<bool> needs = {}) {
    return OpCase{name + (" " + shape_str(a) + " " + shape_str(b) + " " + shape_str(c)), {a, b, c},
                  [op](const Tensors& x) { return op(x[0], x[1], x[2]); }, Domain::Any, needs};
  };
  return {
      binary("add", add_, {3, 4}, {3, 4}),
      binary("add", add_, {3, 4}, {4}),
      binary("add", add_, {2, 3, 1}, {1, 4}),
      binary("add", add_, {}, {2, 3}),
      binary("add", add_, {2, 1}, {2, 3}, Domain::Any, {false, true}),
      binary("sub", sub_, {3, 4}, {4}),
      binary("sub", sub_, {4}, {2, 3, 4}),
      binary("sub", sub_, {2, 3}, {2, 1}, Domain::Any, {false, true}),
      binary("mul", mul_, {2, 3}, {2, 3}),
      binary("mul", mul_, {2, 3, 4}, {3, 1}),
      binary("mul", mul_, {4}, {2, 3, 4}, Domain::Any, {true, false}),
      binary("mul", mul_, {4}, {2, 3, 4}, Domain::Any, {false, true}),
      binary("div", div_, {2, 3}, {2, 3}, Domain::Positive),
      binary("div", div_, {2, 3}, {3}, Domain::Positive),
      binary("div", div_, {3, 1}, {1, 4}, Domain::Positive),
      binary("div", div_, {2, 3}, {2, 3}, Domain::Positive, {true, false}),
      binary("div", div_, {3}, {2, 3}, Domain::Positive, {false, true}),
      unary("add_scalar", [](const Tensor& x) { return x + 2.5; }, {3, 4}),
      unary("radd_scalar", [](const Tensor& x) { return 2.5 + x; }, {3, 4}),
      unary("sub_scalar", [](const Tensor& x) { return x - 1.5; }, {3, 4}),
      unary("rsub_scalar", [](const Tensor& x) { return 1.5 - x; }, {3, 4}),
      unary("mul_scalar", [](const Tensor& x) { return x * -3.0; }, {3, 4}),
      unary("rmul_scalar", [](const Tensor& x) { return -3.0 * x; }, {3, 4}),
      unary("div_scalar", [](const Tensor& x) { return x / 4.0; }, {3, 4}),
      unary("rdiv_scalar", [](const Tensor& x) { return 4.0 / x; }, {3, 4}, Domain::Positive),
      unary("neg", [](const Tensor& x) { return -x; }, {3, 4}),
      binary("matmul", mm(false, false), {3, 4}, {4, 5}),
      binary("matmul", mm(false, false), {2, 3, 4}, {4, 5}),
      binary("matmul", mm(false, false), {2, 3, 4}, {2, 4, 5}),
      binary("matmul", mm(false, false), {2, 1, 3, 4}, {5, 4, 2}),
      binary("matmul", mm(false, false), {4}, {4, 5}),
      binary("matmul", mm(false, false), {3, 4}, {4}),
      binary("matmul", mm(false, false), {4}, {4}),
      binary("matmul", mm(false, false), {2, 3, 4}, {4}),
      binary("matmul", mm(false, false), {3, 4}, {4, 5}, Domain::Any, {false, true}),
      binary("matmul a^T", mm(true, false), {4, 3}, {4, 5}),
      binary("matmul b^T", mm(false, true), {3, 4}, {5, 4}),
      binary("matmul a^T b^T", mm(true, true), {4, 3}, {5, 4}),
      binary("matmul q k^T", mm(false, true), {2, 3, 4}, {2, 5, 4}),
      binary("matmul a^T batched", mm(true, false), {2, 4, 3}, {4, 5}),
      unary("sum all", [](const Tensor& x) { return sum(x); }, {3, 4}),
      unary("sum axis 0", [](const Tensor& x) { return sum(x, {0}); }, {3, 4}),
      unary("sum axis -1 keepdim", [](const Tensor& x) { return sum(x, {-1}, true); }, {3, 4}),
      unary("sum axes 0,2", [](const Tensor& x) { return sum(x, {0, 2}); }, {2, 3, 4}),
      unary("sum scalar", [](const Tensor& x) { return sum(x); }, {}),
      unary("mean all", [](const Tensor& x) { return mean(x); }, {3, 4}),
      unary("mean axis 1", [](const Tensor& x) { return mean(x, {1}); }, {2, 3, 4}),
      unary("mean axes 0,-1 keepdim", [](const Tensor& x) { return mean(x, {0, -1}, true); }, {2, 3, 4}),
      unary("relu", [](const Tensor& x) { return relu(x); }, {3, 4}, Domain::AwayFromZero),
      unary("tanh", [](const Tensor& x) { return tanh(x); }, {3, 4}),
      unary("gelu", [](const Tensor& x) { return gelu(x * 2.0); }, {3, 4}),
      unary("exp", [](const Tensor& x) { return exp(x); }, {3, 4}),
      unary("log", [](const Tensor& x) { return log(x); }, {3, 4}, Domain::Positive),
      unary("dropout p=0.3", [](const Tensor& x) { return fixed_dropout(x, 0.3); }, {4, 5}),
      unary("dropout p=0", [](const Tensor& x) { return fixed_dropout(x * 1.0, 0.0); }, {4, 5}),
      unary("dropout eval", [](const Tensor& x) { return dropout(x * 1.0, 0.5, false); }, {4, 5}),
      unary("softmax (exp/sum/div)", softmax_last, {3, 5}),
      OpCase{"attention (q k^T -> softmax -> v)", {{2, 3, 4}, {2, 5, 4}, {2, 5, 3}},
             [](const Tensors& x) { return matmul(softmax_last(matmul(x[0], x[1], false, true) * 0.5), x[2]); }},

      // ---- shape ops: reel:: functions ----
      unary("reshape -1", [](const Tensor& x) { return reshape(x, {4, -1}); }, {2, 3, 4}),
      unary("reshape of a transpose (copies)", [](const Tensor& x) { return reshape(transpose(x, 0, 1), {-1}); },
            {3, 5}),
      unary("view", [](const Tensor& x) { return view(x, {6, 1, 4}); }, {2, 3, 4}),
      unary("flatten", [](const Tensor& x) { return flatten(x); }, {2, 3, 2}),
      unary("transpose 0,2", [](const Tensor& x) { return transpose(x, 0, 2); }, {2, 3, 4}),
      unary("transpose -1,-2", [](const Tensor& x) { return transpose(x, -1, -2); }, {3, 5}),
      unary("permute 2,0,1", [](const Tensor& x) { return permute(x, {2, 0, 1}); }, {2, 3, 4}),
      unary("permute -1,0,1 then contiguous", [](const Tensor& x) { return contiguous(permute(x, {-1, 0, 1})); },
            {2, 3, 4}),
      unary("contiguous (already)", [](const Tensor& x) { return contiguous(x * 2.0); }, {3, 4}),
      unary("slice step 2", [](const Tensor& x) { return slice(x, 1, 1, 6, 2); }, {3, 7}),
      unary("slice negative start, end past the size", [](const Tensor& x) { return slice(x, -1, -3, 100); },
            {2, 3, 5}),
      unary("slice empty", [](const Tensor& x) { return sum(slice(x, 0, 2, 2)) + sum(x); }, {3, 2}),
      unary("narrow", [](const Tensor& x) { return narrow(x, 0, 1, 2); }, {4, 3}),
      unary("select -1", [](const Tensor& x) { return select(x, 1, -1); }, {2, 3, 4}),
      unary("select of a vector", [](const Tensor& x) { return select(x, 0, 2) * x; }, {5}),
      unary("squeeze", [](const Tensor& x) { return squeeze(x, 1); }, {3, 1, 4}),
      unary("squeeze (no size-1 dim)", [](const Tensor& x) { return squeeze(x * 1.0, 0); }, {3, 4}),
      unary("unsqueeze -1", [](const Tensor& x) { return unsqueeze(x, -1); }, {3, 4}),
      unary("unsqueeze 0 of a scalar", [](const Tensor& x) { return unsqueeze(x, 0); }, {}),
      unary("expand (3, 1) -> (2, 3, 4)", [](const Tensor& x) { return expand(x, {2, 3, 4}); }, {3, 1}),
      unary("expand -1", [](const Tensor& x) { return expand(x, {3, -1}); }, {1, 4}),
      ternary("concat dim 1", [](const Tensor& a, const Tensor& b, const Tensor& c) { return concat({a, b, c}, 1); },
              {2, 1, 3}, {2, 4, 3}, {2, 2, 3}),
      ternary("concat dim -1, one input without grad",
              [](const Tensor& a, const Tensor& b, const Tensor& c) { return concat({a, b, c}, -1); }, {2, 2},
              {2, 3}, {2, 1}, {true, false, true}),
      binary("concat of views of one tensor",
             [](const Tensor& a, const Tensor& b) {
               return concat({transpose(a, 0, 1), b, transpose(slice(a, 1, 1, 3), 0, 1)}, 0);
             },
             {2, 3}, {1, 2}),
      unary("split, one piece unused",
            [](const Tensor& x) {
              const std::vector<Tensor> p = split(x, {1, 3, 2}, 1);
              return concat({p[2], p[0] * 3.0}, 1);
            },
            {2, 6, 2}),
      unary("chunk 7 into 3",
            [](const Tensor& x) {
              const std::vector<Tensor> c = chunk(x, 3, 0);  // 3, 3, 1 rows
              return concat({c[2], c[0] * c[1]}, 0);
            },
            {7, 2}),
      binary("Tensor methods: w.t() of a parameter", [](const Tensor& x, const Tensor& w) { return matmul(x, w.t()); },
             {3, 4}, {5, 4}),
      unary("Tensor methods: a chain of views",
            [](const Tensor& x) {  // (2, 3, 4) -> (4, 3, 2) -> (24) -> (1, 4, 6) -> (3, 4, 6) -> (4, 6) -> ...
              return x.permute({2, 1, 0}).contiguous().flatten().view({1, 4, 6}).expand({3, 4, 6}).select(0, 1)
                         .slice(1, 1, 5).narrow(0, 1, 2).transpose(0, 1).reshape({-1}).unsqueeze(0).squeeze(0) *
                     x.reshape({-1}).narrow(0, 0, 8);
            },
            {2, 3, 4}),

      // ---- every unary op of the list, through its user function; where and compare ----
#define REEL_UNARY_ROW(Name, name, ...) \
  unary("list: " #name, [](const Tensor& x) { return reel::name(x); }, {3, 4}, domain_of(kernels::UnaryOp::Name)),
      REEL_UNARY_OPS(REEL_UNARY_ROW)
#undef REEL_UNARY_ROW
      // where: differentiable in a and b (broadcast: summed down), never in cond; compare masks.
      ternary("where(c > 0, a, b)", [](const Tensor& c, const Tensor& a, const Tensor& b) { return where(gt(c, 0.0), a, b); },
              {3, 4}, {3, 4}, {3, 4}, {false, true, true}),
      ternary("where broadcast cond (3, 1), a (1, 4), b ()",
              [](const Tensor& c, const Tensor& a, const Tensor& b) { return where(le(c, 0.0), a, b); }, {3, 1}, {1, 4},
              {}, {false, true, true}),
      ternary("where, only b needs grad",
              [](const Tensor& c, const Tensor& a, const Tensor& b) { return where(ne(c, 0.0), a, b * 2.0); }, {2, 3},
              {2, 3}, {3}, {false, false, true}),
      binary("where(a > b, a, b) (maximum)", [](const Tensor& a, const Tensor& b) { return where(gt(a, b), a, b); },
             {3, 4}, {4}),
      binary("where with a cond that requires grad", [](const Tensor& a, const Tensor& b) { return where(a, a, b) * a; },
             {2, 3}, {2, 3}),
      unary("x * gt(x, 0) (a mask has no gradient)", [](const Tensor& x) { return x * gt(x, 0.0); }, {3, 4},
            Domain::AwayFromZero),
      binary("x * lt(x, y) + y * ge(x, y)",
             [](const Tensor& x, const Tensor& y) { return x * lt(x, y) + y * ge(x, y) + eq(x, y) * x; }, {3, 4},
             {3, 4}),

      // ---- activations and max ----
      unary("sigmoid", [](const Tensor& x) { return sigmoid(x * 3.0); }, {3, 4}),
      unary("silu", [](const Tensor& x) { return silu(x * 3.0); }, {3, 4}),
      unary("max axis 1", [](const Tensor& x) { return max(x, 1); }, {3, 5}),
      unary("max axis 0 keepdim", [](const Tensor& x) { return max(x, 0, true); }, {4, 3}),
      unary("max axis -1", [](const Tensor& x) { return max(x, -1); }, {2, 3, 4}),

      // ---- linear ----
      ternary("linear", [](const Tensor& x, const Tensor& w, const Tensor& b) { return linear(x, w, b); }, {5, 4},
              {3, 4}, {3}),
      ternary("linear batched", [](const Tensor& x, const Tensor& w, const Tensor& b) { return linear(x, w, b); },
              {2, 3, 4}, {6, 4}, {6}),
      binary("linear without bias", [](const Tensor& x, const Tensor& w) { return linear(x, w); }, {2, 3, 4}, {5, 4}),
      binary("linear of a vector", [](const Tensor& x, const Tensor& w) { return linear(x, w); }, {4}, {2, 4}),
      ternary("linear of a transposed x",
              [](const Tensor& x, const Tensor& w, const Tensor& b) { return linear(transpose(x, 0, 1), w, b); },
              {4, 5}, {3, 4}, {3}),
      ternary("linear, only W and b need grad",
              [](const Tensor& x, const Tensor& w, const Tensor& b) { return linear(x, w, b); }, {5, 4}, {3, 4}, {3},
              {false, true, true}),
      ternary("linear, only x needs grad",
              [](const Tensor& x, const Tensor& w, const Tensor& b) { return linear(x, w, b); }, {5, 4}, {3, 4}, {3},
              {true, false, false}),

      // ---- normalisation ----
      ternary("layer_norm", [](const Tensor& x, const Tensor& w, const Tensor& b) { return layer_norm(x, w, b); },
              {4, 7}, {7}, {7}),
      ternary("layer_norm batched, eps 1e-3",
              [](const Tensor& x, const Tensor& w, const Tensor& b) { return layer_norm(x, w, b, 1e-3); },
              {2, 3, 5}, {5}, {5}),
      binary("layer_norm without bias", [](const Tensor& x, const Tensor& w) { return layer_norm(x, w); }, {3, 6},
             {6}),
      ternary("layer_norm of a transposed x",
              [](const Tensor& x, const Tensor& w, const Tensor& b) { return layer_norm(transpose(x, 0, 1), w, b); },
              {3, 5}, {3}, {3}, {true, false, false}),
      binary("rms_norm", [](const Tensor& x, const Tensor& w) { return rms_norm(x, w); }, {3, 6}, {6}),
      binary("rms_norm batched", [](const Tensor& x, const Tensor& w) { return rms_norm(x, w, 1e-4); },
             {2, 2, 5}, {5}),
      with_reference(ternary("group_norm, 2 groups of 3 channels",
                             [](const Tensor& x, const Tensor& w, const Tensor& b) { return group_norm(x, 2, w, b); },
                             {2, 6, 2, 3}, {6}, {6}),
                     [](const Tensors& x) { return group_norm_composed(x[0], 2, x[1], x[2]); }),
      with_reference(ternary("group_norm, one channel per group, (N, C)",
                             [](const Tensor& x, const Tensor& w, const Tensor& b) { return group_norm(x, 4, w, b); },
                             {3, 4}, {4}, {4}),
                     [](const Tensors& x) { return group_norm_composed(x[0], 4, x[1], x[2]); }),
      with_reference(unary("group_norm, one group, no weight or bias",
                           [](const Tensor& x) { return group_norm(x, 1); }, {2, 3, 5}),
                     [](const Tensors& x) {
                       const Tensor one = ones({3}, x[0].dtype(), x[0].device());
                       return group_norm_composed(x[0], 1, one, one * 0.0);
                     }),

      // ---- batch_norm (training: batch statistics; eval: constant running ones) ----
      with_reference(ternary("batch_norm training, (N, C)",
                             [](const Tensor& x, const Tensor& w, const Tensor& b) {
                               return batch_norm(x, Tensor(), Tensor(), w, b, true);
                             },
                             {5, 3}, {3}, {3}),
                     [](const Tensors& x) { return batch_norm_composed(x[0], x[1], x[2]); }),
      with_reference(ternary("batch_norm training, (N, C, H, W), running stats updated",
                             [](const Tensor& x, const Tensor& w, const Tensor& b) {
                               const Tensor rm = zeros({3}, x.dtype(), x.device()), rv = ones({3}, x.dtype(), x.device());
                               return batch_norm(x, rm, rv, w, b, true, 0.1);
                             },
                             {2, 3, 2, 3}, {3}, {3}),
                     [](const Tensors& x) { return batch_norm_composed(x[0], x[1], x[2]); }),
      with_reference(unary("batch_norm training, no weight or bias, (N, C, L)",
                           [](const Tensor& x) { return batch_norm(x, Tensor(), Tensor(), Tensor(), Tensor(), true); },
                           {3, 2, 4}),
                     [](const Tensors& x) {
                       const Tensor one = ones({2}, x[0].dtype(), x[0].device());
                       return batch_norm_composed(x[0], one, one * 0.0);
                     }),
      with_reference(ternary("batch_norm eval, running stats",
                             [=](const Tensor& x, const Tensor& w, const Tensor& b) {
                               return batch_norm(x, on(bn_rm.to(x.dtype()), x), on(bn_rv.to(x.dtype()), x), w, b);
                             },
                             {4, 3, 2}, {3}, {3}),
                     [=](const Tensors& x) { return batch_norm_composed(x[0], x[1], x[2], bn_rm, bn_rv); }),
      ternary("batch_norm training, only w and b need grad",
              [](const Tensor& x, const Tensor& w, const Tensor& b) {
                return batch_norm(x, Tensor(), Tensor(), w, b, true);
              },
              {4, 3}, {3}, {3}, {false, true, true}),

      // ---- pooling ----
      // Random inputs have no ties, so max_pool2d is differentiable where gradcheck probes it.
      with_reference(unary("max_pool2d 2x2 (non-overlapping)", [](const Tensor& x) { return max_pool2d(x, 2); },
                           {2, 3, 4, 6}),
                     [](const Tensors& x) {  // (N, C, OH, 2, OW, 2) -> (N, C, OH, OW, 4), max over the last
                       const Tensor w = permute(reshape(x[0], {2, 3, 2, 2, 3, 2}), {0, 1, 2, 4, 3, 5});
                       return max(reshape(w, {2, 3, 2, 3, 4}), 4);
                     }),
      with_reference(unary("max_pool2d 3x3 stride 1 padding 1 (overlapping)",
                           [](const Tensor& x) { return max_pool2d(x, 3, 1, 1); }, {2, 2, 5, 4}),
                     [](const Tensors& x) { return pool_composed(x[0], {{3, 3}, {1, 1}, {1, 1}, {1, 1}}, true); }),
      with_reference(unary("max_pool2d (3, 2) stride (2, 1) padding (1, 0) dilation (1, 2)",
                           [](const Tensor& x) { return max_pool2d(x, Pair2d(3, 2), Pair2d(2, 1), Pair2d(1, 0), Pair2d(1, 2)); },
                           {1, 3, 7, 6}),
                     [](const Tensors& x) { return pool_composed(x[0], {{3, 2}, {2, 1}, {1, 0}, {1, 2}}, true); }),
      with_reference(unary("max_pool2d 2x2 stride 1 dilation 2", [](const Tensor& x) { return max_pool2d(x, 2, 1, 0, 2); },
                           {2, 1, 5, 5}),
                     [](const Tensors& x) { return pool_composed(x[0], {{2, 2}, {1, 1}, {0, 0}, {2, 2}}, true); }),
      with_reference(unary("avg_pool2d 2x2 (non-overlapping)", [](const Tensor& x) { return avg_pool2d(x, 2); },
                           {2, 3, 4, 6}),
                     [](const Tensors& x) { return mean(reshape(x[0], {2, 3, 2, 2, 3, 2}), {3, 5}); }),
      with_reference(unary("avg_pool2d 3x3 stride 1 padding 1 (overlapping, pad counted)",
                           [](const Tensor& x) { return avg_pool2d(x, 3, 1, 1); }, {2, 2, 5, 4}),
                     [](const Tensors& x) { return pool_composed(x[0], {{3, 3}, {1, 1}, {1, 1}, {1, 1}}, false); }),
      with_reference(unary("avg_pool2d (3, 2) stride (2, 1) padding (1, 1)",
                           [](const Tensor& x) { return avg_pool2d(x, Pair2d(3, 2), Pair2d(2, 1), Pair2d(1, 1)); },
                           {1, 3, 7, 5}),
                     [](const Tensors& x) { return pool_composed(x[0], {{3, 2}, {2, 1}, {1, 1}, {1, 1}}, false); }),
      // ceil_mode: (6, 5) under 3x3 stride 2 padding 1 gives (4, 3), the last row of windows hanging
      // past the padded edge (floor: (3, 3)); (5, 5) under 2x2 stride 2 padding 1 drops the window
      // that would start past the padding ((3, 3), as floor). On cuda, avg pooling goes through
      // cuDNN unless ceil_mode adds windows (kernels/cuda/pool.cu): rows of both kinds.
      with_reference(unary("max_pool2d 3x3 stride 2 padding 1 ceil_mode",
                           [](const Tensor& x) { return max_pool2d(x, 3, 2, 1, 1, true); }, {2, 2, 6, 5}),
                     [](const Tensors& x) {
                       return pool_composed(x[0], {{3, 3}, {2, 2}, {1, 1}, {1, 1}, true}, true);
                     }),
      with_reference(unary("max_pool2d (2, 3) stride (2, 2) dilation (2, 1) ceil_mode",
                           [](const Tensor& x) { return max_pool2d(x, Pair2d(2, 3), 2, 0, Pair2d(2, 1), true); },
                           {1, 2, 6, 6}),
                     [](const Tensors& x) {
                       return pool_composed(x[0], {{2, 3}, {2, 2}, {0, 0}, {2, 1}, true}, true);
                     }),
      with_reference(unary("avg_pool2d 3x3 stride 2 padding 1 ceil_mode (divisor clipped at the padded edge)",
                           [](const Tensor& x) { return avg_pool2d(x, 3, 2, 1, true); }, {2, 2, 6, 5}),
                     [](const Tensors& x) {
                       return pool_composed(x[0], {{3, 3}, {2, 2}, {1, 1}, {1, 1}, true}, false);
                     }),
      with_reference(unary("avg_pool2d 2x2 stride 2 padding 1 ceil_mode (last window dropped)",
                           [](const Tensor& x) { return avg_pool2d(x, 2, 2, 1, true); }, {1, 2, 5, 5}),
                     [](const Tensors& x) {
                       return pool_composed(x[0], {{2, 2}, {2, 2}, {1, 1}, {1, 1}, true}, false);
                     }),
      with_reference(unary("avg_pool2d 3x3 stride 1 padding 1 count_include_pad=false",
                           [](const Tensor& x) { return avg_pool2d(x, 3, 1, 1, false, false); }, {2, 2, 5, 4}),
                     [](const Tensors& x) {
                       return pool_composed(x[0], {{3, 3}, {1, 1}, {1, 1}, {1, 1}, false, false}, false);
                     }),
      with_reference(unary("avg_pool2d (3, 2) stride 2 padding 1 ceil_mode count_include_pad=false",
                           [](const Tensor& x) { return avg_pool2d(x, Pair2d(3, 2), 2, 1, true, false); },
                           {1, 3, 6, 5}),
                     [](const Tensors& x) {
                       return pool_composed(x[0], {{3, 2}, {2, 2}, {1, 1}, {1, 1}, true, false}, false);
                     }),
      // Unbatched (C, H, W).
      with_reference(unary("max_pool2d 3x3 stride 2 padding 1, unbatched",
                           [](const Tensor& x) { return max_pool2d(x, 3, 2, 1); }, {3, 5, 6}),
                     [](const Tensors& x) { return pool_composed(x[0], {{3, 3}, {2, 2}, {1, 1}, {1, 1}}, true); }),
      with_reference(unary("avg_pool2d 2x2 stride 1 padding 1 ceil_mode, unbatched",
                           [](const Tensor& x) { return avg_pool2d(x, 2, 1, 1, true); }, {2, 4, 5}),
                     [](const Tensors& x) {
                       return pool_composed(x[0], {{2, 2}, {1, 1}, {1, 1}, {1, 1}, true}, false);
                     }),
      unary("flatten(x, 1) of a pooled strided view",
            [](const Tensor& x) { return flatten(max_pool2d(transpose(x, 2, 3), 2), 1); }, {2, 3, 4, 6}),

      // ---- conv2d ----
      with_reference(ternary("conv2d 3x3 padding 1 with bias",
                             [](const Tensor& x, const Tensor& w, const Tensor& b) { return conv2d(x, w, b, 1, 1); },
                             {2, 3, 5, 4}, {4, 3, 3, 3}, {4}),
                     [](const Tensors& x) { return conv_composed(x[0], x[1], &x[2], {{1, 1}, {1, 1}, {1, 1}, 1}); }),
      with_reference(ternary("conv2d (3, 2) stride 2 padding (1, 0) dilation (1, 2) groups 2",
                             [](const Tensor& x, const Tensor& w, const Tensor& b) {
                               return conv2d(x, w, b, 2, Pair2d(1, 0), Pair2d(1, 2), 2);
                             },
                             {2, 4, 7, 6}, {6, 2, 3, 2}, {6}),
                     [](const Tensors& x) { return conv_composed(x[0], x[1], &x[2], {{2, 2}, {1, 0}, {1, 2}, 2}); }),
      with_reference(binary("conv2d 1x1 (x itself is the col matrix), no bias",
                            [](const Tensor& x, const Tensor& w) { return conv2d(x, w); }, {2, 3, 4, 4}, {5, 3, 1, 1}),
                     [](const Tensors& x) { return conv_composed(x[0], x[1], nullptr, {}); }),
      with_reference(ternary("conv2d depthwise 3x3 stride (1, 2) padding 2, x needs no grad",
                             [](const Tensor& x, const Tensor& w, const Tensor& b) {
                               return conv2d(x, w, b, Pair2d(1, 2), 2, 1, 3);
                             },
                             {1, 3, 5, 5}, {3, 1, 3, 3}, {3}, {false, true, true}),
                     [](const Tensors& x) { return conv_composed(x[0], x[1], &x[2], {{1, 2}, {2, 2}, {1, 1}, 3}); }),
      ternary("conv2d 2x2 stride 2, weight frozen",
              [](const Tensor& x, const Tensor& w, const Tensor& b) { return conv2d(x, w, b, 2); }, {3, 2, 6, 4},
              {3, 2, 2, 2}, {3}, {true, false, true}),

      // ---- softmax ----
      unary("softmax", [](const Tensor& x) { return softmax(x * 2.0); }, {3, 5}),
      unary("softmax dim 1", [](const Tensor& x) { return softmax(x, 1); }, {2, 3, 4}),
      unary("softmax of one class", [](const Tensor& x) { return softmax(x) * x; }, {4, 1}),
      unary("log_softmax", [](const Tensor& x) { return log_softmax(x * 2.0); }, {3, 5}),
      unary("log_softmax dim 0", [](const Tensor& x) { return log_softmax(x, 0); }, {4, 3}),

      // ---- cross-entropy (a target is ignore_index in each) ----
      unary("cross_entropy mean", [=](const Tensor& x) { return cross_entropy(x, on(targets6, x)); }, {6, 5}),
      unary("cross_entropy sum",
            [=](const Tensor& x) { return cross_entropy(x * 3.0, on(targets6, x), -100, "sum"); }, {6, 5}),
      unary("cross_entropy none",
            [=](const Tensor& x) { return cross_entropy(x, on(targets6, x), -100, "none"); }, {6, 5}),
      unary("cross_entropy (2, 3, V) i32 targets",
            [=](const Tensor& x) { return cross_entropy(x, on(targets23, x)); }, {2, 3, 5}),
      unary("cross_entropy none (2, 3, V) ignore_index 3",
            [=](const Tensor& x) { return cross_entropy(x, on(targets23_ignore3, x), 3, "none"); }, {2, 3, 5}),

      // ---- embedding (repeated ids: their gradients add up) ----
      unary("embedding", [=](const Tensor& t) { return embedding(on(ids24, t), t); }, {7, 3}),
      unary("embedding i32 ids", [=](const Tensor& t) { return embedding(on(ids5, t), t); }, {5, 2}),

      // ---- attention ----
      ternary("attention causal",
              [](const Tensor& q, const Tensor& k, const Tensor& v) { return attention(q, k, v); }, {1, 2, 5, 4},
              {1, 2, 5, 4}, {1, 2, 5, 4}),
      ternary("attention full, Dv != D, scale 0.3",
              [](const Tensor& q, const Tensor& k, const Tensor& v) { return attention(q, k, v, false, 0.3); },
              {2, 1, 3, 4}, {2, 1, 6, 4}, {2, 1, 6, 3}),
      ternary("attention causal, only k needs grad",
              [](const Tensor& q, const Tensor& k, const Tensor& v) { return attention(q, k, v); }, {2, 3, 4},
              {2, 3, 4}, {2, 3, 2}, {false, true, false}),
      ternary("attention_composed causal",
              [](const Tensor& q, const Tensor& k, const Tensor& v) { return attention_composed(q, k, v); },
              {1, 2, 5, 4}, {1, 2, 5, 4}, {1, 2, 5, 4}),
      ternary("attention_composed full",
              [](const Tensor& q, const Tensor& k, const Tensor& v) {
                return attention_composed(q, k, v, false, 0.3);
              },
              {2, 1, 3, 4}, {2, 1, 6, 4}, {2, 1, 6, 3}),
  };
}

}  // namespace

TEST_CASE("every op's backward matches finite differences (f64, cpu) and every device (f32)") {
  int index = 0;
  for (const OpCase& c : op_cases()) {
    CAPTURE(c.name);
    Generator gen(100 + index++);
    Tensors x;  // f64 CPU inputs; the ones that need a gradient require grad
    for (size_t i = 0; i < c.shapes.size(); ++i) {
      x.push_back(make_input(c.shapes[i], c.domain, gen));
      x.back().set_requires_grad(c.needs_grad.empty() || c.needs_grad[i]);
    }
    const autograd::GradcheckResult r = autograd::gradcheck(c.f, x);
    CHECK_MESSAGE(r.ok, r.message);

    // The f64 CPU reference: values and gradients of sum(w * f(x)).
    Tensor y_ref = c.f(x);
    if (c.reference) {
      autograd::NoGrad no_grad;
      check_close(y_ref, c.reference(x), 1e-12, 1e-12);
    }
    const Tensor w = randn(y_ref.shape(), DType::f64, Device::cpu(), &gen);
    autograd::backward(y_ref, w);
    for (Device d : reel::testing::devices()) {
      CAPTURE(d);
      Tensors xd;
      for (const Tensor& t : x) xd.push_back(t.detach().to(DType::f32).to(d).set_requires_grad(t.requires_grad()));
      Tensor y = c.f(xd);
      check_close(y, y_ref, 1e-4, 1e-4);
      autograd::backward(y, w.to(DType::f32).to(d));
      for (size_t i = 0; i < x.size(); ++i) {
        CAPTURE(i);
        if (!x[i].requires_grad()) {
          CHECK_FALSE(xd[i].grad().defined());
          continue;
        }
        REQUIRE(xd[i].grad().defined());
        CHECK(xd[i].grad().device() == d);
        check_close(xd[i].grad(), x[i].grad(), 1e-4, 1e-4);
      }
    }
    CHECK(autograd::Tape::current().empty());
  }
}

TEST_CASE("gradcheck catches a wrong gradient") {
  // |x| through relu(x) + relu(-x) is right; claiming d|x|/dx = 1 (x + 2 relu(-x)) is caught by
  // comparing a detached expression that has the right value but the wrong gradient.
  auto wrong = [](const Tensors& x) { return x[0] + (relu(-x[0]) * 2.0).detach(); };
  Generator gen(3);
  const autograd::GradcheckResult r =
      autograd::gradcheck(wrong, {make_input({5}, Domain::AwayFromZero, gen).set_requires_grad()});
  CHECK_FALSE(r.ok);
  CHECK(r.message.find("analytic") != std::string::npos);
}

TEST_CASE("dropout: the mask is the Philox formula, the same in forward, backward and on every device") {
  const double p = 0.25;
  const Shape shape{64, 33};
  std::vector<float> reference_mask;
  for (Device d : reel::testing::devices()) {
    CAPTURE(d);
    Generator gen(11);
    const uint64_t seed = gen.seed(), offset = 0;  // the first stream of a fresh generator
    Tensor x = ones(shape, DType::f32, d).set_requires_grad();
    Tensor y = dropout(x, p, true, &gen);
    const std::vector<float> yv = y.to(Device::cpu()).to_vector<float>();
    int64_t kept = 0;
    for (size_t i = 0; i < yv.size(); ++i) {
      const bool keep = static_cast<double>(philox_uniform(seed, offset, i)) >= p;
      REQUIRE(yv[i] == (keep ? static_cast<float>(1 / (1 - p)) : 0.0f));
      kept += keep;
    }
    CHECK(std::fabs(static_cast<double>(kept) / yv.size() - (1 - p)) < 0.03);
    autograd::backward(sum(y));
    CHECK(x.grad().to(Device::cpu()).to_vector<float>() == yv);  // dx = mask, as y = 1 * mask
    // The kernel entry point agrees, and the next call of the generator draws a new mask.
    CHECK(kernels::dropout_mask(shape, DType::f32, d, p, seed, offset).to(Device::cpu()).to_vector<float>() == yv);
    CHECK(dropout(ones(shape, DType::f32, d), p, true, &gen).to(Device::cpu()).to_vector<float>() != yv);
    if (reference_mask.empty()) reference_mask = yv;
    CHECK(yv == reference_mask);  // the CPU's mask, bit for bit
    // p == 1 drops everything.
    check_close(dropout(ones({5}, DType::f32, d), 1.0, true, &gen), std::vector<double>(5, 0.0));
  }
}

TEST_CASE("compare functions record nothing and their masks never require grad; where gives cond no gradient") {
  Tensor x = from_vector<double>({-1, 0, 2, NAN}, {4}).set_requires_grad();
  Tensor y = from_vector<double>({-1, 1, 1, 0}, {4});
  const Tensor masks[] = {eq(x, y), ne(x, y), lt(x, y), le(x, y), gt(x, y), ge(x, 0.0)};
  for (const Tensor& m : masks) CHECK_FALSE(m.requires_grad());
  CHECK(autograd::Tape::current().empty());
  CHECK(values(eq(x, y)) == std::vector<double>{1, 0, 0, 0});
  CHECK(values(ne(x, y)) == std::vector<double>{0, 1, 1, 1});
  CHECK(values(ge(x, 0.0)) == std::vector<double>{0, 1, 1, 0});
  Tensor c = from_vector<double>({1, 0, 1, 0}, {4}).set_requires_grad();
  Tensor a = from_vector<double>({1, 2, 3, 4}, {4}).set_requires_grad();
  autograd::backward(sum(where(c, a, x)));
  CHECK_FALSE(c.grad().defined());
  CHECK(values(a.grad()) == std::vector<double>{1, 0, 1, 0});
  CHECK(values(x.grad()) == std::vector<double>{0, 1, 0, 1});
  CHECK_REEL_ERROR(where(c, a, zeros({3}, DType::f64)), "where: shapes (4) (cond), (4) (a) and (3) (b)");
}
