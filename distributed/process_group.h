// distributed::ProcessGroup: the collectives data-parallel training needs (all_reduce, reduce_scatter,
// all_gather, broadcast, barrier) and reduce (to one root: a metric, a checkpoint's sum) on reel
// Tensors, over MPI and NCCL.
//
// The world comes from the launcher: `mpirun -np N prog` (Open MPI's OMPI_COMM_WORLD_* or a PMI
// launcher's variables) initialises MPI; RANK / WORLD_SIZE, when set, must agree with it. Without a
// launcher the world is one process and every collective is local (no MPI is initialised).
//
// Backends, chosen per collective by the tensors' device:
//   cpu tensors   MPI on host memory. A contiguous tensor is communicated in place, a strided view
//                 through a contiguous host copy written back with reel's copy API.
//   cuda tensors  NCCL where the build has it (nccl_built(): the nvcc build with libnccl found, or
//                 the emulated build, whose NCCL is distributed/nccl_emu.cpp over MPI): one communicator per
//                 device, created at the device's first collective from an ncclUniqueId that rank 0
//                 broadcasts over MPI; collectives enqueued on reel's CUDA stream, a strided tensor
//                 through a contiguous device copy. Else, or with REEL_DIST_BACKEND=mpi (or
//                 set_cuda_path(CudaPath::Staged)), staged through a contiguous host copy over MPI.
//
// A simulated world (ProcessGroup::simulate(N), the examples' --simulate-ranks N): this process is
// rank 0 of N ranks that do not exist, for a dry run on the meta device (kernels/meta.h). Collectives
// on meta tensors take the NCCL path's steps (the same staging buffers, the same average scaling,
// the same recorded launch) with no communicator: nothing moves, so rank 0's memory timeline and
// predicted step are those of a real N-rank run. Host numbers summed over ranks (window counts)
// are taken as every rank's being this one's. A collective that would need the other ranks' values
// on a cpu or cuda tensor is refused (a broadcast from rank 0 and a barrier need none).
//
// Every collective on the NCCL path is recorded for a Profiler as a launch on the device's compute
// stream ("nccl_all_reduce", ...), priced by the ring algorithm's traffic (collective_cost): what
// this rank sends (cost.bytes_read) and receives (cost.bytes_written) over the GPU interconnect,
// and the additions a reduction makes (report/predict.h prices it on the interconnect).
//
// Failure: every collective is polled (MPI_Test; for NCCL the communicator's state and a CUDA event
// recorded after the collective) until it completes or until the timeout (REEL_DIST_TIMEOUT_S,
// default 300 s; set_timeout_s). A timeout or a backend error raises a reel::Error naming the
// collective, the tensor's shape, dtype and device, and the rank (an NCCL communicator is aborted
// first, ncclCommAbort); the group is then broken (its in-flight operations can never complete),
// so the process ends with MPI_Abort, which brings down every other rank with the message instead
// of leaving them waiting. An exception nobody catches on any rank does the same (a terminate
// handler installed at initialisation).
#pragma once
#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/profile.h"
#include "core/tensor.h"

namespace reel::distributed {

enum class ReduceOp { Sum, Average };  // Average: the sum divided by the world size

enum class Collective { AllReduce, ReduceScatter, AllGather, Broadcast, Barrier, Reduce };
constexpr int kNumCollectives = 6;
const char* collective_name(Collective c);
// What one of `world` ranks moves and computes in collective c over a buffer of `count` elements of
// `dtype` (the all-reduced, broadcast or reduced tensor; a reduce-scatter's input; an all-gather's
// output), by NCCL's ring algorithm, the model nccl-tests' bus bandwidth assumes: an all-reduce sends
// and receives 2 (N - 1) / N of the buffer, a reduce-scatter or all-gather (N - 1) / N, a broadcast
// or reduce the whole buffer once. bytes_read: sent; bytes_written: received; flops: the additions.
profile::KernelCost collective_cost(Collective c, int64_t count, DType dtype, int world);

// How collectives on cuda tensors travel: NCCL, or staged through host copies over MPI.
enum class CudaPath { Nccl, Staged };

// What an all-gather's write into its output means to the tape's saved-tensor checks (core/storage.h's
// version counter). Update: new values, the write bumps the output's version like any in-place write.
// Restore: the very values the output's storage held when the tape saw it (a sharded parameter
// gathered again into its released storage for a replay or a backward rule), written without a bump,
// as Tensor::restore_, so what the tape saved of it still passes its check.
enum class Write { Update, Restore };

class ProcessGroup;
namespace nccl {
class Comm;  // distributed/nccl_backend.h
}

// A collective in flight (the *_async calls). wait() returns once the result is in the tensors
// given to the call (raising like the blocking collective on timeout); test() advances it and says
// whether it is done. A Work dropped before it completes still completes (the group keeps its
// buffers alive, and waits for it at exit at the latest). Once complete, neither the Work nor the
// group holds any of its tensors.
class Work {
 public:
  Work() = default;
  bool test();
  void wait();
  bool defined() const { return state_ != nullptr; }
  struct State;  // distributed/process_group.cpp

