// The meta device (core/device.h, kernels/meta.h): tensors with no data whose memory, kernels and
// costs are cuda:0's exactly. A step run on meta allocates what the same step on emulated cuda:0
// allocates, in the same order and categories, and records the same kernels with the same costs
// (so the predicted step is the same); its values read back as zeros; nothing dereferences its
// memory (each allocation is an inaccessible mapping: a read would fault, under ASan too).
#include <algorithm>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "autograd/autocast.h"
#include "autograd/functions.h"
#include "autograd/nn_functions.h"
#include "autograd/tape.h"
#include "core/allocator.h"
#include "core/stream.h"
#include "autograd/offload.h"
#include "nn/gpt.h"
#include "nn/layers.h"
#include "nn/sequential.h"
#include "optim/accumulator.h"
#include "optim/grad_scaler.h"
#include "optim/optimizer.h"
#include "report/predict.h"
#include "report/profile.h"
#include "testing.h"

using namespace reel;
using profile::KernelRecord;

#if defined(REEL_CUDA_EMULATED)
REEL_TEST_REQUIRES_CUDA();  // meta runs the emulated CUDA backend dry

namespace {

struct Step {
  std::vector<KernelRecord> kernels;
  MemoryStats memory;
  int64_t host_offloaded_peak = 0;  // the pinned pool's Offloaded peak: the process's, or meta's own
  double loss = 0;
};

struct Levers {
  std::string policy = "none";
  std::optional<DType> autocast;
  autograd::OffloadMode offload = autograd::OffloadMode::None;
  int micro_batches = 1;  // accumulated into each optimizer step
};

// Two optimizer steps of a tiny GPT on `device` (parameters made on the host from one seed, then
// moved) under `levers`, profiled; the device's statistics after.
Step gpt_steps(Device device, const Levers& levers) {
  nn::GPTConfig c{/*vocab_size*/ 13, /*block_size*/ 8, /*n_layer*/ 4, /*n_head*/ 2, /*n_embd*/ 16};
  manual_seed(7);
  nn::GPT gpt(c);
  gpt.to(device);
  gpt.set_checkpoint(nn::CheckpointPolicy::parse(levers.policy));
  if (levers.offload != autograd::OffloadMode::None) gpt.set_offload(levers.offload);
  optim::AdamW opt(gpt.parameters(), 1e-3);
  const Tensor ids = reel::testing::random_ids(2, 8, 13, 1, device), targets = reel::testing::random_ids(2, 8, 13, 2, device);
  // Both devices share the emulated copy stream, where a query runs one queued item: start each run
  // with it empty, so that what an earlier run left there does not delay this one's copies.
  Stream::copy(device).synchronize();
  reset_peak_memory(device);
  pinned_allocator(device).reset_peak();
  Step s;
  Profiler prof;
  for (int step = 0; step < 2; ++step) {
    for (int micro = 0; micro < levers.micro_batches; ++micro) {
      Tensor loss;
      {
        autograd::Autocast cast(levers.autocast);
        loss = cross_entropy(gpt(ids), targets);
      }
      autograd::backward(loss, 1.0 / levers.micro_batches);
      s.loss = loss.item();
    }
    opt.step();
    opt.zero_grad();
  }
  prof.stop();
  s.kernels = prof.kernels();
  s.memory = memory_stats(device);
  s.host_offloaded_peak = pinned_memory_stats(device)[Category::Offloaded].peak_bytes;
  return s;
}

// Two SGD steps of a small CNN (convolution, batch norm, max pooling: the cuDNN paths) on `device`.
Step cnn_steps(Device device) {
  manual_seed(5);
  nn::Sequential net;
  net.push_back(std::make_shared<nn::Conv2d>(1, 4, 3, 1, 1, 1, 1, false));
  net.push_back(std::make_shared<nn::BatchNorm2d>(4));
  net.push_back(std::make_shared<nn::ReLU>());
  net.push_back(std::make_shared<nn::MaxPool2d>(2));
  net.push_back(std::make_shared<nn::Flatten>());
  net.push_back(std::make_shared<nn::Linear>(4 * 4 * 4, 3));
  net.to(device);
  optim::SGD::Options momentum;
  momentum.momentum = 0.9;
  optim::SGD opt(net.parameters(), 0.1, momentum);
  Generator g(9);
  const Tensor x = randn({2, 1, 8, 8}, DType::f32, Device::cpu(), &g).to(device);
  const Tensor y = from_vector<int64_t>({0, 2}, {2}, device);
  reset_peak_memory(device);
  Step s;
  Profiler prof;
  for (int step = 0; step < 2; ++step) {
    const Tensor loss = cross_entropy(net(x), y);
    autograd::backward(loss);
    opt.step();
    opt.zero_grad();
    s.loss = loss.item();
  }
  prof.stop();
  s.kernels = prof.kernels();
  s.memory = memory_stats(device);
  return s;
}

void check_same_step(const Step& cuda, const Step& meta) {
  // Where the two sequences part, first: the kernel each device ran there.
  size_t same = 0;
  while (same < std::min(cuda.kernels.size(), meta.kernels.size()) &&
         cuda.kernels[same].kernel == meta.kernels[same].kernel)
    ++same;
  INFO("first difference at record " << same << ": "
                                     << (same < cuda.kernels.size() ? cuda.kernels[same].kernel : "(end)") << " on cuda, "
                                     << (same < meta.kernels.size() ? meta.kernels[same].kernel : "(end)") << " on meta");
  REQUIRE(cuda.kernels.size() == meta.kernels.size());
  for (size_t i = 0; i < cuda.kernels.size(); ++i) {
    const KernelRecord &a = cuda.kernels[i], &b = meta.kernels[i];
    INFO("record " << i << ": " << a.kernel << " (" << a.op << ") on cuda, " << b.kernel << " (" << b.op
                   << ") on meta");
    CHECK(a.kernel == b.kernel);
    CHECK(a.op == b.op);
    CHECK(a.phase == b.phase);
    CHECK(a.node == b.node);
    CHECK(a.shapes == b.shapes);
    CHECK(a.dtype == b.dtype);
    CHECK(a.stream == b.stream);
    CHECK(a.cost.flops == b.cost.flops);
    CHECK(a.cost.bytes_read == b.cost.bytes_read);
    CHECK(a.cost.bytes_written == b.cost.bytes_written);
    for (int c = 0; c < kNumCategories; ++c) {  // the bytes by category in use at each launch
      INFO("in use at the launch: " << std::string(category_name(static_cast<Category>(c))));
      CHECK(a.memory[static_cast<size_t>(c)] == b.memory[static_cast<size_t>(c)]);
    }
    CHECK(b.device == (a.device.is_cpu() ? Device::cpu() : Device::meta()));  // host work stays on the host
  }
  for (int c = 0; c < kNumCategories; ++c) {
    INFO("category " << std::string(category_name(static_cast<Category>(c))));
    CHECK(cuda.memory.by_category[c].peak_bytes == meta.memory.by_category[c].peak_bytes);
    CHECK(cuda.memory.by_category[c].alloc_count == meta.memory.by_category[c].alloc_count);
  }
  CHECK(cuda.memory.peak_bytes == meta.memory.peak_bytes);
  CHECK(cuda.host_offloaded_peak == meta.host_offloaded_peak);  // the host side, in meta's own pool
  CHECK(cuda.memory.model_state_peak_bytes == meta.memory.model_state_peak_bytes);
  CHECK(meta.loss == 0.0);  // the placeholder of a value never computed
}

}  // namespace

