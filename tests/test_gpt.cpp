// nn::GPT: parameter names and counts as GPT-2's, GPT-2's initialisation, weight tying, fused
// against composed attention, checkpointed blocks with bit-identical gradients on every device,
// forward hooks on the blocks (checkpointed or not) and named_modules(), causality, sampling, the
// attention branch's last bias folded into the fused add against the unfolded path, and bad inputs.
#include <cmath>
#include <set>
#include <string>
#include <vector>

#include "reel.h"
#include "testing.h"

using namespace reel;
using reel::testing::check_close;
using reel::testing::random_ids;
using reel::testing::values;

namespace {

nn::GPTConfig tiny_config() {
  return nn::GPTConfig{/*vocab_size*/ 11, /*block_size*/ 8, /*n_layer*/ 4, /*n_head*/ 2, /*n_embd*/ 16};
}


std::vector<double> all_grads(const nn::Module& m) {
  std::vector<double> out;
  for (const Tensor& p : m.parameters()) {
    const std::vector<double> g = values(p.grad());
    out.insert(out.end(), g.begin(), g.end());
  }
  return out;
}

void clear_grads(const nn::Module& m) {
  for (const Tensor& p : m.parameters()) p.set_grad(Tensor());
}

double stddev(const Tensor& t) {
  const std::vector<double> v = values(t);
  double s = 0, s2 = 0;
  for (double x : v) s += x, s2 += x * x;
  const double n = static_cast<double>(v.size());
  return std::sqrt(s2 / n - (s / n) * (s / n));
}

}  // namespace

TEST_CASE("GPT has GPT-2's parameter names and count; tying drops the LM head") {
  manual_seed(1);
  nn::GPTConfig c = tiny_config();
  nn::GPT gpt(c);
  const auto named = gpt.named_parameters();
  std::vector<std::string> names;
  for (const auto& [name, p] : named) names.push_back(name);
  CHECK(names.front() == "wte.weight");
  CHECK(names[1] == "wpe.weight");
  CHECK(names[2] == "h.0.ln_1.weight");
  CHECK(gpt.state_dict().count("h.3.attn.c_attn.weight") == 1);
  CHECK(gpt.state_dict().at("h.3.attn.c_attn.weight").shape() == Shape{48, 16});
  CHECK(gpt.state_dict().at("h.0.mlp.c_fc.weight").shape() == Shape{64, 16});
  CHECK(names.back() == "ln_f.bias");
  CHECK(gpt.state_dict().count("lm_head.weight") == 0);
  const int64_t C = c.n_embd, per_block = 2 * 2 * C + (3 * C * C + 3 * C) + (C * C + C) + (4 * C * C + 4 * C) +
                                          (4 * C * C + C);
  CHECK(gpt.num_parameters() == c.vocab_size * C + c.block_size * C + c.n_layer * per_block + 2 * C);

  c.tie_weights = false;
  nn::GPT untied(c);
  CHECK(untied.num_parameters() == gpt.num_parameters() + c.vocab_size * C);
  CHECK(untied.state_dict().at("lm_head.weight").shape() == Shape{11, 16});
}

TEST_CASE("GPT-2 initialisation: N(0, 0.02), residual projections scaled by 1/sqrt(2 n_layer)") {
  manual_seed(2);
  nn::GPTConfig c = tiny_config();
  c.n_embd = 64;
  c.vocab_size = 500;
  nn::GPT gpt(c);
  const nn::TensorDict s = gpt.state_dict();
  CHECK(stddev(s.at("wte.weight")) == doctest::Approx(0.02).epsilon(0.05));
  CHECK(stddev(s.at("h.1.mlp.c_fc.weight")) == doctest::Approx(0.02).epsilon(0.05));
  CHECK(stddev(s.at("h.1.mlp.c_proj.weight")) == doctest::Approx(0.02 / std::sqrt(8.0)).epsilon(0.05));
  CHECK(stddev(s.at("h.2.attn.c_proj.weight")) == doctest::Approx(0.02 / std::sqrt(8.0)).epsilon(0.05));
  CHECK(values(s.at("h.0.attn.c_attn.bias")) == std::vector<double>(192, 0.0));
  CHECK(values(s.at("ln_f.weight")) == std::vector<double>(64, 1.0));
}

