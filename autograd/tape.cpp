// The tape: recording ops, the lifetime rule, and the reverse walk (a segment's replay, which the
// walk triggers, is in autograd/checkpoint.cpp).
//
// Memory story of one step, in the order it happens:
//   forward   each node saves what its backward needs (counted as activations); inside a
//             checkpoint segment it saves nothing and the segment holds its boundary inputs;
//   backward  seeded at the loss: backward(loss, scale) hands the number itself to a loss op that
//             takes it (Op::accepts_host_seed: no seed tensor, and cross_entropy's rule then
//             launches nothing for 1), any other seed is a tensor;
//             walking the nodes in reverse, a node's output gradients are complete when it is
//             reached (every consumer comes later on the tape). Its backward runs (it may drop a
//             save early, BackwardCtx::release_saved), then its saved tensors and output gradients
//             are freed at once; input gradients are summed into the
//             producers' output slots, or added into a leaf's persistent .grad (in f32 when the
//             user gave a 16-bit parameter an f32 buffer: distributed/fsdp.h's mixed precision). Reaching a
//             collapsed segment, the tape first replays its nodes from the held boundary inputs.
//             The tape never writes into a gradient a rule returned (sums are out of place; a
//             leaf's .grad starts as a copy), so a rule may return a tensor it owns (a save);
//   end       the tape is cleared, so the next micro-batch starts from nothing.
#include "autograd/tape.h"

#include <algorithm>
#include <functional>
#include <map>
#include <sstream>
#include <unordered_set>

#include "autograd/anomaly.h"
#include "autograd/autocast.h"
#include "autograd/hooks.h"
#include "core/allocator.h"
#include "core/memory_timeline.h"
#include "core/profile.h"
#include "kernels/ops.h"

