// optim/lazy_scalar.h: a value of the accumulation window (optim/accumulator.h's WindowResult: the
// loss, the gradient norm, whether the window was skipped) that stays where it was computed, on
// the device, until someone reads it: a training step that nobody logs waits for nothing (as a
// PyTorch loss tensor read with .item() only on log lines).
//
//   WindowResult r = acc.step(batches, count, loss);   // no host read inside
//   if (step % 100 == 0) std::printf("loss %.4f\n", r.loss.get());   // the host waits here, once
//
// Three sources: a host value (known at once); element `index` of a device tensor, copied to the
// host on the first read (the host waits for the work enqueued so far); or a device value copied
// back asynchronously when it was made (copied_back: pinned memory and an event, core/stream.h),
// whose read waits for that copy only (one dropped unread keeps its buffer until the copy is done,
// without waiting for it). The first read is kept: later reads are free. detach() lets go of the
// device tensor (copied back first where it was not). Copies share
// the value (a WindowResult copied around reads its device once). On the meta device the read
// gives its placeholder (0, false), as any meta value (kernels/meta.h).
#pragma once
#include <cstdint>
#include <memory>

#include "core/tensor.h"

namespace reel::optim {

template <typename T>  // double or bool
class Lazy {
 public:
  Lazy() = default;
  Lazy(T value) : value_(value) {}  // NOLINT(google-explicit-constructor): a host value, known now

  // Element `index` of `source` (any dtype), read when asked; negate: a bool read as !(value != 0).
  static Lazy on_device(const Tensor& source, int64_t index, bool negate = false);
  // Element 0 of `source` (f64, one element), copied to pinned host memory now, on its device's
  // copy stream after the work enqueued so far on its compute stream; a host tensor is read directly.
  static Lazy copied_back(const Tensor& source);

  // Lets go of the device memory it reads, keeping the value: one read from a device tensor on the
  // first get() (on_device: a replayed CUDA graph's static output, which the next replay
  // overwrites) is copied back now, as copied_back() does (on the copy stream, after the work
  // enqueued so far on the compute stream); then the device's compute stream waits for that copy
  // (a wait on the device: no host sync), so the tensor may be overwritten or freed, its block
  // reused, as soon as this returns. A value read already, or a host tensor's, is kept on the host.
  // For values kept until a later log line (an epoch's window losses) that would otherwise hold a
  // device block each (a warm cache short of one at a graph's capture) or read a static output
  // after the next replay. A device value must be one f64 element (reel::Error otherwise). Copies
  // share it: every copy of this Lazy reads the copied value.
  void detach() const;

  T get() const;
  operator T() const { return get(); }  // NOLINT(google-explicit-constructor): reads as the value it stands for
  // Whether get() would not wait for the device (a host value, or one read already).
  bool known() const;

 private:
  struct State;
  std::shared_ptr<State> state_;  // null: value_
  T value_{};
};

extern template class Lazy<double>;
extern template class Lazy<bool>;

}  // namespace reel::optim
