// kernels/simt/simt_streams.cpp: streams and events of simt.h's emulation branch, with real ordering.
// Under simt::DryRun an async copy or memset still takes its place on its stream, and does nothing.
//
// The model (kernels/simt/README.md, "Streams and events"): the legacy default stream (null,
// cudaStreamLegacy, and here cudaStreamPerThread too) runs its work when it is enqueued, as every
// call did before streams were emulated. A stream made by cudaStreamCreate* is a FIFO of deferred
// host work (kernel launches, async copies and memsets, event records, waits) that runs only when
// something needs it:
//   * an event records its stream and a position in that stream's FIFO (the count of items
//     enqueued, its own marker included); it is done once the stream has run that many;
//   * cudaStreamWaitEvent on a created stream enqueues "run the event's stream up to the event";
//     on the legacy stream (which runs at once) it runs the event's stream up to the event now;
//   * cudaEventSynchronize runs the event's stream up to it, cudaStreamSynchronize the whole
//     stream, cudaDeviceSynchronize (and cudaFree, cudaFreeHost, which synchronise in CUDA) every
//     stream;
//   * cudaEventQuery / cudaStreamQuery on pending work run the oldest queued item of the stream and
//     answer cudaErrorNotReady, so a polling loop ends after as many polls as items were queued;
//   * legacy-stream work first runs every queued item of the blocking streams (created without
//     cudaStreamNonBlocking), which CUDA orders with the legacy stream implicitly.
// Nothing runs on its own: without a wait, the destination of an async copy keeps its old bytes,
// deterministically. All of it is under one recursive mutex (a drain may drain another stream).
// While a created stream captures (simt_graphs.cpp), its work becomes graph nodes instead, and the
// calls that would wait for it are refused with CUDA's capture errors.
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <mutex>
#include <unordered_set>

#include "simt_streams_internal.h"

using simt::detail::record_error;

namespace simt {
namespace detail {

std::recursive_mutex& streams_mutex() {
  static std::recursive_mutex* m = new std::recursive_mutex;  // never destroyed: used until exit
  return *m;
}
std::unordered_set<CUstream_st*>& live_streams() {
  static auto* s = new std::unordered_set<CUstream_st*>;
  return *s;
}
std::unordered_set<CUevent_st*>& live_events() {
  static auto* s = new std::unordered_set<CUevent_st*>;
  return *s;
}
namespace {
// Queued items of blocking streams: legacy-stream work checks it without the lock.
std::atomic<uint64_t> g_blocking_pending{0};
uint64_t g_next_id = 0;  // stream, record and capture ids, under the lock
}  // namespace
uint64_t next_id() { return ++g_next_id; }

namespace {

// Runs the oldest queued item of s.
void run_one(CUstream_st* s) {
  if (s->running) {
    std::fprintf(stderr, "simt: a stream's queued work waits on later work of the same stream\n");
    std::abort();
  }
  std::function<void()> work = std::move(s->queue.front());
  s->queue.pop_front();
  s->running = true;
  work();
  s->running = false;
  ++s->completed;
  if (blocking(s)) g_blocking_pending.fetch_sub(1, std::memory_order_relaxed);
}

void drain(CUstream_st* s, uint64_t upto) {
  while (s->completed < upto && !s->queue.empty()) run_one(s);
}
// The stream `s` if it still exists as the stream `id` (destroyed streams ran all their work).
CUstream_st* alive(CUstream_st* s, uint64_t id) { return live_streams().count(s) && s->id == id ? s : nullptr; }

bool event_done(const CUevent_st* e) { return !e->stream || e->stream->completed >= e->position; }

void synchronize_all_locked() {
  for (bool ran = true; ran;) {  // an item may (in principle) enqueue more: run until all are empty
    ran = false;
    for (CUstream_st* s : live_streams())
      if (!s->queue.empty()) {
        drain_all(s);
        ran = true;
      }
  }
}

// The capture that event `e`'s last record was in, if that capture is still in progress.
Capture* captured_in(const CUevent_st* e) { return e->capture_id ? active_capture(e->capture_id) : nullptr; }

}  // namespace

void drain_all(CUstream_st* s) { drain(s, s->enqueued); }

void enqueue_locked(CUstream_st* s, std::function<void()> work) {
  s->queue.push_back(std::move(work));
  ++s->enqueued;
  if (blocking(s)) g_blocking_pending.fetch_add(1, std::memory_order_relaxed);
}

bool is_deferred(cudaStream_t stream) { return !synchronous(stream); }

cudaError_t enqueue(cudaStream_t stream, std::function<void()> work, cudaGraphNodeType node) {
  std::lock_guard<std::recursive_mutex> lock(streams_mutex());
  if (!live_streams().count(stream)) return record_error(cudaErrorInvalidResourceHandle);
  if (stream->capture) return record_error(capture_node(stream, node, std::move(work)));
  enqueue_locked(stream, std::move(work));
  return cudaSuccess;
}

void before_host_work(cudaStream_t stream) {
  if (synchronous(stream)) {
    if (g_blocking_pending.load(std::memory_order_relaxed) == 0) return;
    std::lock_guard<std::recursive_mutex> lock(streams_mutex());
    for (CUstream_st* s : live_streams())
      if (blocking(s)) drain_all(s);
    return;
  }
  std::lock_guard<std::recursive_mutex> lock(streams_mutex());
  if (live_streams().count(stream)) drain_all(stream);
}

}  // namespace detail
}  // namespace simt