TEST_CASE("meta device: parsed, printed, and made from a spec") {
  CHECK(Device("meta") == Device::meta());
  CHECK(Device::meta().str() == "meta");
  CHECK(Device::meta().is_meta());
  CHECK_FALSE(Device::meta().is_cuda());
  CHECK_FALSE(Device::meta().is_cpu());
  CHECK_REEL_ERROR((void)Device("meta:1"), "cpu, cuda, cuda:N or meta");
}

TEST_CASE("meta device: a GPT's steps allocate and launch exactly what cuda:0's do") {
  for (const std::string policy : {"none", "sqrt", "selective"}) {
    INFO("policy " << policy);
    Levers levers;
    levers.policy = policy;
    const Step cuda = gpt_steps(Device::cuda(0), levers);
    const Step meta = gpt_steps(Device::meta(), levers);
    CHECK(cuda.loss != 0.0);
    check_same_step(cuda, meta);
  }
}

TEST_CASE("meta device: the same under bf16 autocast, accumulation and offload") {
  Levers bf16;
  bf16.policy = "every:2";
  bf16.autocast = DType::bf16;
  Levers accumulated;
  accumulated.policy = "sqrt";
  accumulated.micro_batches = 3;
  Levers offloaded;
  offloaded.policy = "sqrt";
  offloaded.offload = autograd::OffloadMode::Boundaries;
  Levers all;
  all.offload = autograd::OffloadMode::All;
  for (const Levers& levers : {bf16, accumulated, offloaded, all}) {
    INFO("policy " << levers.policy << ", " << levers.micro_batches << " micro-batches, offload "
                   << std::string(autograd::offload_mode_name(levers.offload)));
    const Step cuda = gpt_steps(Device::cuda(0), levers), meta = gpt_steps(Device::meta(), levers);
    if (levers.offload != autograd::OffloadMode::None) CHECK(meta.host_offloaded_peak > 0);
    check_same_step(cuda, meta);
  }
}

