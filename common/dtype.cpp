#include "dtype.h"

#include <cmath>
#include <cstring>

#include "check.h"

namespace fa {

const char* dtype_name(DType t) {
  switch (t) {
    case DType::F32:
      return "fp32";
    case DType::F16:
      return "fp16";
    case DType::BF16:
      return "bf16";
  }
  return "?";
}

DType parse_dtype(const std::string& s) {
  if (s == "fp32" || s == "float32" || s == "f32") return DType::F32;
  if (s == "fp16" || s == "float16" || s == "f16" || s == "half") return DType::F16;
  if (s == "bf16" || s == "bfloat16") return DType::BF16;
  FA_REQUIRE(false, "unknown dtype '" + s + "' (expected fp32, fp16 or bf16)");
  return DType::F32;
}

size_t dtype_size(DType t) {
  return t == DType::F32 ? 4 : 2;
}

static uint32_t bits_of(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
static float float_of(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

uint16_t float_to_bf16_bits(float f) {
  uint32_t u = bits_of(f);
  if (std::isnan(f)) return 0x7FC0;
  // Round to nearest even on the 16 bits we drop.
  uint32_t lsb = (u >> 16) & 1u;
  u += 0x7FFFu + lsb;
  return static_cast<uint16_t>(u >> 16);
}

float bf16_bits_to_float(uint16_t b) {
  return float_of(static_cast<uint32_t>(b) << 16);
}

uint16_t float_to_half_bits(float f) {
  uint32_t u = bits_of(f);
  uint32_t sign = (u >> 16) & 0x8000u;
  uint32_t absu = u & 0x7FFFFFFFu;
  if (absu > 0x7F800000u) return static_cast<uint16_t>(sign | 0x7E00u);  // NaN
  if (absu >= 0x477FF000u) {  // rounds to >= 65520: overflow to Inf
    return static_cast<uint16_t>(sign | 0x7C00u);
  }
  if (absu < 0x38800000u) {  // below the smallest normal half (2^-14): subnormal or zero
    // Value = absf; scale so that one half-subnormal step (2^-24) becomes 1.
    float absf = float_of(absu);
    float scaled = absf * 16777216.0f;  // 2^24
    // Round half to even explicitly.
    float r = std::nearbyint(scaled);
    return static_cast<uint16_t>(sign | static_cast<uint32_t>(r));
  }
  // Normal: rebias the exponent (127 -> 15) and round the 13 dropped mantissa bits to even.
  uint32_t mant_lsb = (absu >> 13) & 1u;
  uint32_t rounded = absu + 0xFFFu + mant_lsb;
  uint32_t h = (rounded >> 13) - ((127u - 15u) << 10);
  return static_cast<uint16_t>(sign | h);
}

float half_bits_to_float(uint16_t h) {
  uint32_t sign = (static_cast<uint32_t>(h) & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1Fu;
  uint32_t mant = h & 0x3FFu;
  if (exp == 0) {  // zero or subnormal: mant * 2^-24
    float v = static_cast<float>(mant) * (1.0f / 16777216.0f);
    return sign ? -v : v;
  }
  if (exp == 31) return float_of(sign | 0x7F800000u | (mant << 13));  // Inf / NaN
  return float_of(sign | ((exp + 112u) << 23) | (mant << 13));
}

float round_to(DType t, float f) {
  switch (t) {
    case DType::F32:
      return f;
    case DType::F16:
      return half_bits_to_float(float_to_half_bits(f));
    case DType::BF16:
      return bf16_bits_to_float(float_to_bf16_bits(f));
  }
  return f;
}

void round_in_place(DType t, std::vector<float>& v) {
  if (t == DType::F32) return;
  for (float& x : v) x = round_to(t, x);
}

std::vector<uint8_t> encode(DType t, const std::vector<float>& values) {
  std::vector<uint8_t> out(values.size() * dtype_size(t));
  if (t == DType::F32) {
    std::memcpy(out.data(), values.data(), out.size());
    return out;
  }
  auto* p = reinterpret_cast<uint16_t*>(out.data());
  for (size_t i = 0; i < values.size(); ++i)
    p[i] = t == DType::F16 ? float_to_half_bits(values[i]) : float_to_bf16_bits(values[i]);
  return out;
}

std::vector<float> decode(DType t, const void* bytes, size_t count) {
  std::vector<float> out(count);
  if (t == DType::F32) {
    std::memcpy(out.data(), bytes, count * 4);
    return out;
  }
  const auto* p = static_cast<const uint16_t*>(bytes);
  for (size_t i = 0; i < count; ++i)
    out[i] = t == DType::F16 ? half_bits_to_float(p[i]) : bf16_bits_to_float(p[i]);
  return out;
}

}  // namespace fa
