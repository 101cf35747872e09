// Streams, events, pinned host memory and asynchronous copies (core/stream.h) on every device:
// a device -> pinned host copy on the copy stream ordered by an event wait gives the data, and in
// the emulated CUDA build the same program without the wait reads the old bytes (so the wait is
// shown necessary, in both directions); queries before and after; the pinned pool's statistics and
// cache; the errors. Plus the emulator's stream model through the raw runtime (kernels/simt).
#include <cstring>
#include <string>
#include <vector>

#include "core/allocator.h"
#include "core/stream.h"
#include "core/tensor.h"
#include "testing.h"

using namespace reel;
using reel::testing::devices;
using reel::testing::values;

namespace {

constexpr float kStale = -7.f;  // what the pinned buffer or the device tensor held before a copy

// The floats 0, 1, ..., n-1 on `device`.
Tensor iota(int64_t n, Device device) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = static_cast<float>(i);
  return from_vector<float>(v, {n}).to(device);
}

std::vector<double> iota_values(int64_t n) {
  std::vector<double> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = static_cast<double>(i);
  return v;
}

PinnedBuffer stale_buffer(int64_t n) {
  PinnedBuffer b(static_cast<size_t>(n) * sizeof(float));
  for (int64_t i = 0; i < n; ++i) b.data_as<float>()[i] = kStale;
  return b;
}

// The pinned buffer's floats as compute-stream work reads them: copied into a fresh tensor on
// `device` on its compute stream (ordered after whatever that stream waited for), then read back.
std::vector<double> read_on_compute(const PinnedBuffer& b, Device device) {
  Tensor t = empty({static_cast<int64_t>(b.bytes() / sizeof(float))}, DType::f32, device);
  copy_async(b, t, Stream::compute(device));
  return values(t);
}

// Device -> pinned host on the copy stream, after the compute stream's work; with `wait`, the
// compute stream waits for the copy before reading the buffer. Returns what the compute stream read.
std::vector<double> download_through_copy_stream(Device device, int64_t n, bool wait) {
  const Tensor x = iota(n, device);
  PinnedBuffer host = stale_buffer(n);
  const Stream compute = Stream::compute(device), copy = Stream::copy(device);
  copy.wait(compute.record());  // x is written by then
  copy_async(x, host, copy);
  const Event copied = copy.record();
  if (wait) compute.wait(copied);
  std::vector<double> seen = read_on_compute(host, device);
  copied.synchronize();  // before host and x go: the copy must not outlive them
  return seen;
}

// Pinned host -> device on the copy stream into a tensor holding kStale; with `wait`, the compute
// stream waits for the copy before reading the tensor. Returns what the compute stream read.
std::vector<double> upload_through_copy_stream(Device device, int64_t n, bool wait) {
  PinnedBuffer host = stale_buffer(n);
  for (int64_t i = 0; i < n; ++i) host.data_as<float>()[i] = static_cast<float>(i);
  Tensor y = full({n}, kStale, DType::f32, device);
  const Stream compute = Stream::compute(device), copy = Stream::copy(device);
  copy.wait(compute.record());  // y's fill is done by then
  copy_async(host, y, copy);
  const Event copied = copy.record();
  if (wait) compute.wait(copied);
  std::vector<double> seen = values(y.to(DType::f64));  // a cast kernel and a download: compute-stream work
  copied.synchronize();
  return seen;
}

}  // namespace

TEST_CASE("an async copy on the copy stream, waited for by the compute stream, gives the data") {
  const int64_t n = 1000;
  for (const Device device : devices()) {
    CAPTURE(device);
    CHECK(download_through_copy_stream(device, n, true) == iota_values(n));
    CHECK(upload_through_copy_stream(device, n, true) == iota_values(n));

    // The host itself may read the buffer once the copy's event is done.
    const Tensor x = iota(n, device);
    PinnedBuffer host = stale_buffer(n);
    const Stream copy = Stream::copy(device);
    copy.wait(Stream::compute(device).record());
    copy_async(x, host, copy);
    copy.record().synchronize();
    CHECK(std::vector<float>(host.data_as<float>(), host.data_as<float>() + n) ==
          x.to(Device::cpu()).to_vector<float>());
    copy_async(x, host, copy);
    copy.synchronize();  // or the whole stream
    CHECK(host.data_as<float>()[n - 1] == static_cast<float>(n - 1));
  }
}

