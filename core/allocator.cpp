// Caching allocator, category statistics and the memory report.
#include "core/allocator.h"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <map>
#include <memory>
#include <sstream>

#include "core/device_backend.h"
#include "core/error.h"
#include "core/memory_timeline.h"

namespace reel {

namespace {
thread_local Category t_category = Category::Temporary;

std::atomic<bool> g_poison{false};

// Fills [ptr, ptr + bytes) of `device` with 0xFF through its backend (host -> device copies
// from a static buffer of 0xFF bytes, so no backend needs a memset of its own).
void poison(Device device, void* ptr, size_t bytes) {
  static const std::vector<unsigned char> ones(size_t{1} << 20, 0xFF);
  DeviceBackend& backend = backend_for(device);
  for (size_t done = 0; done < bytes; done += ones.size())
    backend.copy_from_host(static_cast<char*>(ptr) + done, ones.data(), std::min(ones.size(), bytes - done));
}

}  // namespace

const char* category_name(Category c) {
  switch (c) {
    case Category::Parameter: return "parameter";
    case Category::Gradient: return "gradient";
    case Category::OptimizerState: return "optimizer state";
    case Category::Activation: return "activation";
    case Category::Temporary: return "temporary";
    case Category::Offloaded: return "offloaded";
  }
  return "?";
}

MemoryCategory::MemoryCategory(Category category) : previous_(t_category) { t_category = category; }
MemoryCategory::~MemoryCategory() { t_category = previous_; }
Category MemoryCategory::current() { return t_category; }

std::string format_bytes(int64_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while ((v >= 1024 || v <= -1024) && u < 4) {
    v /= 1024;
    ++u;
  }
  char buf[32];
  if (u == 0) std::snprintf(buf, sizeof buf, "%lld B", static_cast<long long>(bytes));
  else std::snprintf(buf, sizeof buf, "%.2f %s", v, units[u]);
  return buf;
}

// ---- CachingAllocator -------------------------------------------------------

CachingAllocator::CachingAllocator(Device device, RawMemory* raw, std::string name)
    : device_(device), raw_(raw), name_(std::move(name)) {}

std::string CachingAllocator::name() const { return name_.empty() ? device_.str() : name_; }

CachingAllocator::~CachingAllocator() { empty_cache(); }

size_t CachingAllocator::size_class(size_t bytes) {
  if (bytes <= 4096) return (bytes + kAlignment - 1) / kAlignment * kAlignment;
  int log2 = 63 - __builtin_clzll(bytes);
  const size_t step = size_t{1} << (log2 - 2);  // four classes between 2^k and 2^(k+1)
  return (bytes + step - 1) / step * step;
}

namespace {
bool is_model_state(Category c) {
  return c == Category::Parameter || c == Category::Gradient || c == Category::OptimizerState;
}
void add_model_state(MemoryStats& stats, Category c, int64_t bytes) {
  if (!is_model_state(c)) return;
  stats.model_state_bytes += bytes;
  if (stats.model_state_bytes > stats.model_state_peak_bytes) stats.model_state_peak_bytes = stats.model_state_bytes;
}
}  // namespace

void CachingAllocator::add_bytes(Category c, int64_t bytes) {
  CategoryStats& s = stats_.by_category[static_cast<int>(c)];
  s.current_bytes += bytes;
  if (s.current_bytes > s.peak_bytes) s.peak_bytes = s.current_bytes;
  stats_.current_bytes += bytes;
  if (stats_.current_bytes > stats_.peak_bytes) stats_.peak_bytes = stats_.current_bytes;
  add_model_state(stats_, c, bytes);
}

std::string CachingAllocator::usage_locked() const {
  std::ostringstream os;
  os << "in use " << format_bytes(stats_.current_bytes) << " (";
  for (int c = 0; c < kNumCategories; ++c) {
    if (c) os << ", ";
    os << category_name(static_cast<Category>(c)) << " "
       << format_bytes(stats_.by_category[c].current_bytes);
  }
  os << ")";
  return os.str();
}

void set_poison_allocations(bool on) { g_poison = on; }
bool poison_allocations() { return g_poison; }

void* CachingAllocator::allocate(size_t bytes, Category category) {
  if (bytes == 0) return nullptr;
  bool pooled = false;
  void* ptr = allocate_locked(bytes, category, &pooled);
  if (g_poison && !pooled) poison(device_, ptr, size_class(bytes));
  return ptr;
}

void* CachingAllocator::allocate_locked(size_t bytes, Category category, bool* pooled) {
  std::lock_guard<std::mutex> lock(mutex_);
  // Compared as bytes <= limit - in use, which cannot overflow for any size_t request.
  REEL_CHECK(limit_ <= 0 || (stats_.current_bytes <= limit_ &&
                             bytes <= static_cast<uint64_t>(limit_ - stats_.current_bytes)),
             "allocator: cannot allocate ", format_bytes(static_cast<int64_t>(bytes)), " of ",
             category_name(category), " on ", name(), ": the limit is ", format_bytes(limit_),
             " and ", usage_locked());
  const size_t cls = size_class(bytes);
  void* ptr = nullptr;
  auto it = free_blocks_.find(cls);
  if (capturing_) {
    // A CUDA graph captures: the pool's own free block, else one of the cache's, which joins the pool.
    *pooled = true;
    GraphPool& pool = pools_.at(capturing_);
    auto own = pool.free_blocks.find(cls);
    if (own != pool.free_blocks.end() && !own->second.empty()) {
      ptr = own->second.back();
      own->second.pop_back();
    } else {
      REEL_CHECK(it != free_blocks_.end() && !it->second.empty(), "allocator: cannot allocate ",
                 format_bytes(static_cast<int64_t>(bytes)), " of ", category_name(category), " on ", name(),
                 " during ", capture_, ": no cached block of ", format_bytes(static_cast<int64_t>(cls)),
                 " is free, and a system allocation (cudaMalloc) cannot be captured; run the function once "
                 "before capturing (a warm-up), so that the cache holds the blocks it needs; ",
                 usage_locked());
      ptr = it->second.back();
      it->second.pop_back();
      pool_of_[ptr] = capturing_;
      pool.bytes += static_cast<int64_t>(cls);
    }
    stats_.cached_bytes -= static_cast<int64_t>(cls);
  } else if (it != free_blocks_.end() && !it->second.empty()) {
    ptr = it->second.back();
    it->second.pop_back();
    stats_.cached_bytes -= static_cast<int64_t>(cls);
  } else {
    ptr = raw_->allocate(cls);
    if (!ptr && !free_blocks_.empty()) {  // out of memory: give the cache (not the graphs' pools) back, retry
      int64_t released = 0;
      for (auto& [size, blocks] : free_blocks_)
        for (void* p : blocks) {
          raw_->release(p);
          released += static_cast<int64_t>(size);
        }
      free_blocks_.clear();
      stats_.reserved_bytes -= released;
      stats_.cached_bytes -= released;
      ptr = raw_->allocate(cls);
    }
    REEL_CHECK(ptr != nullptr, "allocator: ", name(), " is out of memory allocating ",
               format_bytes(static_cast<int64_t>(bytes)), " of ", category_name(category), "; ",
               usage_locked());
    stats_.reserved_bytes += static_cast<int64_t>(cls);
    ++stats_.system_allocs;
  }
  add_bytes(category, static_cast<int64_t>(bytes));
  ++stats_.by_category[static_cast<int>(category)].alloc_count;
  if (timeline_ && (!timeline_host_ || category == Category::Offloaded))
    detail::record_memory_event(MemoryEvent::Kind::Alloc, device_, static_cast<int64_t>(bytes), category, category,
                                ptr, timeline_host_);
  return ptr;
}

void CachingAllocator::deallocate(void* ptr, size_t bytes, Category category) {
  if (!ptr) return;
  std::lock_guard<std::mutex> lock(mutex_);
  const size_t cls = size_class(bytes);
  const auto owner = pool_of_.find(ptr);
  if (owner == pool_of_.end()) {
    free_blocks_[cls].push_back(ptr);
  } else {
    // A CUDA graph's block: back to its pool while the graph lives, else to the cache.
    const auto pool = pools_.find(owner->second);
    if (pool != pools_.end()) {
      pool->second.free_blocks[cls].push_back(ptr);
    } else {
      pool_of_.erase(owner);
      free_blocks_[cls].push_back(ptr);
    }
  }
  stats_.cached_bytes += static_cast<int64_t>(cls);
  add_bytes(category, -static_cast<int64_t>(bytes));
  ++stats_.by_category[static_cast<int>(category)].free_count;
  if (timeline_ && (!timeline_host_ || category == Category::Offloaded))
    detail::record_memory_event(MemoryEvent::Kind::Free, device_, static_cast<int64_t>(bytes), category, category,
                                ptr, timeline_host_);
}

void CachingAllocator::recategorize(const void* ptr, size_t bytes, Category from, Category to) {
  if (bytes == 0 || from == to) return;
  std::lock_guard<std::mutex> lock(mutex_);
  // Leave the total unchanged: only the attribution moves.
  stats_.by_category[static_cast<int>(from)].current_bytes -= static_cast<int64_t>(bytes);
  CategoryStats& s = stats_.by_category[static_cast<int>(to)];
  s.current_bytes += static_cast<int64_t>(bytes);
  if (s.current_bytes > s.peak_bytes) s.peak_bytes = s.current_bytes;
  add_model_state(stats_, from, -static_cast<int64_t>(bytes));
  add_model_state(stats_, to, static_cast<int64_t>(bytes));
  if (timeline_ && (!timeline_host_ || from == Category::Offloaded || to == Category::Offloaded))
    detail::record_memory_event(MemoryEvent::Kind::Retag, device_, static_cast<int64_t>(bytes), to, from, ptr,
                                timeline_host_);
}

MemoryStats CachingAllocator::start_timeline(bool host_offloaded) {
  std::lock_guard<std::mutex> lock(mutex_);
  timeline_ = true;
  timeline_host_ = host_offloaded;
  return stats_;
}

void CachingAllocator::stop_timeline() {
  std::lock_guard<std::mutex> lock(mutex_);
  timeline_ = false;
  timeline_host_ = false;
}

MemoryStats CachingAllocator::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return stats_;
}

