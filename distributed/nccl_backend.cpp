// distributed's NCCL backend (see nccl_backend.h): the only file that calls NCCL, against distributed/nccl.h, so
// that the real library and the emulation run the same lines. Plain host C++: the device, its
// stream and the events come from core's stream API (core/stream.h), not from kernels/cuda.
#include "distributed/nccl_backend.h"

#include <algorithm>
#include <chrono>
#include <string>
#include <thread>

#include "distributed/nccl.h"

namespace reel::distributed::nccl {

#if REEL_DIST_NCCL

namespace {

// reel::Error "<call>: <ncclGetErrorString> (<ncclGetLastError>)" unless r is ncclSuccess or,
// where the call may leave the communicator in progress, ncclInProgress.
void check(ncclResult_t r, const char* call, bool in_progress_ok = false) {
  if (r == ncclSuccess || (in_progress_ok && r == ncclInProgress)) return;
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 13, 0)
  const char* last = ncclGetLastError(nullptr);
#else
  const char* last = nullptr;  // ncclGetLastError arrived in NCCL 2.13
#endif
  REEL_FAIL(call, ": ", ncclGetErrorString(r), (last && *last) ? std::string(" (") + last + ")" : std::string());
}
#define REEL_NCCL_CHECK(call) check((call), #call, true)

ncclDataType_t nccl_type(DType t) {
  switch (t) {
    case DType::f32: return ncclFloat32;
    case DType::f64: return ncclFloat64;
    case DType::i32: return ncclInt32;
    case DType::i64: return ncclInt64;
    case DType::f16: return ncclFloat16;
    case DType::bf16:
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 10, 0)
      return ncclBfloat16;
#else
      break;  // NCCL's bf16 arrived in 2.10
#endif
  }
  REEL_FAIL("dist: dtype ", t, " has no NCCL type");
}

// ncclAvg arrived in NCCL 2.10; before it an average is a sum that reel scales afterwards.
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 10, 0)
constexpr bool kHasAvg = true;
ncclRedOp_t nccl_op(ReduceOp op) { return op == ReduceOp::Average ? ncclAvg : ncclSum; }
#else
constexpr bool kHasAvg = false;
ncclRedOp_t nccl_op(ReduceOp) { return ncclSum; }
#endif

ncclComm_t handle(void* comm) { return static_cast<ncclComm_t>(comm); }

// reel's compute stream of cuda:`device`, made current: where every collective is enqueued, in
// order with the kernels that produce and consume its buffers.
cudaStream_t compute_stream(int device) {
  const Stream stream = Stream::compute(Device::cuda(device));
  make_device_current(stream.device());
  return static_cast<cudaStream_t>(stream.native());
}

}  // namespace

bool built() { return true; }

std::string version() {
  int v = 0;
  check(ncclGetVersion(&v), "ncclGetVersion");
  const std::string number = std::to_string(v / 10000) + "." + std::to_string(v / 100 % 100) + "." +
                             std::to_string(v % 100);
#if defined(REEL_DIST_NCCL_EMULATED)
  return "emulated NCCL " + number + " (over MPI)";
#else
  return "NCCL " + number;
#endif
}

Id unique_id() {
  ncclUniqueId id;
  check(ncclGetUniqueId(&id), "ncclGetUniqueId");
  Id out;
  static_assert(sizeof(id.internal) == std::tuple_size<Id>::value, "ncclUniqueId is 128 bytes");
  std::copy(id.internal, id.internal + sizeof(id.internal), out.begin());
  return out;
}

Comm::Comm(const Id& id, int nranks, int rank, int device) : device_(device) {
  make_device_current(Device::cuda(device));
  ncclUniqueId nid;
  std::copy(id.begin(), id.end(), nid.internal);
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;  // ncclInProgress instead of waiting inside a call: the timeout stays ours
  ncclComm_t comm = nullptr;
  check(ncclCommInitRankConfig(&comm, nranks, nid, rank, &config), "ncclCommInitRankConfig", true);
  comm_ = comm;
}

