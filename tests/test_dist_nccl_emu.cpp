// The emulated NCCL (distributed/nccl.h, distributed/nccl_emu.cpp) against NCCL's documented contract, under
// `mpirun -np 2` in the emulated build: communicators from one ncclGetUniqueId (and refused when
// the ranks' ids differ), NCCL ranks ordered apart from MPI ranks, every collective (reduce to
// each root too) in and out of place with every reduction, non-blocking communicators
// (ncclInProgress, then ncclSuccess through ncclCommGetAsyncError; a call in between refused), and
// the result codes of bad arguments.
// Buffers are host memory, as cuda:0's are in this build.
#include <mpi.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "distributed/nccl.h"
#include "distributed/process_group.h"
#include "testing.h"

#if !defined(REEL_DIST_NCCL_EMULATED)
#error "test_dist_nccl_emu is built in the emulated build only"
#endif

using reel::distributed::ProcessGroup;

namespace {

int rank() { return ProcessGroup::world().rank(); }

ncclUniqueId rank0_id() {
  ncclUniqueId id;
  if (rank() == 0) REQUIRE(ncclGetUniqueId(&id) == ncclSuccess);
  MPI_Bcast(id.internal, NCCL_UNIQUE_ID_BYTES, MPI_BYTE, 0, MPI_COMM_WORLD);
  return id;
}

// Polls a non-blocking communicator until its state leaves ncclInProgress.
ncclResult_t settle(ncclComm_t comm) {
  ncclResult_t state = ncclInProgress;
  while (state == ncclInProgress) {
    REQUIRE(ncclCommGetAsyncError(comm, &state) == ncclSuccess);
    if (state == ncclInProgress) std::this_thread::yield();
  }
  return state;
}

ncclComm_t make_comm(bool blocking, int nccl_rank = -1) {
  const ncclUniqueId id = rank0_id();
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = blocking ? 1 : 0;
  ncclComm_t comm = nullptr;
  const ncclResult_t r = ncclCommInitRankConfig(&comm, 2, id, nccl_rank < 0 ? rank() : nccl_rank, &config);
  REQUIRE(comm != nullptr);
  if (blocking) REQUIRE(r == ncclSuccess);
  else REQUIRE((r == ncclSuccess || r == ncclInProgress));
  REQUIRE(settle(comm) == ncclSuccess);
  return comm;
}

std::string last_error() { return ncclGetLastError(nullptr); }

}  // namespace

TEST_CASE("emulated NCCL: the real API's version, codes and strings") {
  int version = 0;
  REQUIRE(ncclGetVersion(&version) == ncclSuccess);
  CHECK(version == NCCL_VERSION(2, 28, 9));
  CHECK(ncclInvalidArgument == 4);
  CHECK(ncclInvalidUsage == 5);
  CHECK(ncclInProgress == 7);
  CHECK(ncclFloat32 == 7);
  CHECK(ncclAvg == 4);
  CHECK(std::string(ncclGetErrorString(ncclInvalidArgument)).find("invalid argument") != std::string::npos);
  ncclUniqueId a, b;
  REQUIRE(ncclGetUniqueId(&a) == ncclSuccess);
  REQUIRE(ncclGetUniqueId(&b) == ncclSuccess);
  CHECK(std::memcmp(a.internal, b.internal, NCCL_UNIQUE_ID_BYTES) != 0);  // every call a new id
}