void CachingAllocator::reset_peak() {
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto& s : stats_.by_category) s.peak_bytes = s.current_bytes;
  stats_.peak_bytes = stats_.current_bytes;
  stats_.model_state_peak_bytes = stats_.model_state_bytes;
}

void CachingAllocator::empty_cache() {
  std::lock_guard<std::mutex> lock(mutex_);
  int64_t released = 0;  // the CUDA graphs' pools keep theirs (counted as cached too)
  for (auto& [size, blocks] : free_blocks_)
    for (void* p : blocks) {
      raw_->release(p);
      released += static_cast<int64_t>(size);
    }
  free_blocks_.clear();
  stats_.reserved_bytes -= released;
  stats_.cached_bytes -= released;
}

int64_t CachingAllocator::begin_graph_pool(const std::string& capture) {
  std::lock_guard<std::mutex> lock(mutex_);
  REEL_CHECK(!capturing_, "allocator: ", name(), " is in ", capture_, " already; ", capture, " cannot begin");
  capturing_ = ++next_pool_;
  pools_[capturing_];
  capture_ = capture;
  return capturing_;
}

void CachingAllocator::end_graph_capture() {
  std::lock_guard<std::mutex> lock(mutex_);
  capturing_ = 0;
  capture_.clear();
}

void CachingAllocator::release_graph_pool(int64_t id) {
  std::lock_guard<std::mutex> lock(mutex_);
  const auto pool = pools_.find(id);
  if (pool == pools_.end()) return;
  if (capturing_ == id) capturing_ = 0;
  for (auto& [cls, blocks] : pool->second.free_blocks)
    for (void* p : blocks) {
      pool_of_.erase(p);
      free_blocks_[cls].push_back(p);
    }
  pools_.erase(pool);  // its live blocks find no pool when freed: they go to the cache then
}

