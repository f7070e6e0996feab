"""Chapter 07's FP8 (e4m3) forward from PyTorch: flash_from_scratch.attention_fp8 and the
quantisation it does (flash_from_scratch.fp8), against float64.

The accuracy rule is common/fp8.h's, as common/harness_fp8.cpp applies it: quantise Q, K, V once;
O_ref64, L_ref64 = attention in float64 on the dequantised values (codes.float() * scale), i.e. on
exactly the numbers the kernel multiplies; the naive FP8 forward (fp8.h's
attention_forward_fp8_naive_head, written here in torch) on the same codes, its O rounded to bf16
as the kernel's is. Then
    max |O - O_ref64| <= 2 max |O_naive - O_ref64| + 1e-4 + 2^-10 * bound * max |O_ref64|
    max |L - L_ref64| <= 2 max |L_naive - L_ref64| + 1e-4 + 2^-10 * bound
(bound: fp8.h's fp8_accumulator_bound, |scale| * max_i sum_d |Q_id| max_j |K_jd|, per head, the
largest over the heads: every partial sum and product the FP8 accumulator of S meets; 2^-10 is
fp8.h's kFp8AccumulatorRel); an infinite L_ref64 (a row that sees no key) must be matched
exactly.

Three layers, as tests/test_serving.py:
  - the ctypes layer (no torch, no GPU): the FP8 kernel list and the refusals;
  - the Python layer (torch on the CPU, no GPU): the quantisation bit for bit against a port of
    fp8.h's float_to_e4m3, the rotation against its matrix, and attention_fp8 with the library
    replaced by an emulation that runs the naive FP8 forward from the raw pointers (the layouts,
    V^T's padding, the scales' order and block sizes);
  - the kernels (torch, an sm_90 GPU, the library): every registered FP8 kernel.
"""
import ctypes
import math

import pytest

from conftest import fa, library_or_skip, torch_cuda_or_skip

SEED = 20261127
INPUT_MEAN, INPUT_STD = 0.5, 1.0  # common/random.h's defaults
D = 128
# (B, H, Nq, Nk): one key, ragged tails, Nq > Nk (causal rows that see no key), a long one.
SHAPES = [(1, 2, 1, 1), (1, 2, 17, 33), (2, 3, 129, 127), (1, 2, 1000, 1000)]


def fp8_kernels():
    try:
        return fa.list_fp8_kernels()
    except fa.LibraryNotFound:
        return []


KERNELS = fp8_kernels()
NONE = [pytest.param(None, marks=pytest.mark.skip(
    reason="no FP8 kernel is registered (sm_90a code) or libfa_python.so is not built"))]


def kernel_id(k):
    return getattr(k, "name", "none")


def torch_fp8_or_skip():
    torch = pytest.importorskip("torch", reason="torch is not installed")
    if not hasattr(torch, "float8_e4m3fn"):
        pytest.skip("this torch has no torch.float8_e4m3fn")
    return torch


# ---- the ctypes layer --------------------------------------------------------------------------

def test_list_fp8_kernels():
    library_or_skip()
    for k in KERNELS:
        assert k.name.startswith("07/") and k.head_dims and k.min_sm >= 90, k
        assert k.block_rows_q >= 1 and k.block_rows_kv >= 1 and k.about, k
    names = [k.name for k in KERNELS]
    for d, name in fa.DEFAULT_FP8_FWD.items():  # a default runs the head dim it is the default of
        if name in names:
            k = KERNELS[names.index(name)]
            assert d in k.head_dims and k.min_sm == 90, k


def test_default_fp8_kernel():
    assert fa.default_fp8_kernel(128) == "07/fp8_t47_lazy_rescale"
    assert fa.default_fp8_kernel(256) == "07/fp8_v4"
    with pytest.raises(fa.UnsupportedError, match="no FP8 forward for head dim 64.*D = 128, 256"):
        fa.default_fp8_kernel(64)


def test_refusals_without_a_gpu():
    library_or_skip()
    err = fa.supported_fp8("07/nope", 128)
    assert isinstance(err, ValueError) and "no kernel named '07/nope'" in str(err)
    if not KERNELS:
        pytest.skip("no FP8 kernel in this build")
    name = KERNELS[0].name
    if fa.describe_gpu().startswith("no GPU"):
        assert isinstance(fa.supported_fp8(name, 128), fa.NoGpuError)
    else:
        err = fa.supported_fp8(name, 48)
        assert isinstance(err, fa.UnsupportedError), err


