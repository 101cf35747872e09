// The memory timeline of a training step: every allocation, free and re-attribution ("retag") a
// device's caching allocator makes, tagged with where the step was (phase, checkpoint segment,
// tape op and node), and reel::MemoryTimeline, the scope that collects them and analyses them:
// bytes by category after each event, the peak, and which blocks were live then (with the shapes
// the tape reported for the tensors it saved). Core only records: the reports (an HTML page with
// inline SVG, JSON) are in report/memory_timeline.h, a layer above.
//
// The host side: a timeline of a non-cpu device also hears the pinned pool (pinned_allocator()),
// but only its Offloaded bytes (autograd::Offload's host copies of saved activations), so that the
// device and host sides of a step are drawn together. Those events carry `host == true` (and the
// pinned pool's device, cpu); their bytes are the Offloaded slot of the levels, which the device's
// total and peak leave out. A cpu timeline has no host side (offload is refused on cpu).
//
// Off (no MemoryTimeline alive) the allocator reads one flag it already holds the lock for, and
// the tape's hook (memory_timeline_collecting) is one relaxed atomic load.
#pragma once
#include <array>
#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "core/allocator.h"
#include "core/device.h"
#include "core/profile.h"

namespace reel {

using CategoryBytes = std::array<int64_t, kNumCategories>;  // indexed by static_cast<int>(Category)

struct MemoryEvent {
  // Alloc and Free: a block handed out or given back. Retag: a live block's bytes move from
  // category `from` to `category` (Storage::set_category: the tape saving a tensor for backward).
  enum class Kind : uint8_t { Alloc, Free, Retag };
  Kind kind = Kind::Alloc;
  Device device;
  int64_t bytes = 0;                       // requested bytes
  Category category = Category::Temporary;  // Retag: the new category
  Category from = Category::Temporary;      // Retag: the previous one; else equal to category
  const void* block = nullptr;             // the block's address: unique among live blocks
  int64_t time_ns = 0;                     // since the timeline started
  // The thread's context at the event (profile::Context): an op outside any phase is Forward.
  profile::Phase phase = profile::Phase::None;
  int segment = -1;                        // Phase::Replay: the checkpoint segment replayed
  std::string op;                          // the tape op running, empty outside ops
  int64_t node = -1;                       // its position on the tape, -1 when not recorded
  bool op_backward = false;                // inside the op's backward rule
  // The host side: a pinned-pool block of category Offloaded (device is then cpu). A retag into or
  // out of Offloaded there is recorded as an Alloc or a Free of Offloaded.
  bool host = false;
};
const char* memory_event_kind_name(MemoryEvent::Kind kind);

// What the tape says about a block it keeps for backward (autograd's mark_activation).
struct ActivationNote {
  std::string shape;   // of the tensor kept, "(64, 512)"
  bool held = false;   // held by a collapsed checkpoint segment as its replay's input; else saved
  int segment = -1;    // held: that segment
  std::string op;      // saved: the op that saved it
  int64_t node = -1;   // the tape node that saved it, or whose input is held
};
// A note as collected: it applies to `block` from the moment `events_before` events had happened.
struct TimedActivationNote {
  int64_t events_before = 0;
  const void* block = nullptr;
  ActivationNote note;
};

// A phase of the step (profile::PhaseScope) that closed while the timeline ran, allocating or not.
struct PhaseSpan {
  profile::Phase phase = profile::Phase::None;
  int segment = -1;  // Phase::Replay: the segment replayed
  int64_t start_ns = 0, end_ns = 0;  // since the timeline started
};

// A live block at some moment of the timeline, or (block == nullptr) the bytes of one category
// that were already allocated when the timeline started, minus those freed since.
struct LiveBlock {
  const void* block = nullptr;
  int64_t bytes = 0;
  Category category = Category::Temporary;
  int64_t alloc_event = -1;   // index of its Alloc event; -1 before the timeline
  // Where it was allocated (copied from the Alloc event).
  profile::Phase phase = profile::Phase::None;
  int segment = -1;
  std::string op;
  int64_t node = -1;
  bool op_backward = false;
  bool host = false;          // on the host side (the pinned pool's offloaded bytes)
  bool has_note = false;      // the tape kept it for backward: `note` says how
  ActivationNote note;
  bool before_timeline() const { return block == nullptr; }
};

// A peak of the timeline: the total's (MemoryTimeline::peak) or one category's (peak_of).
struct MemoryPeak {
  int64_t event = -1;      // the event that reached it (the first, on ties); -1: at the start
  int64_t time_ns = 0;
  int64_t bytes = 0;       // the peak value: the device's total, or the category's bytes
  CategoryBytes by_category{};  // every category's bytes at that moment (Offloaded: the host side)
  // What was live then, largest first: peak() the device's blocks, peak_of() that category's.
  std::vector<LiveBlock> live;
};

// Collects the memory events of one device from construction to stop() (or destruction), then
// analyses them. One at a time in the process: a second one while one collects raises reel::Error.
// Blocks allocated before it started (parameters, gradients, optimizer state) are the snapshot of
// memory_stats(device) at the start (and of the pinned pool's Offloaded bytes, for the host side); their
// frees and retags move bytes out of and between those.
//
//   reel::reset_peak_memory(device);
//   reel::MemoryTimeline timeline(device);
//   train_step();
//   timeline.stop();
//   timeline.peak().bytes == reel::memory_stats(device).peak_bytes          // the device alone
//   timeline.peak_of(Category::Offloaded).bytes                               // the host side's peak
//       == reel::pinned_memory_stats()[Category::Offloaded].peak_bytes       // (after reset_peak)
//   reel::write_memory_timeline_html("step.html", timeline, "one step");  // report/memory_timeline.h
class MemoryTimeline {
 public:
  explicit MemoryTimeline(Device device = Device::cpu());
  ~MemoryTimeline();
  MemoryTimeline(const MemoryTimeline&) = delete;
  MemoryTimeline& operator=(const MemoryTimeline&) = delete;

