// nn::Module: the base of every layer. A module owns named parameters and named child modules,
// so a whole model is a tree whose parameters have dotted names ("h.0.attn.c_attn.weight"), the
// names its safetensors files use.
//
//   struct Net : nn::Module {
//     std::shared_ptr<nn::Linear> fc1 = register_module("fc1", std::make_shared<nn::Linear>(784, 512));
//     std::string name() const override { return "Net"; }
//    protected:
//     Tensor forward(const Tensor& x) override { return (*fc1)(x); }
//   };
//   Tensor y = net(x);  // operator(): the pre-forward hooks, forward, the forward hooks
//   net.to(Device("cuda"));  net.train();  optim::AdamW opt(net.parameters(), 3e-4);
//   nn::save(net, "net.safetensors");  nn::load(net, "net.safetensors");
//
// operator() is the only way to call a module: forward is protected (a subclass overrides it and
// calls its children through their operator()), so every call, Sequential's and GPT's included,
// passes through the hooks, as PyTorch's register_forward_pre_hook / register_forward_hook:
//   auto h = layer.register_forward_pre_hook([](nn::Module&, const Tensor& x) { return x * 2; });
//   layer.register_forward_hook([](nn::Module& m, const Tensor& in, const Tensor& out) { log(m, out); });
//   h.remove();
// Pre-hooks run in registration order before forward; each may return a tensor that replaces the
// input (for the later pre-hooks and forward) or nothing (std::nullopt, or a void callable) to keep
// it. Forward hooks then run in registration order with forward's input and the output so far; each
// may replace the output the same way. A hook registered or removed while the module's hooks run
// takes effect at its next call. Hooks are not module state: state_dict and save leave them out.
// The returned HookHandle unregisters its hook on remove() (idempotent, and harmless once the
// module is gone); dropping the handle does NOT remove the hook (PyTorch's RemovableHandle): a hook
// lives as long as its module unless removed.
// Checkpoint segments: a segment's backward replays the ops its forward recorded on the tape, not
// module code, so hooks do NOT run at replay. A replacement a hook made with ops (x * 2) was
// recorded in the segment and is replayed with it; anything else it did (a log line, a counter,
// parameters gathered) is not repeated. What must happen before a segment's replay (FSDP's
// re-gather of parameters) belongs to a backward observer (before_replay), not to a module hook.
//
// Parameters are leaf tensors that require grad, allocated under Category::Parameter. to(device)
// (and to(dtype), which converts them) moves them in place: every handle to a parameter (an optimizer's, a tied layer's) sees the move.
// Buffers (BatchNorm's running statistics) are module state that is not trained: no gradient, not
// in parameters() (so no optimizer sees them), but saved and loaded with the parameters under their
// dotted names, and moved by to(device), as PyTorch's register_buffer. They are allocated under
// Category::Parameter too (model state, not activations).
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "core/tensor.h"
#include "nn/safetensors.h"

namespace reel::nn {

class Module;

// What register_forward_pre_hook / register_forward_hook return: remove() unregisters the hook.
class HookHandle {
 public:
  HookHandle() = default;
  void remove();  // idempotent; nothing once the module is destroyed
 private:
  friend class Module;
  struct Registry;
  HookHandle(std::weak_ptr<Registry> registry, uint64_t id) : registry_(std::move(registry)), id_(id) {}
  std::weak_ptr<Registry> registry_;
  uint64_t id_ = 0;
};

class Module {
 public:
  Module() = default;
  virtual ~Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  // The pre-forward hooks, forward(x), the forward hooks (see above). (.., in) -> (.., out) for
  // most layers; token ids -> logits for GPT.
  Tensor operator()(const Tensor& x);
  virtual std::string name() const = 0;  // the class name, for errors and printing

  // A hook returns the replacement tensor, std::nullopt, or nothing at all (a void callable) to keep
  // what it was given.
  using ForwardPreHook = std::function<std::optional<Tensor>(Module& module, const Tensor& input)>;
  using ForwardHook = std::function<std::optional<Tensor>(Module& module, const Tensor& input, const Tensor& output)>;
  template <typename F>
  HookHandle register_forward_pre_hook(F&& hook) {
    return add_pre_hook(optional_result<F, Module&, const Tensor&>(std::forward<F>(hook)));
  }
  template <typename F>
  HookHandle register_forward_hook(F&& hook) {
    return add_post_hook(optional_result<F, Module&, const Tensor&, const Tensor&>(std::forward<F>(hook)));
  }
  // Whether a forward pre-hook or hook is registered on this module itself (not its descendants):
  // a parent that would fuse this module's computation with a sibling's (GPT's FeedForward, a block's residual add + LayerNorm) runs
  // it through operator() instead, so the hooks fire (FSDP gathers a unit's parameters in one).
  bool has_forward_hooks() const;

