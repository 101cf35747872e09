// Gradient check: an op's backward against central finite differences, in f64 on the CPU.
//
//   auto r = autograd::gradcheck([](const Tensors& x) { return gelu(x[0]); }, {randn({3, 4})});
//   CHECK_MESSAGE(r.ok, r.message);
#pragma once
#include <functional>
#include <string>

#include "autograd/op.h"

namespace reel::autograd {

struct GradcheckOptions {
  double eps = 1e-6;    // finite-difference step
  double atol = 1e-6;   // |analytic - numeric| <= atol + rtol * |numeric|
  double rtol = 1e-5;
  uint64_t seed = 0;    // of the random projection w
};

struct GradcheckResult {
  bool ok = true;
  double max_abs_error = 0;
  std::string message;  // the worst element when !ok
};

// Copies `inputs` to f64 CPU leaves (those that require grad are checked; if none does, all are)
// and checks, for a fixed random w shaped like f's output, the gradient of L = sum(w * f(x))
// against (L(x + eps e_i) - L(x - eps e_i)) / (2 eps) for every element i of every checked input.
// f must be deterministic (a random op takes its Generator from inside f). Needs an empty tape;
// leaves it empty.
GradcheckResult gradcheck(const std::function<Tensor(const Tensors&)>& f, const Tensors& inputs,
                          const GradcheckOptions& options = {});

}  // namespace reel::autograd
