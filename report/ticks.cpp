// The renderers' axis ticks (report/ticks.h).
#include "report/ticks.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>

#include "core/error.h"

namespace reel::report {

namespace {

// Digits after the point that write `v` (a tick value or step) exactly to 9 significant digits.
int decimals_for(double v) {
  v = std::fabs(v);
  if (v == 0) return 0;
  for (int d = 0; d < 15; ++d) {
    const double scaled = v * std::pow(10.0, d);
    if (std::fabs(scaled - std::round(scaled)) <= 1e-9 * std::max(1.0, scaled)) return d;
  }
  return 15;
}

int exponent_of(double v) { return static_cast<int>(std::floor(std::log10(std::fabs(v)))); }

// "1.5e9", "2e-5": `digits` after the mantissa's point, trailing zeros dropped.
std::string exponent_form(double v, int digits) {
  char buf[48];
  std::snprintf(buf, sizeof buf, "%.*e", std::clamp(digits, 0, 15), v);
  std::string s = buf;
  const size_t e = s.find('e');
  std::string mantissa = s.substr(0, e);
  if (mantissa.find('.') != std::string::npos) {
    while (mantissa.back() == '0') mantissa.pop_back();
    if (mantissa.back() == '.') mantissa.pop_back();
  }
  return mantissa + "e" + std::to_string(std::stoi(s.substr(e + 1)));
}

AxisTicks linear_ticks(double lo, double hi, int max_ticks) {
  AxisTicks t;
  if (hi == lo) {
    t.values = {lo};
    t.step = lo == 0 ? 1 : std::pow(10.0, exponent_of(lo));
    t.decimals = std::max(decimals_for(lo), decimals_for(t.step));
    return t;
  }
  // At most max_ticks values: a step of at least range / (max_ticks - 1).
  const double raw = (hi - lo) / (max_ticks - 1);
  const double power = std::pow(10.0, std::floor(std::log10(raw)));
  t.step = 10 * power;
  for (const double m : {1.0, 2.0, 5.0})
    if (m * power >= raw * (1 - 1e-9)) {
      t.step = m * power;
      break;
    }
  // Multiples k * step (not a running sum, which drifts), with a little slack at both ends so
  // that 1.0 / 0.2 = 4.999... still reaches the bound; k = 0 gives +0, never -0.
  const auto first = static_cast<int64_t>(std::ceil(lo / t.step - 1e-9));
  const auto last = static_cast<int64_t>(std::floor(hi / t.step + 1e-9));
  for (int64_t k = first; k <= last; ++k) t.values.push_back(k == 0 ? 0.0 : static_cast<double>(k) * t.step);
  t.decimals = decimals_for(t.step);
  return t;
}

AxisTicks log_ticks(double lo, double hi, int max_ticks) {
  const int p0 = exponent_of(lo), p1 = exponent_of(hi) + 1;
  auto within = [&](double v) { return v >= lo * (1 - 1e-12) && v <= hi * (1 + 1e-12); };
  std::vector<double> dense, powers;
  for (int p = p0; p <= p1; ++p) {
    const double power = std::pow(10.0, p);
    for (const double m : {1.0, 2.0, 5.0})
      if (within(m * power)) dense.push_back(m * power);
    if (within(power)) powers.push_back(power);
  }
  AxisTicks t;
  t.scale = AxisScale::Log;
  t.step = 0;
  if (static_cast<int>(dense.size()) <= max_ticks) {
    t.values = dense;
  } else {
    const size_t every = (powers.size() + static_cast<size_t>(max_ticks) - 1) / static_cast<size_t>(max_ticks);
    for (size_t i = 0; i < powers.size(); i += every) t.values.push_back(powers[i]);
  }
  // A range within one decade may hold fewer than two such values: linear ticks label it better.
  if (t.values.size() < 2 && hi > lo) return linear_ticks(lo, hi, max_ticks);
  return t;
}

}  // namespace

std::string AxisTicks::label(double v) const {
  if (v == 0) v = 0;  // -0 prints as "-0"
  const double a = std::fabs(v);
  if (v != 0 && (a >= 1e6 || a < 1e-3))
    return exponent_form(v, scale == AxisScale::Linear ? exponent_of(v) - exponent_of(step) : 0);
  int d = scale == AxisScale::Linear ? decimals : decimals_for(v);
  if (v == 0 && d > 3) d = 0;  // its neighbours are in exponent form: "0", not "0.00002"
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", d, v);
  return buf;
}

AxisTicks nice_ticks(double lo, double hi, int max_ticks, AxisScale scale) {
  REEL_CHECK(std::isfinite(lo) && std::isfinite(hi) && lo <= hi, "nice_ticks: the axis range [", lo, ", ", hi,
             "] is not a finite range with lo <= hi");
  REEL_CHECK(max_ticks >= 2, "nice_ticks: max_ticks must be at least 2, got ", max_ticks);
  if (scale == AxisScale::Log) {
    REEL_CHECK(lo > 0, "nice_ticks: a logarithmic axis needs lo > 0, got [", lo, ", ", hi, "]");
    return log_ticks(lo, hi, max_ticks);
  }
  return linear_ticks(lo, hi, max_ticks);
}

}  // namespace reel::report
