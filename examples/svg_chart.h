// A small self-contained SVG line chart for the examples' pictures: series of (x, y) points with
// markers, linear or logarithmic axes with labelled ticks, a legend, and a <title> tooltip on every
// point. No scripts, fonts or links: the file opens in any browser without a network.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"

namespace examples {

struct Series {
  explicit Series(std::string name, bool line = true) : name(std::move(name)), line(line) {}
  std::string name;
  std::vector<double> x, y;
  bool line = true;  // false: markers only
  std::vector<std::string> labels;  // optional: written beside each point
};

struct Chart {
  std::string title, x_label, y_label;
  bool log_x = false, log_y = false;
  std::vector<Series> series;
};

namespace detail {
inline std::string svg_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '<') out += "&lt;";
    else if (c == '>') out += "&gt;";
    else if (c == '&') out += "&amp;";
    else out += c;
  }
  return out;
}
inline std::string tick_label(double v) {
  char buf[32];
  if (v != 0 && (std::fabs(v) < 1e-3 || std::fabs(v) >= 1e5)) std::snprintf(buf, sizeof buf, "%.0e", v);
  else std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}
// About six round ticks over [lo, hi]: powers of ten on a log axis, 1/2/5 steps on a linear one.
inline std::vector<double> ticks(double lo, double hi, bool log) {
  std::vector<double> t;
  if (log) {  // 1, 2, 5 per decade over less than three decades, else the powers of ten
    const bool dense = std::log10(hi / lo) < 3;
    for (double p = std::floor(std::log10(lo)); p <= std::ceil(std::log10(hi)); ++p)
      for (double m : dense ? std::vector<double>{1, 2, 5} : std::vector<double>{1}) t.push_back(m * std::pow(10.0, p));
    return t;
  }
  const double raw = (hi - lo) / 6, mag = std::pow(10.0, std::floor(std::log10(raw)));
  const double step = raw / mag < 2 ? 2 * mag : raw / mag < 5 ? 5 * mag : 10 * mag;
  for (double v = std::ceil(lo / step) * step; v <= hi + step * 1e-9; v += step) t.push_back(v);
  return t;
}
}  // namespace detail

