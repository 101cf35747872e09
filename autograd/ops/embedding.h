// embedding: out = table[ids], ids (N...) i32/i64, table (V, C) -> (N..., C).
// dtable[v] = sum of g over the positions where ids == v, added in position order by the
// deterministic kernel of kernels/embedding.h (no float atomics: bit-identical for any thread count,
// so checkpointed and plain backward agree to the bit). Saves the ids (N integers, C times less
// than the output); the table's row count comes from its recorded shape. Backward trusts the ids
// that forward range-checked and does not check them again.
#pragma once
#include <optional>
#include <string>

#include "autograd/functions.h"
#include "autograd/op.h"
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
    const Tensor& g = grad[0];
    // Where each gradient goes: its .grad (add says whether it holds one already), else fresh.
    auto target = [&](size_t i, bool& add) {
      if (!ctx.needs_input_grad(i)) return Tensor();
      Tensor out;
      ctx.grad_write_or_add(
          i, [&](const Tensor& sink, bool a) { out = sink, add = a; },
          [&] { return out = empty(ctx.input_shape(i), g.dtype(), g.device()); });
      return out;
    };
    bool add_table = false, add_pos = false;
    const Tensor dtable = target(1, add_table), dpos = target(2, add_pos);
    // The ids were range-checked by forward and are unchanged (ctx.saved version-checks them).
    kernels::embedding_pos_backward(g, ctx.saved(0), dtable, add_table, dpos, add_pos, /*ids_checked=*/true);
    return {Tensor(), dtable, dpos};
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
inline Tensor embedding_pos(const Tensor& ids, const Tensor& table, const Tensor& pos) {
  // One kernel writes both gradients: one tensor as both tables would have it write one buffer twice.
  REEL_CHECK(!(table.defined() && pos.defined() && table.storage() == pos.storage()),
             "embedding_pos: table ", table.shape(), " and pos ", pos.shape(), " share storage");
  return autograd::apply(autograd::ops::EmbeddingPos{}, {ids, table, pos});
}

}  // namespace reel