TEST_CASE("without the event wait the compute stream reads stale data (emulated cuda shows it)") {
  const int64_t n = 1000;
  const std::vector<double> stale(static_cast<size_t>(n), kStale);
  for (const Device device : devices()) {
    CAPTURE(device);
    const std::vector<double> down = download_through_copy_stream(device, n, false);
    const std::vector<double> up = upload_through_copy_stream(device, n, false);
    if (device.is_cpu()) {  // every cpu stream runs its work at once: ordered without a wait
      CHECK(down == iota_values(n));
      CHECK(up == iota_values(n));
    } else {
#if defined(REEL_CUDA_EMULATED)
      // The copy stream's work waits in its queue until something waits for it: the missing
      // wait is caught on a CPU, deterministically.
      CHECK(down == stale);
      CHECK(up == stale);
#else
      MESSAGE("a real GPU: without the wait either outcome may happen; nothing to check");
#endif
    }
  }
}

TEST_CASE("event and stream queries: pending before, done after; never-recorded events are done") {
  const int64_t n = 257;
  for (const Device device : devices()) {
    CAPTURE(device);
    Event never;
    CHECK(never.query());
    never.synchronize();  // nothing to wait for
    Stream::compute(device).wait(never);
    CHECK_FALSE(never.has_device());

    const Tensor x = iota(n, device);
    PinnedBuffer host = stale_buffer(n);
    const Stream copy = Stream::copy(device);
    copy.wait(Stream::compute(device).record());
    copy_async(x, host, copy);
    Event copied = copy.record();
    CHECK(copied.recorded());
    CHECK(copied.device() == device);
    int polls = 0;
    while (!copied.query()) ++polls;  // polling ends: on a GPU when the copy is done, here as below
#if defined(REEL_CUDA_EMULATED)
    // The queue holds the copy and the event's marker (the wait was for an event already done):
    // each query that finds the event pending runs one of them and answers "not ready".
    CHECK(polls == (device.is_cuda() ? 2 : 0));
#endif
    CHECK(copied.query());
    CHECK(copy.query());
    CHECK(host.data_as<float>()[n - 1] == static_cast<float>(n - 1));
    // A stream query: pending while work is queued (emulated cuda), done after a synchronize.
    copy_async(x, host, copy);
#if defined(REEL_CUDA_EMULATED)
    if (device.is_cuda()) CHECK_FALSE(copy.query());
#endif
    copy.synchronize();
    CHECK(copy.query());
    // Re-recording moves the event to the new end of the stream.
    copy_async(x, host, copy);
    copied.record(copy);
    copied.synchronize();
    CHECK(copied.query());
    // Moved events keep their record; a default one binds at its first record.
    Event moved = std::move(copied);
    CHECK(moved.query());
    Event late;
    late.record(Stream::compute(device));
    CHECK(late.device() == device);
    late.synchronize();
    CHECK(late.query());
  }
}

TEST_CASE("pinned memory: its own pool, counted by category, freed back to its cache, in the report") {
  const MemoryStats before = pinned_memory_stats();
  const size_t bytes = 1000;
  void* first = nullptr;
  {
    MemoryCategory scope(Category::Activation);
    PinnedBuffer b(bytes);
    first = b.data();
    CHECK(b.category() == Category::Activation);
    CHECK(reinterpret_cast<uintptr_t>(b.data()) % CachingAllocator::kAlignment == 0);
    const MemoryStats during = pinned_memory_stats();
    CHECK(during[Category::Activation].current_bytes == before[Category::Activation].current_bytes + 1000);
    CHECK(during.current_bytes == before.current_bytes + 1000);
    CHECK(during[Category::Activation].alloc_count == before[Category::Activation].alloc_count + 1);
    CHECK(memory_report().find("memory in pinned host memory") != std::string::npos);
  }
  const MemoryStats after = pinned_memory_stats();
  CHECK(after.current_bytes == before.current_bytes);
  CHECK(after[Category::Activation].free_count == before[Category::Activation].free_count + 1);
  CHECK(after.cached_bytes >= static_cast<int64_t>(CachingAllocator::size_class(bytes)));
  {
    PinnedBuffer again(bytes);  // served from the cache: no new system allocation
    CHECK(again.data() == first);
    CHECK(again.category() == Category::Temporary);
    CHECK(pinned_memory_stats().system_allocs == after.system_allocs);
    PinnedBuffer moved = std::move(again);
    CHECK(moved.data() == first);
    CHECK(again.data() == nullptr);
  }
  CHECK(pinned_memory_stats().current_bytes == before.current_bytes);
  // The device pools are not touched by pinned allocations.
  const int64_t cpu_before = memory_stats(Device::cpu()).current_bytes;
  PinnedBuffer b(4096);
  CHECK(memory_stats(Device::cpu()).current_bytes == cpu_before);
}

