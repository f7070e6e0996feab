"""attention_fp8(): chapter 07's FP8 (e4m3) forward from PyTorch, and the quantisation it takes.

The kernels (AttentionFwdFp8Kernel, common/registry.h) multiply e4m3 codes on the tensor cores
and take one fp32 scale per block of rows of one head: the value of a code is
float(code) * scale of its block (common/fp8.h, "per-block scaling"). The block sizes are the
kernel's own (list_fp8_kernels(): block_rows_q for Q, block_rows_kv for K and V). This module does
what common/harness_fp8.cpp does on the host, on the GPU with torch:

  quantize_fp8(x, block_rows)  per block of rows of each head: scale = amax / 448 (1 for a block
                               of zeros), codes = e4m3(x / scale), rounded to nearest even and
                               saturated at +-448: bit for bit fp8.h's quantize_e4m3_blocks;
  hadamard_rotate(x, seed)     fp8.h's random Hadamard rotation x R, R = diag(s) H / sqrt(D):
                               the same signs from the same seed, the same butterflies in float64,
                               rounded once to fp32 (rotate_rows);
  attention_fp8(q, k, v, ...)  quantises (or takes codes and scales), lays V out as the kernels
                               read it, V^T per head padded with zero codes to a multiple of 16
                               keys (fp8_vt_stride; each 16 in P order for a kernel that says
                               vt_p_order), and runs the kernel: O bf16, L fp32.

There is no backward: attention_fp8 refuses inputs that require grad (while grad mode is on)
rather than return an O that gradients would silently not flow through.

list_fp8_kernels() and supported_fp8() need no torch; the rest imports it when called.
"""
import ctypes
import math
from collections import namedtuple

from . import _lib

# The kernel attention_fp8 runs when none is named, per head dim: chapter 07's fastest FP8 forward
# for it (H100: at D 128, B 2, H 16, N 8192, the tuning step fp8_t47_lazy_rescale 793.3-798.2
# TFLOP/s full and 709.3-710.5 causal where fp8_t40 ran 751.8-756.6 and 678.5-680.3 in the same
# rounds, 2026-12-07; at D 256, B 2, H 8, fp8_v4 1029.3-1031.5 where fp8_v3 ran 999.1-1000.5,
# 2026-11-26). Both pass the FP8 rule. Each quantises with its own blocks (list_fp8_kernels():
# fp8_t47 one K and V scale per 224 keys and V^T in P order, fp8_v4 per 128). The logs that chose
# them: notes/measured/h100-2026-12-07b/fp8_t40_t45_t47_rounds.log (D 128) and
# notes/measured/h100-2026-11-26g/timed_fp8_v3_r1.log to _r3.log (D 256).
DEFAULT_FP8_FWD = {128: "07/fp8_t47_lazy_rescale", 256: "07/fp8_v4"}

E4M3_MAX = 448.0  # fp8.h kE4M3Max: the largest finite e4m3 value
P_SCALE = 256.0  # fp8.h kFp8PScale: P is stored as e4m3(P~ * 256); the C ABI passes it
VT_ALIGN = 16  # fp8.h kFp8VtAlignBytes: TMA's rule for a row stride, in bytes (= keys)
ACCUMULATOR_REL = 1.0 / 1024.0  # fp8.h kFp8AccumulatorRel (the accuracy rule's floor)

Fp8Kernel = namedtuple("Fp8Kernel",
                       "name head_dims min_sm block_rows_q block_rows_kv vt_p_order about")
Fp8Kernel.__doc__ = ("A registered FP8 forward kernel: head_dims like (128,), min_sm 90 for "
                     "sm_90, the quantisation blocks its scales are read in (one scale per "
                     "block_rows_q query rows and per block_rows_kv keys of one head), and "
                     "vt_p_order: whether it takes V^T's keys in P order (transpose_v).")


def _handle():
    """The library with the FP8 entry points' signatures declared (on the real library; an
    emulation in a test has plain Python methods)."""
    h = _lib.lib()
    if isinstance(h, ctypes.CDLL) and not getattr(h, "fp8_declared", False):
        c_str, i64, vp = ctypes.c_char_p, ctypes.c_int64, ctypes.c_void_p
        h.fa_py_list_fp8_kernels.restype = c_str
        h.fa_py_list_fp8_kernels.argtypes = []
        h.fa_py_supported_fp8.restype = ctypes.c_int
        h.fa_py_supported_fp8.argtypes = [c_str, i64]
        h.fa_py_attention_fwd_fp8.restype = ctypes.c_int
        h.fa_py_attention_fwd_fp8.argtypes = [c_str, vp, vp, vp, vp, vp, vp, vp, vp, i64, i64,
                                              i64, i64, i64, ctypes.c_float, ctypes.c_int,
                                              ctypes.c_int, vp]
        h.fp8_declared = True
    return h


