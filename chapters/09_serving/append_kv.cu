// 09/append_kv: the new tokens' keys and values into the paged cache, before the attention that
// reads them (09/paged_v1_decode, 09/paged_v2_prefill). A new kernel, not a copy of a rung: it is
// the write side of the block table those two read.
//
// The problem (registry.h, PagedAppendArgs). k_new and v_new are [batch, heads_kv, seq_q, D]:
// seq_q new tokens per sequence. Sequence b holds seqlens_k[b] keys counting them already, so its
// new token i becomes key j = seqlens_k[b] - seq_q + i, which lives (shapes.h, PagedShape) in row
// j % page_size of page block_table[b * max_pages + j / page_size], at element
//   ((page * heads_kv + kvh) * page_size + j % page_size) * D
// of each pool, [num_pages, heads_kv, page_size, D]. Nothing else in the pools may change.
//
// How. A row of D elements is kChunks 16-byte chunks (8 at D 64, 16 at D 128 in 16 bits), and a
// group of kChunks consecutive threads copies one row, one chunk of K and one of V per thread:
// the group's loads and stores are whole contiguous 128- or 256-byte rows, as coalesced as a row
// can be, and the rows of a block are consecutive rows of k_new. Where the row goes needs one
// table entry and one length per row, both read through the read-only path (__ldg), which the
// group's threads share (one transaction). Page sizes are powers of two, so j / page_size and
// j % page_size are a shift and a mask (a division by a number known only at run time is ~20
// instructions). Offsets are 64-bit; the row index is 32-bit (the launcher checks that batch *
// heads_kv * seq_q fits), so that its division into (sequence, head, token) is the cheap one.
//
// What is never written: a token whose key would be negative (a sequence shorter than seq_q has
// no place for its first tokens), and a row whose table entry is negative (-1 marks an unused
// entry: a correct table never gives one for a key below seqlens_k[b], and a wrong one must not
// turn into a write before the pool).
//
// The file, top to bottom: AppendParams; pool_row, where a row goes; append_kernel, for rows of
// 64 to 512 bytes; append_any_kernel, for every other head dim; the launchers and the dispatch
// on the row's size; the registration.
//
// Speed: measured in chapters/09_serving/README.md.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <string>

#include "check.h"
#include "dtype.h"
#include "registry.h"

