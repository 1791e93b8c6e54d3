// core/dtype.h: element types and exact host conversions.
//   bf16: 1-8-7, f16: 1-5-10 (IEEE binary16), e4m3 / e5m2: OCP 8-bit floating point (OFP8) formats.
// float -> narrow conversions round to nearest, ties to even. fp8 overflow follows the OCP spec's
// saturating mode by default (|x| > max -> ±max, ±inf -> ±max; NaN -> NaN); non-saturating mode maps
// overflow to NaN (e4m3, no infinities) or ±inf (e5m2). e4m3: bias 7, max 448, NaN = S.1111.111,
// no inf. e5m2: bias 15, max 57344, inf = S.11111.00, NaN = S.11111.{01,10,11}.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>
#include <type_traits>

namespace tb {

enum class DType : std::uint8_t { f64, f32, tf32, f16, bf16, e4m3, e5m2, i32 };

std::string_view dtype_name(DType t);               // "f64" "f32" "tf32" "f16" "bf16" "e4m3" "e5m2" "i32"
std::optional<DType> parse_dtype(std::string_view);  // also accepts fp32, float, fp16, half, bfloat16, fp8e4m3, fp8e5m2, int32, ...
std::size_t dtype_size(DType t);                     // storage bytes (tf32 is stored as f32: 4)
double dtype_eps(DType t);                           // unit roundoff 2^-(mantissa bits + 1): f32 2^-24, bf16 2^-8, e4m3 2^-4, ...
double dtype_max(DType t);                           // largest finite value
bool is_fp8(DType t);

// The DType of a C++ element type: double, float, int, or a 16-bit float type (bf16: __nv_bfloat16 or its bits).
template <class T>
constexpr DType dtype_of() {
  if constexpr (std::is_same_v<T, double>) return DType::f64;
  else if constexpr (std::is_same_v<T, float>) return DType::f32;
  else if constexpr (std::is_same_v<T, int>) return DType::i32;
  else {
    static_assert(sizeof(T) == 2, "dtype_of: double, float, int or a 16-bit float type");
    return DType::bf16;
  }
}

std::uint16_t float_to_bf16(float x);
float bf16_to_float(std::uint16_t bits);
std::uint16_t float_to_f16(float x);
float f16_to_float(std::uint16_t bits);
std::uint8_t float_to_e4m3(float x, bool saturate = true);
float e4m3_to_float(std::uint8_t bits);
std::uint8_t float_to_e5m2(float x, bool saturate = true);
float e5m2_to_float(std::uint8_t bits);

// Type-erased element access for host buffers of any DType (tests, verification, references).
double load_as_double(DType t, const void* base, std::size_t index);
void store_from_double(DType t, void* base, std::size_t index, double value);

}  // namespace tb