# ---- references (torch) ------------------------------------------------------------------------

def softmax_scale(torch, d, scale=None):
    """AttentionShape::softmax_scale(): 1/sqrt(d) as an fp32, or the given scale as an fp32."""
    from flash_from_scratch import _common
    return torch.tensor(_common.softmax_scale(d, scale), dtype=torch.float32).item()


def naive_fp8(torch, qc, kc, vc, qs, ks, vs, brq, brkv, causal, scale):
    """fp8.h's attention_forward_fp8_naive_head on all heads, fp32: S = (codes_Q . codes_K) *
    (scale_K(j) * (scale_Q(i) * softmax scale)); m = max S; P~ = exp(S - m); l = sum P~ (before
    P is rounded); O = sum_j e4m3(P~ * 256) V_j / (256 l), V_j dequantised; L = m + log l."""
    nq, nk = qc.shape[2], kc.shape[2]
    matmul = torch.backends.cuda.matmul
    tf32, matmul.allow_tf32 = matmul.allow_tf32, False  # fp32 products and sums, as fp8.h's
    try:
        return _naive_fp8(torch, qc, kc, vc, qs, ks, vs, brq, brkv, causal, scale, nq, nk)
    finally:
        matmul.allow_tf32 = tf32


def _naive_fp8(torch, qc, kc, vc, qs, ks, vs, brq, brkv, causal, scale, nq, nk):
    s = qc.float() @ kc.float().transpose(-1, -2)  # e4m3 products are exact in fp32
    q_factor = qs.repeat_interleave(brq, dim=2)[:, :, :nq] * scale
    k_row = ks.repeat_interleave(brkv, dim=2)[:, :, :nk]
    s = s * (k_row.unsqueeze(2) * q_factor.unsqueeze(3))
    from flash_from_scratch.reference import visible_mask  # torch is there when this runs

    mask = visible_mask(nq, nk, causal, (-1, -1), qc.device)
    s = s.masked_fill(~mask, float("-inf"))
    m = s.amax(dim=-1, keepdim=True)
    empty = torch.isinf(m)
    e = torch.exp(s - torch.where(empty, torch.zeros_like(m), m))
    l = e.sum(dim=-1, keepdim=True)
    p = (e * fa.fp8.P_SCALE).to(torch.float8_e4m3fn).float()  # <= 256: nothing to saturate
    v = fa.dequantize_fp8(vc, vs, brkv)
    o = (p @ v) / (fa.fp8.P_SCALE * l)
    o = torch.where(empty, torch.zeros_like(o), o)
    L = torch.where(empty, torch.full_like(m, float("-inf")), m + torch.log(l)).squeeze(-1)
    return o, L


def accumulator_bound(torch, qd, kd, scale):
    """fp8.h's fp8_accumulator_bound per head, |scale| * max_i sum_d |Q_id| max_j |K_jd|, the
    largest over the heads (as common/harness_fp8.cpp takes it over the heads it checks)."""
    kmax = kd.abs().double().amax(dim=2, keepdim=True)  # [B, H, 1, D]
    rows = (qd.abs().double() * kmax).sum(dim=-1)  # [B, H, Nq]
    return abs(scale) * rows.max().item()


def max_err(torch, got, ref):
    """max |got - ref| over the finite entries of ref, and whether every infinite ref is matched
    exactly and every finite one by a finite value."""
    got = got.double()
    fin = torch.isfinite(ref)
    exact = bool((got[~fin] == ref[~fin]).all()) and bool(torch.isfinite(got[fin]).all())
    err = (got[fin] - ref[fin]).abs().max().item() if bool(fin.any()) else 0.0
    return err, exact


