// optim::GraphedWindow (optim/graphed_window.h): a whole accumulation window captured as one CUDA
// graph and replayed each step equals the eager windows bit for bit, with everything that varies
// from step to step: a warmup-cosine schedule, dropout, 4 micro-batches, sqrt checkpointing, bf16
// autocast with the loss scaler (at the edge of f32's range, so that windows overflow and are skipped,
// among the replays too), clipping, and a last, partial window that runs eagerly. The
// parameters, the optimizer's state and step count and the scaler's state are compared to the bit.
// The schedule is evaluated by the captured update kernels from the device's step count (each
// replay its own step's rate), and, for a schedule without a device form, copied up in each
// prologue; both equal the eager run to the bit. A replayed step is one graph launch (beside the
// prologue's copy of dropout's state) and no host sync; a
// capture that reads the host is refused
// with a reel::Error naming the capture. Results kept past later steps (an epoch's losses) with
// optim::Lazy::detach read what their windows computed, not the static output the next replay
// overwrote, and the held warm-up results leave the capture the cache it needs.
#include <cstring>
#include <set>
#include <string>
#include <vector>

#include "reel.h"
#include "testing.h"

using namespace reel;

namespace {

struct Batch {
  Tensor x, y;
};

// The same warm-up and cosine without a device form (LrSchedule::device_rule's default, as a user's
// schedule): its rate goes up by Optimizer::device_lr's copy, in the replay prologue.
class HostOnlyCosine final : public optim::LrSchedule {
 public:
  double lr(int64_t step) const override { return cosine_.lr(step); }

 private:
  optim::WarmupCosineLr cosine_{1e-2, 1e-3, 3, 20};
};

// A small GPT trained window by window, eagerly or through a GraphedWindow.
struct Run {
  Device device;
  nn::GPT gpt;
  optim::AdamW opt;
  // A different rate every step: evaluated by the update kernels from the device's count (captured:
  // each replay its own step's rate), or, host_schedule, copied up in each step's prologue.
  optim::WarmupCosineLr schedule{1e-2, 1e-3, 3, 20};
  HostOnlyCosine host_schedule;
  optim::GradScaler scaler;
  optim::Accumulator acc;
  std::vector<Batch> micro;  // the static inputs: 4 micro-batches of 2 sequences of 8 tokens