using simt::detail::before_host_work;
using simt::detail::streams_mutex;
using Lock = std::lock_guard<std::recursive_mutex>;

// ---- copies and memsets on a stream ---------------------------------------------------------------
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind, cudaStream_t stream) {
  if (simt::detail::synchronous(stream)) return cudaMemcpy(dst, src, bytes, kind);
  if (bytes == 0) return cudaSuccess;
  if (kind < cudaMemcpyHostToHost || kind > cudaMemcpyDefault) return record_error(cudaErrorInvalidMemcpyDirection);
  if (!dst || !src) return record_error(cudaErrorInvalidValue);
  if (simt::detail::captures_active() && !simt::dry_run()) {
    // (Under DryRun the host side is reel's meta pinned memory, mapped zero pages: not checked.)
    // A captured copy must not touch pageable memory: the graph may run after the caller's buffer
    // is gone, and CUDA copies pageable memory synchronously, which capture cannot record.
    Lock lock(streams_mutex());
    if (simt::detail::live_streams().count(stream) && stream->capture &&
        ((kind == cudaMemcpyHostToDevice && simt::detail::pageable(src)) ||
         (kind == cudaMemcpyDeviceToHost && simt::detail::pageable(dst)) ||
         (kind == cudaMemcpyHostToHost && (simt::detail::pageable(src) || simt::detail::pageable(dst)))))
      return record_error(simt::detail::invalidate(stream->capture, cudaErrorStreamCaptureUnsupported));
  }
  simt::detail::count_work();
  // In order on the stream, as a copy, and touching nothing: the host side of an asynchronous copy
  // is pinned memory, which on reel's meta device is zero pages never to be written.
  if (simt::dry_run()) return simt::detail::enqueue(stream, [] {}, cudaGraphNodeTypeMemcpy);
  // The bytes are read when the copy runs, not now: as on a GPU.
  return simt::detail::enqueue(stream, [dst, src, bytes] { std::memcpy(dst, src, bytes); }, cudaGraphNodeTypeMemcpy);
}

cudaError_t cudaMemsetAsync(void* ptr, int value, size_t bytes, cudaStream_t stream) {
  if (simt::detail::synchronous(stream)) return cudaMemset(ptr, value, bytes);
  if (bytes == 0) return cudaSuccess;
  if (!ptr) return record_error(cudaErrorInvalidValue);
  simt::detail::count_work();
  if (simt::dry_run()) return simt::detail::enqueue(stream, [] {}, cudaGraphNodeTypeMemset);  // ordered, touches nothing
  return simt::detail::enqueue(stream, [ptr, value, bytes] { std::memset(ptr, value, bytes); },
                               cudaGraphNodeTypeMemset);
}

// ---- device and streams -----------------------------------------------------------------------------
cudaError_t cudaDeviceSynchronize() {
  if (const cudaError_t err = simt::detail::device_sync_check()) return record_error(err);
  Lock lock(streams_mutex());
  simt::detail::synchronize_all_locked();
  return cudaSuccess;
}

