// What the files of ProcessGroup (distributed/process_group*.cpp) share and nothing else uses: one
// collective's state (Work::State) and MPI's error text.
#pragma once
#include <mpi.h>

#include <chrono>
#include <memory>
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
}  // namespace process_group_detail

}  // namespace reel::distributed
