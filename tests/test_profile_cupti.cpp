// The profiler's kernel times from a device's activity log (core/profile_activity.h): synthetic
// CUPTI-style records matched to kernel runs by correlation ids, every edge case (records out of
// order, runs with several kernels or none, nested and overlapping work, records dropped or
// incomplete, work outside the runs); then the Profiler wired to a stand-in device clock whose log
// replaces the cudaEvent times or, when unfit, leaves them with the reason in the table; and the
// emulated build's CUDA times said to be the host's. The CUPTI glue itself (kernels/cuda/cupti_log.cu)
// runs only on a GPU (tools/gpu_check.sh).
#include <chrono>
#include <sstream>

#include "core/device_backend.h"
#include "core/profile.h"
#include "kernels/device_backends.h"
#include "kernels/ops.h"
#include "report/profile.h"
#include "testing.h"

using namespace reel;
using profile::ActivityLog;
using profile::ActivityTimes;
using profile::resolve_activity;

namespace {

// Run `run` made API call `correlation`, which put work on `device` from `start` to `end` (ns).
void launch(ActivityLog& log, uint64_t run, uint32_t correlation, int64_t start, int64_t end, int device = 0) {
  log.correlations.push_back({run, correlation});
  log.records.push_back({device, correlation, start, end});
}

}  // namespace

TEST_CASE("activity records: each run's device work by correlation id, in any order, placed on the host") {
  ActivityLog log;
  launch(log, 12, 900, 5000, 5400);  // run 12 ran last, its records came first
  launch(log, 10, 700, 1000, 1300);
  launch(log, 11, 800, 2000, 2100);   // run 11: one API call, two kernels (a cuBLAS call, a graph)
  log.records.push_back({0, 800, 2500, 2800});
  log.correlations.push_back({11, 801});  // and an API call that put nothing on the device
  const ActivityTimes t = resolve_activity(log, 0, {10, 11, 12}, 100);
  REQUIRE(t.used);
  CHECK(t.source == "CUPTI activity records");
  REQUIRE(t.times.size() == 3);
  CHECK(t.times[0].start_ns == 1100);
  CHECK(t.times[0].dur_ns == 300);
  CHECK(t.times[0].records == 1);
  CHECK(t.times[1].start_ns == 2100);  // its first kernel
  CHECK(t.times[1].dur_ns == 100 + 300);  // busy time: the gap between its kernels is not counted
  CHECK(t.times[1].records == 2);
  CHECK(t.times[2].start_ns == 5100);
  CHECK(t.times[2].dur_ns == 400);
  CHECK(t.runs_without_work == 0);
  CHECK(t.foreign_records == 0);
}

TEST_CASE("activity records: overlapping work counts once; a run without work is 0; foreign work is said") {
  ActivityLog log;
  launch(log, 1, 10, 1000, 2000);
  launch(log, 1, 11, 1500, 2500);  // overlaps the first (another stream): the union, 1500 ns
  launch(log, 1, 12, 2500, 2600);  // touches it: still one interval
  log.correlations.push_back({2, 20});  // run 2 called the API but launched nothing (an empty tensor)
  log.records.push_back({0, 99, 3000, 3100});  // launched outside every run (no correlation record)
  log.records.push_back({1, 98, 3000, 3100});  // on another device: not this device's business
  const ActivityTimes t = resolve_activity(log, 0, {1, 2, 3}, 0);
  REQUIRE(t.used);
  CHECK(t.times[0].dur_ns == 1600);
  CHECK(t.times[0].records == 3);
  CHECK(t.times[1].dur_ns == 0);
  CHECK(t.times[1].records == 0);
  CHECK(t.times[2].records == 0);  // run 3 made no API call at all
  CHECK(t.runs_without_work == 2);
  CHECK(t.foreign_records == 1);
  CHECK(t.source ==
        "CUPTI activity records (2 kernel runs launched no device work; 1 records of device work outside the "
        "profiled runs)");
}

