"""Chapter 09 from PyTorch: varlen_attention, paged_attention, append_kv, and attention() with
grouped K/V heads and a sliding window, against float64 references written here (on
flash_from_scratch.reference, which takes windows and grouped heads).

Tolerance: the repository's (flash_from_scratch.check.compare, notes/conventions.md): for fp16 and
bf16, max|x - ref| <= 2 x max|naive - ref| + 1e-4 (3x for gradients), naive the same computation
done plainly in that precision; an infinite reference (L = -inf for a row that sees no key) must
be matched exactly. As the harness judges varlen and paged batches, every sequence is compared on
its own, against its own naive error.

Three layers of tests:
  - the ctypes layer (no torch, no GPU): the chapter 09 kernel list and the refusals;
  - the Python layer alone (torch, no GPU, no library): the wrappers on CPU tensors with the
    library replaced by an emulation that computes the C ABI's contract in float64 from the raw
    pointers, so that the layouts, the packing, the grouped-head backward and the argument order
    of every call are checked where no GPU is;
  - the kernels (torch, a GPU, the library): every registered chapter 09 kernel.
A kernel missing from the build, or one that cannot run here, skips with the reason.
"""
import random

import pytest

from conftest import fa, library_or_skip, torch_cuda_or_skip

SEED = 20261126
INPUT_MEAN, INPUT_STD = 0.5, 1.0

# Varlen batches (seqlens_q, seqlens_k): empty sequences, 1, 17, 129, 1000; equal lengths, and
# cross lengths both ways (seq_q > seq_k leaves causal rows that see no key; seq_k = 0 too).
SELF_LENGTHS = ([17, 0, 1, 129, 1000, 5, 64], None)
CROSS_LENGTHS = ([17, 0, 1, 129, 1000, 5, 64], [3, 4, 1, 200, 1000, 0, 77])
# (causal, window): full, causal, a causal window, two-sided and one-sided windows.
MASKS = [(False, (-1, -1)), (True, (-1, -1)), (True, (100, 0)), (False, (33, 17)),
         (False, (-1, 5)), (True, (0, 0))]
HEADS = 4


def has_window(causal, window):
    return window[0] >= 0 or (not causal and window[1] >= 0)


def serving_kernels():
    try:
        return fa.list_serving_kernels()
    except fa.LibraryNotFound:
        return []


KERNELS = serving_kernels()
VARLEN_FWD = [k for k in KERNELS if k.kind == "varlen_fwd"]
VARLEN_BWD = [k for k in KERNELS if k.kind == "varlen_bwd"]
PAGED_FWD = [k for k in KERNELS if k.kind == "paged_fwd"]
NONE = [pytest.param(None, marks=pytest.mark.skip(
    reason="no chapter 09 kernel of this kind is registered (or libfa_python.so is not built)"))]


def kernel_id(k):
    return getattr(k, "name", "none")


def torch_dtype(torch, name):
    return {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32}[name]


def draw(torch, gen, shape, dtype, device):
    x = torch.randn(*shape, generator=gen, dtype=torch.float32) * INPUT_STD + INPUT_MEAN
    return x.to(dtype).to(device)


def offsets(lengths):
    cu = [0]
    for n in lengths:
        cu.append(cu[-1] + n)
    return cu


def report(failures, total):
    if failures:
        raise AssertionError("%d of %d checks failed:\n%s" % (len(failures), total,
                                                              "\n".join(failures[:40])))


def check_one(failures, label, what, got, ref, naive, dtype):
    from flash_from_scratch.check import compare
    c = compare(what, got, ref, naive, dtype)
    if not c["ok"]:
        failures.append("%s %s: max error %.3g > %s, worst at %s %s"
                        % (label, what, c["max_err"], c["tolerance"], c["worst_at"], c["note"]))


# ---- The ctypes layer (no torch, no GPU) -------------------------------------------------------

def test_serving_kernel_list():
    library_or_skip()
    for k in fa.list_serving_kernels():
        assert k.kind in ("varlen_fwd", "varlen_bwd", "paged_fwd", "append"), k
        assert k.name and k.dtypes and k.min_sm >= 70, k
        if k.kind != "append":
            assert k.head_dims, k
        if k.kind == "paged_fwd":
            assert k.page_sizes, k
    names = {(k.kind, k.name) for k in fa.list_serving_kernels()}
    # Chapter 09's kernels are not in the fixed-length list (its rows stay fwd and bwd).
    assert not names & {(k.kind, k.name) for k in fa.list_kernels()}


def test_serving_refusals_in_the_harness_words():
    library_or_skip()
    err = fa.supported("varlen_fwd", "09/nope", "bf16", 128)
    assert isinstance(err, ValueError) and "no kernel named '09/nope'" in str(err)
    err = fa.supported("everything", "09/nope", "bf16", 128)
    assert isinstance(err, ValueError) and "kind must be" in str(err)
    for k in fa.list_serving_kernels():
        err = fa.supported(k.kind, k.name, k.dtypes[0], (k.head_dims or (128,))[0])
        if fa.describe_gpu().startswith("no GPU"):
            assert isinstance(err, fa.NoGpuError), (k.name, err)
    # A fixed-length kernel refuses a window and (unless it takes them) grouped heads.
    if not fa.describe_gpu().startswith("no GPU"):
        err = fa.supported("fwd", fa.DEFAULT_FWD, "bf16", 64, window=True)
        if err is not None and "no bf16" not in str(err):
            assert "a sliding window is chapter 09's" in str(err)


def _abi_calls(cu_q, cu_k, lens, batch=None):
    """One call of each chapter 09 entry point of the real library, on dummy device pointers
    (never dereferenced: each call below is refused before any launch)."""
    from flash_from_scratch import _lib
    p = 4096  # a dummy, aligned, nonzero address
    hq, hk, hl = _lib.HostInt64(cu_q), _lib.HostInt64(cu_k), _lib.HostInt64(lens)
    return {
        "varlen_fwd": lambda: _lib.varlen_fwd(fa.VARLEN_FWD, p, p, p, p, p, p, p, hq, hk, 4, 2,
                                              128, "bf16", 0.0, True, -1, -1, 0, None),
        "varlen_bwd": lambda: _lib.varlen_bwd(fa.VARLEN_BWD, p, p, p, p, p, p, p, p, p, p, p, p,
                                              p, hq, hk, 4, 4, 128, "bf16", 0.0, True, -1, -1, 0,
                                              None),
        "paged_fwd": lambda: _lib.paged_fwd(fa.PAGED_DECODE, p, p, p, p, p, p, p, hl, 4, 2, 1,
                                            128, 64, 10, 4, "bf16", 0.0, False, 0, None),
        "append": lambda: _lib.paged_append(fa.APPEND_KV, p, p, p, p, p, p, hl, 2, 1, 128, 64,
                                            10, 4, "bf16", 0, None),
        "fwd_gqa": lambda: _lib.attention_fwd_gqa(fa.DEFAULT_FWD, p, p, p, p, p, 1, 4, 2, 17, 17,
                                                  64, "bf16", 0.0, False, 0, None),
    }