TEST_CASE("stream and copy errors name the call, the devices and the sizes") {
  const Device cpu = Device::cpu();
  const Tensor x = iota(4, cpu);
  PinnedBuffer small(12), right(16);
  CHECK_REEL_ERROR(copy_async(x, small, Stream::copy(cpu)),
                   "copy_async (device -> pinned host): sizes differ: the tensor f32 (4) on cpu has 16 bytes, the "
                   "pinned buffer 12");
  CHECK_REEL_ERROR(copy_async(small, x, Stream::copy(cpu)), "copy_async (pinned host -> device): sizes differ");
  const Tensor m = iota(6, cpu).reshape({2, 3}).transpose(0, 1);
  PinnedBuffer six(24);
  CHECK_REEL_ERROR(copy_async(m, six, Stream::copy(cpu)), "is not contiguous");
  CHECK_REEL_ERROR(Event().device(), "belongs to no device yet");
  if (cuda_available()) {
    const Device cuda = Device::cuda(0);
    CHECK_REEL_ERROR(copy_async(x, right, Stream::copy(cuda)),
                     "copy_async (device -> pinned host): the tensor f32 (4) is on cpu but the copy is enqueued on "
                     "the cuda:0 copy stream");
    CHECK_REEL_ERROR(copy_async(right, x.to(cuda), Stream::compute(cpu)),
                     "is on cuda:0 but the copy is enqueued on the cpu compute stream");
    Event on_cpu = Stream::compute(cpu).record();
    CHECK_REEL_ERROR(Stream::copy(cuda).wait(on_cpu),
                     "Stream::wait: the cuda:0 copy stream cannot wait on an event of cpu");
    Event of_cuda(cuda);
    CHECK_REEL_ERROR(of_cuda.record(Stream::copy(cpu)),
                     "Event::record: an event of cuda:0 cannot be recorded on the cpu copy stream");
  }
  CHECK(Stream::copy(cpu).str() == "cpu copy stream");
  CHECK(Stream::copy(cpu) != Stream::compute(cpu));
  CHECK(Stream::compute(cpu).native() == nullptr);
}

// ---- the emulator's stream model through the raw runtime (kernels/simt/README.md) ----------------
#if defined(REEL_CUDA_EMULATED)
#include "kernels/simt/simt.h"

namespace {
#define CUDA_REQUIRE(expr) REQUIRE((expr) == cudaSuccess)

// out[i] = value. out: (n).
__global__ void set_kernel(int* out, int n, int value) {
  const int i = int(blockIdx.x * blockDim.x + threadIdx.x);
  if (i < n) out[i] = value;
}

// n ints of "device" memory (host memory in the emulator, so the test reads it directly).
struct Ints {
  explicit Ints(int n) : n(n) {
    REQUIRE(cudaMalloc(&p, sizeof(int) * size_t(n)) == cudaSuccess);
    REQUIRE(cudaMemset(p, 0, sizeof(int) * size_t(n)) == cudaSuccess);
  }
  ~Ints() { cudaFree(p); }
  bool all(int v) const {
    for (int i = 0; i < n; ++i)
      if (p[i] != v) return false;
    return true;
  }
  int n;
  int* p = nullptr;
};
const int kBytePattern = 0x01010101;  // an int of bytes set to 1 by cudaMemset(.., 1, ..)
}  // namespace

