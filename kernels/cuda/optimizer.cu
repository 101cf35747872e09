// kernels/cuda/optimizer.cu: the optimizer updates over a flat list of parameters on a CUDA
// device: SGD (momentum, dampening, Nesterov, weight decay), AdamW (and Adam's L2 form), the
// rules of kernels/optimizer_rules.h (one kernel template for all), the global gradient norm and
// in-place scaling for clipping, over f32, f64, bf16 and f16 parameters; and the window's device
// decisions (kernels/optimizer.h): every update reads a kernels::StepControl (the clip coefficient,
// the found_inf flag, the step count, which the update's first launch advances through the grid's
// last block, and the rate: a device scalar, or a schedule evaluated from the count,
// kernels/lr_rule.h), the norm can stay on the device with its clip coefficient
// (sum_squares_kernel's fold, NormTo), and the loss sum (accumulate_loss_kernel).
//
// Multi-tensor apply (kernels/cuda/multi_tensor.h, shared with the unscale): one launch covers
// many chunks of many tensors. Each update is one fused sweep (param, grad and state read once,
// param and state written once): these kernels are bound by memory bandwidth. The update
// arithmetic runs in acc_t = reel::acc_type_t<T> (T itself for f32 and f64, f32 for the 16-bit
// types), and a parameter's state is stored as acc_t (a 16-bit parameter keeps f32 moments:
// kernels/optimizer.h); a 16-bit parameter is rounded once, at its store.
//
// The norm is a deterministic two-pass reduction in one launch: pass 1 writes one double partial
// per chunk, a fixed tree over the chunk's elements, at the chunk's index in list order; pass 2,
// the last block of the list's last launch (kernels/cuda/last_block.h), adds the partials in that
// order. Chunks depend on the tensor sizes only, so the bits are the same on every run and every
// device, and the host's sum_of_squares and the device's grad_norm_device share both passes. (The
// CPU adds per-chunk partials in the same chunk order, but sums inside a chunk in another order:
// the two agree to rounding, not bit for bit.)
#include <algorithm>
#include <array>
#include <cmath>
#include <type_traits>

#include "kernels/adam_scalars.h"
#include "kernels/backends.h"
#include "kernels/cuda/block_reduce.h"
#include "kernels/cuda/last_block.h"
#include "kernels/cuda/launch.h"
#include "kernels/cuda/multi_tensor.h"
#include "kernels/lr_rule.h"
#include "kernels/optimizer_rules.h"

