// kernels/simt/simt.h: the one header every kernels/cuda/*.cu includes, so that the same CUDA
// source builds both ways:
//   nvcc                 real CUDA: <cuda_runtime.h>, simt::launch(...) is kernel<<<...>>>(...).
//   g++ -DSIMT_EMULATE   CPU emulation: every CUDA thread is a fiber, __syncthreads() and the
//                        *_sync intrinsics switch fibers, the runtime API works on host memory,
//                        and work on a created stream is queued until an event wait, a
//                        synchronisation or a query runs it. SIMT_CHECK=race,uninit (or
//                        simt::set_check) fails a launch with a race or a read of unwritten
//                        shared memory, naming lines and threads. Needs no CUDA toolkit header.
//                        Engine: simt_runtime.cpp, simt_api.cpp, simt_streams.cpp, simt_graphs.cpp,
//                        simt_check.cpp.
// Rules for kernel authors and what cannot be emulated: kernels/simt/README.md.
#pragma once

#if !defined(SIMT_EMULATE)
// ================================ real CUDA ======================================================
#include <cuda_runtime.h>

#include <utility>

// Dynamic shared memory (the launch's shmem bytes) as a T*. The emulation cannot give meaning
// to `extern __shared__`, so kernels name dynamic shared memory through this macro only.
#define SIMT_DYNAMIC_SHARED(T, name)                                 \
  extern __shared__ __align__(16) unsigned char simt_dynamic_smem_[]; \
  T* name = reinterpret_cast<T*>(simt_dynamic_smem_)

#include <string>

namespace simt {
// The emulator's SIMT_CHECK (race and uninitialised-memory checks) does not exist on a GPU: these
// keep code that switches it on compiling there (use compute-sanitizer instead).
constexpr unsigned check_race = 1, check_uninit = 2;
inline void set_check(unsigned) {}
inline unsigned check() { return 0; }
inline bool check_available() { return false; }
class CheckScope {
 public:
  explicit CheckScope(unsigned) {}
};
inline std::string last_error_detail() { return {}; }
}  // namespace simt

#if defined(__CUDACC__)
namespace simt {
// Launches kernel<<<grid, block, shmem, stream>>>(args...); returns the launch's error (and, like
// cudaGetLastError, clears it).
template <typename... KArgs, typename... Args>
inline cudaError_t launch(void (*kernel)(KArgs...), dim3 grid, dim3 block, size_t shmem,
                          cudaStream_t stream, Args&&... args) {
  static_assert(sizeof...(KArgs) == sizeof...(Args), "simt::launch: wrong number of kernel arguments");
  kernel<<<grid, block, shmem, stream>>>(static_cast<KArgs>(std::forward<Args>(args))...);
  return cudaGetLastError();
}
}  // namespace simt
#endif  // __CUDACC__

#else
// ================================ CPU emulation ==================================================
// Standard headers first: the keyword macros below must not reach into them. <math.h> after
// <cmath> makes expf, tanhf, fmaxf, isnan, ... visible unqualified, as in CUDA device code.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <math.h>
#include <memory>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>

// ---- keywords ---------------------------------------------------------------------------------
#define __global__
#define __device__
#define __host__
#define __constant__
#define __forceinline__ inline __attribute__((always_inline))
#define __launch_bounds__(...)
#define __align__(n) __attribute__((aligned(n)))
// A worker thread runs one block at a time and fibers never move between threads, so a
// thread_local static is exactly "one copy per block". __restrict__ is a g++ keyword already.
// __noinline__ stays undefined on purpose: libstdc++ spells __attribute__((__noinline__)).
#define __shared__ static thread_local

// ---- vector types (own declarations, same layout and alignment as CUDA's) ---------------------
struct alignas(8) int2 { int x, y; };
struct int3 { int x, y, z; };
struct alignas(16) int4 { int x, y, z, w; };
struct alignas(8) uint2 { unsigned x, y; };
struct uint3 { unsigned x, y, z; };
struct alignas(16) uint4 { unsigned x, y, z, w; };
struct alignas(8) float2 { float x, y; };
struct float3 { float x, y, z; };
struct alignas(16) float4 { float x, y, z, w; };
struct alignas(16) double2 { double x, y; };
inline int2 make_int2(int x, int y) { return {x, y}; }
inline int3 make_int3(int x, int y, int z) { return {x, y, z}; }
inline int4 make_int4(int x, int y, int z, int w) { return {x, y, z, w}; }
inline uint2 make_uint2(unsigned x, unsigned y) { return {x, y}; }
inline uint3 make_uint3(unsigned x, unsigned y, unsigned z) { return {x, y, z}; }
inline uint4 make_uint4(unsigned x, unsigned y, unsigned z, unsigned w) { return {x, y, z, w}; }
inline float2 make_float2(float x, float y) { return {x, y}; }
inline float3 make_float3(float x, float y, float z) { return {x, y, z}; }
inline float4 make_float4(float x, float y, float z, float w) { return {x, y, z, w}; }
inline double2 make_double2(double x, double y) { return {x, y}; }

