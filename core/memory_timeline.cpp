// The memory timeline's collection (core/memory_timeline.h): the session the allocator reports to,
// the tape's notes, and the analysis a stopped timeline offers (levels, peaks, live blocks).
#include "core/memory_timeline.h"

#include <algorithm>
#include <chrono>
#include <mutex>
#include <numeric>
#include <unordered_map>

#include "core/error.h"

namespace reel {

namespace detail {
std::atomic<bool> g_timeline_collecting{false};
}

namespace {

using SteadyClock = std::chrono::steady_clock;

struct Session {
  std::mutex mutex;
  bool open = false;  // a MemoryTimeline exists
  SteadyClock::time_point origin;
  std::vector<MemoryEvent> events;
  std::vector<TimedActivationNote> notes;
  std::vector<PhaseSpan> phases;
};
Session& session() {
  static Session* s = new Session;  // never destroyed: tensors may die after main returns
  return *s;
}

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(SteadyClock::now() - session().origin).count();
}

int64_t total(const CategoryBytes& bytes) { return std::accumulate(bytes.begin(), bytes.end(), int64_t{0}); }

void sort_largest_first(std::vector<LiveBlock>& blocks) {
  std::stable_sort(blocks.begin(), blocks.end(), [](const LiveBlock& a, const LiveBlock& b) { return a.bytes > b.bytes; });
}

}  // namespace

const char* memory_event_kind_name(MemoryEvent::Kind kind) {
  switch (kind) {
    case MemoryEvent::Kind::Alloc: return "alloc";
    case MemoryEvent::Kind::Free: return "free";
    case MemoryEvent::Kind::Retag: return "retag";
  }
  return "?";
}

namespace detail {

void record_memory_event(MemoryEvent::Kind kind, Device device, int64_t bytes, Category category, Category from,
                         const void* block, bool host) {
  // The host side has one category: a retag into Offloaded brings bytes in, one out of it takes them out.
  if (host && kind == MemoryEvent::Kind::Retag) {
    kind = category == Category::Offloaded ? MemoryEvent::Kind::Alloc : MemoryEvent::Kind::Free;
    category = from = Category::Offloaded;
  }
  const profile::Context context = profile::current_context();
  MemoryEvent e;
  e.kind = kind;
  e.device = device;
  e.bytes = bytes;
  e.category = category;
  e.from = from;
  e.block = block;
  e.phase = context.effective_phase();
  e.segment = context.segment;
  if (context.op) e.op = context.op;
  e.node = context.node;
  e.op_backward = context.op_backward;
  e.host = host;
  Session& ses = session();
  std::lock_guard<std::mutex> lock(ses.mutex);
  if (!ses.open) return;  // the timeline stopped after the allocator checked
  e.time_ns = now_ns();
  ses.events.push_back(std::move(e));
}

int64_t memory_timeline_now_ns() {
  std::lock_guard<std::mutex> lock(session().mutex);  // the origin is written under it
  return now_ns();
}

void record_memory_phase(profile::Phase phase, int segment, int64_t start_ns) {
  Session& ses = session();
  std::lock_guard<std::mutex> lock(ses.mutex);
  if (!ses.open) return;
  ses.phases.push_back({phase, segment, start_ns, now_ns()});
}

}  // namespace detail

void memory_timeline_note(const void* block, ActivationNote note) {
  if (!memory_timeline_collecting() || !block) return;
  Session& ses = session();
  std::lock_guard<std::mutex> lock(ses.mutex);
  if (!ses.open) return;
  ses.notes.push_back({static_cast<int64_t>(ses.events.size()), block, std::move(note)});
}

// ---- MemoryTimeline -----------------------------------------------------------------------------

