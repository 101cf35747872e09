// Shared setup of the tests of the neural-network kernel families (tests/test_nn_kernels_*.cpp
// and tests/test_cuda_nn_ops.cpp): the entry points under test (kernels/nn_ops.h), the reference
// and finite-difference helpers (testing.h, finite_diff.h) and the names all those files use,
// plus for_thread_counts for the determinism checks. Each of those files is its own test
// executable, so the using-declarations here reach only them; include it from a test .cpp only.
#pragma once
#include <omp.h>

#include <functional>
#include <initializer_list>

#include "finite_diff.h"
#include "kernels/ops.h"
#include "testing.h"

namespace reel::testing {

// Runs fn once with each OpenMP thread count of `counts`, in order, and restores the previous
// count afterwards (also when a check throws): the determinism tests compare those runs' results.
inline void for_thread_counts(std::initializer_list<int> counts, const std::function<void()>& fn) {
  struct Restore {
    int threads;
    ~Restore() { omp_set_num_threads(threads); }
  } restore{omp_get_max_threads()};
  for (int threads : counts) {
    omp_set_num_threads(threads);
    fn();
  }
}

}  // namespace reel::testing

using namespace reel;
using namespace reel::kernels;
using reel::testing::bit_identical;
using reel::testing::check_close;
using reel::testing::check_gradient;
using reel::testing::for_thread_counts;
using reel::testing::uniform_f64;
using reel::testing::values;
using reel::testing::weighted_sum;