struct dim3 {
  unsigned x, y, z;
  constexpr dim3(unsigned vx = 1, unsigned vy = 1, unsigned vz = 1) : x(vx), y(vy), z(vz) {}
  constexpr dim3(uint3 v) : x(v.x), y(v.y), z(v.z) {}
  constexpr operator uint3() const { return {x, y, z}; }
};

constexpr int warpSize = 32;

// ---- runtime API subset (host memory stands in for device memory; see simt_api.cpp) -----------
enum cudaError_t {
  cudaSuccess = 0,
  cudaErrorInvalidValue = 1,
  cudaErrorMemoryAllocation = 2,
  cudaErrorInitializationError = 3,
  cudaErrorInvalidConfiguration = 9,
  cudaErrorInvalidMemcpyDirection = 21,
  cudaErrorInsufficientDriver = 35,
  cudaErrorInvalidDeviceFunction = 98,
  cudaErrorNoDevice = 100,
  cudaErrorInvalidDevice = 101,
  cudaErrorInvalidResourceHandle = 400,
  cudaErrorIllegalState = 401,
  cudaErrorNotReady = 600,
  cudaErrorIllegalAddress = 700,
  cudaErrorLaunchOutOfResources = 701,
  cudaErrorLaunchFailure = 719,
  cudaErrorNotPermitted = 800,
  cudaErrorNotSupported = 801,
  // Stream capture (simt_graphs.cpp; the rules are in kernels/simt/README.md, "Graphs").
  cudaErrorStreamCaptureUnsupported = 900,
  cudaErrorStreamCaptureInvalidated = 901,
  cudaErrorStreamCaptureUnmatched = 903,
  cudaErrorStreamCaptureIsolation = 905,
  cudaErrorStreamCaptureImplicit = 906,
  cudaErrorCapturedEvent = 907,
  cudaErrorStreamCaptureWrongThread = 908,
  cudaErrorUnknown = 999,
};
typedef cudaError_t cudaError;
enum cudaMemcpyKind {
  cudaMemcpyHostToHost = 0,
  cudaMemcpyHostToDevice = 1,
  cudaMemcpyDeviceToHost = 2,
  cudaMemcpyDeviceToDevice = 3,
  cudaMemcpyDefault = 4,
};
enum cudaFuncAttribute {
  cudaFuncAttributeMaxDynamicSharedMemorySize = 8,
  cudaFuncAttributePreferredSharedMemoryCarveout = 9,
};
enum cudaDeviceAttr {
  cudaDevAttrMaxThreadsPerBlock = 1,
  cudaDevAttrMaxBlockDimX = 2,
  cudaDevAttrMaxGridDimX = 5,
  cudaDevAttrMaxSharedMemoryPerBlock = 8,
  cudaDevAttrWarpSize = 10,
  cudaDevAttrMultiProcessorCount = 16,
  cudaDevAttrL2CacheSize = 38,
  cudaDevAttrMaxThreadsPerMultiProcessor = 39,
  cudaDevAttrComputeCapabilityMajor = 75,
  cudaDevAttrComputeCapabilityMinor = 76,
  cudaDevAttrMaxSharedMemoryPerMultiprocessor = 81,
  cudaDevAttrMaxSharedMemoryPerBlockOptin = 97,
};
// The fields of CUDA's cudaDeviceProp that the emulation fills in (same names and types).
struct cudaDeviceProp {
  char name[256];
  size_t totalGlobalMem;
  size_t sharedMemPerBlock;
  int regsPerBlock;
  int warpSize;
  size_t memPitch;
  int maxThreadsPerBlock;
  int maxThreadsDim[3];
  int maxGridSize[3];
  size_t totalConstMem;
  int major;
  int minor;
  int multiProcessorCount;
  int integrated;
  int concurrentKernels;
  int unifiedAddressing;
  int l2CacheSize;
  int maxThreadsPerMultiProcessor;
  size_t sharedMemPerMultiprocessor;
  int regsPerMultiprocessor;
  int managedMemory;
  size_t sharedMemPerBlockOptin;
  int maxBlocksPerMultiProcessor;
};
typedef struct CUstream_st* cudaStream_t;
typedef struct CUevent_st* cudaEvent_t;
#define cudaStreamLegacy ((cudaStream_t)0x1)
#define cudaStreamPerThread ((cudaStream_t)0x2)
#define cudaStreamDefault 0x00
#define cudaStreamNonBlocking 0x01
#define cudaEventDefault 0x00
#define cudaEventBlockingSync 0x01
#define cudaEventDisableTiming 0x02
typedef struct CUgraph_st* cudaGraph_t;
typedef struct CUgraphExec_st* cudaGraphExec_t;
typedef struct CUgraphNode_st* cudaGraphNode_t;
enum cudaStreamCaptureMode {
  cudaStreamCaptureModeGlobal = 0,
  cudaStreamCaptureModeThreadLocal = 1,
  cudaStreamCaptureModeRelaxed = 2,
};
enum cudaStreamCaptureStatus {
  cudaStreamCaptureStatusNone = 0,
  cudaStreamCaptureStatusActive = 1,
  cudaStreamCaptureStatusInvalidated = 2,
};
enum cudaGraphNodeType {
  cudaGraphNodeTypeKernel = 0x00,
  cudaGraphNodeTypeMemcpy = 0x01,
  cudaGraphNodeTypeMemset = 0x02,
  cudaGraphNodeTypeHost = 0x03,
  cudaGraphNodeTypeGraph = 0x04,
  cudaGraphNodeTypeEmpty = 0x05,
};
#define cudaGraphInstantiateFlagAutoFreeOnLaunch 1
#define cudaHostAllocDefault 0x00
#define cudaHostAllocPortable 0x01
#define cudaHostAllocMapped 0x02
#define cudaHostAllocWriteCombined 0x04

