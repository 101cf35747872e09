// memory_lab: where backprop memory goes, shown by measurement. One run demonstrates seven claims,
// each with its figures on stdout and a picture (SVG) written to --out:
//
//   (a) accumulation: N micro-batches give the big batch's gradients (the largest difference is
//       printed) at one micro-batch's activation peak  -> accumulation.svg, and the memory timeline
//       of a window of 4 micro-batches                 -> accumulation_timeline.html
//   (b) activations grow O(N) with depth plain and O(sqrt N) with sqrt N checkpoint segments (the
//       fitted exponents are printed)                             -> depth.svg
//   (c) recomputation costs about one extra forward: a step of forward F and backward ~2F becomes
//       ~4F, the measured ratio beside the 4/3 of that argument    -> recompute.svg
//   (d) selective checkpointing and the planner against every:K and sqrt: step time against the
//       activation peak (the planner's curve should lie at or below the others) -> policies.svg
//   (e) the loss must be normalised by the window's total count: averaging per micro-batch is
//       wrong as soon as micro-batches differ in size (the gradient error of both ways) -> normalisation.svg
//   (f) mixed precision: the same GPT trained the same steps in f32 and under bf16 autocast: bytes
//       by category (parameters = the f32 masters, gradients, optimizer state, activations), the
//       activation peak with and without sqrt N, and the validation loss -> precision.svg, and the
//       memory timeline of each precision's step              -> precision_<p>_timeline.html
//   (g) offload, the third way (on cuda:0, emulated in a build without CUDA): at one budget (40 % of
//       the plain peak), keep-all, sqrt N recompute, sqrt N with its boundaries offloaded to host
//       memory, and the planner without and with offload: device peak, host bytes, predicted and
//       measured peak and step time                                -> offload.svg, and the memory
//       timeline of each plan's step                               -> offload_<plan>_timeline.html
//
// The memory claims (a, b, e, f, g and "the measured peak never exceeds the budget" of d) are checked:
// the program exits 1 naming any that fails. The timing claims (c, d) are printed, not checked:
// they depend on the machine. docs/memory.md walks through the output.
//
// It runs on cpu or cuda, not on the meta device (a dry run has no values or times to compare).
//
//   ./memory_lab                       # about a minute on two CPU cores
//   ./memory_lab --quick --out /tmp/ml # seconds (the CTest run)
#include <CLI/CLI.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "examples/policy_sweep.h"
#include "examples/train_options.h"
#include "reel.h"
#include "report/svg_chart.h"

using namespace reel;

namespace {

struct Lab {
  Device device = Device::cpu();
  std::string out;
  bool quick = false;
  int steps = 5;  // timed rounds per measurement (median)
  std::vector<std::string> failures;  // claims that did not hold

  void claim(bool ok, const std::string& what) {
    std::printf("  %s: %s\n", ok ? "holds" : "FAILS", what.c_str());
    if (!ok) failures.push_back(what);
  }
  std::string path(const std::string& name) const { return (std::filesystem::path(out) / name).string(); }
  void picture(const std::string& name, const report::Chart& chart) const {
    report::write_svg(path(name), chart);
    std::printf("  picture: %s\n", path(name).c_str());
  }
};

double mib(int64_t bytes) { return static_cast<double>(bytes) / (1 << 20); }

std::vector<double> grads_of(const std::vector<Tensor>& params) {
  std::vector<double> g;
  for (const Tensor& p : params) {
    const std::vector<double> v = p.grad().to(Device::cpu()).to(DType::f64).to_vector<double>();
    g.insert(g.end(), v.begin(), v.end());
  }
  return g;
}

double max_abs_diff(const std::vector<double>& a, const std::vector<double>& b) {
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::fabs(a[i] - b[i]));
  return m;
}

