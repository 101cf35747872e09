// What the Fashion-MNIST examples share (fashion_mnist_mlp, fashion_mnist_cnn): the dataset on the
// host, batches gathered from it in the shape the model takes, the test accuracy, and the whole
// training run (options, accumulation windows, checkpointing, profiling, the memory report, the
// run's checkpoints and --resume with the data order's place, --metrics) around a model the example
// builds; or, with --fit SIZE, the levers searched on meta (examples/fit.h).
//
// One optimizer step is one window of --batch samples, cut into --accum-steps micro-batches and
// run through optim::Accumulator: each micro-batch's loss is a SUM over its samples and the
// window's backward scale is 1 / (samples in the window), so the update is the same as one big
// batch up to float rounding, however the window is cut (and for the last, shorter window of an
// epoch too) -- unless the model has batch statistics (BatchNorm), which see each micro-batch
// alone. With --accum-steps > 1 the run first measures that difference on one window and prints
// it ("accumulation gap"), so the caveat is a number, not a footnote (not under --zero 2/3, whose
// gradients are scattered across the ranks).
//
// --cuda-graph (cuda or meta): each full window is captured once after optim::GraphedWindow's eager
// warm-up windows and replayed (optim/graphed_window.h), as char_gpt's. Its micro-batches go up
// before the window into examples/batch_upload.h's slots, static tensors the graph reads; a window
// of another shape (an epoch's last, partial one) runs eagerly from slots of its own, so the full
// windows' slots keep their addresses; the test accuracy stays eager. Each window's loss is copied
// back to the host as the step ends (optim::Lazy::detach: from a replay's static output before the
// next replay overwrites it), so the epoch's line holds no device memory and the step no host
// sync. The CNN's BatchNorm (--norm batch, momentum 0.1) counts its batches on the device
// (num_batches_tracked += 1, a kernel a replay runs again), so its graph run equals the eager one,
// running statistics and count included; a BatchNorm with momentum nullopt (the cumulative
// average, whose factor 1 / count is a host number) is refused.
#pragma once
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <memory>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "examples/batch_upload.h"
#include "examples/checkpoint_budget.h"
#include "examples/fit.h"
#include "examples/metrics.h"
#include "examples/run_checkpoints.h"
#include "examples/train_options.h"
#include "reel.h"

