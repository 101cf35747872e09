// The renderers' shared pieces (report/escape.h, report/ticks.h) and the SVG chart
// (report/svg_chart.h): every character that markup or an attribute would misread is escaped and
// control characters never reach the file; ticks are round, inside the range, at most as many as
// asked, and labelled without "-0" or float noise, for unit, odd, huge, zero-width and negative
// ranges and on log axes; the chart escapes its text and refuses what it cannot draw.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "report/escape.h"
#include "report/svg_chart.h"
#include "report/ticks.h"
#include "testing.h"

using namespace reel;
using report::AxisScale;
using report::AxisTicks;
using report::escape_xml;
using report::nice_ticks;

namespace {

std::vector<std::string> labels(const AxisTicks& t) {
  std::vector<std::string> out;
  for (const double v : t.values) out.push_back(t.label(v));
  return out;
}

void check_values(const AxisTicks& t, const std::vector<double>& want) {
  REQUIRE(t.values.size() == want.size());
  for (size_t i = 0; i < want.size(); ++i) CHECK(t.values[i] == doctest::Approx(want[i]).epsilon(1e-12));
}

}  // namespace

TEST_CASE("escape_xml: markup and quote characters") {
  CHECK(escape_xml("plain text 123") == "plain text 123");
  CHECK(escape_xml("&") == "&amp;");
  CHECK(escape_xml("<") == "&lt;");
  CHECK(escape_xml(">") == "&gt;");
  CHECK(escape_xml("\"") == "&quot;");
  CHECK(escape_xml("'") == "&#39;");
  CHECK(escape_xml("a<b && c>\"d\" 'e'") == "a&lt;b &amp;&amp; c&gt;&quot;d&quot; &#39;e&#39;");
  CHECK(escape_xml("&amp;") == "&amp;amp;");  // escaped again, not taken for an entity
  CHECK(escape_xml("") == "");
}

TEST_CASE("escape_xml: control characters, whitespace and UTF-8") {
  CHECK(escape_xml("a\tb\nc\rd") == "a&#9;b&#10;c&#13;d");
  const std::string fffd = "\xEF\xBF\xBD";
  CHECK(escape_xml("\x01") == fffd);
  CHECK(escape_xml("x\x1fy") == "x" + fffd + "y");
  CHECK(escape_xml("\x7f") == fffd);
  CHECK(escape_xml(std::string("a\0b", 3)) == "a" + fffd + "b");  // an embedded NUL too
  CHECK(escape_xml("\x1b[31mred") == fffd + "[31mred");          // a terminal colour code
  CHECK(escape_xml("caf\xC3\xA9 \xE2\x86\x92") == "caf\xC3\xA9 \xE2\x86\x92");  // UTF-8 passes
  // Nothing below 0x20 but tab, newline and CR (as references) is left in the output.
  std::string all;
  for (int c = 0; c < 0x20; ++c) all += static_cast<char>(c);
  for (const char c : escape_xml(all)) CHECK(static_cast<unsigned char>(c) >= 0x20);
}

TEST_CASE("nice_ticks: [0, 1] and [0, 37]") {
  const AxisTicks fifths = nice_ticks(0, 1, 6);
  check_values(fifths, {0, 0.2, 0.4, 0.6, 0.8, 1});
  CHECK(fifths.step == doctest::Approx(0.2));
  CHECK(labels(fifths) == std::vector<std::string>{"0.0", "0.2", "0.4", "0.6", "0.8", "1.0"});
  const AxisTicks tenths = nice_ticks(0, 1, 11);
  REQUIRE(tenths.values.size() == 11);  // 0.1 * 10 reaches 1 despite rounding
  CHECK(tenths.label(tenths.values[3]) == "0.3");  // not 0.30000000000000004
  CHECK(nice_ticks(0, 1, 10).step == doctest::Approx(0.2));  // 0.1 would give 11

  const AxisTicks odd = nice_ticks(0, 37, 9);
  CHECK(odd.step == 5);
  check_values(odd, {0, 5, 10, 15, 20, 25, 30, 35});
  CHECK(labels(odd).back() == "35");
  check_values(nice_ticks(0, 37, 5), {0, 10, 20, 30});
}

TEST_CASE("nice_ticks: [1e6, 3e9] in exponent form") {
  const AxisTicks big = nice_ticks(1e6, 3e9, 7);
  CHECK(big.step == 5e8);
  check_values(big, {5e8, 1e9, 1.5e9, 2e9, 2.5e9, 3e9});
  CHECK(labels(big) == std::vector<std::string>{"5e8", "1e9", "1.5e9", "2e9", "2.5e9", "3e9"});
  const AxisTicks small = nice_ticks(0, 1e-4, 6);
  CHECK(labels(small) == std::vector<std::string>{"0", "2e-5", "4e-5", "6e-5", "8e-5", "1e-4"});
}

TEST_CASE("nice_ticks: a zero-width range is its one value") {
  const AxisTicks five = nice_ticks(5, 5, 8);
  check_values(five, {5});
  CHECK(labels(five) == std::vector<std::string>{"5"});
  CHECK(labels(nice_ticks(0, 0, 8)) == std::vector<std::string>{"0"});
  CHECK(labels(nice_ticks(-0.0, -0.0, 8)) == std::vector<std::string>{"0"});
  CHECK(labels(nice_ticks(0.25, 0.25, 8)) == std::vector<std::string>{"0.25"});
  CHECK(labels(nice_ticks(-3, -3, 8)) == std::vector<std::string>{"-3"});
  CHECK(labels(nice_ticks(2e9, 2e9, 8)) == std::vector<std::string>{"2e9"});
}

