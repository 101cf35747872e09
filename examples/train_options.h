// What the training examples share: their common command-line options (device, batch,
// accumulation, checkpointing and offload, optimizer, learning-rate schedule, clipping, run length, seed,
// threads, save/load, the run's checkpoints (--checkpoint-dir, --save-every, --keep, --stop-at,
// --resume: run_checkpoints.h), --metrics (metrics.h), profiling and its predicted device step, the
// memory timeline), parsed with CLI11, the schedule and thread count they ask for, how a window's
// samples are cut into micro-batches, the progress display (a bar on a terminal, plain lines in a
// log), the profiler and the memory timeline around a few
// training steps, and --dist (data parallel over the ranks of mpirun, when reel was built with distributed/;
// --zero 1/2/3, --reduce, --fsdp-units and --fsdp-prefetch shard it, and every run ends with rank 0's
// peak bytes by category; --simulate-ranks N dry-runs it on meta as rank 0 of N), --precision (the forwards under autograd::Autocast, autocast_dtype
// below; f16 with the loss scaler of make_scaler; with --zero 2/3 also FSDP's param_dtype: 16-bit
// gathered parameters over f32 master shards) and --tf32.
#pragma once
#include <CLI/CLI.hpp>
#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "autograd/autocast.h"
#include "autograd/checkpoint_planner.h"
#include "kernels/matmul.h"  // set_allow_tf32
#include "optim/accumulator.h"
#include "optim/grad_scaler.h"
#include "optim/lazy_scalar.h"
#include "optim/lr_schedule.h"
#include "optim/optimizer.h"
#include "optim/registry.h"
#include "report/memory_timeline.h"
#include "report/predict.h"
#include "report/profile.h"
#if REEL_HAS_DISTRIBUTED
#include "distributed/data_parallel.h"
#include "distributed/fsdp.h"
#endif

