// What a stopped reel::MemoryTimeline (core/memory_timeline.h, which records) becomes: a
// self-contained HTML page (inline SVG, no script, no network) and a JSON file with the same data.
// Part of report/ (reel_report), the renderers' layer above autograd; the names stay in `reel`.
#pragma once
#include <string>

#include "core/memory_timeline.h"

namespace reel {

// The page: bytes by category stacked over the step's time, the phases (forward, backward, replay
// of segment k, optimizer) as bands behind, the peak marked, and the tables of what was live at
// the peak and at the activations' own peak, largest first. With a host side (a non-cpu device's
// timeline), the device's categories are stacked above the time axis and the host side, "host
// (offloaded)", is a band mirrored below it on the same scale (<polygon class="host-area">), with its
// peak in the legend and a table of what it held at that peak. The curve keeps one column per pixel
// and the largest total in each (and the host side's largest), so the page stays small for any
// number of events and the peak is never smoothed away. Raises reel::Error naming `path` when it
// cannot be written.
void write_memory_timeline_html(const std::string& path, const MemoryTimeline& timeline, const std::string& title);

// JSON: the device, the bytes by category at the start, every event (with the levels after it),
// the tape's notes, the phase spans, the device's peak and each category's peak with their live
// blocks; each event says whether it is on the host side ("host"), and "host_side" (null on cpu)
// gives the host side's label, start bytes and peak (the Offloaded slot of the levels). Raises reel::Error naming `path` when it cannot be written.
void write_memory_timeline_json(const std::string& path, const MemoryTimeline& timeline);

}  // namespace reel
