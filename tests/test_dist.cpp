// distributed/ under `mpirun -np 2` (tests/CMakeLists.txt): the process group's collectives on every
// device, data-parallel windows against one process over the whole global batch (f64 to 1e-12, f32
// to 1e-6, uneven token counts and micro-batches per rank), one gradient collective per bucket per
// window, buckets started from the tape during backward, checkpoint replay, global-norm clipping,
// ZeRO-1 against plain AdamW, and the dataset sharding. On cuda:0 (emulated, or a GPU): every
// collective (reduce to either root too) through NCCL equal to the host-staged MPI path, and
// DataParallel / ZeroAdamW through NCCL against one process, one NCCL collective per bucket per
// window. CTest runs the suite twice: as built (NCCL for cuda tensors where the build has it) and
// with REEL_DIST_BACKEND=mpi. Every rank runs every case in the same order (each collective needs
// all ranks); a rank is told apart by group.rank().
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <memory>
#include <set>
#include <string>

#include "autograd/checkpoint.h"
#include "autograd/functions.h"
#include "autograd/tape.h"
#include "core/allocator.h"
#include "core/profile.h"
#include "distributed/data_parallel.h"
#include "distributed/process_group.h"
#include "nn/safetensors.h"
#include "optim/accumulator.h"
#include "testing.h"

using namespace reel;
using distributed::ProcessGroup;

namespace {

ProcessGroup& world() { return ProcessGroup::world(); }

// fn throws a reel::Error whose message contains every part.
void check_error(const std::function<void()>& fn, const std::vector<std::string>& parts) {
  bool threw = false;
  try {
    fn();
  } catch (const Error& e) {
    threw = true;
    for (const std::string& part : parts) {
      CAPTURE(e.what());
      CHECK(std::string(e.what()).find(part) != std::string::npos);
    }
  }
  CHECK(threw);
}

// ---- a small model on "tokens": (n, T=4, 6) -> Linear(6, 16) -> GELU -> Linear(16, 3) --------------

struct Data {
  Tensor x;     // (32, 4, 6)
  Tensor y;     // (32, 4, 3)
  Tensor mask;  // (32, 4, 3): 1 where the token counts, 0 where it is ignored (same over the last dim)
};

// The same global batch on every rank (same seed). Rank 1's half has every token; rank 0's half
// ignores every third token, so the ranks' token counts differ.
Data global_batch(DType dt) {
  Generator gen(7);
  Data d;
  d.x = randn({32, 4, 6}, DType::f64, Device::cpu(), &gen).to(dt);
  d.y = randn({32, 4, 3}, DType::f64, Device::cpu(), &gen).to(dt);
  std::vector<double> m(32 * 4 * 3);
  for (int64_t s = 0; s < 32; ++s)
    for (int64_t t = 0; t < 4; ++t)
      for (int64_t c = 0; c < 3; ++c) m[(s * 4 + t) * 3 + c] = (s < 16 && (s * 4 + t) % 3 == 0) ? 0.0 : 1.0;
  d.mask = from_vector<double>(m, {32, 4, 3}).to(dt);
  return d;
}

struct Batch {
  Tensor x, y, mask;
};
Batch rows(const Data& d, int64_t begin, int64_t end) {
  return {d.x.slice(0, begin, end).clone(), d.y.slice(0, begin, end).clone(), d.mask.slice(0, begin, end).clone()};
}
int64_t tokens(const Batch& b) { return static_cast<int64_t>(std::llround(sum(b.mask).item())) / 3; }

std::vector<Tensor> make_params(DType dt, uint64_t seed, Device dev = Device::cpu()) {
  Generator gen(seed);
  MemoryCategory category(Category::Parameter);
  const auto p = [&](const Shape& s, double scale) {
    return (randn(s, DType::f64, Device::cpu(), &gen) * scale).to(dt).to(dev).set_requires_grad();
  };
  return {p({6, 16}, 0.4), p({16}, 0.1), p({16, 3}, 0.25), p({3}, 0.1)};
}

Tensor loss_of(const std::vector<Tensor>& p, const Batch& b, bool checkpointed) {
  Tensor h;
  if (checkpointed) {
    autograd::Checkpoint seg;
    h = gelu(matmul(b.x, p[0]) + p[1]);
  } else {
    h = gelu(matmul(b.x, p[0]) + p[1]);
  }
  const Tensor diff = matmul(h, p[2]) + p[3] - b.y;
  return sum(diff * diff * b.mask) * (1.0 / 3);  // a sum over tokens of the per-token mean square
}

// An optimizer that takes no step and keeps the window's final gradients (after any clipping).
class Capture final : public optim::Optimizer {
 public:
  explicit Capture(std::vector<Tensor> params) : Optimizer(std::move(params), 0.0) {}
  std::vector<std::vector<double>> grads;

 private:
  void update(const std::vector<size_t>&) override {
    grads.clear();
    for (const Tensor& p : params_) grads.push_back(reel::testing::values(p.grad()));
  }
  std::vector<std::string> state_slots() const override { return {}; }
};

// The reference: one process, the whole global batch in one micro-batch.
std::vector<std::vector<double>> one_process_grads(DType dt, double clip = 0) {
  const Data d = global_batch(dt);
  const std::vector<Tensor> p = make_params(dt, 1);
  Capture cap(p);
  optim::Accumulator acc(cap, {clip, nullptr, false, nullptr});
  const std::vector<Batch> window{rows(d, 0, 32)};
  const optim::WindowResult r = acc.step(window, tokens, [&](const Batch& b) { return loss_of(p, b, false); });
  REQUIRE(r.stepped);
  return cap.grads;
}

void check_grads(const std::vector<std::vector<double>>& got, const std::vector<std::vector<double>>& want,
                 double rel) {
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    CAPTURE(i);
    REQUIRE(got[i].size() == want[i].size());
    double scale = 0, err = 0;
    for (size_t e = 0; e < got[i].size(); ++e) {
      scale = std::max(scale, std::fabs(want[i][e]));
      err = std::max(err, std::fabs(got[i][e] - want[i][e]));
    }
    CHECK(scale > 0);
    CHECK(err <= rel * scale);
  }
}

// This rank's micro-batches of its half of the global batch: rank 0 takes rows [0, 16) in
// micro-batches of `split0` rows, rank 1 rows [16, 32) in micro-batches of `split1` rows.
std::vector<Batch> my_window(const Data& d, const std::vector<int64_t>& split0, const std::vector<int64_t>& split1) {
  const int rank = world().rank();
  int64_t begin = rank == 0 ? 0 : 16;
  std::vector<Batch> out;
  for (int64_t n : rank == 0 ? split0 : split1) {
    out.push_back(rows(d, begin, begin + n));
    begin += n;
  }
  return out;
}