TEST_CASE("GPT: logits of shape (B, T, V); a token never sees the tokens after it") {
  manual_seed(3);
  nn::GPT gpt(tiny_config());
  const Tensor ids = random_ids(2, 8, 11, 4);
  const Tensor logits = gpt(ids);
  CHECK(logits.shape() == Shape{2, 8, 11});
  // Changing the last token changes only the last position's logits.
  std::vector<int64_t> changed = ids.to_vector<int64_t>();
  changed[7] = (changed[7] + 1) % 11;
  const Tensor other = gpt(from_vector(changed, {2, 8}));
  check_close(narrow(other, 1, 0, 7), narrow(logits, 1, 0, 7), 0, 0);
  CHECK(values(narrow(other, 1, 7, 1)) != values(narrow(logits, 1, 7, 1)));
  // A prefix gives the prefix's logits.
  check_close(gpt(narrow(ids, 1, 0, 5)), narrow(logits, 1, 0, 5), 1e-5, 1e-6);
}

TEST_CASE("GPT with fused attention equals GPT with composed attention, values and gradients") {
  for (const Device& device : reel::testing::devices()) {
    CAPTURE(device);
    nn::GPTConfig c = tiny_config();
    manual_seed(5);
    nn::GPT fused(c);
    c.fused_attention = false;
    manual_seed(5);
    nn::GPT composed(c);
    fused.to(device);
    composed.to(device);
    const Tensor ids = random_ids(3, 7, 11, 6, device), targets = random_ids(3, 7, 11, 7, device);
    const Tensor lf = fused(ids), lc = composed(ids);
    check_close(lf, lc, 1e-4, 1e-5);
    autograd::backward(cross_entropy(fused(ids), targets));
    autograd::backward(cross_entropy(composed(ids), targets));
    const std::vector<double> gf = all_grads(fused), gc = all_grads(composed);
    REQUIRE(gf.size() == gc.size());
    double worst = 0;
    for (size_t i = 0; i < gf.size(); ++i) worst = std::max(worst, std::fabs(gf[i] - gc[i]));
    CHECK(worst < 1e-5);
  }
}

TEST_CASE("checkpointed GPT blocks (segments, selective, planned): bit-identical gradients with dropout, fewer saved bytes") {
  for (const Device& device : reel::testing::devices()) {
    CAPTURE(device);
    nn::GPTConfig c = tiny_config();
    c.dropout = 0.2;
    manual_seed(8);
    nn::GPT gpt(c);
    gpt.to(device);
    const Tensor ids = random_ids(2, 8, 11, 9, device), targets = random_ids(2, 8, 11, 10, device);
    std::vector<std::vector<double>> grads;
    std::vector<int64_t> saved;  // activation bytes the tape keeps after forward
    int64_t budget = 0;  // half way between the least feasible peak and plain
    for (const std::string policy : {"none", "every:1", "sqrt", "list:1,2", "selective", "budget"}) {
      CAPTURE(policy);
      if (policy == "budget") {  // planned from measurements, the budget met
        gpt.set_checkpoint(nn::CheckpointPolicy::budget(1 << 30));
        const auto forward_loss = [&] { return cross_entropy(gpt(ids), targets); };
        const int64_t least = gpt.plan_checkpoint(forward_loss).least_peak_bytes;
        budget = (least + gpt.plan_checkpoint(forward_loss).plain_peak_bytes) / 2;
        gpt.set_checkpoint(nn::CheckpointPolicy::budget(budget));
        CHECK(gpt.plan_checkpoint(forward_loss).predicted.peak_bytes <= budget);
      } else {
        gpt.set_checkpoint(nn::CheckpointPolicy::parse(policy));
      }
      default_generator().manual_seed(12);
      reset_peak_memory(device);
      const int64_t before = memory_stats(device)[Category::Activation].current_bytes;
      const Tensor loss = cross_entropy(gpt(ids), targets);
      saved.push_back(memory_stats(device)[Category::Activation].current_bytes - before);
      autograd::backward(loss);
      if (policy == "budget") CHECK(memory_stats(device)[Category::Activation].peak_bytes - before <= budget);
      grads.push_back(all_grads(gpt));
      clear_grads(gpt);
    }
    for (size_t i = 1; i < grads.size(); ++i) CHECK(grads[i] == grads[0]);
    for (size_t i = 1; i < saved.size(); ++i) CHECK(saved[i] < saved[0]);
    gpt.set_checkpoint(nn::CheckpointPolicy::parse("none"));
  }
}