TEST_CASE("meta device: a CNN's steps (cuDNN's convolution, batch norm, pooling) as cuda:0's") {
  check_same_step(cnn_steps(Device::cuda(0)), cnn_steps(Device::meta()));
}

TEST_CASE("meta device: tensors have sizes and storage, their values read as zeros") {
  const int64_t before = memory_stats(Device::meta()).current_bytes;
  Tensor a = randn({64, 32}, DType::f32, Device::meta());
  const Tensor b = full({32, 8}, 3.0, DType::f32, Device::meta());
  CHECK(a.device() == Device::meta());
  CHECK(a.shape() == Shape{64, 32});
  CHECK(memory_stats(Device::meta()).current_bytes - before >= 64 * 32 * 4 + 32 * 8 * 4);
  const Tensor c = matmul(a, b);  // runs nothing, allocates its output
  CHECK(c.shape() == Shape{64, 8});
  const Tensor host = c.to(Device::cpu());
  for (double v : reel::testing::values(host)) CHECK(v == 0.0);
  CHECK(sum(c).item() == 0.0);
  // From the host to meta and back: the data does not travel.
  const Tensor from_host = from_vector(std::vector<float>{1, 2, 3}, {3}, Device::meta());
  for (double v : reel::testing::values(from_host)) CHECK(v == 0.0);
  // Mixing devices is the usual error, naming both.
  CHECK_REEL_ERROR((void)matmul(a, randn({32, 8})), "meta");
}

TEST_CASE("meta device: clipping records the launches of a step that clips") {
  // A norm read back from meta is 0, which would never clip: a dry run assumes the clip binds, so
  // its step has the launches of the larger step (scale_ at 1).
  Tensor w = randn({4, 3}, DType::f32, Device::meta()).set_requires_grad();
  autograd::backward(sum(w * w));
  Profiler prof;
  CHECK(optim::clip_grad_norm({w}, 1.0) == 0.0);
  prof.stop();
  int scaled = 0;
  for (const KernelRecord& r : prof.kernels()) scaled += r.kernel == "scale_";
  CHECK(scaled == 1);
  CHECK(optim::clip_scales(0.5, Device::cuda(0)));
  CHECK_FALSE(optim::clip_scales(2.0, Device::cuda(0)));
  CHECK(optim::clip_scales(2.0, Device::meta()));
}

TEST_CASE("meta device: its pinned host side is a pool of its own, zero pages never written") {
  const int64_t process_before = pinned_memory_stats()[Category::Offloaded].current_bytes;
  {
    MemoryCategory offloaded(Category::Offloaded);
    PinnedBuffer host(size_t{1} << 30, Device::meta());  // 1 GiB: reserved, never resident
    const Tensor x = randn({256}, DType::f32, Device::meta());
    PinnedBuffer small(256 * 4, Device::meta());
    const Stream copy = Stream::copy(Device::meta());
    copy_async(x, small, copy);
    copy.synchronize();
    for (int i = 0; i < 256; ++i) CHECK(small.data_as<float>()[i] == 0.0f);  // a meta value reads 0
    CHECK(host.data_as<float>()[(size_t{1} << 28) - 1] == 0.0f);
    CHECK(pinned_memory_stats(Device::meta())[Category::Offloaded].current_bytes >= int64_t{1} << 30);
    CHECK(pinned_memory_stats()[Category::Offloaded].current_bytes == process_before);
  }
  CHECK(memory_report().find("pinned host memory (meta)") != std::string::npos);
}