TEST_CASE("emulated NCCL: a communicator from rank 0's id; blocking and non-blocking") {
  for (const bool blocking : {true, false}) {
    CAPTURE(blocking);
    ncclComm_t comm = make_comm(blocking);
    int count = 0, user_rank = -1, device = -1;
    CHECK(ncclCommCount(comm, &count) == ncclSuccess);
    CHECK(count == 2);
    CHECK(ncclCommUserRank(comm, &user_rank) == ncclSuccess);
    CHECK(user_rank == rank());
    CHECK(ncclCommCuDevice(comm, &device) == ncclSuccess);
    CHECK(device == 0);
    // rank r holds r + 1 + i: the sum is 2i + 3
    std::vector<float> x{1.0f + rank(), 2.0f + rank(), 3.0f + rank()};
    const ncclResult_t r = ncclAllReduce(x.data(), x.data(), 3, ncclFloat32, ncclSum, comm, nullptr);
    CHECK((r == ncclSuccess || (!blocking && r == ncclInProgress)));
    CHECK(settle(comm) == ncclSuccess);
    CHECK(x == std::vector<float>{3, 5, 7});
    CHECK(ncclCommFinalize(comm) == ncclSuccess);
    CHECK(ncclCommDestroy(comm) == ncclSuccess);
    // A destroyed communicator is refused, not read.
    CHECK(ncclAllReduce(x.data(), x.data(), 3, ncclFloat32, ncclSum, comm, nullptr) == ncclInvalidUsage);
  }
}

TEST_CASE("emulated NCCL: ranks that pass different unique ids all fail with ncclInvalidUsage") {
  ncclUniqueId mine;
  REQUIRE(ncclGetUniqueId(&mine) == ncclSuccess);  // each rank its own: not one communicator
  ncclComm_t comm = nullptr;
  CHECK(ncclCommInitRank(&comm, 2, mine, rank()) == ncclInvalidUsage);
  CHECK(last_error().find("different unique ids") != std::string::npos);
  REQUIRE(comm != nullptr);
  ncclResult_t state = ncclSuccess;
  CHECK(ncclCommGetAsyncError(comm, &state) == ncclSuccess);
  CHECK(state == ncclInvalidUsage);
  float x = 1;
  CHECK(ncclAllReduce(&x, &x, 1, ncclFloat32, ncclSum, comm, nullptr) == ncclInvalidUsage);
  CHECK(ncclCommAbort(comm) == ncclSuccess);
}

TEST_CASE("emulated NCCL: bad initialisations are refused with the documented codes") {
  const ncclUniqueId id = rank0_id();
  ncclComm_t comm = nullptr;
  CHECK(ncclCommInitRank(&comm, 2, id, 2) == ncclInvalidArgument);  // rank outside [0, nranks)
  CHECK(ncclCommInitRank(&comm, 0, id, 0) == ncclInvalidArgument);
  ncclUniqueId zeros{};
  CHECK(ncclCommInitRank(&comm, 2, zeros, rank()) == ncclInvalidArgument);  // not from ncclGetUniqueId
  CHECK(last_error().find("ncclGetUniqueId") != std::string::npos);
  ncclConfig_t raw{};
  CHECK(ncclCommInitRankConfig(&comm, 2, id, rank(), &raw) == ncclInvalidArgument);  // no NCCL_CONFIG_INITIALIZER
  CHECK(ncclCommInitRank(&comm, 3, id, rank()) == ncclInvalidUsage);  // the emulation spans MPI_COMM_WORLD
  CHECK(ncclCommInitRank(nullptr, 2, id, rank()) == ncclInvalidArgument);
  CHECK(comm == nullptr);
}

TEST_CASE("emulated NCCL: NCCL ranks need not be MPI ranks; all_gather follows NCCL rank order") {
  ncclComm_t comm = make_comm(true, 1 - rank());  // MPI rank 0 is NCCL rank 1
  int user_rank = -1;
  CHECK(ncclCommUserRank(comm, &user_rank) == ncclSuccess);
  CHECK(user_rank == 1 - rank());
  const int64_t mine = 100 + rank();  // from MPI rank r
  std::vector<int64_t> all(2);
  REQUIRE(ncclAllGather(&mine, all.data(), 1, ncclInt64, comm, nullptr) == ncclSuccess);
  CHECK(all == std::vector<int64_t>{101, 100});  // NCCL rank 0 (MPI rank 1) first
  CHECK(ncclCommDestroy(comm) == ncclSuccess);
}