  static nn::GPTConfig config() {
    nn::GPTConfig c{/*vocab_size*/ 11, /*block_size*/ 8, /*n_layer*/ 2, /*n_head*/ 2, /*n_embd*/ 16};
    c.dropout = 0.1;
    return c;
  }
  static nn::GPT& placed(nn::GPT& g, Device d) {
    g.to(d);
    g.train();
    g.set_checkpoint(nn::CheckpointPolicy::parse("sqrt"));
    return g;
  }
  static optim::GradScaler::Options scaler_options() {
    optim::GradScaler::Options o;
    // At the edge of f32's range: 2^127 passes, and growing x2 after every 2 clean windows the scale
    // soon makes scaled gradients overflow: that window is skipped (backed off), and so on.
    o.init_scale = 0x1p127;
    o.backoff_factor = 0.5;
    o.growth_interval = 2;
    o.growth_factor = 2;
    return o;
  }
  explicit Run(Device d, bool scaled = true, bool device_schedule = true)
      : device(d),
        gpt((manual_seed(7), config())),
        opt(placed(gpt, d).parameters(), 1e-2),
        scaler(scaler_options()),
        acc(opt, {/*clip_norm*/ 1.0, device_schedule ? static_cast<const optim::LrSchedule*>(&schedule) : &host_schedule,
                  /*skip_nonfinite*/ false, nullptr, scaled ? &scaler : nullptr}) {
    for (int i = 0; i < 4; ++i) micro.push_back({zeros({2, 8}, DType::i64, d), zeros({2, 8}, DType::i64, d)});
  }
  // Step `step`'s data copied into the static inputs; the last `partial` windows hold 1 sequence.
  void fill(int step) {
    for (int i = 0; i < 4; ++i) {
      const Tensor ids = testing::random_ids(2, 9, 11, 1000 * static_cast<uint64_t>(step) + static_cast<uint64_t>(i), device);
      micro[static_cast<size_t>(i)].x.copy_(untracked::slice(ids, 1, 0, 8));
      micro[static_cast<size_t>(i)].y.copy_(untracked::slice(ids, 1, 1, 9));
    }
  }
  static int64_t count(const Batch& b) { return b.y.numel(); }
  Tensor loss(const Batch& b) {
    autograd::Autocast amp(DType::bf16);
    return cross_entropy(gpt(b.x), b.y, -100, "sum");  // the composed loss: no host read
  }
  // A partial window (2 micro-batches of the first sequence each): other counts, so eager.
  std::vector<Batch> partial() const {
    std::vector<Batch> p;
    for (int i = 0; i < 2; ++i)
      p.push_back({untracked::slice(micro[static_cast<size_t>(i)].x, 0, 0, 1).contiguous(),
                   untracked::slice(micro[static_cast<size_t>(i)].y, 0, 0, 1).contiguous()});
    return p;
  }
};

std::vector<std::vector<uint8_t>> bytes_of(const std::vector<Tensor>& tensors) {
  std::vector<std::vector<uint8_t>> out;
  for (const Tensor& t : tensors) {
    const Tensor c = t.to(Device::cpu()).contiguous();
    const auto* p = static_cast<const uint8_t*>(c.data_ptr());
    out.emplace_back(p, p + c.nbytes());
  }
  return out;
}

// Everything the run's future depends on: parameters, optimizer state (the step count included).
std::vector<std::vector<uint8_t>> state_of(Run& run) {
  std::vector<Tensor> all = run.gpt.parameters();
  for (const auto& [key, t] : run.opt.state_dict()) all.push_back(t);
  return bytes_of(all);
}

struct Trace {
  std::vector<double> losses, lrs;
  std::vector<bool> stepped;
};

// `windows` full windows, then one partial window, eagerly (graphed null) or through `graphed`.
Trace train(Run& run, int windows, optim::GraphedWindow* graphed) {
  Trace t;
  const auto record = [&](const optim::WindowResult& r) {
    t.losses.push_back(r.loss.get());
    t.lrs.push_back(r.lr);
    t.stepped.push_back(r.stepped.get());
  };
  const auto loss = [&](const Batch& b) { return run.loss(b); };
  for (int step = 0; step < windows; ++step) {
    run.fill(step);
    record(graphed ? graphed->step<Batch>(run.micro, Run::count, loss) : run.acc.step<Batch>(run.micro, Run::count, loss));
  }
  const std::vector<Batch> last = run.partial();
  record(graphed ? graphed->step<Batch>(last, Run::count, loss) : run.acc.step<Batch>(last, Run::count, loss));
  return t;
}

}  // namespace

