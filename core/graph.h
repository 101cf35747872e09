// core/graph.h: reel::CudaGraph, a whole stretch of device work (a training step) captured once as
// a CUDA graph and replayed with one launch, as torch.cuda.CUDAGraph does.
//
//   reel::CudaGraph graph;
//   step();                                   // warm-up: the cache then holds the step's blocks
//   graph.capture(device, [&] { step(); });   // records the step's kernels; runs none of them
//   for (...) { fill static inputs; graph.replay(); read static outputs; }
//
// What capture does: the function runs once on the host with this thread's compute stream
// switched to a capturing CUDA stream (kernels/cuda/launch.h: stream()), so every kernel launch,
// device-to-device copy and cuBLAS / cuDNN call becomes a node of the graph instead of running;
// the cuBLAS and cuDNN handles are bound to that stream. The device's caching allocator gives the
// capture a private pool (core/allocator.h: begin_graph_pool): blocks allocated during the capture
// stay reserved for the graph while it lives, so the addresses its nodes captured stay valid for
// every replay and nothing outside the graph is handed them. A request the cache cannot serve from
// a free block would need cudaMalloc, which a capture cannot record: it raises reel::Error naming
// the capture (run the function once before capturing, as PyTorch's warm-up). replay() launches
// the graph on the compute stream: the same kernels with the same arguments and addresses.
//
// What a capture refuses (CUDA's rules, kernels/simt/README.md "Graphs"): anything that makes the
// host wait for the device or allocates from the system: a copy to or from pageable host memory
// (Tensor::to(cpu), item()), a stream or device synchronisation, cudaMalloc. The error, a
// reel::Error, or any other exception in the function, ends the capture and discards it: the
// allocator leaves capture mode (the pool is released), this thread's stream is the legacy stream
// again, and the tape and the allocator are usable as before; the error says what was refused.
// Host values captured are fixed: a scalar passed to a kernel (a learning rate, a Philox seed and
// offset) is replayed as captured; change device tensors between replays, not host numbers.
//
// Devices: cuda (a GPU, or the simt emulator, whose graphs are kernels/simt/simt_graphs.cpp); meta
// captures the dry run's launches, and a replay is one profiler record of kGraphKernel with
// graph_nodes = N and the kernel runs the capture saw (core/profile.h), which the predictor prices
// node by node (core/kernel_price.h). On cpu there
// is no graph to capture: capture() raises reel::Error (run the function itself instead), rather
// than pretend that replays are cheaper than calls.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "core/device.h"
#include "core/profile.h"

namespace reel {

class CudaGraph {
 public:
  CudaGraph() = default;
  ~CudaGraph();  // destroys the graph and releases its pool to the device's cache
  CudaGraph(const CudaGraph&) = delete;
  CudaGraph& operator=(const CudaGraph&) = delete;

  // Captures what fn enqueues on `device` from this thread. Once per CudaGraph.
  void capture(Device device, const std::function<void()>& fn);
  // Launches the captured graph on the device's compute stream (asynchronous, like a kernel).
  void replay();

  bool captured() const { return exec_ != nullptr; }
  Device device() const { return device_; }
  int64_t nodes() const { return nodes_; }  // the graph's nodes (kernels, copies, library calls)
  int64_t pool_bytes() const;               // bytes the graph's private pool holds

 private:
  Device device_ = Device::cpu();
  void* exec_ = nullptr;  // the backend's instantiated graph
  int64_t nodes_ = 0;
  int64_t pool_ = 0;           // the allocator's pool id, 0: none
  profile::KernelCost cost_;   // the captured kernels' costs, summed
  std::shared_ptr<const std::vector<profile::CapturedRun>> runs_;  // each captured kernel run
};

}  // namespace reel