namespace simt {
namespace detail {
cudaError_t record_error(cudaError_t error);  // becomes the thread's last error unless cudaSuccess
}  // namespace detail
}  // namespace simt

const char* cudaGetErrorString(cudaError_t error);
const char* cudaGetErrorName(cudaError_t error);
cudaError_t cudaGetLastError();    // returns and clears this host thread's last error
cudaError_t cudaPeekAtLastError(); // returns it without clearing

cudaError_t cudaMalloc(void** ptr, size_t bytes);  // 256-byte aligned, like cudaMalloc
template <class T>
inline cudaError_t cudaMalloc(T** ptr, size_t bytes) { return cudaMalloc(reinterpret_cast<void**>(ptr), bytes); }
cudaError_t cudaFree(void* ptr);
cudaError_t cudaMallocHost(void** ptr, size_t bytes);
template <class T>
inline cudaError_t cudaMallocHost(T** ptr, size_t bytes) { return cudaMallocHost(reinterpret_cast<void**>(ptr), bytes); }
cudaError_t cudaHostAlloc(void** ptr, size_t bytes, unsigned flags);  // host memory: "pinned" in name only
template <class T>
inline cudaError_t cudaHostAlloc(T** ptr, size_t bytes, unsigned flags) {
  return cudaHostAlloc(reinterpret_cast<void**>(ptr), bytes, flags);
}
cudaError_t cudaFreeHost(void* ptr);
cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind);
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind,
                            cudaStream_t stream = nullptr);
cudaError_t cudaMemset(void* ptr, int value, size_t bytes);
cudaError_t cudaMemsetAsync(void* ptr, int value, size_t bytes, cudaStream_t stream = nullptr);
cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total_bytes);
// __device__ and __constant__ variables are ordinary host globals here.
template <class T>
inline cudaError_t cudaMemcpyToSymbol(T& symbol, const void* src, size_t bytes, size_t offset = 0,
                                      cudaMemcpyKind kind = cudaMemcpyHostToDevice) {
  if (offset + bytes > sizeof(T)) return simt::detail::record_error(cudaErrorInvalidValue);
  return cudaMemcpy(reinterpret_cast<char*>(&symbol) + offset, src, bytes, kind);
}
template <class T>
inline cudaError_t cudaMemcpyFromSymbol(void* dst, const T& symbol, size_t bytes, size_t offset = 0,
                                        cudaMemcpyKind kind = cudaMemcpyDeviceToHost) {
  if (offset + bytes > sizeof(T)) return simt::detail::record_error(cudaErrorInvalidValue);
  return cudaMemcpy(dst, reinterpret_cast<const char*>(&symbol) + offset, bytes, kind);
}

cudaError_t cudaDeviceSynchronize();  // runs every stream's queued work
cudaError_t cudaDeviceReset();
cudaError_t cudaGetDeviceCount(int* count);  // 1
cudaError_t cudaSetDevice(int device);       // only device 0
cudaError_t cudaGetDevice(int* device);
cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device);
cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int device);

// Streams and events (simt_streams.cpp; the model is in kernels/simt/README.md): work on a
// created stream is queued, and runs only when an event wait, a synchronisation or a query needs
// it; the legacy default stream (null) runs its work at once.
cudaError_t cudaStreamCreate(cudaStream_t* stream);
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned flags);
cudaError_t cudaStreamDestroy(cudaStream_t stream);
cudaError_t cudaStreamSynchronize(cudaStream_t stream);
cudaError_t cudaStreamQuery(cudaStream_t stream);
cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned flags = 0);

cudaError_t cudaEventCreate(cudaEvent_t* event);
cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned flags);
cudaError_t cudaEventDestroy(cudaEvent_t event);
cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream = nullptr);  // host clock when it runs
cudaError_t cudaEventSynchronize(cudaEvent_t event);
cudaError_t cudaEventQuery(cudaEvent_t event);
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end);

// Stream capture and graphs (simt_graphs.cpp; the rules and their errors: kernels/simt/README.md,
// "Graphs"). While a created stream captures, its work becomes the nodes of a graph instead of
// running; launching the graph's exec runs them, in capture order, with the captured arguments.
cudaError_t cudaStreamBeginCapture(cudaStream_t stream, cudaStreamCaptureMode mode);
cudaError_t cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t* graph);
cudaError_t cudaStreamIsCapturing(cudaStream_t stream, cudaStreamCaptureStatus* status);
cudaError_t cudaGraphInstantiate(cudaGraphExec_t* exec, cudaGraph_t graph, unsigned long long flags = 0);
cudaError_t cudaGraphInstantiateWithFlags(cudaGraphExec_t* exec, cudaGraph_t graph, unsigned long long flags = 0);
cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t stream);
cudaError_t cudaGraphDestroy(cudaGraph_t graph);
cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec);
// nodes null: *count gets the node count; else up to *count nodes are written and *count is the
// number written (as CUDA's).
cudaError_t cudaGraphGetNodes(cudaGraph_t graph, cudaGraphNode_t* nodes, size_t* count);
cudaError_t cudaGraphNodeGetType(cudaGraphNode_t node, cudaGraphNodeType* type);

