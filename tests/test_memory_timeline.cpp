// The memory timeline (core/memory_timeline.h, report/memory_timeline.h): its peaks equal the
// allocator's statistics for a whole training step (total and per category, on every device), the
// live list at a peak adds up to it, events carry the phase and the replayed segment, the tape's
// notes carry the saved tensors' shapes, the JSON round-trips, the page stays small for many
// events, misuse (two timelines, an unwritable path, reading a running one) raises, and with
// autograd::Offload on emulated cuda the host side (the pinned pool's offloaded bytes) is collected
// apart from the device's: its peak is the pinned pool's, the device's peak stays the device's.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include <optional>

#include "autograd/functions.h"
#include "autograd/nn_functions.h"
#include "autograd/offload.h"
#include "autograd/tape.h"
#include "core/memory_timeline.h"
#include "nn/sequential.h"
#include "optim/optimizer.h"
#include "report/memory_timeline.h"
#include "testing.h"

using namespace reel;
using profile::Phase;

namespace {

constexpr int64_t kBatch = 8, kIn = 16, kHidden = 32, kClasses = 4;

// A two-layer MLP as plain tensors, so that the test decides where a checkpoint segment goes.
struct TinyMlp {
  Tensor w1, b1, w2, b2;
  explicit TinyMlp(Device device) {
    MemoryCategory scope(Category::Parameter);
    Generator g(11);
    w1 = randn({kHidden, kIn}, DType::f32, device, &g).set_requires_grad();
    b1 = zeros({kHidden}, DType::f32, device).set_requires_grad();
    w2 = randn({kClasses, kHidden}, DType::f32, device, &g).set_requires_grad();
    b2 = zeros({kClasses}, DType::f32, device).set_requires_grad();
  }
  std::vector<Tensor> parameters() const { return {w1, b1, w2, b2}; }
};

// One optimizer step: forward (the first layer in a checkpoint segment if asked), backward, AdamW.
// The batch is made inside, so its memory belongs to the step.
void train_step(TinyMlp& m, optim::Optimizer& opt, Device device, bool checkpoint) {
  Generator g(5);
  const Tensor x = randn({kBatch, kIn}, DType::f32, device, &g);
  const Tensor y = from_vector<int64_t>({0, 1, 2, 3, 0, 1, 2, 3}, {kBatch}, device);
  Tensor loss;
  {
    const profile::PhaseScope forward(Phase::Forward);
    Tensor h;
    if (checkpoint) {
      autograd::Checkpoint segment;
      h = relu(linear(x, m.w1, m.b1));
    } else {
      h = relu(linear(x, m.w1, m.b1));
    }
    loss = cross_entropy(linear(h, m.w2, m.b2), y);
  }
  autograd::backward(loss);
  opt.step();
  opt.zero_grad();
}

int64_t sum_bytes(const std::vector<LiveBlock>& blocks) {
  int64_t sum = 0;
  for (const LiveBlock& b : blocks) sum += b.bytes;
  return sum;
}

// The timeline's peaks against the allocator's own (offloaded on a cuda device: the pinned pool's,
// the host side), and the live lists against the levels. The caller resets both pools' peaks.
void check_against_stats(const MemoryTimeline& tl, Device device) {
  const MemoryStats stats = memory_stats(device), pinned = pinned_memory_stats();
  CHECK(tl.peak().bytes == stats.peak_bytes);
  for (int c = 0; c < kNumCategories; ++c) {
    const Category category = static_cast<Category>(c);
    CAPTURE(category_name(category));
    const bool host = !device.is_cpu() && category == Category::Offloaded;
    const CategoryStats& expected = host ? pinned[category] : stats[category];
    CHECK(tl.peak_of(category).bytes == expected.peak_bytes);
    for (const LiveBlock& b : tl.peak_of(category).live) CHECK(b.host == host);
    CHECK(sum_bytes(tl.peak_of(category).live) == tl.peak_of(category).bytes);
    for (const LiveBlock& b : tl.peak_of(category).live) CHECK(b.category == category);
    const CategoryBytes& last = tl.levels().empty() ? tl.start_levels() : tl.levels().back();
    CHECK(last[c] == expected.current_bytes);
  }
  CHECK(sum_bytes(tl.peak().live) == tl.peak().bytes);
  for (const LiveBlock& b : tl.peak().live) CHECK(!b.host);  // the device's peak: its own blocks
  // Largest first.
  for (size_t i = 1; i < tl.peak().live.size(); ++i) CHECK(tl.peak().live[i - 1].bytes >= tl.peak().live[i].bytes);
}

std::set<Phase> phases_of(const MemoryTimeline& tl) {
  std::set<Phase> phases;
  for (const MemoryEvent& e : tl.events()) phases.insert(e.phase);
  return phases;
}

std::string temp_path(const std::string& name) { return (std::filesystem::temp_directory_path() / name).string(); }

}  // namespace