MemoryTimeline::MemoryTimeline(Device device) : device_(device) {
  CachingAllocator& allocator = allocator_for(device);  // raises for a device this build lacks
  Session& ses = session();
  {
    std::lock_guard<std::mutex> lock(ses.mutex);
    REEL_CHECK(!ses.open, "MemoryTimeline: another MemoryTimeline is collecting; stop it first (one at a time)");
    ses.open = true;
    ses.events.clear();
    ses.notes.clear();
    ses.phases.clear();
    ses.origin = SteadyClock::now();
  }
  running_ = true;
  // The context first, so that the first event already carries it.
  profile::detail::g_tracking.fetch_add(1, std::memory_order_relaxed);
  detail::g_timeline_collecting.store(true, std::memory_order_relaxed);
  // Not under the session's lock: the allocator reports under its own lock, then takes the session's.
  const MemoryStats start = allocator.start_timeline();
  for (int c = 0; c < kNumCategories; ++c) start_levels_[c] = start.by_category[c].current_bytes;
  if (has_host_side()) {
    const MemoryStats host = pinned_allocator(device_).start_timeline(/*host_offloaded=*/true);
    start_levels_[static_cast<int>(Category::Offloaded)] += host[Category::Offloaded].current_bytes;
  }
}

MemoryTimeline::~MemoryTimeline() {
  try {
    stop();
  } catch (...) {  // out of memory while analysing must not escape a destructor
  }
}

void MemoryTimeline::stop() {
  if (!running_) return;
  running_ = false;
  allocator_for(device_).stop_timeline();
  if (has_host_side()) pinned_allocator(device_).stop_timeline();
  detail::g_timeline_collecting.store(false, std::memory_order_relaxed);
  profile::detail::g_tracking.fetch_sub(1, std::memory_order_relaxed);
  Session& ses = session();
  {
    std::lock_guard<std::mutex> lock(ses.mutex);
    wall_ns_ = now_ns();
    events_ = std::move(ses.events);
    notes_ = std::move(ses.notes);
    phases_ = std::move(ses.phases);
    ses.events.clear();
    ses.notes.clear();
    ses.phases.clear();
    ses.open = false;
  }

  // Levels after each event, and the first event reaching each peak.
  levels_.resize(events_.size());
  CategoryBytes level = start_levels_;
  int64_t peak_event = -1, peak_bytes = device_bytes(level);
  std::array<int64_t, kNumCategories> category_event;
  category_event.fill(-1);
  CategoryBytes category_bytes = level;
  for (size_t i = 0; i < events_.size(); ++i) {
    const MemoryEvent& e = events_[i];
    const int to = static_cast<int>(e.category), from = static_cast<int>(e.from);
    switch (e.kind) {
      case MemoryEvent::Kind::Alloc: level[to] += e.bytes; break;
      case MemoryEvent::Kind::Free: level[to] -= e.bytes; break;
      case MemoryEvent::Kind::Retag:
        level[from] -= e.bytes;
        level[to] += e.bytes;
        break;
    }
    levels_[i] = level;
    const int64_t sum = device_bytes(level);
    if (sum > peak_bytes) peak_bytes = sum, peak_event = static_cast<int64_t>(i);
    for (int c = 0; c < kNumCategories; ++c)
      if (level[c] > category_bytes[c]) category_bytes[c] = level[c], category_event[c] = static_cast<int64_t>(i);
  }
  peak_ = make_peak(peak_event, peak_bytes, -1);
  for (int c = 0; c < kNumCategories; ++c) category_peaks_[c] = make_peak(category_event[c], category_bytes[c], c);
}

MemoryPeak MemoryTimeline::make_peak(int64_t event, int64_t bytes, int category) const {
  MemoryPeak p;
  p.event = event;
  p.bytes = bytes;
  p.time_ns = event >= 0 ? events_[static_cast<size_t>(event)].time_ns : 0;
  p.by_category = event >= 0 ? levels_[static_cast<size_t>(event)] : start_levels_;
  p.live = live_at(event);
  if (category < 0)  // the device's peak: its own blocks
    p.live.erase(std::remove_if(p.live.begin(), p.live.end(), [](const LiveBlock& b) { return b.host; }), p.live.end());
  else
    p.live.erase(std::remove_if(p.live.begin(), p.live.end(),
                                [&](const LiveBlock& b) { return static_cast<int>(b.category) != category; }),
                 p.live.end());
  return p;
}

