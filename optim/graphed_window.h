// optim/graphed_window.h: an accumulation window (optim/accumulator.h) captured once as a CUDA
// graph (core/graph.h) and replayed each step: one graph launch per optimizer step, its
// micro-batches' forwards and backwards, checkpoint replays, the unscale, clipping and the
// optimizer all inside (as torch.cuda.make_graphed_callables / a captured training step).
//
//   optim::Accumulator acc(opt, options);                 // device decisions (see accumulator.h)
//   optim::GraphedWindow graphed(acc);
//   std::vector<Batch> micro = ...;                       // static device tensors, made once
//   for (...) {
//     fill(micro);                                        // copy the step's data INTO them
//     WindowResult r = graphed.step(micro, count, loss);  // eager, captured or replayed
//   }
//
// Its steps:
//   * warm-up: the first Options::warmup_windows (3 by default, as PyTorch's graph examples) windows
//     run eagerly (Accumulator::step), so the caching allocator holds every block the window needs
//     and the optimizer's state, the gradients, the scaler's and the skip counter's device tensors
//     exist. One is not enough: a window's first blocks are allocated while some of the last
//     window's tensors (its loss sum, its results) are alive, and a small GPT's cache stops
//     growing at its third window (a capture short of a block raises the allocator's
//     reel::Error, below);
//   * capture: the next window's run() (Accumulator::run: forwards, backwards, the window's end) is
//     captured (nothing runs), then replayed once, which is that window's step;
//   * replay: each later window whose micro-batches count what the captured one's did (the same
//     number of micro-batches, each the same count) is its prologue on the host, then one replay.
//     A window whose counts differ (the last, partial batch) runs eagerly: the graph's shapes and
//     1/count are fixed.
//
// The replay prologue (the host's per-step work, outside the graph, as PyTorch's): the counts;
// Accumulator::start (the dropout window's base, Generator::begin_window; the schedule's learning
// rate); Optimizer::set_lr and, for a schedule without a device form, Optimizer::device_lr (the
// rate copied into the device scalar the update kernels read, one asynchronous pinned copy, enqueued
// before the replay; a schedule with one, LrSchedule::device_rule(), is evaluated by the captured
// update kernels from the device's step count, which they advance: each replay gets its own step's
// rate with nothing written); dropout's device
// (seed, base) rewritten in place (Generator::next_device_stream, the stream id put back), so the
// captured kernels, which read both from device memory with by-value deltas that are the same
// every window (docs/design.md, "Replay-safe steps"), draw this window's streams. The captured
// run() therefore issues no host write: none of its copies carries a capture-time host value. After
// the replay, the host's counts that a captured window advances (the generator's stream ids, the
// optimizer's step count, the scaler's state, the skip count) are advanced as run() would have
// (Accumulator::replayed): the device's values are read when asked, as after an eager window.
//
// Host syncs: none in a replay. With a schedule and a window that may be skipped (a loss scaler or
// skip_nonfinite), the schedule's rate needs the optimizer's step count, which then lives on the
// device: the prologue reads it (Optimizer::steps(), one copy to the host a step), as the eager
// window does at its start. Otherwise (no schedule, or nothing that can skip a window) none.
//
// The results: a replay's WindowResult reads the graph's static output tensors (the window's loss
// sum and scale, the found flag, the norm) as optim::Lazy values on the device: read them before
// the next step(), which overwrites them (as PyTorch's static outputs), or keep one with
// Lazy::detach() (copied back to the host now, the next replay ordered after the copy: an
// epoch's losses, examples/fashion_mnist.h); lr and count are host values.
//
// What it needs: device decisions (Accumulator::device_decisions(): no WindowSync, an optimizer
// with device control), a cuda or meta device (meta captures the dry run: a replay is one profiler
// record of profile::kGraphKernel with its node count), and a window body that the graph can hold:
// the same static input tensors every step, no host read (item(), to(cpu)), no allocation the warm
// cache cannot serve. A capture refused for any of those raises reel::Error naming what CUDA
// refused (CudaGraph::capture's message) and the remedy; the run stops there rather than go on with
// a window half run on the host (the error comes at the capture, right after the warm-up).
#pragma once
#include <cstdint>
#include <functional>
#include <utility>
#include <vector>

#include "core/error.h"
#include "core/graph.h"
#include "core/random.h"
#include "optim/accumulator.h"

namespace reel::optim {

class GraphedWindow {
 public:
  struct Options {
    int64_t warmup_windows = 3;  // eager windows before the capture (>= 1; see above)
  };
  // reel::Error when acc does not decide on the device or warmup_windows < 1.
  GraphedWindow(Accumulator& acc, Options options);
  explicit GraphedWindow(Accumulator& acc) : GraphedWindow(acc, Options{}) {}

  // One window, as Accumulator::step (count and loss the same callables), eager, captured or
  // replayed (see above). micro_batches must be the same static tensors at every step that replays.
  template <typename Batch, typename CountFn, typename LossFn>
  WindowResult step(const std::vector<Batch>& micro_batches, CountFn&& count, LossFn&& loss) {
    std::vector<int64_t> counts;
    counts.reserve(micro_batches.size());
    for (const Batch& b : micro_batches) counts.push_back(static_cast<int64_t>(count(b)));
    if (eager_windows_ < options_.warmup_windows || (graph_.captured() && counts != counts_) || counts.empty()) {
      if (graph_.captured()) {
        ++eager_after_capture_;
        return acc_.step(micro_batches, count, loss);
      }
      ++eager_windows_;
      const uint64_t offset = default_generator().offset();  // the window's base
      WindowResult r = acc_.step(micro_batches, count, loss);
      draws_ = default_generator().offset() - offset;
      return r;
    }
    WindowResult r = acc_.start(micro_batches, count);
    if (!graph_.captured()) {
      prologue(r, true);
      capture(counts, [&] { acc_.run(r, micro_batches, loss); });
      graph_.replay();
      return r;  // its Lazy values read the static outputs
    }
    prologue(r, false);
    graph_.replay();
    return replayed(r);
  }

  bool captured() const { return graph_.captured(); }
  const CudaGraph& graph() const { return graph_; }
  int64_t replays() const { return replays_; }  // windows replayed (the captured one included)
  int64_t eager_windows() const { return eager_windows_ + eager_after_capture_; }

 private:
  // The host's per-step writes into device memory, outside the graph (see above). capture: the
  // prologue of the window about to be captured (records what later prologues must find).
  void prologue(const WindowResult& r, bool capture);
  void capture(const std::vector<int64_t>& counts, const std::function<void()>& run);
  WindowResult replayed(const WindowResult& r);  // after a replay: the host's counts, the results

  Accumulator& acc_;
  Options options_;
  CudaGraph graph_;
  Device device_ = Device::cpu();
  std::vector<int64_t> counts_;      // the captured window's counts, one per micro-batch
  uint64_t draws_ = 0;               // dropout streams the window draws (generator ids)
  const void* stream_state_ = nullptr;  // the storage of dropout's device (seed, base) the graph reads
  Accumulator::Outputs outputs_;     // the graph's static output tensors
  int64_t eager_windows_ = 0, eager_after_capture_ = 0, replays_ = 0;
};

}  // namespace reel::optim