namespace examples {

struct TrainOptions {
  std::string device = "cpu";
  int64_t batch = 128;        // samples (or sequences) per optimizer step: the accumulation window
  int64_t accum_steps = 1;    // micro-batches per window; each holds about batch / accum_steps
  std::string checkpoint = "none";  // none | every:K | sqrt | list:i,j | selective | budget:SIZE
  std::string offload = "none";     // none | boundaries | all | auto: saved activations to host memory
  std::string offload_inflight = "8MiB";  // SIZE | none: the device bytes waiting for their copy to the host
  bool inexact_levers = false;  // budget:SIZE may plan levers that are not exact (bf16 saves)
  int64_t epochs = 1;
  int64_t max_steps = 0;      // > 0: stop after this many optimizer steps
  std::string optimizer = "adam";
  double lr = 1e-3;
  std::string schedule = "constant";  // constant | cosine (linear warm-up, cosine decay to lr / 10)
  int64_t warmup = 0;         // warm-up steps of the cosine schedule
  double clip = 0;            // > 0: clip the global gradient norm of each step to this
  int threads = 0;            // OpenMP threads of the CPU kernels; 0: OpenMP's default (all cores)
  uint64_t seed = 0;
  std::string save, load;     // safetensors paths; empty: none
  std::string checkpoint_dir;  // the run's whole state, every --save-every steps and at the end (run_checkpoints.h)
  int64_t save_every = 0;      // 0: only at the end
  int keep = 2;                // checkpoints kept in checkpoint_dir
  bool resume = false;         // continue from checkpoint_dir's newest checkpoint that verifies
  int64_t stop_at = 0;         // end the run after this optimizer step (checkpointed), as a time-limited job would
  std::string metrics;         // one JSON line per step here, and the loss curve beside it (metrics.h)
  bool quiet = false;         // no progress line (for logs and tests)
  bool detect_anomaly = false; // autograd::DetectAnomaly around training: NaN/Inf raise, naming the op
  bool skip_nonfinite = false; // a step whose gradients are not finite is skipped (and counted)
  bool cuda_graph = false;     // each full window captured once as a CUDA graph and replayed (optim/graphed_window.h)
  std::string profile;        // trace path; empty: no profiling
  int64_t profile_steps = 3;  // optimizer steps profiled, after kProfileWarmup steps of warm-up
  std::string predict;        // a device of report/device_specs.cpp: with --profile the step predicted on it;
                              // a budget:SIZE plan's unit times are its predicted ones
  std::string memory_timeline;  // page path (HTML; the JSON beside it); empty: no timeline
  bool dist = false;          // data parallel over the ranks mpirun started (see Distributed)
  int simulate_ranks = 0;     // --device meta or --fit: data parallel as rank 0 of this many simulated ranks (implies dist)
  bool fit = false;           // --fit SIZE was given (examples/fit.h): every candidate a dry run on meta
  int zero = 0;               // with dist: 1 AdamW state, 2 + gradients, 3 + parameters sharded (ZeRO-1/2/3)
  std::string reduce = "per-micro-batch";  // --zero 2/3: reduce-scatter after each micro-batch, or once per window
  std::string fsdp_units;  // --zero 2/3: "block" (the example's blocks as units) or "layer" (each leaf, leaf_units; "": layer)
  int fsdp_prefetch = -1;  // --zero 3: 0 none, 1 the next unit when the current is gathered, 2 after its gradients (-1: 2)
  int dist_overlap = 1;       // with dist: 1 starts gradient all-reduces during backward, 0 after it
  std::string precision = "f32";  // f32 | bf16 | f16: the forwards under autograd::Autocast (f32 master weights)
  double loss_scale = 65536;       // f16: the loss scaler's starting scale (PyTorch's init_scale)
  bool tf32 = false;              // f32 GEMMs on cuda through TF32 tensor cores (reel::set_allow_tf32)
};

// --precision as the dtype the forwards run under (autograd::Autocast amp(autocast_dtype(o))), or
// nullopt for f32 (no autocast).
// f16 runs with a loss scaler (make_scaler below); bf16 has f32's exponent range and needs none.
inline std::optional<reel::DType> autocast_dtype(const TrainOptions& o) {
  if (o.precision == "bf16") return reel::DType::bf16;
  if (o.precision == "f16") return reel::DType::f16;
  return std::nullopt;
}
// The run header's words for --precision.
inline std::string precision_str(const TrainOptions& o) {
  if (o.precision == "f32") return o.tf32 ? "precision f32 (TF32 GEMMs on cuda)" : "precision f32";
  const bool sharded = o.dist && o.zero >= 2;  // FSDP's param_dtype: the parameters themselves are 16-bit
  return "precision " + o.precision + " (autocast, " +
         (sharded ? o.precision + " parameters gathered from f32 master shards" : std::string("f32 master weights")) +
         (o.precision == "f16" ? ", dynamic loss scaling)" : ")");
}

// The loss scaler of --precision f16 (optim::GradScaler with PyTorch's defaults: starting at
// --loss-scale, 2^16, halved on a window with inf/NaN gradients, doubled after 2000 clean
// windows), given to the Accumulator as Options::scaler; null otherwise. f16's gradients underflow
// below 2^-24 without it.
inline std::unique_ptr<reel::optim::GradScaler> make_scaler(const TrainOptions& o) {
  if (o.precision != "f16") return nullptr;
  reel::optim::GradScaler::Options options;
  options.init_scale = o.loss_scale;
  return std::make_unique<reel::optim::GradScaler>(options);
}

// The run's closing rate line, "tokens/s: 5123" (`what` the unit): measured on the host clock, which
// on the meta device times nothing, so there the line gives the rate of the step --profile
// --predict predicted (`predicted_rate`, 0: none, on the device `predicted_on`) or says how to get one.
inline void report_rate(const char* what, double count, double seconds, reel::Device device,
                        double predicted_rate = 0, const char* predicted_on = "") {
  if (device.is_meta() && predicted_rate > 0)
    std::printf("%s/s: not measured (a dry run on meta); predicted on %s: %.0f\n", what, predicted_on, predicted_rate);
  else if (device.is_meta())
    std::printf("%s/s: not measured (a dry run on meta: --profile PATH --predict GPU gives the predicted step)\n", what);
  else
    std::printf("%s/s: %.0f\n", what, count / std::max(seconds, 1e-9));
}

// The run's closing line for skipped windows and the loss scale (nothing to say for a run with
// neither).
inline void report_skipped(const reel::optim::Accumulator& acc, const reel::optim::GradScaler* scaler) {
  if (scaler)
    std::printf("loss scaler: %s\n", reel::optim::scaler_summary(*scaler).c_str());
  else if (acc.skipped_steps() > 0)
    std::printf("skipped: %lld steps with non-finite gradients\n", static_cast<long long>(acc.skipped_steps()));
}

// Registers the options on `app`; the values already in `o` are the defaults shown by --help.
inline void add_train_options(CLI::App& app, TrainOptions& o) {
  app.add_option("--device", o.device, "cpu, cuda, cuda:N, or meta (a dry run: cuda:0's memory and kernels, nothing computed; losses read 0)")->capture_default_str();
  app.add_option("--batch", o.batch, "samples per optimizer step (split over --accum-steps micro-batches)")
      ->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--accum-steps", o.accum_steps, "micro-batches per optimizer step (gradient accumulation)")
      ->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--checkpoint", o.checkpoint, "activation checkpointing: none, every:K, sqrt, list:i,j,..., selective (matmul outputs kept) or budget:SIZE (planned, e.g. budget:48MiB)")
      ->capture_default_str();
  app.add_option("--offload", o.offload,
                 "saved activations to host memory during forward, back before backward: none, boundaries (each "
                 "checkpointed run's input), all (every run's saves) or auto (the budget:SIZE planner chooses); "
                 "not on the cpu device")
      ->capture_default_str()->check(CLI::IsMember({"none", "boundaries", "all", "auto"}));
  app.add_option("--offload-inflight", o.offload_inflight,
                 "with --offload: the most device bytes left waiting for their copy to the host (SIZE as in "
                 "budget:SIZE, e.g. 8MiB, or none); past it the compute stream waits for the oldest copies (a stall "
                 "the profile counts and --predict prices), so the forward's activation peak is bounded whatever the "
                 "host link's speed")
      ->capture_default_str();
  app.add_flag("--inexact-levers", o.inexact_levers,
               "with --checkpoint budget:SIZE: the planner may also choose levers whose gradients are not "
               "bit-identical to the plain run's (bf16 saves: a run's f32 activations kept as bf16)");
  app.add_option("--epochs", o.epochs, "passes over the training data")->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--max-steps", o.max_steps, "stop after this many optimizer steps (0: no limit)")->capture_default_str();
  // The names, the help and the check come from the one registry (optim/registry.h).
  app.add_option("--optimizer", o.optimizer, "the optimizer, one of:\n" + reel::optim::optimizer_help())
      ->capture_default_str()
      ->check(CLI::IsMember(reel::optim::optimizer_names()));
  app.add_option("--lr", o.lr, "learning rate (the peak of the cosine schedule)")->capture_default_str();
  app.add_option("--schedule", o.schedule, "learning rate: constant, or cosine (warm-up, then cosine decay to lr/10)")
      ->capture_default_str()->check(CLI::IsMember({"constant", "cosine"}));
  app.add_option("--warmup", o.warmup, "warm-up steps of the cosine schedule")->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.add_option("--clip", o.clip, "clip the global gradient norm of each step to this (0: off)")
      ->capture_default_str()->check(CLI::NonNegativeNumber);
  app.add_option("--threads", o.threads, "OpenMP threads of the CPU kernels (0: OpenMP's default)")
      ->capture_default_str()->check(CLI::NonNegativeNumber);
  app.add_option("--seed", o.seed, "seed of the initialisation, shuffling and dropout")->capture_default_str();
  app.add_option("--save", o.save, "write the trained weights to this safetensors file");
  app.add_option("--load", o.load, "start from the weights in this safetensors file");
  app.add_option("--checkpoint-dir", o.checkpoint_dir,
                 "write the run's whole state (weights, optimizer, scaler, random streams, data order) here, "
                 "atomically and checksummed, every --save-every steps and when the run ends");
  app.add_option("--save-every", o.save_every, "with --checkpoint-dir: a checkpoint every N optimizer steps")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--keep", o.keep, "with --checkpoint-dir: how many of the newest checkpoints to keep")
      ->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--stop-at", o.stop_at,
                 "with --checkpoint-dir: end after this optimizer step of the --max-steps run, with a checkpoint "
                 "(a run in pieces: --resume goes on from it)")
      ->check(CLI::PositiveNumber);
  app.add_option("--metrics", o.metrics,
                 "write one JSON line per optimizer step here (step, loss, lr, grad_norm, scale, skipped, rate, "
                 "peak_bytes) and, at the end, the loss curve beside it (.svg)");
  app.add_flag("--resume", o.resume,
               "with --checkpoint-dir: continue from its newest checkpoint that verifies (bit for bit the run that "
               "was not stopped); a checkpoint that does not verify is reported and the one before it used");
  app.add_flag("--quiet", o.quiet, "no progress line");
  app.add_flag("--detect-anomaly", o.detect_anomaly,
               "check every op's outputs and gradients for NaN/Inf; the first raises, naming the op (slow)");
  app.add_flag("--skip-nonfinite", o.skip_nonfinite, "skip (and count) a step whose gradients are not all finite");
  app.add_flag("--cuda-graph", o.cuda_graph,
               "cuda or meta: after three eager warm-up steps, capture a whole optimizer step (its micro-batches, "
               "recomputation, the optimizer) as a CUDA graph and replay it each step, one launch (a step whose "
               "batch shapes differ runs eagerly); needs a loss without host reads and no --dist");
  app.add_option(
      "--profile", o.profile,
      "profile --profile-steps steps after warm-up: print the kernel table, write a Chrome trace here");
  app.add_option("--profile-steps", o.profile_steps, "optimizer steps to profile")->capture_default_str()
      ->check(CLI::PositiveNumber);
  std::string devices;
  for (const reel::profile::DeviceSpec& d : reel::profile::device_specs())
    devices += (devices.empty() ? "" : ", ") + d.name;
  app.add_option("--predict", o.predict,
                 "with --profile: the profiled step's predicted time on this GPU, per kernel and op, with what "
                 "bounds each; with --checkpoint budget:SIZE: the planner prices its units at this GPU's predicted "
                 "kernel times (required with --device meta) (" + devices + ")")
      ->check(CLI::Validator(
          [](std::string& name) -> std::string {
            try {
              reel::profile::device_spec(name);
              return "";
            } catch (const reel::Error& e) {
              return e.what();
            }
          },
          "DEVICE"));
  app.add_option("--memory-timeline", o.memory_timeline,
                 "write the memory timeline of optimizer step 2 here (an HTML page; the JSON beside it, .json)");
  app.add_flag("--dist", o.dist,
               "data parallel: run under mpirun -np N; each rank trains on 1/N of every window (--batch is the "
               "global batch), only rank 0 prints and saves");
  app.add_option("--simulate-ranks", o.simulate_ranks,
                 "with --device meta (or --fit): a dry run of --dist as rank 0 of N ranks in this one process (collectives "
                 "allocate and record what NCCL's would, move nothing, and --predict prices them on the GPU's "
                 "interconnect); takes --zero and the other --dist options")
      ->check(CLI::Range(1, 1 << 20));
  app.add_option("--zero", o.zero,
                 "with --dist: 1 shards the AdamW state across ranks (ZeRO-1, --optimizer adamw), 2 also the gradients "
                 "(ZeRO-2), 3 also the parameters (ZeRO-3 / FSDP: gathered per unit for forward, replay and backward)")
      ->capture_default_str()->check(CLI::IsMember({0, 1, 2, 3}));
  app.add_option("--reduce", o.reduce,
                 "with --zero 2 or 3: per-micro-batch reduce-scatters each micro-batch's gradients into the shards "
                 "(gradient memory / ranks), per-window accumulates whole gradients and reduce-scatters once per step")
      ->capture_default_str()->check(CLI::IsMember({"per-micro-batch", "per-window"}));
  app.add_flag("--tf32", o.tf32,
               "f32 GEMMs (matmul, linear) on cuda in TF32 (10 fraction bits, f32 sums): tensor cores on a GPU, "
               "emulated with TF32's rounding; off by default since its bits differ from f32's");
  app.add_option("--precision", o.precision,
                 "f32, or bf16 / f16: forwards under autocast (GEMMs in 16 bits, softmax, norms and losses in f32), "
                 "parameters, gradients and optimizer state in f32; with --zero 2 or 3 the sharded parameters are "
                 "gathered in 16 bits (f32 master shards, f32 gradients reduced in f32)")
      ->capture_default_str()->check(CLI::IsMember({"f32", "bf16", "f16"}));
  app.add_option("--loss-scale", o.loss_scale,
                 "with --precision f16: the loss scaler's first scale (halved after each window whose gradients "
                 "overflow, which is skipped; doubled after 2000 clean windows)")
      ->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--fsdp-units", o.fsdp_units,
                 "with --zero 2 or 3: layer (the default) shards by each leaf module holding parameters (each Linear, "
                 "LayerNorm, Embedding), block by the model's blocks (a GPT block, an MLP layer): fewer collectives, "
                 "larger units in flight")
      ->check(CLI::IsMember({"block", "layer"}));
  app.add_option("--fsdp-prefetch", o.fsdp_prefetch,
                 "with --zero 3: 1 gathers the next unit of backward ahead on the communication stream as soon as the "
                 "current one is gathered (overlap, one more unit in flight), 2 once the current one's gradients are "
                 "reduced (the default: less overlap, nothing in flight beside them), 0 gathers each when used")
      ->check(CLI::IsMember({0, 1, 2}));
  app.add_option("--dist-overlap", o.dist_overlap,
                 "with --dist: 1 starts the gradient all-reduces from the tape during backward, 0 after it")
      ->capture_default_str()->check(CLI::IsMember({0, 1}));
}

