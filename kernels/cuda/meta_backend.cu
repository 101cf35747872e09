// kernels/cuda/meta_backend.cu: the meta device's backend (kernels/meta.h): cuda:0's backend run
// dry over unbacked address ranges, device and pinned host side alike. Only in the emulated build;
// the nvcc build has none.
#include "kernels/meta.h"

#include "core/error.h"
#include "kernels/device_backends.h"
#include "kernels/simt/simt.h"

#if defined(REEL_CUDA_EMULATED)
#include <sys/mman.h>

#include <mutex>
#include <unordered_map>
#endif

namespace reel::kernels {

#if defined(REEL_CUDA_EMULATED)
namespace {

// Address ranges and nothing behind them: each allocation is its own unreserved mapping
// (MAP_NORESERVE), so it costs no memory and gets an address no other allocation has. The device's
// are inaccessible (PROT_NONE: anything that reads or writes them faults at once); the pinned
// host side's are readable zero pages (a dry run's copies never write them: simt::DryRun), so host
// code reading an offloaded meta value reads zeros, and gigabytes of them cost nothing.
class AddressRanges final : public RawMemory {
 public:
  explicit AddressRanges(int protection) : protection_(protection) {}
  void* allocate(size_t bytes) override {
    void* p = mmap(nullptr, bytes, protection_, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) return nullptr;  // out of address space: the caching allocator reports it
    std::lock_guard<std::mutex> lock(mutex_);
    sizes_[p] = bytes;
    return p;
  }
  void release(void* ptr) override {
    size_t bytes = 0;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      const auto it = sizes_.find(ptr);
      REEL_CHECK(it != sizes_.end(), "meta device: release of an address it never handed out");
      bytes = it->second;
      sizes_.erase(it);
    }
    munmap(ptr, bytes);
  }

 private:
  int protection_;
  std::mutex mutex_;
  std::unordered_map<void*, size_t> sizes_;
};

// Every call goes to cuda:0's backend under a dry run; the memory is the address ranges above.
class MetaBackend final : public DeviceBackend {
 public:
  explicit MetaBackend(DeviceBackend& cuda) : cuda_(cuda) {}
  RawMemory& raw_memory() override { return memory_; }
  void copy_to_host(void* host_dst, const void* device_src, size_t bytes) override {
    simt::DryRun dry;
    cuda_.copy_to_host(host_dst, device_src, bytes);
  }
  void copy_from_host(void* device_dst, const void* host_src, size_t bytes) override {
    simt::DryRun dry;
    cuda_.copy_from_host(device_dst, host_src, bytes);
  }
  void copy_on_device(void* dst, const void* src, size_t bytes) override {
    simt::DryRun dry;
    cuda_.copy_on_device(dst, src, bytes);
  }
  void fill(const Tensor& out, double value) override {
    simt::DryRun dry;
    cuda_.fill(out, value);
  }
  void copy_strided(const Tensor& src, const Tensor& dst) override {
    simt::DryRun dry;
    cuda_.copy_strided(src, dst);
  }
  void random(const Tensor& out, RandomKind kind, uint64_t seed, uint64_t offset) override {
    simt::DryRun dry;
    cuda_.random(out, kind, seed, offset);
  }
  void synchronize() override { cuda_.synchronize(); }
  void* create_event() override { return cuda_.create_event(); }
  void destroy_event(void* event) override { cuda_.destroy_event(event); }
  void record_event(void* event, StreamKind stream) override { cuda_.record_event(event, stream); }
  void wait_event(StreamKind stream, void* event) override { cuda_.wait_event(stream, event); }
  bool query_event(void* event) override { return cuda_.query_event(event); }
  void synchronize_event(void* event) override { cuda_.synchronize_event(event); }
  void synchronize_stream(StreamKind stream) override { cuda_.synchronize_stream(stream); }
  bool query_stream(StreamKind stream) override { return cuda_.query_stream(stream); }
  void copy_to_host_async(void* host_dst, const void* device_src, size_t bytes, StreamKind stream) override {
    simt::DryRun dry;
    cuda_.copy_to_host_async(host_dst, device_src, bytes, stream);
  }
  void copy_from_host_async(void* device_dst, const void* host_src, size_t bytes, StreamKind stream) override {
    simt::DryRun dry;
    cuda_.copy_from_host_async(device_dst, host_src, bytes, stream);
  }
  void* native_stream(StreamKind stream) override { return cuda_.native_stream(stream); }
  // CUDA graphs: cuda:0's capture, of the dry run's launches (nodes that compute nothing); a
  // replay launches them, dry. The profiler records the launch as one record of N nodes.
  void begin_capture() override { cuda_.begin_capture(); }
  void* end_capture(int64_t* nodes) override { return cuda_.end_capture(nodes); }
  void abort_capture() noexcept override { cuda_.abort_capture(); }
  void launch_graph(void* graph) override {
    simt::DryRun dry;
    cuda_.launch_graph(graph);
  }
  void destroy_graph(void* graph) noexcept override { cuda_.destroy_graph(graph); }
  void make_current() override { cuda_.make_current(); }
  RawMemory& pinned_memory() override { return pinned_; }  // core's meta pinned pool (pinned_allocator(meta))
  // cuda:0's clock: its marks are events on the streams, as on cuda:0, so the streams hold the same
  // items (in the emulator a query runs one queued item: an offloaded copy lands at the same point
  // of the step). The times it measures are those of work not done: the predictor prices records.
  profile::DeviceClock* clock() override { return cuda_.clock(); }
  profile::Roof roof() override { return cuda_.roof(); }

 private:
  DeviceBackend& cuda_;
  AddressRanges memory_{PROT_NONE};
  AddressRanges pinned_{PROT_READ};
};

}  // namespace

DeviceBackend* meta_backend() {
  static DeviceBackend* meta = [] () -> DeviceBackend* {
    DeviceBackend* cuda = cuda_backend(0);
    return cuda ? new MetaBackend(*cuda) : nullptr;  // never destroyed, like the CUDA backends
  }();
  return meta;
}

MetaScope::MetaScope() { simt::enter_dry_run(); }
MetaScope::~MetaScope() { simt::leave_dry_run(); }
#else
DeviceBackend* meta_backend() { return nullptr; }
MetaScope::MetaScope() { REEL_FAIL("device meta: this build has no meta device (it needs the emulated CUDA backend)"); }
MetaScope::~MetaScope() = default;
#endif

}  // namespace reel::kernels
