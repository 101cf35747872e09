// The examples' SVG line chart (report/svg_chart.h).
#include "report/svg_chart.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <sstream>

#include "core/error.h"
#include "report/escape.h"
#include "report/ticks.h"

namespace reel::report {

std::string svg_chart(const Chart& chart) {
  const double W = 780, H = 440, left = 80, right = 260, top = 40, bottom = 60;
  double x0 = 1e300, x1 = -1e300, y0 = 1e300, y1 = -1e300;
  for (const Series& s : chart.series) {
    REEL_CHECK(s.x.size() == s.y.size(), "svg_chart: series '", s.name, "' has ", s.x.size(), " x values and ",
               s.y.size(), " y values");
    for (size_t i = 0; i < s.x.size(); ++i) {
      REEL_CHECK((!chart.log_x || s.x[i] > 0) && (!chart.log_y || s.y[i] > 0), "svg_chart: series '", s.name,
                 "' has a value <= 0 on a logarithmic axis");
      x0 = std::min(x0, s.x[i]), x1 = std::max(x1, s.x[i]), y0 = std::min(y0, s.y[i]), y1 = std::max(y1, s.y[i]);
    }
  }
  REEL_CHECK(x0 <= x1, "svg_chart: the chart has no points");
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
  const auto axis = [](bool log) { return log ? AxisScale::Log : AxisScale::Linear; };
  const AxisTicks x_ticks = nice_ticks(x0, x1, 7, axis(chart.log_x));
  const AxisTicks y_ticks = nice_ticks(y0, y1, 7, axis(chart.log_y));
  // A point's tooltip: its coordinates to 4 significant digits, whatever the ticks' steps.
  const auto coordinate = [](double v) {
    std::ostringstream os;
    os.precision(4);
    os << v;
    return os.str();
  };
  const char* colors[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf"};

  std::ostringstream svg;
  svg << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << W << "\" height=\"" << H << "\" viewBox=\"0 0 " << W
      << " " << H << "\" font-family=\"sans-serif\" font-size=\"12\">\n"
      << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
      << "<text x=\"" << W / 2 << "\" y=\"24\" text-anchor=\"middle\" font-size=\"15\">" << escape_xml(chart.title)
      << "</text>\n";
  for (const double t : x_ticks.values)
    svg << "<line x1=\"" << px(t) << "\" y1=\"" << top << "\" x2=\"" << px(t) << "\" y2=\"" << H - bottom
        << "\" stroke=\"#eee\"/><text x=\"" << px(t) << "\" y=\"" << H - bottom + 16 << "\" text-anchor=\"middle\">"
        << x_ticks.label(t) << "</text>\n";
  for (const double t : y_ticks.values)
    svg << "<line x1=\"" << left << "\" y1=\"" << py(t) << "\" x2=\"" << W - right << "\" y2=\"" << py(t)
        << "\" stroke=\"#eee\"/><text x=\"" << left - 6 << "\" y=\"" << py(t) + 4 << "\" text-anchor=\"end\">"
        << y_ticks.label(t) << "</text>\n";
  svg << "<rect x=\"" << left << "\" y=\"" << top << "\" width=\"" << W - left - right << "\" height=\""
      << H - top - bottom << "\" fill=\"none\" stroke=\"#444\"/>\n"
      << "<text x=\"" << (left + W - right) / 2 << "\" y=\"" << H - 18 << "\" text-anchor=\"middle\">"
      << escape_xml(chart.x_label) << "</text>\n"
      << "<text transform=\"translate(18," << (top + H - bottom) / 2 << ") rotate(-90)\" text-anchor=\"middle\">"
      << escape_xml(chart.y_label) << "</text>\n";
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
          << "\"><title>" << escape_xml(s.name) << ": (" << coordinate(s.x[i]) << ", " << coordinate(s.y[i])
          << ")</title></circle>\n";
    for (size_t i = 0; i < s.labels.size() && i < s.x.size(); ++i)
      svg << "<text x=\"" << px(s.x[i]) + 7 << "\" y=\"" << py(s.y[i]) - 7 << "\" font-size=\"11\" fill=\"" << color
          << "\">" << escape_xml(s.labels[i]) << "</text>\n";
    const double ly = top + 10 + 20 * static_cast<double>(k);
    svg << "<rect x=\"" << W - right + 14 << "\" y=\"" << ly - 9 << "\" width=\"12\" height=\"12\" fill=\"" << color
        << "\"/><text x=\"" << W - right + 32 << "\" y=\"" << ly + 1 << "\">" << escape_xml(s.name) << "</text>\n";
  }
  svg << "</svg>\n";
  return svg.str();
}

void write_svg(const std::string& path, const Chart& chart) {
  const std::string svg = svg_chart(chart);
  std::ofstream out(path);
  REEL_CHECK(out.good(), "write_svg: cannot write '", path, "'");
  out << svg;
  REEL_CHECK(out.good(), "write_svg: writing '", path, "' failed");
}

}  // namespace reel::report