// --offload-inflight in bytes (autograd::kNoOffloadInflightBound for none); reel::Error quoting a
// text that is not a size.
inline int64_t offload_inflight_bytes(const TrainOptions& o) {
  if (o.offload_inflight == "none") return reel::autograd::kNoOffloadInflightBound;
  try {  // the checkpoint policy's size parser (budget:SIZE), so both read sizes alike
    return reel::autograd::CheckpointPolicy::parse("budget:" + o.offload_inflight).budget_bytes;
  } catch (const reel::Error& e) {
    REEL_FAIL("--offload-inflight '", o.offload_inflight, "': not a size (", e.what(), "); use e.g. 8MiB, or none");
  }
}

// --predict for a --checkpoint budget:SIZE plan: the GPU whose predicted kernel times price the
// planner's units (nn::Sequential::set_cost_device), on any device. On meta, where nothing runs and
// host times are nothing, a budget needs it: reel::Error naming the option otherwise.
template <typename Chain>
void apply_cost_device(Chain& model, const TrainOptions& o, reel::Device device) {
  const bool budget = model.checkpoint().kind == reel::autograd::CheckpointPolicy::Kind::Budget;
  REEL_CHECK(!budget || !device.is_meta() || !o.predict.empty(), "--checkpoint ", o.checkpoint, " on --device ",
             device.str(), ": the budget planner prices each unit by its kernels' times, and the meta device runs "
             "none; name the GPU to plan for with --predict (e.g. --predict h100)");
  model.set_cost_device(o.predict.empty() ? nullptr : &reel::profile::device_spec(o.predict));
}

