// kernels/simt/simt_api.cpp: the CUDA runtime API subset of simt.h's emulation branch, but for
// streams and events (simt_streams.cpp). "Device" memory is host memory, every call here is
// synchronous (legacy-stream work: it first runs what blocking streams have queued), and the
// device reports sm_90-like limits with one multiprocessor per worker thread. Under simt::DryRun
// (reel's meta device) copies and memsets move nothing; a copy to the host writes zeros there.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>

#include "simt.h"
#include "simt_check.h"
#include "simt_streams_internal.h"

namespace simt {
namespace detail {
namespace {
thread_local cudaError_t t_last_error = cudaSuccess;  // per host thread, as in CUDA

size_t page_bytes(int pages_name) { return size_t(sysconf(pages_name)) * size_t(sysconf(_SC_PAGESIZE)); }
bool valid_kind(cudaMemcpyKind kind) { return kind >= cudaMemcpyHostToHost && kind <= cudaMemcpyDefault; }

// The live cudaMalloc blocks (start -> size), so that a race report names a global address as
// "byte n of block b".
std::mutex g_blocks_mutex;
std::map<uintptr_t, size_t> g_blocks;
}  // namespace

namespace check {
bool find_allocation(uintptr_t address, uintptr_t* base, size_t* size) {
  std::lock_guard<std::mutex> lock(g_blocks_mutex);
  auto it = g_blocks.upper_bound(address);
  if (it == g_blocks.begin()) return false;
  --it;
  if (address - it->first >= it->second) return false;
  *base = it->first;
  *size = it->second;
  return true;
}
}  // namespace check

cudaError_t record_error(cudaError_t error) {
  if (error != cudaSuccess) t_last_error = error;
  return error;
}
}  // namespace detail
}  // namespace simt

using simt::detail::record_error;

// ---- errors ------------------------------------------------------------------------------------------
namespace {
struct ErrorText {
  cudaError_t code;
  const char* name;
  const char* text;
};
// Names and messages as the CUDA runtime spells them.
constexpr ErrorText kErrors[] = {
    {cudaSuccess, "cudaSuccess", "no error"},
    {cudaErrorInvalidValue, "cudaErrorInvalidValue", "invalid argument"},
    {cudaErrorMemoryAllocation, "cudaErrorMemoryAllocation", "out of memory"},
    {cudaErrorInitializationError, "cudaErrorInitializationError", "initialization error"},
    {cudaErrorInvalidConfiguration, "cudaErrorInvalidConfiguration", "invalid configuration argument"},
    {cudaErrorInvalidMemcpyDirection, "cudaErrorInvalidMemcpyDirection", "invalid copy direction for memcpy"},
    {cudaErrorInsufficientDriver, "cudaErrorInsufficientDriver",
     "CUDA driver version is insufficient for CUDA runtime version"},
    {cudaErrorInvalidDeviceFunction, "cudaErrorInvalidDeviceFunction", "invalid device function"},
    {cudaErrorNoDevice, "cudaErrorNoDevice", "no CUDA-capable device is detected"},
    {cudaErrorInvalidDevice, "cudaErrorInvalidDevice", "invalid device ordinal"},
    {cudaErrorInvalidResourceHandle, "cudaErrorInvalidResourceHandle", "invalid resource handle"},
    {cudaErrorIllegalState, "cudaErrorIllegalState", "the operation cannot be performed in the present state"},
    {cudaErrorNotReady, "cudaErrorNotReady", "device not ready"},
    {cudaErrorIllegalAddress, "cudaErrorIllegalAddress", "an illegal memory access was encountered"},
    {cudaErrorLaunchOutOfResources, "cudaErrorLaunchOutOfResources", "too many resources requested for launch"},
    {cudaErrorLaunchFailure, "cudaErrorLaunchFailure", "unspecified launch failure"},
    {cudaErrorNotPermitted, "cudaErrorNotPermitted", "operation not permitted"},
    {cudaErrorNotSupported, "cudaErrorNotSupported", "operation not supported"},
    {cudaErrorStreamCaptureUnsupported, "cudaErrorStreamCaptureUnsupported",
     "operation not permitted when stream is capturing"},
    {cudaErrorStreamCaptureInvalidated, "cudaErrorStreamCaptureInvalidated",
     "operation failed due to a previous error during capture"},
    {cudaErrorStreamCaptureUnmatched, "cudaErrorStreamCaptureUnmatched",
     "capture was not initiated in this stream"},
    {cudaErrorStreamCaptureIsolation, "cudaErrorStreamCaptureIsolation",
     "dependency created on uncaptured work in another stream"},
    {cudaErrorStreamCaptureImplicit, "cudaErrorStreamCaptureImplicit",
     "operation would make the legacy stream depend on a capturing blocking stream"},
    {cudaErrorCapturedEvent, "cudaErrorCapturedEvent",
     "operation not permitted on an event last recorded in a capturing stream"},
    {cudaErrorStreamCaptureWrongThread, "cudaErrorStreamCaptureWrongThread",
     "attempt to terminate a thread-local capture sequence from another thread"},
    {cudaErrorUnknown, "cudaErrorUnknown", "unknown error"},
};
const ErrorText* find_error(cudaError_t error) {
  for (const ErrorText& e : kErrors)
    if (e.code == error) return &e;
  return nullptr;
}
}  // namespace

