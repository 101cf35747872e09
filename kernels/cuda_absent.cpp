// A build without a CUDA backend: no CUDA device answers. Removed once kernels/cuda exists.
#include "core/device_backend.h"

namespace reel {
int cuda_backend_device_count() { return 0; }
DeviceBackend* cuda_backend(int) { return nullptr; }
}  // namespace reel
