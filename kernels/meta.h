// The meta device (core/device.h): a CUDA device that computes nothing. Its backend is the CUDA
// backend run dry, over memory that is address ranges only: every call of the CUDA backend (a
// kernel entry point dispatched to a meta tensor, a fill, a copy, the random numbers) runs the
// same host code as on cuda:0, so it allocates the same outputs, temporaries and workspaces in the
// same order, and the profiler records the same kernels with the same costs, while the emulator
// (kernels/simt, simt::DryRun) launches no thread, computes no cuBLAS or cuDNN call and moves no
// byte. Its pinned host side (pinned_allocator(Device::meta()), where offload copies go) is zero
// pages reserved and never written, so a dry run's offloaded bytes are counted but cost nothing.
// A copy to the host reads zeros: the placeholder of every meta value (item() of a meta loss
// is 0, a non-finite check finds nothing, a norm is 0). The CUDA code that reads a result back to
// decide (kernels/cuda/index_errors.h's range checks, cross_entropy's count of targets not
// ignored) asks is_meta() first: no index was read, so none is out of range, and every target counts.
//
// It exists in the emulated build (the default, REEL_CUDA=OFF), whose CUDA code runs on the host;
// an nvcc build has no meta device (backend_for(Device::meta()) says so): its CUDA code would
// launch real kernels on unbacked addresses.
#pragma once
#include "core/device_backend.h"

namespace reel::kernels {

// The meta device's backend; nullptr in a build that has none.
DeviceBackend* meta_backend();

// While alive on this thread, the CUDA backend runs dry (what the dispatch of a kernel entry point
// opens around the CUDA kernel of a meta tensor: kernels/dispatch.h). reel::Error in a build
// without the meta device.
class MetaScope {
 public:
  MetaScope();
  ~MetaScope();
  MetaScope(const MetaScope&) = delete;
  MetaScope& operator=(const MetaScope&) = delete;
};

}  // namespace reel::kernels
