// safetensors_diff: compares two safetensors files tensor by tensor, like diff for checkpoints.
//
//   ./safetensors_diff a.safetensors b.safetensors [--atol 1e-6] [--rtol 0]
//
// Prints one line per tensor name (its shape and the largest |a - b|) and exits 0 when both files
// hold the same names with the same shapes and dtypes and every element satisfies
// |a - b| <= atol + rtol * |b| (numpy.allclose's rule; NaN equals NaN, so a file matches itself);
// 1 when they differ; 2 when a file cannot be read. --atol 0 asks for bit-identical values.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <set>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "reel.h"

using namespace reel;

int main(int argc, char** argv) {
  std::string path_a, path_b;
  double atol = 1e-6, rtol = 0;
  CLI::App app{"Compare two safetensors files: per tensor, the shape and max |a - b|; exit 1 when they differ."};
  app.add_option("a", path_a, "first file")->required();
  app.add_option("b", path_b, "second file (the reference of --rtol)")->required();
  app.add_option("--atol", atol, "absolute tolerance")->capture_default_str()->check(CLI::NonNegativeNumber);
  app.add_option("--rtol", rtol, "relative tolerance, times |b|")->capture_default_str()->check(CLI::NonNegativeNumber);
  CLI11_PARSE(app, argc, argv);

  nn::TensorDict a, b;
  try {
    a = nn::load_safetensors(path_a);
    b = nn::load_safetensors(path_b);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "safetensors_diff: %s\n", e.what());
    return 2;
  }

  std::set<std::string> names;
  for (const auto& [name, _] : a) names.insert(name);
  for (const auto& [name, _] : b) names.insert(name);
  int differ = 0;
  double worst = 0;
  for (const std::string& name : names) {
    const auto ia = a.find(name), ib = b.find(name);
    if (ia == a.end() || ib == b.end()) {
      const Tensor& t = ia != a.end() ? ia->second : ib->second;
      std::printf("%-32s %-14s only in %s\n", name.c_str(), shape_str(t.shape()).c_str(),
                  ia != a.end() ? "A" : "B");
      ++differ;
      continue;
    }
    const Tensor &ta = ia->second, &tb = ib->second;
    if (ta.shape() != tb.shape() || ta.dtype() != tb.dtype()) {
      std::printf("%-32s %s %s vs %s %s  MISMATCH\n", name.c_str(), shape_str(ta.shape()).c_str(),
                  dtype_name(ta.dtype()), shape_str(tb.shape()).c_str(), dtype_name(tb.dtype()));
      ++differ;
      continue;
    }
    const std::vector<double> va = ta.to(DType::f64).contiguous().to_vector<double>();
    const std::vector<double> vb = tb.to(DType::f64).contiguous().to_vector<double>();
    double max_diff = 0;
    int64_t bad = 0;
    for (size_t i = 0; i < va.size(); ++i) {
      if (va[i] == vb[i] || (std::isnan(va[i]) && std::isnan(vb[i]))) continue;
      const double d = std::fabs(va[i] - vb[i]);  // NaN against a number stays NaN
      if (!(d <= max_diff)) max_diff = d;          // and keeps max_diff NaN once seen
      if (!(d <= atol + rtol * std::fabs(vb[i]))) ++bad;
    }
    if (!(max_diff <= worst)) worst = max_diff;
    std::printf("%-32s %-14s max|a-b| %.3e%s\n", name.c_str(), shape_str(ta.shape()).c_str(), max_diff,
                bad ? ("  DIFFERS (" + std::to_string(bad) + " of " + std::to_string(va.size()) + ")").c_str()
                    : "");
    if (bad) ++differ;
  }
  std::printf("%s: %zu tensors, %d differ, max|a-b| %.3e (atol %g, rtol %g)\n", differ ? "DIFFERENT" : "SAME",
              names.size(), differ, worst, atol, rtol);
  return differ ? 1 : 0;
}
