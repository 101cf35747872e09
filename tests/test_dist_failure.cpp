// A failing rank must not leave the others waiting (run under mpirun -np 2 by tests/CMakeLists.txt,
// which checks the output and that the job ends well before CTest's timeout):
//   timeout  rank 1 never joins rank 0's all_reduce (it sleeps past the test's timeout): rank 0's
//            collective times out (REEL_DIST_TIMEOUT_S=2) with a reel::Error naming the collective,
//            the tensor's shape and the rank, and the uncaught error ends the whole job (MPI_Abort);
//   throw    rank 1 throws an exception nobody catches before the all_reduce: its terminate handler
//            reports it and ends the job, so rank 0 does not wait for its timeout.
// Not a doctest suite: the job is meant to end in MPI_Abort.
#include <chrono>
#include <cstdio>
#include <cstring>
#include <thread>

#include "core/error.h"
#include "dist/process_group.h"

int main(int argc, char** argv) {
  using reel::dist::ProcessGroup;
  if (argc != 2 || (std::strcmp(argv[1], "timeout") != 0 && std::strcmp(argv[1], "throw") != 0)) {
    std::fprintf(stderr, "usage: %s timeout|throw (under mpirun -np 2)\n", argv[0]);
    return 2;
  }
  ProcessGroup& g = ProcessGroup::world();
  if (g.size() != 2) {
    std::fprintf(stderr, "run under mpirun -np 2\n");
    return 2;
  }
  const bool timeout = std::strcmp(argv[1], "timeout") == 0;
  if (g.rank() == 1) {
    if (!timeout) throw reel::Error("a bad batch on rank 1");
    std::this_thread::sleep_for(std::chrono::seconds(600));  // stuck: only the abort ends it
    return 0;
  }
  g.all_reduce(reel::zeros({3, 4}));  // never completes
  std::printf("rank 0: the all_reduce completed without rank 1\n");
  return 0;
}
