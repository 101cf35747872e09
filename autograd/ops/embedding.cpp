// embedding: out = table[ids], ids (N...) i32/i64, table (V, C) -> (N..., C).
// dtable[v] = sum of g over the positions where ids == v, added in position order by the
// deterministic kernel of kernels/embedding.h (no float atomics: bit-identical for any thread count,
// so checkpointed and plain backward agree to the bit). Saves the ids (N integers, C times less
// than the output); the table's row count comes from its recorded shape.
#include "autograd/nn_functions.h"
#include "autograd/op.h"
#include "kernels/embedding.h"

namespace reel {
namespace {

using autograd::Node;
using autograd::Tensors;

struct Embedding final : autograd::Op {
  const char* name() const override { return "embedding"; }
  Tensors forward(const Tensors& in, Node& node) const override {
    node.save({in[0]});
    return {kernels::embedding_forward(in[0], in[1])};
  }
  Tensors backward(const Tensors& grad, const Node& node) const override {
    return {Tensor(), kernels::embedding_backward(grad[0], node.saved_tensor(0), node.input_shape(1)[0])};
  }
};

}  // namespace

Tensor embedding(const Tensor& ids, const Tensor& table) { return autograd::apply(Embedding{}, {ids, table}); }

}  // namespace reel