cudaError_t cudaStreamCreate(cudaStream_t* stream) { return cudaStreamCreateWithFlags(stream, cudaStreamDefault); }
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned flags) {
  if (!stream || flags > cudaStreamNonBlocking) return record_error(cudaErrorInvalidValue);
  Lock lock(streams_mutex());
  *stream = new CUstream_st{flags, simt::detail::next_id(), {}, 0, 0, false, nullptr};
  simt::detail::live_streams().insert(*stream);
  return cudaSuccess;
}

// CUDA returns at once and releases the stream when its work is done; here the work runs first.
cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  Lock lock(streams_mutex());
  if (!stream || simt::detail::synchronous(stream) || !simt::detail::live_streams().count(stream))
    return record_error(cudaErrorInvalidResourceHandle);
  if (stream->capture)  // CUDA leaves a capturing stream alone; its capture is spoilt
    return record_error(simt::detail::invalidate(stream->capture, cudaErrorStreamCaptureUnsupported));
  simt::detail::drain_all(stream);
  for (CUevent_st* e : simt::detail::live_events())
    if (e->stream == stream) e->stream = nullptr;  // done: its stream has run everything
  simt::detail::live_streams().erase(stream);
  delete stream;
  return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
  if (simt::detail::synchronous(stream)) return cudaSuccess;  // its work ran when it was enqueued
  Lock lock(streams_mutex());
  if (!simt::detail::live_streams().count(stream)) return record_error(cudaErrorInvalidResourceHandle);
  if (stream->capture)  // its work is a graph: there is nothing to wait for
    return record_error(simt::detail::invalidate(stream->capture, cudaErrorStreamCaptureUnsupported));
  simt::detail::drain_all(stream);
  return cudaSuccess;
}

cudaError_t cudaStreamQuery(cudaStream_t stream) {
  if (simt::detail::synchronous(stream)) return cudaSuccess;
  Lock lock(streams_mutex());
  if (!simt::detail::live_streams().count(stream)) return record_error(cudaErrorInvalidResourceHandle);
  if (stream->capture)
    return record_error(simt::detail::invalidate(stream->capture, cudaErrorStreamCaptureUnsupported));
  if (stream->queue.empty()) return cudaSuccess;
  simt::detail::run_one(stream);  // progress, so that polling ends
  return record_error(cudaErrorNotReady);
}

cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned flags) {
  if (!event) return record_error(cudaErrorInvalidResourceHandle);
  if (flags != 0) return record_error(cudaErrorInvalidValue);
  Lock lock(streams_mutex());
  if (!simt::detail::synchronous(stream) && !simt::detail::live_streams().count(stream))
    return record_error(cudaErrorInvalidResourceHandle);
  if (simt::detail::synchronous(stream)) {
    if (const cudaError_t err = simt::detail::legacy_work_check()) return record_error(err);
  }
  if (simt::detail::Capture* c = simt::detail::captured_in(event)) {
    // Recorded in a capture: a wait by the same capture orders nothing more (its nodes run in
    // capture order); another stream would join the capture (a fork), which is not emulated.
    if (!simt::detail::synchronous(stream) && stream->capture == c) return cudaSuccess;
    return record_error(simt::detail::invalidate(c, simt::detail::synchronous(stream)
                                                        ? cudaErrorStreamCaptureImplicit
                                                        : cudaErrorNotSupported));
  }
  if (!simt::detail::synchronous(stream) && stream->capture)  // a dependency from outside the capture
    return record_error(simt::detail::invalidate(stream->capture, cudaErrorStreamCaptureIsolation));
  if (simt::detail::event_done(event) || event->stream == stream) return cudaSuccess;  // nothing to order
  CUstream_st* const target = event->stream;
  const uint64_t id = target->id, position = event->position;  // the record current now
  if (simt::detail::synchronous(stream)) {
    simt::detail::drain(target, position);  // the legacy stream's next work starts after it
    return cudaSuccess;
  }
  simt::detail::enqueue_locked(stream, [target, id, position] {
    if (CUstream_st* s = simt::detail::alive(target, id)) simt::detail::drain(s, position);
  });
  return cudaSuccess;
}