// The slope of log(y) against log(x), least squares: y ~ x^slope.
double fitted_exponent(const std::vector<double>& x, const std::vector<double>& y) {
  double sx = 0, sy = 0, sxx = 0, sxy = 0;
  const double n = static_cast<double>(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const double lx = std::log(x[i]), ly = std::log(y[i]);
    sx += lx, sy += ly, sxx += lx * lx, sxy += lx * ly;
  }
  return (n * sxy - sx * sy) / (n * sxx - sx * sx);
}

// N blocks of Linear(width) + GELU, each block one child of the chain (as policies count).
std::shared_ptr<nn::Sequential> linear_gelu_chain(int n, int64_t width, Device device) {
  auto chain = std::make_shared<nn::Sequential>();
  for (int i = 0; i < n; ++i)
    chain->push_back(std::make_shared<nn::Sequential>(std::vector<std::shared_ptr<nn::Module>>{
        std::make_shared<nn::Linear>(width, width), std::make_shared<nn::GELU>()}));
  chain->to(device);
  return chain;
}

// (a) N micro-batches against one batch: the same gradients, a fraction of the activation peak.
void accumulation(Lab& lab, const nn::ImageDataset& data) {
  std::printf("\n(a) gradient accumulation: MLP 784-256-256-10 on %lld Fashion-MNIST images\n",
              static_cast<long long>(lab.quick ? 64 : 256));
  const int64_t batch = lab.quick ? 64 : 256;
  manual_seed(3);
  nn::MLP model({784, 256, 256, 10});
  model.to(lab.device);
  std::vector<double> big;
  report::Series peaks("activation peak"), one_over_n("peak of the big batch / N");
  int64_t big_peak = 0;
  std::printf("  %12s %12s %18s %16s\n", "micro-batches", "of size", "activation peak", "max |grad diff|");
  for (int64_t parts : {1, 2, 4, 8, 16}) {
    for (const Tensor& p : model.parameters()) p.set_grad(Tensor());
    const int64_t before = memory_stats(lab.device)[Category::Activation].current_bytes;
    reset_peak_memory(lab.device);
    // The window of 4 as a picture: one hump of activations per micro-batch, each freed by its backward.
    std::optional<MemoryTimeline> timeline;
    if (parts == 4) timeline.emplace(lab.device);
    int64_t begin = 0;
    for (int64_t size : examples::micro_batch_sizes(batch, parts)) {
      // Only this micro-batch's input lives (a copy, not a view: the first Linear saves its input,
      // and a saved view keeps its whole storage, here the whole dataset, as an activation).
      const Tensor x = data.images.slice(0, begin, begin + size).clone().to(lab.device);
      const Tensor y = data.labels.slice(0, begin, begin + size).clone().to(lab.device);
      // The window's loss: every sample's loss summed, divided by the window's count (not per part).
      autograd::backward(cross_entropy(model(x), y, -100, "sum"), 1.0 / static_cast<double>(batch));
      begin += size;
    }
    const int64_t peak = memory_stats(lab.device)[Category::Activation].peak_bytes - before;
    if (timeline) {
      timeline->stop();
      write_memory_timeline_html(lab.path("accumulation_timeline.html"), *timeline,
                                 "One window of 4 micro-batches of " + std::to_string(batch / 4));
      std::printf("  picture: %s (the memory timeline of the window of 4)\n",
                  lab.path("accumulation_timeline.html").c_str());
    }
    const std::vector<double> g = grads_of(model.parameters());
    if (parts == 1) big = g, big_peak = peak;
    const double diff = max_abs_diff(g, big);
    std::printf("  %12lld %12lld %14.3f MiB %16.2e\n", static_cast<long long>(parts),
                static_cast<long long>(batch / parts), mib(peak), diff);
    peaks.x.push_back(static_cast<double>(parts));
    peaks.y.push_back(mib(peak));
    one_over_n.x.push_back(static_cast<double>(parts));
    one_over_n.y.push_back(mib(big_peak) / static_cast<double>(parts));
    if (parts == 1) continue;
    lab.claim(diff <= 1e-5, std::to_string(parts) + " micro-batches give the big batch's gradients (to 1e-5)");
    // Everything the tape saves scales with the micro-batch; the loss's own scalar does not.
    lab.claim(peak <= big_peak / parts + 4096,
              std::to_string(parts) + " micro-batches peak at one micro-batch's activations (" + format_bytes(peak) + ")");
  }
  lab.picture("accumulation.svg", {"Accumulation: activation peak per window of " + std::to_string(batch) + " samples",
                                   "micro-batches per window", "activation peak (MiB)", true, true,
                                   {peaks, one_over_n}});
}

