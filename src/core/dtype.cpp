// core/dtype.cpp: dtype names, sizes and limits, and exact float <-> bf16 / f16 / e4m3 / e5m2 conversions.
// Every narrow format is rounded the same way: take the float's 24-bit significand, shift it right to the
// target's precision (further for target subnormals), round to nearest, ties to even. The result, placed
// after the target's biased exponent, is the code's magnitude, and a carry out of the mantissa moves into
// the exponent by itself. A magnitude above the largest finite code is overflow, handled per format.
#include "core/dtype.h"

#include <algorithm>
#include <bit>
#include <cctype>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <iterator>
#include <limits>
#include <string>

namespace tb {
namespace {

struct Info {
  std::string_view name;
  std::size_t size;
  double eps;  // unit roundoff; 0 for i32, whose arithmetic is exact
  double max;
};
constexpr Info kInfo[] = {
    {"f64", 8, 0x1p-53, DBL_MAX},
    {"f32", 4, 0x1p-24, FLT_MAX},
    {"tf32", 4, 0x1p-11, 0x1.ffcp127},
    {"f16", 2, 0x1p-11, 65504.0},
    {"bf16", 2, 0x1p-8, 0x1.fep127},
    {"e4m3", 1, 0x1p-4, 448.0},
    {"e5m2", 1, 0x1p-3, 57344.0},
    {"i32", 4, 0.0, 2147483647.0},
};
static_assert(std::size(kInfo) == std::size_t(DType::i32) + 1, "kInfo must list every DType in order");

const Info& info(DType t) { return kInfo[std::size_t(t)]; }

// Lower-case spellings accepted by parse_dtype, besides the canonical names.
struct Alias {
  std::string_view name;
  DType type;
};
constexpr Alias kAliases[] = {
    {"fp64", DType::f64},       {"float64", DType::f64},      {"double", DType::f64},
    {"fp32", DType::f32},       {"float32", DType::f32},      {"float", DType::f32},
    {"fp16", DType::f16},       {"float16", DType::f16},      {"half", DType::f16},
    {"bfloat16", DType::bf16},  {"fp8e4m3", DType::e4m3},     {"fp8_e4m3", DType::e4m3},
    {"e4m3fn", DType::e4m3},    {"float8_e4m3fn", DType::e4m3}, {"fp8e5m2", DType::e5m2},
    {"fp8_e5m2", DType::e5m2},  {"float8_e5m2", DType::e5m2}, {"int32", DType::i32},
    {"int", DType::i32},
};

// A narrow binary format: mantissa bits, exponent bias, largest finite magnitude code.
struct Format {
  int mant_bits;
  int bias;
  std::uint32_t max_code;
};
constexpr Format kF16{10, 15, 0x7BFF};
constexpr Format kE4M3{3, 7, 0x7E};
constexpr Format kE5M2{2, 15, 0x7B};

// |x| (a finite float, given as its bits without the sign) rounded to `f`, as a magnitude code.
// The result may exceed f.max_code (overflow) or, for f16/e5m2, land on the inf code.
std::uint32_t round_magnitude(std::uint32_t abs_bits, Format f) {
  const int float_exp = int(abs_bits >> 23);  // biased by 127
  if (float_exp == 0) return 0;               // float subnormals (< 2^-126) are below half of any target ulp
  const std::uint32_t sig = (abs_bits & 0x7FFFFF) | 0x800000;  // 1.m * 2^23
  const int exp = float_exp - 127 + f.bias;                     // target biased exponent
  // Normal targets keep mant_bits fraction bits; target subnormals (exp < 1) lose 1 - exp more.
  const int shift = 23 - f.mant_bits + std::max(0, 1 - exp);
  if (shift > 24) return 0;  // |x| < half the smallest subnormal
  std::uint32_t q = sig >> shift;
  const std::uint32_t rest = sig & ((1u << shift) - 1), half = 1u << (shift - 1);
  if (rest > half || (rest == half && (q & 1))) ++q;
  // Subnormal: q is the code (q == 2^M is the smallest normal). Normal: q = 2^M + mantissa.
  return exp < 1 ? q : (std::uint32_t(exp - 1) << f.mant_bits) + q;
}

// Decodes a magnitude code below the format's inf/NaN codes.
float decode_finite(std::uint32_t code, Format f) {
  const int exp = int(code >> f.mant_bits);
  const std::uint32_t mant = code & ((1u << f.mant_bits) - 1);
  if (exp == 0) return std::ldexp(float(mant), 1 - f.bias - f.mant_bits);
  return std::ldexp(float(mant | (1u << f.mant_bits)), exp - f.bias - f.mant_bits);
}

// nan: the code for NaN inputs (sign kept); overflow: the code for |x| past max when not saturating
// (NaN for e4m3, inf for e5m2). ±inf counts as overflow.
std::uint8_t float_to_fp8(float x, bool saturate, Format f, std::uint8_t nan, std::uint8_t overflow) {
  const std::uint32_t bits = std::bit_cast<std::uint32_t>(x);
  const auto sign = std::uint8_t((bits >> 24) & 0x80);
  const std::uint32_t abs_bits = bits & 0x7FFFFFFF;
  if (abs_bits > 0x7F800000) return nan | sign;
  const std::uint32_t code = abs_bits == 0x7F800000 ? f.max_code + 1 : round_magnitude(abs_bits, f);
  if (code > f.max_code) return (saturate ? std::uint8_t(f.max_code) : overflow) | sign;
  return std::uint8_t(code) | sign;
}

float with_sign(float v, std::uint32_t sign_bit) { return sign_bit ? -v : v; }

// f32 rounded to `drop` fewer mantissa bits (RNE), still as f32 bits; NaN is quieted, inf stays inf.
std::uint32_t round_f32_bits(std::uint32_t bits, int drop) {
  if ((bits & 0x7FFFFFFF) > 0x7F800000) return bits | 0x400000;
  const std::uint32_t lsb = (bits >> drop) & 1;
  return bits + ((1u << (drop - 1)) - 1) + lsb;  // the caller discards the low `drop` bits
}

// tf32 keeps 10 of f32's 23 mantissa bits; it is stored as an f32 whose low 13 bits are zero.
float round_to_tf32(float f) {
  return std::bit_cast<float>(round_f32_bits(std::bit_cast<std::uint32_t>(f), 13) & ~0x1FFFu);
}

template <typename T>
T load_raw(const unsigned char* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

template <typename T>
void store_raw(unsigned char* p, T v) {
  std::memcpy(p, &v, sizeof v);
}

}  // namespace

std::string_view dtype_name(DType t) { return info(t).name; }

std::optional<DType> parse_dtype(std::string_view s) {
  std::string lower(s);
  for (char& c : lower) c = char(std::tolower(static_cast<unsigned char>(c)));
  for (std::size_t i = 0; i < std::size(kInfo); ++i)
    if (kInfo[i].name == lower) return DType(i);
  for (const Alias& a : kAliases)
    if (a.name == lower) return a.type;
  return std::nullopt;
}

std::size_t dtype_size(DType t) { return info(t).size; }
double dtype_eps(DType t) { return info(t).eps; }
double dtype_max(DType t) { return info(t).max; }
bool is_fp8(DType t) { return t == DType::e4m3 || t == DType::e5m2; }

std::uint16_t float_to_bf16(float x) {
  return std::uint16_t(round_f32_bits(std::bit_cast<std::uint32_t>(x), 16) >> 16);
}

float bf16_to_float(std::uint16_t bits) { return std::bit_cast<float>(std::uint32_t(bits) << 16); }

std::uint16_t float_to_f16(float x) {
  const std::uint32_t bits = std::bit_cast<std::uint32_t>(x);
  const auto sign = std::uint16_t((bits >> 16) & 0x8000);
  const std::uint32_t abs_bits = bits & 0x7FFFFFFF;
  if (abs_bits > 0x7F800000) return sign | 0x7E00 | std::uint16_t((abs_bits >> 13) & 0x3FF);  // quiet NaN
  if (abs_bits == 0x7F800000) return sign | 0x7C00;
  return sign | std::uint16_t(std::min<std::uint32_t>(round_magnitude(abs_bits, kF16), 0x7C00));
}

float f16_to_float(std::uint16_t bits) {
  const std::uint32_t mag = bits & 0x7FFF, sign = bits & 0x8000;
  if (mag == 0x7C00) return with_sign(std::numeric_limits<float>::infinity(), sign);
  if (mag > 0x7C00) return with_sign(std::numeric_limits<float>::quiet_NaN(), sign);
  return with_sign(decode_finite(mag, kF16), sign);
}

std::uint8_t float_to_e4m3(float x, bool saturate) { return float_to_fp8(x, saturate, kE4M3, 0x7F, 0x7F); }

float e4m3_to_float(std::uint8_t bits) {
  const std::uint32_t mag = bits & 0x7F, sign = bits & 0x80;
  if (mag == 0x7F) return with_sign(std::numeric_limits<float>::quiet_NaN(), sign);
  return with_sign(decode_finite(mag, kE4M3), sign);
}

std::uint8_t float_to_e5m2(float x, bool saturate) { return float_to_fp8(x, saturate, kE5M2, 0x7E, 0x7C); }

float e5m2_to_float(std::uint8_t bits) {
  const std::uint32_t mag = bits & 0x7F, sign = bits & 0x80;
  if (mag == 0x7C) return with_sign(std::numeric_limits<float>::infinity(), sign);
  if (mag > 0x7C) return with_sign(std::numeric_limits<float>::quiet_NaN(), sign);
  return with_sign(decode_finite(mag, kE5M2), sign);
}

double load_as_double(DType t, const void* base, std::size_t index) {
  const auto* p = static_cast<const unsigned char*>(base) + index * dtype_size(t);
  switch (t) {
    case DType::f64: return load_raw<double>(p);
    case DType::f32:
    case DType::tf32: return load_raw<float>(p);
    case DType::f16: return f16_to_float(load_raw<std::uint16_t>(p));
    case DType::bf16: return bf16_to_float(load_raw<std::uint16_t>(p));
    case DType::e4m3: return e4m3_to_float(load_raw<std::uint8_t>(p));
    case DType::e5m2: return e5m2_to_float(load_raw<std::uint8_t>(p));
    case DType::i32: return load_raw<std::int32_t>(p);
  }
  return 0.0;  // not reached: every DType is handled above
}

// Narrow types round twice (double -> float -> narrow), as a device kernel storing a float would.
// i32 rounds to nearest (ties to even), clamps to the int32 range, and stores NaN as 0.
void store_from_double(DType t, void* base, std::size_t index, double value) {
  auto* p = static_cast<unsigned char*>(base) + index * dtype_size(t);
  const float f = float(value);
  switch (t) {
    case DType::f64: return store_raw(p, value);
    case DType::f32: return store_raw(p, f);
    case DType::tf32: return store_raw(p, round_to_tf32(f));
    case DType::f16: return store_raw(p, float_to_f16(f));
    case DType::bf16: return store_raw(p, float_to_bf16(f));
    case DType::e4m3: return store_raw(p, float_to_e4m3(f));
    case DType::e5m2: return store_raw(p, float_to_e5m2(f));
    case DType::i32:
      if (std::isnan(value)) return store_raw(p, std::int32_t{0});
      return store_raw(p, std::int32_t(std::clamp(std::nearbyint(value), -2147483648.0, 2147483647.0)));
  }
}

}  // namespace tb
