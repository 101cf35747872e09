// Optimizer update kernels on the CPU: SGD (momentum, dampening, Nesterov, weight decay), AdamW
// (and Adam's L2 form), the rules of kernels/optimizer_rules.h (one loop for all), the global
// gradient norm and in-place scaling for clipping, over f32, f64, bf16 and f16 parameters (a
// 16-bit parameter's state is f32: see kernels/optimizer.h); and the window's device decisions
// (kernels::StepControl read by every update, its step count advanced and its schedule evaluated
// once per update; the norm with its clip coefficient and flag, the loss sum), whose "device"
// tensors are host memory here, read directly.
//
// Every kernel works over a flat list of tensors, in the chunks of kernels/cpu/multi_tensor.h
// (the unscale's too), which threads take. Each update is one fused sweep per chunk (param, grad
// and state read once, param and state written once): these kernels are bound by memory
// bandwidth. The norm adds per-chunk double partials in chunk order, so it is bit-identical for
// any number of threads. The update arithmetic (Adam's moments' temporaries, SGD's buffer
// math) runs in acc_t = reel::acc_type_t<T>: loads T -> acc_t, stores acc_t -> T (no-ops for f32
// and f64, where acc_t is T; one rounding for bf16 and f16), and the state is stored as acc_t;
// the norm's partials are double, wider than acc_t.
#include <algorithm>
#include <array>
#include <cmath>
#include <type_traits>
#include <vector>

#include <Eigen/Core>

#include "kernels/adam_scalars.h"
#include "kernels/backends.h"
#include "kernels/cpu/multi_tensor.h"
#include "kernels/lr_rule.h"
#include "kernels/optimizer_rules.h"

namespace reel::kernels::cpu {

namespace {

template <typename T>
using Arr = Eigen::Map<Eigen::Array<T, Eigen::Dynamic, 1>>;
template <typename T>
using CArr = Eigen::Map<const Eigen::Array<T, Eigen::Dynamic, 1>>;

struct SgdArgs {
  double lr, momentum, dampening, weight_decay;
  bool nesterov, first_step;
};

// T: the parameter's and gradient's type; S: the momentum buffer's (acc_t: T itself for f32 and
// f64, f32 for the 16-bit types).
template <typename T, typename S = acc_type_t<T>, typename acc_t = acc_type_t<T>>
void sgd_chunk(T* p, const T* g, S* buf, int64_t n, const SgdArgs& a) {
  const acc_t lr = static_cast<acc_t>(a.lr), mu = static_cast<acc_t>(a.momentum);
  const acc_t wd = static_cast<acc_t>(a.weight_decay), keep = static_cast<acc_t>(1 - a.dampening);
  if (buf == nullptr) {  // plain SGD
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) p[i] = static_cast<T>(acc_t(p[i]) - lr * (acc_t(g[i]) + wd * acc_t(p[i])));
    return;
  }
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) {
    const acc_t d = acc_t(g[i]) + wd * acc_t(p[i]);
    const acc_t b = a.first_step ? d : mu * acc_t(buf[i]) + keep * d;  // torch: the buffer starts as the gradient
    buf[i] = static_cast<S>(b);
    p[i] = static_cast<T>(acc_t(p[i]) - lr * (a.nesterov ? d + mu * b : b));
  }
}