// Dynamic shared memory above 48 KiB needs this opt-in, as on a GPU (up to 227 KiB).
cudaError_t cudaFuncSetAttribute(const void* kernel, cudaFuncAttribute attr, int value);
template <class T>
inline cudaError_t cudaFuncSetAttribute(T* kernel, cudaFuncAttribute attr, int value) {
  return cudaFuncSetAttribute(reinterpret_cast<const void*>(kernel), attr, value);
}

// ---- the emulator's interface (simt_runtime.cpp) -----------------------------------------------
namespace simt {
// The order in which the fibers of a block are resumed between two barriers. A missing
// __syncthreads() often shows in one order only, so tests run more than one.
enum class Order { forward, reverse, shuffle };
void set_order(Order order);  // overrides SIMT_ORDER for later launches of this process
Order order();
unsigned workers();  // SIMT_WORKERS: OS threads that run blocks (default: hardware threads)

// Checks of every launch (README.md, "Race and uninitialised-memory checks"): SIMT_CHECK=race,uninit
// at start-up, or set_check / CheckScope in code. A launch that fails a check returns
// cudaErrorLaunchFailure, and last_error_detail() says where (lines, threads, address).
constexpr unsigned check_race = 1;    // conflicting accesses of two threads between barriers
constexpr unsigned check_uninit = 2;  // reads of shared memory no thread of the block has written
void set_check(unsigned checks);      // overrides SIMT_CHECK for later launches of this process
unsigned check();
bool check_available();  // false where the .cu files are not instrumented (ASan builds)
// Switches checks on for a scope (tests), and back to what they were.
class CheckScope {
 public:
  explicit CheckScope(unsigned checks) : saved_(check()) { set_check(checks); }
  ~CheckScope() { set_check(saved_); }
  CheckScope(const CheckScope&) = delete;
  CheckScope& operator=(const CheckScope&) = delete;

