// A small self-contained SVG line chart (the examples' pictures, e.g. memory_lab's): series of
// (x, y) points with markers, linear or logarithmic axes with labelled ticks (report/ticks.h), a
// legend, and a <title> tooltip on every point. No scripts, fonts or links: the file opens in any
// browser without a network.
#pragma once
#include <string>
#include <utility>
#include <vector>

namespace reel::report {

struct Series {
  explicit Series(std::string name, bool line = true) : name(std::move(name)), line(line) {}
  std::string name;
  std::vector<double> x, y;
  bool line = true;                 // false: markers only
  std::vector<std::string> labels;  // optional: written beside each point
};

struct Chart {
  std::string title, x_label, y_label;
  bool log_x = false, log_y = false;
  std::vector<Series> series;
};

// The chart as an SVG document. reel::Error when it has no points or a log axis meets a value <= 0.
std::string svg_chart(const Chart& chart);

// Writes svg_chart(chart) to `path`; reel::Error naming `path` if it cannot be written, or as
// svg_chart.
void write_svg(const std::string& path, const Chart& chart);

}  // namespace reel::report