// (b) Activation peak against depth, plain and with sqrt(N) segments; fitted exponents.
void depth(Lab& lab) {
  const int64_t width = lab.quick ? 64 : 256, batch = lab.quick ? 16 : 64;
  std::printf("\n(b) activation peak against depth: N x [Linear(%lld) + GELU], batch %lld\n",
              static_cast<long long>(width), static_cast<long long>(batch));
  std::vector<int> depths = {4, 8, 16, 32, 64};
  if (!lab.quick) depths.push_back(128);
  report::Series plain("none"), sqrt_n("sqrt");
  std::printf("  %6s %14s %14s %8s\n", "N", "none MiB", "sqrt MiB", "ratio");
  manual_seed(4);
  const Tensor x = randn({batch, width}, DType::f32, lab.device);
  for (int n : depths) {
    auto chain = linear_gelu_chain(n, width, lab.device);
    const auto forward_loss = [&] { return sum((*chain)(x)); };
    chain->set_checkpoint(autograd::CheckpointPolicy::parse("none"));
    const int64_t p = examples::step_activation_peak(lab.device, forward_loss);
    chain->set_checkpoint(autograd::CheckpointPolicy::parse("sqrt"));
    const int64_t s = examples::step_activation_peak(lab.device, forward_loss);
    std::printf("  %6d %14.3f %14.3f %8.3f\n", n, mib(p), mib(s), static_cast<double>(s) / static_cast<double>(p));
    plain.x.push_back(n), plain.y.push_back(mib(p));
    sqrt_n.x.push_back(n), sqrt_n.y.push_back(mib(s));
  }
  const double e_plain = fitted_exponent(plain.x, plain.y), e_sqrt = fitted_exponent(sqrt_n.x, sqrt_n.y);
  std::printf("  fitted: peak ~ N^%.2f plain, N^%.2f with sqrt N segments\n", e_plain, e_sqrt);
  lab.claim(std::fabs(e_plain - 1.0) < 0.1, "plain activations grow as N^1 (fitted " + std::to_string(e_plain) + ")");
  lab.claim(std::fabs(e_sqrt - 0.5) < 0.15, "with sqrt N segments they grow as N^0.5 (fitted " + std::to_string(e_sqrt) + ")");
  lab.picture("depth.svg", {"Activation peak against depth (log-log)", "blocks N", "activation peak (MiB)", true, true,
                            {plain, sqrt_n}});
}

