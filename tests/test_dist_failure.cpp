// A failing rank must not leave the others waiting (run under mpirun -np 2 by tests/CMakeLists.txt,
// which checks the output and that the job ends well before CTest's timeout):
//   timeout       rank 1 never joins rank 0's all_reduce (it sleeps past the test's timeout): rank
//                 0's collective times out (REEL_DIST_TIMEOUT_S=2) with a reel::Error naming the
//                 collective, the tensor's shape and the rank, and the uncaught error ends the whole
//                 job (MPI_Abort);
//   nccl_timeout  the same through NCCL on cuda:0 (builds with NCCL and a device): both ranks
//                 create the communicator with a first all_reduce, then rank 1 never joins the
//                 second; rank 0 polls the communicator and the CUDA event until the timeout, aborts
//                 the communicator (ncclCommAbort) and fails the same way;
//   throw         rank 1 throws an exception nobody catches before the all_reduce: its terminate
//                 handler reports it and ends the job, so rank 0 does not wait for its timeout;
//   fsdp_throw    under FSDP stage 3 (distributed/fsdp.h), rank 1 throws in the middle of a forward, from a
//                 hook that runs before its second unit's all-gather, while rank 0 waits in that
//                 gather: rank 1's terminate handler ends the job with its message;
//   fsdp_timeout  the same, rank 1 stuck there instead: rank 0's all-gather times out, naming it.
// Not a doctest suite: the job is meant to end in MPI_Abort.
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>

#include "core/error.h"
#include "core/tensor.h"
#include "distributed/fsdp.h"
#include "distributed/process_group.h"
#include "nn/layers.h"
#include "nn/sequential.h"

int main(int argc, char** argv) {
  using reel::distributed::ProcessGroup;
  const std::string mode = argc == 2 ? argv[1] : "";
  if (mode != "timeout" && mode != "nccl_timeout" && mode != "throw" && mode != "fsdp_throw" &&
      mode != "fsdp_timeout") {
    std::fprintf(stderr, "usage: %s timeout|nccl_timeout|throw|fsdp_throw|fsdp_timeout (under mpirun -np 2)\n",
                 argv[0]);
    return 2;
  }
  ProcessGroup& g = ProcessGroup::world();
  if (g.size() != 2) {
    std::fprintf(stderr, "run under mpirun -np 2\n");
    return 2;
  }
  reel::Device device = reel::Device::cpu();
  if (mode == "nccl_timeout") {
    if (!reel::cuda_available() || !ProcessGroup::nccl_built() || g.cuda_path() != reel::distributed::CudaPath::Nccl) {
      std::fprintf(stderr, "no NCCL path to cuda:0 in this build or on this machine\n");
      return 2;
    }
    device = reel::Device::cuda(0);
    g.all_reduce(reel::zeros({2}, reel::DType::f32, device));  // both ranks: the communicator exists
  }
  if (mode == "fsdp_throw" || mode == "fsdp_timeout") {
    // Two units: Linear(4, 4) twice; rank 1's hook on the second runs before FSDP's gather there.
    auto model = std::make_shared<reel::nn::Sequential>(std::vector<std::shared_ptr<reel::nn::Module>>{
        std::make_shared<reel::nn::Linear>(4, 4), std::make_shared<reel::nn::Linear>(4, 4)});
    if (g.rank() == 1)
      (*model)[1].register_forward_pre_hook([&](reel::nn::Module&, const reel::Tensor&) {
        if (mode == "fsdp_throw") throw reel::Error("rank 1 failed in the forward of unit 1");
        std::this_thread::sleep_for(std::chrono::seconds(600));  // stuck: only the abort ends it
      });
    reel::distributed::FullyShardedDataParallel fsdp(*model, {&(*model)[0], &(*model)[1]}, {});
    (*model)(reel::zeros({2, 4}, reel::DType::f32));  // rank 0 waits in unit 1's all-gather
    std::printf("rank %d: the forward completed\n", g.rank());
    return 0;
  }
  if (g.rank() == 1) {
    if (mode == "throw") throw reel::Error("a bad batch on rank 1");
    std::this_thread::sleep_for(std::chrono::seconds(600));  // stuck: only the abort ends it
    return 0;
  }
  g.all_reduce(reel::zeros({3, 4}, reel::DType::f32, device));  // never completes
  std::printf("rank 0: the all_reduce completed without rank 1\n");
  return 0;
}