TEST_CASE("timeline peaks equal the allocator's peaks for an MLP step, the first and a later one") {
  for (Device device : testing::devices()) {
    CAPTURE(device);
    TinyMlp m(device);
    optim::AdamW opt(m.parameters(), 1e-2);
    for (int step = 1; step <= 2; ++step) {
      CAPTURE(step);
      reset_peak_memory(device);
      MemoryTimeline tl(device);
      train_step(m, opt, device, false);
      tl.stop();
      check_against_stats(tl, device);
      const std::set<Phase> phases = phases_of(tl);
      CHECK(phases.count(Phase::Forward));
      CHECK(phases.count(Phase::Backward));
      if (step == 1) CHECK(phases.count(Phase::Optimizer));  // AdamW's moments; later steps update in place
      // The phases themselves, allocating or not, in order.
      std::vector<Phase> spans;
      for (const PhaseSpan& p : tl.phases()) {
        spans.push_back(p.phase);
        CHECK(p.end_ns >= p.start_ns);
      }
      CHECK(spans == std::vector<Phase>{Phase::Forward, Phase::Backward, Phase::Optimizer});
      for (const MemoryEvent& e : tl.events()) CHECK(e.device == device);

      // The activation peak: what the tape kept, every block with the shape it was saved as.
      const MemoryPeak& act = tl.peak_of(Category::Activation);
      REQUIRE(act.bytes > 0);
      REQUIRE(!act.live.empty());
      for (const LiveBlock& b : act.live) {
        REQUIRE(!b.before_timeline());
        CHECK(b.has_note);
        CHECK(!b.note.held);
        CHECK(!b.note.op.empty());
        CHECK(b.note.node >= 0);
        CHECK(b.note.shape.front() == '(');
      }
      if (step == 1) {
        // Gradients and AdamW's moments are made by this step.
        CHECK(tl.peak_of(Category::OptimizerState).bytes > tl.start_levels()[static_cast<int>(Category::OptimizerState)]);
      } else {
        // Parameters, gradients and moments are from before: one row per category.
        int before_rows = 0;
        for (const LiveBlock& b : tl.peak().live) {
          if (!b.before_timeline()) continue;
          ++before_rows;
          CHECK(b.bytes == tl.start_levels()[static_cast<int>(b.category)]);
        }
        CHECK(before_rows == 3);
      }
    }
  }
}

TEST_CASE("saved activations carry their shapes and the op that saved them") {
  TinyMlp m(Device::cpu());
  optim::AdamW opt(m.parameters(), 1e-2);
  MemoryTimeline tl;
  train_step(m, opt, Device::cpu(), false);
  tl.stop();
  std::set<std::string> saved;  // "op shape"
  for (const TimedActivationNote& n : tl.notes()) {
    CHECK(!n.note.held);
    saved.insert(n.note.op + " " + n.note.shape);
  }
  std::string all;
  for (const std::string& s : saved) all += "[" + s + "] ";
  CAPTURE(all);
  CHECK(saved.count("linear (8, 16)"));  // the batch, saved by the first layer for its weight gradient
  // The hidden activations: relu saves its output, and the second layer's save of the same storage
  // adds no note (it is an activation already).
  CHECK(saved.count("relu (8, 32)"));
  CHECK(saved.count("cross_entropy (8, 4)"));
  // A note is taken right after the retag it explains.
  for (const TimedActivationNote& n : tl.notes()) {
    REQUIRE(n.events_before >= 1);
    const MemoryEvent& e = tl.events()[static_cast<size_t>(n.events_before - 1)];
    CHECK(e.kind == MemoryEvent::Kind::Retag);
    CHECK(e.category == Category::Activation);
    CHECK(e.block == n.block);
    CHECK(e.op == n.note.op);
  }
}