  // Stops collecting and analyses what was collected. Idempotent.
  void stop();
  bool running() const { return running_; }
  Device device() const { return device_; }
  // A non-cpu device's timeline also collects the host side (the pinned pool's Offloaded bytes).
  bool has_host_side() const { return !device_.is_cpu(); }
  // Of a level (levels(), start_levels(), a peak's by_category): the device's total (every
  // category but, with a host side, Offloaded) and the host side's bytes (0 without one).
  int64_t device_bytes(const CategoryBytes& level) const;
  int64_t host_bytes(const CategoryBytes& level) const;

  // The accessors below are for a stopped timeline: they raise reel::Error while it runs.
  const std::vector<MemoryEvent>& events() const;
  const std::vector<TimedActivationNote>& notes() const;
  const std::vector<PhaseSpan>& phases() const;       // in the order they closed (inner first)
  // Bytes by category when it started and after each event; with a host side, the Offloaded slot
  // is the host side's bytes (a device's own pool holds none: Offload allocates them pinned).
  const CategoryBytes& start_levels() const;
  const std::vector<CategoryBytes>& levels() const;
  int64_t wall_ns() const;                            // from construction to stop()
  const MemoryPeak& peak() const;                     // of the device's total (device_bytes)
  const MemoryPeak& peak_of(Category category) const; // Offloaded: the host side's, with one
  // What was live right after event `event` (-1: at the start), largest first.
  std::vector<LiveBlock> live_at(int64_t event) const;

 private:
  void check_stopped(const char* what) const;
  MemoryPeak make_peak(int64_t event, int64_t bytes, int category) const;  // category -1: total

  Device device_;
  bool running_ = false;
  int64_t wall_ns_ = 0;
  std::vector<MemoryEvent> events_;
  std::vector<TimedActivationNote> notes_;
  std::vector<PhaseSpan> phases_;
  CategoryBytes start_levels_{};
  std::vector<CategoryBytes> levels_;
  MemoryPeak peak_;
  std::array<MemoryPeak, kNumCategories> category_peaks_;
};

namespace detail {
extern std::atomic<bool> g_timeline_collecting;
// Called by the caching allocator (under its lock) for a device whose timeline runs.
// `host`: the pinned pool reporting the host side (its Offloaded bytes only).
void record_memory_event(MemoryEvent::Kind kind, Device device, int64_t bytes, Category category, Category from,
                         const void* block, bool host = false);
// For profile::PhaseScope: the timeline's clock, and a phase that opened at `start_ns` closing now.
int64_t memory_timeline_now_ns();
void record_memory_phase(profile::Phase phase, int segment, int64_t start_ns);
}  // namespace detail

// True while a MemoryTimeline collects: the tape asks before it builds a note.
inline bool memory_timeline_collecting() { return detail::g_timeline_collecting.load(std::memory_order_relaxed); }
// The tape's hook: `block` (Storage::data()) is kept for backward, as `note` says. Ignored when
// no timeline collects.
void memory_timeline_note(const void* block, ActivationNote note);

}  // namespace reel
