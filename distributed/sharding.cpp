// Shard arithmetic (see sharding.h).
#include "distributed/sharding.h"

#include <cmath>

#include "kernels/optimizer.h"

namespace reel::distributed {

FlatShard flat_shard(int64_t numel, int rank, int world) {
  REEL_CHECK(numel >= 0 && world > 0 && rank >= 0 && rank < world, "flat_shard: ", numel, " elements, rank ", rank,
             " of ", world, " (need numel >= 0 and 0 <= rank < world)");
  FlatShard s;
  s.numel = numel;
  s.padded = (numel + world - 1) / world * world;
  s.chunk = s.padded / world;
  s.begin = rank * s.chunk;
  return s;
}

double sharded_norm(const std::vector<Tensor>& shards, ProcessGroup& group) {
  const double local = shards.empty() ? 0.0 : kernels::global_grad_norm(shards);
  return std::sqrt(group.all_reduce(local * local, ReduceOp::Sum));
}

}  // namespace reel::distributed