def test_c_abi_checks_arguments_before_anything_runs():
    """Bad lengths, offsets and heads are usage errors (ValueError) with the C ABI's words,
    refused before the GPU is looked at: safe with dummy pointers on any machine."""
    library_or_skip()
    names = {k.name for k in fa.list_serving_kernels()}
    bad = [([0, 5, 3], [0, 5, 9], [5, 3], "host_cu_seqlens_q must not decrease",
            ("varlen_fwd", "varlen_bwd")),
           ([1, 5, 9], [0, 5, 9], [5, 3], r"host_cu_seqlens_q\[0\] must be 0",
            ("varlen_fwd", "varlen_bwd")),
           ([0, 5, 9], [0, 5, 9], [5, 300], r"seqlens_k\[1\] = 300 does not fit",
            ("paged_fwd", "append"))]
    kernel_of = {"varlen_fwd": fa.VARLEN_FWD, "varlen_bwd": fa.VARLEN_BWD,
                 "paged_fwd": fa.PAGED_DECODE, "append": fa.APPEND_KV}
    checked = 0
    for cu_q, cu_k, lens, words, kinds in bad:
        calls = _abi_calls(cu_q, cu_k, lens)
        for kind in kinds:
            if kernel_of[kind] in names:
                with pytest.raises(ValueError, match=words):
                    calls[kind]()
                checked += 1
    if names:
        assert checked > 0
    from flash_from_scratch import _lib
    with pytest.raises(ValueError, match=r"heads \(4\) must be a multiple of heads_kv \(3\)"):
        _lib.attention_fwd_gqa(fa.DEFAULT_FWD, 16, 16, 16, 16, 16, 1, 4, 3, 17, 17, 64, "bf16",
                               0.0, False, 0, None)


def test_c_abi_calls_reach_the_gpu_check():
    """Each entry point with good arguments gets past every argument check to the GPU check
    (so ctypes' argument lists match the C ones): only where there is no GPU, which refuses."""
    library_or_skip()
    if not fa.describe_gpu().startswith("no GPU"):
        pytest.skip("a GPU is here: dummy pointers would be launched on")
    names = {k.name for k in fa.list_serving_kernels()} | {k.name for k in fa.list_kernels()}
    for kind, call in _abi_calls([0, 5, 9], [0, 7, 7], [5, 3]).items():
        name = {"varlen_fwd": fa.VARLEN_FWD, "varlen_bwd": fa.VARLEN_BWD,
                "paged_fwd": fa.PAGED_DECODE, "append": fa.APPEND_KV,
                "fwd_gqa": fa.DEFAULT_FWD}[kind]
        if name not in names:
            continue
        with pytest.raises(fa.NoGpuError):
            call()


# ---- The Python layer alone, on an emulated library (torch, no GPU; tests/emulated.py) --------

def _ref_varlen(torch, q, k, v, cu_q, cu_k, causal, window):
    """float64 O [total_q, H, D] of a token-major varlen batch, sequence by sequence."""
    from flash_from_scratch.reference import reference_attention
    outs = []
    for b in range(len(cu_q) - 1):
        qs = q[cu_q[b]:cu_q[b + 1]].transpose(0, 1).unsqueeze(0)
        ks = k[cu_k[b]:cu_k[b + 1]].transpose(0, 1).unsqueeze(0)
        vs = v[cu_k[b]:cu_k[b + 1]].transpose(0, 1).unsqueeze(0)
        o, _ = reference_attention(qs, ks, vs, causal, None, window)
        outs.append(o[0].transpose(0, 1))
    return torch.cat(outs, dim=0)


@pytest.mark.parametrize("hkv", [4, 2, 1])
@pytest.mark.parametrize("mask", [(False, (-1, -1)), (True, (-1, -1)), (True, (5, 0)),
                                  (False, (3, 2))])
def test_python_layer_varlen(emulated, hkv, mask):
    """varlen_attention's transposes, offsets and grouped-head backward, on the emulation."""
    torch, emu = emulated
    causal, window = mask
    lens_q, lens_k = [7, 0, 1, 20, 3], [9, 2, 1, 20, 0]
    cu_q, cu_k = offsets(lens_q), offsets(lens_k)
    g = torch.Generator().manual_seed(SEED)
    q = torch.randn(cu_q[-1], 4, 32, generator=g).requires_grad_()
    k = torch.randn(cu_k[-1], hkv, 32, generator=g).requires_grad_()
    v = torch.randn(cu_k[-1], hkv, 32, generator=g).requires_grad_()
    do = torch.randn(cu_q[-1], 4, 32, generator=g)
    o, lse = fa.varlen_attention(q, k, v, torch.tensor(cu_q, dtype=torch.int32), cu_k,
                                 max(lens_q), max(lens_k), causal=causal, window=window,
                                 return_lse=True)
    assert o.shape == q.shape and o.is_contiguous() and lse.shape == (4, cu_q[-1])
    dq, dk, dv = torch.autograd.grad(o, (q, k, v), do)
    q64, k64, v64 = (t.detach().double().requires_grad_() for t in (q, k, v))
    ref = _ref_varlen(torch, q64, k64, v64, cu_q, cu_k, causal, window)
    rq, rk, rv = torch.autograd.grad(ref, (q64, k64, v64), do.double(), allow_unused=True)
    assert torch.allclose(o.double(), ref, atol=1e-5)
    for got, want in ((dq, rq), (dk, rk), (dv, rv)):
        assert got.shape == want.shape
        assert torch.allclose(got.double(), want, atol=1e-4), (got - want).abs().max()
    kinds = [c[1] for c in emu.calls]
    assert kinds == ["varlen_fwd", "varlen_bwd"]
    want_fwd = "09/v2_window" if has_window(causal, window) else "09/v1_varlen"
    assert emu.calls[0][0] == want_fwd


