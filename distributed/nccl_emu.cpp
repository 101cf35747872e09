// The emulated NCCL (see distributed/nccl.h): communicators over a duplicate of MPI_COMM_WORLD, each
// collective one non-blocking MPI collective. Compiled in the emulated build only.
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

namespace {

constexpr uint64_t kLive = 0x6e63636c2d656d75ull;  // "nccl-emu": a communicator that can be used
constexpr uint64_t kDead = 0x646561642d636f6dull;  // aborted or destroyed (kept: MPI may still write)
constexpr char kIdMagic[16] = "reel-nccl-emu-1";   // the first bytes of every emulated unique id

std::string g_last_error;  // ncclGetLastError: the last failure's explanation

ncclResult_t failure(ncclResult_t code, const char* format, ...) __attribute__((format(printf, 2, 3)));
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

// One rank's part of the id exchange at initialisation.
struct Joining {
  ncclUniqueId id;
  int rank, nranks;
};

}  // namespace

struct ncclComm {
  uint64_t magic = kLive;
  MPI_Comm mpi = MPI_COMM_NULL;  // a duplicate of MPI_COMM_WORLD, then ordered by NCCL rank
  int rank = 0, nranks = 0, device = 0;
  bool blocking = true;
  ncclResult_t state = ncclSuccess;  // ncclInProgress while `pending` runs; an error once one happened
  MPI_Request pending = MPI_REQUEST_NULL;
  std::function<ncclResult_t()> then;  // run when `pending` completes: its result becomes the state
  std::vector<char> scratch;           // buffers the operation in progress reads or writes
  std::vector<Joining> joined;
  Joining mine{};
};

