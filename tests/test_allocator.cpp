// The caching allocator: size classes, reuse, statistics by category exact to the byte, the model
// state's joint peak, peak reset, the limit error, the events a memory timeline receives, tensors tagged through
// MemoryCategory scopes, and a storage released and materialized again (distributed/fsdp.h's parameters).
#include <cstdlib>
#include <set>

#include "core/allocator.h"
#include "core/memory_timeline.h"
#include "core/storage.h"
#include "testing.h"

using namespace reel;

namespace {
// Host memory that counts what the allocator asks of the system.
struct CountingMemory : RawMemory {
  int64_t live = 0, calls = 0;
  std::set<void*> blocks;
  void* allocate(size_t bytes) override {
    ++calls;
    live += static_cast<int64_t>(bytes);
    void* p = std::aligned_alloc(64, bytes);
    blocks.insert(p);
    return p;
  }
  void release(void* p) override {
    blocks.erase(p);
    std::free(p);
  }
};
}  // namespace

TEST_CASE("size classes: 64-byte steps to 4 KiB, then four per power of two") {
  CHECK(CachingAllocator::size_class(1) == 64);
  CHECK(CachingAllocator::size_class(64) == 64);
  CHECK(CachingAllocator::size_class(65) == 128);
  CHECK(CachingAllocator::size_class(4096) == 4096);
  CHECK(CachingAllocator::size_class(4097) == 5120);
  CHECK(CachingAllocator::size_class(1 << 20) == (1 << 20));
  CHECK(CachingAllocator::size_class((1 << 20) + 1) == (1 << 20) + (1 << 18));
  for (size_t n : {5000ul, 100000ul, 3000000ul}) {
    const size_t c = CachingAllocator::size_class(n);
    CHECK(c >= n);
    CHECK(c <= n + n / 4 + 64);
  }
}

TEST_CASE("statistics are exact to the byte for a known sequence") {
  CountingMemory mem;
  CachingAllocator alloc(Device::cpu(), &mem);
  void* a = alloc.allocate(100, Category::Parameter);
  void* b = alloc.allocate(1000, Category::Activation);
  void* c = alloc.allocate(5000, Category::Activation);
  CHECK(reinterpret_cast<uintptr_t>(a) % 64 == 0);
  CHECK(reinterpret_cast<uintptr_t>(c) % 64 == 0);
  MemoryStats s = alloc.stats();
  CHECK(s[Category::Parameter].current_bytes == 100);
  CHECK(s[Category::Activation].current_bytes == 6000);
  CHECK(s[Category::Activation].alloc_count == 2);
  CHECK(s.current_bytes == 6100);
  CHECK(s.reserved_bytes == 128 + 1024 + 5120);
  CHECK(s.system_allocs == 3);

  alloc.deallocate(c, 5000, Category::Activation);
  s = alloc.stats();
  CHECK(s[Category::Activation].current_bytes == 1000);
  CHECK(s[Category::Activation].peak_bytes == 6000);
  CHECK(s[Category::Activation].free_count == 1);
  CHECK(s.peak_bytes == 6100);
  CHECK(s.cached_bytes == 5120);

  // Same size class again: served from the cache, no system call.
  void* d = alloc.allocate(4900, Category::Temporary);
  CHECK(d == c);
  CHECK(alloc.stats().system_allocs == 3);
  CHECK(alloc.stats().cached_bytes == 0);
  CHECK(alloc.stats()[Category::Temporary].current_bytes == 4900);

  alloc.reset_peak();
  s = alloc.stats();
  CHECK(s.peak_bytes == 100 + 1000 + 4900);
  CHECK(s[Category::Activation].peak_bytes == 1000);

  alloc.recategorize(b, 1000, Category::Activation, Category::Gradient);
  s = alloc.stats();
  CHECK(s[Category::Activation].current_bytes == 0);
  CHECK(s[Category::Gradient].current_bytes == 1000);
  CHECK(s.current_bytes == 6000);

  alloc.deallocate(a, 100, Category::Parameter);
  alloc.deallocate(b, 1000, Category::Gradient);
  alloc.deallocate(d, 4900, Category::Temporary);
  CHECK(alloc.stats().current_bytes == 0);
  alloc.empty_cache();
  CHECK(alloc.stats().reserved_bytes == 0);
  CHECK(mem.blocks.empty());
  CHECK(alloc.allocate(0, Category::Temporary) == nullptr);
}

