// kernel_lab: one kernel, LayerNorm forward, written three ways and one way wrong
// (examples/kernel_lab/layernorm_lab.cu), each checked, timed and placed on a roofline.
// For each version: the largest error against an f64 reference loop (y, mean and rstd; it must be
// within 1e-5), the median time of --repeats launches, the bytes and FLOPs the work needs at least
// and the GB/s, GFLOP/s and % of the device's roof they make (report/profile.h), and the time the
// device predictor gives for the same work on an H200 (report/predict.h, once it is there).
// v4 carries a planted race: under simt's race checker (SIMT_CHECK=race) its launch raises
// reel::Error, which is printed; without the checker the program says whether its answer was
// right or wrong this time. docs/kernel_lab.md is the tutorial around this program.
//
// The same program runs everywhere the CUDA backend builds: in the emulated build (no GPU: the
// kernels run on the host's cores through kernels/simt, times are host times and say so) and in
// the nvcc build on a GPU (CUDA event times on the device).
//
//   ./kernel_lab                                   # every version, the default shape
//   ./kernel_lab --rows 37 --cols 75 --repeats 2   # ragged tails, seconds (the CTest run)
//   SIMT_CHECK=race ./kernel_lab --version v4      # the race report
//
// Exit status: 1 when v1, v2 or v3 disagree with the reference (v4 is wrong by design and never
// fails the run), 2 on a bad command line.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "examples/kernel_lab/layernorm_lab.h"
#include "reel.h"
// The device predictor lands in parallel with this program: until report/predict.h exists the
// H200 column says "n/a".
#if __has_include("report/predict.h")
#include "report/predict.h"
#define KERNEL_LAB_HAS_PREDICT 1
#else
#define KERNEL_LAB_HAS_PREDICT 0
#endif

using namespace reel;

