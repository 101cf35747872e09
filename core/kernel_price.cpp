// The price of one recorded kernel run on a device spec (core/kernel_price.h): the largest of its
// memory, compute and launch terms, host transfers over the host link, collectives over the
// interconnect.
#include "core/kernel_price.h"

#include <algorithm>
#include <array>

namespace reel::profile {

const char* bound_name(Bound bound) {
  switch (bound) {
    case Bound::Memory: return "memory";
    case Bound::Compute: return "compute";
    case Bound::Launch: return "launch";
    case Bound::Interconnect: return "interconnect";
  }
  return "?";
}

namespace {

// The largest of the three terms, and which it is (the launch floor wins ties: nothing to speed up).
Prediction largest(double memory_s, double compute_s, double launch_s) {
  Prediction p{launch_s, Bound::Launch};
  if (memory_s > p.seconds) p = {memory_s, Bound::Memory};
  if (compute_s > p.seconds) p = {compute_s, Bound::Compute};
  return p;
}

// Copies over the host link: the compute stream's synchronous ones and the copy stream's
// asynchronous ones (copy_async.h2d, copy_async.d2h).
bool is_host_transfer(const std::string& kernel) {
  return kernel == "copy_from_host" || kernel == "copy_to_host" || kernel.rfind("copy_async.", 0) == 0;
}

}  // namespace

Prediction predict_kernel(const DeviceSpec& spec, const KernelCost& cost, DType dtype, bool tensor_cores) {
  // f32 on the CUDA cores unless its GEMM may use TF32; a 16-bit GEMM on the tensor cores at the
  // BF16/FP16 rate; other 16-bit runs and integers (indices, masks) are counted at the FP32 rate,
  // and their kernels are memory-bound anyway.
  double rate = spec.fp32_flops_per_s;
  if (dtype == DType::f64) rate = spec.fp64_flops_per_s;
  else if (dtype == DType::f32 && tensor_cores) rate = spec.tf32_flops_per_s;
  else if (dtype == DType::bf16 && tensor_cores) rate = spec.bf16_flops_per_s;
  else if (dtype == DType::f16 && tensor_cores) rate = spec.fp16_flops_per_s;
  return largest(static_cast<double>(cost.bytes()) / spec.bytes_per_s, static_cast<double>(cost.flops) / rate,
                 spec.launch_s);
}

Prediction predict_record(const DeviceSpec& spec, const KernelRecord& record, bool tensor_cores) {
  // On its own, an offload stall (or a wait for a copy back) is priced as if none of the copies it
  // waits for had overlapped compute: their bytes over the host link (report/predict.h's
  // predict_step simulates the copy stream instead).
  if (record.kernel == kOffloadStallKernel || record.kernel == kOffloadFetchWaitKernel)
    return {static_cast<double>(record.cost.bytes_written) / spec.host_link_bytes_per_s, Bound::Memory};
  // A transfer moves its bytes once over the host link (bytes_read and bytes_written are the same
  // bytes at its two ends).
  // A record's launch floor is one latency for each launch it made (KernelRecord::launches).
  const double floor_s = static_cast<double>(record.launches) * spec.launch_s;
  if (is_host_transfer(record.kernel))
    return largest(static_cast<double>(record.cost.bytes_written) / spec.host_link_bytes_per_s, 0, floor_s);
  // A collective sends and receives at once, each way at the interconnect's rate.
  if (is_collective_kernel(record.kernel)) {
    const double moved = static_cast<double>(std::max(record.cost.bytes_read, record.cost.bytes_written));
    const double link_s = moved / spec.interconnect_bytes_per_s;
    if (link_s > floor_s) return {link_s, Bound::Interconnect};
    return {floor_s, Bound::Launch};
  }
  // A CUDA graph's launch (core/graph.h): node by node where the capture's runs are known, each
  // priced as its own launch would be but floored at a graph node's overhead instead of an eager
  // launch's, one after another; the nodes no run stands for (memsets) cost the overhead alone.
  // The bound: the term that took the most of the graph's time.
  if (record.graph_nodes > 0 && record.graph_runs) {
    DeviceSpec node_spec = spec;
    node_spec.launch_s = kGraphNodeSeconds;
    std::array<double, 4> by_bound{};  // seconds, by Bound
    KernelRecord node;
    int64_t run_nodes = 0;
    for (const CapturedRun& run : *record.graph_runs) {
      node.kernel = run.kernel;
      node.dtype = run.dtype;
      node.stream = run.stream;
      node.cost = run.cost;
      node.launches = run.launches;
      run_nodes += run.launches;
      const Prediction p = predict_record(node_spec, node, tensor_cores);
      by_bound[static_cast<size_t>(p.bound)] += p.seconds;
    }
    const int64_t bare = record.graph_nodes - run_nodes;
    if (bare > 0) by_bound[static_cast<size_t>(Bound::Launch)] += static_cast<double>(bare) * kGraphNodeSeconds;
    Prediction p{0, Bound::Launch};
    for (size_t b = 0; b < by_bound.size(); ++b) {
      p.seconds += by_bound[b];
      if (by_bound[b] > by_bound[static_cast<size_t>(p.bound)]) p.bound = static_cast<Bound>(b);
    }
    return p;
  }
  // A graph whose runs are not known (a record made by hand): its summed cost at the f32 rate,
  // floored at a graph node's overhead per node.
  if (record.graph_nodes > 0) {
    const double rate = tensor_cores ? spec.tf32_flops_per_s : spec.fp32_flops_per_s;
    return largest(static_cast<double>(record.cost.bytes()) / spec.bytes_per_s,
                   static_cast<double>(record.cost.flops) / rate,
                   static_cast<double>(record.graph_nodes) * kGraphNodeSeconds);
  }
  // A 16-bit GEMM takes the tensor cores whatever --tf32 says (cuBLAS does); an f32 one only when asked.
  const bool tensor = is_gemm_kernel(record.kernel) && (tensor_cores || is_16bit_floating(record.dtype));
  DeviceSpec launched = spec;
  launched.launch_s = floor_s;
  return predict_kernel(launched, record.cost, record.dtype, tensor);
}

bool is_collective_kernel(const std::string& kernel) { return kernel.rfind("nccl_", 0) == 0; }

bool is_gemm_kernel(const std::string& kernel) {
  return kernel == "matmul" || kernel == "conv2d_forward" || kernel == "conv2d_backward_input" ||
         kernel == "conv2d_backward_weight";
}

}  // namespace reel::profile
