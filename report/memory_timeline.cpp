// The memory timeline's reports (report/memory_timeline.h): the HTML page with inline SVG and the
// JSON file.
#include "report/memory_timeline.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.h"
#include "report/escape.h"
#include "report/ticks.h"

namespace reel {

namespace {

using json = nlohmann::json;
using report::escape_xml;

// ---- shared: how a block and a phase are described ---------------------------------------------

std::string block_address(const void* block) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%p", block);
  return buf;
}

std::string phase_label(profile::Phase phase, int segment) {
  if (phase == profile::Phase::Replay) return "replay " + std::to_string(segment);
  return profile::phase_name(phase);
}

// "matmul (node 3, forward)", "before the timeline", "outside ops (optimizer)".
std::string allocated_by(const LiveBlock& b) {
  if (b.before_timeline()) return "before the timeline";
  std::string s = b.op.empty() ? std::string("outside ops") : b.op + (b.op_backward ? ".backward" : "");
  std::string where;
  if (b.node >= 0) where = "node " + std::to_string(b.node);
  if (b.phase != profile::Phase::None) where += (where.empty() ? "" : ", ") + phase_label(b.phase, b.segment);
  return where.empty() ? s : s + " (" + where + ")";
}

// "saved by matmul (node 3)", "held by checkpoint segment 2 for its replay (input of node 5)".
std::string kept_by(const LiveBlock& b) {
  if (!b.has_note) return "";
  const ActivationNote& n = b.note;
  if (n.held)
    return "held by checkpoint segment " + std::to_string(n.segment) + " for its replay (input of node " +
           std::to_string(n.node) + ")";
  return "saved by " + n.op + (n.node >= 0 ? " (node " + std::to_string(n.node) + ")" : "");
}

void open_for_writing(std::ofstream& out, const std::string& path, const char* what) {
  out.open(path);
  REEL_CHECK(out.good(), what, ": cannot write to ", path);
}
void check_written(std::ofstream& out, const std::string& path, const char* what) {
  out.flush();
  REEL_CHECK(out.good(), what, ": writing ", path, " failed");
}

// ---- JSON ---------------------------------------------------------------------------------------

json category_bytes_json(const CategoryBytes& bytes) {
  json j = json::object();
  for (int c = 0; c < kNumCategories; ++c) j[category_name(static_cast<Category>(c))] = bytes[c];
  return j;
}

json live_json(const LiveBlock& b) {
  json j = {{"bytes", b.bytes},
            {"category", category_name(b.category)},
            {"before_timeline", b.before_timeline()}};
  if (b.before_timeline()) return j;
  j["block"] = block_address(b.block);
  j["alloc_event"] = b.alloc_event;
  j["phase"] = profile::phase_name(b.phase);
  j["segment"] = b.segment;
  j["op"] = b.op;
  j["node"] = b.node;
  j["backward"] = b.op_backward;
  j["allocated_by"] = allocated_by(b);
  if (b.has_note) {
    j["shape"] = b.note.shape;
    j["held"] = b.note.held;
    j["kept_by"] = kept_by(b);
  }
  return j;
}

json peak_json(const MemoryPeak& p) {
  json live = json::array();
  for (const LiveBlock& b : p.live) live.push_back(live_json(b));
  return {{"event", p.event},
          {"time_ns", p.time_ns},
          {"bytes", p.bytes},
          {"by_category", category_bytes_json(p.by_category)},
          {"live", std::move(live)}};
}

// ---- HTML ---------------------------------------------------------------------------------------

std::string fixed(double v, int decimals) {
  char buf[48];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  return buf;
}

constexpr double kMiB = 1024.0 * 1024.0;
const char* const kCategoryColors[kNumCategories] = {"#4e79a7", "#f28e2b", "#76b7b2", "#e15759", "#bab0ac",
                                                     "#b07aa1"};

const char* phase_color(profile::Phase phase) {
  switch (phase) {
    case profile::Phase::Forward: return "#dbeafe";
    case profile::Phase::Backward: return "#fde2e2";
    case profile::Phase::Replay: return "#fef3c7";
    case profile::Phase::Optimizer: return "#dcfce7";
    default: return "#eeeeee";
  }
}

// The plot's geometry: time (ns) to x, bytes to y. The device's bytes go up from the axis at
// y(0); the host side's (offloaded) go down from it, as negative bytes, on the same scale.
struct Plot {
  double left = 90, top = 50, width = 1080, height = 420;
  double t_max = 1, bytes_max = 1, host_max = 0;  // bytes above and below the axis
  double x(double t_ns) const { return left + t_ns / t_max * width; }
  double y(double bytes) const { return top + height - (bytes + host_max) / (bytes_max + host_max) * height; }
};

// The host side's color and label: the offloaded category's, drawn below the axis.
const char* const kHostLabel = "host (offloaded)";

// One pixel column's worth of the curve: the levels before its first event, at its largest total
// (the first event reaching it) and after its last event.
struct Column {
  int pixel = 0;
  CategoryBytes before{}, highest{}, after{};  // highest: of the device's total
  int64_t host_highest = 0;                    // the host side's largest bytes in the column
};

std::vector<Column> columns(const MemoryTimeline& tl, const Plot& plot) {
  std::vector<Column> cols;
  const auto& events = tl.events();
  const auto& levels = tl.levels();
  CategoryBytes previous = tl.start_levels();
  for (size_t i = 0; i < events.size(); ++i) {
    const int pixel = std::min(static_cast<int>(plot.width) - 1,
                               static_cast<int>(static_cast<double>(events[i].time_ns) / plot.t_max * plot.width));
    if (cols.empty() || cols.back().pixel != pixel) {
      Column c;
      c.pixel = pixel;
      c.before = previous;
      c.highest = levels[i];
      c.host_highest = tl.host_bytes(levels[i]);
      cols.push_back(c);
    } else if (tl.device_bytes(levels[i]) > tl.device_bytes(cols.back().highest)) {
      cols.back().highest = levels[i];
    }
    cols.back().host_highest = std::max(cols.back().host_highest, tl.host_bytes(levels[i]));
    cols.back().after = levels[i];
    previous = levels[i];
  }
  return cols;
}

// The stacked areas: category k's polygon runs along the top of categories 0..k left to right and
// back along the top of 0..k-1. With a host side, offloaded is not stacked: it is the host band,
// mirrored below the axis (its polygon runs along -host bytes and back along the axis).
void write_areas(std::ostream& os, const MemoryTimeline& tl, const Plot& plot) {
  struct Point {
    double x;
    CategoryBytes level;
    int64_t host;  // the host side's bytes drawn there (a column's largest at its middle point)
  };
  std::vector<Point> points{{plot.left, tl.start_levels(), tl.host_bytes(tl.start_levels())}};
  for (const Column& c : columns(tl, plot)) {
    const double x = plot.left + c.pixel;
    points.push_back({x, c.before, tl.host_bytes(c.before)});
    points.push_back({x, c.highest, c.host_highest});
    points.push_back({x + 1, c.after, tl.host_bytes(c.after)});
  }
  points.push_back({plot.left + plot.width, points.back().level, points.back().host});

  const int offloaded = static_cast<int>(Category::Offloaded);
  for (int k = 0; k < kNumCategories; ++k) {
    if (tl.has_host_side() && k == offloaded) continue;
    const Category category = static_cast<Category>(k);
    std::ostringstream top, bottom;
    auto stacked = [&](const CategoryBytes& level, int upto) {
      int64_t sum = 0;
      for (int c = 0; c <= upto; ++c)
        if (!(tl.has_host_side() && c == offloaded)) sum += level[c];
      return sum;
    };
    for (const Point& p : points)
      top << fixed(p.x, 1) << ',' << fixed(plot.y(static_cast<double>(stacked(p.level, k))), 1) << ' ';
    for (auto it = points.rbegin(); it != points.rend(); ++it)
      bottom << fixed(it->x, 1) << ',' << fixed(plot.y(static_cast<double>(stacked(it->level, k - 1))), 1) << ' ';
    os << "<polygon class=\"area\" data-category=\"" << category_name(category) << "\" fill=\""
       << kCategoryColors[k] << "\" fill-opacity=\"0.85\" points=\"" << top.str() << bottom.str() << "\">"
       << "<title>" << category_name(category) << ": peak " << format_bytes(tl.peak_of(category).bytes)
       << "</title></polygon>\n";
  }
  if (!tl.has_host_side()) return;
  std::ostringstream band;
  for (const Point& p : points) band << fixed(p.x, 1) << ',' << fixed(plot.y(-static_cast<double>(p.host)), 1) << ' ';
  band << fixed(plot.left + plot.width, 1) << ',' << fixed(plot.y(0), 1) << ' ' << fixed(plot.left, 1) << ','
       << fixed(plot.y(0), 1);
  const MemoryPeak& host_peak = tl.peak_of(Category::Offloaded);
  os << "<polygon class=\"host-area\" data-category=\"" << category_name(Category::Offloaded) << "\" fill=\""
     << kCategoryColors[offloaded] << "\" fill-opacity=\"0.85\" points=\"" << band.str() << "\"><title>"
     << kHostLabel << ": peak " << format_bytes(host_peak.bytes) << " at "
     << fixed(static_cast<double>(host_peak.time_ns) / 1e6, 3) << " ms</title></polygon>\n"
     << "<line class=\"host-axis\" x1=\"" << fixed(plot.left, 1) << "\" x2=\"" << fixed(plot.left + plot.width, 1)
     << "\" y1=\"" << fixed(plot.y(0), 1) << "\" y2=\"" << fixed(plot.y(0), 1) << "\" stroke=\"#000\"/>\n"
     << "<text x=\"" << fixed(plot.left + plot.width - 6, 1) << "\" y=\"" << fixed(plot.top + plot.height - 6, 1)
     << "\" text-anchor=\"end\" font-size=\"12\" fill=\"#555\">" << kHostLabel << " below the axis, device above</text>\n";
}

// Bands behind the curve: the phases the timeline saw open and close (outer ones first, so a
// replay is drawn over its backward), and runs of events in a phase no such span covers (ops run
// outside any PhaseScope are in the forward). Bands narrower than a quarter pixel are left out,
// which bounds the event runs' number by the plot's width.
struct Band {
  profile::Phase phase;
  int segment;
  double t0, t1;
  int64_t events;  // -1: a span (the count is not needed there)
};

std::vector<Band> phase_bands(const MemoryTimeline& tl, const Plot& plot) {
  std::vector<Band> bands;
  for (const PhaseSpan& p : tl.phases())
    bands.push_back({p.phase, p.segment, static_cast<double>(p.start_ns), static_cast<double>(p.end_ns), -1});
  std::sort(bands.begin(), bands.end(),
            [](const Band& a, const Band& b) { return a.t0 != b.t0 ? a.t0 < b.t0 : a.t1 > b.t1; });
  const size_t spans = bands.size();
  auto covered = [&](profile::Phase phase, int segment, double t) {
    for (size_t i = 0; i < spans; ++i)
      if (bands[i].phase == phase && bands[i].segment == segment && bands[i].t0 <= t && t <= bands[i].t1) return true;
    return false;
  };
  const auto& events = tl.events();
  size_t begin = 0;
  while (begin < events.size()) {
    size_t end = begin + 1;
    while (end < events.size() && events[end].phase == events[begin].phase &&
           events[end].segment == events[begin].segment)
      ++end;
    const MemoryEvent& first = events[begin];
    const double t0 = static_cast<double>(first.time_ns);
    const double t1 = end < events.size() ? static_cast<double>(events[end].time_ns) : plot.t_max;
    if (first.phase != profile::Phase::None && plot.x(t1) - plot.x(t0) >= 0.25 &&
        !covered(first.phase, first.segment, t0))
      bands.push_back({first.phase, first.segment, t0, t1, static_cast<int64_t>(end - begin)});
    begin = end;
  }
  return bands;
}

void write_phase_bands(std::ostream& os, const MemoryTimeline& tl, const Plot& plot) {
  for (const Band& band : phase_bands(tl, plot)) {
    const double x0 = plot.x(band.t0), x1 = plot.x(band.t1);
    if (x1 - x0 < 0.25) continue;
    const std::string label = phase_label(band.phase, band.segment);
    os << "<rect class=\"phase\" data-phase=\"" << escape_xml(label) << "\" x=\"" << fixed(x0, 2) << "\" y=\""
       << fixed(plot.top, 1) << "\" width=\"" << fixed(x1 - x0, 2) << "\" height=\"" << fixed(plot.height, 1)
       << "\" fill=\"" << phase_color(band.phase) << "\"><title>" << escape_xml(label) << ": "
       << fixed(band.t0 / 1e6, 3) << " to " << fixed(band.t1 / 1e6, 3) << " ms";
    if (band.events >= 0) os << ", " << band.events << " events";
    os << "</title></rect>\n";
    // A replay sits inside the backward, whose label is above the plot: its own goes just inside.
    const double label_y = band.phase == profile::Phase::Replay ? plot.top + 14 : plot.top - 6;
    if (x1 - x0 >= 6.5 * static_cast<double>(label.size()))
      os << "<text x=\"" << fixed((x0 + x1) / 2, 1) << "\" y=\"" << fixed(label_y, 1)
         << "\" text-anchor=\"middle\" font-size=\"12\" fill=\"#555\">" << escape_xml(label) << "</text>\n";
  }
}

void write_axes(std::ostream& os, const Plot& plot) {
  // Below the axis (the host side) the labels are the bytes offloaded, without a sign.
  const report::AxisTicks mib = report::nice_ticks(-plot.host_max / kMiB, plot.bytes_max / kMiB, 9);
  for (const double v : mib.values) {
    const double y = plot.y(v * kMiB);
    os << "<line x1=\"" << fixed(plot.left, 1) << "\" x2=\"" << fixed(plot.left + plot.width, 1) << "\" y1=\""
       << fixed(y, 1) << "\" y2=\"" << fixed(y, 1) << "\" stroke=\"#000\" stroke-opacity=\"0.12\"/>\n"
       << "<text x=\"" << fixed(plot.left - 8, 1) << "\" y=\"" << fixed(y + 4, 1)
       << "\" text-anchor=\"end\" font-size=\"12\">" << mib.label(std::abs(v)) << "</text>\n";
  }
  const report::AxisTicks ms = report::nice_ticks(0, plot.t_max / 1e6, 11);
  const double base = plot.top + plot.height;
  for (const double v : ms.values) {
    const double x = plot.x(v * 1e6);
    os << "<line x1=\"" << fixed(x, 1) << "\" x2=\"" << fixed(x, 1) << "\" y1=\"" << fixed(base, 1) << "\" y2=\""
       << fixed(base + 5, 1) << "\" stroke=\"#000\"/>\n"
       << "<text x=\"" << fixed(x, 1) << "\" y=\"" << fixed(base + 20, 1)
       << "\" text-anchor=\"middle\" font-size=\"12\">" << ms.label(v) << "</text>\n";
  }
  os << "<rect x=\"" << fixed(plot.left, 1) << "\" y=\"" << fixed(plot.top, 1) << "\" width=\""
     << fixed(plot.width, 1) << "\" height=\"" << fixed(plot.height, 1)
     << "\" fill=\"none\" stroke=\"#000\"/>\n"
     << "<text x=\"" << fixed(plot.left + plot.width / 2, 1) << "\" y=\"" << fixed(base + 40, 1)
     << "\" text-anchor=\"middle\" font-size=\"13\">time since the timeline started (ms)</text>\n"
     << "<text transform=\"translate(" << fixed(plot.left - 60, 1) << ',' << fixed(plot.top + plot.height / 2, 1)
     << ") rotate(-90)\" text-anchor=\"middle\" font-size=\"13\">memory in use (MiB)</text>\n";
}

void write_peak_marker(std::ostream& os, const MemoryPeak& peak, const Plot& plot) {
  const double x = plot.x(static_cast<double>(peak.time_ns)), y = plot.y(static_cast<double>(peak.bytes));
  const std::string text = "peak " + format_bytes(peak.bytes) + " at " + fixed(static_cast<double>(peak.time_ns) / 1e6, 3) + " ms";
  const bool label_left = x > plot.left + plot.width * 0.7;
  os << "<g id=\"peak\"><title>" << text << " (event " << peak.event << ")</title>"
     << "<line x1=\"" << fixed(x, 1) << "\" x2=\"" << fixed(x, 1) << "\" y1=\"" << fixed(plot.top, 1) << "\" y2=\""
     << fixed(plot.top + plot.height, 1) << "\" stroke=\"#b00\" stroke-width=\"1.5\" stroke-dasharray=\"5,3\"/>"
     << "<circle cx=\"" << fixed(x, 1) << "\" cy=\"" << fixed(y, 1) << "\" r=\"4\" fill=\"#b00\"/>"
     << "<text x=\"" << fixed(label_left ? x - 8 : x + 8, 1) << "\" y=\"" << fixed(y - 8 < plot.top + 14 ? plot.top + 14 : y - 8, 1)
     << "\" text-anchor=\"" << (label_left ? "end" : "start") << "\" font-size=\"13\" font-weight=\"bold\" fill=\"#b00\">"
     << text << "</text></g>\n";
}

void write_legend(std::ostream& os, const MemoryTimeline& tl, const Plot& plot) {
  double x = plot.left;
  double y = plot.top + plot.height + 58;  // a row that would overflow the plot's width wraps
  for (int k = 0; k < kNumCategories; ++k) {
    const Category category = static_cast<Category>(k);
    const bool host = tl.has_host_side() && category == Category::Offloaded;  // the band below the axis
    const std::string label = std::string(host ? kHostLabel : category_name(category)) + " (peak " +
                              format_bytes(tl.peak_of(category).bytes) + ")";
    if (x > plot.left && x + 20 + 7.0 * static_cast<double>(label.size()) > plot.left + plot.width) x = plot.left, y += 22;
    os << "<rect x=\"" << fixed(x, 1) << "\" y=\"" << fixed(y, 1) << "\" width=\"14\" height=\"14\" fill=\""
       << kCategoryColors[k] << "\"/><text x=\"" << fixed(x + 20, 1) << "\" y=\"" << fixed(y + 12, 1)
       << "\" font-size=\"12\">" << label << "</text>\n";
    x += 30 + 7.0 * static_cast<double>(label.size());
  }
  const profile::Phase phases[] = {profile::Phase::Forward, profile::Phase::Backward, profile::Phase::Replay,
                                   profile::Phase::Optimizer};
  x = plot.left;
  for (profile::Phase phase : phases) {
    const std::string label = std::string("phase: ") + profile::phase_name(phase);
    os << "<rect x=\"" << fixed(x, 1) << "\" y=\"" << fixed(y + 22, 1) << "\" width=\"14\" height=\"14\" fill=\""
       << phase_color(phase) << "\" stroke=\"#999\"/><text x=\"" << fixed(x + 20, 1) << "\" y=\"" << fixed(y + 34, 1)
       << "\" font-size=\"12\">" << label << "</text>\n";
    x += 30 + 7.0 * static_cast<double>(label.size());
  }
}

constexpr size_t kMaxTableRows = 500;

void write_live_table(std::ostream& os, const MemoryPeak& peak, const char* id) {
  os << "<table id=\"" << id << "\">\n<thead><tr><th>#</th><th>bytes</th><th>category</th><th>shape</th>"
        "<th>kept for backward</th><th>allocated by</th><th>block</th></tr></thead>\n<tbody>\n";
  for (size_t i = 0; i < peak.live.size() && i < kMaxTableRows; ++i) {
    const LiveBlock& b = peak.live[i];
    os << "<tr><td>" << i + 1 << "</td><td class=\"num\" title=\"" << b.bytes << " B\">" << format_bytes(b.bytes)
       << "</td><td><span class=\"swatch\" style=\"background:" << kCategoryColors[static_cast<int>(b.category)]
       << "\"></span>" << category_name(b.category) << "</td><td>" << escape_xml(b.has_note ? b.note.shape : "")
       << "</td><td>" << escape_xml(kept_by(b)) << "</td><td>" << escape_xml(allocated_by(b))
       << "</td><td class=\"addr\">"
       << (b.before_timeline() ? "" : block_address(b.block)) << "</td></tr>\n";
  }
  if (peak.live.size() > kMaxTableRows) {
    int64_t rest = 0;
    for (size_t i = kMaxTableRows; i < peak.live.size(); ++i) rest += peak.live[i].bytes;
    os << "<tr><td></td><td class=\"num\">" << format_bytes(rest) << "</td><td colspan=\"5\">"
       << peak.live.size() - kMaxTableRows << " smaller blocks</td></tr>\n";
  }
  os << "</tbody>\n</table>\n";
}

}  // namespace