// --offload on `model` (an nn::Sequential or nn::GPT) whose parameters are on `device`: refused on
// the cpu device, where the tensors are in host memory already. --inexact-levers and --predict with
// it (apply_cost_device): all say what the budget planner may choose or how it prices, so they are
// applied before it plans.
template <typename Chain>
void apply_offload(Chain& model, const TrainOptions& o, reel::Device device) {
  const reel::autograd::OffloadMode mode = reel::autograd::parse_offload_mode(o.offload);
  REEL_CHECK(mode == reel::autograd::OffloadMode::None || !device.is_cpu(), "--offload ", o.offload, " on ",
             device.str(), ": offload moves saved activations from device memory to host memory, and cpu tensors are "
             "in host memory already (use --device cuda, or --offload none)");
  model.set_offload(mode, offload_inflight_bytes(o));
  model.set_inexact_levers(o.inexact_levers);
  apply_cost_device(model, o, device);
}

// Set once --dist has started the process group (Distributed's constructor).
inline bool& dist_started() {
  static bool started = false;
  return started;
}

// --fsdp-units layer: every module of `model` without children that holds parameters (each Linear,
// LayerNorm, Embedding), in registration order (forward order for the examples' models), except those
// in `exclude`: a module whose parameters are read outside its own forward (a tied embedding, a head
// the fused loss reads) stays in the root unit, which is gathered for the whole forward.
inline std::vector<reel::nn::Module*> leaf_units(reel::nn::Module& model,
                                                 const std::vector<reel::nn::Module*>& exclude = {}) {
  std::vector<reel::nn::Module*> out;
  for (const auto& [name, m] : model.named_modules())
    if (m != &model && m->children().empty() && !m->parameters().empty() &&
        std::find(exclude.begin(), exclude.end(), m) == exclude.end())
      out.push_back(m);
  return out;
}

// The examples' catch-all: the error on stderr and exit status 1. Under --dist the whole job ends
// (MPI_Abort), so the other ranks do not wait in a collective for this one until their timeout.
inline int report_error(const char* program, const std::exception& e) {
  std::fflush(stdout);
  std::fprintf(stderr, "%s: error: %s\n", program, e.what());
#if REEL_HAS_DISTRIBUTED
  if (dist_started()) reel::distributed::ProcessGroup::world().abort(std::string(program) + " failed on this rank");
#endif
  return 1;
}

