"""The launches: one function per C ABI entry point, on tensors already checked, contiguous and
allocated by the caller. Nothing here allocates the outputs, picks a kernel or knows about
autograd (ops.py and serving.py do); what the benchmarks time is exactly these calls.

Layouts (notes/conventions.md): fixed length q, o [B, H, Nq, D], k, v [B, H_kv, Nk, D], lse fp32
[B, H, Nq]; packed batches head-major, q, o [H, total_q, D], k, v [H_kv, total_k, D], lse fp32
[H, total_q] (VarlenBatch holds the offsets); paged caches [num_pages, H_kv, page_size, D].
"""
import torch

from . import _lib
from ._common import (check_heads, check_same, check_tensor, dense, device_index, dtype_name,
                      group_expand, group_sum, scale_arg, stream, takes_grouped_heads,
                      window_arg)

INT32_MAX = 2 ** 31 - 1


# ---- Integer arguments -------------------------------------------------------------------------

def is_int_dtype(dtype):
    return dtype in (torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8)


def host_ints(x, name):
    """A list of Python ints from a 1-D integer tensor (copied to the host) or a sequence."""
    if isinstance(x, torch.Tensor):
        if x.dim() != 1:
            raise ValueError("%s must be 1-D; its shape is %s" % (name, tuple(x.shape)))
        if not is_int_dtype(x.dtype):
            raise ValueError("%s must hold integers (int32, as FlashAttention's); it is %s"
                             % (name, x.dtype))
        return [int(e) for e in x.detach().to("cpu").tolist()]
    try:
        return [int(e) for e in x]
    except (TypeError, ValueError):
        raise ValueError("%s must be a 1-D integer tensor or a sequence of ints, not %s"
                         % (name, type(x).__name__)) from None


def device_int32(x, device, name):
    """x as a contiguous int32 tensor on `device` (x itself when it already is one)."""
    if isinstance(x, torch.Tensor):
        if x.is_cuda and x.device != device:
            raise ValueError("%s is on %s, the tensors on %s" % (name, x.device, device))
        if x.device == device and x.dtype == torch.int32 and x.is_contiguous():
            return x
        return x.to(device=device, dtype=torch.int32).contiguous()
    return torch.tensor(list(x), dtype=torch.int32, device=device)


def check_offsets(cu, name, total):
    if len(cu) < 2:
        raise ValueError("%s needs batch + 1 >= 2 entries; it has %d" % (name, len(cu)))
    if cu[0] != 0:
        raise ValueError("%s[0] must be 0; it is %d" % (name, cu[0]))
    for b in range(len(cu) - 1):
        if cu[b + 1] < cu[b]:
            raise ValueError("%s must not decrease: entry %d is %d after %d"
                             % (name, b + 1, cu[b + 1], cu[b]))
    if total is not None and cu[-1] != total:
        raise ValueError("%s ends at %d, but the tensor has %d tokens (they must agree)"
                         % (name, cu[-1], total))
    if cu[-1] > INT32_MAX:
        raise ValueError("%s: %d tokens in all; the kernels' offsets are int32" % (name, cu[-1]))


# ---- Variable-length batches -------------------------------------------------------------------

