// GPT-2 style decoder: attention, block MLP, pre-LN block, the model and sampling. The attention
// branch's last bias (c_proj.bias) folds into the fused add + LayerNorm after it where the branch
// allows it (nn/gpt.h: bias_deferrable; add_layer_norm's rb).
#include "nn/gpt.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "autograd/nn_functions.h"
#include "autograd/tape.h"

namespace reel::nn {

namespace {

void init_gpt2_linear(Linear& l, double init_std) {
  init_normal_(l.weight, init_std);
  if (l.bias.defined()) l.bias.fill_(0.0);
}

}  // namespace

CausalSelfAttention::CausalSelfAttention(const GPTConfig& c) : n_head_(c.n_head), fused_(c.fused_attention) {
  REEL_CHECK(c.n_head > 0 && c.n_embd % c.n_head == 0, "CausalSelfAttention: n_embd ", c.n_embd,
             " must be a multiple of n_head ", c.n_head);
  c_attn = register_module("c_attn", std::make_shared<Linear>(c.n_embd, 3 * c.n_embd, c.bias));
  c_proj = register_module("c_proj", std::make_shared<Linear>(c.n_embd, c.n_embd, c.bias));
  resid_dropout = register_module("resid_dropout", std::make_shared<Dropout>(c.dropout));
}

Tensor CausalSelfAttention::heads_merged(const Tensor& x) {
  REEL_CHECK(x.dim() == 3, name(), ": expects x of shape (B, T, C), got ", x.shape());
  const int64_t B = x.size(0), T = x.size(1), C = x.size(2), D = C / n_head_;
  const std::vector<Tensor> qkv = split((*c_attn)(x), {C, C, C}, -1);  // 3 x (B, T, C) views
  auto heads = [&](const Tensor& t) { return transpose(view(t, {B, T, n_head_, D}), 1, 2); };  // (B, H, T, D)
  const Tensor q = heads(qkv[0]), k = heads(qkv[1]), v = heads(qkv[2]);
  const Tensor y = fused_ ? attention(q, k, v, true) : attention_composed(q, k, v, true);  // (B, H, T, D)
  return reshape(transpose(y, 1, 2), {B, T, C});
}

Tensor CausalSelfAttention::forward(const Tensor& x) { return (*resid_dropout)((*c_proj)(heads_merged(x))); }

bool CausalSelfAttention::bias_deferrable() const {
  return c_proj->bias.defined() && !has_forward_hooks() && !c_proj->has_forward_hooks() &&
         !resid_dropout->has_forward_hooks() && (resid_dropout->p == 0 || !resid_dropout->training());
}

Tensor CausalSelfAttention::unbiased(const Tensor& x) { return linear(heads_merged(x), c_proj->weight); }

FeedForward::FeedForward(const GPTConfig& c) {
  c_fc = register_module("c_fc", std::make_shared<Linear>(c.n_embd, 4 * c.n_embd, c.bias));
  c_proj = register_module("c_proj", std::make_shared<Linear>(4 * c.n_embd, c.n_embd, c.bias));
  dropout = register_module("dropout", std::make_shared<Dropout>(c.dropout));
}

// With biases, c_fc, GELU and c_proj run as one op (autograd/ops/linear.h: the GELU and its
// gradient ride on the GEMMs' epilogues), unless c_fc or c_proj has hooks of its own (FSDP's layer
// units gather each Linear in its hooks): those run as three ops, through the modules.
Tensor FeedForward::forward(const Tensor& x) {
  if (c_fc->bias.defined() && c_proj->bias.defined() && !c_fc->has_forward_hooks() && !c_proj->has_forward_hooks())
    return (*dropout)(linear_gelu_linear(x, c_fc->weight, c_fc->bias, c_proj->weight, c_proj->bias));
  return (*dropout)((*c_proj)(gelu((*c_fc)(x))));
}

TransformerBlock::TransformerBlock(const GPTConfig& c) {
  ln_1 = register_module("ln_1", std::make_shared<LayerNorm>(c.n_embd, 1e-5, c.bias));
  attn = register_module("attn", std::make_shared<CausalSelfAttention>(c));
  ln_2 = register_module("ln_2", std::make_shared<LayerNorm>(c.n_embd, 1e-5, c.bias));
  mlp = register_module("mlp", std::make_shared<FeedForward>(c));
}

namespace {
// The same tensor: the same data and the same place on the tape.
bool same_tensor(const Tensor& a, const Tensor& b) {
  return a.defined() && b.defined() && a.storage() == b.storage() && a.offset() == b.offset() &&
         a.shape() == b.shape() && a.strides() == b.strides() && a.autograd_meta() == b.autograd_meta();
}

// ln(x): y carried from the add before it when x is that add's sum, else ln called (its hooks).
Tensor norm_of(LayerNorm& ln, const Tensor& x, ResidualCarry* carry) {
  if (carry && carry->y.defined() && same_tensor(x, carry->s)) {
    const Tensor y = carry->y;
    carry->s = carry->y = Tensor();
    return y;
  }
  if (carry) carry->s = carry->y = Tensor();
  return ln(x);
}

// x + r, then ln of it: {s, y}, fused into one op when ln has no hooks to run.
AddLayerNormResult add_then_norm(LayerNorm& ln, const Tensor& x, const Tensor& r) {
  if (ln.has_forward_hooks()) {
    const Tensor s = x + r;
    return {s, ln(s)};
  }
  return add_layer_norm(x, r, ln.weight, ln.bias, ln.eps);
}
}  // namespace

Tensor TransformerBlock::forward(const Tensor& x) {
  const Tensor a = norm_of(*ln_1, x, carry.get());  // (B, T, C)
  // h = x + attn(.), ln_2(h); attn.c_proj's bias added by the fused add where it can be.
  const AddLayerNormResult h =
      !ln_2->has_forward_hooks() && attn->bias_deferrable()
          ? add_layer_norm(x, attn->unbiased(a), ln_2->weight, ln_2->bias, ln_2->eps, attn->c_proj->bias)
          : add_then_norm(*ln_2, x, (*attn)(a));
  const Tensor f = (*mlp)(h.y);
  if (!next_ln || !carry || !carry->fold || next_ln->has_forward_hooks() || (next_owner && next_owner->has_forward_hooks()))
    return h.s + f;
  // The next LayerNorm's (next block's ln_1, or ln_f) input is this block's output: fused with it.
  // (mlp.c_proj's bias stays in its GEMM: this fusion is off in checkpoint segments, and a bias
  // gradient summed by the norm there but by the GEMM's epilogue here would break their bit-identity.)
  const AddLayerNormResult out = add_layer_norm(h.s, f, next_ln->weight, next_ln->bias, next_ln->eps);
  carry->s = out.s;
  carry->y = out.y;
  return out.s;
}

GPT::GPT(const GPTConfig& c) : config_(c) {
  REEL_CHECK(c.vocab_size > 0 && c.block_size > 0 && c.n_layer > 0, "GPT: vocab_size ", c.vocab_size,
             ", block_size ", c.block_size, " and n_layer ", c.n_layer, " must be positive");
  wte = register_module("wte", std::make_shared<Embedding>(c.vocab_size, c.n_embd));
  wpe = register_module("wpe", std::make_shared<Embedding>(c.block_size, c.n_embd));
  drop = register_module("drop", std::make_shared<Dropout>(c.dropout));
  h = register_module("h", std::make_shared<Sequential>());
  for (int64_t i = 0; i < c.n_layer; ++i) h->push_back(std::make_shared<TransformerBlock>(c));
  ln_f = register_module("ln_f", std::make_shared<LayerNorm>(c.n_embd, 1e-5, c.bias));
  for (int64_t i = 0; i < c.n_layer; ++i) {  // each block's residual add may fold into the next LayerNorm
    auto& block = static_cast<TransformerBlock&>((*h)[i]);
    block.carry = carry_;
    if (i + 1 < c.n_layer) {
      auto& next = static_cast<TransformerBlock&>((*h)[i + 1]);
      block.next_ln = next.ln_1.get();
      block.next_owner = &next;
    } else {
      block.next_ln = ln_f.get();
      block.next_owner = this;
    }
  }
  if (!c.tie_weights) lm_head = register_module("lm_head", std::make_shared<Linear>(c.n_embd, c.vocab_size, false));

  // GPT-2: N(0, 0.02) everywhere, the projections into the residual stream scaled by
  // 1/sqrt(2 n_layer) (two per block) so the residual's variance does not grow with depth.
  const double init_std = 0.02, proj_std = 0.02 / std::sqrt(2.0 * static_cast<double>(c.n_layer));
  init_normal_(wte->weight, init_std);
  init_normal_(wpe->weight, init_std);
  for (int64_t i = 0; i < c.n_layer; ++i) {
    auto& block = static_cast<TransformerBlock&>((*h)[i]);
    init_gpt2_linear(*block.attn->c_attn, init_std);
    init_gpt2_linear(*block.attn->c_proj, proj_std);
    init_gpt2_linear(*block.mlp->c_fc, init_std);
    init_gpt2_linear(*block.mlp->c_proj, proj_std);
  }
  if (lm_head) init_gpt2_linear(*lm_head, init_std);
}

Tensor GPT::features(const Tensor& ids) {
  REEL_CHECK(ids.dim() == 2, "GPT: expects token ids of shape (B, T), got ", ids.shape());
  const int64_t T = ids.size(1);
  REEL_CHECK(T >= 1 && T <= config_.block_size, "GPT: sequence length ", T, " is outside [1, block_size = ",
             config_.block_size, "]");
  // A block folds its last residual add into the next LayerNorm only when the blocks run plainly:
  // under a checkpoint policy or offload its carried output would cross a segment's boundary.
  carry_->fold = h->checkpoint().kind == CheckpointPolicy::Kind::None && h->offload() == autograd::OffloadMode::None;
  carry_->s = carry_->y = Tensor();
  // Token plus position embedding: one kernel each way (embedding_pos), the positions its own
  // index (no position ids made or copied each step); through the modules when one has hooks.
  // When the blocks fold, dropout is off (x is the sum itself) and nothing with hooks stands
  // between, block 0's ln_1 runs with it (embedding_pos_layer_norm) and is carried to the block as
  // a residual add's LayerNorm is: its backward then adds the residual's gradient of x in its kernel.
  auto& block0 = static_cast<TransformerBlock&>((*h)[0]);
  Tensor x;  // (B, T, C)
  if (wte->has_forward_hooks() || wpe->has_forward_hooks()) {
    const Tensor pos = arange(T, DType::i64, wpe->weight.device());  // (T)
    x = (*drop)((*wte)(ids) + (*wpe)(pos));                           // (B, T, C) + (T, C)
  } else if (carry_->fold && (drop->p == 0 || !drop->training()) && !drop->has_forward_hooks() &&
             !h->has_forward_hooks() && !block0.has_forward_hooks() && !block0.ln_1->has_forward_hooks()) {
    const AddLayerNormResult e = embedding_pos_layer_norm(ids, wte->weight, wpe->weight, block0.ln_1->weight,
                                                          block0.ln_1->bias, block0.ln_1->eps);
    x = e.s;
    carry_->s = e.s;
    carry_->y = e.y;
  } else {
    x = (*drop)(embedding_pos(ids, wte->weight, wpe->weight));
  }
  // The blocks, each through its operator() (its hooks), checkpointed as h's policy says; then ln_f,
  // already applied by the last block's fused add when it could.
  const Tensor y = norm_of(*ln_f, (*h)(x), carry_.get());
  carry_->s = carry_->y = Tensor();  // no activation held past the forward
  carry_->fold = false;              // the blocks called on their own (h(x)) stand alone
  return y;
}

Tensor GPT::forward(const Tensor& ids) {
  const Tensor x = features(ids);                              // (B, T, C)
  return lm_head ? (*lm_head)(x) : linear(x, wte->weight);     // (B, T, V)
}

Tensor GPT::loss(const Tensor& ids, const Tensor& targets, int64_t ignore_index, const std::string& reduction,
                 int64_t chunk_rows) {
  REEL_CHECK(targets.shape() == ids.shape(), "GPT::loss: targets ", targets.shape(), " do not match ids ",
             ids.shape(), ": one target per token expected");
  const Tensor& head = lm_head ? lm_head->weight : wte->weight;  // (V, C), no bias (GPT-2's head has none)
  return linear_cross_entropy(features(ids), head, targets, ignore_index, reduction, chunk_rows);
}

std::vector<int64_t> GPT::generate(std::vector<int64_t> tokens, int64_t n, double temperature, int64_t top_k,
                                   Generator* gen) {
  REEL_CHECK(!tokens.empty(), "GPT::generate: the prompt is empty");
  REEL_CHECK(temperature > 0, "GPT::generate: temperature must be positive, got ", temperature);
  autograd::NoGrad no_grad;
  const bool was_training = training();
  eval();
  const Device device = wte->weight.device();
  for (int64_t step = 0; step < n; ++step) {
    const int64_t T = std::min<int64_t>(static_cast<int64_t>(tokens.size()), config_.block_size);
    const std::vector<int64_t> window(tokens.end() - T, tokens.end());
    const Tensor logits = (*this)(from_vector(window, {1, T}, device));  // (1, T, V)
    std::vector<double> p = select(select(logits, 1, T - 1), 0, 0).to(DType::f64).to_vector<double>();  // (V)
    std::vector<size_t> order(p.size());
    std::iota(order.begin(), order.end(), 0);
    if (top_k > 0 && top_k < static_cast<int64_t>(p.size())) {
      std::partial_sort(order.begin(), order.begin() + top_k, order.end(), [&](size_t a, size_t b) { return p[a] > p[b]; });
      order.resize(static_cast<size_t>(top_k));
    }
    double top = -INFINITY;
    for (size_t i : order) top = std::max(top, p[i] / temperature);
    std::vector<double> w(order.size());
    double total = 0;
    for (size_t j = 0; j < order.size(); ++j) total += w[j] = std::exp(p[order[j]] / temperature - top);
    double u = rand({1}, DType::f64, Device::cpu(), gen).item() * total;
    size_t pick = order.back();
    for (size_t j = 0; j < order.size(); ++j) {
      if (u < w[j]) {
        pick = order[j];
        break;
      }
      u -= w[j];
    }
    tokens.push_back(static_cast<int64_t>(pick));
  }
  train(was_training);
  return tokens;
}

}  // namespace reel::nn
