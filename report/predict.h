// A predicted device step: the kernels a Profiler recorded (an emulated CUDA run, or a CPU run)
// placed against the roof of a GPU reel has not run on, from a small table of specs
// (report/device_specs.cpp: h200, h100, a100, rtx4090), with the predicted time per kernel, per op
// and for the step, and what bounds each.
//
// The model, per kernel run (a roofline with a launch floor, nothing else):
//
//   predicted = max(bytes / bandwidth, FLOPs / rate, launch latency)
//
// bytes and FLOPs are the run's KernelCost (every input read once, every output written once, a
// multiply-add as 2 FLOPs: the least the kernel must do); rate is that of the run's dtype: f64 the
// FP64 vector rate, f32 the FP32 CUDA-core rate, or the TF32 tensor-core rate when tensor cores
// are asked for (--tf32), bf16 and f16 GEMMs the BF16/FP16 tensor-core rates always (other 16-bit
// runs the FP32 rate: they are memory-bound); launch latency is DeviceSpec::launch_s (about 3 us a launch). Host transfers
// (copy_from_host, copy_to_host, and the copy stream's copy_async.h2d/.d2h) move their bytes over
// the host link instead of device memory. The bound says which of the three terms is the largest.
// Runs on the compute stream do not overlap: the step is the sum of its runs; the copy stream's
// copies run beside it and are summed apart (StepPrediction::copy_stream). The copy stream is
// simulated beside the compute stream so that an offload stall ("offload_stall", recorded by
// autograd::Offload when the bytes waiting for their copy to the host pass its bound) is priced:
// the compute stream waits until the copies it waited for are predicted done over the host link
// (StepPrediction::offload_stalls, in the step). Backward's waits for copies back are priced the
// same way: autograd::Offload records an "offload_fetch_wait" run where a rule first reads a save
// copied back (h2d), and the compute stream waits there until that copy is predicted done
// (StepPrediction::fetch_waits, in the step). So the prediction is a floor for a kernel that
// reaches its roof: it ignores caches (a kernel whose data stays in L2 can beat bytes / bandwidth),
// occupancy, tails of small grids, and the host work between launches (the tape, allocation),
// which the first GPU run measures.
//
// Which records are placed: a run that used a CUDA device is predicted from its CUDA records (and
// the copies back to the host); its other CPU records are host work and are counted apart. A CPU
// run is predicted whole, as if its kernels ran on the device (a CPU kernel may be one launch where
// the CUDA backend makes two; the launch floor is then low).
#pragma once
#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "core/profile.h"

