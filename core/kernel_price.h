// The price of one recorded kernel run on a GPU reel has not run on: a GPU's peaks (DeviceSpec)
// and the per-run model, a roofline with a launch floor:
//
//   predicted = max(bytes / bandwidth, FLOPs / rate, launches * launch latency)
//
// bytes and FLOPs are the run's KernelCost (every input read once, every output written once, a
// multiply-add as 2 FLOPs: the least the kernel must do); rate is that of the run's dtype: f64 the
// FP64 vector rate, f32 the FP32 CUDA-core rate, or the TF32 tensor-core rate when tensor cores
// are asked for (--tf32), bf16 and f16 GEMMs the BF16/FP16 tensor-core rates always (other 16-bit
// runs the FP32 rate: they are memory-bound); launch latency is DeviceSpec::launch_s (about 3 us a launch), once for
// each launch the run made (KernelRecord::launches). Host transfers
// (copy_from_host, copy_to_host, and the copy stream's copy_async.h2d/.d2h) move their bytes over
// the host link instead of device memory, collectives (nccl_*) over the GPU interconnect
// (DeviceSpec::interconnect_bytes_per_s, each way: a rank sends and receives at once). The bound says
// which term is the largest.
//
// It lives in core, below both of its users: report/predict.h sums it over a profiled step (with
// the copy stream simulated beside compute; the table of specs is report/device_specs.cpp), and
// nn::Sequential::plan_checkpoint prices each unit of a chain with it when given a spec (the meta
// device, whose host times are nothing, always is).
#pragma once
#include <string>

#include "core/profile.h"

namespace reel::profile {

// A GPU's peaks: what the prediction divides by. Rates are dense (no 2:4 sparsity), in FLOP/s.
struct DeviceSpec {
  std::string name;         // "h200"
  std::string description;  // "NVIDIA H200 SXM (141 GB HBM3e)"
  double bytes_per_s;       // memory bandwidth
  double fp32_flops_per_s, fp64_flops_per_s, tf32_flops_per_s, bf16_flops_per_s, fp16_flops_per_s;  // dense
  int sms;
  double host_link_bytes_per_s;  // each way
  double launch_s;               // per-launch latency floor, 3e-6
  double interconnect_bytes_per_s;  // GPU to GPU, each way (NVLink, or PCIe where a card has none)
};

// Interconnect: a collective (ProcessGroup's nccl_* launches), its bytes over the GPU interconnect.
enum class Bound { Memory, Compute, Launch, Interconnect };
constexpr int kNumBounds = 4;
const char* bound_name(Bound bound);  // "memory", "compute", "launch", "interconnect"

struct Prediction {
  double seconds = 0;
  Bound bound = Bound::Launch;
};
// One kernel run of `cost` in `dtype` on `spec`: max(bytes / bandwidth, FLOPs / rate, launch).
// tensor_cores: the run is a GEMM on the tensor cores (f32: TF32; bf16, f16: their tensor rates).
Prediction predict_kernel(const DeviceSpec& spec, const KernelCost& cost, DType dtype, bool tensor_cores = false);
// One recorded run: predict_kernel (a 16-bit GEMM on the tensor cores whatever `tensor_cores`, the f32
// GEMMs' TF32, says), except that host transfers go over the host link, a collective (is_collective_kernel)
// sends and receives its bytes over the interconnect at once (the larger of the two, or the launch floor), and an
// offload stall or fetch wait (below), priced on its own, waits for its copies' bytes over the
// host link as if none had overlapped compute.
Prediction predict_record(const DeviceSpec& spec, const KernelRecord& record, bool tensor_cores = false);
// The record autograd::Offload makes for a stall: cost.bytes_written the copies the compute stream
// waits for, cost.bytes_read the copies queued behind them on the copy stream (not waited for).
inline constexpr const char* kOffloadStallKernel = "offload_stall";
// The record autograd::Offload makes where the compute stream waits for a save's copy back before
// the rule that reads it: cost.bytes_written the copy waited for, cost.bytes_read the copies its
// thread's offload enqueued on the copy stream after it (not waited for).
inline constexpr const char* kOffloadFetchWaitKernel = "offload_fetch_wait";
// A CUDA graph's launch (KernelRecord::graph_nodes > 0, core/graph.h) is priced node by node: each
// captured kernel run (KernelRecord::graph_runs) as predict_record prices it eagerly but with
// kGraphNodeSeconds as its floor instead of DeviceSpec::launch_s, summed (the nodes run back to back
// on the device with no host launch between them), plus kGraphNodeSeconds for each node no run
// stands for (work issued outside a profiled run). Each run (eager or captured) is floored at one
// latency per launch it made (KernelRecord::launches: a GEMM and its bias pass are two). A record without its runs (made by hand) is priced as max(bytes /
// bandwidth, FLOPs / the f32 rate, nodes * kGraphNodeSeconds), which prices a graph mixing memory-
// and compute-bound kernels low. The per-node overhead: NVIDIA's "Getting Started with CUDA Graphs"
// (developer.nvidia.com/blog/cuda-graphs, 2019) measured a chain of short kernels (about 2.9 us
// each) at about 3.4 us a kernel as a graph against 3.8 us launched on a stream: about 0.5 us of
// overhead a node.
inline constexpr double kGraphNodeSeconds = 0.5e-6;
// The kernels that could take the tensor cores: the GEMMs (matmul, the cuDNN convolutions).
bool is_gemm_kernel(const std::string& kernel);
// The collectives distributed::ProcessGroup records: "nccl_all_reduce", "nccl_all_gather", ...
bool is_collective_kernel(const std::string& kernel);

}  // namespace reel::profile
