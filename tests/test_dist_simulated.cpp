// A simulated world (distributed::ProcessGroup::simulate, the examples' --simulate-ranks): this
// process is rank 0 of 4 ranks that do not exist. Collectives on meta tensors allocate what the NCCL
// path allocates and record their launch with the ring algorithm's traffic; nothing else moves; a
// collective that would need the other ranks' values on a real tensor is refused. Also the traffic
// model itself (collective_cost) and its price on a GPU's interconnect. Its own process: simulate()
// must come before the world is first used. (examples' runs of a simulated rank 0 against rank 0 of
// a real two-rank job are tests/meta_simulate_check.sh.)
#include <string>

#include "core/allocator.h"
#include "core/profile.h"
#include "distributed/process_group.h"
#include "report/predict.h"
#include "testing.h"

using namespace reel;
using distributed::Collective;
using distributed::ProcessGroup;
using distributed::ReduceOp;

TEST_CASE("collective_cost: the ring algorithm's bytes each rank sends and receives, and its additions") {
  using distributed::collective_cost;
  const profile::KernelCost ar = collective_cost(Collective::AllReduce, 1000, DType::f32, 4);
  CHECK(ar.bytes_read == 2 * 3 * 4000 / 4);  // 2 (N - 1) / N of the buffer, each way
  CHECK(ar.bytes_written == ar.bytes_read);
  CHECK(ar.flops == 750);
  CHECK(collective_cost(Collective::ReduceScatter, 1000, DType::f32, 4).bytes_read == 3000);
  CHECK(collective_cost(Collective::AllGather, 1000, DType::bf16, 4).bytes_written == 1500);
  CHECK(collective_cost(Collective::AllGather, 1000, DType::bf16, 4).flops == 0);
  CHECK(collective_cost(Collective::Broadcast, 1000, DType::f32, 4).bytes_read == 4000);
  CHECK(collective_cost(Collective::Reduce, 1000, DType::f64, 2).flops == 1000);
  // One rank moves nothing.
  CHECK(collective_cost(Collective::AllReduce, 1000, DType::f32, 1).bytes() == 0);
  CHECK(collective_cost(Collective::Broadcast, 1000, DType::f32, 1).bytes() == 0);
}

TEST_CASE("a collective is priced on the interconnect, the launch floor below it") {
  const profile::DeviceSpec& h100 = profile::device_spec("h100");
  profile::KernelRecord r;
  r.kernel = "nccl_all_reduce";
  r.device = Device::meta();
  r.cost = distributed::collective_cost(Collective::AllReduce, int64_t{1} << 28, DType::f32, 8);  // 1 GiB
  const profile::Prediction p = profile::predict_record(h100, r);
  CHECK(p.bound == profile::Bound::Interconnect);
  CHECK(p.seconds == doctest::Approx(2.0 * 7 / 8 * (1 << 30) / h100.interconnect_bytes_per_s));
  CHECK(std::string(profile::bound_name(p.bound)) == "interconnect");
  r.cost = distributed::collective_cost(Collective::AllReduce, 16, DType::f32, 8);
  CHECK(profile::predict_record(h100, r).bound == profile::Bound::Launch);
}

#if defined(REEL_CUDA_EMULATED)
REEL_TEST_REQUIRES_CUDA();  // the meta device is the emulated CUDA backend run dry

TEST_CASE("a simulated world of 4: rank 0, collectives on meta recorded and moving nothing") {
  ProcessGroup::simulate(4);
  ProcessGroup& world = ProcessGroup::world();
  REQUIRE(world.simulated());
  CHECK(world.rank() == 0);
  CHECK(world.size() == 4);
  CHECK(!world.uses_mpi());
  CHECK_THROWS_WITH_AS(ProcessGroup::simulate(2), doctest::Contains("after the world was made"), Error);
  ProcessGroup::simulate(4);  // the same world again: nothing to do

  const Device meta = Device::meta();
  Profiler prof;
  const Tensor grads = empty({256}, DType::f32, meta);
  world.all_reduce(grads, ReduceOp::Average);
  const Tensor shard = empty({64}, DType::f32, meta);
  world.reduce_scatter(shard, grads);
  const Tensor whole = empty({256}, DType::bf16, meta);
  world.all_gather(whole, whole.slice(0, 0, 64));  // in place: rank 0's slot
  // A strided input goes through a contiguous copy, as on the NCCL path: one more allocation.
  const auto allocs = [&] {
    int64_t n = 0;
    for (const CategoryStats& c : memory_stats(meta).by_category) n += c.alloc_count;
    return n;
  };
  const int64_t before = allocs();
  world.all_reduce(empty({16, 16}, DType::f32, meta).transpose(0, 1));
  CHECK(allocs() == before + 2);  // the tensor, and its contiguous copy
  world.broadcast(grads);
  world.barrier();
  prof.stop();

  std::vector<std::string> names;
  for (const profile::KernelRecord& r : prof.kernels())
    if (profile::is_collective_kernel(r.kernel)) names.push_back(r.kernel);
  CHECK(names == std::vector<std::string>{"nccl_all_reduce", "nccl_reduce_scatter", "nccl_all_gather",
                                          "nccl_all_reduce", "nccl_broadcast"});
  for (const profile::KernelRecord& r : prof.kernels())
    if (r.kernel == "nccl_all_gather") {
      CHECK(r.device == meta);
      CHECK(r.dtype == DType::bf16);
      CHECK(r.cost.bytes_written == 3 * 64 * 2);  // the other three ranks' slots
    }
  CHECK(world.issued(Collective::AllReduce) == 2);
  CHECK(world.nccl_issued(Collective::AllGather) == 1);

  // Host numbers summed over ranks: every rank's is taken as this one's.
  CHECK(world.all_reduce(2.5) == 10.0);
  CHECK(world.all_reduce(2.5, ReduceOp::Average) == 2.5);
  CHECK(world.all_reduce(int64_t{3}) == 12);
}

TEST_CASE("a simulated world refuses what needs the other ranks' values on a real tensor") {
  ProcessGroup& world = ProcessGroup::world();  // simulated by the case above (or made so here)
  if (!world.simulated()) return;
  const Tensor t = zeros({8}, DType::f32, Device::cpu());
  CHECK_THROWS_WITH_AS(world.all_reduce(t), doctest::Contains("simulated world of 4 ranks"), Error);
  CHECK_THROWS_WITH_AS(world.all_reduce(t), doctest::Contains("all_reduce (sum) of f32 (8) on cpu"), Error);
  CHECK_THROWS_WITH_AS(world.all_gather(zeros({32}, DType::f32, Device::cpu()), t),
                       doctest::Contains("only meta tensors"), Error);
  CHECK_THROWS_WITH_AS(world.broadcast(t, 1), doctest::Contains("from rank 1"), Error);
  world.broadcast(t, 0);  // rank 0's own values: nothing needed from anyone
  CHECK(!world.broken());
}
#endif
