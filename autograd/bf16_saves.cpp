// bf16 saves (autograd/bf16_saves.h): the pack and unpack hooks, and the lever's entry for the
// checkpoint planner (its cost and its scope).
#include "autograd/bf16_saves.h"

#include <algorithm>
#include <any>
#include <memory>

namespace reel::autograd {

namespace {

// A save kept as it was (a parameter, or not f32): set apart from a compressed one, a bf16 Tensor.
struct AsIs {
  Tensor t;
};

std::any pack(const Tensor& t, const KeptBy& by) {
  if (by.kind == SavedKind::Activation && t.dtype() == DType::f32) return t.to(DType::bf16);  // counted by the tape
  mark_activation(t, by);  // what the tape does for a save kept as it is
  return AsIs{t};
}

Tensor unpack(const std::any& packed) {
  if (const AsIs* kept = std::any_cast<AsIs>(&packed)) return kept->t;
  Tensor wide = std::any_cast<const Tensor&>(packed).to(DType::f32);
  mark_activation(wide);  // live while the rule runs, as the f32 save would have been: an activation
  return wide;
}

struct Bf16Scope : RunScope {
  Bf16Saves saves;
};

}  // namespace

Bf16Saves::Bf16Saves() : hooks_(PackHookBy(pack), UnpackHook(unpack)) {}

RunLever bf16_saves_lever() {
  RunLever lever;
  lever.name = "bf16 saves";
  lever.code = "h";
  lever.exact = false;
  lever.offloadable = false;
  lever.cost = [](const ChainCost& c, int64_t i, int64_t j) {
    int64_t bytes = c.units[static_cast<size_t>(i)].input_bytes, widest = 0;
    for (int64_t u = i; u < j; ++u) {
      const UnitCost& unit = c.units[static_cast<size_t>(u)];
      bytes += unit.saved_bytes;
      widest = std::max(widest, unit.saved_bytes + unit.input_bytes);
    }
    LeverCost lc;
    lc.held = (bytes + 1) / 2;
    lc.work = lc.held + widest;
    lc.time = c.device_bytes_per_s > 0 ? 3.0 * static_cast<double>(bytes) * 1e9 / c.device_bytes_per_s : 0;
    return lc;
  };
  lever.open = [](const CheckpointPolicy&) { return std::unique_ptr<RunScope>(std::make_unique<Bf16Scope>()); };
  return lever;
}

}  // namespace reel::autograd