@pytest.mark.parametrize("b", [1, 3])
def test_python_layer_attention_window_and_gqa(emulated, b):
    """attention() with a window and grouped heads: packed [H, B * N, D] and back."""
    torch, emu = emulated
    from flash_from_scratch.reference import reference_attention
    g = torch.Generator().manual_seed(SEED + b)
    q = torch.randn(b, 4, 11, 32, generator=g).requires_grad_()
    k = torch.randn(b, 2, 13, 32, generator=g).requires_grad_()
    v = torch.randn(b, 2, 13, 32, generator=g).requires_grad_()
    do = torch.randn(b, 4, 11, 32, generator=g)
    for causal, window in ((True, (4, 0)), (False, (-1, -1)), (False, (2, 3))):
        emu.calls.clear()
        o, lse = fa.attention(q, k, v, causal=causal, window=window, return_lse=True)
        grads = torch.autograd.grad(o, (q, k, v), do)
        q64, k64, v64 = (t.detach().double().requires_grad_() for t in (q, k, v))
        ro, rl = reference_attention(q64, k64, v64, causal, None, window)
        refs = torch.autograd.grad(ro, (q64, k64, v64), do.double())
        assert o.shape == q.shape and lse.shape == q.shape[:3]
        assert torch.allclose(o.double(), ro, atol=1e-5)
        assert torch.equal(torch.isinf(lse), torch.isinf(rl))
        fin = torch.isfinite(rl)
        assert torch.allclose(lse.double()[fin], rl[fin], atol=1e-5)
        for got, want in zip(grads, refs):
            assert torch.allclose(got.double(), want, atol=1e-4)
        # The dispatch: a window goes to chapter 09's kernels (the batch packed); 11 queries
        # with grouped heads and no window are a decoding problem (08/v5, fixed length).
        want = (["varlen_fwd", "varlen_bwd"] if has_window(causal, window) else ["fwd", "bwd"])
        assert [c[1] for c in emu.calls] == want


def test_python_layer_fixed_length_gqa(emulated):
    """A fixed-length kernel that takes grouped heads; the backward on K, V repeated."""
    torch, emu = emulated
    from flash_from_scratch.reference import reference_attention
    g = torch.Generator().manual_seed(SEED)
    q = torch.randn(2, 6, 1, 32, generator=g).requires_grad_()
    k = torch.randn(2, 2, 40, 32, generator=g).requires_grad_()
    v = torch.randn(2, 2, 40, 32, generator=g).requires_grad_()
    do = torch.randn(2, 6, 1, 32, generator=g)
    o = fa.attention(q, k, v, kernel="08/v5_swizzled_ring")
    grads = torch.autograd.grad(o, (q, k, v), do)
    q64, k64, v64 = (t.detach().double().requires_grad_() for t in (q, k, v))
    ro, _ = reference_attention(q64, k64, v64)
    refs = torch.autograd.grad(ro, (q64, k64, v64), do.double())
    assert torch.allclose(o.double(), ro, atol=1e-5)
    for got, want in zip(grads, refs):
        assert got.shape == want.shape and torch.allclose(got.double(), want, atol=1e-4)
    assert emu.calls == [("08/v5_swizzled_ring", "fwd"), (fa.DEFAULT_BWD, "bwd")]
    from flash_from_scratch import ops  # the benchmarks' launch: into given outputs
    o2, lse2 = torch.empty_like(o), torch.empty(2, 6, 1)
    ops.attention_fwd_into(q.detach(), k.detach(), v.detach(), o2, lse2,
                           kernel="08/v5_swizzled_ring")
    assert torch.equal(o2, o.detach())


def test_python_layer_fixed_length_gqa_in_the_backward_kernel(emulated):
    """A backward that takes grouped heads gets K and V as they are (H_kv heads, no repeat, no
    sum in Python), and its dK, dV are the group's sums."""
    torch, emu = emulated
    from flash_from_scratch.reference import reference_attention
    g = torch.Generator().manual_seed(SEED)
    q = torch.randn(2, 6, 9, 32, generator=g).requires_grad_()
    k = torch.randn(2, 2, 13, 32, generator=g).requires_grad_()
    v = torch.randn(2, 2, 13, 32, generator=g).requires_grad_()
    do = torch.randn(2, 6, 9, 32, generator=g)
    bwd = emu.GROUPED_BWD
    for causal in (False, True):
        emu.calls.clear()
        emu.bwd_heads.clear()
        o = fa.attention(q, k, v, causal=causal, kernel="08/v5_swizzled_ring", kernel_bwd=bwd)
        grads = torch.autograd.grad(o, (q, k, v), do)
        q64, k64, v64 = (t.detach().double().requires_grad_() for t in (q, k, v))
        ro, _ = reference_attention(q64, k64, v64, causal)
        refs = torch.autograd.grad(ro, (q64, k64, v64), do.double())
        for got, want in zip(grads, refs):
            assert got.shape == want.shape and torch.allclose(got.double(), want, atol=1e-4)
        assert emu.calls == [("08/v5_swizzled_ring", "fwd"), (bwd, "bwd")]
        assert emu.bwd_heads == [(6, 2)], "K and V went in repeated"
    # The one that takes none still runs, on K and V repeated over the group.
    emu.bwd_heads.clear()
    o = fa.attention(q, k, v, kernel="08/v5_swizzled_ring", kernel_bwd=fa.DEFAULT_BWD)
    torch.autograd.grad(o, (q, k, v), do)
    assert emu.bwd_heads == [(6, 6)]


def test_python_layer_packed(emulated):
    """VarlenBatch, varlen_attention_packed and varlen_fwd_into on head-major tensors."""
    torch, emu = emulated
    from flash_from_scratch import serving
    lens_q, lens_k = [3, 0, 8], [5, 2, 8]
    plan = serving.VarlenBatch.from_lengths(lens_q, lens_k, "cpu")
    assert (plan.total_q, plan.total_k, plan.max_seqlen_q, plan.batch) == (11, 15, 8, 3)
    g = torch.Generator().manual_seed(SEED)
    q, k, v = torch.randn(4, 11, 32, generator=g), torch.randn(2, 15, 32, generator=g), \
        torch.randn(2, 15, 32, generator=g)
    o = fa.varlen_attention_packed(q, k, v, plan, causal=True)
    want = fa.varlen_attention(q.transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1),
                               offsets(lens_q), offsets(lens_k), causal=True)
    assert torch.allclose(o, want.transpose(0, 1))
    o2, lse2 = torch.empty_like(q), torch.empty(4, 11)
    serving.varlen_fwd_into(plan, q, k, v, o2, lse2, True)
    assert torch.equal(o2, o)
    with pytest.raises(ValueError, match="q has 10 tokens and k 15; the offsets say 11 and 15"):
        serving.varlen_fwd_into(plan, q[:, :10], k, v, o2, lse2, True)


