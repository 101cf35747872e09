// The device backends kernels provides to core (core/device_backend.h), and their registration.
#pragma once
#include "core/device_backend.h"

namespace reel::kernels {

// kernels/cpu/cpu_backend.cpp
DeviceBackend& cpu_backend();
// kernels/cpu/roof.cpp: the host's memory and compute roof, measured by a short calibration (a
// stream-style copy and a large GEMM on every core); the CPU backend's roof() and the emulator's.
profile::Roof measure_cpu_roof();
// kernels/cuda/backend.cu (or kernels/cuda_absent.cpp in a build without a CUDA backend): the
// number of CUDA devices that answer, and the backend of one of them (nullptr if none).
int cuda_backend_device_count();
DeviceBackend* cuda_backend(int index);

// Hands them to core. Programs linking reel::reel get this call before main (reel.cpp).
void register_device_backends();

}  // namespace reel::kernels
