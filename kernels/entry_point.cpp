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
               " tensor is not supported (f32, f64, bf16 or f16 expected)");
    REEL_CHECK(t->dtype() == t0, op, ": dtypes differ: ", t0, " and ", t->dtype(), " (shapes ",
               (*tensors.begin())->shape(), " and ", t->shape(), ")");
  }
}

int64_t bytes_of(const Tensor& t) { return t.defined() ? t.numel() * static_cast<int64_t>(dtype_size(t.dtype())) : 0; }

int64_t bytes_of(const std::vector<Tensor>& ts) {
  int64_t bytes = 0;
  for (const Tensor& t : ts) bytes += bytes_of(t);
  return bytes;
}

int64_t numel_of(const std::vector<Tensor>& ts) {
  int64_t n = 0;
  for (const Tensor& t : ts) n += t.defined() ? t.numel() : 0;
  return n;
}

profile::KernelCost kernel_cost(std::initializer_list<const Tensor*> in, std::initializer_list<const Tensor*> out,
                                int64_t flops, const char* variant) {
  profile::KernelCost c;
  for (const Tensor* t : in) c.bytes_read += bytes_of(*t);
  for (const Tensor* t : out) c.bytes_written += bytes_of(*t);
  c.flops = flops;
  c.variant = variant;
  return c;
}

}  // namespace reel::kernels
