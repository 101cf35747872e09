// --checkpoint-dir DIR [--save-every N] [--keep K] [--resume] in the training examples: the run's
// whole state (optim/training_state.h: weights, optimizer, loss scaler, the default generator's
// streams; plus what the example adds: its data order and cursor, its configuration) written to
// DIR's checkpoint folder (nn/checkpoint_folder.h: atomic, checksummed, the newest K kept) after
// every N-th optimizer step and after the last, and put back by --resume from the newest one that
// verifies, so the resumed run computes the bits the unstopped run would have.
//
// The example calls resume() just before its training loop (after anything it runs first that
// draws random streams, so the restored generator is where the unstopped run's was) and
// after_step() after each optimizer step. A checkpoint records the program, the precision and the
// world size; resuming with another precision or world size is refused with both named, and
// another model shape fails the weights' load with the names and shapes that differ.
//
// Under --dist every rank calls both. With nothing sharded (--zero 0) rank 0 writes one checkpoint:
// the model, the optimizer's state and every rank's own metadata (its data stream:
// "rank.<r>.<key>"). Under --zero 1/2/3 every rank first writes its part (nn::CheckpointFolder::
// save_part: ZeRO-1's chunks of AdamW's moments, or FSDP's shards with their optimizer state and the
// buffers: Distributed::shard_checkpoint), all wait for each other, then rank 0 writes the
// checkpoint naming the parts ("run.parts") with the rest (the model too under --zero 1, where it is
// replicated), last, so a kill in between leaves the previous checkpoint the newest; nothing whole
// is gathered. On resume every rank reads the checkpoint and every part it names (one that does not
// verify passes the checkpoint over for the one before) and keeps its own cut of each chunked
// buffer (load_shard_checkpoint), then takes its own data stream back. Where every rank's data
// state is the same (fashion_mnist's one shuffled order, dealt round robin) a checkpoint resumes on
// another number of ranks too: re-sharded, the windows the same samples, only the sums' order new.
#pragma once
#include <chrono>
#include <cstdio>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "nn/checkpoint_folder.h"
#include "optim/training_state.h"
#include "reel.h"
#include "train_options.h"

namespace examples {

class RunCheckpoints {
 public:
  // `data_per_rank`: each rank draws its own data stream (char_gpt), so a checkpoint resumes only on
  // as many ranks as made it; false: every rank's data state is the same (fashion_mnist's shuffled
  // order, dealt round robin), so it resumes on any number of ranks, re-sharded (ZeRO-1's moments
  // cut anew from the whole state), the windows the same samples and only the sums' order new.
  RunCheckpoints(const TrainOptions& o, std::string program, const Distributed& dist, bool data_per_rank)
      : program_(std::move(program)), precision_(o.precision), every_(o.save_every), stop_at_(o.stop_at),
        resume_(o.resume), data_per_rank_(data_per_rank), dist_(dist) {
    REEL_CHECK(!o.checkpoint_dir.empty() || (!o.resume && o.save_every == 0 && o.stop_at == 0),
               "--resume, --save-every and --stop-at need --checkpoint-dir DIR");
    if (o.checkpoint_dir.empty()) return;
    sharded_ = dist.enabled() && dist.zero() >= 1;
    whole_model_ = !(dist.enabled() && dist.zero() >= 2);  // --zero 0/1: the parameters are replicated
    folder_.emplace(o.checkpoint_dir, o.keep);
  }
  bool enabled() const { return folder_.has_value(); }