const char* cudaGetErrorString(cudaError_t error) {
  const ErrorText* e = find_error(error);
  return e ? e->text : "unrecognized error code";
}
const char* cudaGetErrorName(cudaError_t error) {
  const ErrorText* e = find_error(error);
  return e ? e->name : "unrecognized error code";
}
cudaError_t cudaGetLastError() {
  const cudaError_t e = simt::detail::t_last_error;
  simt::detail::t_last_error = cudaSuccess;
  return e;
}
cudaError_t cudaPeekAtLastError() { return simt::detail::t_last_error; }

// ---- memory -----------------------------------------------------------------------------------------
// Plain heap blocks, so that ASan sees every byte past an allocation. Not filled: like
// cudaMalloc's, their contents are unspecified.
cudaError_t cudaMalloc(void** ptr, size_t bytes) {
  if (!ptr) return record_error(cudaErrorInvalidValue);
  if (const cudaError_t err = simt::detail::unsafe_call_check()) return record_error(err);
  *ptr = nullptr;
  if (bytes == 0) return cudaSuccess;
  if (posix_memalign(ptr, 256, bytes)) {
    *ptr = nullptr;
    return record_error(cudaErrorMemoryAllocation);
  }
  std::lock_guard<std::mutex> lock(simt::detail::g_blocks_mutex);
  simt::detail::g_blocks[reinterpret_cast<uintptr_t>(*ptr)] = bytes;
  return cudaSuccess;
}
// cudaFree and cudaFreeHost synchronise the device in CUDA: queued work never outlives its memory.
cudaError_t cudaFree(void* ptr) {
  if (ptr) {
    if (const cudaError_t err = simt::detail::unsafe_call_check()) return record_error(err);
    if (const cudaError_t err = cudaDeviceSynchronize()) return err;  // not freed: a capture waits on it
  }
  if (ptr) {
    std::lock_guard<std::mutex> lock(simt::detail::g_blocks_mutex);
    simt::detail::g_blocks.erase(reinterpret_cast<uintptr_t>(ptr));
  }
  std::free(ptr);
  return cudaSuccess;
}
cudaError_t cudaMallocHost(void** ptr, size_t bytes) { return cudaMalloc(ptr, bytes); }
cudaError_t cudaHostAlloc(void** ptr, size_t bytes, unsigned flags) {
  if (flags & ~unsigned(cudaHostAllocPortable | cudaHostAllocMapped | cudaHostAllocWriteCombined))
    return record_error(cudaErrorInvalidValue);
  return cudaMalloc(ptr, bytes);
}
cudaError_t cudaFreeHost(void* ptr) { return cudaFree(ptr); }

cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind) {
  if (bytes == 0) return cudaSuccess;  // before any other check, as in CUDA
  if (!simt::detail::valid_kind(kind)) return record_error(cudaErrorInvalidMemcpyDirection);
  if (!dst || !src) return record_error(cudaErrorInvalidValue);
  if (const cudaError_t err = simt::detail::unsafe_call_check()) return record_error(err);
  if (const cudaError_t err = simt::detail::legacy_work_check()) return record_error(err);
  simt::detail::count_work();
  simt::detail::before_host_work(nullptr);
  if (simt::dry_run()) {  // only the host side is real memory: a copy to it reads as zeros
    if (kind == cudaMemcpyDeviceToHost) std::memset(dst, 0, bytes);
    return cudaSuccess;
  }
  std::memcpy(dst, src, bytes);  // memcpy, not memmove: ASan reports overlapping copies
  return cudaSuccess;
}
cudaError_t cudaMemset(void* ptr, int value, size_t bytes) {
  if (bytes == 0) return cudaSuccess;
  if (!ptr) return record_error(cudaErrorInvalidValue);
  if (const cudaError_t err = simt::detail::unsafe_call_check()) return record_error(err);
  if (const cudaError_t err = simt::detail::legacy_work_check()) return record_error(err);
  simt::detail::count_work();
  simt::detail::before_host_work(nullptr);
  if (simt::dry_run()) return cudaSuccess;
  std::memset(ptr, value, bytes);
  return cudaSuccess;
}
cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total_bytes) {
  if (!free_bytes || !total_bytes) return record_error(cudaErrorInvalidValue);
  *free_bytes = simt::detail::page_bytes(_SC_AVPHYS_PAGES);
  *total_bytes = simt::detail::page_bytes(_SC_PHYS_PAGES);
  return cudaSuccess;
}