TEST_CASE("activity records: nested runs own their own launches; a correlation of another device's run is ignored") {
  ActivityLog log;
  launch(log, 1, 10, 100, 200);  // the outer run's own kernel
  launch(log, 2, 11, 300, 700);  // the inner run's: CUPTI tags a call with the innermost id
  launch(log, 1, 12, 800, 900);
  launch(log, 5, 13, 400, 450, 1);  // run 5 ran on device 1
  const ActivityTimes t = resolve_activity(log, 0, {1, 2}, 0);
  REQUIRE(t.used);
  CHECK(t.times[0].dur_ns == 200);
  CHECK(t.times[1].dur_ns == 400);
  CHECK(t.foreign_records == 0);
  const ActivityTimes d1 = resolve_activity(log, 1, {5}, 0);
  REQUIRE(d1.used);
  CHECK(d1.times[0].dur_ns == 50);
}

TEST_CASE("activity records: a log that is not whole is not used, and the table is told why") {
  ActivityLog log;
  launch(log, 1, 10, 100, 200);
  SUBCASE("CUPTI unavailable") {
    log.unavailable = "cuptiActivityEnable: CUPTI_ERROR_INSUFFICIENT_PRIVILEGES";
    const ActivityTimes t = resolve_activity(log, 0, {1}, 0);
    CHECK_FALSE(t.used);
    CHECK(t.times.empty());
    CHECK(t.source == "cudaEvent pairs (CUPTI: cuptiActivityEnable: CUPTI_ERROR_INSUFFICIENT_PRIVILEGES)");
  }
  SUBCASE("records dropped: which runs lost work is unknown") {
    log.dropped = 7;
    const ActivityTimes t = resolve_activity(log, 0, {1}, 0);
    CHECK_FALSE(t.used);
    CHECK(t.source == "cudaEvent pairs (CUPTI dropped 7 activity records)");
  }
  SUBCASE("an incomplete record (no end), even of a run not asked about") {
    launch(log, 2, 11, 300, 0);
    const ActivityTimes t = resolve_activity(log, 0, {1}, 0);
    CHECK_FALSE(t.used);
    CHECK(t.source == "cudaEvent pairs (CUPTI: 1 activity records without timestamps)");
  }
  SUBCASE("no start") {
    launch(log, 1, 11, 0, 300);
    CHECK_FALSE(resolve_activity(log, 0, {1}, 0).used);
  }
  SUBCASE("ids that never meet: a table of zeros would hide it") {
    const ActivityTimes t = resolve_activity(log, 0, {4, 5}, 0);
    CHECK_FALSE(t.used);
    CHECK(t.source == "cudaEvent pairs (CUPTI: none of its 1 activity records matched a kernel run)");
  }
  SUBCASE("an incomplete record of another device does not matter here") {
    log.records.push_back({1, 11, 300, 0});
    CHECK(resolve_activity(log, 0, {1}, 0).used);
  }
  SUBCASE("no runs, no records: nothing to say") {
    const ActivityTimes t = resolve_activity(ActivityLog{}, 0, {}, 0);
    CHECK(t.used);
    CHECK(t.times.empty());
    CHECK(t.source == "CUPTI activity records");
  }
}

namespace {

// A stand-in for a GPU: a device clock whose marks are 1 µs apart and whose activity log gives
// every kernel run, in the order they began, the device work in `work` (start, end on its clock).
class StandInClock final : public profile::DeviceClock {
 public:
  bool emulated() const override { return false; }
  int64_t mark(StreamKind) override { return marks_++; }
  double elapsed_ns(int64_t from, int64_t to) override { return 1000.0 * static_cast<double>(to - from); }
  void reset() override { marks_ = 0, runs_.clear(), depth_ = 0, taken_ = false; }
  void begin_run(uint64_t run) override {
    runs_.push_back(run);
    ++depth_;
  }
  void end_run() override { --depth_; }
  ActivityLog take_activity() override {
    REQUIRE_FALSE(taken_);  // once per session
    REQUIRE(depth_ == 0);   // every run ended
    taken_ = true;
    ActivityLog log = base;
    for (size_t i = 0; i < runs_.size() && i < work.size(); ++i)
      launch(log, runs_[i], static_cast<uint32_t>(100 + i), work[i].first, work[i].second, 3);
    return log;
  }
  ActivityLog base;  // what the log says besides the runs' work: dropped, unavailable, origin
  std::vector<std::pair<int64_t, int64_t>> work;

