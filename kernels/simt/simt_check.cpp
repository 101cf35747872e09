// kernels/simt/simt_check.cpp: SIMT_CHECK=race,uninit, the emulator's race and
// uninitialised-shared-memory checker (kernels/simt/README.md, "Race and uninitialised-memory checks").
//
// The .cu files are compiled with g++'s (or clang's) -fsanitize=thread instrumentation but linked
// without the ThreadSanitizer runtime: every load and store of kernel code calls one of the
// __tsan_readN / __tsan_writeN entry points defined here, which return at once unless a check is
// on. With checks on, each worker keeps a shadow of the bytes its block touched since the last
// __syncthreads() (per 4-byte word: the last writer of each byte and up to two readers, each with
// the thread, its warp clock and the code address). A conflicting access of another thread that no
// barrier and no warp round orders before this one is a race; the first one of a launch becomes its
// report, with the code addresses turned into file:line by addr2line. Atomics (__tsan_atomic*) are
// performed and never recorded.
#include "simt_check.h"

#include <dlfcn.h>
#include <elf.h>
#include <link.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace simt {
namespace detail {
namespace check {
namespace {

// The checks switched on: read by every instrumented access, so one relaxed load and a branch.
// Constant-initialised: instrumented static initialisers of other files may run before this file's.
std::atomic<unsigned> g_checks{0};

unsigned from_environment() {
  unsigned bits = 0;
  const char* text = std::getenv("SIMT_CHECK");
  if (!text) return bits;
  const std::string all(text);
  for (size_t start = 0; start <= all.size();) {
    size_t end = all.find(',', start);
    if (end == std::string::npos) end = all.size();
    const std::string word = all.substr(start, end - start);
    if (word == "race") bits |= check_race;
    else if (word == "uninit") bits |= check_uninit;
    else if (word == "all") bits |= check_race | check_uninit;
    else if (!word.empty() && word != "none")
      std::fprintf(stderr, "simt: SIMT_CHECK: unknown check '%s' (race, uninit, all, none)\n", word.c_str());
    start = end + 1;
  }
  return bits;
}

// SIMT_CHECK is read once, before the first launch or set_check, whichever comes first.
void read_environment() {
  static std::once_flag once;
  std::call_once(once, [] { g_checks.store(g_checks.load() | from_environment()); });
}

constexpr uint32_t kNone = ~0u;
enum class Region : uint8_t { dynamic_shared, static_shared, global };

struct Access {
  uint32_t thread = kNone;  // linear thread index in the block
  uint32_t clock = 0;       // the thread's warp clock when it accessed
  const void* pc = nullptr;
};

// The accesses to one 4-byte word since the last barrier.
struct Cell {
  uintptr_t word = 0;
  uint32_t epoch = 0;  // cells of an older epoch are free
  uint8_t read_mask[2] = {0, 0};
  Access write[4];  // last writer of each byte
  Access read[2];   // two readers of different threads (a third replaces the second)
};

// What a report needs; formatted (and symbolised) by the launching thread at the end of the grid.
struct Report {
  std::string kind;
  Region region = Region::global;
  uintptr_t address = 0, region_base = 0;
  size_t region_size = 0;
  std::string module;  // of a static __shared__ address: the file whose TLS block holds it
  uint3 block{0, 0, 0};
  dim3 block_dim;
  unsigned thread[2] = {0, 0};  // [0]: the earlier access (kNone: none), [1]: the one that failed
  const void* pc[2] = {nullptr, nullptr};
  bool wrote[2] = {false, false};
  const char* file = nullptr;  // a site known by file and line (shuffles)
  int line = 0;
  std::string note;
};

std::mutex g_report_mutex;
std::atomic<bool> g_failed{false};  // this launch has a report
Report g_report;
std::string g_detail;  // the last failed launch's report

// Module TLS blocks of the calling thread: where its `static thread_local` (= __shared__) live.
struct TlsBlock {
  uintptr_t lo, hi;
  std::string module;
};
int collect_tls(dl_phdr_info* info, size_t, void* out) {
  auto& blocks = *static_cast<std::vector<TlsBlock>*>(out);
  if (!info->dlpi_tls_data) return 0;
  for (int i = 0; i < info->dlpi_phnum; ++i)
    if (info->dlpi_phdr[i].p_type == PT_TLS) {
      const uintptr_t lo = reinterpret_cast<uintptr_t>(info->dlpi_tls_data);
      std::string name = info->dlpi_name ? info->dlpi_name : "";
      if (name.empty()) {  // the program itself: its path, which a child process (readelf) can open
        char path[4096];
        const ssize_t n = readlink("/proc/self/exe", path, sizeof path - 1);
        name = n > 0 ? std::string(path, size_t(n)) : "/proc/self/exe";
      }
      blocks.push_back({lo, lo + info->dlpi_phdr[i].p_memsz, name});
    }
  return 0;
}

struct Checker {
  unsigned checks = 0;  // non-zero inside a launch with checks on
  dim3 block_dim;
  unsigned threads = 0;
  uintptr_t smem = 0;
  size_t smem_size = 0;
  std::vector<TlsBlock> tls;
  std::vector<std::pair<uintptr_t, uintptr_t>> simt_tls;
  bool tls_known = false;
  // The block.
  uint3 block_idx{0, 0, 0};
  uint32_t epoch = 0;
  std::vector<uint32_t> clocks;          // (threads, 32): thread t's view of the clocks of its warp's lanes
  std::vector<uint8_t> smem_written;     // (smem_size): written since the block started
  std::map<uintptr_t, uint8_t> static_written;  // static shared word -> bytes written since the block started
  // The fiber running now.
  bool in_fiber = false;
  uint32_t linear = 0;
  uintptr_t stack = 0;
  size_t stack_size = 0;
  // Shadow of this barrier interval: open addressing, power-of-two size.
  std::vector<Cell> table = std::vector<Cell>(1 << 12);
  size_t used = 0;
  unsigned shift = 64 - 12;

