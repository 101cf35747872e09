// Anomaly detection: while an autograd::DetectAnomaly scope is alive on a thread, every op's
// outputs (in forward and in a checkpoint replay) and every input gradient its backward rule
// returns are checked for NaN and Inf; the first one raises a reel::Error naming the op, the
// phase, the tape position and which output or gradient it was. It costs one reduction and a
// host sync per tensor checked: a debugging mode, off by default (examples: --detect-anomaly).
//
//   autograd::DetectAnomaly detect;
//   autograd::backward(loss);   // "log: output 0 (4, 3) of node #2 has non-finite values in forward"
#pragma once
#include <cstdint>
#include <memory>

#include "autograd/op.h"

namespace reel::autograd {

class DetectAnomaly {
 public:
  DetectAnomaly();
  ~DetectAnomaly();
  DetectAnomaly(const DetectAnomaly&) = delete;
  DetectAnomaly& operator=(const DetectAnomaly&) = delete;
  static bool enabled();  // on this thread

 private:
  bool previous_;
};

// True when every element of every defined floating tensor is finite (integer tensors are).
bool all_finite(const Tensors& tensors);

// Under DetectAnomaly: reel::Error unless `tensors` are all finite. `what` is "output" or
// "gradient", `phase` "forward", "replay" or "backward"; node -1 when the op was not recorded.
void check_anomaly(const Tensors& tensors, const char* op, const char* what, const char* phase, int64_t node);

// The backward observer (autograd/hooks.h) that checks every rule's gradients and every replayed
// output: one of each thread's built-in observers. Forward outputs are checked by record().
class BackwardObserver;
std::shared_ptr<BackwardObserver> anomaly_observer();

}  // namespace reel::autograd