// ---- device -------------------------------------------------------------------------------------------
cudaError_t cudaDeviceReset() { return cudaSuccess; }
cudaError_t cudaGetDeviceCount(int* count) {
  if (!count) return record_error(cudaErrorInvalidValue);
  *count = 1;
  return cudaSuccess;
}
cudaError_t cudaSetDevice(int device) { return device == 0 ? cudaSuccess : record_error(cudaErrorInvalidDevice); }
cudaError_t cudaGetDevice(int* device) {
  if (!device) return record_error(cudaErrorInvalidValue);
  *device = 0;
  return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device) {
  if (!prop) return record_error(cudaErrorInvalidValue);
  if (device != 0) return record_error(cudaErrorInvalidDevice);
  *prop = cudaDeviceProp{};
  std::snprintf(prop->name, sizeof prop->name, "simt (CPU emulation)");
  prop->totalGlobalMem = simt::detail::page_bytes(_SC_PHYS_PAGES);
  prop->sharedMemPerBlock = 48 * 1024;
  prop->regsPerBlock = 65536;
  prop->warpSize = 32;
  prop->memPitch = 2147483647;
  prop->maxThreadsPerBlock = 1024;
  prop->maxThreadsDim[0] = 1024;
  prop->maxThreadsDim[1] = 1024;
  prop->maxThreadsDim[2] = 64;
  prop->maxGridSize[0] = 2147483647;
  prop->maxGridSize[1] = 65535;
  prop->maxGridSize[2] = 65535;
  prop->totalConstMem = 64 * 1024;
  // sm_90's limits, the project's target, so that code sized for it runs here unchanged.
  prop->major = 9;
  prop->minor = 0;
  prop->multiProcessorCount = int(simt::workers());
  prop->integrated = 1;  // device memory is host memory
  prop->concurrentKernels = 0;
  prop->unifiedAddressing = 1;
  prop->l2CacheSize = 50 * 1024 * 1024;
  prop->maxThreadsPerMultiProcessor = 2048;
  prop->sharedMemPerMultiprocessor = 228 * 1024;
  prop->regsPerMultiprocessor = 65536;
  prop->managedMemory = 0;
  prop->sharedMemPerBlockOptin = 227 * 1024;
  prop->maxBlocksPerMultiProcessor = 32;
  return cudaSuccess;
}

cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int device) {
  if (!value) return record_error(cudaErrorInvalidValue);
  cudaDeviceProp p;
  if (const cudaError_t e = cudaGetDeviceProperties(&p, device)) return e;
  switch (attr) {
    case cudaDevAttrMaxThreadsPerBlock: *value = p.maxThreadsPerBlock; break;
    case cudaDevAttrMaxBlockDimX: *value = p.maxThreadsDim[0]; break;
    case cudaDevAttrMaxGridDimX: *value = p.maxGridSize[0]; break;
    case cudaDevAttrMaxSharedMemoryPerBlock: *value = int(p.sharedMemPerBlock); break;
    case cudaDevAttrWarpSize: *value = p.warpSize; break;
    case cudaDevAttrMultiProcessorCount: *value = p.multiProcessorCount; break;
    case cudaDevAttrL2CacheSize: *value = p.l2CacheSize; break;
    case cudaDevAttrMaxThreadsPerMultiProcessor: *value = p.maxThreadsPerMultiProcessor; break;
    case cudaDevAttrComputeCapabilityMajor: *value = p.major; break;
    case cudaDevAttrComputeCapabilityMinor: *value = p.minor; break;
    case cudaDevAttrMaxSharedMemoryPerMultiprocessor: *value = int(p.sharedMemPerMultiprocessor); break;
    case cudaDevAttrMaxSharedMemoryPerBlockOptin: *value = int(p.sharedMemPerBlockOptin); break;
    default: return record_error(cudaErrorInvalidValue);
  }
  return cudaSuccess;
}
