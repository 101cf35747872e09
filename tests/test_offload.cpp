// autograd::Offload on emulated cuda (kernels/simt: copies are host copies, the copy stream runs
// only when something waits for it or asks about it): saves offloaded to pinned host memory come
// back bit-identical (an MLP with dropout, a GPT) with All and with Boundaries under checkpoint
// policies, backward inside or after the scope; a planted missing event wait is caught; the version
// error through an offloaded save is the plain one; host memory is returned at the end of each step
// and the pinned pool reused over 1,000 steps; accumulation frees each micro-batch's host copies
// before the next forward; the device activation peak drops; views of one storage share one copy;
// Scope prefetch brings a scope back whole with the one before it; the cpu refusal, at set_offload
// too; a caller-held input comes back as the caller's storage, not a second device copy; the bound
// on the bytes waiting for their copy out is honoured, its stalls counted, recorded and priced.
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "autograd/functions.h"
#include "autograd/nn_functions.h"
#include "autograd/offload.h"
#include "autograd/tape.h"
#include "core/allocator.h"
#include "core/stream.h"
#include "nn/gpt.h"
#include "nn/sequential.h"
#include "report/predict.h"
#include "testing.h"

using namespace reel;
using reel::testing::same_bits;

REEL_TEST_REQUIRES_CUDA();

namespace {

const Device kCuda = Device::cuda(0);

std::shared_ptr<nn::MLP> make_mlp(Device d, std::vector<int64_t> widths = {24, 32, 32, 32, 32, 32, 32, 10}) {
  manual_seed(11);
  auto mlp = std::make_shared<nn::MLP>(widths, "gelu", 0.1);
  mlp->to(d);
  return mlp;
}

Tensor batch(int64_t rows, int64_t cols, Device d, uint64_t seed = 3) {
  Generator data(seed);
  return randn({rows, cols}, DType::f32, Device::cpu(), &data).to(d);
}

Tensor targets(int64_t rows, Device d, int64_t classes = 10) {  // (rows) class ids
  std::vector<int64_t> t(static_cast<size_t>(rows));
  for (size_t i = 0; i < t.size(); ++i) t[i] = static_cast<int64_t>(i * 7) % classes;
  return from_vector<int64_t>(t, {rows}).to(d);
}

std::vector<std::vector<float>> grads_of(const nn::Module& m) {
  std::vector<std::vector<float>> g;
  for (const Tensor& p : m.parameters()) g.push_back(p.grad().to(Device::cpu()).to_vector<float>());
  return g;
}

enum class Where { None, ForwardOnly, Whole };  // no Offload; around the forward; around forward and backward

struct Run {
  std::vector<std::vector<float>> grads;
  autograd::Offload::Stats stats;
  int64_t activation_peak = 0;  // on the device, over forward and backward, above the start
};

// One forward + backward of the MLP from the same data and dropout stream. `landed`: the copies to
// the host are all done before backward starts (so every save comes back through a copy).
Run mlp_step(nn::MLP& mlp, Where where, autograd::OffloadWhat what = autograd::OffloadWhat::All,
             int64_t rows = 16, int64_t min_bytes = 0, bool landed = false) {
  const int64_t in = mlp.parameters()[0].shape()[1];
  const Tensor x = batch(rows, in, kCuda), target = targets(rows, kCuda);
  autograd::zero_grad(mlp.parameters());
  manual_seed(42);
  reset_peak_memory(kCuda);
  const int64_t before = memory_stats(kCuda)[Category::Activation].current_bytes;
  Run r;
  {
    std::optional<autograd::Offload> offload;
    if (where != Where::None) offload.emplace(what, min_bytes);
    Tensor loss = cross_entropy(mlp(x), target);
    if (landed) Stream::copy(kCuda).synchronize();
    if (where == Where::ForwardOnly) {
      r.stats = offload->stats();
      offload.reset();
    }
    autograd::backward(loss);
    if (offload) r.stats = offload->stats();
  }
  r.activation_peak = memory_stats(kCuda)[Category::Activation].peak_bytes - before;
  r.grads = grads_of(mlp);
  return r;
}

int64_t offloaded_bytes_now() { return pinned_memory_stats()[Category::Offloaded].current_bytes; }

}  // namespace

