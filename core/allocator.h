// The caching allocator and its memory statistics, one per device.
//
// Why caching: training allocates the same sizes every step; returning a block to a size-class
// free list instead of to the system makes the second step allocation-free (cudaMalloc is a
// synchronising call on a GPU). Why categories: reel exists to show where backprop memory goes,
// so every byte in use is attributed to parameters, gradients, optimizer state, activations
// (saved for backward), temporaries or offloaded activations (host copies), with current and peak
// bytes for each.
//
// Beside the device pools, one pinned pool (pinned_allocator()) holds page-locked host memory for
// asynchronous copies (core/stream.h: PinnedBuffer); its blocks carry categories too, so an
// activation offloaded there (autograd/offload.h) is counted as offloaded, in the pinned pool.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/device.h"

namespace reel {

// Offloaded: a host copy of an activation that autograd::Offload moved out of device memory for
// backward (in the pinned pool; the device side of the same tensor, while it lives, is Activation).
enum class Category : uint8_t { Parameter, Gradient, OptimizerState, Activation, Temporary, Offloaded };
constexpr int kNumCategories = 6;
const char* category_name(Category c);

// RAII: allocations made on this thread while the scope lives are tagged with `category`.
// Outside every scope allocations are Temporary.
class MemoryCategory {
 public:
  explicit MemoryCategory(Category category);
  ~MemoryCategory();
  MemoryCategory(const MemoryCategory&) = delete;
  MemoryCategory& operator=(const MemoryCategory&) = delete;
  static Category current();

 private:
  Category previous_;
};

struct CategoryStats {
  int64_t current_bytes = 0;  // bytes requested by live allocations (exact, not rounded)
  int64_t peak_bytes = 0;     // max of current_bytes since start or reset_peak()
  int64_t alloc_count = 0;    // allocations made in this category
  int64_t free_count = 0;     // of which freed
};

struct MemoryStats {
  std::array<CategoryStats, kNumCategories> by_category{};
  int64_t current_bytes = 0;   // all categories together (requested bytes)
  int64_t peak_bytes = 0;      // peak of the total (not the sum of per-category peaks)
  // The model state, Parameter + Gradient + OptimizerState, held at the same moment: its current
  // bytes and their peak since start or reset_peak(). The sum of those three categories' own peaks
  // overstates it whenever they peak at different moments (e.g. sharded data parallel: a unit's
  // gathered parameters in forward, its full gradients in backward, the optimizer's state at the step).
  int64_t model_state_bytes = 0;
  int64_t model_state_peak_bytes = 0;
  int64_t reserved_bytes = 0;  // held from the system: live blocks + cache, in size classes
  int64_t cached_bytes = 0;    // free blocks kept for reuse
  int64_t system_allocs = 0;   // raw allocations asked of the system (cache misses)
  const CategoryStats& operator[](Category c) const { return by_category[static_cast<int>(c)]; }
};

// The raw memory a device offers; the allocator caches on top of it.
class RawMemory {
 public:
  virtual ~RawMemory() = default;
  virtual void* allocate(size_t bytes) = 0;  // nullptr when the device is out of memory
  virtual void release(void* ptr) = 0;
};

class CachingAllocator {
 public:
  static constexpr size_t kAlignment = 64;

  // `name` is what messages and the report call it ("pinned host memory"); empty: the device.
  CachingAllocator(Device device, RawMemory* raw, std::string name = "");
  ~CachingAllocator();

  // A block of at least `bytes`, 64-byte aligned, tagged with MemoryCategory::current().
  // Zero bytes gives nullptr and counts nothing. Over the limit or out of device memory:
  // reel::Error naming the request, the use by category and the limit.
  void* allocate(size_t bytes, Category category);
  void deallocate(void* ptr, size_t bytes, Category category);
  // Moves the bytes of live block `ptr` from one category to another (e.g. a tensor the tape
  // saves for backward becomes an Activation).
  void recategorize(const void* ptr, size_t bytes, Category from, Category to);

  // The memory timeline (core/memory_timeline.h): from start_timeline() to stop_timeline() every
  // allocation, free and retag is reported to it. The statistics returned are taken under the same
  // lock, so no event falls between them and the first one reported. `host_offloaded` (the pinned
  // pool under a device's timeline): only the Offloaded bytes are reported, as the step's host side
  // (a retag into or out of Offloaded is reported; the timeline reads it as an alloc or a free).
  MemoryStats start_timeline(bool host_offloaded = false);
  void stop_timeline();

