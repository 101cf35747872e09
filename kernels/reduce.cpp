// Entry point of sum/mean/max: axis normalisation, keepdim, then the device reduction over the
// input permuted so that reduced dims trail.
#include "kernels/reduce.h"

#include <algorithm>
#include <cmath>

#include "kernels/entry_point.h"

namespace reel::kernels {

Tensor reduce(ReduceOp op, const Tensor& x, std::vector<int64_t> axes, bool keepdim) {
  const char* name = op_name(op);
  check_same_floating_dtype(name, {&x});
  const int64_t rank = x.dim();
  std::vector<bool> reduced(static_cast<size_t>(rank), axes.empty());
  for (int64_t& a : axes) {
    REEL_CHECK(rank > 0 || a == 0 || a == -1, name, ": axis ", a, " is out of range for shape ", x.shape());
    if (rank == 0) continue;
    a = normalize_dim(a, rank, name);
    REEL_CHECK(!reduced[a], name, ": axis ", a, " repeated for shape ", x.shape());
    reduced[a] = true;
  }
  std::vector<int64_t> order;
  Shape out_shape, keep_shape;
  int64_t reduced_count = 0, reduced_numel = 1;
  for (int64_t d = 0; d < rank; ++d)
    if (!reduced[d]) {
      order.push_back(d);
      out_shape.push_back(x.size(d));
      keep_shape.push_back(x.size(d));
    } else if (keepdim) {
      keep_shape.push_back(1);
    }
  for (int64_t d = 0; d < rank; ++d)
    if (reduced[d]) {
      order.push_back(d);
      ++reduced_count;
      reduced_numel *= x.size(d);
    }
  REEL_CHECK(op != ReduceOp::Max || reduced_numel > 0 || shape_numel(out_shape) == 0, name,
             ": cannot reduce over an empty dimension of shape ", x.shape());
  Tensor out = empty(out_shape, x.dtype(), x.device());
  if (out.numel() > 0) {
    if (reduced_numel == 0) out.fill_(op == ReduceOp::Sum ? 0.0 : std::nan(""));
    else
      REEL_DEVICE_DISPATCH(x.device(), reduce, kernel_cost({&x}, {&out}, x.numel(), op_name(op)), op,
                           untracked::permute(x, order), reduced_count, out);
  }
  return keepdim ? untracked::view(out, keep_shape) : out;
}

}  // namespace reel::kernels