// Sets the cuda path for a scope (every rank runs the same cases, so every rank chooses alike).
class UseCudaPath {
 public:
  explicit UseCudaPath(distributed::CudaPath path) : before_(world().cuda_path()) { world().set_cuda_path(path); }
  ~UseCudaPath() { world().set_cuda_path(before_); }

 private:
  distributed::CudaPath before_;
};

// The paths cuda tensors can take in this build.
std::vector<distributed::CudaPath> cuda_paths() {
  if (ProcessGroup::nccl_built()) return {distributed::CudaPath::Nccl, distributed::CudaPath::Staged};
  return {distributed::CudaPath::Staged};
}
std::string path_name(distributed::CudaPath p) { return p == distributed::CudaPath::Nccl ? "nccl" : "staged"; }

// Runs `collective` once through each path and checks that NCCL gave the staged MPI path's values
// exactly (two ranks: every sum has two terms, and an average halves it), and that it went through
// NCCL (counted) only when NCCL was chosen.
void check_paths_agree(distributed::Collective kind, const std::function<Tensor()>& collective) {
  std::vector<double> results[2];
  for (const distributed::CudaPath path : {distributed::CudaPath::Staged, distributed::CudaPath::Nccl}) {
    CAPTURE(path_name(path));
    UseCudaPath use(path);
    const int64_t nccl = world().nccl_issued(kind), issued = world().issued(kind);
    results[path == distributed::CudaPath::Nccl] = reel::testing::values(collective());
    CHECK(world().issued(kind) == issued + 1);
    CHECK(world().nccl_issued(kind) == nccl + (path == distributed::CudaPath::Nccl ? 1 : 0));
  }
  CHECK(results[1] == results[0]);
}

}  // namespace

// ---- the process group ---------------------------------------------------------------------

TEST_CASE("process group: the launcher's world, two ranks") {
  REQUIRE(world().size() == 2);
  CHECK(world().uses_mpi());
  CHECK((world().rank() == 0 || world().rank() == 1));
}

TEST_CASE("process group: all_reduce sum and average, every dtype, device and layout") {
  ProcessGroup& g = world();
  const double r = g.rank();
  for (const Device dev : reel::testing::devices()) {
    CAPTURE(dev);
    for (const DType dt : {DType::f32, DType::f64}) {
      CAPTURE(dt);
      // rank r holds r + i: the sum is 2i + 1, the average i + 0.5
      const Tensor t = (arange(6, DType::f64) + r).to(dt).to(dev).reshape({2, 3});
      g.all_reduce(t);
      reel::testing::check_close(t, {1, 3, 5, 7, 9, 11}, 0, 0);
      const Tensor a = (arange(6, DType::f64) + r).to(dt).to(dev);
      g.all_reduce(a, distributed::ReduceOp::Average);
      reel::testing::check_close(a, {0.5, 1.5, 2.5, 3.5, 4.5, 5.5}, 0, 0);
      // A strided view is reduced in place through a contiguous copy: only its elements change.
      const Tensor base = (arange(6, DType::f64) * (r + 1)).to(dt).to(dev).reshape({2, 3});
      const Tensor col = base.slice(1, 1, 2);  // (2, 1): elements 1 and 4
      g.all_reduce(col);
      reel::testing::check_close(base, {0, 3, 2 * (r + 1), 3 * (r + 1), 12, 5 * (r + 1)}, 0, 0);
    }
    const Tensor i = from_vector<int64_t>({int64_t{1} << 40, 3}, {2}).to(dev);
    g.all_reduce(i);
    CHECK(i.to(Device::cpu()).to_vector<int64_t>() == std::vector<int64_t>{int64_t{1} << 41, 6});
  }
  CHECK(g.all_reduce(int64_t{5} + g.rank()) == 11);
  CHECK(g.all_reduce(0.25 * (g.rank() + 1), distributed::ReduceOp::Average) == doctest::Approx(0.375));
}

TEST_CASE("process group: reduce_scatter, all_gather, broadcast, barrier") {
  ProcessGroup& g = world();
  const int r = g.rank();
  for (const Device dev : reel::testing::devices()) {
    CAPTURE(dev);
    // rank r holds (r + 1) * [0..8): the sum is 3 * [0..8); rank r gets chunk r
    const Tensor in = (arange(8, DType::f64) * (r + 1.0)).to(dev).reshape({2, 4});
    const Tensor out = zeros({4}, DType::f64, dev);
    g.reduce_scatter(out, in);
    const double b = 4.0 * r;
    reel::testing::check_close(out, {3 * b, 3 * (b + 1), 3 * (b + 2), 3 * (b + 3)}, 0, 0);
    g.reduce_scatter(out, in, distributed::ReduceOp::Average);
    reel::testing::check_close(out, {1.5 * b, 1.5 * (b + 1), 1.5 * (b + 2), 1.5 * (b + 3)}, 0, 0);

    const Tensor mine = full({3}, 10.0 * (r + 1), DType::f32, dev);
    const Tensor all = zeros({2, 3}, DType::f32, dev);
    g.all_gather(all, mine);
    reel::testing::check_close(all, {10, 10, 10, 20, 20, 20}, 0, 0);

    const Tensor t = full({2, 2}, r == 1 ? 7.0 : -1.0, DType::f32, dev);
    g.broadcast(t, 1);
    reel::testing::check_close(t, {7, 7, 7, 7}, 0, 0);
  }
  const int64_t before = g.issued(distributed::Collective::Barrier);
  g.barrier();
  CHECK(g.issued(distributed::Collective::Barrier) == before + 1);
}

