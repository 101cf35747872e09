// --fit SIZE in the training examples: which levers make the step fit in SIZE bytes of device
// memory, and which of those is fastest on the --predict device. Every candidate is one dry run on
// the meta device (docs/design.md, "The meta device"): the example makes its model there afresh
// with the candidate's levers and runs a warm-up optimizer step then a measured one, whose peak
// bytes by category the allocator gives exactly (cuda:0's, the bytes a GPU would hold) and whose
// kernel records report/predict.h prices on the named GPU. Nothing is computed, so a GPT-2 medium
// candidate takes well under a second on the host.
//
// The search runs in the example's own process: the example hands over a function that builds a
// fresh model, optimizer and batches for a candidate's TrainOptions and returns its optimizer step
// (a FitStep; everything it made dies with it, and the cache is emptied before the next), so the
// corpus, the vocabulary and the model's shape are read once, not once per candidate as a
// subprocess per candidate would, and the measurements are the allocator's and the profiler's own
// values, not text parsed back from a child's output.
//
// The levers: micro-batches (--accum-steps, each divisor of --batch, or of rank 0's share of it),
// precision (f32, bf16), checkpointing (none, selective, sqrt, every:1, every:2; a policy whose runs
// over the model's units are another's is run once), offload (none, and boundaries where the policy
// checkpoints a run) and, with --simulate-ranks N, the ZeRO stage (0-3; 1 with AdamW only: each
// candidate then rank 0 of N simulated ranks, docs/design.md "The meta device"). Then a budget plan
// for what remains: where a step without checkpointing does not fit, budget:SIZE with SIZE the bytes
// the budget leaves beside the rest of that step's peak, with offload none and auto (the planner
// chooses what to recompute and what to offload).
// For each setting of the last three the search looks for the fewest micro-batches that fit: more
// never predict faster (the same FLOPs and activation bytes in more launches, and the weights read
// once per micro-batch), so they could not be the answer, and fewer than a count that does not fit
// do not fit either (a micro-batch's activations and temporaries shrink with it; the model state
// stays). It tries the fewest, then the most (when they do not fit, none does: the chain costs two
// dry runs), then halves the range between. Offload is tried only with fewer micro-batches than
// the same precision and policy fit without it: it adds copies and waits to the same kernels.
#pragma once
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "reel.h"
#include "report/predict.h"
#include "train_options.h"