class VarlenBatch:
    """The lengths of a variable-length batch, prepared once for the launchers: the cumulative
    offsets on the host (int64, read by the launcher) and on the device (int32, read by the
    kernel). Make it from offsets or from lengths:

        VarlenBatch(cu_seqlens_q, cu_seqlens_k, device)        # tensors or lists of batch + 1
        VarlenBatch.from_lengths([5, 0, 17], [5, 3, 17], device)
    """

    def __init__(self, cu_seqlens_q, cu_seqlens_k=None, device="cuda", total_q=None,
                 total_k=None):
        device = torch.device(device)
        if device.type == "cuda" and device.index is None:
            device = torch.device("cuda", torch.cuda.current_device())
        if cu_seqlens_k is None:
            cu_seqlens_k = cu_seqlens_q
        cu_q = host_ints(cu_seqlens_q, "cu_seqlens_q")
        cu_k = host_ints(cu_seqlens_k, "cu_seqlens_k")
        check_offsets(cu_q, "cu_seqlens_q", total_q)
        check_offsets(cu_k, "cu_seqlens_k", total_k)
        if len(cu_q) != len(cu_k):
            raise ValueError("cu_seqlens_q and cu_seqlens_k must have one length (batch + 1); "
                             "they have %d and %d" % (len(cu_q), len(cu_k)))
        self.device = device
        self.cu_q, self.cu_k = cu_q, cu_k
        self.host_q, self.host_k = _lib.HostInt64(cu_q), _lib.HostInt64(cu_k)
        # The same offsets as CPU tensors: what the operators take (serving.py).
        self.cpu_q = torch.tensor(cu_q, dtype=torch.int64)
        self.cpu_k = torch.tensor(cu_k, dtype=torch.int64)
        self.dev_q = device_int32(cu_seqlens_q, device, "cu_seqlens_q")
        self.dev_k = (self.dev_q if cu_seqlens_k is cu_seqlens_q
                      else device_int32(cu_seqlens_k, device, "cu_seqlens_k"))

    @classmethod
    def from_lengths(cls, seqlens_q, seqlens_k=None, device="cuda"):
        seqlens_k = seqlens_q if seqlens_k is None else seqlens_k

        def offsets(lengths, name):
            lengths = host_ints(lengths, name)
            if any(n < 0 for n in lengths):
                raise ValueError("%s must be >= 0: %s" % (name, lengths))
            cu = [0]
            for n in lengths:
                cu.append(cu[-1] + n)
            return cu

        return cls(offsets(seqlens_q, "seqlens_q"), offsets(seqlens_k, "seqlens_k"), device)

    @classmethod
    def equal(cls, batch, seq_q, seq_k, device):
        """B sequences of seq_q queries and seq_k keys each: a fixed-length batch as a packed one."""
        return cls([i * seq_q for i in range(batch + 1)], [i * seq_k for i in range(batch + 1)],
                   device)

    @property
    def batch(self):
        return len(self.cu_q) - 1

    @property
    def seqlens_q(self):
        return [b - a for a, b in zip(self.cu_q, self.cu_q[1:])]

    @property
    def seqlens_k(self):
        return [b - a for a, b in zip(self.cu_k, self.cu_k[1:])]

    @property
    def total_q(self):
        return self.cu_q[-1]

    @property
    def total_k(self):
        return self.cu_k[-1]

    @property
    def max_seqlen_q(self):
        return max(self.seqlens_q)

    @property
    def max_seqlen_k(self):
        return max(self.seqlens_k)


def check_packed(plan, q, k, v):
    """Head-major packed q [H, total_q, D], k, v [H_kv, total_k, D] against the batch."""
    for name, t in (("q", q), ("k", k), ("v", v)):
        check_tensor(t, name, 3, "[heads, total, head_dim] (head-major packed)")
    dt = check_same((("q", q), ("k", k), ("v", v)))
    h, tq, d = q.shape
    hkv, tk = k.shape[0], k.shape[1]
    if k.shape != (hkv, tk, d) or v.shape != k.shape:
        raise ValueError("shapes must be q [H, total_q, D], k and v [H_kv, total_k, D]; they "
                         "are %s, %s and %s" % (tuple(q.shape), tuple(k.shape), tuple(v.shape)))
    check_heads(h, hkv, "q, k")
    if tq != plan.total_q or tk != plan.total_k:
        raise ValueError("q has %d tokens and k %d; the offsets say %d and %d"
                         % (tq, tk, plan.total_q, plan.total_k))
    if q.device != plan.device:
        raise ValueError("the tensors are on %s, the offsets on %s" % (q.device, plan.device))
    return dt, h, hkv, d


def varlen_fwd_into(plan, q, k, v, o, lse, causal=False, scale=None, window=(-1, -1),
                    kernel="09/v1_varlen"):
    """Launches varlen forward `kernel` on head-major packed tensors, writing o (like q) and
    lse (fp32 [H, total_q]); allocates and copies nothing (what the benchmarks time). q, k, v,
    o, lse contiguous and 16-byte aligned on plan.device."""
    dt, h, hkv, d = check_packed(plan, q, k, v)
    (left, right), _ = window_arg(window, causal)
    _lib.varlen_fwd(kernel, q.data_ptr(), k.data_ptr(), v.data_ptr(), o.data_ptr(),
                    lse.data_ptr(), plan.dev_q.data_ptr(), plan.dev_k.data_ptr(), plan.host_q,
                    plan.host_k, h, hkv, d, dt, scale_arg(scale), bool(causal), left, right,
                    device_index(q.device), stream(q.device))


def varlen_bwd_into(plan, q, k, v, o, do, lse, dq, dk, dv, delta, workspace, causal=False,
                    scale=None, window=(-1, -1), kernel="09/bwd_v1_varlen"):
    """Launches varlen backward `kernel` on head-major packed tensors (K, V, dK and dV with H_kv
    heads only where the kernel takes grouped heads, takes_grouped_heads). workspace is fp32 of q.numel() floats and must be zero before
    every call (workspace.zero_())."""
    dt, h, hkv, d = check_packed(plan, q, k, v)
    (left, right), _ = window_arg(window, causal)
    _lib.varlen_bwd(kernel, q.data_ptr(), k.data_ptr(), v.data_ptr(), o.data_ptr(),
                    do.data_ptr(), lse.data_ptr(), dq.data_ptr(), dk.data_ptr(), dv.data_ptr(),
                    delta.data_ptr(), workspace.data_ptr(), plan.dev_q.data_ptr(),
                    plan.dev_k.data_ptr(), plan.host_q, plan.host_k, h, hkv, d, dt,
                    scale_arg(scale), bool(causal), left, right, device_index(q.device),
                    stream(q.device))


