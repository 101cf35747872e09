// The emulated NCCL (see distributed/nccl.h), its communicators: each over a duplicate of
// MPI_COMM_WORLD, initialised, polled, aborted and destroyed (the collectives, each one non-blocking
// MPI collective: nccl_emu_collectives.cpp). Compiled in the emulated build only.
//
// A communicator does one thing at a time, as the real API requires of the caller: `pending` is the
// MPI request of the operation in progress (the dup and the id exchange of an initialisation, or a
// collective) and `then` what to do when it completes (check the ids, divide an average). Progress
// happens inside the calls: a blocking communicator polls in the call until the request completes;
// a non-blocking one polls once and leaves the rest to ncclCommGetAsyncError. Types: the integers,
// f32 and f64 everywhere; f16 and bf16 in AllGather and Broadcast (moved as 16-bit words), not in
// reductions; 8-bit floats nowhere.
#include "distributed/nccl.h"

#if defined(REEL_DIST_NCCL_EMULATED)
#include <mpi.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "distributed/nccl_emu_internal.h"

namespace nccl_emu {

constexpr char kIdMagic[16] = "reel-nccl-emu-1";   // the first bytes of every emulated unique id

std::string g_last_error;  // ncclGetLastError: the last failure's explanation

ncclResult_t failure(ncclResult_t code, const char* format, ...) {
  char text[512];
  va_list args;
  va_start(args, format);
  std::vsnprintf(text, sizeof text, format, args);
  va_end(args);
  g_last_error = text;
  return code;
}

std::string mpi_error_text(int rc) {
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, text, &len);
  return std::string(text, static_cast<size_t>(len));
}

// Aborted and destroyed communicators stay allocated (without their MPI communicator), so that a
// later call on one answers ncclInvalidUsage instead of reading freed memory, and so that MPI may
// still write the buffers of a collective an abort left pending (it cannot be cancelled). Freed at
// exit, after every user (ProcessGroup::world() is constructed later, so destroyed earlier).
std::vector<std::unique_ptr<ncclComm>> g_retired;

void retire(ncclComm* comm, bool free_mpi) {
  comm->magic = kDead;
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (free_mpi && !finalized && comm->mpi != MPI_COMM_NULL) MPI_Comm_free(&comm->mpi);
  if (free_mpi) comm->scratch.clear();
  comm->then = nullptr;
  g_retired.emplace_back(comm);
}

ncclResult_t from_mpi(ncclComm* comm, int rc, const char* what) {
  if (rc == MPI_SUCCESS) return ncclSuccess;
  comm->state = failure(ncclSystemError, "%s: MPI failed: %s", what, mpi_error_text(rc).c_str());
  return comm->state;
}

// Advances the operation in progress; comm->state says where it stands.
void advance(ncclComm* comm) {
  if (comm->state != ncclInProgress) return;
  int done = 0;
  if (from_mpi(comm, MPI_Test(&comm->pending, &done, MPI_STATUS_IGNORE), "ncclCommGetAsyncError") != ncclSuccess) return;
  if (!done) return;
  std::function<ncclResult_t()> then = std::move(comm->then);
  comm->then = nullptr;
  comm->state = ncclSuccess;
  if (then) {
    const ncclResult_t r = then();  // may start the next step (state ncclInProgress again)
    if (r != ncclSuccess && r != ncclInProgress) comm->state = r;
  }
  if (comm->state != ncclInProgress) comm->scratch.clear();
}

// The call that started an operation: wait for it on a blocking communicator, else look once.
ncclResult_t settle(ncclComm* comm) {
  advance(comm);
  if (comm->blocking) {
    // A blocking communicator has no way out but completion (as a spinning GPU kernel has none).
    while (comm->state == ncclInProgress) {
      std::this_thread::yield();
      advance(comm);
    }
  }
  return comm->state;
}

