// The process group (see process_group.h), its setup and completion: MPI's start and the world's
// rank and size, the NCCL path's communicators, a collective's Work polled against the timeout and
// completed (staged results written back), and the abort path that keeps a failed rank from leaving
// the others waiting. The collectives themselves: process_group_collectives.cpp.
#include "distributed/process_group.h"

#include <mpi.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <sstream>
#include <thread>

#include "distributed/nccl_backend.h"
#include "distributed/process_group_internal.h"
#include "kernels/optimizer.h"

namespace reel::distributed {

using process_group_detail::mpi_error;

const char* collective_name(Collective c) {
  switch (c) {
    case Collective::AllReduce: return "all_reduce";
    case Collective::ReduceScatter: return "reduce_scatter";
    case Collective::AllGather: return "all_gather";
    case Collective::Broadcast: return "broadcast";
    case Collective::Barrier: return "barrier";
    case Collective::Reduce: return "reduce";
  }
  return "?";
}


profile::KernelCost collective_cost(Collective c, int64_t count, DType dtype, int world) {
  const int64_t n = world;
  const int64_t bytes = count * dtype_size(dtype);
  profile::KernelCost cost;
  int64_t moved = 0, adds = 0;
  switch (c) {
    case Collective::AllReduce: moved = 2 * (n - 1) * bytes / n, adds = (n - 1) * count / n; break;
    case Collective::ReduceScatter: moved = (n - 1) * bytes / n, adds = (n - 1) * count / n; break;
    case Collective::AllGather: moved = (n - 1) * bytes / n; break;
    case Collective::Broadcast: moved = n > 1 ? bytes : 0; break;
    case Collective::Reduce: moved = n > 1 ? bytes : 0, adds = n > 1 ? count : 0; break;
    case Collective::Barrier: break;
  }
  cost.bytes_read = cost.bytes_written = moved;
  cost.flops = adds;
  return cost;
}

namespace {

int g_simulated_size = 0;  // ProcessGroup::simulate's world size, 0: none
bool g_world_made = false;  // world() was constructed (simulated, one process, or the launcher's)

int env_int(const char* name) {
  const char* v = std::getenv(name);
  if (!v || !*v) return -1;
  char* end = nullptr;
  const long x = std::strtol(v, &end, 10);
  REEL_CHECK(end && *end == '\0' && x >= 0, "dist: environment variable ", name, "='", v,
             "' is not a non-negative integer");
  return static_cast<int>(x);
}

// REEL_DIST_BACKEND: "mpi" stages cuda tensors through the host; "nccl" insists on NCCL; unset or
// empty: NCCL where built.
CudaPath default_cuda_path() {
  const char* v = std::getenv("REEL_DIST_BACKEND");
  const std::string choice = v ? v : "";
  if (choice.empty()) return ProcessGroup::nccl_built() ? CudaPath::Nccl : CudaPath::Staged;
  if (choice == "mpi") return CudaPath::Staged;
  REEL_CHECK(choice == "nccl", "dist: REEL_DIST_BACKEND='", choice, "' is neither 'nccl' nor 'mpi'");
  REEL_CHECK(ProcessGroup::nccl_built(), "dist: REEL_DIST_BACKEND=nccl, but this build has no NCCL (build with "
             "-DREEL_CUDA=ON where libnccl is found, or the default emulated build)");
  return CudaPath::Nccl;
}

bool g_mpi_initialised_here = false;
ProcessGroup* g_world = nullptr;  // set once the world is fully built (the terminate handler needs it)

// An exception that no one catches, on any rank: say what it was and end the whole job, instead of
// dying alone and leaving the other ranks inside a collective until their timeout.
[[noreturn]] void terminate_handler() {
  std::string what = "an exception nobody caught";
  if (std::exception_ptr e = std::current_exception()) {
    try {
      std::rethrow_exception(e);
    } catch (const std::exception& ex) {
      what = std::string("uncaught exception: ") + ex.what();
    } catch (...) {
      what = "uncaught exception of an unknown type";
    }
  }
  if (g_world) g_world->abort(what);
  std::fprintf(stderr, "reel dist: %s\n", what.c_str());  // before the group existed
  std::abort();
}

}  // namespace

ProcessGroup& ProcessGroup::world() {
  static ProcessGroup group;
  return group;
}

void ProcessGroup::simulate(int world_size) {
  REEL_CHECK(world_size >= 1, "dist: a simulated world needs at least 1 rank, got ", world_size);
  if (g_simulated_size == world_size) return;  // asked again (each of --fit's candidates): the same world
  REEL_CHECK(!g_world_made && g_simulated_size == 0,
             "dist: simulate(", world_size, ") after the world was made: call it first, once");
  g_simulated_size = world_size;
}

ProcessGroup::ProcessGroup() {
  g_world_made = true;
  const int env_rank = env_int("RANK"), env_size = env_int("WORLD_SIZE");
  // A launcher says so through its own variables: Open MPI's mpirun, or a PMI/PMIx launcher (srun).
  const bool launched = std::getenv("OMPI_COMM_WORLD_SIZE") || std::getenv("PMI_SIZE") || std::getenv("PMIX_RANK");
  if (const int t = env_int("REEL_DIST_TIMEOUT_S"); t >= 0) set_timeout_s(t);
  cuda_path_ = default_cuda_path();
  if (g_simulated_size > 0) {
    REEL_CHECK(!launched, "dist: a simulated world of ", g_simulated_size,
               " ranks (--simulate-ranks) runs in one process; this one was started by an MPI launcher");
    REEL_CHECK(env_size <= 1 && env_rank <= 0, "dist: a simulated world of ", g_simulated_size,
               " ranks, but RANK=", env_rank, " WORLD_SIZE=", env_size, " are set");
    simulated_ = true;
    size_ = g_simulated_size;
    return;
  }
  if (!launched) {
    REEL_CHECK(env_size <= 1 && env_rank <= 0, "dist: RANK=", env_rank, " WORLD_SIZE=", env_size,
               " but no MPI launcher started this process; start the ranks with mpirun -np ", env_size,
               " (reel's CPU backend is MPI)");
    return;  // a world of one: every collective is local
  }
  int initialised = 0;
  MPI_Initialized(&initialised);
  if (!initialised) {
    int provided = 0;
    // Only the thread that calls the collectives enters MPI (OpenMP workers never do).
    REEL_CHECK(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided) == MPI_SUCCESS,
               "dist: MPI_Init_thread failed");
    g_mpi_initialised_here = true;
  }
  mpi_ = true;
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);  // errors become reel::Error, not exits
  MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &size_);
  REEL_CHECK(env_size < 0 || env_size == size_, "dist: WORLD_SIZE=", env_size, " but the launcher started ", size_,
             " processes");
  REEL_CHECK(env_rank < 0 || env_rank == rank_, "dist: RANK=", env_rank, " but MPI says this is rank ", rank_);
  g_world = this;
  std::set_terminate(terminate_handler);
}

