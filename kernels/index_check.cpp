// Range checking of index tensors (kernels/index_check.h): the host loop of the CPU, the CUDA
// check through cuda::check_indices, the one message both give, the entry point's description of
// an indexed launch for the deferred CUDA check, and check_device_errors().
#include "kernels/index_check.h"

#include <optional>
#include <sstream>
#include <string>

#include "core/device_backend.h"
#include "kernels/meta.h"

namespace reel::kernels {

namespace {

// "(1, 3)": the multi-index of flat position `flat` in `shape` ("()" for a scalar).
std::string position_str(const Shape& shape, int64_t flat) {
  Shape idx(shape.size());
  for (size_t d = shape.size(); d-- > 0;) {
    idx[d] = shape[d] > 0 ? flat % shape[d] : 0;
    flat = shape[d] > 0 ? flat / shape[d] : 0;
  }
  return shape_str(idx);
}

template <typename I>
int64_t check_range_typed(const IndexRange& r, const Tensor& idx) {
  const I* p = idx.data<I>();
  const int64_t n = idx.numel();
  int64_t count = 0;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t v = static_cast<int64_t>(p[i]);
    if (r.ignore && v == *r.ignore) continue;
    if (v < 0 || v >= r.limit) fail_out_of_range(r, idx.shape(), i, v);
    ++count;
  }
  return count;
}

}  // namespace

void check_index_dtype(const char* op, const char* what, const Tensor& t) {
  REEL_CHECK(t.dtype() == DType::i32 || t.dtype() == DType::i64, op, ": ", what, " ", t.shape(), " have dtype ",
             t.dtype(), "; integer indices (i32 or i64) expected");
}

void fail_out_of_range(const IndexRange& r, const Shape& shape, int64_t flat, int64_t v) {
  std::ostringstream os;
  os << r.op << ": " << r.what << " " << v << " at position " << position_str(shape, flat) << " of "
     << shape_str(shape) << " is out of range [0, " << r.limit << ") " << r.what_limit;
  if (r.ignore) os << " and is not ignore_index (" << *r.ignore << ")";
  REEL_FAIL(os.str());
}

int64_t check_range(const IndexRange& r, const Tensor& idx) {
  if (idx.numel() == 0) return 0;
  // Not a backend dispatch: only CUDA has a check_indices kernel; the CPU's check is the host
  // loop below, which raises the message itself.
#if defined(REEL_HAS_CUDA_BACKEND)
  if (!idx.device().is_cpu()) {
    std::optional<MetaScope> dry;  // meta: the CUDA check's host code, run dry (kernels/meta.h)
    if (idx.device().is_meta()) dry.emplace();
    try {
      return cuda::check_indices(untracked::view(idx, {idx.numel()}), r.limit, r.ignore.has_value(),
                                 r.ignore.value_or(0));
    } catch (const cuda::IndexOutOfRange& e) {
      fail_out_of_range(r, idx.shape(), e.position, e.value);
    }
  }
#endif
  return idx.dtype() == DType::i32 ? check_range_typed<int32_t>(r, idx) : check_range_typed<int64_t>(r, idx);
}

namespace {
thread_local const IndexedCall* t_indexed_call = nullptr;
}
const IndexedCall* current_indexed_call() { return t_indexed_call; }
void set_indexed_call(const IndexedCall* call) { t_indexed_call = call; }

void check_range_before(const IndexRange& r, const Tensor& idx, bool kernel_runs) {
  if (idx.device().is_cpu() || !kernel_runs) check_range(r, idx);
}

}  // namespace reel::kernels

namespace reel {
void check_device_errors(Device device) {
  // The CUDA backend checks the error slots after every synchronize (kernels/cuda/backend.cu).
  if (device.is_cuda()) backend_for(device).synchronize();
}
}  // namespace reel
