// Entry points of the optimizer family (kernels/optimizer.h): checks of the parameter lists (one
// device, shapes, dtypes, contiguity), then the backend kernel over the whole list.
#include "kernels/optimizer.h"

#include <cmath>
#include <string>
#include <utility>

#include "kernels/entry_point.h"
#include "kernels/optimizer_rules.h"

namespace reel::kernels {

namespace {
// The device of every tensor of the list (the cpu for an empty list): one kernel launch covers
// the whole list, so the tensors must share a device.
Device list_device(const char* op, const char* what, const std::vector<Tensor>& tensors) {
  if (tensors.empty()) return Device::cpu();
  const Device device = tensors[0].device();
  for (size_t i = 1; i < tensors.size(); ++i)
    REEL_CHECK(tensors[i].device() == device, op, ": ", what, " ", i, " ", tensors[i].shape(), " is on ",
               tensors[i].device(), " but ", what, " 0 on ", device, ": one device per list expected");
  return device;
}

// params[i] and each list's [i]: defined, floating, contiguous, one shape and device; grads[i] in
// params[i]'s dtype, every state list's [i] in acc_dtype of it (a 16-bit parameter keeps f32 state;
// f32 and f64 their own); every param on one device, which is returned.
Device check_param_lists(const char* op, const std::vector<Tensor>& params,
                         const std::vector<std::pair<const char*, const std::vector<Tensor>*>>& lists) {
  for (const auto& [name, list] : lists)
    REEL_CHECK(list->size() == params.size(), op, ": ", params.size(), " params but ", list->size(), " ", name);
  for (size_t i = 0; i < params.size(); ++i) {
    const Tensor& p = params[i];
    REEL_CHECK(p.defined(), op, ": param ", i, " is undefined");
    REEL_CHECK(is_floating(p.dtype()), op, ": param ", i, " ", p.shape(), " has dtype ", p.dtype(),
               " (f32, f64, bf16 or f16 expected)");
    REEL_CHECK(p.is_contiguous(), op, ": param ", i, " ", p.shape(), " is not contiguous (updated in place)");
    for (const auto& [name, list] : lists) {
      const Tensor& t = (*list)[i];
      const bool is_grad = std::string(name) == "grads";
      const DType want = is_grad ? p.dtype() : acc_dtype(p.dtype());
      REEL_CHECK(t.defined(), op, ": ", name, " ", i, " of param ", p.shape(), " is undefined");
      REEL_CHECK(t.shape() == p.shape() && t.dtype() == want && t.device() == p.device(), op, ": param ", i,
                 " ", p.shape(), " ", p.dtype(), " on ", p.device(), " and its ", name, " ", t.shape(), " ", t.dtype(),
                 " on ", t.device(), " differ (", name, " of a ", p.dtype(), " param: ", want, ")");
      REEL_CHECK(t.is_contiguous(), op, ": ", name, " ", i, " ", t.shape(), " is not contiguous");
    }
  }
  return list_device(op, "param", params);
}

// The profiler's cost of a kernel over whole lists: each list in `in` read once, in `out` written once.
profile::KernelCost optimizer_cost(const std::vector<const std::vector<Tensor>*>& in,
                                   const std::vector<const std::vector<Tensor>*>& out, int64_t flops) {
  profile::KernelCost c;
  for (const std::vector<Tensor>* list : in) c.bytes_read += bytes_of(*list);
  for (const std::vector<Tensor>* list : out) c.bytes_written += bytes_of(*list);
  c.flops = flops;
  return c;
}

Device check_tensor_list(const char* op, const std::vector<Tensor>& tensors, bool need_contiguous) {
  for (size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i];
    REEL_CHECK(t.defined(), op, ": tensor ", i, " is undefined");
    REEL_CHECK(is_floating(t.dtype()), op, ": tensor ", i, " ", t.shape(), " has dtype ", t.dtype(),
               " (f32, f64, bf16 or f16 expected)");
    REEL_CHECK(!need_contiguous || t.is_contiguous(), op, ": tensor ", i, " ", t.shape(),
               " is not contiguous (updated in place)");
  }
  return list_device(op, "tensor", tensors);
}

// The lists are written in place: bump their storages' versions (core/storage.h), so that a
// backward using a parameter saved before this step raises instead of using the new values.
void bump_versions(std::initializer_list<const std::vector<Tensor>*> lists) {
  for (const std::vector<Tensor>* list : lists)
    for (const Tensor& t : *list) t.bump_version();
}

// StepControl's tensors: each defined one on `device` (the params'), with its dtype and size.
void check_control(const char* op, const StepControl& c, Device device) {
  const auto check = [&](const char* name, const Tensor& t, DType dtype, int64_t numel) {
    if (!t.defined()) return;
    REEL_CHECK(t.dtype() == dtype && t.numel() == numel && t.is_contiguous() && t.device() == device, op, ": ",
               name, " ", t.shape(), " ", t.dtype(), " on ", t.device(), " must be ", dtype, " of ", numel,
               " element(s), contiguous, on the params' device ", device);
  };
  check("coef", c.coef, DType::f64, 1);
  check("found_inf", c.found_inf, DType::i32, 1);
  check("steps", c.steps, DType::i64, 1);
  check("lr", c.lr, DType::f64, 1);
  const int64_t kind = c.schedule.kind;
  REEL_CHECK(kind == LrRule::kNone || kind == LrRule::kConstant || kind == LrRule::kWarmupCosine, op,
             ": schedule kind ", kind, " is not an LrRule kind");
  REEL_CHECK(kind == LrRule::kNone || c.steps.defined(), op,
             ": a schedule evaluated on the device needs the step count there (StepControl::steps)");
}

}  // namespace

