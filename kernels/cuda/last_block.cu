// kernels/cuda/last_block.cu: the host side of kernels/cuda/last_block.h: each device's ticket
// counter, one unsigned on the device, allocated and zeroed once, at its first use.
#include "kernels/cuda/last_block.h"

#include <mutex>
#include <vector>

namespace reel::kernels::cuda {

unsigned* last_block_ticket(Device device) {
  if (device.is_meta()) return nullptr;
  static std::mutex mutex;
  // Never destroyed: the counters live as long as the process's devices (a static destructor would
  // run after the device runtime may be gone), and a global pointer keeps them reachable, so
  // LeakSanitizer does not take the device memory behind them for a leak at exit.
  static auto* const tickets = new std::vector<unsigned*>();
  std::lock_guard<std::mutex> lock(mutex);
  if (tickets->size() <= static_cast<size_t>(device.index)) tickets->resize(device.index + 1, nullptr);
  unsigned*& ticket = (*tickets)[device.index];
  if (ticket == nullptr) {
    REEL_CHECK(capture_stream() == nullptr, "the last-block ticket counter of ", device,
               " (kernels/cuda/last_block.h) is allocated at its first use, which a CUDA graph capture cannot do: "
               "run the captured work once before capturing it");
    set_device(device);
    void* p = nullptr;
    REEL_CUDA_CHECK(cudaMalloc(&p, sizeof(unsigned)));
    REEL_CUDA_CHECK(cudaMemset(p, 0, sizeof(unsigned)));  // raw, once: no recorded fill
    ticket = static_cast<unsigned*>(p);
  }
  return ticket;
}

}  // namespace reel::kernels::cuda