// Starts `request`'s operation (already issued) on comm, `then` to run when it completes.
ncclResult_t begin(ncclComm* comm, MPI_Request request, std::function<ncclResult_t()> then) {
  comm->pending = request;
  comm->then = std::move(then);
  comm->state = ncclInProgress;
  return settle(comm);
}

// Any call on a communicator: as the real argument checks and ncclCommEnsureReady answer.
ncclResult_t ready(ncclComm* comm, const char* op) {
  if (!comm) return failure(ncclInvalidArgument, "%s : comm argument is NULL", op);
  if (comm->magic == kDead)
    return failure(ncclInvalidUsage, "%s : the communicator was aborted or destroyed", op);
  if (comm->magic != kLive) return failure(ncclInvalidArgument, "%s : comm is not a communicator", op);
  advance(comm);
  if (comm->state == ncclInProgress)
    return failure(ncclInvalidArgument,
                   "%s : attempt to use the communicator before the previous operation returned ncclSuccess", op);
  if (comm->state != ncclSuccess) {
    const ncclResult_t r = comm->state;
    g_last_error = std::string(op) + " : the communicator has an asynchronous error: " + ncclGetErrorString(r);
    return r;
  }
  return ncclSuccess;
}
// Initialisation, step 2 (the duplicate exists): every rank's id, rank and nranks to everyone.
ncclResult_t exchange(ncclComm* comm) {
  MPI_Comm_set_errhandler(comm->mpi, MPI_ERRORS_RETURN);
  comm->joined.resize(static_cast<size_t>(comm->nranks));
  MPI_Request request = MPI_REQUEST_NULL;
  if (const ncclResult_t r = from_mpi(comm,
                                      MPI_Iallgather(&comm->mine, sizeof(Joining), MPI_BYTE, comm->joined.data(),
                                                     sizeof(Joining), MPI_BYTE, comm->mpi, &request),
                                      "ncclCommInitRank");
      r != ncclSuccess)
    return r;
  comm->pending = request;
  comm->state = ncclInProgress;
  comm->then = [comm]() -> ncclResult_t {
    // Step 3: every rank checks what every rank passed, so all of them fail alike.
    std::vector<int> seen(static_cast<size_t>(comm->nranks), 0);
    for (int r = 0; r < comm->nranks; ++r) {
      const Joining& j = comm->joined[static_cast<size_t>(r)];
      if (std::memcmp(j.id.internal, comm->joined[0].id.internal, NCCL_UNIQUE_ID_BYTES) != 0)
        return failure(ncclInvalidUsage,
                       "ncclCommInitRank : MPI ranks 0 and %d passed different unique ids (every rank must pass the "
                       "id of one ncclGetUniqueId call)",
                       r);
      if (j.nranks != comm->nranks)
        return failure(ncclInvalidUsage, "ncclCommInitRank : MPI rank %d passed nranks %d, this rank %d", r, j.nranks,
                       comm->nranks);
      if (seen[static_cast<size_t>(j.rank)]++)
        return failure(ncclInvalidUsage, "ncclCommInitRank : rank %d was requested by two processes", j.rank);
    }
    // NCCL rank order: a rank's NCCL rank may differ from its MPI rank. Every rank has arrived,
    // so the blocking split cannot wait for a missing one.
    MPI_Comm ordered = MPI_COMM_NULL;
    if (const ncclResult_t r = from_mpi(comm, MPI_Comm_split(comm->mpi, 0, comm->rank, &ordered), "ncclCommInitRank");
        r != ncclSuccess)
      return r;
    MPI_Comm_free(&comm->mpi);
    comm->mpi = ordered;
    MPI_Comm_set_errhandler(comm->mpi, MPI_ERRORS_RETURN);
    comm->joined.clear();
    return ncclSuccess;
  };
  return ncclInProgress;
}
}  // namespace nccl_emu

using namespace nccl_emu;

