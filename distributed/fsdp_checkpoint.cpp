// FullyShardedDataParallel (fsdp.h) and checkpoints: every unit gathered for good (gather_all), the
// whole model's state dict gathered from the shards and loaded back into them, and the safetensors
// file rank 0 writes.
#include <map>
#include <sstream>
#include <string>

#include "autograd/tape.h"
#include "core/allocator.h"
#include "distributed/fsdp.h"
#include "distributed/fsdp_internal.h"
#include "nn/safetensors.h"

namespace reel::distributed {

using fsdp_detail::piece;

void FullyShardedDataParallel::gather_all() {
  autograd::NoGrad no_grad;
  drop_prefetch();
  for (size_t u = 0; u < units_.size(); ++u) {
    Unit& k = units_[u];
    if (k.flat.dtype() != k.shard.dtype()) {
      // param_dtype: the parameters become whole in the masters' dtype, a storage of their own
      // (the 16-bit one goes), so evaluation and nn::save see what the optimizer stepped.
      {
        MemoryCategory category(Category::Parameter);
        k.flat = zeros({k.layout.padded}, k.shard.dtype(), k.shard.device());
      }
      bind(k);
      k.gathered = false;
    }
    gather(u, Phase::Checkpoint);
    k.kept = true;
  }
}

nn::TensorDict FullyShardedDataParallel::full_state_dict() {
  autograd::NoGrad no_grad;
  nn::TensorDict out;
  for (const Unit& k : units_) {
    const Tensor full = empty({k.layout.padded}, k.shard.dtype(), k.shard.device());  // (padded)
    group_.all_gather(full, k.shard);
    ++gathers_[static_cast<int>(Phase::Checkpoint)];
    for (size_t j = 0; j < k.params.size(); ++j) {
      const auto& [name, p] = params_[k.params[j]];
      out[name] = piece(full, k.offset[j], p).clone();
    }
  }
  for (const auto& [name, b] : model_.named_buffers()) out[name] = b.clone();
  return out;
}

void FullyShardedDataParallel::load_full_state_dict(const nn::TensorDict& state) {
  // Check everything first: nothing changes unless every key matches.
  std::map<std::string, Tensor> expected;
  for (const auto& [name, p] : params_) expected[name] = p;
  for (const auto& [name, b] : model_.named_buffers()) expected[name] = b;
  std::ostringstream problems;
  for (const auto& [name, t] : expected) {
    const auto it = state.find(name);
    if (it == state.end()) problems << " missing '" << name << "';";
    else if (it->second.shape() != t.shape())
      problems << " '" << name << "' has shape " << shape_str(it->second.shape()) << ", expected "
               << shape_str(t.shape()) << ";";
  }
  for (const auto& [name, t] : state)
    if (!expected.count(name)) problems << " unexpected '" << name << "';";
  REEL_CHECK(problems.str().empty(), "FullyShardedDataParallel load_full_state_dict:", problems.str());
  autograd::NoGrad no_grad;
  for (Unit& k : units_) {
    const Tensor full = zeros({k.layout.padded}, k.shard.dtype(), k.shard.device());  // (padded)
    for (size_t j = 0; j < k.params.size(); ++j) {
      const auto& [name, p] = params_[k.params[j]];
      piece(full, k.offset[j], p).copy_(state.at(name));
    }
    k.shard.copy_(untracked::slice(full, 0, k.layout.begin, k.layout.begin + k.layout.chunk));
    if (k.gathered) k.flat.copy_(full);
  }
  for (const auto& [name, b] : model_.named_buffers()) b.copy_(state.at(name));
}

void FullyShardedDataParallel::save(const std::string& path, const nn::Metadata& metadata) {
  const nn::TensorDict state = full_state_dict();
  if (group_.rank() == 0) nn::save_safetensors(path, state, metadata);
  group_.barrier();  // the file is complete before any rank goes on (and may read it)
}

void FullyShardedDataParallel::load(const std::string& path) { load_full_state_dict(nn::load_safetensors(path)); }
}  // namespace reel::distributed
