// What the files of ProcessGroup (distributed/process_group*.cpp) share and nothing else uses: one
// collective's state (Work::State), MPI's error text, and the NCCL path's start (enqueue_nccl).
#pragma once
#include <mpi.h>

#include <chrono>
#include <memory>
#include <optional>
#include <string>

#include "distributed/nccl_backend.h"
#include "distributed/process_group.h"

namespace reel::distributed {

// One collective: where its result goes, the buffers the backend reads and writes, and how to tell
// that it is done (an MPI request, or an NCCL communicator and a CUDA event).
struct Work::State {
  ProcessGroup* group = nullptr;
  Collective kind = Collective::Barrier;
  std::string what;  // "all_reduce (sum) of f32 (3, 4) on cpu", for errors
  MPI_Request request = MPI_REQUEST_NULL;
  nccl::Comm* comm = nullptr;          // the NCCL path: the communicator it was enqueued on
  std::unique_ptr<nccl::Event> event;  // recorded on reel's stream once the enqueue finished
  Tensor user;     // the tensor the result belongs in (undefined: none, as for a barrier)
  Tensor buf_out;  // contiguous buffer the backend writes (host for MPI, the device for NCCL);
                   // user itself when communicated in place
  Tensor buf_in;   // the send buffer, kept alive while the backend reads it
  double scale = 1;  // ReduceOp::Average without a native average: 1 / size, applied when the sum is in
  bool restore = false;  // Write::Restore: the result goes into `user` without a version bump
  bool done = false;
  std::chrono::steady_clock::time_point started;
};

namespace process_group_detail {
inline std::string mpi_error(int rc) {
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, text, &len);
  return std::string(text, static_cast<size_t>(len));
}
// The name of collective c's recorded launch: "nccl_all_reduce", ...
inline const char* nccl_kernel_name(Collective c) {
  switch (c) {
    case Collective::AllReduce: return "nccl_all_reduce";
    case Collective::ReduceScatter: return "nccl_reduce_scatter";
    case Collective::AllGather: return "nccl_all_gather";
    case Collective::Broadcast: return "nccl_broadcast";
    case Collective::Reduce: return "nccl_reduce";
    case Collective::Barrier: break;
  }
  return "nccl_barrier";
}
}  // namespace process_group_detail

template <typename Enqueue>
void ProcessGroup::enqueue_nccl(Work::State& s, Collective c, const Tensor& t, int64_t count, Enqueue enqueue) {
  s.comm = simulated_ ? nullptr : &nccl_comm(t.device());
  std::optional<profile::KernelRun> run;
  if (profile::costing())
    run.emplace(process_group_detail::nccl_kernel_name(c), t.device(), t.dtype(), shape_str(t.shape()),
                collective_cost(c, count, t.dtype(), size_));
  if (!s.comm) return;
  try {
    enqueue(*s.comm);
  } catch (const Error& e) {
    fail(s, std::string("failed to start (") + e.what() + ")");
  }
}

}  // namespace reel::distributed
