// A build without a CUDA backend: no CUDA device answers.
#include "kernels/device_backends.h"

namespace reel::kernels {
int cuda_backend_device_count() { return 0; }
DeviceBackend* cuda_backend(int) { return nullptr; }
}  // namespace reel::kernels
