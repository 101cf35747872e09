// The input checks every kernel entry point shares (kernels/entry_point.h): their messages name
// the op, the shapes and the devices or dtypes involved.
#include "kernels/entry_point.h"

#include <sstream>

namespace reel::kernels {

void check_same_device(const char* op, std::initializer_list<const Tensor*> tensors) {
  const Device d = (*tensors.begin())->device();
  for (const Tensor* t : tensors) {
    if (t->device() == d) continue;
    std::ostringstream os;
    os << op << ": expected all tensors on one device, got";
    for (const Tensor* u : tensors) os << " " << shape_str(u->shape()) << " on " << u->device();
    REEL_FAIL(os.str());
  }
}

void check_same_floating_dtype(const char* op, std::initializer_list<const Tensor*> tensors) {
  const DType t0 = (*tensors.begin())->dtype();
  for (const Tensor* t : tensors) {
    REEL_CHECK(is_floating(t->dtype()), op, ": dtype ", t->dtype(), " of the ", shape_str(t->shape()),
               " tensor is not supported (f32 or f64 expected)");
    REEL_CHECK(t->dtype() == t0, op, ": dtypes differ: ", t0, " and ", t->dtype(), " (shapes ",
               (*tensors.begin())->shape(), " and ", t->shape(), ")");
  }
}

}  // namespace reel::kernels
