// A run's folder of checkpoints (see checkpoint_folder.h): the atomic write (temporary, fsync,
// rename, fsync of the folder), the pruning to the newest `keep`, and the verified read.
#include "nn/checkpoint_folder.h"

#include <fcntl.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>

#include "core/error.h"

namespace reel::nn {

namespace fs = std::filesystem;

namespace {

constexpr const char* kStepKey = "reel.step";
constexpr const char* kCrcKey = "reel.crc32";

std::string hex32(uint32_t v) {
  char s[9];
  std::snprintf(s, sizeof s, "%08x", v);
  return s;
}

// The step of a checkpoint's file name, "step-000000120.safetensors"; nullopt for any other name
// (a temporary, a stray file).
std::optional<int64_t> step_of(const std::string& name) {
  const std::string prefix = "step-", suffix = ".safetensors";
  if (name.size() != prefix.size() + 9 + suffix.size() || name.compare(0, prefix.size(), prefix) != 0 ||
      name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0)
    return std::nullopt;
  const std::string digits = name.substr(prefix.size(), 9);
  if (!std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; })) return std::nullopt;
  return std::stoll(digits);
}

// write(2) all of `bytes` to `fd`, retrying a short or interrupted write; errno on failure.
bool write_all(int fd, const std::string& bytes) {
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      if (n == 0) errno = EIO;
      return false;
    }
    done += static_cast<size_t>(n);
  }
  return true;
}

// While alive, a write past the process's file-size limit (ulimit -f) fails with EFBIG instead of
// ending the process with SIGXFSZ: a checkpoint that does not fit is an error to report.
class IgnoreFileSizeSignal {
 public:
  IgnoreFileSizeSignal() { previous_ = std::signal(SIGXFSZ, SIG_IGN); }
  ~IgnoreFileSizeSignal() { std::signal(SIGXFSZ, previous_); }
  IgnoreFileSizeSignal(const IgnoreFileSizeSignal&) = delete;
  IgnoreFileSizeSignal& operator=(const IgnoreFileSizeSignal&) = delete;

 private:
  void (*previous_)(int);
};

}  // namespace

uint32_t tensor_crc32(const Tensor& t) {
  const Tensor host = t.to(Device::cpu()).contiguous();
  const auto* p = static_cast<const unsigned char*>(host.data_ptr());
  size_t left = static_cast<size_t>(host.numel()) * dtype_size(host.dtype());
  uLong crc = crc32(0L, Z_NULL, 0);
  while (left > 0) {  // zlib's length is a uInt: at most 1 GiB a call
    const uInt n = static_cast<uInt>(std::min<size_t>(left, size_t{1} << 30));
    crc = crc32(crc, p, n);
    p += n;
    left -= n;
  }
  return static_cast<uint32_t>(crc);
}

CheckpointFolder::CheckpointFolder(std::string dir, int keep) : dir_(std::move(dir)), keep_(keep) {
  REEL_CHECK(keep_ >= 1, "checkpoint folder '", dir_, "': keep must be at least 1, got ", keep_);
  std::error_code ec;
  fs::create_directories(dir_, ec);
  REEL_CHECK(!ec && fs::is_directory(dir_), "checkpoint folder '", dir_, "' cannot be created",
             ec ? " (" + ec.message() + ")" : std::string(" (a file of that name is in the way)"));
}

std::string CheckpointFolder::path_of(int64_t step) const {
  char name[40];
  std::snprintf(name, sizeof name, "step-%09lld.safetensors", static_cast<long long>(step));
  return (fs::path(dir_) / name).string();
}

std::vector<int64_t> CheckpointFolder::steps() const {
  std::vector<int64_t> out;
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator(dir_, ec))
    if (const auto s = step_of(e.path().filename().string()); s && e.is_regular_file()) out.push_back(*s);
  std::sort(out.begin(), out.end());
  return out;
}

std::string CheckpointFolder::part_path(int64_t step, int rank) const {
  char name[56];
  std::snprintf(name, sizeof name, "step-%09lld.rank-%05d.safetensors", static_cast<long long>(step), rank);
  return (fs::path(dir_) / name).string();
}

int64_t CheckpointFolder::write(const std::string& path, const TensorDict& tensors, Metadata metadata,
                                int64_t step) const {
  REEL_CHECK(step >= 0 && step <= 999999999, "checkpoint folder '", dir_, "': step ", step, " is not in [0, 1e9)");
  nlohmann::json crcs = nlohmann::json::object();
  for (const auto& [name, t] : tensors) crcs[name] = hex32(tensor_crc32(t));
  metadata[kStepKey] = std::to_string(step);
  metadata[kCrcKey] = crcs.dump();
  const std::string bytes = to_safetensors_bytes(tensors, metadata);

  const std::string tmp = path + ".tmp";
  const auto fail = [&](const char* what) {
    const int err = errno;
    ::unlink(tmp.c_str());
    REEL_FAIL("checkpoint: ", what, " '", tmp, "' failed: ", std::strerror(err), " (", bytes.size(),
              " bytes; the checkpoints already in '", dir_, "' are untouched)");
  };
  {
    IgnoreFileSizeSignal no_sigxfsz;
    const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) fail("opening");
    if (!write_all(fd, bytes)) {
      const int err = errno;
      ::close(fd);
      errno = err;
      fail("writing");
    }
    if (::fsync(fd) != 0) {
      const int err = errno;
      ::close(fd);
      errno = err;
      fail("flushing");
    }
    if (::close(fd) != 0) fail("closing");
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) fail("renaming");
  // The rename itself is made durable by syncing the folder that holds the names.
  if (const int dfd = ::open(dir_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC); dfd >= 0) {
    (void)::fsync(dfd);
    ::close(dfd);
  }
  return static_cast<int64_t>(bytes.size());
}