# ---- Fixed length ------------------------------------------------------------------------------

def attention_fwd_into(q, k, v, o, lse, causal=False, scale=None, kernel="05/v5_fewer_instructions"):
    """Launches fixed-length forward `kernel` on q [B, H, Nq, D], k, v [B, H_kv, Nk, D], writing
    o (like q) and lse (fp32 [B, H, Nq]); allocates and copies nothing (what the benchmarks
    time). All contiguous and 16-byte aligned on one CUDA device."""
    b, h, nq, d = q.shape
    hkv, nk = k.shape[1], k.shape[2]
    args = (q.data_ptr(), k.data_ptr(), v.data_ptr(), o.data_ptr(), lse.data_ptr())
    dev = (device_index(q.device), stream(q.device))
    if hkv == h:
        _lib.attention_fwd(kernel, *args, b, h, nq, nk, d, dtype_name(q.dtype),
                           scale_arg(scale), bool(causal), *dev)
    else:
        _lib.attention_fwd_gqa(kernel, *args, b, h, hkv, nq, nk, d, dtype_name(q.dtype),
                               scale_arg(scale), bool(causal), *dev)


def attention_bwd_into(q, k, v, o, do, lse, dq, dk, dv, delta, workspace, causal=False,
                       scale=None, kernel="06/v2_mma"):
    """Launches fixed-length backward `kernel`: k, v, dk, dv with H heads, or with H_kv heads
    when the kernel takes grouped heads (it sums dk, dv over each group). workspace is fp32 of
    q.numel() floats; the library zeroes it before the kernels."""
    b, h, nq, d = q.shape
    hkv, nk = k.shape[1], k.shape[2]
    args = (q.data_ptr(), k.data_ptr(), v.data_ptr(), o.data_ptr(), do.data_ptr(),
            lse.data_ptr(), dq.data_ptr(), dk.data_ptr(), dv.data_ptr(), delta.data_ptr(),
            workspace.data_ptr())
    tail = (nq, nk, d, dtype_name(q.dtype), scale_arg(scale), bool(causal),
            device_index(q.device), stream(q.device))
    if hkv == h:
        _lib.attention_bwd(kernel, *args, b, h, *tail)
    else:
        _lib.attention_bwd_gqa(kernel, *args, b, h, hkv, *tail)


def pack(t):
    """[B, H, N, D] as the head-major packed [H, B * N, D] (a view for B = 1, else a copy)."""
    b, h, n, d = t.shape
    if b == 1:
        return t[0]
    return t.transpose(0, 1).reshape(h, b * n, d)


