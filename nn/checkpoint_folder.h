// A training run's folder of checkpoints (--checkpoint-dir): safetensors files named by the
// optimizer step they were taken after, written so that a kill at any moment leaves every
// checkpoint already there readable, and verified when read.
//
// Writing: the file goes to a temporary name in the folder ("step-000000120.safetensors.tmp"), is
// flushed and fsynced, renamed into place, and the folder is fsynced, so the new name appears only
// with its whole content (POSIX rename is atomic). A write that fails (a full disk, a file-size
// limit, no permission) raises reel::Error naming the path and the system's reason, removes the
// temporary and leaves every earlier checkpoint as it was. Then all but the newest `keep` are
// removed.
//
// Verifying: each tensor's CRC-32 (zlib's) is stored in the metadata ("reel.crc32": a JSON object,
// name -> eight hex digits) with the step ("reel.step"); load_latest takes the newest checkpoint
// whose header parses, whose tensors match their checksums one by one and whose names are exactly
// those the checksums list, and reports each newer one it passed over with the reason (a
// truncated file, a flipped byte, a half-written temporary is never read: its name is not a
// checkpoint's). The files are ordinary safetensors: PyTorch's safetensors reads them.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "nn/safetensors.h"

namespace reel::nn {

class CheckpointFolder {
 public:
  // `dir` is created if missing (reel::Error naming it when it cannot be). keep >= 1: how many of
  // the newest checkpoints save() leaves.
  CheckpointFolder(std::string dir, int keep = 2);

  const std::string& dir() const { return dir_; }
  // The path the checkpoint of `step` has: <dir>/step-<step, 9 digits>.safetensors.
  std::string path_of(int64_t step) const;
  // The steps of the checkpoint files present (well named; not yet verified), oldest first.
  std::vector<int64_t> steps() const;

  // Writes `tensors` and `metadata` (plus reel.step and reel.crc32) as the checkpoint of `step`,
  // atomically, then prunes to the newest `keep` (their parts too). Returns the bytes written.
  int64_t save(int64_t step, const TensorDict& tensors, Metadata metadata) const;

  // A sharded checkpoint: each rank writes its part of `step` first (atomically, as save() does;
  // not a checkpoint on its own: steps() does not list it), then one rank writes the checkpoint
  // itself with save(), last, naming the parts: a kill before it leaves the previous checkpoint the
  // newest. <dir>/step-<step, 9 digits>.rank-<rank, 5 digits>.safetensors. Returns the bytes written.
  std::string part_path(int64_t step, int rank) const;
  int64_t save_part(int64_t step, int rank, const TensorDict& tensors, Metadata metadata) const;

  struct Loaded {
    int64_t step = 0;
    std::string path;
    TensorDict tensors;
    Metadata metadata;  // reel.step and reel.crc32 included
    std::vector<std::string> passed_over;  // newer checkpoints that did not verify: "path: why"
  };
  // The newest checkpoint that verifies, its tensors on `device`; nullopt when none does (then
  // `passed_over`, if given, gets why each present one did not).
  std::optional<Loaded> load_latest(Device device = Device::cpu(),
                                    std::vector<std::string>* passed_over = nullptr) const;
  // One checkpoint file, verified: reel::Error naming the file and what failed.
  static Loaded load(const std::string& path, Device device = Device::cpu());

 private:
  int64_t write(const std::string& path, const TensorDict& tensors, Metadata metadata, int64_t step) const;
  std::string dir_;
  int keep_;
};

// The CRC-32 of a tensor's values (its bytes in row-major order, little-endian, as safetensors
// stores them).
uint32_t tensor_crc32(const Tensor& t);

}  // namespace reel::nn