 private:
  unsigned saved_;
};
// The report of the last launch that failed a check ("" after a launch that did not), any thread.
std::string last_error_detail();

// A dry run, the meta device's way of running CUDA code (kernels/meta.h): while a DryRun lives on
// this thread, the API checks what it checks (launch sizes, copy directions, cuBLAS and cuDNN
// arguments and workspace sizes) and orders work on streams as ever, but touches no device memory:
// a launch runs no thread, cuBLAS and cuDNN compute nothing, copies and memsets move nothing, and a
// synchronous copy to the host writes zeros there (the placeholder of a value never computed; an
// asynchronous one, into pinned memory, writes nothing). The pointers may name memory never backed.
bool dry_run();
// The device work this host thread has issued so far: kernel launches (dry ones too), cuBLAS and
// cuDNN calls, copies and memsets, graph launches; what a capture of the same calls would make
// nodes of (each graph launch one). The profiler counts a kernel entry point's launches with it
// (core/profile.h, set_launch_counter).
int64_t work_issued();
namespace detail {
void count_work();  // one more piece of work issued by this thread
}  // namespace detail
void enter_dry_run();  // DryRun's constructor and destructor, for a scope that cannot name simt.h
void leave_dry_run();
class DryRun {
 public:
  DryRun() { enter_dry_run(); }
  ~DryRun() { leave_dry_run(); }
  DryRun(const DryRun&) = delete;
  DryRun& operator=(const DryRun&) = delete;
};

namespace detail {
// Set by the scheduler before it resumes a fiber; fibers never migrate, so plain TLS suffices.
inline thread_local uint3 t_threadIdx{0, 0, 0};
inline thread_local uint3 t_blockIdx{0, 0, 0};
inline thread_local dim3 t_blockDim;
inline thread_local dim3 t_gridDim;

// One exchange round of a warp: the values the lanes published and the lanes that took part.
struct WarpRound {
  uint64_t value[32];
  unsigned active;
};
// Waits until every thread of the block has arrived; returns how many passed a non-zero predicate.
int block_barrier(int predicate, const char* file, int line);
void warp_barrier(unsigned mask, const char* file, int line);
// Publishes this lane's value, waits for the lanes of `mask`, returns the round's values.
const WarpRound& warp_exchange(unsigned mask, uint64_t value, const char* file, int line);
void* dynamic_shared();
// A shuffle read lane src, which is not in the round's active lanes: a report under SIMT_CHECK=race.
void shfl_inactive(unsigned src, unsigned active, const char* file, int line);
inline void shfl_source(const WarpRound& r, unsigned src, const char* file, int line) {
  if (!(r.active >> src & 1u)) shfl_inactive(src, r.active, file, line);
}
[[noreturn]] void trap(const char* what, const char* file, int line);

using Thunk = void (*)(const void* closure);
// cudaSuccess, or the error an impossible launch gets (checked when it is enqueued).
cudaError_t check_grid(const void* kernel, dim3 grid, dim3 block, size_t shmem);
// Checks, then runs the grid now.
cudaError_t run_grid(const void* kernel, dim3 grid, dim3 block, size_t shmem, Thunk thunk,
                     const void* closure);

// Streams (simt_streams.cpp). A deferred stream is one made by cudaStreamCreate*: its work waits
// in a queue. enqueue() appends work to one. before_host_work(stream) comes before work that runs
// at once: on the legacy stream it runs what blocking streams have queued (CUDA orders them with
// the legacy stream); on a created stream (a cuBLAS or cuDNN call there) it runs that stream's
// queue, after which running the call at once is a schedule a GPU could take.
bool is_deferred(cudaStream_t stream);
cudaError_t enqueue(cudaStream_t stream, std::function<void()> work,
                    cudaGraphNodeType node = cudaGraphNodeTypeKernel);  // node: its type if captured
void before_host_work(cudaStream_t stream);
// Capture (simt_graphs.cpp). A launch under DryRun computes nothing but is still a node of a
// capture, and legacy-stream work still breaks one: cudaSuccess or the capture error.
cudaError_t dry_launch(cudaStream_t stream);
// Legacy-stream work while a blocking stream captures: cudaErrorStreamCaptureImplicit (and the
// capture is invalidated), else cudaSuccess. Cheap when nothing captures.
cudaError_t legacy_work_check();
// A cuBLAS or cuDNN call's computation on `stream`: recorded as a node while the stream captures
// (one that computes nothing under DryRun), else run now after the stream's queue
// (before_host_work; not run under DryRun). false: refused by the capture rules (the thread's last
// CUDA error says which).
bool library_call(cudaStream_t stream, std::function<void()> work);

inline unsigned lane_id() {
  const unsigned linear = t_threadIdx.x + t_blockDim.x * (t_threadIdx.y + t_blockDim.y * t_threadIdx.z);
  return linear & 31u;
}
template <class T>
inline uint64_t to_bits(T v) {
  static_assert(std::is_arithmetic<T>::value && sizeof(T) <= 8, "warp intrinsics take arithmetic types of <= 8 bytes");
  uint64_t bits = 0;
  std::memcpy(&bits, &v, sizeof(T));
  return bits;
}
template <class T>
inline T from_bits(uint64_t bits) {
  T v;
  std::memcpy(&v, &bits, sizeof(T));
  return v;
}
// Read-modify-write through compare-exchange, for the atomics the hardware has but C++ lacks.
template <class T, class F>
inline T atomic_update(T* address, F update) {
  T old;
  __atomic_load(address, &old, __ATOMIC_RELAXED);
  T desired = update(old);
  while (!__atomic_compare_exchange(address, &old, &desired, true, __ATOMIC_RELAXED, __ATOMIC_RELAXED))
    desired = update(old);
  return old;
}
template <class T>
inline T atomic_cas(T* address, T compare, T val) {
  __atomic_compare_exchange_n(address, &compare, val, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED);
  return compare;  // the old value either way
}
}  // namespace detail

// Runs kernel over the grid on the CPU: now on the legacy stream (null), or, on a created stream,
// when that stream's queue reaches it (the parameters are copied at the call, as on a GPU). Errors
// of the launch itself come back as the return value, as from the nvcc version.
template <typename... KArgs, typename... Args>
inline cudaError_t launch(void (*kernel)(KArgs...), dim3 grid, dim3 block, size_t shmem,
                          cudaStream_t stream, Args&&... args) {
  static_assert(sizeof...(KArgs) == sizeof...(Args), "simt::launch: wrong number of kernel arguments");
  static_assert((std::is_trivially_copyable<std::decay_t<KArgs>>::value && ...),
                "simt::launch: kernel parameters must be trivially copyable");
  using Params = std::tuple<std::decay_t<KArgs>...>;
  struct Closure {
    void (*kernel)(KArgs...);
    Params params;
  };
  const Closure closure{kernel, Params(static_cast<KArgs>(std::forward<Args>(args))...)};
  // Every fiber calls the kernel with its own by-value copy of the parameters, as on a GPU.
  const detail::Thunk thunk = [](const void* p) {
    const Closure& c = *static_cast<const Closure*>(p);
    std::apply(c.kernel, c.params);
  };
  const void* const id = reinterpret_cast<const void*>(kernel);
  detail::count_work();
  if (dry_run()) {  // nothing runs
    if (const cudaError_t err = detail::check_grid(id, grid, block, shmem)) return err;
    return detail::dry_launch(stream);
  }
  if (detail::is_deferred(stream)) {
    if (const cudaError_t err = detail::check_grid(id, grid, block, shmem)) return err;
    auto held = std::make_shared<const Closure>(closure);
    return detail::enqueue(stream, [held, id, grid, block, shmem, thunk] {
      detail::record_error(detail::run_grid(id, grid, block, shmem, thunk, held.get()));
    });
  }
  if (const cudaError_t err = detail::legacy_work_check()) return err;
  detail::before_host_work(stream);
  return detail::run_grid(id, grid, block, shmem, thunk, &closure);
}
}  // namespace simt

