// The vector forms of core/half.h's f32 <-> bf16 / f16 conversions, for the CPU kernels that widen
// 16-bit rows to f32 scratch and round their results back (kernels/cpu/layernorm.cpp,
// kernels/cpu/attention_16.cpp, kernels/cpu/elementwise.cpp): one place for them, as core/half.h is
// the one place of the scalar bit code (which kernels/simt's emulated cuBLAS and cuDNN use too).
//
// Every function here gives core/half.h's bits for every input: f32 -> 16 bits rounded to nearest
// even (subnormal results exact, overflow to signed inf), 16 bits -> f32 exact, a NaN quieted with
// its sign and top payload bits kept, both ways. tests/test_half_simd.cpp checks it: every 16-bit
// pattern widened, and the f32 patterns around each rounding boundary (and a random sample) narrowed.
//
// * widen(src, dst, n) / narrow(src, dst, n): n contiguous elements. bf16 goes through half.h itself
//   (its branch-free shortcut: a plain loop the compiler vectorises); f16 through the F16C
//   instructions where the build has them (exact both ways and round to nearest even with IEEE
//   subnormals, quieting a NaN as half.h does: the same bits; one instruction per 8 or 16 values,
//   where half.h's branch-free f16 code, vectorised too, takes a dozen), else and for the tails
//   through half.h.
// * load16(p, mask) / store16(p, mask, x) (AVX-512F/BW/VL builds: REEL_HALF_SIMD_AVX512): up to 16
//   elements in an __m512, masked-off lanes read as 0 and left unwritten, for register-blocked
//   loops. bf16: half.h's shift (and quiet bit) and rounding add, written in intrinsics; f16: F16C.
#pragma once
#include <cstdint>
#include <type_traits>

#if defined(__F16C__) || defined(__AVX512F__)
#include <immintrin.h>
#endif

#include "core/half.h"

namespace reel::kernels::cpu {

template <typename T>
constexpr bool kIs16 = std::is_same_v<T, bf16> || std::is_same_v<T, f16>;

// dst[i] = float(src[i]) for i < n (exact).
template <typename T>
inline void widen(const T* src, float* dst, int64_t n) {
  int64_t i = 0;
#if defined(__F16C__)
  if constexpr (std::is_same_v<T, f16>) {
#if defined(__AVX512F__)
    for (const int64_t n16 = n / 16 * 16; i < n16; i += 16)
      _mm512_storeu_ps(dst + i, _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i))));
#endif
    for (const int64_t n8 = n / 8 * 8; i < n8; i += 8)
      _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i))));
  }
#endif
  for (; i < n; ++i) dst[i] = static_cast<float>(src[i]);
}

// dst[i] = T(src[i]) for i < n, rounded to nearest even.
template <typename T>
inline void narrow(const float* src, T* dst, int64_t n) {
  int64_t i = 0;
#if defined(__F16C__)
  if constexpr (std::is_same_v<T, f16>) {
    constexpr int kRne = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
#if defined(__AVX512F__)
    for (const int64_t n16 = n / 16 * 16; i < n16; i += 16)
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), _mm512_cvtps_ph(_mm512_loadu_ps(src + i), kRne));
#endif
    for (const int64_t n8 = n / 8 * 8; i < n8; i += 8)
      _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i), _mm256_cvtps_ph(_mm256_loadu_ps(src + i), kRne));
  }
#endif
  for (; i < n; ++i) dst[i] = static_cast<T>(src[i]);
}

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__)
#define REEL_HALF_SIMD_AVX512 1

// The mask of the first min(n, 16) lanes.
inline __mmask16 lanes(int64_t n) { return n >= 16 ? __mmask16(0xffff) : __mmask16((1u << n) - 1u); }

// 16-bit -> f32 (exact) of the lanes in m; the others read as 0.
inline __m512 load16(const bf16* p, __mmask16 m) {
  const __m512i u = _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, p)), 16);
  const __m512i mag = _mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff));
  const __mmask16 nan = _mm512_cmpgt_epu32_mask(mag, _mm512_set1_epi32(0x7f800000));
  return _mm512_castsi512_ps(_mm512_mask_or_epi32(u, nan, u, _mm512_set1_epi32(0x400000)));
}
inline __m512 load16(const f16* p, __mmask16 m) { return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, p)); }

// f32 -> 16 bits, rounded to nearest even, into the lanes in m.
inline void store16(bf16* p, __mmask16 m, __m512 x) {
  const __m512i u = _mm512_castps_si512(x);
  const __m512i one = _mm512_set1_epi32(1);
  const __m512i rounded = _mm512_srli_epi32(
      _mm512_add_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(0x7fff)), _mm512_and_si512(_mm512_srli_epi32(u, 16), one)), 16);
  const __m512i quiet = _mm512_or_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(0x40));
  const __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff)),
                                                _mm512_set1_epi32(0x7f800000));
  _mm256_mask_storeu_epi16(p, m, _mm512_cvtepi32_epi16(_mm512_mask_mov_epi32(rounded, nan, quiet)));
}
inline void store16(f16* p, __mmask16 m, __m512 x) {
  _mm256_mask_storeu_epi16(p, m, _mm512_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}
#endif  // AVX-512F/BW/VL

}  // namespace reel::kernels::cpu
