// distributed's NCCL backend (distributed/nccl_backend.h) on its own, without a launcher: a communicator of one
// rank on cuda:0 and every collective reel issues through it, out of place, so a collective that
// does nothing leaves zeros and fails. The same lines run on the emulated NCCL (CI: the world of
// one is MPI's singleton, MPI_Init without mpirun, since the emulation runs over MPI) and on the
// real libnccl (tools/gpu_check.sh on a GPU, where the build may have no MPI at all: then CMake
// compiles distributed/nccl_backend.cpp into this program instead of linking reel_distributed).
// With the real NCCL a second case asks for two ranks on one device (ncclCommInitAll on cuda:0
// twice, one rank on reel's compute stream, the other on its copy stream): NCCL refuses that
// ("Duplicate GPU detected"), which the case prints as "two ranks on one device: refused by
// NCCL"; where NCCL accepts it, the all-reduce of the two ranks is checked.
#include <chrono>
#include <cstdio>
#include <thread>

#include "core/stream.h"
#include "distributed/nccl.h"
#include "distributed/nccl_backend.h"
#include "testing.h"
#if defined(REEL_DIST_NCCL_EMULATED)
#include <mpi.h>
#endif

using namespace reel;
namespace nccl = reel::distributed::nccl;

REEL_TEST_REQUIRES_CUDA();

namespace {

// Polls until the communicator's last call has finished (non-blocking communicators), or fails
// the test after 60 s instead of hanging.
void wait_ready(nccl::Comm& comm) {
  const auto start = std::chrono::steady_clock::now();
  while (!comm.ready()) {
    REQUIRE_MESSAGE(std::chrono::steady_clock::now() - start < std::chrono::seconds(60),
                    "the NCCL communicator stayed ncclInProgress for 60 s");
    std::this_thread::yield();
  }
}

// Waits for everything enqueued on cuda:0's compute stream, through an nccl::Event as
// ProcessGroup does.
void wait_done(nccl::Comm& comm) {
  wait_ready(comm);
  nccl::Event event;
  event.record(comm.device());
  while (!event.done()) std::this_thread::yield();
}

}  // namespace

TEST_CASE("NCCL, a world of one without a launcher: every collective of reel's backend on cuda:0") {
#if defined(REEL_DIST_NCCL_EMULATED)
  int initialised = 0;
  MPI_Initialized(&initialised);
  if (!initialised) {
    MPI_Init(nullptr, nullptr);  // the singleton: a world of one, no mpirun
    std::atexit([] { MPI_Finalize(); });
  }
#endif
  REQUIRE(nccl::built());
  MESSAGE("NCCL world of one: ", nccl::version());
  const Device cuda = Device::cuda(0);
  nccl::Comm comm(nccl::unique_id(), 1, 0, 0);
  wait_ready(comm);
  for (const DType dtype : {DType::f32, DType::f64, DType::i32, DType::i64}) {
    CAPTURE(dtype);
    const Tensor send = arange(1, 7, 1, dtype, cuda);  // 1..6: a collective that does nothing leaves zeros
    const Tensor recv = zeros({6}, dtype, cuda);
    comm.all_reduce(send.data_ptr(), recv.data_ptr(), 6, dtype, distributed::ReduceOp::Sum);
    wait_done(comm);
    reel::testing::check_close(recv, {1, 2, 3, 4, 5, 6}, 0, 0);
    if (dtype == DType::f32 || dtype == DType::f64) {
      const Tensor avg = zeros({6}, dtype, cuda);
      comm.all_reduce(send.data_ptr(), avg.data_ptr(), 6, dtype, distributed::ReduceOp::Average);
      wait_done(comm);
      CHECK(comm.average_scale(1) == 1.0);
      reel::testing::check_close(avg, {1, 2, 3, 4, 5, 6}, 0, 0);
    }
    const Tensor scattered = zeros({6}, dtype, cuda);
    comm.reduce_scatter(send.data_ptr(), scattered.data_ptr(), 6, dtype, distributed::ReduceOp::Sum);
    wait_done(comm);
    reel::testing::check_close(scattered, {1, 2, 3, 4, 5, 6}, 0, 0);
    const Tensor gathered = zeros({6}, dtype, cuda);
    comm.all_gather(send.data_ptr(), gathered.data_ptr(), 6, dtype);
    wait_done(comm);
    reel::testing::check_close(gathered, {1, 2, 3, 4, 5, 6}, 0, 0);
    const Tensor root = send.clone();
    comm.broadcast(root.data_ptr(), 6, dtype, 0);
    wait_done(comm);
    reel::testing::check_close(root, {1, 2, 3, 4, 5, 6}, 0, 0);
    const Tensor reduced = zeros({6}, dtype, cuda);
    comm.reduce(send.data_ptr(), reduced.data_ptr(), 6, dtype, distributed::ReduceOp::Sum, 0);
    wait_done(comm);
    reel::testing::check_close(reduced, {1, 2, 3, 4, 5, 6}, 0, 0);
  }
}

#if REEL_DIST_NCCL && !defined(REEL_DIST_NCCL_EMULATED)
TEST_CASE("NCCL, two ranks on one device (one process): refused by NCCL, or a correct all-reduce") {
  const Device cuda = Device::cuda(0);
  make_device_current(cuda);
  ncclComm_t comms[2] = {nullptr, nullptr};
  int devices[2] = {0, 0};
  const ncclResult_t r = ncclCommInitAll(comms, 2, devices);
  if (r != ncclSuccess) {
    const char* last = ncclGetLastError(nullptr);
    std::printf("two ranks on one device: refused by NCCL: %s (%s)\n", ncclGetErrorString(r), last ? last : "");
    CHECK(r == ncclInvalidUsage);  // "Duplicate GPU detected": any other failure is a real one
    return;
  }
  // Rank 0 on the compute stream, rank 1 on the copy stream: a group call launches both.
  const Stream streams[2] = {Stream::compute(cuda), Stream::copy(cuda)};
  const Tensor send[2] = {tensor({1, 2, 3, 4}, cuda), tensor({0, 10, 20, 30}, cuda)};
  const Tensor recv[2] = {zeros({4}, DType::f32, cuda), zeros({4}, DType::f32, cuda)};
  REQUIRE(ncclGroupStart() == ncclSuccess);
  for (int i = 0; i < 2; ++i)
    REQUIRE(ncclAllReduce(send[i].data_ptr(), recv[i].data_ptr(), 4, ncclFloat32, ncclSum, comms[i],
                          static_cast<cudaStream_t>(streams[i].native())) == ncclSuccess);
  REQUIRE(ncclGroupEnd() == ncclSuccess);
  for (const Stream& s : streams) s.synchronize();
  std::printf("two ranks on one device: accepted by NCCL, all-reduce checked\n");
  for (const Tensor& t : recv) reel::testing::check_close(t, {1, 12, 23, 34}, 0, 0);
  for (ncclComm_t c : comms) ncclCommDestroy(c);
}
#endif
