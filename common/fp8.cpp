// FP8 e4m3 on the host: the format, per-block scaling, the Hadamard rotation, naive FP8 attention.
#include "fp8.h"

#include <Eigen/Dense>
#include <cmath>
#include <limits>
#include <string>

#include "check.h"
#include "random.h"

namespace fa {

namespace {

using MatF = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

constexpr float kMinNormal = 0.015625f;         // 2^-6: E = 1, m = 0
constexpr float kSubnormalStep = 0.001953125f;  // 2^-9: the spacing below 2^-6

}  // namespace

// ---- the format --------------------------------------------------------------------------------
uint8_t float_to_e4m3(float x) {
  const uint8_t sign = std::signbit(x) ? 0x80 : 0x00;
  if (std::isnan(x)) return sign | kE4M3NaN;
  const float a = std::fabs(x);
  // Saturation (.satfinite): everything from 448 up, infinity included, is 448. Below 448 the
  // rounding can reach 448 but never pass it: 448 is the top of the grid's last binade.
  if (a >= kE4M3Max) return sign | kE4M3MaxCode;
  // The grid step around a: 2^(e-3) in the binade [2^e, 2^(e+1)) of the normal numbers, 2^-9 for
  // the subnormals (and zero). a / step is exact (a power-of-two division of a float that stays
  // in range), so nearbyint (the default mode: to nearest, ties to even) rounds exactly once.
  float step = kSubnormalStep;
  if (a >= kMinNormal) {
    int e = 0;
    std::frexp(a, &e);  // a = f * 2^e, f in [0.5, 1): the binade is [2^(e-1), 2^e)
    step = std::ldexp(1.0f, e - 1 - 3);
  }
  const float r = std::nearbyint(a / step) * step;  // the rounded magnitude, on the grid
  // Encode the rounded value. A carry into the next binade (r = 2^(e)) is handled here for free.
  if (r < kMinNormal) return sign | static_cast<uint8_t>(r / kSubnormalStep);  // E = 0, m = 0..7
  int e = 0;
  const float f = std::frexp(r, &e);  // r = f * 2^e = (2f) * 2^(e-1), 2f in [1, 2)
  const int E = e - 1 + 7;
  const int m = static_cast<int>((2.0f * f - 1.0f) * 8.0f);  // exact: r is on the grid
  return sign | static_cast<uint8_t>((E << 3) | m);
}

float e4m3_to_float(uint8_t c) {
  const int E = (c >> 3) & 0xF, m = c & 0x7;
  const float sign = (c & 0x80) ? -1.0f : 1.0f;
  if (E == 0xF && m == 0x7) return std::numeric_limits<float>::quiet_NaN();
  if (E == 0) return sign * static_cast<float>(m) * kSubnormalStep;
  return sign * std::ldexp(1.0f + static_cast<float>(m) / 8.0f, E - 7);
}

// ---- per-block scaling -------------------------------------------------------------------------
float Fp8Blocks::value(int64_t r, int64_t c) const {
  return e4m3_to_float(codes[static_cast<size_t>(r * d + c)]) * scale_of_row(r);
}

std::vector<float> Fp8Blocks::dequantize() const {
  std::vector<float> out(codes.size());
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < d; ++c) out[static_cast<size_t>(r * d + c)] = value(r, c);
  return out;
}

Fp8Blocks quantize_e4m3_blocks(const float* x, int64_t rows, int64_t d, int64_t block_rows) {
  FA_REQUIRE(block_rows >= 1 && rows >= 0 && d >= 1, "block_rows >= 1, rows >= 0, d >= 1");
  Fp8Blocks b;
  b.rows = rows;
  b.d = d;
  b.block_rows = block_rows;
  b.codes.resize(static_cast<size_t>(rows * d));
  b.scales.resize(static_cast<size_t>(ceil_div(rows, block_rows)));
  for (int64_t blk = 0; blk < b.num_blocks(); ++blk) {
    const int64_t r0 = blk * block_rows, r1 = std::min(rows, r0 + block_rows);
    float amax = 0.0f;
    for (int64_t i = r0 * d; i < r1 * d; ++i) {
      if (!std::isfinite(x[i]))
        throw_error("quantize_e4m3_blocks: non-finite input at element " + std::to_string(i),
                    __FILE__, __LINE__);
      amax = std::max(amax, std::fabs(x[i]));
    }
    // amax / 448 maps the block's largest |x| to 448 (x / scale may land a rounding above 448:
    // saturation brings it back). An all-zero block keeps scale 1: its codes are 0 either way.
    const float scale = amax > 0.0f ? amax / kE4M3Max : 1.0f;
    b.scales[static_cast<size_t>(blk)] = scale;
    for (int64_t i = r0 * d; i < r1 * d; ++i)
      b.codes[static_cast<size_t>(i)] = float_to_e4m3(x[i] / scale);
  }
  return b;
}

