// Entry point of sum/mean/max: axis normalisation, keepdim, then the device reduction over the
// input permuted so that reduced dims trail.
#include "kernels/reduce.h"

#include <algorithm>
#include <cmath>

#include "kernels/entry_point.h"

namespace reel::kernels {

namespace {
// The reduction's plan: x's dims ordered kept first, reduced last (the backends' layout), the output
// shape (kept dims), and how many dims and elements are reduced.
struct ReducePlan {
  std::vector<int64_t> order;
  Shape out_shape, keep_shape;  // keep_shape: with the reduced dims as 1 (keepdim)
  int64_t reduced_count = 0, reduced_numel = 1;
};

ReducePlan plan_reduce(const char* name, const Tensor& x, std::vector<int64_t> axes) {
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
  ReducePlan p;
  for (int64_t d = 0; d < rank; ++d)
    if (!reduced[d]) {
      p.order.push_back(d);
      p.out_shape.push_back(x.size(d));
      p.keep_shape.push_back(x.size(d));
    } else {
      p.keep_shape.push_back(1);
    }
  for (int64_t d = 0; d < rank; ++d)
    if (reduced[d]) {
      p.order.push_back(d);
      ++p.reduced_count;
      p.reduced_numel *= x.size(d);
    }
  return p;
}

// out = (or += when accumulate) the reduction `p` of x; out contiguous of p.out_shape.
void run_reduce(ReduceOp op, const Tensor& x, const ReducePlan& p, const Tensor& out, bool accumulate) {
  if (out.numel() == 0) return;
  if (p.reduced_numel == 0) {  // an empty sum: 0 (a mean or max of nothing: NaN)
    if (!accumulate) out.fill_(op == ReduceOp::Sum ? 0.0 : std::nan(""));
    return;
  }
  REEL_DEVICE_DISPATCH(x.device(), reduce, kernel_cost({&x}, {&out}, x.numel(), op_name(op)), op,
                       untracked::permute(x, p.order), p.reduced_count, out, accumulate);
}
}  // namespace

Tensor reduce(ReduceOp op, const Tensor& x, std::vector<int64_t> axes, bool keepdim) {
  const char* name = op_name(op);
  const ReducePlan p = plan_reduce(name, x, std::move(axes));
  REEL_CHECK(op != ReduceOp::Max || p.reduced_numel > 0 || shape_numel(p.out_shape) == 0, name,
             ": cannot reduce over an empty dimension of shape ", x.shape());
  Tensor out = empty(p.out_shape, x.dtype(), x.device());
  run_reduce(op, x, p, out, false);
  return keepdim ? untracked::view(out, p.keep_shape) : out;
}

void sum_into_(const Tensor& out, const Tensor& x, std::vector<int64_t> axes, bool accumulate) {
  const char* name = "sum_into_";
  REEL_CHECK(out.defined() && x.defined(), name, ": out and x must be defined tensors");
  const ReducePlan p = plan_reduce(name, x, std::move(axes));
  check_same_device(name, {&out, &x});
  REEL_CHECK(out.dtype() == x.dtype(), name, ": out ", out.shape(), " is ", out.dtype(), ", x ", x.shape(), " is ",
             x.dtype(), ": one dtype expected");
  REEL_CHECK(out.shape() == p.out_shape && out.is_contiguous(), name, ": out ", out.shape(),
             " must be a contiguous tensor of shape ", p.out_shape, " (x ", x.shape(), " summed over the axes)");
  run_reduce(ReduceOp::Sum, x, p, out, accumulate);
  out.bump_version();
}

}  // namespace reel::kernels
