// Printing a tensor as a user expects: nested brackets, at most 3 leading and 3 trailing entries
// per dimension once a tensor has more than 1000 elements, then shape, dtype and device.
#include <cstdio>
#include <sstream>

#include "core/tensor.h"

namespace reel {

namespace {
constexpr int64_t kSummarizeAbove = 1000;
constexpr int64_t kEdgeItems = 3;

std::string format_value(const Tensor& host, int64_t flat_offset) {
  char buf[32];
  switch (host.dtype()) {
    case DType::f32: std::snprintf(buf, sizeof buf, "%.4g", host.data<float>()[flat_offset]); break;
    case DType::f64: std::snprintf(buf, sizeof buf, "%.6g", host.data<double>()[flat_offset]); break;
    case DType::i32: std::snprintf(buf, sizeof buf, "%d", host.data<int32_t>()[flat_offset]); break;
    case DType::i64:
      std::snprintf(buf, sizeof buf, "%lld", static_cast<long long>(host.data<int64_t>()[flat_offset]));
      break;
    // 8 and 11 significant bits: 3 and 4 digits say all they hold.
    case DType::bf16: std::snprintf(buf, sizeof buf, "%.3g", static_cast<double>(host.data<bf16>()[flat_offset])); break;
    case DType::f16: std::snprintf(buf, sizeof buf, "%.4g", static_cast<double>(host.data<f16>()[flat_offset])); break;
  }
  return buf;
}

void print_dim(std::ostringstream& os, const Tensor& host, int64_t d, int64_t offset, bool summarize) {
  if (host.dim() == 0) {
    os << format_value(host, 0);
    return;
  }
  const int64_t n = host.shape()[d];
  const int64_t stride = host.strides()[d];
  os << "[";
  for (int64_t i = 0; i < n; ++i) {
    if (summarize && n > 2 * kEdgeItems && i == kEdgeItems) {
      os << "...";
      i = n - kEdgeItems - 1;
      os << (d + 1 == host.dim() ? ", " : ",\n" + std::string(static_cast<size_t>(d + 1), ' '));
      continue;
    }
    if (d + 1 == host.dim()) os << format_value(host, offset + i * stride);
    else print_dim(os, host, d + 1, offset + i * stride, summarize);
    if (i + 1 < n) os << (d + 1 == host.dim() ? ", " : ",\n" + std::string(static_cast<size_t>(d + 1), ' '));
  }
  os << "]";
}
}  // namespace

std::string Tensor::str() const {
  if (!defined()) return "tensor(undefined)";
  std::ostringstream os;
  os << "tensor(";
  Tensor host = to(Device::cpu());
  if (!host.is_contiguous()) host = host.clone();  // clone, not contiguous(): printing records nothing
  if (numel() == 0) os << "[]";
  else print_dim(os, host, 0, 0, numel() > kSummarizeAbove);
  os << ", shape=" << shape_str(shape()) << ", dtype=" << dtype() << ", device=" << device() << ")";
  return os.str();
}

std::ostream& operator<<(std::ostream& os, const Tensor& t) { return os << t.str(); }

}  // namespace reel
