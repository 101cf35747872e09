// kernels/simt/simt_graphs.cpp: stream capture and CUDA graphs in simt.h's emulation branch.
// While a created stream captures, every item that would be queued on it (kernel launches, async
// copies and memsets, cuBLAS and cuDNN calls) becomes a node of the capture's graph instead, in
// capture order; cudaGraphLaunch runs the nodes in that order, with the arguments captured (a kernel's
// parameters, a copy's pointers and size, a GEMM's scalars), as many times as it is launched.
// The calls CUDA refuses during capture are refused here with CUDA's error, and spoil the capture
// (kernels/simt/README.md, "Graphs", lists the rules). One stream per capture: a fork into another
// stream (cudaStreamWaitEvent on a captured event) is not emulated and answers cudaErrorNotSupported.
#include <algorithm>
#include <atomic>
#include <cstring>
#include <thread>

#include "simt_check.h"
#include "simt_streams_internal.h"

using simt::detail::record_error;
using simt::detail::streams_mutex;
using Lock = std::lock_guard<std::recursive_mutex>;

namespace simt {
namespace detail {

struct Capture {
  uint64_t id;
  cudaStreamCaptureMode mode;
  std::thread::id thread;  // the thread that began it
  CUstream_st* stream;     // the stream capturing
  bool invalidated = false;
  std::unique_ptr<CUgraph_st> graph = std::make_unique<CUgraph_st>();
};

namespace {
std::vector<std::unique_ptr<Capture>>& captures() {  // in progress, under the lock
  static auto* v = new std::vector<std::unique_ptr<Capture>>;
  return *v;
}
// How many captures are in progress: the checks on every legacy-stream call read it without the lock.
std::atomic<int> g_active{0};

bool prohibits_unsafe(const Capture& c) {
  return c.mode == cudaStreamCaptureModeGlobal ||
         (c.mode == cudaStreamCaptureModeThreadLocal && c.thread == std::this_thread::get_id());
}
}  // namespace

bool captures_active() { return g_active.load(std::memory_order_acquire) != 0; }

cudaError_t capture_node(CUstream_st* s, cudaGraphNodeType type, std::function<void()> work) {
  Capture* c = s->capture;
  if (c->invalidated) return cudaErrorStreamCaptureInvalidated;
  if (work) c->graph->nodes.push_back(std::make_unique<CUgraphNode_st>(CUgraphNode_st{type, std::move(work)}));
  return cudaSuccess;
}

cudaError_t invalidate(Capture* c, cudaError_t error) {
  c->invalidated = true;
  return error;
}

Capture* active_capture(uint64_t id) {
  for (const auto& c : captures())
    if (c->id == id) return c.get();
  return nullptr;
}
uint64_t capture_id(const Capture* c) { return c->id; }

cudaError_t unsafe_call_check() {
  if (!captures_active()) return cudaSuccess;
  Lock lock(streams_mutex());
  cudaError_t error = cudaSuccess;
  for (const auto& c : captures())
    if (prohibits_unsafe(*c)) error = invalidate(c.get(), cudaErrorStreamCaptureUnsupported);
  return error;
}

cudaError_t device_sync_check() {
  if (!captures_active()) return cudaSuccess;
  Lock lock(streams_mutex());
  cudaError_t error = cudaSuccess;
  for (const auto& c : captures()) error = invalidate(c.get(), cudaErrorStreamCaptureUnsupported);
  return error;
}

// The legacy stream waits for every blocking stream: one that captures has no work to wait for.
cudaError_t legacy_work_check() {
  if (!captures_active()) return cudaSuccess;
  Lock lock(streams_mutex());
  cudaError_t error = cudaSuccess;
  for (const auto& c : captures())
    if (blocking(c->stream)) error = invalidate(c.get(), cudaErrorStreamCaptureImplicit);
  return error;
}

cudaError_t dry_launch(cudaStream_t stream) {
  if (!captures_active()) return cudaSuccess;
  if (synchronous(stream)) return record_error(legacy_work_check());
  Lock lock(streams_mutex());
  if (live_streams().count(stream) && stream->capture)
    return record_error(capture_node(stream, cudaGraphNodeTypeKernel, [] {}));
  return cudaSuccess;
}

bool library_call(cudaStream_t stream, std::function<void()> work) {
  count_work();
  if (captures_active()) {
    if (synchronous(stream)) {
      if (const cudaError_t err = legacy_work_check()) return !record_error(err);
    } else {
      Lock lock(streams_mutex());
      if (live_streams().count(stream) && stream->capture) {
        if (dry_run()) work = [] {};  // a node that computes nothing, as the call would have
        return !record_error(capture_node(stream, cudaGraphNodeTypeKernel, std::move(work)));
      }
    }
  }
  before_host_work(stream);
  if (!dry_run()) work();
  return true;
}

bool pageable(const void* host) {
  uintptr_t base = 0;
  size_t size = 0;
  return !check::find_allocation(reinterpret_cast<uintptr_t>(host), &base, &size);
}

}  // namespace detail
}  // namespace simt

