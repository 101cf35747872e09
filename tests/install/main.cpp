// One training step of a 2-layer MLP on random data, through an installed reel (find_package):
// forward, cross-entropy, backward, an Adam step, then the step's profile table (report/, the
// renderers' layer, installed and linked like the others). Prints the loss before and after; exits 0.
#include <cmath>
#include <cstdio>
#include <sstream>
#include <vector>

#include "reel.h"

int main() {
  using namespace reel;
  manual_seed(0);
  nn::MLP model({8, 16, 3});
  optim::Adam opt(model.parameters(), 1e-2);

  const int64_t n = 32;
  const Tensor x = randn({n, 8});
  std::vector<int32_t> labels(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) labels[static_cast<size_t>(i)] = static_cast<int32_t>(i % 3);
  const Tensor y = from_vector(labels, {n});

  Profiler prof;
  opt.zero_grad();
  const Tensor loss = cross_entropy(model(x), y);
  const double before = loss.item();
  autograd::backward(loss);
  opt.step();
  prof.stop();
  const double after = cross_entropy(model(x), y).item();
  std::ostringstream table;
  profile::print_table(table, prof);

  std::printf("reel_install_test: loss %.6f, after one Adam step %.6f\n", before, after);
  if (!std::isfinite(before) || !std::isfinite(after) || opt.steps() != 1 ||
      table.str().find("matmul") == std::string::npos) {
    std::printf("reel_install_test: FAILED\n");
    return 1;
  }
  return 0;
}
