// A GPT-2 style decoder: CausalSelfAttention, the block's feed-forward MLP, the pre-LN
// TransformerBlock and GPT (token + position embeddings, N blocks, final LayerNorm, LM head
// optionally tied to the token embedding). Parameter names follow Hugging Face's GPT-2
// ("wte.weight", "h.0.attn.c_attn.weight", ...), with Linear weights stored (out, in) as
// torch.nn.Linear does (HF's Conv1D stores them transposed).
//
//   nn::GPTConfig config;
//   config.vocab_size = 96;  config.block_size = 64;  config.n_layer = 4;  config.n_head = 4;  config.n_embd = 128;
//   nn::GPT gpt(config);
//   gpt.set_checkpoint(nn::CheckpointPolicy::parse("sqrt"));  // blocks in checkpoint segments
//   Tensor logits = gpt(ids);                                 // ids (B, T) -> (B, T, V)
//   Tensor loss = gpt.loss(ids, targets);                     // the same loss as cross_entropy(gpt(ids),
//                                                             // targets), the (B, T, V) logits never kept
//
// Every submodule is called through its operator(), so a hook on any of them runs: a pre-hook on
// (*gpt.h)[i] sees block i's input, one on "h.0.attn.c_attn" (found by named_modules()) that
// Linear's. (The one exception, invisible to hooks: a LayerNorm without hooks whose input is a
// residual add's sum is applied by the block, fused with that add; see TransformerBlock. Likewise
// wte and wpe, without hooks, run as one embedding_pos op: their forward() is not called; with the
// blocks folding, no dropout and no hooks on h, h.0 or h.0.ln_1, block 0's ln_1 runs with them in
// embedding_pos_layer_norm and is carried to block 0 as a fused add's LayerNorm is.) Under a
// checkpoint policy the hooks of a checkpointed block run at its forward, not again when backward
// replays its segment (nn/module.h).
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include "nn/layers.h"
#include "nn/sequential.h"

namespace reel::nn {

struct GPTConfig {
  int64_t vocab_size = 50257;
  int64_t block_size = 1024;  // the longest sequence (position embeddings)
  int64_t n_layer = 12, n_head = 12, n_embd = 768;
  double dropout = 0.0;        // on embeddings, attention output and MLP output (not on probabilities)
  bool bias = true;            // biases in Linear and LayerNorm
  bool tie_weights = true;     // LM head shares wte.weight
  bool fused_attention = true; // the flash-style kernel; false: the composed reference
};

// Multi-head causal self-attention: c_attn (C -> 3C), heads of C / n_head, c_proj (C -> C).
class CausalSelfAttention : public Module {
 public:
  explicit CausalSelfAttention(const GPTConfig& config);
  std::string name() const override { return "CausalSelfAttention"; }
  std::shared_ptr<Linear> c_attn, c_proj;
  std::shared_ptr<Dropout> resid_dropout;

  // Whether a caller may run unbiased(x) and add c_proj.bias itself (TransformerBlock: as
  // add_layer_norm's rb), getting forward(x)'s function: c_proj has a bias, neither this module nor
  // c_proj nor resid_dropout has hooks (which would see a different tensor, or gather c_proj's
  // parameters: FSDP), and the dropout is the identity (p == 0 or eval; with p > 0 the bias must
  // come before the dropout).
  bool bias_deferrable() const;
  // forward(x) without c_proj's bias and the dropout: the heads merged, times c_proj.weight^T.
  Tensor unbiased(const Tensor& x);  // (B, T, C) -> (B, T, C)

 protected:
  Tensor forward(const Tensor& x) override;  // (B, T, C) -> (B, T, C)

 private:
  Tensor heads_merged(const Tensor& x);  // (B, T, C): attention's output before c_proj
  int64_t n_head_;
  bool fused_;
};

// The block's MLP: c_fc (C -> 4C), GELU, c_proj (4C -> C), dropout.
class FeedForward : public Module {
 public:
  explicit FeedForward(const GPTConfig& config);
  std::string name() const override { return "FeedForward"; }
  std::shared_ptr<Linear> c_fc, c_proj;
  std::shared_ptr<Dropout> dropout;

 protected:
  Tensor forward(const Tensor& x) override;
};

// What a block whose last residual add was fused with the LayerNorm after it (the next block's
// ln_1, or GPT's ln_f: add_layer_norm) leaves for that LayerNorm's user: the sum s, which is the
// block's output, and the LayerNorm's output y. The user takes y only if its input is that very s
// (a hook that replaced the tensor in between gets the plain LayerNorm of what it returned).
// `fold` says whether a block may fold across its end: GPT sets it per forward, only when the
// blocks run plainly (no checkpoint policy, no offload), so y never crosses a segment boundary.
struct ResidualCarry {
  bool fold = false;
  Tensor s, y;  // (B, T, C) each; undefined when nothing is carried
};

// Pre-LN: x + attn(ln_1(x)), then + mlp(ln_2(.)). Each residual add runs fused with the LayerNorm
// that reads its sum (add_layer_norm: one kernel instead of an add and a norm, and no add of the
// two gradients of the sum in backward): the attention's with ln_2, the MLP's with `next_ln` (the
// next block's ln_1, or GPT's ln_f) when the carry allows it. A LayerNorm with hooks (or whose
// owner has hooks, for next_ln) is called through its operator() instead, unfused. The parameters,
// their names and the values are the unfused block's.
// Where the attention branch allows it (bias_deferrable: no dropout at work, no hooks), its last
// bias (attn.c_proj.bias) is added by ln_2's add_layer_norm as its rb instead of by c_proj's GEMM:
// the same values (r + rb rounded as the GEMM's epilogue would round them: to rounding), and the
// bias gradient comes out of the norm's backward launch, so c_proj's dW GEMM carries no
// bias-gradient epilogue and is grouped with its dX. The bias stays c_proj.bias, by name too. (The
// MLP's c_proj keeps its bias: its add folds into the next block's ln_1 only outside checkpoint
// segments, and the bias gradient must have the same bits with and without them.)
class TransformerBlock : public Module {
 public:
  explicit TransformerBlock(const GPTConfig& config);
  std::string name() const override { return "TransformerBlock"; }
  std::shared_ptr<LayerNorm> ln_1, ln_2;
  std::shared_ptr<CausalSelfAttention> attn;
  std::shared_ptr<FeedForward> mlp;
  // Set by GPT: the LayerNorm after this block, the module that owns it (the next block, or GPT)
  // and the carry the blocks and GPT share. Null: the block stands alone (its output is
  // h + mlp(.), ln_1 is its own). No fold when next_ln or its owner has hooks: they may have to
  // run first (distributed/fsdp.h gathers a unit's parameters in its pre-hook).
  LayerNorm* next_ln = nullptr;
  const Module* next_owner = nullptr;
  std::shared_ptr<ResidualCarry> carry;