ProcessGroup::~ProcessGroup() {
  if (!mpi_ || !g_mpi_initialised_here) return;
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;
  // Operations nobody waited for are finished first; after a failure they never will be, and
  // Finalize would wait for ranks that can never match them: end the job instead.
  bool failed = broken_;
  if (!failed) {
    try {
      for (const auto& s : in_flight_) wait_state(*s);
    } catch (const std::exception&) {
      failed = true;
    }
  }
  if (failed) {
    std::fprintf(stderr, "reel dist: rank %d of %d: exiting after a failed collective; ending every rank\n", rank_,
                 size_);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  in_flight_.clear();
  nccl_comms_.clear();  // NCCL (the emulated one is MPI) before MPI goes
  g_world = nullptr;
  MPI_Finalize();
}

bool ProcessGroup::nccl_built() { return nccl::built(); }

void ProcessGroup::set_cuda_path(CudaPath path) {
  REEL_CHECK(path == CudaPath::Staged || nccl_built(), "dist: set_cuda_path(Nccl), but this build has no NCCL");
  cuda_path_ = path;
}

void ProcessGroup::set_timeout_s(double seconds) {
  REEL_CHECK(seconds > 0, "dist: the collective timeout must be > 0 seconds, got ", seconds);
  timeout_s_ = seconds;
}

void ProcessGroup::abort(const std::string& message) {
  std::fprintf(stderr, "reel dist: rank %d of %d: %s\n", rank_, size_, message.c_str());
  std::fflush(stderr);
  if (mpi_) MPI_Abort(MPI_COMM_WORLD, 1);
  std::_Exit(1);
}

void ProcessGroup::fail(Work::State& s, const std::string& why) {
  broken_ = true;
  std::string aborted;
  if (s.comm && !s.comm->aborted()) {
    // Its NCCL kernels may wait forever for the missing rank: end them (and the communicator).
    try {
      s.comm->abort();
      aborted = "; its NCCL communicator was aborted (ncclCommAbort)";
    } catch (const std::exception& e) {
      aborted = std::string("; aborting its NCCL communicator failed too: ") + e.what();
    }
  }
  REEL_FAIL("dist: ", s.what, " ", why, aborted, " on rank ", rank_, " of ", size_);
}

Work ProcessGroup::start(Collective c, std::shared_ptr<Work::State> state) {
  ++issued_[static_cast<int>(c)];
  state->group = this;
  state->kind = c;
  state->started = std::chrono::steady_clock::now();
  if (mpi_) {
    // Forget what finished; keep what is in flight alive (MPI still reads and writes its buffers,
    // whether or not the caller keeps its Work) for progress() and the exit.
    std::vector<std::shared_ptr<Work::State>> live;
    for (auto& s : in_flight_)
      if (!s->done) live.push_back(std::move(s));
    live.push_back(state);
    in_flight_ = std::move(live);
  }
  return Work(std::move(state));
}

namespace {
// The result is in buf_out: average, then write it back to the user's tensor if staged. Then the
// state lets go of every tensor: a finished State stays in in_flight_ until the next start(), and a
// Work may be kept longer still, but neither may keep the caller's tensors (an FSDP reduce-scatter's
// output, a gathered unit) alive past the collective.
void complete(Work::State& s) {
  s.done = true;
  s.buf_in = Tensor();
  s.event.reset();
  if (s.user.defined() && s.buf_out.defined()) {  // else a barrier, or local: the result is in place
    if (s.scale != 1) kernels::scale_({s.buf_out}, s.scale);
    if (s.buf_out.same(s.user)) {
      if (!s.restore) s.user.bump_version();  // the backend wrote it through a raw pointer
    } else if (s.restore) {
      s.user.restore_(s.buf_out);
    } else {
      s.user.copy_(s.buf_out);
    }
  }
  s.buf_out = Tensor();
  s.user = Tensor();
}
}  // namespace

bool Work::test() {
  REEL_CHECK(state_, "dist: test() on an empty Work");
  return state_->group->test_state(*state_);
}

void Work::wait() {
  REEL_CHECK(state_, "dist: wait() on an empty Work");
  state_->group->wait_state(*state_);
}

bool ProcessGroup::nccl_enqueued(Work::State& s) {
  if (s.event || !s.comm) return true;  // no communicator: simulated, nothing was enqueued
  REEL_CHECK(!broken_, "dist: ", s.what, " cannot complete: an earlier collective failed on rank ", rank_);
  try {
    if (!s.comm->ready()) return false;  // ncclInProgress: the enqueue is still going on
    s.event = std::make_unique<nccl::Event>();
    s.event->record(s.comm->device());
  } catch (const Error& e) {
    fail(s, std::string("failed (") + e.what() + ")");
  }
  return true;
}

bool ProcessGroup::test_state(Work::State& s) {
  if (s.done) return true;
  if (s.comm) {  // NCCL: enqueued, then the event after it on the stream
    REEL_CHECK(!broken_, "dist: ", s.what, " cannot complete: an earlier collective failed on rank ", rank_);
    if (!nccl_enqueued(s)) return false;
    bool done = false;
    try {
      s.comm->ready();  // raises on an asynchronous error (a failed peer, a network error)
      done = s.event->done();
    } catch (const Error& e) {
      fail(s, std::string("failed (") + e.what() + ")");
    }
    if (done) complete(s);
    return done;
  }
  if (s.request == MPI_REQUEST_NULL) {  // local: a world of one
    complete(s);
    return true;
  }
  REEL_CHECK(!broken_, "dist: ", s.what, " cannot complete: an earlier collective failed on rank ", rank_);
  int flag = 0;
  if (const int rc = MPI_Test(&s.request, &flag, MPI_STATUS_IGNORE); rc != MPI_SUCCESS)
    fail(s, "failed (MPI: " + mpi_error(rc) + ")");
  if (flag) complete(s);
  return s.done;
}

void ProcessGroup::wait_state(Work::State& s) {
  poll_until(s, [&] { return test_state(s); });
}

template <typename Done>
void ProcessGroup::poll_until(Work::State& s, Done done) {
  while (!done()) {
    const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - s.started).count();
    if (waited > timeout_s_) {
      std::ostringstream why;
      why << "timed out after " << timeout_s_
          << " s (REEL_DIST_TIMEOUT_S): another rank never joined it (it failed, stopped, or called a "
             "different collective)";
      fail(s, why.str());
    }
    // A non-blocking collective advances only while its ranks are inside MPI calls, so poll
    // without sleeping (a sleeping rank stalls its peers too: on an oversubscribed machine short
    // sleeps made a small all_reduce orders of magnitude slower), yielding the core to whoever
    // is runnable. A rank left waiting longer than that (a peer still computing) polls gently.
    if (waited < 0.25) std::this_thread::yield();
    else std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
}

void ProcessGroup::progress() {
  if (!mpi_ || broken_) return;
  for (const auto& s : in_flight_) test_state(*s);
}

// ---- the NCCL path ---------------------------------------------------------------------------

bool ProcessGroup::takes_nccl(const Device& device) const {
  return (mpi_ && device.is_cuda() && cuda_path_ == CudaPath::Nccl) || (simulated_ && device.is_meta());
}

void ProcessGroup::check_simulable(const Work::State& s, const Tensor& t) const {
  REEL_CHECK(!simulated_ || t.device().is_meta(), "dist: ", s.what, ": this is a simulated world of ", size_,
             " ranks (--simulate-ranks), whose other ranks hold no values; only meta tensors can be communicated");
}

nccl::Comm& ProcessGroup::nccl_comm(const Device& device) {
  REEL_CHECK(!broken_, "dist: no NCCL communicator for ", device, ": an earlier collective failed on rank ", rank_);
  const auto index = static_cast<size_t>(device.index);
  if (nccl_comms_.size() <= index) nccl_comms_.resize(index + 1);
  if (nccl_comms_[index]) return *nccl_comms_[index];
  // Rank 0's unique id to every rank over MPI (not a counted collective), then the communicator,
  // both polled against the timeout like any collective.
  Work::State s;
  s.group = this;
  s.what = "the NCCL unique id's broadcast (for " + device.str() + "'s communicator)";
  s.started = std::chrono::steady_clock::now();
  nccl::Id id{};
  if (rank_ == 0) id = nccl::unique_id();
  if (const int rc = MPI_Ibcast(id.data(), static_cast<int>(id.size()), MPI_BYTE, 0, MPI_COMM_WORLD, &s.request);
      rc != MPI_SUCCESS)
    fail(s, "failed to start (MPI: " + mpi_error(rc) + ")");
  wait_state(s);
  s.what = "the NCCL communicator's initialisation on " + device.str() + " (" + nccl::version() + ")";
  s.started = std::chrono::steady_clock::now();
  try {
    nccl_comms_[index] = std::make_unique<nccl::Comm>(id, size_, rank_, device.index);
  } catch (const Error& e) {
    fail(s, std::string("failed (") + e.what() + ")");
  }
  s.comm = nccl_comms_[index].get();
  poll_until(s, [&] {
    try {
      return s.comm->ready();
    } catch (const Error& e) {
      fail(s, std::string("failed (") + e.what() + ")");
    }
  });
  return *nccl_comms_[index];
}

// After the enqueue call: counted, and waited for until enqueued (the communicator left
// ncclInProgress), since nothing may be issued to its stream before; then the Work's event.
Work ProcessGroup::start_nccl(Collective c, std::shared_ptr<Work::State> state) {
  ++nccl_issued_[static_cast<int>(c)];
  Work work = start(c, state);
  poll_until(*state, [&] { return nccl_enqueued(*state); });
  return work;
}

}  // namespace reel::distributed
