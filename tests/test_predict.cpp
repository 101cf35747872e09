// The predicted device step (report/predict.h) on synthetic kernel records and a made-up device:
// memory- and compute-bound runs take their closed-form times, a tiny one the launch floor, host
// copies the host link; backward's waits for offload's copies back; the per-kernel, per-op and
// step sums of a Profiler; the printed table;
// the specs table and its error for an unknown device.
#include <sstream>

#include "report/predict.h"
#include "testing.h"

using namespace reel;
using namespace reel::profile;

namespace {

// Round numbers: 1 TB/s, 10 TFLOP/s FP32, 5 FP64, 80 TF32; 10 GB/s host link; 2 us a launch; 100 GB/s
// interconnect.
DeviceSpec made_up() {
  DeviceSpec d;
  d.name = "made-up";
  d.description = "a device with round numbers";
  d.bytes_per_s = 1e12;
  d.fp32_flops_per_s = 10e12;
  d.fp64_flops_per_s = 5e12;
  d.tf32_flops_per_s = 80e12;
  d.bf16_flops_per_s = 160e12;
  d.fp16_flops_per_s = 160e12;
  d.sms = 10;
  d.host_link_bytes_per_s = 10e9;
  d.launch_s = 2e-6;
  d.interconnect_bytes_per_s = 100e9;
  return d;
}

KernelCost cost(int64_t flops, int64_t read, int64_t written) {
  KernelCost c;
  c.flops = flops;
  c.bytes_read = read;
  c.bytes_written = written;
  return c;
}

}  // namespace

TEST_CASE("predict_kernel: a memory-bound run takes bytes / bandwidth") {
  // 64 MB read, 32 MB written, 24 MFLOP: 96 us of memory against 2.4 us of FP32.
  const Prediction p = predict_kernel(made_up(), cost(24'000'000, 64'000'000, 32'000'000), DType::f32);
  CHECK(p.bound == Bound::Memory);
  CHECK(p.seconds == doctest::Approx(96e-6).epsilon(1e-12));
}

TEST_CASE("predict_kernel: a compute-bound run takes FLOPs / the rate of its dtype") {
  // A 1024^3 GEMM: 2^31 FLOP, 12 MiB moved (12.6 us of memory).
  const int64_t n = 1024, flops = 2 * n * n * n, bytes = 4 * n * n;
  const DeviceSpec d = made_up();
  Prediction p = predict_kernel(d, cost(flops, 2 * bytes, bytes), DType::f32);
  CHECK(p.bound == Bound::Compute);
  CHECK(p.seconds == doctest::Approx(static_cast<double>(flops) / 10e12).epsilon(1e-12));
  SUBCASE("f64 at the FP64 rate") {
    p = predict_kernel(d, cost(flops, 4 * bytes, 2 * bytes), DType::f64);
    CHECK(p.bound == Bound::Compute);
    CHECK(p.seconds == doctest::Approx(static_cast<double>(flops) / 5e12).epsilon(1e-12));
  }
  SUBCASE("f32 on tensor cores at the TF32 rate") {
    p = predict_kernel(d, cost(flops, 2 * bytes, bytes), DType::f32, true);
    CHECK(p.bound == Bound::Compute);  // 26.8 us, still above the 12.6 us of memory
    CHECK(p.seconds == doctest::Approx(static_cast<double>(flops) / 80e12).epsilon(1e-12));
  }
}

TEST_CASE("predict_kernel: a tiny run takes the launch floor; no work at all too") {
  const DeviceSpec d = made_up();
  Prediction p = predict_kernel(d, cost(256, 1024, 1024), DType::f32);
  CHECK(p.bound == Bound::Launch);
  CHECK(p.seconds == 2e-6);
  p = predict_kernel(d, KernelCost{}, DType::i64);
  CHECK(p.bound == Bound::Launch);
  CHECK(p.seconds == 2e-6);
  CHECK(std::string(bound_name(Bound::Memory)) == "memory");
  CHECK(std::string(bound_name(Bound::Compute)) == "compute");
  CHECK(std::string(bound_name(Bound::Launch)) == "launch");
}