  uint32_t& clock_of(uint32_t t, uint32_t lane) { return clocks[size_t(t) * 32 + lane]; }

  void next_epoch() {
    ++epoch;
    used = 0;
  }

  Cell& cell(uintptr_t word) {
    if ((used + 1) * 2 > table.size()) grow();
    const size_t mask = table.size() - 1;
    for (size_t i = size_t((word * 0x9e3779b97f4a7c15ull) >> shift);; i = (i + 1) & mask) {
      Cell& c = table[i];
      // A stale cell ends the probe: a word inserted in this epoch sits at or before the first one.
      if (c.epoch != epoch) {
        c = Cell{};
        c.word = word;
        c.epoch = epoch;
        ++used;
        return c;
      }
      if (c.word == word) return c;
    }
  }

  void grow() {
    std::vector<Cell> old(table.size() * 2);
    old.swap(table);
    --shift;
    const size_t mask = table.size() - 1;
    for (const Cell& c : old) {
      if (c.epoch != epoch) continue;
      size_t i = size_t((c.word * 0x9e3779b97f4a7c15ull) >> shift);
      while (table[i].epoch == epoch) i = (i + 1) & mask;
      table[i] = c;
    }
  }

  // Whether access a (earlier) is ordered before thread t's access now: the same thread, or a lane
  // of t's warp that took part in a warp round with t after the access.
  bool ordered(const Access& a, uint32_t t) {
    return a.thread == t || (a.thread / 32 == t / 32 && clock_of(t, a.thread & 31) >= a.clock);
  }
};

thread_local Checker t_checker;

void fail(Report report) {
  std::lock_guard<std::mutex> lock(g_report_mutex);
  if (g_failed.load(std::memory_order_relaxed)) return;  // the first one of the launch is the report
  g_report = std::move(report);
  g_failed.store(true, std::memory_order_relaxed);
}

Report make_report(Checker& c, const char* kind, Region region, uintptr_t address) {
  Report r;
  r.kind = kind;
  r.region = region;
  r.address = address;
  r.block = c.block_idx;
  r.block_dim = c.block_dim;
  r.thread[0] = kNone;
  r.thread[1] = c.linear;
  if (region == Region::dynamic_shared) {
    r.region_base = c.smem;
    r.region_size = c.smem_size;
  } else if (region == Region::static_shared) {
    for (const TlsBlock& b : c.tls)
      if (address - b.lo < b.hi - b.lo) {
        r.region_base = b.lo;
        r.module = b.module;
      }
  }
  return r;
}

void race(Checker& c, const Access& other, bool other_wrote, const void* pc, bool wrote, Region region,
          uintptr_t address) {
  Report r = make_report(c, "race", region, address);
  r.thread[0] = other.thread;
  r.pc[0] = other.pc;
  r.wrote[0] = other_wrote;
  r.pc[1] = pc;
  r.wrote[1] = wrote;
  fail(std::move(r));
}

void check_word(Checker& c, uintptr_t word, unsigned mask, bool write, const void* pc, Region region,
                uintptr_t address) {
  Cell& cell = c.cell(word);
  const uint32_t t = c.linear;
  for (unsigned b = 0; b < 4; ++b)
    if ((mask >> b & 1u) && cell.write[b].thread != kNone && !c.ordered(cell.write[b], t))
      return race(c, cell.write[b], true, pc, write, region, address);
  if (write) {
    for (unsigned j = 0; j < 2; ++j)
      if ((cell.read_mask[j] & mask) && cell.read[j].thread != kNone && !c.ordered(cell.read[j], t))
        return race(c, cell.read[j], false, pc, write, region, address);
  }
  const Access now{t, c.clock_of(t, t & 31), pc};
  if (write) {
    for (unsigned b = 0; b < 4; ++b)
      if (mask >> b & 1u) cell.write[b] = now;
  } else {
    const unsigned j = (cell.read[0].thread == kNone || cell.read[0].thread == t) ? 0 : 1;
    if (cell.read[j].thread != t) cell.read_mask[j] = 0;
    cell.read[j] = now;
    cell.read_mask[j] = uint8_t(cell.read_mask[j] | mask);
  }
}

bool in(uintptr_t a, const std::vector<std::pair<uintptr_t, uintptr_t>>& ranges) {
  for (const auto& [lo, hi] : ranges)
    if (a - lo < hi - lo) return true;
  return false;
}
bool in(uintptr_t a, const std::vector<TlsBlock>& blocks) {
  for (const TlsBlock& b : blocks)
    if (a - b.lo < b.hi - b.lo) return true;
  return false;
}

// Every instrumented load and store of kernel code with checks on comes here.
__attribute__((noinline)) void access(const void* p, size_t size, bool write, const void* pc) {
  Checker& c = t_checker;
  if (!c.in_fiber || size == 0) return;
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  if (a - c.stack < c.stack_size) return;  // the thread's own stack: its locals
  Region region = Region::global;
  if (a - c.smem < c.smem_size) {
    region = Region::dynamic_shared;
  } else if (in(a, c.tls)) {
    if (in(a, c.simt_tls)) return;  // threadIdx, blockIdx, ...: the engine's, read-only for kernels
    region = Region::static_shared;
  }
  if (region != Region::global && (c.checks & check_uninit)) {
    if (region == Region::dynamic_shared) {
      const size_t off = a - c.smem, n = std::min(size, c.smem_size - off);
      if (write) {
        std::memset(&c.smem_written[off], 1, n);
      } else {
        for (size_t i = 0; i < n; ++i)
          if (!c.smem_written[off + i]) {
            Report r = make_report(c, "uninit", region, a + i);
            r.pc[1] = pc;
            return fail(std::move(r));
          }
      }
    } else {
      for (uintptr_t b = a; b < a + size; ++b) {
        uint8_t& bits = c.static_written[b >> 2];
        const uint8_t bit = uint8_t(1u << (b & 3));
        if (write) {
          bits = uint8_t(bits | bit);
        } else if (!(bits & bit)) {
          Report r = make_report(c, "uninit", region, b);
          r.pc[1] = pc;
          return fail(std::move(r));
        }
      }
    }
  }
  if (!(c.checks & check_race)) return;
  const uintptr_t end = a + size;
  for (uintptr_t word = a >> 2; word <= (end - 1) >> 2; ++word) {
    unsigned mask = 0;
    for (unsigned b = 0; b < 4; ++b) {
      const uintptr_t byte = (word << 2) + b;
      if (byte >= a && byte < end) mask |= 1u << b;
    }
    check_word(c, word, mask, write, pc, region, a);
  }
}

// The instrumentation's entry points below are its only callers (none in a sanitizer build).
[[maybe_unused]] inline void hook(const void* p, size_t size, bool write, const void* pc) {
  if (__builtin_expect(g_checks.load(std::memory_order_relaxed) != 0, 0)) access(p, size, write, pc);
}

// ---- the report ---------------------------------------------------------------------------------------
// "file:line" of a code address, by addr2line on the module that holds it (line tables: -g1).
std::string where(const void* pc) {
  if (!pc) return "?";
  static std::mutex mutex;
  static std::map<const void*, std::string> cache;
  std::lock_guard<std::mutex> lock(mutex);
  if (auto it = cache.find(pc); it != cache.end()) return it->second;
  Dl_info info{};
  std::string result;
  char fallback[64];
  std::snprintf(fallback, sizeof fallback, "pc %p", pc);
  if (dladdr(pc, &info) && info.dli_fname && info.dli_fbase) {
    const auto* header = static_cast<const ElfW(Ehdr)*>(info.dli_fbase);
    uintptr_t address = reinterpret_cast<uintptr_t>(pc) - 1;  // the call, not the return address
    if (header->e_type == ET_DYN) address -= reinterpret_cast<uintptr_t>(info.dli_fbase);
    const char* module = info.dli_fname[0] ? info.dli_fname : "/proc/self/exe";
    std::string command = "addr2line -e '" + std::string(module) + "' ";
    char hex[32];
    std::snprintf(hex, sizeof hex, "0x%" PRIxPTR " 2>/dev/null", address);
    command += hex;
    if (FILE* pipe = popen(command.c_str(), "r")) {
      char line[1024];
      if (std::fgets(line, sizeof line, pipe)) result = line;
      pclose(pipe);
    }
    result = result.substr(0, result.find_first_of(" \n"));  // drop " (discriminator n)"
    const size_t colon = result.rfind(':');
    if (colon != std::string::npos) {  // build/../tests/<file>.cu -> tests/<file>.cu
      if (char* real = realpath(result.substr(0, colon).c_str(), nullptr)) {
        result = real + result.substr(colon);
        std::free(real);
      }
    }
    if (result.empty() || result[0] == '?') {
      result = std::string(fallback) + " in " + (info.dli_sname ? info.dli_sname : module) +
               " (no line table: compile the .cu with -g1)";
    }
  } else {
    result = fallback;
  }
  cache[pc] = result;
  return result;
}

std::string thread_name(unsigned linear, dim3 b) {
  char text[64];
  std::snprintf(text, sizeof text, "thread (%u,%u,%u)", linear % b.x, linear / b.x % b.y, linear / b.x / b.y);
  return text;
}

// The thread_local (here: static __shared__) variable of `module` at `offset` in its TLS block, by
// the symbol table readelf prints ("name, byte n of size"), or "" when none is found.
std::string tls_variable(const std::string& module, size_t offset) {
  const std::string command = "readelf -sW -C '" + module + "' 2>/dev/null";
  FILE* pipe = popen(command.c_str(), "r");
  if (!pipe) return {};
  std::string found;
  char line[4096];
  while (std::fgets(line, sizeof line, pipe)) {
    unsigned long value = 0, size = 0;
    char type[16] = "";
    int name_at = 0;
    if (std::sscanf(line, " %*[0-9]: %lx %lu %15s %*s %*s %*s %n", &value, &size, type, &name_at) < 3) continue;
    if (std::strcmp(type, "TLS") || !name_at || offset < value || offset >= value + size) continue;
    std::string name(line + name_at);
    name = name.substr(0, name.find('\n'));
    found = name + ", byte " + std::to_string(offset - value) + " of " + std::to_string(size);
    break;
  }
  pclose(pipe);
  return found;
}

std::string region_name(const Report& r) {
  char text[200];
  switch (r.region) {
    case Region::dynamic_shared:
      std::snprintf(text, sizeof text, "dynamic shared memory, byte %zu of %zu", size_t(r.address - r.region_base),
                    r.region_size);
      return text;
    case Region::static_shared: {
      const size_t offset = r.address - r.region_base;
      const std::string variable = tls_variable(r.module, offset);
      if (!variable.empty()) return "static __shared__ " + variable;
      std::snprintf(text, sizeof text, "static __shared__ memory, byte %zu of the thread_local block of %s", offset,
                    r.module.c_str());
      return text;
    }
    case Region::global: {
      uintptr_t base = 0;
      size_t size = 0;
      if (find_allocation(r.address, &base, &size)) {
        std::snprintf(text, sizeof text, "global memory, byte %zu of the %zu-byte cudaMalloc block at %p",
                      size_t(r.address - base), size, reinterpret_cast<void*>(base));
      } else {
        std::snprintf(text, sizeof text, "global memory at %p", reinterpret_cast<void*>(r.address));
      }
      return text;
    }
  }
  return {};
}

std::string format(const Report& r) {
  char block[64];
  std::snprintf(block, sizeof block, "block (%u,%u,%u)", r.block.x, r.block.y, r.block.z);
  const std::string now = thread_name(r.thread[1], r.block_dim);
  const std::string site = r.file ? std::string(r.file) + ":" + std::to_string(r.line) : where(r.pc[1]);
  if (r.kind == "uninit")
    return "simt: uninitialised shared memory: in " + std::string(block) + ", " + now + " reads " + region_name(r) +
           " at " + site + ", which no thread of the block has written since the block started";
  if (r.kind == "shfl") return "simt: race: in " + std::string(block) + ", " + now + " at " + site + " " + r.note;
  const std::string before = thread_name(r.thread[0], r.block_dim);
  return "simt: race on " + region_name(r) + " in " + block + ": " + before + (r.wrote[0] ? " wrote" : " read") +
         " it at " + where(r.pc[0]) + ", then " + now + (r.wrote[1] ? " wrote" : " read") + " it at " + site +
         ", with no __syncthreads() between them (nor a warp round of both threads: __syncwarp or a *_sync "
         "intrinsic whose mask names them)";
}

}  // namespace

// ---- the engine's calls -------------------------------------------------------------------------------
void launch_begin(unsigned checks, dim3 block, void* dynamic_smem, size_t shmem) {
  Checker& c = t_checker;
  c.checks = checks;
  c.block_dim = block;
  c.threads = block.x * block.y * block.z;
  c.smem = reinterpret_cast<uintptr_t>(dynamic_smem);
  c.smem_size = dynamic_smem ? shmem : 0;
  c.smem_written.assign(c.smem_size, 0);
  c.clocks.resize(size_t(c.threads) * 32);
  if (!c.tls_known) {  // this thread's TLS blocks do not move
    dl_iterate_phdr(collect_tls, &c.tls);
    const auto add = [&c](const void* p, size_t n) {
      const uintptr_t a = reinterpret_cast<uintptr_t>(p);
      c.simt_tls.emplace_back(a, a + n);
    };
    add(&t_threadIdx, sizeof t_threadIdx);
    add(&t_blockIdx, sizeof t_blockIdx);
    add(&t_blockDim, sizeof t_blockDim);
    add(&t_gridDim, sizeof t_gridDim);
    c.tls_known = true;
  }
}

void launch_end() {
  Checker& c = t_checker;
  c.checks = 0;
  c.in_fiber = false;
  c.smem = 0;
  c.smem_size = 0;
}

void block_begin(uint3 block_idx) {
  Checker& c = t_checker;
  c.block_idx = block_idx;
  c.next_epoch();
  for (uint32_t t = 0; t < c.threads; ++t)
    for (uint32_t lane = 0; lane < 32; ++lane) c.clock_of(t, lane) = lane == (t & 31) ? 1 : 0;
  std::fill(c.smem_written.begin(), c.smem_written.end(), uint8_t{0});
  c.static_written.clear();
}

void fiber_enter(unsigned linear, const char* stack, size_t stack_size) {
  Checker& c = t_checker;
  c.linear = linear;
  c.stack = reinterpret_cast<uintptr_t>(stack);
  c.stack_size = stack_size;
  c.in_fiber = c.checks != 0;
}

void fiber_leave() { t_checker.in_fiber = false; }

void block_barrier() { t_checker.next_epoch(); }

void warp_round(unsigned warp, unsigned active) {
  Checker& c = t_checker;
  uint32_t join[32] = {};
  for (unsigned lane = 0; lane < 32; ++lane)
    if (active >> lane & 1u)
      for (unsigned i = 0; i < 32; ++i) join[i] = std::max(join[i], c.clock_of(warp * 32 + lane, i));
  for (unsigned lane = 0; lane < 32; ++lane)
    if (active >> lane & 1u) {
      std::copy(join, join + 32, &c.clock_of(warp * 32 + lane, 0));
      c.clock_of(warp * 32 + lane, lane) = join[lane] + 1;
    }
}

unsigned grid_begin() {
  read_environment();
  if (g_checks.load() && !check_available()) {
    static std::once_flag once;
    std::call_once(once, [] {
      std::fprintf(stderr, "simt: SIMT_CHECK: this build's .cu files are not instrumented (REEL_SIMT_RACECHECK=OFF, or "
                           "an ASan/TSan build): nothing is checked\n");
    });
  }
  std::lock_guard<std::mutex> lock(g_report_mutex);
  g_failed.store(false, std::memory_order_relaxed);
  g_detail.clear();
  return g_checks.load();
}

cudaError_t grid_end() {
  if (!g_failed.load(std::memory_order_relaxed)) return cudaSuccess;
  std::lock_guard<std::mutex> lock(g_report_mutex);
  g_detail = format(g_report);
  g_failed.store(false, std::memory_order_relaxed);
  return cudaErrorLaunchFailure;
}

}  // namespace check

void shfl_inactive(unsigned src, unsigned active, const char* file, int line) {
  check::Checker& c = check::t_checker;
  if (!c.in_fiber || !(c.checks & check_race)) return;
  check::Report r = check::make_report(c, "shfl", check::Region::global, 0);
  r.file = file;
  r.line = line;
  char note[200];
  std::snprintf(note, sizeof note,
                "reads lane %u in a warp shuffle whose round it did not take part in (active lanes 0x%08x): "
                "the value is undefined on a GPU (a wrong mask?)",
                src, active);
  r.note = note;
  check::fail(std::move(r));
}

}  // namespace detail

