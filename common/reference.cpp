// The float64 references, written with Eigen so they read like the math.
#include "reference.h"

#include <Eigen/Dense>
#include <cmath>
#include <limits>

#include "check.h"

namespace fa {

namespace {

using MatD = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using MatF = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using ConstMapF = Eigen::Map<const MatF>;
constexpr double kNegInf = -std::numeric_limits<double>::infinity();

MatD to_double(const float* p, int64_t rows, int64_t cols) {
  return ConstMapF(p, rows, cols).cast<double>();
}

// The keys query row i may see: all of them, keys 0..i+seq_k-seq_q (causal), or a band (window).
KeyRange visible_keys(const HeadView& h, int64_t i) {
  return visible_key_range(i, h.seq_q, h.seq_k, h.causal, h.window_left, h.window_right);
}

std::vector<int64_t> all_rows_if_empty(const std::vector<int64_t>& rows, int64_t n) {
  if (!rows.empty()) return rows;
  std::vector<int64_t> r(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) r[i] = i;
  return r;
}

// P = softmax(scale * Q K^T) with masking, in float64; also returns L per row.
MatD probabilities(const HeadView& h, const MatD& Q, const MatD& K, std::vector<double>* L) {
  MatD S = (Q * K.transpose()) * h.scale;
  MatD P = MatD::Zero(S.rows(), S.cols());
  if (L) L->assign(S.rows(), kNegInf);
  for (int64_t i = 0; i < S.rows(); ++i) {
    const KeyRange kr = visible_keys(h, i);
    const int64_t n = kr.count();
    if (n == 0) continue;  // no visible key: P row stays 0, L stays -inf
    double m = S.row(i).segment(kr.first, n).maxCoeff();
    Eigen::RowVectorXd e = (S.row(i).segment(kr.first, n).array() - m).exp().matrix();
    double l = e.sum();
    P.row(i).segment(kr.first, n) = e / l;
    if (L) (*L)[i] = m + std::log(l);
  }
  return P;
}

MatF round_mat(DType t, const MatF& m) {
  return m.unaryExpr([t](float x) { return round_to(t, x); });
}

}  // namespace

// ---------------------------------------------------------------------------------------------
std::vector<double> softmax_rows_ref(const float* x, SoftmaxShape s) {
  std::vector<double> y(static_cast<size_t>(s.numel()));
  for (int64_t r = 0; r < s.rows; ++r) {
    Eigen::Map<const Eigen::RowVectorXf> row(x + r * s.cols, s.cols);
    Eigen::Map<Eigen::RowVectorXd> out(y.data() + r * s.cols, s.cols);
    double m = row.cast<double>().maxCoeff();
    if (m == kNegInf) {  // an all -inf row: defined as all zeros
      out.setZero();
      continue;
    }
    Eigen::RowVectorXd e = (row.cast<double>().array() - m).exp().matrix();
    out = e / e.sum();
  }
  return y;
}

std::vector<double> gemm_ref(const float* A, const float* B, GemmShape s) {
  MatD C = to_double(A, s.M, s.K) * to_double(B, s.K, s.N);
  return std::vector<double>(C.data(), C.data() + C.size());
}

std::vector<float> gemm_naive_fp32(const float* A, const float* B, GemmShape s) {
  std::vector<float> C(static_cast<size_t>(s.M * s.N), 0.0f);
  for (int64_t i = 0; i < s.M; ++i)
    for (int64_t k = 0; k < s.K; ++k) {
      float a = A[i * s.K + k];
      for (int64_t j = 0; j < s.N; ++j) C[i * s.N + j] += a * B[k * s.N + j];
    }
  return C;
}

// ---------------------------------------------------------------------------------------------
HeadView head_view(const AttentionShape& s, const float* q, const float* k, const float* v,
                   int64_t bh) {
  HeadView h;
  h.q = q + bh * s.seq_q * s.head_dim;
  // Grouped-query attention: query head bh reads the K/V head of its group (shapes.h).
  const int64_t kv = s.kv_index(bh);
  h.k = k + kv * s.seq_k * s.head_dim;
  h.v = v + kv * s.seq_k * s.head_dim;
  h.seq_q = s.seq_q;
  h.seq_k = s.seq_k;
  h.d = s.head_dim;
  h.causal = s.causal;
  h.scale = s.softmax_scale();
  h.window_left = s.window_left;
  h.window_right = s.window_right;
  return h;
}

void attention_forward_ref_head(const HeadView& h, const std::vector<int64_t>& rows_in, double* O,
                                double* L) {
  std::vector<int64_t> rows = all_rows_if_empty(rows_in, h.seq_q);
  const int64_t n = static_cast<int64_t>(rows.size());
  MatD K = to_double(h.k, h.seq_k, h.d), V = to_double(h.v, h.seq_k, h.d);
  // Work through the rows in blocks so S never needs more than kBlock x seq_k doubles.
  const int64_t kBlock = 256;
  for (int64_t b0 = 0; b0 < n; b0 += kBlock) {
    int64_t nb = std::min(kBlock, n - b0);
    MatD Q(nb, h.d);
    for (int64_t r = 0; r < nb; ++r)
      Q.row(r) = ConstMapF(h.q + rows[b0 + r] * h.d, 1, h.d).cast<double>();
    MatD S = (Q * K.transpose()) * h.scale;
    for (int64_t r = 0; r < nb; ++r) {
      const KeyRange kr = visible_keys(h, rows[b0 + r]);
      const int64_t nk = kr.count();
      Eigen::Map<Eigen::RowVectorXd> o(O + (b0 + r) * h.d, h.d);
      if (nk == 0) {
        o.setZero();
        L[b0 + r] = kNegInf;
        continue;
      }
      double m = S.row(r).segment(kr.first, nk).maxCoeff();
      Eigen::RowVectorXd e = (S.row(r).segment(kr.first, nk).array() - m).exp().matrix();
      double l = e.sum();
      o = (e * V.middleRows(kr.first, nk)) / l;
      L[b0 + r] = m + std::log(l);
    }
  }
}

void attention_forward_lowp_head(const HeadView& h, DType t, const std::vector<int64_t>& rows_in,
                                 float* O, float* L) {
  std::vector<int64_t> rows = all_rows_if_empty(rows_in, h.seq_q);
  MatF K = ConstMapF(h.k, h.seq_k, h.d), V = ConstMapF(h.v, h.seq_k, h.d);
  for (size_t r = 0; r < rows.size(); ++r) {
    const KeyRange kr = visible_keys(h, rows[r]);
    const int64_t nk = kr.count();
    Eigen::Map<Eigen::RowVectorXf> o(O + r * h.d, h.d);
    if (nk == 0) {
      o.setZero();
      L[r] = -std::numeric_limits<float>::infinity();
      continue;
    }
    Eigen::RowVectorXf q = ConstMapF(h.q + rows[r] * h.d, 1, h.d);
    Eigen::RowVectorXf s =
        (q * K.middleRows(kr.first, nk).transpose()) * static_cast<float>(h.scale);
    s = s.unaryExpr([t](float x) { return round_to(t, x); });
    float m = s.maxCoeff();
    Eigen::RowVectorXf e = (s.array() - m).exp().matrix();
    float l = e.sum();
    Eigen::RowVectorXf p = (e / l).unaryExpr([t](float x) { return round_to(t, x); });
    o = (p * V.middleRows(kr.first, nk)).unaryExpr([t](float x) { return round_to(t, x); });
    L[r] = m + std::log(l);
  }
}

// ---------------------------------------------------------------------------------------------
// Backward of O = softmax(scale * Q K^T) V, by hand:
//   dV = P^T dO,  dP = dO V^T,  D_i = rowsum(dO_i * O_i) = rowsum(P_i * dP_i),
//   dS = P * (dP - D),  dQ = scale * dS K,  dK = scale * dS^T Q.
void attention_backward_ref_head(const HeadView& h, const float* dO_p, double* dQ_p, double* dK_p,
                                 double* dV_p, double* D_p) {
  MatD Q = to_double(h.q, h.seq_q, h.d), K = to_double(h.k, h.seq_k, h.d),
       V = to_double(h.v, h.seq_k, h.d), dO = to_double(dO_p, h.seq_q, h.d);
  MatD P = probabilities(h, Q, K, nullptr);
  MatD O = P * V;
  Eigen::VectorXd D = (dO.array() * O.array()).rowwise().sum();
  MatD dV = P.transpose() * dO;
  MatD dP = dO * V.transpose();
  MatD dS = (P.array() * (dP.colwise() - D).array()).matrix();
  MatD dQ = (dS * K) * h.scale;
  MatD dK = (dS.transpose() * Q) * h.scale;
  Eigen::Map<MatD>(dQ_p, h.seq_q, h.d) = dQ;
  Eigen::Map<MatD>(dK_p, h.seq_k, h.d) = dK;
  Eigen::Map<MatD>(dV_p, h.seq_k, h.d) = dV;
  Eigen::Map<Eigen::VectorXd>(D_p, h.seq_q) = D;
}

void attention_backward_lowp_head(const HeadView& h, const float* dO_p, DType t, float* dQ_p,
                                  float* dK_p, float* dV_p, float* D_p) {
  MatF Q = ConstMapF(h.q, h.seq_q, h.d), K = ConstMapF(h.k, h.seq_k, h.d),
       V = ConstMapF(h.v, h.seq_k, h.d), dO = ConstMapF(dO_p, h.seq_q, h.d);
  MatF S = round_mat(t, (Q * K.transpose()) * static_cast<float>(h.scale));
  MatF P = MatF::Zero(h.seq_q, h.seq_k);
  for (int64_t i = 0; i < h.seq_q; ++i) {
    const KeyRange kr = visible_keys(h, i);
    const int64_t nk = kr.count();
    if (nk == 0) continue;
    float m = S.row(i).segment(kr.first, nk).maxCoeff();
    Eigen::RowVectorXf e = (S.row(i).segment(kr.first, nk).array() - m).exp().matrix();
    P.row(i).segment(kr.first, nk) = e / e.sum();
  }
  P = round_mat(t, P);
  MatF O = round_mat(t, P * V);
  Eigen::VectorXf D = (dO.array() * O.array()).rowwise().sum();
  MatF dV = round_mat(t, P.transpose() * dO);
  MatF dP = round_mat(t, dO * V.transpose());
  MatF dS = round_mat(t, (P.array() * (dP.colwise() - D).array()).matrix());
  MatF dQ = round_mat(t, (dS * K) * static_cast<float>(h.scale));
  MatF dK = round_mat(t, (dS.transpose() * Q) * static_cast<float>(h.scale));
  Eigen::Map<MatF>(dQ_p, h.seq_q, h.d) = dQ;
  Eigen::Map<MatF>(dK_p, h.seq_k, h.d) = dK;
  Eigen::Map<MatF>(dV_p, h.seq_k, h.d) = dV;
  Eigen::Map<Eigen::VectorXf>(D_p, h.seq_q) = D;
}

// ---------------------------------------------------------------------------------------------
AttentionFwdRef attention_forward_ref(const float* q, const float* k, const float* v,
                                      const AttentionShape& s) {
  AttentionFwdRef r;
  r.O.resize(static_cast<size_t>(s.q_numel()));
  r.L.resize(static_cast<size_t>(s.lse_numel()));
  for (int64_t bh = 0; bh < s.bh(); ++bh)
    attention_forward_ref_head(head_view(s, q, k, v, bh), {},
                               r.O.data() + bh * s.seq_q * s.head_dim, r.L.data() + bh * s.seq_q);
  return r;
}

AttentionBwdRef attention_backward_ref(const float* q, const float* k, const float* v,
                                       const float* dO, const AttentionShape& s) {
  // With grouped K/V heads, dK and dV of a K/V head sum over its query heads (the K/V head feeds
  // each of them): each query head's gradient is computed as if K and V were its own, and added.
  FA_REQUIRE(s.valid_heads(), "heads must be a multiple of heads_kv");
  AttentionBwdRef r;
  r.dQ.resize(static_cast<size_t>(s.q_numel()));
  r.dK.assign(static_cast<size_t>(s.k_numel()), 0.0);
  r.dV.assign(static_cast<size_t>(s.k_numel()), 0.0);
  r.D.resize(static_cast<size_t>(s.lse_numel()));
  const int64_t kh = s.seq_k * s.head_dim;
  std::vector<double> dk(static_cast<size_t>(kh)), dv(static_cast<size_t>(kh));
  for (int64_t bh = 0; bh < s.bh(); ++bh) {
    const int64_t qo = bh * s.seq_q * s.head_dim, ko = s.kv_index(bh) * kh;
    attention_backward_ref_head(head_view(s, q, k, v, bh), dO + qo, r.dQ.data() + qo, dk.data(),
                                dv.data(), r.D.data() + bh * s.seq_q);
    for (int64_t i = 0; i < kh; ++i) {
      r.dK[ko + i] += dk[i];
      r.dV[ko + i] += dv[i];
    }
  }
  return r;
}

}  // namespace fa
