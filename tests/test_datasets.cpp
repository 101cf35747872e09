// IDX reading (written here with zlib, gzip and plain), malformed headers, truncation; the real
// Fashion-MNIST and fortunes files when their packages are installed.
#include <zlib.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <new>
#include <sys/stat.h>

#include "nn/datasets.h"
#include "testing.h"

using namespace reel;
using namespace reel::nn;

// This program's operator new refuses, while a CapNew is alive, any single request above its cap
// (std::bad_alloc): a reader that reserves what a header merely declares then fails the test
// instead of allocating gigabytes.
namespace {
std::atomic<size_t> g_new_cap{0};  // 0: no cap
struct CapNew {
  explicit CapNew(size_t bytes) { g_new_cap = bytes; }
  ~CapNew() { g_new_cap = 0; }
};
}  // namespace
void* operator new(size_t n) {
  const size_t cap = g_new_cap.load(std::memory_order_relaxed);
  if (cap != 0 && n > cap) throw std::bad_alloc();
  if (void* p = std::malloc(n ? n : 1)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, size_t) noexcept { std::free(p); }

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

TEST_CASE("a short IDX file declaring a huge shape fails before its payload is allocated") {
  const CapNew cap(32 << 20);
  const std::string gz = "test_idx_huge.gz", raw = "test_idx_huge.raw";
  // 8 bytes declaring 4 GiB; then 16 GiB (the largest shape read_idx accepts) over four dims.
  for (const std::vector<uint32_t>& dims : {std::vector<uint32_t>{0xFFFFFFFFu}, std::vector<uint32_t>{256, 256, 512, 512}}) {
    const std::string bytes = idx_header(0x08, dims) + "abc";
    write_gz(gz, bytes);
    FILE* f = std::fopen(raw.c_str(), "wb");
    REQUIRE(f != nullptr);
    std::fwrite(bytes.data(), 1, bytes.size(), f);
    std::fclose(f);
    const char* expected = dims.size() == 1 ? "is truncated: expected 4294967295 bytes of data, got 3"
                                            : "is truncated: expected 17179869184 bytes of data, got 3";
    CHECK_REEL_ERROR(read_idx(gz), expected);
    CHECK_REEL_ERROR(read_idx(raw), expected);
  }
  // 3 MiB of a declared 4 MiB: read in bounded chunks, then refused.
  write_gz(gz, idx_header(0x08, {4 << 20}) + std::string(3 << 20, 'x'));
  CHECK_REEL_ERROR(read_idx(gz), "is truncated: expected 4194304 bytes of data, got 3145728");
  std::remove(gz.c_str());
  std::remove(raw.c_str());
}

TEST_CASE("an IDX shape whose size wraps around 2^64 is refused, not read as empty") {
  const std::string p = "test_idx_wrap.gz";
  write_gz(p, idx_header(0x08, {1u << 17, 1u << 17, 1u << 30}));  // 2^64 elements: 0 after wrapping
  CHECK_REEL_ERROR(read_idx(p), "read_idx: 'test_idx_wrap.gz': shape (131072, 131072, 1073741824) is too large");
  // A zero dim makes an empty array, whatever the other dims.
  write_gz(p, idx_header(0x08, {0xFFFFFFFFu, 0xFFFFFFFFu, 0}));
  const IdxArray empty_array = read_idx(p);
  CHECK(empty_array.shape == Shape{0xFFFFFFFFLL, 0xFFFFFFFFLL, 0});
  CHECK(empty_array.data.empty());
  std::remove(p.c_str());
}

TEST_CASE("the Fashion-MNIST loader checks the size of the dims it multiplies") {
  const std::string dir = "test_fmnist_huge";
  ::mkdir(dir.c_str(), 0755);
  write_gz(dir + "/train-images-idx3-ubyte.gz", idx_header(0x08, {0, 0xFFFFFFFFu, 0xFFFFFFFFu}));
  write_gz(dir + "/train-labels-idx1-ubyte.gz", idx_header(0x08, {0}));
  CHECK_REEL_ERROR(load_fashion_mnist("train", dir),
                   "load_fashion_mnist: images: shape (0, 4294967295, 4294967295) is too large");
  write_gz(dir + "/train-images-idx3-ubyte.gz", idx_header(0x08, {2, 2, 3}) + std::string(12, '\xff'));
  write_gz(dir + "/train-labels-idx1-ubyte.gz", idx_header(0x08, {2}) + std::string("\x01\x07", 2));
  const ImageDataset small = load_fashion_mnist("train", dir);
  CHECK(small.images.shape() == Shape{2, 6});
  CHECK(small.labels.to_vector<int32_t>() == std::vector<int32_t>{1, 7});
  std::remove((dir + "/train-images-idx3-ubyte.gz").c_str());
  std::remove((dir + "/train-labels-idx1-ubyte.gz").c_str());
  std::remove(dir.c_str());
}