std::vector<LiveBlock> MemoryTimeline::live_at(int64_t event) const {
  check_stopped("live_at");
  REEL_CHECK(event >= -1 && event < static_cast<int64_t>(events_.size()), "MemoryTimeline::live_at: event ", event,
             " is not in [-1, ", events_.size(), ")");
  std::unordered_map<const void*, LiveBlock> live;
  CategoryBytes before = start_levels_;  // what is left of the blocks allocated before the timeline
  size_t next_note = 0;
  // Notes taken before any event concern blocks from before the timeline: they have no row.
  while (next_note < notes_.size() && notes_[next_note].events_before == 0) ++next_note;
  for (int64_t i = 0; i <= event; ++i) {
    const MemoryEvent& e = events_[static_cast<size_t>(i)];
    auto it = live.find(e.block);
    switch (e.kind) {
      case MemoryEvent::Kind::Alloc: {
        LiveBlock b;
        b.block = e.block;
        b.bytes = e.bytes;
        b.category = e.category;
        b.alloc_event = i;
        b.phase = e.phase;
        b.segment = e.segment;
        b.op = e.op;
        b.node = e.node;
        b.op_backward = e.op_backward;
        b.host = e.host;
        live[e.block] = std::move(b);
        break;
      }
      case MemoryEvent::Kind::Free:
        if (it != live.end()) live.erase(it);
        else before[static_cast<int>(e.category)] -= e.bytes;
        break;
      case MemoryEvent::Kind::Retag:
        if (it != live.end()) {
          it->second.category = e.category;
        } else {
          before[static_cast<int>(e.from)] -= e.bytes;
          before[static_cast<int>(e.category)] += e.bytes;
        }
        break;
    }
    for (; next_note < notes_.size() && notes_[next_note].events_before == i + 1; ++next_note) {
      auto noted = live.find(notes_[next_note].block);
      if (noted == live.end()) continue;
      noted->second.has_note = true;
      noted->second.note = notes_[next_note].note;
    }
  }
  std::vector<LiveBlock> blocks;
  blocks.reserve(live.size() + kNumCategories);
  for (auto& [address, b] : live) blocks.push_back(std::move(b));
  // Sorted by allocation first, so that equal sizes keep a stable order whatever the hash map did.
  std::sort(blocks.begin(), blocks.end(), [](const LiveBlock& a, const LiveBlock& b) { return a.alloc_event < b.alloc_event; });
  for (int c = 0; c < kNumCategories; ++c) {
    if (before[c] == 0) continue;
    LiveBlock b;
    b.bytes = before[c];
    b.category = static_cast<Category>(c);
    b.host = has_host_side() && b.category == Category::Offloaded;
    blocks.push_back(std::move(b));
  }
  sort_largest_first(blocks);
  return blocks;
}

int64_t MemoryTimeline::host_bytes(const CategoryBytes& level) const {
  return has_host_side() ? level[static_cast<int>(Category::Offloaded)] : 0;
}
int64_t MemoryTimeline::device_bytes(const CategoryBytes& level) const { return total(level) - host_bytes(level); }

void MemoryTimeline::check_stopped(const char* what) const {
  REEL_CHECK(!running_, "MemoryTimeline::", what, ": the timeline is still collecting; stop() it first");
}

const std::vector<MemoryEvent>& MemoryTimeline::events() const {
  check_stopped("events");
  return events_;
}
const std::vector<TimedActivationNote>& MemoryTimeline::notes() const {
  check_stopped("notes");
  return notes_;
}
const std::vector<PhaseSpan>& MemoryTimeline::phases() const {
  check_stopped("phases");
  return phases_;
}
const CategoryBytes& MemoryTimeline::start_levels() const {
  check_stopped("start_levels");
  return start_levels_;
}
const std::vector<CategoryBytes>& MemoryTimeline::levels() const {
  check_stopped("levels");
  return levels_;
}
int64_t MemoryTimeline::wall_ns() const {
  check_stopped("wall_ns");
  return wall_ns_;
}
const MemoryPeak& MemoryTimeline::peak() const {
  check_stopped("peak");
  return peak_;
}
const MemoryPeak& MemoryTimeline::peak_of(Category category) const {
  check_stopped("peak_of");
  return category_peaks_[static_cast<int>(category)];
}

}  // namespace reel