TEST_CASE("predict_record: the launch floor is one latency for each launch the record made") {
  const DeviceSpec d = made_up();
  KernelRecord r;
  r.kernel = "layernorm_backward";
  r.cost = cost(256, 1024, 1024);
  r.launches = 3;  // e.g. a reduction in three passes
  Prediction p = predict_record(d, r);
  CHECK(p.bound == Bound::Launch);
  CHECK(p.seconds == doctest::Approx(6e-6).epsilon(1e-12));
  r.launches = 0;  // an entry point that launched nothing (an empty tensor) costs nothing
  p = predict_record(d, r);
  CHECK(p.seconds == doctest::Approx(2048 / 1e12).epsilon(1e-12));
  r.cost = cost(0, 10'000'000, 10'000'000);  // 20 us of memory: above two launches' floor
  r.launches = 2;
  p = predict_record(d, r);
  CHECK(p.bound == Bound::Memory);
  CHECK(p.seconds == doctest::Approx(20e-6).epsilon(1e-12));
}

TEST_CASE("predict_record: host copies over the host link; only GEMMs take the tensor cores") {
  const DeviceSpec d = made_up();
  KernelRecord copy;
  copy.kernel = "copy_from_host";
  copy.cost = cost(0, 1'000'000, 1'000'000);  // 1 MB each end: 100 us over 10 GB/s
  Prediction p = predict_record(d, copy);
  CHECK(p.bound == Bound::Memory);
  CHECK(p.seconds == doctest::Approx(100e-6).epsilon(1e-12));

  KernelRecord gemm;
  gemm.kernel = "matmul";
  gemm.cost = cost(int64_t{8} << 30, 1 << 20, 1 << 20);
  CHECK(predict_record(d, gemm, true).seconds == doctest::Approx(8.0 * (1 << 30) / 80e12).epsilon(1e-12));
  CHECK(predict_record(d, gemm, false).seconds == doctest::Approx(8.0 * (1 << 30) / 10e12).epsilon(1e-12));
  KernelRecord attention = gemm;
  attention.kernel = "attention_forward";  // SIMT: FP32 even when GEMMs may use TF32
  CHECK(predict_record(d, attention, true).seconds == doctest::Approx(8.0 * (1 << 30) / 10e12).epsilon(1e-12));
}

TEST_CASE("predict_record: a bf16 or f16 GEMM takes its tensor-core rate, with or without TF32") {
  // Autocast's GEMMs: priced at FP32's CUDA-core rate they would make bf16 look no faster than f32,
  // and --fit would never choose it.
  const DeviceSpec d = made_up();
  KernelRecord gemm;
  gemm.kernel = "matmul";
  gemm.cost = cost(int64_t{8} << 30, 1 << 20, 1 << 20);
  for (DType dtype : {DType::bf16, DType::f16}) {
    CAPTURE(dtype_name(dtype));
    gemm.dtype = dtype;
    for (bool tf32 : {false, true}) {
      const Prediction p = predict_record(d, gemm, tf32);
      CHECK(p.bound == Bound::Compute);
      CHECK(p.seconds == doctest::Approx(8.0 * (1 << 30) / 160e12).epsilon(1e-12));
    }
    KernelRecord gelu = gemm;  // not a GEMM: the FP32 rate
    gelu.kernel = "unary.gelu";
    CHECK(predict_record(d, gelu).seconds == doctest::Approx(8.0 * (1 << 30) / 10e12).epsilon(1e-12));
  }
  CHECK(predict_kernel(d, gemm.cost, DType::bf16, true).seconds ==
        doctest::Approx(8.0 * (1 << 30) / 160e12).epsilon(1e-12));
}

