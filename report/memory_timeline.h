// What a stopped reel::MemoryTimeline (core/memory_timeline.h, which records) becomes: a
// self-contained HTML page (inline SVG, no script, no network) and a JSON file with the same data.
// Part of report/ (reel_report), the renderers' layer above autograd; the names stay in `reel`.
#pragma once
#include <string>

#include "core/memory_timeline.h"

namespace reel {

// The page: bytes by category stacked over the step's time, the phases (forward, backward, replay
// of segment k, optimizer) as bands behind, the peak marked, and the tables of what was live at
// the peak and at the activations' own peak, largest first. The curve keeps one column per pixel
// and the largest total in each, so the page stays small for any number of events and the peak is
// never smoothed away. Raises reel::Error naming `path` when it cannot be written.
void write_memory_timeline_html(const std::string& path, const MemoryTimeline& timeline, const std::string& title);

// JSON: the device, the bytes by category at the start, every event (with the levels after it),
// the tape's notes, the phase spans, the total's peak and each category's peak with their live
// blocks. Raises reel::Error naming `path` when it cannot be written.
void write_memory_timeline_json(const std::string& path, const MemoryTimeline& timeline);

}  // namespace reel