Comm::~Comm() {
  if (!comm_ || aborted_) return;
  // At exit, after every Work completed: finalize (flush what was issued), then destroy. Nobody is
  // left to report an error to; a finalize that does not finish in 10 s is aborted instead.
  const ncclComm_t comm = handle(comm_);
  ncclResult_t state = ncclCommFinalize(comm);
  const auto start = std::chrono::steady_clock::now();
  while (state == ncclInProgress && std::chrono::steady_clock::now() - start < std::chrono::seconds(10)) {
    std::this_thread::yield();
    if (ncclCommGetAsyncError(comm, &state) != ncclSuccess) break;
  }
  if (state == ncclSuccess) (void)ncclCommDestroy(comm);
  else (void)ncclCommAbort(comm);
}

bool Comm::ready() {
  REEL_CHECK(!aborted_, "dist: the NCCL communicator of cuda:", device_, " was aborted");
  ncclResult_t state = ncclSuccess;
  check(ncclCommGetAsyncError(handle(comm_), &state), "ncclCommGetAsyncError");
  if (state == ncclInProgress) return false;
  check(state, "ncclCommGetAsyncError (the communicator's asynchronous error)");
  return true;
}

void Comm::abort() {
  if (aborted_ || !comm_) return;
  aborted_ = true;
  // On a non-blocking communicator the abort may go on in the background (ncclInProgress): reel
  // never uses the communicator again either way.
  check(ncclCommAbort(handle(comm_)), "ncclCommAbort", true);
}

double Comm::average_scale(int nranks) { return kHasAvg ? 1.0 : 1.0 / nranks; }

void Comm::all_reduce(const void* send, void* recv, size_t count, DType dtype, ReduceOp op) {
  REEL_NCCL_CHECK(ncclAllReduce(send, recv, count, nccl_type(dtype), nccl_op(op), handle(comm_), compute_stream(device_)));
}

void Comm::reduce_scatter(const void* send, void* recv, size_t recv_count, DType dtype, ReduceOp op) {
  REEL_NCCL_CHECK(ncclReduceScatter(send, recv, recv_count, nccl_type(dtype), nccl_op(op), handle(comm_),
                                    compute_stream(device_)));
}

void Comm::all_gather(const void* send, void* recv, size_t send_count, DType dtype) {
  REEL_NCCL_CHECK(ncclAllGather(send, recv, send_count, nccl_type(dtype), handle(comm_), compute_stream(device_)));
}

void Comm::broadcast(void* buffer, size_t count, DType dtype, int root) {
  REEL_NCCL_CHECK(ncclBroadcast(buffer, buffer, count, nccl_type(dtype), root, handle(comm_), compute_stream(device_)));
}

void Comm::reduce(const void* send, void* recv, size_t count, DType dtype, ReduceOp op, int root) {
  REEL_NCCL_CHECK(ncclReduce(send, recv, count, nccl_type(dtype), nccl_op(op), root, handle(comm_),
                             compute_stream(device_)));
}

void Event::record(int device) { event_.record(Stream::compute(Device::cuda(device))); }

bool Event::done() { return event_.query(); }

#else  // no NCCL in this build: ProcessGroup never creates a communicator

bool built() { return false; }
std::string version() { return "none"; }
Id unique_id() { REEL_FAIL("dist: this build has no NCCL"); }
Comm::Comm(const Id&, int, int, int) { REEL_FAIL("dist: this build has no NCCL"); }
Comm::~Comm() = default;
bool Comm::ready() { return true; }
void Comm::abort() {}
double Comm::average_scale(int) { return 1; }
void Comm::all_reduce(const void*, void*, size_t, DType, ReduceOp) { REEL_FAIL("dist: this build has no NCCL"); }
void Comm::reduce_scatter(const void*, void*, size_t, DType, ReduceOp) { REEL_FAIL("dist: this build has no NCCL"); }
void Comm::all_gather(const void*, void*, size_t, DType) { REEL_FAIL("dist: this build has no NCCL"); }
void Comm::broadcast(void*, size_t, DType, int) { REEL_FAIL("dist: this build has no NCCL"); }
void Comm::reduce(const void*, void*, size_t, DType, ReduceOp, int) { REEL_FAIL("dist: this build has no NCCL"); }
void Event::record(int) { REEL_FAIL("dist: this build has no NCCL"); }
bool Event::done() { return true; }

#endif

}  // namespace reel::distributed::nccl
