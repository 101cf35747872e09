// distributed/nccl.h: the NCCL API reel's NCCL backend (distributed/nccl_backend.cpp) is written against, so
// that the backend is the same code in both build flavours, as kernels/simt/cudnn.h does for cuDNN:
//   nvcc build (REEL_CUDA_NVCC) with NCCL found (REEL_HAVE_NCCL)  the real <nccl.h> and libnccl;
//   emulated build (SIMT_EMULATE)  the same names, types, enum values and result codes, declared
//                                  here and implemented over MPI in distributed/nccl_emu.cpp (one process
//                                  per rank, cuda:0 memory is host memory);
//   otherwise                      no NCCL: REEL_DIST_NCCL is 0 and cuda tensors are staged
//                                  through the host over MPI.
//
// The emulation keeps NCCL's contract where reel can observe it:
// * ncclGetUniqueId makes a fresh id; ncclCommInitRank(Config) checks that every rank passed the
//   same id (else ncclInvalidUsage on every rank), that nranks is the same everywhere and that the
//   ranks are 0..nranks-1 once each (ncclInvalidUsage); nranks < 1 or a rank outside [0, nranks),
//   a config not made from NCCL_CONFIG_INITIALIZER: ncclInvalidArgument.
// * Collectives: a null or uninitialised communicator, a datatype or reduction outside the enums,
//   a root outside [0, nranks), a null buffer with count > 0 (Reduce's recvbuff: on the root
//   only), or a call while the communicator's previous operation is still ncclInProgress:
//   ncclInvalidArgument (as the real argument checks and ncclCommEnsureReady answer); an aborted or
//   destroyed communicator: ncclInvalidUsage.
//   count == 0 does nothing and succeeds. In-place calls (sendbuff == recvbuff, or the rank's slot
//   of recvbuff for all_gather) work as documented.
// * Stream order: the emulated stream runs everything when it is enqueued, so a collective runs
//   when it is called. On a blocking communicator (the default) the call returns once the result
//   is in recvbuff. On a non-blocking one (config.blocking = 0) the call starts the non-blocking
//   MPI collective and returns ncclInProgress unless it completed at once; ncclCommGetAsyncError
//   advances it and reports ncclInProgress until the result is in place, then ncclSuccess, which
//   is the real rule ("do not use the communicator or its stream before the state leaves
//   ncclInProgress"). A rank that never joins leaves the others in ncclInProgress, never stuck in
//   a call, so their watchdog can ncclCommAbort.
// * ncclAvg is the sum divided by nranks (integer division for integer types).
// Limits of the emulation (each refused with ncclInvalidArgument and a ncclGetLastError text):
// counts above 2^31 - 1 elements (one MPI call), the 16- and 8-bit floating types, and a
// communicator whose nranks differs from MPI_COMM_WORLD's size (every communicator spans the MPI
// world; a rank's NCCL rank may differ from its MPI rank). MPI must be initialised first.
#pragma once

#if defined(REEL_CUDA_NVCC)
#if defined(REEL_HAVE_NCCL)
#include <nccl.h>
// Non-blocking communicators (ncclCommInitRankConfig, config.blocking) arrived in NCCL 2.14: with an
// older library cuda tensors are staged through the host.
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 14, 0)
#define REEL_DIST_NCCL 1
#else
#define REEL_DIST_NCCL 0
#endif
#else
#define REEL_DIST_NCCL 0
#endif

#elif defined(SIMT_EMULATE)
#define REEL_DIST_NCCL 1
#define REEL_DIST_NCCL_EMULATED 1
#include <climits>
#include <cstddef>

typedef struct CUstream_st* cudaStream_t;  // the same declaration as in kernels/simt/simt.h

// The NCCL version whose API this emulates.
#define NCCL_MAJOR 2
#define NCCL_MINOR 28
#define NCCL_PATCH 9
#define NCCL_VERSION(X, Y, Z) (((X) <= 2 && (Y) <= 8) ? (X) * 1000 + (Y) * 100 + (Z) : (X) * 10000 + (Y) * 100 + (Z))
#define NCCL_VERSION_CODE NCCL_VERSION(NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH)

