// Element types a tensor can hold. f32 everywhere; f64 for gradient checks and references;
// i32/i64 for indices (token ids, targets, argmax).
#pragma once
#include <cstddef>
#include <cstdint>
#include <ostream>

namespace reel {

enum class DType : uint8_t { f32, f64, i32, i64 };

constexpr size_t dtype_size(DType t) {
  switch (t) {
    case DType::f32: return 4;
    case DType::f64: return 8;
    case DType::i32: return 4;
    case DType::i64: return 8;
  }
  return 0;
}
constexpr bool is_floating(DType t) { return t == DType::f32 || t == DType::f64; }
const char* dtype_name(DType t);
inline std::ostream& operator<<(std::ostream& os, DType t) { return os << dtype_name(t); }

template <typename T> struct dtype_of;
template <> struct dtype_of<float> { static constexpr DType value = DType::f32; };
template <> struct dtype_of<double> { static constexpr DType value = DType::f64; };
template <> struct dtype_of<int32_t> { static constexpr DType value = DType::i32; };
template <> struct dtype_of<int64_t> { static constexpr DType value = DType::i64; };

// fn(T{}) with T the C++ type of any dtype (a generic lambda sees it as `auto zero`): for code
// that handles every dtype alike, such as fills and copies between dtypes.
template <typename Fn>
void dispatch_any(DType t, Fn fn) {
  switch (t) {
    case DType::f32: fn(float{}); break;
    case DType::f64: fn(double{}); break;
    case DType::i32: fn(int32_t{}); break;
    case DType::i64: fn(int64_t{}); break;
  }
}

}  // namespace reel

// Runs the statements with `scalar_t` bound to the C++ type of a floating dtype; other dtypes
// raise reel::Error naming `op`. Used by every kernel family on every device.
#define REEL_DISPATCH_FLOATING(dtype, op, ...)                                     \
  switch (dtype) {                                                                 \
    case ::reel::DType::f32: { using scalar_t = float; __VA_ARGS__; break; }       \
    case ::reel::DType::f64: { using scalar_t = double; __VA_ARGS__; break; }      \
    default: REEL_FAIL(op, ": dtype ", dtype, " is not supported (f32 or f64 expected)"); \
  }