def list_fp8_kernels():
    """Every registered FP8 forward kernel (Fp8Kernel); [] when the build has none (they are
    sm_90a code, built only when the CUDA architectures include 90)."""
    out = []
    for line in _handle().fa_py_list_fp8_kernels().decode("utf-8").splitlines():
        name, dims, min_sm, brq, brkv, vt_order, about = line.split("\t", 6)
        if vt_order not in ("keys", "p_order"):
            raise RuntimeError("the library lists FP8 kernel %s with V^T order '%s' (this module "
                               "knows keys and p_order): rebuild it with this source" %
                               (name, vt_order))
        out.append(Fp8Kernel(name, tuple(int(d) for d in dims.split(",") if d), int(min_sm),
                             int(brq), int(brkv), vt_order == "p_order", about))
    return out


def supported_fp8(kernel, head_dim):
    """None when FP8 kernel `kernel` can run head_dim here; otherwise the exception a launch
    would raise (returned, not raised): ValueError for an unknown name, NoGpuError,
    UnsupportedError."""
    code = _handle().fa_py_supported_fp8(kernel.encode(), int(head_dim))
    if code == _lib.OK:
        return None
    try:
        _lib.raise_for(code, kernel)
    except Exception as e:  # returned, not raised
        return e


def default_fp8_kernel(head_dim):
    """The FP8 forward attention_fp8 runs for head_dim when no kernel is named (DEFAULT_FP8_FWD);
    UnsupportedError for a head dim that has none (a kernel of your own may still be named)."""
    name = DEFAULT_FP8_FWD.get(int(head_dim))
    if name is None:
        dims = ", ".join(str(d) for d in sorted(DEFAULT_FP8_FWD))
        raise _lib.UnsupportedError(
            "no FP8 forward for head dim %d: chapter 07's take D = %s (name a kernel of your own "
            "with kernel=; list_fp8_kernels() lists what is registered)" % (int(head_dim), dims))
    return name


def fp8_kernel(kernel):
    """The Fp8Kernel named `kernel`; ValueError listing the registered ones when there is none."""
    kernels = list_fp8_kernels()
    for k in kernels:
        if k.name == kernel:
            return k
    names = "".join("\n  " + k.name for k in kernels) or " none"
    raise ValueError("no FP8 kernel named '%s'; registered here:%s" % (kernel, names))


def fp8_vt_stride(seq_k):
    """The row stride of V^T in keys (bytes): seq_k rounded up to a multiple of 16."""
    return (seq_k + VT_ALIGN - 1) // VT_ALIGN * VT_ALIGN


# ---- quantisation (fp8.h) -----------------------------------------------------------------------

def _torch():
    import torch
    if not hasattr(torch, "float8_e4m3fn"):
        raise RuntimeError("this torch (%s) has no torch.float8_e4m3fn (torch 2.1 or newer has it)"
                           % torch.__version__)
    return torch


def _check_4d(name, t):
    torch = _torch()
    if not isinstance(t, torch.Tensor):
        raise TypeError("%s must be a torch.Tensor, not %s" % (name, type(t).__name__))
    if t.dim() != 4:
        raise ValueError("%s must be [batch, heads, seq, head_dim] (4 dimensions); its shape is %s"
                         % (name, tuple(t.shape)))


_FLOAT_DTYPES = ("float32", "float16", "bfloat16")