// ---- events ----------------------------------------------------------------------------------------------
cudaError_t cudaEventCreate(cudaEvent_t* event) { return cudaEventCreateWithFlags(event, cudaEventDefault); }
cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned flags) {
  if (!event || flags > (cudaEventBlockingSync | cudaEventDisableTiming)) return record_error(cudaErrorInvalidValue);
  Lock lock(streams_mutex());
  *event = new CUevent_st{};
  (*event)->flags = flags;
  simt::detail::live_events().insert(*event);
  return cudaSuccess;
}

// As in CUDA, an event whose record is pending may be destroyed: its queued marker then does nothing.
cudaError_t cudaEventDestroy(cudaEvent_t event) {
  Lock lock(streams_mutex());
  if (!event || !simt::detail::live_events().count(event)) return record_error(cudaErrorInvalidResourceHandle);
  simt::detail::live_events().erase(event);
  delete event;
  return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
  if (!event) return record_error(cudaErrorInvalidResourceHandle);
  if (simt::detail::synchronous(stream)) {
    if (const cudaError_t err = simt::detail::legacy_work_check()) return record_error(err);
    before_host_work(stream);  // after the blocking streams' work
  }
  Lock lock(streams_mutex());
  if (!simt::detail::live_events().count(event)) return record_error(cudaErrorInvalidResourceHandle);
  if (!simt::detail::synchronous(stream) && simt::detail::live_streams().count(stream) && stream->capture) {
    // In a capture a record is no node: it marks the point for waits of the same capture.
    if (const cudaError_t err = simt::detail::capture_node(stream, cudaGraphNodeTypeEmpty, nullptr))
      return record_error(err);
    event->recorded = true;
    event->record_id = simt::detail::next_id();
    event->stream = nullptr;
    event->timed = false;
    event->capture_id = simt::detail::capture_id(stream->capture);
    return cudaSuccess;
  }
  event->capture_id = 0;
  event->recorded = true;
  const uint64_t record_id = event->record_id = simt::detail::next_id();
  if (simt::detail::synchronous(stream)) {  // everything before it has run
    event->stream = nullptr;
    event->timed = true;
    event->when = std::chrono::steady_clock::now();
    return cudaSuccess;
  }
  if (!simt::detail::live_streams().count(stream)) return record_error(cudaErrorInvalidResourceHandle);
  event->timed = false;
  simt::detail::enqueue_locked(stream, [event, record_id] {
    // Destroyed or re-recorded since (ids are never reused): the newer record's marker counts.
    if (!simt::detail::live_events().count(event) || event->record_id != record_id) return;
    event->timed = true;
    event->when = std::chrono::steady_clock::now();
  });
  event->stream = stream;
  event->position = stream->enqueued;
  return cudaSuccess;
}

cudaError_t cudaEventSynchronize(cudaEvent_t event) {
  if (!event) return record_error(cudaErrorInvalidResourceHandle);
  Lock lock(streams_mutex());
  if (simt::detail::Capture* c = simt::detail::captured_in(event))
    return record_error(simt::detail::invalidate(c, cudaErrorCapturedEvent));
  if (event->stream) simt::detail::drain(event->stream, event->position);
  return cudaSuccess;
}

cudaError_t cudaEventQuery(cudaEvent_t event) {
  if (!event) return record_error(cudaErrorInvalidResourceHandle);
  Lock lock(streams_mutex());
  if (simt::detail::Capture* c = simt::detail::captured_in(event))
    return record_error(simt::detail::invalidate(c, cudaErrorCapturedEvent));
  if (simt::detail::event_done(event)) return cudaSuccess;
  simt::detail::run_one(event->stream);  // progress, so that polling ends
  return record_error(cudaErrorNotReady);
}

cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
  if (!ms) return record_error(cudaErrorInvalidValue);
  if (!start || !end || !start->recorded || !end->recorded || (start->flags & cudaEventDisableTiming) ||
      (end->flags & cudaEventDisableTiming))
    return record_error(cudaErrorInvalidResourceHandle);
  Lock lock(streams_mutex());
  if (!simt::detail::event_done(start) || !simt::detail::event_done(end) || !start->timed || !end->timed)
    return record_error(cudaErrorNotReady);
  *ms = std::chrono::duration<float, std::milli>(end->when - start->when).count();
  return cudaSuccess;
}
