// The CPU's DeviceBackend (core/device_backend.h): 64-byte aligned host memory, fill, strided
// copy with dtype conversion, and Philox random numbers. Its streams exist but run every piece of
// work when it is enqueued, so events are done once recorded; its "pinned" memory (for the pinned
// pool when no CUDA device answers) is ordinary host memory.
#include <cstdlib>
#include <cstring>

#include "kernels/device_backends.h"
#include "core/philox.h"
#include "kernels/cpu/parallel.h"
#include "core/tensor.h"
#include "kernels/cpu/strided_loop.h"

namespace reel {

namespace {

class HostMemory final : public RawMemory {
 public:
  void* allocate(size_t bytes) override {
    return std::aligned_alloc(CachingAllocator::kAlignment,
                              (bytes + CachingAllocator::kAlignment - 1) / CachingAllocator::kAlignment *
                                  CachingAllocator::kAlignment);
  }
  void release(void* ptr) override { std::free(ptr); }
};

template <typename T>
void random_fill(const Tensor& out, RandomKind kind, uint64_t seed, uint64_t offset) {
  T* p = out.data<T>();
  const int64_t n = out.numel();
  kernels::cpu::parallel_for(n, n >= kernels::cpu::kMinParallelElements, [&](int64_t i) {
    p[i] = kind == RandomKind::Uniform ? static_cast<T>(philox_uniform(seed, offset, i))
                                       : static_cast<T>(philox_normal(seed, offset, i));
  });
}

class CpuBackend final : public DeviceBackend {
 public:
  RawMemory& raw_memory() override { return memory_; }
  void copy_to_host(void* dst, const void* src, size_t bytes) override { std::memcpy(dst, src, bytes); }
  void copy_from_host(void* dst, const void* src, size_t bytes) override { std::memcpy(dst, src, bytes); }
  void copy_on_device(void* dst, const void* src, size_t bytes) override { std::memcpy(dst, src, bytes); }

  void fill(const Tensor& out, double value) override {
    dispatch_any(out.dtype(), [&](auto zero) {
      using T = decltype(zero);
      T* p = static_cast<T*>(out.data_ptr());
      const T v = static_cast<T>(value);
      const int64_t n = out.numel();
      // A fill is one store per element: threads pay only from twice a one-pass kernel's threshold.
      const bool parallel = n >= 2 * kernels::cpu::kMinParallelStreamElements;
      kernels::cpu::parallel_for(n, parallel, [&](int64_t i) { p[i] = v; });
    });
  }

  void copy_strided(const Tensor& src, const Tensor& dst) override {
    dispatch_any(src.dtype(), [&](auto s0) {
      dispatch_any(dst.dtype(), [&](auto d0) {
        using S = decltype(s0);
        using D = decltype(d0);
        const S* ps = static_cast<const S*>(src.data_ptr());
        D* pd = static_cast<D*>(dst.data_ptr());
        kernels::cpu::StridedLoop<2> loop(dst.shape(), {&dst.strides(), &src.strides()});
        loop.for_each_run([&](const std::array<int64_t, 2>& off, const std::array<int64_t, 2>& st, int64_t n) {
          D* o = pd + off[0];
          const S* a = ps + off[1];
          if (st[0] == 1 && st[1] == 1)
            for (int64_t i = 0; i < n; ++i) o[i] = static_cast<D>(a[i]);
          else
            for (int64_t i = 0; i < n; ++i) o[i * st[0]] = static_cast<D>(a[i * st[1]]);
        });
      });
    });
  }

  void random(const Tensor& out, RandomKind kind, uint64_t seed, uint64_t offset) override {
    REEL_DISPATCH_FLOATING(out.dtype(), "random", random_fill<scalar_t>(out, kind, seed, offset))
  }

  // Streams and events: everything has run by the time it is enqueued. An event is a token.
  void* create_event() override { return &event_token_; }
  void destroy_event(void*) override {}
  void record_event(void*, StreamKind) override {}
  void wait_event(StreamKind, void*) override {}
  bool query_event(void*) override { return true; }
  void synchronize_event(void*) override {}
  void synchronize_stream(StreamKind) override {}
  bool query_stream(StreamKind) override { return true; }
  void copy_to_host_async(void* dst, const void* src, size_t bytes, StreamKind) override { std::memcpy(dst, src, bytes); }
  void copy_from_host_async(void* dst, const void* src, size_t bytes, StreamKind) override {
    std::memcpy(dst, src, bytes);
  }
  void* native_stream(StreamKind) override { return nullptr; }
  RawMemory& pinned_memory() override { return pinned_; }

  profile::Roof roof() override { return kernels::measure_cpu_roof(); }

 private:
  HostMemory memory_;
  HostMemory pinned_;  // the pinned pool's raw memory when no CUDA device answers
  char event_token_ = 0;
};

}  // namespace

DeviceBackend& kernels::cpu_backend() {
  static CpuBackend* backend = new CpuBackend;  // never destroyed: tensors may outlive main
  return *backend;
}

}  // namespace reel
