"""The kernels the package calls by default, by registry name (no torch, no library needed).

The names are looked up in the library when a function is called, never at import: a build
without one of them still imports, and the call says which kernel is missing and lists the ones
registered ("no kernel named '09/v2_window'; registered here: ...").
"""

AUTO = "auto"  # attention(kernel=AUTO): pick by the problem (below)

# Fixed-length attention (chapters 05, 06): equal lengths, heads_kv == heads, no window.
DEFAULT_FWD = "05/v5_fewer_instructions"
DEFAULT_BWD = "06/v2_mma"
FP32_FWD = "05/v1_scalar_fp32"
FP32_BWD = "06/v1_fp32"

# Chapter 09: variable-length batches (GQA in the forward), the sliding window, the paged cache.
VARLEN_FWD = "09/v1_varlen"          # varlen forward, grouped K/V heads, no window
VARLEN_WINDOW_FWD = "09/v2_window"   # varlen forward with a sliding window, grouped K/V heads
VARLEN_BWD = "09/bwd_v1_varlen"      # varlen backward, heads_kv == heads, no window
VARLEN_WINDOW_BWD = "09/bwd_v2_window"  # varlen backward with a sliding window
HOPPER_VARLEN_FWD = "09/hopper_v3_varlen_persistent"  # varlen forward on wgmma + TMA, GQA (sm_90a)
PAGED_DECODE = "09/paged_v1_decode"  # paged forward written for decoding (seq_q <= 16)
PAGED_PREFILL = "09/paged_v2_prefill"  # paged forward for chunks of queries
HOPPER_PAGED_PREFILL = "09/hopper_paged_prefill_persistent"  # chunks on 07/t52, D up to 256 (sm_90a)
APPEND_KV = "09/append_kv"           # new keys and values into the pages

DECODE_SEQ_Q = 16  # kDecodeSeqQ (common/harness.h): the paged decode kernel's seq_q range