TEST_CASE("offloaded saves come back bit-identical: All and Boundaries, every checkpoint policy, backward inside or after the scope") {
  auto mlp = make_mlp(kCuda);
  const Run plain = mlp_step(*mlp, Where::None);
  for (const char* policy : {"none", "every:1", "sqrt", "selective"}) {
    CAPTURE(policy);
    mlp->set_checkpoint(nn::CheckpointPolicy::parse(policy));
    for (Where where : {Where::ForwardOnly, Where::Whole}) {
      CAPTURE(static_cast<int>(where));
      const Run all = mlp_step(*mlp, where, autograd::OffloadWhat::All);
      CHECK(same_bits(all.grads, plain.grads));
      CHECK(all.stats.tensors > 0);
      if (where == Where::Whole) CHECK(all.stats.prefetched > 0);  // (stats were read before backward otherwise)
      const Run boundaries = mlp_step(*mlp, where, autograd::OffloadWhat::Boundaries);
      CHECK(same_bits(boundaries.grads, plain.grads));
      if (std::string(policy) == "none") {
        CHECK(boundaries.stats.tensors == 0);  // no segment: nothing is a held input
      } else {
        CHECK(boundaries.stats.tensors > 0);
        CHECK(boundaries.stats.tensors < all.stats.tensors);
      }
      if (where == Where::Whole && boundaries.stats.tensors > 0)
        CHECK(boundaries.stats.waited_on_fetch == 0);  // each segment's inputs were on their way at its replay
    }
    CHECK(offloaded_bytes_now() == 0);
  }
  mlp->set_checkpoint(nn::CheckpointPolicy::parse("none"));
  // min_bytes: (16, 32) f32 saves are 2 KiB; only larger ones (none here) would go
  CHECK(mlp_step(*mlp, Where::Whole, autograd::OffloadWhat::All, 16, 4096).stats.tensors == 0);
}

TEST_CASE("a GPT's gradients with offloaded saves equal the plain run's bit for bit (dropout, every:1 replay)") {
  nn::GPTConfig c{/*vocab_size*/ 11, /*block_size*/ 8, /*n_layer*/ 3, /*n_head*/ 2, /*n_embd*/ 16};
  c.dropout = 0.2;
  manual_seed(8);
  nn::GPT gpt(c);
  gpt.to(kCuda);
  std::vector<int64_t> id_values(16), target_values(16);
  for (size_t i = 0; i < 16; ++i) id_values[i] = static_cast<int64_t>((i * 5 + 1) % 11), target_values[i] = static_cast<int64_t>((i * 3 + 2) % 11);
  const Tensor ids = from_vector(id_values, {2, 8}, kCuda), tgt = from_vector(target_values, {2, 8}, kCuda);
  const auto run = [&](const char* policy, std::optional<autograd::OffloadWhat> what) {
    gpt.set_checkpoint(nn::CheckpointPolicy::parse(policy));
    for (const Tensor& p : gpt.parameters()) p.set_grad(Tensor());
    default_generator().manual_seed(12);
    std::optional<autograd::Offload> offload;
    if (what) offload.emplace(*what);
    autograd::backward(cross_entropy(gpt(ids), tgt));
    if (offload) CHECK(offload->stats().tensors > 0);
    return grads_of(gpt);
  };
  const auto plain = run("none", std::nullopt);
  CHECK(same_bits(run("none", autograd::OffloadWhat::All), plain));
  CHECK(same_bits(run("every:1", autograd::OffloadWhat::All), plain));
  CHECK(same_bits(run("every:1", autograd::OffloadWhat::Boundaries), plain));
}

