// core/graph.cpp: reel::CudaGraph (core/graph.h): the allocator's private pool and the backend's
// capture around the user's function, and the clean-up when the function or the capture fails.
#include "core/graph.h"

#include <optional>
#include <string>

#include "core/allocator.h"
#include "core/device_backend.h"
#include "core/error.h"

namespace reel {

CudaGraph::~CudaGraph() {
  if (exec_) backend_for(device_).destroy_graph(exec_);
  if (pool_) allocator_for(device_).release_graph_pool(pool_);
}

int64_t CudaGraph::pool_bytes() const { return pool_ ? allocator_for(device_).graph_pool_bytes(pool_) : 0; }

void CudaGraph::capture(Device device, const std::function<void()>& fn) {
  REEL_CHECK(!exec_, "CudaGraph::capture: this graph holds a capture on ", device_,
             " already; make a new CudaGraph for another");
  REEL_CHECK(!device.is_cpu(), "CudaGraph::capture: device cpu has no CUDA graphs; on cpu call the function "
                               "itself (a graph replays device work with one launch)");
  const std::string what = "CUDA graph capture on " + device.str();
  DeviceBackend& backend = backend_for(device);
  CachingAllocator& allocator = allocator_for(device);
  const int64_t pool = allocator.begin_graph_pool(what);
  const auto discard = [&] {
    allocator.end_graph_capture();
    allocator.release_graph_pool(pool);
  };
  try {
    backend.begin_capture();
  } catch (...) {
    discard();
    throw;
  }
  profile::GraphCaptureScope scope;
  try {
    fn();
  } catch (const Error& e) {
    backend.abort_capture();
    discard();
    REEL_FAIL("CudaGraph::capture on ", device, ": the captured function failed, the capture is discarded: ",
              e.what());
  } catch (...) {
    backend.abort_capture();
    discard();
    throw;
  }
  int64_t nodes = 0;
  try {
    exec_ = backend.end_capture(&nodes);
  } catch (const Error& e) {
    discard();
    REEL_FAIL("CudaGraph::capture on ", device, ": CUDA refused the capture: ", e.what());
  }
  allocator.end_graph_capture();
  device_ = device;
  nodes_ = nodes;
  pool_ = pool;
  cost_ = scope.cost();
  runs_ = std::make_shared<const std::vector<profile::CapturedRun>>(scope.runs());
}

void CudaGraph::replay() {
  REEL_CHECK(exec_, "CudaGraph::replay: nothing captured (call capture first)");
  DeviceBackend& backend = backend_for(device_);
  std::optional<profile::KernelRun> run;  // one record for the whole graph
  if (profile::enabled()) {
    run.emplace(profile::kGraphKernel, device_, DType::f32, "", cost_);
    run->set_graph(nodes_, runs_);
  }
  backend.launch_graph(exec_);
}

}  // namespace reel