TEST_CASE("process group: reduce to either root, sum and average, dtypes, a view, async; the others keep theirs") {
  ProcessGroup& g = world();
  const int r = g.rank();
  for (const Device dev : reel::testing::devices())
    for (const int root : {0, 1}) {
      CAPTURE(dev);
      CAPTURE(root);
      const bool is_root = r == root;
      std::vector<double> mine;  // rank r holds i + r: the sum is 2i + 1, the average i + 0.5
      for (int i = 0; i < 6; ++i) mine.push_back(i + r);
      for (const DType dt : {DType::f32, DType::f64, DType::i32, DType::i64}) {
        CAPTURE(dt);
        const Tensor t = (arange(6, DType::f64) + r).to(dt).to(dev).reshape({2, 3});
        g.reduce(t, root);
        reel::testing::check_close(t, is_root ? std::vector<double>{1, 3, 5, 7, 9, 11} : mine, 0, 0);
      }
      const Tensor a = (arange(6, DType::f64) + r).to(dev);
      g.reduce(a, root, distributed::ReduceOp::Average);
      reel::testing::check_close(a, is_root ? std::vector<double>{0.5, 1.5, 2.5, 3.5, 4.5, 5.5} : mine, 0, 0);
      // A strided view through a contiguous copy: on root only its elements (1 and 4) change.
      const Tensor base = (arange(6, DType::f64) * (r + 1)).to(DType::f32).to(dev).reshape({2, 3});
      g.reduce(base.slice(1, 1, 2), root);
      const double k = r + 1;
      reel::testing::check_close(base, {0, is_root ? 3 : k, 2 * k, 3 * k, is_root ? 12 : 4 * k, 5 * k}, 0, 0);
      // Asynchronous: the result is in place once wait() returns.
      const Tensor w = (arange(6, DType::f64) + r).to(dev);
      distributed::Work work = g.reduce_async(w, root);
      work.wait();
      CHECK(work.test());
      reel::testing::check_close(w, is_root ? std::vector<double>{1, 3, 5, 7, 9, 11} : mine, 0, 0);
    }
  // Refused before any communication, naming the collective and the root.
  const int64_t issued = g.issued(distributed::Collective::Reduce);
  check_error([&] { g.reduce(zeros({2}), 2); },
              {"dist: reduce (sum) of f32 (2) on cpu to rank 2", "the root must be a rank in [0, 2)"});
  check_error([&] { g.reduce(zeros({2}, DType::bf16), 0); }, {"reduce (sum) of bf16 (2)", "reduce them in f32"});
  check_error([&] { g.reduce(zeros({2}, DType::i64), 0, distributed::ReduceOp::Average); },
              {"reduce (average) of i64 (2) on cpu to rank 0", "an average needs a floating-point tensor"});
  CHECK(g.issued(distributed::Collective::Reduce) == issued);
  CHECK_FALSE(g.broken());
}

TEST_CASE("process group: all_gather writes a contiguous output in place; Restore leaves its version alone") {
  ProcessGroup& g = world();
  const int r = g.rank();
  for (const Device dev : reel::testing::devices()) {
    CAPTURE(dev);
    const Tensor mine = full({3}, 10.0 * (r + 1), DType::f32, dev);
    const Tensor storage = zeros({8}, DType::f32, dev);
    const Tensor out = untracked::slice(storage, 0, 1, 7);  // a contiguous view inside a larger storage
    const uint64_t v0 = out.version();
    g.all_gather(out, mine);  // Update: new values, a bump
    reel::testing::check_close(storage, {0, 10, 10, 10, 20, 20, 20, 0}, 0, 0);
    CHECK(out.version() > v0);
    const uint64_t v1 = out.version();
    g.all_gather(out, mine, distributed::Write::Restore);  // the same values again: no bump
    CHECK(out.version() == v1);
    distributed::Work w = g.all_gather_async(out, mine, distributed::Write::Restore);
    w.wait();
    CHECK(out.version() == v1);
    reel::testing::check_close(storage, {0, 10, 10, 10, 20, 20, 20, 0}, 0, 0);
    // The input in this rank's own slot of the output: gathered in place.
    const Tensor slot = untracked::slice(out, 0, 3 * r, 3 * r + 3);
    slot.restore_(full({3}, 5.0 * (r + 1), DType::f32, dev));
    const uint64_t v3 = out.version();
    g.all_gather(out, slot, distributed::Write::Restore);
    reel::testing::check_close(storage, {0, 5, 5, 5, 10, 10, 10, 0}, 0, 0);
    CHECK(out.version() == v3);
    g.all_gather(out, slot);
    CHECK(out.version() > v3);
    reel::testing::check_close(storage, {0, 5, 5, 5, 10, 10, 10, 0}, 0, 0);
    // A strided output goes through a contiguous copy, written back either way.
    const Tensor strided = zeros({6, 2}, DType::f32, dev);
    const Tensor column = untracked::select(strided, 1, 0);
    const uint64_t v2 = column.version();
    g.all_gather(column, mine, distributed::Write::Restore);
    reel::testing::check_close(column, {10, 10, 10, 20, 20, 20}, 0, 0);
    CHECK(column.version() == v2);
  }
}

TEST_CASE("process group: bf16 and f16 are gathered and broadcast bit for bit, and refused in reductions") {
  ProcessGroup& g = world();
  const int r = g.rank();
  for (const Device dev : reel::testing::devices())
    for (const DType dt : {DType::bf16, DType::f16}) {
      CAPTURE(dev);
      CAPTURE(dt);
      const Tensor mine = (from_vector<double>({1.0 / 3, -2.5e-3, 7.0}, {3}) * (r + 1.0)).to(dt).to(dev);
      const Tensor all = zeros({6}, dt, dev);
      g.all_gather(all, mine);
      const Tensor want = concat({(from_vector<double>({1.0 / 3, -2.5e-3, 7.0}, {3})).to(dt),
                               (from_vector<double>({1.0 / 3, -2.5e-3, 7.0}, {3}) * 2.0).to(dt)}, 0);
      CHECK(reel::testing::bit_identical(all.to(Device::cpu()), want));
      const Tensor t = mine.clone();
      g.broadcast(t, 1);
      CHECK(reel::testing::bit_identical(t.to(Device::cpu()), want.slice(0, 3, 6)));
      const int64_t issued = g.issued(distributed::Collective::AllReduce);
      check_error([&] { g.all_reduce(t); }, {"all_reduce (sum) of", "16-bit floats are gathered and broadcast, not reduced"});
      check_error([&] { g.reduce_scatter(mine.slice(0, 0, 1), all.slice(0, 0, 2)); },
                  {"reduce_scatter (sum) of", "reduce them in f32"});
      CHECK(g.issued(distributed::Collective::AllReduce) == issued);
      CHECK_FALSE(g.broken());
    }
}

TEST_CASE("process group: a completed collective keeps none of its tensors alive") {
  ProcessGroup& g = world();
  for (const Device dev : reel::testing::devices()) {
    CAPTURE(dev);
    const int64_t before = memory_stats(dev).current_bytes;
    distributed::Work kept;
    {
      const Tensor mine = full({3000}, 1.0, DType::f32, dev);
      const Tensor out = zeros({6000}, DType::f32, dev), grads = zeros({6000}, DType::f32, dev);
      const Tensor part = zeros({3000}, DType::f32, dev);
      g.reduce_scatter(part, grads);
      kept = g.all_gather_async(out, mine);
      kept.wait();
      g.all_reduce(grads);
    }
    // Their bytes are back: neither the finished states the group keeps until its next collective
    // nor the Work still held here keep them.
    CHECK(memory_stats(dev).current_bytes == before);
  }
}