TEST_CASE("predict_step: per kernel, per op and step sums of a Profiler's records") {
  const DeviceSpec d = made_up();
  Profiler prof;
  // Two steps of: a compute-bound GEMM in op "linear" (2 GFLOP: 200 us), a memory-bound gelu in
  // op "gelu" (10 MB: 10 us), and its backward (20 MB: 20 us), a tiny fill outside ops (2 us).
  for (int step = 0; step < 2; ++step) {
    {
      OpScope op("linear", 0, false);
      KernelRun run("matmul", Device::cpu(), DType::f32, "", cost(2'000'000'000, 1'000'000, 1'000'000));
    }
    {
      OpScope op("gelu", 1, false);
      KernelRun run("unary.gelu", Device::cpu(), DType::f32, "", cost(2'500'000, 5'000'000, 5'000'000));
    }
    {
      OpScope op("gelu", 1, true);
      KernelRun run("unary_backward.gelu", Device::cpu(), DType::f32, "", cost(5'000'000, 10'000'000, 10'000'000));
    }
    KernelRun run("fill", Device::cpu(), DType::f32, "", cost(0, 0, 4096));
  }
  prof.stop();
  REQUIRE(prof.kernels().size() == 8);

  const StepPrediction sp = predict_step(prof.kernels(), d);
  CHECK(sp.from_cpu);
  CHECK_FALSE(sp.emulated);
  CHECK(sp.host_runs == 0);
  CHECK(sp.total.calls == 8);
  CHECK(sp.total.predicted_s == doctest::Approx(2 * (200e-6 + 10e-6 + 20e-6 + 2e-6)).epsilon(1e-9));
  CHECK(sp.total.bound_s[static_cast<int>(Bound::Compute)] == doctest::Approx(400e-6).epsilon(1e-9));
  CHECK(sp.total.bound_s[static_cast<int>(Bound::Memory)] == doctest::Approx(60e-6).epsilon(1e-9));
  CHECK(sp.total.bound_s[static_cast<int>(Bound::Launch)] == doctest::Approx(4e-6).epsilon(1e-9));
  // The GEMM on TF32: 25 us instead of 200.
  CHECK(sp.tf32_s == doctest::Approx(2 * (25e-6 + 10e-6 + 20e-6 + 2e-6)).epsilon(1e-9));
  // Without the floor the fill costs its 4 KB at 1 TB/s.
  CHECK(sp.roofline_s == doctest::Approx(2 * (200e-6 + 10e-6 + 20e-6 + 4.096e-9)).epsilon(1e-9));

  REQUIRE(sp.kernels.size() == 4);
  CHECK(sp.kernels[0].key == "matmul");  // largest predicted first
  CHECK(sp.kernels[0].calls == 2);
  CHECK(sp.kernels[0].bound() == Bound::Compute);
  CHECK(sp.kernels[1].key == "unary_backward.gelu");
  CHECK(sp.kernels[1].bound() == Bound::Memory);
  CHECK(sp.kernels[3].key == "fill");
  CHECK(sp.kernels[3].bound() == Bound::Launch);
  CHECK(sp.kernels[3].predicted_s == doctest::Approx(4e-6).epsilon(1e-9));
  double measured = 0;
  for (const KernelRecord& r : prof.kernels()) measured += static_cast<double>(r.dur_ns) * 1e-9;
  CHECK(sp.total.measured_s == doctest::Approx(measured).epsilon(1e-9));

  REQUIRE(sp.ops.size() == 4);
  CHECK(sp.ops[0].key == "linear");
  CHECK(sp.ops[1].key == "gelu.backward");
  CHECK(sp.ops[1].predicted_s == doctest::Approx(40e-6).epsilon(1e-9));
  CHECK(sp.ops[2].key == "gelu");
  CHECK(sp.ops[3].key == "(outside ops)");

  // The printed step divides the two profiled steps' totals by 2.
  std::ostringstream os;
  print_prediction(os, prof, d, 2);
  const std::string text = os.str();
  INFO(text);
  CHECK(text.find("predict made-up: a device with round numbers") != std::string::npos);
  CHECK(text.find("max(bytes / bandwidth") != std::string::npos);
  CHECK(text.find("step on made-up: predicted 232.0 us (memory 30.0, compute 200.0, launch 2.0 us)") !=
        std::string::npos);
  CHECK(text.find("TF32 tensor cores: 57.0 us") != std::string::npos);
  CHECK(text.find("the roofline alone (no launch floor: as if launches were fused away): 230.0 us") !=
        std::string::npos);
  CHECK(text.find("gelu.backward") != std::string::npos);
}

TEST_CASE("predict_step: a CUDA run places its CUDA records and the copies back, not its host work") {
  std::vector<KernelRecord> records(3);
  records[0].kernel = "matmul";
  records[0].device = Device::cuda(0);
  records[0].cost = cost(1'000'000'000, 0, 0);  // 100 us
  records[1].kernel = "copy_to_host";           // recorded on the cpu, as core does
  records[1].cost = cost(0, 2'000'000, 2'000'000);  // 200 us over the link
  records[2].kernel = "binary.add";             // a CPU kernel of the host's own
  records[2].cost = cost(0, 1'000'000'000, 0);
  records[2].dur_ns = 5'000'000;
  const StepPrediction sp = predict_step(records, made_up());
  CHECK_FALSE(sp.from_cpu);
  CHECK(sp.total.calls == 2);
  CHECK(sp.total.predicted_s == doctest::Approx(300e-6).epsilon(1e-9));
  CHECK(sp.host_runs == 1);
  CHECK(sp.host_measured_s == doctest::Approx(5e-3));
}

TEST_CASE("predict_step: the copy stream's copies go over the host link, beside the step") {
  std::vector<KernelRecord> records(2);
  records[0].kernel = "matmul";
  records[0].device = Device::cuda(0);
  records[0].cost = cost(1'000'000'000, 0, 0);  // 100 us
  records[1].kernel = "copy_async.d2h";         // an offloaded activation, on the copy stream
  records[1].device = Device::cuda(0);
  records[1].stream = StreamKind::Copy;
  records[1].cost = cost(0, 3'000'000, 3'000'000);  // 300 us over the 10 GB/s link
  const StepPrediction sp = predict_step(records, made_up());
  CHECK(sp.total.calls == 1);
  CHECK(sp.total.predicted_s == doctest::Approx(100e-6).epsilon(1e-9));
  CHECK(sp.copy_stream.calls == 1);
  CHECK(sp.copy_stream.predicted_s == doctest::Approx(300e-6).epsilon(1e-9));
  REQUIRE(sp.kernels.size() == 2);
  CHECK(sp.kernels[0].key == "copy_async.d2h");  // listed, largest first
}

TEST_CASE("predict_step: backward waits for a copy back until it is predicted done") {
  // A rule (100 us) runs while two copies back go over the 10 GB/s link: 300 us for the save the
  // next rule reads, then 200 us for one after it. The wait for the first lasts until it lands:
  // 300 - 100 = 200 us, whatever is queued behind it; the second is then read after a 50 us rule,
  // its copy done at 500 us: 500 - 350 = 150 us more.
  const auto record = [](const char* kernel, StreamKind stream, KernelCost c) {
    KernelRecord r;
    r.kernel = kernel;
    r.device = Device::cuda(0);
    r.stream = stream;
    r.cost = c;
    return r;
  };
  std::vector<KernelRecord> records;
  records.push_back(record("copy_async.h2d", StreamKind::Copy, cost(0, 3'000'000, 3'000'000)));
  records.push_back(record("copy_async.h2d", StreamKind::Copy, cost(0, 2'000'000, 2'000'000)));
  records.push_back(record("matmul", StreamKind::Compute, cost(1'000'000'000, 0, 0)));  // 100 us
  records.push_back(record(kOffloadFetchWaitKernel, StreamKind::Compute, cost(0, 2'000'000, 3'000'000)));
  records.push_back(record("matmul", StreamKind::Compute, cost(500'000'000, 0, 0)));  // 50 us
  records.push_back(record(kOffloadFetchWaitKernel, StreamKind::Compute, cost(0, 0, 2'000'000)));
  const StepPrediction sp = predict_step(records, made_up());
  CHECK(sp.fetch_waits.calls == 2);
  CHECK(sp.fetch_waits.predicted_s == doctest::Approx(350e-6).epsilon(1e-9));
  CHECK(sp.offload_stalls.calls == 0);
  CHECK(sp.total.predicted_s == doctest::Approx(500e-6).epsilon(1e-9));  // the rules and the waits
  // A copy that has landed costs no wait: the same rules after a 1 ms one.
  records.insert(records.begin() + 2, record("matmul", StreamKind::Compute, cost(10'000'000'000, 0, 0)));
  const StepPrediction late = predict_step(records, made_up());
  CHECK(late.fetch_waits.calls == 2);
  CHECK(late.fetch_waits.predicted_s == 0);
  // On its own the wait is priced as its copy over the link.
  CHECK(predict_record(made_up(), records[4]).seconds == doctest::Approx(300e-6).epsilon(1e-9));
  std::ostringstream os;
  Profiler prof;  // print_prediction reads a Profiler's records; an empty one prints no copy lines
  prof.stop();
  print_prediction(os, prof, made_up());
  CHECK(os.str().find("waits for copies back") == std::string::npos);
}

TEST_CASE("device_spec: the table's devices, and an unknown name lists them") {
  const DeviceSpec& h200 = device_spec("h200");
  CHECK(h200.bytes_per_s == 4.8e12);
  CHECK(h200.sms == 132);
  CHECK(h200.bf16_flops_per_s > h200.tf32_flops_per_s);
  CHECK(h200.tf32_flops_per_s > h200.fp32_flops_per_s);
  CHECK(h200.fp32_flops_per_s > h200.fp64_flops_per_s);
  for (const char* name : {"h100", "a100", "rtx4090"}) CHECK(device_spec(name).name == name);
  for (const DeviceSpec& d : device_specs()) {
    CAPTURE(d.name);
    CHECK(d.launch_s == 3e-6);
    CHECK(d.host_link_bytes_per_s > 0);
    CHECK(d.bytes_per_s > d.host_link_bytes_per_s);
  }
  CHECK_THROWS_WITH_AS(device_spec("h300"),
                       doctest::Contains("unknown device 'h300' (known: h200, h100, a100, rtx4090)"), Error);
}