TEST_CASE("GPT's residual adds run fused with the LayerNorm after them; its norms' backwards fill and copy nothing") {
  for (const Device& device : reel::testing::devices()) {
    CAPTURE(device);
    nn::GPTConfig c = tiny_config();
    manual_seed(21);
    nn::GPT gpt(c);
    gpt.to(device);
    const Tensor ids = random_ids(2, 8, 11, 22, device), targets = random_ids(2, 8, 11, 23, device);
    // Forward LayerNorm kernels, the residual stream's adds (B, T, C) and, in backward, the extra
    // kernels of the norms' rules and the copies of (C) gradients (the tape copying a LayerNorm's dw
    // or db into a zeroed .grad: there were 2 per LayerNorm).
    struct Counts {
      int ln = 0, add_ln = 0, embedding_ln = 0, adds_forward = 0, adds_backward = 0, norm_extras = 0, copies = 0;
    };
    const std::string stream = "(2, 8, 16)", vector = "(16)";
    const auto step = [&] {
      autograd::zero_grad(gpt.parameters());
      Profiler prof;
      autograd::backward(gpt.loss(ids, targets));
      prof.stop();
      Counts n;
      for (const profile::KernelRecord& k : prof.kernels()) {
        const bool forward = k.phase == profile::Phase::Forward, backward = k.phase == profile::Phase::Backward;
        n.ln += forward && k.kernel == "layernorm_forward";
        n.add_ln += forward && k.kernel == "add_layernorm_forward";
        n.embedding_ln += forward && k.kernel == "embedding_pos_layernorm_forward";
        if (k.kernel == "binary.add" && k.shapes.rfind(stream, 0) == 0) {
          n.adds_forward += forward;
          n.adds_backward += backward;
        }
        // Inside a norm's backward rule: anything but its one kernel (a zero-filled dw/db was 2 fills).
        // (embedding_pos_layer_norm's one kernel is embedding_pos_layernorm_backward.)
        n.norm_extras += k.op_backward && k.op.find("layer_norm") != std::string::npos &&
                         k.kernel != "layernorm_backward" && k.kernel != "embedding_pos_layernorm_backward";
        n.copies += backward && k.kernel == "copy_strided" && k.shapes == vector;
      }
      return n;
    };
    step();  // makes the .grad buffers: from the next step on every norm writes its dw/db into them
    const Counts plain = step();
    // Block 0's ln_1 reads the embeddings' sum (not a residual add) and runs in their kernel
    // (embedding_pos_layer_norm); every other LayerNorm runs with the add before it: two per block,
    // the last block's second into ln_f.
    CHECK(plain.ln == 0);
    CHECK(plain.embedding_ln == 1);
    CHECK(plain.add_ln == 2 * c.n_layer);
    CHECK(plain.adds_forward == 0);   // wte + wpe: inside embedding_pos_layernorm_forward's kernel
    // Block 0's input: its ln_1's gradient + the residual's, added inside ln_1's backward kernel
    // (embedding_pos_layer_norm; was 2 per LayerNorm, then 1).
    CHECK(plain.adds_backward == 0);
    CHECK(plain.norm_extras == 0);
    CHECK(plain.copies == 0);
    const std::vector<double> grads = all_grads(gpt);
    // Blocks in checkpoint segments: only the attention residual folds into ln_2 (block i's output
    // may not carry its next LayerNorm's output across a segment boundary); the same gradients.
    gpt.set_checkpoint(nn::CheckpointPolicy::parse("every:1"));
    step();
    const Counts segmented = step();
    CHECK(segmented.add_ln == c.n_layer);  // at forward (the replays run them again)
    CHECK(segmented.ln == c.n_layer + 1);  // the ln_1s and ln_f
    CHECK(segmented.embedding_ln == 0);    // the embeddings (embedding_pos) stand alone
    CHECK(segmented.adds_forward == c.n_layer);
    CHECK(all_grads(gpt) == grads);
    gpt.set_checkpoint(nn::CheckpointPolicy::parse("none"));
    // A hook on ln_f: the last block's add is not fused with it, ln_f runs (and its hook).
    int calls = 0;
    nn::HookHandle hook = gpt.ln_f->register_forward_hook([&](nn::Module&, const Tensor&, const Tensor&) { ++calls; });
    const Counts hooked = step();
    CHECK(calls == 1);
    CHECK(hooked.ln == 1);  // ln_f (block 0's ln_1 still in the embeddings' kernel)
    CHECK(hooked.embedding_ln == 1);
    CHECK(hooked.add_ln == 2 * c.n_layer - 1);
    CHECK(all_grads(gpt) == grads);
    hook.remove();
  }
}

