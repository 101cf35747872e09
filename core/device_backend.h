// The services core needs from a device, implemented below it by kernels/cpu and kernels/cuda
// (dependency inversion: core declares, kernels define, the linker joins them; core never
// includes kernels). Factories, contiguous(), to(device) and to(dtype) are built on these.
#pragma once
#include <cstddef>
#include <cstdint>

#include "core/allocator.h"
#include "core/device.h"

namespace reel {

class Tensor;
enum class RandomKind : uint8_t { Uniform, Normal };

class DeviceBackend {
 public:
  virtual ~DeviceBackend() = default;
  virtual RawMemory& raw_memory() = 0;
  virtual void copy_to_host(void* host_dst, const void* device_src, size_t bytes) = 0;
  virtual void copy_from_host(void* device_dst, const void* host_src, size_t bytes) = 0;
  virtual void copy_on_device(void* dst, const void* src, size_t bytes) = 0;
  // out (contiguous) = value, converted to out's dtype.
  virtual void fill(const Tensor& out, double value) = 0;
  // dst = src elementwise; same shape and device, any strides, dtypes may differ (a cast).
  virtual void copy_strided(const Tensor& src, const Tensor& dst) = 0;
  // out (contiguous, floating) = Philox4x32-10 numbers for (seed, offset): element i is a pure
  // function of (seed, offset, i), identical on every device (see core/philox.h).
  virtual void random(const Tensor& out, RandomKind kind, uint64_t seed, uint64_t offset) = 0;
  virtual void synchronize() {}
};

// The backend serving a device; reel::Error when the build or the machine has none.
DeviceBackend& backend_for(Device device);

// Defined by kernels/cpu.
DeviceBackend& cpu_backend();
// Defined by kernels/cuda (or by kernels/cuda_absent.cpp in a build without a CUDA backend):
// the number of CUDA devices that answer, and the backend of one of them (nullptr if none).
int cuda_backend_device_count();
DeviceBackend* cuda_backend(int index);

}  // namespace reel
