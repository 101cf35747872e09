// tests/test_graph.cpp: reel::CudaGraph (core/graph.h). A captured training step (forward,
// backward, SGD update) replayed N times gives the weights of N eager steps, bit for bit; the
// capture's private pool keeps its blocks from code outside the graph until the graph dies; a
// refused call (a copy to the host), a reel::Error inside the function, or an allocation the cache
// cannot serve ends the capture with a reel::Error that says why, and the tape and the allocator
// work as before; cpu refuses; on meta a replay is one profiler record of N nodes.
#include <cmath>
#include <functional>
#include <set>
#include <string>
#include <vector>

#include "core/kernel_price.h"
#include "reel.h"
#include "testing.h"

using namespace reel;
using reel::testing::values;

namespace {

bool has_cuda() { return cuda_device_count() > 0; }

// A tiny model and its static input: loss = sum(relu(x w1) w2 - t)^2 / n, SGD on w1 and w2.
struct Model {
  Tensor x, t, w1, w2;
  explicit Model(Device device) {
    manual_seed(7);
    x = randn({8, 16}, DType::f32, device);
    t = randn({8, 4}, DType::f32, device);
    w1 = (randn({16, 32}, DType::f32, device) * 0.3).detach().set_requires_grad();
    w2 = (randn({32, 4}, DType::f32, device) * 0.3).detach().set_requires_grad();
  }
  // One step; returns the loss (a device tensor: nothing waits for it).
  Tensor step(optim::Optimizer& opt) {
    const Tensor d = matmul(relu(matmul(x, w1)), w2) - t;
    Tensor loss = mean(d * d);
    autograd::backward(loss);
    opt.step();
    opt.zero_grad();
    return loss;
  }
};

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

}  // namespace

TEST_CASE("CudaGraph: a captured training step replayed N times equals N eager steps, bit for bit") {
  if (!has_cuda()) return;
  const Device device = Device::cuda(0);
  Model eager(device), graphed(device);
  optim::SGD eager_opt({eager.w1, eager.w2}, 0.05), graphed_opt({graphed.w1, graphed.w2}, 0.05);
  std::vector<double> eager_losses;
  for (int i = 0; i < 5; ++i) eager_losses.push_back(eager.step(eager_opt).item());

  graphed.step(graphed_opt);  // warm-up: the cache holds the step's blocks
  CudaGraph graph;
  Tensor loss;
  const std::vector<double> before = values(graphed.w1);
  graph.capture(device, [&] { loss = graphed.step(graphed_opt); });
  CHECK(graph.captured());
  CHECK(graph.nodes() > 5);
  CHECK(graph.pool_bytes() > 0);
  CHECK(values(graphed.w1) == before);  // captured, not run
  for (int i = 1; i < 5; ++i) {
    graph.replay();
    CHECK(loss.item() == eager_losses[static_cast<size_t>(i)]);
  }
  CHECK(values(graphed.w1) == values(eager.w1));
  CHECK(values(graphed.w2) == values(eager.w2));

  // New data in the static input between replays: the graph reads it.
  const Tensor x2 = randn({8, 16}, DType::f32, device);
  graphed.x.copy_(x2);
  eager.x.copy_(x2);
  graph.replay();
  CHECK(loss.item() == eager.step(eager_opt).item());
  CHECK(values(graphed.w1) == values(eager.w1));
}

TEST_CASE("CudaGraph: the capture's pool keeps its blocks from code outside it until the graph dies") {
  if (!has_cuda()) return;
  const Device device = Device::cuda(0);
  const Shape shape{1000, 37};  // a size class no other test here uses
  { Tensor warm = empty(shape, DType::f32, device); }  // one cached block of the class
  const void* inside = nullptr;
  {
    CudaGraph graph;
    graph.capture(device, [&] {
      Tensor t = empty(shape, DType::f32, device);  // the cached block, now the pool's
      inside = t.data_ptr();
      t.fill_(1.0);
    });  // t freed inside the capture: back to the pool, not to the cache
    REQUIRE(inside != nullptr);
    std::set<const void*> outside;
    std::vector<Tensor> held;
    for (int i = 0; i < 3; ++i) {
      held.push_back(empty(shape, DType::f32, device));
      outside.insert(held.back().data_ptr());
    }
    CHECK(!outside.count(inside));
    graph.replay();  // its block's address is still its own
  }
  // The graph is gone: its block is the cache's again.
  Tensor after = empty(shape, DType::f32, device);
  CHECK(after.data_ptr() == inside);
}