TEST_CASE("emulated NCCL: every collective and reduction, in and out of place") {
  ncclComm_t comm = make_comm(true);
  const int r = rank();
  // all_reduce: rank r holds {r + 1, 5 - r, 3 * r - 2} -> ranks {1, 5, -2} and {2, 4, 1}
  const std::vector<int32_t> in{r + 1, 5 - r, 3 * r - 2};
  struct Case {
    ncclRedOp_t op;
    std::vector<int32_t> want;
  };
  for (const Case& c : {Case{ncclSum, {3, 9, -1}}, Case{ncclProd, {2, 20, -2}}, Case{ncclMax, {2, 5, 1}},
                        Case{ncclMin, {1, 4, -2}}, Case{ncclAvg, {1, 4, 0}}}) {  // ncclAvg on ints: sum / 2
    CAPTURE(static_cast<int>(c.op));
    std::vector<int32_t> out(3, -99);
    REQUIRE(ncclAllReduce(in.data(), out.data(), 3, ncclInt32, c.op, comm, nullptr) == ncclSuccess);
    CHECK(out == c.want);
    std::vector<int32_t> inplace = in;
    REQUIRE(ncclAllReduce(inplace.data(), inplace.data(), 3, ncclInt32, c.op, comm, nullptr) == ncclSuccess);
    CHECK(inplace == c.want);
  }
  // f64 average
  std::vector<double> d{0.25 * (r + 1), -1.5 * r};
  REQUIRE(ncclAllReduce(d.data(), d.data(), 2, ncclFloat64, ncclAvg, comm, nullptr) == ncclSuccess);
  CHECK(d == std::vector<double>{0.375, -0.75});

  // reduce_scatter: rank r holds (r + 1) * [0, 1, 2, 3]; the sum is 3 * [0..4), rank r gets chunk r
  std::vector<double> rs(4);
  for (int i = 0; i < 4; ++i) rs[static_cast<size_t>(i)] = (r + 1.0) * i;
  std::vector<double> chunk(2);
  REQUIRE(ncclReduceScatter(rs.data(), chunk.data(), 2, ncclFloat64, ncclSum, comm, nullptr) == ncclSuccess);
  CHECK(chunk == std::vector<double>{6.0 * r, 6.0 * r + 3});
  // in place: recvbuff is this rank's chunk of sendbuff
  REQUIRE(ncclReduceScatter(rs.data(), rs.data() + 2 * r, 2, ncclFloat64, ncclAvg, comm, nullptr) == ncclSuccess);
  CHECK(rs[static_cast<size_t>(2 * r)] == 1.5 * (2 * r));
  CHECK(rs[static_cast<size_t>(2 * r + 1)] == 1.5 * (2 * r + 1));

  // all_gather in place: this rank's input already in its slot
  std::vector<float> slots{-1, -1, -1, -1};
  slots[static_cast<size_t>(2 * r)] = 10.0f * (r + 1);
  slots[static_cast<size_t>(2 * r + 1)] = 10.0f * (r + 1) + 1;
  REQUIRE(ncclAllGather(slots.data() + 2 * r, slots.data(), 2, ncclFloat32, comm, nullptr) == ncclSuccess);
  CHECK(slots == std::vector<float>{10, 11, 20, 21});

  // 16-bit floats are moved as words (FSDP's mixed precision gathers bf16): all_gather and broadcast
  const std::vector<uint16_t> half_in{static_cast<uint16_t>(0x3f80 + r), static_cast<uint16_t>(0xc000 - r)};
  std::vector<uint16_t> halves(4, 0);
  REQUIRE(ncclAllGather(half_in.data(), halves.data(), 2, ncclBfloat16, comm, nullptr) == ncclSuccess);
  CHECK(halves == std::vector<uint16_t>{0x3f80, 0xc000, 0x3f81, 0xbfff});
  std::vector<uint16_t> h16(half_in);
  REQUIRE(ncclBroadcast(h16.data(), h16.data(), 2, ncclFloat16, 1, comm, nullptr) == ncclSuccess);
  CHECK(h16 == std::vector<uint16_t>{0x3f81, 0xbfff});

  // broadcast from rank 1, out of place (sendbuff is read on the root only) and in place
  const std::vector<uint8_t> src{static_cast<uint8_t>(7 + r), 200};
  std::vector<uint8_t> dst(2, 0);
  REQUIRE(ncclBroadcast(src.data(), dst.data(), 2, ncclUint8, 1, comm, nullptr) == ncclSuccess);
  CHECK(dst == std::vector<uint8_t>{8, 200});
  uint64_t big = r == 0 ? 1 : (uint64_t{1} << 63);
  REQUIRE(ncclBroadcast(&big, &big, 1, ncclUint64, 1, comm, nullptr) == ncclSuccess);
  CHECK(big == (uint64_t{1} << 63));

  // reduce to each root, every reduction, out of place and in place: the same values as all_reduce
  // on the root; elsewhere recvbuff is not touched (and may be null)
  for (const int root : {0, 1})
    for (const Case& c : {Case{ncclSum, {3, 9, -1}}, Case{ncclProd, {2, 20, -2}}, Case{ncclMax, {2, 5, 1}},
                          Case{ncclMin, {1, 4, -2}}, Case{ncclAvg, {1, 4, 0}}}) {
      CAPTURE(root);
      CAPTURE(static_cast<int>(c.op));
      std::vector<int32_t> out(3, -99);
      REQUIRE(ncclReduce(in.data(), r == root ? out.data() : nullptr, 3, ncclInt32, c.op, root, comm, nullptr) ==
              ncclSuccess);
      CHECK(out == (r == root ? c.want : std::vector<int32_t>(3, -99)));
      std::vector<int32_t> inplace = in;
      REQUIRE(ncclReduce(inplace.data(), inplace.data(), 3, ncclInt32, c.op, root, comm, nullptr) == ncclSuccess);
      CHECK(inplace == (r == root ? c.want : in));
    }
  std::vector<double> avg{0.25 * (r + 1), -1.5 * r};
  REQUIRE(ncclReduce(avg.data(), avg.data(), 2, ncclFloat64, ncclAvg, 1, comm, nullptr) == ncclSuccess);
  CHECK(avg == (r == 1 ? std::vector<double>{0.375, -0.75} : std::vector<double>{0.25, 0}));

  // count 0: nothing to do, and no buffer needed
  CHECK(ncclAllReduce(nullptr, nullptr, 0, ncclFloat32, ncclSum, comm, nullptr) == ncclSuccess);
  CHECK(ncclCommDestroy(comm) == ncclSuccess);
}