 private:
  int64_t marks_ = 0;
  std::vector<uint64_t> runs_;
  int depth_ = 0;
  bool taken_ = false;
};

class NoMemory final : public RawMemory {
 public:
  void* allocate(size_t) override { return nullptr; }
  void release(void*) override {}
};

// Only the clock is asked for: the profiler never touches the rest.
class StandInBackend final : public DeviceBackend {
 public:
  RawMemory& raw_memory() override { return memory; }
  void copy_to_host(void*, const void*, size_t) override { REEL_FAIL("stand-in"); }
  void copy_from_host(void*, const void*, size_t) override { REEL_FAIL("stand-in"); }
  void copy_on_device(void*, const void*, size_t) override { REEL_FAIL("stand-in"); }
  void fill(const Tensor&, double) override { REEL_FAIL("stand-in"); }
  void copy_strided(const Tensor&, const Tensor&) override { REEL_FAIL("stand-in"); }
  void random(const Tensor&, RandomKind, uint64_t, uint64_t) override { REEL_FAIL("stand-in"); }
  void* create_event() override { REEL_FAIL("stand-in"); }
  void destroy_event(void*) override { REEL_FAIL("stand-in"); }
  void record_event(void*, StreamKind) override { REEL_FAIL("stand-in"); }
  void wait_event(StreamKind, void*) override { REEL_FAIL("stand-in"); }
  bool query_event(void*) override { REEL_FAIL("stand-in"); }
  void synchronize_event(void*) override { REEL_FAIL("stand-in"); }
  void synchronize_stream(StreamKind) override { REEL_FAIL("stand-in"); }
  bool query_stream(StreamKind) override { REEL_FAIL("stand-in"); }
  void copy_to_host_async(void*, const void*, size_t, StreamKind) override { REEL_FAIL("stand-in"); }
  void copy_from_host_async(void*, const void*, size_t, StreamKind) override { REEL_FAIL("stand-in"); }
  void* native_stream(StreamKind) override { REEL_FAIL("stand-in"); }
  RawMemory& pinned_memory() override { return memory; }
  profile::DeviceClock* clock() override { return &stand_in_clock; }
  profile::Roof roof() override { return profile::Roof{1e9, 1e9, "stand-in", {}}; }
  NoMemory memory;
  StandInClock stand_in_clock;
};

StandInBackend* g_stand_in = nullptr;

// While alive, cuda:0..3 are the stand-in (the profiler's records use cuda:3, which no other test
// touches); then kernels' own backends again.
struct UseStandIn {
  UseStandIn() {
    static StandInBackend backend;  // the allocator made for cuda:3 keeps a pointer to its memory
    g_stand_in = &backend;
    DeviceBackends b;
    b.cpu = &kernels::cpu_backend();
    b.cuda_device_count = [] { return 4; };
    b.cuda = [](int) -> DeviceBackend* { return g_stand_in; };
    register_device_backends(b);
  }
  ~UseStandIn() { kernels::register_device_backends(); }
};

// Three kernel runs on cuda:3, the second inside the first.
Profiler& profile_three_runs(Profiler& prof) {
  const Device d = Device::cuda(3);
  {
    const profile::KernelRun outer("outer", d, DType::f32, "", {});
    const profile::KernelRun inner("inner", d, DType::f32, "", {});
  }
  { const profile::KernelRun last("last", d, DType::f32, "", {}); }
  prof.stop();
  return prof;
}

const profile::KernelRecord& record(const Profiler& prof, const std::string& kernel) {
  for (const profile::KernelRecord& r : prof.kernels())
    if (r.kernel == kernel) return r;
  REEL_FAIL("no record of ", kernel);
}

}  // namespace