// ---- the random Hadamard rotation --------------------------------------------------------------
HadamardRotation random_hadamard(int64_t d, uint64_t seed) {
  if (d < 1 || (d & (d - 1)) != 0)
    throw UsageError("the Hadamard rotation needs a power-of-two head dim, got " +
                     std::to_string(d));
  HadamardRotation r;
  r.d = d;
  r.signs.resize(static_cast<size_t>(d));
  for (int64_t i = 0; i < d; ++i)
    r.signs[static_cast<size_t>(i)] =
        (derive_seed(seed, static_cast<uint64_t>(i)) >> 63) ? -1.0f : 1.0f;
  return r;
}

std::vector<double> rotation_matrix(const HadamardRotation& r) {
  // Sylvester: H_1 = [1], H_2n = [[H_n, H_n], [H_n, -H_n]], so H[i][j] = (-1)^popcount(i & j).
  const int64_t d = r.d;
  const double inv_sqrt_d = 1.0 / std::sqrt(static_cast<double>(d));
  std::vector<double> R(static_cast<size_t>(d * d));
  for (int64_t i = 0; i < d; ++i)
    for (int64_t j = 0; j < d; ++j) {
      const double h =
          (__builtin_popcountll(static_cast<unsigned long long>(i & j)) & 1) ? -1.0 : 1.0;
      R[static_cast<size_t>(i * d + j)] = r.signs[static_cast<size_t>(i)] * h * inv_sqrt_d;
    }
  return R;
}

std::vector<float> rotate_rows(const float* x, int64_t rows, const HadamardRotation& r) {
  const int64_t d = r.d;
  const double inv_sqrt_d = 1.0 / std::sqrt(static_cast<double>(d));
  std::vector<float> out(static_cast<size_t>(rows * d));
  std::vector<double> y(static_cast<size_t>(d));
  for (int64_t row = 0; row < rows; ++row) {
    for (int64_t c = 0; c < d; ++c)
      y[static_cast<size_t>(c)] = double(x[row * d + c]) * r.signs[static_cast<size_t>(c)];
    // y H by butterflies: H is symmetric, and each stage pairs indices that differ in one bit.
    for (int64_t len = 1; len < d; len <<= 1)
      for (int64_t i = 0; i < d; i += 2 * len)
        for (int64_t j = i; j < i + len; ++j) {
          const double a = y[static_cast<size_t>(j)], b = y[static_cast<size_t>(j + len)];
          y[static_cast<size_t>(j)] = a + b;
          y[static_cast<size_t>(j + len)] = a - b;
        }
    for (int64_t c = 0; c < d; ++c)
      out[static_cast<size_t>(row * d + c)] =
          static_cast<float>(y[static_cast<size_t>(c)] * inv_sqrt_d);
  }
  return out;
}

// ---- naive FP8 attention -----------------------------------------------------------------------
Fp8Head quantize_head(const HeadView& h, int64_t block_rows_q, int64_t block_rows_kv, bool rotate,
                      uint64_t rotation_seed) {
  Fp8Head f;
  f.causal = h.causal;
  f.scale = h.scale;
  f.window_left = h.window_left;
  f.window_right = h.window_right;
  f.rotated = rotate;
  f.rotation_seed = rotation_seed;
  if (rotate) {
    const HadamardRotation r = random_hadamard(h.d, rotation_seed);
    const std::vector<float> qr = rotate_rows(h.q, h.seq_q, r), kr = rotate_rows(h.k, h.seq_k, r);
    f.q = quantize_e4m3_blocks(qr.data(), h.seq_q, h.d, block_rows_q);
    f.k = quantize_e4m3_blocks(kr.data(), h.seq_k, h.d, block_rows_kv);
  } else {
    f.q = quantize_e4m3_blocks(h.q, h.seq_q, h.d, block_rows_q);
    f.k = quantize_e4m3_blocks(h.k, h.seq_k, h.d, block_rows_kv);
  }
  f.v = quantize_e4m3_blocks(h.v, h.seq_k, h.d, block_rows_kv);
  return f;
}