TEST_CASE("CudaGraph: a refused call or an error in the function ends the capture; tape and allocator work") {
  if (!has_cuda()) return;
  const Device device = Device::cuda(0);
  Model m(device);
  optim::SGD opt({m.w1, m.w2}, 0.05);
  m.step(opt);  // warm-up
  const MemoryStats before = memory_stats(device);

  SUBCASE("a copy to the host (item) inside the capture") {
    CudaGraph graph;
    const std::string e = error_of([&] { graph.capture(device, [&] { (void)m.step(opt).item(); }); });
    CHECK(contains(e, "CudaGraph::capture on cuda:0"));
    CHECK(contains(e, "cudaErrorStreamCapture"));
    CHECK(!graph.captured());
    CHECK_THROWS_AS(graph.replay(), Error);
  }
  SUBCASE("a reel::Error of the function itself") {
    CudaGraph graph;
    const std::string e = error_of([&] {
      graph.capture(device, [&] { (void)matmul(m.x, m.x); });  // (8, 16) @ (8, 16)
    });
    CHECK(contains(e, "CudaGraph::capture on cuda:0: the captured function failed"));
    CHECK(contains(e, "matmul"));
  }
  SUBCASE("an allocation the cache cannot serve (no warm-up)") {
    CudaGraph graph;
    const std::string e = error_of([&] { graph.capture(device, [&] { (void)zeros({3333, 77}, DType::f32, device); }); });
    CHECK(contains(e, "during CUDA graph capture on cuda:0"));
    CHECK(contains(e, "warm-up"));
  }
  // Eager work goes on: a step (tape, backward, optimizer), a new system allocation, a copy to the host.
  const double loss = m.step(opt).item();
  CHECK(std::isfinite(loss));
  const Tensor big = zeros({4444, 91}, DType::f32, device);
  CHECK(values(sum(big))[0] == 0.0);
  CHECK(memory_stats(device).current_bytes >= before.current_bytes);
}

TEST_CASE("CudaGraph: cpu has none") {
  CudaGraph graph;
  const std::string e = error_of([&] { graph.capture(Device::cpu(), [] {}); });
  CHECK(contains(e, "device cpu has no CUDA graphs"));
}

#if defined(REEL_CUDA_EMULATED)  // the meta device exists in the emulated build only
TEST_CASE("CudaGraph on meta: a replay is one profiler record of the graph's nodes") {
  if (!has_cuda()) return;  // the meta device runs cuda:0's backend dry
  const Device device = Device::meta();
  Model m(device);
  optim::SGD opt({m.w1, m.w2}, 0.05);
  m.step(opt);  // warm-up
  int64_t eager_runs = 0, eager_launches = 0;  // records, and the launches they made
  {
    Profiler prof;
    m.step(opt);
    prof.stop();
    for (const auto& r : prof.kernels())
      if (r.stream == StreamKind::Compute) ++eager_runs, eager_launches += r.launches;
  }
  CudaGraph graph;
  {
    Profiler prof;  // the capture records nothing: nothing ran
    graph.capture(device, [&] { m.step(opt); });
    prof.stop();
    CHECK(prof.kernels().empty());
  }
  CHECK(graph.nodes() == eager_launches);  // a node for each launch an eager step made
  Profiler prof;
  graph.replay();
  graph.replay();
  prof.stop();
  REQUIRE(prof.kernels().size() == 2);
  for (const auto& r : prof.kernels()) {
    CHECK(r.kernel == profile::kGraphKernel);
    CHECK(r.graph_nodes == graph.nodes());
    CHECK(r.cost.bytes() > 0);  // the captured kernels' costs
    REQUIRE(r.graph_runs);      // and each captured run, for the predictor
    CHECK(static_cast<int64_t>(r.graph_runs->size()) == eager_runs);
    profile::KernelCost summed;
    int64_t run_launches = 0;
    for (const auto& run : *r.graph_runs) {
      run_launches += run.launches;
      summed.bytes_read += run.cost.bytes_read;
      summed.bytes_written += run.cost.bytes_written;
      summed.flops += run.cost.flops;
    }
    CHECK(summed.bytes() == r.cost.bytes());
    CHECK(summed.flops == r.cost.flops);
    CHECK(run_launches == graph.nodes());
  }
}
#endif

