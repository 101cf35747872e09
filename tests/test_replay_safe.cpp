// Replay-safe training steps (docs/design.md, "Replay-safe steps"): a CUDA graph captured once
// replays every kernel with the by-value parameters it was captured with, so nothing that changes
// from one optimizer step to the next may reach a kernel by value. Here two consecutive steps of a
// small GPT with everything that varies per step (an lr schedule, dropout, 4 micro-batches, sqrt
// checkpointing, bf16 autocast with the loss scaler, clipping) log every launch's kernel, sizes and
// by-value parameters (kernels::cuda::LaunchLog; device addresses left out) on emulated cuda and on
// meta, and the logs must be equal.
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/cuda/launch.h"
#include "reel.h"
#include "testing.h"

using namespace reel;

namespace {

struct Batch {
  Tensor x, y;
};

// One GPT trained by an Accumulator; step() runs one window and returns the launches it made.
struct Run {
  Device device;
  nn::GPT gpt;
  optim::AdamW opt;
  optim::WarmupCosineLr schedule{1e-2, 1e-3, 3, 20};  // a different rate every step
  optim::GradScaler scaler;
  optim::Accumulator acc;
  std::vector<Batch> micro;

  static nn::GPTConfig config() {
    nn::GPTConfig c{/*vocab_size*/ 11, /*block_size*/ 8, /*n_layer*/ 4, /*n_head*/ 2, /*n_embd*/ 16};
    c.dropout = 0.1;
    return c;
  }
  static nn::GPT& placed(nn::GPT& g, Device d) {
    g.to(d);
    g.train();
    g.set_checkpoint(nn::CheckpointPolicy::parse("sqrt"));
    return g;
  }
  explicit Run(Device d)
      : device(d),
        gpt((manual_seed(7), config())),
        opt(placed(gpt, d).parameters(), 1e-2),
        acc(opt, {/*clip_norm*/ 1.0, &schedule, /*skip_nonfinite*/ false, nullptr, &scaler}) {
    for (int i = 0; i < 4; ++i) {  // 4 micro-batches of 2 sequences of 8 tokens
      const Tensor ids = testing::random_ids(2, 9, 11, 100 + static_cast<uint64_t>(i), d);
      micro.push_back({untracked::slice(ids, 1, 0, 8).contiguous(), untracked::slice(ids, 1, 1, 9).contiguous()});
    }
  }
  std::vector<kernels::cuda::LaunchLog::Entry> step() {
    kernels::cuda::LaunchLog log;
    kernels::cuda::launch_log = &log;
    const optim::WindowResult r = acc.step<Batch>(
        micro, [](const Batch& b) { return b.y.numel(); },
        [&](const Batch& b) {
          autograd::Autocast amp(DType::bf16);
          // The composed loss: GPT::loss's fused linear_cross_entropy sums its rows on the host
          // and hands the sum to a fill by value (autograd/ops/linear_cross_entropy.h), not
          // replay-safe yet.
          return cross_entropy(gpt(b.x), b.y, -100, "sum");
        });
    kernels::cuda::launch_log = nullptr;
    return log.entries;
  }
};

std::string describe(const kernels::cuda::LaunchLog::Entry& e) {
  std::string s = e.kernel + " <<<" + std::to_string(e.grid[0]) + "," + std::to_string(e.block[0]) + ">>> (";
  for (const auto& p : e.params) {
    s += " ";
    char hex[3];
    for (unsigned char b : p) std::snprintf(hex, sizeof hex, "%02x", b), s += hex;
  }
  return s + " )";
}

// The step's launches with every device address (an aligned 8-byte word in [2^32, 2^47): user-space
// addresses; the doubles and counts of a launch fall outside it) replaced by 1: an eager step need not
// get the same blocks as the last, nor reuse a freed block for the same tensor (a captured graph gets
// its own pool), so only what is not an address is compared.
std::vector<kernels::cuda::LaunchLog::Entry> without_addresses(std::vector<kernels::cuda::LaunchLog::Entry> log) {
  for (auto& e : log)
    for (auto& p : e.params)
      for (size_t at = 0; at + 8 <= p.size(); at += 8) {
        uint64_t w;
        std::memcpy(&w, p.data() + at, 8);
        if (w < (uint64_t{1} << 32) || w >= (uint64_t{1} << 47)) continue;
        w = 1;
        std::memcpy(p.data() + at, &w, 8);
      }
  return log;
}

// The first difference between two steps' launches, "" when they are the same.
std::string first_difference(const std::vector<kernels::cuda::LaunchLog::Entry>& a,
                             const std::vector<kernels::cuda::LaunchLog::Entry>& b) {
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    const bool same = a[i].kernel == b[i].kernel && a[i].params == b[i].params && a[i].shmem == b[i].shmem &&
                      std::equal(a[i].grid, a[i].grid + 3, b[i].grid) &&
                      std::equal(a[i].block, a[i].block + 3, b[i].block);
    if (!same) {
      std::string others;  // every other kernel that differs too, once
      for (size_t j = i + 1; j < a.size() && j < b.size(); ++j)
        if ((a[j].kernel != b[j].kernel || a[j].params != b[j].params) && others.find(a[j].kernel) == std::string::npos)
          others += "\n  " + describe(a[j]) + "\n  " + describe(b[j]);
      return "launch " + std::to_string(i) + ":\n  " + describe(a[i]) + "\n  " + describe(b[i]) +
             "\n  later differences:" + others;
    }
  }
  if (a.size() != b.size()) return std::to_string(a.size()) + " launches, then " + std::to_string(b.size());
  return "";
}

}  // namespace

TEST_CASE("two steady training steps launch the same kernels with the same by-value parameters") {
  std::vector<Device> devices{Device::meta()};
  if (cuda_available()) devices.push_back(Device::cuda(0));
  for (Device d : devices) {
    CAPTURE(d);
    Run run(d);
    run.step();  // the first step allocates the optimizer's state and the device scalars
    const auto second = without_addresses(run.step());
    const auto third = without_addresses(run.step());
    REQUIRE(!second.empty());
    bool dropout = false;
    for (const auto& e : second) dropout = dropout || e.kernel == "dropout_mask_kernel";
    CHECK(dropout);
    const std::string diff = first_difference(second, third);
    CHECK_MESSAGE(diff.empty(), diff);
  }
}