def unpack(t, b):
    """[H, B * N, ...] back to [B, H, N, ...] (contiguous)."""
    h, bn = t.shape[0], t.shape[1]
    out = t.reshape((h, b, bn // b) + tuple(t.shape[2:])).transpose(0, 1)
    return out.contiguous()


def fixed_fwd(kind, kernel, q, k, v, causal, scale, window):
    """(O, L) of a fixed-length problem on forward `kernel` of registry `kind`: 'fwd' launches it
    on q, k, v as they are; 'varlen_fwd' runs the batch as a packed one of B equal lengths (a
    copy in and out for B > 1). q, k, v dense; O like q, L fp32 [B, H, Nq]."""
    b, h, nq, d = q.shape
    nk = k.shape[2]
    if kind == "fwd":
        o = torch.empty_like(q)
        lse = torch.empty((b, h, nq), dtype=torch.float32, device=q.device)
        attention_fwd_into(q, k, v, o, lse, causal, scale, kernel)
        return o, lse
    if b * max(nq, nk) > INT32_MAX:
        raise ValueError("batch * seq = %d tokens: the varlen kernels' offsets are int32"
                         % (b * max(nq, nk)))
    plan = VarlenBatch.equal(b, nq, nk, q.device)
    qp, kp, vp = (dense(pack(t)) for t in (q, k, v))
    op = torch.empty_like(qp)
    lp = torch.empty((h, b * nq), dtype=torch.float32, device=q.device)
    varlen_fwd_into(plan, qp, kp, vp, op, lp, causal, scale, window, kernel)
    return unpack(op, b), unpack(lp, b)


def fixed_bwd(kind, kernel, do, q, k, v, o, lse, causal, scale, window):
    """(dQ, dK, dV) of a fixed-length problem on backward `kernel` of registry `kind` ('bwd', or
    'varlen_bwd' on the batch packed as fixed_fwd packs it). Grouped heads: a kernel that takes
    them (chapter 07's 07/bwd_v1 .. v6, chapter 09's Hopper backwards) gets K and V as they are
    and sums dK, dV over each group itself, so the memory is about the MHA backward's or less; for any other, K and V are
    repeated over the group and the group's dK, dV summed in fp32 (group_sum)."""
    b, h, nq, d = q.shape
    hkv = k.shape[1]
    # A kernel that takes grouped heads sums dK, dV over each group itself: K, V as they are.
    in_kernel = hkv != h and takes_grouped_heads(kind, kernel, dtype_name(q.dtype), d)
    ke, ve = (k, v) if in_kernel else (group_expand(k, h, 1), group_expand(v, h, 1))
    if kind == "bwd":
        dq = torch.empty_like(q)
        dk, dv = torch.empty_like(ke), torch.empty_like(ve)
        delta = torch.empty((b, h, nq), dtype=torch.float32, device=q.device)
        workspace = torch.empty(q.numel(), dtype=torch.float32, device=q.device)  # zeroed there
        attention_bwd_into(q, ke, ve, o, do, lse, dq, dk, dv, delta, workspace, causal, scale,
                           kernel)
    else:
        nk = k.shape[2]
        plan = VarlenBatch.equal(b, nq, nk, q.device)
        qp, kp, vp, op, dop = (dense(pack(t)) for t in (q, ke, ve, o, do))
        lp = dense(lse.transpose(0, 1).reshape(h, b * nq))
        dqp, dkp, dvp = torch.empty_like(qp), torch.empty_like(kp), torch.empty_like(vp)
        delta = torch.empty_like(lp)
        workspace = torch.zeros(qp.numel(), dtype=torch.float32, device=q.device)
        varlen_bwd_into(plan, qp, kp, vp, op, dop, lp, dqp, dkp, dvp, delta, workspace, causal,
                        scale, window, kernel)
        dq, dk, dv = unpack(dqp, b), unpack(dkp, b), unpack(dvp, b)
    return dq, group_sum(dk, hkv, 1, q.dtype), group_sum(dv, hkv, 1, q.dtype)


# ---- The paged KV cache ------------------------------------------------------------------------

class PagedLengths:
    """seqlens_k of a paged batch, on the host (int64, for the launcher) and on the device
    (int32, for the kernel), prepared once."""

    def __init__(self, seqlens_k, device):
        self.values = host_ints(seqlens_k, "seqlens_k")
        self.host = _lib.HostInt64(self.values)
        self.dev = device_int32(seqlens_k, torch.device(device), "seqlens_k")

    @classmethod
    def from_copies(cls, dev, host):
        """From the operators' two copies, int32 on the device and int64 on the CPU, as they are."""
        lengths = cls.__new__(cls)
        lengths.values = host.tolist()
        lengths.host = _lib.HostInt64(lengths.values)
        lengths.dev = dev
        return lengths


def paged_fwd_into(q, k_pages, v_pages, o, lse, block_table, lengths, causal=False, scale=None,
                   kernel="09/paged_v1_decode"):
    """Launches paged forward `kernel` (block_table int32 on the device, lengths a PagedLengths),
    writing o and lse; allocates and copies nothing (what the benchmarks time)."""
    b, h, seq_q, d = q.shape
    num_pages, hkv, page_size, _ = k_pages.shape
    _lib.paged_fwd(kernel, q.data_ptr(), k_pages.data_ptr(), v_pages.data_ptr(), o.data_ptr(),
                   lse.data_ptr(), block_table.data_ptr(), lengths.dev.data_ptr(), lengths.host,
                   h, hkv, seq_q, d, page_size, num_pages, block_table.shape[1],
                   dtype_name(q.dtype), scale_arg(scale), bool(causal), device_index(q.device),
                   stream(q.device))


def paged_append_into(k_new, v_new, k_pages, v_pages, block_table, lengths, kernel):
    """Launches append `kernel`: k_new, v_new [B, H_kv, seq_q, D] into the pages, in place."""
    b, hkv, seq_q, d = k_new.shape
    num_pages, _, page_size, _ = k_pages.shape
    _lib.paged_append(kernel, k_new.data_ptr(), v_new.data_ptr(), k_pages.data_ptr(),
                      v_pages.data_ptr(), block_table.data_ptr(), lengths.dev.data_ptr(),
                      lengths.host, hkv, seq_q, d, page_size, num_pages, block_table.shape[1],
                      dtype_name(k_pages.dtype), device_index(k_pages.device),
                      stream(k_pages.device))
