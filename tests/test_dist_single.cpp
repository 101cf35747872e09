// distributed/ without a launcher (CTest runs this as a plain process): a world of one in which every
// collective is local and MPI is never initialised, so --dist programs run unchanged on one
// process (reduce's root must still be rank 0); and a launcher's RANK / WORLD_SIZE without mpirun
// refused by name.
#include <cstdlib>

#include "autograd/functions.h"
#include "distributed/data_parallel.h"
#include "distributed/process_group.h"
#include "optim/accumulator.h"
#include "testing.h"

using namespace reel;

TEST_CASE("a world of one: collectives are local, counted, and leave their results in place") {
  distributed::ProcessGroup& g = distributed::ProcessGroup::world();
  REQUIRE(g.size() == 1);
  CHECK(g.rank() == 0);
  CHECK_FALSE(g.uses_mpi());
  for (const Device dev : reel::testing::devices()) {
    CAPTURE(dev);
    const Tensor t = arange(4, DType::f32, dev);
    g.all_reduce(t, distributed::ReduceOp::Average);
    reel::testing::check_close(t, {0, 1, 2, 3}, 0, 0);
    const Tensor out = zeros({2, 2}, DType::f32, dev);
    g.reduce_scatter(out, t);
    reel::testing::check_close(out, {0, 1, 2, 3}, 0, 0);
    const Tensor all = zeros({4}, DType::f32, dev);
    g.all_gather(all, out.reshape({4}));
    reel::testing::check_close(all, {0, 1, 2, 3}, 0, 0);
    g.broadcast(t, 0);
    reel::testing::check_close(t, {0, 1, 2, 3}, 0, 0);
    const int64_t reduces = g.issued(distributed::Collective::Reduce);
    g.reduce(t, 0, distributed::ReduceOp::Average);
    g.reduce_async(t.slice(0, 1, 3)).wait();
    reel::testing::check_close(t, {0, 1, 2, 3}, 0, 0);
    CHECK(g.issued(distributed::Collective::Reduce) == reduces + 2);
    CHECK_REEL_ERROR(g.reduce(t, 1), "dist: reduce (sum) of f32 (4) on ");
  }
  const int64_t before = g.issued(distributed::Collective::AllReduce);
  CHECK(g.all_reduce(int64_t{7}) == 7);
  CHECK(g.issued(distributed::Collective::AllReduce) == before + 1);
  g.barrier();
}

TEST_CASE("a world of one: DataParallel and ZeroAdamW train exactly as AdamW alone") {
  Generator gen(3);
  const Tensor x = randn({8, 5}, DType::f64, Device::cpu(), &gen);
  const Tensor y = randn({8, 2}, DType::f64, Device::cpu(), &gen);
  const Tensor w0 = randn({5, 2}, DType::f64, Device::cpu(), &gen);
  std::vector<Tensor> params[2];
  for (auto& p : params) p = {w0.clone().set_requires_grad(), zeros({2}, DType::f64).set_requires_grad()};
  const auto loss = [&](const std::vector<Tensor>& p) {
    const Tensor d = matmul(x, p[0]) + p[1] - y;
    return sum(d * d);
  };
  optim::AdamW plain(params[0], 0.05);
  optim::Accumulator plain_acc(plain);
  distributed::DataParallel dp(params[1], {64, true, 1});
  distributed::ZeroAdamW zero(dp, 0.05);
  optim::Accumulator acc(zero, {0, nullptr, false, &dp});
  const std::vector<int> window{0};
  for (int s = 0; s < 5; ++s) {
    plain_acc.step(window, [](int) { return 8; }, [&](int) { return loss(params[0]); });
    acc.step(window, [](int) { return 8; }, [&](int) { return loss(params[1]); });
  }
  CHECK(dp.grad_syncs() == 5 * dp.buckets());
  for (size_t i = 0; i < 2; ++i) reel::testing::check_close(params[1][i], params[0][i], 1e-12, 1e-12);
}
