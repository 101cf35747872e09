// Streams, events, pinned host memory and asynchronous host<->device copies: the handles later
// work (activation offload with prefetch, FSDP gathers) orders its transfers with.
//
// Every device has two streams. The compute stream is where every kernel, synchronous copy and
// library call runs, exactly as before streams existed (CUDA: the legacy default stream). The copy
// stream is for asynchronous copies that may overlap compute (CUDA: a non-blocking stream: it does
// not wait for the compute stream, nor the compute stream for it). Only events order the two:
//
//   PinnedBuffer host(x.nbytes());                 // page-locked, from the pinned pool
//   Event computed(x.device());
//   computed.record(Stream::compute(x.device()));  // x is written by the kernels before this point
//   Stream copy = Stream::copy(x.device());
//   copy.wait(computed);                           // the copy starts after them...
//   copy_async(x, host, copy);                     // ...and the host does not wait for it
//   Event copied = copy.record();
//   ...                                            // more compute, overlapping the copy
//   copied.synchronize();                          // now `host` holds x (or: compute.wait(copied))
//
// Rules (as on a GPU): the memory an asynchronous copy reads or writes must stay alive and untouched
// until an event recorded after the copy is known done (query() or synchronize()) or a stream that
// waited on it uses the memory; reading it earlier reads old bytes. In the emulated CUDA build
// (kernels/simt) work on the copy stream is deferred until something waits for it, so a missing
// wait shows as stale data on a CPU. On cpu every stream runs its work at once.
//
// Errors are reel::Error naming the call, the devices, shapes and sizes: a copy between a tensor
// and a stream of different devices, a non-contiguous tensor, sizes that differ; an event recorded
// on or waited on by a stream of another device.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

#include "core/allocator.h"
#include "core/device.h"

namespace reel {

class Tensor;
class Event;

enum class StreamKind : uint8_t { Compute, Copy };
const char* stream_kind_name(StreamKind kind);  // "compute", "copy"

// One stream of one device: a value, cheap to copy; the backend owns the stream itself.
class Stream {
 public:
  Stream(Device device, StreamKind kind) : device_(device), kind_(kind) {}
  static Stream compute(Device device) { return Stream(device, StreamKind::Compute); }
  static Stream copy(Device device) { return Stream(device, StreamKind::Copy); }

  Device device() const { return device_; }
  StreamKind kind() const { return kind_; }
  std::string str() const;  // "cuda:0 copy stream"

  // Later work on this stream waits until `event` is done; the host does not wait. An event never
  // recorded is done. reel::Error if the event belongs to another device.
  void wait(const Event& event) const;
  // A new event of this device recorded on this stream now.
  Event record() const;
  // The host waits until everything enqueued on this stream so far has run.
  void synchronize() const;
  // True when everything enqueued so far has run (never blocks).
  bool query() const;

  // For code that enqueues on the stream through a device library itself (distributed's NCCL calls): the
  // backend's handle, a cudaStream_t (null for the CUDA compute stream, which is the legacy default
  // stream, and for every cpu stream).
  void* native() const;

  bool operator==(const Stream& o) const { return device_ == o.device_ && kind_ == o.kind_; }
  bool operator!=(const Stream& o) const { return !(*this == o); }

 private:
  Device device_;
  StreamKind kind_;
};

// Makes `device` current on the calling thread (CUDA: cudaSetDevice; nothing on cpu), for code that
// calls a device library itself (dist creates its NCCL communicators after this).
void make_device_current(Device device);

// A marker in a stream: done once everything enqueued on that stream before record() has run.
// Move-only; the backend's event is created when the device is known (at construction, or at the
// first record() of a default-constructed one) and destroyed with it.
class Event {
 public:
  Event() = default;
  explicit Event(Device device);
  ~Event();
  Event(Event&& other) noexcept;
  Event& operator=(Event&& other) noexcept;
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;

  // Marks the current end of `stream`'s work (again, if recorded before: the last record counts).
  void record(const Stream& stream);
  // True once the work before the last record has run (never blocks); true if never recorded.
  bool query() const;
  // The host waits until query() would be true.
  void synchronize() const;

  bool recorded() const { return recorded_; }
  bool has_device() const { return handle_ != nullptr; }
  Device device() const;  // reel::Error before the device is known
  void* handle() const { return handle_; }  // the backend's event (for DeviceBackend only)

 private:
  Device device_;
  void* handle_ = nullptr;
  bool recorded_ = false;
};

// A block of pinned (page-locked) host memory from the pinned pool (core/allocator.h:
// pinned_allocator()), tagged with MemoryCategory::current() like any allocation and returned to
// the pool's cache when destroyed. Asynchronous copies need it: a GPU copies it without staging.
// Move-only. Host code reads and writes it directly once the copies touching it are done.
class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  // From the pinned pool of the device whose copies it takes (pinned_allocator(device)): meta's
  // for the meta device, the process's otherwise.
  explicit PinnedBuffer(size_t bytes, Device device = Device::cpu());
  ~PinnedBuffer();
  PinnedBuffer(PinnedBuffer&& other) noexcept;
  PinnedBuffer& operator=(PinnedBuffer&& other) noexcept;
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;

  void* data() const { return data_; }
  template <typename T>
  T* data_as() const { return static_cast<T*>(data_); }
  size_t bytes() const { return bytes_; }
  Category category() const { return category_; }

 private:
  void release();
  void* data_ = nullptr;
  size_t bytes_ = 0;
  Category category_ = Category::Temporary;
  bool meta_ = false;  // from meta's pool
};

// Asynchronous copies between a tensor and pinned host memory, enqueued on `stream`, whose device
// must be the tensor's; the tensor must be contiguous and exactly as large as the buffer. They
// return at once (on cpu the copy is done by then). Writing into `dst` bumps its version, as any
// in-place write does. While a Profiler collects, each copy is a record ("copy_async.d2h",
// "copy_async.h2d") timed on `stream` itself (core/profile.h).
void copy_async(const Tensor& src, PinnedBuffer& dst, const Stream& stream);  // device -> pinned host
void copy_async(const PinnedBuffer& src, const Tensor& dst, const Stream& stream);  // pinned host -> device

}  // namespace reel