TEST_CASE("simt: a kernel launched on a created stream runs when the stream is synchronised") {
  Ints d(300);
  cudaStream_t s = nullptr;
  CUDA_REQUIRE(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  CUDA_REQUIRE(simt::launch(set_kernel, dim3(3), dim3(128), 0, s, d.p, d.n, 5));
  CHECK(d.all(0));  // queued
  CHECK(simt::launch(set_kernel, dim3(1), dim3(2048), 0, s, d.p, d.n, 6) == cudaErrorInvalidValue);  // checked now
  CUDA_REQUIRE(cudaStreamSynchronize(s));
  CHECK(d.all(5));
  CUDA_REQUIRE(simt::launch(set_kernel, dim3(3), dim3(128), 0, s, d.p, d.n, 7));
  CUDA_REQUIRE(cudaStreamDestroy(s));  // runs its work first
  CHECK(d.all(7));
}

TEST_CASE("simt: legacy-stream work runs what blocking streams queued, not non-blocking streams") {
  Ints a(64), b(64), other(4);
  cudaStream_t blocking = nullptr, non_blocking = nullptr;
  CUDA_REQUIRE(cudaStreamCreate(&blocking));
  CUDA_REQUIRE(cudaStreamCreateWithFlags(&non_blocking, cudaStreamNonBlocking));
  CUDA_REQUIRE(cudaMemsetAsync(a.p, 1, sizeof(int) * 64, blocking));
  CUDA_REQUIRE(cudaMemsetAsync(b.p, 1, sizeof(int) * 64, non_blocking));
  CHECK(a.all(0));
  CHECK(b.all(0));
  CUDA_REQUIRE(simt::launch(set_kernel, dim3(1), dim3(32), 0, nullptr, other.p, other.n, 3));  // legacy work
  CHECK(a.all(kBytePattern));  // CUDA orders the blocking stream before it
  CHECK(b.all(0));             // but not the non-blocking one
  CUDA_REQUIRE(cudaDeviceSynchronize());
  CHECK(b.all(kBytePattern));
  CUDA_REQUIRE(cudaStreamDestroy(blocking));
  CUDA_REQUIRE(cudaStreamDestroy(non_blocking));
}

TEST_CASE("simt: a wait orders two created streams up to the record it saw, not a later one") {
  Ints a(64), b(64);
  cudaStream_t s1 = nullptr, s2 = nullptr;
  cudaEvent_t e = nullptr;
  CUDA_REQUIRE(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking));
  CUDA_REQUIRE(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
  CUDA_REQUIRE(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  CUDA_REQUIRE(cudaMemsetAsync(a.p, 1, sizeof(int) * 64, s1));
  CUDA_REQUIRE(cudaEventRecord(e, s1));
  CUDA_REQUIRE(cudaStreamWaitEvent(s2, e, 0));
  CUDA_REQUIRE(cudaMemcpyAsync(b.p, a.p, sizeof(int) * 64, cudaMemcpyDeviceToDevice, s2));
  CUDA_REQUIRE(simt::launch(set_kernel, dim3(1), dim3(64), 0, s1, a.p, a.n, 9));
  CUDA_REQUIRE(cudaEventRecord(e, s1));  // re-recorded: s2's wait keeps the first record
  CUDA_REQUIRE(cudaStreamSynchronize(s2));
  CHECK(b.all(kBytePattern));
  CHECK(a.all(kBytePattern));  // s1 ran up to the first record only
  CHECK(cudaEventQuery(e) == cudaErrorNotReady);
  CHECK(cudaGetLastError() == cudaErrorNotReady);
  CUDA_REQUIRE(cudaEventSynchronize(e));
  CHECK(a.all(9));
  CUDA_REQUIRE(cudaEventQuery(e));
  // An event destroyed with its record still queued: the marker later does nothing.
  CUDA_REQUIRE(cudaEventRecord(e, s1));
  CUDA_REQUIRE(cudaEventDestroy(e));
  CUDA_REQUIRE(cudaStreamSynchronize(s1));
  CUDA_REQUIRE(cudaStreamDestroy(s1));
  CUDA_REQUIRE(cudaStreamDestroy(s2));
}
#endif