TEST_CASE("a checkpoint segment: its held input is noted, its replay's events carry the segment") {
  for (Device device : testing::devices()) {
    CAPTURE(device);
    TinyMlp m(device);
    optim::AdamW opt(m.parameters(), 1e-2);
    reset_peak_memory(device);
    MemoryTimeline tl(device);
    train_step(m, opt, device, true);
    tl.stop();
    check_against_stats(tl, device);

    std::vector<TimedActivationNote> held;
    for (const TimedActivationNote& n : tl.notes())
      if (n.note.held) held.push_back(n);
    REQUIRE(held.size() == 1);  // the batch x: the segment's one input from outside
    CHECK(held[0].note.shape == "(8, 16)");
    const int segment = held[0].note.segment;
    CHECK(segment >= 1);

    int64_t replay_events = 0, replay_allocs = 0;
    for (const MemoryEvent& e : tl.events()) {
      if (e.phase != Phase::Replay) continue;
      ++replay_events;
      CHECK(e.segment == segment);
      if (e.kind == MemoryEvent::Kind::Alloc) {
        ++replay_allocs;
        CHECK(!e.op.empty());
      }
    }
    CHECK(replay_allocs > 0);
    int replay_spans = 0;
    for (const PhaseSpan& p : tl.phases())
      if (p.phase == Phase::Replay) {
        ++replay_spans;
        CHECK(p.segment == segment);
      }
    CHECK(replay_spans == 1);
    CHECK(replay_events >= replay_allocs);
    // The replay re-saves what the segment's ops need, under the replay phase.
    bool resaved = false;
    for (const TimedActivationNote& n : tl.notes())
      if (!n.note.held && tl.events()[static_cast<size_t>(n.events_before - 1)].phase == Phase::Replay) resaved = true;
    CHECK(resaved);
  }
}

TEST_CASE("the JSON export round-trips: events, notes and peaks") {
  TinyMlp m(Device::cpu());
  optim::AdamW opt(m.parameters(), 1e-2);
  MemoryTimeline tl;
  train_step(m, opt, Device::cpu(), true);
  tl.stop();
  const std::string path = temp_path("reel_memory_timeline_roundtrip.json");
  write_memory_timeline_json(path, tl);
  std::ifstream in(path);
  const nlohmann::json doc = nlohmann::json::parse(in);
  std::remove(path.c_str());

  CHECK(doc.at("device") == "cpu");
  REQUIRE(doc.at("events").size() == tl.events().size());
  CHECK(doc.at("notes").size() == tl.notes().size());
  REQUIRE(doc.at("phases").size() == tl.phases().size());
  for (size_t i = 0; i < tl.phases().size(); ++i) {
    CHECK(doc.at("phases")[i].at("phase") == profile::phase_name(tl.phases()[i].phase));
    CHECK(doc.at("phases")[i].at("segment") == tl.phases()[i].segment);
  }
  CHECK(doc.at("peak").at("bytes") == tl.peak().bytes);
  CHECK(doc.at("peak").at("event") == tl.peak().event);
  CHECK(doc.at("peak").at("live").size() == tl.peak().live.size());
  for (int c = 0; c < kNumCategories; ++c) {
    const Category category = static_cast<Category>(c);
    const nlohmann::json& p = doc.at("category_peaks").at(category_name(category));
    CHECK(p.at("bytes") == tl.peak_of(category).bytes);
    CHECK(p.at("live").size() == tl.peak_of(category).live.size());
    CHECK(doc.at("start_bytes").at(category_name(category)) == tl.start_levels()[c]);
  }
  for (size_t i = 0; i < tl.events().size(); ++i) {
    const MemoryEvent& e = tl.events()[i];
    const nlohmann::json& j = doc.at("events")[i];
    CHECK(j.at("kind") == memory_event_kind_name(e.kind));
    CHECK(j.at("bytes") == e.bytes);
    CHECK(j.at("category") == category_name(e.category));
    CHECK(j.at("phase") == profile::phase_name(e.phase));
    CHECK(j.at("op") == e.op);
    CHECK(j.at("levels").get<std::vector<int64_t>>() ==
          std::vector<int64_t>(tl.levels()[i].begin(), tl.levels()[i].end()));
  }
  // The saved activations at the activation peak keep their shapes in the file.
  for (const nlohmann::json& b : doc.at("category_peaks").at("activation").at("live")) CHECK(b.contains("shape"));
}

