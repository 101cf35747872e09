// kernels/simt/simt_runtime.cpp: the engine behind simt.h's emulation branch (and the flag of its dry
// runs, simt::DryRun, under which a launch is checked and runs nothing, and the thread's count of
// the device work it issued, simt::work_issued).
// A launch hands its blocks to a pool of worker threads (an atomic block counter); a worker runs
// one block at a time, as one fiber (Boost.Context fcontext) per CUDA thread. __syncthreads() and
// the warp intrinsics are fiber barriers: a fiber that reaches one switches back to its worker's
// scheduler, which resumes the fibers of the block in the chosen order until all have finished.
#include <boost/context/detail/fcontext.hpp>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>

#if defined(__SANITIZE_ADDRESS__)
#define SIMT_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define SIMT_ASAN 1
#endif
#endif
#if defined(SIMT_ASAN)
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#else
// Present in every sanitizer runtime (UBSan alone too); null when none is linked.
extern "C" void __sanitizer_set_death_callback(void (*callback)(void)) __attribute__((weak));
#endif

#include "simt.h"
#include "simt_check.h"

namespace simt {
namespace detail {
namespace {

namespace fc = boost::context::detail;

constexpr size_t kSharedPerBlock = 48 * 1024;        // without opt-in, as on every GPU
constexpr size_t kSharedPerBlockOptin = 227 * 1024;  // sm_90's largest opt-in
const char* const kDivergent = "divergent barrier";

// ---- configuration (environment, read once) ----------------------------------------------------
// A numeric environment variable, or fallback when it is unset or not a number.
size_t env_number(const char* name, size_t fallback) {
  const char* text = std::getenv(name);
  if (!text || !*text) return fallback;
  char* end = nullptr;
  const unsigned long long value = std::strtoull(text, &end, 0);
  return *end ? fallback : size_t(value);
}

unsigned configured_workers() {
  static const unsigned n = unsigned(std::clamp<size_t>(env_number("SIMT_WORKERS", std::thread::hardware_concurrency()), 1, 256));
  return n;
}

size_t stack_bytes() {
#if defined(SIMT_ASAN)
  constexpr size_t kDefaultKiB = 256;  // instrumented frames with redzones are much larger
#else
  constexpr size_t kDefaultKiB = 64;
#endif
  static const size_t bytes = [] {
    const size_t page = size_t(sysconf(_SC_PAGESIZE));
    const size_t kib = std::max<size_t>(env_number("SIMT_STACK_KB", kDefaultKiB), 16);
    return (kib * 1024 + page - 1) / page * page;
  }();
  return bytes;
}

uint64_t shuffle_seed() {
  static const uint64_t seed = env_number("SIMT_SEED", 0x5eed);
  return seed;
}

std::atomic<int>& order_setting() {
  static std::atomic<int> setting{[] {
    const char* text = std::getenv("SIMT_ORDER");
    if (!text || !*text || !std::strcmp(text, "forward")) return int(Order::forward);
    if (!std::strcmp(text, "reverse")) return int(Order::reverse);
    if (!std::strcmp(text, "shuffle")) return int(Order::shuffle);
    std::fprintf(stderr, "simt: SIMT_ORDER=%s is not forward|reverse|shuffle; using forward\n", text);
    return int(Order::forward);
  }()};
  return setting;
}

// ---- fibers, warps, workers ----------------------------------------------------------------------
enum class State : uint8_t { unstarted, running, at_block_barrier, at_warp_barrier, done };

struct Fiber {
  fc::fcontext_t context = nullptr;
  char* stack = nullptr;  // lowest usable byte; the stack grows down from stack + stack_bytes()
  uint3 tid{0, 0, 0};
  unsigned linear = 0;  // x fastest, as CUDA numbers the threads of a block into warps
  State state = State::unstarted;
  unsigned wait_generation = 0;  // of the barrier it waits at
  const char* file = nullptr;    // where it waits
  int line = 0;
  void* asan_fake_stack = nullptr;
  size_t asan_used = 0;  // stack bytes to unpoison before the stack is reused
};

struct Warp {
  WarpRound round[2];  // double-buffered: round g writes round[g & 1] while g-1's readers finish
  unsigned generation = 0, arrived = 0;
  unsigned mask = 0;     // of the pending round
  unsigned live = 0;     // lanes that exist and have not exited
  unsigned exited = 0;   // lanes that have exited
  const char* file = nullptr;  // where the pending round started
  int line = 0;
};

// One launch as the workers see it.
struct Launch {
  dim3 grid, block;
  size_t shmem;
  Thunk thunk;
  const void* closure;
  size_t blocks;
  mutable std::atomic<size_t> next_block{0};  // the next block to hand out
  Order order;
  unsigned checks;  // SIMT_CHECK bits for this launch (simt_check.cpp)
};

// Fiber stacks of one worker: mmap'ed once with a guard page below (an overflow faults instead of
// corrupting the neighbour) and reused by every later block and launch.
class StackPool {
 public:
  StackPool() = default;
  StackPool(const StackPool&) = delete;
  StackPool& operator=(const StackPool&) = delete;
  ~StackPool() {
    const size_t page = size_t(sysconf(_SC_PAGESIZE));
    for (char* s : all_) munmap(s - page, stack_bytes() + page);
  }
  char* take() {
    if (!free_.empty()) {
      char* s = free_.back();
      free_.pop_back();
      return s;
    }
    const size_t page = size_t(sysconf(_SC_PAGESIZE));
    void* m = mmap(nullptr, stack_bytes() + page, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (m == MAP_FAILED) {
      std::fprintf(stderr, "simt: cannot map a %zu-byte fiber stack\n", stack_bytes());
      std::abort();
    }
    mprotect(m, page, PROT_NONE);
    all_.push_back(static_cast<char*>(m) + page);
    return all_.back();
  }
  void give(char* s) { free_.push_back(s); }

 private:
  std::vector<char*> all_, free_;
};

struct Worker {
  // Kept across launches.
  StackPool stacks;
  std::vector<Fiber> fibers;
  std::vector<Warp> warps;
  std::vector<unsigned> order;  // fiber indices in resume order
  // The launch being run.
  const Launch* launch = nullptr;
  void* dynamic_smem = nullptr;
  // The block being run.
  unsigned alive = 0, exited = 0;
  unsigned barrier_arrived = 0, barrier_generation = 0;
  int barrier_count[2] = {0, 0};  // predicates of __syncthreads_count, double-buffered like warp rounds
  const char* barrier_file = nullptr;  // where the pending __syncthreads() round started
  int barrier_line = 0;
  Fiber* current = nullptr;             // the fiber running now, null in the scheduler
  fc::fcontext_t scheduler = nullptr;   // where a fiber switches back to
  // The worker thread's own stack, for the ASan fiber annotations.
  const void* asan_stack_bottom = nullptr;
  size_t asan_stack_size = 0;
  void* asan_fake_stack = nullptr;
};

thread_local Worker* t_worker = nullptr;  // set while this thread runs blocks of a launch

// ---- failures -----------------------------------------------------------------------------------
[[noreturn]] void die(const Fiber* fiber, const char* kind, const char* format, ...)
    __attribute__((format(printf, 3, 4)));
[[noreturn]] void die(const Fiber* fiber, const char* kind, const char* format, ...) {
  char detail[768];
  va_list args;
  va_start(args, format);
  std::vsnprintf(detail, sizeof detail, format, args);
  va_end(args);
  if (fiber) {
    const uint3 b = t_blockIdx, t = fiber->tid;
    std::fprintf(stderr, "simt: %s in block (%u,%u,%u) thread (%u,%u,%u): %s\n", kind, b.x, b.y, b.z, t.x,
                 t.y, t.z, detail);
  } else {
    std::fprintf(stderr, "simt: %s: %s\n", kind, detail);
  }
  std::fflush(stderr);
  std::abort();
}

// The worker of the calling fiber; dies when called from outside a kernel.
Worker& in_kernel(const char* what) {
  Worker* w = t_worker;
  if (!w || !w->current) die(nullptr, "misuse", "%s called outside a kernel", what);
  return *w;
}

bool same_site(const char* file_a, int line_a, const char* file_b, int line_b) {
  return line_a == line_b && (file_a == file_b || std::strcmp(file_a, file_b) == 0);
}

// Sanitizer reports know nothing about CUDA threads: say which one was running.
void on_sanitizer_death() {
  const Worker* w = t_worker;
  if (!w || !w->current) return;
  const uint3 b = t_blockIdx, t = w->current->tid;
  std::fprintf(stderr, "simt: the report above came from block (%u,%u,%u) thread (%u,%u,%u)\n", b.x, b.y, b.z,
               t.x, t.y, t.z);
}

void install_sanitizer_hook() {
#if defined(SIMT_ASAN)
  __sanitizer_set_death_callback(on_sanitizer_death);
#else
  if (__sanitizer_set_death_callback) __sanitizer_set_death_callback(on_sanitizer_death);
#endif
}

// ---- context switches ---------------------------------------------------------------------------
// ASan must be told about every switch, or it takes the fiber stacks for stack corruption.
inline void asan_start_switch([[maybe_unused]] void** fake_stack, [[maybe_unused]] const void* bottom,
                              [[maybe_unused]] size_t size) {
#if defined(SIMT_ASAN)
  __sanitizer_start_switch_fiber(fake_stack, bottom, size);
#endif
}
inline void asan_finish_switch([[maybe_unused]] void* fake_stack, [[maybe_unused]] const void** bottom_old,
                               [[maybe_unused]] size_t* size_old) {
#if defined(SIMT_ASAN)
  __sanitizer_finish_switch_fiber(fake_stack, bottom_old, size_old);
#endif
}

// Scheduler -> fiber; returns when the fiber waits at a barrier or has finished.
void switch_to(Worker& w, Fiber& f) {
  w.current = &f;
  t_threadIdx = f.tid;
  f.state = State::running;
  if (w.launch->checks) check::fiber_enter(f.linear, f.stack, stack_bytes());
  asan_start_switch(&w.asan_fake_stack, f.stack, stack_bytes());
  const fc::transfer_t back = fc::jump_fcontext(f.context, &w);
  asan_finish_switch(w.asan_fake_stack, nullptr, nullptr);
  f.context = back.fctx;
  w.current = nullptr;
  if (w.launch->checks) check::fiber_leave();
}

// Fiber -> scheduler; returns when the scheduler resumes this fiber.
void yield(Worker& w, Fiber& f) {
  asan_start_switch(&f.asan_fake_stack, w.asan_stack_bottom, w.asan_stack_size);
  const fc::transfer_t back = fc::jump_fcontext(w.scheduler, nullptr);
  asan_finish_switch(f.asan_fake_stack, nullptr, nullptr);
  w.scheduler = back.fctx;
}

// The end of a CUDA thread: bookkeeping, divergence checks, and a last switch to the scheduler.
[[noreturn]] void finish_thread(Worker& w) {
  Fiber& f = *w.current;
  Warp& warp = w.warps[f.linear / 32];
  const unsigned bit = 1u << (f.linear & 31);
  --w.alive;
  ++w.exited;
  warp.live &= ~bit;
  warp.exited |= bit;
  if (w.barrier_arrived)
    die(&f, kDivergent, "the thread exited while %u threads of its block wait at __syncthreads() (%s:%d)",
        w.barrier_arrived, w.barrier_file, w.barrier_line);
  if (warp.arrived && (warp.mask & bit))
    die(&f, kDivergent, "the thread exited while lanes of its warp wait for it at a warp sync (%s:%d, mask 0x%08x)",
        warp.file, warp.line, warp.mask);
  f.state = State::done;
#if defined(SIMT_ASAN)
  // Frames still live at this point (this one and its callers) keep their redzones poisoned;
  // the scheduler clears them before the stack is reused.
  f.asan_used = size_t(f.stack + stack_bytes() - static_cast<char*>(__builtin_frame_address(0))) + 4096;
#endif
  asan_start_switch(nullptr, w.asan_stack_bottom, w.asan_stack_size);  // null: this fiber is gone
  fc::jump_fcontext(w.scheduler, nullptr);
  __builtin_unreachable();
}

void fiber_main(fc::transfer_t from) {
  Worker& w = *static_cast<Worker*>(from.data);
  asan_finish_switch(nullptr, &w.asan_stack_bottom, &w.asan_stack_size);
  w.scheduler = from.fctx;
  w.launch->thunk(w.launch->closure);
  finish_thread(w);
}

void release_stack(Worker& w, Fiber& f) {
#if defined(SIMT_ASAN)
  const size_t used = std::min(f.asan_used, stack_bytes());
  __asan_unpoison_memory_region(f.stack + stack_bytes() - used, used);
#endif
  w.stacks.give(f.stack);
  f.stack = nullptr;
}

// ---- the scheduler ----------------------------------------------------------------------------------
uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

bool runnable(const Worker& w, const Fiber& f) {
  switch (f.state) {
    case State::unstarted: return true;
    case State::at_block_barrier: return f.wait_generation != w.barrier_generation;
    case State::at_warp_barrier: return f.wait_generation != w.warps[f.linear / 32].generation;
    default: return false;
  }
}

const char* where_waiting(const Fiber& f) {
  return f.state == State::at_block_barrier ? "__syncthreads()" : "a warp sync";
}

[[noreturn]] void report_deadlock(const Worker& w) {
  unsigned at_block = 0, at_warp = 0;
  const Fiber* first = nullptr;
  for (const Fiber& f : w.fibers) {
    at_block += f.state == State::at_block_barrier;
    at_warp += f.state == State::at_warp_barrier;
    if (!first && (f.state == State::at_block_barrier || f.state == State::at_warp_barrier)) first = &f;
  }
  die(first, kDivergent,
      "deadlock: the thread waits at %s (%s:%d) and no thread of the block can go on "
      "(%u wait at __syncthreads(), %u at warp syncs)",
      where_waiting(*first), first->file, first->line, at_block, at_warp);
}

void run_block(Worker& w, size_t linear) {
  const Launch& launch = *w.launch;
  const unsigned n = unsigned(w.fibers.size());
  t_blockIdx = {unsigned(linear % launch.grid.x), unsigned(linear / launch.grid.x % launch.grid.y),
                unsigned(linear / launch.grid.x / launch.grid.y)};
  for (Fiber& f : w.fibers) f.state = State::unstarted;
  for (unsigned k = 0; k < w.warps.size(); ++k) {
    Warp& warp = w.warps[k];
    const unsigned lanes = std::min(32u, n - 32 * k);
    warp.generation = warp.arrived = warp.mask = warp.exited = 0;
    warp.live = lanes == 32 ? ~0u : (1u << lanes) - 1;
  }
  w.alive = n;
  w.exited = w.barrier_arrived = w.barrier_generation = 0;
  // NaN bytes: a read of dynamic shared memory that no thread wrote shows up in the results.
  if (w.dynamic_smem) std::memset(w.dynamic_smem, 0xff, launch.shmem);
  if (launch.order == Order::shuffle)
    for (unsigned i = 0; i < n; ++i) w.order[i] = i;
  if (launch.checks) check::block_begin(t_blockIdx);

  for (uint64_t pass = 0; w.alive > 0; ++pass) {
    if (launch.order == Order::shuffle) {  // a new order every pass, reproducible per block
      uint64_t state = shuffle_seed() ^ (uint64_t(linear) << 24) ^ pass;
      for (unsigned i = n - 1; i > 0; --i) std::swap(w.order[i], w.order[splitmix64(state) % (i + 1)]);
    }
    bool progress = false;
    for (const unsigned k : w.order) {
      Fiber& f = w.fibers[k];
      if (!runnable(w, f)) continue;
      progress = true;
      if (f.state == State::unstarted) {
        f.stack = w.stacks.take();
        f.context = fc::make_fcontext(f.stack + stack_bytes(), stack_bytes(), fiber_main);
      }
      switch_to(w, f);
      if (f.state == State::done) release_stack(w, f);
    }
    if (!progress) report_deadlock(w);
  }
}

void begin_launch(Worker& w, const Launch& launch) {
  const dim3 b = launch.block;
  const unsigned n = b.x * b.y * b.z;
  w.launch = &launch;
  w.fibers.assign(n, Fiber{});
  w.warps.resize((n + 31) / 32);
  w.order.resize(n);
  for (unsigned i = 0; i < n; ++i) {
    w.fibers[i].linear = i;
    w.fibers[i].tid = {i % b.x, i / b.x % b.y, i / b.x / b.y};
    w.order[i] = launch.order == Order::reverse ? n - 1 - i : i;
  }
  // Exactly the requested size, allocated per launch: ASan reports any access past it.
  w.dynamic_smem = nullptr;
  if (launch.shmem && posix_memalign(&w.dynamic_smem, 128, launch.shmem)) {
    std::fprintf(stderr, "simt: cannot allocate %zu bytes of dynamic shared memory\n", launch.shmem);
    std::abort();
  }
  if (launch.checks) check::launch_begin(launch.checks, launch.block, w.dynamic_smem, launch.shmem);
}

void end_launch(Worker& w) {
  if (w.launch->checks) check::launch_end();
  std::free(w.dynamic_smem);
  w.dynamic_smem = nullptr;
  w.launch = nullptr;
}

// What each worker thread does for a launch: take blocks until none is left.
void work(const Launch& launch) {
  static thread_local Worker worker;  // per OS thread, so its stacks outlive the launch
  Worker& w = worker;
  begin_launch(w, launch);
  t_worker = &w;
  t_blockDim = launch.block;
  t_gridDim = launch.grid;
  for (size_t b; (b = launch.next_block.fetch_add(1, std::memory_order_relaxed)) < launch.blocks;)
    run_block(w, b);
  t_worker = nullptr;
  end_launch(w);
}

// ---- worker pool -----------------------------------------------------------------------------------
// The caller runs blocks too, so SIMT_WORKERS=1 needs no extra thread. Never destroyed: its
// threads wait for work until the process ends.
class Pool {
 public:
  // Runs job on n threads (the caller and n - 1 pool threads); returns when all are done.
  void run(unsigned n, const std::function<void()>& job) {
    // A fork()ed child has none of the parent's threads: run everything on the caller.
    if (n <= 1 || getpid() != owner_) {
      job();
      return;
    }
    {
      std::lock_guard<std::mutex> lock(mutex_);
      while (threads_.size() < n - 1) {
        const unsigned index = unsigned(threads_.size());
        threads_.emplace_back([this, index] { loop(index); });
      }
      job_ = &job;
      wanted_ = n - 1;
      pending_ = n - 1;
      ++epoch_;
    }
    wake_.notify_all();
    job();
    std::unique_lock<std::mutex> lock(mutex_);
    done_.wait(lock, [this] { return pending_ == 0; });
    job_ = nullptr;
  }

