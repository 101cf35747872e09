// bf16 saves: activation compression as a run lever. While a Bf16Saves scope lives on a thread,
// every f32 activation the tape saves there is kept as bf16 (half its bytes) and widened back to
// f32 when backward unpacks it: a saved-tensor hook pair (autograd/saved_tensor.h), as PyTorch users
// compress activations with saved_tensors_hooks. Parameters (which live on the device anyway) and
// saves of other dtypes are kept as they are.
//
// The gradients are NOT exact: each saved value is rounded to bf16 (8 significant bits, a relative
// error of at most 2^-9), so the planner chooses the lever only when the caller allows inexact
// levers (nn::Sequential::set_inexact_levers, autograd::plan_checkpoint's `inexact`):
//   chain.set_checkpoint(autograd::CheckpointPolicy::budget(bytes));
//   chain.set_inexact_levers(true);          // bf16 saves may be planned where they fit best
//   chain.plan_checkpoint(forward_loss);     // runs named "bf16 saves" in the plan's text
//
// Its cost in the planner's model (autograd/checkpoint_planner.h), for a run of units [i, j) with
// saved bytes a (run plain) and the first unit's input b:
//   held  (sum a + b) / 2   the saves at half size, and the run's input, which its first unit saves
//                           (counted in the unit before, or held by the caller: then its half is new)
//   work  held + max (a_u + b_u)   one rule's saves widened back at a time
//   time  3 (sum a + b) / device_bytes_per_s   a cast reads 4 and writes 2 bytes per value, its
//                           widening reads 2 and writes 4
// The model takes every save as f32: a unit that saves other dtypes (a dropout mask, indices) holds
// more than it says. It may not be offloaded: its hooks are innermost and would take the saves
// before Offload's.
#pragma once
#include "autograd/checkpoint_planner.h"
#include "autograd/saved_tensor.h"

namespace reel::autograd {

// RAII: f32 activations saved on this thread while it lives are kept as bf16 (see above).
class Bf16Saves {
 public:
  Bf16Saves();

 private:
  SavedTensorHooks hooks_;
};

// The planner's entry for the lever: "bf16 saves" (code "h"), not exact, not offloadable.
RunLever bf16_saves_lever();

}  // namespace reel::autograd