def check_rule(torch, o, L, qc, kc, vc, qs, ks, vs, brq, brkv, causal, scale, what):
    qd = fa.dequantize_fp8(qc, qs, brq)
    kd = fa.dequantize_fp8(kc, ks, brkv)
    vd = fa.dequantize_fp8(vc, vs, brkv)
    o_ref, L_ref = fa.reference_attention(qd, kd, vd, causal=causal, scale=scale)
    o_naive, L_naive = naive_fp8(torch, qc, kc, vc, qs, ks, vs, brq, brkv, causal, scale)
    o_naive = o_naive.to(torch.bfloat16).float()  # the kernel writes O in bf16 (fp8.h)
    delta = fa.fp8.ACCUMULATOR_REL * accumulator_bound(torch, qd, kd, scale)
    max_o = o_ref.abs().max().item()
    naive_o, _ = max_err(torch, o_naive, o_ref)
    naive_l, _ = max_err(torch, L_naive, L_ref)
    err_o, exact_o = max_err(torch, o.float(), o_ref)
    err_l, exact_l = max_err(torch, L, L_ref)
    bound_o = 2.0 * naive_o + 1e-4 + delta * max_o
    bound_l = 2.0 * naive_l + 1e-4 + delta
    assert exact_o and err_o <= bound_o, "%s: O error %.3g > bound %.3g (naive %.3g)" % (
        what, err_o, bound_o, naive_o)
    assert exact_l and err_l <= bound_l, "%s: L error %.3g > bound %.3g (naive %.3g)" % (
        what, err_l, bound_l, naive_l)


def inputs(torch, shape, device, dtype, d=D):
    b, h, nq, nk = shape
    g = torch.Generator(device=device).manual_seed(SEED + nq * 7 + nk)

    def draw(n):
        x = torch.randn(b, h, n, d, generator=g, device=device) * INPUT_STD + INPUT_MEAN
        return x.to(dtype)
    return draw(nq), draw(nk), draw(nk)


# ---- the Python layer: quantisation and rotation (CPU) ------------------------------------------

def e4m3_ref(x):
    """fp8.h's float_to_e4m3 followed by e4m3_to_float, in Python: round to nearest even on the
    e4m3 grid, saturating at 448."""
    a = abs(x)
    if a >= 448.0:
        r = 448.0
    else:
        step = 2.0 ** -9
        if a >= 2.0 ** -6:
            _, e = math.frexp(a)
            step = 2.0 ** (e - 1 - 3)
        r = round(a / step) * step  # Python's round: to nearest, ties to even
    return -r if math.copysign(1.0, x) < 0 else r


def test_quantize_matches_fp8_h_on_every_rounding_boundary():
    torch = torch_fp8_or_skip()
    grid = torch.arange(0, 127, dtype=torch.uint8).view(torch.float8_e4m3fn).float()
    mids = (grid[1:] + grid[:-1]) / 2  # the ties, and one float either side of them
    vals = torch.cat([grid, mids, torch.nextafter(mids, torch.zeros_like(mids)),
                      torch.nextafter(mids, torch.full_like(mids, 1e3))])
    vals = torch.cat([vals, -vals])
    # One block holding 448 keeps the scale at exactly 1: the codes are e4m3(x) itself.
    codes, scales = fa.quantize_fp8(vals.view(1, 1, 1, -1), 1)
    assert scales.item() == 1.0
    got = codes.float().flatten().tolist()
    want = [e4m3_ref(x) for x in vals.tolist()]
    assert got == want


def test_quantize_blocks_scales_and_saturation():
    torch = torch_fp8_or_skip()
    g = torch.Generator().manual_seed(SEED)
    x = torch.randn(2, 3, 37, 16, generator=g) * 5 + INPUT_MEAN
    x[0, 1, 10:20] = 0.0  # block 1 of head (0, 1) with block_rows 10: all zeros
    codes, scales = fa.quantize_fp8(x, 10)
    assert codes.dtype == torch.float8_e4m3fn and codes.shape == x.shape
    assert scales.dtype == torch.float32 and scales.shape == (2, 3, 4)
    assert scales[0, 1, 1].item() == 1.0 and not codes[0, 1, 10:20].float().any()
    for bh in range(6):
        b, h = divmod(bh, 3)
        for blk in range(4):
            rows = x[b, h, blk * 10:(blk + 1) * 10]
            amax = rows.abs().max()
            if amax > 0:
                assert scales[b, h, blk].item() == (amax / torch.tensor(448.0)).item()
                # The largest entry lands on +-448 (a rounding above saturates back to it).
                assert codes[b, h, blk * 10:(blk + 1) * 10].float().abs().max().item() == 448.0
    y = x / scales.repeat_interleave(10, dim=2)[:, :, :37].unsqueeze(-1)
    want = torch.tensor([e4m3_ref(t) for t in y.flatten().tolist()]).view_as(x)
    assert torch.equal(codes.float(), want)
    # bf16 and fp16 inputs are quantised from their exact fp32 values.
    xb = x.bfloat16()
    assert torch.equal(fa.quantize_fp8(xb, 10)[0].float(),
                       fa.quantize_fp8(xb.float(), 10)[0].float())
    with pytest.raises(ValueError, match="non-finite"):
        fa.quantize_fp8(torch.full((1, 1, 2, 4), float("inf")), 2)
    with pytest.raises(ValueError, match="block_rows"):
        fa.quantize_fp8(x, 0)