// ---- built-in variables (read-only values, as in CUDA) ------------------------------------------
// Values of `const` functions (simt_runtime.cpp): a thread's threadIdx never changes, nor its
// block's blockIdx or the launch's blockDim and gridDim, so the compiler reads each once per kernel
// and not once per loop trip; and the reads are not instrumented for SIMT_CHECK.
namespace simt {
namespace detail {
__attribute__((const)) uint3 thread_idx();
__attribute__((const)) uint3 block_idx();
__attribute__((const)) dim3 block_dim();
__attribute__((const)) dim3 grid_dim();
}  // namespace detail
}  // namespace simt
#define threadIdx (::simt::detail::thread_idx())
#define blockIdx (::simt::detail::block_idx())
#define blockDim (::simt::detail::block_dim())
#define gridDim (::simt::detail::grid_dim())

#define SIMT_DYNAMIC_SHARED(T, name) T* name = static_cast<T*>(::simt::detail::dynamic_shared())

// ---- barriers -----------------------------------------------------------------------------------
// The call site (default arguments evaluate at the caller) lets the engine tell apart threads
// waiting at different barriers. The empty asm statements with a "memory" clobber stop the
// compiler from keeping shared or global values in registers across the switch: other fibers
// write them while this one is suspended.
#define SIMT_MEMORY_CLOBBER() __asm__ __volatile__("" ::: "memory")
__forceinline__ int simt_barrier(int predicate, const char* file, int line) {
  SIMT_MEMORY_CLOBBER();
  const int count = simt::detail::block_barrier(predicate, file, line);
  SIMT_MEMORY_CLOBBER();
  return count;
}
__forceinline__ void __syncthreads(const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  simt_barrier(0, file, line);
}
__forceinline__ int __syncthreads_count(int predicate, const char* file = __builtin_FILE(),
                                        int line = __builtin_LINE()) {
  return simt_barrier(predicate != 0, file, line);
}
__forceinline__ int __syncthreads_and(int predicate, const char* file = __builtin_FILE(),
                                      int line = __builtin_LINE()) {
  return simt_barrier(predicate == 0, file, line) == 0;
}
__forceinline__ int __syncthreads_or(int predicate, const char* file = __builtin_FILE(),
                                     int line = __builtin_LINE()) {
  return simt_barrier(predicate != 0, file, line) != 0;
}
__forceinline__ void __syncwarp(unsigned mask = 0xffffffffu, const char* file = __builtin_FILE(),
                                int line = __builtin_LINE()) {
  SIMT_MEMORY_CLOBBER();
  simt::detail::warp_barrier(mask, file, line);
  SIMT_MEMORY_CLOBBER();
}
inline void __threadfence() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
inline void __threadfence_block() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
[[noreturn]] inline void __trap(const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  simt::detail::trap("__trap()", file, line);
}

// ---- warp shuffles and votes: one exchange round each -------------------------------------------
template <class T>
__forceinline__ T __shfl_sync(unsigned mask, T var, int srcLane, int width = warpSize,
                              const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  const auto& r = simt::detail::warp_exchange(mask, simt::detail::to_bits(var), file, line);
  const unsigned w = unsigned(width), src = (simt::detail::lane_id() & ~(w - 1)) + (unsigned(srcLane) & (w - 1));
  simt::detail::shfl_source(r, src, file, line);
  return simt::detail::from_bits<T>(r.value[src]);
}
template <class T>
__forceinline__ T __shfl_up_sync(unsigned mask, T var, unsigned delta, int width = warpSize,
                                 const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  const auto& r = simt::detail::warp_exchange(mask, simt::detail::to_bits(var), file, line);
  const unsigned lane = simt::detail::lane_id();
  if ((lane & unsigned(width - 1)) < delta) return var;
  simt::detail::shfl_source(r, lane - delta, file, line);
  return simt::detail::from_bits<T>(r.value[lane - delta]);
}
template <class T>
__forceinline__ T __shfl_down_sync(unsigned mask, T var, unsigned delta, int width = warpSize,
                                   const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  const auto& r = simt::detail::warp_exchange(mask, simt::detail::to_bits(var), file, line);
  const unsigned lane = simt::detail::lane_id();
  if ((lane & unsigned(width - 1)) + delta >= unsigned(width)) return var;
  simt::detail::shfl_source(r, lane + delta, file, line);
  return simt::detail::from_bits<T>(r.value[lane + delta]);
}
template <class T>
__forceinline__ T __shfl_xor_sync(unsigned mask, T var, int laneMask, int width = warpSize,
                                  const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  const auto& r = simt::detail::warp_exchange(mask, simt::detail::to_bits(var), file, line);
  const unsigned lane = simt::detail::lane_id(), src = lane ^ unsigned(laneMask), group = ~unsigned(width - 1);
  if ((src & group) > (lane & group)) return var;  // a later group: CUDA returns the own value
  simt::detail::shfl_source(r, src & 31u, file, line);
  return simt::detail::from_bits<T>(r.value[src & 31u]);
}
__forceinline__ unsigned __ballot_sync(unsigned mask, int predicate, const char* file = __builtin_FILE(),
                                       int line = __builtin_LINE()) {
  const auto& r = simt::detail::warp_exchange(mask, predicate != 0, file, line);
  unsigned bits = 0;
  for (unsigned i = 0; i < 32; ++i)
    if ((r.active >> i & 1u) && r.value[i]) bits |= 1u << i;
  return bits;
}
__forceinline__ int __any_sync(unsigned mask, int predicate, const char* file = __builtin_FILE(),
                               int line = __builtin_LINE()) {
  return __ballot_sync(mask, predicate, file, line) != 0;
}
__forceinline__ int __all_sync(unsigned mask, int predicate, const char* file = __builtin_FILE(),
                               int line = __builtin_LINE()) {
  const auto& r = simt::detail::warp_exchange(mask, predicate != 0, file, line);
  for (unsigned i = 0; i < 32; ++i)
    if ((r.active >> i & 1u) && !r.value[i]) return 0;
  return 1;
}