int64_t CheckpointFolder::save_part(int64_t step, int rank, const TensorDict& tensors, Metadata metadata) const {
  REEL_CHECK(rank >= 0 && rank <= 99999, "checkpoint folder '", dir_, "': rank ", rank, " is not in [0, 1e5)");
  return write(part_path(step, rank), tensors, std::move(metadata), step);
}

int64_t CheckpointFolder::save(int64_t step, const TensorDict& tensors, Metadata metadata) const {
  const int64_t bytes = write(path_of(step), tensors, std::move(metadata), step);
  // Keep the newest `keep_` (and their parts); a temporary a killed save left behind goes too, and
  // parts of an older step no checkpoint names (a sharded save killed before its checkpoint).
  const std::vector<int64_t> present = steps();
  const size_t drop = present.size() > static_cast<size_t>(keep_) ? present.size() - static_cast<size_t>(keep_) : 0;
  std::error_code ec;
  for (size_t i = 0; i < drop; ++i) fs::remove(path_of(present[i]), ec);
  const std::vector<int64_t> kept(present.begin() + static_cast<std::ptrdiff_t>(drop), present.end());
  for (const fs::directory_entry& e : fs::directory_iterator(dir_, ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind("step-", 0) != 0) continue;
    if (name.size() > 4 && name.compare(name.size() - 4, 4, ".tmp") == 0) {
      fs::remove(e.path(), ec);  // nobody writes while a save runs: a killed save's leftover
      continue;
    }
    const size_t dot = name.find(".rank-");
    if (dot == std::string::npos || dot < 6) continue;
    int64_t part_step = -1;
    try {
      part_step = std::stoll(name.substr(5, dot - 5));
    } catch (const std::exception&) {
      continue;
    }
    if (part_step <= step && std::find(kept.begin(), kept.end(), part_step) == kept.end()) fs::remove(e.path(), ec);
  }
  return bytes;
}

CheckpointFolder::Loaded CheckpointFolder::load(const std::string& path, Device device) {
  Loaded out;
  out.path = path;
  out.tensors = load_safetensors(path, device, &out.metadata);  // a truncated file or bad header raises here
  const auto step = out.metadata.find(kStepKey);
  const auto crc = out.metadata.find(kCrcKey);
  REEL_CHECK(step != out.metadata.end() && crc != out.metadata.end(), "checkpoint '", path,
             "': no ", kStepKey, " or ", kCrcKey, " in its metadata: not a checkpoint of a reel run");
  try {
    out.step = std::stoll(step->second);
  } catch (const std::exception&) {
    REEL_FAIL("checkpoint '", path, "': ", kStepKey, " is not a number");
  }
  nlohmann::json crcs;
  try {
    crcs = nlohmann::json::parse(crc->second);
  } catch (const std::exception&) {
    REEL_FAIL("checkpoint '", path, "': ", kCrcKey, " is not JSON");
  }
  REEL_CHECK(crcs.is_object() && crcs.size() == out.tensors.size(), "checkpoint '", path, "': ", crcs.size(),
             " checksums for ", out.tensors.size(), " tensors");
  for (const auto& [name, t] : out.tensors) {
    REEL_CHECK(crcs.contains(name) && crcs[name].is_string(), "checkpoint '", path, "': tensor '", name,
               "' has no checksum");
    const std::string got = hex32(tensor_crc32(t));
    REEL_CHECK(got == crcs[name].get<std::string>(), "checkpoint '", path, "': tensor '", name,
               "' does not match its checksum (", got, ", stored ", crcs[name].get<std::string>(),
               "): the file is corrupted");
  }
  return out;
}

std::optional<CheckpointFolder::Loaded> CheckpointFolder::load_latest(Device device,
                                                                      std::vector<std::string>* passed_over) const {
  std::vector<std::string> skipped;
  std::vector<int64_t> present = steps();
  for (auto it = present.rbegin(); it != present.rend(); ++it) {
    try {
      Loaded l = load(path_of(*it), device);
      l.passed_over = skipped;
      if (passed_over) *passed_over = skipped;
      return l;
    } catch (const Error& e) {
      skipped.push_back(e.what());
    }
  }
  if (passed_over) *passed_over = skipped;
  return std::nullopt;
}

}  // namespace reel::nn
