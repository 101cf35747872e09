// embedding: out = table[ids], ids (N...) i32/i64, table (V, C) -> (N..., C).
// dtable[v] = sum of g over the positions where ids == v, added in position order by the
// deterministic kernel of kernels/embedding.h (no float atomics: bit-identical for any thread count,
// so checkpointed and plain backward agree to the bit). Saves the ids (N integers, C times less
// than the output); the table's row count comes from its recorded shape. Backward trusts the ids
// that forward range-checked and does not check them again.
// embedding_pos: table[ids] + pos[:T] in one kernel each way (GPT's token and position
// embeddings); embedding_pos_layer_norm: that and the LayerNorm that reads it (block 0's ln_1),
// whose backward adds the sum's other gradient into its dx.
#pragma once
#include <memory>
#include <optional>
#include <string>

#include "autograd/functions.h"
#include "autograd/op.h"
#include "autograd/ops/layernorm.h"
#include "kernels/embedding.h"

namespace reel {
namespace autograd::ops {
struct Embedding final : autograd::Op {
  const char* name() const override { return "embedding"; }
  Tensors forward(const Tensors& in, ForwardCtx& ctx) const override {
    ctx.save({in[0]});
    return {kernels::embedding_forward(in[0], in[1])};
  }
  Tensors backward(const Tensors& grad, BackwardCtx& ctx) const override {
    // The ids were range-checked by forward and are unchanged (ctx.saved version-checks them):
    // not checked again (on cuda that check was an error buffer fill and a copy back per call).
    return {Tensor(), kernels::embedding_backward(grad[0], ctx.saved(0), ctx.input_shape(1)[0], /*ids_checked=*/true)};
  }
};


// embedding_pos: out (B, T, C) = table[ids] + pos[:T], inputs {ids, table, pos}: GPT's token and
// position embeddings in one launch each way (kernels/embedding.h's embedding_pos_*), no position
// ids. Backward writes both gradients in one launch, each straight into its parameter's .grad
// when the tape offers it (added to what it holds: the tied LM head's dW comes first), else into
// a fresh buffer.
struct EmbeddingPos final : autograd::Op {
  const char* name() const override { return "embedding_pos"; }
  Tensors forward(const Tensors& in, ForwardCtx& ctx) const override {
    ctx.save({in[0]});
    return {kernels::embedding_pos_forward(in[0], in[1], in[2])};
  }
  Tensors backward(const Tensors& grad, BackwardCtx& ctx) const override {
    const Targets t = targets(ctx, grad[0]);
    // The ids were range-checked by forward and are unchanged (ctx.saved version-checks them).
    kernels::embedding_pos_backward(grad[0], ctx.saved(0), t.dtable, t.add_table, t.dpos, t.add_pos,
                                    /*ids_checked=*/true);
    return {Tensor(), t.dtable, t.dpos};
  }
  // Where the tables' gradients (inputs 1 and 2) go: their .grad (add: it holds one already), else
  // a fresh buffer of like's dtype and device; undefined where not needed.
  struct Targets {
    Tensor dtable, dpos;
    bool add_table = false, add_pos = false;
  };
  static Targets targets(BackwardCtx& ctx, const Tensor& like) {
    auto target = [&](size_t i, bool& add) {
      if (!ctx.needs_input_grad(i)) return Tensor();
      Tensor out;
      ctx.grad_write_or_add(
          i, [&](const Tensor& sink, bool a) { out = sink, add = a; },
          [&] { return out = empty(ctx.input_shape(i), like.dtype(), like.device()); });
      return out;
    };
    Targets t;
    t.dtable = target(1, t.add_table);
    t.dpos = target(2, t.add_pos);
    return t;
  }
};

// embedding_pos_layer_norm: e = table[ids] + pos[:T] and y = layer_norm(e), inputs {ids, table,
// pos, w (, b)}, outputs {e, y}: GPT's embeddings and block 0's ln_1, whose input they are. e is
// also the first residual stream, so its gradient has two parts, the residual's (de) and the
// LayerNorm's; here the LayerNorm's backward kernel adds de into its dx in the same launch (as
// add_layer_norm's does with its sum's gradient) and the embeddings' backward reads that one
// tensor: no add of the two parts. Forward is one launch (kernels/layernorm.h
// embedding_pos_layernorm_forward: e, y and the statistics, the bits of embedding_pos then
// layer_norm), backward one call (embedding_pos_layernorm_backward: layernorm_backward then
// embedding_pos_backward, their bits; on cuda two launches, the LayerNorm's dw/db finished in the
// embeddings' launch). Saved: the ids, e, w and
// the statistics, as the composition would save them (backward needs e as the LayerNorm's x).
struct EmbeddingPosLayerNorm final : autograd::Op {
  double eps;
  explicit EmbeddingPosLayerNorm(double eps) : eps(eps) {}
  const char* name() const override { return "embedding_pos_layer_norm"; }
  std::string attributes() const override { return "eps=" + std::to_string(eps); }
  Tensors forward(const Tensors& in, ForwardCtx& ctx) const override {
    // Without a bias (inputs ids, table, pos, w) the kernel adds zeros: C values.
    const Tensor b = in.size() == 5 ? in[4] : zeros({in[3].numel()}, in[3].dtype(), in[3].device());
    kernels::AddLayerNormForward f = kernels::embedding_pos_layernorm_forward(in[0], in[1], in[2], in[3], b, eps);
    ctx.save({in[0], f.s, in[3], f.mean, f.rstd});  // f.s: e (B, T, C)
    return {f.s, f.y};
  }
  // grad: de (what reaches e from elsewhere, undefined when nothing does), dy.
  bool accepts_absent_grad(size_t k) const override { return k == 0; }
  Tensors backward(const Tensors& grad, BackwardCtx& ctx) const override {
    const kernels::NormGradOut dw = norm_grad_sink(ctx, 3), db = norm_grad_sink(ctx, 4);
    const EmbeddingPos::Targets t = EmbeddingPos::targets(ctx, grad[1]);
    // One call: the LayerNorm's backward (de added into its dx), then the embeddings' of that dx.
    // The ids were range-checked by forward and are unchanged (ctx.saved version-checks them).
    kernels::LayerNormBackward r = kernels::embedding_pos_layernorm_backward(
        grad[1], ctx.saved(1), ctx.saved(2), ctx.saved(3), ctx.saved(4), dw, db, grad[0], ctx.saved(0), t.dtable,
        t.add_table, t.dpos, t.add_pos, /*ids_checked=*/true);
    Tensors grads{Tensor(), t.dtable, t.dpos};
    grads.push_back(ctx.needs_input_grad(3) ? r.dw : Tensor());
    if (ctx.num_inputs() == 5) grads.push_back(ctx.needs_input_grad(4) ? r.db : Tensor());
    return grads;
  }
};

}  // namespace autograd::ops

// ---- embedding ----
// table[ids]: ids (N...) i32 or i64 in [0, V), table (V, C) -> (N..., C). The table's gradient is
// summed per row in position order (deterministic, no atomics).
inline Tensor embedding(const Tensor& ids, const Tensor& table) {
  return autograd::apply(autograd::ops::Embedding{}, {ids, table});
}

// ---- embedding_pos ----
// table[ids] + pos[:T]: ids (B, T) i32 or i64 in [0, V), table (V, C), pos (P, C) with T <= P ->
// (B, T, C). Equal to embedding(ids, table) + embedding(arange(T), pos) up to rounding of the
// position gradient's sum (here over b in order), in one kernel each way and without position ids.
namespace autograd::ops {
// One kernel writes both gradients: tables whose elements overlap (one tensor as both) would have
// it write one element twice. Views of disjoint parts of one storage (FSDP's flat unit) are fine.
inline void check_disjoint_tables(const char* op, const Tensor& table, const Tensor& pos) {
  if (!table.defined() || !pos.defined() || table.storage() != pos.storage()) return;
  auto end = [](const Tensor& t) {  // one past the last element t can reach
    int64_t e = t.offset() + 1;
    for (int64_t d = 0; d < t.dim(); ++d) e += (t.size(d) - 1) * t.stride(d);
    return t.numel() == 0 ? t.offset() : e;
  };
  REEL_CHECK(end(table) <= pos.offset() || end(pos) <= table.offset(), op, ": table ", table.shape(), " and pos ",
             pos.shape(), " overlap in one storage");
}
}  // namespace autograd::ops

inline Tensor embedding_pos(const Tensor& ids, const Tensor& table, const Tensor& pos) {
  autograd::ops::check_disjoint_tables("embedding_pos", table, pos);
  return autograd::apply(autograd::ops::EmbeddingPos{}, {ids, table, pos});
}

// ---- embedding_pos_layer_norm ----
// {e, y}: e = embedding_pos(ids, table, pos) (B, T, C) and y = layer_norm(e, w, b, eps), the
// LayerNorm's backward adding e's other gradient into its dx (see EmbeddingPosLayerNorm). b may be
// undefined (no bias). Under an autocast scope: embedding_pos, then layer_norm (two ops).
inline AddLayerNormResult embedding_pos_layer_norm(const Tensor& ids, const Tensor& table, const Tensor& pos,
                                                   const Tensor& w, const Tensor& b, double eps = 1e-5) {
  autograd::ops::check_disjoint_tables("embedding_pos_layer_norm", table, pos);
  if (autograd::autocast_dtype()) {  // the LayerNorm casts as autocast says: the composition
    const Tensor e = embedding_pos(ids, table, pos);
    return {e, layer_norm(e, w, b, eps)};
  }
  autograd::Tensors in{ids, table, pos, w, b};
  if (!b.defined()) in.pop_back();
  const autograd::Tensors out = autograd::record(std::make_unique<autograd::ops::EmbeddingPosLayerNorm>(eps), in);
  return {out[0], out[1]};
}

}  // namespace reel