void write_memory_timeline_json(const std::string& path, const MemoryTimeline& timeline) {
  const char* what = "write_memory_timeline_json";
  const auto& events = timeline.events();
  const auto& levels = timeline.levels();
  json jevents = json::array();
  for (size_t i = 0; i < events.size(); ++i) {
    const MemoryEvent& e = events[i];
    jevents.push_back({{"kind", memory_event_kind_name(e.kind)},
                       {"bytes", e.bytes},
                       {"category", category_name(e.category)},
                       {"from", category_name(e.from)},
                       {"block", block_address(e.block)},
                       {"time_ns", e.time_ns},
                       {"phase", profile::phase_name(e.phase)},
                       {"segment", e.segment},
                       {"op", e.op},
                       {"node", e.node},
                       {"backward", e.op_backward},
                       {"host", e.host},
                       {"levels", levels[i]}});
  }
  json jnotes = json::array();
  for (const TimedActivationNote& n : timeline.notes())
    jnotes.push_back({{"events_before", n.events_before},
                      {"block", block_address(n.block)},
                      {"shape", n.note.shape},
                      {"held", n.note.held},
                      {"segment", n.note.segment},
                      {"op", n.note.op},
                      {"node", n.note.node}});
  json jphases = json::array();
  for (const PhaseSpan& p : timeline.phases())
    jphases.push_back({{"phase", profile::phase_name(p.phase)},
                       {"segment", p.segment},
                       {"start_ns", p.start_ns},
                       {"end_ns", p.end_ns}});
  json categories = json::array(), category_peaks = json::object();
  for (int c = 0; c < kNumCategories; ++c) {
    const Category category = static_cast<Category>(c);
    categories.push_back(category_name(category));
    category_peaks[category_name(category)] = peak_json(timeline.peak_of(category));
  }
  // The host side (the pinned pool's offloaded bytes; the Offloaded slot of the levels), or null.
  json host_side = nullptr;
  if (timeline.has_host_side())
    host_side = {{"label", kHostLabel},
                 {"category", category_name(Category::Offloaded)},
                 {"start_bytes", timeline.host_bytes(timeline.start_levels())},
                 {"peak", peak_json(timeline.peak_of(Category::Offloaded))}};
  const json doc = {{"device", timeline.device().str()},
                    {"categories", std::move(categories)},
                    {"wall_ns", timeline.wall_ns()},
                    {"start_bytes", category_bytes_json(timeline.start_levels())},
                    {"events", std::move(jevents)},
                    {"notes", std::move(jnotes)},
                    {"phases", std::move(jphases)},
                    {"peak", peak_json(timeline.peak())},
                    {"category_peaks", std::move(category_peaks)},
                    {"host_side", std::move(host_side)}};
  std::ofstream out;
  open_for_writing(out, path, what);
  out << doc.dump() << "\n";
  check_written(out, path, what);
}