// (c) What recomputation costs: a checkpointed step against the plain one and against F.
void recompute(Lab& lab) {
  const int64_t width = lab.quick ? 64 : 512, batch = lab.quick ? 16 : 128;
  std::printf("\n(c) the cost of recomputation: N x [Linear(%lld) + GELU], batch %lld, median of %d rounds\n",
              static_cast<long long>(width), static_cast<long long>(batch), lab.steps);
  std::printf("  %6s %12s %12s %12s %10s %14s %8s\n", "N", "forward ms", "none ms", "every:1 ms", "measured",
              "(F+step)/step", "theory");
  report::Series measured("every:1 step / plain step"), predicted("(F + step) / step, F measured"),
      theory("4/3 (backward = 2 forwards)");
  manual_seed(5);
  const Tensor x = randn({batch, width}, DType::f32, lab.device);
  for (int n : lab.quick ? std::vector<int>{8, 16} : std::vector<int>{16, 32, 64}) {
    auto chain = linear_gelu_chain(n, width, lab.device);
    const auto forward_loss = [&] { return sum((*chain)(x)); };
    const auto step = [&] { autograd::backward(forward_loss()); };
    // Rounds of forward, plain step and checkpointed step (every block its own segment, the last
    // excepted: one extra forward of all but one block), so that a drifting machine drifts for all.
    std::vector<double> fs, plains, ckpts;
    for (int round = 0; round <= lab.steps; ++round) {  // round 0 warms up
      const double f = bench::timed_ms(lab.device, [&] { Tensor l = forward_loss(); });
      chain->set_checkpoint(autograd::CheckpointPolicy::parse("none"));
      const double p = bench::timed_ms(lab.device, step);
      chain->set_checkpoint(autograd::CheckpointPolicy::parse("every:1"));
      const double c = bench::timed_ms(lab.device, step);
      if (round > 0) fs.push_back(f), plains.push_back(p), ckpts.push_back(c);
    }
    const double f = bench::median(fs), plain = bench::median(plains), ckpt = bench::median(ckpts);
    std::printf("  %6d %12.2f %12.2f %12.2f %10.3f %14.3f %8.3f\n", n, f, plain, ckpt, ckpt / plain, (f + plain) / plain,
                4.0 / 3);
    measured.x.push_back(n), measured.y.push_back(ckpt / plain);
    predicted.x.push_back(n), predicted.y.push_back((f + plain) / plain);
    theory.x.push_back(n), theory.y.push_back(4.0 / 3);
  }
  lab.picture("recompute.svg", {"Checkpointed step time / plain step time", "blocks N", "ratio", true, false,
                                {measured, predicted, theory}});
}

// (d) Every policy on one chain: time against memory.
void policies(Lab& lab) {
  const int n = lab.quick ? 8 : 32;
  const int64_t width = lab.quick ? 64 : 512, batch = lab.quick ? 16 : 128;
  std::printf("\n(d) selective checkpointing and the planner against every:K and sqrt: %d x [Linear(%lld) + GELU], "
              "batch %lld\n",
              n, static_cast<long long>(width), static_cast<long long>(batch));
  manual_seed(6);
  auto chain = linear_gelu_chain(n, width, lab.device);
  const Tensor x = randn({batch, width}, DType::f32, lab.device);
  const std::vector<examples::PolicyRow> rows = examples::sweep_policies(
      *chain, lab.device, lab.steps, [&] { return sum((*chain)(x)); }, {1, 2, 4}, {0.2, 0.3, 0.4, 0.55, 0.75});
  examples::print_policy_table("  step time against activation peak", rows);
  const double plain_ms = rows.front().ms;
  report::Series every("every:K"), fixed("none, sqrt, selective", false),
      planned("planner at a budget");
  std::vector<std::tuple<double, double, std::string>> plan_points, every_points;
  for (const examples::PolicyRow& r : rows) {
    const double x_mib = mib(r.peak), y = r.ms / plain_ms;
    if (r.plan) {
      plan_points.emplace_back(x_mib, y, "");
      lab.claim(r.peak <= r.plan->budget_bytes,
                r.policy + ": measured peak " + format_bytes(r.peak) + " within the budget");
    } else if (r.policy.rfind("every:", 0) == 0) {
      every_points.emplace_back(x_mib, y, r.policy.substr(6));
    } else {
      fixed.x.push_back(x_mib), fixed.y.push_back(y), fixed.labels.push_back(r.policy);
    }
  }
  for (auto [points, series] : {std::make_pair(&plan_points, &planned), std::make_pair(&every_points, &every)}) {
    std::sort(points->begin(), points->end());  // a line from the least memory to the most
    for (const auto& [px, py, label] : *points) {
      series->x.push_back(px), series->y.push_back(py);
      if (!label.empty()) series->labels.push_back("K=" + label);
    }
  }
  lab.picture("policies.svg", {"Step time against activation peak", "activation peak (MiB)", "step time / plain",
                               false, false, {every, fixed, planned}});
}