TEST_CASE("GPT folds the attention branch's last bias into the fused add: the unfolded path's values and gradients") {
  // The unfolded path is forced by a (no-op) forward hook on each c_proj, or by dropout at work in
  // training; both models get the same nonzero biases (GPT-2 starts them at 0, which would hide them).
  const auto bias_grads = [](const nn::Module& m) {  // the c_proj biases' gradients, the rest apart
    std::vector<double> proj, rest;
    for (const auto& [name, p] : m.named_parameters()) {
      const std::vector<double> g = values(p.grad());
      std::vector<double>& out = name.find("c_proj.bias") != std::string::npos ? proj : rest;
      out.insert(out.end(), g.begin(), g.end());
    }
    return std::make_pair(proj, rest);
  };
  const auto bgrad_gemms = [](nn::GPT& gpt, const Tensor& ids, const Tensor& targets) {
    autograd::zero_grad(gpt.parameters());
    Profiler prof;
    autograd::backward(gpt.loss(ids, targets));
    prof.stop();
    int n = 0;
    for (const profile::KernelRecord& k : prof.kernels()) n += k.kernel == "matmul_bgrad";
    return n;
  };
  for (const Device& device : reel::testing::devices()) {
    CAPTURE(device);
    nn::GPTConfig c = tiny_config();
    manual_seed(31);
    nn::GPT folded(c);
    manual_seed(31);
    nn::GPT plain(c);
    Generator g(33);
    const auto fp = folded.named_parameters(), pp = plain.named_parameters();
    for (size_t i = 0; i < fp.size(); ++i)
      if (fp[i].first.find(".bias") != std::string::npos) {
        const Tensor v = randn(fp[i].second.shape(), DType::f32, Device::cpu(), &g) * 0.5;
        fp[i].second.copy_(v);
        pp[i].second.copy_(v);
      }
    folded.to(device);
    plain.to(device);
    std::vector<nn::HookHandle> hooks;
    for (int64_t i = 0; i < c.n_layer; ++i) {
      auto& block = static_cast<nn::TransformerBlock&>((*plain.h)[i]);
      for (nn::Linear* l : {block.attn->c_proj.get(), block.mlp->c_proj.get()})
        hooks.push_back(l->register_forward_hook([](nn::Module&, const Tensor&, const Tensor&) {}));
    }
    const Tensor ids = random_ids(2, 8, 11, 34, device), targets = random_ids(2, 8, 11, 35, device);
    check_close(folded(ids), plain(ids), 1e-5, 1e-6);
    // Per block c_attn's and the MLP's c_proj's bias gradients ride on their dW GEMMs (matmul_bgrad);
    // unfolded attention's c_proj's too, and (the hooked MLP runs as linear, gelu, linear) c_fc's.
    CHECK(bgrad_gemms(folded, ids, targets) == 2 * c.n_layer);
    CHECK(bgrad_gemms(plain, ids, targets) == 4 * c.n_layer);
    const auto [fproj, frest] = bias_grads(folded);
    const auto [pproj, prest] = bias_grads(plain);
    REQUIRE(fproj.size() == static_cast<size_t>(2 * c.n_layer * c.n_embd));
    REQUIRE(fproj.size() == pproj.size());
    REQUIRE(frest.size() == prest.size());
    double worst = 0, worst_proj = 0;
    for (size_t i = 0; i < frest.size(); ++i) worst = std::max(worst, std::fabs(frest[i] - prest[i]));
    for (size_t i = 0; i < fproj.size(); ++i) worst_proj = std::max(worst_proj, std::fabs(fproj[i] - pproj[i]));
    CHECK(worst < 1e-6);
    CHECK(worst_proj < 1e-6);
    double largest = 0;
    for (double v : fproj) largest = std::max(largest, std::fabs(v));
    CHECK(largest > 1e-3);  // the biases do get a gradient
    // Dropout at work (training, p > 0): the bias stays before the dropout, in the GEMMs (c_attn,
    // c_proj, and linear_gelu_linear's W2: c_fc's rides on linear_dgelu); in eval attention's folds.
    nn::GPTConfig cd = c;
    cd.dropout = 0.1;
    manual_seed(31);
    nn::GPT dropped(cd);
    dropped.to(device);
    CHECK(bgrad_gemms(dropped, ids, targets) == 3 * c.n_layer);
    dropped.eval();
    CHECK(bgrad_gemms(dropped, ids, targets) == 2 * c.n_layer);
  }
}

