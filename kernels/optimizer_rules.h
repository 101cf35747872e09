// kernels/optimizer_rules.h: the element-wise optimizer update rules, each written once as a
// host/device function that both backends run inside their multi-tensor kernels
// (kernels/cpu/optimizer.cpp, kernels/cuda/optimizer.cu) through kernels::rule_update (declared at
// the end of this file), and that optim::RuleOptimizer (optim/optimizer.h) steps. Adding an
// optimizer is a rule here with its name in REEL_OPTIMIZER_RULES, an alias and a registry entry in
// optim/, and its f64 reference in tests/op_table/optimizer.cpp (CONTRIBUTING.md, "Add an optimizer").
//
// A rule R is a struct of static members:
//   kName                 the kernel's name ("lion_update": the profiler's rows, errors of the lists)
//   kTitle                the optimizer's name in errors of its options ("Lion")
//   kSlots, kSlotNames    its state tensors per parameter, in acc_dtype of the parameter's (f32 for
//                         a 16-bit parameter), zero before the first step; their state_dict names
//   kFlops                FLOPs per element (the profiler's cost)
//   Options               the hyper-parameters besides lr, with their defaults
//   check(options)        reel::Error for a bad hyper-parameter, naming kTitle (host)
//   Coeffs<A>             what one step needs, in the update's type A = acc_t (T itself for f32 and
//                         f64, f32 for bf16 and f16); coeffs<A>(options, lr, step), on the host
//                         once per step (step counts from 1)
//   apply(p, g, s, c)     REEL_HOST_DEVICE: one element: p (in/out) and g in A, s[kSlots] (in/out)
// A parameter is loaded into A, updated and rounded once to its type at the store.
//
// SGD and Adam/AdamW keep their own kernels (kernels/optimizer.h: sgd_update, adamw_update): the
// CPU's Adam runs Eigen packets over aligned padded blocks so that an element's bits do not depend
// on where it sits (FSDP's flat shards, ZeRO-1's chunks), which a per-element rule cannot promise.
#pragma once
#include <cstdint>
#include <vector>

#include "core/error.h"
#include "core/host_device.h"  // REEL_HOST_DEVICE
#include "core/tensor.h"

namespace reel::kernels {

// Every rule, once: the backends and kernels::rule_update are instantiated for each.
#define REEL_OPTIMIZER_RULES(X)

// ---- the entry point and its backend kernels ---------------------------------------------------
// Declared here, not in kernels/optimizer.h, so that only the optimizer's own files include the
// rules: a new rule recompiles kernels/optimizer.cpp, the two backend files and optim/, not every
// kernel. The entry point is defined in kernels/optimizer.cpp, the backends in
// kernels/cpu/optimizer.cpp and kernels/cuda/optimizer.cu, each instantiated for every rule of
// REEL_OPTIMIZER_RULES.

// One step of Rule over the lists, in place: params[i] and grads[i] as kernels/optimizer.h's
// updates take them (one device, contiguous, grads in the param's dtype), state[k] slot k's list
// (Rule::kSlotNames[k]), each tensor in acc_dtype of its param's. lr finite and >= 0, step from 1,
// options passing Rule::check: reel::Error naming Rule::kName otherwise.
template <typename Rule>
void rule_update(const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
                 const std::vector<std::vector<Tensor>>& state, const typename Rule::Options& options, double lr,
                 int64_t step);

// The backends: the lists arrive checked by the entry point; state holds Rule::kSlots lists.
namespace cpu {
template <typename Rule>
void rule_update(const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
                 const std::vector<std::vector<Tensor>>& state, const typename Rule::Options& options, double lr,
                 int64_t step);
}  // namespace cpu
namespace cuda {
template <typename Rule>
void rule_update(const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
                 const std::vector<std::vector<Tensor>>& state, const typename Rule::Options& options, double lr,
                 int64_t step);
}  // namespace cuda

}  // namespace reel::kernels
