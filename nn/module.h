// nn::Module: the base of every layer. A module owns named parameters and named child modules,
// so a whole model is a tree whose parameters have dotted names ("h.0.attn.c_attn.weight"), the
// names its safetensors files use.
//
//   struct Net : nn::Module {
//     std::shared_ptr<nn::Linear> fc1 = register_module("fc1", std::make_shared<nn::Linear>(784, 512));
//     Tensor forward(const Tensor& x) override { return fc1->forward(x); }
//   };
//   net.to(Device("cuda"));  net.train();  optim::AdamW opt(net.parameters(), 3e-4);
//   nn::save(net, "net.safetensors");  nn::load(net, "net.safetensors");
//
// Parameters are leaf tensors that require grad, allocated under Category::Parameter. to(device)
// moves them in place: every handle to a parameter (an optimizer's, a tied layer's) sees the move.
// Buffers (BatchNorm's running statistics) are module state that is not trained: no gradient, not
// in parameters() (so no optimizer sees them), but saved and loaded with the parameters under their
// dotted names, and moved by to(device), as PyTorch's register_buffer. They are allocated under
// Category::Parameter too (model state, not activations).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"
#include "nn/safetensors.h"

namespace reel::nn {

class Module {
 public:
  Module() = default;
  virtual ~Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  // (.., in) -> (.., out) for most layers; token ids -> logits for GPT.
  virtual Tensor forward(const Tensor& x) = 0;
  Tensor operator()(const Tensor& x) { return forward(x); }
  virtual std::string name() const = 0;  // the class name, for errors and printing

  // Every parameter of this module and its descendants, depth first in registration order, each
  // once (a tensor shared by two modules keeps its first name).
  std::vector<std::pair<std::string, Tensor>> named_parameters() const;
  std::vector<Tensor> parameters() const;
  // Every buffer, named and ordered as the parameters are.
  std::vector<std::pair<std::string, Tensor>> named_buffers() const;
  int64_t num_parameters() const;  // elements
  const std::vector<std::pair<std::string, std::shared_ptr<Module>>>& children() const { return children_; }

  void train(bool on = true);  // this module and all descendants
  void eval() { train(false); }
  bool training() const { return training_; }

  // Moves every parameter (and its gradient) and every buffer to `device` in place. Between a forward and its
  // backward it makes that backward raise (the gradients would land on the old device).
  Module& to(Device device);

  // name -> parameter or buffer (the tensors themselves, not copies).
  TensorDict state_dict() const;
  // Copies values into the parameters and buffers (any device/dtype in the dict; converted, but a
  // floating one only from floating values, an integer buffer only from integers). reel::Error
  // listing every missing, unexpected or wrongly-shaped key; nothing is copied unless all match.
  void load_state_dict(const TensorDict& state);

  std::string str() const;  // the module tree with parameter shapes, one line per module

 protected:
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
  void add_child(const std::string& name, std::shared_ptr<Module> module);
  void collect(const std::string& prefix, std::vector<std::pair<std::string, Tensor>>& out, bool buffers) const;
  void print(const std::string& prefix, int depth, std::string& out) const;

  std::vector<std::pair<std::string, Tensor>> params_;
  std::vector<std::pair<std::string, Tensor>> buffers_;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> children_;
  bool training_ = true;
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
