// Anomaly detection (autograd/anomaly.h).
#include "autograd/anomaly.h"

#include <cmath>

#include "autograd/hooks.h"
#include "kernels/ops.h"

namespace reel::autograd {

namespace {
thread_local bool t_detect_anomaly = false;
}

DetectAnomaly::DetectAnomaly() : previous_(t_detect_anomaly) { t_detect_anomaly = true; }
DetectAnomaly::~DetectAnomaly() { t_detect_anomaly = previous_; }
bool DetectAnomaly::enabled() { return t_detect_anomaly; }

namespace {
// x * 0 is NaN exactly where x is NaN or +-Inf, and a sum is NaN when any term is: one pass
// and one number to bring to the host.
bool is_finite(const Tensor& t) {
  if (!t.defined() || t.numel() == 0 || !is_floating(t.dtype())) return true;
  const Tensor zeroed = kernels::binary(kernels::BinaryOp::Mul, t, 0.0);
  return std::isfinite(kernels::sum(zeroed).item());  // all dims
}
}  // namespace

bool all_finite(const Tensors& tensors) {
  for (const Tensor& t : tensors)
    if (!is_finite(t)) return false;
  return true;
}

void check_anomaly(const Tensors& tensors, const char* op, const char* what, const char* phase, int64_t node) {
  if (!t_detect_anomaly) return;
  for (size_t i = 0; i < tensors.size(); ++i) {
    if (is_finite(tensors[i])) continue;
    const std::string where = node >= 0 ? " of node #" + std::to_string(node) : std::string(" (not recorded)");
    REEL_FAIL(op, ": ", what, " ", i, " ", tensors[i].shape(), " on ", tensors[i].device(), where,
              " has non-finite values (NaN or Inf) in ", phase, " (autograd::DetectAnomaly)");
  }
}

namespace {
// In backward: each rule's input gradients, and each replayed forward's outputs.
class AnomalyObserver final : public BackwardObserver {
  void after_node(const NodeEvent& e, const Tensors* produced) override {
    if (!produced) return;
    const bool rule = e.pass == Pass::Backward;
    check_anomaly(*produced, e.op, rule ? "input gradient" : "output", rule ? "backward" : "replay", e.index);
  }
};
}  // namespace

std::shared_ptr<BackwardObserver> anomaly_observer() { return std::make_shared<AnomalyObserver>(); }

}  // namespace reel::autograd
