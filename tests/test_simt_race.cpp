// tests/test_simt_race.cpp: SIMT_CHECK=race,uninit, the simt emulator's race and uninitialised-
// shared-memory checker (kernels/simt/simt_check.cpp). Each planted bug of simt_race_kernels.cu
// fails its launch with a report naming both source lines, both threads and the address, in every
// scheduling order; its correct version passes, and atomics are never reported. Emulated build only.
#include <doctest/doctest.h>

#include <algorithm>
#include <fstream>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "kernels/simt/simt.h"
#include "simt_race_kernels.h"

namespace {

const unsigned kAll = simt::check_race | simt::check_uninit;

// The line of simt_race_kernels.cu that carries `// RACE: <what>`.
int marked_line(const std::string& what) {
  const std::string path = SIMT_RACE_KERNELS_CU;
  std::ifstream file(path);
  REQUIRE_MESSAGE(file, "cannot open ", path);
  std::string line;
  for (int number = 1; std::getline(file, line); ++number)
    if (line.find("// RACE: " + what) != std::string::npos) return number;
  FAIL("no line marked '// RACE: ", what, "' in ", path);
  return 0;
}

std::string site(const std::string& what) { return "simt_race_kernels.cu:" + std::to_string(marked_line(what)); }

// Whether text has part, once the directories in front of simt_race_kernels.cu are dropped (the
// report names files as the compiler saw them, or by their real path).
bool has(std::string text, const std::string& part) {
  const std::string name = "simt_race_kernels.cu";
  for (size_t at = text.find(name); at != std::string::npos; at = text.find(name, at + 1)) {
    size_t start = at;
    while (start > 0 && text[start - 1] != ' ') --start;
    text.erase(start, at - start);
    at = start;
  }
  return text.find(part) != std::string::npos;
}

template <class T>
struct DeviceBuffer {
  explicit DeviceBuffer(const std::vector<T>& host) : n(host.size()) {
    REQUIRE(cudaMalloc(&p, n * sizeof(T)) == cudaSuccess);
    REQUIRE(cudaMemcpy(p, host.data(), n * sizeof(T), cudaMemcpyHostToDevice) == cudaSuccess);
  }
  ~DeviceBuffer() { cudaFree(p); }
  std::vector<T> download() const {
    std::vector<T> host(n);
    REQUIRE(cudaMemcpy(host.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost) == cudaSuccess);
    return host;
  }
  T* p = nullptr;
  size_t n;
};

std::vector<float> iota(size_t n) {
  std::vector<float> v(n);
  std::iota(v.begin(), v.end(), 1.f);
  return v;
}

// Runs `launch` in every scheduling order with all checks on; returns the reports (empty: passed).
template <class F>
std::vector<std::string> reports(F launch) {
  simt::CheckScope checks(kAll);
  std::vector<std::string> found;
  for (const simt::Order order : {simt::Order::forward, simt::Order::reverse, simt::Order::shuffle}) {
    simt::set_order(order);
    const cudaError_t err = launch();
    if (err == cudaSuccess) {
      CHECK(simt::last_error_detail().empty());
      found.emplace_back();
    } else {
      CHECK(err == cudaErrorLaunchFailure);
      found.push_back(simt::last_error_detail());
    }
  }
  simt::set_order(simt::Order::forward);
  return found;
}

void check_passes(const std::vector<std::string>& found) {
  for (const std::string& report : found) CHECK_MESSAGE(report.empty(), report);
}

}  // namespace

TEST_CASE("simt race check: the checker is compiled in and off by default") {
  REQUIRE(simt::check_available());
  simt::CheckScope off(0);
  CHECK(simt::check() == 0);
  {
    simt::CheckScope on(simt::check_race);
    CHECK(simt::check() == simt::check_race);
  }
  CHECK(simt::check() == 0);
  DeviceBuffer<float> in(iota(64)), out(std::vector<float>(1));
  CHECK(simt_race::tree_sum(true, in.p, out.p) == cudaSuccess);  // unchecked: the race goes unseen
}