TEST_CASE("forward hooks on GPT blocks replace a block's input and output, at forward only, under every policy") {
  manual_seed(15);
  nn::GPTConfig c = tiny_config();
  nn::GPT gpt(c);
  const Tensor ids = random_ids(2, 8, 11, 16), targets = random_ids(2, 8, 11, 17);
  // The reference: the model's forward by hand, with block 1's input halved and block 2's output
  // doubled, which the hooks below must do.
  Tensor x = (*gpt.drop)((*gpt.wte)(ids) + (*gpt.wpe)(arange(8, DType::i64)));
  for (int64_t i = 0; i < c.n_layer; ++i) {
    if (i == 1) x = x * 0.5;
    x = (*gpt.h)[i](x);
    if (i == 2) x = x * 2.0;
  }
  const Tensor expected = linear((*gpt.ln_f)(x), gpt.wte->weight);  // (B, T, V)
  const Tensor unhooked = gpt(ids);
  CHECK(values(unhooked) != values(expected));
  autograd::backward(cross_entropy(expected, targets));
  const std::vector<double> expected_grads = all_grads(gpt);
  clear_grads(gpt);

  int pre_calls = 0, post_calls = 0;
  nn::HookHandle pre = (*gpt.h)[1].register_forward_pre_hook([&](nn::Module&, const Tensor& in) {
    ++pre_calls;
    return in * 0.5;
  });
  nn::HookHandle post = (*gpt.h)[2].register_forward_hook([&](nn::Module&, const Tensor&, const Tensor& out) {
    ++post_calls;
    return out * 2.0;
  });
  for (const std::string policy : {"none", "every:1", "sqrt", "list:1,2", "selective"}) {
    CAPTURE(policy);
    gpt.set_checkpoint(nn::CheckpointPolicy::parse(policy));
    pre_calls = post_calls = 0;
    const Tensor logits = gpt(ids);
    check_close(logits, expected, 0, 0);
    autograd::backward(cross_entropy(logits, targets));
    CHECK(pre_calls == 1);  // once each, at forward: backward's replay does not run them again
    CHECK(post_calls == 1);
    CHECK(all_grads(gpt) == expected_grads);
    clear_grads(gpt);
  }
  pre.remove();
  post.remove();
  check_close(gpt(ids), unhooked, 0, 0);
  gpt.set_checkpoint(nn::CheckpointPolicy::parse("none"));
}