namespace examples {

// One candidate: the levers a command line sets.
struct FitLevers {
  int64_t accum_steps = 1;
  std::string precision = "f32", checkpoint = "none", offload = "none";
  int zero = -1;  // with --simulate-ranks: the ZeRO stage (0: DataParallel's all-reduce); -1: one process
  // "--accum-steps 2 --precision bf16 --checkpoint sqrt --offload none [--zero 3]": what the command
  // line takes.
  std::string args() const {
    return "--accum-steps " + std::to_string(accum_steps) + " --precision " + precision + " --checkpoint " +
           checkpoint + " --offload " + offload + (zero >= 0 ? " --zero " + std::to_string(zero) : "");
  }
};

// A candidate's measured dry-run step.
struct FitRow {
  FitLevers levers;
  int64_t peak = 0;                   // all categories at once, on the device (MemoryStats::peak_bytes)
  int64_t parameter = 0, gradient = 0, optimizer_state = 0, activation = 0, temporary = 0;  // each its own peak
  int64_t reserved = 0;               // held from the device after the two steps (cache included)
  int64_t offloaded = 0;              // peak host (pinned) bytes of offloaded activations
  double step_s = 0;                  // predicted optimizer step on the --predict device (--tf32: TF32 GEMMs)
  double items_per_s = 0;             // samples or tokens per second at that step
  bool fits = false;                  // peak <= the budget
};

// The example's part: for `candidate` (the example's own options with the levers set and device
// meta), a fresh model, optimizer and data on the meta device, and the function that runs one
// optimizer step of them. What it captures is released when the returned function is.
using FitStep = std::function<void()>;
using FitSetup = std::function<FitStep(const TrainOptions& candidate)>;

// The modules --zero 2/3 shard by (Distributed::make_optimizer's `blocks` and `keep_whole`), as the
// example's training names them.
struct FitUnits {
  std::vector<reel::nn::Module*> blocks, keep_whole;
};

// What an example's FitSetup makes first, as training makes it: the model built by `make()` on the
// candidate's device (inside a DeviceScope: on meta no host bytes), its checkpoint policy and
// offload, the optimizer and the accumulation window (clipping as --clip). Under --simulate-ranks
// also the candidate's Distributed (its --zero: DataParallel or FSDP over `units(model)`, as
// training makes them), whose window sync the accumulator takes; `batch` is then rank 0's share of
// --batch. The example adds its data and the step that runs them.
template <class Model>
struct FitCandidate {  // destroyed in reverse: the accumulator, optimizer and sharding before the model
  std::shared_ptr<Model> model;
  std::unique_ptr<Distributed> dist;
  std::unique_ptr<reel::optim::Optimizer> opt;
  std::unique_ptr<reel::optim::Accumulator> acc;
  int64_t batch = 0;  // the samples this rank takes of each window
  // A budget:SIZE policy is planned before the first step, as training plans it, from the forward
  // of one micro-batch (only its shapes matter); any other policy needs nothing.
  void plan(const std::function<reel::Tensor()>& forward_loss) {
    if (model->checkpoint().kind == reel::autograd::CheckpointPolicy::Kind::Budget) model->plan_checkpoint(forward_loss);
  }
};
template <class Model, class Make, class Units>
std::shared_ptr<FitCandidate<Model>> make_fit_candidate(const TrainOptions& t, Make&& make, Units&& units) {
  const reel::Device device(t.device);
  auto c = std::make_shared<FitCandidate<Model>>();
  {
    reel::DeviceScope on(device);
    c->model = make();
  }
  c->model->set_checkpoint(reel::nn::CheckpointPolicy::parse(t.checkpoint));
  apply_offload(*c->model, t, device);
  reel::optim::Accumulator::Options options;
  options.clip_norm = t.clip;
  c->batch = t.batch;
  if (t.simulate_ranks > 0) {
    TrainOptions d = t;
    c->dist = std::make_unique<Distributed>(d);
    const FitUnits u = units(*c->model);
    c->opt = c->dist->make_optimizer(t.optimizer, *c->model, u.blocks, t.lr, u.keep_whole);
    options.sync = c->dist->sync();
    c->batch = static_cast<int64_t>(c->dist->share(t.batch).size());
    REEL_CHECK(c->batch > 0, "--batch ", t.batch, " is smaller than the ", t.simulate_ranks, " simulated ranks");
  } else {
    c->opt = reel::optim::make_optimizer(t.optimizer, c->model->parameters(), t.lr);
  }
  c->acc = std::make_unique<reel::optim::Accumulator>(*c->opt, options);
  return c;
}

// Registers --fit on `app` (for the examples that call run_fit). --predict, which otherwise needs
// --profile, may come with --fit instead: check_fit_options then checks the pair.
inline void add_fit_option(CLI::App& app, std::string& fit, TrainOptions& o) {
  app.add_option("--fit", fit,
                 "with --predict DEVICE: search the levers (--accum-steps, --precision, --checkpoint, --offload) "
                 "for the fastest predicted step whose device memory peak fits in SIZE (as in budget:SIZE, e.g. "
                 "24GiB), each candidate a dry run on the meta device; prints them all and the command line to run")
      ->each([&o](const std::string&) { o.fit = true; });
  CLI::Option* predict = app.get_option("--predict");
  predict->remove_needs(app.get_option("--profile"));
}

// --fit's size in bytes (reel::Error quoting a text that is not one), and --predict's pairing:
// --predict needs --profile, --fit or a budget:SIZE plan (whose units it prices), --fit needs
// --predict and is not --dist's.
inline int64_t check_fit_options(const TrainOptions& o, const std::string& fit) {
  const bool budget = o.checkpoint.rfind("budget:", 0) == 0;
  REEL_CHECK(o.predict.empty() || !o.profile.empty() || !fit.empty() || budget, "--predict ", o.predict,
             " needs --profile (the profiled step predicted), --fit (the levers searched) or --checkpoint "
             "budget:SIZE (the plan's units priced)");
  if (fit.empty()) return 0;
  REEL_CHECK(!o.predict.empty(), "--fit ", fit, " needs --predict DEVICE: the GPU whose predicted step ranks the candidates");
  REEL_CHECK(!o.dist || o.simulate_ranks > 0, "--fit searches the levers on the meta device in this process: for "
             "a data-parallel job's, drop --dist and give --simulate-ranks N");
  try {  // the checkpoint policy's size parser, so --fit reads sizes as budget:SIZE does
    return reel::autograd::CheckpointPolicy::parse("budget:" + fit).budget_bytes;
  } catch (const reel::Error&) {
    REEL_FAIL("--fit '", fit, "': expected a size such as 24GiB, 80GB or 512MiB");
  }
}

// The candidates for a model whose checkpoint policies count `units` units (a GPT's blocks), in
// the order the search tries them: for each precision, policy and offload, the micro-batch counts
// from the fewest up.
inline std::vector<std::vector<FitLevers>> fit_candidates(const TrainOptions& o, int64_t units) {
  using reel::autograd::CheckpointPolicy;
  // Micro-batches cut this rank's share of --batch (round robin: rank 0 takes the most).
  const int64_t share = o.simulate_ranks > 0 ? (o.batch + o.simulate_ranks - 1) / o.simulate_ranks : o.batch;
  std::vector<int64_t> accums;
  for (int64_t d = 1; d <= share; ++d)
    if (share % d == 0) accums.push_back(d);
  // Policies whose runs over `units` are the same as an earlier one's are the same step: once.
  std::vector<std::pair<std::string, std::vector<CheckpointPolicy::Run>>> policies;
  for (const char* text : {"none", "selective", "sqrt", "every:1", "every:2"}) {
    const std::vector<CheckpointPolicy::Run> runs = CheckpointPolicy::parse(text).plan(units);
    const bool seen = std::any_of(policies.begin(), policies.end(), [&](const auto& p) {
      return p.second.size() == runs.size() &&
             std::equal(runs.begin(), runs.end(), p.second.begin(), [](const auto& a, const auto& b) {
               return a.begin == b.begin && a.end == b.end && a.checkpointed == b.checkpointed &&
                      a.selective == b.selective;
             });
    });
    if (!seen) policies.emplace_back(text, runs);
  }
  // Under --simulate-ranks every ZeRO stage (1 shards AdamW's state only), as rank 0 of the job.
  std::vector<int> stages{-1};
  if (o.simulate_ranks > 0) {
    stages = {0, 2, 3};
    if (o.optimizer == "adamw") stages.insert(stages.begin() + 1, 1);
  }
  std::vector<std::vector<FitLevers>> chains;
  for (int zero : stages)
    for (const char* precision : {"f32", "bf16"})
      for (const auto& [policy, runs] : policies) {
        const bool checkpoints = std::any_of(runs.begin(), runs.end(), [](const auto& r) { return r.checkpointed; });
        for (const char* offload : {"none", "boundaries"}) {
          if (std::string(offload) == "boundaries" && !checkpoints) continue;  // no boundary to offload
          std::vector<FitLevers> chain;
          for (int64_t a : accums) chain.push_back({a, precision, policy, offload, zero});
          chains.push_back(chain);
        }
      }
  return chains;
}

// One candidate's dry run: `setup` builds it on meta (after the meta and pinned caches are
// emptied, so the reserved bytes are its own), a warm-up step makes the gradients and the optimizer
// state, then the peaks are reset and the measured step profiled and predicted on `spec`.
inline FitRow measure_fit_candidate(const TrainOptions& base, const FitLevers& levers, const FitSetup& setup,
                                    const reel::profile::DeviceSpec& spec, double items_per_step) {
  using namespace reel;
  TrainOptions t = base;
  t.device = "meta";
  t.accum_steps = levers.accum_steps;
  t.precision = levers.precision;
  t.checkpoint = levers.checkpoint;
  t.offload = levers.offload;
  t.zero = std::max(levers.zero, 0);
  t.profile.clear();
  t.memory_timeline.clear();
  const Device meta = Device::meta();
  allocator_for(meta).empty_cache();
  pinned_allocator(reel::Device::meta()).empty_cache();
  FitRow row;
  row.levers = levers;
  {
    const FitStep step = setup(t);
    allocator_for(meta).empty_cache();  // a budget plan's measuring forward cached blocks the steps may not need
    step();
    reset_peak_memory(meta);
    pinned_allocator(reel::Device::meta()).reset_peak();
    Profiler prof;
    step();
    prof.stop();
    const MemoryStats m = memory_stats(meta);
    row.peak = m.peak_bytes;
    row.parameter = m[Category::Parameter].peak_bytes;
    row.gradient = m[Category::Gradient].peak_bytes;
    row.optimizer_state = m[Category::OptimizerState].peak_bytes;
    row.activation = m[Category::Activation].peak_bytes;
    row.temporary = m[Category::Temporary].peak_bytes;
    row.reserved = m.reserved_bytes;
    row.offloaded = pinned_memory_stats(reel::Device::meta())[Category::Offloaded].peak_bytes;
    // The stalls re-decided at the device's speeds under the bound the candidate ran with, as
    // --profile --predict does.
    const int64_t bound = t.offload == "none" || t.offload_inflight == "none" ? 0 : offload_inflight_bytes(t);
    const profile::StepPrediction p = profile::predict_step(prof.kernels(), spec, bound);
    row.step_s = t.tf32 ? p.tf32_s : p.total.predicted_s;  // --tf32: the f32 GEMMs on TF32 tensor cores
  }
  row.items_per_s = row.step_s > 0 ? items_per_step / row.step_s : 0;
  return row;
}

// `argv` as the command line of the run `levers` asks for: --fit, --predict, --device and the
// levers' own options dropped (both "--opt value" and "--opt=value"), then --device (cuda, or the
// cuda:N given) and the levers appended.
inline std::string fit_command_line(int argc, char** argv, const TrainOptions& o, const FitLevers& levers) {
  const std::vector<std::string> dropped = {"--fit", "--predict", "--device", "--accum-steps", "--precision",
                                            "--checkpoint", "--offload", "--simulate-ranks", "--zero"};
  // A simulated job runs as a real one: its ranks started by mpirun, --dist.
  std::string line = levers.zero >= 0 ? "mpirun -np " + std::to_string(o.simulate_ranks) + " " : "";
  line += argc > 0 ? argv[0] : "example";
  bool dist = false;
  for (int i = 1; i < argc; ++i) dist = dist || std::string(argv[i]) == "--dist";
  if (levers.zero >= 0 && !dist) line += " --dist";
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const std::string name = arg.substr(0, arg.find('='));
    if (std::find(dropped.begin(), dropped.end(), name) != dropped.end()) {
      if (name == arg) ++i;  // its value is the next argument
      continue;
    }
    line += " " + arg;
  }
  const std::string device = o.device.rfind("cuda", 0) == 0 ? o.device : "cuda";
  // A budget plan priced on the --predict GPU, as the search priced it (host times would plan another).
  const bool budget = levers.checkpoint.rfind("budget:", 0) == 0;
  return line + " --device " + device + " " + levers.args() + (budget ? " --predict " + o.predict : "");
}