// --dist: this process's place among the ranks, the data-parallel synchronisation and the
// optimizer (ZeroAdamW under --zero 1; under --zero 2 and 3 distributed::FullyShardedDataParallel over the
// units the example names, and the optimizer over this rank's shards). Without --dist: rank 0 of 1,
// no synchronisation. On ranks other than 0, stdout goes to /dev/null and --save, --profile,
// --memory-timeline, --metrics are dropped, so only rank 0 prints and writes files (a run's
// checkpoints are every rank's: run_checkpoints.h); errors still reach stderr.
// After training, finish_training() gathers a sharded model whole on every rank, so evaluation,
// sampling and saving run as on one process.
class Distributed {
 public:
  explicit Distributed(TrainOptions& o)
      : wanted_(o.dist), overlap_(o.dist_overlap != 0), zero_(o.zero), per_window_(o.reduce == "per-window"),
        layer_units_(o.fsdp_units != "block"), prefetch_(o.fsdp_prefetch < 0 ? 2 : o.fsdp_prefetch),
        param_dtype_(autocast_dtype(o)) {
    REEL_CHECK(zero_ >= 2 || (o.fsdp_units.empty() && o.fsdp_prefetch < 0),
               "--fsdp-units and --fsdp-prefetch need --zero 2 or 3");
    if (o.simulate_ranks > 0) {
      REEL_CHECK(reel::Device(o.device).is_meta() || o.fit, "--simulate-ranks ", o.simulate_ranks,
                 " needs --device meta or --fit (a simulated rank has no peers to compute with); got --device ", o.device);
#if REEL_HAS_DISTRIBUTED
      reel::distributed::ProcessGroup::simulate(o.simulate_ranks);
#endif
      wanted_ = o.dist = true;
    }
    if (!o.dist) {
      REEL_CHECK(o.zero == 0 && o.dist_overlap == 1, "--zero and --dist-overlap need --dist");
      return;
    }
    REEL_CHECK(zero_ >= 2 || !per_window_, "--reduce per-window needs --zero 2 or 3");
#if REEL_HAS_DISTRIBUTED
    reel::distributed::ProcessGroup& group = reel::distributed::ProcessGroup::world();
    dist_started() = true;
    rank_ = group.rank();
    world_ = group.size();
    REEL_CHECK(o.zero != 1 || o.optimizer == "adamw", "--zero 1 shards AdamW's state: use --optimizer adamw (got ",
               o.optimizer, ")");
    if (rank_ != 0) {
      REEL_CHECK(std::freopen("/dev/null", "w", stdout) != nullptr, "--dist: cannot silence rank ", rank_);
      o.quiet = true;
      o.save.clear();
      // --predict prices rank 0's profile here (its other use, a budget plan's unit costs, stays:
      // every rank must plan alike).
      if (o.checkpoint.rfind("budget:", 0) != 0) o.predict.clear();
      o.profile.clear();
      o.memory_timeline.clear();
      o.metrics.clear();  // one file, rank 0's (the run's checkpoints need every rank: kept)
    }
#else
    REEL_FAIL("--dist: this reel was built without distributed/ (install MPI, libopenmpi-dev, and configure with -DREEL_DISTRIBUTED=ON)");
#endif
  }
  int rank() const { return rank_; }
  int world() const { return world_; }
  bool enabled() const { return wanted_; }  // --dist (or --simulate-ranks)
  int zero() const { return zero_; }
  // Loads a whole optimizer state (an unsharded run's checkpoint, run_checkpoints.h): under ZeRO-1
  // each rank keeps its chunks of the moments.
  void load_full_optimizer_state(reel::optim::Optimizer& opt, const reel::optim::StateDict& state) const {
#if REEL_HAS_DISTRIBUTED
    if (zero_ == 1 && dp_) return static_cast<reel::distributed::ZeroAdamW&>(opt).load_full_state_dict(state);
#endif
    opt.load_state_dict(state);
  }
  // --zero 2/3: this rank's part of a sharded checkpoint, and the parts put back (fsdp.h).
  // --zero 1: ZeroAdamW's chunks of the moments (its "step" and "<slot>.<bucket>", under
  // "optimizer."); --zero 2/3: FSDP's shards, their optimizer state and the buffers (fsdp.h).
  reel::nn::TensorDict shard_checkpoint(const reel::optim::Optimizer& opt) const {
#if REEL_HAS_DISTRIBUTED
    if (fsdp_) return fsdp_->shard_checkpoint(opt);
    if (zero_ == 1 && dp_) {
      reel::nn::TensorDict out;
      for (const auto& [key, t] : static_cast<const reel::distributed::ZeroAdamW&>(opt).shard_checkpoint())
        out["optimizer." + key] = t;
      return out;
    }
#endif
    (void)opt;
    REEL_FAIL("shard_checkpoint: this run shards nothing (--zero 1, 2 or 3)");
  }
  void load_shard_checkpoint(const std::vector<reel::nn::TensorDict>& parts, reel::optim::Optimizer& opt) const {
#if REEL_HAS_DISTRIBUTED
    if (fsdp_) return fsdp_->load_shard_checkpoint(parts, opt);
    if (zero_ == 1 && dp_) {
      std::vector<reel::optim::StateDict> states;
      for (const reel::nn::TensorDict& part : parts) {
        reel::optim::StateDict s;
        for (const auto& [key, t] : part)
          if (key.rfind("optimizer.", 0) == 0) s[key.substr(std::string("optimizer.").size())] = t;
        states.push_back(s);
      }
      return static_cast<reel::distributed::ZeroAdamW&>(opt).load_shard_checkpoint(states);
    }
#endif
    (void)parts, (void)opt;
    REEL_FAIL("load_shard_checkpoint: this run shards nothing (--zero 1, 2 or 3)");
  }
  void barrier() const {
#if REEL_HAS_DISTRIBUTED
    if (wanted_) reel::distributed::ProcessGroup::world().barrier();
#endif
  }
  // Every rank's `mine`, in rank order (a collective under --dist; {mine} in one process).
  std::vector<std::string> gather_strings(const std::string& mine) const {
    if (world_ == 1) return {mine};
#if REEL_HAS_DISTRIBUTED
    reel::distributed::ProcessGroup& group = reel::distributed::ProcessGroup::world();
    const reel::Tensor lengths = reel::empty({world_}, reel::DType::i64);
    group.all_gather(lengths, reel::from_vector<int64_t>({static_cast<int64_t>(mine.size())}, {1}));
    const std::vector<int64_t> n = lengths.to_vector<int64_t>();
    const int64_t longest = *std::max_element(n.begin(), n.end());
    std::vector<int32_t> padded(static_cast<size_t>(longest), 0);
    for (size_t i = 0; i < mine.size(); ++i) padded[i] = static_cast<unsigned char>(mine[i]);
    const reel::Tensor all = reel::empty({world_ * longest}, reel::DType::i32);
    group.all_gather(all, reel::from_vector<int32_t>(padded, {longest}));
    const std::vector<int32_t> chars = all.to_vector<int32_t>();
    std::vector<std::string> out;
    for (int r = 0; r < world_; ++r) {
      std::string s;
      for (int64_t i = 0; i < n[static_cast<size_t>(r)]; ++i) s += static_cast<char>(chars[static_cast<size_t>(r * longest + i)]);
      out.push_back(s);
    }
    return out;
#else
    return {mine};
#endif
  }
  // The optimizer over `model`'s parameters (rank 0's values everywhere from here on, under
  // --dist). Under --zero 2 and 3 the sharding units (distributed/fsdp.h) are leaf_units(model, keep_whole)
  // or, under --fsdp-units block, `blocks` (the GPT's blocks, an MLP's layers); the optimizer steps
  // this rank's shards.
  std::unique_ptr<reel::optim::Optimizer> make_optimizer(const std::string& name, reel::nn::Module& model,
                                                         const std::vector<reel::nn::Module*>& blocks, double lr,
                                                         const std::vector<reel::nn::Module*>& keep_whole = {}) {
#if REEL_HAS_DISTRIBUTED
    if (wanted_ && zero_ >= 2) {
      using FSDP = reel::distributed::FullyShardedDataParallel;
      FSDP::Options options;
      options.stage = zero_;
      options.reduce = per_window_ ? FSDP::ReduceMode::PerWindow : FSDP::ReduceMode::PerMicroBatch;
      options.prefetch = prefetch_ != 0;
      options.prefetch_after_grads = prefetch_ == 2;
      options.param_dtype = param_dtype_;  // --precision bf16 / f16: 16-bit gathers, f32 master shards
      fsdp_ = std::make_unique<FSDP>(model, layer_units_ ? leaf_units(model, keep_whole) : blocks, options);
      return reel::optim::make_optimizer(name, fsdp_->shard_parameters(), lr);
    }
    if (wanted_) {
      dp_ = std::make_unique<reel::distributed::DataParallel>(
          model.parameters(), reel::distributed::DataParallel::Options{int64_t{1} << 20, overlap_, zero_});
      if (zero_ == 1) return std::make_unique<reel::distributed::ZeroAdamW>(*dp_, lr);
    }
#else
    (void)blocks;
    (void)keep_whole;
    REEL_CHECK(!wanted_ && zero_ == 0 && overlap_, "--dist: this reel was built without distributed/");
#endif
    return reel::optim::make_optimizer(name, model.parameters(), lr);
  }
  // What optim::Accumulator::Options::sync takes: null without --dist.
  reel::optim::WindowSync* sync() const {
#if REEL_HAS_DISTRIBUTED
    if (fsdp_) return fsdp_.get();
    return dp_.get();
#else
    return nullptr;
#endif
  }
  // After training: a model sharded by --zero 3 is gathered whole on every rank (a collective), so
  // evaluation, sampling and nn::save need no collectives; under --precision bf16/f16 with --zero 2/3
  // the parameters become the f32 masters again (what the optimizer stepped, as one process saves).
  void finish_training() {
#if REEL_HAS_DISTRIBUTED
    if (fsdp_) fsdp_->gather_all();
#endif
  }
  const char* sharding() const {
    switch (zero_) {
      case 1: return ", AdamW state sharded (ZeRO-1)";
      case 2: return per_window_ ? ", gradients and optimizer state sharded (ZeRO-2), reduced once per step"
                                 : ", gradients and optimizer state sharded (ZeRO-2), reduced per micro-batch";
      case 3: return per_window_ ? ", parameters, gradients and optimizer state sharded (ZeRO-3), reduced once per step"
                                 : ", parameters, gradients and optimizer state sharded (ZeRO-3), reduced per micro-batch";
      default: return "";
    }
  }
  // After training, under --dist: the buckets and the communication backward did not hide.
  // After training: under --dist the collectives (buckets, or the sharded units' gathers and
  // reduce-scatters); always this rank's peak bytes by category (rank_bytes).
  void report(int64_t steps, reel::Device device) const {
    if (steps <= 0) return;
#if REEL_HAS_DISTRIBUTED
    if (fsdp_) report_sharded(steps);
    if (dp_) report_buckets(steps);
#endif
    std::printf("%s\n", rank_bytes(device).c_str());
  }
  // This rank's peak bytes of parameters, gradients, optimizer state (each its own peak, and their
  // sum), the joint peak of the three (held at the same moment: MemoryStats::model_state_peak_bytes,
  // at most the sum) and activations on `device`, as one line (rank 0's is printed: every rank holds
  // the same share, up to one padded chunk; bench/zero_table.sh reads it).
  std::string rank_bytes(reel::Device device) const {
    const reel::MemoryStats m = reel::memory_stats(device);
    const int64_t p = m[reel::Category::Parameter].peak_bytes, g = m[reel::Category::Gradient].peak_bytes,
                  s = m[reel::Category::OptimizerState].peak_bytes, a = m[reel::Category::Activation].peak_bytes,
                  joint = m.model_state_peak_bytes;
    return "rank " + std::to_string(rank_) + " peak bytes: parameter " + std::to_string(p) + ", gradient " +
           std::to_string(g) + ", optimizer state " + std::to_string(s) + ", together " + std::to_string(p + g + s) +
           " (" + reel::format_bytes(p + g + s) + "), at once " + std::to_string(joint) + " (" +
           reel::format_bytes(joint) + "), activation " + std::to_string(a) + " (" + reel::format_bytes(a) + ")";
  }
  // This rank's positions in a window of n samples: r, r + world, ... (round-robin, so the shares
  // differ by at most one and together are the whole window: the global window is the one a single
  // process would take, and the trained weights match its within float rounding).
  std::vector<int64_t> share(int64_t n) const {
    std::vector<int64_t> mine;
    for (int64_t i = rank_; i < n; i += world_) mine.push_back(i);
    return mine;
  }