def quantize_fp8(x, block_rows):
    """(codes, scales) of x [B, H, N, D] (fp32, fp16 or bf16) quantised per block of block_rows
    rows of each head, as fp8.h's quantize_e4m3_blocks: scale = amax / 448 of the block (1 for a
    block of zeros), codes = e4m3(x / scale) rounded to nearest even and saturated at +-448.
    codes: torch.float8_e4m3fn [B, H, N, D] (contiguous); scales: fp32 [B, H, ceil(N /
    block_rows)]. The value a code stands for is codes.float() * its block's scale
    (dequantize_fp8). ValueError for a non-finite input, as fp8.h throws for one."""
    torch = _torch()
    _check_4d("x", x)
    if str(x.dtype).replace("torch.", "") not in _FLOAT_DTYPES:
        raise ValueError("quantize_fp8 takes fp32, fp16 or bf16, not %s" % x.dtype)
    block_rows = int(block_rows)
    if block_rows < 1:
        raise ValueError("block_rows must be at least 1 (got %d)" % block_rows)
    b, h, n, d = x.shape
    if d < 1:
        raise ValueError("head_dim must be at least 1")
    xf = x.float()  # exact from fp16 and bf16
    if not bool(torch.isfinite(xf).all()):
        raise ValueError("quantize_fp8: the input has a non-finite value")
    nb = (n + block_rows - 1) // block_rows
    pad = nb * block_rows - n
    if pad:  # zero rows: |0| never raises a block's amax, and their codes are cut off below
        xf = torch.cat([xf, xf.new_zeros(b, h, pad, d)], dim=2)
    blocks = xf.reshape(b, h, nb, block_rows * d)
    amax = blocks.abs().amax(dim=-1)
    # amax / 448 by a true fp32 division, as fp8.h's: torch turns a division by a Python number
    # into a multiplication by its rounded reciprocal, which can differ in the last bit.
    scales = torch.where(amax > 0, amax / torch.full_like(amax, E4M3_MAX), torch.ones_like(amax))
    # x / scale may land a rounding above 448 (fp8.h saturates it back). torch's fp32 -> e4m3
    # conversion rounds to nearest even but does not saturate: from 464 up it gives NaN (e4m3 has
    # no infinity). Clamping first makes it cvt.rn.satfinite's, fp8.h's float_to_e4m3.
    y = (blocks / scales.unsqueeze(-1)).clamp_(-E4M3_MAX, E4M3_MAX)
    codes = y.to(torch.float8_e4m3fn).reshape(b, h, nb * block_rows, d)[:, :, :n].contiguous()
    return codes, scales.contiguous()


def dequantize_fp8(codes, scales, block_rows):
    """The fp32 values codes [B, H, N, D] with scales [B, H, ceil(N / block_rows)] stand for:
    float(code) * scale, one fp32 rounding (fp8.h's Fp8Blocks::value)."""
    torch = _torch()
    n = codes.shape[2]
    per_row = scales.repeat_interleave(int(block_rows), dim=2)[:, :, :n]
    return codes.to(torch.float32) * per_row.unsqueeze(-1)


def _splitmix64(seed, stream):
    """common/random.cpp's derive_seed, in 64-bit unsigned arithmetic."""
    mask = (1 << 64) - 1
    z = (seed + 0x9E3779B97F4A7C15 * (stream + 1)) & mask
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & mask
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & mask
    return z ^ (z >> 31)


def hadamard_signs(d, seed=0):
    """fp8.h's random_hadamard(d, seed).signs as a list of +-1.0: sign i is - when the top bit of
    derive_seed(seed, i) is set."""
    d = int(d)
    if d < 1 or d & (d - 1):
        raise ValueError("the Hadamard rotation needs a power-of-two head dim, got %d" % d)
    seed = int(seed) & ((1 << 64) - 1)
    return [-1.0 if _splitmix64(seed, i) >> 63 else 1.0 for i in range(d)]