// ---- atomics: real ones, blocks run concurrently on worker threads. The overload sets are
// CUDA's, so a call that nvcc would reject does not compile here either. -------------------------
#define SIMT_ATOMIC_FETCH(name, T, builtin) \
  inline T name(T* address, T val) { return builtin(address, val, __ATOMIC_RELAXED); }
#define SIMT_ATOMIC_UPDATE(name, T, expr) \
  inline T name(T* address, T val) {      \
    return simt::detail::atomic_update(address, [val](T old) -> T { return expr; }); \
  }
SIMT_ATOMIC_FETCH(atomicAdd, int, __atomic_fetch_add)
SIMT_ATOMIC_FETCH(atomicAdd, unsigned, __atomic_fetch_add)
SIMT_ATOMIC_FETCH(atomicAdd, unsigned long long, __atomic_fetch_add)
SIMT_ATOMIC_UPDATE(atomicAdd, float, old + val)
SIMT_ATOMIC_UPDATE(atomicAdd, double, old + val)
SIMT_ATOMIC_FETCH(atomicSub, int, __atomic_fetch_sub)
SIMT_ATOMIC_FETCH(atomicSub, unsigned, __atomic_fetch_sub)
SIMT_ATOMIC_FETCH(atomicExch, int, __atomic_exchange_n)
SIMT_ATOMIC_FETCH(atomicExch, unsigned, __atomic_exchange_n)
SIMT_ATOMIC_FETCH(atomicExch, unsigned long long, __atomic_exchange_n)
SIMT_ATOMIC_UPDATE(atomicMin, int, old < val ? old : val)
SIMT_ATOMIC_UPDATE(atomicMin, unsigned, old < val ? old : val)
SIMT_ATOMIC_UPDATE(atomicMin, long long, old < val ? old : val)
SIMT_ATOMIC_UPDATE(atomicMin, unsigned long long, old < val ? old : val)
SIMT_ATOMIC_UPDATE(atomicMax, int, old > val ? old : val)
SIMT_ATOMIC_UPDATE(atomicMax, unsigned, old > val ? old : val)
SIMT_ATOMIC_UPDATE(atomicMax, long long, old > val ? old : val)
SIMT_ATOMIC_UPDATE(atomicMax, unsigned long long, old > val ? old : val)
SIMT_ATOMIC_UPDATE(atomicInc, unsigned, old >= val ? 0u : old + 1u)
SIMT_ATOMIC_UPDATE(atomicDec, unsigned, (old == 0u || old > val) ? val : old - 1u)
SIMT_ATOMIC_FETCH(atomicAnd, int, __atomic_fetch_and)
SIMT_ATOMIC_FETCH(atomicAnd, unsigned, __atomic_fetch_and)
SIMT_ATOMIC_FETCH(atomicAnd, unsigned long long, __atomic_fetch_and)
SIMT_ATOMIC_FETCH(atomicOr, int, __atomic_fetch_or)
SIMT_ATOMIC_FETCH(atomicOr, unsigned, __atomic_fetch_or)
SIMT_ATOMIC_FETCH(atomicOr, unsigned long long, __atomic_fetch_or)
SIMT_ATOMIC_FETCH(atomicXor, int, __atomic_fetch_xor)
SIMT_ATOMIC_FETCH(atomicXor, unsigned, __atomic_fetch_xor)
SIMT_ATOMIC_FETCH(atomicXor, unsigned long long, __atomic_fetch_xor)
#undef SIMT_ATOMIC_FETCH
#undef SIMT_ATOMIC_UPDATE
inline float atomicExch(float* address, float val) {
  float old;
  __atomic_exchange(address, &val, &old, __ATOMIC_RELAXED);
  return old;
}
inline int atomicCAS(int* a, int compare, int val) { return simt::detail::atomic_cas(a, compare, val); }
inline unsigned atomicCAS(unsigned* a, unsigned compare, unsigned val) {
  return simt::detail::atomic_cas(a, compare, val);
}
inline unsigned long long atomicCAS(unsigned long long* a, unsigned long long compare, unsigned long long val) {
  return simt::detail::atomic_cas(a, compare, val);
}

