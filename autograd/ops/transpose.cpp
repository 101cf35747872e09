// transpose and permute: views with their dims reordered. The gradient is the output gradient
// put back in the input's order: the same transpose, or the inverse permutation. Nothing is saved.
#include "autograd/functions.h"
#include "autograd/op.h"

namespace reel {
namespace {

using autograd::BackwardCtx;
using autograd::ForwardCtx;
using autograd::Tensors;

struct Transpose final : autograd::Op {
  int64_t d0, d1;
  Transpose(int64_t d0, int64_t d1) : d0(d0), d1(d1) {}
  const char* name() const override { return "transpose"; }
  std::string attributes() const override { return "dims=" + std::to_string(d0) + "," + std::to_string(d1); }
  Tensors forward(const Tensors& in, ForwardCtx&) const override { return {in[0].transpose(d0, d1)}; }
  Tensors backward(const Tensors& grad, BackwardCtx&) const override { return {grad[0].transpose(d0, d1)}; }
};

struct Permute final : autograd::Op {
  std::vector<int64_t> dims;  // normalised: output dim i is input dim dims[i]
  explicit Permute(std::vector<int64_t> dims) : dims(std::move(dims)) {}
  const char* name() const override { return "permute"; }
  std::string attributes() const override { return "dims=" + shape_str(dims); }
  Tensors forward(const Tensors& in, ForwardCtx&) const override { return {in[0].permute(dims)}; }
  Tensors backward(const Tensors& grad, BackwardCtx&) const override {
    std::vector<int64_t> inverse(dims.size());
    for (size_t i = 0; i < dims.size(); ++i) inverse[static_cast<size_t>(dims[i])] = static_cast<int64_t>(i);
    return {grad[0].permute(inverse)};
  }
};

}  // namespace

Tensor transpose(const Tensor& x, int64_t d0, int64_t d1) {
  if (x.dim() == 0) return x;  // as x.transpose: a 0-d tensor is its own transpose
  return autograd::apply(Transpose(normalize_dim(d0, x.dim(), "transpose"), normalize_dim(d1, x.dim(), "transpose")),
                         {x});
}

Tensor permute(const Tensor& x, std::vector<int64_t> dims) {
  REEL_CHECK(static_cast<int64_t>(dims.size()) == x.dim(), "permute: ", dims.size(),
             " dims given for a tensor of shape ", x.shape());
  for (int64_t& d : dims) d = normalize_dim(d, x.dim(), "permute");  // repeats: x.permute's check
  return autograd::apply(Permute(std::move(dims)), {x});
}

}  // namespace reel
