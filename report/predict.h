// A predicted device step: the kernels a Profiler recorded (an emulated CUDA run, or a CPU run)
// placed against the roof of a GPU reel has not run on, from a small table of specs
// (report/device_specs.cpp: h200, h100, a100, rtx4090), with the predicted time per kernel, per op
// and for the step, and what bounds each.
//
// The model, per kernel run, is core/kernel_price.h's (a roofline with a launch floor, nothing
// else: max(bytes / bandwidth, FLOPs / rate, launch latency), host transfers over the host link,
// collectives (nccl_*) over the GPU interconnect);
// it lives there so that the checkpoint planner (nn::Sequential::plan_checkpoint) prices its units
// with the same formula. This file sums it over a step.
//
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

#include "core/kernel_price.h"  // DeviceSpec, Bound, Prediction, predict_kernel, predict_record
#include "core/profile.h"

namespace reel::profile {

// The spec named `name` (report/device_specs.cpp); reel::Error listing the known names otherwise.
const DeviceSpec& device_spec(const std::string& name);
const std::vector<DeviceSpec>& device_specs();

// A group of runs (one kernel, or one op) measured and predicted.
struct PredictedGroup {
  std::string key;           // "matmul", "unary.gelu"; for ops "linear.backward", "(outside ops)"
  int64_t calls = 0;
  double measured_s = 0;     // of the profiled run (host times for emulated or CPU records)
  double predicted_s = 0;    // FP32 CUDA cores for f32
  double bound_s[kNumBounds] = {};  // predicted seconds by Bound
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