def test_rotation_is_fp8_h_s():
    torch = torch_fp8_or_skip()
    from flash_from_scratch import fp8
    d = 16
    # R = diag(s) H / sqrt(d), H[i][j] = (-1)^popcount(i & j) (fp8.h's rotation_matrix).
    s = torch.tensor(fp8.hadamard_signs(d, 7), dtype=torch.float64)
    hm = torch.tensor([[(-1.0) ** bin(i & j).count("1") for j in range(d)] for i in range(d)],
                      dtype=torch.float64)
    r = s.unsqueeze(1) * hm / math.sqrt(d)
    g = torch.Generator().manual_seed(SEED)
    x = torch.randn(3, 5, d, generator=g)
    y = fa.hadamard_rotate(x, 7)
    assert y.dtype == torch.float32
    assert torch.allclose(y.double(), x.double() @ r, rtol=0, atol=1e-6)
    assert torch.allclose((y.double() @ r.T), x.double(), rtol=0, atol=1e-6)  # R orthogonal
    # common/random.cpp's derive_seed (splitmix64), spot-checked against its definition.
    assert fp8._splitmix64(0, 0) == 0xE220A8397B1DCDAF
    with pytest.raises(ValueError, match="power-of-two"):
        fa.hadamard_rotate(torch.zeros(1, 1, 1, 12))


def test_transpose_v_orders():
    torch = torch_fp8_or_skip()
    for n in (1, 17, 129):
        codes = (torch.arange(2 * n * 3) % 120 + 1).to(torch.uint8).view(1, 2, n, 3)
        v = codes.view(torch.float8_e4m3fn)
        stride = fa.fp8.fp8_vt_stride(n)
        keys = fa.fp8.transpose_v(v)
        assert keys.shape == (1, 2, 3, stride) and not keys[..., n:].any()
        assert torch.equal(keys[..., :n], codes.transpose(2, 3))
        # P order: slot s of each 16 holds key (0 1 8 9 2 3 10 11 4 5 12 13 6 7 14 15)[s]
        # (fp8.h's fp8_vt_key_at), padding zero wherever it lands.
        assert fa.fp8.VT_P_ORDER == (0, 1, 8, 9, 2, 3, 10, 11, 4, 5, 12, 13, 6, 7, 14, 15)
        p = fa.fp8.transpose_v(v, p_order=True)
        for slot in range(stride):
            j = slot // 16 * 16 + fa.fp8.VT_P_ORDER[slot % 16]
            assert torch.equal(p[..., slot], keys[..., j]), (n, slot)


# ---- the Python layer: attention_fp8 on an emulation of the library (CPU) -----------------------