// (e) Normalising by the window's count against averaging per micro-batch, on uneven windows.
void normalisation(Lab& lab, const nn::ImageDataset& data) {
  std::printf("\n(e) loss normalisation over a window of uneven micro-batches (k of 32 and one of 4)\n");
  manual_seed(7);
  nn::MLP model({784, 64, 10});
  model.to(lab.device);
  report::Series right("sum / window count"), naive("mean of micro-batch means");
  std::printf("  %8s %8s %22s %22s\n", "parts", "samples", "max |diff| sum/count", "max |diff| mean of means");
  for (int k : {1, 2, 3, 5, 7}) {
    std::vector<int64_t> sizes(static_cast<size_t>(k), 32);
    sizes.push_back(4);  // the short last micro-batch of an epoch
    int64_t total = 0;
    for (int64_t s : sizes) total += s;
    const Tensor x = data.images.slice(0, 0, total).clone().to(lab.device);
    const Tensor y = data.labels.slice(0, 0, total).clone().to(lab.device);
    auto grads = [&](const std::function<double(int64_t)>& scale_of) {
      for (const Tensor& p : model.parameters()) p.set_grad(Tensor());
      int64_t begin = 0;
      for (int64_t s : sizes) {
        autograd::backward(cross_entropy(model(x.slice(0, begin, begin + s)), y.slice(0, begin, begin + s), -100, "sum"),
                           scale_of(s));
        begin += s;
      }
      return grads_of(model.parameters());
    };
    for (const Tensor& p : model.parameters()) p.set_grad(Tensor());
    autograd::backward(cross_entropy(model(x), y, -100, "mean"));  // the big batch
    const std::vector<double> big = grads_of(model.parameters());
    const double by_count = max_abs_diff(grads([&](int64_t) { return 1.0 / static_cast<double>(total); }), big);
    const double by_parts = max_abs_diff(
        grads([&](int64_t s) { return 1.0 / (static_cast<double>(s) * static_cast<double>(sizes.size())); }), big);
    std::printf("  %8zu %8lld %22.2e %22.2e\n", sizes.size(), static_cast<long long>(total), by_count, by_parts);
    right.x.push_back(static_cast<double>(sizes.size())), right.y.push_back(std::max(by_count, 1e-12));
    naive.x.push_back(static_cast<double>(sizes.size())), naive.y.push_back(std::max(by_parts, 1e-12));
    if (sizes.size() > 1) {
      lab.claim(by_count <= 1e-5, std::to_string(sizes.size()) + " parts normalised by the window count: the big batch's gradient");
      lab.claim(by_parts > 100 * std::max(by_count, 1e-9),
                std::to_string(sizes.size()) + " parts averaged per micro-batch: a wrong gradient");
    }
  }
  lab.picture("normalisation.svg", {"Gradient error against the big batch (uneven micro-batches)",
                                    "micro-batches in the window", "max |gradient difference|", false, true,
                                    {right, naive}});
}