int64_t CachingAllocator::graph_pool_bytes(int64_t id) const {
  std::lock_guard<std::mutex> lock(mutex_);
  const auto pool = pools_.find(id);
  return pool == pools_.end() ? 0 : pool->second.bytes;
}

void CachingAllocator::set_limit(int64_t bytes) {
  std::lock_guard<std::mutex> lock(mutex_);
  limit_ = bytes;
}

int64_t CachingAllocator::limit() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return limit_;
}

// ---- one allocator per device ------------------------------------------------

namespace {
struct Registry {
  std::mutex mutex;
  std::map<std::pair<int, int>, CachingAllocator*> allocators;  // never destroyed (see above)
  CachingAllocator* pinned = nullptr;                             // the pinned pool, once used
  CachingAllocator* meta_pinned = nullptr;                        // the meta device's, once used
};
Registry& registry() {
  static Registry* r = new Registry;
  return *r;
}
}  // namespace

CachingAllocator& allocator_for(Device device) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  const auto key = std::make_pair(static_cast<int>(device.type), device.index);
  auto it = r.allocators.find(key);
  if (it != r.allocators.end()) return *it->second;
  DeviceBackend& backend = backend_for(device);
  CachingAllocator* a = new CachingAllocator(device, &backend.raw_memory());
  r.allocators.emplace(key, a);
  return *a;
}

