// tests/core/dtype_test.cpp: the host dtype conversions against the formats' definitions, computed in double.
// For every bf16 / f16 / e4m3 / e5m2 code: its value (sign * 2^(e-bias) * (1 + m/2^M), subnormals, inf, NaN)
// and the decode -> encode round trip. For every pair of neighbouring finite codes: the midpoint ties to the
// even code and a nudge either side goes to the nearer one. Overflow in both fp8 modes, zeros, subnormals,
// and ~1M floats sampled over all bit patterns against a nearest-code search. Then names, sizes, eps, and
// the type-erased load/store.
#include "core/dtype.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

namespace tb {

static void PrintTo(DType t, std::ostream* os) { *os << dtype_name(t); }  // gtest failure messages

namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

// A narrow format as its spec describes it; the conversions under test are reached through decode/encode.
struct Fmt {
  const char* name;
  int bits;  // code width: 8 or 16
  int mant_bits;
  int bias;
  bool ieee_specials;  // exponent all ones: inf (m = 0) or NaN. Otherwise (e4m3): only S.1111.111 is NaN
  bool has_saturate;   // fp8: encode honours the saturate flag; bf16/f16 always overflow to inf
  float (*decode)(std::uint32_t);
  std::uint32_t (*encode)(float, bool saturate);
};

const Fmt kFormats[] = {
    {"bf16", 16, 7, 127, true, false, [](std::uint32_t c) { return bf16_to_float(std::uint16_t(c)); },
     [](float x, bool) { return std::uint32_t(float_to_bf16(x)); }},
    {"f16", 16, 10, 15, true, false, [](std::uint32_t c) { return f16_to_float(std::uint16_t(c)); },
     [](float x, bool) { return std::uint32_t(float_to_f16(x)); }},
    {"e4m3", 8, 3, 7, false, true, [](std::uint32_t c) { return e4m3_to_float(std::uint8_t(c)); },
     [](float x, bool sat) { return std::uint32_t(float_to_e4m3(x, sat)); }},
    {"e5m2", 8, 2, 15, true, true, [](std::uint32_t c) { return e5m2_to_float(std::uint8_t(c)); },
     [](float x, bool sat) { return std::uint32_t(float_to_e5m2(x, sat)); }},
};

void PrintTo(const Fmt& f, std::ostream* os) { *os << f.name; }

enum class Kind { finite, inf, nan };

std::uint32_t sign_bit(const Fmt& f) { return 1u << (f.bits - 1); }
std::uint32_t num_codes(const Fmt& f) { return 1u << f.bits; }
int exp_all_ones(const Fmt& f) { return (1 << (f.bits - 1 - f.mant_bits)) - 1; }

Kind kind(const Fmt& f, std::uint32_t code) {
  const std::uint32_t mag = code & (sign_bit(f) - 1);
  if (!f.ieee_specials) return mag == sign_bit(f) - 1 ? Kind::nan : Kind::finite;
  if (int(mag >> f.mant_bits) != exp_all_ones(f)) return Kind::finite;
  return (mag & ((1u << f.mant_bits) - 1)) == 0 ? Kind::inf : Kind::nan;
}

// Largest finite magnitude code: S.(all ones - 1).(all ones) with IEEE specials, S.1111.110 for e4m3.
std::uint32_t max_code(const Fmt& f) {
  return f.ieee_specials ? (std::uint32_t(exp_all_ones(f)) << f.mant_bits) - 1 : sign_bit(f) - 2;
}

// What an overflowing magnitude encodes to: max when saturating, else inf (or NaN for e4m3).
std::uint32_t overflow_code(const Fmt& f, bool saturate) {
  if (f.has_saturate && saturate) return max_code(f);
  return f.ieee_specials ? std::uint32_t(exp_all_ones(f)) << f.mant_bits : sign_bit(f) - 1;
}

// The value of a finite code from the definition, in double.
double formula(const Fmt& f, std::uint32_t code) {
  const double sign = (code & sign_bit(f)) ? -1.0 : 1.0;
  const std::uint32_t mag = code & (sign_bit(f) - 1);
  const int e = int(mag >> f.mant_bits);
  const double frac = double(mag & ((1u << f.mant_bits) - 1)) / std::pow(2.0, f.mant_bits);
  if (e == 0) return sign * std::pow(2.0, 1 - f.bias) * frac;
  return sign * std::pow(2.0, e - f.bias) * (1.0 + frac);
}

bool is_neg_zero(float x) { return x == 0.0f && std::signbit(x); }

// Nearest code to x by search over all finite values (ties to the even code), as the spec defines rounding.
// Past max the candidates continue with one virtual code max_code + 1 = max + ulp; landing on it or beyond
// is overflow.
std::uint32_t nearest_code(const Fmt& f, const std::vector<double>& values, float x, bool saturate) {
  const std::uint32_t sign = std::signbit(x) ? sign_bit(f) : 0;
  const double a = std::fabs(double(x));
  const auto it = std::lower_bound(values.begin(), values.end(), a);
  std::uint32_t code;
  if (it == values.end()) {
    code = std::uint32_t(values.size());  // beyond max + ulp
  } else if (*it == a || it == values.begin()) {
    code = std::uint32_t(it - values.begin());
  } else {
    const auto hi = std::uint32_t(it - values.begin());
    const double mid = (values[hi - 1] + values[hi]) / 2;  // exact in double
    code = a < mid ? hi - 1 : a > mid ? hi : (hi & 1 ? hi - 1 : hi);
  }
  return (code > max_code(f) ? overflow_code(f, saturate) : code) | sign;
}

class FormatTest : public testing::TestWithParam<Fmt> {};

TEST_P(FormatTest, EveryCodeDecodesToTheFormula) {
  const Fmt& f = GetParam();
  for (std::uint32_t c = 0; c < num_codes(f); ++c) {
    const float v = f.decode(c);
    const bool negative = (c & sign_bit(f)) != 0;
    switch (kind(f, c)) {
      case Kind::nan: ASSERT_TRUE(std::isnan(v)) << std::hex << "code 0x" << c; break;
      case Kind::inf: ASSERT_EQ(v, negative ? -kInf : kInf) << std::hex << "code 0x" << c; break;
      case Kind::finite:
        ASSERT_EQ(double(v), formula(f, c)) << std::hex << "code 0x" << c;
        ASSERT_EQ(std::signbit(v), negative) << std::hex << "code 0x" << c;  // -0 included
        break;
    }
  }
}

TEST_P(FormatTest, DecodeThenEncodeIsIdentity) {
  const Fmt& f = GetParam();
  for (bool saturate : {true, false}) {
    for (std::uint32_t c = 0; c < num_codes(f); ++c) {
      const std::uint32_t back = f.encode(f.decode(c), saturate);
      const std::uint32_t sign = c & sign_bit(f);
      switch (kind(f, c)) {
        case Kind::nan:
          ASSERT_EQ(kind(f, back), Kind::nan) << std::hex << "code 0x" << c << " -> 0x" << back;
          ASSERT_EQ(back & sign_bit(f), sign) << std::hex << "NaN sign, code 0x" << c;
          break;
        case Kind::inf:
          ASSERT_EQ(back, overflow_code(f, saturate) | sign)
              << std::hex << "code 0x" << c << " sat " << saturate;
          break;
        case Kind::finite: ASSERT_EQ(back, c) << std::hex << "code 0x" << c << " sat " << saturate; break;
      }
    }
  }
}

TEST_P(FormatTest, MidpointsTieToEvenAndNudgesGoToTheNearerCode) {
  const Fmt& f = GetParam();
  for (std::uint32_t sign : {0u, sign_bit(f)}) {
    for (std::uint32_t lo = 0; lo < max_code(f); ++lo) {  // neighbours lo, lo + 1 (magnitude codes)
      const double mid_exact = (formula(f, lo) + formula(f, lo + 1)) / 2;
      const float mid = float(sign ? -mid_exact : mid_exact);
      ASSERT_EQ(std::fabs(double(mid)), mid_exact) << "midpoint not exact in float, code " << lo;
      const std::uint32_t even = (lo & 1) ? lo + 1 : lo;  // the mantissa's last bit is the code's
      const float toward_lo = std::nextafter(mid, sign ? kInf : -kInf);
      const float toward_hi = std::nextafter(mid, sign ? -kInf : kInf);
      for (bool saturate : {true, false}) {
        ASSERT_EQ(f.encode(mid, saturate), even | sign) << std::hexfloat << mid;
        ASSERT_EQ(f.encode(toward_lo, saturate), lo | sign) << std::hexfloat << toward_lo;
        ASSERT_EQ(f.encode(toward_hi, saturate), (lo + 1) | sign) << std::hexfloat << toward_hi;
      }
    }
  }
}

TEST_P(FormatTest, OverflowInBothModes) {
  const Fmt& f = GetParam();
  const std::uint32_t max = max_code(f);
  const double max_value = formula(f, max);
  const double threshold = max_value + (max_value - formula(f, max - 1)) / 2;  // max + half ulp
  ASSERT_EQ(double(float(threshold)), threshold);
  // The tie at the threshold goes to the even one of max and the (virtual) next code.
  const bool tie_overflows = (max & 1) != 0;  // e4m3: max 1.110 is even -> 448; the others overflow
  for (bool saturate : {true, false}) {
    SCOPED_TRACE(testing::Message() << "saturate " << saturate);
    const std::uint32_t over = overflow_code(f, saturate);
    for (std::uint32_t sign : {0u, sign_bit(f)}) {
      const float s = sign ? -1.0f : 1.0f;
      EXPECT_EQ(f.encode(s * float(max_value), saturate), max | sign);
      EXPECT_EQ(f.encode(std::nextafter(s * float(max_value), s * kInf), saturate), max | sign);
      EXPECT_EQ(f.encode(std::nextafter(s * float(threshold), 0.0f), saturate), max | sign);
      EXPECT_EQ(f.encode(s * float(threshold), saturate), (tie_overflows ? over : max) | sign);
      EXPECT_EQ(f.encode(std::nextafter(s * float(threshold), s * kInf), saturate), over | sign);
      EXPECT_EQ(f.encode(s * float(std::min(2 * max_value, double(FLT_MAX))), saturate), over | sign);
      EXPECT_EQ(f.encode(s * FLT_MAX, saturate), over | sign);
      EXPECT_EQ(f.encode(s * kInf, saturate), over | sign);
      EXPECT_EQ(kind(f, f.encode(s * kNaN, saturate)), Kind::nan);
    }
  }
  if (f.has_saturate) {  // spelled out for the two fp8 formats
    EXPECT_EQ(f.encode(kInf, true), max);
    EXPECT_EQ(kind(f, f.encode(kInf, false)), f.ieee_specials ? Kind::inf : Kind::nan);
  }
}

TEST_P(FormatTest, ZerosAndSubnormals) {
  const Fmt& f = GetParam();
  for (bool saturate : {true, false}) {
    SCOPED_TRACE(testing::Message() << "saturate " << saturate);
    EXPECT_EQ(f.encode(0.0f, saturate), 0u);
    EXPECT_EQ(f.encode(-0.0f, saturate), sign_bit(f));
    const float tiny = float(formula(f, 1));  // smallest subnormal 2^(1 - bias - M)
    EXPECT_EQ(double(tiny), std::pow(2.0, 1 - f.bias - f.mant_bits));
    EXPECT_EQ(f.encode(tiny, saturate), 1u);
    EXPECT_EQ(f.encode(-tiny, saturate), sign_bit(f) | 1);
    EXPECT_EQ(f.encode(tiny / 2, saturate), 0u);  // tie: to the even code, zero
    EXPECT_EQ(f.encode(-tiny / 2, saturate), sign_bit(f));
    EXPECT_EQ(f.encode(std::nextafter(tiny / 2, 1.0f), saturate), 1u);
    EXPECT_EQ(f.encode(std::nextafter(tiny / 2, 0.0f), saturate), 0u);
    EXPECT_EQ(f.encode(tiny * 1.5f, saturate), 2u);  // tie between codes 1 and 2
    EXPECT_EQ(f.encode(std::numeric_limits<float>::denorm_min(), saturate), 0u);
    EXPECT_EQ(f.encode(-std::numeric_limits<float>::denorm_min(), saturate), sign_bit(f));
    const float min_normal = float(std::pow(2.0, 1 - f.bias));
    EXPECT_EQ(f.encode(min_normal, saturate), 1u << f.mant_bits);
  }
  EXPECT_EQ(f.decode(0), 0.0f);
  EXPECT_FALSE(std::signbit(f.decode(0)));
  EXPECT_TRUE(is_neg_zero(f.decode(sign_bit(f))));
}

TEST_P(FormatTest, SampledFloatsRoundToTheNearestCode) {
  const Fmt& f = GetParam();
  std::vector<double> values;  // positive finite values by code, then the virtual max + ulp
  for (std::uint32_t c = 0; c <= max_code(f); ++c) values.push_back(formula(f, c));
  values.push_back(2 * values.back() - values[values.size() - 2]);
  ASSERT_TRUE(std::is_sorted(values.begin(), values.end()));
  ASSERT_EQ(std::adjacent_find(values.begin(), values.end()), values.end());  // strictly increasing
  for (bool saturate : {true, false}) {
    for (std::uint64_t b = 0; b < (std::uint64_t(1) << 32); b += 4093) {
      const float x = std::bit_cast<float>(std::uint32_t(b));
      const std::uint32_t got = f.encode(x, saturate);
      if (std::isnan(x)) {
        ASSERT_EQ(kind(f, got), Kind::nan) << std::hex << "float bits 0x" << b;
      } else {
        ASSERT_EQ(got, nearest_code(f, values, x, saturate))
            << std::hexfloat << x << " sat " << saturate << std::hex << " float bits 0x" << b;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Formats, FormatTest, testing::ValuesIn(kFormats),
                         [](const testing::TestParamInfo<Fmt>& p) { return std::string(p.param.name); });

TEST(DTypeTest, Fp8SpecCodes) {  // OCP OFP8 table values, written out
  EXPECT_EQ(e4m3_to_float(0x7E), 448.0f);
  EXPECT_EQ(e4m3_to_float(0x01), 0x1p-9f);
  EXPECT_EQ(e4m3_to_float(0x08), 0x1p-6f);
  EXPECT_EQ(e4m3_to_float(0x78), 256.0f);  // exponent 1111 is a normal binade in e4m3
  EXPECT_TRUE(std::isnan(e4m3_to_float(0x7F)));
  EXPECT_TRUE(std::isnan(e4m3_to_float(0xFF)));
  EXPECT_EQ(e5m2_to_float(0x7B), 57344.0f);
  EXPECT_EQ(e5m2_to_float(0x01), 0x1p-16f);
  EXPECT_EQ(e5m2_to_float(0x04), 0x1p-14f);
  EXPECT_EQ(e5m2_to_float(0x7C), kInf);
  EXPECT_EQ(e5m2_to_float(0xFC), -kInf);
  for (std::uint8_t c : {0x7D, 0x7E, 0x7F, 0xFD, 0xFE, 0xFF}) EXPECT_TRUE(std::isnan(e5m2_to_float(c)));
  EXPECT_EQ(float_to_e4m3(464.0f), 0x7E);  // tie with the non-existent 480: even 448
  EXPECT_EQ(float_to_e4m3(465.0f, false), 0x7F);
  EXPECT_EQ(float_to_e5m2(61440.0f), 0x7B);
  EXPECT_EQ(float_to_e5m2(61440.0f, false), 0x7C);
  EXPECT_EQ(float_to_e5m2(-kInf, false), 0xFC);
  EXPECT_EQ(float_to_e4m3(-kInf), 0xFE);
  EXPECT_EQ(float_to_bf16(1.0f + 0x1p-8f), 0x3F80);      // tie -> even
  EXPECT_EQ(float_to_bf16(1.0f + 0x3p-8f), 0x3F82);      // tie -> even (up)
  EXPECT_EQ(float_to_f16(65520.0f), 0x7C00);             // f16 max + half ulp -> inf
  EXPECT_EQ(float_to_f16(std::nextafter(65520.0f, 0.0f)), 0x7BFF);
}

TEST(DTypeTest, NaNsStayQuietNaNs) {
  const float signalling = std::bit_cast<float>(0x7F800001u);  // payload only in bits bf16 drops
  EXPECT_EQ(float_to_bf16(signalling) & 0x7F80, 0x7F80);
  EXPECT_NE(float_to_bf16(signalling) & 0x7F, 0);
  EXPECT_TRUE(std::isnan(bf16_to_float(float_to_bf16(signalling))));
  EXPECT_TRUE(std::isnan(f16_to_float(float_to_f16(signalling))));
  EXPECT_TRUE(std::isnan(f16_to_float(float_to_f16(-kNaN))));
  EXPECT_EQ(float_to_e4m3(kNaN) & 0x7F, 0x7F);
  EXPECT_GT(float_to_e5m2(kNaN) & 0x7F, 0x7C);
}

TEST(DTypeTest, NamesParseAndRoundTrip) {
  const DType all[] = {DType::f64, DType::f32, DType::tf32, DType::f16,
                       DType::bf16, DType::e4m3, DType::e5m2, DType::i32};
  const char* names[] = {"f64", "f32", "tf32", "f16", "bf16", "e4m3", "e5m2", "i32"};
  for (std::size_t i = 0; i < std::size(all); ++i) {
    EXPECT_EQ(dtype_name(all[i]), names[i]);
    EXPECT_EQ(parse_dtype(names[i]), all[i]);
  }
  const std::pair<const char*, DType> aliases[] = {
      {"fp64", DType::f64},     {"double", DType::f64},     {"fp32", DType::f32},
      {"float", DType::f32},    {"float32", DType::f32},    {"fp16", DType::f16},
      {"half", DType::f16},     {"float16", DType::f16},    {"bfloat16", DType::bf16},
      {"fp8e4m3", DType::e4m3}, {"fp8e5m2", DType::e5m2},   {"float8_e4m3fn", DType::e4m3},
      {"int32", DType::i32},    {"BF16", DType::bf16},      {"FP8E4M3", DType::e4m3},
  };
  for (const auto& [alias, type] : aliases) EXPECT_EQ(parse_dtype(alias), type) << alias;
  for (const char* bad : {"", "fp8", "bf17", "f16 ", " f16", "float8", "e4m3x", "int64", "f"})
    EXPECT_EQ(parse_dtype(bad), std::nullopt) << "'" << bad << "'";
}

TEST(DTypeTest, SizesEpsMaxAndFp8) {
  EXPECT_EQ(dtype_size(DType::f64), 8u);
  EXPECT_EQ(dtype_size(DType::f32), 4u);
  EXPECT_EQ(dtype_size(DType::tf32), 4u);
  EXPECT_EQ(dtype_size(DType::f16), 2u);
  EXPECT_EQ(dtype_size(DType::bf16), 2u);
  EXPECT_EQ(dtype_size(DType::e4m3), 1u);
  EXPECT_EQ(dtype_size(DType::e5m2), 1u);
  EXPECT_EQ(dtype_size(DType::i32), 4u);

  EXPECT_EQ(dtype_eps(DType::f64), std::ldexp(1.0, -53));
  EXPECT_EQ(dtype_eps(DType::f32), std::ldexp(1.0, -24));
  EXPECT_EQ(dtype_eps(DType::tf32), std::ldexp(1.0, -11));
  EXPECT_EQ(dtype_eps(DType::f16), std::ldexp(1.0, -11));
  EXPECT_EQ(dtype_eps(DType::bf16), std::ldexp(1.0, -8));
  EXPECT_EQ(dtype_eps(DType::e4m3), std::ldexp(1.0, -4));
  EXPECT_EQ(dtype_eps(DType::e5m2), std::ldexp(1.0, -3));
  EXPECT_EQ(dtype_eps(DType::f64), std::numeric_limits<double>::epsilon() / 2);
  EXPECT_EQ(dtype_eps(DType::f32), double(std::numeric_limits<float>::epsilon()) / 2);

  EXPECT_EQ(dtype_max(DType::f64), DBL_MAX);
  EXPECT_EQ(dtype_max(DType::f32), double(FLT_MAX));
  EXPECT_EQ(dtype_max(DType::tf32), (2.0 - std::ldexp(1.0, -10)) * std::ldexp(1.0, 127));
  EXPECT_EQ(dtype_max(DType::f16), double(f16_to_float(0x7BFF)));
  EXPECT_EQ(dtype_max(DType::bf16), double(bf16_to_float(0x7F7F)));
  EXPECT_EQ(dtype_max(DType::e4m3), 448.0);
  EXPECT_EQ(dtype_max(DType::e5m2), 57344.0);
  EXPECT_EQ(dtype_max(DType::i32), 2147483647.0);

  EXPECT_TRUE(is_fp8(DType::e4m3));
  EXPECT_TRUE(is_fp8(DType::e5m2));
  for (DType t : {DType::f64, DType::f32, DType::tf32, DType::f16, DType::bf16, DType::i32})
    EXPECT_FALSE(is_fp8(t)) << dtype_name(t);
}

// Stores `value` at index 1 of a 3-element buffer, checks the neighbours are untouched, loads it back.
double store_load(DType t, double value) {
  std::vector<unsigned char> buf(3 * dtype_size(t), 0xA5);
  store_from_double(t, buf.data(), 1, value);
  for (std::size_t i = 0; i < dtype_size(t); ++i) {
    EXPECT_EQ(buf[i], 0xA5) << dtype_name(t);
    EXPECT_EQ(buf[2 * dtype_size(t) + i], 0xA5) << dtype_name(t);
  }
  return load_as_double(t, buf.data(), 1);
}

TEST(DTypeTest, StoreThenLoadRoundsPerType) {
  const double third = 1.0 / 3.0;
  EXPECT_EQ(store_load(DType::f64, third), third);
  EXPECT_EQ(store_load(DType::f64, 1.0 + 0x1p-52), 1.0 + 0x1p-52);
  EXPECT_EQ(store_load(DType::f32, third), double(float(third)));
  EXPECT_EQ(store_load(DType::bf16, third), double(bf16_to_float(float_to_bf16(float(third)))));
  EXPECT_EQ(store_load(DType::f16, third), double(f16_to_float(float_to_f16(float(third)))));
  EXPECT_EQ(store_load(DType::e4m3, 500.0), 448.0);  // saturating by default
  EXPECT_EQ(store_load(DType::e5m2, -1e6), -57344.0);
  EXPECT_EQ(store_load(DType::e4m3, 0.3), 0.3125);
  EXPECT_EQ(store_load(DType::e5m2, 0.3), 0.3125);
  EXPECT_TRUE(std::isnan(store_load(DType::e4m3, double(kNaN))));
  EXPECT_TRUE(is_neg_zero(float(store_load(DType::bf16, -0.0))));
  EXPECT_TRUE(is_neg_zero(float(store_load(DType::e4m3, -0.0))));
  // double -> float -> f16 rounds twice: 1 + 2^-11 + 2^-40 becomes the float tie 1 + 2^-11, then 1.0.
  EXPECT_EQ(store_load(DType::f16, 1.0 + 0x1p-11 + 0x1p-40), 1.0);

  // tf32: 10 mantissa bits, RNE, stored as a float with the low 13 bits zero.
  EXPECT_EQ(store_load(DType::tf32, 1.0 + 0x1p-11), 1.0);                 // tie -> even
  EXPECT_EQ(store_load(DType::tf32, 1.0 + 0x3p-11), 1.0 + 0x1p-9);        // tie -> even (up)
  EXPECT_EQ(store_load(DType::tf32, 1.0 + 0x1p-11 + 0x1p-20), 1.0 + 0x1p-10);
  EXPECT_EQ(store_load(DType::tf32, dtype_max(DType::tf32)), dtype_max(DType::tf32));
  EXPECT_EQ(store_load(DType::tf32, double(FLT_MAX)), double(kInf));  // rounds past tf32 max
  EXPECT_TRUE(std::isnan(store_load(DType::tf32, double(kNaN))));
  for (double v : {third, -third, 1e-30, 12345.678}) {
    float stored;
    store_from_double(DType::tf32, &stored, 0, v);
    EXPECT_EQ(std::bit_cast<std::uint32_t>(stored) & 0x1FFFu, 0u) << v;
    EXPECT_LE(std::fabs(double(stored) - v), 1.01 * std::fabs(v) * dtype_eps(DType::tf32)) << v;
  }

  // i32: nearest (ties to even), clamped, NaN -> 0.
  EXPECT_EQ(store_load(DType::i32, 2.4), 2.0);
  EXPECT_EQ(store_load(DType::i32, 2.5), 2.0);
  EXPECT_EQ(store_load(DType::i32, 3.5), 4.0);
  EXPECT_EQ(store_load(DType::i32, -2.6), -3.0);
  EXPECT_EQ(store_load(DType::i32, 1e12), 2147483647.0);
  EXPECT_EQ(store_load(DType::i32, -1e12), -2147483648.0);
  EXPECT_EQ(store_load(DType::i32, double(kInf)), 2147483647.0);
  EXPECT_EQ(store_load(DType::i32, double(kNaN)), 0.0);
}

}  // namespace
}  // namespace tb
