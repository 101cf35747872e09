// optim::Lazy (see lazy_scalar.h): the device value, read or waited for on the first get().
#include "optim/lazy_scalar.h"

#include <deque>
#include <optional>
#include <utility>

#include "core/stream.h"

namespace reel::optim {

namespace {
// A copy back still in flight when its value was dropped unread (a window's result nobody logged):
// its pinned buffer and source must outlive the copy (core/stream.h's rule), so they wait here,
// without the host waiting, until a later copied_back() finds the copy done (Event::query).
struct InFlight {
  Tensor source;
  PinnedBuffer pinned;
  Event copied;
};
std::deque<InFlight>& in_flight() {
  static thread_local std::deque<InFlight> list;
  return list;
}
void release_done() {
  std::deque<InFlight>& list = in_flight();
  while (!list.empty() && list.front().copied.query()) list.pop_front();  // in the order enqueued
}
}  // namespace

template <typename T>
struct Lazy<T>::State {
  Tensor source;  // one element (a view of the device tensor); undefined once detached
  bool negate = false;
  bool async = false;  // copied_back: pinned and copied hold it
  PinnedBuffer pinned;
  Event copied;
  std::optional<T> cached;
  ~State() {
    if (async && !cached && !copied.query())
      in_flight().push_back({std::move(source), std::move(pinned), std::move(copied)});
  }
};

template <typename T>
Lazy<T> Lazy<T>::on_device(const Tensor& source, int64_t index, bool negate) {
  REEL_CHECK(source.defined() && index >= 0 && index < source.numel(), "Lazy: element ", index, " of a tensor of ",
             source.numel(), " elements");
  Lazy out;
  out.state_ = std::make_shared<State>();
  out.state_->source = untracked::slice(untracked::reshape(source, {source.numel()}), 0, index, index + 1);
  out.state_->negate = negate;
  return out;
}

namespace {
// s.source (one f64 element on a device) copied into a new pinned buffer on the device's copy
// stream, after the work enqueued so far on its compute stream (which writes it).
template <typename State>
void start_copy_back(State& s) {
  const Device device = s.source.device();
  release_done();
  s.async = true;
  s.pinned = PinnedBuffer(sizeof(double), device);
  Event computed(device);
  computed.record(Stream::compute(device));  // source is written by the work before this point
  const Stream copy = Stream::copy(device);
  copy.wait(computed);
  copy_async(s.source, s.pinned, copy);
  s.copied = copy.record();
}
}  // namespace

template <typename T>
Lazy<T> Lazy<T>::copied_back(const Tensor& source) {
  REEL_CHECK(source.defined() && source.numel() == 1 && source.dtype() == DType::f64 && source.is_contiguous(),
             "Lazy::copied_back: one contiguous f64 element expected, got ", source.shape(), " ", source.dtype());
  Lazy out = on_device(source, 0);
  if (source.device().is_cpu()) return out;  // host memory already
  start_copy_back(*out.state_);
  return out;
}

template <typename T>
void Lazy<T>::detach() const {
  if (!state_) return;  // a host value
  State& s = *state_;
  if (!s.source.defined()) return;  // detached already
  const Device device = s.source.device();
  if (s.cached || device.is_cpu()) {  // read already, or host memory: read now (no wait), keep the value
    get();
    s.source = Tensor();
    return;
  }
  if (!s.async) {
    REEL_CHECK(s.source.dtype() == DType::f64, "Lazy::detach: a device value of one f64 element expected, got ",
               s.source.dtype(), " on ", device);
    start_copy_back(s);
  }
  Stream::compute(device).wait(s.copied);  // whatever reuses the tensor's memory runs after the copy
  s.source = Tensor();
}

template <typename T>
T Lazy<T>::get() const {
  if (!state_) return value_;
  State& s = *state_;
  if (!s.cached) {
    double v;
    if (s.async) {
      s.copied.synchronize();
      v = s.pinned.template data_as<double>()[0];
    } else {
      v = s.source.item();
    }
    if constexpr (std::is_same_v<T, bool>) s.cached = (v != 0) != s.negate;
    else s.cached = static_cast<T>(v);
  }
  return *s.cached;
}

template <typename T>
bool Lazy<T>::known() const {
  return !state_ || state_->cached.has_value();
}

template class Lazy<double>;
template class Lazy<bool>;

}  // namespace reel::optim