TEST_CASE("process group: bad arguments are refused on the rank, before any communication") {
  ProcessGroup& g = world();
  const int64_t before = g.issued(distributed::Collective::ReduceScatter);
  check_error(
      [&] { g.reduce_scatter(zeros({3}), zeros({8})); },
      {"reduce_scatter (sum) of f32 (8) on cpu", "1/2 of the input's 8 elements", "(3)"});
  check_error([&] { g.all_gather(zeros({5}), zeros({3})); },
                                   {"all_gather of f32 (3) on cpu", "2 times the input's 3 elements"});
  check_error([&] { g.broadcast(zeros({2}), 2); }, {"broadcast", "from rank 2", "[0, 2)"});
  check_error([&] { g.all_reduce(zeros({2}, DType::i64), distributed::ReduceOp::Average); },
                                   {"all_reduce (average) of i64 (2)", "floating-point"});
  CHECK(g.issued(distributed::Collective::ReduceScatter) == before);
  CHECK_FALSE(g.broken());
}

TEST_CASE("process group: REEL_DIST_BACKEND chooses how cuda tensors travel") {
  const char* env = std::getenv("REEL_DIST_BACKEND");
  const std::string choice = env ? env : "";
  if (choice == "mpi") CHECK(world().cuda_path() == distributed::CudaPath::Staged);
  else if (ProcessGroup::nccl_built()) CHECK(world().cuda_path() == distributed::CudaPath::Nccl);
  else CHECK(world().cuda_path() == distributed::CudaPath::Staged);
#if defined(REEL_CUDA_EMULATED)
  CHECK(ProcessGroup::nccl_built());  // the emulated build always has the emulated NCCL
#endif
}

TEST_CASE("process group on cuda:0: every collective through NCCL equals the staged MPI path") {
  if (!cuda_available() || !ProcessGroup::nccl_built()) return;
  const Device cuda = Device::cuda(0);
  const int r = world().rank();
  for (const DType dt : {DType::f32, DType::f64}) {
    CAPTURE(dt);
    // Different values on each rank, not small integers: rounding would show a difference.
    const auto data = [&](int64_t n, uint64_t salt) {
      Generator gen(100 * salt + static_cast<uint64_t>(r));
      return randn({n}, DType::f64, Device::cpu(), &gen).to(dt).to(cuda);
    };
    for (const distributed::ReduceOp op : {distributed::ReduceOp::Sum, distributed::ReduceOp::Average}) {
      CAPTURE(op == distributed::ReduceOp::Sum);
      check_paths_agree(distributed::Collective::AllReduce, [&] {
        const Tensor t = data(12, 1).reshape({3, 4});
        world().all_reduce(t, op);
        return t;
      });
      // A strided view: only its elements change, through a contiguous device copy.
      check_paths_agree(distributed::Collective::AllReduce, [&] {
        const Tensor base = data(12, 2).reshape({3, 4});
        world().all_reduce(base.slice(1, 1, 3), op);
        return base;
      });
      // Asynchronous, waited for later.
      check_paths_agree(distributed::Collective::AllReduce, [&] {
        const Tensor t = data(7, 3);
        distributed::Work w = world().all_reduce_async(t, op);
        w.wait();
        CHECK(w.test());
        return t;
      });
      check_paths_agree(distributed::Collective::ReduceScatter, [&] {
        const Tensor out = zeros({2, 3}, dt, cuda);
        world().reduce_scatter(out, data(12, 4).reshape({4, 3}), op);
        return out;
      });
      for (const int root : {0, 1}) {
        CAPTURE(root);
        // A view (columns 1..3 of each row) to either root; the other rank's tensor stays as it was.
        check_paths_agree(distributed::Collective::Reduce, [&] {
          const Tensor t = data(10, 7).reshape({2, 5});
          world().reduce(t.slice(1, 1, 4), root, op);
          return t;
        });
        check_paths_agree(distributed::Collective::Reduce, [&] {
          const Tensor t = data(6, 8);
          distributed::Work w = world().reduce_async(t, root, op);
          w.wait();
          return t;
        });
      }
    }
    check_paths_agree(distributed::Collective::AllGather, [&] {
      const Tensor out = zeros({2, 5}, dt, cuda);
      world().all_gather(out, data(5, 5));
      return out;
    });
    for (const int root : {0, 1}) {
      CAPTURE(root);
      check_paths_agree(distributed::Collective::Broadcast, [&] {
        const Tensor t = data(9, 6).reshape({3, 3});
        world().broadcast(t.slice(0, 1, 3), root);  // a view: rows 1 and 2 only
        return t;
      });
    }
  }
  // Integers, through NCCL: exact.
  UseCudaPath use(distributed::CudaPath::Nccl);
  const Tensor i = from_vector<int64_t>({int64_t{1} << 40, r}, {2}).to(cuda);
  world().all_reduce(i);
  CHECK(i.to(Device::cpu()).to_vector<int64_t>() == std::vector<int64_t>{int64_t{1} << 41, 1});
  CHECK_FALSE(world().broken());
}

TEST_CASE("process group on cuda:0 through NCCL: bad arguments are refused before any communication") {
  if (!cuda_available() || !ProcessGroup::nccl_built()) return;
  UseCudaPath use(distributed::CudaPath::Nccl);
  const Device cuda = Device::cuda(0);
  const int64_t before = world().nccl_issued(distributed::Collective::ReduceScatter);
  check_error([&] { world().reduce_scatter(zeros({3}, DType::f32, cuda), zeros({8}, DType::f32, cuda)); },
              {"reduce_scatter (sum) of f32 (8) on cuda:0 through NCCL", "1/2 of the input's 8 elements"});
  check_error([&] { world().broadcast(zeros({2}, DType::f32, cuda), 2); }, {"on cuda:0 through NCCL", "from rank 2"});
  check_error([&] { world().reduce(zeros({2}, DType::f32, cuda), -1); },
              {"reduce (sum) of f32 (2) on cuda:0 through NCCL to rank -1", "the root must be a rank"});
  check_error([&] { world().all_reduce(zeros({2}, DType::i32, cuda), distributed::ReduceOp::Average); },
              {"all_reduce (average) of i32 (2) on cuda:0 through NCCL", "floating-point"});
  CHECK(world().nccl_issued(distributed::Collective::ReduceScatter) == before);
  CHECK_FALSE(world().broken());
}

