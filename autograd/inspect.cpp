// The public queries of this thread's tape (autograd/inspect.h): read-only views of its nodes.
#include "autograd/inspect.h"

#include <algorithm>

#include "autograd/tape.h"
#include "core/error.h"

namespace reel::autograd {

namespace {
const Node& at(size_t position, const char* query) {
  const Tape& tape = Tape::current();
  REEL_CHECK(position < tape.size(), query, ": tape position ", position, " is out of range (the tape holds ",
             tape.size(), " ops)");
  return tape.node(position);
}
}  // namespace

size_t recorded_ops() { return Tape::current().size(); }

const char* recorded_op(size_t position) {
  const Node& node = at(position, "recorded_op");
  return node.op ? node.op->name() : "";
}

const Op* recorded_op_object(size_t position) {
  const Node& node = at(position, "recorded_op_object");
  return node.op.get();
}

std::vector<RecordedInput> recorded_inputs(size_t position) {
  const Node& node = at(position, "recorded_inputs");
  std::vector<RecordedInput> out;
  if (node.released) return out;
  out.reserve(node.inputs.size());
  for (const Node::Input& in : node.inputs) {
    RecordedInput r;
    if (in.meta) {
      r.meta = in.meta.get();
      r.leaf = in.meta->is_leaf;
      r.views_leaf = in.meta->views_leaf;
      if (const Node* p = in.producer()) r.producer = static_cast<int64_t>(p->index);
    }
    out.push_back(r);
  }
  return out;
}

RecordedSaves recorded_saves(size_t position) {
  const Node& node = at(position, "recorded_saves");
  RecordedSaves out;
  if (node.released) return out;
  out.live = node.keep_saved;
  for (const SavedTensor& slot : node.saved) {
    if (const Tensor* t = slot.kept_tensor() ? slot.kept_tensor() : slot.recast_source()) {
      const Storage* s = t->storage().get();
      if (std::find(out.storages.begin(), out.storages.end(), s) == out.storages.end()) out.storages.push_back(s);
    } else if (!slot.defined() && slot.input() >= 0) {  // dropped, refilled from that input at the replay
      if (std::find(out.refilled_inputs.begin(), out.refilled_inputs.end(), slot.input()) == out.refilled_inputs.end())
        out.refilled_inputs.push_back(slot.input());
    }
  }
  return out;
}

bool recorded_saves_live(size_t position) {
  const Node& node = at(position, "recorded_saves_live");
  return node.released || node.keep_saved;
}

}  // namespace reel::autograd