TEST_CASE("meta device: the loss scaler never skips (a meta gradient reads finite), and grows as on a clean run") {
  nn::GPTConfig c{/*vocab_size*/ 13, /*block_size*/ 8, /*n_layer*/ 2, /*n_head*/ 2, /*n_embd*/ 16};
  DeviceScope on(Device::meta());
  nn::GPT gpt(c);
  optim::AdamW opt(gpt.parameters(), 1e-3);
  optim::GradScaler::Options grow_every_window;
  grow_every_window.growth_interval = 1;
  optim::GradScaler scaler(grow_every_window);
  optim::Accumulator::Options options;
  options.scaler = &scaler;
  options.clip_norm = 1.0;
  optim::Accumulator acc(opt, options);
  const double first_scale = scaler.scale();
  const std::vector<Tensor> batches{reel::testing::random_ids(2, 8, 13, 3, Device::meta())};
  for (int window = 0; window < 3; ++window) {
    const optim::WindowResult r = acc.step(
        batches, [](const Tensor& ids) { return ids.numel(); },
        [&](const Tensor& ids) {
          autograd::Autocast cast(DType::f16);
          return cross_entropy(gpt(ids), ids, -100, "sum");
        });
    CHECK(r.stepped);
    CHECK_FALSE(r.skipped_nonfinite);
  }
  CHECK(acc.skipped_steps() == 0);
  CHECK(scaler.scale() == first_scale * 8);  // three clean windows, each growing it
}

TEST_CASE("DeviceScope: modules made inside it live on its device; tensors keep naming theirs") {
  const int64_t host_params = memory_stats(Device::cpu())[Category::Parameter].current_bytes;
  const int64_t meta_params = memory_stats(Device::meta())[Category::Parameter].current_bytes;
  CHECK(default_device() == Device::cpu());
  {
    DeviceScope on(Device::meta());
    CHECK(default_device() == Device::meta());
    nn::GPTConfig c{/*vocab_size*/ 50257, /*block_size*/ 1024, /*n_layer*/ 2, /*n_head*/ 4, /*n_embd*/ 256};
    nn::GPT gpt(c);
    nn::BatchNorm2d norm(8);
    for (const Tensor& p : gpt.parameters()) CHECK(p.device() == Device::meta());
    for (const auto& named : norm.named_buffers()) CHECK(named.second.device() == Device::meta());
    CHECK(memory_stats(Device::cpu())[Category::Parameter].current_bytes == host_params);  // no host copy made
    CHECK(memory_stats(Device::meta())[Category::Parameter].current_bytes - meta_params >=
          static_cast<int64_t>(gpt.num_parameters()) * 4);
    CHECK(zeros({2}).device() == Device::cpu());  // factories take their device explicitly
    {
      DeviceScope nested(Device::cpu());
      CHECK(default_device() == Device::cpu());
    }
    CHECK(default_device() == Device::meta());
  }
  CHECK(default_device() == Device::cpu());
}

// A tiny GPT's budget plan on `device`, its units priced on `spec` (null: host times), under
// `offload` (auto: over the spec's host link); `budget` 0: halfway between the least peak and the
// plain one. The plan and the chain's costs it was made from.
std::pair<autograd::CheckpointPlan, autograd::ChainCost> gpt_budget_plan(
    Device device, const profile::DeviceSpec* spec, autograd::OffloadMode offload = autograd::OffloadMode::None,
    int64_t budget = 0) {
  nn::GPTConfig c{/*vocab_size*/ 13, /*block_size*/ 8, /*n_layer*/ 6, /*n_head*/ 2, /*n_embd*/ 16};
  manual_seed(7);
  nn::GPT gpt(c);
  gpt.to(device);
  gpt.set_offload(offload);
  gpt.set_cost_device(spec);
  const Tensor ids = reel::testing::random_ids(2, 8, 13, 1, device), targets = reel::testing::random_ids(2, 8, 13, 2, device);
  const auto forward_loss = [&] { return cross_entropy(gpt(ids), targets); };
  if (budget == 0) {  // measure once under a budget every plan meets, then ask for the middle
    gpt.set_checkpoint(nn::CheckpointPolicy::budget(int64_t{1} << 40));
    const autograd::CheckpointPlan& loose = gpt.plan_checkpoint(forward_loss);
    budget = (loose.least_peak_bytes + loose.plain_peak_bytes) / 2;
  }
  gpt.set_checkpoint(nn::CheckpointPolicy::budget(budget));
  const autograd::CheckpointPlan plan = gpt.plan_checkpoint(forward_loss);
  return {plan, *gpt.chain_cost()};
}

