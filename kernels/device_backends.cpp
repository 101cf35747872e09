// Registers the CPU, CUDA and meta backends with core (see kernels/device_backends.h).
#include "kernels/device_backends.h"

#include "kernels/meta.h"

namespace reel::kernels {

void register_device_backends() {
  DeviceBackends backends;
  backends.cpu = &cpu_backend();
  backends.cuda_device_count = &cuda_backend_device_count;
  backends.cuda = &cuda_backend;
  backends.meta = &meta_backend;
  reel::register_device_backends(backends);
}

}  // namespace reel::kernels