TEST_CASE("emulated NCCL: bad arguments are refused on the rank with the documented codes") {
  ncclComm_t comm = make_comm(true);
  float x[4] = {1, 2, 3, 4};
  CHECK(ncclAllReduce(nullptr, x, 4, ncclFloat32, ncclSum, comm, nullptr) == ncclInvalidArgument);
  CHECK(last_error().find("sendbuff") != std::string::npos);
  CHECK(ncclAllReduce(x, nullptr, 4, ncclFloat32, ncclSum, comm, nullptr) == ncclInvalidArgument);
  CHECK(ncclAllReduce(x, x, 4, static_cast<ncclDataType_t>(ncclNumTypes), ncclSum, comm, nullptr) ==
        ncclInvalidArgument);
  CHECK(last_error().find("invalid type") != std::string::npos);
  CHECK(ncclAllReduce(x, x, 4, ncclFloat16, ncclSum, comm, nullptr) == ncclInvalidArgument);  // not emulated
  CHECK(last_error().find("not emulated for reductions") != std::string::npos);
  CHECK(ncclReduceScatter(x, x, 2, ncclBfloat16, ncclSum, comm, nullptr) == ncclInvalidArgument);
  CHECK(ncclAllGather(x, x, 2, ncclFloat8e4m3, comm, nullptr) == ncclInvalidArgument);
  CHECK(ncclAllReduce(x, x, 4, ncclFloat32, static_cast<ncclRedOp_t>(ncclNumOps), comm, nullptr) ==
        ncclInvalidArgument);
  // The largest value the enum holds, no op (-1 is outside the enum's range: loading it is undefined,
  // which clang's -fsanitize=enum reports).
  CHECK(ncclAllReduce(x, x, 4, ncclFloat32, ncclMaxRedOp, comm, nullptr) == ncclInvalidArgument);
  CHECK(ncclBroadcast(x, x, 4, ncclFloat32, 2, comm, nullptr) == ncclInvalidArgument);
  CHECK(last_error().find("invalid root 2") != std::string::npos);
  CHECK(ncclBroadcast(x, x, 4, ncclFloat32, -1, comm, nullptr) == ncclInvalidArgument);
  CHECK(ncclReduceScatter(x, nullptr, 2, ncclFloat32, ncclSum, comm, nullptr) == ncclInvalidArgument);
  CHECK(ncclAllGather(nullptr, x, 2, ncclFloat32, comm, nullptr) == ncclInvalidArgument);
  CHECK(ncclReduce(x, x, 4, ncclFloat32, ncclSum, 2, comm, nullptr) == ncclInvalidArgument);
  CHECK(last_error().find("Reduce : invalid root 2") != std::string::npos);
  CHECK(ncclReduce(x, x, 4, ncclBfloat16, ncclSum, 0, comm, nullptr) == ncclInvalidArgument);
  CHECK(ncclReduce(nullptr, x, 4, ncclFloat32, ncclSum, 0, comm, nullptr) == ncclInvalidArgument);
  CHECK(ncclReduce(x, nullptr, 4, ncclFloat32, ncclSum, rank(), comm, nullptr) == ncclInvalidArgument);  // the root's
  CHECK(last_error().find("recvbuff") != std::string::npos);
  CHECK(ncclAllReduce(x, x, size_t{1} << 31, ncclFloat32, ncclSum, comm, nullptr) == ncclInvalidArgument);
  CHECK(ncclAllReduce(x, x, 4, ncclFloat32, ncclSum, nullptr, nullptr) == ncclInvalidArgument);
  ncclResult_t state = ncclInternalError;
  CHECK(ncclCommGetAsyncError(comm, &state) == ncclSuccess);
  CHECK(state == ncclSuccess);  // a refused call leaves the communicator as it was
  // ... and it still works, on both ranks
  REQUIRE(ncclAllReduce(x, x, 4, ncclFloat32, ncclSum, comm, nullptr) == ncclSuccess);
  CHECK(x[3] == 8);
  CHECK(ncclCommAbort(comm) == ncclSuccess);
  CHECK(ncclCommGetAsyncError(comm, &state) == ncclInvalidUsage);  // aborted
}