def make_paged(torch, gen, lens, hkv, d, page_size, dtype, device, spare=3, poison=True):
    """A shuffled paged cache holding each sequence's keys: (k_pages, v_pages, block_table,
    [K_b [H_kv, n_b, D]], [V_b]). Pages no sequence uses, and the rows past each sequence's end
    in its last page, hold NaN (poison); table entries past a sequence's last page are -1."""
    need = [-(-n // page_size) for n in lens]
    num_pages = sum(need) + spare
    max_pages = max(max(need), 1) + 1
    order = list(range(num_pages))
    random.Random(SEED + page_size).shuffle(order)
    fill = float("nan") if poison else 0.0
    kp = torch.full((num_pages, hkv, page_size, d), fill, dtype=dtype, device=device)
    vp = torch.full((num_pages, hkv, page_size, d), fill, dtype=dtype, device=device)
    table = torch.full((len(lens), max_pages), -1, dtype=torch.int32)
    ks, vs = [], []
    it = iter(order)
    for b, n in enumerate(lens):
        K = draw(torch, gen, (hkv, n, d), dtype, device)
        V = draw(torch, gen, (hkv, n, d), dtype, device)
        ks.append(K)
        vs.append(V)
        for p in range(need[b]):
            page = next(it)
            table[b, p] = page
            rows = slice(p * page_size, min(n, (p + 1) * page_size))
            cnt = rows.stop - rows.start
            kp[page, :, :cnt] = K[:, rows]
            vp[page, :, :cnt] = V[:, rows]
    return kp, vp, table.to(device), ks, vs


def test_python_layer_paged_and_append(emulated):
    torch, emu = emulated
    from flash_from_scratch.reference import reference_attention
    g = torch.Generator().manual_seed(SEED)
    lens0, seq_q, page = [0, 5, 8, 13], 3, 4
    lens = [n + seq_q for n in lens0]
    kp, vp, table, _, _ = make_paged(torch, g, lens, 2, 32, page, torch.float32, "cpu",
                                     poison=False)
    k_new = torch.randn(4, 2, seq_q, 32, generator=g)
    v_new = torch.randn(4, 2, seq_q, 32, generator=g)
    fa.append_kv(k_new, v_new, kp, vp, table, torch.tensor(lens, dtype=torch.int32))
    q = torch.randn(4, 6, seq_q, 32, generator=g)
    o = fa.paged_attention(q, kp, vp, table, lens, causal=True)
    for b, n in enumerate(lens):
        rows = [(int(table[b, j // page]), j % page) for j in range(n)]
        K = torch.stack([kp[p, :, r] for p, r in rows], dim=1)
        V = torch.stack([vp[p, :, r] for p, r in rows], dim=1)
        assert torch.equal(K[:, n - seq_q:], k_new[b]) and torch.equal(V[:, n - seq_q:], v_new[b])
        ro, _ = reference_attention(q[b:b + 1], K.unsqueeze(0), V.unsqueeze(0), True)
        assert torch.allclose(o[b:b + 1].double(), ro, atol=1e-5)
    assert [c[1] for c in emu.calls] == ["append", "paged_fwd"]
    assert emu.calls[1][0] == "09/paged_v1_decode"  # seq_q 3 <= 16: the decoding kernel


def test_python_layer_refusals(emulated):
    torch, _ = emulated
    q = torch.randn(10, 4, 32)
    k = torch.randn(10, 2, 32)
    with pytest.raises(ValueError, match="ends at 9, but the tensor has 10 tokens"):
        fa.varlen_attention(q, k, k, [0, 4, 9], [0, 4, 10], 5, 6)
    with pytest.raises(ValueError, match="must not decrease"):
        fa.varlen_attention(q, k, k, [0, 6, 4, 10], [0, 4, 4, 10], 6, 6)
    with pytest.raises(ValueError, match="max_seqlen_q is 3, but a sequence has 6"):
        fa.varlen_attention(q, k, k, [0, 4, 10], [0, 4, 10], 3, 6)
    with pytest.raises(ValueError, match="multiple of the K/V heads"):
        fa.varlen_attention(q, torch.randn(10, 3, 32), torch.randn(10, 3, 32), [0, 10], [0, 10])
    with pytest.raises(ValueError, match="one dtype"):
        fa.varlen_attention(q, k.double(), k, [0, 10], [0, 10])
    with pytest.raises(ValueError, match="window"):
        fa.varlen_attention(q, k, k, [0, 10], [0, 10], window=(-2, 0))
    with pytest.raises(ValueError, match="token-major"):
        fa.varlen_attention(q[None], k, k, [0, 10], [0, 10])
    kp = torch.zeros(3, 2, 4, 32)
    qq = torch.randn(2, 4, 1, 32)
    table = torch.tensor([[0, 1], [2, 7]], dtype=torch.int32)
    with pytest.raises(ValueError, match=r"block_table\[1, 1\] = 7"):
        fa.paged_attention(qq, kp, kp, table, [5, 6])
    with pytest.raises(ValueError, match="does not fit a block table row"):
        fa.paged_attention(qq, kp, kp, table, [5, 9])
    with pytest.raises(ValueError, match="forward only"):
        fa.paged_attention(qq.requires_grad_(), kp, kp, table, [5, 1])
    with pytest.raises(ValueError, match="less than the 2 new tokens"):
        fa.append_kv(torch.zeros(2, 2, 2, 32), torch.zeros(2, 2, 2, 32), kp, kp,
                     table[:, :1], [1, 2])


# ---- The kernels (torch, a GPU, the library) ----------------------------------------------------

def supported_or_none(kind, name, dtype, d, **asks):
    return fa.supported(kind, name, dtype, d, **asks)


def versions(kernel, main_d=128):
    """(dtype, D, main) the kernel runs here; main is the one version every case runs on."""
    out = []
    for dt in kernel.dtypes:
        for d in kernel.head_dims:
            if fa.supported(kernel.kind, kernel.name, dt, d) is None:
                out.append((dt, d))
    if not out:
        err = fa.supported(kernel.kind, kernel.name, kernel.dtypes[0], kernel.head_dims[0])
        pytest.skip(str(err))
    main = next((v for v in out if v == ("bf16", main_d)), out[0])
    return [(dt, d, (dt, d) == main) for dt, d in out]


def varlen_inputs(torch, lens_q, lens_k, h, hkv, d, dtype, seed):
    g = torch.Generator().manual_seed(seed)
    cu_q, cu_k = offsets(lens_q), offsets(lens_k)
    q = draw(torch, g, (cu_q[-1], h, d), dtype, "cuda")
    k = draw(torch, g, (cu_k[-1], hkv, d), dtype, "cuda")
    v = draw(torch, g, (cu_k[-1], hkv, d), dtype, "cuda")
    do = draw(torch, g, (cu_q[-1], h, d), dtype, "cuda")
    return q, k, v, do, cu_q, cu_k


def per_sequence(t, cu, b):
    """Sequence b of a token-major [total, H, D] (or [H, total] for L) as [1, H, n, D]."""
    if t.dim() == 2:
        return t[:, cu[b]:cu[b + 1]].unsqueeze(0)
    return t[cu[b]:cu[b + 1]].transpose(0, 1).unsqueeze(0)


def check_varlen(torch, failures, label, kernel, kernel_bwd, lens, h, hkv, d, dtype, causal,
                 window, grads, seed):
    from flash_from_scratch.reference import naive_attention_lowp, reference_attention
    lens_q, lens_k = lens[0], lens[1] or lens[0]
    q, k, v, do, cu_q, cu_k = varlen_inputs(torch, lens_q, lens_k, h, hkv, d, dtype, seed)
    q, k, v = (t.requires_grad_(grads) for t in (q, k, v))
    cu_dev = torch.tensor(cu_q, dtype=torch.int32, device="cuda")
    o, lse = fa.varlen_attention(q, k, v, cu_dev, torch.tensor(cu_k, dtype=torch.int32,
                                                                device="cuda"),
                                 max(lens_q), max(lens_k), causal=causal, window=window,
                                 kernel=kernel, kernel_bwd=kernel_bwd if grads else None,
                                 return_lse=True)
    if grads:
        dq, dk, dv = torch.autograd.grad(o, (q, k, v), do)
    torch.cuda.synchronize()
    q64, k64, v64 = (t.detach().double().requires_grad_(grads) for t in (q, k, v))
    refs = [reference_attention(per_sequence(q64, cu_q, b), per_sequence(k64, cu_k, b),
                                per_sequence(v64, cu_k, b), causal, None, window)
            for b in range(len(lens_q))]
    if grads:
        ref_o = torch.cat([r[0][0].transpose(0, 1) for r in refs], dim=0)
        rg = torch.autograd.grad(ref_o, (q64, k64, v64), do.double(), allow_unused=True)
        rq, rk, rv = (torch.zeros_like(t) if g is None else g for g, t in zip(rg, (q64, k64, v64)))
    for b in range(len(lens_q)):
        nq, nk = lens_q[b], lens_k[b]
        where = "%s seq %d (Nq %d, Nk %d)" % (label, b, nq, nk)
        naive = naive_attention_lowp(per_sequence(q.detach(), cu_q, b),
                                     per_sequence(k.detach(), cu_k, b),
                                     per_sequence(v.detach(), cu_k, b),
                                     per_sequence(do, cu_q, b) if grads else None, causal, None,
                                     window)
        if nq > 0 and not grads:
            check_one(failures, where, "O", per_sequence(o, cu_q, b), refs[b][0], naive["O"],
                      q.dtype)
            check_one(failures, where, "L", per_sequence(lse, cu_q, b), refs[b][1], naive["L"],
                      q.dtype)
        if grads:
            if nq > 0:
                check_one(failures, where, "dQ", per_sequence(dq, cu_q, b),
                          per_sequence(rq, cu_q, b), naive["dQ"], q.dtype)
            if nk > 0:
                check_one(failures, where, "dK", per_sequence(dk, cu_k, b),
                          per_sequence(rk, cu_k, b), naive["dK"], q.dtype)
                check_one(failures, where, "dV", per_sequence(dv, cu_k, b),
                          per_sequence(rv, cu_k, b), naive["dV"], q.dtype)


def varlen_cases(kernel_takes_window, kernel_takes_gqa, main):
    cases = []
    for lens in (SELF_LENGTHS, CROSS_LENGTHS):
        for causal, window in MASKS:
            if has_window(causal, window) and not kernel_takes_window:
                continue
            for hkv in (HEADS, 2, 1):
                if hkv != HEADS and not kernel_takes_gqa:
                    continue
                cases.append((lens, causal, window, hkv))
    return cases if main else cases[:2]


@pytest.mark.parametrize("kernel", VARLEN_FWD or NONE, ids=kernel_id)
def test_varlen_forward(kernel):
    torch = torch_cuda_or_skip()
    failures, total = [], 0
    for dt, d, main in versions(kernel):
        for lens, causal, window, hkv in varlen_cases(kernel.window, kernel.gqa, main):
            label = "%s %s D%d H%d Hkv%d causal=%s window=%s" % (
                kernel.name, dt, d, HEADS, hkv, causal, window)
            total += 1
            check_varlen(torch, failures, label, kernel.name, None, lens, HEADS, hkv, d,
                         torch_dtype(torch, dt), causal, window, False, SEED + total)
    report(failures, total)


@pytest.mark.parametrize("kernel", VARLEN_BWD or NONE, ids=kernel_id)
def test_varlen_gradients(kernel):
    """The backward kernel after its forward (VarlenBwdKernel.forward, else 09/v1_varlen or
    09/v2_window); grouped heads through the Python expansion when that forward takes them."""
    torch = torch_cuda_or_skip()
    failures, total = [], 0
    for dt, d, main in versions(kernel):
        for lens, causal, window, hkv in varlen_cases(kernel.window, True, main):
            w = has_window(causal, window)
            fwd = kernel.forward or (fa.VARLEN_WINDOW_FWD if w else fa.VARLEN_FWD)
            if fa.supported("varlen_fwd", fwd, dt, d, gqa=hkv != HEADS, window=w) is not None:
                fwd = fa.VARLEN_WINDOW_FWD if w else fa.VARLEN_FWD
                if fa.supported("varlen_fwd", fwd, dt, d, gqa=hkv != HEADS, window=w):
                    continue
            label = "%s (after %s) %s D%d H%d Hkv%d causal=%s window=%s" % (
                kernel.name, fwd, dt, d, HEADS, hkv, causal, window)
            total += 1
            check_varlen(torch, failures, label, fwd, kernel.name, lens, HEADS, hkv, d,
                         torch_dtype(torch, dt), causal, window, True, SEED + 100 + total)
    if total == 0:
        pytest.skip("no forward kernel here to pair with %s" % kernel.name)
    report(failures, total)


PAGED_LENGTHS = [1, 17, 129, 1000, 300, 0]


def check_paged(torch, failures, label, kernel, lens, seq_q, h, hkv, d, page, dtype, causal,
                seed):
    from flash_from_scratch.reference import naive_attention_lowp, reference_attention
    g = torch.Generator().manual_seed(seed)
    kp, vp, table, ks, vs = make_paged(torch, g, lens, hkv, d, page, dtype, "cuda")
    q = draw(torch, g, (len(lens), h, seq_q, d), dtype, "cuda")
    o, lse = fa.paged_attention(q, kp, vp, table, lens, causal=causal, kernel=kernel,
                                return_lse=True)
    torch.cuda.synchronize()
    for b, n in enumerate(lens):
        qs, K, V = q[b:b + 1], ks[b].unsqueeze(0), vs[b].unsqueeze(0)
        ro, rl = reference_attention(qs, K, V, causal)
        naive = naive_attention_lowp(qs, K, V, None, causal)
        where = "%s seq %d (Nk %d)" % (label, b, n)
        check_one(failures, where, "O", o[b:b + 1], ro, naive["O"], dtype)
        check_one(failures, where, "L", lse[b:b + 1], rl, naive["L"], dtype)


@pytest.mark.parametrize("kernel", PAGED_FWD or NONE, ids=kernel_id)
def test_paged_forward(kernel):
    """Shuffled pages against contiguous keys; spare pages and the tails of last pages hold NaN
    (a kernel must not let rows past a sequence's end into O)."""
    torch = torch_cuda_or_skip()
    failures, total = [], 0
    seq_qs = (1, 4) if kernel.decoding else (1, 37, 200)
    for dt, d, main in versions(kernel):
        for page in kernel.page_sizes:
            for seq_q in (seq_qs if main else seq_qs[:1]):
                for causal in (False, True):
                    # grouped K/V heads where the kernel takes them (not 09/hopper_paged_prefill)
                    for hkv in ((8, 2) if main else (2,)) if kernel.gqa else (8,):
                        label = "%s %s D%d page %d seq_q %d H8 Hkv%d causal=%s" % (
                            kernel.name, dt, d, page, seq_q, hkv, causal)
                        total += 1
                        check_paged(torch, failures, label, kernel.name, PAGED_LENGTHS, seq_q, 8,
                                    hkv, d, page, torch_dtype(torch, dt), causal, SEED + total)
    report(failures, total)


@pytest.mark.parametrize("page", [16, 64, 256])
@pytest.mark.parametrize("seq_q", [1, 17])
def test_append_then_attend(page, seq_q):
    """append_kv writes exactly the new rows (every other bit of both pools unchanged, NaN
    poison included), and attention over the pages then sees them."""
    torch = torch_cuda_or_skip()
    from flash_from_scratch.reference import naive_attention_lowp, reference_attention
    for kind, name in (("append", fa.APPEND_KV),):
        err = fa.supported(kind, name, "bf16", 128)
        if err is not None:
            pytest.skip(str(err))
    paged = fa.PAGED_DECODE if seq_q <= 16 else fa.PAGED_PREFILL
    err = fa.supported("paged_fwd", paged, "bf16", 128, gqa=True, page_size=page)
    if err is not None:
        pytest.skip(str(err))
    dtype, hkv, d = torch.bfloat16, 2, 128
    g = torch.Generator().manual_seed(SEED + page + seq_q)
    lens0 = [0, 15, 64, 300]
    lens = [n + seq_q for n in lens0]
    # The cache made for the final lengths, then the new rows overwritten with NaN: what append
    # must restore exactly.
    kp, vp, table, ks, vs = make_paged(torch, g, lens, hkv, d, page, dtype, "cuda")
    host_table = table.cpu()
    for b, n in enumerate(lens):
        for j in range(n - seq_q, n):
            p = int(host_table[b, j // page])
            kp[p, :, j % page] = float("nan")
            vp[p, :, j % page] = float("nan")
    want_k, want_v = kp.clone(), vp.clone()
    k_new = torch.stack([K[:, -seq_q:] for K in ks])
    v_new = torch.stack([V[:, -seq_q:] for V in vs])
    for b, n in enumerate(lens):
        for j in range(n - seq_q, n):
            p = int(host_table[b, j // page])
            want_k[p, :, j % page] = ks[b][:, j]
            want_v[p, :, j % page] = vs[b][:, j]
    fa.append_kv(k_new, v_new, kp, vp, table, torch.tensor(lens, dtype=torch.int32,
                                                           device="cuda"))
    torch.cuda.synchronize()
    for got, want, what in ((kp, want_k, "k_pages"), (vp, want_v, "v_pages")):
        same = got.view(torch.int16) == want.view(torch.int16)  # bits, NaN included
        assert bool(same.all()), "%s differs at %d elements, first at %s" % (
            what, int((~same).sum()), tuple(int(x) for x in (~same).nonzero()[0]))
    q = draw(torch, g, (len(lens), 8, seq_q, d), dtype, "cuda")
    o = fa.paged_attention(q, kp, vp, table, lens, causal=True, kernel=paged)
    torch.cuda.synchronize()
    failures = []
    for b in range(len(lens)):
        K, V = ks[b].unsqueeze(0), vs[b].unsqueeze(0)
        ro, _ = reference_attention(q[b:b + 1], K, V, True)
        naive = naive_attention_lowp(q[b:b + 1], K, V, None, True)
        check_one(failures, "seq %d" % b, "O", o[b:b + 1], ro, naive["O"], dtype)
    report(failures, len(lens))


@pytest.mark.parametrize("case", [
    # (B, H, H_kv, Nq, Nk, causal, window)
    (1, 4, 2, 129, 129, True, (31, 0)),
    (2, 4, 1, 100, 129, True, (-1, -1)),
    (2, 4, 4, 129, 129, False, (16, 16)),
    (3, 8, 2, 17, 1000, False, (-1, -1)),
    (2, 4, 2, 1000, 1000, True, (127, 0)),
], ids=lambda c: "B%dH%dHkv%dNq%dNk%d%s%s" % (c[0], c[1], c[2], c[3], c[4],
                                             "causal" if c[5] else "", "w%d,%d" % c[6]))
def test_attention_gqa_and_window(case):
    """attention() with grouped K/V heads and windows, forward and gradients, bf16 D 64."""
    torch = torch_cuda_or_skip()
    from flash_from_scratch.reference import naive_attention_lowp, reference_attention
    b, h, hkv, nq, nk, causal, window = case
    w = has_window(causal, window)
    fwd = fa.VARLEN_WINDOW_FWD if w else fa.VARLEN_FWD
    bwd = fa.VARLEN_WINDOW_BWD if w else fa.VARLEN_BWD
    for kind, name, asks in (("varlen_fwd", fwd, {"gqa": hkv != h, "window": w}),
                             ("varlen_bwd", bwd, {"window": w})):
        err = fa.supported(kind, name, "bf16", 64, **asks)
        if err is not None:
            pytest.skip(str(err))
    g = torch.Generator().manual_seed(SEED + sum(case[:5]))
    q = draw(torch, g, (b, h, nq, 64), torch.bfloat16, "cuda").requires_grad_()
    k = draw(torch, g, (b, hkv, nk, 64), torch.bfloat16, "cuda").requires_grad_()
    v = draw(torch, g, (b, hkv, nk, 64), torch.bfloat16, "cuda").requires_grad_()
    do = draw(torch, g, (b, h, nq, 64), torch.bfloat16, "cuda")
    o, lse = fa.attention(q, k, v, causal=causal, window=window, return_lse=True)
    dq, dk, dv = torch.autograd.grad(o, (q, k, v), do)
    torch.cuda.synchronize()
    q64, k64, v64 = (t.detach().double().requires_grad_() for t in (q, k, v))
    ro, rl = reference_attention(q64, k64, v64, causal, None, window)
    rq, rk, rv = torch.autograd.grad(ro, (q64, k64, v64), do.double())
    naive = naive_attention_lowp(q.detach(), k.detach(), v.detach(), do, causal, None, window)
    failures = []
    for what, got, ref in (("O", o, ro), ("L", lse, rl), ("dQ", dq, rq), ("dK", dk, rk),
                           ("dV", dv, rv)):
        check_one(failures, "attention()", what, got, ref, naive[what], torch.bfloat16)
    report(failures, 5)


def test_attention_gqa_on_a_fixed_length_kernel():
    """Grouped heads on chapter 08's fixed-length kernel (decode shape), its backward through
    fa.DEFAULT_BWD on K, V repeated over the group."""
    torch = torch_cuda_or_skip()
    from flash_from_scratch.reference import naive_attention_lowp, reference_attention
    kernel = "08/v5_swizzled_ring"
    for kind, name, asks in (("fwd", kernel, {"gqa": True}), ("bwd", fa.DEFAULT_BWD, {})):
        err = fa.supported(kind, name, "bf16", 128, **asks)
        if err is not None:
            pytest.skip(str(err))
    g = torch.Generator().manual_seed(SEED)
    q = draw(torch, g, (2, 8, 1, 128), torch.bfloat16, "cuda").requires_grad_()
    k = draw(torch, g, (2, 2, 1000, 128), torch.bfloat16, "cuda").requires_grad_()
    v = draw(torch, g, (2, 2, 1000, 128), torch.bfloat16, "cuda").requires_grad_()
    do = draw(torch, g, (2, 8, 1, 128), torch.bfloat16, "cuda")
    o = fa.attention(q, k, v, kernel=kernel)
    dq, dk, dv = torch.autograd.grad(o, (q, k, v), do)
    q64, k64, v64 = (t.detach().double().requires_grad_() for t in (q, k, v))
    ro, _ = reference_attention(q64, k64, v64)
    rq, rk, rv = torch.autograd.grad(ro, (q64, k64, v64), do.double())
    naive = naive_attention_lowp(q.detach(), k.detach(), v.detach(), do)
    failures = []
    for what, got, ref in (("O", o, ro), ("dQ", dq, rq), ("dK", dk, rk), ("dV", dv, rv)):
        check_one(failures, kernel, what, got, ref, naive[what], torch.bfloat16)
    report(failures, 4)


def check_fixed_length_gqa_backward(torch, fwd, bwd, d, seed):
    """Grouped (H 8 over H_kv 2, causal) and multi-query (H_kv 1, full) heads of a fixed-length
    batch through forward `fwd` and backward `bwd`, which takes them itself: the gradients against
    the float64 reference, and the backward's memory no more than the same kernels' on K and V
    repeated over the group (the MHA backward of the same shapes)."""
    from flash_from_scratch.reference import naive_attention_lowp, reference_attention
    g = torch.Generator().manual_seed(seed)
    failures = []
    for hkv, causal in ((2, True), (1, False)):
        q = draw(torch, g, (2, 8, 300, d), torch.bfloat16, "cuda").requires_grad_()
        k = draw(torch, g, (2, hkv, 257, d), torch.bfloat16, "cuda").requires_grad_()
        v = draw(torch, g, (2, hkv, 257, d), torch.bfloat16, "cuda").requires_grad_()
        do = draw(torch, g, (2, 8, 300, d), torch.bfloat16, "cuda")

        def backward_peak(k, v):
            """(gradients, the bytes the backward allocated at its peak)."""
            o = fa.attention(q, k, v, causal=causal, kernel=fwd, kernel_bwd=bwd)
            torch.cuda.synchronize()
            before = torch.cuda.memory_allocated()
            torch.cuda.reset_peak_memory_stats()
            grads = torch.autograd.grad(o, (q, k, v), do)
            torch.cuda.synchronize()
            return grads, torch.cuda.max_memory_allocated() - before

        (dq, dk, dv), peak = backward_peak(k, v)
        ke, ve = (t.detach().repeat_interleave(8 // hkv, 1).requires_grad_() for t in (k, v))
        _, mha_peak = backward_peak(ke, ve)
        assert peak <= mha_peak, "%s D %d: grouped backward peak %d B > MHA's %d B" % (
            bwd, d, peak, mha_peak)
        q64, k64, v64 = (t.detach().double().requires_grad_() for t in (q, k, v))
        ro, _ = reference_attention(q64, k64, v64, causal)
        rq, rk, rv = torch.autograd.grad(ro, (q64, k64, v64), do.double())
        naive = naive_attention_lowp(q.detach(), k.detach(), v.detach(), do, causal)
        for what, got, ref in (("dQ", dq, rq), ("dK", dk, rk), ("dV", dv, rv)):
            check_one(failures, "%s D %d hkv %d" % (bwd, d, hkv), what, got, ref, naive[what],
                      torch.bfloat16)
    report(failures, 6)


def test_attention_gqa_in_chapter07_kernels():
    """Grouped and multi-query heads through 07/v5_persistent and 07/bwd_v1_tma_wgmma, which read
    K/V head h / group and sum dK, dV over each group themselves
    (check_fixed_length_gqa_backward)."""
    torch = torch_cuda_or_skip()
    fwd, bwd = "07/v5_persistent", "07/bwd_v1_tma_wgmma"
    for kind, name in (("fwd", fwd), ("bwd", bwd)):
        err = fa.supported(kind, name, "bf16", 128, gqa=True)
        if err is not None:
            pytest.skip(str(err))
    check_fixed_length_gqa_backward(torch, fwd, bwd, 128, SEED)


@pytest.mark.parametrize("bwd,d", [("09/bwd_v6_varlen_grouped", 59),
                                   ("09/bwd_v8_grouped_d256", 192),
                                   ("09/bwd_v8_grouped_d256", 201)])
def test_fixed_length_gqa_through_packed_backwards(bwd, d):
    """A fixed-length batch with grouped heads through chapter 09's mma.sync backwards that sum
    dK, dV over each group themselves, at head dims no fixed-length backward with grouped heads
    takes before sm_90 (off the step of 8, above 128): the batch runs packed (B = 2: a copy in
    and out); check_fixed_length_gqa_backward's gradients and memory."""
    torch = torch_cuda_or_skip()
    fwd = "05/t17_grouped_any_head_dim"
    for kind, name in (("fwd", fwd), ("varlen_bwd", bwd)):
        err = fa.supported(kind, name, "bf16", d, gqa=True)
        if err is not None:
            pytest.skip(str(err))
    check_fixed_length_gqa_backward(torch, fwd, bwd, d, SEED + d)


@pytest.mark.parametrize("fwd,bwd,window", [
    ("09/hopper_v3_varlen_persistent", "09/hopper_bwd_v1_varlen", (-1, -1)),
    ("09/hopper_v5_window_single_units", "09/hopper_bwd_v2_window", (255, 0))])
def test_varlen_gqa_in_chapter09_kernels(fwd, bwd, window):
    """Grouped and multi-query heads through chapter 09's Hopper backwards, which sum dK, dV over
    each group themselves: the backward's memory no more than the MHA backward's on the same
    packed batch (the gradients are checked by test_varlen_gradients)."""
    torch = torch_cuda_or_skip()
    for kind, name in (("varlen_fwd", fwd), ("varlen_bwd", bwd)):
        err = fa.supported(kind, name, "bf16", 128, gqa=True)
        if err is not None:
            pytest.skip(str(err))
    lens = [300, 1, 0, 517, 1024]
    for hkv in (2, 1):
        q, k, v, do, cu_q, cu_k = varlen_inputs(torch, lens, lens, 8, hkv, 128, torch.bfloat16,
                                                SEED + hkv)
        q.requires_grad_()

        def backward_peak(k, v):
            """The bytes the backward allocated at its peak."""
            k, v = k.detach().requires_grad_(), v.detach().requires_grad_()
            o = fa.varlen_attention(q, k, v, cu_q, cu_k, causal=True, window=window, kernel=fwd,
                                    kernel_bwd=bwd)
            torch.cuda.synchronize()
            before = torch.cuda.memory_allocated()
            torch.cuda.reset_peak_memory_stats()
            torch.autograd.grad(o, (q, k, v), do)
            torch.cuda.synchronize()
            return torch.cuda.max_memory_allocated() - before

        peak = backward_peak(k, v)
        mha_peak = backward_peak(k.repeat_interleave(8 // hkv, 1), v.repeat_interleave(8 // hkv, 1))
        assert peak <= mha_peak, "grouped backward peak %d B > MHA's %d B (H_kv %d)" % (
            peak, mha_peak, hkv)


def test_serving_refusals(torch_cuda):
    torch = torch_cuda
    q = torch.randn(10, 4, 64, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(10, 2, 64, device="cuda", dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="CUDA tensors"):
        fa.varlen_attention(q.cpu(), k, k, [0, 10], [0, 10])
    with pytest.raises(ValueError, match="no kernel named '09/nope'"):
        fa.varlen_attention(q, k, k, [0, 10], [0, 10], kernel="09/nope")
    x = torch.randn(1, 4, 17, 64, device="cuda", dtype=torch.bfloat16)
    y = torch.randn(1, 2, 17, 64, device="cuda", dtype=torch.bfloat16)
    if fa.supported("fwd", fa.DEFAULT_FWD, "bf16", 64) is None:
        with pytest.raises(fa.UnsupportedError, match="a sliding window is chapter 09's"):
            fa.attention(x, x, x, causal=True, window=(4, 0), kernel=fa.DEFAULT_FWD)
        with pytest.raises(fa.UnsupportedError, match="no grouped-query attention"):
            fa.attention(x, y, y, kernel=fa.DEFAULT_FWD)


@pytest.mark.parametrize("causal", [False, True])
def test_python_layer_varlen_gqa_in_the_backward_kernel(emulated, causal):
    """A varlen backward that takes grouped heads gets K and V as they are (H_kv heads, no
    repeat, no sum in Python), and its dK, dV are the group's sums; one that takes none runs on
    K and V repeated."""
    torch, emu = emulated
    lens_q, lens_k = [7, 0, 20, 3], [9, 2, 20, 0]
    cu_q, cu_k = offsets(lens_q), offsets(lens_k)
    g = torch.Generator().manual_seed(SEED)
    q = torch.randn(cu_q[-1], 6, 32, generator=g).requires_grad_()
    k = torch.randn(cu_k[-1], 2, 32, generator=g).requires_grad_()
    v = torch.randn(cu_k[-1], 2, 32, generator=g).requires_grad_()
    do = torch.randn(cu_q[-1], 6, 32, generator=g)
    q64, k64, v64 = (t.detach().double().requires_grad_() for t in (q, k, v))
    ref = _ref_varlen(torch, q64, k64, v64, cu_q, cu_k, causal, (-1, -1))
    refs = torch.autograd.grad(ref, (q64, k64, v64), do.double(), allow_unused=True)
    for bwd, heads in ((emu.GROUPED_VARLEN_BWD, (6, 2)), ("09/bwd_v1_varlen", (6, 6))):
        emu.bwd_heads.clear()
        o = fa.varlen_attention(q, k, v, cu_q, cu_k, causal=causal, kernel="09/v1_varlen",
                                kernel_bwd=bwd)
        grads = torch.autograd.grad(o, (q, k, v), do)
        for got, want in zip(grads, refs):
            assert got.shape == want.shape and torch.allclose(got.double(), want, atol=1e-4)
        assert emu.bwd_heads == [heads], (bwd, emu.bwd_heads)
