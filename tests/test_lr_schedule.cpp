// LR schedules against hand-computed values.
#include <cmath>

#include "optim/lr_schedule.h"
#include "testing.h"

using namespace reel;
using namespace reel::optim;

TEST_CASE("constant and warm-up + cosine schedules") {
  CHECK(ConstantLr(0.1).lr(1000) == 0.1);
  WarmupCosineLr s(1.0, 0.1, 4, 14);
  CHECK(s.lr(0) == doctest::Approx(0.25));
  CHECK(s.lr(3) == doctest::Approx(1.0));
  CHECK(s.lr(4) == doctest::Approx(1.0));            // cosine starts at the top
  CHECK(s.lr(9) == doctest::Approx(0.55));           // half way: (max + min) / 2
  CHECK(s.lr(14) == doctest::Approx(0.1));
  CHECK(s.lr(100) == doctest::Approx(0.1));
  for (int i = 5; i < 14; ++i) CHECK(s.lr(i) < s.lr(i - 1));
  CHECK_REEL_ERROR(WarmupCosineLr(1.0, 0.1, 10, 5), "need 0 <= warmup_steps (10) <= total_steps (5)");
  CHECK_REEL_ERROR(WarmupCosineLr(0.1, 1.0, 0, 5), "min_lr 1 > max_lr 0.1");
}