// T: the parameter's and gradient's type; the moments m, v are acc_t (T itself for f32 and f64,
// f32 for the 16-bit types), and so is the whole update, rounded once to T at the store.
template <typename T, typename acc_t = acc_type_t<T>>
void adam_chunk(T* p, const T* g, acc_t* m, acc_t* v, int64_t n, const AdamScalars& sc) {
  using A = acc_t;
  const A step_size = static_cast<A>(sc.step_size), inv_bc2_sqrt = static_cast<A>(sc.inv_bc2_sqrt);
  const A one_minus_b1 = static_cast<A>(sc.one_minus_b1), b2 = static_cast<A>(sc.b2);
  const A one_minus_b2 = static_cast<A>(sc.one_minus_b2), eps = static_cast<A>(sc.eps);
  const A wd = static_cast<A>(sc.wd), decay = static_cast<A>(sc.decay);
  // Three Eigen sweeps (Eigen vectorises sqrt and division; a plain loop calls glibc's sqrtf per
  // element, as -fmath-errno forbids vectorising it) over blocks of 512 elements, 2 KB per
  // operand: the second and third sweeps hit L1, so memory still sees each operand once.
  // Each block is copied (a 16-bit p and g converted to acc_t) into 64-byte aligned buffers, its
  // tail padded with zeros to whole packets:
  // Eigen then runs every element through its packet code, with no scalar prologue (for an
  // unaligned start) or epilogue, whose rounding differs (the compiler contracts the scalar code's
  // multiply-adds). So an element's update does not depend on where it sits in the tensor: a
  // parameter stepped inside a flat shard (distributed/fsdp.h) gets the same bits as stepped on its own.
  constexpr int64_t kBlock = 512, kLanes = 64 / static_cast<int64_t>(sizeof(A));
  alignas(64) A pb[kBlock], mb[kBlock], vb[kBlock], gb[kBlock];
  for (int64_t b = 0; b < n; b += kBlock) {
    const int64_t nb = std::min(kBlock, n - b), padded = (nb + kLanes - 1) / kLanes * kLanes;
    std::copy(p + b, p + b + nb, pb), std::copy(m + b, m + b + nb, mb);
    std::copy(v + b, v + b + nb, vb), std::copy(g + b, g + b + nb, gb);
    for (A* buf : {pb, mb, vb, gb}) std::fill(buf + nb, buf + padded, A(0));
    Arr<A> P(pb, padded), M(mb, padded), V(vb, padded);
    const CArr<A> G(gb, padded);
    if (sc.decoupled || sc.wd == 0) {
      M = M + one_minus_b1 * (G - M);  // torch's lerp form of b1 m + (1 - b1) g
      V = V * b2 + one_minus_b2 * G.square();
    } else {  // Adam's L2 weight decay: the gradient itself gets + wd * p
      M = M + one_minus_b1 * (G + wd * P - M);
      V = V * b2 + one_minus_b2 * (G + wd * P).square();
    }
    // sqrt(v) * (1 / sqrt(bc2)) where torch divides by sqrt(bc2): see kernels/adam_scalars.h.
    if (sc.decoupled && sc.wd != 0) P = P * decay - step_size * M / (V.sqrt() * inv_bc2_sqrt + eps);
    else P = P - step_size * M / (V.sqrt() * inv_bc2_sqrt + eps);
    for (int64_t i = 0; i < nb; ++i) p[b + i] = static_cast<T>(pb[i]);  // the one rounding of a 16-bit p
    std::copy(mb, mb + nb, m + b), std::copy(vb, vb + nb, v + b);
  }
}

// One chunk of a rule of kernels/optimizer_rules.h: each element loaded into acc_t (the state is
// acc_t already), updated by Rule::apply, stored back (a 16-bit p rounded once).
template <typename Rule, typename T, typename A = acc_type_t<T>>
void rule_chunk(T* p, const T* g, A* const* s, int64_t n, const typename Rule::template Coeffs<A>& c) {
  constexpr int K = Rule::kSlots;
  for (int64_t i = 0; i < n; ++i) {
    A pv = static_cast<A>(p[i]), sv[K];
    for (int k = 0; k < K; ++k) sv[k] = s[k][i];
    Rule::apply(pv, static_cast<A>(g[i]), sv, c);
    p[i] = static_cast<T>(pv);
    for (int k = 0; k < K; ++k) s[k][i] = sv[k];
  }
}

template <typename T>
double sum_squares_chunk(const T* x, int64_t n) {
  double s = 0;
#pragma omp simd reduction(+ : s)
  for (int64_t i = 0; i < n; ++i) s += static_cast<double>(x[i]) * static_cast<double>(x[i]);
  return s;
}

// out[i] = x[i] * factor in acc_t, rounded once to T (out may be x: scale_ in place).
template <typename T, typename acc_t = acc_type_t<T>>
void scale_into(const T* x, T* out, int64_t n, double factor) {
  const acc_t f = static_cast<acc_t>(factor);
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) out[i] = static_cast<T>(acc_t(x[i]) * f);
}
template <typename T>
void scale_chunk(T* x, int64_t n, double factor) {
  scale_into(x, x, n, factor);
}