// ---- data parallel ---------------------------------------------------------------------------

TEST_CASE("data parallel: world 2 x batch 16 gives the gradients of world 1 x batch 32") {
  for (const DType dt : {DType::f64, DType::f32}) {
    CAPTURE(dt);
    const double rel = dt == DType::f64 ? 1e-12 : 1e-6;
    const auto want = one_process_grads(dt);
    const Data d = global_batch(dt);
    // Micro-batches per rank: even, uneven, different numbers on the two ranks, and none at all on
    // rank 1 (rank 0 then takes the whole batch).
    struct Split {
      std::vector<int64_t> r0, r1;
    };
    for (const Split& split : {Split{{16}, {16}}, Split{{5, 11}, {16}}, Split{{3, 4, 9}, {8, 8}}}) {
      CAPTURE(split.r0.size());
      CAPTURE(split.r1.size());
      // Rank 1 starts from other parameters: the broadcast from rank 0 must overwrite them.
      const std::vector<Tensor> p = make_params(dt, 1 + world().rank());
      distributed::DataParallel dp(p, {64 * static_cast<int64_t>(dtype_size(dt)), true, 0});  // 64 elements: 3 buckets
      Capture cap(p);
      optim::Accumulator acc(cap, {0, nullptr, false, &dp});
      const int64_t all_reduces = world().issued(distributed::Collective::AllReduce);
      const optim::WindowResult r =
          acc.step(my_window(d, split.r0, split.r1), tokens, [&](const Batch& b) { return loss_of(p, b, false); });
      CHECK(r.stepped);
      CHECK(r.count == 16 * 4 - 22 + 16 * 4);  // rank 0's half ignores 22 of its 64 tokens
      check_grads(cap.grads, want, rel);
      // One collective per bucket in the window, all started from the tape during the last backward;
      // plus the window's count and loss.
      CHECK(dp.buckets() >= 3);
      CHECK(dp.grad_syncs() == dp.buckets());
      CHECK(dp.overlapped_syncs() == dp.buckets());
      CHECK(world().issued(distributed::Collective::AllReduce) == all_reduces + dp.buckets() + 2);
    }
  }
}

TEST_CASE("data parallel: a rank with no micro-batch in the window still joins the synchronisation") {
  const auto want = one_process_grads(DType::f64);
  const Data d = global_batch(DType::f64);
  const std::vector<Tensor> p = make_params(DType::f64, 1);
  distributed::DataParallel dp(p, {512, true, 0});
  Capture cap(p);
  optim::Accumulator acc(cap, {0, nullptr, false, &dp});
  std::vector<Batch> window;
  if (world().rank() == 0) window = {rows(d, 0, 20), rows(d, 20, 32)};
  acc.step(window, tokens, [&](const Batch& b) { return loss_of(p, b, false); });
  check_grads(cap.grads, want, 1e-12);
  CHECK(dp.grad_syncs() == dp.buckets());
}

TEST_CASE("data parallel: several windows, one gradient collective per bucket per window") {
  const Data d = global_batch(DType::f64);
  const std::vector<Tensor> p = make_params(DType::f64, 1);
  distributed::DataParallel dp(p, {256, true, 0});
  optim::SGD sgd(p, 0.1);
  optim::Accumulator acc(sgd, {0, nullptr, false, &dp});
  for (int w = 1; w <= 3; ++w) {
    acc.step(my_window(d, {4, 4, 8}, {2, 14}), tokens, [&](const Batch& b) { return loss_of(p, b, false); });
    CHECK(dp.grad_syncs() == w * dp.buckets());
  }
  // The replicas stay identical: rank 0's parameters, broadcast, equal everyone's.
  for (const Tensor& t : p) {
    const Tensor mine = t.detach().clone();
    const Tensor ref = t.detach().clone();
    world().broadcast(ref, 0);
    reel::testing::check_close(mine, ref, 0, 0);
  }
}

TEST_CASE("data parallel: under a Profiler each bucket's collective is a span in flight, begun inside backward") {
  const Data d = global_batch(DType::f64);
  const std::vector<Tensor> p = make_params(DType::f64, 1);
  distributed::DataParallel dp(p, {256, true, 0});
  optim::SGD sgd(p, 0.1);
  optim::Accumulator acc(sgd, {0, nullptr, false, &dp});
  Profiler prof;
  acc.step(my_window(d, {4, 4, 8}, {2, 14}), tokens, [&](const Batch& b) { return loss_of(p, b, false); });
  prof.stop();
  int64_t backward_start = -1, backward_end = -1;  // the window's last backward
  std::vector<const profile::SpanRecord*> in_flight;
  for (const profile::SpanRecord& s : prof.spans()) {
    if (s.name == "backward") backward_start = s.start_ns, backward_end = s.start_ns + s.dur_ns;
    if (s.track >= profile::kInFlightTrack) in_flight.push_back(&s);
  }
  REQUIRE(backward_end > 0);
  REQUIRE(in_flight.size() == dp.buckets());
  std::set<std::string> names;
  for (const profile::SpanRecord* s : in_flight) {
    names.insert(s->name);
    CHECK(s->name.rfind("all_reduce bucket ", 0) == 0);
    CHECK(s->start_ns >= backward_start);
    CHECK(s->start_ns < backward_end);  // launched from the tape, during backward
    CHECK(s->dur_ns >= 0);
    CHECK(prof.track_name(s->track).rfind("in flight, lane ", 0) == 0);
  }
  CHECK(names.size() == dp.buckets());
  // Spans on one lane never overlap.
  for (const profile::SpanRecord* a : in_flight)
    for (const profile::SpanRecord* b : in_flight)
      if (a != b && a->track == b->track)
        CHECK((a->start_ns + a->dur_ns <= b->start_ns || b->start_ns + b->dur_ns <= a->start_ns));
}

TEST_CASE("data parallel: buckets started after backward (overlap off) give the same gradients") {
  const auto want = one_process_grads(DType::f64);
  const Data d = global_batch(DType::f64);
  const std::vector<Tensor> p = make_params(DType::f64, 1);
  distributed::DataParallel dp(p, {512, false, 0});
  Capture cap(p);
  optim::Accumulator acc(cap, {0, nullptr, false, &dp});
  acc.step(my_window(d, {5, 11}, {16}), tokens, [&](const Batch& b) { return loss_of(p, b, false); });
  check_grads(cap.grads, want, 1e-12);
  CHECK(dp.grad_syncs() == dp.buckets());
  CHECK(dp.overlapped_syncs() == 0);
}

