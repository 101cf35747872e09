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
//                         f64, f32 for bf16 and f16); coeffs<A>(options, lr, step), REEL_HOST_DEVICE:
//                         on the host once per step, or in the kernel when the step count is
//                         read from the device (StepControl::steps); step counts from 1
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
#include "kernels/mul_rounded.h"
#include "kernels/optimizer.h"  // StepControl

namespace reel::kernels {

// A gradient as an update reads it under StepControl::coef: g * coef in A, rounded once to the
// gradient's type T (what scale_ stores) and loaded back into A.
template <typename T, typename A>
REEL_HOST_DEVICE inline A clipped_grad(A g, A coef) {
  return static_cast<A>(static_cast<T>(mul_rounded(g, coef)));
}

// Lion (Chen et al. 2023, "Symbolic Discovery of Optimization Algorithms", its Program 1): the
// update is the sign of an interpolation of the momentum and the gradient, so every element moves
// by lr exactly (or not at all); one state tensor, where AdamW keeps two.
//   p *= 1 - lr * weight_decay;  p -= lr * sign(b1 m + (1 - b1) g);  m = b2 m + (1 - b2) g
// sign(0) is 0 and a NaN stays NaN (torch.sign's). Its lr is usually 3-10x smaller than AdamW's.
struct Lion {
  static constexpr const char* kName = "lion_update";
  static constexpr const char* kTitle = "Lion";
  static constexpr int kSlots = 1;
  static constexpr const char* kSlotNames[kSlots] = {"exp_avg"};
  static constexpr int kFlops = 10;  // decay 1, interpolation 3, sign 1, step 2, momentum 3
  struct Options {
    double beta1 = 0.9, beta2 = 0.99, weight_decay = 0;
  };
  static void check(const Options& o) {
    REEL_CHECK(o.beta1 >= 0 && o.beta1 < 1 && o.beta2 >= 0 && o.beta2 < 1, kTitle, ": betas (", o.beta1, ", ",
               o.beta2, ") must be in [0, 1)");
    REEL_CHECK(o.weight_decay >= 0, kTitle, ": weight_decay (", o.weight_decay, ") must be >= 0");
  }
  template <typename A>
  struct Coeffs {
    A lr, decay, b1, one_minus_b1, b2, one_minus_b2;
  };
  template <typename A>
  REEL_HOST_DEVICE static Coeffs<A> coeffs(const Options& o, double lr, int64_t /*step: Lion has no bias correction*/) {
    return {static_cast<A>(lr),       static_cast<A>(1 - lr * o.weight_decay), static_cast<A>(o.beta1),
            static_cast<A>(1 - o.beta1), static_cast<A>(o.beta2),              static_cast<A>(1 - o.beta2)};
  }
  template <typename A>
  REEL_HOST_DEVICE static void apply(A& p, A g, A* s, const Coeffs<A>& c) {
    const A u = c.b1 * s[0] + c.one_minus_b1 * g;
    const A sign = u > A(0) ? A(1) : u < A(0) ? A(-1) : u;  // u itself: 0 (or -0) and NaN
    p = p * c.decay - c.lr * sign;
    s[0] = c.b2 * s[0] + c.one_minus_b2 * g;
  }
};

// Every rule, once: the backends and kernels::rule_update are instantiated for each.
#define REEL_OPTIMIZER_RULES(X) X(Lion)

// ---- the entry point and its backend kernels ---------------------------------------------------
// Declared here, not in kernels/optimizer.h, so that only the optimizer's own files include the
// rules: a new rule recompiles kernels/optimizer.cpp, the two backend files and optim/, not every
// kernel. The entry point is defined in kernels/optimizer.cpp, the backends in
// kernels/cpu/optimizer.cpp and kernels/cuda/optimizer.cu, each instantiated for every rule of
// REEL_OPTIMIZER_RULES.

// One step of Rule over the lists, in place: params[i] and grads[i] as kernels/optimizer.h's
// updates take them (one device, contiguous, grads in the param's dtype), state[k] slot k's list
// (Rule::kSlotNames[k]), each tensor in acc_dtype of its param's. lr finite and >= 0, step from 1,
// options passing Rule::check: reel::Error naming Rule::kName otherwise; control as
// kernels/optimizer.h's updates take it (pass StepControl{} for none). The backends (cpu::, cuda::)
// take the same arguments, checked by the entry point.
#define REEL_RULE_UPDATE_PARAMS(Rule)                                                                   \
  (const std::vector<Tensor>& params, const std::vector<Tensor>& grads,                                  \
   const std::vector<std::vector<Tensor>>& state, const typename Rule::Options& options, double lr, int64_t step, \
   const StepControl& control)
template <typename Rule>
void rule_update REEL_RULE_UPDATE_PARAMS(Rule);
// The plain update (no StepControl).
template <typename Rule>
void rule_update(const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
                 const std::vector<std::vector<Tensor>>& state, const typename Rule::Options& options, double lr,
                 int64_t step) {
  rule_update<Rule>(params, grads, state, options, lr, step, StepControl{});
}
namespace cpu {
template <typename Rule>
void rule_update REEL_RULE_UPDATE_PARAMS(Rule);
}  // namespace cpu
namespace cuda {
template <typename Rule>
void rule_update REEL_RULE_UPDATE_PARAMS(Rule);
}  // namespace cuda

// The file defining each of them instantiates it for every rule: REEL_OPTIMIZER_RULES(REEL_INSTANTIATE_RULE_UPDATE).
#define REEL_INSTANTIATE_RULE_UPDATE(R) template void rule_update<R> REEL_RULE_UPDATE_PARAMS(R);

}  // namespace reel::kernels