TEST_CASE("a planted missing event wait is caught: the rule reads a copy that has not landed") {
  auto mlp = make_mlp(kCuda);
  const Run plain = mlp_step(*mlp, Where::None);
  set_poison_allocations(true);  // a block not yet copied into reads as NaN
  const auto all = autograd::OffloadWhat::All;
  CHECK(same_bits(mlp_step(*mlp, Where::Whole, all, 16, 0, true).grads, plain.grads));  // with the wait
  autograd::offload_skip_fetch_wait_for_testing(true);
  const Run broken = mlp_step(*mlp, Where::Whole, all, 16, 0, true);
  autograd::offload_skip_fetch_wait_for_testing(false);
  set_poison_allocations(false);
  CHECK_FALSE(same_bits(broken.grads, plain.grads));
  CHECK(same_bits(mlp_step(*mlp, Where::Whole).grads, plain.grads));  // and nothing left behind
}

TEST_CASE("a tensor written in place after it was offloaded raises the same version error as one kept on the device") {
  const auto message = [](bool offload, bool held) {
    manual_seed(5);
    const Tensor w = randn({3, 4}, DType::f32, kCuda);
    w.set_requires_grad();
    const Tensor x = randn({8, 3}, DType::f32, kCuda);  // saved by matmul (or held by the segment)
    std::optional<autograd::Offload> scope;
    if (offload) scope.emplace(held ? autograd::OffloadWhat::Boundaries : autograd::OffloadWhat::All);
    Tensor loss;
    {
      std::optional<autograd::Checkpoint> segment;
      if (held) segment.emplace();
      loss = sum(gelu(matmul(x, w)));
    }
    if (offload) CHECK(scope->stats().tensors > 0);
    Stream::copy(kCuda).synchronize();  // the copy to the host has landed
    x.fill_(1.0);
    std::string what;
    try {
      autograd::backward(loss);
    } catch (const Error& e) {
      what = e.what();
    }
    autograd::Tape::current().clear();
    return what;
  };
  for (bool held : {false, true}) {
    CAPTURE(held);
    const std::string kept = message(false, held), offloaded = message(true, held);
    CHECK(kept.find("modified in place") != std::string::npos);
    CHECK(offloaded == kept);
  }
}

TEST_CASE("host memory is returned when each step ends and the pinned pool is reused over 1,000 steps") {
  auto mlp = make_mlp(kCuda, {8, 16, 16, 4});
  autograd::Offload offload;
  MemoryStats after_first;
  for (int step = 0; step < 1000; ++step) {
    const Tensor x = batch(4, 8, kCuda, static_cast<uint64_t>(step)), target = targets(4, kCuda, 4);
    Tensor loss = cross_entropy((*mlp)(x), target);
    if (step == 0) CHECK(offloaded_bytes_now() > 0);
    autograd::backward(loss);
    REQUIRE(offloaded_bytes_now() == 0);
    if (step == 0) after_first = pinned_memory_stats();
  }
  const MemoryStats last = pinned_memory_stats();
  CHECK(last.system_allocs == after_first.system_allocs);  // every block came from the cache
  CHECK(last.reserved_bytes == after_first.reserved_bytes);
  CHECK(offload.stats().tensors > 1000);
  CHECK(memory_report().find("offloaded") != std::string::npos);
}

TEST_CASE("accumulation: each micro-batch's host copies are freed before the next forward; with replay too") {
  for (const char* policy : {"none", "sqrt"}) {
    CAPTURE(policy);
    auto mlp = make_mlp(kCuda);
    mlp->set_checkpoint(nn::CheckpointPolicy::parse(policy));
    const auto window = [&](bool offload) {
      autograd::zero_grad(mlp->parameters());
      manual_seed(42);
      pinned_allocator().reset_peak();
      int64_t first_peak = 0;
      for (int micro = 0; micro < 4; ++micro) {
        REQUIRE(offloaded_bytes_now() == 0);  // nothing left from the micro-batch before
        const Tensor x = batch(16, 24, kCuda, 100 + static_cast<uint64_t>(micro)), target = targets(16, kCuda);
        std::optional<autograd::Offload> scope;
        if (offload) scope.emplace(std::string(policy) == "none" ? autograd::OffloadWhat::All
                                                                  : autograd::OffloadWhat::Boundaries);
        autograd::backward(cross_entropy((*mlp)(x), target), 0.25);
        if (micro == 0) first_peak = pinned_memory_stats()[Category::Offloaded].peak_bytes;
      }
      if (offload) {
        CHECK(first_peak > 0);
        CHECK(pinned_memory_stats()[Category::Offloaded].peak_bytes == first_peak);  // one micro-batch's at most
      }
      return grads_of(*mlp);
    };
    const auto plain = window(false);
    CHECK(same_bits(window(true), plain));
  }
}