void set_check(unsigned checks) {
  detail::check::read_environment();
  detail::check::g_checks.store(checks & (check_race | check_uninit));
}
unsigned check() {
  detail::check::read_environment();
  return detail::check::g_checks.load();
}
bool check_available() {
#if defined(SIMT_CHECK_INSTRUMENTED)
  return true;
#else
  return false;
#endif
}
std::string last_error_detail() {
  std::lock_guard<std::mutex> lock(detail::check::g_report_mutex);
  return detail::check::g_detail;
}

}  // namespace simt

// ---- the instrumentation's entry points (ThreadSanitizer's ABI, without its runtime) ---------------------
#if defined(SIMT_CHECK_INSTRUMENTED)
using simt::detail::check::hook;
extern "C" {
void __tsan_init() {}
void __tsan_func_entry(void*) {}
void __tsan_func_exit() {}
void __tsan_vptr_update(void**, void*) {}
void __tsan_vptr_read(void**) {}
void __tsan_read_range(void* p, unsigned long n) { hook(p, n, false, __builtin_return_address(0)); }
void __tsan_write_range(void* p, unsigned long n) { hook(p, n, true, __builtin_return_address(0)); }
void* __tsan_memcpy(void* d, const void* s, unsigned long n) {
  hook(s, n, false, __builtin_return_address(0));
  hook(d, n, true, __builtin_return_address(0));
  return std::memcpy(d, s, n);
}
void* __tsan_memmove(void* d, const void* s, unsigned long n) {
  hook(s, n, false, __builtin_return_address(0));
  hook(d, n, true, __builtin_return_address(0));
  return std::memmove(d, s, n);
}
void* __tsan_memset(void* d, int v, unsigned long n) {
  hook(d, n, true, __builtin_return_address(0));
  return std::memset(d, v, n);
}
#define SIMT_TSAN_ACCESS(n)                                                                                 \
  void __tsan_read##n(void* p) { hook(p, n, false, __builtin_return_address(0)); }                          \
  void __tsan_write##n(void* p) { hook(p, n, true, __builtin_return_address(0)); }                          \
  void __tsan_unaligned_read##n(void* p) { hook(p, n, false, __builtin_return_address(0)); }                \
  void __tsan_unaligned_write##n(void* p) { hook(p, n, true, __builtin_return_address(0)); }                \
  void __tsan_volatile_read##n(void* p) { hook(p, n, false, __builtin_return_address(0)); }                 \
  void __tsan_volatile_write##n(void* p) { hook(p, n, true, __builtin_return_address(0)); }                 \
  void __tsan_unaligned_volatile_read##n(void* p) { hook(p, n, false, __builtin_return_address(0)); }       \
  void __tsan_unaligned_volatile_write##n(void* p) { hook(p, n, true, __builtin_return_address(0)); }
SIMT_TSAN_ACCESS(1)
SIMT_TSAN_ACCESS(2)
SIMT_TSAN_ACCESS(4)
SIMT_TSAN_ACCESS(8)
SIMT_TSAN_ACCESS(16)
#undef SIMT_TSAN_ACCESS

// Atomics: performed (sequentially consistent, at least what was asked), never recorded, so an
// atomic is never part of a race. The memory-order arguments are ThreadSanitizer's enum.
#define SIMT_TSAN_ATOMIC(n, T)                                                                              \
  T __tsan_atomic##n##_load(const volatile T* a, int) { return __atomic_load_n(a, __ATOMIC_SEQ_CST); }      \
  void __tsan_atomic##n##_store(volatile T* a, T v, int) { __atomic_store_n(a, v, __ATOMIC_SEQ_CST); }     \
  T __tsan_atomic##n##_exchange(volatile T* a, T v, int) { return __atomic_exchange_n(a, v, __ATOMIC_SEQ_CST); } \
  T __tsan_atomic##n##_fetch_add(volatile T* a, T v, int) { return __atomic_fetch_add(a, v, __ATOMIC_SEQ_CST); } \
  T __tsan_atomic##n##_fetch_sub(volatile T* a, T v, int) { return __atomic_fetch_sub(a, v, __ATOMIC_SEQ_CST); } \
  T __tsan_atomic##n##_fetch_and(volatile T* a, T v, int) { return __atomic_fetch_and(a, v, __ATOMIC_SEQ_CST); } \
  T __tsan_atomic##n##_fetch_or(volatile T* a, T v, int) { return __atomic_fetch_or(a, v, __ATOMIC_SEQ_CST); }  \
  T __tsan_atomic##n##_fetch_xor(volatile T* a, T v, int) { return __atomic_fetch_xor(a, v, __ATOMIC_SEQ_CST); } \
  T __tsan_atomic##n##_fetch_nand(volatile T* a, T v, int) { return __atomic_fetch_nand(a, v, __ATOMIC_SEQ_CST); } \
  int __tsan_atomic##n##_compare_exchange_strong(volatile T* a, T* c, T v, int, int) {                     \
    return __atomic_compare_exchange_n(a, c, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);                \
  }                                                                                                         \
  int __tsan_atomic##n##_compare_exchange_weak(volatile T* a, T* c, T v, int, int) {                       \
    return __atomic_compare_exchange_n(a, c, v, true, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);                 \
  }                                                                                                         \
  T __tsan_atomic##n##_compare_exchange_val(volatile T* a, T c, T v, int, int) {                           \
    __atomic_compare_exchange_n(a, &c, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);                      \
    return c;                                                                                               \
  }
SIMT_TSAN_ATOMIC(8, char)
SIMT_TSAN_ATOMIC(16, short)
SIMT_TSAN_ATOMIC(32, int)
SIMT_TSAN_ATOMIC(64, long)
#undef SIMT_TSAN_ATOMIC
void __tsan_atomic_thread_fence(int) { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
void __tsan_atomic_signal_fence(int) { __atomic_signal_fence(__ATOMIC_SEQ_CST); }
}  // extern "C"
#endif  // SIMT_CHECK_INSTRUMENTED
