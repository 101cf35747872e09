// The copy stream in the profiler (core/profile.h, report/profile.h): every copy_async is a record
// on the stream it ran on, with its bytes and direction; on emulated cuda a copy on the copy stream
// is timed where that stream ran it (late, when something waited), not where it was enqueued; the
// trace has a copy track per device with each copy a span with its bytes; the table lists the copies
// and a line per device with the copy time and the fraction hidden behind compute, whose overlap
// function is checked on synthetic intervals.
#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "core/stream.h"
#include "core/tensor.h"
#include "kernels/ops.h"
#include "report/profile.h"
#include "testing.h"

using namespace reel;
using profile::hidden_ns;
using profile::Interval;
using profile::KernelRecord;

namespace {

const KernelRecord& only_record(const Profiler& prof, const std::string& kernel) {
  const KernelRecord* found = nullptr;
  for (const KernelRecord& r : prof.kernels())
    if (r.kernel == kernel) {
      REQUIRE(found == nullptr);
      found = &r;
    }
  REQUIRE(found != nullptr);
  return *found;
}

// On `device`, profiled: x (64, 32) downloaded to pinned host memory on the copy stream after the
// compute stream wrote it, a matmul on the compute stream while the copy is in flight, the wait for
// the copy, then the buffer uploaded into y on the copy stream and waited for.
struct CopyRun {
  std::unique_ptr<Profiler> prof;
  Tensor x, y;
  size_t bytes = 0;
};
CopyRun profiled_copies(Device device) {
  CopyRun run;
  manual_seed(5);
  run.x = randn({64, 32}, DType::f32, device);
  run.y = zeros({64, 32}, DType::f32, device);
  const Tensor a = randn({96, 96}, DType::f32, device), b = randn({96, 96}, DType::f32, device);
  run.bytes = run.x.nbytes();
  PinnedBuffer host(run.bytes);
  const Stream compute = Stream::compute(device), copy = Stream::copy(device);
  run.prof = std::make_unique<Profiler>();
  copy.wait(compute.record());  // x is written by then
  copy_async(run.x, host, copy);
  const Event copied = copy.record();
  const Tensor c = kernels::matmul(a, b);  // compute while the copy is in flight
  copied.synchronize();
  copy_async(host, run.y, copy);
  copy.synchronize();
  run.prof->stop();
  return run;
}

}  // namespace

TEST_CASE("hidden_ns: the copy time covered by compute, on overlapping, disjoint and nested intervals") {
  // Disjoint, touching at an end: nothing hidden.
  CHECK(hidden_ns({{0, 10}}, {{10, 20}}) == 0);
  CHECK(hidden_ns({{30, 40}}, {{0, 10}, {15, 20}}) == 0);
  // Overlapping at one end, either side.
  CHECK(hidden_ns({{0, 10}}, {{5, 15}}) == 5);
  CHECK(hidden_ns({{5, 15}}, {{0, 10}}) == 5);
  // Compute nested in a copy, and a copy nested in compute.
  CHECK(hidden_ns({{0, 100}}, {{10, 20}, {30, 45}}) == 25);
  CHECK(hidden_ns({{20, 30}}, {{0, 100}}) == 10);
  // Overlapping compute spans count once (a compute-stream kernel inside an op's kernel, say).
  CHECK(hidden_ns({{0, 20}}, {{0, 10}, {5, 15}}) == 15);
  // Overlapping copies count once too; input order does not matter.
  CHECK(hidden_ns({{5, 15}, {0, 10}}, {{0, 100}}) == 15);
  CHECK(hidden_ns({{50, 60}, {0, 10}, {20, 30}}, {{25, 55}, {5, 8}}) == 3 + 5 + 5);
  // Empty and reversed spans are nothing.
  CHECK(hidden_ns({}, {{0, 10}}) == 0);
  CHECK(hidden_ns({{0, 10}}, {}) == 0);
  CHECK(hidden_ns({{5, 5}, {9, 3}}, {{0, 10}}) == 0);
  CHECK(profile::covered_ns({{0, 10}, {5, 15}, {20, 25}, {30, 30}}) == 20);
}