// (f) The same GPT in f32 and under bf16 autocast: what each category holds, and what training gives.
// The data is synthetic and learnable: each token's successor is one of two drawn from a fixed
// table (an entropy of at most log 2 per token once learnt, log 32 before).
void precision(Lab& lab) {
  nn::GPTConfig config;
  config.vocab_size = 32;
  config.block_size = 32;
  config.n_layer = lab.quick ? 4 : 8;  // sqrt N needs a few blocks to have segments to drop
  config.n_head = 2;
  config.n_embd = lab.quick ? 32 : 64;
  const int64_t B = lab.quick ? 8 : 16, T = config.block_size, steps = lab.quick ? 40 : 200;
  std::printf("\n(f) mixed precision: GPT n_layer %lld, n_embd %lld, batch %lld x %lld tokens, %lld AdamW steps "
              "on a synthetic two-successor language, f32 against bf16 autocast\n",
              static_cast<long long>(config.n_layer), static_cast<long long>(config.n_embd),
              static_cast<long long>(B), static_cast<long long>(T), static_cast<long long>(steps));
  std::mt19937_64 table_rng(11);
  std::vector<std::array<int64_t, 2>> next(static_cast<size_t>(config.vocab_size));
  for (auto& n : next) n = {static_cast<int64_t>(table_rng() % 32), static_cast<int64_t>(table_rng() % 32)};
  // (B, T + 1) token streams from `seed`: inputs are the first T, targets the last T.
  const auto batch = [&](uint64_t seed) {
    std::mt19937_64 rng(seed);
    std::vector<int64_t> x, y;
    for (int64_t b = 0; b < B; ++b) {
      int64_t t = static_cast<int64_t>(rng() % 32);
      for (int64_t i = 0; i < T; ++i) {
        x.push_back(t);
        t = next[static_cast<size_t>(t)][rng() % 2];
        y.push_back(t);
      }
    }
    return std::make_pair(from_vector<int64_t>(x, {B, T}).to(lab.device),
                          from_vector<int64_t>(y, {B, T}).to(lab.device));
  };
  struct Row {
    std::string name;
    std::optional<DType> low;
    int64_t param = 0, grad = 0, state = 0, activation = 0, activation_sqrt = 0;
    double val_loss = 0;
  };
  std::vector<Row> rows = {{"f32", std::nullopt}, {"bf16", DType::bf16}};
  for (Row& r : rows) {
    manual_seed(5);  // the same initial weights for both
    nn::GPT gpt(config);
    gpt.to(lab.device);
    optim::AdamW opt(gpt.parameters(), 3e-3);
    const auto loss_of = [&](const std::pair<Tensor, Tensor>& b) {
      autograd::Autocast amp(r.low);
      return gpt.loss(b.first, b.second);
    };
    for (int64_t s = 0; s < steps; ++s) {
      autograd::backward(loss_of(batch(100 + static_cast<uint64_t>(s))));
      opt.step();
      opt.zero_grad();
    }
    {
      autograd::NoGrad no_grad;
      double sum = 0;
      for (uint64_t v = 0; v < 4; ++v) sum += loss_of(batch(900000 + v)).item();
      r.val_loss = sum / 4;
    }
    const std::pair<Tensor, Tensor> b = batch(7);
    r.activation = examples::step_activation_peak(lab.device, [&] { return loss_of(b); });
    gpt.set_checkpoint(autograd::CheckpointPolicy::parse("sqrt"));
    r.activation_sqrt = examples::step_activation_peak(lab.device, [&] { return loss_of(b); });
    gpt.set_checkpoint(autograd::CheckpointPolicy::parse("none"));
    const MemoryStats m = memory_stats(lab.device);
    r.param = m[Category::Parameter].current_bytes;
    r.grad = m[Category::Gradient].current_bytes;
    r.state = m[Category::OptimizerState].current_bytes;
    const std::string file = "precision_" + r.name + "_timeline.html";
    {
      MemoryTimeline timeline(lab.device);
      autograd::backward(loss_of(b));
      timeline.stop();
      write_memory_timeline_html(lab.path(file), timeline, "one GPT step, " + r.name);
    }
    std::printf("  picture: %s\n", lab.path(file).c_str());
    for (const Tensor& p : gpt.parameters()) p.set_grad(Tensor());
  }
  std::printf("  %-6s %16s %12s %16s %18s %18s %10s\n", "", "param (masters)", "gradient", "optimizer state",
              "activation peak", "activation, sqrt", "val loss");
  for (const Row& r : rows)
    std::printf("  %-6s %16s %12s %16s %18s %18s %10.4f\n", r.name.c_str(), format_bytes(r.param).c_str(),
                format_bytes(r.grad).c_str(), format_bytes(r.state).c_str(), format_bytes(r.activation).c_str(),
                format_bytes(r.activation_sqrt).c_str(), r.val_loss);
  const Row &f32 = rows[0], &bf16 = rows[1];
  std::printf("  bf16 / f32: activation peak %.3f, with sqrt %.3f of the f32 plain peak; val loss %+.2f %%\n",
              static_cast<double>(bf16.activation) / static_cast<double>(f32.activation),
              static_cast<double>(bf16.activation_sqrt) / static_cast<double>(f32.activation),
              100 * (bf16.val_loss / f32.val_loss - 1));
  lab.claim(bf16.param == f32.param && bf16.grad == f32.grad && bf16.state == f32.state,
            "bf16 autocast keeps f32 parameters (the masters), f32 gradients and f32 optimizer state");
  lab.claim(bf16.activation <= 0.6 * static_cast<double>(f32.activation),
            "bf16 autocast's activation peak at most 0.6x f32's (" + format_bytes(bf16.activation) + " against " +
                format_bytes(f32.activation) + ")");
  lab.claim(bf16.activation_sqrt < bf16.activation, "sqrt N recomputation lowers the bf16 peak further (" +
                                                        format_bytes(bf16.activation_sqrt) + ")");
  report::Series plain("no recomputation", false), sqrt_n("sqrt N", false);
  for (const Row& r : rows) {
    plain.x.push_back(r.val_loss), plain.y.push_back(mib(r.activation)), plain.labels.push_back(r.name);
    sqrt_n.x.push_back(r.val_loss), sqrt_n.y.push_back(mib(r.activation_sqrt)), sqrt_n.labels.push_back(r.name);
  }
  lab.picture("precision.svg", {"f32 against bf16 autocast: the same GPT, the same steps",
                                "validation loss after training", "activation peak (MiB)", false, false,
                                {plain, sqrt_n}});
}