TEST_CASE("the page: self-contained SVG, every category and phase, the peak, bounded for 10^5 events") {
  const int64_t n = 50000;  // allocations, each freed: 10^5 events
  MemoryTimeline tl;
  {
    const profile::PhaseScope phase(Phase::Forward);
    Tensor keep;
    for (int64_t i = 0; i < n; ++i) {
      Tensor t = empty({1 + i % 97});
      if (i == n / 2) keep = empty({100000});  // one large block: the peak, half-way
    }
  }
  tl.stop();
  REQUIRE(tl.events().size() >= 2 * n);
  const std::string path = temp_path("reel_memory_timeline_page.html");
  write_memory_timeline_html(path, tl, "stress <&> test");
  std::ifstream in(path);
  std::stringstream buffer;
  buffer << in.rdbuf();
  const std::string html = buffer.str();
  std::remove(path.c_str());

  CHECK(html.size() < 1'000'000);
  CHECK(html.find("<script") == std::string::npos);
  CHECK(html.find("http://") == html.find("http://www.w3.org/2000/svg"));  // the SVG namespace only
  CHECK(html.find("https://") == std::string::npos);
  CHECK(html.find("stress &lt;&amp;&gt; test") != std::string::npos);
  for (int c = 0; c < kNumCategories; ++c)
    CHECK(html.find(std::string("data-category=\"") + category_name(static_cast<Category>(c)) + "\"") != std::string::npos);
  CHECK(html.find("data-phase=\"forward\"") != std::string::npos);
  CHECK(html.find("id=\"peak\"") != std::string::npos);
  CHECK(html.find("peak " + format_bytes(tl.peak().bytes)) != std::string::npos);
  CHECK(html.find("id=\"peak-live\"") != std::string::npos);
  CHECK(html.find(format_bytes(400000)) != std::string::npos);  // the large block's row
}

TEST_CASE("offload on emulated cuda: the host side beside the device's, in the timeline, the JSON and the page") {
  if (!cuda_available()) {
    MESSAGE("no cuda device: skipped");
    return;
  }
  const Device cuda = Device::cuda(0);
  manual_seed(11);
  nn::MLP mlp({64, 256, 256, 256, 256, 256, 256, 10}, "gelu", 0.0);
  mlp.to(cuda);
  Generator data(3);
  const Tensor x = randn({256, 64}, DType::f32, Device::cpu(), &data).to(cuda);  // (256, 64)
  std::vector<int64_t> classes(256);
  for (size_t i = 0; i < classes.size(); ++i) classes[i] = static_cast<int64_t>(i) % 10;
  const Tensor y = from_vector<int64_t>(classes, {256}).to(cuda);

  int64_t plain_peak = 0;
  for (const bool offload : {false, true}) {
    CAPTURE(offload);
    autograd::zero_grad(mlp.parameters());
    reset_peak_memory(cuda);
    pinned_allocator().reset_peak();
    MemoryTimeline tl(cuda);
    {
      std::optional<autograd::Offload> scope;
      if (offload) scope.emplace(autograd::OffloadWhat::All);
      const profile::PhaseScope forward(Phase::Forward);
      Tensor loss = cross_entropy(mlp(x), y);
      autograd::backward(loss);
    }
    tl.stop();
    CHECK(tl.has_host_side());
    check_against_stats(tl, cuda);  // device peak == memory_stats(cuda), offloaded peak == the pinned pool's
    const MemoryPeak& host = tl.peak_of(Category::Offloaded);
    CHECK(host.bytes == pinned_memory_stats()[Category::Offloaded].peak_bytes);
    CHECK(tl.peak().bytes == memory_stats(cuda).peak_bytes);
    CHECK(tl.device_bytes(tl.peak().by_category) == tl.peak().bytes);
    int host_events = 0;
    for (const MemoryEvent& e : tl.events()) {
      if (!e.host) {
        CHECK(e.device == cuda);
        continue;
      }
      ++host_events;
      CHECK(e.device == Device::cpu());  // the pinned pool
      CHECK(e.category == Category::Offloaded);
    }
    if (!offload) {
      CHECK(host_events == 0);
      CHECK(host.bytes == 0);
      plain_peak = tl.peak().bytes;
      continue;
    }
    REQUIRE(host_events > 0);
    REQUIRE(host.bytes > 0);
    for (const LiveBlock& b : host.live) CHECK(b.host);
    MESSAGE("device peak: plain " << format_bytes(plain_peak) << ", offloaded " << format_bytes(tl.peak().bytes)
                                  << "; host side peak " << format_bytes(host.bytes));
    CHECK(tl.peak().bytes < plain_peak);  // the saves moved to the host
    CHECK(tl.host_bytes(tl.levels().back()) == 0);  // returned when the step ended

    const std::string json_path = temp_path("reel_memory_timeline_host.json");
    write_memory_timeline_json(json_path, tl);
    std::ifstream in(json_path);
    const nlohmann::json doc = nlohmann::json::parse(in);
    std::remove(json_path.c_str());
    REQUIRE(doc.at("host_side").is_object());
    CHECK(doc.at("host_side").at("label") == "host (offloaded)");
    CHECK(doc.at("host_side").at("peak").at("bytes") == host.bytes);
    CHECK(doc.at("host_side").at("peak").at("live").size() == host.live.size());
    CHECK(doc.at("peak").at("bytes") == tl.peak().bytes);
    int json_host_events = 0;
    for (const nlohmann::json& e : doc.at("events")) json_host_events += e.at("host").get<bool>() ? 1 : 0;
    CHECK(json_host_events == host_events);

    const std::string page_path = temp_path("reel_memory_timeline_host.html");
    write_memory_timeline_html(page_path, tl, "offload");
    std::ifstream page(page_path);
    std::stringstream buffer;
    buffer << page.rdbuf();
    const std::string html = buffer.str();
    std::remove(page_path.c_str());
    CHECK(html.find("<polygon class=\"host-area\"") != std::string::npos);
    CHECK(html.find("host (offloaded) (peak " + format_bytes(host.bytes) + ")") != std::string::npos);  // the legend
    CHECK(html.find("id=\"host-peak-live\"") != std::string::npos);
  }
  pinned_allocator().reset_peak();  // the other cases compare the host side's peak with the pinned pool's
}