 private:
  friend class ProcessGroup;
  explicit Work(std::shared_ptr<State> state) : state_(std::move(state)) {}
  std::shared_ptr<State> state_;
};

class ProcessGroup {
 public:
  // Every process of the launch (MPI_COMM_WORLD), initialised on first use.
  static ProcessGroup& world();
  // Makes world() a simulated world of `world_size` ranks (this process rank 0): before world()'s
  // first use, in a process no launcher started; again with the same size, nothing. reel::Error
  // otherwise.
  static void simulate(int world_size);
  bool simulated() const { return simulated_; }

  int rank() const { return rank_; }
  int size() const { return size_; }
  bool uses_mpi() const { return mpi_; }
  double timeout_s() const { return timeout_s_; }
  void set_timeout_s(double seconds);

  // Whether this build has NCCL (the real library, or the emulated one in the emulated build).
  static bool nccl_built();
  // How cuda tensors are communicated: Nccl by default where built, Staged otherwise or when
  // REEL_DIST_BACKEND=mpi ("nccl" insists on NCCL). Every rank must choose the same. A world
  // without MPI communicates nothing either way.
  CudaPath cuda_path() const { return cuda_path_; }
  void set_cuda_path(CudaPath path);

  // Dtypes: all_gather and broadcast take any (bf16 and f16 travel as 16-bit words); all_reduce,
  // reduce_scatter and reduce any but bf16 and f16 (reel::Error before any communication: reduce in
  // f32).
  // t = op over ranks of t, in place. Any device; any layout.
  void all_reduce(const Tensor& t, ReduceOp op = ReduceOp::Sum);
  Work all_reduce_async(const Tensor& t, ReduceOp op = ReduceOp::Sum);
  // output (n) = this rank's chunk of op over ranks of input (size() * n elements, rank r's chunk is
  // elements [r n, (r + 1) n) of the flattened input).
  void reduce_scatter(const Tensor& output, const Tensor& input, ReduceOp op = ReduceOp::Sum);
  Work reduce_scatter_async(const Tensor& output, const Tensor& input, ReduceOp op = ReduceOp::Sum);
  // output (size() * n elements) = every rank's input (n), in rank order. A contiguous output (a
  // cpu one for MPI, a cuda one for NCCL) is written in place, with no staging copy, so a unit's
  // storage can be gathered into directly; `write` says whether that bumps its version (Write). An
  // input that is this rank's own slot of such an output (same storage, at rank() * n) is gathered
  // in place (MPI_IN_PLACE, NCCL's in-place form): no send buffer at all.
  void all_gather(const Tensor& output, const Tensor& input, Write write = Write::Update);
  Work all_gather_async(const Tensor& output, const Tensor& input, Write write = Write::Update);
  // On root: t = op over ranks of t, in place (any device, any layout). On every other rank t is
  // only read and keeps its values. root in [0, size()): reel::Error naming the collective otherwise.
  void reduce(const Tensor& t, int root = 0, ReduceOp op = ReduceOp::Sum);
  Work reduce_async(const Tensor& t, int root = 0, ReduceOp op = ReduceOp::Sum);
  // t = root's t on every rank.
  void broadcast(const Tensor& t, int root = 0);
  void barrier();
  // A host number summed (or averaged) over ranks: window counts, losses, squared norms.
  double all_reduce(double value, ReduceOp op = ReduceOp::Sum);
  int64_t all_reduce(int64_t value);

  // Collectives issued by this process since it started, by kind (tests count them).
  int64_t issued(Collective c) const { return issued_[static_cast<int>(c)]; }
  // Of those, the ones that went through NCCL.
  int64_t nccl_issued(Collective c) const { return nccl_issued_[static_cast<int>(c)]; }
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
  template <typename Done>
  void poll_until(Work::State& s, Done done);  // done() until true or the timeout
  [[noreturn]] void fail(Work::State& s, const std::string& why);
  // The NCCL path: whether tensors on `device` take it, its communicator (created on first use),
  // and the wait until a call on it has been enqueued (the communicator left ncclInProgress).
  bool takes_nccl(const Device& device) const;
  nccl::Comm& nccl_comm(const Device& device);
  // The NCCL path's start: s.comm set to the device's communicator (none in a simulated world), the
  // launch recorded for a Profiler, then `enqueue` on the communicator (not called when simulated).
  template <typename Enqueue>
  void enqueue_nccl(Work::State& s, Collective c, const Tensor& t, int64_t count, Enqueue enqueue);
  // A simulated world refuses a collective on a tensor that is not on meta (s.what names it).
  void check_simulable(const Work::State& s, const Tensor& t) const;
  bool nccl_enqueued(Work::State& s);
  Work start_nccl(Collective c, std::shared_ptr<Work::State> state);

  int rank_ = 0, size_ = 1;
  bool mpi_ = false;
  bool simulated_ = false;  // simulate(): rank 0 of size_ ranks that do not exist
  bool broken_ = false;
  double timeout_s_ = 300;
  CudaPath cuda_path_ = CudaPath::Staged;
  std::array<int64_t, kNumCollectives> issued_{}, nccl_issued_{};
  std::vector<std::unique_ptr<nccl::Comm>> nccl_comms_;  // by cuda device index
  std::vector<std::shared_ptr<Work::State>> in_flight_;  // started, maybe not done (pruned by start())
};

}  // namespace reel::distributed