// (g) Keep, recompute or offload, at one budget, on cuda:0: the same chain under five plans.
void offload(Lab& lab) {
  const Device device("cuda:0");
  const int n = lab.quick ? 8 : 16;
  const int64_t width = lab.quick ? 64 : 256, batch = lab.quick ? 16 : 64;
  std::printf("\n(g) keep, recompute or offload: %d x [Linear(%lld) + GELU], batch %lld, on %s (host link %.1f GB/s)\n",
              n, static_cast<long long>(width), static_cast<long long>(batch), device.str().c_str(),
              autograd::host_link_bytes_per_s(device) * 1e-9);
  manual_seed(8);
  auto chain = linear_gelu_chain(n, width, device);
  const Tensor x = randn({batch, width}, DType::f32, device);
  const auto forward_loss = [&] { return sum((*chain)(x)); };
  const int64_t plain = examples::step_activation_peak(device, forward_loss);
  const int64_t budget = static_cast<int64_t>(0.4 * static_cast<double>(plain));
  std::printf("  plain activation peak %s; budget 40 %% of it: %s\n", format_bytes(plain).c_str(), format_bytes(budget).c_str());
  using autograd::CheckpointPolicy;
  using autograd::OffloadMode;
  std::vector<examples::PlanRow> rows = {
      {"keep-all", CheckpointPolicy::parse("none"), OffloadMode::None},
      {"sqrt", CheckpointPolicy::parse("sqrt"), OffloadMode::None},
      {"sqrt+offload", CheckpointPolicy::parse("sqrt"), OffloadMode::Boundaries},
      {"planner", CheckpointPolicy::budget(budget), OffloadMode::None},
      {"planner+offload", CheckpointPolicy::budget(budget), OffloadMode::Auto}};
  examples::measure_plans(*chain, device, lab.steps, forward_loss, rows);
  examples::print_plan_table("  device activation peak, host bytes and step time (predicted: keep-all's measured "
                             "step + the plan's predicted recompute and unhidden copy)",
                             rows);
  report::Series measured("measured", false), predicted("predicted", false);
  for (const examples::PlanRow& r : rows) {
    if (r.budgeted())
      lab.claim(r.peak <= r.budget(), r.name + ": measured device peak " + format_bytes(r.peak) + " within the budget " +
                                          format_bytes(r.budget()));
    lab.claim(r.identical, r.name + ": gradients bit-identical to keep-all");
    measured.x.push_back(mib(r.peak)), measured.y.push_back(r.ms / rows[0].ms), measured.labels.push_back(r.name);
    predicted.x.push_back(mib(r.predicted.peak_bytes));
    predicted.y.push_back((rows[0].ms + (r.predicted.time_ns() - rows[0].predicted.time_ns()) * 1e-6) / rows[0].ms);
    // The picture of one step: the device's categories over time (offloaded host bytes beside them
    // where the page draws the host side).
    examples::apply_plan(*chain, r);
    autograd::backward(forward_loss());  // untimed: the pinned pool and the caches are warm
    for (const Tensor& p : chain->parameters()) p.set_grad(Tensor());
    reset_peak_memory(device);
    std::string file = "offload_" + r.name + "_timeline.html";
    std::replace(file.begin(), file.end(), '+', '_');
    {
      MemoryTimeline timeline(device);
      autograd::backward(forward_loss());
      timeline.stop();
      write_memory_timeline_html(lab.path(file), timeline, r.name + ": one step, runs " + examples::runs_str(r.runs));
    }
    std::printf("  picture: %s\n", lab.path(file).c_str());
  }
  chain->set_offload(OffloadMode::None);
  chain->set_checkpoint(CheckpointPolicy::parse("none"));
  lab.picture("offload.svg", {"Keep, recompute or offload at a budget of 40 % of the plain peak",
                              "device activation peak (MiB)", "step time / keep-all", false, false,
                              {measured, predicted}});
}

}  // namespace

