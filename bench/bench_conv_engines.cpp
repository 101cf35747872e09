// bench_conv_engines: which CPU convolution should reel's conv2d run? Times, on the layers of the
// Fashion-MNIST CNN (examples/fashion_mnist_cnn.cpp: conv 1 -> 32 3x3 padding 1 on 28x28, conv
// 32 -> 64 3x3 padding 1 on 14x14) at batch 128 (the example's) and 32 (the micro-batch of
// --accum-steps 4), f32 NCHW, at 1 and 2 threads, reel's kernels::conv2d (im2col + the CPU GEMM,
// kernels/cpu/conv.cpp) against oneDNN's convolution primitives, forward (with bias), backward data
// and backward weights (with the bias gradient; reel's row is conv2d_backward_weight plus
// conv2d_backward_bias, the two kernels the tape runs for it).
//
// oneDNN runs twice per pass: on the user's NCHW / OIHW memory ("plain"), and on the layouts the
// primitive prefers (format_tag::any, usually blocked nChw8c/16c), with the reorders from and to
// NCHW timed separately and added ("blocked"), since reel keeps its tensors NCHW. Every oneDNN
// result is checked against reel's (max |diff| / max |reel|); beyond kTolerance the program fails.
//
//   ./bench_conv_engines [--rounds N] [--threads 1,2] [--batches 128,32] [--min] [--wall]
//   --min: a cell is its fastest round, not the median (on a loaded machine, the round the
//          neighbours disturbed least)
//   --wall: time 1-thread cells on the wall clock too
//
// Timing: per cell, every engine runs twice untimed (primitive creation, scratchpads, the OpenMP
// pool), then `rounds` rounds that each time every engine once, in an order rotating from round to
// round so that a slow spell of this shared machine falls on all alike; one timing is `reps`
// back-to-back calls (reps chosen so that reel's call takes >= 20 ms); a cell is the median of its
// rounds. 1-thread cells use the calling thread's CPU time (on this shared 2-core machine wall time
// measures the neighbours as much as the convolution), unless the process's CPU time shows that
// another thread worked during the timing: then that timing is wall time (counted and printed).
// 2-thread cells are wall time. oneDNN on Debian runs on OpenMP (libgomp) and follows
// omp_set_num_threads, as reel's kernels do. reel's calls allocate their outputs (as the tape's
// do); oneDNN writes into memory allocated once.
#include <omp.h>
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/random.h"
#include "core/tensor.h"
#include "kernels/conv.h"

#if defined(REEL_BENCH_HAVE_ONEDNN)
#include <oneapi/dnnl/dnnl.hpp>
#endif

using namespace reel;