TEST_CASE("data parallel: checkpoint replay gives the plain gradients, buckets still overlapped") {
  const Data d = global_batch(DType::f64);
  std::vector<std::vector<double>> got[2];
  for (const bool checkpointed : {false, true}) {
    const std::vector<Tensor> p = make_params(DType::f64, 1);
    distributed::DataParallel dp(p, {512, true, 0});
    Capture cap(p);
    optim::Accumulator acc(cap, {0, nullptr, false, &dp});
    acc.step(my_window(d, {5, 11}, {16}), tokens, [&](const Batch& b) { return loss_of(p, b, checkpointed); });
    CHECK(dp.overlapped_syncs() == dp.buckets());
    got[checkpointed] = cap.grads;
  }
  check_grads(got[1], got[0], 0);  // bit-identical
}

TEST_CASE("data parallel: clipping uses the global norm") {
  const auto want = one_process_grads(DType::f64, 0.05);
  const Data d = global_batch(DType::f64);
  const std::vector<Tensor> p = make_params(DType::f64, 1);
  distributed::DataParallel dp(p, {512, true, 0});
  Capture cap(p);
  optim::Accumulator acc(cap, {0.05, nullptr, false, &dp});
  const optim::WindowResult r =
      acc.step(my_window(d, {16}, {7, 9}), tokens, [&](const Batch& b) { return loss_of(p, b, false); });
  CHECK(r.grad_norm > 0.05);  // so it did clip
  check_grads(cap.grads, want, 1e-12);
}

TEST_CASE("data parallel: a non-finite gradient on one rank makes every rank skip the step") {
  for (const int zero : {0, 1}) {
    CAPTURE(zero);
    const Data d = global_batch(DType::f64);
    const std::vector<Tensor> p = make_params(DType::f64, 1);
    std::vector<std::vector<double>> before;
    for (const Tensor& t : p) before.push_back(reel::testing::values(t));
    distributed::DataParallel dp(p, {512, true, zero});
    std::unique_ptr<optim::Optimizer> opt;
    if (zero == 1) opt = std::make_unique<distributed::ZeroAdamW>(dp, 0.01);
    else opt = std::make_unique<optim::AdamW>(p, 0.01);
    optim::Accumulator acc(*opt, {1.0, nullptr, true, &dp});
    std::vector<Batch> window = my_window(d, {16}, {16});
    if (world().rank() == 1) window[0].x = window[0].x * std::nan("");  // an overflow on rank 1 only
    const optim::WindowResult r = acc.step(window, tokens, [&](const Batch& b) { return loss_of(p, b, false); });
    CHECK(r.skipped_nonfinite);
    CHECK_FALSE(r.stepped);
    CHECK(acc.skipped_steps() == 1);
    for (size_t i = 0; i < p.size(); ++i) reel::testing::check_close(p[i], before[i], 0, 0);
  }
}

TEST_CASE("data parallel on cuda:0, through NCCL and staged: the gradients of one process") {
  if (!cuda_available()) return;
  for (const distributed::CudaPath path : cuda_paths()) {
    CAPTURE(path_name(path));
    UseCudaPath use(path);
    for (const DType dt : {DType::f64, DType::f32}) {
      CAPTURE(dt);
      const auto want = one_process_grads(dt);  // on the CPU
      const Data d = global_batch(dt);
      for (const int zero : {0, 1}) {
        CAPTURE(zero);
        const std::vector<Tensor> p = make_params(dt, 1 + world().rank(), Device::cuda(0));
        distributed::DataParallel dp(p, {64 * static_cast<int64_t>(dtype_size(dt)), true, zero});
        CHECK(dp.bucket_list().front().flat.device() == Device::cuda(0));
        std::vector<Batch> window = my_window(d, {5, 11}, {16});
        for (Batch& b : window) b = {b.x.to(Device::cuda(0)), b.y.to(Device::cuda(0)), b.mask.to(Device::cuda(0))};
        const distributed::Collective grad_kind = zero == 0 ? distributed::Collective::AllReduce : distributed::Collective::ReduceScatter;
        const int64_t nccl_before = world().nccl_issued(grad_kind), issued_before = world().issued(grad_kind);
        // CUDA kernels against the CPU's: rounding only.
        const double rel = dt == DType::f64 ? 1e-10 : 1e-5;
        if (zero == 0) {
          Capture cap(p);
          optim::Accumulator acc(cap, {0, nullptr, false, &dp});
          acc.step(window, tokens, [&](const Batch& b) { return loss_of(p, b, false); });
          check_grads(cap.grads, want, rel);
        } else {
          // ZeRO-1: one AdamW step, against plain AdamW stepped with the CPU reference gradients.
          const std::vector<Tensor> ref = make_params(dt, 1);
          for (size_t i = 0; i < ref.size(); ++i) ref[i].set_grad(from_vector<double>(want[i], ref[i].shape()).to(dt));
          optim::AdamW plain(ref, 0.01);
          plain.step();
          distributed::ZeroAdamW zero_adam(dp, 0.01);
          optim::Accumulator acc(zero_adam, {0, nullptr, false, &dp});
          acc.step(window, tokens, [&](const Batch& b) { return loss_of(p, b, false); });
          for (size_t i = 0; i < p.size(); ++i) reel::testing::check_close(p[i], ref[i], rel, rel);
        }
        // One gradient collective per bucket, through NCCL exactly when NCCL was chosen (the
        // window's count and loss are host numbers: two more all-reduces, over MPI).
        CHECK(dp.buckets() >= 3);
        CHECK(world().issued(grad_kind) - issued_before == dp.buckets() + (zero == 0 ? 2 : 0));
        CHECK(world().nccl_issued(grad_kind) - nccl_before == (path == distributed::CudaPath::Nccl ? dp.buckets() : 0));
      }
    }
  }
}