TEST_CASE("the model state's joint peak: parameter + gradient + optimizer bytes held at the same moment") {
  // The three categories peak at different moments (as under sharded data parallel: gathered
  // parameters in forward, whole gradients in backward, the optimizer's state at the step), so the
  // joint peak is below the sum of their own peaks; activations and temporaries do not count.
  CountingMemory mem;
  CachingAllocator alloc(Device::cpu(), &mem);
  void* shard = alloc.allocate(100, Category::Parameter);
  void* gathered = alloc.allocate(400, Category::Parameter);  // forward: 500
  void* act = alloc.allocate(10000, Category::Activation);
  alloc.deallocate(gathered, 400, Category::Parameter);
  void* grads = alloc.allocate(300, Category::Gradient);  // backward: 400
  alloc.deallocate(grads, 300, Category::Gradient);
  void* moments = alloc.allocate(200, Category::OptimizerState);  // step: 300
  MemoryStats s = alloc.stats();
  CHECK(s[Category::Parameter].peak_bytes + s[Category::Gradient].peak_bytes +
            s[Category::OptimizerState].peak_bytes == 1000);
  CHECK(s.model_state_peak_bytes == 500);
  CHECK(s.model_state_bytes == 300);
  // A retag into or out of the model state moves it (an activation becoming a gradient: 300 + 250).
  alloc.recategorize(act, 250, Category::Activation, Category::Gradient);
  CHECK(alloc.stats().model_state_bytes == 550);
  CHECK(alloc.stats().model_state_peak_bytes == 550);
  alloc.recategorize(act, 250, Category::Gradient, Category::Activation);
  CHECK(alloc.stats().model_state_bytes == 300);
  alloc.reset_peak();
  CHECK(alloc.stats().model_state_peak_bytes == 300);
  alloc.deallocate(act, 10000, Category::Activation);
  alloc.deallocate(moments, 200, Category::OptimizerState);
  alloc.deallocate(shard, 100, Category::Parameter);
  s = alloc.stats();
  CHECK(s.model_state_bytes == 0);
  CHECK(s.model_state_peak_bytes == 300);
}

TEST_CASE("asking for more than the limit raises a clear reel::Error") {
  CountingMemory mem;
  CachingAllocator alloc(Device::cpu(), &mem);
  alloc.set_limit(1 << 20);
  void* p = alloc.allocate(512 << 10, Category::Parameter);
  CHECK_REEL_ERROR(alloc.allocate(600 << 10, Category::Activation),
                   "cannot allocate 600.00 KiB of activation on cpu: the limit is 1.00 MiB and in use 512.00 KiB "
                   "(parameter 512.00 KiB, gradient 0 B, optimizer state 0 B, activation 0 B, temporary 0 B, offloaded 0 B)");
  CHECK(alloc.stats().current_bytes == 512 << 10);
  alloc.deallocate(p, 512 << 10, Category::Parameter);
}

TEST_CASE("out of system memory is an error, not a crash") {
  struct NoMemory : RawMemory {
    void* allocate(size_t) override { return nullptr; }
    void release(void*) override {}
  } none;
  CachingAllocator alloc(Device::cpu(), &none);
  CHECK_REEL_ERROR(alloc.allocate(1000, Category::Temporary), "cpu is out of memory allocating 1000 B");
}

