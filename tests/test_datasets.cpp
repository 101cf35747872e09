// IDX reading (written here with zlib, gzip and plain), malformed headers, truncation; the real
// Fashion-MNIST and fortunes files when their packages are installed.
#include <zlib.h>

#include <algorithm>
#include <cstdio>
#include <sys/stat.h>

#include "nn/datasets.h"
#include "testing.h"

using namespace reel;
using namespace reel::nn;

namespace {
void write_gz(const std::string& path, const std::string& bytes) {
  gzFile f = gzopen(path.c_str(), "wb");
  REQUIRE(f != nullptr);
  REQUIRE(gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size())) == static_cast<int>(bytes.size()));
  gzclose(f);
}
std::string idx_header(uint8_t type, std::vector<uint32_t> dims) {
  std::string h = {0, 0, static_cast<char>(type), static_cast<char>(dims.size())};
  for (uint32_t d : dims)
    for (int s = 24; s >= 0; s -= 8) h += static_cast<char>((d >> s) & 0xff);
  return h;
}
bool exists(const std::string& p) {
  struct stat st;
  return ::stat(p.c_str(), &st) == 0;
}
}  // namespace

TEST_CASE("IDX files round trip, gzip-compressed or plain") {
  std::string payload;
  for (int i = 0; i < 2 * 3 * 4; ++i) payload += static_cast<char>(i * 10);
  write_gz("test_idx.gz", idx_header(0x08, {2, 3, 4}) + payload);
  IdxArray a = read_idx("test_idx.gz");
  CHECK(a.shape == Shape{2, 3, 4});
  CHECK(a.data.size() == 24);
  CHECK(a.data[5] == 50);
  FILE* plain = std::fopen("test_idx.raw", "wb");
  const std::string raw = idx_header(0x08, {3}) + "abc";
  std::fwrite(raw.data(), 1, raw.size(), plain);
  std::fclose(plain);
  CHECK(read_idx("test_idx.raw").data == std::vector<uint8_t>{'a', 'b', 'c'});
  std::remove("test_idx.gz");
  std::remove("test_idx.raw");
}

TEST_CASE("malformed IDX files raise reel::Error") {
  const std::string p = "test_idx_bad.gz";
  write_gz(p, std::string("\x01\x00\x08\x01", 4) + std::string(4, '\0'));
  CHECK_REEL_ERROR(read_idx(p), "is not an IDX file");
  write_gz(p, idx_header(0x0D, {2}) + "abcdefgh");
  CHECK_REEL_ERROR(read_idx(p), "only unsigned bytes (0x08) are supported");
  write_gz(p, idx_header(0x08, {}));
  CHECK_REEL_ERROR(read_idx(p), "has 0 dimensions");
  write_gz(p, idx_header(0x08, {10, 10}) + "short");
  CHECK_REEL_ERROR(read_idx(p), "is truncated: expected 100 bytes of data, got 5");
  write_gz(p, std::string("\0\0", 2));
  CHECK_REEL_ERROR(read_idx(p), "is truncated: expected 4 bytes of header");
  write_gz(p, idx_header(0x08, {2}) + "abc");
  CHECK_REEL_ERROR(read_idx(p), "has bytes after the 2 its header declares");
  write_gz(p, idx_header(0x08, {65536, 65536, 65536}));
  CHECK_REEL_ERROR(read_idx(p), "which is too large");
  std::remove(p.c_str());
  CHECK_REEL_ERROR(read_idx("/nonexistent.idx"), "cannot open '/nonexistent.idx'");
  CHECK_REEL_ERROR(load_fashion_mnist("train", "/nonexistent"), "install Debian's package dataset-fashion-mnist");
  CHECK_REEL_ERROR(load_fashion_mnist("valid"), "split must be train or test");
  CHECK_REEL_ERROR(load_fortunes("/nonexistent"), "install Debian's package fortunes");
}

TEST_CASE("the installed Fashion-MNIST test split and fortunes corpus load") {
  if (exists(std::string(kFashionMnistDir) + "/t10k-images-idx3-ubyte.gz")) {
    ImageDataset test = load_fashion_mnist("test");
    CHECK(test.images.shape() == Shape{10000, 784});
    CHECK(test.labels.shape() == Shape{10000});
    const std::vector<int32_t> y = test.labels.to_vector<int32_t>();
    CHECK(*std::min_element(y.begin(), y.end()) == 0);
    CHECK(*std::max_element(y.begin(), y.end()) == 9);
    const std::vector<float> x = test.images.narrow(0, 0, 1).to_vector<float>();
    CHECK(*std::max_element(x.begin(), x.end()) <= 1.0f);
  }
  if (exists(kFortunesDir)) {
    const std::string text = load_fortunes();
    CHECK(text.size() > 100000);
    CHECK(text.find("\n%\n") == std::string::npos);
  }
}