namespace examples {

// Fashion-MNIST's pixel mean and standard deviation over the training set (pixels in [0, 1]).
constexpr float kPixelMean = 0.2860f, kPixelStd = 0.3530f;
constexpr int64_t kPixels = 784, kClasses = 10, kEvalBatch = 1000;

// The dataset on the host, normalised; batches are gathered from it and copied to the device.
struct HostData {
  std::vector<float> images;    // (n, 784) normalised pixels
  std::vector<int32_t> labels;  // (n)
  int64_t n = 0;
};

inline HostData load_split(const std::string& split, const std::string& dir, int64_t limit) {
  const reel::nn::ImageDataset ds = reel::nn::load_fashion_mnist(split, dir);
  HostData d;
  d.n = ds.labels.size(0);
  if (limit > 0) d.n = std::min(d.n, limit);
  d.images = ds.images.narrow(0, 0, d.n).contiguous().to_vector<float>();
  d.labels = ds.labels.narrow(0, 0, d.n).contiguous().to_vector<int32_t>();
  for (float& x : d.images) x = (x - kPixelMean) / kPixelStd;
  return d;
}

// Rows order[begin, begin + size) of `d` as (size, image...) f32 images, `image` the shape of one
// image as the model takes it ({784} or {1, 28, 28}), and (size) i32 labels, on `device`. With
// `upload`, each goes up by an asynchronous copy from pinned memory into its slot's tensor (slots
// 2 * slot and 2 * slot + 1: examples/batch_upload.h), else by a blocking copy.
inline std::pair<reel::Tensor, reel::Tensor> gather(const HostData& d, const std::vector<int64_t>& order,
                                                    int64_t begin, int64_t size, const reel::Shape& image,
                                                    reel::Device device, BatchUpload* upload = nullptr,
                                                    size_t slot = 0) {
  std::vector<float> x(static_cast<size_t>(size * kPixels));
  std::vector<int32_t> y(static_cast<size_t>(size));
  for (int64_t i = 0; i < size; ++i) {
    const int64_t row = order[static_cast<size_t>(begin + i)];
    std::copy_n(d.images.begin() + row * kPixels, kPixels, x.begin() + i * kPixels);
    y[static_cast<size_t>(i)] = d.labels[static_cast<size_t>(row)];
  }
  reel::Shape shape{size};
  shape.insert(shape.end(), image.begin(), image.end());
  if (upload)
    return {upload->put(2 * slot, x.data(), shape, reel::DType::f32, device),
            upload->put(2 * slot + 1, y.data(), {size}, reel::DType::i32, device)};
  return {reel::from_vector(x, shape, device), reel::from_vector(y, {size}, device)};
}

// Fisher-Yates with an explicit reduction, so the order depends only on the seed (std::shuffle's
// is implementation-defined).
inline void shuffle(std::vector<int64_t>& order, std::mt19937_64& rng) {
  for (size_t i = order.size(); i > 1; --i) std::swap(order[i - 1], order[rng() % i]);
}

inline std::vector<int64_t> identity_order(int64_t n) {
  std::vector<int64_t> order(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) order[static_cast<size_t>(i)] = i;
  return order;
}

// Fraction of `d` classified correctly, in eval mode without recording, batches of 1000; under
// autocast when `precision` is bf16 or f16, as the training forwards.
inline double accuracy(reel::nn::Module& model, const HostData& d, const reel::Shape& image, reel::Device device,
                       std::optional<reel::DType> precision = std::nullopt) {
  reel::autograd::NoGrad no_grad;
  reel::autograd::Autocast amp(precision);
  model.eval();
  const std::vector<int64_t> order = identity_order(d.n);
  int64_t correct = 0;
  for (int64_t begin = 0; begin < d.n; begin += kEvalBatch) {
    const int64_t size = std::min(kEvalBatch, d.n - begin);
    const auto batch = gather(d, order, begin, size, image, device);
    const std::vector<int64_t> pred = reel::argmax(model(batch.first), 1).to(reel::Device::cpu()).to_vector<int64_t>();
    for (int64_t i = 0; i < size; ++i)
      correct += pred[static_cast<size_t>(i)] == d.labels[static_cast<size_t>(begin + i)];
  }
  model.train();
  return d.n > 0 ? static_cast<double>(correct) / static_cast<double>(d.n) : 0.0;
}

// One micro-batch of a window: rows order[begin, begin + size).
struct MicroBatch {
  int64_t begin = 0, size = 0;
};

// A micro-batch on the device, as training's window takes it: (size, image...) f32 images and
// (size) i32 labels.
struct DeviceBatch {
  reel::Tensor x, y;
};

// Whether `model` holds a BatchNorm with momentum nullopt that tracks running statistics: its
// factor 1 / num_batches_tracked is a host number from the host's count (nn/layers.h), which a
// captured CUDA graph would pass again at every replay. (With a momentum the count advances on the
// device, and a replay counts.)
inline bool has_cumulative_batchnorm(reel::nn::Sequential& model) {
  for (int64_t i = 0; i < model.size(); ++i) {
    const auto* norm = dynamic_cast<const reel::nn::BatchNorm*>(&model[i]);
    if (norm && norm->track_running_stats && !norm->momentum) return true;
  }
  return false;
}

// The micro-batches of the window of `size` samples starting at sample `begin`.
inline std::vector<MicroBatch> window_of(int64_t begin, int64_t size, int64_t accum_steps) {
  std::vector<MicroBatch> window;
  for (int64_t s : micro_batch_sizes(size, accum_steps)) {
    window.push_back({begin, s});
    begin += s;
  }
  return window;
}

// How far the gradients of `window`, accumulated micro-batch by micro-batch, are from those of the
// same samples as one batch: max |g_accumulated - g_batch| / max |g_batch| over every parameter.
// Rounding alone gives ~1e-7 in f32; batch statistics give far more. The model is left as it was:
// the buffers (running statistics) are put back and the gradients zeroed; no optimizer runs.
inline double accumulation_gap(reel::nn::Module& model, const std::vector<MicroBatch>& window,
                               const std::function<reel::Tensor(const MicroBatch&)>& loss) {
  using namespace reel;
  const std::vector<Tensor> params = model.parameters();
  std::vector<std::pair<Tensor, Tensor>> buffers;  // (buffer, its value before)
  for (const auto& named : model.named_buffers()) buffers.emplace_back(named.second, named.second.clone());
  int64_t total = 0;
  for (const MicroBatch& b : window) total += b.size;
  const double scale = 1.0 / static_cast<double>(total);
  auto gradients = [&](const std::vector<MicroBatch>& parts) {
    autograd::zero_grad(params);
    for (const MicroBatch& b : parts) autograd::backward(loss(b), scale);
    std::vector<std::vector<double>> g;
    for (const Tensor& p : params)  // a parameter the loss does not reach has no gradient: nothing to compare
      g.push_back(p.grad().defined() ? p.grad().to(Device::cpu()).to(DType::f64).contiguous().to_vector<double>()
                                     : std::vector<double>{});
    for (auto& buffer : buffers) buffer.first.copy_(buffer.second);
    return g;
  };
  const std::vector<std::vector<double>> whole = gradients({{window.front().begin, total}});
  const std::vector<std::vector<double>> accumulated = gradients(window);
  autograd::zero_grad(params);
  double diff = 0, largest = 0;
  for (size_t i = 0; i < whole.size(); ++i)
    for (size_t j = 0; j < std::min(whole[i].size(), accumulated[i].size()); ++j) {
      diff = std::max(diff, std::abs(accumulated[i][j] - whole[i][j]));
      largest = std::max(largest, std::abs(whole[i][j]));
    }
  return largest > 0 ? diff / largest : 0.0;
}

// The example-specific options beside the shared ones of train_options.h.
struct FashionMnistOptions {
  std::string data_dir = reel::nn::kFashionMnistDir;
  int64_t train_limit = 0, test_limit = 0;
  double min_accuracy = 0;
  std::string fit;            // --fit SIZE: the levers searched on meta (examples/fit.h) instead of training
  int argc = 0;               // the command line, for --fit's answer
  char** argv = nullptr;
};

inline void add_fashion_mnist_options(CLI::App& app, FashionMnistOptions& f, TrainOptions& o) {
  app.add_option("--data-dir", f.data_dir, "folder of the Fashion-MNIST IDX files")->capture_default_str();
  app.add_option("--train-limit", f.train_limit, "use only the first N training images (0: all 60000)")
      ->capture_default_str()->check(CLI::NonNegativeNumber);
  app.add_option("--test-limit", f.test_limit, "use only the first N test images (0: all 10000)")
      ->capture_default_str()->check(CLI::NonNegativeNumber);
  app.add_option("--min-accuracy", f.min_accuracy, "exit 1 when the final test accuracy is below this (for tests)")
      ->capture_default_str();
  add_fit_option(app, f.fit, o);
}

// What an example trains: its program name (messages), a one-line description, the shape of one
// image as the model takes it, and the model, built on the CPU after manual_seed.
struct FashionMnistModel {
  std::string program, description;
  reel::Shape image;
  std::function<std::shared_ptr<reel::nn::Sequential>()> make;
};

// --zero 2/3's units under --fsdp-units block: each child of `model` with parameters.
inline std::vector<reel::nn::Module*> layers_of(reel::nn::Sequential& model) {
  std::vector<reel::nn::Module*> layers;
  for (int64_t i = 0; i < model.size(); ++i)
    if (!model[i].parameters().empty()) layers.push_back(&model[i]);
  return layers;
}

// --fit's candidate (examples/fit.h): `spec`'s model made on `t`'s device (meta) with its levers,
// the optimizer and accumulation window as training makes them, and one optimizer step of --batch
// samples (zeros: nothing is read on meta), each micro-batch copied from the host as gather does.
inline FitStep fashion_mnist_fit_step(const FashionMnistModel& spec, const TrainOptions& t) {
  using namespace reel;
  const Device device(t.device);
  const auto c = make_fit_candidate<nn::Sequential>(t, [&] { return spec.make(); },
                                                    [](nn::Sequential& model) { return FitUnits{layers_of(model), {}}; });
  c->model->train();
  auto data = std::make_shared<HostData>();
  data->n = c->batch;  // rank 0's share under --simulate-ranks
  data->images.assign(static_cast<size_t>(c->batch * kPixels), 0.0f);
  data->labels.assign(static_cast<size_t>(c->batch), 0);
  const std::vector<MicroBatch> window = window_of(0, c->batch, t.accum_steps);
  const std::optional<DType> precision = autocast_dtype(t);
  c->plan([&] {
    const std::vector<int64_t> order = identity_order(data->n);
    const auto batch = gather(*data, order, 0, window.front().size, spec.image, device);
    autograd::Autocast amp(precision);
    return cross_entropy((*c->model)(batch.first), batch.second, -100, "sum");
  });
  return [c, data, window, precision, device, image = spec.image] {
    const std::vector<int64_t> order = identity_order(data->n);
    c->acc->step<MicroBatch>(
        window, [](const MicroBatch& b) { return b.size; },
        [&](const MicroBatch& b) {
          const auto batch = gather(*data, order, b.begin, b.size, image, device);
          autograd::Autocast amp(precision);
          return cross_entropy((*c->model)(batch.first), batch.second, -100, "sum");
        });
  };
}

// The whole run: data, model, training windows, the test accuracy after each epoch, the memory
// report, --save; returns the process exit status (1: an error, or accuracy below --min-accuracy).
// Output lines for grep: "test accuracy: 0.8712", "train samples/s: 5123", "peak activation
// bytes: ...", "accumulation gap: ...", and with --cuda-graph "cuda graph: 5 windows replayed (47 nodes),
// 4 eager".
inline int train_fashion_mnist(const FashionMnistModel& spec, TrainOptions& o, const FashionMnistOptions& f) {
  using namespace reel;
  try {
    Distributed dist(o);  // --dist: only rank 0 prints and saves from here
    const Device device(o.device);
    apply_runtime_options(o);
    check_fit_options(o, f.fit);
    if (!f.fit.empty()) {  // no data loaded: each candidate makes its model and zero batches on meta
      std::shared_ptr<nn::Sequential> probe;
      {
        DeviceScope on(Device::meta());
        probe = spec.make();  // what its checkpoint policies count
      }
      const int64_t units = probe->size();
      probe.reset();
      return run_fit(o, f.fit, units, static_cast<double>(o.batch), "samples",
                     [&](const TrainOptions& t) { return fashion_mnist_fit_step(spec, t); }, f.argc, f.argv);
    }
    const HostData train = load_split("train", f.data_dir, f.train_limit);
    const HostData test = load_split("test", f.data_dir, f.test_limit);
    REEL_CHECK(train.n > 0, "no training images");
    allocator_for(Device::cpu()).empty_cache();  // the decoded files are gone: keep "reserved" about training

    manual_seed(o.seed);  // the initialisation
    const std::shared_ptr<nn::Sequential> model_ptr = spec.make();
    nn::Sequential& model = *model_ptr;
    if (!o.load.empty()) nn::load(model, o.load);
    model.to(device);
    model.set_checkpoint(nn::CheckpointPolicy::parse(o.checkpoint));
    apply_offload(model, o, device);
    model.train();
    const int64_t steps_per_epoch = (train.n + o.batch - 1) / o.batch;
    int64_t total_steps = o.epochs * steps_per_epoch;
    if (o.max_steps > 0) total_steps = std::min(total_steps, o.max_steps);
    auto optimizer = dist.make_optimizer(o.optimizer, model, layers_of(model), o.lr);
    const std::unique_ptr<optim::LrSchedule> schedule = make_schedule(o, total_steps);
    const std::unique_ptr<optim::GradScaler> scaler = make_scaler(o);  // --precision f16 only
    optim::Accumulator accumulator(*optimizer, {o.clip, schedule.get(), o.skip_nonfinite, dist.sync(), scaler.get()});
    // --cuda-graph: each full window captured once after the warm-up windows and replayed
    // (optim/graphed_window.h), reading the micro-batches' upload slots (below), which keep their
    // addresses; a window whose micro-batches count otherwise (an epoch's last) runs eagerly.
    REEL_CHECK(!o.cuda_graph || !has_cumulative_batchnorm(model), "--cuda-graph with a BatchNorm of momentum "
               "None (the cumulative average): its factor 1 / num_batches_tracked is computed on the host, and a "
               "replayed graph would reuse the captured one; give it a momentum, or use --norm group or --norm none");
    std::optional<optim::GraphedWindow> graphed;
    if (o.cuda_graph) graphed.emplace(accumulator);
    std::optional<autograd::DetectAnomaly> detect_anomaly;
    if (o.detect_anomaly) detect_anomaly.emplace();
    std::string plan;
    if (model.checkpoint().kind != nn::CheckpointPolicy::Kind::Budget)  // a budget is planned below
      for (const auto& run : model.checkpoint().plan(model.size()))
        plan += " [" + std::to_string(run.begin) + "," + std::to_string(run.end) + ")" +
                (run.checkpointed ? "*" : run.selective ? "s" : "");
    std::printf("model: %s, %lld parameters, on %s\n", spec.description.c_str(),
                static_cast<long long>(model.num_parameters()), device.str().c_str());
    std::printf("data: %lld train, %lld test images from %s\n", static_cast<long long>(train.n),
                static_cast<long long>(test.n), f.data_dir.c_str());
    std::printf("training: %lld steps of batch %lld in up to %lld micro-batches, %s lr %g (%s), checkpoint %s (runs%s; * = recomputed, s = selective), %s\n",
                static_cast<long long>(total_steps), static_cast<long long>(o.batch),
                static_cast<long long>(o.accum_steps), o.optimizer.c_str(), o.lr, o.schedule.c_str(),
                model.checkpoint().str().c_str(), plan.c_str(), precision_str(o).c_str());
    std::fflush(stdout);

    std::mt19937_64 rng(o.seed);  // the shuffling
    std::vector<int64_t> order = identity_order(train.n);
    // A micro-batch's SUM-reduced loss.
    const auto batch_loss = [&](const Tensor& x, const Tensor& y) {
      autograd::Autocast amp(autocast_dtype(o));  // --precision: the forward only, backward in its recorded dtypes
      return cross_entropy(model(x), y, -100, "sum");
    };
    // The plan's and the gap's micro-batches: gathered and copied up by a blocking copy, only this
    // micro-batch's input alive.
    const std::function<Tensor(const MicroBatch&)> loss = [&](const MicroBatch& b) {
      const auto batch = gather(train, order, b.begin, b.size, spec.image, device);
      return batch_loss(batch.first, batch.second);
    };
    // The training windows' micro-batches go up asynchronously before the window into static
    // tensors, one slot per micro-batch (examples/batch_upload.h): a full window's into `upload`'s,
    // a window of another size (an epoch's last) into `tail_upload`'s, so that the full windows'
    // slots never change shape, and keep the addresses a captured graph reads.
    BatchUpload upload, tail_upload;
    const int64_t full_window = static_cast<int64_t>(dist.share(std::min(o.batch, train.n)).size());
    const auto count = [](const DeviceBatch& b) { return b.y.numel(); };
    const auto step_loss = [&](const DeviceBatch& b) { return batch_loss(b.x, b.y); };

    const autograd::CheckpointPlan* budget_plan = plan_checkpoint_budget(model, [&] {
      // One micro-batch of the largest size (its images do not matter, only its shapes).
      return loss({0, micro_batch_sizes(std::min(o.batch, train.n), o.accum_steps).front()});
    });
    // The first window, unshuffled, accumulated and as one batch (not with sharded gradients: the
    // comparison reads whole gradients, which --zero 2/3 scatter across the ranks).
    if (o.accum_steps > 1 && o.zero < 2) {
      const double gap = accumulation_gap(model, window_of(0, std::min(o.batch, train.n), o.accum_steps), loss);
      std::printf("accumulation gap: %.3g (max |accumulated - one batch| / max |one batch| over the gradients of one window; ~1e-7 is f32 rounding, more is batch statistics)\n",
                  gap);
    }
    // --resume: the run's whole state after `step` steps, put back just before the loop (after the
    // plan and the gap above, which draw random streams as the unstopped run's did). The data order
    // is the shuffling stream at the start of the epoch it was in, and the next window's place.
    RunCheckpoints checkpoints(o, spec.program, dist, /*data_per_rank*/ false);
    nn::Metadata resumed;
    int64_t step = checkpoints.resume(model, *optimizer, scaler.get(), accumulator, &resumed);
    int64_t first_epoch = 1, first_window = 0;
    std::mt19937_64 epoch_rng = rng;  // the stream as this epoch's shuffle found it
    if (step > 0) {
      const auto read_rng = [&](const char* key) {
        std::istringstream in(resumed.at(key));
        std::mt19937_64 r;
        in >> r;
        REEL_CHECK(!in.fail(), "resume: '", key, "' in the checkpoint does not read back");
        return r;
      };
      first_epoch = std::stoll(resumed.at("data.epoch"));
      first_window = std::stoll(resumed.at("data.next_window"));
      rng = read_rng("data.epoch_rng");
      if (first_window >= train.n) {  // the epoch was over: the next one, its shuffle still to come
        ++first_epoch;
        first_window = 0;
        rng = read_rng("data.rng");
      }
      if (step >= total_steps)
        std::printf("resume: the run finished at step %lld of %lld: nothing left to do\n", static_cast<long long>(step),
                    static_cast<long long>(total_steps));
    }
    reset_peak_memory(device);  // from here the activation peak is that of the largest training step
    int64_t samples = 0;
    double train_seconds = 0, test_acc = 0;
    StepProfiler profiler(o, "samples", static_cast<double>(o.batch));
    StepMemoryTimeline memory_timeline(o, device, spec.program);
    bool stopped = false;
    MetricsLog metrics(o.metrics, step, "samples");
    for (int64_t epoch = first_epoch; epoch <= o.epochs && step < total_steps && !stopped; ++epoch) {
      epoch_rng = rng;
      order = identity_order(train.n);
      shuffle(order, rng);
      Progress progress(std::min(steps_per_epoch, total_steps - step), "samples", o.quiet);
      const auto start = std::chrono::steady_clock::now();
      // The windows' mean losses, each copied back to the host asynchronously as its step ends
      // (optim::Lazy, detached: no device block held; a replay's copied from the graph's static
      // output before the next replay overwrites it), read when the epoch's line reads them: a
      // step waits for nothing (the progress line reads its window's loss only when it draws).
      std::vector<std::pair<optim::Lazy<double>, int64_t>> window_losses;  // (mean loss, samples)
      int64_t epoch_samples = 0, epoch_steps = 0;
      for (int64_t w = epoch == first_epoch ? first_window : 0; w < train.n && step < total_steps; w += o.batch) {
        // The distributed sampler: every rank shuffles the same order (the same seed); under --dist
        // this rank takes its round-robin share of the window, laid out from `w` in `order` (the
        // window's rows are only permuted), so the ranks' windows together are the one-process window.
        const int64_t window_n = std::min(o.batch, train.n - w);
        const std::vector<int64_t> mine = dist.share(window_n);
        if (dist.world() > 1) {
          const std::vector<int64_t> rows(order.begin() + w, order.begin() + w + window_n);
          for (size_t i = 0; i < mine.size(); ++i) order[static_cast<size_t>(w) + i] = rows[static_cast<size_t>(mine[i])];
        }
        const int64_t my_n = static_cast<int64_t>(mine.size());
        const std::vector<MicroBatch> window = my_n > 0 ? window_of(w, my_n, o.accum_steps) : std::vector<MicroBatch>{};
        profiler.before_step(step + 1);
        memory_timeline.before_step(step + 1);
        const auto window_start = std::chrono::steady_clock::now();
        BatchUpload& slots = my_n == full_window ? upload : tail_upload;
        std::vector<DeviceBatch> micro;
        for (const MicroBatch& b : window) {
          const auto xy = gather(train, order, b.begin, b.size, spec.image, device, &slots, micro.size());
          micro.push_back({xy.first, xy.second});
        }
        const optim::WindowResult r = graphed ? graphed->step<DeviceBatch>(micro, count, step_loss)
                                              : accumulator.step<DeviceBatch>(micro, count, step_loss);
        r.loss.detach();  // copied back now: the next replay may overwrite it, the epoch keeps no device block
        ++step, ++epoch_steps;
        metrics.log(step, r, std::chrono::duration<double>(std::chrono::steady_clock::now() - window_start).count(),
                    memory_stats(device).peak_bytes);
        profiler.after_step(step);
        memory_timeline.after_step(step);
        window_losses.emplace_back(r.loss, r.count);
        epoch_samples += r.count;
        progress.update(epoch_steps, r.loss, epoch_samples);
        checkpoints.after_step(step, total_steps, model, *optimizer, scaler.get(), accumulator, [&] {
          std::ostringstream at_start, now;
          at_start << epoch_rng;
          now << rng;
          return nn::Metadata{{"data.epoch", std::to_string(epoch)},
                              {"data.next_window", std::to_string(w + o.batch)},
                              {"data.epoch_rng", at_start.str()},
                              {"data.rng", now.str()}};
        });
        if (checkpoints.stop_after(step)) {
          stopped = true;
          break;
        }
      }
      progress.finish();
      double loss_sum = 0;  // the epoch's line: the windows' losses read now, in order
      for (const auto& [loss, n] : window_losses) loss_sum += loss.get() * static_cast<double>(n);
      const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      train_seconds += seconds;
      samples += epoch_samples;
      test_acc = accuracy(model, test, spec.image, device, autocast_dtype(o));
      std::printf("epoch %lld: train loss %.4f  test accuracy %.4f  (%lld steps, %.1f s, %.0f samples/s)\n",
                  static_cast<long long>(epoch), loss_sum / static_cast<double>(epoch_samples), test_acc,
                  static_cast<long long>(epoch_steps), seconds, static_cast<double>(epoch_samples) / seconds);
      std::fflush(stdout);
    }

    profiler.finish();
    memory_timeline.finish();
    metrics.finish(spec.program + ": training loss");
    report_skipped(accumulator, scaler.get());
    if (graphed)  // "cuda graph: 5 windows replayed (47 nodes), 4 eager" (the capture's window counts as replayed)
      std::printf("cuda graph: %lld windows replayed (%lld nodes), %lld eager\n",
                  static_cast<long long>(graphed->replays()), static_cast<long long>(graphed->graph().nodes()),
                  static_cast<long long>(graphed->eager_windows()));
    checkpoints.report();
    const MemoryStats stats = memory_stats(device);
    std::printf("test accuracy: %.4f\n", test_acc);
    report_rate("train samples", static_cast<double>(samples), train_seconds, device, profiler.predicted_rate(),
                profiler.predicted_on());
    dist.report(step, device);
    dist.finish_training();
    std::printf("peak activation bytes: %lld (%s)\n",
                static_cast<long long>(stats[Category::Activation].peak_bytes),
                format_bytes(stats[Category::Activation].peak_bytes).c_str());
    report_checkpoint_budget(budget_plan, device);
    std::printf("%s", memory_report().c_str());
    if (!o.save.empty()) {
      nn::save(model, o.save, {{"model", spec.description}, {"steps", std::to_string(step)}});
      std::printf("saved: %s\n", o.save.c_str());
    }
    if (test_acc < f.min_accuracy) {
      std::fprintf(stderr, "%s: test accuracy %.4f is below --min-accuracy %.4f\n", spec.program.c_str(), test_acc,
                   f.min_accuracy);
      return 1;
    }
  } catch (const std::exception& e) {
    return report_error(spec.program.c_str(), e);
  }
  return 0;
}

}  // namespace examples