namespace reel::kernels::cuda {

namespace {

// StepControl (kernels/optimizer.h) as a kernel reads it: device pointers, each null when unused.
struct DeviceControl {
  const double* coef;  // (1): the gradients' multiplier
  const int* found;    // (1): nonzero: write nothing
  int64_t* steps;      // (1): the count before the update; advanced by the update's first launch
  const double* lr;    // (1): the learning rate (the by-value one is then a placeholder)
  unsigned* ticket;    // the device's last-block counter (kernels/cuda/last_block.h), with steps
  // 0: this launch is the update's first and advances *steps; 1: an earlier launch of the update
  // advanced it, so *steps is the count after the update. The same at each launch every step.
  int64_t counted;
  LrRule schedule;     // kind != kNone: the rate is scheduled_lr(schedule, step - 1)
};
// Pointers and 8-byte values only, so no padding: equal controls are equal bytes (LrRule's doubles
// rule out has_unique_object_representations; they are the same schedule's every step).
static_assert(sizeof(DeviceControl) == 6 * 8 + sizeof(LrRule), "DeviceControl must have no padding");
DeviceControl device_control(const StepControl& c, Device device) {
  return {c.coef.defined() ? c.coef.data<double>() : nullptr,
          c.found_inf.defined() ? c.found_inf.data<int32_t>() : nullptr,
          c.steps.defined() ? c.steps.data<int64_t>() : nullptr,
          c.lr.defined() ? static_cast<const double*>(c.lr.data<double>()) : nullptr,
          c.steps.defined() ? last_block_ticket(device) : nullptr,
          0,
          c.schedule};
}

// Whether this update is skipped (found_inf set), and the step it runs at (`host_step`, or the
// device count + 1). The update's first launch advances the count: thread 0 of each block reads it
// (for the block, through shared memory) and then takes a ticket; the grid's last block, which
// every other block's read came before, writes the count + 1. A skipped update writes nothing
// (found is the same for every block and launch of it: no block takes a ticket). Called by every
// thread at the kernel's start (its barrier is reached by the whole block).
__device__ __forceinline__ bool control_step(const DeviceControl& c, int64_t host_step, int64_t& step) {
  const bool skip = c.found != nullptr && *c.found != 0;
  step = host_step;
  if (c.steps == nullptr || skip) return skip;
  if (c.counted != 0) {  // advanced by the update's first launch, which came before on the stream
    step = *c.steps;
    return false;
  }
  __shared__ int64_t before;
  if (threadIdx.x == 0) before = *c.steps;
  __syncthreads();
  step = before + 1;
  if (threadIdx.x == 0 && c.ticket != nullptr && take_last_ticket(c.ticket)) {
    *c.steps = step;
    reset_ticket(c.ticket);
  }
  return false;
}

// The rate the update uses (double): the schedule's at the step's 0-based index, the device
// scalar's, or the by-value one.
__device__ __forceinline__ double control_lr(const DeviceControl& c, double lr, int64_t step) {
  if (c.schedule.kind != LrRule::kNone) return scheduled_lr(c.schedule, step - 1);
  return c.lr != nullptr ? *c.lr : lr;
}

// A gradient element as the update reads it: clipped (kernels/optimizer_rules.h: clipped_grad)
// when a coefficient is given.
template <typename T, typename A>
__device__ __forceinline__ A read_grad(const T* g, int64_t i, const DeviceControl& c) {
  return c.coef != nullptr ? clipped_grad<T>(static_cast<A>(g[i]), static_cast<A>(*c.coef)) : static_cast<A>(g[i]);
}

// ---- kernels ---------------------------------------------------------------------------------

// Lists: 0 params (T), 1 grads (T), 2 momentum buffers (acc_t; null without momentum). As
// torch.optim.SGD. The update arithmetic runs in acc_t (loads T -> acc_t, stores acc_t -> T:
// no-ops for f32, f64).
template <typename T, typename acc_t>
__global__ void __launch_bounds__(kListThreads) sgd_kernel(ListArgs<3> a, acc_t lr, acc_t mu, acc_t keep, acc_t wd, bool nesterov,
                           int64_t host_step, DeviceControl ctl) {
  int64_t step;
  if (control_step(ctl, host_step, step)) return;
  const bool first_step = step <= 1;
  if (ctl.lr != nullptr || ctl.schedule.kind != LrRule::kNone) lr = static_cast<acc_t>(control_lr(ctl, 0.0, step));
  int64_t begin, end;
  const int s = block_chunk(a, begin, end);
  T* p = static_cast<T*>(a.ptr[0][s]);
  const T* g = static_cast<const T*>(a.ptr[1][s]);
  acc_t* buf = static_cast<acc_t*>(a.ptr[2][s]);
  for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
    const acc_t P = p[i];
    const acc_t d = read_grad<T, acc_t>(g, i, ctl) + wd * P;
    if (buf == nullptr) {  // plain SGD
      p[i] = static_cast<T>(P - lr * d);
    } else {
      const acc_t b = first_step ? d : mu * acc_t(buf[i]) + keep * d;  // torch: the buffer starts as the gradient
      buf[i] = b;
      p[i] = static_cast<T>(P - lr * (nesterov ? d + mu * b : b));
    }
  }
}

// Lists: 0 params (T), 1 grads (T), 2 exp_avg, 3 exp_avg_sq (acc_t). As torch.optim.AdamW
// (decoupled) or Adam. The moments and the update run in acc_t; p is stored as T.
template <typename T, typename acc_t>
__global__ void __launch_bounds__(kListThreads) adamw_kernel(ListArgs<4> a, AdamScalars sc, AdamHyper h,
                                                             int64_t host_step, DeviceControl ctl) {
  using std::sqrt;
  using A = acc_t;
  int64_t step;
  if (control_step(ctl, host_step, step)) return;
  // The step or the rate read from the device: the scalars here, by the host's function
  // (kernels/adam_scalars.h).
  if (ctl.steps != nullptr || ctl.lr != nullptr)
    sc = adam_scalars(control_lr(ctl, h.lr, step), h.beta1, h.beta2, h.eps, h.weight_decay, step, h.decoupled);
  const A step_size = static_cast<A>(sc.step_size), inv_bc2_sqrt = static_cast<A>(sc.inv_bc2_sqrt);
  const A one_minus_b1 = static_cast<A>(sc.one_minus_b1), b2 = static_cast<A>(sc.b2);
  const A one_minus_b2 = static_cast<A>(sc.one_minus_b2), eps = static_cast<A>(sc.eps);
  const A wd = static_cast<A>(sc.wd), decay = static_cast<A>(sc.decay);
  const bool l2 = !sc.decoupled && sc.wd != 0, decay_p = sc.decoupled && sc.wd != 0;
  int64_t begin, end;
  const int s = block_chunk(a, begin, end);
  T* p = static_cast<T*>(a.ptr[0][s]);
  const T* g = static_cast<const T*>(a.ptr[1][s]);
  A* m = static_cast<A*>(a.ptr[2][s]);
  A* v = static_cast<A*>(a.ptr[3][s]);
  for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
    const A P = p[i], m0 = m[i];
    const A g0 = read_grad<T, A>(g, i, ctl);
    const A G = l2 ? g0 + wd * P : g0;  // Adam's L2 weight decay: the gradient itself gets + wd * p
    const A M = m0 + one_minus_b1 * (G - m0);  // torch's lerp form of b1 m + (1 - b1) g
    const A V = A(v[i]) * b2 + one_minus_b2 * G * G;
    m[i] = M;
    v[i] = V;
    const A update = step_size * M / (sqrt(V) * inv_bc2_sqrt + eps);
    p[i] = static_cast<T>(decay_p ? P * decay - update : P - update);
  }
}