 private:
  bool wanted_, overlap_;
  int zero_;
  bool per_window_, layer_units_;
  int prefetch_;  // --fsdp-prefetch
  std::optional<reel::DType> param_dtype_;  // --precision under --zero 2/3
  int rank_ = 0, world_ = 1;
#if REEL_HAS_DISTRIBUTED
  std::unique_ptr<reel::distributed::DataParallel> dp_;
  std::unique_ptr<reel::distributed::FullyShardedDataParallel> fsdp_;

  // How collectives on tensors of this kind travel: cuda ones through NCCL unless
  // REEL_DIST_BACKEND=mpi.
  static const char* backend(const reel::distributed::ProcessGroup& group, bool cuda) {
    return group.simulated() ? "a simulated world (allocated and recorded as NCCL's, nothing moved)"
           : !group.uses_mpi() ? "local"
           : cuda && group.cuda_path() == reel::distributed::CudaPath::Nccl ? "NCCL"
           : cuda ? "MPI, staged through the host"
                  : "MPI";
  }
  // --zero 2/3: the all-gathers by phase and the reduce-scatters, per step.
  void report_sharded(int64_t steps) const {
    using FSDP = reel::distributed::FullyShardedDataParallel;
    const auto per_step = [&](int64_t n) { return static_cast<double>(n) / static_cast<double>(steps); };
    const bool cuda = !fsdp_->units().empty() && fsdp_->units().front().shard.device().is_cuda();
    const char* gathered = param_dtype_ ? reel::dtype_name(*param_dtype_) : "the parameters' dtype";
    std::printf("sharded data parallel: %zu units (by %s, prefetch %s, gathered in %s) over %s; per step %.1f all-gathers "
                "(forward %.1f, replay %.1f, backward %.1f, prefetch %.1f, after the step %.1f), %.1f reduce-scatters\n",
                fsdp_->units().size(), layer_units_ ? "layer" : "block",
                prefetch_ == 0 ? "off" : prefetch_ == 1 ? "ahead of use" : "after the gradients", gathered,
                backend(fsdp_->group(), cuda), per_step(fsdp_->all_gathers() - fsdp_->all_gathers(FSDP::Phase::Checkpoint)),
                per_step(fsdp_->all_gathers(FSDP::Phase::Forward)), per_step(fsdp_->all_gathers(FSDP::Phase::Replay)),
                per_step(fsdp_->all_gathers(FSDP::Phase::Backward)), per_step(fsdp_->all_gathers(FSDP::Phase::Prefetch)),
                per_step(fsdp_->all_gathers(FSDP::Phase::AfterStep)), per_step(fsdp_->reduce_scatters()));
  }
  // Plain data parallel and ZeRO-1: how the gradient buckets travelled and the communication
  // backward did not hide.
  void report_buckets(int64_t steps) const {
    const bool cuda = !dp_->params().empty() && dp_->params().front().device().is_cuda();
    std::printf("data parallel: %lld gradient buckets per step over %s, %lld of %lld started during backward; "
                "%.3f ms per step waited for them after backward (overlap %s)\n",
                static_cast<long long>(dp_->buckets()), backend(dp_->group(), cuda),
                static_cast<long long>(dp_->overlapped_syncs()),
                static_cast<long long>(dp_->grad_syncs()), 1e3 * dp_->exposed_seconds() / static_cast<double>(steps),
                overlap_ ? "on" : "off");
  }
#endif
};