  // --resume: the newest checkpoint that verifies, put back into the model, optimizer, scaler and
  // accumulator; its metadata (the example's own keys included, this rank's own under --dist) in
  // *metadata. The optimizer step it was taken after; 0 when not resuming or when the folder holds
  // no checkpoint yet (a fresh start).
  int64_t resume(reel::nn::Module& model, reel::optim::Optimizer& opt, reel::optim::GradScaler* scaler,
                 reel::optim::Accumulator& acc, reel::nn::Metadata* metadata) {
    if (!folder_ || !resume_) return 0;
    // The newest checkpoint that verifies, and under --zero 2/3 every part it names too.
    std::optional<reel::nn::CheckpointFolder::Loaded> l;
    std::vector<reel::nn::TensorDict> parts;
    const std::vector<int64_t> steps = folder_->steps();
    for (auto it = steps.rbegin(); it != steps.rend() && !l; ++it) {
      try {
        reel::nn::CheckpointFolder::Loaded c = reel::nn::CheckpointFolder::load(folder_->path_of(*it));
        parts.clear();
        const auto named = c.metadata.find("run.parts");
        const int n = named == c.metadata.end() ? 0 : std::stoi(named->second);
        const std::string zero = c.metadata.count("run.zero") ? c.metadata.at("run.zero") : "0";
        // Parts are read by a run that shards as they were cut (ZeRO-1's buckets, or FSDP's units); a
        // whole checkpoint by a run that holds the model whole (any but --zero 2/3).
        const bool fsdp_parts = zero == "2" || zero == "3", fsdp_run = !whole_model_;
        REEL_CHECK(n > 0 ? sharded_ && fsdp_parts == fsdp_run : !fsdp_run, "resume: '", c.path, "' was written by a run ",
                   "with --zero ", zero, n > 0 ? " (in parts, one a rank)" : "", " and this run has --zero ",
                   dist_.enabled() ? dist_.zero() : 0, ": resume with the --zero it was made with (under mpirun, -np 1 ",
                   "for one process)");
        for (int r = 0; r < n; ++r) parts.push_back(reel::nn::CheckpointFolder::load(folder_->part_path(*it, r)).tensors);
        l = std::move(c);
      } catch (const reel::Error& e) {
        if (std::string(e.what()).find("resume:") == 0) throw;  // not a damaged file: a run that does not fit
        std::printf("resume: passed over %s\n", e.what());
      }
    }
    if (!l) {
      std::printf("resume: no checkpoint in '%s' yet: starting from step 0\n", folder_->dir().c_str());
      return 0;
    }
    const auto field = [&](const std::string& key) {
      const auto it = l->metadata.find(key);
      return it == l->metadata.end() ? std::string("(none)") : it->second;
    };
    REEL_CHECK(field("run.program") == program_, "resume: '", l->path, "' is a checkpoint of ", field("run.program"),
               ", not of ", program_);
    REEL_CHECK(field("run.precision") == precision_, "resume: '", l->path, "' was made with --precision ",
               field("run.precision"), "; this run has --precision ", precision_, ": resume with the precision it was made with");
    const std::string world = std::to_string(dist_.world());
    REEL_CHECK(!data_per_rank_ || field("run.world_size") == world, "resume: '", l->path, "' was made by ",
               field("run.world_size"), " rank(s); this run has ", world, ": each rank's data stream is its own");
    if (field("run.world_size") != world)
      std::printf("resume: made by %s rank(s), resumed on %s: the state re-sharded, the sums' order new\n",
                  field("run.world_size").c_str(), world.c_str());
    if (!parts.empty()) {  // the parts hold the optimizer (and under --zero 2/3 the model); the checkpoint the rest
      reel::optim::restore_training_state(
          {l->tensors, l->metadata},
          [&](const reel::optim::StateDict& weights) {
            if (whole_model_) model.load_state_dict(weights);
          },
          opt, scaler, &acc, l->path, [](const reel::optim::StateDict&) {});
      try {
        dist_.load_shard_checkpoint(parts, opt);
      } catch (const reel::Error& e) {
        REEL_FAIL("resume from '", l->path, "': its parts hold another model or optimizer than this run's: ", e.what());
      }
    } else {
      reel::optim::restore_training_state(
          {l->tensors, l->metadata}, [&](const reel::optim::StateDict& weights) { model.load_state_dict(weights); },
          opt, scaler, &acc, l->path,
          [&](const reel::optim::StateDict& state) { dist_.load_full_optimizer_state(opt, state); });
    }
    if (metadata) {
      *metadata = l->metadata;
      const std::string mine = "rank." + std::to_string(data_per_rank_ ? dist_.rank() : 0) + ".";
      for (const auto& [key, value] : l->metadata)
        if (key.rfind(mine, 0) == 0) (*metadata)[key.substr(mine.size())] = value;
    }
    std::printf("resume: from '%s', after optimizer step %lld\n", l->path.c_str(), static_cast<long long>(l->step));
    std::fflush(stdout);
    return l->step;
  }

