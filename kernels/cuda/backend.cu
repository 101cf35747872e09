// kernels/cuda/backend.cu: the CUDA device in core's sense (core/device_backend.h) for cuda:N.
// Raw memory is cudaMalloc/cudaFree (core's caching allocator caches on top and keeps the
// statistics); host<->device copies are cudaMemcpy on the legacy default stream; fill, strided
// copy with dtype conversion and Philox random numbers are kernels.
// Streams (core/stream.h): the compute stream is the legacy default stream (launch.h's stream()),
// where every kernel runs as before (but while a CUDA graph captures on a thread: the capture
// stream, core/graph.h); the copy stream is created on first use with
// cudaStreamNonBlocking, so that it neither waits for the compute stream nor makes it wait (a
// blocking stream would be ordered with the legacy stream implicitly: no overlap, and a missing
// event wait would go unnoticed). Events are cudaEvent_t without timing; asynchronous copies are
// cudaMemcpyAsync; pinned memory is cudaHostAlloc(cudaHostAllocPortable), usable by every device. Uniform numbers are bit-
// identical to the CPU's: both evaluate core/philox.h's host/device functions. Also here: the
// checked-call and device helpers of launch.h. Every point where the host has waited for the
// compute stream (a copy to the host, synchronize(), synchronize_stream(Compute)) also raises the
// kernels' deferred index errors (kernels/cuda/index_errors.h).
// The profiler's clock (profile::DeviceClock) is cudaEvent pairs on the stream timed; in the
// nvcc flavour with libcupti (REEL_CUPTI) it also keeps CUPTI's activity log (kernels/cuda/cupti_log.h),
// whose times the profiler prefers; without it, the log's absence says why.
#include <cstdio>
#include <memory>
#include <mutex>
#include <vector>

#include "kernels/device_backends.h"
#include "core/philox.h"
#include "core/tensor.h"
#include "kernels/cuda/index_errors.h"
#include "kernels/cuda/indexing.h"
#include "kernels/cuda/launch.h"
#if defined(REEL_CUPTI)
#include "kernels/cuda/cupti_log.h"
#endif

namespace reel::kernels::cuda {

// ---- kernels ---------------------------------------------------------------------------------

// out[i] = value. out: (n) contiguous.
template <typename T>
__global__ void __launch_bounds__(kThreads) fill_kernel(T* out, int64_t n, T value) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{blockDim.x} * gridDim.x)
    out[i] = value;
}

// dst[calc(i)[0]] = D(src[calc(i)[1]]): any strides on both sides, any dtype pair.
template <typename D, typename S, bool Contig>
__global__ void __launch_bounds__(kThreads) copy_kernel(D* dst, const S* src, int64_t n, OffsetCalc<2> calc) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{blockDim.x} * gridDim.x) {
    if (Contig) {
      dst[i] = static_cast<D>(src[i]);
    } else {
      int64_t off[2];
      calc.get(i, off);
      dst[off[0]] = static_cast<D>(src[off[1]]);
    }
  }
}

// out[i] = Philox number i of the stream (seed, offset). out: (n) contiguous.
template <typename T, bool Normal>
__global__ void __launch_bounds__(kThreads) random_kernel(T* out, int64_t n, uint64_t seed, uint64_t offset) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{blockDim.x} * gridDim.x)
    out[i] = Normal ? static_cast<T>(philox_normal(seed, offset, static_cast<uint64_t>(i)))
                    : static_cast<T>(philox_uniform(seed, offset, static_cast<uint64_t>(i)));
}

// ---- checked calls, current device -------------------------------------------------------------

void check_cuda(cudaError_t err, const char* what) {
  if (err == cudaSuccess) return;
  cudaGetLastError();  // clear it: the error is reported here, once
  REEL_FAIL("CUDA error in ", what, ": ", cudaGetErrorName(err), ": ", cudaGetErrorString(err));
}

namespace {
thread_local int t_current_device = -1;
}

void set_device(int index) {
  if (t_current_device == index) return;
  REEL_CUDA_CHECK(cudaSetDevice(index));
  t_current_device = index;
}

int sm_count() {
  static std::mutex mutex;
  static std::vector<int> counts;  // by device index, 0 = not asked yet
  int device = 0;
  REEL_CUDA_CHECK(cudaGetDevice(&device));
  std::lock_guard<std::mutex> lock(mutex);
  if (counts.size() <= static_cast<size_t>(device)) counts.resize(device + 1, 0);
  if (counts[device] == 0) {
    int n = 0;
    REEL_CUDA_CHECK(cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, device));
    counts[device] = std::max(n, 1);
  }
  return counts[device];
}