// Writes `chart` to `path`; reel::Error if the file cannot be written or a log axis meets a value <= 0.
inline void write_svg(const std::string& path, const Chart& chart) {
  const double W = 780, H = 440, left = 80, right = 260, top = 40, bottom = 60;
  double x0 = 1e300, x1 = -1e300, y0 = 1e300, y1 = -1e300;
  for (const Series& s : chart.series)
    for (size_t i = 0; i < s.x.size(); ++i) {
      REEL_CHECK((!chart.log_x || s.x[i] > 0) && (!chart.log_y || s.y[i] > 0), "write_svg '", path, "': series '",
                 s.name, "' has a value <= 0 on a logarithmic axis");
      x0 = std::min(x0, s.x[i]), x1 = std::max(x1, s.x[i]), y0 = std::min(y0, s.y[i]), y1 = std::max(y1, s.y[i]);
    }
  REEL_CHECK(x0 <= x1, "write_svg '", path, "': the chart has no points");
  if (!chart.log_y) y0 = std::min(y0, 0.0);
  auto widen = [](double& lo, double& hi, bool log) {
    if (log) lo /= 1.5, hi *= 1.5;
    else if (hi - lo < 1e-12) lo -= 1, hi += 1;
    else hi += (hi - lo) * 0.05;
  };
  widen(x0, x1, chart.log_x);
  widen(y0, y1, chart.log_y);
  auto scale = [](double v, double lo, double hi, bool log) {
    return log ? (std::log(v) - std::log(lo)) / (std::log(hi) - std::log(lo)) : (v - lo) / (hi - lo);
  };
  auto px = [&](double x) { return left + scale(x, x0, x1, chart.log_x) * (W - left - right); };
  auto py = [&](double y) { return H - bottom - scale(y, y0, y1, chart.log_y) * (H - top - bottom); };
  const char* colors[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf"};

  std::ostringstream svg;
  svg << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << W << "\" height=\"" << H << "\" viewBox=\"0 0 " << W
      << " " << H << "\" font-family=\"sans-serif\" font-size=\"12\">\n"
      << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
      << "<text x=\"" << W / 2 << "\" y=\"24\" text-anchor=\"middle\" font-size=\"15\">"
      << detail::svg_escape(chart.title) << "</text>\n";
  for (double t : detail::ticks(x0, x1, chart.log_x)) {
    if (t < x0 || t > x1) continue;
    svg << "<line x1=\"" << px(t) << "\" y1=\"" << top << "\" x2=\"" << px(t) << "\" y2=\"" << H - bottom
        << "\" stroke=\"#eee\"/><text x=\"" << px(t) << "\" y=\"" << H - bottom + 16 << "\" text-anchor=\"middle\">"
        << detail::tick_label(t) << "</text>\n";
  }
  for (double t : detail::ticks(y0, y1, chart.log_y)) {
    if (t < y0 || t > y1) continue;
    svg << "<line x1=\"" << left << "\" y1=\"" << py(t) << "\" x2=\"" << W - right << "\" y2=\"" << py(t)
        << "\" stroke=\"#eee\"/><text x=\"" << left - 6 << "\" y=\"" << py(t) + 4 << "\" text-anchor=\"end\">"
        << detail::tick_label(t) << "</text>\n";
  }
  svg << "<rect x=\"" << left << "\" y=\"" << top << "\" width=\"" << W - left - right << "\" height=\""
      << H - top - bottom << "\" fill=\"none\" stroke=\"#444\"/>\n"
      << "<text x=\"" << (left + W - right) / 2 << "\" y=\"" << H - 18 << "\" text-anchor=\"middle\">"
      << detail::svg_escape(chart.x_label) << "</text>\n"
      << "<text transform=\"translate(18," << (top + H - bottom) / 2 << ") rotate(-90)\" text-anchor=\"middle\">"
      << detail::svg_escape(chart.y_label) << "</text>\n";
  for (size_t k = 0; k < chart.series.size(); ++k) {
    const Series& s = chart.series[k];
    const char* color = colors[k % 8];
    if (s.line && s.x.size() > 1) {
      svg << "<polyline fill=\"none\" stroke=\"" << color << "\" stroke-width=\"2\" points=\"";
      for (size_t i = 0; i < s.x.size(); ++i) svg << px(s.x[i]) << "," << py(s.y[i]) << " ";
      svg << "\"/>\n";
    }
    for (size_t i = 0; i < s.x.size(); ++i)
      svg << "<circle cx=\"" << px(s.x[i]) << "\" cy=\"" << py(s.y[i]) << "\" r=\"4\" fill=\"" << color
          << "\"><title>" << detail::svg_escape(s.name) << ": (" << detail::tick_label(s.x[i]) << ", "
          << detail::tick_label(s.y[i]) << ")</title></circle>\n";
    for (size_t i = 0; i < s.labels.size() && i < s.x.size(); ++i)
      svg << "<text x=\"" << px(s.x[i]) + 7 << "\" y=\"" << py(s.y[i]) - 7 << "\" font-size=\"11\" fill=\"" << color
          << "\">" << detail::svg_escape(s.labels[i]) << "</text>\n";
    const double ly = top + 10 + 20 * static_cast<double>(k);
    svg << "<rect x=\"" << W - right + 14 << "\" y=\"" << ly - 9 << "\" width=\"12\" height=\"12\" fill=\"" << color
        << "\"/><text x=\"" << W - right + 32 << "\" y=\"" << ly + 1 << "\">" << detail::svg_escape(s.name)
        << "</text>\n";
  }
  svg << "</svg>\n";
  std::ofstream out(path);
  REEL_CHECK(out.good(), "write_svg: cannot write '", path, "'");
  out << svg.str();
  REEL_CHECK(out.good(), "write_svg: writing '", path, "' failed");
}

}  // namespace examples