// The learning rate of each of `total_steps` optimizer steps, as --schedule asks.
inline std::unique_ptr<reel::optim::LrSchedule> make_schedule(const TrainOptions& o, int64_t total_steps) {
  if (o.schedule == "cosine")
    return std::make_unique<reel::optim::WarmupCosineLr>(o.lr, o.lr / 10, std::min(o.warmup, total_steps),
                                                         total_steps);
  return std::make_unique<reel::optim::ConstantLr>(o.lr);
}

// --threads: the OpenMP thread count of the CPU kernels (0 leaves OpenMP's default); --tf32.
inline void apply_runtime_options(const TrainOptions& o) {
  if (o.threads > 0) omp_set_num_threads(o.threads);
  reel::set_allow_tf32(o.tf32);
}

// A window of n samples cut into at most `parts` micro-batches as equal as possible (the first
// n % parts get one more); a short last window gives fewer, never an empty one.
inline std::vector<int64_t> micro_batch_sizes(int64_t n, int64_t parts) {
  parts = std::max<int64_t>(1, std::min(parts, n));
  std::vector<int64_t> sizes;
  for (int64_t i = 0; i < parts; ++i) sizes.push_back(n / parts + (i < n % parts ? 1 : 0));
  return sizes;
}

// What --profile and --memory-timeline share: a collector started before optimizer step
// `warmup` + 1 and finished after step `warmup` + `steps` (or by finish() after the loop, for a run
// shorter than that), once per run. A derived class says how to start and how to report.
class StepCollector {
 public:
  StepCollector(bool wanted, int64_t warmup, int64_t steps) : wanted_(wanted), warmup_(warmup), steps_(steps) {}
  virtual ~StepCollector() = default;
  StepCollector(const StepCollector&) = delete;
  StepCollector& operator=(const StepCollector&) = delete;

  void before_step(int64_t step) {  // step counts from 1
    if (wanted_ && !running_ && !done_ && step > warmup_) {
      first_step_ = step;
      start();
      running_ = true;
    }
  }
  void after_step(int64_t step) {
    if (running_) last_step_ = step;
    if (running_ && step >= warmup_ + steps_) finish();
  }
  // Stops and reports what was collected (called by after_step, and after the loop for short runs).
  void finish() {
    if (!running_) return;
    running_ = false;
    done_ = true;
    stop_and_report();
    std::fflush(stdout);
  }

 protected:
  virtual void start() = 0;
  virtual void stop_and_report() = 0;
  int64_t first_step() const { return first_step_; }
  // Optimizer steps collected: fewer than asked when the run ended first.
  int64_t steps_collected() const { return std::max<int64_t>(1, last_step_ - first_step_ + 1); }

 private:
  bool wanted_;
  int64_t warmup_, steps_;
  bool running_ = false, done_ = false;
  int64_t first_step_ = 0, last_step_ = 0;
};

// --profile: a reel::Profiler around optimizer steps kProfileWarmup + 1 .. + --profile-steps
// (warm-up first: the allocator's cache, OpenMP's threads and the CPU's clocks settle; with
// --cuda-graph kGraphProfileWarmup steps: optim::GraphedWindow's 3 eager windows and its capture,
// so that the profiled steps are replays), then the table on stdout, the line
// `per step: N launches, M host syncs (...)` (a replay: `per step: 1 graph launch (N nodes) ...`)
// and the trace file; with --predict, the step predicted on that device too.
// `unit` and `items_per_step` (the tokens or samples one optimizer step takes, over every rank):
// with them, the predicted step is also a rate, printed after the prediction and kept for
// report_rate (on meta the only rate there is).
class StepProfiler : public StepCollector {
 public:
  static constexpr int64_t kProfileWarmup = 2;
  static constexpr int64_t kGraphProfileWarmup = 4;
  explicit StepProfiler(const TrainOptions& o, const char* unit = nullptr, double items_per_step = 0)
      : StepCollector(!o.profile.empty(), o.cuda_graph ? kGraphProfileWarmup : kProfileWarmup, o.profile_steps),
        path_(o.profile),
        predict_(o.predict.empty() ? nullptr : &reel::profile::device_spec(o.predict)),
        offload_bound_(o.offload == "none" || o.offload_inflight == "none" ? 0 : offload_inflight_bytes(o)),
        tf32_(o.tf32), unit_(unit), items_per_step_(items_per_step) {}
  // The rate the predicted step gives (0: no prediction made), and on which device.
  double predicted_rate() const { return predicted_rate_; }
  const char* predicted_on() const { return predict_ ? predict_->name.c_str() : ""; }