namespace {

constexpr const char* kName = "09/append_kv";
constexpr int kThreads = 128;  // threads per block: kThreads / kChunks rows

struct AppendParams {
  const uint4* k_new;  // [batch, heads_kv, seq_q, kChunks] chunks of 16 bytes
  const uint4* v_new;
  uint4* k_pages;  // [num_pages, heads_kv, page_size, kChunks]
  uint4* v_pages;
  const int32_t* block_table;  // [batch, max_pages]
  const int32_t* seqlens_k;    // [batch], the new tokens included
  int64_t max_pages;
  uint32_t rows;      // batch * heads_kv * seq_q: the rows of k_new (< 2^31, the launcher checks)
  uint32_t heads_kv;  // K/V heads
  uint32_t seq_q;     // new tokens per sequence
  int page_shift;     // log2(page_size)
};

// Row `row` of k_new, (b * heads_kv + kvh) * seq_q + i, is token i of K/V head kvh of sequence
// b: the pool row it goes to, or -1 where it is not written.
__device__ __forceinline__ int64_t pool_row(const AppendParams& p, uint32_t row) {
  const uint32_t bkv = row / p.seq_q, i = row % p.seq_q;
  const uint32_t b = bkv / p.heads_kv, kvh = bkv % p.heads_kv;
  // The key this token becomes.
  const int64_t j = int64_t(__ldg(p.seqlens_k + b)) - int64_t(p.seq_q) + int64_t(i);
  if (j < 0) return -1;  // the sequence is shorter than its new tokens: no place for this one
  const int32_t page = __ldg(p.block_table + int64_t(b) * p.max_pages + (j >> p.page_shift));
  if (page < 0) return -1;  // an unused entry: never a write outside the pool
  const int64_t in_page = (int64_t(1) << p.page_shift) - 1;
  return ((int64_t(page) * p.heads_kv + kvh) << p.page_shift) + (j & in_page);
}

// Thread tid of the block copies chunk tid % kChunks of row blockIdx.x * kRowsPerBlock + tid /
// kChunks of k_new and of v_new.
template <int kChunks>
__global__ void __launch_bounds__(kThreads) append_kernel(const AppendParams p) {
  constexpr int kRowsPerBlock = kThreads / kChunks;
  const uint32_t row = blockIdx.x * uint32_t(kRowsPerBlock) + threadIdx.x / kChunks;
  const int c = int(threadIdx.x % kChunks);
  if (row >= p.rows) return;
  const int64_t dst_row = pool_row(p, row);
  if (dst_row < 0) return;
  const int64_t src = int64_t(row) * kChunks + c;
  const int64_t dst = dst_row * kChunks + c;
  const uint4 k = __ldg(p.k_new + src);
  const uint4 v = __ldg(p.v_new + src);
  p.k_pages[dst] = k;
  p.v_pages[dst] = v;
}

// Rows of any other length (head dims such as 80, 59 or 111): a thread per unit of k_new, a
// 16-byte chunk where the row is a whole number of them, else a 2-byte element, the row found by
// a run-time division (the price of a row length no power of two divides). A grid-stride loop:
// rows * units may pass what one grid holds.
template <class Unit>
__global__ void __launch_bounds__(kThreads) append_any_kernel(const AppendParams p, int units) {
  const Unit* k_new = reinterpret_cast<const Unit*>(p.k_new);
  const Unit* v_new = reinterpret_cast<const Unit*>(p.v_new);
  Unit* k_pages = reinterpret_cast<Unit*>(p.k_pages);
  Unit* v_pages = reinterpret_cast<Unit*>(p.v_pages);
  const int64_t total = int64_t(p.rows) * units;
  for (int64_t u = int64_t(blockIdx.x) * kThreads + threadIdx.x; u < total;
       u += int64_t(gridDim.x) * kThreads) {
    const uint32_t row = uint32_t(u / units);
    const int c = int(u % units);
    const int64_t dst_row = pool_row(p, row);
    if (dst_row < 0) continue;
    const int64_t dst = dst_row * units + c;
    k_pages[dst] = k_new[u];
    v_pages[dst] = v_new[u];
  }
}

template <class Unit>
void launch_any(const AppendParams& p, int64_t row_bytes, cudaStream_t stream) {
  const int units = int(row_bytes / int64_t(sizeof(Unit)));
  const int64_t blocks =
      std::min<int64_t>((int64_t(p.rows) * units + kThreads - 1) / kThreads, int64_t(1) << 20);
  append_any_kernel<Unit><<<unsigned(blocks), kThreads, 0, stream>>>(p, units);
  FA_CHECK_LAUNCH();
}

template <int kChunks>
void launch(const AppendParams& p, cudaStream_t stream) {
  constexpr int kRowsPerBlock = kThreads / kChunks;
  const unsigned blocks = unsigned((int64_t(p.rows) + kRowsPerBlock - 1) / kRowsPerBlock);
  append_kernel<kChunks><<<blocks, kThreads, 0, stream>>>(p);
  FA_CHECK_LAUNCH();
}

bool aligned16(const void* ptr) {
  return reinterpret_cast<uintptr_t>(ptr) % 16 == 0;
}

void append_kv(const fa::PagedAppendArgs& a, cudaStream_t stream) {
  const fa::PagedShape& s = a.shape;
  FA_REQUIRE(s.seq_q >= 0 && s.heads_kv >= 0 && s.heads >= 0 && s.head_dim > 0, "negative size");
  const int64_t heads_kv = s.kv_heads();
  const int64_t rows = s.batch() * heads_kv * s.seq_q;
  if (rows == 0) return;  // nothing to append
  FA_UNSUPPORTED_IF(rows > 0x7fffffff,
                    std::string(kName) + ": batch * heads_kv * seq_q must stay below 2^31");
  FA_UNSUPPORTED_IF(s.page_size < 1 || (s.page_size & (s.page_size - 1)) != 0,
                    std::string(kName) + " takes page sizes that are powers of two, not " +
                        std::to_string(s.page_size));
  FA_REQUIRE(s.max_pages * s.page_size >= s.max_seq_k(),
             "the block table is narrower than the longest sequence");
  FA_UNSUPPORTED_IF(
      !aligned16(a.k_new) || !aligned16(a.v_new) || !aligned16(a.k_pages) || !aligned16(a.v_pages),
      std::string(kName) +
          " copies 16 bytes at a time: k_new, v_new and the pools must be "
          "16-byte aligned");
  const int64_t row_bytes = s.head_dim * int64_t(fa::dtype_size(a.dtype));
  AppendParams p;
  p.k_new = static_cast<const uint4*>(a.k_new);
  p.v_new = static_cast<const uint4*>(a.v_new);
  p.k_pages = static_cast<uint4*>(a.k_pages);
  p.v_pages = static_cast<uint4*>(a.v_pages);
  p.block_table = a.block_table;
  p.seqlens_k = a.seqlens_k;
  p.max_pages = s.max_pages;
  p.rows = uint32_t(rows);
  p.heads_kv = uint32_t(heads_kv);
  p.seq_q = uint32_t(s.seq_q);
  p.page_shift = 0;
  while ((int64_t(1) << p.page_shift) < s.page_size) ++p.page_shift;
  // The row's 16-byte chunks: a power of two that divides the block (D 64 and 128 at 16 bits are
  // 8 and 16; D 32 and 256 come along); any other row by units (append_any_kernel).
  switch (row_bytes) {
    case 64:
      return launch<4>(p, stream);
    case 128:
      return launch<8>(p, stream);
    case 256:
      return launch<16>(p, stream);
    case 512:
      return launch<32>(p, stream);
    default:
      if (row_bytes % 16 == 0) return launch_any<uint4>(p, row_bytes, stream);
      return launch_any<uint16_t>(p, row_bytes, stream);
  }
}

}  // namespace

FA_REGISTER(PagedAppendKernel,
            {kName,
             append_kv,
             "the new tokens' K and V rows into their pages: one thread per 16-byte chunk, a row "
             "per group of threads, its page from the block table (any head dim)",
             {fa::DType::F16, fa::DType::BF16},
             /*min_sm=*/70});