TEST_CASE("a cpu timeline has no host side: no host events, host_side null, no host band") {
  TinyMlp m(Device::cpu());
  optim::AdamW opt(m.parameters(), 1e-2);
  MemoryTimeline tl;
  train_step(m, opt, Device::cpu(), false);
  tl.stop();
  CHECK(!tl.has_host_side());
  for (const MemoryEvent& e : tl.events()) CHECK(!e.host);
  CHECK(tl.device_bytes(tl.peak().by_category) == tl.peak().bytes);
  const std::string json_path = temp_path("reel_memory_timeline_cpu.json");
  write_memory_timeline_json(json_path, tl);
  std::ifstream in(json_path);
  const nlohmann::json doc = nlohmann::json::parse(in);
  std::remove(json_path.c_str());
  CHECK(doc.at("host_side").is_null());
  const std::string page_path = temp_path("reel_memory_timeline_cpu.html");
  write_memory_timeline_html(page_path, tl, "cpu");
  std::ifstream page(page_path);
  std::stringstream buffer;
  buffer << page.rdbuf();
  std::remove(page_path.c_str());
  CHECK(buffer.str().find("host-area") == std::string::npos);
}

TEST_CASE("misuse: two timelines, a running one read, an unwritable path") {
  MemoryTimeline first;
  CHECK_REEL_ERROR(MemoryTimeline(), "another MemoryTimeline is collecting");
  CHECK_REEL_ERROR(first.peak(), "stop() it first");
  first.stop();
  first.stop();  // idempotent
  MemoryTimeline second;  // once stopped, the next one may start
  second.stop();
  const char* bad = "/nonexistent-reel-dir/step.html";
  CHECK_REEL_ERROR(write_memory_timeline_html(bad, second, "t"), bad);
  CHECK_REEL_ERROR(write_memory_timeline_json(std::string(bad) + ".json", second), "/nonexistent-reel-dir/step.html.json");
}

TEST_CASE("the context is kept only while a collector runs; a Profiler and a timeline run together") {
  {
    const profile::OpScope op("off_op", 7, false);
    CHECK(profile::current_context().op == nullptr);  // nothing collects: the scope did nothing
  }
  TinyMlp m(Device::cpu());
  optim::AdamW opt(m.parameters(), 1e-2);
  Profiler prof;
  MemoryTimeline tl;
  {
    const profile::OpScope op("on_op", 7, true);
    CHECK(std::string(profile::current_context().op) == "on_op");
    CHECK(profile::current_context().op_backward);
  }
  train_step(m, opt, Device::cpu(), false);
  prof.stop();  // the timeline still collects: the context is still kept
  {
    const profile::OpScope op("after_profiler", 1, false);
    CHECK(std::string(profile::current_context().op) == "after_profiler");
  }
  tl.stop();
  CHECK(!prof.spans().empty());
  CHECK(phases_of(tl).count(Phase::Backward));
  const profile::OpScope op("after_both", 1, false);
  CHECK(profile::current_context().op == nullptr);
}
