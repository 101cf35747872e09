// kernels/cuda/last_block.h: the "last block done" pattern, for a kernel that must end with one
// block's work over what every block of its grid wrote (a reduction's final fold, in the same
// launch instead of a kernel of its own): each block, once its writes are done, takes a ticket
// from a per-device counter; the block that takes the last one sees every other block's writes and
// does the final work, then sets the counter back to 0 for the next launch. No block waits for
// another (no grid-wide barrier, which needs a cooperative launch and which the simt emulator
// cannot run: kernels/simt/README.md), so any block order works, the emulator's included.
//
// The counter: one unsigned per device, cudaMalloc'ed and zeroed at its first use and never freed,
// outside the caching allocator (so no step's memory statistics count its 4 bytes, on cuda as on
// meta, where there is none: a dry run runs no kernel). Every kernel that takes a ticket leaves it
// at 0, and a device's kernels run one after another on its compute stream (the legacy stream; a
// captured CUDA graph is replayed there too), so one counter serves every such launch and every
// replay of a graph that captured one (the graph holds the counter's address, which never changes).
// A graph capture cannot allocate (core/graph.h): the first use must come before it, as every
// capture's eager warm-up makes it; a first use inside a capture raises reel::Error saying so.
#pragma once
#include "core/device.h"
#include "kernels/cuda/launch.h"

namespace reel::kernels::cuda {

// ---- device side -----------------------------------------------------------------------------

// Thread 0 of every block calls it once, after its own writes that the last block reads (writes
// of other threads of the block must be ordered before it by a __syncthreads()). True in exactly
// one block, the last: after a __syncthreads() its threads may read what every block wrote; its
// thread 0 then calls reset_ticket. The fences (release before the ticket, acquire after it) make
// the other blocks' writes visible to the last block: CUDA's threadFenceReduction sample.
__device__ __forceinline__ bool take_last_ticket(unsigned* ticket) {
#if defined(__CUDACC__)
  __threadfence();
  const bool last = atomicAdd(ticket, 1u) == gridDim.x * gridDim.y * gridDim.z - 1;
  __threadfence();
  return last;
#else
  // simt: blocks run on worker threads, and an acquire-release add orders the block's writes before
  // its ticket and the last block's reads after it (g++ refuses a standalone fence under the race
  // checker's -fsanitize=thread instrumentation, as kernels/cuda/index_errors.h notes).
  return __atomic_fetch_add(ticket, 1u, __ATOMIC_ACQ_REL) == gridDim.x * gridDim.y * gridDim.z - 1;
#endif
}

// The last block's thread 0, when done: the counter is 0 again for the next launch.
__device__ __forceinline__ void reset_ticket(unsigned* ticket) { atomicExch(ticket, 0u); }

// ---- host side -------------------------------------------------------------------------------

// The device's ticket counter (kernels/cuda/last_block.cu), allocated and zeroed at the first call
// for that device; null on meta (no kernel runs there, so none reads it).
unsigned* last_block_ticket(Device device);

}  // namespace reel::kernels::cuda