 private:
  void start() override { profiler_ = std::make_unique<reel::Profiler>(); }
  void stop_and_report() override {
    profiler_->stop();
    std::printf("\n");
    reel::profile::print_table(std::cout, *profiler_);
    std::printf("%s\n", reel::profile::format_step_counts(reel::profile::step_counts(*profiler_, steps_collected())).c_str());
    if (predict_) {
      std::printf("\n");
      reel::profile::print_prediction(std::cout, *profiler_, *predict_, steps_collected(), offload_bound_);
      if (unit_ && items_per_step_ > 0) {
        const reel::profile::StepPrediction p = reel::profile::predict_step(profiler_->kernels(), *predict_, offload_bound_);
        const double step_s = (tf32_ ? p.tf32_s : p.total.predicted_s) / static_cast<double>(steps_collected());
        if (step_s > 0) predicted_rate_ = items_per_step_ / step_s;
        std::printf("predicted on %s: %.2f ms a step%s, %.0f %s/s\n", predict_->name.c_str(), step_s * 1e3,
                    tf32_ ? " (f32 GEMMs on TF32)" : "", predicted_rate_, unit_);
      }
    }
    reel::profile::write_trace(path_, *profiler_);
    std::printf("profile: trace of %zu kernel runs written to %s (open in https://ui.perfetto.dev)\n",
                profiler_->kernels().size(), path_.c_str());
    profiler_.reset();
  }

  std::string path_;
  const reel::profile::DeviceSpec* predict_;
  int64_t offload_bound_;  // --offload-inflight under --offload (0: none): the predictor re-decides the stalls at it
  bool tf32_;
  const char* unit_;
  double items_per_step_;
  double predicted_rate_ = 0;
  std::unique_ptr<reel::Profiler> profiler_;
};

// --memory-timeline: a reel::MemoryTimeline of `device` around optimizer step 2 (the first one
// has made the gradients and the optimizer state: step 2 is what every later step looks like),
// written as the HTML page and, beside it, the JSON.
class StepMemoryTimeline : public StepCollector {
 public:
  StepMemoryTimeline(const TrainOptions& o, reel::Device device, std::string program)
      : StepCollector(!o.memory_timeline.empty(), 1, 1), path_(o.memory_timeline), device_(device),
        program_(std::move(program)) {}

 private:
  void start() override { timeline_ = std::make_unique<reel::MemoryTimeline>(device_); }
  void stop_and_report() override {
    timeline_->stop();
    const std::string json_path = std::filesystem::path(path_).replace_extension(".json").string();
    const std::string title = program_ + ": memory of optimizer step " + std::to_string(first_step()) + " on " +
                              device_.str();
    reel::write_memory_timeline_html(path_, *timeline_, title);
    reel::write_memory_timeline_json(json_path, *timeline_);
    std::printf("memory timeline: step %lld, peak %s (activations %s), %zu events written to %s and %s\n",
                static_cast<long long>(first_step()), reel::format_bytes(timeline_->peak().bytes).c_str(),
                reel::format_bytes(timeline_->peak_of(reel::Category::Activation).bytes).c_str(),
                timeline_->events().size(), path_.c_str(), json_path.c_str());
    timeline_.reset();
  }

  std::string path_;
  reel::Device device_;
  std::string program_;
  std::unique_ptr<reel::MemoryTimeline> timeline_;
};

// "\r[=========>          ] 45%  step 120/267  loss 0.4321  5123 samples/s" on stderr.
class Progress {
 public:
  // On a terminal a bar redrawn at most 10 times a second and at the last step; in a log (stdout
  // not a terminal) a plain line every tenth of the run and at the last step. `first_step`: the
  // step a resumed run continues after (its rate and time left count this process's steps).
  Progress(int64_t total_steps, const char* unit, bool quiet, int64_t first_step = 0)
      : total_(total_steps), first_(first_step), unit_(unit), quiet_(quiet),
        terminal_(isatty(fileno(stderr)) != 0), start_(std::chrono::steady_clock::now()) {}

  // After each optimizer step: `items` samples/tokens done since the start. The loss (a window's,
  // optim/lazy_scalar.h: on the device until read) is read only when a line or the bar is drawn,
  // so the steps between waits for nothing.
  void update(int64_t step, const reel::optim::Lazy<double>& loss, int64_t items) {
    items_ = items;
    if (quiet_) return;
    const double now = seconds();
    const double left = step > first_ ? now / static_cast<double>(step - first_) * static_cast<double>(total_ - step) : 0;
    if (!terminal_) {
      const int64_t every = std::max<int64_t>(1, (total_ - first_ + 9) / 10);
      if (step != total_ && (step - first_) % every != 0) return;
      std::printf("step %lld/%lld  loss %.4f  %.0f %s/s  elapsed %s  left %s\n", static_cast<long long>(step),
                  static_cast<long long>(total_), loss.get(), rate(), unit_, clock(now).c_str(), clock(left).c_str());
      std::fflush(stdout);
      return;
    }
    if (step < total_ && now - drawn_at_ < 0.1) return;
    drawn_at_ = now;
    const int width = 30;
    const int filled = total_ > 0 ? static_cast<int>(width * step / total_) : width;
    std::string bar(static_cast<size_t>(filled), '=');
    if (filled < width) bar += '>' + std::string(static_cast<size_t>(width - filled - 1), ' ');
    std::fprintf(stderr, "\r[%s] %3d%%  step %lld/%lld  loss %.4f  %.0f %s/s  %s elapsed, %s left ", bar.c_str(),
                 total_ > 0 ? static_cast<int>(100 * step / total_) : 100, static_cast<long long>(step),
                 static_cast<long long>(total_), loss.get(), rate(), unit_, clock(now).c_str(), clock(left).c_str());
    std::fflush(stderr);
  }
  void finish() {
    if (!quiet_ && terminal_) std::fprintf(stderr, "\n");
  }
  double seconds() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  }
  double rate() const { return static_cast<double>(items_) / std::max(seconds(), 1e-9); }

 private:
  // "1:05:09", "4:07": hours only when there are any.
  static std::string clock(double seconds) {
    const auto s = static_cast<long long>(seconds + 0.5);
    char text[32];
    if (s >= 3600) std::snprintf(text, sizeof text, "%lld:%02lld:%02lld", s / 3600, s / 60 % 60, s % 60);
    else std::snprintf(text, sizeof text, "%lld:%02lld", s / 60, s % 60);
    return text;
  }

  int64_t total_, first_;
  const char* unit_;
  bool quiet_, terminal_;
  int64_t items_ = 0;
  double drawn_at_ = -1;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace examples
