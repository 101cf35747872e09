// Public queries of this thread's tape, by tape position: what a recorded op's inputs are and what
// its backward rule will read (its saves). For levers that act around a backward without living in
// the walk (distributed/fsdp.h gathers a sharded unit before the rules that read it); with the
// observer events (autograd/hooks.h) they are all a lever needs of the tape: the tape's own record
// (Node) stays autograd's.
//
//   struct Reads : autograd::BackwardObserver {
//     void begin_backward(const autograd::BackwardEvent& e) override {
//       for (int64_t i = 0; i <= e.root; ++i) plan(autograd::recorded_saves(i).storages);
//     }
//   };
//
// Contracts: positions are 0 .. recorded_ops() - 1, the order the ops ran in forward (a checkpoint
// replay re-makes a position's saves; it adds no position). The answers are the tape's state at the
// moment of the call: from the forward until the end of the backward that walks the tape (a
// backward clears it: end_backward is the last moment they describe that forward). A position
// whose node was released (no live tensor depends on it) answers no inputs and no saves. A
// position out of range is a reel::Error naming it and the tape's length. Any thread may ask; each
// sees its own tape.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/autograd_meta.h"

namespace reel {
class Storage;
}

namespace reel::autograd {

class Op;

// The length of this thread's tape: the ops recorded since the last backward or clear().
size_t recorded_ops();

// The op's name at `position` ("matmul", "linear", ...).
const char* recorded_op(size_t position);
// The op itself (autograd/op.h: its name, its costs, what it keeps), as a KeepRule
// (autograd/checkpoint.h) is asked about it; a released node keeps its op (only what it saved or
// held goes). Null only where recorded_op() answers "".
const Op* recorded_op_object(size_t position);

// One input of a recorded op, in the op's input order.
struct RecordedInput {
  // Its autograd state: null when the input needs no gradient (then nothing below is set). Valid
  // while the tape holds the position (the node keeps it alive).
  const AutogradMeta* meta = nullptr;
  bool leaf = false;        // a leaf: a parameter, or a tensor the user set requires_grad on
  bool views_leaf = false;  // a non-leaf sharing a leaf's storage (AutogradMeta::views_leaf, e.g. w.t())
  int64_t producer = -1;    // a non-leaf: the position of the op that made it (lower than this one), else -1
};
std::vector<RecordedInput> recorded_inputs(size_t position);

// What the op's backward rule will read of what forward kept, as its saved slots stand now.
struct RecordedSaves {
  // False while the op's checkpoint segment is collapsed: the slots are empty until the segment's
  // replay re-makes them from the op's inputs, so the rule may read any input's values. It turns
  // true when the replay has run the op (before_node / after_node with Pass::Replay).
  bool live = true;
  // The distinct storages the slots keep as tensors: the saved tensors (or a pack hook's Tensor),
  // and for a slot that keeps a parameter to cast it again (autograd/ops/cast.h), the parameter's.
  // A slot a pack hook turned into something else (autograd::Offload's host copy) is not listed
  // until its unpack. For identity only: the storage may be released right after the call.
  std::vector<const Storage*> storages;
  // Inputs (indices) whose values dropped slots get back at the segment's replay: the kept ops of
  // a selective checkpoint segment (autograd/checkpoint.h) drop the saves that are their inputs.
  std::vector<int> refilled_inputs;
};
RecordedSaves recorded_saves(size_t position);
// recorded_saves(position).live alone, without listing the storages.
bool recorded_saves_live(size_t position);

}  // namespace reel::autograd
