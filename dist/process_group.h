// dist::ProcessGroup: the collectives data-parallel training needs (all_reduce, reduce_scatter,
// all_gather, broadcast, barrier) on reel Tensors, over MPI.
//
// The world comes from the launcher: `mpirun -np N prog` (Open MPI's OMPI_COMM_WORLD_* or a PMI
// launcher's variables) initialises MPI; RANK / WORLD_SIZE, when set, must agree with it. Without a
// launcher the world is one process and every collective is local (no MPI is initialised).
//
// Backend: MPI on host memory. A cpu tensor that is contiguous is communicated in place; any other
// tensor (a strided view, a cuda tensor) is staged through a contiguous host copy made and written
// back with reel's copy API (Tensor::to / copy_), so the emulated build's cuda:0 and a real GPU go
// the same way. (No NCCL backend yet: see docs/design.md.)
//
// Failure: every collective is a non-blocking MPI call polled until it completes or until the
// timeout (REEL_DIST_TIMEOUT_S, default 300 s; set_timeout_s). A timeout or an MPI error raises a
// reel::Error naming the collective, the tensor's shape, dtype and device, and the rank; the group is
// then broken (its in-flight operations can never complete), so the process ends with MPI_Abort,
// which brings down every other rank with the message instead of leaving them waiting. An exception
// nobody catches on any rank does the same (a terminate handler installed at initialisation).
#pragma once
#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace reel::dist {

enum class ReduceOp { Sum, Average };  // Average: the sum divided by the world size

enum class Collective { AllReduce, ReduceScatter, AllGather, Broadcast, Barrier };
constexpr int kNumCollectives = 5;
const char* collective_name(Collective c);

class ProcessGroup;

// A collective in flight (the *_async calls). wait() returns once the result is in the tensors
// given to the call (raising like the blocking collective on timeout); test() advances it and says
// whether it is done. A Work dropped before it completes still completes (the group keeps its
// buffers alive, and waits for it at exit at the latest).
class Work {
 public:
  Work() = default;
  bool test();
  void wait();
  bool defined() const { return state_ != nullptr; }
  struct State;  // dist/process_group.cpp

 private:
  friend class ProcessGroup;
  explicit Work(std::shared_ptr<State> state) : state_(std::move(state)) {}
  std::shared_ptr<State> state_;
};

class ProcessGroup {
 public:
  // Every process of the launch (MPI_COMM_WORLD), initialised on first use.
  static ProcessGroup& world();

  int rank() const { return rank_; }
  int size() const { return size_; }
  bool uses_mpi() const { return mpi_; }
  double timeout_s() const { return timeout_s_; }
  void set_timeout_s(double seconds);

  // t = op over ranks of t, in place. Any dtype but bool-like; any device; any layout.
  void all_reduce(const Tensor& t, ReduceOp op = ReduceOp::Sum);
  Work all_reduce_async(const Tensor& t, ReduceOp op = ReduceOp::Sum);
  // output (n) = this rank's chunk of op over ranks of input (size() * n elements, rank r's chunk is
  // elements [r n, (r + 1) n) of the flattened input).
  void reduce_scatter(const Tensor& output, const Tensor& input, ReduceOp op = ReduceOp::Sum);
  Work reduce_scatter_async(const Tensor& output, const Tensor& input, ReduceOp op = ReduceOp::Sum);
  // output (size() * n elements) = every rank's input (n), in rank order.
  void all_gather(const Tensor& output, const Tensor& input);
  // t = root's t on every rank.
  void broadcast(const Tensor& t, int root = 0);
  void barrier();
  // A host number summed (or averaged) over ranks: window counts, losses, squared norms.
  double all_reduce(double value, ReduceOp op = ReduceOp::Sum);
  int64_t all_reduce(int64_t value);

  // Collectives issued by this process since it started, by kind (tests count them).
  int64_t issued(Collective c) const { return issued_[static_cast<int>(c)]; }
  // Drives MPI's progress on every operation in flight (Open MPI advances non-blocking
  // collectives only inside MPI calls): called by DataParallel between backward rules.
  void progress();
  // A collective timed out or failed: in-flight operations can never complete.
  bool broken() const { return broken_; }

  // Prints "reel dist: rank R of N: <message>" to stderr and ends every rank (MPI_Abort), or this
  // process alone without MPI.
  [[noreturn]] void abort(const std::string& message);

  ~ProcessGroup();
  ProcessGroup(const ProcessGroup&) = delete;
  ProcessGroup& operator=(const ProcessGroup&) = delete;

 private:
  ProcessGroup();
  friend class Work;
  Work start(Collective c, std::shared_ptr<Work::State> state);
  bool test_state(Work::State& s);  // advances s; true when its result is in place
  void wait_state(Work::State& s);  // test_state until done or the timeout
  [[noreturn]] void fail(Work::State& s, const std::string& why);

  int rank_ = 0, size_ = 1;
  bool mpi_ = false;
  bool broken_ = false;
  double timeout_s_ = 300;
  std::array<int64_t, kNumCollectives> issued_{};
  std::vector<std::shared_ptr<Work::State>> in_flight_;  // started, maybe not done (pruned by start())
};

}  // namespace reel::dist