TEST_CASE("GraphedWindow: replayed windows equal eager windows bit for bit (schedule, dropout, sqrt checkpointing, "
          "4 micro-batches, bf16 autocast, loss scaler with skipped windows, clipping, a partial last window)") {
  if (!cuda_available()) return;
  const Device d = Device::cuda(0);
  const int windows = 14;
  // The schedule evaluated on the device, and (once) a schedule whose rate is copied up.
  for (const bool device_schedule : {true, false}) {
    CAPTURE(device_schedule);
    Run eager(d, true, device_schedule);
    const Trace e = train(eager, windows, nullptr);
    const auto eager_state = state_of(eager);
    CHECK(std::set<double>(e.lrs.begin(), e.lrs.end()).size() >= 8);  // the rate changes from step to step

    Run graphed_run(d, true, device_schedule);
    optim::GraphedWindow graphed(graphed_run.acc);
    const Trace g = train(graphed_run, windows, &graphed);
    CHECK(graphed.captured());
    CHECK(graphed.replays() == windows - 3);   // 3 warm-up windows, then the capture's and the replays
    CHECK(graphed.eager_windows() == 4);       // the warm-up and the partial window
    CHECK(graphed.graph().nodes() > 100);

    // The scaler skipped windows, some of them replayed ones, and stepped others.
    int skipped_replayed = 0, stepped = 0;
    for (int i = 0; i <= windows; ++i) {
      CAPTURE(i);
      CHECK(e.stepped[static_cast<size_t>(i)] == g.stepped[static_cast<size_t>(i)]);
      CHECK(std::memcmp(&e.losses[static_cast<size_t>(i)], &g.losses[static_cast<size_t>(i)], sizeof(double)) == 0);
      CHECK(e.lrs[static_cast<size_t>(i)] == g.lrs[static_cast<size_t>(i)]);
      if (!g.stepped[static_cast<size_t>(i)] && i >= 4 && i < windows) ++skipped_replayed;
      if (g.stepped[static_cast<size_t>(i)]) ++stepped;
    }
    std::string pattern;
    for (bool b : g.stepped) pattern += b ? 'S' : '-';
    MESSAGE("stepped (S) and skipped (-) windows: ", pattern);
    CHECK(skipped_replayed >= 1);
    CHECK(stepped >= windows / 2);
    CHECK(eager.scaler.skipped_windows() == graphed_run.scaler.skipped_windows());
    CHECK(eager.scaler.scale() == graphed_run.scaler.scale());
    CHECK(eager.acc.skipped_steps() == graphed_run.acc.skipped_steps());
    CHECK(eager.opt.steps() == graphed_run.opt.steps());
    CHECK(eager.opt.steps() == windows + 1 - eager.acc.skipped_steps());
    const auto graphed_state = state_of(graphed_run);
    REQUIRE(eager_state.size() == graphed_state.size());
    int differ = 0;
    for (size_t i = 0; i < eager_state.size(); ++i) differ += eager_state[i] != graphed_state[i] ? 1 : 0;
    CHECK(differ == 0);
  }
}

TEST_CASE("GraphedWindow: a capture that reads the host is refused with a reel::Error naming the capture") {
  if (!cuda_available()) return;
  Run run(Device::cuda(0));
  optim::GraphedWindow graphed(run.acc);
  const auto loss = [&](const Batch& b) {
    Tensor l = run.loss(b);
    (void)l.item();  // a host read inside the window
    return l;
  };
  run.fill(0);
  for (int step = 0; step < 3; ++step) graphed.step<Batch>(run.micro, Run::count, loss);  // the warm-up: eager, reads are fine
  run.fill(1);
  try {
    graphed.step<Batch>(run.micro, Run::count, loss);
    FAIL("the capture was not refused");
  } catch (const Error& e) {
    const std::string what = e.what();
    CHECK(what.find("GraphedWindow: the accumulation window could not be captured") != std::string::npos);
    CHECK(what.find("CudaGraph::capture") != std::string::npos);
    CHECK(what.find("no host read inside it") != std::string::npos);
  }
}

TEST_CASE("GraphedWindow: a replayed step is one graph launch and no host sync (meta and emulated cuda)") {
  std::vector<Device> devices{Device::meta()};
  if (cuda_available()) devices.push_back(Device::cuda(0));
  for (Device d : devices) {
    CAPTURE(d);
    // Without the scaler nothing skips, so the schedule's step count stays exact on the host: no
    // read in the prologue. (With the scaler, the prologue reads the device's count: one sync.)
    Run run(d, /*scaled*/ false);
    optim::GraphedWindow graphed(run.acc);
    const auto loss = [&](const Batch& b) { return run.loss(b); };
    for (int step = 0; step < 5; ++step) graphed.step<Batch>(run.micro, Run::count, loss);  // warm-up, capture, replay
    REQUIRE(graphed.captured());
    Profiler prof;
    const int steps = 3;
    for (int step = 0; step < steps; ++step) graphed.step<Batch>(run.micro, Run::count, loss);
    prof.stop();
    const profile::StepCounts c = profile::step_counts(prof, steps);
    CHECK(c.graph_launches == 1);
    CHECK(c.graph_nodes == graphed.graph().nodes());
    CHECK(c.host_syncs == 0);
    // The graph, and the prologue's dropout-state copy: the rate is the captured kernels' own (a
    // schedule with a device form), the step count advanced by them.
    CHECK(c.launches == doctest::Approx(1 + 1));
    CHECK(profile::format_step_counts(c).rfind("per step: 1 graph launch (" + std::to_string(graphed.graph().nodes()) +
                                                   " nodes) + 1 launch, 0 host syncs",
                                               0) == 0);
  }
}