TEST_CASE("meta device: a budget plan priced on a GPU is emulated cuda:0's plan for it") {
  // Both price the same kernel records on the same spec, so the units' times, the link and the
  // plan are the same; host clocks (nothing on meta, the emulator's on cuda:0) play no part.
  const profile::DeviceSpec& h100 = profile::device_spec("h100");
  for (const autograd::OffloadMode offload : {autograd::OffloadMode::None, autograd::OffloadMode::Auto}) {
    INFO("offload " << std::string(autograd::offload_mode_name(offload)));
    const auto [cuda_plan, cuda_cost] = gpt_budget_plan(Device::cuda(0), &h100, offload);
    const auto [meta_plan, meta_cost] = gpt_budget_plan(Device::meta(), &h100, offload);
    REQUIRE(cuda_cost.units.size() == meta_cost.units.size());
    for (size_t i = 0; i < cuda_cost.units.size(); ++i) {
      INFO("unit " << i);
      CHECK(meta_cost.units[i].forward_ns == cuda_cost.units[i].forward_ns);
      CHECK(meta_cost.units[i].selective_ns == cuda_cost.units[i].selective_ns);
      CHECK(meta_cost.units[i].saved_bytes == cuda_cost.units[i].saved_bytes);
      CHECK(meta_cost.units[i].selective_bytes == cuda_cost.units[i].selective_bytes);
    }
    // Offload prices its copies over the spec's host link (none: no link, nothing offloaded).
    const double link = offload == autograd::OffloadMode::None ? 0 : h100.host_link_bytes_per_s;
    CHECK(meta_cost.host_bytes_per_s == link);
    CHECK(cuda_cost.host_bytes_per_s == link);
    CHECK(meta_cost.priced_on == "h100");
    CHECK(meta_plan.budget_bytes == cuda_plan.budget_bytes);
    REQUIRE(meta_plan.runs.size() == cuda_plan.runs.size());
    for (size_t k = 0; k < meta_plan.runs.size(); ++k) {
      const autograd::CheckpointPolicy::Run &m = meta_plan.runs[k], &c = cuda_plan.runs[k];
      CHECK(m.begin == c.begin);
      CHECK(m.end == c.end);
      CHECK(m.checkpointed == c.checkpointed);
      CHECK(m.selective == c.selective);
      CHECK(m.offloaded == c.offloaded);
      CHECK(m.lever == c.lever);
    }
    CHECK(meta_plan.predicted.peak_bytes == cuda_plan.predicted.peak_bytes);
    CHECK(meta_plan.predicted.time_ns() == cuda_plan.predicted.time_ns());
    CHECK(meta_plan.str() == cuda_plan.str());
    CHECK(meta_plan.str().find("times predicted on h100") != std::string::npos);
    CHECK(meta_plan.predicted.peak_bytes < meta_plan.plain_peak_bytes);
    // Without offload the budget (below the plain peak) is met by recomputing: a priced time.
    if (offload == autograd::OffloadMode::None) CHECK(meta_plan.predicted.recompute_ns > 0);
  }
}