TEST_CASE("simt race check: a shared-memory reduction without __syncthreads() between its steps") {
  DeviceBuffer<float> in(iota(64)), out(std::vector<float>(1));
  const auto broken = reports([&] { return simt_race::tree_sum(true, in.p, out.p); });
  for (const std::string& report : broken) {
    INFO(report);
    CHECK(has(report, "race on static __shared__ simt_race::(anonymous namespace)::tree_sum_kernel(bool, float "
                      "const*, float*)::s, byte "));
    CHECK(has(report, "of 256 in block (0,0,0)"));
    CHECK(has(report, site("tree read")));
    CHECK(has(report, site("tree write")));
  }
  // Forward order: thread 0 runs its whole loop first (its last read is s[1]), then thread 1 writes s[1].
  CHECK(has(broken[0], "::s, byte 4 of 256 in block (0,0,0): thread (0,0,0) read it at " + site("tree read")));
  CHECK(has(broken[0], "then thread (1,0,0) wrote it at " + site("tree write")));

  check_passes(reports([&] { return simt_race::tree_sum(false, in.p, out.p); }));
  CHECK(out.download()[0] == 64.f * 65.f / 2);
}

TEST_CASE("simt race check: a tiled loop without its second barrier (write after read)") {
  const int n = 96;
  DeviceBuffer<float> in(iota(n)), out(std::vector<float>(32));
  const auto broken = reports([&] { return simt_race::tiled_sum(true, n, in.p, out.p); });
  for (const std::string& report : broken) {
    INFO(report);
    CHECK(has(report, site("tile write")));
    CHECK(has(report, site("tile read")));
    CHECK(has(report, "tiled_sum_kernel(bool, int, float const*, float*)::tile, byte "));
  }
  // Forward order: thread 0 reads tile[0..32), writes the next tile's tile[0]; thread 1 then reads it.
  CHECK(has(broken[0], "::tile, byte 0 of 128 in block (0,0,0): thread (0,0,0) wrote it at " + site("tile write")));
  CHECK(has(broken[0], "then thread (1,0,0) read it at " + site("tile read")));

  check_passes(reports([&] { return simt_race::tiled_sum(false, n, in.p, out.p); }));
  for (const float v : out.download()) CHECK(v == float(n) * (n + 1) / 2);
}

TEST_CASE("simt race check: two threads of a block write the same global element") {
  DeviceBuffer<int> out(std::vector<int>(3, -1));
  const auto broken = reports([&] { return simt_race::block_ids(true, 3, out.p); });
  for (const std::string& report : broken) {
    INFO(report);
    CHECK(has(report, "race on global memory, byte "));  // 0, 4 or 8: the first block to race
    CHECK(has(report, " of the 12-byte cudaMalloc block at 0x"));
    CHECK(has(report, "wrote it at " + site("block id write") + ", then thread ("));
  }
  CHECK(has(broken[0], "thread (0,0,0) wrote it at " + site("block id write") + ", then thread (1,0,0) wrote it"));
  CHECK(has(broken[1], "thread (63,0,0) wrote it at " + site("block id write") + ", then thread (62,0,0) wrote it"));

  check_passes(reports([&] { return simt_race::block_ids(false, 3, out.p); }));
  CHECK(out.download() == std::vector<int>{0, 1, 2});
}