namespace {

struct Layer {
  const char* name;
  int64_t C, O, H, W, k, pad;
};

double now_ms() {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double clock_ms(clockid_t id) {
  timespec ts{};
  clock_gettime(id, &ts);
  return static_cast<double>(ts.tv_sec) * 1e3 + static_cast<double>(ts.tv_nsec) * 1e-6;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

std::vector<int> parse_list(const char* s) {
  std::vector<int> out;
  for (const char* p = s; *p;) {
    out.push_back(std::atoi(p));
    while (*p && *p != ',') ++p;
    if (*p == ',') ++p;
  }
  return out;
}

// One timed engine of a cell: run() does the pass once, to the end of its work.
struct Engine {
  std::string name;
  std::function<void()> run;
  double median_ms = 0;
};

// Milliseconds per call of `reps` calls of fn: the calling thread's CPU time when cpu_clock and no
// other thread of the process worked meanwhile, else wall time (++wall_fallbacks when cpu_clock).
int wall_fallbacks = 0;
double time_calls(const std::function<void()>& fn, int reps, bool cpu_clock) {
  const double wall0 = now_ms(), thread0 = clock_ms(CLOCK_THREAD_CPUTIME_ID),
               proc0 = clock_ms(CLOCK_PROCESS_CPUTIME_ID);
  for (int k = 0; k < reps; ++k) fn();
  const double thread = clock_ms(CLOCK_THREAD_CPUTIME_ID) - thread0, proc = clock_ms(CLOCK_PROCESS_CPUTIME_ID) - proc0;
  const double wall = now_ms() - wall0;
  if (cpu_clock && proc <= thread * 1.02 + 0.05) return thread / reps;
  if (cpu_clock) ++wall_fallbacks;
  return wall / reps;
}

// Times the engines of one cell as the header says; fills median_ms (the fastest round with use_min).
void time_engines(std::vector<Engine>& engines, int rounds, bool cpu_clock, bool use_min) {
  for (int w = 0; w < 2; ++w)
    for (Engine& e : engines) e.run();
  const double t0 = now_ms();
  engines[0].run();
  const double one = std::max(now_ms() - t0, 1e-3);
  const int reps = std::max(1, static_cast<int>(std::ceil(20.0 / one)));
  std::vector<std::vector<double>> ms(engines.size());
  for (int r = 0; r < rounds; ++r) {
    for (size_t j = 0; j < engines.size(); ++j) {
      const size_t i = (j + static_cast<size_t>(r)) % engines.size();
      ms[i].push_back(time_calls(engines[i].run, reps, cpu_clock));
    }
  }
  for (size_t i = 0; i < engines.size(); ++i)
    engines[i].median_ms = use_min ? *std::min_element(ms[i].begin(), ms[i].end()) : median(ms[i]);
}

#if defined(REEL_BENCH_HAVE_ONEDNN)
// Beyond this relative error a result is wrong, not rounded: the sums here have at most 32 * 9
// (forward, backward data) or 128 * 196 (weights) f32 products.
constexpr double kTolerance = 1e-4;

// max |a - b| / max |b| over n floats.
double rel_diff(const float* a, const float* b, size_t n) {
  double d = 0, m = 0;
  for (size_t i = 0; i < n; ++i) {
    d = std::max(d, std::fabs(static_cast<double>(a[i]) - static_cast<double>(b[i])));
    m = std::max(m, std::fabs(static_cast<double>(b[i])));
  }
  return m > 0 ? d / m : d;
}

using dt = dnnl::memory::data_type;
using tag = dnnl::memory::format_tag;

dnnl::engine& eng() {
  static dnnl::engine e(dnnl::engine::kind::cpu, 0);
  return e;
}
dnnl::stream& strm() {
  static dnnl::stream s(eng());
  return s;
}

// A primitive with its arguments, plus (blocked variant) the reorders into its layouts before and
// out of them after; run_reorders() runs the reorders alone.
struct DnnlPass {
  dnnl::primitive prim;
  std::unordered_map<int, dnnl::memory> args;
  std::vector<std::pair<dnnl::reorder, std::pair<dnnl::memory, dnnl::memory>>> before, after;
  std::string impl;
  void run_reorders() {
    for (auto& r : before) r.first.execute(strm(), r.second.first, r.second.second);
    for (auto& r : after) r.first.execute(strm(), r.second.first, r.second.second);
  }
  void run() {
    for (auto& r : before) r.first.execute(strm(), r.second.first, r.second.second);
    prim.execute(strm(), args);
    for (auto& r : after) r.first.execute(strm(), r.second.first, r.second.second);
    strm().wait();
  }
  void run_prim_only() {
    prim.execute(strm(), args);
    strm().wait();
  }
};

// user: the NCHW memory holding the data; want: the primitive's descriptor for that argument.
// An input gets a reorder user -> want before the primitive, an output want -> user after it.
dnnl::memory bind(DnnlPass& p, const dnnl::memory& user, const dnnl::memory::desc& want, bool input) {
  if (user.get_desc() == want) return user;
  dnnl::memory m(want, eng());
  if (input)
    p.before.push_back({dnnl::reorder(user, m), {user, m}});
  else
    p.after.push_back({dnnl::reorder(m, user), {m, user}});
  return m;
}
#endif

}  // namespace

int main(int argc, char** argv) {
  try {
    int rounds = 7;
    bool use_min = false, wall = false;
    std::vector<int> threads = {1, 2}, batches = {128, 32};
    for (int i = 1; i < argc; ++i) {
      const std::string a = argv[i];
      if (a == "--rounds" && i + 1 < argc)
        rounds = std::atoi(argv[++i]);
      else if (a == "--threads" && i + 1 < argc)
        threads = parse_list(argv[++i]);
      else if (a == "--batches" && i + 1 < argc)
        batches = parse_list(argv[++i]);
      else if (a == "--min")
        use_min = true;
      else if (a == "--wall")
        wall = true;
      else {
        std::fprintf(stderr, "usage: %s [--rounds N] [--threads 1,2] [--batches 128,32] [--min] [--wall]\n", argv[0]);
        return 2;
      }
    }
    rounds = std::max(rounds, 5);
#if !defined(REEL_BENCH_HAVE_ONEDNN)
    std::printf("built without oneDNN (bench/CMakeLists.txt found no dnnl): reel's column only\n");
#else
    const dnnl_version_t* v = dnnl_version();
    const dnnl::cpu_isa isa = dnnl::get_effective_cpu_isa();
    const char* isa_name = isa == dnnl::cpu_isa::avx512_core        ? "avx512_core"
                           : isa == dnnl::cpu_isa::avx512_core_vnni ? "avx512_core_vnni"
                           : isa == dnnl::cpu_isa::avx512_core_bf16 ? "avx512_core_bf16"
                           : isa == dnnl::cpu_isa::avx512_core_amx  ? "avx512_core_amx"
                           : isa == dnnl::cpu_isa::avx2             ? "avx2"
                           : isa == dnnl::cpu_isa::avx2_vnni        ? "avx2_vnni"
                                                                    : "other (DNNL_VERBOSE=1 says)";
    std::printf("oneDNN %d.%d.%d, cpu runtime %s, effective ISA %s\n", v->major, v->minor, v->patch,
                v->cpu_runtime == DNNL_RUNTIME_OMP ? "OpenMP" : "other", isa_name);
#endif
    std::printf("%s of %d rounds (1 thread: %s; 2 threads: wall clock); ms per call; GFLOP/s = 2 N C_out OH OW C_in kH kW / time\n",
                use_min ? "fastest" : "medians", rounds, wall ? "wall clock" : "thread CPU time");
    std::printf("%-10s %-5s %-9s %3s %9s %8s %9s %8s %9s %9s %8s %7s %7s\n", "layer", "batch", "pass", "thr", "reel ms",
                "GFLOP/s", "dnnl ms", "GFLOP/s", "blk ms", "(reord)", "GFLOP/s", "x plain", "x blk");
    const Layer layers[] = {{"conv1", 1, 32, 28, 28, 3, 1}, {"conv2", 32, 64, 14, 14, 3, 1}};
    std::vector<std::string> impls;
    for (int N32 : batches) {
      const int64_t N = N32;
      for (const Layer& l : layers) {
        Generator gen(1);
        const Tensor x = randn({N, l.C, l.H, l.W}, DType::f32, Device::cpu(), &gen);   // (N, C, H, W)
        const Tensor w = randn({l.O, l.C, l.k, l.k}, DType::f32, Device::cpu(), &gen); // (O, C, k, k)
        const Tensor b = randn({l.O}, DType::f32, Device::cpu(), &gen);                // (O)
        const kernels::Conv2d p{{1, 1}, {l.pad, l.pad}, {1, 1}, 1};
        const Tensor y_ref = kernels::conv2d_forward(x, w, b, p);  // (N, O, OH, OW)
        const Tensor dy = randn(y_ref.shape(), DType::f32, Device::cpu(), &gen);
        const Tensor dx_ref = kernels::conv2d_backward_input(dy, w, x.shape(), p);
        const Tensor dw_ref = kernels::conv2d_backward_weight(dy, x, w.shape(), p);
        const Tensor db_ref = kernels::conv2d_backward_bias(dy);
        const double flops = 2.0 * static_cast<double>(y_ref.numel()) * static_cast<double>(l.C * l.k * l.k);

        for (int t : threads) {
          // oneDNN 2.x fixes a primitive's thread count (omp_get_max_threads) when it is created:
          // the primitives are made anew, and checked, for each thread count.
          omp_set_num_threads(t);
          const char* pass_names[3] = {"fwd", "bwd_data", "bwd_wt+b"};
#if defined(REEL_BENCH_HAVE_ONEDNN)
          // NCHW user memories over reel's buffers (inputs) and fresh outputs, compared after each run.
          const int64_t OH = y_ref.shape()[2], OW = y_ref.shape()[3];
          const dnnl::memory::dims xd{N, l.C, l.H, l.W}, wd{l.O, l.C, l.k, l.k}, bd{l.O}, yd{N, l.O, OH, OW};
          const dnnl::memory::dims st{1, 1}, pl{l.pad, l.pad}, pr{l.pad, l.pad};
          const dnnl::memory::desc x_md(xd, dt::f32, tag::nchw), w_md(wd, dt::f32, tag::oihw), b_md(bd, dt::f32, tag::x),
              y_md(yd, dt::f32, tag::nchw);
          const dnnl::memory::desc x_any(xd, dt::f32, tag::any), w_any(wd, dt::f32, tag::any), y_any(yd, dt::f32, tag::any);
          dnnl::memory x_m(x_md, eng(), x.data_ptr()), w_m(w_md, eng(), w.data_ptr()), b_m(b_md, eng(), b.data_ptr()),
              dy_m(y_md, eng(), dy.data_ptr());
          dnnl::memory y_m(y_md, eng()), dx_m(x_md, eng()), dw_m(w_md, eng()), db_m(b_md, eng());
          auto alg = dnnl::algorithm::convolution_direct;
          auto make_passes = [&](bool blocked, DnnlPass& fwd, DnnlPass& bwd_d, DnnlPass& bwd_w) {
            const auto& xq = blocked ? x_any : x_md;
            const auto& wq = blocked ? w_any : w_md;
            const auto& yq = blocked ? y_any : y_md;
            const dnnl::convolution_forward::primitive_desc fpd(
                dnnl::convolution_forward::desc(dnnl::prop_kind::forward_training, alg, xq, wq, b_md, yq, st, pl, pr), eng());
            fwd.prim = dnnl::convolution_forward(fpd);
            fwd.impl = fpd.impl_info_str();
            fwd.args = {{DNNL_ARG_SRC, bind(fwd, x_m, fpd.src_desc(), true)},
                        {DNNL_ARG_WEIGHTS, bind(fwd, w_m, fpd.weights_desc(), true)},
                        {DNNL_ARG_BIAS, b_m},
                        {DNNL_ARG_DST, bind(fwd, y_m, fpd.dst_desc(), false)}};
            const dnnl::convolution_backward_data::primitive_desc dpd(
                dnnl::convolution_backward_data::desc(alg, xq, wq, yq, st, pl, pr), eng(), fpd);
            bwd_d.prim = dnnl::convolution_backward_data(dpd);
            bwd_d.impl = dpd.impl_info_str();
            bwd_d.args = {{DNNL_ARG_DIFF_DST, bind(bwd_d, dy_m, dpd.diff_dst_desc(), true)},
                          {DNNL_ARG_WEIGHTS, bind(bwd_d, w_m, dpd.weights_desc(), true)},
                          {DNNL_ARG_DIFF_SRC, bind(bwd_d, dx_m, dpd.diff_src_desc(), false)}};
            const dnnl::convolution_backward_weights::primitive_desc wpd(
                dnnl::convolution_backward_weights::desc(alg, xq, wq, b_md, yq, st, pl, pr), eng(), fpd);
            bwd_w.prim = dnnl::convolution_backward_weights(wpd);
            bwd_w.impl = wpd.impl_info_str();
            bwd_w.args = {{DNNL_ARG_SRC, bind(bwd_w, x_m, wpd.src_desc(), true)},
                          {DNNL_ARG_DIFF_DST, bind(bwd_w, dy_m, wpd.diff_dst_desc(), true)},
                          {DNNL_ARG_DIFF_WEIGHTS, bind(bwd_w, dw_m, wpd.diff_weights_desc(), false)},
                          {DNNL_ARG_DIFF_BIAS, db_m}};
          };
          DnnlPass plain[3], blk[3];
          make_passes(false, plain[0], plain[1], plain[2]);
          make_passes(true, blk[0], blk[1], blk[2]);
          // Check both variants against reel's results before timing.
          auto check = [&](const char* what, const dnnl::memory& m, const Tensor& ref) {
            const double d = rel_diff(static_cast<const float*>(m.get_data_handle()), ref.data<float>(),
                                      static_cast<size_t>(ref.numel()));
            if (!(d <= kTolerance)) {
              std::fprintf(stderr, "bench_conv_engines: oneDNN %s of %s batch %lld differs from reel's by %.3g (> %g)\n",
                           what, l.name, static_cast<long long>(N), d, kTolerance);
              std::exit(1);
            }
            return d;
          };
          std::vector<double> diffs;
          for (DnnlPass* v : {plain, blk}) {
            const char* kind = v == plain ? "plain" : "blocked";
            std::memset(y_m.get_data_handle(), 0, y_ref.numel() * sizeof(float));
            v[0].run();
            diffs.push_back(check((std::string(kind) + " forward").c_str(), y_m, y_ref));
            std::memset(dx_m.get_data_handle(), 0, x.numel() * sizeof(float));
            v[1].run();
            diffs.push_back(check((std::string(kind) + " backward data").c_str(), dx_m, dx_ref));
            std::memset(dw_m.get_data_handle(), 0, w.numel() * sizeof(float));
            v[2].run();
            diffs.push_back(check((std::string(kind) + " backward weights").c_str(), dw_m, dw_ref));
            diffs.push_back(check((std::string(kind) + " backward bias").c_str(), db_m, db_ref));
          }
          const double worst = *std::max_element(diffs.begin(), diffs.end());
          for (int i = 0; i < 3; ++i)
            impls.push_back(std::string(l.name) + " b" + std::to_string(N) + " t" + std::to_string(t) + " " + pass_names[i] + ": plain " +
                            plain[i].impl + ", blocked " + blk[i].impl + " (" + std::to_string(blk[i].before.size()) +
                            " reorders in, " + std::to_string(blk[i].after.size()) + " out)");
          std::printf("# %s b%lld t%d: max rel diff oneDNN vs reel over all passes %.2e\n", l.name, static_cast<long long>(N),
                      t, worst);
#endif
          const std::function<void()> reel_runs[3] = {
              [&] { kernels::conv2d_forward(x, w, b, p); },
              [&] { kernels::conv2d_backward_input(dy, w, x.shape(), p); },
              [&] {
                kernels::conv2d_backward_weight(dy, x, w.shape(), p);
                kernels::conv2d_backward_bias(dy);
              }};
          for (int i = 0; i < 3; ++i) {
            std::vector<Engine> e;
            e.push_back({"reel", reel_runs[i]});
#if defined(REEL_BENCH_HAVE_ONEDNN)
            e.push_back({"plain", [&, i] { plain[i].run(); }});
            e.push_back({"blocked", [&, i] { blk[i].run(); }});
            e.push_back({"reorders", [&, i] {
                           blk[i].run_reorders();
                           strm().wait();
                         }});
#endif
            time_engines(e, rounds, t == 1 && !wall, use_min);
            const double r = e[0].median_ms;
            std::printf("%-10s %-5lld %-9s %3d %9.3f %8.2f", l.name, static_cast<long long>(N), pass_names[i], t, r,
                        flops / (r * 1e6));
#if defined(REEL_BENCH_HAVE_ONEDNN)
            const double pm = e[1].median_ms, bm = e[2].median_ms, rm = e[3].median_ms;
            std::printf(" %9.3f %8.2f %9.3f %9.3f %8.2f %7.2f %7.2f", pm, flops / (pm * 1e6), bm, rm, flops / (bm * 1e6),
                        r / pm, r / bm);
#endif
            std::printf("\n");
            std::fflush(stdout);
          }
        }
      }
    }
    std::printf("\n(reord) = the blocked column's reorders NCHW <-> oneDNN's layouts, timed alone, included in blk ms;\n"
                "x plain / x blk = reel ms / oneDNN ms (> 1: oneDNN faster); bwd_wt+b = weight and bias gradients\n");
    if (wall_fallbacks > 0)
      std::printf("%d 1-thread timings used wall time: another thread worked during them\n", wall_fallbacks);
    for (const std::string& s : impls) std::printf("impl %s\n", s.c_str());
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_conv_engines: %s\n", e.what());
    return 1;
  }
}
