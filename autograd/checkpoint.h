// Gradient checkpointing by segment recomputation: a region of the tape recorded inside a
// Checkpoint scope keeps only its boundary inputs in forward; backward replays the region's
// recorded ops from them (autograd/checkpoint.cpp), rebuilding the activations it needs, then
// frees them again. Gradients are bit-identical with and without (dropout replays its Philox
// stream). Policies choose the segments over a chain of modules.
//
// Selective checkpointing chooses per op instead: inside a Checkpoint built with a KeepRule the
// outputs of the ops the rule selects (by default those whose Op::kept_by_selective() says so:
// linear, matmul, attention, conv2d and linear_cross_entropy, the ones that cost a GEMM to remake) are kept, and only the ops between them (elementwise, norms, views) are recomputed. The scope is
// cut into pieces, each ending just after a kept op; a piece is a segment of its own, replayed when
// backward reaches it, from the kept outputs before it. The kept op itself never runs again: its
// saves that are its inputs are refilled from the piece's replay. On a chain of Linear+GELU blocks
// this keeps the Linear outputs and recomputes the GELUs: half the activations for one elementwise
// pass per block.
//
//   { autograd::Checkpoint seg; y = block(x); }   // block's nodes keep no saves; x is held
//   { autograd::Checkpoint seg(autograd::keep_costly_outputs); y = block(x); }   // selective
//   model.set_checkpoint(autograd::CheckpointPolicy::parse("sqrt"));   // nn::Sequential, GPT
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "autograd/node.h"
#include "autograd/op.h"

namespace reel::autograd {

// Which ops a selective checkpoint keeps the outputs of.
using KeepRule = std::function<bool(const Op& op)>;
// The default rule: the ops whose kept_by_selective() is true (their outputs cost a GEMM to remake).
bool keep_costly_outputs(const Op& op);

// A checkpointed region of the tape: its nodes are tape[begin, end). Collapsed (the state after
// forward) its nodes keep no saved tensors; replayed, they have them again.
struct Segment {
  std::shared_ptr<Segment> parent;  // the enclosing segment, for nested checkpoints
  size_t begin = 0, end = 0;  // end is set when the Checkpoint scope closes
  bool replayed = false;
  int id = 0;            // for the tape dump
  // A selective scope: never collapsed itself; its nodes are recorded into pieces (segments whose
  // parent it is), a new piece starting after each node `keep` selects and after each nested scope.
  KeepRule keep;
  std::shared_ptr<Segment> piece;  // the piece recording now; null until the next node
  bool collapsible() const { return !keep; }
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
  // A selective scope: the outputs of the ops `keep` selects are kept, the rest recomputed.
  explicit Checkpoint(KeepRule keep);
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
//
// Selective runs the whole chain in one selective scope (keep_costly_outputs, or the rule given to
// selective()). Budget leaves the choice to the planner (autograd/checkpoint_planner.h): the
// chain's owner measures it once (nn::Sequential::plan_checkpoint) and runs the plan it gets.
struct CheckpointPolicy {
  enum class Kind { None, Every, Sqrt, List, Selective, Budget };
  Kind kind = Kind::None;
  int64_t every = 0;           // Every: units per segment
  std::vector<int64_t> list;   // List: the units that each get their own segment
  KeepRule keep;               // Selective: the ops kept (null: keep_costly_outputs)
  int64_t budget_bytes = 0;    // Budget: the step's activation peak may not exceed it

  // "none" | "every:K" (K >= 1) | "sqrt" | "list:i,j,..." | "selective" | "budget:SIZE" (SIZE: whole bytes, 48MiB,
  // 1.5GiB, 300MB; KiB/MiB/GiB 1024^n, KB/MB/GB 1000^n); reel::Error quoting the refused text.
  static CheckpointPolicy parse(const std::string& text);
  static CheckpointPolicy selective(KeepRule keep);
  static CheckpointPolicy budget(int64_t bytes);
  // The text parse() reads back as this same policy ("budget:1536KiB", "list:0,3"): a printed plan
  // can be copied onto a command line. A selective policy with a rule of its own prints as
  // "selective": a rule is code, not text, and parses back as the default rule.
  std::string str() const;
  bool operator==(const CheckpointPolicy& o) const;  // the same kind and settings (a keep rule: whether set)
  bool operator!=(const CheckpointPolicy& o) const { return !(*this == o); }

  struct Run {
    int64_t begin = 0, end = 0;  // units [begin, end)
    bool checkpointed = false;   // inside a Checkpoint segment
    bool selective = false;      // inside a selective scope (within the segment when both)
    // Moved to host memory during forward, back before backward needs it (autograd/offload.h): a
    // plain or selective run's saves, a checkpointed run's boundary. Only a plan sets it (the
    // planner, or nn::Sequential::set_offload): the policy text has no runs.
    bool offloaded = false;
    // The lever it runs through when not one of the four the flags name (a name of
    // autograd::run_levers(), autograd/checkpoint_planner.h); empty: the flags say. Only a plan sets it.
    std::string lever = {};
  };
  // How n units run. Every:K and Sqrt cut the units into runs of K and checkpoint all but the
  // last run: backward would replay the last one at once, so keeping its activations costs no
  // more memory at the peak and saves a recompute (as torch.utils.checkpoint.checkpoint_sequential).
  // Sqrt's K is floor(sqrt(n)) where those runs recompute no more units than runs of
  // ceil(sqrt(n)), else ceil(sqrt(n)): 3 -> [1, 1, 1], 5 -> [3, 2], 8 -> [2, 2, 2, 2], 12 -> [4, 4, 4].
  // List checkpoints exactly the listed units. Selective is one selective run. Budget has no plan
  // without measurements: reel::Error.
  std::vector<Run> plan(int64_t n) const;
  // The rule a selective run uses.
  KeepRule keep_rule() const;
};

// ---- for the tape (autograd/tape.cpp) ------------------------------------------------

// The outermost segment around `node` that is still collapsed (the one to replay first), or null.
Segment* outermost_collapsed(const Node& node);
// Before `node`'s forward runs on `in`: inside a collapsed segment it keeps no saves and holds
// instead the inputs that come from outside that segment (the data a replay starts from). A kept
// node of a selective piece also saves, but its saves that are inputs stay empty (Node::kept).
void prepare_saves(Node& node, const Tensors& in);
// Ends the piece a selective scope is recording at tape position `end`: the next node begins a new one.
void end_piece(Segment& scope, size_t end);
// Runs `node`'s op forward on `in` after prepare_saves, as record() and a replay do, and makes its
// saved slots final (packed through the saved-tensor hooks).
Tensors run_forward(Node& node, const Tensors& in);

}  // namespace reel::autograd
