// optim::GraphedWindow (see graphed_window.h): the replay prologue, the capture and the host's
// bookkeeping after a replay.
#include "optim/graphed_window.h"

#include <string>

#include "core/random.h"

namespace reel::optim {

namespace {
// The device the optimizer's parameters live on (the window's device).
Device window_device(const Optimizer& optimizer) {
  const std::vector<Tensor>& params = optimizer.params();
  REEL_CHECK(!params.empty(), "GraphedWindow: the optimizer has no parameters");
  return params.front().device();
}
}  // namespace

GraphedWindow::GraphedWindow(Accumulator& acc, Options options) : acc_(acc), options_(options) {
  REEL_CHECK(options.warmup_windows >= 1, "GraphedWindow: warmup_windows (", options.warmup_windows,
             ") must be >= 1: the capture needs the caching allocator warm and the optimizer's state made");
  REEL_CHECK(acc.device_decisions(), "GraphedWindow: the accumulation window must decide on the device (no "
             "WindowSync, an optimizer with device_control(), Options::host_decisions false): a host decision "
             "reads the device inside the window, which a CUDA graph cannot hold");
  device_ = window_device(acc.optimizer_);
  REEL_CHECK(device_.is_cuda() || device_.is_meta(), "GraphedWindow: the parameters are on ", device_,
             "; CUDA graphs need cuda (or meta, for a dry run): use Accumulator::step there");
}

void GraphedWindow::prologue(const WindowResult& r, bool capture) {
  Optimizer& optimizer = acc_.optimizer_;
  // The learning rate. A schedule with a device form: nothing to write, the captured update
  // kernels evaluate it from the device's count, each replay its own step's rate. Otherwise, in the
  // device scalar before the replay (a copy from pinned memory, enqueued ahead of the graph), so the
  // captured step's set_lr finds it written and copies nothing.
  optimizer.set_lr(r.lr);
  if (acc_.device_schedule().kind == kernels::LrRule::kNone) optimizer.device_lr(device_);
  // Dropout's (seed, base) for this window, written now: the captured kernels read it. Drawing a
  // stream writes the device state; the stream id is put back, so the window draws what it would.
  if (draws_ == 0) return;  // the window draws no device streams
  Generator& gen = default_generator();
  const uint64_t offset = gen.offset();
  const void* storage = nullptr;
  {
    Tensor state;
    gen.next_device_stream(device_, &state);
    storage = state.storage().get();
  }  // the handle dropped: the generator's own is the only one, rewritten in place next time
  gen.set_offset(offset);
  if (capture) {
    stream_state_ = storage;
    return;
  }
  REEL_CHECK(storage == stream_state_, "GraphedWindow: dropout's device (seed, base) tensor moved since the "
             "capture (something outside the window holds the generator's stream state, so the generator made "
             "another); the graph would read the old one. Release tensors of the window's ops before the next step");
}

void GraphedWindow::capture(const std::vector<int64_t>& counts, const std::function<void()>& run) {
  Generator& gen = default_generator();
  const uint64_t base = gen.offset();
  acc_.capturing_ = true;
  acc_.outputs_ = Accumulator::Outputs{};
  // The last window's loss sum, dropped before the capture makes the next: the warm-up window made
  // its own with none alive, and the cache holds that many blocks, not one more.
  acc_.window_losses_ = Tensor();
  try {
    graph_.capture(device_, run);
  } catch (const Error& e) {
    acc_.capturing_ = false;
    acc_.outputs_ = Accumulator::Outputs{};
    throw Error(std::string("GraphedWindow: the accumulation window could not be captured as a CUDA graph: ") +
                e.what() +
                ". The window must enqueue device work only: no host read inside it (item(), to(cpu); a loss or "
                "op that reads the device on the host, such as the fused linear_cross_entropy's row sums), the "
                "same shapes as the warm-up windows (so the warm cache serves every allocation) and the same "
                "static input tensors; run those steps without the graph (Accumulator::step, or no --cuda-graph)");
  }
  acc_.capturing_ = false;
  outputs_ = acc_.outputs_;
  acc_.outputs_ = Accumulator::Outputs{};
  const uint64_t drawn = gen.offset() - base;
  REEL_CHECK(drawn == draws_, "GraphedWindow: the captured window drew ", drawn,
             " dropout streams where the warm-up window drew ", draws_, "; the window must draw the same every step");
  counts_ = counts;
  ++replays_;
}

WindowResult GraphedWindow::replayed(const WindowResult& r) {
  ++replays_;
  // What run() advanced on the host when it was captured, advanced again: the generator's stream
  // ids (the next window's base), the optimizer's count, the scaler's state and the skip count.
  Generator& gen = default_generator();
  gen.set_offset(gen.offset() + draws_);
  acc_.replayed(device_);
  // This window's results, read from the static outputs (fresh Lazy values: each reads once).
  WindowResult out;
  out.count = r.count;
  out.lr = r.lr;
  const bool check = acc_.options_.scaler || acc_.options_.skip_nonfinite;
  if (outputs_.losses.defined()) {
    out.loss = Lazy<double>::on_device(outputs_.losses, 0);
    if (acc_.options_.scaler) out.loss_scale = Lazy<double>::on_device(outputs_.losses, 1);
  }
  if (outputs_.norm.defined() && acc_.options_.clip_norm > 0) out.grad_norm = Lazy<double>::on_device(outputs_.norm, 0);
  if (check && outputs_.found.defined()) {
    out.skipped_nonfinite = Lazy<bool>::on_device(outputs_.found, 0);
    out.stepped = Lazy<bool>::on_device(outputs_.found, 0, true);
  } else {
    out.stepped = true;
  }
  return out;
}

}  // namespace reel::optim
