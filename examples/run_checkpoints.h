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
// another model shape fails the weights' load with the names and shapes that differ. Under --dist
// each rank's data stream differs and ZeRO shards the state: not written yet (reel::Error).
#pragma once
#include <chrono>
#include <cstdio>
#include <functional>
#include <optional>
#include <string>

#include "nn/checkpoint_folder.h"
#include "optim/training_state.h"
#include "reel.h"
#include "train_options.h"

namespace examples {

class RunCheckpoints {
 public:
  RunCheckpoints(const TrainOptions& o, std::string program)
      : program_(std::move(program)), precision_(o.precision), every_(o.save_every), stop_at_(o.stop_at),
        resume_(o.resume) {
    REEL_CHECK(!o.checkpoint_dir.empty() || (!o.resume && o.save_every == 0 && o.stop_at == 0),
               "--resume, --save-every and --stop-at need --checkpoint-dir DIR");
    if (o.checkpoint_dir.empty()) return;
    REEL_CHECK(!o.dist, "--checkpoint-dir with --dist: each rank's data stream and ZeRO's shards are not written yet; "
               "checkpoint a one-process run");
    folder_.emplace(o.checkpoint_dir, o.keep);
  }
  bool enabled() const { return folder_.has_value(); }

  // --resume: the newest checkpoint that verifies, put back into the model, optimizer, scaler and
  // accumulator; its metadata (the example's own keys included) in *metadata. The optimizer step it
  // was taken after; 0 when not resuming or when the folder holds no checkpoint yet (a fresh start).
  int64_t resume(reel::nn::Module& model, reel::optim::Optimizer& opt, reel::optim::GradScaler* scaler,
                 reel::optim::Accumulator& acc, reel::nn::Metadata* metadata) {
    if (!folder_ || !resume_) return 0;
    std::vector<std::string> passed_over;
    std::optional<reel::nn::CheckpointFolder::Loaded> l = folder_->load_latest(reel::Device::cpu(), &passed_over);
    for (const std::string& why : passed_over) std::printf("resume: passed over %s\n", why.c_str());
    if (!l) {
      std::printf("resume: no checkpoint in '%s' yet: starting from step 0\n", folder_->dir().c_str());
      return 0;
    }
    const auto field = [&](const char* key) {
      const auto it = l->metadata.find(key);
      return it == l->metadata.end() ? std::string("(none)") : it->second;
    };
    REEL_CHECK(field("run.program") == program_, "resume: '", l->path, "' is a checkpoint of ", field("run.program"),
               ", not of ", program_);
    REEL_CHECK(field("run.precision") == precision_, "resume: '", l->path, "' was made with --precision ",
               field("run.precision"), "; this run has --precision ", precision_, ": resume with the precision it was made with");
    REEL_CHECK(field("run.world_size") == "1", "resume: '", l->path, "' was made by ", field("run.world_size"),
               " ranks; this run is one process");
    reel::optim::restore_training_state(
        {l->tensors, l->metadata}, [&](const reel::optim::StateDict& weights) { model.load_state_dict(weights); },
        opt, scaler, &acc, l->path);
    if (metadata) *metadata = l->metadata;
    std::printf("resume: from '%s', after optimizer step %lld\n", l->path.c_str(), static_cast<long long>(l->step));
    std::fflush(stdout);
    return l->step;
  }

  // After optimizer step `step` of `last`: a checkpoint when one is due (every --save-every steps,
  // after the last, and at --stop-at), with the example's metadata `extra()` (its data cursor and
  // order, its configuration).
  void after_step(int64_t step, int64_t last, const reel::nn::Module& model, const reel::optim::Optimizer& opt,
                  const reel::optim::GradScaler* scaler, const reel::optim::Accumulator& acc,
                  const std::function<reel::nn::Metadata()>& extra) {
    if (!folder_ || !(step == last || step == stop_at_ || (every_ > 0 && step % every_ == 0))) return;
    const auto start = std::chrono::steady_clock::now();
    reel::nn::Metadata m = extra();
    m["run.program"] = program_;
    m["run.precision"] = precision_;
    m["run.world_size"] = "1";
    const reel::optim::TrainingState s = reel::optim::gather_training_state(model.state_dict(), opt, scaler, &acc, m);
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
  bool resume_;
  std::optional<reel::nn::CheckpointFolder> folder_;
  int64_t saves_ = 0, bytes_ = 0;
  double save_ms_ = 0;
  std::string last_path_;
};

}  // namespace examples