extern "C" {

ncclResult_t ncclGetVersion(int* version) {
  if (!version) return failure(ncclInvalidArgument, "ncclGetVersion : version argument is NULL");
  *version = NCCL_VERSION_CODE;
  return ncclSuccess;
}

ncclResult_t ncclGetUniqueId(ncclUniqueId* uniqueId) {
  if (!uniqueId) return failure(ncclInvalidArgument, "ncclGetUniqueId : uniqueId argument is NULL");
  // Unique enough across processes and calls: host, process, call count, time and random bits.
  static std::atomic<uint64_t> calls{0};
  std::memset(uniqueId->internal, 0, NCCL_UNIQUE_ID_BYTES);
  std::memcpy(uniqueId->internal, kIdMagic, sizeof kIdMagic);
  std::random_device entropy;
  const uint64_t fields[] = {
      static_cast<uint64_t>(gethostid()), static_cast<uint64_t>(getpid()), calls.fetch_add(1),
      static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count()),
      (static_cast<uint64_t>(entropy()) << 32) | entropy()};
  std::memcpy(uniqueId->internal + sizeof kIdMagic, fields, sizeof fields);
  return ncclSuccess;
}

ncclResult_t ncclCommInitRankConfig(ncclComm_t* newcomm, int nranks, ncclUniqueId commId, int rank,
                                    ncclConfig_t* config) {
  const char* op = "ncclCommInitRank";
  if (!newcomm) return failure(ncclInvalidArgument, "%s : newcomm argument is NULL", op);
  *newcomm = nullptr;
  if (nranks < 1 || rank < 0 || rank >= nranks)
    return failure(ncclInvalidArgument, "%s : invalid rank requested : %d/%d", op, rank, nranks);
  if (config && (config->size != sizeof(ncclConfig_t) || config->magic != 0xcafebeef))
    return failure(ncclInvalidArgument, "%s : the config was not set from NCCL_CONFIG_INITIALIZER", op);
  if (std::memcmp(commId.internal, kIdMagic, sizeof kIdMagic) != 0)
    return failure(ncclInvalidArgument, "%s : commId is not an id from ncclGetUniqueId", op);
  int initialised = 0, finalized = 0;
  MPI_Initialized(&initialised);
  MPI_Finalized(&finalized);
  if (!initialised || finalized)
    return failure(ncclInvalidUsage, "%s : the emulated NCCL runs over MPI, which is not initialised", op);
  int world = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  if (nranks != world)
    return failure(ncclInvalidUsage, "%s : nranks %d, but an emulated communicator spans MPI_COMM_WORLD (%d ranks)", op,
                   nranks, world);
  auto* comm = new ncclComm;
  comm->rank = rank;
  comm->nranks = nranks;
  comm->blocking = !config || config->blocking == NCCL_CONFIG_UNDEF_INT || config->blocking != 0;
  comm->mine.id = commId;
  comm->mine.rank = rank;
  comm->mine.nranks = nranks;
  // Step 1: the communicator's own MPI communicator, without blocking (a missing rank must leave
  // a non-blocking caller in ncclInProgress, not stuck here).
  MPI_Request request = MPI_REQUEST_NULL;
  if (const int rc = MPI_Comm_idup(MPI_COMM_WORLD, &comm->mpi, &request); rc != MPI_SUCCESS) {
    delete comm;
    return failure(ncclSystemError, "%s : MPI_Comm_idup failed: %s", op, mpi_error_text(rc).c_str());
  }
  *newcomm = comm;
  return begin(comm, request, [comm] { return exchange(comm); });
}