TEST_CASE("Offload(All) lowers the device activation peak; the host link is measured once") {
  auto mlp = make_mlp(kCuda, {64, 256, 256, 256, 256, 256, 256, 256, 256, 10});
  const Run plain = mlp_step(*mlp, Where::None, autograd::OffloadWhat::All, 128);
  const Run offloaded = mlp_step(*mlp, Where::Whole, autograd::OffloadWhat::All, 128);
  CHECK(same_bits(offloaded.grads, plain.grads));
  MESSAGE("activation peak: plain " << format_bytes(plain.activation_peak) << ", offloaded "
                                    << format_bytes(offloaded.activation_peak) << "; " << offloaded.stats.tensors
                                    << " saves, " << format_bytes(offloaded.stats.bytes) << " offloaded, "
                                    << offloaded.stats.prefetched << " prefetched, "
                                    << offloaded.stats.waited_on_fetch << " waited");
  CHECK(offloaded.activation_peak < plain.activation_peak / 2);
  CHECK(offloaded.stats.waited_on_fetch == 1);  // only the first rule's saves were not on their way back
  CHECK(offloaded.stats.prefetched == offloaded.stats.tensors - 1);

  const double link = autograd::host_link_bytes_per_s(kCuda);
  CHECK(link > 0);
  CHECK(autograd::host_link_bytes_per_s(kCuda) == link);
}

TEST_CASE("saves that view one storage share one host copy and come back as views of one device copy") {
  // y (16, 12) is one activation; its two column halves are multiplied, so mul saves two views of
  // it (as attention saves q, k and v of one qkv). One host copy of y's 768 bytes, not two halves.
  Generator g(5);
  const Tensor x = randn({16, 12}, DType::f32, Device::cpu(), &g).to(kCuda);
  x.set_requires_grad();
  const auto step = [&](bool offloaded) {
    autograd::zero_grad({x});
    std::optional<autograd::Offload> offload;
    if (offloaded) offload.emplace();
    const Tensor y = gelu(x);
    const Tensor loss = sum(mul(slice(y, 1, 0, 6), slice(y, 1, 6, 12)));
    Stream::copy(kCuda).synchronize();  // every copy has landed: backward reads what came back
    autograd::backward(loss);
    if (offload) {
      CHECK(offload->stats().tensors == 1);  // y, saved by mul through two views (x is a leaf: it stays)
      CHECK(offload->stats().bytes == 16 * 12 * 4);
    }
    return std::vector<std::vector<float>>{x.grad().to(Device::cpu()).to_vector<float>()};
  };
  const std::vector<std::vector<float>> plain = step(false);
  CHECK(same_bits(step(true), plain));
}

TEST_CASE("OffloadPrefetch::Scope: a scope comes back whole at its first unpack, and the scope before it with it") {
  auto mlp = make_mlp(kCuda);
  const Tensor x = batch(16, 24, kCuda), target = targets(16, kCuda);
  const Run plain = mlp_step(*mlp, Where::None);
  autograd::zero_grad(mlp->parameters());
  manual_seed(42);  // mlp_step's dropout stream
  const int64_t half = mlp->size() / 2;
  Tensor h = x;
  autograd::Offload first(autograd::OffloadWhat::All, 0, autograd::OffloadPrefetch::Scope);
  for (int64_t i = 0; i < half; ++i) h = (*mlp)[i](h);
  autograd::Offload second(autograd::OffloadWhat::All, 0, autograd::OffloadPrefetch::Scope);
  for (int64_t i = half; i < mlp->size(); ++i) h = (*mlp)[i](h);
  const Tensor loss = cross_entropy(h, target);
  Stream::copy(kCuda).synchronize();
  autograd::backward(loss);
  CHECK(same_bits(grads_of(*mlp), plain.grads));
  // The second scope's first unpack (cross_entropy's) waited and brought all of it back, and all of
  // the first scope ahead of it: none of the first scope's saves waited.
  CHECK(second.stats().waited_on_fetch == 1);
  CHECK(second.stats().prefetched == second.stats().tensors - 1);
  CHECK(first.stats().waited_on_fetch == 0);
  CHECK(first.stats().prefetched == first.stats().tensors);
  CHECK(first.stats().tensors > 2);
}