TEST_CASE("the copy line: a copy enclosing a compute kernel on the same device, from the records' times") {
  // cpu: both are timed by the host clock around them, so the nesting is exact.
  Profiler prof;
  {
    const profile::KernelRun copy("copy_async.d2h", Device::cpu(), DType::f32, "(8)", {0, 32, 32},
                                  StreamKind::Copy);
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    {
      const profile::KernelRun kernel("compute", Device::cpu(), DType::f32, "(8)", {});
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  prof.stop();
  const KernelRecord& copy = only_record(prof, "copy_async.d2h");
  const KernelRecord& kernel = only_record(prof, "compute");
  CHECK(copy.stream == StreamKind::Copy);
  CHECK(kernel.stream == StreamKind::Compute);
  const std::vector<profile::CopySummary> copies = profile::summarize_copies(prof);
  REQUIRE(copies.size() == 1);
  CHECK(copies[0].device == Device::cpu());
  CHECK(copies[0].copies == 1);
  CHECK(copies[0].bytes == 32);
  CHECK(copies[0].copy_ns == copy.dur_ns);
  CHECK(copies[0].hidden_ns == kernel.dur_ns);
  CHECK(copies[0].hidden_fraction() > 0);
  CHECK(copies[0].hidden_fraction() < 1);
  std::ostringstream os;
  profile::print_table(os, prof);
  char expected[128];
  std::snprintf(expected, sizeof expected, "copy stream cpu: 1 copy, 0.000 MB, %.3f ms, %.1f %% hidden behind compute",
                copy.dur_ns * 1e-6, 100 * copies[0].hidden_fraction());
  CHECK(os.str().find(expected) != std::string::npos);
  CHECK(os.str().find("copy_async.d2h [copy]") != std::string::npos);
  MESSAGE(os.str());
}

TEST_CASE("copy_async on cpu: a record on the copy stream, timed on the host thread") {
  const Tensor x = randn({16});
  PinnedBuffer host(x.nbytes());
  Profiler prof;
  copy_async(x, host, Stream::copy(Device::cpu()));
  copy_async(x, host, Stream::compute(Device::cpu()));
  prof.stop();
  int on_copy = 0, on_compute = 0;
  for (const KernelRecord& r : prof.kernels()) {
    REQUIRE(r.kernel == "copy_async.d2h");
    CHECK(r.cost.bytes_written == static_cast<int64_t>(x.nbytes()));
    CHECK(r.track < profile::kDeviceTrack);  // the host thread did the copy
    (r.stream == StreamKind::Copy ? on_copy : on_compute) += 1;
  }
  CHECK(on_copy == 1);
  CHECK(on_compute == 1);
}

TEST_CASE("copy_async on the cuda copy stream: records with bytes and direction, timed on that stream") {
  if (!cuda_available()) return;
  const Device cuda = Device::cuda(0);
  const CopyRun run = profiled_copies(cuda);
  const Profiler& prof = *run.prof;
  CHECK(reel::testing::values(run.y) == reel::testing::values(run.x));  // the copies did run
  const KernelRecord& down = only_record(prof, "copy_async.d2h");
  const KernelRecord& up = only_record(prof, "copy_async.h2d");
  const KernelRecord& mm = only_record(prof, "matmul");
  for (const KernelRecord* r : {&down, &up}) {
    CHECK(r->stream == StreamKind::Copy);
    CHECK(r->device == cuda);
    CHECK(r->cost.bytes_read == static_cast<int64_t>(run.bytes));
    CHECK(r->cost.bytes_written == static_cast<int64_t>(run.bytes));
    CHECK(r->cost.flops == 0);
    CHECK(r->shapes == "(64, 32)");
    CHECK(r->track == profile::kCopyTrack);
    CHECK(r->dur_ns >= 0);
  }
  CHECK(mm.stream == StreamKind::Compute);
  CHECK(mm.track == profile::kDeviceTrack);
  CHECK(prof.track_name(profile::kCopyTrack).rfind("cuda:0 copy", 0) == 0);
  CHECK(prof.track_name(profile::kDeviceTrack).find("copy") == std::string::npos);
  CHECK(up.start_ns >= down.start_ns + down.dur_ns);  // one stream: one after the other
#if defined(REEL_CUDA_EMULATED)
  // simt runs the copy stream's work when something waits for it: the download was enqueued before
  // the matmul but ran at copied.synchronize(), after it. Timed on the compute stream (or on the
  // host around the enqueue) it would sit before the matmul.
  CHECK(down.emulated);
  CHECK(down.start_ns >= mm.start_ns + mm.dur_ns);
#endif

  // The table: both copies listed on the copy stream, and the device's copy line.
  const std::vector<profile::CopySummary> copies = profile::summarize_copies(prof);
  REQUIRE(copies.size() == 1);
  CHECK(copies[0].device == cuda);
  CHECK(copies[0].copies == 2);
  CHECK(copies[0].bytes == 2 * static_cast<int64_t>(run.bytes));
  CHECK(copies[0].copy_ns == down.dur_ns + up.dur_ns);
  CHECK(copies[0].hidden_ns >= 0);
  CHECK(copies[0].hidden_ns <= copies[0].copy_ns);
  std::ostringstream os;
  profile::print_table(os, prof);
  CHECK(os.str().find("copy_async.d2h [copy]") != std::string::npos);
  CHECK(os.str().find("copy_async.h2d [copy]") != std::string::npos);
  CHECK(os.str().find("copy stream cuda:0") != std::string::npos);
  CHECK(os.str().find("2 copies, 0.016 MB") != std::string::npos);
  MESSAGE(os.str());
}

TEST_CASE("the trace: the copy stream is its own track per device, each copy a span with its bytes") {
  if (!cuda_available()) return;
  const CopyRun run = profiled_copies(Device::cuda(0));
  const std::string path = "test_profile_copies_trace.json";
  profile::write_trace(path, *run.prof);
  std::ifstream in(path);
  const nlohmann::json trace = nlohmann::json::parse(in);
  std::remove(path.c_str());
  std::map<int, std::string> names;
  std::map<int, int> sort_index;
  std::map<std::string, nlohmann::json> copies;  // by name
  int kernels_on_copy_track = 0;
  for (const nlohmann::json& e : trace["traceEvents"]) {
    const int tid = e["tid"].get<int>();
    if (e["name"] == "thread_name") names[tid] = e["args"]["name"].get<std::string>();
    if (e["name"] == "thread_sort_index") sort_index[tid] = e["args"]["sort_index"].get<int>();
    if (e["ph"] != "X") continue;
    if (e["cat"] == "copy") {
      CHECK(tid == profile::kCopyTrack);
      copies[e["name"].get<std::string>()] = e;
    } else if (tid == profile::kCopyTrack) {
      ++kernels_on_copy_track;
    }
  }
  REQUIRE(names.count(profile::kCopyTrack));
  CHECK(names[profile::kCopyTrack].rfind("cuda:0 copy", 0) == 0);
  REQUIRE(names.count(profile::kDeviceTrack));  // the matmul's compute track, beside it
  CHECK(sort_index[profile::kCopyTrack] == sort_index[profile::kDeviceTrack] + 1);
  CHECK(kernels_on_copy_track == 0);
  REQUIRE(copies.size() == 2);
  for (const char* name : {"copy_async.d2h", "copy_async.h2d"}) {
    CAPTURE(name);
    const nlohmann::json& span = copies.at(name);
    CHECK(span["args"]["bytes"].get<int64_t>() == static_cast<int64_t>(run.bytes));
    CHECK(span["args"]["stream"] == "copy");
    CHECK(span["args"]["device"] == "cuda:0");
    CHECK(span["dur"].get<double>() >= 0);
  }
}