  MemoryStats stats() const;
  void reset_peak();
  void empty_cache();                  // returns every cached block to the system
  void set_limit(int64_t bytes);       // limit on requested bytes in use; <= 0: none
  int64_t limit() const;
  std::string name() const;  // the device ("cuda:0") or the pool's name

  // The size class a request is served from: multiples of 64 B up to 4 KiB, then four classes
  // per power of two (at most 25 % rounding).
  static size_t size_class(size_t bytes);

  // CUDA graphs (core/graph.h): a private pool per graph, as PyTorch gives one. Between
  // begin_graph_pool() and end_graph_capture() every allocation comes from the pool: a free block
  // of the pool, else a free block of the cache (which then belongs to the pool), else none: the
  // request would need a system allocation (cudaMalloc, which a capture cannot record), and raises
  // reel::Error naming the capture. Run the captured function once before capturing (a warm-up) so
  // the cache holds its blocks. A pool's blocks are never handed to code outside it: freed, they
  // return to the pool, and stay reserved (their addresses valid for the graph's replays) until
  // release_graph_pool(id), when its free blocks return to the cache and its live ones will when
  // freed. empty_cache() leaves pools alone. Pool blocks are not poisoned (set_poison_allocations):
  // that would be a synchronous copy in the capture. Returns the pool's id (> 0).
  int64_t begin_graph_pool(const std::string& capture);
  void end_graph_capture();
  void release_graph_pool(int64_t id);
  int64_t graph_pool_bytes(int64_t id) const;  // the bytes the pool holds (live and free blocks)

 private:
  struct GraphPool {
    std::unordered_map<size_t, std::vector<void*>> free_blocks;  // size class -> its free blocks
    int64_t bytes = 0;                                           // size classes it holds
  };
  void* allocate_locked(size_t bytes, Category category, bool* pooled);
  void add_bytes(Category c, int64_t bytes);
  std::string usage_locked() const;

  Device device_;
  RawMemory* raw_;
  std::string name_;
  mutable std::mutex mutex_;
  MemoryStats stats_;
  int64_t limit_ = 0;
  bool timeline_ = false;  // reporting events to the MemoryTimeline
  bool timeline_host_ = false;  // only the Offloaded ones, as the host side
  std::unordered_map<size_t, std::vector<void*>> free_blocks_;  // size class -> cached blocks
  std::unordered_map<int64_t, GraphPool> pools_;                // CUDA graphs' private pools
  std::unordered_map<const void*, int64_t> pool_of_;            // a pool's block -> its pool id
  int64_t capturing_ = 0;                                       // the pool capturing, 0: none
  int64_t next_pool_ = 0;
  std::string capture_;                                         // what captures, for messages
};

// The allocator of a device (created on first use). A cuda device in a build or on a machine
// without one raises reel::Error.
CachingAllocator& allocator_for(Device device);

// The device is named, never defaulted: a default of cpu would silently report the host while a
// model trains on cuda.
MemoryStats memory_stats(Device device);
void reset_peak_memory(Device device);
void set_memory_limit(Device device, int64_t bytes);

// The pinned pool: page-locked host memory, one pool for the process (created on first use). Its
// raw memory comes from the CUDA backend (cudaHostAlloc, usable by every device) when a CUDA device
// answers, else from the CPU's backend (ordinary host memory). Blocks are 64-byte aligned.
// `serves` = Device::meta() names the meta device's own pool instead, "pinned host memory (meta)":
// the host side of a dry run, counted the same way, over memory that is reserved, reads as zeros
// and is never written (kernels/meta.h), so a dry run's offloaded gigabytes cost the host nothing.
CachingAllocator& pinned_allocator(Device serves = Device::cpu());
MemoryStats pinned_memory_stats(Device serves = Device::cpu());

// A table of current and peak bytes by category for every device used so far, then for the
// pinned pools ("pinned host memory", "pinned host memory (meta)") once used.
std::string memory_report();

// Testing aid, off by default: every block any allocator hands out is first filled with 0xFF
// bytes (NaN in f32/f64, -1 in i32/i64) through its device's backend, so a kernel that leaves
// an element of its output unwritten fails its test instead of passing on stale values.
void set_poison_allocations(bool on);
bool poison_allocations();

// "1.50 MiB", "512 B".
std::string format_bytes(int64_t bytes);

}  // namespace reel