int main(int argc, char** argv) {
  Lab lab;
  lab.out = "memory_lab";
  std::string device = "cpu", data_dir = nn::kFashionMnistDir;
  CLI::App app{"memory_lab: where backprop memory goes, demonstrated by measurement (docs/memory.md)."};
  app.add_option("--device", device, "cpu or cuda (not meta: the claims need values and times)")->capture_default_str();
  app.add_option("--out", lab.out, "folder for the pictures")->capture_default_str();
  app.add_option("--steps", lab.steps, "timed rounds per measurement (median)")->capture_default_str()->check(CLI::PositiveNumber);
  app.add_flag("--quick", lab.quick, "small sizes: seconds instead of a minute (for tests)");
  app.add_option("--data-dir", data_dir, "folder of the Fashion-MNIST IDX files")->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  try {
    lab.device = Device(device);
    // Its claims compare values (gradients, losses) and measured times, which a dry run has not.
    REEL_CHECK(!lab.device.is_meta(), "memory_lab: --device meta computes nothing, and the lab's claims compare "
               "gradients, losses and measured times; run it on cpu or cuda (char_gpt and fashion_mnist_mlp/cnn take "
               "--device meta for a dry run's memory and predicted step)");
    std::filesystem::create_directories(lab.out);
    nn::ImageDataset data;
    {  // the first 512 test images are all the lab uses: the rest would only crowd the timeline
      const nn::ImageDataset test = nn::load_fashion_mnist("test", data_dir);
      data.images = test.images.slice(0, 0, 512).clone();
      data.labels = test.labels.slice(0, 0, 512).clone();
    }
    allocator_for(Device::cpu()).empty_cache();
    accumulation(lab, data);
    depth(lab);
    recompute(lab);
    policies(lab);
    normalisation(lab, data);
    precision(lab);
    if (cuda_available()) offload(lab);
    else std::printf("\n(g) skipped: no cuda device in this build (offload moves device memory to the host)\n");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "memory_lab: %s\n", e.what());
    return 1;
  }
  if (!lab.failures.empty()) {
    std::fprintf(stderr, "memory_lab: %zu claims failed, the first: %s\n", lab.failures.size(), lab.failures[0].c_str());
    return 1;
  }
  std::printf("\nmemory_lab: every memory claim holds; pictures in %s\n", lab.out.c_str());
  return 0;
}
