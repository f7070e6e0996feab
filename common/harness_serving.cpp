// harness_serving.cpp: chapter 09's runners (harness.h). A variable-length batch, forward and
// backward, checked sequence by sequence against the float64 reference of that sequence alone; a
// fixed-length kernel timed on the same batch padded, or one call per sequence; attention over a
// paged KV cache whose pages come in a shuffled order; and the append of new keys into the pages,
// compared bit for bit.
//
// What the kernels may rely on, and what they must not touch:
//  * varlen outputs are allocated with a tail of 256 rows after the last one (O, dQ, dK, dV) and
//    256 floats after L and D, poisoned like the outputs and checked untouched after the run: a
//    ragged tile of the last sequence must not be written whole.
//  * paged: the block table is [batch, max_pages] int32; entries past a sequence's last page
//    (index >= ceil(seqlens_k[b] / page_size)) are -1 and must never be read as a page number.
//    The harness makes max_pages one wider than the longest sequence needs, so a kernel that
//    computes the table's width itself instead of reading shape.max_pages reads the wrong row.
//    Spare pages (no sequence's) and the rows of each sequence's last page past seqlens_k[b] hold
//    NaN: a kernel that reads a key it must not see produces NaN and fails.
#include "harness.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <numeric>
#include <random>
#include <sstream>
#include <type_traits>

#include "buffer.h"
#include "ceilings.h"
#include "check.h"
#include "device_fill.h"
#include "gpu.h"
#include "harness_attention.h"
#include "harness_run.h"
#include "last_reference.h"
#include "reference.h"
#include "timing.h"

namespace fa {

using harness_detail::finish_checks;
using harness_detail::gpu_ready;
using harness_detail::guarded;
using harness_detail::heads_to_check;
using harness_detail::kHostDrawLimit;
using harness_detail::kRefBudget;
using harness_detail::make_input;

namespace {

constexpr int64_t kTailRows = 256;  // rows of poisoned tail after each varlen / paged output

RunResult start_row(const std::string& kernel, const std::string& shape, DType t) {
  RunResult r;
  r.kernel = kernel;
  r.shape = shape;
  r.dtype = dtype_name(t);
  return r;
}

// ---- Shapes the caller got wrong: usage errors, not kernel failures ---------------------------
void require_varlen(const VarlenShape& s) {
  if (s.seqlens_q.size() != s.seqlens_k.size())
    throw UsageError("varlen: seqlens_q has " + std::to_string(s.seqlens_q.size()) +
                     " entries and seqlens_k " + std::to_string(s.seqlens_k.size()) +
                     ": one of each per sequence");
  if (s.batch() < 1) throw UsageError("varlen: the batch holds no sequence");
  for (int64_t b = 0; b < s.batch(); ++b)
    if (s.seqlens_q[b] < 0 || s.seqlens_k[b] < 0)
      throw UsageError("varlen: sequence " + std::to_string(b) + " has a negative length");
  if (s.heads < 1 || s.head_dim < 1 || s.heads_kv < 0)
    throw UsageError("varlen: heads and head_dim must be at least 1");
  const int64_t int32_max = std::numeric_limits<int32_t>::max();
  if (s.total_q() > int32_max || s.total_k() > int32_max)
    throw UsageError("varlen: cu_seqlens are int32: at most 2^31 - 1 tokens in the batch");
}

void require_paged(const PagedShape& s) {
  if (s.batch() < 1) throw UsageError("paged: the batch holds no sequence");
  for (int64_t b = 0; b < s.batch(); ++b)
    if (s.seqlens_k[b] < 0)
      throw UsageError("paged: sequence " + std::to_string(b) + " has a negative length");
  if (s.heads < 1 || s.head_dim < 1 || s.heads_kv < 0 || s.seq_q < 1 || s.page_size < 1)
    throw UsageError("paged: heads, head_dim, seq_q and page_size must be at least 1");
  if (s.num_pages < 0 || s.max_pages < 0)
    throw UsageError("paged: num_pages and max_pages are 0 (the harness sizes them) or more");
}

// Why varlen kernel k (forward or backward) cannot run this shape ("" when it can).
template <class K>
std::string varlen_refusal(const K& k, const VarlenShape& s, DType t) {
  std::string why = missing_version(k, t, s.head_dim);
  if (why.empty()) why = grouped_heads_refusal(s.sequence(0), k.gqa);
  if (why.empty() && s.has_window() && !k.window)
    why = "this kernel takes no sliding window (window_left / window_right)";
  return why;
}

// ---- Reading a device tensor back ---------------------------------------------------------------
// Ranges of a device tensor of dtype t, as floats: sliced out of one download when the tensor is
// small, else copied range by range (a tensor past 2^31 elements never comes back whole).
class DeviceReader {
 public:
  DeviceReader(DType t, const DeviceBuffer& b, int64_t numel)
      : t_(t), base_(static_cast<const char*>(b.data())) {
    if (numel <= kHostDrawLimit) {
      whole_ = to_host(t, b, size_t(numel));
      have_whole_ = true;
    }
  }
  std::vector<float> read(int64_t offset, int64_t count) const {
    if (count <= 0) return {};
    if (have_whole_) return {whole_.begin() + offset, whole_.begin() + offset + count};
    std::vector<uint8_t> bytes(size_t(count) * dtype_size(t_));
    FA_CUDA_CHECK(cudaMemcpy(bytes.data(), base_ + offset * int64_t(dtype_size(t_)), bytes.size(),
                             cudaMemcpyDeviceToHost));
    return decode(t_, bytes.data(), size_t(count));
  }