MemoryStats memory_stats(Device device) { return allocator_for(device).stats(); }
void reset_peak_memory(Device device) { allocator_for(device).reset_peak(); }
void set_memory_limit(Device device, int64_t bytes) { allocator_for(device).set_limit(bytes); }

CachingAllocator& pinned_allocator(Device serves) {
  Registry& r = registry();
  if (serves.is_meta()) {
    DeviceBackend& meta = backend_for(serves);  // before the lock: it may allocate nothing, but may fail
    std::lock_guard<std::mutex> lock(r.mutex);
    // On meta's own device, so a poisoning fill runs dry and touches none of it.
    if (!r.meta_pinned) r.meta_pinned = new CachingAllocator(serves, &meta.pinned_memory(), "pinned host memory (meta)");
    return *r.meta_pinned;
  }
  std::lock_guard<std::mutex> lock(r.mutex);
  if (!r.pinned) {
    // Page-locked memory is the CUDA runtime's to give; without a CUDA device, plain host memory
    // stands in (every copy is synchronous then anyway). Host memory either way: poisoned as cpu's.
    DeviceBackend& backend = cuda_device_count() > 0 ? backend_for(Device::cuda(0)) : backend_for(Device::cpu());
    r.pinned = new CachingAllocator(Device::cpu(), &backend.pinned_memory(), "pinned host memory");
  }
  return *r.pinned;
}

MemoryStats pinned_memory_stats(Device serves) { return pinned_allocator(serves).stats(); }

std::string memory_report() {
  std::vector<std::pair<std::string, MemoryStats>> rows;
  {
    Registry& r = registry();
    std::lock_guard<std::mutex> lock(r.mutex);
    for (auto& [key, a] : r.allocators) rows.emplace_back("on " + a->name(), a->stats());
    if (r.pinned) rows.emplace_back("in " + r.pinned->name(), r.pinned->stats());
    if (r.meta_pinned) rows.emplace_back("in " + r.meta_pinned->name(), r.meta_pinned->stats());
  }
  std::ostringstream os;
  char line[160];
  for (auto& [where, s] : rows) {
    os << "memory " << where << "\n";
    std::snprintf(line, sizeof line, "  %-16s %14s %14s %10s\n", "category", "current", "peak", "allocs");
    os << line;
    for (int c = 0; c < kNumCategories; ++c) {
      const CategoryStats& cs = s.by_category[c];
      std::snprintf(line, sizeof line, "  %-16s %14s %14s %10lld\n", category_name(static_cast<Category>(c)),
                    format_bytes(cs.current_bytes).c_str(), format_bytes(cs.peak_bytes).c_str(),
                    static_cast<long long>(cs.alloc_count));
      os << line;
    }
    std::snprintf(line, sizeof line, "  %-16s %14s %14s\n", "total", format_bytes(s.current_bytes).c_str(),
                  format_bytes(s.peak_bytes).c_str());
    os << line;
    std::snprintf(line, sizeof line, "  reserved %s (cached %s), %lld system allocations\n",
                  format_bytes(s.reserved_bytes).c_str(), format_bytes(s.cached_bytes).c_str(),
                  static_cast<long long>(s.system_allocs));
    os << line;
  }
  return os.str();
}

}  // namespace reel