TEST_CASE("the Profiler: a whole activity log replaces the cudaEvent times, and the table says so") {
  const UseStandIn stand_in;
  StandInClock& clock = g_stand_in->stand_in_clock;
  clock.reset();
  clock.base = ActivityLog{};
  clock.work = {{1'010'000, 1'030'000}, {1'040'000, 1'045'000}, {1'100'000, 1'150'000}};
  Profiler prof;
  // The log's clock read 1e6 ns at this instant of the host's steady clock.
  clock.base.origin_device_ns = 1'000'000;
  clock.base.origin_steady_ns =
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
          .count();
  profile_three_runs(prof);
  const profile::KernelRecord& outer = record(prof, "outer");
  const profile::KernelRecord& inner = record(prof, "inner");
  const profile::KernelRecord& last = record(prof, "last");
  CHECK(outer.dur_ns == 20'000);  // its own work; the events would have said 3 µs around the inner run
  CHECK(inner.dur_ns == 5'000);
  CHECK(last.dur_ns == 50'000);
  CHECK(last.start_ns - outer.start_ns == 90'000);  // placed on the host timeline by the log's origin
  CHECK(outer.start_ns >= 10'000);                  // the origin was taken after the session began
  CHECK(outer.start_ns < 10'000 + 60'000'000);      // (within the minute this test may take)
  CHECK_FALSE(outer.emulated);
  REQUIRE(prof.time_sources().count("cuda:3"));
  CHECK(prof.time_sources().at("cuda:3") == "CUPTI activity records");
  std::ostringstream table;
  profile::print_table(table, prof);
  CHECK(table.str().find("\ncuda:3 kernel times: CUPTI activity records\n") != std::string::npos);
}

TEST_CASE("the Profiler: a log with dropped records leaves the cudaEvent times, and the table says why") {
  const UseStandIn stand_in;
  StandInClock& clock = g_stand_in->stand_in_clock;
  clock.reset();
  clock.base = ActivityLog{};
  clock.base.dropped = 2;
  clock.work = {{10, 20}, {30, 40}, {50, 60}};
  Profiler prof;
  profile_three_runs(prof);
  // Marks: origin 0; outer 1..4 around inner 2..3; last 5..6. 1 µs apart.
  CHECK(record(prof, "outer").dur_ns == 3'000);
  CHECK(record(prof, "inner").dur_ns == 1'000);
  CHECK(record(prof, "last").dur_ns == 1'000);
  CHECK(record(prof, "last").start_ns - record(prof, "outer").start_ns == 4'000);
  CHECK(prof.time_sources().at("cuda:3") == "cudaEvent pairs (CUPTI dropped 2 activity records)");
  std::ostringstream table;
  profile::print_table(table, prof);
  CHECK(table.str().find("\ncuda:3 kernel times: cudaEvent pairs (CUPTI dropped 2 activity records)\n") !=
        std::string::npos);
}

TEST_CASE("the Profiler: the emulated build's CUDA kernel times are the host's, and the table says so") {
  if (!cuda_available()) return;  // a CPU-only build has no emulated device
  const Tensor a = ones({64, 64}, DType::f32, Device::cuda(0));
  Profiler prof;
  (void)kernels::matmul(a, a);
  prof.stop();
  REQUIRE_FALSE(prof.kernels().empty());
  const bool emulated = prof.kernels()[0].emulated;
  REQUIRE(prof.time_sources().count("cuda:0"));
  const std::string source = prof.time_sources().at("cuda:0");
  if (emulated)
    CHECK(source == "emulated on the host by simt");
  else  // the nvcc flavour on a GPU: one of the two
    CHECK((source.rfind("CUPTI activity records", 0) == 0 || source.rfind("cudaEvent pairs (CUPTI: ", 0) == 0));
  std::ostringstream table;
  profile::print_table(table, prof);
  CHECK(table.str().find("cuda:0 kernel times: " + source + "\n") != std::string::npos);
  CHECK(prof.time_sources().count("cpu") == 0);  // timed by the host clock around the call, as ever
}