 private:
  DType t_;
  const char* base_;
  bool have_whole_ = false;
  std::vector<float> whole_;
};

// The bytes after `used_bytes` of an output buffer were poisoned with it (0xFF) and no kernel may
// write them: a check that fails on the first byte that changed.
CompareResult untouched_tail(const std::string& what, const DeviceBuffer& b, size_t used_bytes) {
  CompareResult c;
  c.what = what + " past its end (" + std::to_string(b.bytes() - used_bytes) +
           " poisoned bytes no kernel may write)";
  c.tol = Tolerance::allclose(0, 0);
  std::vector<uint8_t> tail(b.bytes() - used_bytes);
  if (!tail.empty())
    FA_CUDA_CHECK(cudaMemcpy(tail.data(), static_cast<const char*>(b.data()) + used_bytes,
                             tail.size(), cudaMemcpyDeviceToHost));
  c.count = int64_t(tail.size());
  c.worst = 0;
  for (size_t i = 0; i < tail.size(); ++i)
    if (tail[i] != 0xFF) {
      if (c.first_bad < 0) {
        c.first_bad = c.worst = int64_t(i);
        c.got_at_first_bad = tail[i];
        c.ref_at_first_bad = 0xFF;
        c.max_abs = 0xFF - tail[i];
      }
      ++c.bad;
    }
  c.ok = c.bad == 0;
  c.dims = {c.count};
  c.names = {"byte"};
  return c;
}

// ---- What the check compares, within the CPU reference's budget ---------------------------------
struct Range {
  int64_t first = 0, count = 0;
};

// The query rows of a sequence of n rows a check compares: all, or when sampling (n past three
// blocks) the first, middle and last blocks of 128, which hold the tile boundaries, the diagonal's
// start and the ragged tail.
std::vector<Range> rows_of(int64_t n, bool sample) {
  const int64_t block = 128;
  if (n <= 0) return {};
  if (!sample || n <= 3 * block) return {{0, n}};
  return {{0, block}, {n / 2 - block / 2, block}, {n - block, block}};
}

int64_t count_rows(const std::vector<Range>& rows) {
  int64_t n = 0;
  for (const Range& r : rows) n += r.count;
  return n;
}

// The checked heads, sequences and (per sequence) query rows of one run.
struct Plan {
  std::vector<int64_t> heads, seqs;
  std::vector<std::vector<Range>> rows;  // indexed by sequence
  std::string note;                      // what was left out, "" when nothing
};

// nq, nk: the lengths of each sequence; cost_per_pair: the reference's multiply-adds per (query
// row, key, d). All heads, sequences and rows while the reference stays within kRefBudget; else
// a spread of heads (`requested` when given), then (sample_rows) three blocks of rows of each
// long sequence, then a subset of the sequences: the first and last that hold rows, those that
// cost nothing (empty rows or keys: O = 0, L = -inf), and the others in order while they fit.
// group > 1 (a backward with grouped K/V heads): the heads are sampled as whole groups, so that
// each checked K/V head's dK and dV can be compared against the sum over all its query heads.
Plan plan_checks(const std::vector<int64_t>& nq, const std::vector<int64_t>& nk, int64_t heads,
                 int64_t d, double cost_per_pair, int64_t requested, bool sample_rows,
                 int64_t group = 1) {
  Plan p;
  const int64_t batch = int64_t(nq.size());
  auto seq_cost = [&](int64_t b) {
    return double(count_rows(p.rows[b])) * double(nk[b]) * double(d) * cost_per_pair;
  };
  auto head_cost = [&] {
    double c = 0;
    for (int64_t b = 0; b < batch; ++b) c += seq_cost(b);
    return c;
  };
  p.rows.resize(batch);
  for (int64_t b = 0; b < batch; ++b) p.rows[b] = rows_of(nq[b], false);
  AttentionShape as;  // heads_to_check samples s.bh() = heads: here the K/V heads, one a group
  as.heads = heads / group;
  const std::vector<int64_t> kv = heads_to_check(as, requested > 0 ? ceil_div(requested, group) : 0,
                                                 std::max(head_cost(), 1.0) * group, kRefBudget);
  for (int64_t k : kv)
    for (int64_t i = 0; i < group; ++i) p.heads.push_back(k * group + i);
  const double nh = double(p.heads.size());
  bool rows_sampled = false;
  if (sample_rows && nh * head_cost() > kRefBudget)
    for (int64_t b = 0; b < batch; ++b) {
      p.rows[b] = rows_of(nq[b], true);
      rows_sampled = rows_sampled || count_rows(p.rows[b]) < nq[b];
    }
  if (nh * head_cost() <= kRefBudget) {
    for (int64_t b = 0; b < batch; ++b) p.seqs.push_back(b);
  } else {
    int64_t first = -1, last = -1;
    for (int64_t b = 0; b < batch; ++b)
      if (seq_cost(b) > 0) {
        if (first < 0) first = b;
        last = b;
      }
    double spent = nh * ((first >= 0 ? seq_cost(first) : 0) + (last != first ? seq_cost(last) : 0));
    for (int64_t b = 0; b < batch; ++b) {
      const double c = nh * seq_cost(b);
      if (b == first || b == last || c == 0) {
        p.seqs.push_back(b);
      } else if (spent + c <= kRefBudget) {
        p.seqs.push_back(b);
        spent += c;
      }
    }
  }
  std::ostringstream os;
  const char* sep = "checked ";
  if (int64_t(p.heads.size()) < heads) {
    os << sep << p.heads.size() << " of " << heads << " heads"
       << (group > 1 ? " (whole groups)" : "");
    sep = ", ";
  }
  if (rows_sampled) {
    os << sep << "the first, middle and last 128 query rows of sequences longer than 384";
    sep = ", ";
  }
  if (int64_t(p.seqs.size()) < batch) os << sep << p.seqs.size() << " of " << batch << " sequences";
  if (!os.str().empty()) os << " (CPU reference budget)";
  p.note = os.str();
  return p;
}

// ---- The float64 references of the checked (sequence, head) pairs -------------------------------
// One checked query head of one sequence, with the values the reference reads (from the device).
struct Unit {
  int64_t b = 0, h = 0;
  AttentionShape seq;                // the sequence alone: batch 1, its lengths, mask and window
  std::vector<Range> rows;           // the query rows checked
  std::vector<float> q, dout, k, v;  // q, dout: the rows of `rows` one range after another;
                                     // k, v: every key of the sequence (its K/V head)
};

HeadView view_of(const Unit& u, const Range& r, const float* q) {
  // Rows r.first.. of the sequence as rows 0.. of a problem with seq_q - r.first rows: the
  // bottom-right diagonal i + seq_k - seq_q, and so the mask and the window, stay where they were.
  HeadView h;
  h.q = q;
  h.k = u.k.data();
  h.v = u.v.data();
  h.seq_q = u.seq.seq_q - r.first;
  h.seq_k = u.seq.seq_k;
  h.d = u.seq.head_dim;
  h.causal = u.seq.causal;
  h.scale = u.seq.softmax_scale();
  h.window_left = u.seq.window_left;
  h.window_right = u.seq.window_right;
  return h;
}

RefInputs key_of(const std::string& scalars, const std::vector<Unit>& units) {
  RefInputs key;
  std::ostringstream os;
  os << scalars;
  for (const Unit& u : units) {
    os << " | b " << u.b << " h " << u.h << " " << u.seq.str() << " scale " << std::hexfloat
       << u.seq.scale << std::defaultfloat << " rows";
    for (const Range& r : u.rows) os << " " << r.first << "+" << r.count;
    key.data.push_back(u.q);
    key.data.push_back(u.dout);
    key.data.push_back(u.k);
    key.data.push_back(u.v);
  }
  key.scalars = os.str();
  return key;
}

struct FwdRefs {
  std::vector<std::vector<double>> O, L;   // per unit: its checked rows
  std::vector<std::vector<float>> nO, nL;  // the naive same-precision ones (fp16/bf16)
};

FwdRefs forward_refs(const std::vector<Unit>& units, DType t) {
  FwdRefs f;
  for (const Unit& u : units) {
    const int64_t n = count_rows(u.rows), d = u.seq.head_dim;
    std::vector<double> O(n * d), L(n);
    std::vector<float> nO(t == DType::F32 ? 0 : n * d), nL(t == DType::F32 ? 0 : n);
    int64_t at = 0;
    for (const Range& r : u.rows) {
      const HeadView h = view_of(u, r, u.q.data() + at * d);
      std::vector<int64_t> idx(r.count);
      std::iota(idx.begin(), idx.end(), int64_t(0));
      attention_forward_ref_head(h, idx, O.data() + at * d, L.data() + at);
      if (t != DType::F32)
        attention_forward_lowp_head(h, t, idx, nO.data() + at * d, nL.data() + at);
      at += r.count;
    }
    f.O.push_back(std::move(O));
    f.L.push_back(std::move(L));
    f.nO.push_back(std::move(nO));
    f.nL.push_back(std::move(nL));
  }
  return f;
}

// The check of one sequence: fp32 against its fixed tolerance; fp16/bf16 by the FlashAttention
// rule with the naive implementation's error over the whole batch (batch_naive; compare.h says
// why), or the sequence's own when that is larger.
CompareResult compare_in_batch(const std::string& what, const std::vector<float>& got,
                               const std::vector<double>& ref, const std::vector<float>& naive,
                               const Tolerance& tol, double batch_naive) {
  const int64_t n = int64_t(ref.size());
  if (tol.rule == Tolerance::Rule::AllClose)
    return compare(what, got.data(), ref.data(), naive.data(), n, tol);
  const double own = naive_max_error(ref.data(), naive.data(), n);
  return compare_flash_bound(what, got.data(), ref.data(), n, tol.factor, tol.floor,
                             std::max(own, batch_naive));
}

// The largest naive error of one tensor over every checked unit of the batch (0 for fp32, which
// has no naive implementation).
double batch_naive_error(const std::vector<std::vector<double>>& ref,
                         const std::vector<std::vector<float>>& naive) {
  double e = 0;
  for (size_t u = 0; u < ref.size() && u < naive.size(); ++u)
    if (naive[u].size() == ref[u].size())
      e = std::max(e, naive_max_error(ref[u].data(), naive[u].data(), int64_t(ref[u].size())));
  return e;
}

// Compares O and L of each checked sequence (one check each, over its checked heads and rows).
// row_of(u, i): the row of O (and the element of L) that holds row i of unit u.
template <class RowOf>
void compare_forward(RunResult& r, const std::vector<Unit>& units, const FwdRefs& ref, DType t,
                     const RunOptions& opt, const DeviceReader& o, const DeviceReader& lse,
                     int64_t heads, RowOf row_of) {
  Tolerance tolO = tolerance_o(t), tolL = tolerance_l(t);
  if (opt.has_tolerance) tolO = tolL = opt.tolerance;
  const double naiveO = batch_naive_error(ref.O, ref.nO), naiveL = batch_naive_error(ref.L, ref.nL);
  for (size_t u0 = 0; u0 < units.size();) {
    size_t u1 = u0;
    while (u1 < units.size() && units[u1].b == units[u0].b) ++u1;
    const Unit& first = units[u0];
    const int64_t d = first.seq.head_dim, nrows = count_rows(first.rows);
    if (nrows > 0) {
      std::vector<float> gotO, gotL, nO, nL;
      std::vector<double> refO, refL;
      for (size_t u = u0; u < u1; ++u) {
        for (const Range& rg : units[u].rows) {
          const int64_t row = row_of(units[u], rg.first);
          std::vector<float> go = o.read(row * d, rg.count * d), gl = lse.read(row, rg.count);
          gotO.insert(gotO.end(), go.begin(), go.end());
          gotL.insert(gotL.end(), gl.begin(), gl.end());
        }
        refO.insert(refO.end(), ref.O[u].begin(), ref.O[u].end());
        refL.insert(refL.end(), ref.L[u].begin(), ref.L[u].end());
        nO.insert(nO.end(), ref.nO[u].begin(), ref.nO[u].end());
        nL.insert(nL.end(), ref.nL[u].begin(), ref.nL[u].end());
      }
      const std::string seq = " seq " + std::to_string(first.b);
      CompareResult cO = compare_in_batch("O" + seq, gotO, refO, nO, tolO, naiveO);
      CompareResult cL = compare_in_batch("L" + seq, gotL, refL, nL, tolL, naiveL);
      const bool all_heads = int64_t(u1 - u0) == heads;
      const bool all_rows = nrows == first.seq.seq_q;
      const std::string hn = all_heads ? "h" : "checked-head#",
                        in = all_rows ? "i" : "checked-row#";
      cO.dims = {int64_t(u1 - u0), nrows, d};
      cO.names = {hn, in, "d"};
      cL.dims = {int64_t(u1 - u0), nrows};
      cL.names = {hn, in};
      r.checks.push_back(cO);
      r.checks.push_back(cL);
    }
    u0 = u1;
  }
}

// ---- Varlen inputs ------------------------------------------------------------------------------
struct VarlenInputs {
  DeviceBuffer q, k, v, dout, cu_q, cu_k;
};

// Seeded inputs (streams 1..4 of opt.seed, as the fixed-length runners): drawn on the host while
// small, on the GPU past kHostDrawLimit (the check reads them back either way).
VarlenInputs make_varlen_inputs(const VarlenShape& s, DType t, const RunOptions& opt,
                                bool with_dout) {
  VarlenInputs in;
  RunOptions draw = opt;
  const int64_t total = 2 * s.k_numel() + s.q_numel() * (with_dout ? 2 : 1);
  if (total > kHostDrawLimit) draw.check = false;  // make_input then fills on the GPU
  std::vector<float> host;
  in.q = make_input(t, s.q_numel(), 1, draw, &host);
  in.k = make_input(t, s.k_numel(), 2, draw, &host);
  in.v = make_input(t, s.k_numel(), 3, draw, &host);
  if (with_dout) in.dout = make_input(t, s.q_numel(), 4, draw, &host);
  const std::vector<int32_t> cu_q = s.cu_seqlens_q(), cu_k = s.cu_seqlens_k();
  in.cu_q = DeviceBuffer(cu_q.size() * sizeof(int32_t));
  in.cu_q.upload(cu_q.data(), in.cu_q.bytes());
  in.cu_k = DeviceBuffer(cu_k.size() * sizeof(int32_t));
  in.cu_k.upload(cu_k.data(), in.cu_k.bytes());
  FA_CUDA_CHECK(cudaDeviceSynchronize());
  return in;
}

// The checked (sequence, head) pairs of a varlen run, read from the device inputs.
std::vector<Unit> varlen_units(const VarlenShape& s, const Plan& plan, DType t,
                               const VarlenInputs& in, bool with_dout) {
  const int64_t d = s.head_dim, Tq = s.total_q(), Tk = s.total_k();
  const std::vector<int32_t> cu_q = s.cu_seqlens_q(), cu_k = s.cu_seqlens_k();
  DeviceReader q(t, in.q, s.q_numel()), k(t, in.k, s.k_numel()), v(t, in.v, s.k_numel());
  DeviceReader dout(t, with_dout ? in.dout : in.q, with_dout ? s.q_numel() : 0);
  const int64_t group = s.heads / s.kv_heads();
  std::vector<Unit> units;
  for (int64_t b : plan.seqs)
    for (int64_t h : plan.heads) {
      Unit u;
      u.b = b;
      u.h = h;
      u.seq = s.sequence(b);
      u.rows = plan.rows[b];
      for (const Range& r : u.rows) {
        const int64_t at = (h * Tq + cu_q[b] + r.first) * d;
        std::vector<float> x = q.read(at, r.count * d);
        u.q.insert(u.q.end(), x.begin(), x.end());
        if (with_dout) {
          x = dout.read(at, r.count * d);
          u.dout.insert(u.dout.end(), x.begin(), x.end());
        }
      }
      const int64_t kv = h / group;
      u.k = k.read((kv * Tk + cu_k[b]) * d, u.seq.seq_k * d);
      u.v = v.read((kv * Tk + cu_k[b]) * d, u.seq.seq_k * d);
      units.push_back(std::move(u));
    }
  return units;
}

std::string varlen_key(const VarlenShape& s, DType t) {
  std::ostringstream os;
  os << s.str() << " " << dtype_name(t);
  return os.str();
}

// ---- The paged KV cache's layout ----------------------------------------------------------------
struct PagedLayout {
  PagedShape shape;               // num_pages and max_pages filled in
  std::vector<int32_t> table;     // [batch, max_pages], -1 past each sequence's pages
  std::vector<int64_t> spare;     // pages no sequence holds
  std::vector<int64_t> pages_of;  // pages per sequence
};

// Every sequence's pages drawn from a seeded shuffle of the pool, so that no sequence's pages are
// contiguous or ascending (a kernel that assumes they are fails), with a few spare pages among
// them and one unused column in the table.
PagedLayout make_layout(const PagedShape& s, uint64_t seed) {
  PagedLayout l;
  l.shape = s;
  int64_t need = 0, widest = 0;
  for (int64_t len : s.seqlens_k) {
    const int64_t n = ceil_div(len, s.page_size);
    l.pages_of.push_back(n);
    need += n;
    widest = std::max(widest, n);
  }
  PagedShape& p = l.shape;
  if (p.num_pages == 0) p.num_pages = need + std::max<int64_t>(3, need / 8);
  if (p.max_pages == 0) p.max_pages = widest + 1;
  if (p.num_pages < need)
    throw UsageError("paged: num_pages " + std::to_string(p.num_pages) + " holds fewer than the " +
                     std::to_string(need) + " pages the sequences need");
  if (p.max_pages < widest)
    throw UsageError("paged: max_pages " + std::to_string(p.max_pages) + " is narrower than the " +
                     std::to_string(widest) + " pages of the longest sequence");
  if (p.num_pages > std::numeric_limits<int32_t>::max())
    throw UsageError("paged: page numbers are int32");
  std::vector<int64_t> perm(p.num_pages);
  std::iota(perm.begin(), perm.end(), int64_t(0));
  std::mt19937_64 rng(derive_seed(seed, 7));
  std::shuffle(perm.begin(), perm.end(), rng);
  l.table.assign(size_t(p.batch() * p.max_pages), -1);
  int64_t next = 0;
  for (int64_t b = 0; b < p.batch(); ++b) {
    int32_t* row = l.table.data() + b * p.max_pages;
    for (int64_t i = 0; i < l.pages_of[b]; ++i) row[i] = int32_t(perm[next++]);
    // A shuffle may still leave a short sequence's pages in order: swap its first two then.
    if (l.pages_of[b] >= 2 && (row[1] == row[0] + 1 || std::is_sorted(row, row + l.pages_of[b])))
      std::swap(row[0], row[1]);
  }
  l.spare.assign(perm.begin() + next, perm.end());
  return l;
}

// Offset (in elements) of row `row` of K/V head kvh of page `page` in the pool.
int64_t page_offset(const PagedShape& p, int64_t page, int64_t kvh, int64_t row) {
  return ((page * p.kv_heads() + kvh) * p.page_size + row) * p.head_dim;
}

// Fills a page pool with seeded values, then (poison_unused) NaN in the spare pages and in the
// rows of each sequence's last page past its length.
void fill_pool(const PagedLayout& l, DType t, DeviceBuffer& pool, uint64_t seed, uint64_t stream,
               const RunOptions& opt, bool poison_unused) {
  const PagedShape& p = l.shape;
  const size_t es = dtype_size(t);
  fill_random_device(t, pool.data(), p.page_numel(), derive_seed(seed, stream), opt.input_mean,
                     opt.input_std);
  if (!poison_unused) return;
  char* base = static_cast<char*>(pool.data());
  const int64_t page_elems = p.kv_heads() * p.page_size * p.head_dim;
  for (int64_t page : l.spare)
    FA_CUDA_CHECK(cudaMemset(base + page * page_elems * es, 0xFF, page_elems * es));
  for (int64_t b = 0; b < p.batch(); ++b) {
    const int64_t used = p.seqlens_k[b] % p.page_size;
    if (l.pages_of[b] == 0 || used == 0) continue;
    const int64_t page = l.table[b * p.max_pages + l.pages_of[b] - 1];
    for (int64_t kvh = 0; kvh < p.kv_heads(); ++kvh)
      FA_CUDA_CHECK(cudaMemset(base + page_offset(p, page, kvh, used) * es, 0xFF,
                               (p.page_size - used) * p.head_dim * es));
  }
  FA_CUDA_CHECK(cudaDeviceSynchronize());
}

DeviceBuffer upload_ints(const std::vector<int32_t>& v) {
  DeviceBuffer b(std::max<size_t>(1, v.size()) * sizeof(int32_t));
  b.upload(v.data(), v.size() * sizeof(int32_t));
  return b;
}

std::vector<int32_t> seqlens_int32(const PagedShape& p) {
  std::vector<int32_t> out;
  for (int64_t len : p.seqlens_k) {
    if (len > std::numeric_limits<int32_t>::max()) throw UsageError("paged: seqlens_k are int32");
    out.push_back(int32_t(len));
  }
  return out;
}

// Device memory left, for the timing-only runners that allocate a padded batch.
std::string fits_in_gpu(double bytes, const std::string& what) {
  size_t free_b = 0, total_b = 0;
  FA_CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
  if (bytes <= 0.9 * double(free_b)) return "";
  std::ostringstream os;
  os.precision(3);
  os << what << " needs " << bytes / 1e9 << " GB; " << double(free_b) / 1e9
     << " GB of GPU memory are free";
  return os.str();
}

}  // namespace

// ================================================================================================
RunResult run_varlen_fwd(const VarlenFwdKernel& k, const VarlenShape& s, DType t,
                         const RunOptions& opt) {
  require_varlen(s);
  RunResult r = start_row(k.name, s.str(), t);
  if (!gpu_ready(r, k.min_sm)) return r;
  r.message = varlen_refusal(k, s, t);
  if (!r.message.empty()) {
    r.status = Status::Unsupported;
    return r;
  }
  guarded(r, [&] {
    VarlenInputs in = make_varlen_inputs(s, t, opt, false);
    const size_t es = dtype_size(t);
    DeviceBuffer o((s.q_numel() + kTailRows * s.head_dim) * es),
        lse((s.lse_numel() + kTailRows) * sizeof(float));
    VarlenFwdArgs a;
    a.q = in.q.data();
    a.k = in.k.data();
    a.v = in.v.data();
    a.o = o.data();
    a.lse = lse.as<float>();
    a.cu_seqlens_q = in.cu_q.as<int32_t>();
    a.cu_seqlens_k = in.cu_k.as<int32_t>();
    a.shape = s;
    a.dtype = t;
    if (opt.check) {
      o.poison();
      lse.poison();
      k.run(a, nullptr);
      FA_CUDA_CHECK(cudaDeviceSynchronize());
      const Plan plan = plan_checks(s.seqlens_q, s.seqlens_k, s.heads, s.head_dim,
                                    t == DType::F32 ? 2 : 3, opt.check_heads, true);
      r.note = plan.note;
      const std::vector<Unit> units = varlen_units(s, plan, t, in, false);
      static LastReference<FwdRefs> last;
      const FwdRefs ref = last.get(key_of("varlen fwd " + varlen_key(s, t), units),
                                   [&] { return forward_refs(units, t); });
      const std::vector<int32_t> cu_q = s.cu_seqlens_q();
      const int64_t Tq = s.total_q();
      DeviceReader go(t, o, s.q_numel()), gl(DType::F32, lse, s.lse_numel());
      compare_forward(r, units, ref, t, opt, go, gl, s.heads,
                      [&](const Unit& u, int64_t i) { return u.h * Tq + cu_q[u.b] + i; });
      r.checks.push_back(untouched_tail("O", o, s.q_numel() * es));
      r.checks.push_back(untouched_tail("L", lse, s.lse_numel() * sizeof(float)));
      finish_checks(r);
    }
    if (opt.time) {
      Timing tm = time_gpu([&](cudaStream_t st) { k.run(a, st); }, opt.timing);
      r.ms = tm.median_ms;
      r.tflops = s.fwd_flops() / (r.ms * 1e-3) / 1e12;
    }
  });
  return r;
}

// ================================================================================================
namespace {

struct BwdRefs {
  std::vector<std::vector<double>> dQ, dK, dV, D;
  std::vector<std::vector<float>> ndQ, ndK, ndV, nD;
};

BwdRefs backward_refs(const std::vector<Unit>& units, DType t) {
  BwdRefs f;
  for (const Unit& u : units) {
    const int64_t n = u.seq.seq_q, nk = u.seq.seq_k, d = u.seq.head_dim;
    // Zeros where a side is empty: keys no query sees get dK = dV = 0; rows that see no key have
    // O = 0, so dQ = 0 and D = 0. Computed directly, not through products with an empty inner
    // dimension.
    std::vector<double> dQ(n * d, 0.0), dK(nk * d, 0.0), dV(nk * d, 0.0), D(n, 0.0);
    std::vector<float> ndQ(n * d, 0.0f), ndK(nk * d, 0.0f), ndV(nk * d, 0.0f), nD(n, 0.0f);
    if (n > 0 && nk > 0) {
      const HeadView h = view_of(u, Range{0, n}, u.q.data());
      attention_backward_ref_head(h, u.dout.data(), dQ.data(), dK.data(), dV.data(), D.data());
      if (t != DType::F32)
        attention_backward_lowp_head(h, u.dout.data(), t, ndQ.data(), ndK.data(), ndV.data(),
                                     nD.data());
    }
    f.dQ.push_back(std::move(dQ));
    f.dK.push_back(std::move(dK));
    f.dV.push_back(std::move(dV));
    f.D.push_back(std::move(D));
    f.ndQ.push_back(std::move(ndQ));
    f.ndK.push_back(std::move(ndK));
    f.ndV.push_back(std::move(ndV));
    f.nD.push_back(std::move(nD));
  }
  return f;
}

// Grouped K/V heads: dK and dV of a K/V head are the sums over its group's query heads, which are
// consecutive units (plan_checks samples whole groups). A same-precision implementation stores
// its group sum in the dtype, as the kernel does: the naive sums are rounded once more (as the
// fixed-length harness does), or their error would be that of an fp32 output.
void sum_groups(BwdRefs& f, int64_t group, DType t) {
  if (group == 1) return;
  auto fold = [&](auto& per_unit) {
    std::remove_reference_t<decltype(per_unit)> sums;
    for (size_t u = 0; u < per_unit.size(); u += size_t(group)) {
      auto sum = per_unit[u];
      for (size_t i = 1; i < size_t(group); ++i)
        for (size_t e = 0; e < sum.size(); ++e) sum[e] += per_unit[u + i][e];
      sums.push_back(std::move(sum));
    }
    per_unit = std::move(sums);
  };
  fold(f.dK);
  fold(f.dV);
  fold(f.ndK);
  fold(f.ndV);
  for (auto* v : {&f.ndK, &f.ndV})
    for (std::vector<float>& x : *v) round_in_place(t, x);
}

}  // namespace

RunResult run_varlen_bwd(const VarlenBwdKernel& k, const VarlenShape& s, DType t,
                         const RunOptions& opt) {
  require_varlen(s);
  RunResult r = start_row(k.name, s.str(), t);
  if (!gpu_ready(r, k.min_sm)) return r;
  r.message = varlen_refusal(k, s, t);
  if (!r.message.empty()) {
    r.status = Status::Unsupported;
    return r;
  }
  const std::string fwd_name = opt.forward_kernel.empty() ? k.forward : opt.forward_kernel;
  const VarlenFwdKernel* fwd = find_entry<VarlenFwdKernel>(fwd_name);
  if (fwd == nullptr) {
    // The backward's registration names its forward: a missing one is a bug, not a limitation.
    r.status = Status::Fail;
    r.message = "the forward \"" + fwd_name +
                "\" that makes O and L for this backward is not a registered VarlenFwdKernel";
    return r;
  }
  std::string why = gpu_skip_reason(fwd->min_sm);
  if (why.empty()) why = varlen_refusal(*fwd, s, t);
  if (!why.empty()) {
    r.status = Status::Unsupported;
    r.message = "its forward " + fwd->name + ": " + why;
    return r;
  }
  guarded(r, [&] {
    VarlenInputs in = make_varlen_inputs(s, t, opt, true);
    const size_t es = dtype_size(t);
    DeviceBuffer o(s.q_numel() * es), lse(s.lse_numel() * sizeof(float));
    VarlenFwdArgs fa_args;
    fa_args.q = in.q.data();
    fa_args.k = in.k.data();
    fa_args.v = in.v.data();
    fa_args.o = o.data();
    fa_args.lse = lse.as<float>();
    fa_args.cu_seqlens_q = in.cu_q.as<int32_t>();
    fa_args.cu_seqlens_k = in.cu_k.as<int32_t>();
    fa_args.shape = s;
    fa_args.dtype = t;
    fwd->run(fa_args, nullptr);
    FA_CUDA_CHECK(cudaDeviceSynchronize());

    const int64_t tail = kTailRows * s.head_dim;
    DeviceBuffer gq((s.q_numel() + tail) * es), gk((s.k_numel() + tail) * es),
        gv((s.k_numel() + tail) * es), gD((s.lse_numel() + kTailRows) * sizeof(float)),
        ws(std::max<int64_t>(1, s.q_numel()) * sizeof(float));
    VarlenBwdArgs a;
    a.q = in.q.data();
    a.k = in.k.data();
    a.v = in.v.data();
    a.o = o.data();
    a.dout = in.dout.data();
    a.lse = lse.as<float>();
    a.dq = gq.data();
    a.dk = gk.data();
    a.dv = gv.data();
    a.delta = gD.as<float>();
    a.workspace = ws.as<float>();
    a.cu_seqlens_q = in.cu_q.as<int32_t>();
    a.cu_seqlens_k = in.cu_k.as<int32_t>();
    a.shape = s;
    a.dtype = t;
    // The workspace is zeroed before every call, the timed ones too (registry.h).
    auto launch = [&](cudaStream_t st) {
      FA_CUDA_CHECK(cudaMemsetAsync(ws.data(), 0, ws.bytes(), st));
      k.run(a, st);
    };
    if (opt.check) {
      gq.poison();
      gk.poison();
      gv.poison();
      gD.poison();
      launch(nullptr);
      FA_CUDA_CHECK(cudaDeviceSynchronize());
      // The reference computes every row of a checked sequence (no row sampling): six products of
      // rows x keys x d, twice for fp16/bf16 (the naive one).
      const int64_t group = s.heads / s.kv_heads();
      const Plan plan = plan_checks(s.seqlens_q, s.seqlens_k, s.heads, s.head_dim,
                                    t == DType::F32 ? 6 : 12, opt.check_heads, false, group);
      r.note = plan.note;
      const std::vector<Unit> units = varlen_units(s, plan, t, in, true);
      static LastReference<BwdRefs> last;
      const BwdRefs ref = last.get(key_of("varlen bwd " + varlen_key(s, t), units), [&] {
        BwdRefs f = backward_refs(units, t);
        sum_groups(f, group, t);  // dK, dV: one entry per K/V head
        return f;
      });
      const std::vector<int32_t> cu_q = s.cu_seqlens_q(), cu_k = s.cu_seqlens_k();
      const int64_t Tq = s.total_q(), Tk = s.total_k(), d = s.head_dim;
      DeviceReader xq(t, gq, s.q_numel()), xk(t, gk, s.k_numel()), xv(t, gv, s.k_numel()),
          xD(DType::F32, gD, s.lse_numel());
      Tolerance tolG = tolerance_grad(t), tolD = tolerance_delta(t);
      if (opt.has_tolerance) tolG = tolD = opt.tolerance;
      const double batch_naive[4] = {
          batch_naive_error(ref.dQ, ref.ndQ), batch_naive_error(ref.dK, ref.ndK),
          batch_naive_error(ref.dV, ref.ndV), batch_naive_error(ref.D, ref.nD)};
      for (size_t u0 = 0; u0 < units.size();) {
        size_t u1 = u0;
        while (u1 < units.size() && units[u1].b == units[u0].b) ++u1;
        const int64_t b = units[u0].b, n = s.seqlens_q[b], nk = s.seqlens_k[b];
        std::vector<float> got[4], naive[4];
        std::vector<double> want[4];
        auto add = [](auto& to, const auto& from) {
          to.insert(to.end(), from.begin(), from.end());
        };
        for (size_t u = u0; u < u1; ++u) {
          const int64_t h = units[u].h;
          add(got[0], xq.read((h * Tq + cu_q[b]) * d, n * d));
          add(got[3], xD.read(h * Tq + cu_q[b], n));
          add(want[0], ref.dQ[u]);
          add(want[3], ref.D[u]);
          add(naive[0], ref.ndQ[u]);
          add(naive[3], ref.nD[u]);
          if (h % group == 0) {  // the group's K/V head, against the sum over the group
            const int64_t kv = h / group;
            const size_t g = u / size_t(group);
            add(got[1], xk.read((kv * Tk + cu_k[b]) * d, nk * d));
            add(got[2], xv.read((kv * Tk + cu_k[b]) * d, nk * d));
            add(want[1], ref.dK[g]);
            add(want[2], ref.dV[g]);
            add(naive[1], ref.ndK[g]);
            add(naive[2], ref.ndV[g]);
          }
        }
        const char* names[4] = {"dQ", "dK", "dV", "D"};
        const int64_t rows[4] = {n, nk, nk, n};
        const int64_t n_heads = int64_t(u1 - u0), n_kv = n_heads / group;
        for (int i = 0; i < 4; ++i) {
          if (rows[i] == 0) continue;
          const bool kv = i == 1 || i == 2;
          CompareResult c =
              compare_in_batch(std::string(names[i]) + " seq " + std::to_string(b), got[i], want[i],
                               naive[i], i == 3 ? tolD : tolG, batch_naive[i]);
          c.dims = {kv ? n_kv : n_heads, rows[i]};
          if (kv)
            c.names = {n_kv == s.kv_heads() ? "h_kv" : "checked-kv-head#", "j"};
          else
            c.names = {n_heads == s.heads ? "h" : "checked-head#", "i"};
          if (i < 3) {
            c.dims.push_back(d);
            c.names.push_back("d");
          }
          r.checks.push_back(c);
        }
        u0 = u1;
      }
      r.checks.push_back(untouched_tail("dQ", gq, s.q_numel() * es));
      r.checks.push_back(untouched_tail("dK", gk, s.k_numel() * es));
      r.checks.push_back(untouched_tail("dV", gv, s.k_numel() * es));
      r.checks.push_back(untouched_tail("D", gD, s.lse_numel() * sizeof(float)));
      finish_checks(r);
    }
    if (opt.time) {
      Timing tm = time_gpu(launch, opt.timing);
      r.ms = tm.median_ms;
      r.tflops = s.bwd_flops() / (r.ms * 1e-3) / 1e12;
    }
  });
  return r;
}

// ================================================================================================
// A fixed-length kernel on a varlen batch: timed only. Inputs are filled on the GPU (any finite
// values: nothing is compared).
namespace {

std::string fixed_refusal(const AttentionFwdKernel& k, const VarlenShape& s, DType t) {
  std::string why = missing_version(k.dtypes, k.head_dims, t, s.head_dim);
  if (why.empty()) why = grouped_heads_refusal(s.sequence(0), k.gqa);
  if (why.empty() && s.has_window())
    why = "a fixed-length kernel takes no sliding window: this batch has one";
  return why;
}

struct FixedBuffers {
  DeviceBuffer q, k, v, o, lse;
  AttentionFwdArgs args;
};

FixedBuffers fixed_buffers(const AttentionShape& a, DType t, const RunOptions& opt,
                           uint64_t stream) {
  FixedBuffers f;
  const size_t es = dtype_size(t);
  f.q = DeviceBuffer(a.q_numel() * es);
  f.k = DeviceBuffer(a.k_numel() * es);
  f.v = DeviceBuffer(a.k_numel() * es);
  f.o = DeviceBuffer(a.q_numel() * es);
  f.lse = DeviceBuffer(a.lse_numel() * sizeof(float));
  fill_random_device(t, f.q.data(), a.q_numel(), derive_seed(opt.seed, stream + 1), opt.input_mean,
                     opt.input_std);
  fill_random_device(t, f.k.data(), a.k_numel(), derive_seed(opt.seed, stream + 2), opt.input_mean,
                     opt.input_std);
  fill_random_device(t, f.v.data(), a.k_numel(), derive_seed(opt.seed, stream + 3), opt.input_mean,
                     opt.input_std);
  f.args.q = f.q.data();
  f.args.k = f.k.data();
  f.args.v = f.v.data();
  f.args.o = f.o.data();
  f.args.lse = f.lse.as<float>();
  f.args.shape = a;
  f.args.dtype = t;
  return f;
}

double fixed_bytes(const AttentionShape& a, DType t) {
  return double(2 * a.q_numel() + 2 * a.k_numel()) * double(dtype_size(t)) +
         4.0 * double(a.lse_numel());
}

// Runs `launch` once (no timing asked) or times it; the rate is the varlen problem's.
void time_fixed(RunResult& r, const VarlenShape& s, const RunOptions& opt,
                const std::function<void(cudaStream_t)>& launch) {
  if (!opt.time) {
    launch(nullptr);
    FA_CUDA_CHECK(cudaDeviceSynchronize());
    return;
  }
  Timing tm = time_gpu(launch, opt.timing);
  r.ms = tm.median_ms;
  r.tflops = s.fwd_flops() / (r.ms * 1e-3) / 1e12;
}

}  // namespace

RunResult time_varlen_padded(const AttentionFwdKernel& k, const VarlenShape& s, DType t,
                             const RunOptions& opt) {
  require_varlen(s);
  RunResult r = start_row(k.name, s.str(), t);
  if (!gpu_ready(r, k.min_sm)) return r;
  const AttentionShape p = s.padded();
  r.message = fixed_refusal(k, s, t);
  if (r.message.empty() && (p.seq_q == 0 || p.seq_k == 0))
    r.message = "nothing to time: every sequence has no query or no key";
  if (!r.message.empty()) {
    r.status = Status::Unsupported;
    return r;
  }
  guarded(r, [&] {
    r.message = fits_in_gpu(fixed_bytes(p, t), "the padded batch " + p.str());
    if (!r.message.empty()) {
      r.status = Status::Unsupported;
      return;
    }
    FixedBuffers f = fixed_buffers(p, t, opt, 0);
    FA_CUDA_CHECK(cudaDeviceSynchronize());
    time_fixed(r, s, opt, [&](cudaStream_t st) { k.run(f.args, st); });
    r.note = "timed only: one call on the batch padded to " + p.str() +
             "; TFLOP/s counts the varlen batch's visible pairs (the padding's work is waste)";
  });
  return r;
}

RunResult time_varlen_per_sequence(const AttentionFwdKernel& k, const VarlenShape& s, DType t,
                                   const RunOptions& opt) {
  require_varlen(s);
  RunResult r = start_row(k.name, s.str(), t);
  if (!gpu_ready(r, k.min_sm)) return r;
  r.message = fixed_refusal(k, s, t);
  // A sequence without queries or keys is skipped: its O = 0, L = -inf take no attention kernel.
  std::vector<int64_t> seqs;
  for (int64_t b = 0; b < s.batch(); ++b)
    if (s.seqlens_q[b] > 0 && s.seqlens_k[b] > 0) seqs.push_back(b);
  if (r.message.empty() && seqs.empty())
    r.message = "nothing to time: every sequence has no query or no key";
  if (!r.message.empty()) {
    r.status = Status::Unsupported;
    return r;
  }
  guarded(r, [&] {
    double bytes = 0;
    for (int64_t b : seqs) bytes += fixed_bytes(s.sequence(b), t);
    r.message = fits_in_gpu(bytes, "one buffer set per sequence");
    if (!r.message.empty()) {
      r.status = Status::Unsupported;
      return;
    }
    // One [1, heads, len, D] set per sequence: the packed [heads, total, D] slab is not a
    // [1, heads, len, D] tensor for any sequence, so the fixed-length kernel cannot read it.
    std::vector<FixedBuffers> per;
    for (int64_t b : seqs) per.push_back(fixed_buffers(s.sequence(b), t, opt, 4 * uint64_t(b)));
    FA_CUDA_CHECK(cudaDeviceSynchronize());
    time_fixed(r, s, opt, [&](cudaStream_t st) {
      for (const FixedBuffers& f : per) k.run(f.args, st);
    });
    r.note = "timed only: " + std::to_string(per.size()) +
             " calls, one per sequence with queries and keys; TFLOP/s counts the varlen batch's "
             "visible pairs";
  });
  return r;
}

// ================================================================================================
RunResult run_paged_fwd(const PagedFwdKernel& k, const PagedShape& s, DType t,
                        const RunOptions& opt) {
  require_paged(s);
  const PagedLayout l = make_layout(s, opt.seed);
  const PagedShape& p = l.shape;
  RunResult r = start_row(k.name, p.str(), t);
  if (!gpu_ready(r, k.min_sm)) return r;
  r.message = missing_version(k, t, p.head_dim);
  if (r.message.empty() &&
      std::find(k.page_sizes.begin(), k.page_sizes.end(), p.page_size) == k.page_sizes.end())
    r.message = "this kernel takes no page size " + std::to_string(p.page_size);
  if (r.message.empty()) r.message = grouped_heads_refusal(p.sequence(0), k.gqa);
  if (!r.message.empty()) {
    r.status = Status::Unsupported;
    return r;
  }
  guarded(r, [&] {
    const size_t es = dtype_size(t);
    DeviceBuffer kp(p.page_numel() * es), vp(p.page_numel() * es);
    fill_pool(l, t, kp, opt.seed, 2, opt, true);
    fill_pool(l, t, vp, opt.seed, 3, opt, true);
    RunOptions draw = opt;
    if (p.q_numel() > kHostDrawLimit) draw.check = false;
    std::vector<float> host;
    DeviceBuffer q = make_input(t, p.q_numel(), 1, draw, &host);
    DeviceBuffer table = upload_ints(l.table), lens = upload_ints(seqlens_int32(p));
    DeviceBuffer o((p.q_numel() + kTailRows * p.head_dim) * es),
        lse((p.lse_numel() + kTailRows) * sizeof(float));
    FA_CUDA_CHECK(cudaDeviceSynchronize());
    PagedFwdArgs a;
    a.q = q.data();
    a.k_pages = kp.data();
    a.v_pages = vp.data();
    a.o = o.data();
    a.lse = lse.as<float>();
    a.block_table = table.as<int32_t>();
    a.seqlens_k = lens.as<int32_t>();
    a.shape = p;
    a.dtype = t;
    if (opt.check) {
      o.poison();
      lse.poison();
      k.run(a, nullptr);
      FA_CUDA_CHECK(cudaDeviceSynchronize());
      const std::vector<int64_t> nq(p.batch(), p.seq_q);
      const Plan plan = plan_checks(nq, p.seqlens_k, p.heads, p.head_dim, t == DType::F32 ? 2 : 3,
                                    opt.check_heads, true);
      r.note = plan.note;
      // Each checked sequence's keys gathered through the block table into contiguous rows.
      DeviceReader rq(t, q, p.q_numel()), rk(t, kp, p.page_numel()), rv(t, vp, p.page_numel());
      const int64_t d = p.head_dim, group = p.heads / p.kv_heads();
      std::vector<Unit> units;
      for (int64_t b : plan.seqs)
        for (int64_t h : plan.heads) {
          Unit u;
          u.b = b;
          u.h = h;
          u.seq = p.sequence(b);
          u.rows = plan.rows[b];
          for (const Range& rg : u.rows) {
            std::vector<float> x =
                rq.read(((b * p.heads + h) * p.seq_q + rg.first) * d, rg.count * d);
            u.q.insert(u.q.end(), x.begin(), x.end());
          }
          for (int64_t i = 0; i < l.pages_of[b]; ++i) {
            const int64_t page = l.table[b * p.max_pages + i];
            const int64_t rows = std::min(p.page_size, p.seqlens_k[b] - i * p.page_size);
            std::vector<float> x = rk.read(page_offset(p, page, h / group, 0), rows * d);
            u.k.insert(u.k.end(), x.begin(), x.end());
            x = rv.read(page_offset(p, page, h / group, 0), rows * d);
            u.v.insert(u.v.end(), x.begin(), x.end());
          }
          units.push_back(std::move(u));
        }
      std::ostringstream scalars;
      scalars << "paged fwd " << p.str() << " " << dtype_name(t);
      static LastReference<FwdRefs> last;
      const FwdRefs ref =
          last.get(key_of(scalars.str(), units), [&] { return forward_refs(units, t); });
      DeviceReader go(t, o, p.q_numel()), gl(DType::F32, lse, p.lse_numel());
      compare_forward(r, units, ref, t, opt, go, gl, p.heads, [&](const Unit& u, int64_t i) {
        return (u.b * p.heads + u.h) * p.seq_q + i;
      });
      r.checks.push_back(untouched_tail("O", o, p.q_numel() * es));
      r.checks.push_back(untouched_tail("L", lse, p.lse_numel() * sizeof(float)));
      finish_checks(r);
    }
    if (opt.time) {
      Timing tm = time_gpu([&](cudaStream_t st) { k.run(a, st); }, opt.timing);
      r.ms = tm.median_ms;
      r.tflops = p.fwd_flops() / (r.ms * 1e-3) / 1e12;
      r.gbps = p.min_bytes(int64_t(es)) / (r.ms * 1e-3) / 1e9;
      r.pct = 100.0 * r.gbps / copy_bandwidth_gbps();
      r.pct_of = "copy";
    }
  });
  return r;
}

// ================================================================================================
namespace {

// Where element `flat` of a page pool lies, in words: page, head, row, d, and whose key that is.
std::string describe_pool_element(const PagedLayout& l, int64_t flat) {
  const PagedShape& p = l.shape;
  const int64_t d = flat % p.head_dim, row = (flat / p.head_dim) % p.page_size;
  const int64_t kvh = (flat / (p.head_dim * p.page_size)) % p.kv_heads();
  const int64_t page = flat / (p.head_dim * p.page_size * p.kv_heads());
  std::ostringstream os;
  os << "page " << page << ", K/V head " << kvh << ", row " << row << ", d " << d << ": ";
  for (int64_t b = 0; b < p.batch(); ++b)
    for (int64_t i = 0; i < l.pages_of[b]; ++i)
      if (l.table[b * p.max_pages + i] == page) {
        const int64_t j = i * p.page_size + row;
        if (j >= p.seqlens_k[b])
          os << "past the last key of sequence " << b << " (must be unchanged)";
        else if (j >= p.seqlens_k[b] - p.seq_q)
          os << "new key " << j << " of sequence " << b;
        else
          os << "old key " << j << " of sequence " << b << " (must be unchanged)";
        return os.str();
      }
  os << "a spare page (must be unchanged)";
  return os.str();
}

// Every element of a pool against the expected bytes: exact, bit for bit.
CompareResult compare_pool(const std::string& what, const PagedLayout& l, DType t,
                           const std::vector<uint8_t>& got, const std::vector<uint8_t>& want,
                           std::string* where) {
  const PagedShape& p = l.shape;
  const size_t es = dtype_size(t);
  CompareResult c;
  c.what = what + " (bit for bit)";
  c.tol = Tolerance::allclose(0, 0);
  c.count = p.page_numel();
  c.worst = 0;
  for (int64_t i = 0; i < c.count; ++i)
    if (std::memcmp(got.data() + i * es, want.data() + i * es, es) != 0) {
      if (c.first_bad < 0) {
        c.first_bad = c.worst = i;
        c.got_at_first_bad = decode(t, got.data() + i * es, 1)[0];
        c.ref_at_first_bad = decode(t, want.data() + i * es, 1)[0];
        c.max_abs = std::fabs(c.got_at_first_bad - c.ref_at_first_bad);
        *where = what + " first differs at " + describe_pool_element(l, i);
      }
      ++c.bad;
    }
  c.ok = c.bad == 0;
  c.dims = {p.num_pages, p.kv_heads(), p.page_size, p.head_dim};
  c.names = {"page", "h", "row", "d"};
  return c;
}

std::vector<uint8_t> download_bytes(const DeviceBuffer& b) {
  std::vector<uint8_t> out(b.bytes());
  b.download(out.data(), out.size());
  return out;
}

}  // namespace

RunResult run_paged_append(const PagedAppendKernel& k, const PagedShape& s, DType t,
                           const RunOptions& opt) {
  require_paged(s);
  for (int64_t b = 0; b < s.batch(); ++b)
    if (s.seqlens_k[b] < s.seq_q)
      throw UsageError("paged append: sequence " + std::to_string(b) + " holds " +
                       std::to_string(s.seqlens_k[b]) + " keys, fewer than the " +
                       std::to_string(s.seq_q) + " new ones it counts");
  const PagedLayout l = make_layout(s, opt.seed);
  const PagedShape& p = l.shape;
  RunResult r = start_row(k.name, p.str(), t);
  if (!gpu_ready(r, k.min_sm)) return r;
  if (!supports(k.dtypes, t)) {
    r.status = Status::Unsupported;
    r.message = "this kernel has no " + std::string(dtype_name(t)) + " version";
    return r;
  }
  guarded(r, [&] {
    const size_t es = dtype_size(t);
    const int64_t d = p.head_dim, kvh_n = p.kv_heads();
    const int64_t new_numel = p.batch() * kvh_n * p.seq_q * d;
    // The pools hold a seeded pattern everywhere (spare pages and tails too): whatever the kernel
    // changes outside the new keys' rows shows up in the exact comparison.
    DeviceBuffer kp(p.page_numel() * es), vp(p.page_numel() * es);
    fill_pool(l, t, kp, opt.seed, 2, opt, false);
    fill_pool(l, t, vp, opt.seed, 3, opt, false);
    RunOptions draw = opt;
    draw.check = false;  // the new keys are compared as bytes: drawn on the GPU, read back
    std::vector<float> host;
    DeviceBuffer kn = make_input(t, new_numel, 4, draw, &host);
    DeviceBuffer vn = make_input(t, new_numel, 5, draw, &host);
    DeviceBuffer table = upload_ints(l.table), lens = upload_ints(seqlens_int32(p));
    FA_CUDA_CHECK(cudaDeviceSynchronize());
    PagedAppendArgs a;
    a.k_new = kn.data();
    a.v_new = vn.data();
    a.k_pages = kp.data();
    a.v_pages = vp.data();
    a.block_table = table.as<int32_t>();
    a.seqlens_k = lens.as<int32_t>();
    a.shape = p;
    a.dtype = t;
    if (opt.check) {
      std::vector<uint8_t> want_k = download_bytes(kp), want_v = download_bytes(vp);
      const std::vector<uint8_t> new_k = download_bytes(kn), new_v = download_bytes(vn);
      for (int64_t b = 0; b < p.batch(); ++b)
        for (int64_t kvh = 0; kvh < kvh_n; ++kvh)
          for (int64_t i = 0; i < p.seq_q; ++i) {
            const int64_t j = p.seqlens_k[b] - p.seq_q + i;  // key index in the sequence
            const int64_t page = l.table[b * p.max_pages + j / p.page_size];
            const int64_t to = page_offset(p, page, kvh, j % p.page_size) * es;
            const int64_t from = ((b * kvh_n + kvh) * p.seq_q + i) * d * es;
            std::memcpy(want_k.data() + to, new_k.data() + from, d * es);
            std::memcpy(want_v.data() + to, new_v.data() + from, d * es);
          }
      k.run(a, nullptr);
      FA_CUDA_CHECK(cudaDeviceSynchronize());
      std::string where_k, where_v;
      r.checks.push_back(compare_pool("K pages", l, t, download_bytes(kp), want_k, &where_k));
      r.checks.push_back(compare_pool("V pages", l, t, download_bytes(vp), want_v, &where_v));
      r.note = where_k + (where_k.empty() || where_v.empty() ? "" : "; ") + where_v;
      finish_checks(r);
    }
    if (opt.time) {
      // Appending the same keys again writes the same bytes: every timed call does the same work.
      Timing tm = time_gpu([&](cudaStream_t st) { k.run(a, st); }, opt.timing);
      r.ms = tm.median_ms;
      r.gbps = 4.0 * double(new_numel) * double(es) / (r.ms * 1e-3) / 1e9;
      r.pct = 100.0 * r.gbps / copy_bandwidth_gbps();
      r.pct_of = "copy";
    }
  });
  return r;
}

}  // namespace fa