// StepControl (kernels/optimizer.h) on the cpu, whose tensors are host memory: read at once.
struct Control {
  bool skip;     // found_inf set: write nothing
  int64_t step;  // the step the update runs at
  bool clip;     // coef given: the gradients are scaled by it first
  double coef;
  double lr;     // the rate: control.schedule's at the count read, else control.lr's, else the argument
};
// Called once per update, before any chunk: advances control.steps (unless skipped).
Control resolve(const StepControl& c, int64_t step, double lr) {
  const bool skip = c.found_inf.defined() && c.found_inf.data<int32_t>()[0] != 0;
  if (c.steps.defined()) {
    int64_t* s = c.steps.data<int64_t>();
    step = s[0] + 1;
    if (!skip) s[0] = step;
  }
  if (c.schedule.kind != LrRule::kNone) lr = scheduled_lr(c.schedule, step - 1);
  else if (c.lr.defined()) lr = c.lr.data<double>()[0];
  return {skip, step, c.coef.defined(), c.coef.defined() ? c.coef.data<double>()[0] : 1.0, lr};
}

// run(p, g, offset, n) over a chunk of n gradients at g: g itself, or, under a clip coefficient,
// blocks of it scaled into a local buffer exactly as scale_ would scale the .grad (scale_into: the
// same multiply and rounding), so that the update reads the bits it reads after scale_. The
// blocks are whole multiples of adam_chunk's 512 elements: its blocks, and so its bits, stay put.
template <typename T, typename Run>
void with_grads(const T* g, int64_t n, const Control& ctl, Run&& run) {
  if (!ctl.clip) return run(g, int64_t{0}, n);
  constexpr int64_t kBlock = 4096;
  alignas(64) T buf[kBlock];
  for (int64_t b = 0; b < n; b += kBlock) {
    const int64_t nb = std::min(kBlock, n - b);
    scale_into(g + b, buf, nb, ctl.coef);
    run(static_cast<const T*>(buf), b, nb);
  }
}

}  // namespace

// ---- launchers ----------------------------------------------------------------------------------

void sgd_update(const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
                const std::vector<Tensor>& momentum_bufs, double lr, double momentum, double dampening,
                double weight_decay, bool nesterov, int64_t step, const StepControl& control) {
  const Control ctl = resolve(control, step, lr);
  if (ctl.skip) return;
  const bool use_buf = momentum != 0;
  const TensorLists<3> lists({&params, &grads, use_buf ? &momentum_bufs : nullptr});
  const SgdArgs args{ctl.lr, momentum, dampening, weight_decay, nesterov, ctl.step <= 1};
  lists.apply([&](auto zero, const ListChunk<3>& c) {
    using T = decltype(zero);
    using S = acc_type_t<T>;  // the buffer's type
    T* p = c.ptr<T>(0);
    S* buf = c.ptr<S>(2);
    with_grads(c.ptr<const T>(1), c.n, ctl, [&](const T* g, int64_t o, int64_t n) {
      sgd_chunk(p + o, g, buf ? buf + o : nullptr, n, args);
    });
  });
}

void adamw_update(const std::vector<Tensor>& params, const std::vector<Tensor>& grads, const std::vector<Tensor>& m,
                  const std::vector<Tensor>& v, double lr, double beta1, double beta2, double eps,
                  double weight_decay, int64_t step, bool decoupled_weight_decay, const StepControl& control) {
  const Control ctl = resolve(control, step, lr);
  if (ctl.skip) return;
  const TensorLists<4> lists({&params, &grads, &m, &v});
  const AdamScalars args = adam_scalars(ctl.lr, beta1, beta2, eps, weight_decay, ctl.step, decoupled_weight_decay);
  lists.apply([&](auto zero, const ListChunk<4>& c) {
    using T = decltype(zero);
    using A = acc_type_t<T>;  // the moments' type
    T* p = c.ptr<T>(0);
    A *mp = c.ptr<A>(2), *vp = c.ptr<A>(3);
    with_grads(c.ptr<const T>(1), c.n, ctl,
               [&](const T* g, int64_t o, int64_t n) { adam_chunk(p + o, g, mp + o, vp + o, n, args); });
  });
}