TEST_CASE("Lazy::detach: the value is kept on the host once the device tensor is overwritten (cpu, emulated cuda)") {
  std::vector<Device> devices{Device::cpu()};
  if (cuda_available()) devices.push_back(Device::cuda(0));
  for (Device d : devices) {
    CAPTURE(d);
    const Tensor t = full({2}, 1.5, DType::f64, d);  // (2)
    const optim::Lazy<double> v = optim::Lazy<double>::on_device(t, 1);
    const optim::Lazy<double> shared = v;  // a copy shares the detached value
    v.detach();
    t.fill_(7.0);  // what a replay does to a static output (enqueued after the copy back)
    CHECK(v.get() == 1.5);
    CHECK(shared.get() == 1.5);
    const optim::Lazy<double> read = optim::Lazy<double>::on_device(t, 0);
    CHECK(read.get() == 7.0);
    read.detach();  // read already: kept
    t.fill_(8.0);
    CHECK(read.get() == 7.0);
  }
  if (cuda_available()) {
    const optim::Lazy<double> i32 = optim::Lazy<double>::on_device(zeros({1}, DType::i32, Device::cuda(0)), 0);
    CHECK_REEL_ERROR(i32.detach(), "Lazy::detach: a device value of one f64 element expected");
  }
}

TEST_CASE("GraphedWindow: every window's loss kept with Lazy::detach until the end (as an epoch's line) reads the "
          "eager run's") {
  if (!cuda_available()) return;
  const Device d = Device::cuda(0);
  const int windows = 9;
  Run eager(d, /*scaled*/ false);
  std::vector<double> expected;
  const auto eager_loss = [&](const Batch& b) { return eager.loss(b); };
  for (int step = 0; step < windows; ++step) {
    eager.fill(step);
    expected.push_back(eager.acc.step<Batch>(eager.micro, Run::count, eager_loss).loss.get());
  }
  Run run(d, /*scaled*/ false);
  optim::GraphedWindow graphed(run.acc);
  const auto loss = [&](const Batch& b) { return run.loss(b); };
  std::vector<optim::Lazy<double>> kept;  // every window's, the warm-up's too, held while the graph is captured
  for (int step = 0; step < windows; ++step) {
    run.fill(step);
    const optim::WindowResult r = graphed.step<Batch>(run.micro, Run::count, loss);
    r.loss.detach();
    kept.push_back(r.loss);
  }
  CHECK(graphed.replays() == windows - 3);
  for (int i = 0; i < windows; ++i) {
    CAPTURE(i);
    const double got = kept[static_cast<size_t>(i)].get();
    CHECK(std::memcmp(&got, &expected[static_cast<size_t>(i)], sizeof(double)) == 0);
  }
}

TEST_CASE("GraphedWindow: refuses a window that decides on the host, and cpu") {
  Run run(Device::cpu(), false);
  CHECK_REEL_ERROR(optim::GraphedWindow{run.acc}, "CUDA graphs need cuda");
  optim::Accumulator::Options o;
  o.host_decisions = true;
  optim::Accumulator host(run.opt, o);
  CHECK_REEL_ERROR(optim::GraphedWindow{host}, "must decide on the device");
  const optim::GraphedWindow::Options no_warmup{0};
  CHECK_REEL_ERROR(optim::GraphedWindow(run.acc, no_warmup), "warmup_windows (0) must be >= 1");
}