TEST_CASE("data parallel on cuda:0 through NCCL: several windows, one NCCL all-reduce per bucket per window") {
  if (!cuda_available() || !ProcessGroup::nccl_built()) return;
  UseCudaPath use(distributed::CudaPath::Nccl);
  const Data d = global_batch(DType::f64);
  const std::vector<Tensor> p = make_params(DType::f64, 1, Device::cuda(0));
  distributed::DataParallel dp(p, {256, true, 0});
  optim::SGD sgd(p, 0.1);
  optim::Accumulator acc(sgd, {0, nullptr, false, &dp});
  const int64_t before = world().nccl_issued(distributed::Collective::AllReduce);
  for (int w = 1; w <= 3; ++w) {
    std::vector<Batch> window = my_window(d, {4, 4, 8}, {2, 14});
    for (Batch& b : window) b = {b.x.to(Device::cuda(0)), b.y.to(Device::cuda(0)), b.mask.to(Device::cuda(0))};
    acc.step(window, tokens, [&](const Batch& b) { return loss_of(p, b, false); });
    CHECK(dp.grad_syncs() == w * dp.buckets());
    CHECK(world().nccl_issued(distributed::Collective::AllReduce) - before == w * dp.buckets());
  }
  // The replicas stay identical (the window counts and losses went over MPI: host numbers).
  for (const Tensor& t : p) {
    const Tensor mine = t.detach().clone();
    const Tensor ref = t.detach().clone();
    world().broadcast(ref, 0);
    reel::testing::check_close(mine, ref, 0, 0);
  }
}

TEST_CASE("ZeRO-1 on cuda:0 through NCCL equals plain AdamW on one process after 20 steps") {
  if (!cuda_available() || !ProcessGroup::nccl_built()) return;
  UseCudaPath use(distributed::CudaPath::Nccl);
  const DType dt = DType::f64;
  const Data d = global_batch(dt);
  const optim::Adam::Options adam{0.9, 0.99, 1e-8, 0.05};
  const std::vector<Tensor> ref = make_params(dt, 1);
  optim::AdamW plain(ref, 0.01, adam);
  optim::Accumulator plain_acc(plain, {1.0, nullptr, false, nullptr});
  for (int s = 0; s < 20; ++s)
    plain_acc.step(std::vector<Batch>{rows(d, 0, 32)}, tokens, [&](const Batch& b) { return loss_of(ref, b, false); });

  const std::vector<Tensor> p = make_params(dt, 1 + world().rank(), Device::cuda(0));
  distributed::DataParallel dp(p, {512, true, 1});
  distributed::ZeroAdamW zero(dp, 0.01, adam);
  optim::Accumulator acc(zero, {1.0, nullptr, false, &dp});
  const int64_t scatters = world().nccl_issued(distributed::Collective::ReduceScatter);
  const int64_t gathers = world().nccl_issued(distributed::Collective::AllGather);
  std::vector<Batch> window = my_window(d, {6, 10}, {16});
  for (Batch& b : window) b = {b.x.to(Device::cuda(0)), b.y.to(Device::cuda(0)), b.mask.to(Device::cuda(0))};
  for (int s = 0; s < 20; ++s) acc.step(window, tokens, [&](const Batch& b) { return loss_of(p, b, false); });
  CHECK(world().nccl_issued(distributed::Collective::ReduceScatter) - scatters == 20 * dp.buckets());
  CHECK(world().nccl_issued(distributed::Collective::AllGather) - gathers == 20 * dp.buckets());
  for (size_t i = 0; i < p.size(); ++i) {
    CAPTURE(i);
    reel::testing::check_close(p[i], ref[i], 1e-6, 1e-6);
  }
}

// ---- ZeRO-1 ----------------------------------------------------------------------------------

TEST_CASE("ZeRO-1: sharded AdamW equals plain AdamW after 20 steps, with half the optimizer state") {
  for (const DType dt : {DType::f64, DType::f32}) {
    CAPTURE(dt);
    const Data d = global_batch(dt);
    const optim::Adam::Options adam{0.9, 0.99, 1e-8, 0.05};

    // One process, the whole batch each step.
    const std::vector<Tensor> ref = make_params(dt, 1);
    const int64_t state0 = memory_stats(Device::cpu())[Category::OptimizerState].current_bytes;
    optim::AdamW plain(ref, 0.01, adam);
    optim::Accumulator plain_acc(plain, {1.0, nullptr, false, nullptr});
    for (int s = 0; s < 20; ++s)
      plain_acc.step(std::vector<Batch>{rows(d, 0, 32)}, tokens, [&](const Batch& b) { return loss_of(ref, b, false); });
    const int64_t plain_state = memory_stats(Device::cpu())[Category::OptimizerState].current_bytes - state0;

    const std::vector<Tensor> p = make_params(dt, 1 + world().rank());
    distributed::DataParallel dp(p, {512, true, 1});
    const int64_t state1 = memory_stats(Device::cpu())[Category::OptimizerState].current_bytes;
    distributed::ZeroAdamW zero(dp, 0.01, adam);
    const int64_t zero_state = memory_stats(Device::cpu())[Category::OptimizerState].current_bytes - state1;
    optim::Accumulator acc(zero, {1.0, nullptr, false, &dp});
    const int64_t scatters = world().issued(distributed::Collective::ReduceScatter);
    for (int s = 0; s < 20; ++s)
      acc.step(my_window(d, {6, 10}, {16}), tokens, [&](const Batch& b) { return loss_of(p, b, false); });
    CHECK(world().issued(distributed::Collective::ReduceScatter) == scatters + 20 * dp.buckets());
    for (size_t i = 0; i < p.size(); ++i) {
      CAPTURE(i);
      reel::testing::check_close(p[i], ref[i], 1e-6, 1e-6);
    }
    // Plain AdamW: two moments per parameter (163 elements); ZeRO-1: two moments of one chunk per
    // bucket, (numel + 1) / 2 elements each.
    int64_t chunk_elements = 0;
    for (const auto& k : dp.bucket_list()) chunk_elements += k.padded / 2;
    // (+ 16 B: the plain optimizer's step count, one i64, and its rate, one f64: no schedule, on the
    // device; optim/optimizer.h, StepControl)
    CHECK(plain_state == 2 * 163 * static_cast<int64_t>(dtype_size(dt)) + 16);
    CHECK(zero_state == 2 * chunk_elements * static_cast<int64_t>(dtype_size(dt)));
    CHECK(chunk_elements <= (163 + 2 * dp.buckets()) / 2);
  }
}