TEST_CASE("on the cpu device offload is refused, saying why") {
  auto mlp = make_mlp(Device::cpu());
  const Tensor x = batch(16, 24, Device::cpu()), target = targets(16, Device::cpu());
  {
    autograd::Offload offload;
    CHECK_REEL_ERROR(cross_entropy((*mlp)(x), target), "it is on cpu, and offload moves saved tensors from device memory to host memory");
  }
  autograd::Tape::current().clear();
  CHECK_REEL_ERROR(autograd::host_link_bytes_per_s(Device::cpu()), "no device<->host link");
  CHECK(std::string(autograd::offload_what_name(autograd::OffloadWhat::Boundaries)) == "boundaries");
}

TEST_CASE("set_offload on a model whose parameters are on cpu is refused at the call, naming the device") {
  auto mlp = make_mlp(Device::cpu());
  CHECK_REEL_ERROR(mlp->set_offload(autograd::OffloadMode::All), "MLP.set_offload(all): the model is on cpu");
  CHECK_REEL_ERROR(mlp->set_offload(autograd::OffloadMode::Boundaries), "the model is on cpu");
  mlp->set_offload(autograd::OffloadMode::Auto);  // plans without offload there
  mlp->set_offload(autograd::OffloadMode::None);
  auto on_cuda = make_mlp(kCuda);
  CHECK_REEL_ERROR(on_cuda->set_offload(autograd::OffloadMode::All, 0), "max_inflight_bytes must be > 0");
  CHECK(autograd::parse_offload_mode("all") == autograd::OffloadMode::All);  // declared in offload.h
  CHECK_REEL_ERROR(autograd::parse_offload_mode("some"), "offload mode 'some': expected none, boundaries, all or auto");
}

TEST_CASE("a saved input the caller still holds is read where it is, not brought back as a second device copy") {
  // One scope over the whole step, prefetching by Scope: at backward's first unpack every save
  // comes back at once, so the step's peak is the plain one. The batch x, which the caller holds
  // throughout, was copied out with the rest; brought back, it would be a second device copy of x
  // on top of that peak (the MLP: 144 KiB plain, 156 KiB offloaded).
  auto mlp = make_mlp(kCuda, {96, 64, 64, 64, 10});
  const Tensor x = batch(64, 96, kCuda), target = targets(64, kCuda);  // x: 24 KiB, held here
  const auto run = [&](bool offloaded) {
    autograd::zero_grad(mlp->parameters());
    manual_seed(42);
    reset_peak_memory(kCuda);
    const int64_t before = memory_stats(kCuda).current_bytes;
    autograd::Offload::Stats stats;
    {
      std::optional<autograd::Offload> offload;
      if (offloaded) offload.emplace(autograd::OffloadWhat::All, 0, autograd::OffloadPrefetch::Scope);
      const Tensor loss = cross_entropy((*mlp)(x), target);
      Stream::copy(kCuda).synchronize();  // every copy out landed: each device side can go
      autograd::release_landed_offloads();
      autograd::backward(loss);
      if (offload) stats = offload->stats();
    }
    return std::make_pair(memory_stats(kCuda).peak_bytes - before, stats);
  };
  const auto [plain_peak, none] = run(false);
  const auto [offload_peak, stats] = run(true);
  MESSAGE("device peak: plain " << format_bytes(plain_peak) << ", offloaded " << format_bytes(offload_peak) << "; "
                                << stats.reused << " of " << stats.tensors << " saves reused on the device");
  CHECK(offload_peak <= plain_peak);
  CHECK(stats.reused >= 1);  // x
  CHECK(same_bits(mlp_step(*mlp, Where::None, autograd::OffloadWhat::All, 64).grads,
                  mlp_step(*mlp, Where::Whole, autograd::OffloadWhat::All, 64, 0, true).grads));
}

