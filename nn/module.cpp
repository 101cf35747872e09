// nn::Module: the call through the forward hooks, parameter registration, the module tree,
// train/eval, to(device), state dicts.
#include "nn/module.h"

#include <algorithm>
#include <functional>
#include <set>
#include <sstream>
#include <utility>

#include "autograd/functions.h"
#include "autograd/op.h"
#include "autograd/tape.h"
#include "core/allocator.h"
#include "core/random.h"

namespace reel::nn {

namespace {

bool valid_name(const std::string& name) {
  return !name.empty() && name.find('.') == std::string::npos;
}

}  // namespace

// A module's hooks, shared with the handles (weakly) so that remove() works from a handle alone.
struct HookHandle::Registry {
  uint64_t next_id = 1;
  std::vector<std::pair<uint64_t, Module::ForwardPreHook>> pre;
  std::vector<std::pair<uint64_t, Module::ForwardHook>> post;
};

void HookHandle::remove() {
  const std::shared_ptr<Registry> registry = registry_.lock();
  if (!registry) return;
  auto drop = [this](auto& hooks) {
    hooks.erase(std::remove_if(hooks.begin(), hooks.end(), [this](const auto& h) { return h.first == id_; }),
                hooks.end());
  };
  drop(registry->pre);
  drop(registry->post);
  registry_.reset();
}

HookHandle Module::add_pre_hook(ForwardPreHook hook) {
  REEL_CHECK(hook != nullptr, name(), ".register_forward_pre_hook: the hook is empty");
  if (!hooks_) hooks_ = std::make_shared<HookHandle::Registry>();
  const uint64_t id = hooks_->next_id++;
  hooks_->pre.emplace_back(id, std::move(hook));
  return HookHandle(hooks_, id);
}

HookHandle Module::add_post_hook(ForwardHook hook) {
  REEL_CHECK(hook != nullptr, name(), ".register_forward_hook: the hook is empty");
  if (!hooks_) hooks_ = std::make_shared<HookHandle::Registry>();
  const uint64_t id = hooks_->next_id++;
  hooks_->post.emplace_back(id, std::move(hook));
  return HookHandle(hooks_, id);
}

bool Module::has_forward_hooks() const { return hooks_ && (!hooks_->pre.empty() || !hooks_->post.empty()); }

Tensor Module::operator()(const Tensor& x) {
  if (!hooks_ || (hooks_->pre.empty() && hooks_->post.empty())) return forward(x);
  // Copies, so that a hook may register or remove hooks (its own included) while they run: the
  // change takes effect at the next call, and a hook that removes itself stays alive until it returns.
  const auto pre = hooks_->pre;
  const auto post = hooks_->post;
  Tensor input = x;
  for (const auto& [id, hook] : pre)
    if (std::optional<Tensor> replaced = hook(*this, input)) input = std::move(*replaced);
  Tensor output = forward(input);
  for (const auto& [id, hook] : post)
    if (std::optional<Tensor> replaced = hook(*this, input, output)) output = std::move(*replaced);
  return output;
}

std::vector<std::pair<std::string, const Module*>> Module::named_modules() const {
  std::vector<std::pair<std::string, const Module*>> out;
  std::set<const Module*> seen;
  // Depth first, a parent before its children; a module met again (shared) keeps its first name.
  std::function<void(const std::string&, const Module&)> walk = [&](const std::string& prefix, const Module& m) {
    if (!seen.insert(&m).second) return;
    out.emplace_back(prefix, &m);
    for (const auto& [child_name, child] : m.children_) walk(prefix.empty() ? child_name : prefix + "." + child_name, *child);
  };
  walk("", *this);
  return out;
}

std::vector<std::pair<std::string, Module*>> Module::named_modules() {
  std::vector<std::pair<std::string, Module*>> out;
  // Every module of the walk is this one or a descendant it holds non-const.
  for (const auto& [path, m] : std::as_const(*this).named_modules()) out.emplace_back(path, const_cast<Module*>(m));
  return out;
}

Tensor Module::register_parameter(const std::string& param_name, const Tensor& value) {
  REEL_CHECK(valid_name(param_name), name(), ": parameter name '", param_name, "' must be non-empty and without '.'");
  REEL_CHECK(value.defined(), name(), ": parameter '", param_name, "' is undefined");
  for (const auto& [existing, _] : params_)
    REEL_CHECK(existing != param_name, name(), ": parameter '", param_name, "' registered twice");
  Tensor p = value;
  if (!p.is_leaf() || !p.storage() || p.storage()->category() != Category::Parameter || !p.is_contiguous()) {
    MemoryCategory scope(Category::Parameter);
    p = value.detach().clone();
  }
  p.set_requires_grad(true);
  params_.emplace_back(param_name, p);
  return p;
}

Tensor Module::register_buffer(const std::string& buffer_name, const Tensor& value) {
  REEL_CHECK(valid_name(buffer_name), name(), ": buffer name '", buffer_name, "' must be non-empty and without '.'");
  REEL_CHECK(value.defined(), name(), ": buffer '", buffer_name, "' is undefined");
  for (const auto& [existing, _] : params_)
    REEL_CHECK(existing != buffer_name, name(), ": buffer '", buffer_name, "' has the name of a parameter");
  for (const auto& [existing, _] : buffers_)
    REEL_CHECK(existing != buffer_name, name(), ": buffer '", buffer_name, "' registered twice");
  Tensor b;
  {
    MemoryCategory scope(Category::Parameter);
    b = value.detach().clone();
  }
  buffers_.emplace_back(buffer_name, b);
  return b;
}

void Module::add_child(const std::string& child_name, std::shared_ptr<Module> module) {
  REEL_CHECK(valid_name(child_name), name(), ": module name '", child_name, "' must be non-empty and without '.'");
  REEL_CHECK(module != nullptr, name(), ": module '", child_name, "' is null");
  for (const auto& [existing, _] : children_)
    REEL_CHECK(existing != child_name, name(), ": module '", child_name, "' registered twice");
  children_.emplace_back(child_name, std::move(module));
}

void Module::collect(const std::string& prefix, std::vector<std::pair<std::string, Tensor>>& out,
                     bool buffers) const {
  for (const auto& [name, p] : buffers ? buffers_ : params_) out.emplace_back(prefix + name, p);
  for (const auto& [name, child] : children_) child->collect(prefix + name + ".", out, buffers);
}

namespace {
std::vector<std::pair<std::string, Tensor>> unique_tensors(std::vector<std::pair<std::string, Tensor>> all) {
  std::vector<std::pair<std::string, Tensor>> unique;
  std::set<const TensorImpl*> seen;
  for (auto& entry : all)
    if (seen.insert(entry.second.impl_ptr()).second) unique.push_back(std::move(entry));
  return unique;
}
}  // namespace

std::vector<std::pair<std::string, Tensor>> Module::named_parameters() const {
  std::vector<std::pair<std::string, Tensor>> all;
  collect("", all, false);
  return unique_tensors(std::move(all));
}

std::vector<std::pair<std::string, Tensor>> Module::named_buffers() const {
  std::vector<std::pair<std::string, Tensor>> all;
  collect("", all, true);
  return unique_tensors(std::move(all));
}

std::vector<Tensor> Module::parameters() const {
  std::vector<Tensor> out;
  for (auto& [_, p] : named_parameters()) out.push_back(p);
  return out;
}

int64_t Module::num_parameters() const {
  int64_t n = 0;
  for (const Tensor& p : parameters()) n += p.numel();
  return n;
}

void Module::train(bool on) {
  training_ = on;
  for (auto& [_, child] : children_) child->train(on);
}

Module& Module::to(Device device) {
  autograd::NoGrad no_grad;
  for (const Tensor& p : parameters()) {
    if (p.device() == device) continue;
    Tensor moved, grad = p.grad();
    {
      MemoryCategory scope(Category::Parameter);
      moved = p.detach().to(device);
    }
    // Swap the data under the same TensorImpl so every handle to the parameter follows it.
    TensorImpl& impl = *p.impl_ptr();
    impl.storage = moved.storage();
    impl.strides = moved.strides();
    impl.offset = moved.offset();
    impl.device = device;
    // A forward recorded before the move computes this parameter's gradient on the old device:
    // the tape refuses to backward through it (the move would otherwise go unnoticed).
    if (const auto& meta = p.autograd_meta()) autograd::Tape::current().leaf_moved(meta, device);
    if (grad.defined()) {
      MemoryCategory scope(Category::Gradient);
      p.set_grad(grad.to(device));
    }
  }
  for (const auto& [_, b] : named_buffers()) {
    if (b.device() == device) continue;
    Tensor moved;
    {
      MemoryCategory scope(Category::Parameter);
      moved = b.to(device);
    }
    TensorImpl& impl = *b.impl_ptr();  // every handle to the buffer follows it, as for a parameter
    impl.storage = moved.storage();
    impl.strides = moved.strides();
    impl.offset = moved.offset();
    impl.device = device;
  }
  return *this;
}

Module& Module::to(DType dtype) {
  REEL_CHECK(is_floating(dtype), "Module::to: dtype ", dtype, " is not floating: parameters hold real numbers");
  autograd::NoGrad no_grad;
  // Swaps the data under the same TensorImpl (as to(device)), so every handle follows.
  const auto convert = [](const Tensor& t, DType to) {
    Tensor converted;
    {
      MemoryCategory scope(Category::Parameter);
      converted = t.detach().to(to).contiguous();
    }
    TensorImpl& impl = *t.impl_ptr();
    impl.storage = converted.storage();
    impl.strides = converted.strides();
    impl.offset = converted.offset();
    impl.dtype = to;
  };
  for (const Tensor& p : parameters()) {
    if (p.dtype() == dtype) continue;
    const Tensor grad = p.grad();
    convert(p, dtype);
    if (grad.defined()) {
      MemoryCategory scope(Category::Gradient);
      p.set_grad(grad.to(dtype));
    }
  }
  // Floating buffers are running statistics (BatchNorm's): in acc_dtype(dtype), f32 for bf16 and
  // f16, where the kernels keep statistics (a 16-bit running average would stall: a momentum step
  // below half an ulp is lost).
  const DType buffer_dtype = acc_dtype(dtype);
  for (const auto& [_, b] : named_buffers())
    if (is_floating(b.dtype()) && b.dtype() != buffer_dtype) convert(b, buffer_dtype);
  return *this;
}

TensorDict Module::state_dict() const {
  TensorDict out;
  for (auto& [name, p] : named_parameters()) out.emplace(name, p);
  for (auto& [name, b] : named_buffers()) out.emplace(name, b);
  return out;
}

void Module::load_state_dict(const TensorDict& state) {
  std::vector<std::pair<std::string, Tensor>> params = named_parameters();
  for (auto& entry : named_buffers()) params.push_back(std::move(entry));
  std::vector<std::string> problems;
  std::set<std::string> known;
  for (const auto& [name, p] : params) {
    known.insert(name);
    auto it = state.find(name);
    if (it == state.end()) {
      problems.push_back("missing key '" + name + "' " + shape_str(p.shape()));
    } else if (it->second.shape() != p.shape()) {
      problems.push_back("key '" + name + "' has shape " + shape_str(it->second.shape()) + ", the parameter " +
                         shape_str(p.shape()));
    } else if (is_floating(it->second.dtype()) != is_floating(p.dtype())) {
      problems.push_back(std::string("key '") + name + "' is " + dtype_name(it->second.dtype()) + ", the " +
                         (p.requires_grad() ? "parameter " : "buffer ") + dtype_name(p.dtype()));
    }
  }
  for (const auto& [name, t] : state)
    if (!known.count(name)) problems.push_back("unexpected key '" + name + "' " + shape_str(t.shape()));
  if (!problems.empty()) {
    std::ostringstream msg;
    msg << name() << ".load_state_dict: " << problems.size() << " problem(s):";
    for (const std::string& p : problems) msg << "\n  " << p;
    throw Error(msg.str());
  }
  autograd::NoGrad no_grad;
  for (const auto& [name, p] : params) p.copy_(state.at(name));
}

void Module::print(const std::string& prefix, int depth, std::string& out) const {
  const std::string indent(static_cast<size_t>(depth) * 2, ' ');
  out += indent + (prefix.empty() ? "" : prefix + ": ") + name();
  for (const auto& [pname, p] : params_) out += " " + pname + shape_str(p.shape());
  out += "\n";
  for (const auto& [cname, child] : children_) child->print(cname, depth + 1, out);
}

std::string Module::str() const {
  std::string out;
  print("", 0, out);
  out += "parameters: " + std::to_string(num_parameters()) + "\n";
  return out;
}

void save(const Module& module, const std::string& path, const Metadata& metadata) {
  save_safetensors(path, module.state_dict(), metadata);
}

void load(Module& module, const std::string& path, Metadata* metadata) {
  module.load_state_dict(load_safetensors(path, Device::cpu(), metadata));
}

void init_normal_(const Tensor& t, double std, Generator* gen) {
  autograd::NoGrad no_grad;
  MemoryCategory scope(Category::Temporary);
  t.copy_(mul(randn(t.shape(), t.dtype(), t.device(), gen), std));
}

void init_uniform_(const Tensor& t, double bound, Generator* gen) {
  autograd::NoGrad no_grad;
  MemoryCategory scope(Category::Temporary);
  t.copy_(sub(mul(rand(t.shape(), t.dtype(), t.device(), gen), 2 * bound), bound));
}

}  // namespace reel::nn