template <typename Rule>
void rule_update(const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
                 const std::vector<std::vector<Tensor>>& state, const typename Rule::Options& options, double lr,
                 int64_t step, const StepControl& control) {
  const Control ctl = resolve(control, step, lr);
  if (ctl.skip) return;
  step = ctl.step;
  constexpr size_t N = 2 + Rule::kSlots;  // params, grads, the slots
  std::array<const std::vector<Tensor>*, N> ptrs{&params, &grads};
  for (size_t k = 0; k < static_cast<size_t>(Rule::kSlots); ++k) ptrs[2 + k] = &state[k];
  const TensorLists<N> lists(ptrs);
  // The step's coefficients in both update types (f32 for f32, bf16 and f16 parameters; f64).
  const auto c32 = Rule::template coeffs<float>(options, ctl.lr, step);
  const auto c64 = Rule::template coeffs<double>(options, ctl.lr, step);
  lists.apply([&](auto zero, const ListChunk<N>& c) {
    using T = decltype(zero);
    using A = acc_type_t<T>;
    std::array<A*, static_cast<size_t>(Rule::kSlots)> s;
    for (size_t k = 0; k < s.size(); ++k) s[k] = c.template ptr<A>(2 + k);
    T* p = c.template ptr<T>(0);
    with_grads(c.template ptr<const T>(1), c.n, ctl, [&](const T* g, int64_t o, int64_t n) {
      std::array<A*, static_cast<size_t>(Rule::kSlots)> so;
      for (size_t k = 0; k < s.size(); ++k) so[k] = s[k] + o;
      if constexpr (std::is_same_v<A, float>) rule_chunk<Rule>(p + o, g, so.data(), n, c32);
      else rule_chunk<Rule>(p + o, g, so.data(), n, c64);
    });
  });
}

REEL_OPTIMIZER_RULES(REEL_INSTANTIATE_RULE_UPDATE)

double sum_of_squares(const std::vector<Tensor>& tensors) {
  const TensorLists<1> lists({&tensors});
  std::vector<double> partial(static_cast<size_t>(lists.chunks()), 0.0);
  lists.apply([&](auto zero, const ListChunk<1>& c) {
    using T = decltype(zero);
    partial[static_cast<size_t>(c.index)] = sum_squares_chunk(c.ptr<const T>(0), c.n);
  });
  double s = 0;
  for (double v : partial) s += v;  // chunk order: the same bits for any thread count
  return s;
}

void grad_norm_device(const std::vector<Tensor>& tensors, const Tensor& out, double max_norm, const Tensor& found_inf,
                      bool set_found, const Tensor& skipped_count) {
  const double norm = std::sqrt(sum_of_squares(tensors));  // global_grad_norm's, bit for bit
  int32_t* found = found_inf.defined() ? found_inf.data<int32_t>() : nullptr;
  if (found && set_found) found[0] = std::isfinite(norm) ? 0 : 1;
  const double factor = max_norm / (norm + 1e-6);
  double* o = out.data<double>();
  const bool skipped = found && found[0] != 0;
  if (skipped && skipped_count.defined()) ++skipped_count.data<int64_t>()[0];
  o[0] = skipped ? 0.0 : norm;
  o[1] = max_norm > 0 && !skipped && factor < 1.0 ? factor : 1.0;  // clip_grad_norm's rule
}

void accumulate_loss_(const Tensor& sum, const Tensor& value, double scale, bool first) {
  double* s = sum.data<double>();
  double v = 0;
  by_floating_dtype(value.dtype(), [&](auto zero) { v = static_cast<double>(value.data<decltype(zero)>()[0]); });
  s[0] = (first ? 0.0 : s[0]) + mul_rounded(v, scale);
}

void scale_(const std::vector<Tensor>& tensors, double factor) {
  const TensorLists<1> lists({&tensors});
  lists.apply([&](auto zero, const ListChunk<1>& c) {
    using T = decltype(zero);
    scale_chunk(c.ptr<T>(0), c.n, factor);
  });
}

}  // namespace reel::kernels::cpu
