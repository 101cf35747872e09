// FullyShardedDataParallel (fsdp.h) and checkpoints: every unit gathered for good (gather_all), the
// whole model's state dict gathered from the shards and loaded back into them, the safetensors
// file rank 0 writes, and a sharded checkpoint's parts (one a rank) written and put back on any
// number of ranks.
#include <map>
#include <sstream>
#include <string>

#include "autograd/tape.h"
#include "core/allocator.h"
#include "distributed/fsdp.h"
#include "distributed/fsdp_internal.h"
#include "nn/safetensors.h"
#include "optim/optimizer.h"

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

nn::TensorDict FullyShardedDataParallel::shard_checkpoint(const optim::Optimizer& optimizer) const {
  nn::TensorDict out;
  for (size_t u = 0; u < units_.size(); ++u) out["shard." + std::to_string(u)] = units_[u].shard;
  for (const auto& [key, t] : optimizer.state_dict()) out["optimizer." + key] = t;
  for (const auto& [name, b] : model_.named_buffers()) out["buffer." + name] = b;
  return out;
}

void FullyShardedDataParallel::load_shard_checkpoint(const std::vector<nn::TensorDict>& parts,
                                                     optim::Optimizer& optimizer) {
  REEL_CHECK(!parts.empty(), "FullyShardedDataParallel load_shard_checkpoint: no parts");
  const auto tensor = [&](size_t r, const std::string& key) -> const Tensor& {
    const auto it = parts[r].find(key);
    REEL_CHECK(it != parts[r].end(), "FullyShardedDataParallel load_shard_checkpoint: part ", r, " of ", parts.size(),
               " has no '", key, "' (a checkpoint of another model or other units)");
    return it->second;
  };
  // The parts' chunks of one flat buffer, in rank order, as the whole of `numel` elements (padding dropped).
  const auto whole = [&](const std::string& key, int64_t numel) {
    int64_t total = 0;
    for (size_t r = 0; r < parts.size(); ++r) total += tensor(r, key).numel();
    REEL_CHECK(total >= numel, "FullyShardedDataParallel load_shard_checkpoint: '", key, "' holds ", total,
               " elements over ", parts.size(), " parts, the unit ", numel);
    const Tensor flat = empty({total}, tensor(0, key).dtype());
    int64_t at = 0;
    for (size_t r = 0; r < parts.size(); ++r) {
      const Tensor& t = tensor(r, key);
      untracked::slice(flat, 0, at, at + t.numel()).copy_(t.reshape({t.numel()}));
      at += t.numel();
    }
    return untracked::slice(flat, 0, 0, numel);
  };
  autograd::NoGrad no_grad;
  nn::TensorDict state;
  for (size_t u = 0; u < units_.size(); ++u) {
    const Unit& k = units_[u];
    const Tensor flat = whole("shard." + std::to_string(u), k.layout.numel);
    for (size_t j = 0; j < k.params.size(); ++j) {
      const auto& [name, p] = params_[k.params[j]];
      state[name] = piece(flat, k.offset[j], p);
    }
  }
  for (const auto& [name, b] : model_.named_buffers()) state[name] = tensor(0, "buffer." + name);
  load_full_state_dict(state);
  // The optimizer's slots over the shards: each unit's whole state, cut as its shard is.
  optim::StateDict slots;
  for (const auto& [key, t] : parts[0]) {
    if (key.rfind("optimizer.", 0) != 0) continue;
    const std::string name = key.substr(std::string("optimizer.").size());
    if (name == "step") {
      slots[name] = t;
      continue;
    }
    const size_t dot = name.rfind('.');
    size_t u = units_.size();
    try {
      u = dot == std::string::npos ? units_.size() : std::stoul(name.substr(dot + 1));
    } catch (const std::exception&) {
    }
    REEL_CHECK(u < units_.size(), "FullyShardedDataParallel load_shard_checkpoint: optimizer state '", name,
               "' names no unit of this model's ", units_.size());
    const Unit& k = units_[u];
    const Tensor padded = zeros({k.layout.padded}, t.dtype());
    untracked::slice(padded, 0, 0, k.layout.numel).copy_(whole(key, k.layout.numel));
    slots[name] = untracked::slice(padded, 0, k.layout.begin, k.layout.begin + k.layout.chunk).clone();
  }
  optimizer.load_state_dict(slots);
}
}  // namespace reel::distributed