TEST_CASE("CudaGraph: the predictor prices a graph launch at a graph node's overhead per node") {
  profile::DeviceSpec spec{};
  spec.bytes_per_s = 1e12;
  spec.fp32_flops_per_s = spec.tf32_flops_per_s = 1e13;
  spec.launch_s = 3e-6;
  profile::KernelRecord r;
  r.kernel = profile::kGraphKernel;
  r.graph_nodes = 100;
  const profile::Prediction small = profile::predict_record(spec, r);
  CHECK(small.bound == profile::Bound::Launch);
  CHECK(small.seconds == doctest::Approx(100 * profile::kGraphNodeSeconds));
  CHECK(small.seconds < 100 * spec.launch_s);  // less than 100 eager launches
  r.cost.bytes_read = 1'000'000'000;  // 1 ms of memory traffic: the nodes' work dominates
  const profile::Prediction big = profile::predict_record(spec, r);
  CHECK(big.bound == profile::Bound::Memory);
  CHECK(big.seconds == doctest::Approx(1e-3));
}

TEST_CASE("CudaGraph: the predictor prices a captured graph node by node") {
  profile::DeviceSpec spec{};
  spec.bytes_per_s = 1e12;
  spec.fp32_flops_per_s = spec.tf32_flops_per_s = 1e13;
  spec.launch_s = 3e-6;
  spec.host_link_bytes_per_s = 1e10;
  // Two nodes: one memory-bound (10 us of traffic), one compute-bound (20 us of f32 FLOPs), one
  // tiny (its node's overhead), and one node no run stands for (a memset): 10 + 20 + 0.5 + 0.5 us,
  // where the summed cost alone would say max(10, 20) us.
  auto runs = std::make_shared<std::vector<profile::CapturedRun>>();
  runs->push_back({"binary.add", DType::f32, StreamKind::Compute, {0, 10'000'000, 0}});
  runs->push_back({"softmax_forward", DType::f32, StreamKind::Compute, {200'000'000, 0, 0}});
  runs->push_back({"fill", DType::f32, StreamKind::Compute, {0, 0, 4}});
  profile::KernelRecord r;
  r.kernel = profile::kGraphKernel;
  r.graph_nodes = 4;
  for (const auto& run : *runs) {
    r.cost.flops += run.cost.flops;
    r.cost.bytes_read += run.cost.bytes_read;
    r.cost.bytes_written += run.cost.bytes_written;
  }
  const double summed = profile::predict_record(spec, r).seconds;  // without the runs: max of sums
  CHECK(summed == doctest::Approx(20e-6));
  r.graph_runs = runs;
  const profile::Prediction p = profile::predict_record(spec, r);
  CHECK(p.seconds == doctest::Approx(10e-6 + 20e-6 + 2 * profile::kGraphNodeSeconds));
  CHECK(p.bound == profile::Bound::Compute);  // the term that took most of the time
  // A graph of tiny nodes is launch-bound at the node overhead, less than eager launches.
  runs->assign(10, {"fill", DType::f32, StreamKind::Compute, {0, 0, 4}});
  r.graph_nodes = 10;
  const profile::Prediction tiny = profile::predict_record(spec, r);
  CHECK(tiny.bound == profile::Bound::Launch);
  CHECK(tiny.seconds == doctest::Approx(10 * profile::kGraphNodeSeconds));
}