void sgd_update(const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
                const std::vector<Tensor>& momentum_bufs, double lr, double momentum, double dampening,
                double weight_decay, bool nesterov, int64_t step, const StepControl& control) {
  const char* op = "sgd_update";
  REEL_CHECK(step >= 1, op, ": step ", step, " must count from 1");
  REEL_CHECK(!nesterov || (momentum > 0 && dampening == 0), op,
             ": Nesterov momentum needs momentum > 0 and dampening 0 (got momentum ", momentum, ", dampening ",
             dampening, ")");
  const Device device = momentum != 0
                            ? check_param_lists(op, params, {{"grads", &grads}, {"momentum_bufs", &momentum_bufs}})
                            : check_param_lists(op, params, {{"grads", &grads}});
  check_control(op, control, device);
  // Per element: the update (2 FLOPs), weight decay (2), the momentum buffer (3, Nesterov 2 more).
  const int64_t per_element = 2 + (weight_decay != 0 ? 2 : 0) + (momentum != 0 ? (nesterov ? 5 : 3) : 0);
  bump_versions({&params, &momentum_bufs});
  REEL_DEVICE_DISPATCH(device, sgd_update,
                       optimizer_cost({&params, &grads, &momentum_bufs}, {&params, &momentum_bufs},
                                      per_element * numel_of(params)),
                       params, grads, momentum_bufs, lr, momentum, dampening, weight_decay, nesterov, step, control);
}

void adamw_update(const std::vector<Tensor>& params, const std::vector<Tensor>& grads, const std::vector<Tensor>& m,
                  const std::vector<Tensor>& v, double lr, double beta1, double beta2, double eps,
                  double weight_decay, int64_t step, bool decoupled_weight_decay, const StepControl& control) {
  const char* op = "adamw_update";
  REEL_CHECK(step >= 1, op, ": step ", step, " must count from 1 (bias correction divides by 1 - beta^step)");
  REEL_CHECK(beta1 >= 0 && beta1 < 1 && beta2 >= 0 && beta2 < 1, op, ": betas (", beta1, ", ", beta2,
             ") must be in [0, 1)");
  const Device device = check_param_lists(op, params, {{"grads", &grads}, {"exp_avg", &m}, {"exp_avg_sq", &v}});
  check_control(op, control, device);
  bump_versions({&params, &m, &v});
  // Per element: weight decay (2 FLOPs), m (3), v (4), p -= lr * m^ / (sqrt(v^) + eps) (5): 14.
  REEL_DEVICE_DISPATCH(device, adamw_update,
                       optimizer_cost({&params, &grads, &m, &v}, {&params, &m, &v}, 14 * numel_of(params)), params,
                       grads, m, v, lr, beta1, beta2, eps, weight_decay, step, decoupled_weight_decay, control);
}

template <typename Rule>
void rule_update(const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
                 const std::vector<std::vector<Tensor>>& state, const typename Rule::Options& options, double lr,
                 int64_t step, const StepControl& control) {
  const char* op = Rule::kName;
  REEL_CHECK(step >= 1, op, ": step ", step, " must count from 1");
  REEL_CHECK(std::isfinite(lr) && lr >= 0, op, ": lr (", lr, ") must be a finite number >= 0");
  REEL_CHECK(state.size() == static_cast<size_t>(Rule::kSlots), op, ": ", state.size(), " state lists but ",
             Rule::kSlots, " expected (one per slot)");
  Rule::check(options);
  // Each list under its name in the checks' messages: "grads", then the rule's slots.
  std::vector<std::pair<const char*, const std::vector<Tensor>*>> lists{{"grads", &grads}};
  for (int k = 0; k < Rule::kSlots; ++k) lists.push_back({Rule::kSlotNames[k], &state[static_cast<size_t>(k)]});
  const Device device = check_param_lists(op, params, lists);
  check_control(op, control, device);
  std::vector<const std::vector<Tensor>*> in{&params, &grads}, out{&params};
  for (const std::vector<Tensor>& slot : state) in.push_back(&slot), out.push_back(&slot);
  for (const std::vector<Tensor>* list : out) bump_versions({list});
  detail::dispatch(
      op, device, [&] { return optimizer_cost(in, out, Rule::kFlops * numel_of(params)); },
      [](auto&&... a) { cpu::rule_update<Rule>(std::forward<decltype(a)>(a)...); },
      [](auto&&... a) { cuda::rule_update<Rule>(std::forward<decltype(a)>(a)...); }, params, grads, state, options, lr,
      step, control);
}

