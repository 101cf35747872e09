// The emulated NCCL's collectives (see distributed/nccl.h): Broadcast, AllReduce, ReduceScatter,
// AllGather and Reduce, each one non-blocking MPI collective on the communicator's duplicate of
// MPI_COMM_WORLD, checked as the real argument checks answer (nccl_emu.cpp: the communicators).
// Types: the integers, f32 and f64 everywhere; f16 and bf16 in AllGather and Broadcast (moved as
// 16-bit words), not in reductions; 8-bit floats nowhere. Compiled in the emulated build only.
#include "distributed/nccl.h"

#if defined(REEL_DIST_NCCL_EMULATED)
#include <mpi.h>

#include <climits>
#include <cstdint>
#include <cstring>
#include <functional>
#include <utility>

#include "distributed/nccl_emu_internal.h"

using namespace nccl_emu;

namespace {

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

// `reduces`: AllReduce, ReduceScatter and Reduce, which MPI cannot sum 16-bit floats for (AllGather and
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

}  // namespace

extern "C" {

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

ncclResult_t ncclReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op,
                        int root, ncclComm_t comm, cudaStream_t) {
  const char* name = "Reduce";
  if (const ncclResult_t r = ready(comm, name); r != ncclSuccess) return r;
  if (root < 0 || root >= comm->nranks)
    return failure(ncclInvalidArgument, "%s : invalid root %d (root should be in the 0..%d range)", name, root,
                   comm->nranks);
  if (const ncclResult_t r = check_type(datatype, name, true); r != ncclSuccess) return r;
  if (const ncclResult_t r = check_op(op, name); r != ncclSuccess) return r;
  if (const ncclResult_t r = check_count(count, name); r != ncclSuccess) return r;
  if (count == 0) return ncclSuccess;
  if (const ncclResult_t r = check_buffer(sendbuff, name, "sendbuff"); r != ncclSuccess) return r;
  const bool is_root = comm->rank == root;
  // recvbuff is the root's alone (NCCL reads it nowhere else).
  if (is_root)
    if (const ncclResult_t r = check_buffer(recvbuff, name, "recvbuff"); r != ncclSuccess) return r;
  const size_t bytes = count * type_size(datatype);
  const void* send = sendbuff;
  if (is_root && sendbuff == recvbuff) {
    send = MPI_IN_PLACE;
  } else if (is_root && overlap(sendbuff, bytes, recvbuff, bytes)) {  // partly overlapping: read a copy
    comm->scratch.assign(static_cast<const char*>(sendbuff), static_cast<const char*>(sendbuff) + bytes);
    send = comm->scratch.data();
  }
  MPI_Request request = MPI_REQUEST_NULL;
  if (const ncclResult_t r = from_mpi(comm,
                                      MPI_Ireduce(send, is_root ? recvbuff : nullptr, static_cast<int>(count),
                                                  mpi_type(datatype), mpi_op(op), root, comm->mpi, &request),
                                      name);
      r != ncclSuccess)
    return r;
  // Only the root holds a result for ncclAvg to divide.
  return is_root ? begin_reduction(comm, request, op, recvbuff, count, datatype) : begin(comm, request, nullptr);
}

}  // extern "C"

#endif  // REEL_DIST_NCCL_EMULATED
