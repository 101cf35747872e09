// Element types a tensor can hold. f32 everywhere; f64 for gradient checks and references;
// i32/i64 for indices (token ids, targets, argmax); bf16 and f16 (core/half.h: reel::bf16,
// reel::f16) for mixed precision, so far as storage, conversion (Tensor::to, copy_), fills,
// printing and safetensors I/O, and the GEMM (matmul, linear) computes in them. Also the floating
// dispatch every kernel runs through, which binds the element type and the type the kernel
// accumulates in (AccType); REEL_DISPATCH_FLOATING rejects the 16-bit types with a reel::Error naming
// the op, REEL_DISPATCH_FLOATING_AND_16 (every family's 16-bit entry points) takes them too.
#pragma once
#include <cstddef>
#include <cstdint>
#include <ostream>
#include <type_traits>

#include "core/error.h"  // REEL_FAIL in REEL_DISPATCH_FLOATING
#include "core/half.h"   // bf16, f16

namespace reel {

enum class DType : uint8_t { f32, f64, i32, i64, bf16, f16 };

constexpr size_t dtype_size(DType t) {
  switch (t) {
    case DType::f32: return 4;
    case DType::f64: return 8;
    case DType::i32: return 4;
    case DType::i64: return 8;
    case DType::bf16: return 2;
    case DType::f16: return 2;
  }
  return 0;
}
// Whether the dtype holds real numbers (the 16-bit types too): what may require grad, what a
// state dict may load into a floating parameter, what the kernels' floating checks let through
// to REEL_DISPATCH_FLOATING, which names the op when it has no case for the dtype yet.
constexpr bool is_floating(DType t) {
  return t == DType::f32 || t == DType::f64 || t == DType::bf16 || t == DType::f16;
}
constexpr bool is_16bit_floating(DType t) { return t == DType::bf16 || t == DType::f16; }
const char* dtype_name(DType t);
inline std::ostream& operator<<(std::ostream& os, DType t) { return os << dtype_name(t); }

template <typename T> struct dtype_of;
template <> struct dtype_of<float> { static constexpr DType value = DType::f32; };
template <> struct dtype_of<double> { static constexpr DType value = DType::f64; };
template <> struct dtype_of<int32_t> { static constexpr DType value = DType::i32; };
template <> struct dtype_of<int64_t> { static constexpr DType value = DType::i64; };
template <> struct dtype_of<bf16> { static constexpr DType value = DType::bf16; };
template <> struct dtype_of<f16> { static constexpr DType value = DType::f16; };

// fn(T{}) with T the C++ type of any dtype (a generic lambda sees it as `auto zero`): for code
// that handles every dtype alike, such as fills and copies between dtypes.
template <typename Fn>
void dispatch_any(DType t, Fn fn) {
  switch (t) {
    case DType::f32: fn(float{}); break;
    case DType::f64: fn(double{}); break;
    case DType::i32: fn(int32_t{}); break;
    case DType::i64: fn(int64_t{}); break;
    case DType::bf16: fn(bf16{}); break;
    case DType::f16: fn(f16{}); break;
  }
}

// The type a kernel accumulates a T in: sums, means, variances, dot products, softmax
// denominators, norms, reduction partials. Loads convert T -> acc_t, stores acc_t -> T. f32 and
// f64 accumulate in themselves (so their arithmetic is that of T); the 16-bit types accumulate in
// f32, where a sum of many terms keeps its low bits. A new floating dtype adds its line here (and,
// once the kernels handle it, its case in REEL_DISPATCH_FLOATING below). A T with no line fails to
// compile.
template <typename T> struct AccType;
template <> struct AccType<float> { using type = float; };
template <> struct AccType<double> { using type = double; };
template <> struct AccType<bf16> { using type = float; };
template <> struct AccType<f16> { using type = float; };
template <typename T> using acc_type_t = typename AccType<T>::type;

static_assert(std::is_same_v<acc_type_t<float>, float>, "f32 accumulates in f32");
static_assert(std::is_same_v<acc_type_t<double>, double>, "f64 accumulates in f64");
static_assert(std::is_same_v<acc_type_t<bf16>, float> && std::is_same_v<acc_type_t<f16>, float>,
              "the 16-bit types accumulate in f32");

// False for every T, but only once T is known: the last branch of an `if constexpr` chain over
// op kinds is `else static_assert(dependent_false<T>, "...")`, so an op with no math of its own
// fails to compile instead of silently taking the last op's math.
template <typename... T> inline constexpr bool dependent_false = false;
template <auto... V> inline constexpr bool dependent_false_v = false;

}  // namespace reel

// One dtype of the dispatch below: a floating dtype the kernels support is one line there.
#define REEL_DISPATCH_FLOATING_CASE(DT, T, ...)                                                      \
  case ::reel::DType::DT: {                                                                          \
    using scalar_t = T;                                                                              \
    using acc_t [[maybe_unused]] = ::reel::acc_type_t<scalar_t>;                                     \
    __VA_ARGS__;                                                                                     \
    break;                                                                                           \
  }

// Runs the statements with `scalar_t` bound to the C++ type of a floating dtype and `acc_t` to
// the type its kernels accumulate in (reel::AccType); other dtypes raise reel::Error naming `op`.
// bf16 and f16 have no case here: it serves the kernels that take only f32 and f64 (random fills,
// the f32 kernels a 16-bit path calls on widened operands, the statistics kept in f32).
// Used by every kernel family on every device:
//   REEL_DISPATCH_FLOATING(x.dtype(), "sum", sum_rows<scalar_t, acc_t>(...));
#define REEL_DISPATCH_FLOATING(dtype, op, ...)                                                       \
  switch (dtype) {                                                                                   \
    REEL_DISPATCH_FLOATING_CASE(f32, float, __VA_ARGS__)                                             \
    REEL_DISPATCH_FLOATING_CASE(f64, double, __VA_ARGS__)                                            \
    default: REEL_FAIL(op, ": dtype ", dtype, " is not supported (f32 or f64 expected)");            \
  }

// REEL_DISPATCH_FLOATING plus bf16 and f16 (acc_t f32): every kernel family's entry points, which
// take the 16-bit types (docs/design.md, "The dtype axis").
#define REEL_DISPATCH_FLOATING_AND_16(dtype, op, ...)                                                \
  switch (dtype) {                                                                                   \
    REEL_DISPATCH_FLOATING_CASE(f32, float, __VA_ARGS__)                                             \
    REEL_DISPATCH_FLOATING_CASE(f64, double, __VA_ARGS__)                                            \
    REEL_DISPATCH_FLOATING_CASE(bf16, ::reel::bf16, __VA_ARGS__)                                     \
    REEL_DISPATCH_FLOATING_CASE(f16, ::reel::f16, __VA_ARGS__)                                       \
    default: REEL_FAIL(op, ": dtype ", dtype, " is not supported (f32, f64, bf16 or f16 expected)"); \
  }

namespace reel {
// The dtype of the acc_t that REEL_DISPATCH_FLOATING binds for t: what every kernel accumulates
// a t in (f32 -> f32, f64 -> f64; 16-bit -> f32). reel::Error for a dtype that is not floating.
inline DType acc_dtype(DType t) {
  if (is_16bit_floating(t)) return DType::f32;  // AccType's lines; REEL_DISPATCH_FLOATING has no case yet
  DType acc = t;
  REEL_DISPATCH_FLOATING(t, "acc_dtype", acc = dtype_of<acc_t>::value)
  return acc;
}
}  // namespace reel