REEL_OPTIMIZER_RULES(REEL_INSTANTIATE_RULE_UPDATE)

double global_grad_norm(const std::vector<Tensor>& grads) {
  const Device device = check_tensor_list("global_grad_norm", grads, false);
  std::vector<Tensor> flat;
  flat.reserve(grads.size());
  for (const Tensor& g : grads) flat.push_back(untracked::contiguous(g));
  return std::sqrt(
      REEL_DEVICE_DISPATCH(device, sum_of_squares, optimizer_cost({&flat}, {}, 2 * numel_of(flat)), flat));
}

void global_grad_norm_(const std::vector<Tensor>& grads, const Tensor& out, double max_norm, const Tensor& found_inf,
                       bool set_found, const Tensor& skipped_count) {
  const char* op = "global_grad_norm_";
  check_tensor_list(op, grads, false);
  REEL_CHECK(std::isfinite(max_norm) && max_norm >= 0, op, ": max_norm ", max_norm, " must be finite and >= 0");
  REEL_CHECK(out.defined() && out.dtype() == DType::f64 && out.numel() == 2 && out.is_contiguous(), op,
             ": out must be a contiguous f64 tensor of 2 elements (the norm, the clip coefficient)");
  const Device device = out.device();
  for (size_t i = 0; i < grads.size(); ++i)
    REEL_CHECK(grads[i].device() == device, op, ": tensor ", i, " ", grads[i].shape(), " is on ", grads[i].device(),
               " but out on ", device, ": one device expected");
  REEL_CHECK(!found_inf.defined() || (found_inf.dtype() == DType::i32 && found_inf.numel() == 1 &&
                                      found_inf.device() == device && found_inf.is_contiguous()),
             op, ": found_inf must be an i32 tensor of 1 element on ", device);
  REEL_CHECK(!set_found || found_inf.defined(), op, ": set_found without a found_inf tensor");
  REEL_CHECK(!skipped_count.defined() || (found_inf.defined() && skipped_count.dtype() == DType::i64 &&
                                          skipped_count.numel() == 1 && skipped_count.device() == device),
             op, ": skipped_count must be an i64 tensor of 1 element on ", device, ", with a found_inf");
  if (skipped_count.defined()) skipped_count.bump_version();
  std::vector<Tensor> flat;
  flat.reserve(grads.size());
  for (const Tensor& g : grads) flat.push_back(untracked::contiguous(g));
  if (set_found) found_inf.bump_version();
  out.bump_version();
  REEL_DEVICE_DISPATCH(device, grad_norm_device, optimizer_cost({&flat}, {}, 2 * numel_of(flat)), flat, out, max_norm,
                       found_inf, set_found, skipped_count);
}

void accumulate_loss_(const Tensor& sum, const Tensor& value, double scale, bool first) {
  const char* op = "accumulate_loss_";
  REEL_CHECK(sum.defined() && sum.dtype() == DType::f64 && sum.numel() == 1 && sum.is_contiguous(), op,
             ": sum must be a contiguous f64 tensor of 1 element");
  REEL_CHECK(value.defined() && value.numel() == 1 && is_floating(value.dtype()) && value.device() == sum.device(), op,
             ": value ", value.shape(), " ", value.dtype(), " on ", value.device(),
             " must be one floating element on the sum's device ", sum.device());
  REEL_CHECK(std::isfinite(scale), op, ": scale ", scale, " must be finite");
  sum.bump_version();
  profile::KernelCost c;
  c.bytes_read = static_cast<int64_t>(value.nbytes() + (first ? 0 : 8));
  c.bytes_written = 8;
  c.flops = 2;
  REEL_DEVICE_DISPATCH(sum.device(), accumulate_loss_, c, sum, value, scale, first);
}

void scale_(const std::vector<Tensor>& tensors, double factor) {
  const Device device = check_tensor_list("scale_", tensors, true);
  bump_versions({&tensors});
  REEL_DEVICE_DISPATCH(device, scale_, optimizer_cost({&tensors}, {&tensors}, numel_of(tensors)), tensors, factor);
}

}  // namespace reel::kernels
