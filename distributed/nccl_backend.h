// distributed's NCCL backend, as plain C++ for distributed/process_group.cpp (no CUDA or NCCL header here): one
// NCCL communicator per cuda device, its collectives enqueued on the device's compute stream
// (core/stream.h, where the kernels run too), and an event recorded there after each so that a
// Work can tell when it is done without blocking. The same code runs on the real NCCL (nvcc build) and on the emulated
// one (distributed/nccl.h); in a build with neither, built() is false and nothing else may be called.
//
// Every NCCL or CUDA call is checked: a failure raises reel::Error "<call>: <ncclGetErrorString>
// (<ncclGetLastError>)". Communicators are non-blocking (config.blocking = 0): a call may leave the
// communicator ncclInProgress, and nothing else may be issued to it or to the stream until
// ready() says so. ProcessGroup polls ready() and done() against its timeout and calls abort() when
// it passes, so a rank that never joins ends in a clear error instead of a hang.
#pragma once
#include <array>
#include <cstddef>
#include <memory>

#include "core/stream.h"
#include "core/tensor.h"
#include "distributed/process_group.h"

namespace reel::distributed::nccl {

// Whether this build has NCCL (the real library, or the emulation).
bool built();
// "NCCL 2.28.9" or "emulated NCCL 2.28.9 (over MPI)": for messages.
std::string version();

using Id = std::array<char, 128>;  // an ncclUniqueId's bytes, as they travel over MPI
Id unique_id();                    // ncclGetUniqueId

class Comm {
 public:
  // Starts ncclCommInitRankConfig on cuda device `device` (made current first); poll ready().
  Comm(const Id& id, int nranks, int rank, int device);
  ~Comm();  // ncclCommDestroy unless aborted (errors ignored: it runs at exit)
  Comm(const Comm&) = delete;
  Comm& operator=(const Comm&) = delete;

  // ncclCommGetAsyncError: false while the last call is ncclInProgress; raises on an async error.
  bool ready();
  // ncclCommAbort: the communicator and everything in flight on it end; nothing may be called after.
  void abort();
  bool aborted() const { return aborted_; }
  int device() const { return device_; }

  // The collectives, on reel's stream; counts are elements of `dtype` (f32, f64, i32, i64).
  // Average is ncclAvg where the library has it (NCCL >= 2.10), else reel scales the sum (scale()).
  void all_reduce(const void* send, void* recv, size_t count, DType dtype, ReduceOp op);
  void reduce_scatter(const void* send, void* recv, size_t recv_count, DType dtype, ReduceOp op);
  void all_gather(const void* send, void* recv, size_t send_count, DType dtype);
  void broadcast(void* buffer, size_t count, DType dtype, int root);
  // recv is written on root only (the others' is not touched; they may pass send).
  void reduce(const void* send, void* recv, size_t count, DType dtype, ReduceOp op, int root);
  // The factor the caller must still apply to an Average's result (1 with ncclAvg).
  static double average_scale(int nranks);

 private:
  // ncclComm_t. [[maybe_unused]]: a build without NCCL compiles the stubs, which never touch it.
  [[maybe_unused]] void* comm_ = nullptr;
  int device_ = 0;
  bool aborted_ = false;
};

// An event on the compute stream, recorded after a collective's enqueue (a reel::Event, bound to
// the device at its record).
class Event {
 public:
  void record(int device);  // on the compute stream of cuda:device
  bool done();              // true once everything before the record has run (never blocks)

 private:
  reel::Event event_;
};

}  // namespace reel::distributed::nccl