namespace {

constexpr float kEps = 1e-5f;
constexpr double kTolerance = 1e-5;  // |got - ref| <= kTolerance * (1 + |ref|)

#if defined(REEL_CUDA_EMULATED)
constexpr bool kEmulated = true;
#else
constexpr bool kEmulated = false;
#endif

struct Options {
  int64_t rows = kEmulated ? 2048 : 32768;
  int64_t cols = 1024;
  int repeats = kEmulated ? 3 : 20;
  std::string version = "all";
  uint64_t seed = 0;
};

// The inputs on the host, f32 as the kernels see them, and the f64 reference outputs.
struct Problem {
  int64_t R = 0, C = 0;
  std::vector<float> x, w, b;          // (R, C), (C), (C)
  std::vector<double> y, mean, rstd;   // (R, C), (R), (R): the reference
};

// Rows of standard normal values around row means spread over [-8, 8]: far enough from 0 that
// a kernel summing x instead of x - x[0] would lose digits of its mean.
Problem make_problem(int64_t R, int64_t C, uint64_t seed) {
  Problem p;
  p.R = R;
  p.C = C;
  std::mt19937_64 gen(seed);
  std::normal_distribution<float> normal(0.f, 1.f);
  std::uniform_real_distribution<float> offset(-8.f, 8.f);
  p.x.resize(static_cast<size_t>(R * C));
  for (int64_t r = 0; r < R; ++r) {
    const float o = offset(gen);
    for (int64_t c = 0; c < C; ++c) p.x[static_cast<size_t>(r * C + c)] = o + normal(gen);
  }
  for (int64_t c = 0; c < C; ++c) {
    p.w.push_back(1.f + 0.1f * normal(gen));
    p.b.push_back(0.1f * normal(gen));
  }
  // The reference: two passes in double.
  p.y.resize(p.x.size());
  for (int64_t r = 0; r < R; ++r) {
    const float* xr = p.x.data() + r * C;
    double s = 0, v = 0;
    for (int64_t c = 0; c < C; ++c) s += xr[c];
    const double m = s / static_cast<double>(C);
    for (int64_t c = 0; c < C; ++c) v += (xr[c] - m) * (xr[c] - m);
    const double rs = 1.0 / std::sqrt(v / static_cast<double>(C) + kEps);
    for (int64_t c = 0; c < C; ++c) p.y[static_cast<size_t>(r * C + c)] = (xr[c] - m) * rs * p.w[c] + p.b[c];
    p.mean.push_back(m);
    p.rstd.push_back(rs);
  }
  return p;
}

// The largest |got - ref| / (1 + |ref|) over the three outputs.
double max_error(const Problem& p, const Tensor& y, const Tensor& mean, const Tensor& rstd) {
  double worst = 0;
  auto scan = [&worst](const Tensor& got, const std::vector<double>& ref) {
    const std::vector<float> g = got.to(Device::cpu()).to_vector<float>();
    for (size_t i = 0; i < g.size(); ++i) {
      const double e = std::fabs(g[i] - ref[i]) / (1 + std::fabs(ref[i]));
      worst = std::isnan(e) ? std::numeric_limits<double>::infinity() : std::max(worst, e);
    }
  };
  scan(y, p.y);
  scan(mean, p.mean);
  scan(rstd, p.rstd);
  return worst;
}

// What LayerNorm forward must move and compute at least, as reel's own entry point counts it
// (kernels/layernorm.cpp): x, w and b read once, y, mean and rstd written once, 8 FLOPs an element.
profile::KernelCost layernorm_cost(int64_t R, int64_t C) {
  profile::KernelCost cost;
  cost.flops = 8 * R * C;
  cost.bytes_read = 4 * (R * C + 2 * C);
  cost.bytes_written = 4 * (R * C + 2 * R);
  return cost;
}

// The predicted time of `cost` on an H200 and what bounds it, or nothing before the predictor exists.
struct H200Prediction {
  double seconds = 0;
  std::string bound;
};
std::optional<H200Prediction> predict_h200(const profile::KernelCost& cost) {
#if KERNEL_LAB_HAS_PREDICT
  const profile::Prediction p = profile::predict_kernel(profile::device_spec("h200"), cost, DType::f32);
  return H200Prediction{p.seconds, profile::bound_name(p.bound)};
#else
  (void)cost;
  return std::nullopt;
#endif
}

// "12.3 us", "4.56 ms", "1.23 s": three significant digits or so.
std::string duration(double seconds) {
  char text[32];
  if (seconds < 1e-3)
    std::snprintf(text, sizeof text, "%.2f us", seconds * 1e6);
  else if (seconds < 1)
    std::snprintf(text, sizeof text, "%.2f ms", seconds * 1e3);
  else
    std::snprintf(text, sizeof text, "%.2f s", seconds);
  return text;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

// Device buffers of one problem; the outputs are refilled with NaN before each version, so an
// element a version never writes shows up as an error.
struct Buffers {
  Tensor x, w, b, y, mean, rstd;
  Buffers(const Problem& p, Device d)
      : x(from_vector(p.x, {p.R, p.C}, d)),
        w(from_vector(p.w, {p.C}, d)),
        b(from_vector(p.b, {p.C}, d)),
        y(empty({p.R, p.C}, DType::f32, d)),
        mean(empty({p.R}, DType::f32, d)),
        rstd(empty({p.R}, DType::f32, d)) {}
  void poison() const {
    for (const Tensor* t : {&y, &mean, &rstd}) t->fill_(std::numeric_limits<double>::quiet_NaN());
  }
  void run(lab::Version v, int64_t R, int64_t C) const {
    lab::layernorm_forward(v, x.data<float>(), w.data<float>(), b.data<float>(), kEps, y.data<float>(),
                           mean.data<float>(), rstd.data<float>(), R, C);
  }
  std::vector<double> time(lab::Version v, int64_t R, int64_t C, int repeats) const {
    return lab::time_launches(v, x.data<float>(), w.data<float>(), b.data<float>(), kEps, y.data<float>(),
                              mean.data<float>(), rstd.data<float>(), R, C, repeats);
  }
};

// v4: run it once, catching the race checker's error. Returns nothing: v4 never fails the run.
void run_racy(const Problem& p, const Buffers& buf) {
  const char* check = std::getenv("SIMT_CHECK");
  std::printf("\nv4 (%s), the planted race:\n", lab::version_what(lab::Version::v4));
  buf.poison();
  try {
    buf.run(lab::Version::v4, p.R, p.C);
    const double err = max_error(p, buf.y, buf.mean, buf.rstd);
    if (kEmulated)
      std::printf("  no race reported (SIMT_CHECK=%s).\n", check ? check : "unset");
    else
      std::printf("  on a GPU nothing checks races here: run it under compute-sanitizer --tool racecheck.\n");
    if (err <= kTolerance)
      std::printf("  Its answer was right this time (max error %.2e): a race can hide in one schedule and\n"
                  "  bite in another.\n", err);
    else
      std::printf("  Its answer was WRONG (max error %.2e): warp 0 read partials before the other warps\n"
                  "  wrote them.\n", err);
    if (kEmulated)
      std::printf("  Run with SIMT_CHECK=race to have the emulator name the race, or with another\n"
                  "  SIMT_ORDER (forward, reverse, shuffle) to see the answer change.\n");
  } catch (const Error& e) {
    std::printf("  the launch failed, as it should under the race checker:\n\n%s\n", e.what());
  }
}

int run(const Options& o) {
  const Device device = Device::cuda(0);
  const std::vector<lab::Version> versions =
      o.version == "all" ? std::vector<lab::Version>(std::begin(lab::kVersions), std::end(lab::kVersions))
                         : std::vector<lab::Version>{o.version == "v1"   ? lab::Version::v1
                                                     : o.version == "v2" ? lab::Version::v2
                                                     : o.version == "v3" ? lab::Version::v3
                                                                         : lab::Version::v4};
  const Problem p = make_problem(o.rows, o.cols, o.seed);
  const Buffers buf(p, device);
  const profile::KernelCost cost = layernorm_cost(o.rows, o.cols);
  const profile::Roof& roof = profile::roof_for(device);
  const std::optional<H200Prediction> h200 = predict_h200(cost);

  std::printf("kernel_lab: LayerNorm forward, f32, x (%lld, %lld), median of %d launches, on %s%s\n",
              static_cast<long long>(o.rows), static_cast<long long>(o.cols), o.repeats, device.str().c_str(),
              kEmulated ? " (emulated: the simt emulator on the host's cores, host times)" : "");
  std::printf("roof: %.1f GB/s, %.1f GFLOP/s (%s)\n", roof.bytes_per_s / 1e9, roof.flops_per_s / 1e9,
              roof.source.c_str());
  const double intensity = static_cast<double>(cost.flops) / static_cast<double>(cost.bytes());
  std::printf("work: %.2f MB moved at least, %.2f MFLOP: %.2f FLOP/byte, %s-bound on this roof (ridge at %.1f FLOP/byte)\n\n",
              cost.bytes() / 1e6, cost.flops / 1e6, intensity,
              intensity * roof.bytes_per_s >= roof.flops_per_s ? "compute" : "memory", roof.flops_per_s / roof.bytes_per_s);
  std::printf("%-3s %-34s %-25s %9s %5s %11s %8s %8s %7s %18s\n", "", "version", "launch", "max err", "check",
              "time", "GB/s", "GFLOP/s", "% roof", "H200 predicted");

  bool all_ok = true;
  bool racy = false;
  for (lab::Version v : versions) {
    if (v == lab::Version::v4) {
      racy = true;
      continue;
    }
    buf.poison();
    buf.run(v, o.rows, o.cols);  // the checked run, and the warm-up for the timed ones
    const double err = max_error(p, buf.y, buf.mean, buf.rstd);
    const bool ok = err <= kTolerance;
    all_ok = all_ok && ok;
    const double s = median(buf.time(v, o.rows, o.cols, o.repeats));
    const profile::RoofPlacement placed =
        profile::place_on_roof(roof, static_cast<double>(cost.bytes()), static_cast<double>(cost.flops), s);
    const std::string predicted = h200 ? duration(h200->seconds) + " (" + h200->bound + ")" : "n/a";
    std::printf("%-3s %-34s %-25s %9.2e %5s %11s %8.2f %8.2f %6.1f%% %18s\n", lab::version_name(v),
                lab::version_what(v), lab::version_launch(v), err, ok ? "ok" : "FAIL", duration(s).c_str(),
                cost.bytes() / s / 1e9, cost.flops / s / 1e9, 100 * placed.fraction, predicted.c_str());
  }
  if (!h200)
    std::printf("\n(H200 predicted: n/a in this build: the device predictor, report/predict.h, is not there yet)\n");
  if (racy) run_racy(p, buf);
  if (!all_ok) {
    std::fprintf(stderr, "kernel_lab: a version disagrees with the reference by more than %.0e\n", kTolerance);
    return 1;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app{"kernel_lab: LayerNorm forward three ways (and one racy), checked, timed and placed on the roof "
               "(docs/kernel_lab.md)."};
  app.add_option("--rows", o.rows, "rows R of x (R, C)")->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--cols", o.cols, "columns C: the normalised dim")->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--repeats", o.repeats, "timed launches per version (the median is printed)")
      ->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--version", o.version, "v1, v2, v3, v4 (the planted race) or all")
      ->capture_default_str()->check(CLI::IsMember({"v1", "v2", "v3", "v4", "all"}));
  app.add_option("--seed", o.seed, "seed of the inputs")->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  try {
    if (!cuda_available()) {
      std::fprintf(stderr, "kernel_lab: this machine has no CUDA device (and the build has no emulator)\n");
      return 1;
    }
    return run(o);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kernel_lab: %s\n", e.what());
    return 1;
  }
}