namespace reel::autograd {

namespace {


// Set while this thread's tape exists: AutogradMeta destructors run during thread exit too (after
// the thread_local tape is gone), and must not touch it then.
thread_local bool t_tape_alive = false;

// Frees what a node holds once the walk is past it.
void release(Node& node) {
  node.saved.clear();
  for (Node::Output& out : node.outputs) {
    out.grad = Tensor();
    out.host_grad.reset();
  }
  for (Node::Input& in : node.inputs) in.held.clear();
}

// A 16-bit (bf16, f16) parameter may keep an f32 .grad buffer set by the user (set_grad), e.g.
// distributed/fsdp.h's mixed precision, whose 16-bit parameters feed f32 gradients to f32 master shards:
// its gradients are summed into the buffer in f32 (each rule's 16-bit gradient widened exactly).
bool grad_dtype_fits(DType grad, DType param) {
  return grad == param || (grad == DType::f32 && (param == DType::bf16 || param == DType::f16));
}

// param.grad += g. The buffer is allocated on first use (category gradient, g's dtype) and then
// kept, so micro-batches of one accumulation window sum into it and optimizers may hold on to it.
// A buffer zero_grad left to count as zeros (AutogradMeta::grad_is_zero) is written, not added to.
// An f32 buffer of a 16-bit parameter (grad_dtype_fits) gets g widened to f32 first.
void accumulate_into_leaf(AutogradMeta& leaf, const Tensor& g) {
  if (!leaf.grad.defined()) {
    MemoryCategory scope(Category::Gradient);
    leaf.grad = g.clone();
    return;
  }
  if (leaf.grad_is_zero) {
    leaf.grad_is_zero = false;
    leaf.grad.copy_(g);  // one pass, any layout, widened when the buffer is wider
    return;
  }
  const Tensor& add = g.dtype() == leaf.grad.dtype() ? g : g.to(leaf.grad.dtype());
  if (leaf.grad.is_contiguous()) kernels::binary_(kernels::BinaryOp::Add, leaf.grad, add);  // one pass, no allocation
  else leaf.grad.copy_(kernels::binary(kernels::BinaryOp::Add, leaf.grad, add));  // a strided .grad set by the user
}

// A parameter moved to another device after the forward (`now`: where it is, null if not moved)
// would get its gradient on the old device; a stale .grad buffer (left from before a parameter was
// moved or reshaped) would be added to wrongly. Refuse both before anything is accumulated.
void check_leaf_grad(const Node& node, const Node::Input& in, const Device* now) {
  if (!in.meta || !in.meta->is_leaf) return;
  REEL_CHECK(!now || *now == in.device, "backward: parameter ", in.shape, " ", in.dtype, " (an input of ",
             node.op->name(), ") was moved from ", in.device, " to ", *now,
             " after the forward recorded it, so its gradient would be computed on ", in.device,
             "; move the model (Module::to) before the forward, then run the forward again");
  if (!in.meta->grad.defined()) return;
  const Tensor& g = in.meta->grad;
  REEL_CHECK(g.device() == in.device && g.shape() == in.shape && grad_dtype_fits(g.dtype(), in.dtype),
             "backward: parameter ",
             in.shape, " ", in.dtype, " on ", in.device, " (an input of ", node.op->name(), ") has a .grad buffer ",
             g.shape(), " ", g.dtype(), " on ", g.device(),
             "; reset it with set_grad(Tensor()) after moving or reshaping the parameter");
}

// Every check a backward makes of `node` before running anything: a parameter moved, a stale .grad
// buffer, an in-place write to what it saved or what its segment holds for the replay (each slot
// checks its version again when backward unpacks it, after a replay re-saved).
void check_node(const Node& node, const std::function<const Device*(const AutogradMeta*)>& moved_to) {
  for (const SavedTensor& s : node.saved) s.check_version(node.op->name());
  for (size_t j = 0; j < node.inputs.size(); ++j) {
    const Node::Input& in = node.inputs[j];
    check_leaf_grad(node, in, moved_to(in.meta.get()));
    in.held.check_version(node.op->name(), static_cast<int>(j));
  }
}

}  // namespace

// ---- Node ------------------------------------------------------------------------

namespace {
// Bytes of the storages behind `tensors` not yet in `seen`: a view counts its whole storage (which
// it keeps alive), once, however many views of it there are; an expanded view is not counted at
// its broadcast size.
int64_t distinct_storage_bytes(const Tensor* t, std::unordered_set<const Storage*>& seen) {
  if (!t || !t->defined() || !t->storage() || !seen.insert(t->storage().get()).second) return 0;
  return static_cast<int64_t>(t->storage()->bytes());
}

// ... of what `node` saved (each slot's tensor, or the Tensor its pack hook made).
int64_t saved_storage_bytes(const Node& node, std::unordered_set<const Storage*>& seen) {
  int64_t bytes = 0;
  for (const SavedTensor& s : node.saved) bytes += distinct_storage_bytes(s.kept_tensor(), seen);
  return bytes;
}

// ... of the boundary inputs `node` holds for a replay.
int64_t held_storage_bytes(const Node& node, std::unordered_set<const Storage*>& seen) {
  int64_t bytes = 0;
  for (const Node::Input& in : node.inputs) bytes += distinct_storage_bytes(in.held.kept_tensor(), seen);
  return bytes;
}
}  // namespace

int64_t Node::saved_bytes() const {
  std::unordered_set<const Storage*> seen;
  return saved_storage_bytes(*this, seen);
}

// ---- recording -----------------------------------------------------------------------

Tensors record(std::unique_ptr<Op> op, const Tensors& inputs) {
  auto node = std::make_shared<Node>();
  node->inputs.resize(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Tensor& x = inputs[i];
    REEL_CHECK(x.defined(), op->name(), ": input ", i, " is an undefined tensor");
    Node::Input& in = node->inputs[i];
    in.shape = x.shape();
    in.dtype = x.dtype();
    in.device = x.device();
    if (!GradMode::is_enabled() || !x.requires_grad()) continue;
    const auto& meta = x.autograd_meta();
    REEL_CHECK(meta->is_leaf || !meta->producer.expired(), op->name(), ": input ", i, " (", x.shape(), " on ",
               x.device(), ") was computed by ops whose tape a backward already cleared; detach() it "
               "or compute it again");
    in.meta = meta;
  }
  node->op = std::move(op);
  if (!node->any_input_needs_grad()) {  // nothing to differentiate: compute, record nothing
    node->keep_saved = false;
    const profile::OpScope profiled(node->op->name(), -1, false);
    ForwardCtx ctx(*node);
    Tensors outputs = node->op->forward(inputs, ctx);
    check_anomaly(outputs, node->op->name(), "output", "forward", -1);
    return outputs;
  }

  Tape& tape = Tape::current();
  tape.place(*node);
  node->index = tape.size();  // where push() will put it (it says so again), for prepare_saves' notes
  prepare_saves(*node, inputs);
  Tensors outputs;
  {
    NoGrad no_grad;  // views the forward makes of its inputs (kernels reshape them) record nothing
    const profile::OpScope profiled(node->op->name(), static_cast<int64_t>(tape.size()), false);
    try {
      outputs = run_forward(*node, inputs);
      check_anomaly(outputs, node->op->name(), "output", "forward", static_cast<int64_t>(tape.size()));
    } catch (...) {
      // The node is never pushed, but what it saved was already tagged an activation: tagged
      // back now on an empty tape, else when the tape empties.
      tape.forward_failed();
      throw;
    }
  }
  node->outputs.resize(outputs.size());
  for (size_t k = 0; k < outputs.size(); ++k) {
    Tensor& y = outputs[k];
    REEL_CHECK(y.defined() && !y.autograd_meta(), node->op->name(),
               ": forward must return fresh tensors (a bug in the op)");
    Node::Output& out = node->outputs[k];
    out.shape = y.shape();
    out.dtype = y.dtype();
    out.device = y.device();
    auto meta = std::make_shared<AutogradMeta>();
    out.meta = meta;
    meta->requires_grad = true;
    meta->is_leaf = false;
    meta->producer = node;
    meta->output_index = static_cast<int>(k);
    for (size_t i = 0; i < inputs.size(); ++i) {  // a view of a parameter (or of a view of one)?
      const auto& in = node->inputs[i].meta;
      if (in && (in->is_leaf || in->views_leaf) && y.storage() && y.storage() == inputs[i].storage())
        meta->views_leaf = true;
    }
    node->outputs[k].views_leaf = meta->views_leaf;
    y.autograd_meta() = std::move(meta);
  }
  tape.push(std::move(node));
  return outputs;
}

Tensor sum_to(const Tensor& grad, const Shape& shape) {
  if (grad.shape() == shape) return grad;
  const int64_t lead = grad.dim() - static_cast<int64_t>(shape.size());
  REEL_CHECK(lead >= 0, "sum_to: cannot sum a gradient of shape ", grad.shape(), " down to ", shape);
  std::vector<int64_t> axes;  // leading dims broadcasting added, and dims that were size 1
  for (int64_t d = 0; d < grad.dim(); ++d)
    if (d < lead || (shape[d - lead] == 1 && grad.size(d) != 1)) axes.push_back(d);
  if (axes.empty()) return grad.reshape(shape);
  return kernels::sum(grad, axes, /*keepdim=*/true).reshape(shape);
}

// ---- Tape ---------------------------------------------------------------------------

Tape& Tape::current() {
  thread_local Tape tape;
  return tape;
}

Tape::Tape() { t_tape_alive = true; }
Tape::~Tape() { t_tape_alive = false; }  // the members' destructors must not call back into it

void Tape::push(std::shared_ptr<Node> node) {
  if (!collecting_ && !walking_) collect();  // dead nodes at the end (e.g. dropped on another thread)
  node->index = nodes_.size();
  const bool ends_piece = node->kept;
  nodes_.push_back(std::move(node));
  if (ends_piece && open_segment_) end_piece(*open_segment_, nodes_.size());
}

void Tape::clear() {
  {
    const bool was_walking = walking_;
    walking_ = true;  // the nodes' destructors release metas: nothing to collect, all goes
    nodes_.clear();
    dead_.clear();
    walking_ = was_walking;
  }
  forget_activations();
  // A fresh tape is outside every segment: a scope left open (leaked, or closed on another thread)
  // must not keep every later backward refusing to run. A scope still alive finds its segment
  // ended when it closes, which is then a no-op.
  open_segment_.reset();
  deferred_error_.clear();
}

void Tape::forget_activations() {
  moved_leaves_.clear();  // no node is left that recorded a leaf where it was
  // A tensor the tape saved but the user still holds (an input batch, an output kept for
  // metrics) is no longer an activation once the tape lets go of it.
  for (const std::weak_ptr<Storage>& weak : activations_)
    if (auto storage = weak.lock(); storage && storage->category() == Category::Activation)
      storage->set_category(Category::Temporary);
  activations_.clear();
}

// ---- the lifetime rule (tape.h) ------------------------------------------------------

namespace {
// No live tensor is an output of `node`, and no node on the tape consumes one.
bool dead(const Node& node) {
  for (const Node::Output& out : node.outputs)
    if (!out.meta.expired()) return false;
  return true;
}
}  // namespace

void Tape::output_released(const std::weak_ptr<Node>& producer) {
  if (!t_tape_alive) return;  // thread exit: the tape itself is going
  Tape& tape = current();
  if (tape.walking_) return;
  std::shared_ptr<Node> node = producer.lock();
  // Only a node of this thread's tape: a tensor dropped on another thread leaves it to push(). (Its
  // index is set once, before its outputs exist; `released` only by the thread that owns it.)
  if (!node || node->index >= tape.nodes_.size() || tape.nodes_[node->index] != node || node->released) return;
  tape.dead_.push_back(std::move(node));
  if (!tape.collecting_) tape.collect();
}

// Iterative, not recursive: releasing a node drops its inputs' autograd state, whose destructors
// report their producers here (queued in dead_), so a chain of thousands of nodes is released in a
// loop instead of as deep a stack of destructors.
void Tape::collect() {
  collecting_ = true;
  const bool had_nodes = !nodes_.empty();
  for (;;) {
    if (!dead_.empty()) {
      const std::shared_ptr<Node> node = std::move(dead_.back());
      dead_.pop_back();
      if (!node->released && dead(*node)) release_dead(*node);
      continue;
    }
    if (nodes_.empty() || !(nodes_.back()->released || dead(*nodes_.back()))) break;
    const std::shared_ptr<Node> node = std::move(nodes_.back());
    nodes_.pop_back();
    // A segment still open records its later nodes from here: it begins no later than this slot.
    for (Segment* s = open_segment_.get(); s; s = s->parent.get()) {
      s->begin = std::min(s->begin, nodes_.size());
      if (s->piece) s->piece->begin = std::min(s->piece->begin, nodes_.size());
    }
    if (!node->released) release_dead(*node);
  }
  collecting_ = false;
  if (had_nodes && nodes_.empty()) forget_activations();  // as clear(), but open segments stay open
}

void Tape::release_dead(Node& node) {
  node.released = true;
  release(node);  // saves, output gradients, held inputs
  // Last: dropping the links to the inputs may make their producers dead (queued in dead_).
  std::vector<Node::Input> inputs = std::move(node.inputs);
  node.inputs.clear();
}

void Tape::leaf_moved(const std::shared_ptr<AutogradMeta>& leaf, Device device) {
  if (nodes_.empty() || !leaf) return;  // nothing recorded can name the old device
  for (auto& [weak, where] : moved_leaves_)
    if (weak.lock() == leaf) {
      where = device;
      return;
    }
  moved_leaves_.emplace_back(leaf, device);
}

// A weak entry that still locks is the live meta at that address (a node holds `leaf`, so it is
// alive and no dead entry can alias it).
const Device* Tape::moved_to(const AutogradMeta* leaf) const {
  for (const auto& [weak, where] : moved_leaves_)
    if (weak.lock().get() == leaf) return &where;
  return nullptr;
}

int64_t Tape::saved_bytes() const {
  std::unordered_set<const Storage*> seen;  // views of one storage, saved by several nodes: once
  int64_t bytes = 0;
  for (const auto& node : nodes_) bytes += saved_storage_bytes(*node, seen) + held_storage_bytes(*node, seen);
  return bytes;
}

std::string Tape::dump() const {
  std::ostringstream os;
  os << "tape: " << nodes_.size() << " nodes, " << format_bytes(saved_bytes()) << " saved or held\n";
  for (const auto& node : nodes_) {
    os << "  #" << node->index << " " << node->op->name();
    if (node->released) {
      os << " (released: no live tensor depends on it)\n";
      continue;
    }
    const std::string attrs = node->op->attributes();
    if (!attrs.empty()) os << " [" << attrs << "]";
    os << " (";
    for (size_t i = 0; i < node->inputs.size(); ++i) os << (i ? ", " : "") << shape_str(node->inputs[i].shape);
    os << ") -> (";
    for (size_t k = 0; k < node->outputs.size(); ++k) os << (k ? ", " : "") << shape_str(node->outputs[k].shape);
    os << ")  saved " << format_bytes(node->saved_bytes());
    std::unordered_set<const Storage*> seen;
    const int64_t held = held_storage_bytes(*node, seen);
    if (held) os << ", holds " << format_bytes(held);
    if (node->segment)
      os << "  segment " << node->segment->id << (outermost_collapsed(*node) ? " (collapsed)" : "")
         << (node->kept ? ", output kept" : "");
    os << "\n";
  }
  return os.str();
}

namespace {
void check_loss_requires_grad(const Tensor& loss) {
  REEL_CHECK(loss.defined(), "backward: the loss is an undefined tensor");
  REEL_CHECK(loss.requires_grad(), "backward: the loss ", loss.shape(), " on ", loss.device(),
             " does not require grad: no input of the ops that made it requires grad (or they ran "
             "under NoGrad, or it was detached)");
}
}  // namespace

void Tape::raise_deferred_error() {
  if (deferred_error_.empty()) return;
  // Once: the tape itself was repaired at the close.
  const std::string message = std::move(deferred_error_);
  deferred_error_.clear();
  REEL_FAIL(message, " (raised by this backward: the scope's destructor found it and cannot throw)");
}

// The seed is a number the host knows: a loss whose op takes it so (Op::accepts_host_seed) gets it
// as that number, and no tensor is made of it (a fill); any other loss gets it filled in.
void Tape::backward(const Tensor& loss, double scale) {
  raise_deferred_error();
  check_loss_requires_grad(loss);
  REEL_CHECK(loss.numel() == 1, "backward: the loss has shape ", loss.shape(),
             "; a non-scalar loss needs an explicit gradient: backward(loss, grad)");
  const auto& meta = loss.autograd_meta();
  const std::shared_ptr<Node> root = meta->is_leaf ? nullptr : meta->producer.lock();
  if (root && root->op->accepts_host_seed(static_cast<size_t>(meta->output_index)))
    walk(loss, Tensor(), scale);
  else
    walk(loss, full(loss.shape(), scale, loss.dtype(), loss.device()), std::nullopt);
}

void Tape::backward(const Tensor& loss, const Tensor& grad) {
  raise_deferred_error();
  check_loss_requires_grad(loss);
  REEL_CHECK(grad.defined(), "backward: the gradient of the loss ", loss.shape(), " is an undefined tensor");
  REEL_CHECK(grad.shape() == loss.shape() && grad.dtype() == loss.dtype() && grad.device() == loss.device(),
             "backward: the gradient ", grad.shape(), " ", grad.dtype(), " on ", grad.device(),
             " does not match the loss ", loss.shape(), " ", loss.dtype(), " on ", loss.device());
  walk(loss, grad, std::nullopt);
}

// The checks and the walk, with the seed either a tensor (`grad`) or a host number (`host_seed`,
// only for a loss made by a node: a leaf loss has no rule to take it).
void Tape::walk(const Tensor& loss, const Tensor& grad, std::optional<double> host_seed) {
  REEL_CHECK(!open_segment_, "backward: called inside an autograd::Checkpoint scope; close the segment first");
  // The walk computes in the dtypes the forward recorded (its casts are nodes, replayed as such): a
  // rule calling a user function must not be re-cast by a scope still open around backward.
  Autocast autocast_off(std::nullopt);
  const auto& meta = loss.autograd_meta();
  if (meta->is_leaf) {  // d(leaf)/d(leaf) = 1: nothing recorded to walk
    ObservedBackward observed({-1, meta->grad.defined() && !meta->grad_is_zero});
    accumulate_into_leaf(*meta, grad);
    observed.finish();
    return;
  }
  const std::shared_ptr<Node> root = meta->producer.lock();
  REEL_CHECK(root && root->index < nodes_.size() && nodes_[root->index] == root,
             "backward: the tape that recorded the loss ", loss.shape(),
             " was already cleared (by an earlier backward over the same forward); run the forward again");
  // Check the nodes the loss depends on (not stale ones, e.g. of an inference forward run in grad
  // mode, which the walk skips) before anything is accumulated.
  std::vector<bool> needed(root->index + 1, false);
  needed[root->index] = true;
  const auto moved = [this](const AutogradMeta* leaf) { return moved_leaves_.empty() ? nullptr : moved_to(leaf); };
  bool accumulates = false;  // a leaf it reaches holds a gradient already (BackwardEvent)
  for (size_t i = root->index + 1; i-- > 0;) {
    if (!needed[i]) continue;
    check_node(*nodes_[i], moved);
    for (const Node::Input& in : nodes_[i]->inputs) {
      const Node* producer = in.producer();
      if (producer && producer->index < i) needed[producer->index] = true;
      if (in.meta && in.meta->is_leaf && in.meta->grad.defined() && !in.meta->grad_is_zero) accumulates = true;
    }
  }
  const profile::PhaseScope profiled_phase(profile::Phase::Backward);
  // end_backward comes once run_backward has cleared the tape, or with threw = true as its error leaves.
  ObservedBackward observed({static_cast<int64_t>(root->index), accumulates});
  run_backward(*root, meta->output_index, grad, host_seed);
  observed.finish();
}

namespace {
// For leaf_grad_ready observers: ready[i] lists the leaves whose lowest user on the tape is node i,
// so their .grad is final once the walk is past it. Empty when no observer asks.
std::vector<std::vector<const AutogradMeta*>> leaves_final_after(
    const std::vector<std::shared_ptr<Node>>& nodes, size_t root) {
  std::vector<std::vector<const AutogradMeta*>> ready;
  if (!any_observer_wants_leaf_grad_ready()) return ready;
  std::unordered_set<const AutogradMeta*> seen;
  ready.resize(root + 1);
  for (size_t i = 0; i <= root; ++i)
    for (const Node::Input& in : nodes[i]->inputs)
      if (in.meta && in.meta->is_leaf && seen.insert(in.meta.get()).second) ready[i].push_back(in.meta.get());
  return ready;
}

bool reached(const Node& node) {  // does any gradient flow into this node?
  for (const Node::Output& out : node.outputs)
    if (out.grad.defined() || out.host_grad) return true;
  return false;
}
}  // namespace

// The reverse walk. Observers (autograd/hooks.h) see each rule, each replay and each leaf whose
// gradient is final (and the walk's begin and end, from backward()); what they do (anomaly checks,
// profiler scopes, data parallel's buckets) is not written here.
void Tape::run_backward(const Node& root, int output_index, const Tensor& seed, std::optional<double> host_seed) {
  // Whatever happens (an error in a kernel included), the tape is spent afterwards.
  struct ClearAtExit {
    Tape& tape;
    ~ClearAtExit() { tape.clear(); }
  } clear_at_exit{*this};
  // The walk owns nodes_ until the clear: a tensor dropped meanwhile releases nothing.
  struct Walking {
    bool& flag;
    bool was = flag;
    explicit Walking(bool& f) : flag(f) { flag = true; }
    ~Walking() { flag = was; }
  } walking{walking_};
  NoGrad no_grad;  // backward rules and replays call kernels; nothing may record meanwhile

  const auto ready = leaves_final_after(nodes_, root.index);
  Node::Output& root_out = nodes_[root.index]->outputs[output_index];
  if (host_seed) root_out.host_grad = host_seed;  // the rule reads the number (BackwardCtx::host_grad)
  else root_out.grad = seed;
  for (size_t i = root.index + 1; i-- > 0;) {
    Node& node = *nodes_[i];
    if (reached(node)) {
      while (Segment* segment = outermost_collapsed(node)) replay(*segment, i);
      run_rule(node);
    }
    release(node);
    if (!ready.empty())
      for (const AutogradMeta* leaf : ready[i]) notify_leaf_grad_ready(*leaf);
  }
}

// One node's backward rule: its output gradients in, its input gradients summed where they go (a
// producer's output slot, or a leaf's .grad unless the rule wrote it there itself).
void Tape::run_rule(Node& node) {
  Tensors grad_out(node.outputs.size());
  for (size_t k = 0; k < grad_out.size(); ++k) {
    const Node::Output& out = node.outputs[k];
    if (out.grad.defined()) grad_out[k] = out.grad;
    else if (out.host_grad) continue;  // handed as a number: the rule reads BackwardCtx::host_grad(k)
    else if (!node.op->accepts_absent_grad(k)) grad_out[k] = zeros(out.shape, out.dtype, out.device);
  }
  BackwardCtx ctx(node);
  Tensors grad_in;
  {
    ObservedNode observed({node.op->name(), static_cast<int64_t>(node.index), Pass::Backward});
    grad_in = node.op->backward(grad_out, ctx);
    observed.finish(grad_in);
  }
  release(node);  // its saves and output gradients go before the input gradients are summed
  grad_out.clear();
  for (size_t j = 0; j < node.inputs.size() && j < grad_in.size(); ++j) {
    const Node::Input& in = node.inputs[j];
    const Tensor& g = grad_in[j];
    if (!in.meta || !g.defined()) continue;
    if (ctx.sunk(j)) {
      in.meta->grad_is_zero = false;  // the rule wrote the whole buffer
      continue;
    }
    REEL_CHECK(g.shape() == in.shape, node.op->name(), ": backward gave input ", j, " a gradient of shape ",
               g.shape(), ", expected ", in.shape, " (a bug in the op)");
    if (in.meta->is_leaf) {
      ctx.before_leaf_grad(j);  // an observer may install the .grad buffer now
      accumulate_into_leaf(*in.meta, g);
    } else {
      Tensor& slot = in.producer()->outputs[in.meta->output_index].grad;
      slot = slot.defined() ? kernels::binary(kernels::BinaryOp::Add, slot, g) : g;  // fan-out
    }
  }
}

// ---- grad mode, helpers ----------------------------------------------

bool grad_enabled() { return GradMode::is_enabled(); }

NoGrad::NoGrad() : previous_(GradMode::is_enabled()) { GradMode::set_enabled(false); }
NoGrad::~NoGrad() { GradMode::set_enabled(previous_); }

void zero_grad(const std::vector<Tensor>& params) {
  for (const Tensor& p : params) {
    const auto& meta = p.autograd_meta();
    if (meta && meta->grad.defined()) meta->grad_is_zero = true;  // the fill is deferred (autograd_meta.h)
  }
}

}  // namespace reel::autograd
