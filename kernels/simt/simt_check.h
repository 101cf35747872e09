// kernels/simt/simt_check.h: the engine's side of the checker behind SIMT_CHECK=race,uninit
// (simt_check.cpp; how it works: kernels/simt/README.md, "Race and uninitialised-memory checks").
// Internal to kernels/simt: the engine (simt_runtime.cpp) tells the checker which fiber runs and
// when barriers and warp rounds complete; the compiler's -fsanitize=thread instrumentation of the
// .cu files tells it every load and store.
#pragma once
#include <cstddef>
#include <cstdint>

#include "simt.h"

namespace simt {
namespace detail {
namespace check {

// Per worker thread, for one launch with checks on (all cheap no-ops unless launch_begin ran).
void launch_begin(unsigned checks, dim3 block, void* dynamic_smem, size_t shmem);
void launch_end();
void block_begin(uint3 block_idx);
void fiber_enter(unsigned linear, const char* stack, size_t stack_size);  // before a fiber runs
void fiber_leave();
void block_barrier();  // a __syncthreads() opened: what came before is ordered before what follows
void warp_round(unsigned warp, unsigned active);  // a warp round of these lanes completed

// The cudaMalloc block (simt_api.cpp) that holds address: its start and size; false if none.
bool find_allocation(uintptr_t address, uintptr_t* base, size_t* size);

// In the launching thread, around the whole grid. grid_begin returns the checks this launch runs.
unsigned grid_begin();
// cudaSuccess, or cudaErrorLaunchFailure when a check failed (its report: last_error_detail()).
cudaError_t grid_end();

}  // namespace check
}  // namespace detail
}  // namespace simt
