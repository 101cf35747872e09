// What the files of the emulated NCCL (distributed/nccl_emu*.cpp) share and nothing else uses: the
// communicator's state, the error text, and starting one operation on a communicator. Emulated
// build only.
#pragma once
#include "distributed/nccl.h"

#if defined(REEL_DIST_NCCL_EMULATED)
#include <mpi.h>

#include <cstdint>
#include <functional>
#include <vector>

namespace nccl_emu {

constexpr uint64_t kLive = 0x6e63636c2d656d75ull;  // "nccl-emu": a communicator that can be used
constexpr uint64_t kDead = 0x646561642d636f6dull;  // aborted or destroyed (kept: MPI may still write)

// One rank's part of the id exchange at initialisation.
struct Joining {
  ncclUniqueId id;
  int rank, nranks;
};

// Records the failure's explanation (ncclGetLastError) and returns `code`.
ncclResult_t failure(ncclResult_t code, const char* format, ...) __attribute__((format(printf, 2, 3)));
// ncclSuccess when rc is MPI_SUCCESS, else ncclSystemError with MPI's text, also set as comm's state.
ncclResult_t from_mpi(ncclComm* comm, int rc, const char* what);
// Starts `request`'s operation (already issued) on comm, `then` to run when it completes; a blocking
// communicator waits for it here.
ncclResult_t begin(ncclComm* comm, MPI_Request request, std::function<ncclResult_t()> then);
// Any call on a communicator: as the real argument checks and ncclCommEnsureReady answer.
ncclResult_t ready(ncclComm* comm, const char* op);

}  // namespace nccl_emu

struct ncclComm {
  uint64_t magic = nccl_emu::kLive;
  MPI_Comm mpi = MPI_COMM_NULL;  // a duplicate of MPI_COMM_WORLD, then ordered by NCCL rank
  int rank = 0, nranks = 0, device = 0;
  bool blocking = true;
  ncclResult_t state = ncclSuccess;  // ncclInProgress while `pending` runs; an error once one happened
  MPI_Request pending = MPI_REQUEST_NULL;
  std::function<ncclResult_t()> then;  // run when `pending` completes: its result becomes the state
  std::vector<char> scratch;           // buffers the operation in progress reads or writes
  std::vector<nccl_emu::Joining> joined;
  nccl_emu::Joining mine{};
};

#endif  // REEL_DIST_NCCL_EMULATED