// Lists: 0 params (T), 1 grads (T), 2.. the rule's state slots (acc_t). One element at a time
// through Rule::apply (kernels/optimizer_rules.h) in acc_t; p is stored as T.
template <typename Rule, typename T, typename A>
__global__ void __launch_bounds__(kListThreads)
    rule_kernel(ListArgs<2 + Rule::kSlots> a, typename Rule::template Coeffs<A> c, typename Rule::Options o, double lr,
                int64_t host_step, DeviceControl ctl) {
  constexpr int K = Rule::kSlots;
  int64_t step;
  if (control_step(ctl, host_step, step)) return;
  if (ctl.steps != nullptr || ctl.lr != nullptr) c = Rule::template coeffs<A>(o, control_lr(ctl, lr, step), step);
  int64_t begin, end;
  const int s = block_chunk(a, begin, end);
  T* p = static_cast<T*>(a.ptr[0][s]);
  const T* g = static_cast<const T*>(a.ptr[1][s]);
  for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
    A pv = static_cast<A>(p[i]), sv[K];
    for (int k = 0; k < K; ++k) sv[k] = static_cast<const A*>(a.ptr[2 + k][s])[i];
    Rule::apply(pv, read_grad<T, A>(g, i, ctl), sv, c);
    p[i] = static_cast<T>(pv);
    for (int k = 0; k < K; ++k) static_cast<A*>(a.ptr[2 + k][s])[i] = sv[k];
  }
}

