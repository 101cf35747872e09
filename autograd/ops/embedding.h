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

}  // namespace autograd::ops

// ---- embedding ----
// table[ids]: ids (N...) i32 or i64 in [0, V), table (V, C) -> (N..., C). The table's gradient is
// summed per row in position order (deterministic, no atomics).
inline Tensor embedding(const Tensor& ids, const Tensor& table) {
  return autograd::apply(autograd::ops::Embedding{}, {ids, table});
}

}  // namespace reel