 private:
  void loop(unsigned index) {
    uint64_t seen = 0;
    std::unique_lock<std::mutex> lock(mutex_);
    for (;;) {
      wake_.wait(lock, [&] { return epoch_ != seen; });
      seen = epoch_;
      if (index >= wanted_) continue;
      const std::function<void()>* job = job_;
      lock.unlock();
      (*job)();
      lock.lock();
      if (--pending_ == 0) done_.notify_one();
    }
  }

  const pid_t owner_ = getpid();
  std::mutex mutex_;
  std::condition_variable wake_, done_;
  std::vector<std::thread> threads_;
  const std::function<void()>* job_ = nullptr;
  uint64_t epoch_ = 0;
  unsigned wanted_ = 0, pending_ = 0;
};

Pool& pool() {
  static Pool* p = new Pool;
  return *p;
}

// ---- per-kernel attributes ----------------------------------------------------------------------------
std::mutex& attribute_mutex() {
  static std::mutex m;
  return m;
}
std::unordered_map<const void*, size_t>& max_dynamic_shared() {
  static std::unordered_map<const void*, size_t> m;
  return m;
}

}  // namespace

// ---- entry points from simt.h ------------------------------------------------------------------------
int block_barrier(int predicate, const char* file, int line) {
  Worker& w = in_kernel("__syncthreads()");
  Fiber& f = *w.current;
  if (w.exited)
    die(&f, kDivergent, "__syncthreads() (%s:%d) after %u threads of the block have exited", file, line, w.exited);
  int& count = w.barrier_count[w.barrier_generation & 1];
  if (w.barrier_arrived == 0) {
    w.barrier_file = file;
    w.barrier_line = line;
    count = 0;
  } else if (!same_site(file, line, w.barrier_file, w.barrier_line)) {
    die(&f, kDivergent, "__syncthreads() at %s:%d while other threads of the block wait at %s:%d", file, line,
        w.barrier_file, w.barrier_line);
  }
  count += predicate;
  f.state = State::at_block_barrier;
  f.wait_generation = w.barrier_generation;
  f.file = file;
  f.line = line;
  if (++w.barrier_arrived == w.alive) {  // the last one opens the barrier for the next pass
    w.barrier_arrived = 0;
    ++w.barrier_generation;
    if (w.launch->checks) check::block_barrier();
  }
  yield(w, f);
  return count;  // not reset before every thread has read it: the next round uses the other slot
}

namespace {
const WarpRound& warp_round(unsigned mask, const uint64_t* value, const char* file, int line) {
  Worker& w = in_kernel("a warp intrinsic");
  Fiber& f = *w.current;
  Warp& warp = w.warps[f.linear / 32];
  const unsigned lane = f.linear & 31, bit = 1u << lane;
  if (!(mask & bit))
    die(&f, kDivergent, "warp sync at %s:%d: the calling lane %u is not in its mask 0x%08x", file, line, lane, mask);
  if (mask & warp.exited)
    die(&f, kDivergent, "warp sync at %s:%d: mask 0x%08x names lanes that have exited (0x%08x)", file, line, mask,
        mask & warp.exited);
  if (warp.arrived == 0) {
    warp.mask = mask;
    warp.file = file;
    warp.line = line;
  } else if (mask != warp.mask) {
    die(&f, kDivergent,
        "warp sync at %s:%d with mask 0x%08x while lanes of the warp wait at %s:%d with mask 0x%08x "
        "(one mask for all lanes per round)",
        file, line, mask, warp.file, warp.line, warp.mask);
  }
  WarpRound& round = warp.round[warp.generation & 1];
  if (value) round.value[lane] = *value;
  f.state = State::at_warp_barrier;
  f.wait_generation = warp.generation;
  f.file = file;
  f.line = line;
  if (++warp.arrived == unsigned(__builtin_popcount(mask & warp.live))) {
    round.active = mask & warp.live;
    warp.arrived = 0;
    if (w.launch->checks) check::warp_round(f.linear / 32, round.active);
    ++warp.generation;
  }
  yield(w, f);
  return round;
}
}  // namespace

uint3 thread_idx() { return t_threadIdx; }
uint3 block_idx() { return t_blockIdx; }
dim3 block_dim() { return t_blockDim; }
dim3 grid_dim() { return t_gridDim; }

void warp_barrier(unsigned mask, const char* file, int line) { warp_round(mask, nullptr, file, line); }

const WarpRound& warp_exchange(unsigned mask, uint64_t value, const char* file, int line) {
  return warp_round(mask, &value, file, line);
}

void* dynamic_shared() { return in_kernel("SIMT_DYNAMIC_SHARED").dynamic_smem; }

void trap(const char* what, const char* file, int line) {
  const Worker* w = t_worker;
  die(w ? w->current : nullptr, "trap", "%s at %s:%d", what, file, line);
}

cudaError_t check_grid(const void* kernel, dim3 grid, dim3 block, size_t shmem) {
  if (t_worker && t_worker->current) return cudaErrorNotSupported;  // no dynamic parallelism
  // CUDA 13 answers an impossible block or grid with cudaErrorInvalidValue (seen on an H200;
  // older runtimes said cudaErrorInvalidConfiguration).
  const uint64_t threads = uint64_t(block.x) * block.y * block.z;
  if (threads == 0 || threads > 1024 || block.x > 1024 || block.y > 1024 || block.z > 64)
    return cudaErrorInvalidValue;
  if (grid.x == 0 || grid.y == 0 || grid.z == 0 || grid.x > 0x7fffffffu || grid.y > 65535 || grid.z > 65535)
    return cudaErrorInvalidValue;
  if (shmem > kSharedPerBlock) {
    std::lock_guard<std::mutex> lock(attribute_mutex());
    const auto it = max_dynamic_shared().find(kernel);
    if (it == max_dynamic_shared().end() || shmem > it->second) return cudaErrorInvalidValue;
  }
  return cudaSuccess;
}

cudaError_t run_grid(const void* kernel, dim3 grid, dim3 block, size_t shmem, Thunk thunk, const void* closure) {
  if (const cudaError_t err = check_grid(kernel, grid, block, shmem)) return err;
  static std::once_flag hooked;
  std::call_once(hooked, install_sanitizer_hook);

  Launch launch;
  launch.grid = grid;
  launch.block = block;
  launch.shmem = shmem;
  launch.thunk = thunk;
  launch.closure = closure;
  launch.blocks = size_t(grid.x) * grid.y * grid.z;
  launch.order = order();
  // One launch at a time: the emulated device runs one grid at a time, like a single stream.
  static std::mutex launch_mutex;
  std::lock_guard<std::mutex> lock(launch_mutex);
  launch.checks = check::grid_begin();
  const unsigned n = unsigned(std::min<size_t>(configured_workers(), launch.blocks));
  pool().run(n, [&launch] { work(launch); });
  return check::grid_end();
}

}  // namespace detail

namespace {
thread_local int t_dry_runs = 0;  // DryRun scopes alive on this thread
thread_local int64_t t_work_issued = 0;
}  // namespace
bool dry_run() { return t_dry_runs > 0; }
int64_t work_issued() { return t_work_issued; }
void detail::count_work() { ++t_work_issued; }
void enter_dry_run() { ++t_dry_runs; }
void leave_dry_run() { --t_dry_runs; }

void set_order(Order order) { detail::order_setting().store(int(order)); }
Order order() { return Order(detail::order_setting().load()); }
unsigned workers() { return detail::configured_workers(); }

}  // namespace simt

cudaError_t cudaFuncSetAttribute(const void* kernel, cudaFuncAttribute attr, int value) {
  using simt::detail::record_error;
  if (!kernel) return record_error(cudaErrorInvalidDeviceFunction);
  if (attr == cudaFuncAttributePreferredSharedMemoryCarveout) return cudaSuccess;  // a hint
  if (attr != cudaFuncAttributeMaxDynamicSharedMemorySize || value < 0 ||
      size_t(value) > simt::detail::kSharedPerBlockOptin)
    return record_error(cudaErrorInvalidValue);
  std::lock_guard<std::mutex> lock(simt::detail::attribute_mutex());
  simt::detail::max_dynamic_shared()[kernel] = size_t(value);
  return cudaSuccess;
}