TEST_CASE("GPT's named_modules: Hugging Face's dotted names, the root first, depth first") {
  nn::GPTConfig c = tiny_config();
  c.tie_weights = false;
  nn::GPT gpt(c);
  std::vector<std::string> names;
  for (const auto& [name, m] : gpt.named_modules()) names.push_back(name);
  const std::vector<std::string> head(names.begin(), names.begin() + 17);
  CHECK(head == std::vector<std::string>{"", "wte", "wpe", "drop", "h", "h.0", "h.0.ln_1", "h.0.attn",
                                         "h.0.attn.c_attn", "h.0.attn.c_proj", "h.0.attn.resid_dropout", "h.0.ln_2",
                                         "h.0.mlp", "h.0.mlp.c_fc", "h.0.mlp.c_proj", "h.0.mlp.dropout", "h.1"});
  CHECK(names.size() == 1 + 4 + 4 * 11 + 2);  // root, wte wpe drop h, 4 blocks of 11, ln_f, lm_head
  CHECK(names[names.size() - 2] == "ln_f");
  CHECK(names.back() == "lm_head");
  // Every parameter's name is a module's name and the parameter's.
  std::set<std::string> modules(names.begin(), names.end());
  for (const auto& [name, p] : gpt.named_parameters()) CHECK(modules.count(name.substr(0, name.rfind('.'))) == 1);
}

TEST_CASE("generate: greedy with top_k 1, reproducible from a seed, and no tape left behind") {
  manual_seed(13);
  nn::GPT gpt(tiny_config());
  const std::vector<int64_t> greedy = gpt.generate({1, 2}, 10, 1.0, 1);
  CHECK(greedy.size() == 12);
  // Each greedy token is the argmax of the logits of the sequence before it (window of block_size).
  for (size_t n = 2; n < greedy.size(); ++n) {
    const size_t T = std::min<size_t>(n, 8);
    const std::vector<int64_t> window(greedy.begin() + static_cast<long>(n - T), greedy.begin() + static_cast<long>(n));
    autograd::NoGrad no_grad;
    const Tensor logits = gpt(from_vector(window, {1, static_cast<int64_t>(T)}));
    CHECK(argmax(select(select(logits, 1, static_cast<int64_t>(T) - 1), 0, 0), 0).item() ==
          static_cast<double>(greedy[n]));
  }
  Generator g1(5), g2(5);
  CHECK(gpt.generate({3}, 20, 0.8, 0, &g1) == gpt.generate({3}, 20, 0.8, 0, &g2));
  CHECK(autograd::Tape::current().empty());
  CHECK(gpt.training());
}

TEST_CASE("GPT rejects bad inputs with clear errors") {
  manual_seed(14);
  nn::GPTConfig c = tiny_config();
  nn::GPT gpt(c);
  CHECK_REEL_ERROR(gpt(random_ids(1, 9, 11, 1)), "GPT: sequence length 9 is outside [1, block_size = 8]");
  CHECK_REEL_ERROR(gpt(random_ids(1, 1, 11, 1).view({1})), "GPT: expects token ids of shape (B, T)");
  CHECK_REEL_ERROR(gpt(full({1, 3}, 11.0, DType::i64)), "embedding");
  CHECK_REEL_ERROR(gpt(full({1, 3}, 1.0, DType::f32)), "embedding");
  CHECK_REEL_ERROR(gpt.generate({}, 3), "the prompt is empty");
  c.n_head = 3;
  CHECK_REEL_ERROR(nn::GPT{c}, "n_embd 16 must be a multiple of n_head 3");
  CHECK_REEL_ERROR(gpt.set_checkpoint(nn::CheckpointPolicy::parse("list:4")), "index 4 is out of range for 4");
}