ncclResult_t ncclCommInitRank(ncclComm_t* newcomm, int nranks, ncclUniqueId commId, int rank) {
  return ncclCommInitRankConfig(newcomm, nranks, commId, rank, nullptr);
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* asyncError) {
  if (!comm) return failure(ncclInvalidArgument, "ncclCommGetAsyncError : comm argument is NULL");
  if (!asyncError) return failure(ncclInvalidArgument, "ncclCommGetAsyncError : asyncError argument is NULL");
  if (comm->magic != kLive) return failure(ncclInvalidUsage, "ncclCommGetAsyncError : the communicator was aborted or destroyed");
  advance(comm);
  *asyncError = comm->state;
  return ncclSuccess;
}

ncclResult_t ncclCommFinalize(ncclComm_t comm) {
  if (!comm) return failure(ncclInvalidArgument, "ncclCommFinalize : comm argument is NULL");
  if (comm->magic != kLive) return failure(ncclInvalidUsage, "ncclCommFinalize : the communicator was aborted or destroyed");
  // Flushes what was issued: nothing is queued behind the operation in progress.
  return comm->state == ncclInProgress ? settle(comm) : ncclSuccess;
}

ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  if (!comm) return failure(ncclInvalidArgument, "ncclCommDestroy : comm argument is NULL");
  if (comm->magic != kLive) return failure(ncclInvalidUsage, "ncclCommDestroy : the communicator was aborted or destroyed");
  while (comm->state == ncclInProgress) {  // destroying an unfinished operation: finish it first
    std::this_thread::yield();
    advance(comm);
  }
  retire(comm, true);
  return ncclSuccess;
}

ncclResult_t ncclCommAbort(ncclComm_t comm) {
  if (!comm) return ncclSuccess;  // as the real one: aborting nothing is fine
  if (comm->magic != kLive) return failure(ncclInvalidUsage, "ncclCommAbort : the communicator was aborted or destroyed");
  // A non-blocking MPI collective cannot be cancelled, and MPI may still write its buffers if the
  // missing ranks ever join: then its MPI communicator and buffers are kept too.
  retire(comm, comm->state != ncclInProgress);
  return ncclSuccess;
}

const char* ncclGetErrorString(ncclResult_t result) {
  switch (result) {
    case ncclSuccess: return "no error";
    case ncclUnhandledCudaError: return "unhandled cuda error (run with NCCL_DEBUG=INFO for details)";
    case ncclSystemError: return "unhandled system error (the emulated NCCL's MPI call failed)";
    case ncclInternalError: return "internal error - please report this issue to the NCCL developers";
    case ncclInvalidArgument: return "invalid argument (run with NCCL_DEBUG=WARN for details)";
    case ncclInvalidUsage: return "invalid usage (run with NCCL_DEBUG=WARN for details)";
    case ncclRemoteError: return "remote process exited or there was a network error";
    case ncclInProgress: return "NCCL operation in progress";
    default: return "unknown result code";
  }
}

const char* ncclGetLastError(ncclComm_t) { return g_last_error.c_str(); }

ncclResult_t ncclCommCount(const ncclComm_t comm, int* count) {
  if (const ncclResult_t r = ready(comm, "ncclCommCount"); r != ncclSuccess) return r;
  if (!count) return failure(ncclInvalidArgument, "ncclCommCount : count argument is NULL");
  *count = comm->nranks;
  return ncclSuccess;
}

ncclResult_t ncclCommCuDevice(const ncclComm_t comm, int* device) {
  if (const ncclResult_t r = ready(comm, "ncclCommCuDevice"); r != ncclSuccess) return r;
  if (!device) return failure(ncclInvalidArgument, "ncclCommCuDevice : device argument is NULL");
  *device = comm->device;
  return ncclSuccess;
}

ncclResult_t ncclCommUserRank(const ncclComm_t comm, int* rank) {
  if (const ncclResult_t r = ready(comm, "ncclCommUserRank"); r != ncclSuccess) return r;
  if (!rank) return failure(ncclInvalidArgument, "ncclCommUserRank : rank argument is NULL");
  *rank = comm->rank;
  return ncclSuccess;
}

}  // extern "C"

#endif  // REEL_DIST_NCCL_EMULATED
