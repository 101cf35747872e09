// concat, split and chunk: pieces laid end to end along one dim, and the reverse.
//   concat: out = [x0 | x1 | ...] (a copy);   dx_i = the part of g where x_i went (a view of g).
//   split:  outputs are views of the parts;    dx = [g0 | g1 | ...] (unused outputs give zeros);
//           no copy when the g_i already lie end to end in one buffer (untracked::joined).
// Split is one op with several outputs, so a block that splits qkv into q, k and v records one
// node, not three. Nothing is saved: the piece sizes are attributes.
#include <algorithm>
#include <memory>

#include "autograd/autocast.h"
#include "autograd/functions.h"
#include "autograd/op.h"

namespace reel {
namespace {

using autograd::BackwardCtx;
using autograd::ForwardCtx;
using autograd::Tensors;

std::string sizes_str(const std::vector<int64_t>& sizes, int64_t dim) {
  return "dim=" + std::to_string(dim) + " sizes=" + shape_str(sizes);
}

struct Concat final : autograd::Op {
  int64_t dim;  // normalised
  explicit Concat(int64_t dim) : dim(dim) {}
  const char* name() const override { return "concat"; }
  std::string attributes() const override { return "dim=" + std::to_string(dim); }
  Tensors forward(const Tensors& in, ForwardCtx&) const override {
    Shape shape = in[0].shape();
    shape[dim] = 0;
    for (const Tensor& t : in) shape[dim] += t.size(dim);
    Tensor out = empty(shape, in[0].dtype(), in[0].device());
    int64_t offset = 0;
    for (const Tensor& t : in) {
      out.narrow(dim, offset, t.size(dim)).copy_(t);
      offset += t.size(dim);
    }
    return {out};
  }
  Tensors backward(const Tensors& grad, BackwardCtx& ctx) const override {
    Tensors g(ctx.num_inputs());
    int64_t offset = 0;
    for (size_t i = 0; i < g.size(); ++i) {
      const int64_t n = ctx.input_shape(i)[dim];
      if (ctx.needs_input_grad(i)) g[i] = grad[0].narrow(dim, offset, n);
      offset += n;
    }
    return g;
  }
};

struct Split final : autograd::Op {
  std::vector<int64_t> sizes;
  int64_t dim;  // normalised
  Split(std::vector<int64_t> sizes, int64_t dim) : sizes(std::move(sizes)), dim(dim) {}
  const char* name() const override { return "split"; }
  std::string attributes() const override { return sizes_str(sizes, dim); }
  Tensors forward(const Tensors& in, ForwardCtx&) const override {
    Tensors out;
    int64_t offset = 0;
    for (int64_t n : sizes) {
      out.push_back(in[0].narrow(dim, offset, n));
      offset += n;
    }
    return out;
  }
  Tensors backward(const Tensors& grad, BackwardCtx& ctx) const override {
    // Gradients written end to end into one buffer (attention's q, k and v) are that buffer.
    if (Tensor whole = untracked::joined(grad, dim); whole.defined()) return {whole};
    Tensor dx = empty(ctx.input_shape(0), grad[0].dtype(), grad[0].device());
    int64_t offset = 0;
    for (size_t k = 0; k < sizes.size(); ++k) {
      dx.narrow(dim, offset, sizes[k]).copy_(grad[k]);
      offset += sizes[k];
    }
    return {dx};
  }
};

}  // namespace

Tensor concat(const std::vector<Tensor>& inputs, int64_t dim) {
  REEL_CHECK(!inputs.empty(), "concat: no tensors given");
  const Tensors tensors = autograd::autocast("concat", inputs);
  const Tensor& first = tensors[0];
  REEL_CHECK(first.defined(), "concat: tensor 0 is undefined");
  REEL_CHECK(first.dim() > 0, "concat: cannot concatenate 0-d tensors (tensor 0 has shape ", first.shape(), ")");
  const int64_t d = normalize_dim(dim, first.dim(), "concat");
  for (size_t i = 1; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i];
    REEL_CHECK(t.defined(), "concat: tensor ", i, " is undefined");
    bool same = t.dim() == first.dim();
    for (int64_t k = 0; same && k < t.dim(); ++k) same = k == d || t.size(k) == first.size(k);
    REEL_CHECK(same, "concat: along dim ", d, ", tensor ", i, " ", t.shape(), " does not match tensor 0 ",
               first.shape(), " (every other dim must be equal)");
    REEL_CHECK(t.dtype() == first.dtype() && t.device() == first.device(), "concat: tensor ", i, " ", t.shape(),
               " is ", t.dtype(), " on ", t.device(), ", tensor 0 ", first.shape(), " is ", first.dtype(), " on ",
               first.device());
  }
  return autograd::apply(Concat(d), tensors);
}

std::vector<Tensor> split(const Tensor& x, const std::vector<int64_t>& sizes, int64_t dim) {
  REEL_CHECK(x.dim() > 0, "split: cannot split a 0-d tensor");
  const int64_t d = normalize_dim(dim, x.dim(), "split");
  int64_t total = 0;
  for (int64_t n : sizes) {
    REEL_CHECK(n >= 0, "split: negative size ", n, " in ", shape_str(sizes));
    total += n;
  }
  REEL_CHECK(!sizes.empty() && total == x.size(d), "split: sizes ", shape_str(sizes), " add up to ", total,
             ", not to the size ", x.size(d), " of dim ", d, " of ", x.shape());
  return autograd::record(std::make_unique<Split>(sizes, d), {x});
}

std::vector<Tensor> chunk(const Tensor& x, int64_t n, int64_t dim) {
  REEL_CHECK(n > 0, "chunk: the number of chunks must be positive, got ", n, " (input ", x.shape(), ")");
  REEL_CHECK(x.dim() > 0, "chunk: cannot chunk a 0-d tensor");
  const int64_t size = x.size(normalize_dim(dim, x.dim(), "chunk"));
  const int64_t each = (size + n - 1) / n;
  std::vector<int64_t> sizes;
  for (int64_t left = size; left > 0; left -= each) sizes.push_back(std::min(each, left));
  if (sizes.empty()) sizes.push_back(0);  // an empty dim: one empty chunk
  return split(x, sizes, dim);
}

}  // namespace reel