namespace reel::profile {

// A GPU's peaks: what the prediction divides by. Rates are dense (no 2:4 sparsity), in FLOP/s.
struct DeviceSpec {
  std::string name;             // "h200"
  std::string description;      // "NVIDIA H200 SXM (141 GB HBM3e)"
  double bytes_per_s;           // memory bandwidth
  double fp32_flops_per_s, fp64_flops_per_s, tf32_flops_per_s, bf16_flops_per_s, fp16_flops_per_s;  // dense
  int sms;
  double host_link_bytes_per_s;  // each way
  double launch_s;              // per-launch latency floor, 3e-6
};
// The spec named `name` (report/device_specs.cpp); reel::Error listing the known names otherwise.
const DeviceSpec& device_spec(const std::string& name);
const std::vector<DeviceSpec>& device_specs();

enum class Bound { Memory, Compute, Launch };
const char* bound_name(Bound bound);  // "memory", "compute", "launch"

struct Prediction {
  double seconds = 0;
  Bound bound = Bound::Launch;
};
// One kernel run of `cost` in `dtype` on `spec`: max(bytes / bandwidth, FLOPs / rate, launch).
// tensor_cores: the run is a GEMM on the tensor cores (f32: TF32; bf16, f16: their tensor rates).
Prediction predict_kernel(const DeviceSpec& spec, const KernelCost& cost, DType dtype, bool tensor_cores = false);
// One recorded run: predict_kernel, except that host transfers go over the host link. A 16-bit
// GEMM is on the tensor cores whatever `tensor_cores` (the f32 GEMMs' TF32) says.
Prediction predict_record(const DeviceSpec& spec, const KernelRecord& record, bool tensor_cores = false);
// The record autograd::Offload makes for a stall: cost.bytes_written the copies the compute stream
// waits for, cost.bytes_read the copies queued behind them on the copy stream (not waited for).
inline constexpr const char* kOffloadStallKernel = "offload_stall";
// The record autograd::Offload makes where the compute stream waits for a save's copy back before
// the rule that reads it: cost.bytes_written the copy waited for, cost.bytes_read the copies its
// thread's offload enqueued on the copy stream after it (not waited for).
inline constexpr const char* kOffloadFetchWaitKernel = "offload_fetch_wait";
// The kernels that could take the tensor cores: the GEMMs (matmul, the cuDNN convolutions).
bool is_gemm_kernel(const std::string& kernel);

// A group of runs (one kernel, or one op) measured and predicted.
struct PredictedGroup {
  std::string key;           // "matmul", "unary.gelu"; for ops "linear.backward", "(outside ops)"
  int64_t calls = 0;
  double measured_s = 0;     // of the profiled run (host times for emulated or CPU records)
  double predicted_s = 0;    // FP32 CUDA cores for f32
  double bound_s[3] = {0, 0, 0};  // predicted seconds by Bound
  int64_t flops = 0, bytes = 0;
  Bound bound() const;       // the bound holding most of predicted_s
  bool mixed() const;        // runs of the group differ in bound
};
// Everything print_prediction prints, over all the profiled steps (divide by `steps` for one).
struct StepPrediction {
  std::vector<PredictedGroup> kernels;  // largest predicted first
  std::vector<PredictedGroup> ops;      // largest predicted first
  PredictedGroup total;                 // key "step": all placed runs on the compute stream
  PredictedGroup copy_stream;           // the copy stream's copies (copy_async): over the host link,
                                        // beside compute, so not in total
  PredictedGroup offload_stalls;        // the compute stream's waits for offload's copies out (in total)
  PredictedGroup fetch_waits;           // ...and for its copies back, in backward (in total)
  double tf32_s = 0;          // the total with the f32 GEMMs on TF32 tensor cores
  double roofline_s = 0;      // the total without the launch floor: max(bytes / bandwidth, FLOPs / rate)
  int64_t host_runs = 0;      // CPU records of a CUDA run, not placed
  double host_measured_s = 0;
  bool emulated = false;      // some placed record is an emulated CUDA run
  bool dry = false;           // some placed record is the meta device's: nothing ran, nothing was measured
  bool from_cpu = false;      // the placed records are a CPU run's
};
// offload_inflight_bytes > 0: the bound Offload ran under (max_inflight_bytes). The stalls are then
// re-decided at this device's speeds: each copy out (copy_async.d2h) joins the bytes waiting, the
// ones predicted done by then leave, and past the bound the compute stream waits for the oldest,
// as Offload does; the profiled run's own stalls (decided by its own timing, an emulator's
// included) are set aside. 0: the recorded stalls are priced as they are.
StepPrediction predict_step(const std::vector<KernelRecord>& records, const DeviceSpec& spec,
                            int64_t offload_inflight_bytes = 0);

// Prints the spec and the model, the kernel table (the 20 largest predicted), the op table and the
// step, per step (the profiled steps' totals divided by `steps`), each beside the measured time of
// the run; then the step with the f32 GEMMs on TF32 and the roofline alone (no launch floor).
// offload_inflight_bytes: as predict_step's.
void print_prediction(std::ostream& os, const Profiler& profiler, const DeviceSpec& spec, int64_t steps = 1,
                      int64_t offload_inflight_bytes = 0);

}  // namespace reel::profile