namespace {

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

MPI_Datatype mpi_type(ncclDataType_t t) {
  switch (t) {
    case ncclInt8: return MPI_INT8_T;
    case ncclUint8: return MPI_UINT8_T;
    case ncclInt32: return MPI_INT32_T;
    case ncclUint32: return MPI_UINT32_T;
    case ncclInt64: return MPI_INT64_T;
    case ncclUint64: return MPI_UINT64_T;
    case ncclFloat32: return MPI_FLOAT;
    case ncclFloat64: return MPI_DOUBLE;
    case ncclFloat16:
    case ncclBfloat16: return MPI_UINT16_T;  // moved as 16-bit words: gathers and broadcasts only
    default: return MPI_DATATYPE_NULL;
  }
}

size_t type_size(ncclDataType_t t) {
  switch (t) {
    case ncclInt8:
    case ncclUint8: return 1;
    case ncclFloat16:
    case ncclBfloat16: return 2;
    case ncclInt32:
    case ncclUint32:
    case ncclFloat32: return 4;
    default: return 8;
  }
}

// `reduces`: AllReduce and ReduceScatter, which MPI cannot sum 16-bit floats for (AllGather and
// Broadcast move them as 16-bit words).
ncclResult_t check_type(ncclDataType_t t, const char* op, bool reduces) {
  if (static_cast<int>(t) < 0 || static_cast<int>(t) >= ncclNumTypes)
    return failure(ncclInvalidArgument, "%s : invalid type %d", op, static_cast<int>(t));
  if (mpi_type(t) == MPI_DATATYPE_NULL)
    return failure(ncclInvalidArgument, "%s : type %d (an 8-bit float) is not emulated", op, static_cast<int>(t));
  if (reduces && (t == ncclFloat16 || t == ncclBfloat16))
    return failure(ncclInvalidArgument, "%s : type %d (a 16-bit float) is not emulated for reductions", op,
                   static_cast<int>(t));
  return ncclSuccess;
}

ncclResult_t check_op(ncclRedOp_t op, const char* name) {
  if (static_cast<int>(op) < 0 || static_cast<int>(op) >= ncclNumOps)
    return failure(ncclInvalidArgument, "%s : invalid reduction operation %d (the emulation has no user ops)", name,
                   static_cast<int>(op));
  return ncclSuccess;
}

ncclResult_t check_count(size_t count, const char* op) {
  if (count > static_cast<size_t>(INT_MAX))
    return failure(ncclInvalidArgument, "%s : count %zu is more than the emulation's one MPI call takes (2^31 - 1)",
                   op, count);
  return ncclSuccess;
}

ncclResult_t check_buffer(const void* p, const char* op, const char* name) {
  if (!p) return failure(ncclInvalidArgument, "%s : %s argument is NULL", op, name);
  return ncclSuccess;
}

MPI_Op mpi_op(ncclRedOp_t op) {
  switch (op) {
    case ncclProd: return MPI_PROD;
    case ncclMax: return MPI_MAX;
    case ncclMin: return MPI_MIN;
    default: return MPI_SUM;  // ncclSum, and ncclAvg before the division
  }
}

template <typename T>
void divide(void* data, size_t count, int by) {
  T* p = static_cast<T*>(data);
  for (size_t i = 0; i < count; ++i) p[i] = static_cast<T>(p[i] / static_cast<T>(by));
}

// ncclAvg: the sum in `data` divided by nranks, in the element type.
void average(void* data, size_t count, ncclDataType_t t, int nranks) {
  switch (t) {
    case ncclInt8: divide<int8_t>(data, count, nranks); break;
    case ncclUint8: divide<uint8_t>(data, count, nranks); break;
    case ncclInt32: divide<int32_t>(data, count, nranks); break;
    case ncclUint32: divide<uint32_t>(data, count, nranks); break;
    case ncclInt64: divide<int64_t>(data, count, nranks); break;
    case ncclUint64: divide<uint64_t>(data, count, nranks); break;
    case ncclFloat32: divide<float>(data, count, nranks); break;
    case ncclFloat64: divide<double>(data, count, nranks); break;
    default: break;
  }
}

// begin() for a reduction whose result is `count` elements at recvbuff: ncclAvg divides them by
// the rank count once MPI's sum is in.
ncclResult_t begin_reduction(ncclComm* comm, MPI_Request request, ncclRedOp_t op, void* recvbuff, size_t count,
                             ncclDataType_t datatype) {
  std::function<ncclResult_t()> then;
  if (op == ncclAvg)
    then = [=] {
      average(recvbuff, count, datatype, comm->nranks);
      return ncclSuccess;
    };
  return begin(comm, request, std::move(then));
}

bool overlap(const void* a, size_t a_bytes, const void* b, size_t b_bytes) {
  const auto x = reinterpret_cast<uintptr_t>(a), y = reinterpret_cast<uintptr_t>(b);
  return x < y + b_bytes && y < x + a_bytes;
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

}  // namespace

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

// ---- collectives ----------------------------------------------------------------------------

ncclResult_t ncclBroadcast(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root,
                           ncclComm_t comm, cudaStream_t) {
  const char* op = "Broadcast";
  if (const ncclResult_t r = ready(comm, op); r != ncclSuccess) return r;
  if (root < 0 || root >= comm->nranks)
    return failure(ncclInvalidArgument, "%s : invalid root %d (root should be in the 0..%d range)", op, root,
                   comm->nranks);
  if (const ncclResult_t r = check_type(datatype, op, false); r != ncclSuccess) return r;
  if (const ncclResult_t r = check_count(count, op); r != ncclSuccess) return r;
  if (count == 0) return ncclSuccess;
  if (comm->rank == root)
    if (const ncclResult_t r = check_buffer(sendbuff, op, "sendbuff"); r != ncclSuccess) return r;
  if (const ncclResult_t r = check_buffer(recvbuff, op, "recvbuff"); r != ncclSuccess) return r;
  if (comm->rank == root && sendbuff != recvbuff) std::memmove(recvbuff, sendbuff, count * type_size(datatype));
  MPI_Request request = MPI_REQUEST_NULL;
  if (const ncclResult_t r = from_mpi(comm,
                                      MPI_Ibcast(recvbuff, static_cast<int>(count), mpi_type(datatype), root,
                                                 comm->mpi, &request),
                                      op);
      r != ncclSuccess)
    return r;
  return begin(comm, request, nullptr);
}

ncclResult_t ncclAllReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op,
                           ncclComm_t comm, cudaStream_t) {
  const char* name = "AllReduce";
  if (const ncclResult_t r = ready(comm, name); r != ncclSuccess) return r;
  if (const ncclResult_t r = check_type(datatype, name, true); r != ncclSuccess) return r;
  if (const ncclResult_t r = check_op(op, name); r != ncclSuccess) return r;
  if (const ncclResult_t r = check_count(count, name); r != ncclSuccess) return r;
  if (count == 0) return ncclSuccess;
  if (const ncclResult_t r = check_buffer(sendbuff, name, "sendbuff"); r != ncclSuccess) return r;
  if (const ncclResult_t r = check_buffer(recvbuff, name, "recvbuff"); r != ncclSuccess) return r;
  const size_t bytes = count * type_size(datatype);
  const void* send = sendbuff == recvbuff ? MPI_IN_PLACE : sendbuff;
  if (sendbuff != recvbuff && overlap(sendbuff, bytes, recvbuff, bytes)) {  // partly overlapping: read a copy
    comm->scratch.assign(static_cast<const char*>(sendbuff), static_cast<const char*>(sendbuff) + bytes);
    send = comm->scratch.data();
  }
  MPI_Request request = MPI_REQUEST_NULL;
  if (const ncclResult_t r = from_mpi(comm,
                                      MPI_Iallreduce(send, recvbuff, static_cast<int>(count), mpi_type(datatype),
                                                     mpi_op(op), comm->mpi, &request),
                                      name);
      r != ncclSuccess)
    return r;
  return begin_reduction(comm, request, op, recvbuff, count, datatype);
}

