// fashion_mnist_mlp: trains nn::MLP({784, 512, 512, 10}) on Fashion-MNIST and shows where the
// memory of a training step goes.
//
//   ./fashion_mnist_mlp                                  # 3 epochs of Adam (cosine lr), batch 128, CPU
//   ./fashion_mnist_mlp --accum-steps 4                  # same updates, 4 micro-batches of 32 each
//   ./fashion_mnist_mlp --checkpoint sqrt --device cuda  # recompute activations in backward
//   mpirun -np 2 ./fashion_mnist_mlp --dist              # data parallel: each rank half of each window
//
// One optimizer step is one window of --batch samples, cut into --accum-steps micro-batches and
// run through optim::Accumulator: each micro-batch's loss is a SUM over its samples and the
// window's backward scale is 1 / (samples in the window), so the update is the same as one big
// batch up to float rounding, however the window is cut (and for the last, shorter window of an
// epoch too). Only one micro-batch's activations are alive at a time: that is what accumulation
// buys. Checkpointing (nn::Sequential::set_checkpoint) keeps even fewer and recomputes the rest
// in backward, with bit-identical gradients.
//
// The output is plain lines for grep ("test accuracy: 0.8712", "train samples/s: 5123", "peak
// activation bytes: ..."), then reel::memory_report(). --min-accuracy makes a run fail (exit 1)
// below a threshold, for tests.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "examples/checkpoint_budget.h"
#include "examples/train_options.h"
#include "reel.h"

using namespace reel;

