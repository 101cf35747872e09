// examples/batch_upload.h: a training batch's host arrays uploaded into device tensors that keep
// their address from step to step, without the host waiting for the device (a blocking copy from
// pageable host memory synchronizes the stream first: one host sync per tensor per step).
//
//   examples::BatchUpload upload;
//   const Tensor xy = upload.put(0, host_xy.data(), {2, b, T}, DType::i32, device);  // slot 0's (2, b, T)
//
// Each slot (one per micro-batch of a window: their batches are alive together) owns a pinned host
// buffer and a device tensor. put() writes the host bytes into the pinned buffer, then enqueues on
// the device's copy stream, after everything enqueued so far on the compute stream (the last step's
// kernels that read the tensor), the copy into the tensor, and makes the compute stream wait for it.
// The host waits only when it is about to rewrite (or free) a pinned buffer whose last copy has not
// run yet (it ran ahead of the device by a whole window): query() first, synchronize() only then. The
// tensor's address never changes for a slot of the same shape (what a captured CUDA graph needs).
// On cpu the copy is done when put() returns.
#pragma once
#include <cstring>
#include <memory>
#include <vector>

#include "core/stream.h"
#include "reel.h"

namespace examples {

class BatchUpload {
 public:
  // Slot `slot`'s device tensor of `shape` and `dtype` on `device`, holding the bytes at `host`
  // (shape's numel x dtype size of them) once the compute stream reaches the work enqueued next.
  reel::Tensor put(size_t slot, const void* host, const reel::Shape& shape, reel::DType dtype, reel::Device device) {
    if (slots_.size() <= slot) slots_.resize(slot + 1);
    Slot& s = slots_[slot];
    if (!s.device.defined() || s.device.shape() != shape || s.device.dtype() != dtype || s.device.device() != device) {
      settle(s);  // the old pinned buffer goes back to the pool: its copy must have run
      s.device = reel::empty(shape, dtype, device);
      s.host = reel::PinnedBuffer(s.device.nbytes(), device);
    }
    settle(s);  // the host is about to rewrite the pinned buffer
    // (meta's pinned pages are read-only zeros: a dry run copies nothing, so nothing is written)
    if (!device.is_meta()) std::memcpy(s.host.data(), host, s.host.bytes());
    const reel::Stream compute = reel::Stream::compute(device), copy = reel::Stream::copy(device);
    copy.wait(compute.record());  // the kernels that read the tensor's last batch come first
    reel::copy_async(s.host, s.device, copy);
    s.copied = std::make_unique<reel::Event>(copy.record());
    compute.wait(*s.copied);
    return s.device;
  }
  BatchUpload() = default;
  BatchUpload(const BatchUpload&) = delete;
  BatchUpload& operator=(const BatchUpload&) = delete;
  ~BatchUpload() {
    for (Slot& s : slots_) settle(s);  // a copy still reading a pinned buffer outlives nothing
  }

 private:
  struct Slot {
    reel::PinnedBuffer host;
    reel::Tensor device;
    std::unique_ptr<reel::Event> copied;  // recorded on the copy stream after the last copy
  };
  std::vector<Slot> slots_;

  // Waits (a host sync) only if the slot's last copy has not run yet: on a GPU, when the host is a
  // whole window ahead of the device; in the emulated build the compute stream's wait ran it.
  static void settle(Slot& s) {
    if (s.copied && !s.copied->query()) s.copied->synchronize();
  }
};

}  // namespace examples
