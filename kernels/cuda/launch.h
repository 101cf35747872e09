// kernels/cuda/launch.h: what every kernels/cuda/*.cu shares on the host side: checked CUDA
// runtime calls, THE kernel launch helper (no <<<>>> anywhere else, so the same source runs on
// a GPU and in the simt emulator), the current device and stream, and launch-size helpers.
//
//   launch("unary_kernel", unary_kernel<op, T>, grid, block, shmem, args...);
//
// A failed launch or runtime call raises reel::Error naming the kernel (or call) and CUDA's
// error string; in the emulator, a launch that fails SIMT_CHECK=race,uninit adds the checker's
// report (lines, threads, address: simt::last_error_detail()). Kernels run asynchronously on a GPU: a fault inside a kernel surfaces at the
// next synchronising call (a copy to the host, synchronize()); run with CUDA_LAUNCH_BLOCKING=1
// to have it reported by the launch that caused it.
#pragma once
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "core/device.h"
#include "core/error.h"
#include "kernels/simt/simt.h"

namespace reel::kernels::cuda {

// reel::Error "<what>: <cudaErrorName>: <description>" unless err == cudaSuccess (the error is
// cleared first, so a later call does not report it again).
void check_cuda(cudaError_t err, const char* what);
#define REEL_CUDA_CHECK(call) ::reel::kernels::cuda::check_cuda((call), #call)

// Makes CUDA device `index` current on this thread (a no-op when it already is).
void set_device(int index);
inline void set_device(Device device) { set_device(device.index); }
// This thread's capture stream while a reel::CudaGraph captures on it (core/graph.h; set by
// backend.cu's begin_capture and cleared by end_capture), else null.
inline cudaStream_t& capture_stream() {
  static thread_local cudaStream_t s = nullptr;
  return s;
}
// The compute stream (core/stream.h), which every reel kernel, copy and cuBLAS call runs on: the
// legacy default stream, so work is ordered and a block the caching allocator hands out again is
// never in use; while this thread captures a CUDA graph, the created stream capturing it (so the
// work becomes graph nodes; the graph is launched on the legacy stream, in order again). The
// device's copy stream is backend.cu's; code outside kernels/cuda reaches both through
// reel::Stream, never through this header.
inline cudaStream_t stream() { return capture_stream(); }
// Streaming multiprocessors of the current device (the emulator reports its worker threads).
int sm_count();

// What a captured CUDA graph would freeze: each launch's kernel, sizes and by-value parameters, as
// bytes (a pointer as its address), logged while a LaunchLog is installed on this thread. A replayed
// graph passes every kernel the parameters it was captured with, so a step is replay-safe when two
// steps log the same (tests/test_replay_safe.cpp; docs/design.md, "Replay-safe steps").
struct LaunchLog {
  struct Entry {
    std::string kernel;
    unsigned grid[3], block[3];
    size_t shmem;
    std::vector<std::vector<unsigned char>> params;  // one per parameter, its bytes
  };
  std::vector<Entry> entries;
  template <typename T>
  static std::vector<unsigned char> bytes_of(const T& value) {
    // An empty class (an elementwise op's functor) has one byte that nothing reads: its value is
    // whatever the stack held (it differed between two steps under AddressSanitizer).
    if constexpr (std::is_empty_v<T>) return {};
    std::vector<unsigned char> b(sizeof(T));
    std::memcpy(b.data(), &value, sizeof(T));
    return b;
  }
};
inline thread_local LaunchLog* launch_log = nullptr;  // installed by a test; null: nothing logged

// Launches kernel<<<grid, block, shmem, stream()>>>(args...) through simt::launch and checks it.
template <typename... KArgs, typename... Args>
void launch(const char* name, void (*kernel)(KArgs...), dim3 grid, dim3 block, size_t shmem, Args&&... args) {
  if (launch_log != nullptr)
    launch_log->entries.push_back({name, {grid.x, grid.y, grid.z}, {block.x, block.y, block.z}, shmem,
                                   {LaunchLog::bytes_of(static_cast<std::decay_t<KArgs>>(args))...}});
  const cudaError_t err = simt::launch(kernel, grid, block, shmem, stream(), std::forward<Args>(args)...);
  if (err != cudaSuccess)
    REEL_FAIL("cuda kernel ", name, " <<<(", grid.x, ", ", grid.y, ", ", grid.z, "), (", block.x, ", ", block.y,
              ", ", block.z, "), ", shmem, ">>>: launch failed: ", cudaGetErrorName(err), ": ",
              cudaGetErrorString(err), err == cudaErrorLaunchFailure ? "\n" + simt::last_error_detail() : "");
}

// Blocks for a grid-stride loop over n items with `threads` per block: enough to fill the
// device several times over, no more (each thread then handles several items).
inline unsigned grid_for(int64_t n, int threads) {
  const int64_t wanted = (n + threads - 1) / threads;
  const int64_t cap = int64_t{32} * sm_count();
  return static_cast<unsigned>(std::max<int64_t>(1, std::min(wanted, cap)));
}

constexpr unsigned kFullMask = 0xffffffffu;
constexpr int kThreads = 256;  // block size of the elementwise kernels

}  // namespace reel::kernels::cuda