  // After optimizer step `step` of `last`: a checkpoint when one is due (every --save-every steps,
  // after the last, and at --stop-at), with the example's metadata `extra()` (its data cursor and
  // order, its configuration). Every rank calls it (the collectives of a --dist run).
  void after_step(int64_t step, int64_t last, const reel::nn::Module& model, const reel::optim::Optimizer& opt,
                  const reel::optim::GradScaler* scaler, const reel::optim::Accumulator& acc,
                  const std::function<reel::nn::Metadata()>& extra) {
    if (!folder_ || !(step == last || step == stop_at_ || (every_ > 0 && step % every_ == 0))) return;
    const auto start = std::chrono::steady_clock::now();
    reel::nn::Metadata m = extra();
    if (sharded_) {  // each rank its part first; the checkpoint naming them after every part is in place
      folder_->save_part(step, dist_.rank(), dist_.shard_checkpoint(opt), {{"run.part", std::to_string(dist_.rank())}});
      dist_.barrier();
    }
    const reel::optim::StateDict optimizer_state = sharded_ ? reel::optim::StateDict{} : opt.state_dict();
    if (dist_.world() > 1) {  // every rank's own keys (its data stream), under rank.<r>.
      const std::vector<std::string> all = dist_.gather_strings(nlohmann::json(m).dump());
      for (size_t r = 0; r < all.size(); ++r)
        for (const auto& [key, value] : nlohmann::json::parse(all[r]).get<reel::nn::Metadata>())
          m["rank." + std::to_string(r) + "." + key] = value;
    }
    if (dist_.rank() != 0) return;  // the rest is replicated: rank 0's to write
    m["run.program"] = program_;
    m["run.precision"] = precision_;
    m["run.world_size"] = std::to_string(dist_.world());
    m["run.zero"] = std::to_string(dist_.enabled() ? dist_.zero() : 0);
    if (sharded_) m["run.parts"] = std::to_string(dist_.world());
    const reel::optim::TrainingState s = reel::optim::gather_training_state(
        whole_model_ ? model.state_dict() : reel::optim::StateDict{}, optimizer_state, opt.lr(), scaler, &acc, m);
    const int64_t bytes = folder_->save(step, s.tensors, s.metadata);
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    save_ms_ += ms;
    ++saves_;
    bytes_ = bytes;
    last_path_ = folder_->path_of(step);
  }

  // Whether the run ends after `step` (--stop-at): the example leaves its loop.
  bool stop_after(int64_t step) const {
    if (stop_at_ == 0 || step != stop_at_) return false;
    std::printf("stopped after optimizer step %lld (--stop-at): --resume goes on from its checkpoint\n",
                static_cast<long long>(step));
    return true;
  }

  // After training: how many checkpoints were written, their size and the time they took.
  void report() const {
    if (saves_ == 0) return;
    std::printf("checkpoints: %lld written to '%s' (the last %s, %lld bytes), %.1f ms each on average\n",
                static_cast<long long>(saves_), folder_->dir().c_str(), last_path_.c_str(),
                static_cast<long long>(bytes_), save_ms_ / static_cast<double>(saves_));
  }

 private:
  std::string program_, precision_;
  int64_t every_, stop_at_;
  bool resume_, data_per_rank_;
  bool sharded_ = false;     // --zero 1/2/3: parts a rank, then the checkpoint naming them
  bool whole_model_ = true;  // the checkpoint holds the model (its parameters replicated: not --zero 2/3)
  const Distributed& dist_;
  std::optional<reel::nn::CheckpointFolder> folder_;
  int64_t saves_ = 0, bytes_ = 0;
  double save_ms_ = 0;
  std::string last_path_;
};

}  // namespace examples
