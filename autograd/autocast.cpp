// Autocast (autograd/autocast.h): the per-op policy table, this thread's state, and the input casts.
#include "autograd/autocast.h"

#include <cstring>
#include <utility>

#include "autograd/functions.h"

namespace reel::autograd {
namespace {

// THE policy table: every op whose user function calls autocast(), and what it does to its inputs.
// An op not listed runs in its inputs' dtype.
struct PolicyRow {
  const char* op;
  CastPolicy policy;
};
constexpr PolicyRow kPolicy[] = {
    // GEMMs: 16-bit inputs, f32 accumulation inside the kernels.
    {"linear", CastPolicy::Lower},
    {"matmul", CastPolicy::Lower},
    {"conv2d", CastPolicy::Lower},
    {"attention", CastPolicy::Lower},
    // The norms: x, w, b in 16 bits, their statistics (mean, rstd) computed and saved in f32 by the
    // kernels. A transformer's norms take the f32 residual stream: in f32 they would save it whole,
    // the largest part of what a block keeps once its GEMMs are 16-bit. batch_norm's running
    // statistics are not cast (its user function hands autocast x, w, b only): f32 buffers.
    {"layer_norm", CastPolicy::Lower},
    {"rms_norm", CastPolicy::Lower},
    {"group_norm", CastPolicy::Lower},
    {"batch_norm", CastPolicy::Lower},
    // Exponentials and losses: f32.
    {"softmax", CastPolicy::F32},
    {"log_softmax", CastPolicy::F32},
    {"cross_entropy", CastPolicy::F32},
    {"linear_cross_entropy", CastPolicy::F32},  // see autocast.h: its dW accumulates over chunks
    {"mse_loss", CastPolicy::F32},
    {"sum", CastPolicy::F32},
    {"mean", CastPolicy::F32},
    // Several inputs combined elementwise: the widest dtype among them.
    {"add", CastPolicy::Promote},
    {"sub", CastPolicy::Promote},
    {"mul", CastPolicy::Promote},
    {"div", CastPolicy::Promote},
    {"where", CastPolicy::Promote},
    {"concat", CastPolicy::Promote},
};

thread_local std::optional<DType> t_autocast;

// Rank for promotion: 16-bit < f32 < f64; bf16 and f16 together give f32 (neither holds the other).
int width(DType t) { return t == DType::f64 ? 3 : t == DType::f32 ? 2 : 1; }
DType wider(DType a, DType b) {
  if (a == b) return a;
  if (width(a) == 1 && width(b) == 1) return DType::f32;
  return width(a) >= width(b) ? a : b;
}

}  // namespace

const char* cast_policy_name(CastPolicy p) {
  switch (p) {
    case CastPolicy::Lower: return "lower";
    case CastPolicy::F32: return "f32";
    case CastPolicy::Promote: return "promote";
  }
  return "?";
}

const CastPolicy* autocast_policy(const char* op) {
  for (const PolicyRow& row : kPolicy)
    if (std::strcmp(row.op, op) == 0) return &row.policy;
  return nullptr;
}

std::optional<DType> autocast_dtype() { return t_autocast; }

Autocast::Autocast(std::optional<DType> dtype) : previous_(t_autocast) {
  REEL_CHECK(!dtype || is_16bit_floating(*dtype), "Autocast: dtype ", *dtype,
             " is not a 16-bit floating type: bf16 or f16 expected (std::nullopt turns autocast off)");
  t_autocast = dtype;
}

Autocast::~Autocast() { t_autocast = previous_; }

Tensor autocast(const char* op, const Tensor& x) {
  if (!t_autocast) return x;
  return autocast(op, Tensors(1, x))[0];
}

Tensors autocast(const char* op, Tensors in) {
  if (!t_autocast) return in;
  const CastPolicy* policy = autocast_policy(op);
  REEL_CHECK(policy, "autocast: op \"", op, "\" has no row in the autocast policy table (autograd/autocast.cpp)");
  const auto castable = [](const Tensor& t) {
    return t.defined() && is_floating(t.dtype()) && t.dtype() != DType::f64;
  };
  DType target = *t_autocast;
  switch (*policy) {
    case CastPolicy::Lower: break;
    case CastPolicy::F32: target = DType::f32; break;
    case CastPolicy::Promote: {
      bool any = false;
      for (const Tensor& t : in)
        if (t.defined() && is_floating(t.dtype())) {
          target = any ? wider(target, t.dtype()) : t.dtype();
          any = true;
        }
      if (!any) return in;
      for (Tensor& t : in)
        if (t.defined() && is_floating(t.dtype())) t = cast(t, target);
      return in;
    }
  }
  for (Tensor& t : in)
    if (castable(t)) t = cast(t, target);
  return in;
}

}  // namespace reel::autograd
