// kernels/simt/simt_streams_internal.h: the stream, event and capture state that simt_streams.cpp
// (streams and events) and simt_graphs.cpp (stream capture and graphs) share. Emulated build only;
// everything here is used under streams_mutex().
#pragma once
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <unordered_set>
#include <vector>

#include "simt.h"

namespace simt {
namespace detail {
struct Capture;  // simt_graphs.cpp: one capture sequence in progress
}
}  // namespace simt

struct CUstream_st {
  unsigned flags;
  uint64_t id;                              // unique over the process: addresses are reused
  std::deque<std::function<void()>> queue;  // deferred work, oldest first
  uint64_t enqueued = 0;                    // items ever enqueued
  uint64_t completed = 0;                   // items run (always the oldest first)
  bool running = false;                     // an item of this stream is running now
  simt::detail::Capture* capture = nullptr; // the capture this stream is in, if any
};

struct CUevent_st {
  unsigned flags;
  bool recorded = false;
  CUstream_st* stream = nullptr;  // the created stream of the last record while pending, else null
  uint64_t position = 0;          // done once stream->completed >= position
  uint64_t record_id = 0;         // unique over the process: an older record's marker sets nothing
  bool timed = false;             // `when` holds the time the last record's marker ran
  std::chrono::steady_clock::time_point when;
  uint64_t capture_id = 0;        // the capture its last record was in (0: none)
};

// A graph node: what it is and the work it does (replayable: it may run many times).
struct CUgraphNode_st {
  cudaGraphNodeType type;
  std::function<void()> work;
};
struct CUgraph_st {
  std::vector<std::unique_ptr<CUgraphNode_st>> nodes;  // in capture order (a valid topological order)
};
struct CUgraphExec_st {
  std::shared_ptr<const std::vector<std::function<void()>>> work;  // the nodes' work, in order
};

namespace simt {
namespace detail {
std::recursive_mutex& streams_mutex();
std::unordered_set<CUstream_st*>& live_streams();
std::unordered_set<CUevent_st*>& live_events();
uint64_t next_id();  // a new stream, record or capture id (under the lock)
inline bool synchronous(cudaStream_t stream) {
  return stream == nullptr || stream == cudaStreamLegacy || stream == cudaStreamPerThread;
}
inline bool blocking(const CUstream_st* s) { return !(s->flags & cudaStreamNonBlocking); }
void enqueue_locked(CUstream_st* s, std::function<void()> work);  // onto the queue (not capturing)
void drain_all(CUstream_st* s);

// Capture (simt_graphs.cpp). Cheap tests first: captures_active() is false unless a capture is in
// progress anywhere.
bool captures_active();
// Appends a node to the capture of `s` (which captures; work null: appends nothing, checks only):
// cudaSuccess, or cudaErrorStreamCaptureInvalidated once the capture was invalidated.
cudaError_t capture_node(CUstream_st* s, cudaGraphNodeType type, std::function<void()> work);
// Invalidates `c` (and returns `error`): its EndCapture will return cudaErrorStreamCaptureInvalidated.
cudaError_t invalidate(Capture* c, cudaError_t error);
// The active capture whose id is `id`, or null (ended: its events are ordinary again).
Capture* active_capture(uint64_t id);
uint64_t capture_id(const Capture* c);
// A call CUDA calls "potentially unsafe" during capture (cudaMalloc, cudaFree, cudaMallocHost,
// synchronous copies and memsets): cudaErrorStreamCaptureUnsupported, invalidating every Global
// capture and this thread's ThreadLocal ones; Relaxed captures allow it.
cudaError_t unsafe_call_check();
// cudaDeviceSynchronize during any capture: cudaErrorStreamCaptureUnsupported, invalidating all.
cudaError_t device_sync_check();
// A copy between host and device during capture whose host side is pageable (not cudaMallocHost).
bool pageable(const void* host);
}  // namespace detail
}  // namespace simt
