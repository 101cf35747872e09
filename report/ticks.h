// The one axis-tick function of every renderer in report/: "nice" tick values for an axis range
// (1, 2 or 5 times a power of ten on a linear axis; 1, 2, 5 per decade or powers of ten on a
// logarithmic one) and their labels.
#pragma once
#include <string>
#include <vector>

namespace reel::report {

enum class AxisScale { Linear, Log };

struct AxisTicks {
  std::vector<double> values;  // ascending, every one inside [lo, hi]
  double step = 1;             // linear: the distance between ticks; log: 0
  int decimals = 0;            // linear: digits after the point that tell the ticks apart
  AxisScale scale = AxisScale::Linear;

  // `v` (one of `values`) as a label: on a linear axis with the axis's decimals ("0.0", "0.2", "-30";
  // never "-0"), on a log axis with the value's own ("0.01", "500"); from 10^6 up and below 10^-3 in
  // exponent form with only the digits the step needs ("1.5e9", "2e-5").
  std::string label(double v) const;
};

// Ticks for the axis range [lo, hi], at most `max_ticks` of them (>= 2).
//   Linear: every multiple in the range of the smallest step of 1, 2 or 5 times a power of ten that
//           is at least (hi - lo) / (max_ticks - 1); [0, 1] with 6 gives 0, 0.2, ..., 1. At least two values
//           when max_ticks >= 6 (a smaller max_ticks may leave an awkward range one or none). A
//           zero-width range gives the one value lo.
//   Log:    1, 2 and 5 times each power of ten in the range when that fits in max_ticks, else the
//           powers of ten, else every k-th power; lo must be > 0. A range that holds fewer than two
//           of these gets the linear ticks instead (scale says which).
// reel::Error when lo > hi, a bound is not finite, max_ticks < 2 or a log range reaches 0.
AxisTicks nice_ticks(double lo, double hi, int max_ticks, AxisScale scale = AxisScale::Linear);

}  // namespace reel::report
