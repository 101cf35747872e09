// A training run's whole state, as one checkpoint (nn/checkpoint_folder.h) holds it, and put back:
// what the next optimizer step depends on, so that a run resumed from it computes the same bits as
// the run that was never stopped.
//
// Tensors: "model.<name>" for the module's state_dict (its parameters, the f32 masters under
// autocast, and buffers), "optimizer.<key>" for the optimizer's (its step count and every slot).
// Metadata: the default generator's seed and next stream ("generator.seed", "generator.offset":
// parameter initialisation and dropout draw their Philox streams from it), the loss scaler's scale,
// clean-window count and skipped windows, the accumulator's skipped windows, and a format name.
// The schedule has no state of its own: it reads the optimizer's step count. What only the program
// knows (its data order and cursor, its configuration, a vocabulary) goes in as `extra` metadata
// and comes back the same.
//
// Saved at a window boundary (after an optimizer step, the gradients zeroed), so the accumulation
// window's place is its start. Restoring checks the model's names and shapes and the optimizer's
// keys (reel::Error naming what differs); a checkpoint made with a scaler is refused by a run
// without one, and the other way round.
#pragma once
#include <functional>
#include <map>
#include <string>

#include "optim/accumulator.h"
#include "optim/grad_scaler.h"
#include "optim/optimizer.h"

namespace reel::optim {

using Metadata = std::map<std::string, std::string>;  // nn::Metadata's type (optim does not include nn)

struct TrainingState {
  StateDict tensors;  // what a safetensors file holds: name -> tensor
  Metadata metadata;
};

// The state of a run now: `model_state` is the model's state_dict (nn::Module::state_dict),
// `optimizer_state` the optimizer's (Optimizer::state_dict, or a sharded optimizer's gathered
// whole: distributed::ZeroAdamW::full_state_dict), `lr` its rate. `scaler` and `accumulator` may be
// null (none in this run). The tensors are the run's own, not copies (a checkpoint writes them out
// at once): the next step changes them.
TrainingState gather_training_state(const StateDict& model_state, const StateDict& optimizer_state, double lr,
                                    const GradScaler* scaler, const Accumulator* accumulator,
                                    const Metadata& extra = {});
// The same for a plain optimizer (its state_dict and rate).
TrainingState gather_training_state(const StateDict& model_state, const Optimizer& optimizer,
                                    const GradScaler* scaler, const Accumulator* accumulator,
                                    const Metadata& extra = {});

// Puts `state` back: first the model's tensors through `load_model` (nn::Module::load_state_dict,
// which checks names and shapes), then the optimizer's through `load_optimizer` (null:
// optimizer.load_state_dict; a sharded optimizer keeps its part of the whole) and its rate, the
// scaler, the accumulator's count and the default generator (reseeded and set to the saved
// stream); returns the metadata, `extra` included. `source` names the checkpoint in errors.
Metadata restore_training_state(const TrainingState& state, const std::function<void(const StateDict&)>& load_model,
                                Optimizer& optimizer, GradScaler* scaler, Accumulator* accumulator,
                                const std::string& source,
                                const std::function<void(const StateDict&)>& load_optimizer = nullptr);

}  // namespace reel::optim