 protected:
  Tensor forward(const Tensor& x) override;
};

class GPT : public Module {
 public:
  // GPT-2's initialisation: Linear and Embedding weights N(0, 0.02), the residual projections
  // (c_proj) N(0, 0.02 / sqrt(2 n_layer)), biases 0, LayerNorm weights 1.
  explicit GPT(const GPTConfig& config);
  std::string name() const override { return "GPT"; }

  // The blocks run under `policy` (every:K, sqrt over n_layer blocks, a list of block indices).
  void set_checkpoint(const CheckpointPolicy& policy) { h->set_checkpoint(policy); }
  const CheckpointPolicy& checkpoint() const { return h->checkpoint(); }
  // Offloads the blocks' saves to host memory (Sequential::set_offload).
  void set_offload(autograd::OffloadMode mode, int64_t max_inflight_bytes = autograd::kDefaultOffloadInflightBytes) {
    h->set_offload(mode, max_inflight_bytes);
  }
  autograd::OffloadMode offload() const { return h->offload(); }
  // Lets the planner choose levers whose gradients are not bit-identical (Sequential::set_inexact_levers).
  void set_inexact_levers(bool allow) { h->set_inexact_levers(allow); }
  // The GPU whose predicted kernel times price the blocks for the planner; null: host times
  // (Sequential::set_cost_device; required on the meta device).
  void set_cost_device(const profile::DeviceSpec* spec) { h->set_cost_device(spec); }
  const profile::DeviceSpec* cost_device() const { return h->cost_device(); }
  // Under a budget:SIZE policy: measures the blocks once and plans them (Sequential::plan_checkpoint).
  const autograd::CheckpointPlan& plan_checkpoint(const std::function<Tensor()>& forward_loss) {
    return h->plan_checkpoint(forward_loss);
  }
  void use_checkpoint_plan(const autograd::CheckpointPlan& plan) { h->use_checkpoint_plan(plan); }
  const autograd::CheckpointPlan* checkpoint_plan() const { return h->checkpoint_plan(); }  // Sequential's
  const autograd::ChainCost* chain_cost() const { return h->chain_cost(); }  // Sequential::chain_cost

  // Appends n tokens to `prompt` (1-D ids), sampling from softmax(logits / temperature) restricted
  // to the top_k most likely (0: all), from `gen`; no tape is recorded. Returns the whole sequence.
  std::vector<int64_t> generate(std::vector<int64_t> prompt, int64_t n, double temperature = 1.0, int64_t top_k = 0,
                                Generator* gen = nullptr);

  // cross_entropy(gpt(ids), targets, ignore_index, reduction) through linear_cross_entropy
  // (autograd/ops/linear_cross_entropy.h): the LM head and the loss fused and chunked, so neither
  // the (B, T, V) logits nor their gradient exist whole; the tape saves d(loss)/d(final features)
  // (B, T, C) and d(loss)/d(head weight) (V, C) instead of (B, T, V). targets (B, T) i32/i64;
  // reduction "mean" or "sum"; chunk_rows as linear_cross_entropy's (0: about 32 MiB of logits).
  // Equal to the unfused loss and gradients up to rounding. It does not go through operator():
  // GPT's own forward hooks and lm_head's do not run (their output, the logits, is never made);
  // the other submodules' hooks do.
  Tensor loss(const Tensor& ids, const Tensor& targets, int64_t ignore_index = -100,
              const std::string& reduction = "mean", int64_t chunk_rows = 0);
  // The final LayerNorm's output (B, T, C): what the LM head reads (forward and loss share it).
  Tensor features(const Tensor& ids);

  const GPTConfig& config() const { return config_; }
  std::shared_ptr<Embedding> wte, wpe;
  std::shared_ptr<Dropout> drop;
  std::shared_ptr<Sequential> h;  // the blocks
  std::shared_ptr<LayerNorm> ln_f;
  std::shared_ptr<Linear> lm_head;  // null when tied to wte

 protected:
  Tensor forward(const Tensor& ids) override;  // (B, T) i32/i64, T <= block_size -> logits (B, T, V)

 private:
  GPTConfig config_;
  std::shared_ptr<ResidualCarry> carry_ = std::make_shared<ResidualCarry>();  // shared with the blocks
};

}  // namespace reel::nn