void write_memory_timeline_html(const std::string& path, const MemoryTimeline& timeline, const std::string& title) {
  const char* what = "write_memory_timeline_html";
  const MemoryPeak& peak = timeline.peak();
  Plot plot;
  const auto& events = timeline.events();
  plot.t_max = std::max<double>({1.0, static_cast<double>(timeline.wall_ns()),
                                 events.empty() ? 0.0 : static_cast<double>(events.back().time_ns)});
  plot.bytes_max = std::max(1.0, static_cast<double>(peak.bytes) * 1.08);
  const MemoryPeak& host_peak = timeline.peak_of(Category::Offloaded);
  // Below the axis, the host side on the same scale; at least an eighth of the device's range, so
  // that a small host side stays readable beside its label.
  if (timeline.has_host_side())
    plot.host_max = std::max(static_cast<double>(host_peak.bytes) * 1.08, plot.bytes_max / 8);
  const double svg_width = plot.left + plot.width + 30, svg_height = plot.top + plot.height + 120;

  std::ostringstream os;
  os << "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
     << "<link rel=\"icon\" href=\"data:,\">\n<title>" << escape_xml(title) << "</title>\n<style>\n"
     << "body{font-family:sans-serif;margin:20px;color:#222}\n"
     << "table{border-collapse:collapse;font-size:13px}\n"
     << "th,td{border:1px solid #ccc;padding:3px 8px;text-align:left}\n"
     << "td.num{text-align:right;white-space:nowrap}\ntd.addr{font-family:monospace;color:#777}\n"
     << ".swatch{display:inline-block;width:10px;height:10px;margin-right:5px}\n"
     << "</style>\n</head>\n<body>\n<h1>" << escape_xml(title) << "</h1>\n";

  const CategoryBytes& at_peak = peak.by_category;
  os << "<p>Memory on " << timeline.device() << ": " << events.size() << " allocator events in "
     << fixed(static_cast<double>(timeline.wall_ns()) / 1e6, 3) << " ms. Peak " << format_bytes(peak.bytes)
     << " at " << fixed(static_cast<double>(peak.time_ns) / 1e6, 3) << " ms (";
  for (int c = 0; c < kNumCategories; ++c)
    if (!(timeline.has_host_side() && static_cast<Category>(c) == Category::Offloaded))
      os << (c ? ", " : "") << category_name(static_cast<Category>(c)) << ' ' << format_bytes(at_peak[c]);
  os << "). Activation peak " << format_bytes(timeline.peak_of(Category::Activation).bytes) << " at "
     << fixed(static_cast<double>(timeline.peak_of(Category::Activation).time_ns) / 1e6, 3) << " ms.";
  if (timeline.has_host_side())
    os << " Host side (" << kHostLabel << ", pinned host memory, drawn below the axis): peak "
       << format_bytes(host_peak.bytes) << " at " << fixed(static_cast<double>(host_peak.time_ns) / 1e6, 3) << " ms.";
  os << "</p>\n";

  os << "<svg id=\"timeline\" xmlns=\"http://www.w3.org/2000/svg\" width=\"" << fixed(svg_width, 0) << "\" height=\""
     << fixed(svg_height, 0) << "\" viewBox=\"0 0 " << fixed(svg_width, 0) << ' ' << fixed(svg_height, 0)
     << "\" font-family=\"sans-serif\">\n";
  write_phase_bands(os, timeline, plot);
  write_axes(os, plot);
  write_areas(os, timeline, plot);
  write_peak_marker(os, peak, plot);
  write_legend(os, timeline, plot);
  os << "</svg>\n";

  os << "<h2>Live at the peak (" << peak.live.size() << " rows, largest first)</h2>\n"
     << "<p>Blocks allocated before the timeline started are one row per category. &ldquo;Kept for backward&rdquo; "
        "is what the tape said when it saved the tensor (an op's save, or a checkpoint segment's "
        "input held for its replay).</p>\n";
  write_live_table(os, peak, "peak-live");
  const MemoryPeak& activations = timeline.peak_of(Category::Activation);
  os << "<h2>Activations at their own peak: " << format_bytes(activations.bytes) << " at "
     << fixed(static_cast<double>(activations.time_ns) / 1e6, 3) << " ms (" << activations.live.size()
     << " rows, largest first)</h2>\n";
  write_live_table(os, activations, "activation-peak-live");
  if (timeline.has_host_side()) {
    os << "<h2>Host side (" << kHostLabel << ") at its peak: " << format_bytes(host_peak.bytes) << " at "
       << fixed(static_cast<double>(host_peak.time_ns) / 1e6, 3) << " ms (" << host_peak.live.size()
       << " rows, largest first)</h2>\n";
    write_live_table(os, host_peak, "host-peak-live");
  }
  os << "</body>\n</html>\n";

  std::ofstream out;
  open_for_writing(out, path, what);
  out << os.str();
  check_written(out, path, what);
}

}  // namespace reel