TEST_CASE("nice_ticks: negative ranges, and no -0") {
  const AxisTicks across = nice_ticks(-37, 12, 6);
  CHECK(across.step == 10);
  check_values(across, {-30, -20, -10, 0, 10});
  CHECK(labels(across) == std::vector<std::string>{"-30", "-20", "-10", "0", "10"});
  CHECK(!std::signbit(across.values[3]));
  const AxisTicks below = nice_ticks(-1, -0.25, 4);
  check_values(below, {-1, -0.5});
  CHECK(labels(below) == std::vector<std::string>{"-1.0", "-0.5"});
  CHECK(labels(nice_ticks(-0.3, 0.3, 7)) == std::vector<std::string>{"-0.3", "-0.2", "-0.1", "0.0", "0.1", "0.2", "0.3"});
}

TEST_CASE("nice_ticks: over many ranges, round steps inside the range, between 2 and max_ticks") {
  uint64_t state = 12345;
  auto uniform = [&] {  // a small LCG: the same ranges every run
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    return static_cast<double>(state >> 11) / static_cast<double>(1ULL << 53);
  };
  for (int i = 0; i < 2000; ++i) {
    const double scale = std::pow(10.0, std::floor(uniform() * 20) - 10);
    const double a = (uniform() * 2 - 1) * scale, b = (uniform() * 2 - 1) * scale;
    const double lo = std::min(a, b), hi = std::max(a, b);
    const int max_ticks = 6 + static_cast<int>(uniform() * 7);
    const AxisTicks t = nice_ticks(lo, hi, max_ticks);
    CAPTURE(lo);
    CAPTURE(hi);
    CAPTURE(max_ticks);
    CHECK(t.values.size() >= 2);
    CHECK(static_cast<int>(t.values.size()) <= max_ticks);
    const double mantissa = t.step / std::pow(10.0, std::floor(std::log10(t.step) + 1e-9));
    CHECK((std::fabs(mantissa - 1) < 1e-9 || std::fabs(mantissa - 2) < 1e-9 || std::fabs(mantissa - 5) < 1e-9));
    for (size_t k = 0; k < t.values.size(); ++k) {
      CHECK(t.values[k] >= lo - 1e-9 * t.step);
      CHECK(t.values[k] <= hi + 1e-9 * t.step);
      if (k > 0) CHECK(t.values[k] - t.values[k - 1] == doctest::Approx(t.step));
    }
  }
}

TEST_CASE("nice_ticks: logarithmic axes") {
  const AxisTicks dense = nice_ticks(1, 100, 7, AxisScale::Log);
  CHECK(dense.scale == AxisScale::Log);
  check_values(dense, {1, 2, 5, 10, 20, 50, 100});
  const AxisTicks powers = nice_ticks(0.01, 1000, 7, AxisScale::Log);
  check_values(powers, {0.01, 0.1, 1, 10, 100, 1000});
  CHECK(labels(powers) == std::vector<std::string>{"0.01", "0.1", "1", "10", "100", "1000"});
  const AxisTicks wide = nice_ticks(1e-6, 1e24, 7, AxisScale::Log);
  check_values(wide, {1e-6, 1e-1, 1e4, 1e9, 1e14, 1e19, 1e24});
  CHECK(labels(wide).front() == "1e-6");
  CHECK(labels(wide).back() == "1e24");
  // Inside one decade there are too few: linear ticks label the axis instead.
  const AxisTicks narrow = nice_ticks(3, 4, 7, AxisScale::Log);
  CHECK(narrow.scale == AxisScale::Linear);
  check_values(narrow, {3, 3.2, 3.4, 3.6, 3.8, 4});
}

TEST_CASE("nice_ticks: misuse") {
  CHECK_REEL_ERROR(nice_ticks(2, 1, 5), "nice_ticks");
  CHECK_REEL_ERROR(nice_ticks(0, NAN, 5), "not a finite range");
  CHECK_REEL_ERROR(nice_ticks(-INFINITY, 0, 5), "not a finite range");
  CHECK_REEL_ERROR(nice_ticks(0, 1, 1), "max_ticks");
  CHECK_REEL_ERROR(nice_ticks(0, 10, 5, AxisScale::Log), "logarithmic");
}

TEST_CASE("svg_chart: text escaped, ticks drawn, what cannot be drawn refused") {
  report::Chart chart;
  chart.title = "peak <bytes> & \"time\"";
  chart.x_label = "layers";
  chart.y_label = "MiB";
  report::Series s("a & b");
  s.x = {1, 2, 4, 8};
  s.y = {10, 20, 40, 80};
  s.labels = {"<1>", "2", "4", "8"};
  chart.series.push_back(s);
  const std::string svg = report::svg_chart(chart);
  CHECK(svg.find("peak &lt;bytes&gt; &amp; &quot;time&quot;") != std::string::npos);
  CHECK(svg.find(">a &amp; b<") != std::string::npos);
  CHECK(svg.find("&lt;1&gt;") != std::string::npos);
  CHECK(svg.find("<1>") == std::string::npos);
  CHECK(svg.find(">80</text>") != std::string::npos);  // a y tick: 0, 20, ..., 80 on [0, 84]
  CHECK(svg.find("<script") == std::string::npos);

  report::Chart log_chart = chart;
  log_chart.log_y = true;
  log_chart.series[0].y[1] = 0;
  CHECK_REEL_ERROR(report::svg_chart(log_chart), "logarithmic");
  CHECK_REEL_ERROR(report::svg_chart(report::Chart{}), "no points");
  CHECK_REEL_ERROR(report::write_svg("/nonexistent-reel-dir/chart.svg", chart), "/nonexistent-reel-dir/chart.svg");
}