// --fit: runs the search, prints the table (sorted by predicted step, the candidates that fit
// marked) and the command line of the fastest that fits; 0. With none that fits, says so, names
// the smallest peak and its levers, and returns 1. `units`: what the model's checkpoint policies
// count; `items_per_step` / `unit`: what one optimizer step processes ("tokens").
inline int run_fit(const TrainOptions& o, const std::string& fit, int64_t units, double items_per_step,
                   const char* unit, const FitSetup& setup, int argc, char** argv) {
  using namespace reel;
  const int64_t budget = check_fit_options(o, fit);
  const profile::DeviceSpec& spec = profile::device_spec(o.predict);
  const auto start = std::chrono::steady_clock::now();
  std::vector<FitRow> rows;
  int64_t candidates = 0;
  // precision + policy -> the fewest micro-batches that fit without offload (a chain without offload
  // runs before its twin with it).
  std::map<std::string, int64_t> fits_without_offload;
  for (std::vector<FitLevers> chain : fit_candidates(o, units)) {
    candidates += static_cast<int64_t>(chain.size());
    const std::string twin =
        chain.front().precision + " " + chain.front().checkpoint + " " + std::to_string(chain.front().zero);
    // Offload adds copies and waits to the same kernels: never faster than its twin without it.
    const auto twin_fits = fits_without_offload.find(twin);
    if (chain.front().offload != "none" && twin_fits != fits_without_offload.end())
      chain.erase(std::remove_if(chain.begin(), chain.end(),
                                 [&](const FitLevers& l) { return l.accum_steps >= twin_fits->second; }),
                  chain.end());
    if (chain.empty()) continue;
    const auto fits = [&](size_t i) {
      rows.push_back(measure_fit_candidate(o, chain[i], setup, spec, items_per_step));
      rows.back().fits = rows.back().peak <= budget;
      return rows.back().fits;
    };
    // The fewest micro-batches that fit: the fewest first (often enough), then the most (when they
    // do not fit, nothing in the chain does), then halving the range between.
    size_t first = chain.size();
    if (fits(0)) {
      first = 0;
    } else if (chain.size() > 1 && fits(chain.size() - 1)) {
      size_t lo = 1, hi = chain.size() - 1;  // hi fits; below lo nothing does
      while (lo < hi) {
        const size_t mid = (lo + hi) / 2;
        if (fits(mid)) hi = mid;
        else lo = mid + 1;
      }
      first = hi;
    }
    if (first < chain.size() && chain[first].offload == "none") fits_without_offload.emplace(twin, chain[first].accum_steps);
  }
  // A budget plan for what remains: where a step without checkpointing did not fit, the planner is
  // given the bytes the budget leaves its activations beside the rest of that step's peak (model
  // state, temporaries), keeping what it can and recomputing or (offload auto) offloading the rest.
  std::vector<FitLevers> whole_unfit;
  for (const FitRow& r : rows)
    if (r.levers.checkpoint == "none" && r.levers.offload == "none" && !r.fits) {
      const int64_t left = budget - (r.peak - r.activation);
      if (left < 1024) continue;  // no room for a plan: the rest alone is over the budget
      FitLevers l = r.levers;  // rounded down, in MiB from 64 MiB up (a command line's size)
      l.checkpoint = "budget:" + (left >= 64 << 20 ? std::to_string(left >> 20) + "MiB" : std::to_string(left >> 10) + "KiB");
      whole_unfit.push_back(l);
    }
  int64_t unplannable = 0;  // budgets below what the chain's smallest plan keeps: no step to run
  for (FitLevers l : whole_unfit)
    for (const char* offload : {"none", "auto"}) {
      l.offload = offload;
      ++candidates;
      try {
        rows.push_back(measure_fit_candidate(o, l, setup, spec, items_per_step));
        rows.back().fits = rows.back().peak <= budget;
      } catch (const reel::Error& e) {
        if (std::string(e.what()).find("no plan fits") == std::string::npos) throw;
        ++unplannable;
      }
    }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::stable_sort(rows.begin(), rows.end(), [](const FitRow& a, const FitRow& b) { return a.step_s < b.step_s; });

  std::printf("fit: %s on %s (%s): %zu of %lld candidates run as dry runs on meta in %.1f s (the others have more "
              "micro-batches than one that fits, fewer than one that does not, or offload where the same levers fit "
              "without it: none of them can be the fastest that fits)\n",
              format_bytes(budget).c_str(), spec.name.c_str(), spec.description.c_str(), rows.size(),
              static_cast<long long>(candidates), seconds);
  if (unplannable > 0)
    std::printf("fit: %lld budget plan%s had no plan within its budget (the chain's least is more)\n",
                static_cast<long long>(unplannable), unplannable > 1 ? "s" : "");
  const bool zero = o.simulate_ranks > 0;  // a zero column for a simulated job's rank 0
  if (zero) std::printf("%-4s ", "zero");
  std::printf("%5s %-9s %-14s %-10s | %11s %11s %11s %11s %11s %11s | %11s %11s | %10s %12s  %s\n", "accum",
              "precision", "checkpoint", "offload", "peak", "parameter", "gradient", "optimizer", "activation",
              "temporary", "reserved", "host offl.", "step ms", std::string(unit).append("/s").c_str(), "fits");
  for (const FitRow& r : rows) {
    if (zero) std::printf("%-4d ", r.levers.zero);
    std::printf("%5lld %-9s %-14s %-10s | %11s %11s %11s %11s %11s %11s | %11s %11s | %10.2f %12.0f  %s\n",
                static_cast<long long>(r.levers.accum_steps), r.levers.precision.c_str(), r.levers.checkpoint.c_str(),
                r.levers.offload.c_str(), format_bytes(r.peak).c_str(), format_bytes(r.parameter).c_str(),
                format_bytes(r.gradient).c_str(), format_bytes(r.optimizer_state).c_str(),
                format_bytes(r.activation).c_str(), format_bytes(r.temporary).c_str(),
                format_bytes(r.reserved).c_str(), format_bytes(r.offloaded).c_str(), r.step_s * 1e3, r.items_per_s,
                r.fits ? "fits" : "");
  }
  const auto best = std::find_if(rows.begin(), rows.end(), [](const FitRow& r) { return r.fits; });
  if (best != rows.end()) {
    std::printf("fastest that fits in %s: %s, peak %s (%lld B), predicted step %.2f ms on %s (%.0f %s/s)\n",
                format_bytes(budget).c_str(), best->levers.args().c_str(), format_bytes(best->peak).c_str(),
                static_cast<long long>(best->peak), best->step_s * 1e3, spec.name.c_str(), best->items_per_s, unit);
    std::printf("run: %s\n", fit_command_line(argc, argv, o, best->levers).c_str());
    return 0;
  }
  const auto least = std::min_element(rows.begin(), rows.end(),
                                      [](const FitRow& a, const FitRow& b) { return a.peak < b.peak; });
  std::fflush(stdout);
  std::fprintf(stderr, "fit: nothing fits in %s (%lld B); the smallest peak is %s (%lld B), with %s\n",
               format_bytes(budget).c_str(), static_cast<long long>(budget), format_bytes(least->peak).c_str(),
               static_cast<long long>(least->peak), least->levers.args().c_str());
  return 1;
}

}  // namespace examples