  // Every parameter of this module and its descendants, depth first in registration order, each
  // once (a tensor shared by two modules keeps its first name).
  std::vector<std::pair<std::string, Tensor>> named_parameters() const;
  std::vector<Tensor> parameters() const;
  // Every buffer, named and ordered as the parameters are.
  std::vector<std::pair<std::string, Tensor>> named_buffers() const;
  int64_t num_parameters() const;  // elements
  const std::vector<std::pair<std::string, std::shared_ptr<Module>>>& children() const { return children_; }
  // This module ("") and every descendant under its dotted name ("h.0.attn"), depth first in
  // registration order (a parent before its children), each once (a module registered under two
  // names keeps its first), as PyTorch's named_modules.
  std::vector<std::pair<std::string, Module*>> named_modules();
  std::vector<std::pair<std::string, const Module*>> named_modules() const;

  void train(bool on = true);  // this module and all descendants
  void eval() { train(false); }
  bool training() const { return training_; }

  // Moves every parameter (and its gradient) and every buffer to `device` in place. Between a forward and its
  // backward it makes that backward raise (the gradients would land on the old device).
  Module& to(Device device);
  // Converts every floating parameter (and its gradient) and every floating buffer to `dtype` in
  // place (integer buffers stay; for bf16 and f16 the floating buffers, running statistics, go to
  // f32, as the kernels keep statistics: kernels/batchnorm.h), for a model held in one type (bf16
  // for inference, f64 for a gradient check); every handle follows, as with to(device). Do it
  // before the forward and the optimizer (whose state has the parameters' dtype). Mixed precision
  // training keeps f32 parameters instead: autograd::Autocast. reel::Error for a non-floating dtype.
  Module& to(DType dtype);

  // name -> parameter or buffer (the tensors themselves, not copies).
  TensorDict state_dict() const;
  // Copies values into the parameters and buffers (any device/dtype in the dict; converted, but a
  // floating one only from floating values, an integer buffer only from integers). reel::Error
  // listing every missing, unexpected or wrongly-shaped key; nothing is copied unless all match.
  void load_state_dict(const TensorDict& state);

  std::string str() const;  // the module tree with parameter shapes, one line per module

 protected:
  // What the module computes; called only by operator() (the hooks around it).
  virtual Tensor forward(const Tensor& x) = 0;

  // A leaf that requires grad; `value` is moved under Category::Parameter when it is not already.
  Tensor register_parameter(const std::string& name, const Tensor& value);
  // A buffer: a contiguous copy of `value` under Category::Parameter that never requires grad.
  Tensor register_buffer(const std::string& name, const Tensor& value);
  template <typename M>
  std::shared_ptr<M> register_module(const std::string& name, std::shared_ptr<M> module) {
    add_child(name, module);
    return module;
  }

 private:
  // A hook callable as it is when it returns std::optional<Tensor> (or a Tensor); wrapped to return
  // std::nullopt when it returns nothing.
  template <typename F, typename... Args>
  static auto optional_result(F&& hook) {
    using Hook = std::function<std::optional<Tensor>(Args...)>;
    if constexpr (std::is_void_v<std::invoke_result_t<F&, Args...>>) {
      return Hook([h = std::forward<F>(hook)](Args... args) -> std::optional<Tensor> {
        h(args...);
        return std::nullopt;
      });
    } else {
      return Hook(std::forward<F>(hook));
    }
  }
  HookHandle add_pre_hook(ForwardPreHook hook);
  HookHandle add_post_hook(ForwardHook hook);
  void add_child(const std::string& name, std::shared_ptr<Module> module);
  void collect(const std::string& prefix, std::vector<std::pair<std::string, Tensor>>& out, bool buffers) const;
  void print(const std::string& prefix, int depth, std::string& out) const;

  std::vector<std::pair<std::string, Tensor>> params_;
  std::vector<std::pair<std::string, Tensor>> buffers_;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> children_;
  bool training_ = true;
  std::shared_ptr<HookHandle::Registry> hooks_;  // null until the first hook (the common case: none)
};

// The module's weights as a safetensors file (each parameter under its dotted name), and back:
// loading checks names and shapes as load_state_dict does.
void save(const Module& module, const std::string& path, const Metadata& metadata = {});
void load(Module& module, const std::string& path, Metadata* metadata = nullptr);

// torch.nn.init-style fills, in place and unrecorded: N(0, std) and U(-bound, bound) from the
// default generator (reel::manual_seed) or `gen`.
void init_normal_(const Tensor& t, double std, Generator* gen = nullptr);
void init_uniform_(const Tensor& t, double bound, Generator* gen = nullptr);

}  // namespace reel::nn
