// Device dispatch of the kernel entry points, and the profiler's hook on every kernel run:
//   REEL_DEVICE_DISPATCH(device, FN, COST, args...)
// calls kernels::cpu::FN(args...) or kernels::cuda::FN(args...) (declared once for both in
// kernels/backends.h) for the device the (already validated) tensors live on; on the meta device,
// kernels::cuda::FN run dry (kernels/meta.h). It is an
// expression with the kernel's value (void or not), so an entry point never branches on the
// device by hand. COST is an expression of type profile::KernelCost (what the kernel reads,
// writes and computes; see kernel_cost() in kernels/entry_point.h), written next to the call and
// evaluated only while a Profiler collects; its commas must sit inside parentheses:
//   REEL_DEVICE_DISPATCH(x.device(), softmax_forward, kernel_cost({&x}, {&y}, 5 * x.numel()), xr, log, yr);
//   const double ss = REEL_DEVICE_DISPATCH(device, sum_of_squares, kernel_cost(grads, {}, 2 * n), tensors);
// With no Profiler the hook is one relaxed atomic load and a predictable branch.
#pragma once
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "core/device.h"
#include "core/error.h"
#include "core/profile.h"
#include "core/tensor.h"
#include "kernels/backends.h"
#include "kernels/meta.h"

namespace reel::kernels::detail {
// reel::Error unless `device` is the cpu: the only device of a build without a CUDA backend.
inline void require_cpu_only_build(Device device, const char* fn) {
  REEL_CHECK(device.is_cpu(), fn, ": this build has no CUDA backend");
}

// The tensor arguments' shapes ("(64, 128) (128)"; a list as "[3 tensors]") and the first one's
// dtype, for the profiler's record.
struct ArgSummary {
  std::string shapes;
  DType dtype = DType::f32;
  bool have_dtype = false;
  void add(const Tensor& t) {
    if (!t.defined()) return;
    if (!shapes.empty()) shapes += ' ';
    shapes += shape_str(t.shape());
    if (!have_dtype) dtype = t.dtype(), have_dtype = true;
  }
  void add(const std::vector<Tensor>& ts) {
    if (!shapes.empty()) shapes += ' ';
    shapes += "[" + std::to_string(ts.size()) + " tensors]";
    if (!have_dtype && !ts.empty() && ts[0].defined()) dtype = ts[0].dtype(), have_dtype = true;
  }
  template <typename T>
  void add(const T&) {}
};

template <typename Cost, typename Cpu, typename Cuda, typename... Args>
decltype(auto) dispatch(const char* kernel, Device device, Cost&& cost, Cpu&& cpu, [[maybe_unused]] Cuda&& cuda,
                        Args&&... args) {
  const auto run = [&]() -> decltype(auto) {
#if defined(REEL_HAS_CUDA_BACKEND)
    if (device.is_cpu()) return cpu(std::forward<Args>(args)...);
    if (device.is_meta()) {  // the CUDA kernel's host code, run dry (kernels/meta.h)
      const MetaScope dry;
      return cuda(std::forward<Args>(args)...);
    }
    return cuda(std::forward<Args>(args)...);
#else
    require_cpu_only_build(device, kernel);
    return cpu(std::forward<Args>(args)...);
#endif
  };
  if (!profile::costing()) return run();
  ArgSummary summary;
  (summary.add(args), ...);
  const profile::KernelCost c = cost();
  const std::string name = c.variant ? std::string(kernel) + "." + c.variant : std::string(kernel);
  const profile::KernelRun timed(name.c_str(), device, summary.dtype, std::move(summary.shapes), c);
  return run();
}
}  // namespace reel::kernels::detail

#define REEL_DEVICE_DISPATCH(device, FN, COST, ...)                                                              \
  ::reel::kernels::detail::dispatch(                                                                             \
      #FN, (device), [&]() -> ::reel::profile::KernelCost { return COST; },                                       \
      [](auto&&... a) -> decltype(auto) { return ::reel::kernels::cpu::FN(std::forward<decltype(a)>(a)...); },   \
      [](auto&&... a) -> decltype(auto) { return ::reel::kernels::cuda::FN(std::forward<decltype(a)>(a)...); },  \
      __VA_ARGS__)
