// bench_memory_plan: step time against activation memory for each way reel checkpoints a chain —
// none, selective (matmul outputs kept, the rest recomputed), sqrt, every:K and the planner at a
// range of budgets — on N x [Linear(D, D) + GELU] blocks (batch B) and on char_gpt's GPT. Each row: the
// activation peak the allocator measured over one forward + backward, its share of the plain peak,
// the median step time and its ratio to plain; planned rows add the predicted peak, the predicted
// recompute time and the plan (examples/policy_sweep.h, shared with examples/memory_lab).
//
//   bench_memory_plan [device=cpu] [N=64] [width=1024] [batch=256] [rounds=5]
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "examples/policy_sweep.h"
#include "reel.h"

using namespace reel;

int main(int argc, char** argv) {
  const Device device(argc > 1 ? argv[1] : "cpu");
  const int n = argc > 2 ? std::atoi(argv[2]) : 64;
  const int64_t width = argc > 3 ? std::atoll(argv[3]) : 1024;
  const int64_t batch = argc > 4 ? std::atoll(argv[4]) : 256;
  const int rounds = argc > 5 ? std::atoi(argv[5]) : 5;
  std::printf("activation peak and step time (forward + backward; median of %d rounds, each running every policy "
              "once after an untimed step) on %s\n",
              rounds, device.str().c_str());
  const std::vector<double> fractions = {0.18, 0.25, 0.35, 0.55, 0.75};
  {
    manual_seed(1);
    nn::Sequential chain;
    for (int i = 0; i < n; ++i)
      chain.push_back(std::make_shared<nn::Sequential>(std::vector<std::shared_ptr<nn::Module>>{
          std::make_shared<nn::Linear>(width, width), std::make_shared<nn::GELU>()}));
    chain.to(device);
    const Tensor x = randn({batch, width}, DType::f32, device);
    const auto rows = examples::sweep_policies(chain, device, rounds, [&] { return sum(chain(x)); }, {1, 2, 4, 16},
                                               fractions);
    examples::print_policy_table("chain of " + std::to_string(n) + " x [Linear(" + std::to_string(width) +
                                     ") + GELU], batch " + std::to_string(batch),
                                 rows);
  }
  {
    // examples/char_gpt's model and batch: 3 blocks of width 96, 4 heads, 32 sequences of 64
    // characters, its vocabulary's size (token ids here are synthetic: only shapes matter).
    manual_seed(2);
    nn::GPTConfig c{/*vocab_size*/ 114, /*block_size*/ 64, /*n_layer*/ 3, /*n_head*/ 4, /*n_embd*/ 96};
    nn::GPT gpt(c);
    gpt.to(device);
    const int64_t batch_seqs = 32;
    std::vector<int64_t> tokens(static_cast<size_t>(batch_seqs * c.block_size));
    for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<int64_t>((i * 7919 + i / 5) % 114);
    const Tensor ids = from_vector(tokens, {batch_seqs, c.block_size}).to(device);
    const auto rows = examples::sweep_policies(
        gpt, device, rounds, [&] { return cross_entropy(gpt(ids), ids, -100, "sum"); }, {1, 2}, fractions);
    examples::print_policy_table("char_gpt's GPT: 3 blocks, n_embd 96, 4 heads, 32 x 64 tokens", rows);
  }
  return 0;
}