class EmulatedFp8Library:
    """The C ABI's FP8 entry points on CPU memory: fa_py_attention_fwd_fp8 reads the codes, V^T
    and the scales from the raw pointers in the layout fa_python.h gives, checks V^T's padding,
    and writes the naive FP8 forward's O (bf16) and L."""

    def __init__(self, torch, brq, brkv, vt_p_order=False):
        self.torch, self.brq, self.brkv, self.vt_p_order = torch, brq, brkv, vt_p_order
        self.calls = []

    def view(self, ptr, n, dtype):
        torch = self.torch
        assert ptr, "null pointer"
        size = torch.empty(0, dtype=dtype).element_size()
        return torch.frombuffer((ctypes.c_uint8 * (n * size)).from_address(ptr), dtype=dtype)

    def fa_py_last_error(self):
        return b"emulated"

    def fa_py_list_fp8_kernels(self):
        name = fa.default_fp8_kernel(128)  # the emulation stands in for it, with its own blocks
        order = "p_order" if self.vt_p_order else "keys"
        return ("%s\t128\t90\t%d\t%d\t%s\tx\n" % (name, self.brq, self.brkv, order)).encode()

    def fa_py_supported_fp8(self, name, head_dim):
        return 0

    def fa_py_attention_fwd_fp8(self, name, q, k, vt, qs, ks, vs, o, lse, b, h, nq, nk, d, scale,
                                causal, device, stream):
        torch = self.torch
        self.calls.append((name.decode(), scale, causal))
        stride = fa.fp8.fp8_vt_stride(nk)
        assert stride % 16 == 0 and nk <= stride < nk + 16
        for ptr in (q, k, vt):
            assert ptr % 16 == 0, "codes must be 16-byte aligned"
        f8 = torch.float8_e4m3fn
        Q = self.view(q, b * h * nq * d, torch.uint8).view(b, h, nq, d).view(f8)
        K = self.view(k, b * h * nk * d, torch.uint8).view(b, h, nk, d).view(f8)
        VT = self.view(vt, b * h * d * stride, torch.uint8).view(b, h, d, stride)
        if self.vt_p_order:  # slot s of each 16 holds key VT_P_ORDER[s]: put key j back at j
            slot_of = [fa.fp8.VT_P_ORDER.index(j) for j in range(16)]
            VT = VT[..., [g + slot_of[j] for g in range(0, stride, 16) for j in range(16)]]
        assert not VT[..., nk:].any(), "V^T's padding must be zero codes"
        V = VT[..., :nk].transpose(2, 3).contiguous().view(f8)
        nbq, nbk = -(-nq // self.brq), -(-nk // self.brkv)
        QS = self.view(qs, b * h * nbq, torch.float32).view(b, h, nbq)
        KS = self.view(ks, b * h * nbk, torch.float32).view(b, h, nbk)
        VS = self.view(vs, b * h * nbk, torch.float32).view(b, h, nbk)
        sc = scale if scale > 0 else softmax_scale(torch, d)
        O, L = naive_fp8(torch, Q, K, V, QS, KS, VS, self.brq, self.brkv, bool(causal), sc)
        self.view(o, b * h * nq * d, torch.bfloat16).copy_(O.flatten())
        self.view(lse, b * h * nq, torch.float32).copy_(L.flatten())
        return 0


@pytest.fixture(params=[False, True], ids=["vt_keys", "vt_p_order"])
def emulated(monkeypatch, request):
    torch = torch_fp8_or_skip()
    from flash_from_scratch import _common, _lib
    # Small blocks: several scales per head; V^T in both orders a kernel may ask for.
    emu = EmulatedFp8Library(torch, 16, 32, vt_p_order=request.param)
    monkeypatch.setattr(_lib, "lib", lambda: emu)
    monkeypatch.setattr(_common, "KERNEL_DEVICES", ("cuda", "cpu"))
    return torch, emu


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("shape", [(1, 2, 1, 1), (2, 3, 40, 33), (1, 1, 70, 100)])
def test_python_layer(emulated, shape, causal):
    torch, emu = emulated
    q, k, v = inputs(torch, shape, "cpu", torch.float32)
    o, L = fa.attention_fp8(q, k, v, causal=causal)
    assert o.dtype == torch.bfloat16 and o.shape == q.shape and L.shape == q.shape[:3]
    assert emu.calls[-1] == (fa.default_fp8_kernel(128), 0.0, int(causal))
    (qc, qs), (kc, ks), (vc, vs) = (fa.quantize_fp8(t, n) for t, n in ((q, 16), (k, 32), (v, 32)))
    sc = softmax_scale(torch, D)
    want_o, want_l = naive_fp8(torch, qc, kc, vc, qs, ks, vs, 16, 32, causal, sc)
    assert torch.equal(o, want_o.to(torch.bfloat16)) and torch.equal(L, want_l)
    # Codes and scales in: the same call; non-contiguous codes are copied.
    o2, L2 = fa.attention_fp8(qc.transpose(2, 3).contiguous().transpose(2, 3), kc, vc,
                              causal=causal, q_scale=qs, k_scale=ks, v_scale=vs)
    assert torch.equal(o, o2) and torch.equal(L, L2)
    # The rule's check itself passes on the naive forward (it is its own baseline).
    check_rule(torch, o, L, qc, kc, vc, qs, ks, vs, 16, 32, causal, sc, "emulated")


def test_python_layer_rotation(emulated):
    torch, emu = emulated
    q, k, v = inputs(torch, (1, 2, 20, 30), "cpu", torch.float32)
    o, L = fa.attention_fp8(q, k, v, rotate=True, rotation_seed=3, scale=0.1)
    assert emu.calls[-1][1] == pytest.approx(0.1)
    qr, kr = fa.hadamard_rotate(q, 3), fa.hadamard_rotate(k, 3)
    (qc, qs), (kc, ks), (vc, vs) = (fa.quantize_fp8(t, n) for t, n in ((qr, 16), (kr, 32), (v, 32)))
    want_o, want_l = naive_fp8(torch, qc, kc, vc, qs, ks, vs, 16, 32, False,
                               softmax_scale(torch, D, 0.1))
    assert torch.equal(o, want_o.to(torch.bfloat16)) and torch.equal(L, want_l)


def test_python_layer_refusals(emulated):
    torch, emu = emulated
    q, k, v = inputs(torch, (1, 2, 8, 40), "cpu", torch.float32)
    qc, qs = fa.quantize_fp8(q, 16)
    kc, ks = fa.quantize_fp8(k, 32)
    vc, vs = fa.quantize_fp8(v, 32)
    with pytest.raises(ValueError, match="one dtype"):
        fa.attention_fp8(q, k.half(), v)
    with pytest.raises(ValueError, match="4 dimensions"):
        fa.attention_fp8(q[0], k, v)
    with pytest.raises(ValueError, match="no grouped"):
        fa.attention_fp8(q, k[:, :1], v[:, :1])
    with pytest.raises(ValueError, match="need their scales"):
        fa.attention_fp8(qc, kc, vc)
    with pytest.raises(ValueError, match="go with float8"):
        fa.attention_fp8(q, k, v, q_scale=qs, k_scale=ks, v_scale=vs)
    with pytest.raises(ValueError, match="k_scale must be fp32"):
        fa.attention_fp8(qc, kc, vc, q_scale=qs, k_scale=qs, v_scale=vs)
    with pytest.raises(ValueError, match="rotate"):
        fa.attention_fp8(qc, kc, vc, q_scale=qs, k_scale=ks, v_scale=vs, rotate=True)
    with pytest.raises(ValueError, match="no backward"):
        fa.attention_fp8(q.requires_grad_(), k, v)
    with torch.no_grad():
        fa.attention_fp8(q, k, v)  # allowed: no graph is built
    with pytest.raises(ValueError, match="not a dtype"):
        fa.attention_fp8(q.detach().double(), k.double(), v.double())
    with pytest.raises(ValueError, match="scale must be"):
        fa.attention_fp8(q.detach(), k, v, scale=-1.0)
    assert len(emu.calls) == 1


# ---- the kernels (an sm_90 GPU) ----------------------------------------------------------------

def fp8_gpu_or_skip(kernel):
    torch = torch_cuda_or_skip()
    if not hasattr(torch, "float8_e4m3fn"):
        pytest.skip("this torch has no torch.float8_e4m3fn")
    if torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("the FP8 kernels are sm_90a code: they run on compute capability 9.0 only")
    err = fa.supported_fp8(kernel.name, kernel.head_dims[0])
    if err is not None:
        pytest.skip(str(err))
    return torch


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("kernel", KERNELS or NONE, ids=kernel_id)
def test_kernel_against_float64(kernel, shape, causal):
    torch = fp8_gpu_or_skip(kernel)
    d = kernel.head_dims[0]  # 128, or 256 for 07/fp8_v3 and v4
    q, k, v = inputs(torch, shape, "cuda", torch.bfloat16, d)
    o, L = fa.attention_fp8(q, k, v, causal=causal, kernel=kernel.name)
    assert o.dtype == torch.bfloat16 and o.shape == q.shape and L.shape == q.shape[:3]
    brq, brkv = kernel.block_rows_q, kernel.block_rows_kv
    (qc, qs), (kc, ks), (vc, vs) = ((fa.quantize_fp8(t, n)) for t, n in ((q, brq), (k, brkv),
                                                                         (v, brkv)))
    check_rule(torch, o, L, qc, kc, vc, qs, ks, vs, brq, brkv, causal, softmax_scale(torch, d),
               "%s %s causal=%s" % (kernel.name, shape, causal))
    # Codes and scales in give the same bits (the kernels accumulate nothing across blocks).
    o2, L2 = fa.attention_fp8(qc, kc, vc, causal=causal, kernel=kernel.name, q_scale=qs,
                              k_scale=ks, v_scale=vs)
    torch.cuda.synchronize()
    assert torch.equal(o, o2) and torch.equal(L, L2)


@pytest.mark.parametrize("kernel", KERNELS or NONE, ids=kernel_id)
def test_kernel_rotated(kernel):
    torch = fp8_gpu_or_skip(kernel)
    d = kernel.head_dims[0]
    q, k, v = inputs(torch, (2, 3, 129, 127), "cuda", torch.float32, d)
    q[..., 5] *= 20.0  # an outlier feature: what the rotation is for
    o, L = fa.attention_fp8(q, k, v, causal=True, kernel=kernel.name, rotate=True,
                            rotation_seed=11)
    brq, brkv = kernel.block_rows_q, kernel.block_rows_kv
    qr, kr = fa.hadamard_rotate(q, 11), fa.hadamard_rotate(k, 11)
    (qc, qs), (kc, ks), (vc, vs) = ((fa.quantize_fp8(t, n)) for t, n in ((qr, brq), (kr, brkv),
                                                                         (v, brkv)))
    check_rule(torch, o, L, qc, kc, vc, qs, ks, vs, brq, brkv, True, softmax_scale(torch, d),
               "%s rotated" % kernel.name)


def test_kernel_refusals():
    if not KERNELS:
        pytest.skip("no FP8 kernel is registered (or libfa_python.so is not built)")
    torch = fp8_gpu_or_skip(KERNELS[0])
    q = torch.randn(1, 2, 16, 64, device="cuda")
    with pytest.raises(fa.UnsupportedError, match="no e4m3 D=64 version"):
        fa.attention_fp8(q, q, q, kernel=KERNELS[0].name)
    with pytest.raises(ValueError, match="no kernel named"):
        fa.attention_fp8(q, q, q, kernel="07/nope")
    with pytest.raises(fa.UnsupportedError, match="no FP8 forward for head dim 64"):
        fa.attention_fp8(q, q, q)  # no default at D 64


@pytest.mark.parametrize("d", sorted(fa.DEFAULT_FP8_FWD))
def test_default_kernel_per_head_dim(d):
    """attention_fp8 with no kernel named runs default_fp8_kernel(d), held to the rule with that
    kernel's block sizes."""
    names = [k.name for k in KERNELS]
    name = fa.default_fp8_kernel(d)
    if name not in names:
        pytest.skip("%s is not registered in this build (or libfa_python.so is not built)" % name)
    kernel = KERNELS[names.index(name)]
    torch = fp8_gpu_or_skip(kernel)
    q, k, v = inputs(torch, (2, 3, 129, 127), "cuda", torch.bfloat16, d)
    o, L = fa.attention_fp8(q, k, v, causal=True)
    brq, brkv = kernel.block_rows_q, kernel.block_rows_kv
    (qc, qs), (kc, ks), (vc, vs) = ((fa.quantize_fp8(t, n)) for t, n in ((q, brq), (k, brkv),
                                                                         (v, brkv)))
    check_rule(torch, o, L, qc, kc, vc, qs, ks, vs, brq, brkv, True, softmax_scale(torch, d),
               "default at D %d: %s" % (d, name))
    o2, L2 = fa.attention_fp8(q, k, v, causal=True, kernel=name)
    torch.cuda.synchronize()
    assert torch.equal(o, o2) and torch.equal(L, L2)