TEST_CASE("meta device: a budget plan's unit times are the spec's predicted ones, and scale with it") {
  const profile::DeviceSpec& h100 = profile::device_spec("h100");
  profile::DeviceSpec slow = h100;  // every roof and the launch floor at half the speed
  slow.name = "h100-at-half";
  slow.bytes_per_s /= 2;
  slow.fp32_flops_per_s /= 2;
  slow.fp64_flops_per_s /= 2;
  slow.tf32_flops_per_s /= 2;
  slow.host_link_bytes_per_s /= 2;
  slow.launch_s *= 2;
  const auto fast = gpt_budget_plan(Device::meta(), &h100, autograd::OffloadMode::Auto);
  const auto half = gpt_budget_plan(Device::meta(), &slow, autograd::OffloadMode::Auto, fast.first.budget_bytes);
  const autograd::ChainCost &f = fast.second, &h = half.second;
  REQUIRE(f.units.size() == 6);
  for (size_t i = 0; i < f.units.size(); ++i) {
    INFO("unit " << i);
    // A block's forward launches about ten kernels: at least 3 us each on an H100 (this block is
    // that small), never the ~0 of meta's host clock.
    CHECK(f.units[i].forward_ns >= 5 * h100.launch_s * 1e9);
    CHECK(f.units[i].selective_ns > 0);
    CHECK(f.units[i].selective_ns < f.units[i].forward_ns);  // the kept matmuls are not recomputed
    CHECK(h.units[i].forward_ns == doctest::Approx(2 * f.units[i].forward_ns).epsilon(1e-12));
    CHECK(h.units[i].selective_ns == doctest::Approx(2 * f.units[i].selective_ns).epsilon(1e-12));
  }
  CHECK(h.host_bytes_per_s == f.host_bytes_per_s / 2);
}

TEST_CASE("meta device: a unit's priced time is the sum of its forward kernels' predicted times") {
  // One child (an MLP: Linear, GELU, Linear): its unit's time is what
  // core/kernel_price.h predicts for the kernels its forward launched, nothing else (the loss's
  // sum after the chain is not the unit's).
  const profile::DeviceSpec& h100 = profile::device_spec("h100");
  manual_seed(3);
  nn::Sequential net;
  net.push_back(std::make_shared<nn::MLP>(std::vector<int64_t>{64, 256, 64}, "gelu"));
  net.to(Device::meta());
  const Tensor x = randn({32, 64}, DType::f32, Device::meta());
  Profiler prof;
  (void)net(x);
  prof.stop();
  double expected_ns = 0;
  for (const KernelRecord& r : prof.kernels()) expected_ns += profile::predict_record(h100, r).seconds * 1e9;
  CHECK(expected_ns >= h100.launch_s * 1e9);
  net.set_cost_device(&h100);
  net.set_checkpoint(nn::CheckpointPolicy::budget(int64_t{1} << 30));
  net.plan_checkpoint([&] { return sum(net(x)); });
  REQUIRE(net.chain_cost()->units.size() == 1);
  CHECK(net.chain_cost()->units[0].forward_ns == doctest::Approx(expected_ns).epsilon(1e-12));
}

TEST_CASE("meta device: a budget plan without a GPU to price it on is a clear error") {
  nn::GPTConfig c{/*vocab_size*/ 13, /*block_size*/ 8, /*n_layer*/ 2, /*n_head*/ 2, /*n_embd*/ 16};
  manual_seed(7);
  nn::GPT gpt(c);
  gpt.to(Device::meta());
  gpt.set_checkpoint(nn::CheckpointPolicy::budget(int64_t{1} << 20));
  const Tensor ids = reel::testing::random_ids(2, 8, 13, 1, Device::meta()), targets = reel::testing::random_ids(2, 8, 13, 2, Device::meta());
  const auto forward_loss = [&] { return cross_entropy(gpt(ids), targets); };
  CHECK_REEL_ERROR(gpt.plan_checkpoint(forward_loss), "the meta device runs no kernel");
  CHECK_REEL_ERROR(gpt.plan_checkpoint(forward_loss), "set_cost_device");
  CHECK(gpt.checkpoint_plan() == nullptr);
  // Given one, it plans; taking it away again refuses again (and drops the plan).
  gpt.set_cost_device(&profile::device_spec("h100"));
  CHECK(gpt.plan_checkpoint(forward_loss).priced_on == "h100");
  gpt.set_cost_device(nullptr);
  CHECK(gpt.checkpoint_plan() == nullptr);
  CHECK_REEL_ERROR(gpt.plan_checkpoint(forward_loss), "--predict");
}

#else  // an nvcc build: no meta device, and saying so clearly

TEST_CASE("meta device: an nvcc build has none, and says so") {
  CHECK(Device("meta") == Device::meta());
  CHECK_REEL_ERROR((void)empty({2}, DType::f32, Device::meta()), "device meta is not available");
}

#endif