// The sum of partial (n) by one block of kListThreads: thread t adds t, t + blockDim, ..., then a
// fixed tree. The same bits wherever it runs: a list's last block or fold_kernel.
__device__ __forceinline__ double sum_partials(const double* partial, int64_t n, double* scratch) {
  double acc = 0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) acc += partial[i];
  return block_reduce(acc, SumOp{}, scratch);
}

// What thread 0 of the folding block does with the sum of squares.
struct SumTo {  // sum_of_squares: the sum, read back by the host
  double* out;
  __device__ void operator()(double acc) const { *out = acc; }
};
struct NormTo {  // grad_norm_device: out[0] the norm, out[1] the clip coefficient, found (null: none)
                 // set from the norm when set_found, both masked when found (kernels/optimizer.h)
  double* out;
  double max_norm;
  int* found;
  bool set_found;
  int64_t* skipped_count;
  __device__ void operator()(double acc) const {
    using std::isfinite;
    using std::sqrt;
    const double norm = sqrt(acc);
    if (found != nullptr && set_found) *found = isfinite(norm) ? 0 : 1;
    const bool skipped = found != nullptr && *found != 0;
    if (skipped && skipped_count != nullptr) ++*skipped_count;
    const double factor = max_norm / (norm + 1e-6);
    out[0] = skipped ? 0.0 : norm;
    out[1] = max_norm > 0 && !skipped && factor < 1.0 ? factor : 1.0;  // clip_grad_norm's rule
  }
};

// partial[chunk_base[s] + chunk] = sum of x^2 over this block's chunk, in double. In the list's
// last launch (ticket: the device's last-block counter, kernels/cuda/last_block.h; null in the
// others) the grid's last block then adds all `total` partials of the list, those of the earlier
// launches included (they ran before it on the stream), and hands the sum to finish: the fold costs
// no launch of its own.
template <typename T, typename Finish>
__global__ void __launch_bounds__(kListThreads) sum_squares_kernel(ListArgs<1> a, double* partial, int64_t total,
                                                                   unsigned* ticket, Finish finish) {
  __shared__ double scratch[32];
  __shared__ bool last;
  int64_t begin, end;
  const int s = block_chunk(a, begin, end);
  const T* x = static_cast<const T*>(a.ptr[0][s]);
  double acc = 0;
  for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x)
    acc += static_cast<double>(x[i]) * static_cast<double>(x[i]);
  acc = block_reduce(acc, SumOp{}, scratch);
  if (threadIdx.x == 0) partial[a.chunk_base[s] + a.chunk_of[blockIdx.x]] = acc;
  if (ticket == nullptr) return;  // uniform: a later launch of the list folds
  if (threadIdx.x == 0) last = take_last_ticket(ticket);  // after thread 0's own partial
  __syncthreads();
  if (!last) return;  // uniform over the block
  const double sum = sum_partials(partial, total, scratch);
  if (threadIdx.x == 0) {
    finish(sum);
    reset_ticket(ticket);
  }
}

// The fold alone, one block of kListThreads: for an empty list (no squares launch to fold in).
template <typename Finish>
__global__ void __launch_bounds__(kListThreads) fold_kernel(const double* partial, int64_t n, Finish finish) {
  __shared__ double scratch[32];
  const double sum = sum_partials(partial, n, scratch);
  if (threadIdx.x == 0) finish(sum);
}

// One thread: sum[0] = (first ? 0 : sum[0]) + double(value[0]) * scale.
template <typename T>
__global__ void __launch_bounds__(32) accumulate_loss_kernel(double* sum, const T* value, double scale, bool first) {
  if (threadIdx.x != 0) return;
  sum[0] = (first ? 0.0 : sum[0]) + mul_rounded(static_cast<double>(value[0]), scale);
}

template <typename T, typename acc_t>
__global__ void __launch_bounds__(kListThreads) scale_kernel(ListArgs<1> a, acc_t factor) {
  int64_t begin, end;
  const int s = block_chunk(a, begin, end);
  T* x = static_cast<T*>(a.ptr[0][s]);
  for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) x[i] = static_cast<T>(acc_t(x[i]) * factor);
}