namespace {

// ---- the backend -----------------------------------------------------------------------------

class DeviceMemory final : public RawMemory {
 public:
  explicit DeviceMemory(int index) : index_(index) {}
  void* allocate(size_t bytes) override {
    set_device(index_);
    void* ptr = nullptr;
    const cudaError_t err = cudaMalloc(&ptr, bytes);
    if (err == cudaErrorMemoryAllocation) {  // the caching allocator reports it, with its statistics
      cudaGetLastError();
      return nullptr;
    }
    check_cuda(err, "cudaMalloc");
    return ptr;
  }
  void release(void* ptr) override {
    set_device(index_);
    REEL_CUDA_CHECK(cudaFree(ptr));
  }

 private:
  int index_;
};

// Page-locked host memory, portable: every device copies it asynchronously.
class PinnedHostMemory final : public RawMemory {
 public:
  void* allocate(size_t bytes) override {
    void* ptr = nullptr;
    const cudaError_t err = cudaHostAlloc(&ptr, bytes, cudaHostAllocPortable);
    if (err == cudaErrorMemoryAllocation) {  // the caching allocator reports it, with its statistics
      cudaGetLastError();
      return nullptr;
    }
    check_cuda(err, "cudaHostAlloc");
    return ptr;
  }
  void release(void* ptr) override { REEL_CUDA_CHECK(cudaFreeHost(ptr)); }
};

class CudaBackend final : public DeviceBackend {
 public:
  explicit CudaBackend(int index) : index_(index), memory_(index) {}
  RawMemory& raw_memory() override { return memory_; }

  // ---- streams and events ----
  void* create_event() override {
    set_device(index_);
    cudaEvent_t e = nullptr;
    REEL_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    return e;
  }
  void destroy_event(void* event) override {
    set_device(index_);
    REEL_CUDA_CHECK(cudaEventDestroy(static_cast<cudaEvent_t>(event)));
  }
  void record_event(void* event, StreamKind kind) override {
    set_device(index_);
    REEL_CUDA_CHECK(cudaEventRecord(static_cast<cudaEvent_t>(event), stream_of(kind)));
  }
  void wait_event(StreamKind kind, void* event) override {
    set_device(index_);
    REEL_CUDA_CHECK(cudaStreamWaitEvent(stream_of(kind), static_cast<cudaEvent_t>(event), 0));
  }
  bool query_event(void* event) override {
    set_device(index_);
    return ready(cudaEventQuery(static_cast<cudaEvent_t>(event)), "cudaEventQuery");
  }
  void synchronize_event(void* event) override {
    set_device(index_);
    REEL_CUDA_CHECK(cudaEventSynchronize(static_cast<cudaEvent_t>(event)));
  }
  void synchronize_stream(StreamKind kind) override {
    set_device(index_);
    REEL_CUDA_CHECK(cudaStreamSynchronize(stream_of(kind)));
    if (kind == StreamKind::Compute) check_index_errors(index_);  // the kernels' deferred index errors
  }
  bool query_stream(StreamKind kind) override {
    set_device(index_);
    return ready(cudaStreamQuery(stream_of(kind)), "cudaStreamQuery");
  }
  void copy_to_host_async(void* host_dst, const void* device_src, size_t bytes, StreamKind kind) override {
    if (bytes == 0) return;
    set_device(index_);
    REEL_CUDA_CHECK(cudaMemcpyAsync(host_dst, device_src, bytes, cudaMemcpyDeviceToHost, stream_of(kind)));
  }
  void copy_from_host_async(void* device_dst, const void* host_src, size_t bytes, StreamKind kind) override {
    if (bytes == 0) return;
    set_device(index_);
    REEL_CUDA_CHECK(cudaMemcpyAsync(device_dst, host_src, bytes, cudaMemcpyHostToDevice, stream_of(kind)));
  }
  void* native_stream(StreamKind kind) override { return stream_of(kind); }
  void make_current() override { set_device(index_); }
  RawMemory& pinned_memory() override {
    static PinnedHostMemory* pinned = new PinnedHostMemory;  // one for every device, never destroyed
    return *pinned;
  }

