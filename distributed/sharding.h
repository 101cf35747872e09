// Shard arithmetic shared by ZeRO-1 (distributed/data_parallel.h) and FSDP (distributed/fsdp.h): how a flat
// buffer is cut into per-rank chunks, and the global norm of gradients held as such chunks.
#pragma once
#include <cstdint>
#include <vector>

#include "core/tensor.h"
#include "distributed/process_group.h"

namespace reel::distributed {

// A flat buffer of `numel` elements, padded with zeros to `padded` (the next multiple of the world
// size) so that every rank owns an equal chunk: rank r owns elements [begin, begin + chunk), with
// begin = r * chunk.
struct FlatShard {
  int64_t numel = 0, padded = 0, chunk = 0, begin = 0;
};
FlatShard flat_shard(int64_t numel, int rank, int world);

// sqrt of the ranks' summed squared L2 norms of `shards` (each rank passes its own chunks): the
// global gradient norm when the summed gradients live sharded. A collective: every rank calls it.
double sharded_norm(const std::vector<Tensor>& shards, ProcessGroup& group);

}  // namespace reel::distributed