// ---- launchers -------------------------------------------------------------------------------

// The squares of every element of tensors into pp (total partials, one per chunk, in list order),
// then finish(their sum): folded into the last squares launch, or alone when the list is empty.
// One launch for a list of up to kMaxTensors tensors of one dtype.
template <typename Finish>
void squares_then(const std::vector<Tensor>& tensors, double* pp, int64_t total, Finish finish) {
  const std::array<const std::vector<Tensor>*, 1> lists{&tensors};
  int64_t launched = 0;  // chunks covered by the launches so far
  unsigned* ticket = total > 0 ? last_block_ticket(tensors.front().device()) : nullptr;
  for_each_floating_type([&](auto zero) {
    using T = decltype(zero);
    list_apply<T, 1>(lists, [&](const ListArgs<1>& a, int blocks) {
      launched += blocks;
      launch("sum_squares_kernel", sum_squares_kernel<T, Finish>, blocks, kListThreads, 0, a, pp, total,
             launched == total ? ticket : nullptr, finish);
    });
  });
  if (total == 0) launch("fold_kernel", fold_kernel<Finish>, 1, kListThreads, 0, static_cast<const double*>(pp), total, finish);
}

}  // namespace

void sgd_update(const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
                const std::vector<Tensor>& momentum_bufs, double lr, double momentum, double dampening,
                double weight_decay, bool nesterov, int64_t step, const StepControl& control) {
  const Device device = list_device(params);
  if (device.is_cpu()) return;
  set_device(device);
  DeviceControl ctl = device_control(control, device);
  // What the device gives (control.steps, control.lr, the schedule's rate) reaches the kernel as a
  // constant placeholder: a captured step's by-value arguments stay the same every step
  // (docs/design.md, "Replay-safe steps").
  step = control.steps.defined() ? 1 : step;
  lr = control.lr.defined() || control.schedule.kind != LrRule::kNone ? 0.0 : lr;
  const bool use_buf = momentum != 0;
  const std::array<const std::vector<Tensor>*, 3> lists{&params, &grads, use_buf ? &momentum_bufs : nullptr};
  const auto go = [&](auto zero) {
    using T = decltype(zero);
    using A = acc_type_t<T>;
    list_apply<T, 3>(lists, [&](const ListArgs<3>& a, int blocks) {
      launch("sgd_kernel", sgd_kernel<T, A>, blocks, kListThreads, 0, a, static_cast<A>(lr), static_cast<A>(momentum),
             static_cast<A>(1 - dampening), static_cast<A>(weight_decay), nesterov, step, ctl);
      ctl.counted = 1;  // the later launches find the count advanced
    });
  };
  for_each_floating_type(go);
}

void adamw_update(const std::vector<Tensor>& params, const std::vector<Tensor>& grads, const std::vector<Tensor>& m,
                  const std::vector<Tensor>& v, double lr, double beta1, double beta2, double eps,
                  double weight_decay, int64_t step, bool decoupled_weight_decay, const StepControl& control) {
  const Device device = list_device(params);
  if (device.is_cpu()) return;
  set_device(device);
  DeviceControl ctl = device_control(control, device);
  step = control.steps.defined() ? 1 : step;  // placeholders, as sgd_update's
  lr = control.lr.defined() || control.schedule.kind != LrRule::kNone ? 0.0 : lr;
  const AdamHyper h{lr, beta1, beta2, eps, weight_decay, decoupled_weight_decay};
  // With the step or the rate on the device the kernel computes these itself.
  const AdamScalars sc = adam_scalars(lr, beta1, beta2, eps, weight_decay, step, decoupled_weight_decay);
  const std::array<const std::vector<Tensor>*, 4> lists{&params, &grads, &m, &v};
  const auto go = [&](auto zero) {
    using T = decltype(zero);
    list_apply<T, 4>(lists, [&](const ListArgs<4>& a, int blocks) {
      launch("adamw_kernel", adamw_kernel<T, acc_type_t<T>>, blocks, kListThreads, 0, a, sc, h, step, ctl);
      ctl.counted = 1;
    });
  };
  for_each_floating_type(go);
}