TEST_CASE("emulated NCCL: a non-blocking collective stays ncclInProgress until every rank joins") {
  ncclComm_t comm = make_comm(false);
  std::vector<double> x{1.0 + rank(), 10.0};
  int go = 0;
  if (rank() == 0) {
    // Rank 1 waits for our message before it joins: the all_reduce cannot have completed.
    REQUIRE(ncclAllReduce(x.data(), x.data(), 2, ncclFloat64, ncclSum, comm, nullptr) == ncclInProgress);
    ncclResult_t state = ncclSuccess;
    CHECK(ncclCommGetAsyncError(comm, &state) == ncclSuccess);
    CHECK(state == ncclInProgress);
    // Using the communicator before its state left ncclInProgress is refused, as ncclCommEnsureReady does.
    CHECK(ncclAllReduce(x.data(), x.data(), 2, ncclFloat64, ncclSum, comm, nullptr) == ncclInvalidArgument);
    CHECK(last_error().find("before the previous operation") != std::string::npos);
    MPI_Send(&go, 1, MPI_INT, 1, 0, MPI_COMM_WORLD);
  } else {
    MPI_Recv(&go, 1, MPI_INT, 0, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    const ncclResult_t r = ncclAllReduce(x.data(), x.data(), 2, ncclFloat64, ncclSum, comm, nullptr);
    CHECK((r == ncclSuccess || r == ncclInProgress));
  }
  CHECK(settle(comm) == ncclSuccess);
  CHECK(x == std::vector<double>{3, 20});
  CHECK(ncclCommDestroy(comm) == ncclSuccess);
}