def hadamard_rotate(x, seed=0):
    """x R for every row of x [..., D]: R = diag(s) H / sqrt(D), H the Sylvester Hadamard matrix,
    s hadamard_signs(D, seed). fp8.h's rotate_rows operation for operation: the signs on x in
    float64, the same butterflies (each stage pairs indices that differ in one bit: a + b, a - b),
    times 1/sqrt(D), rounded once to fp32. (Q R)(K R)^T = Q K^T: only the quantisation sees it."""
    torch = _torch()
    d = x.shape[-1]
    signs = torch.tensor(hadamard_signs(d, seed), dtype=torch.float64, device=x.device)
    y = x.to(torch.float64) * signs
    lead = y.shape[:-1]
    length = 1
    while length < d:
        # Indices j and j + length of each group of 2 * length: a + b first, then a - b.
        g = y.reshape(*lead, d // (2 * length), 2, length)
        a, b = g[..., 0, :], g[..., 1, :]
        y = torch.stack((a + b, a - b), dim=-2).reshape(*lead, d)
        length *= 2
    inv_sqrt_d = 1.0 / math.sqrt(d)
    return (y * torch.full_like(y, inv_sqrt_d)).to(torch.float32)


# P order (fp8.h, fp8_vt_key_at): slot s of every 16 keys of a V^T row holds key VT_P_ORDER[s].
VT_P_ORDER = (0, 1, 8, 9, 2, 3, 10, 11, 4, 5, 12, 13, 6, 7, 14, 15)


def transpose_v(v_codes, p_order=False):
    """V^T per head as the kernels read it: [B, H, D, fp8_vt_stride(N)] uint8 codes, row c of a
    head holding V[0..N-1][c] and then zero codes (fp8.h's fp8_transpose_v); with p_order, each
    16 of a row's slots hold their keys in P order (VT_P_ORDER), for a kernel whose vt_p_order
    is set."""
    torch = _torch()
    b, h, n, d = v_codes.shape
    stride = fp8_vt_stride(n)
    vt = torch.zeros((b, h, d, stride), dtype=torch.uint8, device=v_codes.device)
    vt[:, :, :, :n] = v_codes.view(torch.uint8).transpose(2, 3)
    if p_order:  # the stride is a multiple of 16: whole groups, padding included
        order = torch.tensor(VT_P_ORDER, dtype=torch.long, device=vt.device)
        groups = torch.arange(0, stride, len(VT_P_ORDER), device=vt.device)
        keys = (groups.unsqueeze(1) + order).flatten()
        vt = vt.index_select(3, keys).contiguous()
    return vt


# ---- the forward --------------------------------------------------------------------------------

def _check_scales(name, s, b, h, n, block_rows, device):
    torch = _torch()
    want = (b, h, (n + block_rows - 1) // block_rows)
    if not isinstance(s, torch.Tensor):
        raise TypeError("%s must be a torch.Tensor, not %s" % (name, type(s).__name__))
    if tuple(s.shape) != want or s.dtype != torch.float32:
        raise ValueError("%s must be fp32 %s (one scale per %d rows of each head); it is %s %s"
                         % (name, want, block_rows, s.dtype, tuple(s.shape)))
    if s.device != device:
        raise ValueError("%s is on %s, the codes on %s" % (name, s.device, device))
    return s.contiguous()


def attention_fp8(q, k, v, *, causal=False, scale=None, kernel=None, q_scale=None, k_scale=None,
                  v_scale=None, rotate=False, rotation_seed=0):
    """softmax(scale * q k^T [+ bottom-right causal mask]) v on an FP8 kernel of chapter 07.

    q [B, H, Nq, D], k and v [B, H, Nk, D] on one CUDA device, either
      - fp32, fp16 or bf16 (one dtype): quantised here with the kernel's block sizes
        (quantize_fp8; with rotate=True, q and k are first rotated by fp8.h's random Hadamard
        rotation of seed rotation_seed, which leaves q k^T unchanged but lowers outliers' block
        scales; D must be a power of two), or
      - torch.float8_e4m3fn codes with their fp32 scales q_scale [B, H, ceil(Nq / block_rows_q)],
        k_scale and v_scale [B, H, ceil(Nk / block_rows_kv)] (quantize_fp8's output; the block
        sizes are the kernel's: list_fp8_kernels()).
    kernel: a registered FP8 forward; by default the fastest for D (default_fp8_kernel:
    07/fp8_t47_lazy_rescale at D 128, 07/fp8_v4 at D 256). scale: 1/sqrt(D) by default.
    No grouped K/V heads, no window. Non-contiguous inputs are copied.

    Returns (O, L): O bf16 [B, H, Nq, D], L fp32 [B, H, Nq] (natural-log logsumexp of each row
    of scale * q k^T on the quantised values; -inf for a row that sees no key).
    Not differentiable: inputs that require grad (with grad mode on) are refused.
    Refusals raise TypeError / ValueError (bad arguments), flash_from_scratch.NoGpuError or
    UnsupportedError (no GPU, or no version of the kernel for this head dim / GPU), in the
    harness's words.
    """
    torch = _torch()
    from . import _common
    from ._common import dense as _dense, device_index as _index, stream as _stream
    for name, t in (("q", q), ("k", k), ("v", v)):
        _check_4d(name, t)
        if t.device.type not in _common.KERNEL_DEVICES:
            raise ValueError("%s is on %s: the kernels take CUDA tensors" % (name, t.device))
    if not (q.device == k.device == v.device):
        raise ValueError("q, k and v must be on one device; they are on %s, %s and %s"
                         % (q.device, k.device, v.device))
    if not (q.dtype == k.dtype == v.dtype):
        raise ValueError("q, k and v must have one dtype; they are %s, %s and %s"
                         % (q.dtype, k.dtype, v.dtype))
    b, h, nq, d = q.shape
    nk = k.shape[2]
    if tuple(k.shape) != (b, h, nk, d) or v.shape != k.shape:
        raise ValueError("shapes must be q [B, H, Nq, D], k and v [B, H, Nk, D] (the FP8 forward "
                         "takes no grouped K/V heads); they are %s, %s and %s"
                         % (tuple(q.shape), tuple(k.shape), tuple(v.shape)))
    if min(b, h, nq, nk, d) < 1:  # the C ABI's words for the same refusal
        raise ValueError("batch, heads, seq_q, seq_k and head_dim must be at least 1 (got %d, "
                         "%d, %d, %d, %d)" % (b, h, nq, nk, d))
    if torch.is_grad_enabled() and any(t.requires_grad for t in (q, k, v)):
        raise ValueError("attention_fp8 has no backward: pass tensors that do not require grad "
                         "(detach them, or call it under torch.no_grad())")
    is_fp8 = q.dtype == torch.float8_e4m3fn
    scales = (q_scale, k_scale, v_scale)
    if is_fp8:
        if any(s is None for s in scales):
            raise ValueError("float8_e4m3fn inputs need their scales: q_scale, k_scale and "
                             "v_scale (quantize_fp8's second output)")
        if rotate:
            raise ValueError("rotate=True rotates q and k before quantising them: pass fp32, "
                             "fp16 or bf16 inputs (or rotate and quantise them yourself)")
    else:
        if str(q.dtype).replace("torch.", "") not in _FLOAT_DTYPES:
            raise ValueError("%s is not a dtype attention_fp8 takes (fp32, fp16, bf16, or "
                             "float8_e4m3fn codes with their scales)" % q.dtype)
        if any(s is not None for s in scales):
            raise ValueError("q_scale, k_scale and v_scale go with float8_e4m3fn codes; for "
                             "%s inputs the scales are computed here" % q.dtype)
    scale = _common.scale_arg(scale)
    kernel = default_fp8_kernel(d) if kernel is None else kernel
    # The kernel and this machine first (unknown name, no GPU, no such head dim), then the work.
    err = supported_fp8(kernel, d)
    if err is not None:
        raise err
    info = fp8_kernel(kernel)
    brq, brkv = info.block_rows_q, info.block_rows_kv
    if is_fp8:
        q_scale = _check_scales("q_scale", q_scale, b, h, nq, brq, q.device)
        k_scale = _check_scales("k_scale", k_scale, b, h, nk, brkv, q.device)
        v_scale = _check_scales("v_scale", v_scale, b, h, nk, brkv, q.device)
        qc, kc, vc = q, k, v
    else:
        if rotate:
            q, k = hadamard_rotate(q, rotation_seed), hadamard_rotate(k, rotation_seed)
        qc, q_scale = quantize_fp8(q, brq)
        kc, k_scale = quantize_fp8(k, brkv)
        vc, v_scale = quantize_fp8(v, brkv)
    # The codes as bytes, contiguous and 16-byte aligned (TMA's rule for a base address).
    qb, kb = _dense(qc.view(torch.uint8)), _dense(kc.view(torch.uint8))
    vt = transpose_v(vc, info.vt_p_order)
    o = torch.empty((b, h, nq, d), dtype=torch.bfloat16, device=q.device)
    lse = torch.empty((b, h, nq), dtype=torch.float32, device=q.device)
    code = _handle().fa_py_attention_fwd_fp8(
        kernel.encode(), qb.data_ptr(), kb.data_ptr(), vt.data_ptr(), q_scale.data_ptr(),
        k_scale.data_ptr(), v_scale.data_ptr(), o.data_ptr(), lse.data_ptr(), b, h, nq, nk, d,
        float(scale), int(bool(causal)), _index(q.device), _stream(q.device))
    _lib.raise_for(code, kernel)
    return o, lse
