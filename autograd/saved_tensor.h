// What the tape keeps for backward, in one slot type: an op's saves (ForwardCtx::save) and a
// checkpoint segment's boundary inputs (held for its replay) alike.
//
// A slot holds the tensor itself or, when a pack hook was active at save time, whatever the hook
// returned (a copy on the host, a compressed form, ...), with the unpack hook that brings it back.
// It records the storage version at save time: unpack() raises a reel::Error naming the op when an
// in-place write changed the tensor since, because the gradient (or the replay) would then use
// values the forward never saw.
//
// A slot may instead keep the parameter a saved 16-bit copy was cast from (recast_from): backward
// casts it again when it unpacks the slot (the same bits), so the copy is no activation meanwhile.
// Such a slot bypasses the hooks (there is nothing to pack: the parameter stays where it is) and
// checks the parameter's version.
//
// Hooks, as PyTorch's torch.autograd.graph.saved_tensors_hooks: while a SavedTensorHooks scope
// lives on a thread, every tensor the tape keeps there (op saves, segment boundaries, the saves a
// replay re-makes in backward) goes through its pack function, and backward reads it back through
// its unpack function. Scopes nest; the innermost pair applies. Memory stays attributed: a packed
// value that is a Tensor is counted as an activation where the hook put it (its device), and the
// original's bytes are freed once nothing else holds them. A pack hook may take the slot's KeptBy
// too (PackHookBy): a segment's held input has segment >= 0, a parameter's memory kind Parameter,
// and slot_id() names the slot the same way at every step. autograd::Offload (autograd/offload.h)
// is such a pair, with copies on the copy stream and prefetch.
//
//   autograd::SavedTensorHooks offload(
//       [](const Tensor& t) -> std::any { return t.to(Device("cpu")); },
//       [dev](const std::any& p) { return std::any_cast<const Tensor&>(p).to(dev); });
//   Tensor loss = model(x);        // every save now lives on the host
//   autograd::backward(loss);      // ...and comes back to `dev` as each rule reads it
#pragma once
#include <any>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>

#include "core/tensor.h"

namespace reel::autograd {

// What a slot keeps: an activation (memory the tape keeps alive for backward), or a parameter's
// memory (a leaf that requires grad, a view of one, or parameter/gradient/optimizer-state storage),
// which lives on the device anyway: a pack hook that moves memory has nothing to gain there.
enum class SavedKind : uint8_t { Activation, Parameter };
const char* saved_kind_name(SavedKind kind);  // "activation", "parameter"

// Who keeps a slot, for the memory timeline's notes (autograd::mark_activation) and for a pack
// hook: a segment's held inputs apart (autograd::Offload's Boundaries), parameters apart from
// activations (kind), and a name for the slot that is the same at every step of the same graph
// (node, index, segment >= 0 or not): a hook may key per-slot state (a compression choice, a
// measured size) on it. The tape fills the fields when it packs; SavedTensor::pack sets kind.
struct KeptBy {
  const char* op = nullptr;  // saved by this op...
  int64_t node = -1;         // ...at this tape position (or: the node whose input is held)
  int segment = -1;          // held by this collapsed checkpoint segment
  int index = -1;            // the slot's position among the node's saves (held: the input's number)
  SavedKind kind = SavedKind::Activation;
  // node, index and whether it is a held input in one number, stable across steps: (node * 2 +
  // held) * 1024 + index (index < 1024, as an op saves a handful), -1 when the tape did not say.
  int64_t slot_id() const { return node < 0 || index < 0 ? -1 : ((node * 2 + (segment >= 0)) << 10) + index; }
};

using PackHook = std::function<std::any(const Tensor& t)>;
using PackHookBy = std::function<std::any(const Tensor& t, const KeptBy& by)>;  // also sees who keeps it
using UnpackHook = std::function<Tensor(const std::any& packed)>;

// RAII: saves made on this thread while it lives are packed with `pack` and unpacked with
// `unpack`. Both must be set. Scopes must close innermost first (std::optional / unique_ptr scopes
// destroyed in reverse order).
class SavedTensorHooks {
 public:
  SavedTensorHooks(PackHook pack, UnpackHook unpack);
  SavedTensorHooks(PackHookBy pack, UnpackHook unpack);
  SavedTensorHooks(std::nullptr_t, UnpackHook unpack);  // refused (as a null PackHook), not ambiguous
  ~SavedTensorHooks();
  SavedTensorHooks(const SavedTensorHooks&) = delete;
  SavedTensorHooks& operator=(const SavedTensorHooks&) = delete;
};

class SavedTensor {
 public:
  SavedTensor() = default;  // empty: a placeholder slot (an undefined save costs nothing)
  explicit SavedTensor(const Tensor& t);

  bool defined() const { return data_.defined() || packed_ != nullptr || source_.defined(); }
  bool packed() const { return packed_ != nullptr; }
  // Where the value came from: input `input()` of its node (-1: not an input), or its own output.
  int input() const { return input_; }
  bool is_output() const { return is_output_; }
  void set_input(int j) { input_ = j; }
  // An op's own output: kept as its data alone, so the node does not keep its output's autograd
  // state (and so itself) alive.
  void mark_output();
  // Drops the value but remembers which input it was: a kept node of a selective piece gets it
  // back from its piece's replay (refill).
  void drop_keep_input(int j);
  void refill(const Tensor& t, const KeptBy& by);
  // Keeps `source` (a parameter, or a view of one: its memory lives anyway) instead of the saved
  // tensor, which is `source` cast to the saved tensor's dtype (autograd/ops/cast.h): unpack casts it
  // again. Replaces pack() for this slot; the version checked is the source's from now on.
  void recast_from(const Tensor& source);
  bool recast() const { return source_.defined(); }
  const Tensor* recast_source() const { return source_.defined() ? &source_ : nullptr; }  // until unpacked

  // Applies the innermost SavedTensorHooks pair, if any, and tags what the slot keeps as an
  // activation (`by`: for the memory timeline). Call once, when the slot is final.
  void pack(const KeptBy& by);
  // The tensor, unpacked (once: later calls return it again) and version-checked. Errors name
  // `op`, and the slot as op's save or, with held_input >= 0, as that input held for a replay.
  const Tensor& unpack(const char* op, int held_input = -1);
  // reel::Error when the tensor was written in place since it was saved (while the original's
  // storage is alive: a packed slot remembers it weakly; no one can write what no one holds).
  void check_version(const char* op, int held_input = -1) const;
  // Bytes this slot keeps alive: the storage of its tensor or of a packed Tensor (0 for other
  // packed values, which the hook accounts for itself, and for a recast slot before it is unpacked:
  // the parameter's bytes are not the tape's).
  const Tensor* kept_tensor() const;
  void clear() { *this = SavedTensor(); }

 private:
  Tensor data_;                          // the value (unpacked, or never packed)
  std::shared_ptr<std::any> packed_;     // what the pack hook returned, until unpacked
  UnpackHook unpack_;                    // the pair's unpack, taken at pack time
  Tensor source_;                        // recast_from: the parameter, until unpacked
  std::weak_ptr<Storage> origin_;        // the saved tensor's storage, for the version check
  Shape shape_;                          // the saved tensor's shape, dtype, device: unpack checks them
  DType dtype_ = DType::f32;
  Device device_;
  uint64_t version_ = 0;
  int input_ = -1;
  bool is_output_ = false;
};

// Tags a tensor the tape keeps as an activation in the memory statistics, unless it is a
// parameter's or gradient's memory (core/allocator.h; Tape::clear tags it back).
void mark_activation(const Tensor& t, const KeptBy& by = {});

}  // namespace reel::autograd
