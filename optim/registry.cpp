// The optimizer registry (optim/registry.h): the entries, and make_optimizer (optim/optimizer.h),
// which builds one by name.
#include "optim/registry.h"

#include "core/error.h"

namespace reel::optim {

const std::vector<OptimizerEntry>& optimizer_registry() {
  static const std::vector<OptimizerEntry> entries = {
      {"sgd", "SGD with momentum 0.9 (torch.optim.SGD: no dampening, no Nesterov, no weight decay)",
       [](std::vector<Tensor> params, double lr) -> std::unique_ptr<Optimizer> {
         return std::make_unique<SGD>(std::move(params), lr, SGD::Options{0.9, 0, 0, false});
       }},
      {"adam", "Adam (torch.optim.Adam): betas (0.9, 0.999), eps 1e-8, no weight decay",
       [](std::vector<Tensor> params, double lr) -> std::unique_ptr<Optimizer> {
         return std::make_unique<Adam>(std::move(params), lr);
       }},
      {"adamw", "AdamW (torch.optim.AdamW): betas (0.9, 0.999), eps 1e-8, decoupled weight decay 0.01",
       [](std::vector<Tensor> params, double lr) -> std::unique_ptr<Optimizer> {
         return std::make_unique<AdamW>(std::move(params), lr);
       }},
      {"lion", "Lion (Chen et al. 2023): the sign of interpolated momentum, betas (0.9, 0.99), no weight decay; "
               "one state tensor (AdamW: two); an lr 3-10x smaller than AdamW's",
       [](std::vector<Tensor> params, double lr) -> std::unique_ptr<Optimizer> {
         return std::make_unique<Lion>(std::move(params), lr);
       }},
  };
  return entries;
}

std::vector<std::string> optimizer_names() {
  std::vector<std::string> names;
  for (const OptimizerEntry& e : optimizer_registry()) names.push_back(e.name);
  return names;
}

const OptimizerEntry& find_optimizer(const std::string& name) {
  std::string choices;
  for (const OptimizerEntry& e : optimizer_registry()) {
    if (e.name == name) return e;
    choices += (choices.empty() ? "" : ", ") + e.name;
  }
  REEL_FAIL("unknown optimizer '", name, "' (choose one of ", choices, ")");
}

std::string optimizer_help() {
  std::string help;
  for (const OptimizerEntry& e : optimizer_registry()) help += (help.empty() ? "" : "\n") + e.name + ": " + e.help;
  return help;
}

std::unique_ptr<Optimizer> make_optimizer(const std::string& name, std::vector<Tensor> params, double lr) {
  return find_optimizer(name).make(std::move(params), lr);
}

}  // namespace reel::optim
