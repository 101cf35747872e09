// cast (autograd/ops/cast.h): the user function, which records the op and, for a parameter, gives
// it its source.
#include "autograd/ops/cast.h"

#include "autograd/functions.h"
#include "core/autograd_meta.h"

namespace reel {

Tensor cast(const Tensor& x, DType dtype) {
  REEL_CHECK(x.defined(), "cast: x is an undefined tensor");
  REEL_CHECK(is_floating(x.dtype()) && is_floating(dtype), "cast: x ", x.shape(), " ", x.dtype(), " to ", dtype,
             ": only floating dtypes are cast (the gradient goes back through the cast)");
  if (x.dtype() == dtype) return x;  // no cast, nothing recorded
  autograd::ops::Cast op(x.dtype(), dtype);
  const auto& meta = x.autograd_meta();
  if (meta && ((meta->is_leaf && meta->requires_grad) || meta->views_leaf)) op.source = x.detach();
  return autograd::apply(std::move(op), {x});
}

}  // namespace reel
