// Gradient checkpointing by segment recomputation: a region of the tape recorded inside a
// Checkpoint scope keeps only its boundary inputs in forward; backward replays the region's
// recorded ops from them (autograd/checkpoint.cpp), rebuilding the activations it needs, then
// frees them again. Gradients are bit-identical with and without (dropout replays its Philox
// stream). Policies choose the segments over a chain of modules.
//
//   { autograd::Checkpoint seg; y = block(x); }   // block's nodes keep no saves; x is held
//   model.set_checkpoint(autograd::CheckpointPolicy::parse("sqrt"));   // nn::Sequential, GPT
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "autograd/op.h"

namespace reel::autograd {

// A checkpointed region of the tape: its nodes are tape[begin, end). Collapsed (the state after
// forward) its nodes keep no saved tensors; replayed, they have them again.
struct Segment {
  std::shared_ptr<Segment> parent;  // the enclosing segment, for nested checkpoints
  size_t begin = 0, end = 0;  // end is set when the Checkpoint scope closes
  bool replayed = false;
  int id = 0;            // for the tape dump
};

// RAII: ops recorded while it lives form one checkpoint segment (nested scopes nest segments).
// A no-op under NoGrad.
//
// Scopes must close innermost first. Closing one while a scope opened inside it is still open (two
// std::optional or std::unique_ptr scopes destroyed in the wrong order) ends both there, so the
// tape is never left inside a dead segment, and is a reel::Error: close() raises it at once. The
// destructor cannot throw (std::optional's and std::unique_ptr's destructors and reset() are
// noexcept: a throw there terminates), so it leaves the error to the next backward on this
// thread; while an exception unwinds, it drops it. Tape::clear() ends every open segment.
class Checkpoint {
 public:
  Checkpoint();
  ~Checkpoint();
  Checkpoint(const Checkpoint&) = delete;
  Checkpoint& operator=(const Checkpoint&) = delete;

  // Ends the scope now (the destructor then has nothing to do); reel::Error if a scope opened
  // inside it is still open.
  void close();

 private:
  std::shared_ptr<Segment> segment_;  // null under NoGrad, and once closed
  int uncaught_at_open_ = 0;          // std::uncaught_exceptions() then: more at the close means unwinding
};

// Which runs of a chain of n units (the children of an nn::Sequential, the blocks of a GPT) run
// inside checkpoint segments. A policy counts those units, whatever they are: `sqrt` over a flat
// Sequential of N Linear/GELU pairs sees 2N children and makes about sqrt(2N) segments, not
// sqrt(N); wrap each pair in its own Sequential to count layers.
struct CheckpointPolicy {
  enum class Kind { None, Every, Sqrt, List };
  Kind kind = Kind::None;
  int64_t every = 0;           // Every: units per segment
  std::vector<int64_t> list;   // List: the units that each get their own segment

  // "none" | "every:K" (K >= 1) | "sqrt" | "list:i,j,..." ; reel::Error naming the accepted forms.
  static CheckpointPolicy parse(const std::string& text);
  std::string str() const;

  struct Run {
    int64_t begin = 0, end = 0;  // units [begin, end)
    bool checkpointed = false;
  };
  // How n units run. Every:K and Sqrt (K = ceil(sqrt(n))) cut the units into runs of K and
  // checkpoint all but the last run: backward would replay the last one at once, so keeping its
  // activations costs no more memory at the peak and saves a recompute (as
  // torch.utils.checkpoint.checkpoint_sequential). List checkpoints exactly the listed units.
  std::vector<Run> plan(int64_t n) const;
};

// ---- for the tape (autograd/tape.cpp) ------------------------------------------------

// The outermost segment around `node` that is still collapsed (the one to replay first), or null.
Segment* outermost_collapsed(const Node& node);
// Before `node`'s forward runs on `in`: inside a collapsed segment it keeps no saves and holds
// instead the inputs that come from outside that segment (the data a replay starts from).
void prepare_saves(Node& node, const Tensors& in);
// reel::Error if input `j` of `node`, held for a replay, was written in place since it was held.
void check_held_version(const Node& node, size_t j);

}  // namespace reel::autograd
