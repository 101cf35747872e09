// Streams, events, pinned buffers and asynchronous copies (core/stream.h): checks and names here,
// the work in each device's backend (core/device_backend.h).
#include "core/stream.h"

#include <utility>

#include "core/device_backend.h"
#include "core/error.h"
#include "core/profile.h"
#include "core/tensor.h"

namespace reel {

const char* stream_kind_name(StreamKind kind) {
  switch (kind) {
    case StreamKind::Compute: return "compute";
    case StreamKind::Copy: return "copy";
  }
  return "?";
}

// ---- Stream ------------------------------------------------------------------------------------

std::string Stream::str() const { return device_.str() + " " + stream_kind_name(kind_) + " stream"; }

void Stream::wait(const Event& event) const {
  if (!event.recorded()) return;  // as cudaStreamWaitEvent on an event never recorded
  REEL_CHECK(event.device() == device_, "Stream::wait: the ", str(), " cannot wait on an event of ", event.device(),
             " (an event orders the streams of its own device)");
  backend_for(device_).wait_event(kind_, event.handle());
}

Event Stream::record() const {
  Event event(device_);
  event.record(*this);
  return event;
}

void Stream::synchronize() const {
  profile::record_host_sync(profile::HostSyncKind::StreamSync, device_);
  backend_for(device_).synchronize_stream(kind_);
}
bool Stream::query() const { return backend_for(device_).query_stream(kind_); }
void* Stream::native() const { return backend_for(device_).native_stream(kind_); }

void make_device_current(Device device) { backend_for(device).make_current(); }

// ---- Event -------------------------------------------------------------------------------------

Event::Event(Device device) : device_(device), handle_(backend_for(device).create_event()) {}

Event::~Event() {
  if (handle_) backend_for(device_).destroy_event(handle_);
}

Event::Event(Event&& other) noexcept
    : device_(other.device_), handle_(std::exchange(other.handle_, nullptr)),
      recorded_(std::exchange(other.recorded_, false)) {}

Event& Event::operator=(Event&& other) noexcept {
  if (this != &other) {
    Event old(std::move(*this));  // destroyed at the end of this scope
    device_ = other.device_;
    handle_ = std::exchange(other.handle_, nullptr);
    recorded_ = std::exchange(other.recorded_, false);
  }
  return *this;
}

Device Event::device() const {
  REEL_CHECK(handle_ != nullptr, "Event: this event belongs to no device yet (record it on a stream first)");
  return device_;
}

void Event::record(const Stream& stream) {
  if (!handle_) *this = Event(stream.device());
  REEL_CHECK(stream.device() == device_, "Event::record: an event of ", device_, " cannot be recorded on the ",
             stream.str());
  backend_for(device_).record_event(handle_, stream.kind());
  recorded_ = true;
}

bool Event::query() const { return !recorded_ || backend_for(device_).query_event(handle_); }

void Event::synchronize() const {
  if (!recorded_) return;
  profile::record_host_sync(profile::HostSyncKind::EventSync, device_);
  backend_for(device_).synchronize_event(handle_);
}

// ---- PinnedBuffer ------------------------------------------------------------------------------

PinnedBuffer::PinnedBuffer(size_t bytes, Device device)
    : bytes_(bytes), category_(MemoryCategory::current()), meta_(device.is_meta()) {
  data_ = pinned_allocator(meta_ ? Device::meta() : Device::cpu()).allocate(bytes, category_);
}

PinnedBuffer::~PinnedBuffer() { release(); }

void PinnedBuffer::release() {
  if (data_) pinned_allocator(meta_ ? Device::meta() : Device::cpu()).deallocate(data_, bytes_, category_);
  data_ = nullptr;
  bytes_ = 0;
}

PinnedBuffer::PinnedBuffer(PinnedBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)),
      bytes_(std::exchange(other.bytes_, 0)),
      category_(other.category_),
      meta_(other.meta_) {}

PinnedBuffer& PinnedBuffer::operator=(PinnedBuffer&& other) noexcept {
  if (this != &other) {
    release();
    data_ = std::exchange(other.data_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
    category_ = other.category_;
    meta_ = other.meta_;
  }
  return *this;
}

// ---- asynchronous copies -----------------------------------------------------------------------

namespace {
// The checks both directions share: the tensor on the stream's device, contiguous, as large as
// the buffer. `what` names the call and its direction.
void check_copy(const char* what, const Tensor& t, size_t buffer_bytes, const Stream& stream) {
  REEL_CHECK(t.defined(), what, ": the tensor is undefined");
  REEL_CHECK(t.device() == stream.device(), what, ": the tensor ", t.dtype(), " ", t.shape(), " is on ", t.device(),
             " but the copy is enqueued on the ", stream.str(), " (use a stream of the tensor's device)");
  REEL_CHECK(t.is_contiguous(), what, ": the tensor ", t.dtype(), " ", t.shape(), " on ", t.device(),
             " is not contiguous (strides ", t.strides(), "): copy contiguous() instead");
  REEL_CHECK(t.nbytes() == buffer_bytes, what, ": sizes differ: the tensor ", t.dtype(), " ", t.shape(), " on ",
             t.device(), " has ", t.nbytes(), " bytes, the pinned buffer ", buffer_bytes);
}

// While a Profiler collects, the copy is a record named `kernel` (its direction) of the tensor's
// bytes, timed on `stream` (core/profile.h), so a trace shows it on the copy stream's track.
template <typename Enqueue>
void profiled(const char* kernel, const Tensor& t, const Stream& stream, Enqueue&& enqueue) {
  if (!profile::costing()) return enqueue();
  profile::KernelCost cost;
  cost.bytes_read = cost.bytes_written = static_cast<int64_t>(t.nbytes());
  const profile::KernelRun run(kernel, stream.device(), t.dtype(), shape_str(t.shape()), cost, stream.kind());
  enqueue();
}
}  // namespace

void copy_async(const Tensor& src, PinnedBuffer& dst, const Stream& stream) {
  check_copy("copy_async (device -> pinned host)", src, dst.bytes(), stream);
  if (dst.bytes() == 0) return;
  profiled("copy_async.d2h", src, stream, [&] {
    backend_for(stream.device()).copy_to_host_async(dst.data(), src.data_ptr(), dst.bytes(), stream.kind());
  });
}

void copy_async(const PinnedBuffer& src, const Tensor& dst, const Stream& stream) {
  check_copy("copy_async (pinned host -> device)", dst, src.bytes(), stream);
  if (src.bytes() == 0) return;
  dst.bump_version();
  profiled("copy_async.h2d", dst, stream, [&] {
    backend_for(stream.device()).copy_from_host_async(dst.data_ptr(), src.data(), src.bytes(), stream.kind());
  });
}

}  // namespace reel
