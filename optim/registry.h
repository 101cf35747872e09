// optim/registry.h: the one list of the optimizers a command line can choose by name. Each entry
// is a name, a line of help (what the optimizer is and the hyper-parameters its factory sets) and
// a factory from what every optimizer takes (the parameters and a learning rate). The examples'
// --optimizer option, its help text and its validation come from here (examples/train_options.h),
// so a new optimizer is one entry in optim/registry.cpp (CONTRIBUTING.md, "Add an optimizer").
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "optim/optimizer.h"

namespace reel::optim {

struct OptimizerEntry {
  std::string name;  // what --optimizer takes: lowercase, "adamw"
  std::string help;  // one line: "AdamW (torch.optim.AdamW): betas (0.9, 0.999), eps 1e-8, ..."
  std::unique_ptr<Optimizer> (*make)(std::vector<Tensor> params, double lr);
};

// Every entry, in the order the help lists them.
const std::vector<OptimizerEntry>& optimizer_registry();
// Their names, in that order.
std::vector<std::string> optimizer_names();
// The entry of `name`; reel::Error quoting it and listing the choices when there is none.
const OptimizerEntry& find_optimizer(const std::string& name);
// One line per entry, "name: help", for a command line's --help.
std::string optimizer_help();

}  // namespace reel::optim
