// SavedTensor: packing through the innermost hook pair, unpacking with its version check, and the
// activation tagging of what the tape keeps (see autograd/saved_tensor.h).
#include "autograd/saved_tensor.h"

#include <utility>
#include <vector>

#include "autograd/tape.h"
#include "core/allocator.h"
#include "core/memory_timeline.h"
#include "core/profile.h"
#include "core/storage.h"

namespace reel::autograd {

namespace {
struct HookPair {
  PackHookBy pack;
  UnpackHook unpack;
};
// This thread's SavedTensorHooks scopes, innermost last.
thread_local std::vector<HookPair> t_hooks;
}  // namespace

SavedTensorHooks::SavedTensorHooks(PackHookBy pack, UnpackHook unpack) {
  REEL_CHECK(pack && unpack, "SavedTensorHooks: both a pack and an unpack function are needed");
  t_hooks.push_back({std::move(pack), std::move(unpack)});
}

SavedTensorHooks::SavedTensorHooks(PackHook pack, UnpackHook unpack)
    : SavedTensorHooks(pack ? PackHookBy([pack = std::move(pack)](const Tensor& t, const KeptBy&) { return pack(t); })
                            : PackHookBy(),
                       std::move(unpack)) {}

SavedTensorHooks::SavedTensorHooks(std::nullptr_t, UnpackHook unpack) : SavedTensorHooks(PackHookBy(), std::move(unpack)) {}

SavedTensorHooks::~SavedTensorHooks() { t_hooks.pop_back(); }

SavedTensor::SavedTensor(const Tensor& t) : data_(t) {
  if (!t.defined()) return;
  origin_ = t.storage();
  shape_ = t.shape();
  dtype_ = t.dtype();
  device_ = t.device();
  version_ = t.version();
}

void SavedTensor::mark_output() {
  is_output_ = true;
  if (data_.defined()) data_ = data_.detach();
}

void SavedTensor::drop_keep_input(int j) {
  *this = SavedTensor();
  input_ = j;
}

void SavedTensor::refill(const Tensor& t, const KeptBy& by) {
  const int j = input_;
  *this = SavedTensor(t);
  input_ = j;
  pack(by);
}

void SavedTensor::recast_from(const Tensor& source) {
  REEL_CHECK(source.defined() && source.shape() == shape_ && source.device() == device_ && data_.defined() && !packed_,
             "SavedTensor::recast_from: the source must be a defined tensor of the saved tensor's shape and device, "
             "given before pack");
  data_ = Tensor();  // the copy goes once nothing else holds it (the op that read it is done)
  source_ = source;
  origin_ = source.storage();
  version_ = source.version();
}

const char* saved_kind_name(SavedKind kind) { return kind == SavedKind::Parameter ? "parameter" : "activation"; }

namespace {
// A parameter's, gradient's or optimizer state's memory, or a leaf that requires grad or a view of
// one (parameters even when made outside a MemoryCategory scope): what mark_activation leaves alone.
bool parameter_memory(const Tensor& t) {
  const auto& meta = t.autograd_meta();
  if (meta && ((meta->is_leaf && meta->requires_grad) || meta->views_leaf)) return true;
  if (!t.storage()) return false;
  const Category c = t.storage()->category();
  return c != Category::Temporary && c != Category::Activation;
}
}  // namespace

void SavedTensor::pack(const KeptBy& by) {
  if (!data_.defined()) return;
  if (t_hooks.empty()) {
    mark_activation(data_, by);
    return;
  }
  const HookPair& hooks = t_hooks.back();
  KeptBy told = by;
  told.kind = parameter_memory(data_) ? SavedKind::Parameter : SavedKind::Activation;
  packed_ = std::make_shared<std::any>(hooks.pack(data_, told));
  unpack_ = hooks.unpack;
  data_ = Tensor();  // the original's bytes go once nothing else holds them
  if (const Tensor* t = kept_tensor()) mark_activation(*t, by);  // counted where the hook put it
}

const Tensor* SavedTensor::kept_tensor() const {
  if (data_.defined()) return &data_;
  return packed_ ? std::any_cast<Tensor>(packed_.get()) : nullptr;
}

void SavedTensor::check_version(const char* op, int held_input) const {
  const std::shared_ptr<Storage> storage = origin_.lock();
  if (!storage) return;  // packed away and freed: nothing can have written it
  const uint64_t now = storage->version(), then = version_;
  if (now == then) return;
  if (source_.defined())
    REEL_FAIL(op, ": the parameter of shape ", shape_, " whose ", dtype_, " copy ", op,
              " saved for backward was modified in place (version ", then, " when saved, ", now,
              " now); its gradient would use the new values. Make the in-place change (fill_, copy_, an optimizer "
              "step) before the forward or after the backward");
  if (held_input >= 0)
    REEL_FAIL(op, ": a tensor of shape ", shape_, " that a checkpoint segment holds for the replay (input ",
              held_input, " of ", op, ") was modified in place (version ", then, " when held, ", now,
              " now); the replay would recompute the forward from the new values. Write into a clone() instead, or "
              "make the in-place change (fill_, copy_, an optimizer step) before the forward or after the backward");
  REEL_FAIL(op, ": a tensor of shape ", shape_, " that ", op, " saved for backward was modified in place (version ",
            then, " when saved, ", now,
            " now); its gradient would use the new values. Write into a clone() instead, or make the in-place change "
            "(fill_, copy_, an optimizer step) before the forward or after the backward");
}

const Tensor& SavedTensor::unpack(const char* op, int held_input) {
  check_version(op, held_input);
  if (source_.defined()) {  // the cast again, as the forward's cast node made it
    REEL_CHECK(!source_.storage() || !source_.storage()->released(), op, ": the parameter of shape ", shape_,
               " whose ", dtype_, " copy ", op,
               " saved for backward is released (a sharded parameter not gathered again for this rule)");
    data_ = source_.to(dtype_);
    source_ = Tensor();
  }
  if (packed_) {
    Tensor t = unpack_(*packed_);
    REEL_CHECK(t.defined() && t.shape() == shape_ && t.dtype() == dtype_ && t.device() == device_, op,
               ": the unpack hook returned ", t.defined() ? shape_str(t.shape()) : std::string("an undefined tensor"),
               t.defined() ? std::string(" ") + dtype_name(t.dtype()) + " on " + t.device().str() : std::string(),
               " for a tensor saved as ", shape_, " ", dtype_, " on ", device_,
               "; unpack must give back the tensor pack was given");
    data_ = std::move(t);
    packed_.reset();
    unpack_ = nullptr;
  }
  return data_;
}

// What the tape keeps for backward is an activation in the memory statistics, until the tape is
// cleared. Storage already attributed to something else (parameters, gradients) keeps its
// category, and so do leaves that require grad and views of them (w.t()): those are parameters
// even when created outside a MemoryCategory scope.
//
// A running MemoryTimeline learns the tensor's shape and why it is kept: `by` names the op or the
// segment; without an op there, the op whose forward is running (the profile context).
void mark_activation(const Tensor& t, const KeptBy& by) {
  if (!t.defined() || !t.storage() || t.storage()->category() != Category::Temporary) return;
  const auto& meta = t.autograd_meta();
  if (meta && ((meta->is_leaf && meta->requires_grad) || meta->views_leaf)) return;
  t.storage()->set_category(Category::Activation);
  Tape::current().remember_activation(t.storage());
  if (memory_timeline_collecting()) {
    const profile::Context context = profile::current_context();
    ActivationNote note;
    note.shape = shape_str(t.shape());
    if (by.segment >= 0) {
      note.held = true;
      note.segment = by.segment;
      note.node = by.node;
    } else if (by.op || context.op) {
      note.op = by.op ? by.op : context.op;
      note.node = by.op ? by.node : context.node;
    }
    memory_timeline_note(t.storage()->data(), std::move(note));
  }
}

}  // namespace reel::autograd
