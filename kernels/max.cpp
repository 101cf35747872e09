// Entry points of the max family (kernels/max.h): max with argmax along an axis and its scatter
// backward. The tensor is viewed as (outer, axis, inner); indices are range-checked
// (kernels/index_check.h) before the backward's scatter.
#include "kernels/max.h"

#include "kernels/entry_point.h"
#include "kernels/index_check.h"

namespace reel::kernels {

namespace {
struct AxisSplit {
  int64_t outer = 1, axis_size = 1, inner = 1;
  Shape dropped, kept;  // the output shape without the axis / with it as size 1
};
AxisSplit split_axis(const Shape& shape, int64_t axis) {
  AxisSplit s;
  for (int64_t d = 0; d < static_cast<int64_t>(shape.size()); ++d) {
    if (d < axis) s.outer *= shape[d];
    else if (d > axis) s.inner *= shape[d];
    else s.axis_size = shape[d];
    if (d != axis) s.dropped.push_back(shape[d]);
    s.kept.push_back(d == axis ? 1 : shape[d]);
  }
  return s;
}
}  // namespace

MaxWithIndices max_with_indices(const Tensor& x, int64_t axis, bool keepdim) {
  const char* op = "max_with_indices";
  check_same_floating_dtype(op, {&x});
  REEL_CHECK(x.dim() >= 1, op, ": x ", x.shape(), " needs at least one dim");
  axis = normalize_dim(axis, x.dim(), op);
  REEL_CHECK(x.size(axis) > 0, op, ": cannot take the max over the empty axis ", axis, " of shape ", x.shape());
  const AxisSplit s = split_axis(x.shape(), axis);
  const Shape& out_shape = keepdim ? s.kept : s.dropped;
  MaxWithIndices r{empty(out_shape, x.dtype(), x.device()), empty(out_shape, DType::i64, x.device())};
  if (r.values.numel() > 0)
    REEL_DEVICE_DISPATCH(x.device(), max_with_indices, kernel_cost({&x}, {&r.values, &r.indices}, x.numel()),
                         contiguous_as(x, {s.outer, s.axis_size, s.inner}),
                         untracked::view(r.values, {s.outer, s.inner}), untracked::view(r.indices, {s.outer, s.inner}));
  return r;
}

Tensor max_backward(const Tensor& dy, const Tensor& indices, const Shape& input_shape, int64_t axis) {
  const char* op = "max_backward";
  check_same_device(op, {&dy, &indices});
  check_same_floating_dtype(op, {&dy});
  REEL_CHECK(indices.dtype() == DType::i64, op, ": indices ", indices.shape(), " have dtype ", indices.dtype(),
             "; i64 expected (as max_with_indices returns)");
  REEL_CHECK(!input_shape.empty(), op, ": input shape () needs at least one dim");
  axis = normalize_dim(axis, static_cast<int64_t>(input_shape.size()), op);
  const AxisSplit s = split_axis(input_shape, axis);
  REEL_CHECK(dy.shape() == indices.shape() && (dy.shape() == s.dropped || dy.shape() == s.kept), op, ": dy ",
             dy.shape(), " and indices ", indices.shape(), " do not match input ", input_shape, " reduced along axis ",
             axis, ": ", s.dropped, " or ", s.kept, " expected");
  const Tensor idc = untracked::contiguous(indices);
  const IndexRange range{op, "index", s.axis_size, std::nullopt, "of the reduced axis"};
  const bool kernel_runs = shape_numel(input_shape) > 0;
  check_range_before(range, idc, kernel_runs);
  Tensor dx = empty(input_shape, dy.dtype(), dy.device());
  if (kernel_runs)
    run_indexed(range, indices.shape(), [&] {
      REEL_DEVICE_DISPATCH(dy.device(), max_backward, kernel_cost({&dy, &idc}, {&dx}, 0),
                           contiguous_as(dy, {s.outer, s.inner}),
                           untracked::view(idc, {s.outer, s.inner}),
                           untracked::view(dx, {s.outer, s.axis_size, s.inner}));
    });
  return dx;
}

}  // namespace reel::kernels