// ---- intrinsics -----------------------------------------------------------------------------------
template <class T>
inline T __ldg(const T* p) { return *p; }
inline float __expf(float x) { return expf(x); }
inline float __exp10f(float x) { return powf(10.f, x); }
inline float __logf(float x) { return logf(x); }
inline float __log2f(float x) { return log2f(x); }
inline float __log10f(float x) { return log10f(x); }
inline float __powf(float x, float y) { return powf(x, y); }
inline float __sinf(float x) { return sinf(x); }
inline float __cosf(float x) { return cosf(x); }
inline float __tanf(float x) { return tanf(x); }
inline float __fdividef(float a, float b) { return a / b; }
inline float __frcp_rn(float x) { return 1.f / x; }
inline float __fsqrt_rn(float x) { return sqrtf(x); }
inline float rsqrtf(float x) { return 1.f / sqrtf(x); }
inline double rsqrt(double x) { return 1.0 / sqrt(x); }
inline float __saturatef(float x) { return x > 0.f ? (x < 1.f ? x : 1.f) : 0.f; }  // NaN -> 0
inline float __fmaf_rn(float a, float b, float c) { return fmaf(a, b, c); }
inline double __fma_rn(double a, double b, double c) { return fma(a, b, c); }
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fmul_rn(float a, float b) { return a * b; }
inline int __float2int_rn(float x) { return int(nearbyintf(x)); }
inline int __float_as_int(float x) { int i; std::memcpy(&i, &x, 4); return i; }
inline float __int_as_float(int i) { float x; std::memcpy(&x, &i, 4); return x; }
inline unsigned __float_as_uint(float x) { unsigned i; std::memcpy(&i, &x, 4); return i; }
inline float __uint_as_float(unsigned i) { float x; std::memcpy(&x, &i, 4); return x; }
inline long long __double_as_longlong(double x) { long long i; std::memcpy(&i, &x, 8); return i; }
inline double __longlong_as_double(long long i) { double x; std::memcpy(&x, &i, 8); return x; }
inline int __popc(unsigned x) { return __builtin_popcount(x); }
inline int __popcll(unsigned long long x) { return __builtin_popcountll(x); }
inline int __clz(int x) { return x ? __builtin_clz(unsigned(x)) : 32; }
inline int __clzll(long long x) { return x ? __builtin_clzll((unsigned long long)x) : 64; }
inline int __ffs(int x) { return __builtin_ffs(x); }
inline int __ffsll(long long x) { return __builtin_ffsll(x); }
inline unsigned __brev(unsigned x) {
  x = (x >> 1 & 0x55555555u) | (x & 0x55555555u) << 1;
  x = (x >> 2 & 0x33333333u) | (x & 0x33333333u) << 2;
  x = (x >> 4 & 0x0f0f0f0fu) | (x & 0x0f0f0f0fu) << 4;
  return __builtin_bswap32(x);
}

// ---- CUDA's global min/max overloads (crt/math_functions.hpp), mixed signedness included -----------
#define SIMT_MIN_MAX(R, A, B)                                                      \
  inline R min(A a, B b) { const R x = static_cast<R>(a), y = static_cast<R>(b); return x < y ? x : y; } \
  inline R max(A a, B b) { const R x = static_cast<R>(a), y = static_cast<R>(b); return x > y ? x : y; }
SIMT_MIN_MAX(int, int, int)
SIMT_MIN_MAX(unsigned, unsigned, unsigned)
SIMT_MIN_MAX(unsigned, int, unsigned)
SIMT_MIN_MAX(unsigned, unsigned, int)
SIMT_MIN_MAX(long, long, long)
SIMT_MIN_MAX(unsigned long, unsigned long, unsigned long)
SIMT_MIN_MAX(unsigned long, long, unsigned long)
SIMT_MIN_MAX(unsigned long, unsigned long, long)
SIMT_MIN_MAX(long long, long long, long long)
SIMT_MIN_MAX(unsigned long long, unsigned long long, unsigned long long)
SIMT_MIN_MAX(unsigned long long, long long, unsigned long long)
SIMT_MIN_MAX(unsigned long long, unsigned long long, long long)
#undef SIMT_MIN_MAX
inline float min(float a, float b) { return fminf(a, b); }
inline float max(float a, float b) { return fmaxf(a, b); }
inline double min(double a, double b) { return fmin(a, b); }
inline double max(double a, double b) { return fmax(a, b); }
inline double min(float a, double b) { return fmin(a, b); }
inline double max(float a, double b) { return fmax(a, b); }
inline double min(double a, float b) { return fmin(a, b); }
inline double max(double a, float b) { return fmax(a, b); }
inline unsigned umin(unsigned a, unsigned b) { return a < b ? a : b; }
inline unsigned umax(unsigned a, unsigned b) { return a > b ? a : b; }
inline long long llmin(long long a, long long b) { return a < b ? a : b; }
inline long long llmax(long long a, long long b) { return a > b ? a : b; }
inline unsigned long long ullmin(unsigned long long a, unsigned long long b) { return a < b ? a : b; }
inline unsigned long long ullmax(unsigned long long a, unsigned long long b) { return a > b ? a : b; }

#endif  // SIMT_EMULATE
