// A build without a CUDA backend: no CUDA device answers, and there is no meta device (it runs the
// CUDA backend dry: kernels/meta.h).
#include "core/error.h"
#include "kernels/device_backends.h"
#include "kernels/meta.h"

namespace reel::kernels {
int cuda_backend_device_count() { return 0; }
DeviceBackend* cuda_backend(int) { return nullptr; }
DeviceBackend* meta_backend() { return nullptr; }
MetaScope::MetaScope() { REEL_FAIL("device meta: this build has no meta device (it needs the emulated CUDA backend)"); }
MetaScope::~MetaScope() = default;
}  // namespace reel::kernels