TEST_CASE("tensors are attributed to the category of the enclosing scope") {
  const MemoryStats before = memory_stats(Device::cpu());
  {
    MemoryCategory scope(Category::Parameter);
    CHECK(MemoryCategory::current() == Category::Parameter);
    Tensor w = zeros({10, 10});  // 400 bytes
    {
      MemoryCategory inner(Category::OptimizerState);
      Tensor m = zeros({10, 10}, DType::f64);  // 800 bytes
      const MemoryStats s = memory_stats(Device::cpu());
      CHECK(s[Category::OptimizerState].current_bytes - before[Category::OptimizerState].current_bytes == 800);
    }
    CHECK(MemoryCategory::current() == Category::Parameter);
    const MemoryStats s = memory_stats(Device::cpu());
    CHECK(s[Category::Parameter].current_bytes - before[Category::Parameter].current_bytes == 400);
    CHECK(s[Category::OptimizerState].current_bytes == before[Category::OptimizerState].current_bytes);
    w.storage()->set_category(Category::Gradient);
    CHECK(memory_stats(Device::cpu())[Category::Gradient].current_bytes - before[Category::Gradient].current_bytes ==
          400);
  }
  CHECK(MemoryCategory::current() == Category::Temporary);
  CHECK(memory_stats(Device::cpu()).current_bytes == before.current_bytes);
  CHECK(memory_report().find("parameter") != std::string::npos);
}

TEST_CASE("a released storage leaves its category's statistics, is refused by kernels, and comes back") {
  for (const Device dev : reel::testing::devices()) {
    CAPTURE(dev);
    Tensor p;
    {
      MemoryCategory scope(Category::Parameter);
      p = from_vector<double>({1, 2, 3, 4, 5, 6}, {2, 3}).to(dev);
    }
    const Tensor view = p.slice(1, 1, 3);  // another handle on the same storage
    const std::vector<double> values = reel::testing::values(p);
    const int64_t before = memory_stats(dev)[Category::Parameter].current_bytes;
    const uint64_t version = p.version();
    p.storage()->release();
    CHECK(p.storage()->released());
    CHECK(p.storage()->data() == nullptr);
    CHECK(p.storage()->bytes() == 48);
    CHECK(memory_stats(dev)[Category::Parameter].current_bytes == before - 48);
    const std::string refused = "data_ptr: the f64 (2, 2) tensor on " + dev.str() + " has released its storage";
    CHECK_REEL_ERROR((void)view.clone(), refused.c_str());
    p.storage()->release();  // a no-op
    p.storage()->materialize();
    CHECK(memory_stats(dev)[Category::Parameter].current_bytes == before);
    CHECK(p.storage()->category() == Category::Parameter);
    // The same values written back: restore_ leaves the version alone, copy_ bumps it.
    p.restore_(from_vector<double>(values, {2, 3}).to(dev));
    CHECK(p.version() == version);
    CHECK(reel::testing::values(view) == std::vector<double>{2, 3, 5, 6});
    p.copy_(p.clone());
    CHECK(p.version() == version + 1);
  }
}

TEST_CASE("a memory timeline receives allocations, retags and frees with category, block and context") {
  MemoryTimeline timeline;
  const void* block = nullptr;
  {
    const profile::OpScope op("test_op", 42, false);
    MemoryCategory scope(Category::Activation);
    Tensor t = empty({8});
    block = t.storage()->data();
    t.storage()->set_category(Category::Gradient);
  }
  timeline.stop();
  Tensor untracked = empty({8});
  const std::vector<MemoryEvent>& events = timeline.events();
  REQUIRE(events.size() == 3);
  CHECK(events[0].kind == MemoryEvent::Kind::Alloc);
  CHECK(events[0].bytes == 32);
  CHECK(events[0].category == Category::Activation);
  CHECK(events[0].op == "test_op");
  CHECK(events[0].node == 42);
  CHECK(events[0].phase == profile::Phase::Forward);  // an op outside any phase is in the forward
  CHECK(events[1].kind == MemoryEvent::Kind::Retag);
  CHECK(events[1].from == Category::Activation);
  CHECK(events[1].category == Category::Gradient);
  CHECK(events[2].kind == MemoryEvent::Kind::Free);
  CHECK(events[2].category == Category::Gradient);
  for (const MemoryEvent& e : events) {
    CHECK(e.block == block);
    CHECK(e.device == Device::cpu());
  }
  CHECK(events[1].time_ns >= events[0].time_ns);
  CHECK(events[2].time_ns >= events[1].time_ns);
  CHECK(format_bytes(1536) == "1.50 KiB");
}