// ---- capture ------------------------------------------------------------------------------------------
cudaError_t cudaStreamBeginCapture(cudaStream_t stream, cudaStreamCaptureMode mode) {
  if (simt::detail::synchronous(stream)) return record_error(cudaErrorStreamCaptureUnsupported);
  if (mode != cudaStreamCaptureModeGlobal && mode != cudaStreamCaptureModeThreadLocal &&
      mode != cudaStreamCaptureModeRelaxed)
    return record_error(cudaErrorInvalidValue);
  Lock lock(streams_mutex());
  if (!simt::detail::live_streams().count(stream)) return record_error(cudaErrorInvalidResourceHandle);
  if (stream->capture) return record_error(cudaErrorIllegalState);
  // Work queued before the capture is not part of it: it runs first (a schedule a GPU could take).
  simt::detail::drain_all(stream);
  auto capture = std::make_unique<simt::detail::Capture>(
      simt::detail::Capture{simt::detail::next_id(), mode, std::this_thread::get_id(), stream});
  stream->capture = capture.get();
  simt::detail::captures().push_back(std::move(capture));
  simt::detail::g_active.fetch_add(1, std::memory_order_acq_rel);
  return cudaSuccess;
}

cudaError_t cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t* graph) {
  if (!graph) return record_error(cudaErrorInvalidValue);
  if (simt::detail::synchronous(stream)) return record_error(cudaErrorIllegalState);
  Lock lock(streams_mutex());
  if (!simt::detail::live_streams().count(stream)) return record_error(cudaErrorInvalidResourceHandle);
  simt::detail::Capture* c = stream->capture;
  if (!c) return record_error(cudaErrorIllegalState);
  if (c->mode != cudaStreamCaptureModeRelaxed && c->thread != std::this_thread::get_id())
    return record_error(cudaErrorStreamCaptureWrongThread);
  auto& all = simt::detail::captures();
  const auto it = std::find_if(all.begin(), all.end(), [c](const auto& p) { return p.get() == c; });
  std::unique_ptr<simt::detail::Capture> ended = std::move(*it);
  all.erase(it);
  simt::detail::g_active.fetch_sub(1, std::memory_order_acq_rel);
  stream->capture = nullptr;
  if (ended->invalidated) {
    *graph = nullptr;
    return record_error(cudaErrorStreamCaptureInvalidated);
  }
  *graph = ended->graph.release();
  return cudaSuccess;
}

cudaError_t cudaStreamIsCapturing(cudaStream_t stream, cudaStreamCaptureStatus* status) {
  if (!status) return record_error(cudaErrorInvalidValue);
  Lock lock(streams_mutex());
  if (simt::detail::synchronous(stream)) {
    // Asking the legacy stream while a blocking stream captures is itself an implicit dependency.
    for (const auto& c : simt::detail::captures())
      if (simt::detail::blocking(c->stream)) return record_error(cudaErrorStreamCaptureImplicit);
    *status = cudaStreamCaptureStatusNone;
    return cudaSuccess;
  }
  if (!simt::detail::live_streams().count(stream)) return record_error(cudaErrorInvalidResourceHandle);
  *status = !stream->capture                ? cudaStreamCaptureStatusNone
            : stream->capture->invalidated ? cudaStreamCaptureStatusInvalidated
                                           : cudaStreamCaptureStatusActive;
  return cudaSuccess;
}

// ---- graphs -----------------------------------------------------------------------------------------
cudaError_t cudaGraphInstantiate(cudaGraphExec_t* exec, cudaGraph_t graph, unsigned long long flags) {
  if (!exec || !graph || (flags & ~static_cast<unsigned long long>(cudaGraphInstantiateFlagAutoFreeOnLaunch)))
    return record_error(cudaErrorInvalidValue);
  auto work = std::make_shared<std::vector<std::function<void()>>>();
  work->reserve(graph->nodes.size());
  for (const auto& node : graph->nodes) work->push_back(node->work);  // the exec outlives the graph
  *exec = new CUgraphExec_st{std::move(work)};
  return cudaSuccess;
}
cudaError_t cudaGraphInstantiateWithFlags(cudaGraphExec_t* exec, cudaGraph_t graph, unsigned long long flags) {
  return cudaGraphInstantiate(exec, graph, flags);
}

// On a created stream the graph is one queued item that runs every node; on the legacy stream it
// runs now. Into a capturing stream it becomes one node (a child graph) of that capture.
cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t stream) {
  if (!exec) return record_error(cudaErrorInvalidResourceHandle);
  simt::detail::count_work();
  std::shared_ptr<const std::vector<std::function<void()>>> work = exec->work;
  auto run = [work] {
    for (const auto& node : *work) node();
  };
  if (simt::detail::is_deferred(stream)) return simt::detail::enqueue(stream, run, cudaGraphNodeTypeGraph);
  if (const cudaError_t err = simt::detail::legacy_work_check()) return record_error(err);
  simt::detail::before_host_work(stream);
  run();
  return cudaSuccess;
}

cudaError_t cudaGraphDestroy(cudaGraph_t graph) {
  if (!graph) return record_error(cudaErrorInvalidValue);
  delete graph;
  return cudaSuccess;
}
cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec) {
  if (!exec) return record_error(cudaErrorInvalidValue);
  delete exec;  // a launch still queued holds the nodes' work itself
  return cudaSuccess;
}

cudaError_t cudaGraphGetNodes(cudaGraph_t graph, cudaGraphNode_t* nodes, size_t* count) {
  if (!graph || !count) return record_error(cudaErrorInvalidValue);
  const size_t n = graph->nodes.size();
  if (!nodes) {
    *count = n;
    return cudaSuccess;
  }
  const size_t written = std::min(*count, n);
  for (size_t i = 0; i < written; ++i) nodes[i] = graph->nodes[i].get();
  *count = written;
  return cudaSuccess;
}

cudaError_t cudaGraphNodeGetType(cudaGraphNode_t node, cudaGraphNodeType* type) {
  if (!node || !type) return record_error(cudaErrorInvalidValue);
  *type = node->type;
  return cudaSuccess;
}