namespace {

// Fashion-MNIST's pixel mean and standard deviation over the training set (pixels in [0, 1]).
constexpr float kPixelMean = 0.2860f, kPixelStd = 0.3530f;
constexpr int64_t kPixels = 784, kClasses = 10, kEvalBatch = 1000;

// The dataset on the host, normalised; batches are gathered from it and copied to the device.
struct HostData {
  std::vector<float> images;  // (n, 784) normalised pixels
  std::vector<int32_t> labels;  // (n)
  int64_t n = 0;
};

HostData load_split(const std::string& split, const std::string& dir, int64_t limit) {
  const nn::ImageDataset ds = nn::load_fashion_mnist(split, dir);
  HostData d;
  d.n = ds.labels.size(0);
  if (limit > 0) d.n = std::min(d.n, limit);
  d.images = ds.images.narrow(0, 0, d.n).contiguous().to_vector<float>();
  d.labels = ds.labels.narrow(0, 0, d.n).contiguous().to_vector<int32_t>();
  for (float& x : d.images) x = (x - kPixelMean) / kPixelStd;
  return d;
}

// Rows order[begin, begin + size) of `d` as (size, 784) f32 images and (size) i32 labels on `device`.
std::pair<Tensor, Tensor> gather(const HostData& d, const std::vector<int64_t>& order, int64_t begin, int64_t size,
                                 Device device) {
  std::vector<float> x(static_cast<size_t>(size * kPixels));
  std::vector<int32_t> y(static_cast<size_t>(size));
  for (int64_t i = 0; i < size; ++i) {
    const int64_t row = order[static_cast<size_t>(begin + i)];
    std::copy_n(d.images.begin() + row * kPixels, kPixels, x.begin() + i * kPixels);
    y[static_cast<size_t>(i)] = d.labels[static_cast<size_t>(row)];
  }
  return {from_vector(x, {size, kPixels}, device), from_vector(y, {size}, device)};
}

// Fisher-Yates with an explicit reduction, so the order depends only on the seed (std::shuffle's
// is implementation-defined).
void shuffle(std::vector<int64_t>& order, std::mt19937_64& rng) {
  for (size_t i = order.size(); i > 1; --i) std::swap(order[i - 1], order[rng() % i]);
}

// Fraction of `d` classified correctly, in eval mode without recording, batches of 1000.
double accuracy(nn::Module& model, const HostData& d, Device device) {
  autograd::NoGrad no_grad;
  model.eval();
  std::vector<int64_t> order(static_cast<size_t>(d.n));
  for (int64_t i = 0; i < d.n; ++i) order[static_cast<size_t>(i)] = i;
  int64_t correct = 0;
  for (int64_t begin = 0; begin < d.n; begin += kEvalBatch) {
    const int64_t size = std::min(kEvalBatch, d.n - begin);
    const auto [x, y] = gather(d, order, begin, size, device);
    const std::vector<int64_t> pred = argmax(model(x), 1).to(Device::cpu()).to_vector<int64_t>();
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

}  // namespace

int main(int argc, char** argv) {
  examples::TrainOptions o;
  o.epochs = 3;  // batch 128, adam, lr 1e-3: the shared defaults
  o.schedule = "cosine";  // decaying the rate over the run: 0.885 test accuracy after 3 epochs, 0.854 without
  std::string data_dir = nn::kFashionMnistDir;
  int64_t train_limit = 0, test_limit = 0;
  double min_accuracy = 0;

  CLI::App app{"Train an MLP (784-512-512-10) on Fashion-MNIST and report accuracy, speed and memory."};
  examples::add_train_options(app, o);
  app.add_option("--data-dir", data_dir, "folder of the Fashion-MNIST IDX files")->capture_default_str();
  app.add_option("--train-limit", train_limit, "use only the first N training images (0: all 60000)")
      ->capture_default_str()->check(CLI::NonNegativeNumber);
  app.add_option("--test-limit", test_limit, "use only the first N test images (0: all 10000)")
      ->capture_default_str()->check(CLI::NonNegativeNumber);
  app.add_option("--min-accuracy", min_accuracy, "exit 1 when the final test accuracy is below this (for tests)")
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  try {
    examples::Distributed dist(o);  // --dist: only rank 0 prints and saves from here
    const Device device(o.device);
    examples::apply_threads(o);
    const HostData train = load_split("train", data_dir, train_limit);
    const HostData test = load_split("test", data_dir, test_limit);
    REEL_CHECK(train.n > 0, "no training images");
    allocator_for(Device::cpu()).empty_cache();  // the decoded files are gone: keep "reserved" about training

    manual_seed(o.seed);  // the initialisation
    nn::MLP model({kPixels, 512, 512, kClasses});
    if (!o.load.empty()) nn::load(model, o.load);
    model.to(device);
    model.set_checkpoint(nn::CheckpointPolicy::parse(o.checkpoint));
    model.train();
    const int64_t steps_per_epoch = (train.n + o.batch - 1) / o.batch;
    int64_t total_steps = o.epochs * steps_per_epoch;
    if (o.max_steps > 0) total_steps = std::min(total_steps, o.max_steps);
    auto optimizer = dist.make_optimizer(o.optimizer, model.parameters(), o.lr);
    const std::unique_ptr<optim::LrSchedule> schedule = examples::make_schedule(o, total_steps);
    optim::Accumulator accumulator(*optimizer, {o.clip, schedule.get(), o.skip_nonfinite, dist.sync()});
    std::optional<autograd::DetectAnomaly> detect_anomaly;
    if (o.detect_anomaly) detect_anomaly.emplace();
    std::string plan;
    if (model.checkpoint().kind != nn::CheckpointPolicy::Kind::Budget)  // a budget is planned below
      for (const auto& run : model.checkpoint().plan(model.size()))
        plan += " [" + std::to_string(run.begin) + "," + std::to_string(run.end) + ")" +
                (run.checkpointed ? "*" : run.selective ? "s" : "");
    std::printf("model: MLP 784-512-512-10, %lld parameters, on %s\n",
                static_cast<long long>(model.num_parameters()), device.str().c_str());
    std::printf("data: %lld train, %lld test images from %s\n", static_cast<long long>(train.n),
                static_cast<long long>(test.n), data_dir.c_str());
    std::printf("training: %lld steps of batch %lld in up to %lld micro-batches, %s lr %g (%s), checkpoint %s (runs%s; * = recomputed, s = selective)\n",
                static_cast<long long>(total_steps), static_cast<long long>(o.batch),
                static_cast<long long>(o.accum_steps), o.optimizer.c_str(), o.lr, o.schedule.c_str(),
                model.checkpoint().str().c_str(), plan.c_str());
    std::fflush(stdout);

    std::mt19937_64 rng(o.seed);  // the shuffling
    std::vector<int64_t> order(static_cast<size_t>(train.n));
    const std::function<int64_t(const MicroBatch&)> count = [](const MicroBatch& b) { return b.size; };
    const std::function<Tensor(const MicroBatch&)> loss = [&](const MicroBatch& b) {
      const auto [x, y] = gather(train, order, b.begin, b.size, device);  // only this micro-batch's input lives
      return cross_entropy(model(x), y, -100, "sum");
    };

    const autograd::CheckpointPlan* budget_plan = examples::plan_checkpoint_budget(model, [&] {
      // One micro-batch of the largest size (its images do not matter, only its shapes).
      return loss({0, examples::micro_batch_sizes(std::min(o.batch, train.n), o.accum_steps).front()});
    });
    reset_peak_memory(device);  // from here the activation peak is that of the largest training step
    int64_t step = 0, samples = 0;
    double train_seconds = 0, test_acc = 0;
    examples::StepProfiler profiler(o);
    examples::StepMemoryTimeline memory_timeline(o, device, "fashion_mnist_mlp");
    for (int64_t epoch = 1; epoch <= o.epochs && step < total_steps; ++epoch) {
      for (int64_t i = 0; i < train.n; ++i) order[static_cast<size_t>(i)] = i;
      shuffle(order, rng);
      examples::Progress progress(std::min(steps_per_epoch, total_steps - step), "samples", o.quiet);
      const auto start = std::chrono::steady_clock::now();
      double loss_sum = 0;
      int64_t epoch_samples = 0, epoch_steps = 0;
      for (int64_t w = 0; w < train.n && step < total_steps; w += o.batch) {
        // The distributed sampler: every rank shuffles the same order (the same seed); under --dist
        // this rank takes its round-robin share of the window, laid out from `w` in `order` (the
        // window's rows are only permuted), so the ranks' windows together are the one-process window.
        const int64_t window_n = std::min(o.batch, train.n - w);
        const std::vector<int64_t> mine = dist.share(window_n);
        if (dist.world() > 1) {
          std::vector<int64_t> rows(static_cast<size_t>(window_n));
          for (int64_t i = 0; i < window_n; ++i) rows[static_cast<size_t>(i)] = order[static_cast<size_t>(w + i)];
          for (size_t i = 0; i < mine.size(); ++i) order[static_cast<size_t>(w) + i] = rows[static_cast<size_t>(mine[i])];
        }
        std::vector<MicroBatch> window;
        int64_t begin = w;
        const int64_t my_n = static_cast<int64_t>(mine.size());
        for (int64_t size : my_n > 0 ? examples::micro_batch_sizes(my_n, o.accum_steps) : std::vector<int64_t>{}) {
          window.push_back({begin, size});
          begin += size;
        }
        profiler.before_step(step + 1);
        memory_timeline.before_step(step + 1);
        const optim::WindowResult r = accumulator.step<MicroBatch>(window, count, loss);
        ++step, ++epoch_steps;
        profiler.after_step(step);
        memory_timeline.after_step(step);
        loss_sum += r.loss * static_cast<double>(r.count);
        epoch_samples += r.count;
        progress.update(epoch_steps, loss_sum / static_cast<double>(epoch_samples), epoch_samples);
      }
      progress.finish();
      const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      train_seconds += seconds;
      samples += epoch_samples;
      test_acc = accuracy(model, test, device);
      std::printf("epoch %lld: train loss %.4f  test accuracy %.4f  (%lld steps, %.1f s, %.0f samples/s)\n",
                  static_cast<long long>(epoch), loss_sum / static_cast<double>(epoch_samples), test_acc,
                  static_cast<long long>(epoch_steps), seconds, static_cast<double>(epoch_samples) / seconds);
      std::fflush(stdout);
    }

    profiler.finish();
    memory_timeline.finish();
    if (accumulator.skipped_steps() > 0)
      std::printf("skipped: %lld steps with non-finite gradients\n",
                  static_cast<long long>(accumulator.skipped_steps()));
    const MemoryStats stats = memory_stats(device);
    std::printf("test accuracy: %.4f\n", test_acc);
    std::printf("train samples/s: %.0f\n", static_cast<double>(samples) / std::max(train_seconds, 1e-9));
    dist.report(step);
    std::printf("peak activation bytes: %lld (%s)\n",
                static_cast<long long>(stats[Category::Activation].peak_bytes),
                format_bytes(stats[Category::Activation].peak_bytes).c_str());
    examples::report_checkpoint_budget(budget_plan, device);
    std::printf("%s", memory_report().c_str());
    if (!o.save.empty()) {
      nn::save(model, o.save, {{"model", "MLP 784-512-512-10"}, {"steps", std::to_string(step)}});
      std::printf("saved: %s\n", o.save.c_str());
    }
    if (test_acc < min_accuracy) {
      std::fprintf(stderr, "fashion_mnist_mlp: test accuracy %.4f is below --min-accuracy %.4f\n", test_acc,
                   min_accuracy);
      return 1;
    }
  } catch (const std::exception& e) {
    return examples::report_error("fashion_mnist_mlp", e);
  }
  return 0;
}