TEST_CASE("the bytes waiting for their copy to the host stay within the bound; each stall is counted, recorded and priced") {
  auto mlp = make_mlp(kCuda);
  const Run plain = mlp_step(*mlp, Where::None);
  const auto bounded = [&](int64_t bound) {
    const Tensor x = batch(16, 24, kCuda), target = targets(16, kCuda);
    autograd::zero_grad(mlp->parameters());
    manual_seed(42);
    autograd::Offload::Stats stats;
    {
      autograd::Offload offload(autograd::OffloadWhat::All, 0, autograd::OffloadPrefetch::Window, bound);
      const Tensor loss = cross_entropy((*mlp)(x), target);
      autograd::backward(loss);
      stats = offload.stats();
    }
    CHECK(same_bits(grads_of(*mlp), plain.grads));
    return stats;
  };
  for (const int64_t bound : {int64_t{1}, int64_t{3} << 10, int64_t{16} << 10}) {  // saves here are 2 KiB
    CAPTURE(bound);
    const autograd::Offload::Stats s = bounded(bound);
    CHECK(s.tensors > 0);
    CHECK(s.peak_inflight_bytes <= bound);
    if (bound == 1) CHECK(s.stalls == s.tensors);  // every copy out is waited for as soon as it starts
    CHECK(s.stalled_bytes >= s.stalls);
  }
  CHECK(bounded(autograd::kNoOffloadInflightBound).stalls == 0);

  // Under a Profiler each stall is an "offload_stall" run on the compute stream, which the
  // predictor prices from the host link: the compute stream waits for those copies to finish.
  Profiler prof;
  const autograd::Offload::Stats s = bounded(1);
  prof.stop();
  int64_t recorded = 0;
  for (const profile::KernelRecord& k : prof.kernels()) recorded += k.kernel == profile::kOffloadStallKernel;
  CHECK(recorded == s.stalls);
  const profile::StepPrediction p = profile::predict_step(prof.kernels(), profile::device_spec("h100"));
  CHECK(p.offload_stalls.calls == s.stalls);
  CHECK(p.offload_stalls.predicted_s > 0);  // a bound of 1 byte: each copy out is waited for whole
  CHECK(p.offload_stalls.predicted_s <= p.copy_stream.predicted_s);

  // The emulator's copies land when asked, so an unbounded run stalls nowhere; the predictor
  // re-decides the stalls at a device's speeds for a given bound: at 1 byte, every copy out waits.
  Profiler unbounded;
  const autograd::Offload::Stats none = bounded(autograd::kNoOffloadInflightBound);
  unbounded.stop();
  CHECK(none.stalls == 0);
  const profile::DeviceSpec& h100 = profile::device_spec("h100");
  CHECK(profile::predict_step(unbounded.kernels(), h100).offload_stalls.calls == 0);
  const profile::StepPrediction at_one_byte = profile::predict_step(unbounded.kernels(), h100, 1);
  CHECK(at_one_byte.offload_stalls.calls == none.tensors);
  CHECK(at_one_byte.offload_stalls.predicted_s > 0);
  CHECK(profile::predict_step(unbounded.kernels(), h100, int64_t{1} << 40).offload_stalls.calls == 0);
  // Backward's waits for copies back are recorded too, one per save copied back (not those reused
  // on the device), and priced: the first rule waits at least for its copy over the link.
  int64_t fetch_waits = 0;
  for (const profile::KernelRecord& k : unbounded.kernels())
    fetch_waits += k.kernel == profile::kOffloadFetchWaitKernel;
  CHECK(fetch_waits > 0);
  CHECK(fetch_waits <= none.tensors - none.reused);
  const profile::StepPrediction waits = profile::predict_step(unbounded.kernels(), h100);
  CHECK(waits.fetch_waits.calls == fetch_waits);
  CHECK(waits.fetch_waits.predicted_s > 0);
  CHECK(waits.fetch_waits.predicted_s <= waits.copy_stream.predicted_s);
}