Fp8Dequantized fp8_dequantized_view(const Fp8Head& h) {
  Fp8Dequantized out;
  out.q = h.q.dequantize();
  out.k = h.k.dequantize();
  out.v = h.v.dequantize();
  HeadView& v = out.view;
  v.q = out.q.data();
  v.k = out.k.data();
  v.v = out.v.data();
  v.seq_q = h.seq_q();
  v.seq_k = h.seq_k();
  v.d = h.d();
  v.causal = h.causal;
  v.scale = h.scale;
  v.window_left = h.window_left;
  v.window_right = h.window_right;
  return out;
}

void attention_forward_fp8_naive_head(const Fp8Head& h, float* O, float* L) {
  const int64_t nq = h.seq_q(), nk_all = h.seq_k(), d = h.d();
  FA_REQUIRE(h.k.d == d && h.v.d == d && h.v.rows == nk_all, "Q, K, V shapes disagree");
  // The e4m3 values without their scales (what the tensor cores multiply), and V with its scale
  // applied per key (a kernel folds scale_V into the rescaling of its accumulator, tile by tile).
  MatF Qc(nq, d), Kc(nk_all, d), V(nk_all, d);
  for (int64_t i = 0; i < nq; ++i)
    for (int64_t c = 0; c < d; ++c)
      Qc(i, c) = e4m3_to_float(h.q.codes[static_cast<size_t>(i * d + c)]);
  for (int64_t j = 0; j < nk_all; ++j)
    for (int64_t c = 0; c < d; ++c) {
      Kc(j, c) = e4m3_to_float(h.k.codes[static_cast<size_t>(j * d + c)]);
      V(j, c) = h.v.value(j, c);
    }
  Eigen::RowVectorXf k_scale(nk_all);
  for (int64_t j = 0; j < nk_all; ++j) k_scale(j) = h.k.scale_of_row(j);
  const float softmax_scale = static_cast<float>(h.scale);
  for (int64_t i = 0; i < nq; ++i) {
    const KeyRange kr = visible_key_range(i, nq, nk_all, h.causal, h.window_left, h.window_right);
    const int64_t nk = kr.count();
    Eigen::Map<Eigen::RowVectorXf> o(O + i * d, d);
    if (nk == 0) {
      o.setZero();
      L[i] = -std::numeric_limits<float>::infinity();
      continue;
    }
    // Products of two e4m3 values are exact in fp32; the sum over d is fp32, as in the MMA.
    Eigen::RowVectorXf s = Qc.row(i) * Kc.middleRows(kr.first, nk).transpose();
    const float q_factor = h.q.scale_of_row(i) * softmax_scale;
    s = s.cwiseProduct(k_scale.segment(kr.first, nk) * q_factor);
    const float m = s.maxCoeff();
    Eigen::RowVectorXf e = (s.array() - m).exp().matrix();
    const float l = e.sum();  // from the fp32 P~, before it is rounded
    Eigen::RowVectorXf p = e.unaryExpr([](float x) { return round_to_e4m3(x * kFp8PScale); });
    o = (p * V.middleRows(kr.first, nk)) / (kFp8PScale * l);
    L[i] = m + std::log(l);
  }
}

// ---- the device layout of V --------------------------------------------------------------------
void fp8_transpose_v(const uint8_t* v, int64_t seq_k, int64_t d, uint8_t* vt, bool p_order) {
  FA_REQUIRE(seq_k >= 0 && d >= 1, "fp8_transpose_v: seq_k >= 0, d >= 1");
  const int64_t stride = fp8_vt_stride(seq_k);
  static_assert(kFp8VtAlignBytes % kFp8VtGroup == 0, "a group of 16 keys never spans two rows");
  for (int64_t c = 0; c < d; ++c) {
    uint8_t* row = vt + c * stride;
    for (int64_t slot = 0; slot < stride; ++slot) {
      const int64_t group = slot / kFp8VtGroup * kFp8VtGroup;
      const int64_t j = p_order ? group + fp8_vt_key_at(int(slot - group)) : slot;
      row[slot] = j < seq_k ? v[j * d + c] : 0;
    }
  }
}

double fp8_accumulator_bound(const HeadView& h) {
  std::vector<double> max_k(size_t(h.d), 0.0);  // max_j |K_jd|
  for (int64_t j = 0; j < h.seq_k; ++j)
    for (int64_t d = 0; d < h.d; ++d)
      max_k[size_t(d)] = std::max(max_k[size_t(d)], double(std::fabs(h.k[j * h.d + d])));
  double best = 0.0;
  for (int64_t i = 0; i < h.seq_q; ++i) {
    double row = 0.0;
    for (int64_t d = 0; d < h.d; ++d) row += std::fabs(h.q[i * h.d + d]) * max_k[size_t(d)];
    best = std::max(best, row);
  }
  return std::fabs(h.scale) * best;
}

}  // namespace fa
