// tests/op_table/embedding.cpp: the op table's embedding family. Kernel rows: the gather and the
// scatter-add of repeated ids (i32 and i64 ids, more rows than owner blocks, unused rows). Tape
// rows: embedding, whose repeated ids' gradients add up. embedding_pos (token + position rows in one
// kernel each way, its gradients written or added into given buffers): a kernel row against an f64
// loop, a tape row against embedding(ids, table) + embedding(arange(T), pos). embedding_pos_layernorm
// (the embeddings fused into block 0's LayerNorm): forward and the tape op's gradients bit for bit
// those of embedding_pos then layer_norm, on every device and dtype.
#include <cmath>
#include <string>
#include <vector>

#include "autograd/nn_functions.h"
#include "autograd/tape.h"
#include "kernels/ops.h"
#include "op_table.h"

namespace reel::op_table {
namespace {

using namespace reel::testing;

// The dtypes every row of this family runs in (rows that name their own keep them): one entry to add.
// bf16 and f16 tables (ids stay integer): the gather copies rows bit for bit; the scatter-add sums
// each row's dout in f32, in position order on every device, and rounds once.
const std::vector<DType> kDTypes = {DType::f32, DType::f64, DType::bf16, DType::f16};

// ==== embedding ====================================================================================

std::vector<OpCase> embedding_cases() {
  using namespace kernels;
  struct Config {
    Shape ids;
    int64_t V, C;
    std::vector<int64_t> fixed;  // the ids, else a hot id V / 2 at every 4th position and a spread
  };
  // 300 positions: two scan tiles; V = 1100: more rows than owner blocks (several rows a block).
  const std::vector<Config> configs = {{{1}, 1, 1, {}},       {{2, 7}, 13, 31, {}},  {{300}, 257, 1, {}},
                                       {{3, 100}, 1100, 5, {}}, {{64}, 5, 257, {}},
                                       {{2, 3}, 7, 5, {3, 0, 6, 3, 1, 3}},
                                       {{7}, 6, 4, {1, 4, 1, 1, 0, 4, 2}}};  // ids 3 and 5 unused: zero rows
  std::vector<OpCase> cases;
  for (const Config& c : configs)
    for (DType it : {DType::i32, DType::i64}) {
      const int64_t N = shape_numel(c.ids);
      std::vector<int64_t> ids = c.fixed;
      for (int64_t n = 0; ids.size() < static_cast<size_t>(N); ++n)
        ids.push_back(n % 4 == 0 ? c.V / 2 : (n * 7919) % c.V);
      Shape out = c.ids;
      out.push_back(c.C);
      // The backward adds in position order in acc_t (the data type; f32 for bf16 / f16) on every
      // device and rounds once: device vs cpu exact in every dtype.
      OpCase row("embedding " + shape_str(c.ids) + " " + dtype_name(it) + " ids, table (" + std::to_string(c.V) +
                     ", " + std::to_string(c.C) + ")",
                 [c, ids, it, out](Generator& g) {
                   return Tensors{indices(ids, c.ids, it), uniform_f64(g, {c.V, c.C}), uniform_f64(g, out)};
                 },
                 [V = c.V, out](const Tensors& in, Device) {
                   const Tensor y = embedding_forward(in[0], in[1]), dtable = embedding_backward(in[2], in[0], V);
                   CHECK(y.shape() == out);
                   CHECK(dtable.shape() == Shape{V, in[1].size(1)});
                   return Tensors{y, dtable};
                 },
                 {kExact});
      row.with_reference(
          [c, ids](const Tensors& in) {
            const std::vector<double> table = values(in[1]), dout = values(in[2]);
            Values r(2);
            r[1].assign(static_cast<size_t>(c.V * c.C), 0.0);
            for (size_t n = 0; n < ids.size(); ++n)
              for (int64_t k = 0; k < c.C; ++k) {
                r[0].push_back(table[static_cast<size_t>(ids[n] * c.C + k)]);
                r[1][static_cast<size_t>(ids[n] * c.C + k)] += dout[n * c.C + k];
              }
            return r;
          },
          // Against the f64 reference on the rounded inputs: the gather exact at bf16 / f16 too; the
          // scatter-add its f32 sum's error (f32's 1e-5) plus the one rounding to the table's
          // type, a relative u = 2^-8 (bf16) or 2^-11 (f16).
          {Tols{{{DType::f32, {1e-7, 1e-7}}, {DType::f64, {1e-15, 1e-15}}, {DType::bf16, {0, 0}}, {DType::f16, {0, 0}}}},
           Tols{{{DType::f32, {1e-5, 1e-5}},
                 {DType::f64, {1e-12, 1e-12}},
                 {DType::bf16, {0x1p-8 + 1e-5, 1e-5}},
                 {DType::f16, {0x1p-11 + 1e-5, 1e-5}}}}});
      if (!c.fixed.empty() && c.ids.size() == 1) row.with_finite_diff({0, 2, {{1, 1}}});
      cases.push_back(row);
    }
  return cases;
}

// ==== embedding_pos ================================================================================

std::vector<OpCase> embedding_pos_cases() {
  using namespace kernels;
  struct Config {
    int64_t B, T, V, P, C;
    bool add_table, add_pos;  // the backward adds into the gradient buffers' values (else writes them)
  };
  // 300 positions: two scan tiles; V = 1100: several table rows per owner block; P > T: position
  // rows the batch does not reach (zero, or kept when adding); P = 9: a partial block of 4 rows.
  const std::vector<Config> configs = {{1, 1, 1, 1, 1, false, false}, {2, 7, 13, 9, 31, true, false},
                                       {3, 100, 1100, 128, 5, false, true}, {4, 5, 6, 5, 257, true, true},
                                       {1, 300, 257, 300, 3, true, false}};
  std::vector<OpCase> cases;
  for (const Config& c : configs)
    for (DType it : {DType::i32, DType::i64}) {
      const int64_t N = c.B * c.T;
      std::vector<int64_t> ids;
      for (int64_t n = 0; n < N; ++n) ids.push_back(n % 4 == 0 ? c.V / 2 : (n * 7919) % c.V);
      OpCase row("embedding_pos (" + std::to_string(c.B) + ", " + std::to_string(c.T) + ") " + dtype_name(it) +
                     " ids, table (" + std::to_string(c.V) + ", " + std::to_string(c.C) + "), pos (" +
                     std::to_string(c.P) + ", " + std::to_string(c.C) + ")" + (c.add_table ? ", adds dtable" : "") +
                     (c.add_pos ? ", adds dpos" : ""),
                 [c, ids, it](Generator& g) {
                   return Tensors{indices(ids, {c.B, c.T}, it), uniform_f64(g, {c.V, c.C}), uniform_f64(g, {c.P, c.C}),
                                  uniform_f64(g, {c.B, c.T, c.C}), uniform_f64(g, {c.V, c.C}),
                                  uniform_f64(g, {c.P, c.C})};
                 },
                 [c](const Tensors& in, Device) {
                   const Tensor y = embedding_pos_forward(in[0], in[1], in[2]);
                   // The gradient buffers: the given values when the backward adds, else poisoned.
                   const Tensor dtable = c.add_table ? in[4].clone() : empty(in[4].shape(), in[4].dtype(), in[4].device());
                   const Tensor dpos = c.add_pos ? in[5].clone() : empty(in[5].shape(), in[5].dtype(), in[5].device());
                   embedding_pos_backward(in[3], in[0], dtable, c.add_table, dpos, c.add_pos);
                   return Tensors{y, dtable, dpos};
                 },
                 {kExact});
      row.with_reference(
          [c, ids](const Tensors& in) {
            const std::vector<double> table = values(in[1]), pos = values(in[2]), dout = values(in[3]);
            Values r(3);
            r[1] = c.add_table ? values(in[4]) : std::vector<double>(static_cast<size_t>(c.V * c.C), 0.0);
            r[2] = c.add_pos ? values(in[5]) : std::vector<double>(static_cast<size_t>(c.P * c.C), 0.0);
            std::vector<double> sums_t(static_cast<size_t>(c.V * c.C), 0.0), sums_p(static_cast<size_t>(c.P * c.C), 0.0);
            for (size_t n = 0; n < ids.size(); ++n) {
              const int64_t t = static_cast<int64_t>(n) % c.T;
              for (int64_t k = 0; k < c.C; ++k) {
                const size_t at = static_cast<size_t>(ids[n] * c.C + k), pt = static_cast<size_t>(t * c.C + k);
                r[0].push_back(table[at] + pos[pt]);
                sums_t[at] += dout[n * c.C + k];
                sums_p[pt] += dout[n * c.C + k];
              }
            }
            for (size_t i = 0; i < sums_t.size(); ++i) r[1][i] += sums_t[i];
            for (size_t i = 0; i < sums_p.size(); ++i) r[2][i] += sums_p[i];
            return r;
          },
          // The sums as embedding's (f32 sums, one rounding to a 16-bit type); the forward's one add
          // rounded once (bf16 / f16: half an ulp of the output).
          {Tols{{{DType::f32, {1e-7, 1e-7}},
                 {DType::f64, {1e-15, 1e-15}},
                 {DType::bf16, {0x1p-8, 0x1p-8}},
                 {DType::f16, {0x1p-11, 0x1p-11}}}},
           Tols{{{DType::f32, {1e-5, 1e-5}},
                 {DType::f64, {1e-12, 1e-12}},
                 {DType::bf16, {0x1p-8 + 1e-5, 0x1p-8 + 1e-5}},
                 {DType::f16, {0x1p-11 + 1e-5, 0x1p-11 + 1e-5}}}},
           Tols{{{DType::f32, {1e-5, 1e-5}},
                 {DType::f64, {1e-12, 1e-12}},
                 {DType::bf16, {0x1p-8 + 1e-5, 0x1p-8 + 1e-5}},
                 {DType::f16, {0x1p-11 + 1e-5, 0x1p-11 + 1e-5}}}}});
      cases.push_back(row);
    }
  return cases;
}

// ==== embedding_pos_layernorm ======================================================================

// The embeddings fused into the LayerNorm after them (kernels/layernorm.h
// embedding_pos_layernorm_forward, one launch on cuda) against their composition, on every device and
// in every dtype: the forward's s, y, mean and rstd are embedding_pos_forward then layernorm_forward's
// bits, and the tape op embedding_pos_layer_norm's gradients of L = sum(gy * y) + sum(ge * s) (s
// reaching L by another path too: its gradient is added inside the LayerNorm's backward) are those
// of embedding_pos then layer_norm, bit for bit. The outputs then go to the runner: device vs cpu
// exact, cpu vs an f64 reference of the forward.
std::vector<OpCase> embedding_pos_layernorm_cases() {
  struct Config {
    int64_t B, T, V, P, C;
  };
  // C = 1 (a zero variance: rstd = 1 / sqrt(eps)), 31 and 257 (lanes with 0 or several columns),
  // 100 rows (partial blocks of 8 rows), P > T.
  const std::vector<Config> configs = {{1, 1, 1, 1, 1}, {2, 7, 13, 9, 31}, {4, 25, 60, 32, 5}, {2, 3, 6, 5, 257}};
  std::vector<OpCase> cases;
  for (const Config& c : configs)
    for (DType it : {DType::i32, DType::i64}) {
      const int64_t N = c.B * c.T;
      std::vector<int64_t> ids;
      for (int64_t n = 0; n < N; ++n) ids.push_back(n % 4 == 0 ? c.V / 2 : (n * 7919) % c.V);
      // Device vs cpu (as tests/op_table/norm.cpp's layernorm rows): the gather and add exact, the
      // LayerNorm's reductions in another order (y, the statistics: t; dw, db and the tables'
      // gradients, sums of up to N rows of a dx that differs by 1e-4: tr).
      const Tols t = with_16bit(tols(2e-5), true);
      Tols tr = with_16bit(tols(1e-4 * std::sqrt(static_cast<double>(N)) + 1e-5), true);
      // In 16 bits each of the N rows of dx summed into a table row is rounded to its dtype first
      // (dx of order 1, an ulp each: the sum can cancel to far less than its terms), so the
      // gradients' absolute tolerance grows by N of the dtype's unit roundoffs, cpu and cuda each.
      // (f16, C = 257 built by clang at -O1: dtable's 0.0463867 against 0.046875.)
      for (auto& [dt, tol] : tr.by_dtype)
        if (dt == DType::f16 || dt == DType::bf16)
          tol.atol += 2 * static_cast<double>(N) * (dt == DType::bf16 ? 0x1p-8 : 0x1p-11);
      OpCase row("embedding_pos_layernorm (" + std::to_string(c.B) + ", " + std::to_string(c.T) + ") " +
                     dtype_name(it) + " ids, table (" + std::to_string(c.V) + ", " + std::to_string(c.C) + "), pos (" +
                     std::to_string(c.P) + ", " + std::to_string(c.C) + ")",
                 [c, ids, it](Generator& g) {
                   return Tensors{indices(ids, {c.B, c.T}, it), uniform_f64(g, {c.V, c.C}), uniform_f64(g, {c.P, c.C}),
                                  uniform_f64(g, {c.C}, 0.5, 1.5), uniform_f64(g, {c.C}),
                                  uniform_f64(g, {c.B, c.T, c.C}), uniform_f64(g, {c.B, c.T, c.C})};
                 },
                 [](const Tensors& in, Device) {
                   const Tensor &ids = in[0], &table = in[1], &pos = in[2], &w = in[3], &b = in[4], &gy = in[5],
                                &ge = in[6];
                   const kernels::AddLayerNormForward f = kernels::embedding_pos_layernorm_forward(ids, table, pos, w, b);
                   const Tensor e = kernels::embedding_pos_forward(ids, table, pos);
                   const kernels::LayerNormForward l = kernels::layernorm_forward(e, w, b);
                   CHECK(bit_identical(f.s, e));
                   CHECK(bit_identical(f.y, l.y));
                   CHECK(bit_identical(f.mean, l.mean));
                   CHECK(bit_identical(f.rstd, l.rstd));
                   // The gradients of the tape op and of the composition: (dtable, dpos, dw, db).
                   auto grads = [&](bool fused) {
                     const Tensors p{table.clone(), pos.clone(), w.clone(), b.clone()};
                     for (const Tensor& t : p) t.set_requires_grad();
                     Tensor s, y;
                     if (fused) {
                       const AddLayerNormResult r = embedding_pos_layer_norm(ids, p[0], p[1], p[2], p[3]);
                       s = r.s, y = r.y;
                     } else {
                       s = embedding_pos(ids, p[0], p[1]);
                       y = layer_norm(s, p[2], p[3]);
                     }
                     autograd::backward(sum(y * gy) + sum(s * ge));
                     return Tensors{p[0].grad(), p[1].grad(), p[2].grad(), p[3].grad()};
                   };
                   const Tensors got = grads(true), want = grads(false);
                   for (size_t i = 0; i < got.size(); ++i) {
                     CAPTURE(i);
                     CHECK(bit_identical(got[i], want[i]));
                   }
                   return Tensors{f.s, f.y, f.mean, f.rstd, got[0], got[1], got[2], got[3]};
                 },
                 {kExact, t, t, t, tr, tr, tr, tr});
      row.with_reference(
          [c, ids](const Tensors& in) {
            const std::vector<double> table = values(in[1]), pos = values(in[2]), w = values(in[3]), b = values(in[4]);
            Values r(2);  // s and y (the statistics: the composition's bits, checked above)
            for (size_t n = 0; n < ids.size(); ++n) {
              const int64_t t = static_cast<int64_t>(n) % c.T;
              std::vector<double> e(static_cast<size_t>(c.C));
              double mean = 0, var = 0;
              for (int64_t k = 0; k < c.C; ++k) {
                e[k] = table[static_cast<size_t>(ids[n] * c.C + k)] + pos[static_cast<size_t>(t * c.C + k)];
                mean += e[k] / c.C;
              }
              for (int64_t k = 0; k < c.C; ++k) var += (e[k] - mean) * (e[k] - mean) / c.C;
              const double rstd = 1 / std::sqrt(var + 1e-5);
              for (int64_t k = 0; k < c.C; ++k) {
                r[0].push_back(e[k]);
                r[1].push_back((e[k] - mean) * rstd * w[k] + b[k]);
              }
            }
            return r;
          },
          // s: one add rounded once; y: a LayerNorm's f32 error (2e-5, as layernorm's rows) and, in 16
          // bits, half an ulp of s (|s| < 2) in every s - mean, a few ulps of the type (as add_layernorm's).
          {Tols{{{DType::f32, {1e-7, 1e-7}},
                 {DType::f64, {1e-15, 1e-15}},
                 {DType::bf16, {0x1p-8, 0x1p-8}},
                 {DType::f16, {0x1p-11, 0x1p-11}}}},
           Tols{{{DType::f32, {2e-5, 2e-5}},
                 {DType::f64, {1e-12, 1e-12}},
                 {DType::bf16, {0x1p-7, 0x1p-5}},
                 {DType::f16, {0x1p-10, 0x1p-8}}}}});
      cases.push_back(row);
    }
  return cases;
}

std::vector<OpCase> embedding_tape_cases() {
  // Integer inputs (targets, token ids) are constants captured by f, moved to its inputs' device.
  auto on = [](const Tensor& constant, const Tensor& like) { return constant.to(like.device()); };
  const Tensor ids24 = from_vector<int64_t>({3, 0, 6, 3, 3, 1, 6, 2}, {2, 4});
  const Tensor ids5 = from_vector<int32_t>({4, 4, 0, 1, 4}, {5});
  return {
      tape_unary("embedding", [=](const Tensor& t) { return embedding(on(ids24, t), t); }, {7, 3}),
      tape_unary("embedding i32 ids", [=](const Tensor& t) { return embedding(on(ids5, t), t); }, {5, 2}),
      // Token and position embedding in one op, against the two embeddings and the broadcast add.
      with_composed(tape_binary("embedding_pos", [=](const Tensor& t, const Tensor& p) {
                      return embedding_pos(on(ids24, t), t, p);
                    }, {7, 3}, {6, 3}),
                    [=](const Tensors& in) {
                      return embedding(on(ids24, in[0]), in[0]) + embedding(arange(4, DType::i64, in[1].device()), in[1]);
                    }),
      // With block 0's LayerNorm: y alone (the sum's gradient absent: the rule gets it undefined)
      // and the sum used too (its gradient added inside the LayerNorm's backward), with and without
      // a bias, against embedding_pos then layer_norm.
      with_composed(tape_row("embedding_pos_layer_norm y", {{7, 3}, {6, 3}, {3}, {3}},
                             [=](const Tensors& in) {
                               return embedding_pos_layer_norm(on(ids24, in[0]), in[0], in[1], in[2], in[3]).y;
                             }),
                    [=](const Tensors& in) {
                      return layer_norm(embedding_pos(on(ids24, in[0]), in[0], in[1]), in[2], in[3]);
                    }),
      with_composed(tape_row("embedding_pos_layer_norm s and y", {{7, 3}, {6, 3}, {3}, {3}},
                             [=](const Tensors& in) {
                               const AddLayerNormResult r =
                                   embedding_pos_layer_norm(on(ids24, in[0]), in[0], in[1], in[2], in[3]);
                               return r.y * r.s + r.s;
                             }),
                    [=](const Tensors& in) {
                      const Tensor e = embedding_pos(on(ids24, in[0]), in[0], in[1]);
                      return layer_norm(e, in[2], in[3]) * e + e;
                    }),
      with_composed(tape_row("embedding_pos_layer_norm s and y, no bias", {{7, 3}, {6, 3}, {3}},
                             [=](const Tensors& in) {
                               const AddLayerNormResult r =
                                   embedding_pos_layer_norm(on(ids24, in[0]), in[0], in[1], in[2], Tensor());
                               return r.y + r.s * 2.0;
                             }),
                    [=](const Tensors& in) {
                      const Tensor e = embedding_pos(on(ids24, in[0]), in[0], in[1]);
                      return layer_norm(e, in[2]) + e * 2.0;
                    }),
  };
}

TEST_CASE("embedding: gather and the scatter-add of repeated ids") { run_cases(embedding_cases(), kDTypes); }
TEST_CASE("embedding_pos: token and position rows, gradients written or added") {
  run_cases(embedding_pos_cases(), kDTypes);
}
TEST_CASE("embedding_pos_layernorm: the embeddings fused into the LayerNorm, the composition's bits") {
  run_cases(embedding_pos_layernorm_cases(), kDTypes);
}
TEST_CASE("embedding_pos_layernorm: bad ids and inputs raise reel::Error naming the op") {
  for (Device d : devices()) {
    CAPTURE(d);
    const Tensor table = zeros({10, 3}, DType::f32, d), pos = zeros({4, 3}, DType::f32, d);
    const Tensor w = ones({3}, DType::f32, d), b = zeros({3}, DType::f32, d);
    // cuda reports a bad id at the host's next wait (kernels/index_check.h): values() reads it back.
    CHECK_REEL_ERROR(values(kernels::embedding_pos_layernorm_forward(
                         from_vector<int64_t>({1, 2, 3, 10}, {2, 2}).to(d), table, pos, w, b).y),
                     "embedding_pos_layernorm_forward: id 10 at position (1, 1) of (2, 2) is out of range [0, 10) "
                     "of the table's rows");
    CHECK_REEL_ERROR(values(embedding_pos_layer_norm(from_vector<int32_t>({-1, 0}, {1, 2}).to(d), table, pos, w, b).y),
                     "embedding_pos_layernorm_forward: id -1 at position (0, 0) of (1, 2) is out of range [0, 10)");
    const Tensor ids = from_vector<int64_t>({1, 2}, {1, 2}).to(d);
    CHECK_REEL_ERROR(kernels::embedding_pos_layernorm_forward(ids, table, pos, ones({4}, DType::f32, d), b),
                     "embedding_pos_layernorm_forward: weight (4) does not match the table (10, 3): (3) expected");
    CHECK_REEL_ERROR(kernels::embedding_pos_layernorm_forward(from_vector<int64_t>({1, 2, 3, 0, 1}, {1, 5}).to(d),
                                                              table, pos, w, b),
                     "embedding_pos_layernorm_forward: ids (1, 5) must be (B, T) with T at most pos's 4 rows");
    CHECK_REEL_ERROR(kernels::embedding_pos_layernorm_forward(ids, table, pos, w, zeros({3}, DType::f64, d)),
                     "embedding_pos_layernorm_forward");
    if (!d.is_cpu()) {
      const std::string devices_message =
          "embedding_pos_layernorm_forward: expected all tensors on one device, got (1, 2) on " + d.str();
      CHECK_REEL_ERROR(kernels::embedding_pos_layernorm_forward(ids, table, pos, w, zeros({3})),
                       devices_message.c_str());
    }
  }
}
TEST_CASE("embedding_pos: tables that overlap in one storage are an error; disjoint views of one are not") {
  const Tensor flat = uniform_f64({40, 3}, 5).to(DType::f32);  // one storage, as FSDP's flat unit
  const Tensor ids = from_vector<int64_t>({1, 0, 2, 1}, {2, 2});
  const Tensor table = flat.narrow(0, 0, 10), pos = flat.narrow(0, 10, 4), overlapping = flat.narrow(0, 8, 4);
  const Tensor y = embedding_pos(ids, table, pos);
  CHECK(y.shape() == Shape{2, 2, 3});
  CHECK_REEL_ERROR(embedding_pos(ids, table, overlapping), "embedding_pos: table (10, 3) and pos (4, 3) overlap");
  CHECK_REEL_ERROR(embedding_pos_layer_norm(ids, table, table, full({3}, 1.0), Tensor()),
                   "embedding_pos_layer_norm: table (10, 3) and pos (10, 3) overlap");
}
TEST_CASE("embedding tape op: repeated ids") { run_cases(embedding_tape_cases(), kDTypes); }
}  // namespace
}  // namespace reel::op_table