extern "C" {

typedef struct ncclComm* ncclComm_t;
#define NCCL_COMM_NULL NULL

#define NCCL_UNIQUE_ID_BYTES 128
typedef struct {
  char internal[NCCL_UNIQUE_ID_BYTES];
} ncclUniqueId;

typedef enum {
  ncclSuccess = 0,
  ncclUnhandledCudaError = 1,
  ncclSystemError = 2,
  ncclInternalError = 3,
  ncclInvalidArgument = 4,
  ncclInvalidUsage = 5,
  ncclRemoteError = 6,
  ncclInProgress = 7,
  ncclNumResults = 8
} ncclResult_t;

typedef enum {
  ncclSum = 0,
  ncclProd = 1,
  ncclMax = 2,
  ncclMin = 3,
  ncclAvg = 4,
  ncclNumOps = 5,
  ncclMaxRedOp = 0x7fffffff
} ncclRedOp_t;

typedef enum {
  ncclInt8 = 0,
  ncclChar = 0,
  ncclUint8 = 1,
  ncclInt32 = 2,
  ncclInt = 2,
  ncclUint32 = 3,
  ncclInt64 = 4,
  ncclUint64 = 5,
  ncclFloat16 = 6,
  ncclHalf = 6,
  ncclFloat32 = 7,
  ncclFloat = 7,
  ncclFloat64 = 8,
  ncclDouble = 8,
  ncclBfloat16 = 9,
  ncclFloat8e4m3 = 10,
  ncclFloat8e5m2 = 11,
  ncclNumTypes = 12
} ncclDataType_t;

#define NCCL_CONFIG_UNDEF_INT INT_MIN
#define NCCL_CONFIG_UNDEF_PTR NULL

// The layout of NCCL 2.28's ncclConfig_t; the emulation reads `blocking` (and checks the header).
typedef struct ncclConfig_v22800 {
  size_t size;
  unsigned int magic;
  unsigned int version;
  int blocking;
  int cgaClusterSize;
  int minCTAs;
  int maxCTAs;
  const char* netName;
  int splitShare;
  int trafficClass;
  const char* commName;
  int collnetEnable;
  int CTAPolicy;
  int shrinkShare;
  int nvlsCTAs;
  int nChannelsPerNetPeer;
  int nvlinkCentricSched;
} ncclConfig_t;

#define NCCL_CONFIG_INITIALIZER                                                                          \
  {                                                                                                      \
    sizeof(ncclConfig_t), 0xcafebeef, NCCL_VERSION(NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH),                  \
        NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT,       \
        NCCL_CONFIG_UNDEF_PTR, NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_PTR,       \
        NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT,       \
        NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT                                                     \
  }

ncclResult_t ncclGetVersion(int* version);
ncclResult_t ncclGetUniqueId(ncclUniqueId* uniqueId);
ncclResult_t ncclCommInitRankConfig(ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank,
                                    ncclConfig_t* config);
ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank);
ncclResult_t ncclCommFinalize(ncclComm_t comm);
ncclResult_t ncclCommDestroy(ncclComm_t comm);
ncclResult_t ncclCommAbort(ncclComm_t comm);
const char* ncclGetErrorString(ncclResult_t result);
const char* ncclGetLastError(ncclComm_t comm);
ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* asyncError);
ncclResult_t ncclCommCount(const ncclComm_t comm, int* count);
ncclResult_t ncclCommCuDevice(const ncclComm_t comm, int* device);
ncclResult_t ncclCommUserRank(const ncclComm_t comm, int* rank);

ncclResult_t ncclBroadcast(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root,
                           ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclAllReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op,
                           ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount, ncclDataType_t datatype,
                               ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclAllGather(const void* sendbuff, void* recvbuff, size_t sendcount, ncclDataType_t datatype,
                           ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op,
                        int root, ncclComm_t comm, cudaStream_t stream);

}  // extern "C"

#else
#define REEL_DIST_NCCL 0
#endif
