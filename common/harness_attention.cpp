// harness_attention.cpp: the pieces the attention runners share (harness_attention.h).
#include "harness_attention.h"

#include <algorithm>
#include <sstream>

#include "check.h"
#include "harness_run.h"

namespace fa::harness_detail {
namespace {

// Appends `count` elements, from element `offset` on, of a device tensor to `out`.
void append_slice(DType t, const DeviceBuffer& b, int64_t offset, int64_t count,
                  std::vector<float>& out) {
  std::vector<uint8_t> bytes(count * dtype_size(t));
  FA_CUDA_CHECK(cudaMemcpy(bytes.data(),
                           static_cast<const char*>(b.data()) + offset * dtype_size(t),
                           bytes.size(), cudaMemcpyDeviceToHost));
  std::vector<float> v = decode(t, bytes.data(), count);
  out.insert(out.end(), v.begin(), v.end());
}

}  // namespace

AttentionInputs make_attention_inputs(const AttentionShape& s, DType t, const RunOptions& opt,
                                      const std::vector<int64_t>& heads, bool with_dout) {
  AttentionInputs in;
  const int64_t total = 2 * s.k_numel() + s.q_numel() * (with_dout ? 2 : 1);
  in.sliced = opt.check && total > kHostDrawLimit;
  RunOptions on_device = opt;
  if (in.sliced) on_device.check = false;  // make_input then fills on the GPU
  in.q = make_input(t, s.q_numel(), 1, on_device, &in.hq);
  in.k = make_input(t, s.k_numel(), 2, on_device, &in.hk);
  in.v = make_input(t, s.k_numel(), 3, on_device, &in.hv);
  if (with_dout) in.dout = make_input(t, s.q_numel(), 4, on_device, &in.hdo);
  if (in.sliced) {
    FA_CUDA_CHECK(cudaDeviceSynchronize());
    const int64_t qh = s.seq_q * s.head_dim, kh = s.seq_k * s.head_dim;
    for (int64_t bh : heads) {
      append_slice(t, in.q, bh * qh, qh, in.hq);
      append_slice(t, in.k, s.kv_index(bh) * kh, kh, in.hk);
      append_slice(t, in.v, s.kv_index(bh) * kh, kh, in.hv);
      if (with_dout) append_slice(t, in.dout, bh * qh, qh, in.hdo);
    }
  }
  return in;
}

std::vector<int64_t> heads_to_check(const AttentionShape& s, int64_t requested,
                                    double cost_per_head, double budget) {
  int64_t n = s.bh();
  int64_t want = requested > 0 ? requested
                               : std::max<int64_t>(1, static_cast<int64_t>(budget / cost_per_head));
  std::vector<int64_t> heads;
  if (want >= n) {
    for (int64_t i = 0; i < n; ++i) heads.push_back(i);
    return heads;
  }
  want = std::max<int64_t>(want, std::min<int64_t>(n, 2));
  for (int64_t j = 0; j < want; ++j) {
    int64_t h = want == 1 ? 0 : j * (n - 1) / (want - 1);  // first, ..., last
    if (heads.empty() || heads.back() != h) heads.push_back(h);
  }
  return heads;
}

// Query rows to check per head: all, or the first, middle and last blocks of 128 (these hold the
// tile boundaries, the causal diagonal's start and the ragged tail).
std::vector<int64_t> rows_to_check(const AttentionShape& s, double budget) {
  double cost = double(s.seq_q) * s.seq_k * s.head_dim;
  std::vector<int64_t> rows;
  if (cost <= budget) return rows;  // empty = all
  const int64_t block = 128;
  auto add = [&](int64_t from) {
    for (int64_t i = std::max<int64_t>(0, from); i < std::min(s.seq_q, from + block); ++i)
      if (rows.empty() || rows.back() < i) rows.push_back(i);
  };
  add(0);
  add(s.seq_q / 2 - block / 2);
  add(s.seq_q - block);
  return rows;
}

RefInputs ref_inputs(const AttentionShape& s, DType t, const std::vector<int64_t>& heads,
                     const std::vector<int64_t>& rows, const AttentionInputs& in) {
  std::ostringstream os;
  os << s.str() << " causal " << s.causal << " scale " << std::hexfloat << s.scale << " heads_kv "
     << s.heads_kv << " " << dtype_name(t) << " heads";
  for (int64_t h : heads) os << " " << h;
  os << " rows";
  for (int64_t r : rows) os << " " << r;
  os << (in.sliced ? " sliced" : " whole");
  return {os.str(), {in.hq, in.hk, in.hv, in.hdo}};
}

}  // namespace fa::harness_detail