TEST_CASE("simt race check: warp-synchronous code is judged by the masks") {
  DeviceBuffer<float> in(iota(32)), out(std::vector<float>(16));
  SUBCASE("a shuffle whose mask leaves out the lanes it reads") {
    const auto broken = reports([&] { return simt_race::half_warp_rotate(true, in.p, out.p); });
    for (const std::string& report : broken) {
      INFO(report);
      CHECK(has(report, "block (0,0,0)"));
      CHECK(has(report, " at " + site("shuffle wrong mask") + " reads lane "));
      CHECK((has(report, " reads lane 1") || has(report, " reads lane 2")));  // lanes 16..23
      CHECK(has(report, "(active lanes 0x0000ffff)"));
    }
    CHECK(has(broken[0], "thread (8,0,0) at " + site("shuffle wrong mask") + " reads lane 16"));
    check_passes(reports([&] { return simt_race::half_warp_rotate(false, in.p, out.p); }));
    const auto got = out.download();
    for (int t = 0; t < 16; ++t) CHECK(got[t] == float(t + 1) + float((t + 8) % 16 + 1));
  }
  SUBCASE("a __syncwarp whose mask leaves out the lanes that wrote") {
    const auto broken = reports([&] { return simt_race::half_warp_exchange(true, in.p, out.p); });
    for (const std::string& report : broken) {
      INFO(report);
      CHECK(has(report, site("exchange write")));
      CHECK(has(report, site("exchange read")));
    }
    // Forward order: lanes 0..15 wait at the half-warp sync, lane 16 writes s[16] after it opened.
    CHECK(has(broken[0], "thread (16,0,0) wrote it at " + site("exchange write") + ", then thread (0,0,0) read it at " +
                             site("exchange read")));
    check_passes(reports([&] { return simt_race::half_warp_exchange(false, in.p, out.p); }));
    const auto got = out.download();
    for (int t = 0; t < 16; ++t) CHECK(got[t] == float(t + 17));
  }
}

TEST_CASE("simt race check: a read of shared memory that no thread wrote") {
  SUBCASE("dynamic shared memory") {
    const int n = 40;
    DeviceBuffer<float> in(iota(n)), out{std::vector<float>(size_t(n))};
    const auto broken = reports([&] { return simt_race::neighbour_sum(true, n, in.p, out.p); });
    for (const std::string& report : broken) {
      INFO(report);
      CHECK(has(report, "simt: uninitialised shared memory: in block (0,0,0), thread (39,0,0) reads dynamic shared "
                        "memory, byte 160 of 164 at " + site("neighbour read")));
    }
    check_passes(reports([&] { return simt_race::neighbour_sum(false, n, in.p, out.p); }));
    const auto got = out.download();
    for (int t = 0; t < n; ++t) CHECK(got[t] == float(t + 1) + (t + 1 < n ? float(t + 2) : 0.f));
  }
  SUBCASE("static __shared__ memory") {
    DeviceBuffer<float> in(iota(32)), out(std::vector<float>(64));
    const auto broken = reports([&] { return simt_race::static_copy(true, in.p, out.p); });
    for (const std::string& report : broken) {
      INFO(report);
      CHECK(has(report, "simt: uninitialised shared memory: in block (0,0,0), thread ("));
      CHECK(has(report, "reads static __shared__ simt_race::(anonymous namespace)::static_copy_kernel(bool, float "
                        "const*, float*)::s, byte "));
      CHECK(has(report, site("static read")));
    }
    CHECK(has(broken[0], "thread (32,0,0) reads static __shared__"));
    CHECK(has(broken[0], "::s, byte 128 of 256 at " + site("static read")));
    CHECK(has(broken[1], "thread (63,0,0) reads"));
    check_passes(reports([&] { return simt_race::static_copy(false, in.p, out.p); }));
  }
}

TEST_CASE("simt race check: atomics are never a race") {
  DeviceBuffer<int> count(std::vector<int>(1)), blocks(std::vector<int>(1));
  check_passes(reports([&] { return simt_race::atomic_counts(5, count.p, blocks.p); }));
  CHECK(count.download()[0] == 3 * 5 * 128);
  CHECK(blocks.download()[0] == 3 * 5);
}

TEST_CASE("simt race check: the report reaches launch errors and is cleared by the next launch") {
  DeviceBuffer<float> in(iota(64)), out(std::vector<float>(1));
  simt::CheckScope checks(simt::check_race);
  REQUIRE(simt_race::tree_sum(true, in.p, out.p) == cudaErrorLaunchFailure);
  CHECK(has(simt::last_error_detail(), site("tree write")));
  CHECK(cudaGetLastError() == cudaSuccess);  // like a launch under nvcc, the error is returned, not kept
  REQUIRE(simt_race::tree_sum(false, in.p, out.p) == cudaSuccess);
  CHECK(simt::last_error_detail().empty());
  // Only uninitialised reads checked: the race goes unreported.
  simt::CheckScope uninit_only(simt::check_uninit);
  CHECK(simt_race::tree_sum(true, in.p, out.p) == cudaSuccess);
}
