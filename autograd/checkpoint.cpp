// Checkpoint segments: the Checkpoint scope, how a node inside a collapsed segment holds its
// boundary inputs instead of its saves, how a forward's saves are made final (a save that is a
// 16-bit cast of a parameter keeps the parameter instead), the replay of a segment in backward, and
// the policies that choose segments over a chain of modules. The reverse walk that triggers a
// replay is in tape.cpp.
#include "autograd/checkpoint.h"

#include <algorithm>
#include <cmath>
#include <exception>
#include <limits>
#include <map>
#include <numeric>
#include <set>
#include <sstream>

#include "autograd/hooks.h"
#include "autograd/ops/cast.h"
#include "autograd/tape.h"
#include "core/allocator.h"
#include "core/profile.h"

namespace reel::autograd {

namespace {

bool inside(const Node* node, const Segment* segment) {
  if (!node) return false;
  for (const Segment* s = node->segment.get(); s; s = s->parent.get())
    if (s == segment) return true;
  return false;
}

// The number `parse` (std::stoll, std::stod) reads at the start of `text`, and how many characters
// it took: 0 when there is none.
template <typename Parse>
auto leading_number(const std::string& text, Parse parse) {
  size_t used = 0;
  decltype(parse(text, &used)) v{};
  try {
    v = parse(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  return std::make_pair(v, used);
}

int64_t parse_int(const std::string& text, const std::string& whole) {
  const auto [v, used] = leading_number(text, [](const std::string& t, size_t* n) { return std::stoll(t, n); });
  REEL_CHECK(used == text.size() && !text.empty(), "checkpoint policy '", whole,
             "': '", text, "' is not a whole number (use none, every:K, sqrt, list:i,j,..., selective or budget:SIZE)");
  return v;
}

// "48MiB", "1.5GiB", "300MB", "512KiB", "1000000" (bytes), "64B": digits with an optional
// fraction, then an optional unit, binary (KiB, MiB, GiB: 1024^n) or decimal (KB, MB, GB: 1000^n).
// Read exactly, in integers: the size must be a whole, positive number of bytes below 2^63. Up to
// 19 digits (every byte count str() prints: 2^63 - 1 has 19), at most 18 of them after the point.
int64_t parse_size(const std::string& text, const std::string& whole) {
  const char* const help = "a positive size is bytes, or a number with B, KiB, MiB, GiB, KB, MB or GB: budget:48MiB";
  const auto digit = [&](size_t i) { return i < text.size() && text[i] >= '0' && text[i] <= '9'; };
  int64_t mantissa = 0, ten_f = 1;  // the number is mantissa / ten_f
  int digits = 0, fraction_digits = 0;
  bool fraction_ok = true;  // a '.' has a digit after it
  const auto take = [&](size_t i) {
    const int d = text[i] - '0';
    REEL_CHECK(mantissa <= (std::numeric_limits<int64_t>::max() - d) / 10, "checkpoint policy '", whole, "': '", text,
               "' is too large (2^63 bytes or more)");
    mantissa = mantissa * 10 + d;
  };
  size_t i = 0;
  for (; digit(i) && digits < 19; ++i, ++digits) take(i);
  if (i < text.size() && text[i] == '.') {
    fraction_ok = digit(++i);
    for (; digit(i) && digits < 19 && fraction_digits < 18; ++i, ++digits, ++fraction_digits) {
      take(i);
      ten_f *= 10;
    }
  }
  REEL_CHECK(!digit(i), "checkpoint policy '", whole, "': '", text,
             "' has more than 19 digits, or 18 after the point (", help, ")");
  const std::string unit = text.substr(i);
  static const std::map<std::string, int64_t> units = {
      {"", 1},           {"B", 1},          {"KiB", int64_t{1} << 10}, {"MiB", int64_t{1} << 20},
      {"GiB", int64_t{1} << 30}, {"KB", 1000}, {"MB", 1000000},        {"GB", 1000000000}};
  const auto it = units.find(unit);
  REEL_CHECK(digits > 0 && fraction_ok && it != units.end(), "checkpoint policy '", whole, "': '", text,
             "' is not a positive size (", help, ")");
  // bytes = mantissa * unit / ten_f, whole exactly when ten_f / gcd(unit, ten_f) divides mantissa.
  const int64_t g = std::gcd(it->second, ten_f), den = ten_f / g, mul = it->second / g;
  REEL_CHECK(mantissa % den == 0, "checkpoint policy '", whole, "': '", text,
             "' is not a whole number of bytes (give whole bytes, or a finer unit: budget:1536KiB)");
  const int64_t q = mantissa / den;
  REEL_CHECK(q > 0, "checkpoint policy '", whole, "': '", text, "' is not a positive size (", help, ")");
  REEL_CHECK(q <= std::numeric_limits<int64_t>::max() / mul, "checkpoint policy '", whole, "': '", text,
             "' is too large (2^63 bytes or more)");
  return q * mul;
}

}  // namespace

// ---- segments on the tape ----------------------------------------------------------

// The outermost segment around `node` that is still collapsed: the one to replay first. Segments
// are replayed outside-in, so every segment inside a collapsed one is collapsed too.
Segment* outermost_collapsed(const Node& node) {
  Segment* found = nullptr;
  for (Segment* s = node.segment.get(); s; s = s->parent.get())
    if (s->collapsible() && !s->replayed) found = s;
  return found;
}

bool keep_costly_outputs(const Op& op) { return op.kept_by_selective(); }

// Decides whether `node` keeps its saves: not while it sits in a collapsed segment. There it
// holds instead the inputs `in` that come from outside that segment: the data a replay starts
// from (an input made inside the segment is re-made by the replay).
void prepare_saves(Node& node, const Tensors& in) {
  const Segment* collapsed = outermost_collapsed(node);
  node.keep_saved = collapsed == nullptr || node.kept;
  if (!collapsed) return;
  for (size_t i = 0; i < in.size(); ++i) {
    if (inside(node.inputs[i].producer(), collapsed)) continue;
    node.inputs[i].held = SavedTensor(in[i]);  // its version: the replay refuses a later write
    node.inputs[i].held.pack({nullptr, static_cast<int64_t>(node.index), collapsed->id, static_cast<int>(i)});
  }
}

namespace {
// When the save `t` is one of `node`'s inputs made by a cast of a parameter (autograd/ops/cast.h,
// e.g. autocast's bf16 copy of a GEMM's f32 weight), the slot keeps the parameter and backward casts
// it again: the copy is freed once the forward is done with it, not kept as an activation.
bool recast_parameter_save(const Node& node, SavedTensor& slot, const Tensor& t, const Tensors& in) {
  for (size_t j = 0; j < in.size(); ++j) {
    if (!in[j].same(t)) continue;
    const Node* producer = node.inputs[j].producer();
    const auto* cast = producer ? dynamic_cast<const ops::Cast*>(producer->op.get()) : nullptr;
    if (!cast || !cast->source.defined()) return false;
    slot.recast_from(cast->source);
    return true;
  }
  return false;
}
}  // namespace

// The saves are final once the forward returned: a save that is a cast of a parameter keeps the
// parameter (recast_parameter_save); an output the op saved (exp saves y) keeps its data alone (the
// same handle as y would carry y's autograd state, and the node would keep itself alive); a kept
// node's saves that are its inputs are dropped (its piece's replay re-makes them); the rest are
// packed (autograd/saved_tensor.h).
Tensors run_forward(Node& node, const Tensors& in) {
  ForwardCtx ctx(node);
  Tensors out = node.op->forward(in, ctx);
  const bool drop_inputs = node.kept && node.keep_saved;
  int index = -1;  // the slot's position among the node's saves (KeptBy::index)
  for (SavedTensor& slot : node.saved) {
    ++index;
    const Tensor* t = slot.kept_tensor();
    if (!t) continue;
    if (recast_parameter_save(node, slot, *t, in)) continue;
    const auto same = [t](const Tensor& x) { return x.same(*t); };
    if (drop_inputs)
      if (const auto it = std::find_if(in.begin(), in.end(), same); it != in.end()) {
        slot.drop_keep_input(static_cast<int>(it - in.begin()));
        continue;
      }
    if (std::any_of(out.begin(), out.end(), same)) slot.mark_output();
    slot.pack({node.op->name(), static_cast<int64_t>(node.index), -1, index});
  }
  return out;
}

void end_piece(Segment& scope, size_t end) {
  if (!scope.piece) return;
  scope.piece->end = end;
  scope.piece.reset();
}

void Tape::place(Node& node) {
  Segment* scope = open_segment_.get();
  if (!scope || !scope->keep) {
    node.segment = open_segment_;
    return;
  }
  if (!scope->piece) {
    scope->piece = std::make_shared<Segment>();
    scope->piece->parent = open_segment_;
    scope->piece->begin = nodes_.size();
    scope->piece->id = ++segments_opened_;
  }
  node.segment = scope->piece;
  node.kept = scope->keep(*node.op);
}

namespace {
// A kept node's saves that are its inputs, from the inputs its piece's replay re-made.
void refill_kept_saves(Node& node, const Tensors& in) {
  for (size_t k = 0; k < node.saved.size(); ++k) {
    SavedTensor& slot = node.saved[k];
    if (!slot.defined() && slot.input() >= 0)
      slot.refill(in[static_cast<size_t>(slot.input())],
                  {node.op->name(), static_cast<int64_t>(node.index), -1, static_cast<int>(k)});
  }
}
}  // namespace

void Tape::open(std::shared_ptr<Segment> segment) {
  if (open_segment_) end_piece(*open_segment_, nodes_.size());  // a nested scope is not in a piece
  segment->parent = open_segment_;
  segment->begin = nodes_.size();
  segment->id = ++segments_opened_;
  open_segment_ = std::move(segment);
}

void Tape::close(const std::shared_ptr<Segment>& segment, OnMisuse on_misuse) {
  std::vector<Segment*> inside;  // segments opened inside `segment` and still open, innermost first
  Segment* s = open_segment_.get();
  for (; s && s != segment.get(); s = s->parent.get()) inside.push_back(s);
  if (!s) return;  // not open any more: clear() or the out-of-order close of a scope around it ended it
  // End the segments inside too: leaving them open would keep the tape inside a segment whose
  // parent is closed, and every later backward would refuse to run.
  for (Segment* in : inside) {
    in->end = nodes_.size();
    end_piece(*in, nodes_.size());
  }
  segment->end = nodes_.size();
  end_piece(*segment, nodes_.size());
  open_segment_ = segment->parent;
  if (inside.empty() || on_misuse == OnMisuse::Ignore) return;
  std::ostringstream msg;
  msg << "Checkpoint: segment " << segment->id << " closed while segment" << (inside.size() > 1 ? "s " : " ");
  for (size_t k = inside.size(); k-- > 0;) msg << inside[k]->id << (k ? ", " : "");
  msg << ", opened inside it, " << (inside.size() > 1 ? "are" : "is")
      << " still open; scopes must close innermost first (destroy std::optional / unique_ptr scopes in "
         "reverse order of opening), so "
      << (inside.size() > 1 ? "all of them" : "both") << " end here";
  if (on_misuse == OnMisuse::Raise) REEL_FAIL(msg.str());
  if (deferred_error_.empty()) deferred_error_ = msg.str();  // the first misuse explains the rest
}

// Re-runs tape[segment.begin .. last] from the inputs the segment holds. Nodes directly in the
// segment get their saved tensors back; nodes of a nested segment instead hold that segment's
// boundary (it is replayed in turn when the walk reaches it). Nodes after `last` were already
// walked past, so they are not re-run. A re-made output lives only until its last consumer in the
// range has run, unless a node saved it.
void Tape::replay(Segment& segment, size_t last) {
  segment.replayed = true;
  ObservedReplay observed_replay({segment.id, segment.begin, last});
  using Key = std::pair<size_t, int>;  // (node index, output index)
  std::map<Key, int> uses_left;
  for (size_t i = segment.begin; i <= last; ++i)
    for (const Node::Input& in : nodes_[i]->inputs)  // none for a released node
      if (!in.held.defined()) ++uses_left[{in.producer()->index, in.meta->output_index}];

  std::map<Key, Tensor> live;
  for (size_t i = segment.begin; i <= last; ++i) {
    Node& node = *nodes_[i];
    if (node.released) continue;  // no live tensor depends on it: nothing to recompute
    Tensors in(node.inputs.size());
    for (size_t j = 0; j < in.size(); ++j) {
      Node::Input& input = node.inputs[j];
      if (input.held.defined()) {
        in[j] = input.held.unpack(node.op->name(), static_cast<int>(j));
        input.held.clear();
        continue;
      }
      const Key key{input.producer()->index, input.meta->output_index};
      in[j] = live.at(key);
      if (--uses_left[key] == 0) live.erase(key);
    }
    // A kept node ends its piece, so nothing in this replay consumes its outputs: it runs nothing
    // and gets back the saves that are its inputs (its other saves were kept).
    if (node.kept && node.segment.get() == &segment) {
      refill_kept_saves(node, in);
      continue;
    }
    node.saved.clear();
    prepare_saves(node, in);
    Tensors out;
    {
      ObservedNode observed({node.op->name(), static_cast<int64_t>(i), Pass::Replay});
      out = run_forward(node, in);
      observed.finish(out);
    }
    for (size_t k = 0; k < out.size(); ++k) {
      REEL_CHECK(out[k].shape() == node.outputs[k].shape, node.op->name(), ": replay made an output of shape ",
                 out[k].shape(), ", forward made ", node.outputs[k].shape);
      if (node.outputs[k].views_leaf) {  // saved by a later node, it stays a parameter's memory
        out[k].autograd_meta() = std::make_shared<AutogradMeta>();
        out[k].autograd_meta()->views_leaf = true;
      }
      const Key key{i, static_cast<int>(k)};
      auto it = uses_left.find(key);
      if (it != uses_left.end() && it->second > 0) live[key] = out[k];
    }
  }
  observed_replay.finish();
}

// ---- the scope ----------------------------------------------------------------------

Checkpoint::Checkpoint() : uncaught_at_open_(std::uncaught_exceptions()) {
  if (!grad_enabled()) return;  // nothing records, so there is nothing to checkpoint
  segment_ = std::make_shared<Segment>();
  Tape::current().open(segment_);
}

Checkpoint::Checkpoint(KeepRule keep) : uncaught_at_open_(std::uncaught_exceptions()) {
  REEL_CHECK(keep, "Checkpoint: a selective scope needs a keep rule (e.g. autograd::keep_costly_outputs)");
  if (!grad_enabled()) return;
  segment_ = std::make_shared<Segment>();
  segment_->keep = std::move(keep);
  Tape::current().open(segment_);
}

// Never throws: see checkpoint.h. An out-of-order close while an exception unwinds is dropped (that
// exception is the one to report; the order shows up again in a run without it).
Checkpoint::~Checkpoint() {
  if (!segment_) return;
  const bool unwinding = std::uncaught_exceptions() > uncaught_at_open_;
  Tape::current().close(segment_, unwinding ? Tape::OnMisuse::Ignore : Tape::OnMisuse::RaiseAtBackward);
}

void Checkpoint::close() {
  if (!segment_) return;
  const std::shared_ptr<Segment> segment = std::move(segment_);  // closed once, even if this raises
  Tape::current().close(segment, Tape::OnMisuse::Raise);
}

// ---- policies -------------------------------------------------------------------

CheckpointPolicy CheckpointPolicy::parse(const std::string& text) {
  CheckpointPolicy p;
  if (text == "none" || text.empty()) return p;
  if (text == "sqrt") {
    p.kind = Kind::Sqrt;
    return p;
  }
  if (text == "selective") {
    p.kind = Kind::Selective;
    return p;
  }
  if (text.rfind("budget:", 0) == 0) return budget(parse_size(text.substr(7), text));
  if (text.rfind("every:", 0) == 0) {
    p.kind = Kind::Every;
    p.every = parse_int(text.substr(6), text);
    REEL_CHECK(p.every >= 1, "checkpoint policy '", text, "': K must be at least 1");
    return p;
  }
  if (text.rfind("list:", 0) == 0) {
    p.kind = Kind::List;
    std::string rest = text.substr(5);
    if (rest.empty()) return p;  // no unit checkpointed (what an empty list prints as)
    size_t start = 0;
    while (start <= rest.size()) {
      const size_t comma = std::min(rest.find(',', start), rest.size());
      const int64_t i = parse_int(rest.substr(start, comma - start), text);
      REEL_CHECK(i >= 0, "checkpoint policy '", text, "': indices must be >= 0");
      p.list.push_back(i);
      start = comma + 1;
    }
    std::sort(p.list.begin(), p.list.end());
    p.list.erase(std::unique(p.list.begin(), p.list.end()), p.list.end());
    return p;
  }
  REEL_FAIL("checkpoint policy '", text, "' is not one of none, every:K, sqrt, list:i,j,..., selective, budget:SIZE");
}

CheckpointPolicy CheckpointPolicy::selective(KeepRule keep) {
  REEL_CHECK(keep, "CheckpointPolicy::selective: the keep rule is empty");
  CheckpointPolicy p;
  p.kind = Kind::Selective;
  p.keep = std::move(keep);
  return p;
}

CheckpointPolicy CheckpointPolicy::budget(int64_t bytes) {
  REEL_CHECK(bytes > 0, "CheckpointPolicy::budget: the budget must be positive, got ", bytes, " bytes");
  CheckpointPolicy p;
  p.kind = Kind::Budget;
  p.budget_bytes = bytes;
  return p;
}

KeepRule CheckpointPolicy::keep_rule() const { return keep ? keep : KeepRule(keep_costly_outputs); }

namespace {
// Bytes as parse_size reads them back exactly: the largest binary unit that divides them.
std::string exact_size(int64_t bytes) {
  for (const auto& [unit, size] : {std::pair<const char*, int64_t>{"GiB", int64_t{1} << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}})
    if (bytes % size == 0) return std::to_string(bytes / size) + unit;
  return std::to_string(bytes);
}
}  // namespace

std::string CheckpointPolicy::str() const {
  switch (kind) {
    case Kind::None: return "none";
    case Kind::Sqrt: return "sqrt";
    case Kind::Selective: return "selective";
    case Kind::Budget: return "budget:" + exact_size(budget_bytes);
    case Kind::Every: return "every:" + std::to_string(every);
    case Kind::List: {
      std::string s = "list:";
      for (size_t i = 0; i < list.size(); ++i) s += (i ? "," : "") + std::to_string(list[i]);
      return s;
    }
  }
  return "?";
}

bool CheckpointPolicy::operator==(const CheckpointPolicy& o) const {
  return kind == o.kind && every == o.every && list == o.list && budget_bytes == o.budget_bytes &&
         static_cast<bool>(keep) == static_cast<bool>(o.keep);
}

namespace {

// Units a run of k recomputes in backward: all but the last run's (that one is not checkpointed).
int64_t recomputed_units(int64_t n, int64_t k) { return k * ((n - 1) / k); }

// Sqrt's run length: floor(sqrt(n)) when its runs recompute no more units than runs of
// ceil(sqrt(n)) would, else ceil(sqrt(n)). Both give about sqrt(n) runs of about sqrt(n) units;
// the shorter runs lower the peak (a replay holds one run's saves, which outweigh the boundary
// one more run keeps), so they win whenever they cost no more time. 3 blocks: [1, 1, 1], not
// [2, 1], which recomputes the same 2 blocks and holds two blocks' saves at once; 8: [2, 2, 2, 2]
// for [3, 3, 2] (6 blocks recomputed either way); 5: [3, 2] (3 recomputed, not 4).
int64_t sqrt_run_length(int64_t n) {
  int64_t lo = static_cast<int64_t>(std::sqrt(static_cast<double>(n)));
  while (lo * lo > n) --lo;  // exact floor for any n a double rounds
  while ((lo + 1) * (lo + 1) <= n) ++lo;
  lo = std::max<int64_t>(1, lo);
  const int64_t hi = lo * lo == n ? lo : lo + 1;
  return recomputed_units(n, lo) <= recomputed_units(n, hi) ? lo : hi;
}

}  // namespace

std::vector<CheckpointPolicy::Run> CheckpointPolicy::plan(int64_t n) const {
  std::vector<Run> runs;
  if (n <= 0) return runs;
  if (kind == Kind::None) return {{0, n, false, false}};
  if (kind == Kind::Selective) return {{0, n, false, true}};
  REEL_CHECK(kind != Kind::Budget, "checkpoint policy ", str(),
             ": a budget has no plan before the chain is measured (nn::Sequential::plan_checkpoint)");
  if (kind == Kind::List) {
    const std::set<int64_t> chosen(list.begin(), list.end());
    for (int64_t i = 0; i < n; ++i) {
      const bool ck = chosen.count(i) > 0;
      if (!ck && !runs.empty() && !runs.back().checkpointed) runs.back().end = i + 1;
      else runs.push_back({i, i + 1, ck, false});
    }
    return runs;
  }
  const int64_t k = kind == Kind::Every ? every : sqrt_run_length(n);
  for (int64_t b = 0; b < n; b += k) runs.push_back({b, std::min(n, b + k), true, false});
  runs.back().checkpointed = false;
  return runs;
}

}  // namespace reel::autograd