ncclResult_t ncclReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount, ncclDataType_t datatype,
                               ncclRedOp_t op, ncclComm_t comm, cudaStream_t) {
  const char* name = "ReduceScatter";
  if (const ncclResult_t r = ready(comm, name); r != ncclSuccess) return r;
  if (const ncclResult_t r = check_type(datatype, name, true); r != ncclSuccess) return r;
  if (const ncclResult_t r = check_op(op, name); r != ncclSuccess) return r;
  if (const ncclResult_t r = check_count(recvcount * static_cast<size_t>(comm->nranks), name); r != ncclSuccess)
    return r;
  if (recvcount == 0) return ncclSuccess;
  if (const ncclResult_t r = check_buffer(sendbuff, name, "sendbuff"); r != ncclSuccess) return r;
  if (const ncclResult_t r = check_buffer(recvbuff, name, "recvbuff"); r != ncclSuccess) return r;
  const size_t recv_bytes = recvcount * type_size(datatype), send_bytes = recv_bytes * static_cast<size_t>(comm->nranks);
  const void* send = sendbuff;
  if (overlap(sendbuff, send_bytes, recvbuff, recv_bytes)) {  // in place (recvbuff in sendbuff): read a copy
    comm->scratch.assign(static_cast<const char*>(sendbuff), static_cast<const char*>(sendbuff) + send_bytes);
    send = comm->scratch.data();
  }
  MPI_Request request = MPI_REQUEST_NULL;
  if (const ncclResult_t r = from_mpi(comm,
                                      MPI_Ireduce_scatter_block(send, recvbuff, static_cast<int>(recvcount),
                                                                mpi_type(datatype), mpi_op(op), comm->mpi, &request),
                                      name);
      r != ncclSuccess)
    return r;
  return begin_reduction(comm, request, op, recvbuff, recvcount, datatype);
}

ncclResult_t ncclAllGather(const void* sendbuff, void* recvbuff, size_t sendcount, ncclDataType_t datatype,
                           ncclComm_t comm, cudaStream_t) {
  const char* name = "AllGather";
  if (const ncclResult_t r = ready(comm, name); r != ncclSuccess) return r;
  if (const ncclResult_t r = check_type(datatype, name, false); r != ncclSuccess) return r;
  if (const ncclResult_t r = check_count(sendcount * static_cast<size_t>(comm->nranks), name); r != ncclSuccess)
    return r;
  if (sendcount == 0) return ncclSuccess;
  if (const ncclResult_t r = check_buffer(sendbuff, name, "sendbuff"); r != ncclSuccess) return r;
  if (const ncclResult_t r = check_buffer(recvbuff, name, "recvbuff"); r != ncclSuccess) return r;
  const size_t send_bytes = sendcount * type_size(datatype), recv_bytes = send_bytes * static_cast<size_t>(comm->nranks);
  const void* send = sendbuff;
  char* slot = static_cast<char*>(recvbuff) + static_cast<size_t>(comm->rank) * send_bytes;
  if (sendbuff == slot) {
    send = MPI_IN_PLACE;  // the documented in-place form: this rank's input already in its slot
  } else if (overlap(sendbuff, send_bytes, recvbuff, recv_bytes)) {
    comm->scratch.assign(static_cast<const char*>(sendbuff), static_cast<const char*>(sendbuff) + send_bytes);
    send = comm->scratch.data();
  }
  MPI_Request request = MPI_REQUEST_NULL;
  const MPI_Datatype type = mpi_type(datatype);
  if (const ncclResult_t r = from_mpi(comm,
                                      MPI_Iallgather(send, static_cast<int>(sendcount), type, recvbuff,
                                                     static_cast<int>(sendcount), type, comm->mpi, &request),
                                      name);
      r != ncclSuccess)
    return r;
  return begin(comm, request, nullptr);
}

}  // extern "C"

#endif  // REEL_DIST_NCCL_EMULATED