  void copy_to_host(void* host_dst, const void* device_src, size_t bytes) override {
    if (bytes == 0) return;
    set_device(index_);
    REEL_CUDA_CHECK(cudaMemcpy(host_dst, device_src, bytes, cudaMemcpyDeviceToHost));
    check_index_errors(index_);  // the host waited for the compute stream: the deferred index errors
  }
  void copy_from_host(void* device_dst, const void* host_src, size_t bytes) override {
    if (bytes == 0) return;
    set_device(index_);
    REEL_CUDA_CHECK(cudaMemcpy(device_dst, host_src, bytes, cudaMemcpyHostToDevice));
  }
  void copy_on_device(void* dst, const void* src, size_t bytes) override {
    if (bytes == 0) return;
    set_device(index_);
    // On the compute stream, as a kernel would be: captured into a CUDA graph while one captures.
    REEL_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream()));
  }

  void fill(const Tensor& out, double value) override {
    const int64_t n = out.numel();
    if (n == 0) return;
    set_device(index_);
    dispatch_any(out.dtype(), [&](auto zero) {
      using T = decltype(zero);
      launch("fill_kernel", fill_kernel<T>, grid_for(n, kThreads), kThreads, 0, static_cast<T*>(out.data_ptr()),
             n, static_cast<T>(value));
    });
  }

  void copy_strided(const Tensor& src, const Tensor& dst) override {
    REEL_CHECK(src.shape() == dst.shape(), "copy_strided: shapes ", src.shape(), " and ", dst.shape(), " differ");
    const int64_t n = dst.numel();
    if (n == 0) return;
    set_device(index_);
    OffsetCalc<2> calc;
    if (!make_offset_calc<2>(dst.shape(), {&dst.strides(), &src.strides()}, calc)) {
      // More than kMaxDims dims that do not merge: copy slice by slice along the outermost dim.
      for (int64_t i = 0; i < dst.size(0); ++i)
        copy_strided(untracked::select(src, 0, i), untracked::select(dst, 0, i));
      return;
    }
    if (calc.contiguous() && src.dtype() == dst.dtype()) {
      copy_on_device(dst.data_ptr(), src.data_ptr(), dst.nbytes());
      return;
    }
    dispatch_any(src.dtype(), [&](auto s0) {
      dispatch_any(dst.dtype(), [&](auto d0) {
        using S = decltype(s0);
        using D = decltype(d0);
        D* pd = static_cast<D*>(dst.data_ptr());
        const S* ps = static_cast<const S*>(src.data_ptr());
        if (calc.contiguous())
          launch("copy_kernel", copy_kernel<D, S, true>, grid_for(n, kThreads), kThreads, 0, pd, ps, n, calc);
        else
          launch("copy_kernel", copy_kernel<D, S, false>, grid_for(n, kThreads), kThreads, 0, pd, ps, n, calc);
      });
    });
  }

  void random(const Tensor& out, RandomKind kind, uint64_t seed, uint64_t offset) override {
    const int64_t n = out.numel();
    if (n == 0) return;
    set_device(index_);
    REEL_DISPATCH_FLOATING(out.dtype(), "random", {
      scalar_t* p = out.data<scalar_t>();
      if (kind == RandomKind::Normal)
        launch("random_kernel", random_kernel<scalar_t, true>, grid_for(n, kThreads), kThreads, 0, p, n, seed, offset);
      else
        launch("random_kernel", random_kernel<scalar_t, false>, grid_for(n, kThreads), kThreads, 0, p, n, seed,
               offset);
    })
  }

  // ---- CUDA graphs (core/graph.h): captured on a blocking stream of this backend, made on first
  // use, in ThreadLocal mode (another thread's cudaMalloc is allowed, this thread's is refused);
  // legacy-stream work during the capture breaks it (cudaErrorStreamCaptureImplicit). The graph
  // is launched on the compute stream, in order with the kernels around it.
  void begin_capture() override {
    set_device(index_);
    REEL_CHECK(!capture_stream(), "CudaGraph: this thread is capturing a CUDA graph already");
    std::call_once(capture_stream_once_, [this] {
      REEL_CUDA_CHECK(cudaStreamCreateWithFlags(&capture_stream_, cudaStreamDefault));
    });
    REEL_CUDA_CHECK(cudaStreamBeginCapture(capture_stream_, cudaStreamCaptureModeThreadLocal));
    capture_stream() = capture_stream_;
  }
  void* end_capture(int64_t* nodes) override {
    set_device(index_);
    capture_stream() = nullptr;
    cudaGraph_t graph = nullptr;
    REEL_CUDA_CHECK(cudaStreamEndCapture(capture_stream_, &graph));
    size_t count = 0;
    cudaGraphExec_t exec = nullptr;
    const cudaError_t counted = cudaGraphGetNodes(graph, nullptr, &count);
    const cudaError_t made = counted ? counted : cudaGraphInstantiate(&exec, graph, 0);
    cudaGraphDestroy(graph);  // the exec holds what it runs
    check_cuda(made, "cudaGraphInstantiate");
    *nodes = static_cast<int64_t>(count);
    return exec;
  }
  void abort_capture() noexcept override {
    capture_stream() = nullptr;
    cudaGraph_t graph = nullptr;
    if (cudaStreamEndCapture(capture_stream_, &graph) == cudaSuccess && graph) cudaGraphDestroy(graph);
    cudaGetLastError();  // the refusal is reported by the error that got us here
  }
  void launch_graph(void* graph) override {
    set_device(index_);
    REEL_CUDA_CHECK(cudaGraphLaunch(static_cast<cudaGraphExec_t>(graph), stream()));
  }
  void destroy_graph(void* graph) noexcept override {
    if (graph) cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(graph));
  }

  void synchronize() override {
    set_device(index_);
    REEL_CUDA_CHECK(cudaDeviceSynchronize());
    check_index_errors(index_);  // the kernels' deferred index errors (kernels/cuda/index_errors.h)
  }

  profile::DeviceClock* clock() override { return &clock_; }

  profile::Roof roof() override {
#if defined(REEL_CUDA_EMULATED)
    // The emulator runs the kernels on the host's cores: the host's roof is the honest bound.
    profile::Roof r = measure_cpu_roof();
    r.source = "cuda emulated on the host: the host's roof (" + r.source + ")";
    return r;
#else
    set_device(index_);
    int sms = 0, clock_khz = 0, mem_clock_khz = 0, bus_bits = 0, major = 0, minor = 0;
    REEL_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, index_));
    REEL_CUDA_CHECK(cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, index_));
    REEL_CUDA_CHECK(cudaDeviceGetAttribute(&mem_clock_khz, cudaDevAttrMemoryClockRate, index_));
    REEL_CUDA_CHECK(cudaDeviceGetAttribute(&bus_bits, cudaDevAttrGlobalMemoryBusWidth, index_));
    REEL_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, index_));
    REEL_CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, index_));
    // FP32 lanes per SM: 64 on sm_60 and sm_80 (A100), 128 on every other SM since Maxwell.
    const int lanes = (major == 6 && minor == 0) || (major == 8 && minor == 0) ? 64 : 128;
    profile::Roof r;
    r.bytes_per_s = 2.0 * mem_clock_khz * 1e3 * bus_bits / 8;  // double data rate
    r.flops_per_s = 2.0 * sms * lanes * clock_khz * 1e3;       // an FMA is 2 FLOPs
    // Dense 16-bit tensor-core FLOPs per SM per clock with f32 accumulation (the GEMM's compute
    // type): 1024 on sm_70 and sm_75 (f16 only), 2048 on sm_80 (A100: 312 TFLOP/s), 1024 on sm_86
    // and sm_89, 4096 on sm_90 (H100/H200: 989 TFLOP/s). f64: half the f32 rate on the data-centre
    // parts (sm_60, sm_70, sm_80, sm_90), 1/32 elsewhere.
    const int tensor_flops = major == 9 ? 4096 : (major == 8 && minor == 0) ? 2048 : major >= 7 ? 1024 : 0;
    const bool bf16_cores = major >= 8;
    const bool full_f64 = (major == 6 && minor == 0) || (major >= 7 && minor == 0);
    r.flops_by_dtype.emplace_back(DType::f64, r.flops_per_s / (full_f64 ? 2 : 32));
    if (tensor_flops) {
      const double rate = static_cast<double>(tensor_flops) * sms * clock_khz * 1e3;
      r.flops_by_dtype.emplace_back(DType::f16, rate);
      if (bf16_cores) r.flops_by_dtype.emplace_back(DType::bf16, rate);
    }
    r.source = "device properties: " + std::to_string(mem_clock_khz / 1000) + " MHz memory x " +
               std::to_string(bus_bits) + " bit, " + std::to_string(sms) + " SMs x " + std::to_string(lanes) +
               " FP32 lanes x " + std::to_string(clock_khz / 1000) + " MHz, " + std::to_string(tensor_flops) +
               " 16-bit tensor-core FLOP/clock/SM (sm_" + std::to_string(major * 10 + minor) + ")";
    return r;
