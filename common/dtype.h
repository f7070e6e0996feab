// dtype.h: the element types the kernels take, and exact host-side conversions.
//
// Inputs are drawn in float, then rounded to the kernel's dtype on the host. The float64
// reference is computed from those rounded values, so the comparison measures the kernel's
// arithmetic and nothing else.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace fa {

enum class DType { F32, F16, BF16 };

const char* dtype_name(DType t);          // "fp32", "fp16", "bf16"
DType parse_dtype(const std::string& s);  // throws fa::Error on an unknown name
size_t dtype_size(DType t);

// IEEE half and bfloat16 bit patterns, round-to-nearest-even, NaN and Inf preserved.
uint16_t float_to_half_bits(float f);
float half_bits_to_float(uint16_t h);
uint16_t float_to_bf16_bits(float f);
float bf16_bits_to_float(uint16_t b);

// The value `f` becomes once stored as `t` (identity for fp32).
float round_to(DType t, float f);
void round_in_place(DType t, std::vector<float>& v);

// Host float values <-> packed bytes of dtype `t`.
std::vector<uint8_t> encode(DType t, const std::vector<float>& values);
std::vector<float> decode(DType t, const void* bytes, size_t count);

}  // namespace fa
