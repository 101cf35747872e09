// IDX and fortunes readers (see datasets.h).
#include "nn/datasets.h"

#include <zlib.h>

#include <algorithm>
#include <cstring>
#include <dirent.h>
#include <fstream>
#include <memory>
#include <sstream>
#include <sys/stat.h>

#include "core/checked_math.h"

namespace reel::nn {

namespace {
bool file_exists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

// Reads exactly n bytes or reports how many were missing.
void read_exact(gzFile f, void* dst, size_t n, const std::string& path, const char* what) {
  const int got = gzread(f, dst, static_cast<unsigned>(n));
  REEL_CHECK(got >= 0 && static_cast<size_t>(got) == n, "read_idx: '", path, "' is truncated: expected ", n,
             " bytes of ", what, ", got ", std::max(got, 0));
}
}  // namespace

IdxArray read_idx(const std::string& path) {
  struct stat st;
  REEL_CHECK(::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode), "read_idx: cannot open '", path, "'");
  std::unique_ptr<gzFile_s, int (*)(gzFile)> f(gzopen(path.c_str(), "rb"), gzclose);
  REEL_CHECK(f != nullptr, "read_idx: cannot open '", path, "'");
  uint8_t magic[4];
  read_exact(f.get(), magic, 4, path, "header");
  REEL_CHECK(magic[0] == 0 && magic[1] == 0, "read_idx: '", path, "' is not an IDX file (magic bytes ",
             int(magic[0]), " ", int(magic[1]), ", expected 0 0)");
  REEL_CHECK(magic[2] == 0x08, "read_idx: '", path, "' holds type 0x", std::hex, int(magic[2]),
             ", only unsigned bytes (0x08) are supported");
  const int ndims = magic[3];
  REEL_CHECK(ndims >= 1 && ndims <= 4, "read_idx: '", path, "' has ", ndims, " dimensions, expected 1 to 4");
  IdxArray out;
  for (int d = 0; d < ndims; ++d) {
    uint8_t be[4];
    read_exact(f.get(), be, 4, path, "header");
    const uint32_t n = (uint32_t(be[0]) << 24) | (uint32_t(be[1]) << 16) | (uint32_t(be[2]) << 8) | be[3];
    out.shape.push_back(n);
  }
  // The declared size, checked (an unchecked product of four uint32 dims wrapped, to 0 for
  // (2^17, 2^17, 2^30), which then read as an empty array), and bounded: 16 GiB is far beyond any
  // IDX data set.
  const std::string where = "read_idx: '" + path + "'";
  const int64_t total = shape_numel(out.shape, where);
  REEL_CHECK(total <= (int64_t{1} << 34), where, " declares shape ", out.shape, ", which is too large");

  // Nothing is allocated for what the header merely declares (an 8-byte header once made this
  // reserve and zero 4 GiB before finding the file truncated). A plain file's payload is what
  // follows the header: compared before reading.
  if (gzdirect(f.get())) {
    const int64_t present = std::max<int64_t>(0, static_cast<int64_t>(st.st_size) - (4 + 4 * int64_t{ndims}));
    REEL_CHECK(total <= present, where, " is truncated: expected ", total, " bytes of data, got ", present);
  }
  // A gzip payload's size is known only by inflating it: read in bounded chunks, growing the
  // buffer (geometrically, never past the declared size) only as bytes arrive.
  constexpr int64_t kChunk = int64_t{1} << 20;
  int64_t got = 0;
  while (got < total) {
    const int64_t want = std::min(kChunk, total - got);
    const int64_t capacity = static_cast<int64_t>(out.data.capacity());
    if (capacity < got + want) out.data.reserve(static_cast<size_t>(std::min(total, std::max(2 * capacity, got + want))));
    out.data.resize(static_cast<size_t>(got + want));
    const int n = gzread(f.get(), out.data.data() + got, static_cast<unsigned>(want));
    got += std::max(n, 0);
    if (n != want) break;  // end of file (or a corrupt stream): short
  }
  REEL_CHECK(got == total, where, " is truncated: expected ", total, " bytes of data, got ", got);
  uint8_t extra;
  REEL_CHECK(gzread(f.get(), &extra, 1) == 0, "read_idx: '", path, "' has bytes after the ", total,
             " its header declares");
  return out;
}

ImageDataset load_fashion_mnist(const std::string& split, const std::string& dir) {
  REEL_CHECK(split == "train" || split == "test", "load_fashion_mnist: split must be train or test, got '", split, "'");
  const std::string prefix = dir + "/" + (split == "train" ? "train" : "t10k");
  const std::string images_path = prefix + "-images-idx3-ubyte.gz", labels_path = prefix + "-labels-idx1-ubyte.gz";
  for (const std::string& p : {images_path, labels_path})
    REEL_CHECK(file_exists(p), "load_fashion_mnist: ", p,
               " not found; install Debian's package dataset-fashion-mnist (tools/setup.sh does)");
  const IdxArray images = read_idx(images_path), labels = read_idx(labels_path);
  REEL_CHECK(images.shape.size() == 3 && labels.shape.size() == 1 && images.shape[0] == labels.shape[0],
             "load_fashion_mnist: images ", images.shape, " and labels ", labels.shape, " do not match");
  // read_idx bounds the product of all dims, but a zero dim lets the others be anything.
  const int64_t n = images.shape[0],
                pixels = checked_mul(images.shape[1], images.shape[2], "load_fashion_mnist: images", images.shape);
  std::vector<float> x(images.data.size());
  for (size_t i = 0; i < x.size(); ++i) x[i] = images.data[i] / 255.0f;
  std::vector<int32_t> y(labels.data.begin(), labels.data.end());
  return {from_vector(x, {n, pixels}), from_vector(y, {n})};
}

std::string load_fortunes(const std::string& dir) {
  std::vector<std::string> names;
  if (DIR* d = ::opendir(dir.c_str())) {
    while (const dirent* e = ::readdir(d)) {
      const std::string name = e->d_name;
      if (name.empty() || name[0] == '.' || name.find('.') != std::string::npos) continue;  // skip .dat/.u8
      if (file_exists(dir + "/" + name)) names.push_back(name);
    }
    ::closedir(d);
  }
  REEL_CHECK(!names.empty(), "load_fortunes: no fortune files in '", dir,
             "'; install Debian's package fortunes (tools/setup.sh does)");
  std::sort(names.begin(), names.end());
  std::string text;
  for (const std::string& name : names) {
    std::ifstream f(dir + "/" + name);
    std::string line;
    while (std::getline(f, line)) {
      if (line == "%") continue;
      text += line;
      text += '\n';
    }
  }
  return text;
}

}  // namespace reel::nn