template <typename Rule>
void rule_update(const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
                 const std::vector<std::vector<Tensor>>& state, const typename Rule::Options& options, double lr,
                 int64_t step, const StepControl& control) {
  const Device device = list_device(params);
  if (device.is_cpu()) return;
  set_device(device);
  DeviceControl ctl = device_control(control, device);
  step = control.steps.defined() ? 1 : step;  // placeholders, as sgd_update's
  lr = control.lr.defined() || control.schedule.kind != LrRule::kNone ? 0.0 : lr;
  constexpr int N = 2 + Rule::kSlots;  // params, grads, the slots
  std::array<const std::vector<Tensor>*, N> lists{&params, &grads};
  for (int k = 0; k < Rule::kSlots; ++k) lists[static_cast<size_t>(2 + k)] = &state[static_cast<size_t>(k)];
  for_each_floating_type([&](auto zero) {
    using T = decltype(zero);
    using A = acc_type_t<T>;
    const auto c = Rule::template coeffs<A>(options, lr, step);
    list_apply<T, N>(lists, [&](const ListArgs<N>& a, int blocks) {
      launch(Rule::kName, rule_kernel<Rule, T, A>, blocks, kListThreads, 0, a, c, options, lr, step, ctl);
      ctl.counted = 1;
    });
  });
}

REEL_OPTIMIZER_RULES(REEL_INSTANTIATE_RULE_UPDATE)

double sum_of_squares(const std::vector<Tensor>& tensors) {
  const Device device = list_device(tensors);
  if (device.is_cpu()) return 0;
  set_device(device);
  int64_t total = 0;
  for (const Tensor& t : tensors) total += chunks_of(t);
  // (total) double partials, then the one result.
  const Tensor partial = empty({total + 1}, DType::f64, device);
  double* pp = partial.data<double>();
  squares_then(tensors, pp, total, SumTo{pp + total});
  return untracked::slice(partial, 0, total, total + 1).to(Device::cpu()).data<double>()[0];
}

void grad_norm_device(const std::vector<Tensor>& tensors, const Tensor& out, double max_norm, const Tensor& found_inf,
                      bool set_found, const Tensor& skipped_count) {
  const Device device = out.device();
  set_device(device);
  int64_t total = 0;
  for (const Tensor& t : tensors) total += chunks_of(t);
  const Tensor partial = empty({std::max<int64_t>(total, 1)}, DType::f64, device);  // (total) double partials
  int* found = found_inf.defined() ? found_inf.data<int32_t>() : nullptr;
  squares_then(tensors, partial.data<double>(), total,
               NormTo{out.data<double>(), max_norm, found, set_found,
                      skipped_count.defined() ? skipped_count.data<int64_t>() : nullptr});
}

void accumulate_loss_(const Tensor& sum, const Tensor& value, double scale, bool first) {
  set_device(sum.device());
  for_each_floating_type([&](auto zero) {
    using T = decltype(zero);
    if (value.dtype() == dtype_of<T>::value)
      launch("accumulate_loss_kernel", accumulate_loss_kernel<T>, 1, 32, 0, sum.data<double>(), value.data<T>(), scale,
             first);
  });
}

void scale_(const std::vector<Tensor>& tensors, double factor) {
  const Device device = list_device(tensors);
  if (device.is_cpu()) return;
  set_device(device);
  const std::array<const std::vector<Tensor>*, 1> lists{&tensors};
  const auto go = [&](auto zero) {
    using T = decltype(zero);
    list_apply<T, 1>(lists, [&](const ListArgs<1>& a, int blocks) {
      launch("scale_kernel", scale_kernel<T, acc_type_t<T>>, blocks, kListThreads, 0, a,
             static_cast<acc_type_t<T>>(factor));
    });
  };
  for_each_floating_type(go);
}

}  // namespace reel::kernels::cuda
