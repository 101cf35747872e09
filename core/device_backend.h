// The services core needs from a device, implemented above it by kernels/cpu and kernels/cuda
// (dependency inversion: core declares the interface, kernels implement it and register the
// backends at start-up, kernels/device_backends.h; core never calls up into kernels).
// Factories, contiguous(), to(device) and to(dtype) are built on these; so are the streams, events
// and asynchronous copies of core/stream.h, the user's side of the stream services below.
#pragma once
#include <cstddef>
#include <cstdint>

#include "core/allocator.h"
#include "core/device.h"
#include "core/error.h"
#include "core/profile.h"
#include "core/stream.h"

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
  // The host waits for everything enqueued on this device, on every stream.
  virtual void synchronize() {}

  // ---- streams and events (core/stream.h). Every kernel and every call above runs on the compute
  // stream, in the order called; work on the copy stream is ordered against it only by events.
  // Events are opaque handles of this backend (never null once created).
  virtual void* create_event() = 0;
  virtual void destroy_event(void* event) = 0;
  virtual void record_event(void* event, StreamKind stream) = 0;
  virtual void wait_event(StreamKind stream, void* event) = 0;  // later work on stream waits; the host does not
  virtual bool query_event(void* event) = 0;                    // never blocks
  virtual void synchronize_event(void* event) = 0;
  virtual void synchronize_stream(StreamKind stream) = 0;
  virtual bool query_stream(StreamKind stream) = 0;
  // Asynchronous copies between this device's memory and pinned host memory, enqueued on `stream`.
  virtual void copy_to_host_async(void* host_dst, const void* device_src, size_t bytes, StreamKind stream) = 0;
  virtual void copy_from_host_async(void* device_dst, const void* host_src, size_t bytes, StreamKind stream) = 0;
  // The stream's native handle (cudaStream_t) for a library that enqueues on it; nullptr on cpu.
  virtual void* native_stream(StreamKind stream) = 0;
  // Makes this device current on the calling thread (CUDA: cudaSetDevice).
  virtual void make_current() {}
  // Pinned host memory this backend copies asynchronously (CUDA: cudaHostAlloc); the pinned pool
  // (core/allocator.h) caches on top of it. The CPU's is ordinary host memory.
  virtual RawMemory& pinned_memory() = 0;

  // ---- CUDA graphs (core/graph.h). begin_capture: until end_capture, the compute-stream work this
  // thread enqueues on this device (kernels, library calls) is captured as graph nodes, not run.
  // end_capture ends it and returns the instantiated graph (an opaque handle) and its node count,
  // or raises reel::Error with CUDA's reason (the capture is ended either way). abort_capture ends
  // a capture after an error and discards it (never throws). launch_graph enqueues the graph on
  // the compute stream. Default: the device has no CUDA graphs (reel::Error).
  virtual void begin_capture() { REEL_FAIL("CUDA graphs: this device has none"); }
  virtual void* end_capture(int64_t* nodes) {
    (void)nodes;
    REEL_FAIL("CUDA graphs: this device has none");
  }
  virtual void abort_capture() noexcept {}
  virtual void launch_graph(void* graph) {
    (void)graph;
    REEL_FAIL("CUDA graphs: this device has none");
  }
  virtual void destroy_graph(void* graph) noexcept { (void)graph; }

  // Profiling (core/profile.h): the clock that times this device's kernels on its own stream
  // (null: they run synchronously and the host clock times them), and its peaks, measured or
  // read from the device's properties once.
  virtual profile::DeviceClock* clock() { return nullptr; }
  virtual profile::Roof roof() = 0;
};

// The backend serving a device; reel::Error when the build or the machine has none.
DeviceBackend& backend_for(Device device);

// What kernels registers (kernels::register_device_backends()): the CPU's backend, for CUDA the
// number of devices that answer and the backend of one of them, and the meta device's.
struct DeviceBackends {
  DeviceBackend* cpu = nullptr;
  int (*cuda_device_count)() = nullptr;
  DeviceBackend* (*cuda)(int index) = nullptr;
  DeviceBackend* (*meta)() = nullptr;  // the meta device (kernels/meta.h); null: the build has none
};
void register_device_backends(const DeviceBackends& backends);

}  // namespace reel