TEST_CASE("ZeRO-1: a checkpoint of the gathered state resumes exactly as uninterrupted training") {
  const DType dt = DType::f64;
  const Data d = global_batch(dt);
  const optim::Adam::Options adam{0.9, 0.99, 1e-8, 0.05};
  // One file for both ranks: rank 0's process id names it.
  const int64_t pid = world().all_reduce(world().rank() == 0 ? static_cast<int64_t>(getpid()) : int64_t{0});
  const std::string path =
      (std::filesystem::temp_directory_path() / ("reel_zero1_" + std::to_string(pid) + ".safetensors")).string();
  for (const Device dev : reel::testing::devices()) {
    CAPTURE(dev);
    std::vector<Batch> window = my_window(d, {6, 10}, {16});
    for (Batch& b : window) b = {b.x.to(dev), b.y.to(dev), b.mask.to(dev)};
    const auto train = [&](distributed::ZeroAdamW& opt, distributed::DataParallel& dp, const std::vector<Tensor>& p, int steps) {
      optim::Accumulator acc(opt, {1.0, nullptr, false, &dp});
      for (int s = 0; s < steps; ++s) acc.step(window, tokens, [&](const Batch& b) { return loss_of(p, b, false); });
    };
    // Uninterrupted: 12 steps.
    const std::vector<Tensor> pa = make_params(dt, 1, dev);
    distributed::DataParallel dpa(pa, {512, true, 1});
    distributed::ZeroAdamW za(dpa, 0.01, adam);
    train(za, dpa, pa, 12);

    // 6 steps, a checkpoint of the parameters and the gathered state written by rank 0 ...
    {
      const std::vector<Tensor> pb = make_params(dt, 1, dev);
      distributed::DataParallel dpb(pb, {512, true, 1});
      distributed::ZeroAdamW zb(dpb, 0.01, adam);
      train(zb, dpb, pb, 6);
      const optim::StateDict state = zb.full_state_dict();
      CHECK(state.size() == 1 + 2 * pb.size());  // as AdamW's: step and both moments of every parameter
      // ... equal to plain AdamW's state after the same 6 steps on one process.
      const std::vector<Tensor> ref = make_params(dt, 1);
      optim::AdamW plain(ref, 0.01, adam);
      optim::Accumulator plain_acc(plain, {1.0, nullptr, false, nullptr});
      for (int s = 0; s < 6; ++s)
        plain_acc.step(std::vector<Batch>{rows(d, 0, 32)}, tokens, [&](const Batch& b) { return loss_of(ref, b, false); });
      const optim::StateDict want = plain.state_dict();
      REQUIRE(want.size() == state.size());
      for (const auto& entry : want) {  // not a structured binding: CAPTURE is a lambda (clang)
        const std::string& key = entry.first;
        CAPTURE(key);
        REQUIRE(state.count(key));
        reel::testing::check_close(state.at(key), entry.second, 1e-6, 1e-9);
      }
      if (world().rank() == 0) {
        nn::TensorDict file = state;
        for (size_t i = 0; i < pb.size(); ++i) file["param." + std::to_string(i)] = pb[i].detach();
        nn::save_safetensors(path, file);
      }
      world().barrier();
    }
    // ... loaded into a fresh run (other starting values on rank 1, overwritten from rank 0), 6 more.
    const nn::TensorDict file = nn::load_safetensors(path, dev);
    const std::vector<Tensor> pc = make_params(dt, 7 + world().rank(), dev);
    if (world().rank() == 0) {
      autograd::NoGrad no_grad;
      for (size_t i = 0; i < pc.size(); ++i) pc[i].copy_(file.at("param." + std::to_string(i)));
    }
    distributed::DataParallel dpc(pc, {512, true, 1});
    distributed::ZeroAdamW zc(dpc, 0.01, adam);
    optim::StateDict state;
    for (const auto& [key, t] : file)
      if (key.rfind("param.", 0) != 0) state[key] = t;
    zc.load_full_state_dict(state);
    CHECK(zc.steps() == 6);
    train(zc, dpc, pc, 6);
    for (size_t i = 0; i < pa.size(); ++i) {
      CAPTURE(i);
      reel::testing::check_close(pc[i], pa[i], 0, 0);  // bit-identical
    }
    world().barrier();  // everyone has read the file
    if (world().rank() == 0) std::filesystem::remove(path);
  }
  // Refused by name: a missing step, an unknown key, a wrong shape, moments of some parameters only.
  const std::vector<Tensor> p = make_params(dt, 1);
  distributed::DataParallel dp(p, {512, true, 1});
  distributed::ZeroAdamW z(dp, 0.01);
  const Tensor step = from_vector<int64_t>({3}, {});
  check_error([&] { z.load_full_state_dict({}); }, {"missing key 'step'"});
  check_error([&] { z.load_full_state_dict({{"step", step}, {"momentum.0", zeros({6, 16}, dt)}}); },
              {"unexpected key 'momentum.0'"});
  check_error([&] { z.load_full_state_dict({{"step", step}, {"exp_avg.0", zeros({3}, dt)}}); },
              {"'exp_avg.0' has shape (3)", "(6, 16)"});
  check_error([&] { z.load_full_state_dict({{"step", step}, {"exp_avg.0", zeros({6, 16}, dt)}}); },
              {"1 moment tensors for 4 parameters"});
  z.load_full_state_dict({{"step", step}});  // AdamW before its first step: zero moments
  CHECK(z.steps() == 3);
}

// ---- the distributed sampler -------------------------------------------------------------------

TEST_CASE("shard_indices: the ranks' shares partition the dataset, the same permutation everywhere") {
  for (const int world_size : {1, 2, 3}) {
    std::vector<int64_t> all;
    for (int r = 0; r < world_size; ++r) {
      const std::vector<int64_t> mine = distributed::shard_indices(10, r, world_size, 5, 2);
      CHECK(static_cast<int64_t>(mine.size()) >= 10 / world_size);
      all.insert(all.end(), mine.begin(), mine.end());
    }
    CHECK(std::set<int64_t>(all.begin(), all.end()).size() == 10);
  }
  CHECK(distributed::shard_indices(10, 0, 2, 5, 1) != distributed::shard_indices(10, 0, 2, 5, 2));  // a new epoch, a new order
  CHECK(distributed::shard_indices(5, 1, 2, 0, 0, false) == std::vector<int64_t>{1, 3});
  // Every rank computed the same permutation: rank 0's share, gathered, equals everyone's.
  const std::vector<int64_t> mine = distributed::shard_indices(8, world().rank(), 2, 11, 3);
  const Tensor gathered = zeros({8}, DType::i64);
  world().all_gather(gathered, from_vector<int64_t>(mine, {4}));
  std::vector<int64_t> expect = distributed::shard_indices(8, 0, 2, 11, 3);
  const std::vector<int64_t> other = distributed::shard_indices(8, 1, 2, 11, 3);
  expect.insert(expect.end(), other.begin(), other.end());
  CHECK(gathered.to_vector<int64_t>() == expect);
}