#endif
  }

 private:
  // Marks are events recorded on the stream, pooled: a profiled step records thousands.
  class EventClock final : public profile::DeviceClock {
   public:
    EventClock(CudaBackend* backend, int index) : backend_(backend), index_(index) {}
    bool emulated() const override {
#if defined(REEL_CUDA_EMULATED)
      return true;
#else
      return false;
#endif
    }
    int64_t mark(StreamKind kind) override {
      set_device(index_);
      if (used_ == events_.size()) {
        cudaEvent_t e;
        REEL_CUDA_CHECK(cudaEventCreate(&e));
        events_.push_back(e);
      }
      REEL_CUDA_CHECK(cudaEventRecord(events_[used_], backend_->stream_of(kind)));
      return static_cast<int64_t>(used_++);
    }
    double elapsed_ns(int64_t from, int64_t to) override {
      // Both: marks of the compute and the copy stream are not ordered with each other.
      REEL_CUDA_CHECK(cudaEventSynchronize(events_[static_cast<size_t>(from)]));
      REEL_CUDA_CHECK(cudaEventSynchronize(events_[static_cast<size_t>(to)]));
      float ms = 0;
      REEL_CUDA_CHECK(cudaEventElapsedTime(&ms, events_[static_cast<size_t>(from)], events_[static_cast<size_t>(to)]));
      return static_cast<double>(ms) * 1e6;
    }
    void reset() override {
      used_ = 0;
#if defined(REEL_CUPTI)
      cupti_log::reset();
#endif
    }
#if defined(REEL_CUPTI)
    void begin_run(uint64_t run) override { cupti_log::begin_run(run); }
    void end_run() override { cupti_log::end_run(); }
    profile::ActivityLog take_activity() override { return cupti_log::take(); }
#elif !defined(REEL_CUDA_EMULATED)
    profile::ActivityLog take_activity() override {
      profile::ActivityLog log;
      log.unavailable = "reel was built without it (libcupti not found, or REEL_CUPTI=OFF)";
      return log;
    }
#endif

   private:
    CudaBackend* backend_;  // its streams
    int index_;
    std::vector<cudaEvent_t> events_;  // never destroyed, like the backend
    size_t used_ = 0;
  };

  // The compute stream is launch.h's stream() (the legacy default stream); the copy stream is made
  // on first use, on this device.
  cudaStream_t stream_of(StreamKind kind) {
    if (kind == StreamKind::Compute) return stream();
    std::call_once(copy_stream_once_, [this] {
      set_device(index_);
      REEL_CUDA_CHECK(cudaStreamCreateWithFlags(&copy_stream_, cudaStreamNonBlocking));
    });
    return copy_stream_;
  }
  // cudaEventQuery / cudaStreamQuery: cudaErrorNotReady is an answer, not an error.
  static bool ready(cudaError_t err, const char* what) {
    if (err == cudaErrorNotReady) {
      cudaGetLastError();  // clear it, so that no later check reports it
      return false;
    }
    check_cuda(err, what);
    return true;
  }

  int index_;
  DeviceMemory memory_;
  EventClock clock_{this, index_};
  std::once_flag copy_stream_once_;
  cudaStream_t copy_stream_ = nullptr;  // never destroyed, like the backend
  std::once_flag capture_stream_once_;
  cudaStream_t capture_stream_ = nullptr;  // CUDA graph captures (core/graph.h); never destroyed
};

}  // namespace
}  // namespace reel::kernels::cuda

namespace reel::kernels {

// cudaGetDeviceCount fails (cudaErrorInsufficientDriver or cudaErrorNoDevice) on a machine
// without a GPU and leaves the count unwritten: that is zero devices, not an error.
int cuda_backend_device_count() {
  static const int count = [] {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
      cudaGetLastError();
      n = 0;
    }
    return n;
  }();
  return count;
}

DeviceBackend* cuda_backend(int index) {
  const int count = cuda_backend_device_count();
  if (index < 0 || index >= count) return nullptr;
  static std::mutex mutex;
  static std::vector<DeviceBackend*>* backends = new std::vector<DeviceBackend*>(count, nullptr);  // never destroyed
  std::lock_guard<std::mutex> lock(mutex);
  DeviceBackend*& b = (*backends)[index];
  if (!b) {
    b = new cuda::CudaBackend(index);
#if defined(REEL_CUDA_EMULATED)
    // The emulator sees every piece of work issued (a library call's too): each profiled record
    // counts its launches (core/profile.h). An nvcc build counts one a record.
    profile::set_launch_counter(&simt::work_issued);
#endif
  }
  return b;
}

}  // namespace reel::kernels
