"""Every registered attention kernel, called from PyTorch through the library, against float64 on
the repository's ragged shapes (flash_from_scratch.check: the tolerances of
notes/conventions.md). Skips without torch, a GPU or the built library; a kernel that cannot run
here (no version for the dtype / head dim, GPU too old) is skipped with the harness's reason."""
import pytest

from conftest import fa, kernels_or_empty, torch_cuda_or_skip

KERNELS = kernels_or_empty()
FWD = [k for k in KERNELS if k.kind == "fwd"]
BWD = [k for k in KERNELS if k.kind == "bwd"]
NO_LIBRARY = [pytest.param(None, marks=pytest.mark.skip(reason="libfa_python.so is not built"))]

# One ragged shape for the head dims other than the main one (64, or the kernel's first).
ONE_SHAPE = [(2, 2, 127, 129)]


def main_head_dim(kernel):
    return 64 if 64 in kernel.head_dims else kernel.head_dims[0]


def torch_dtype(torch, name):
    return {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}[name]


def skip_unless_supported(kind, name, dtype, d):
    err = fa.supported(kind, name, dtype, d)
    if err is not None:
        pytest.skip(str(err))


def forward_for(dtype, d):
    """A forward kernel to feed a backward one: the fp32 or the default one when it can run, else
    the last by name that can, chapter 05's first (like the harness's best_forward_kernel)."""
    first = "05/v1_scalar_fp32" if dtype == "fp32" else fa.DEFAULT_FWD
    if fa.supported("fwd", first, dtype, d) is None:
        return first
    ok = sorted(k.name for k in FWD if fa.supported("fwd", k.name, dtype, d) is None)
    if not ok:
        pytest.skip("no forward kernel here runs %s D=%d" % (dtype, d))
    ch05 = [n for n in ok if n.startswith("05/")]
    return (ch05 or ok)[-1]


@pytest.mark.parametrize("kernel", FWD or NO_LIBRARY, ids=lambda k: getattr(k, "name", "none"))
def test_forward(kernel):
    torch = torch_cuda_or_skip()
    for dtype in kernel.dtypes:
        for d in kernel.head_dims:
            skip_unless_supported("fwd", kernel.name, dtype, d)

            def fn(q, k, v, causal, scale):
                return fa.attention(q, k, v, causal=causal, scale=scale, kernel=kernel.name,
                                    kernel_bwd=None, return_lse=True)

            shapes = None if d == main_head_dim(kernel) else ONE_SHAPE
            fa.check_attention(fn, dtypes=(torch_dtype(torch, dtype),), head_dims=(d,),
                               shapes=shapes, grads=False, verbose=False)


@pytest.mark.parametrize("kernel", BWD or NO_LIBRARY, ids=lambda k: getattr(k, "name", "none"))
def test_gradients(kernel):
    torch = torch_cuda_or_skip()
    for dtype in kernel.dtypes:
        for d in kernel.head_dims:
            skip_unless_supported("bwd", kernel.name, dtype, d)
            fwd = forward_for(dtype, d)

            def fn(q, k, v, causal, scale):
                return fa.attention(q, k, v, causal=causal, scale=scale, kernel=fwd,
                                    kernel_bwd=kernel.name)

            shapes = None if d == main_head_dim(kernel) else ONE_SHAPE
            fa.check_attention(fn, dtypes=(torch_dtype(torch, dtype),), head_dims=(d,),
                               shapes=shapes, grads=True, verbose=False)


def test_explicit_scale_and_non_contiguous_inputs(torch_cuda):
    torch = torch_cuda
    skip_unless_supported("fwd", fa.DEFAULT_FWD, "bf16", 64)
    skip_unless_supported("bwd", fa.DEFAULT_BWD, "bf16", 64)

    def fn(q, k, v, causal, scale):
        # [B, N, H, D] storage seen as [B, H, N, D]: non-contiguous views, copied by attention()
        qt, kt, vt = (t.transpose(1, 2).contiguous().transpose(1, 2) for t in (q, k, v))
        assert not qt.is_contiguous() and scale == 0.3
        return fa.attention(qt, kt, vt, causal=causal, scale=scale)

    rows = fa.check_attention(fn, dtypes=(torch.bfloat16,), shapes=ONE_SHAPE, scale=0.3,
                              verbose=False)
    assert all(r["status"] == "PASS" for r in rows)


def test_refusals_are_exceptions_not_answers(torch_cuda):
    torch = torch_cuda
    q = torch.randn(1, 2, 17, 64, device="cuda", dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="no kernel named '05/nope'"):
        fa.attention(q, q, q, kernel="05/nope")
    if fa.supported("fwd", fa.DEFAULT_FWD, "fp32", 64) is None:
        pytest.skip("the default forward kernel takes fp32 here")
    with pytest.raises(fa.UnsupportedError, match="this kernel has no fp32 D=64 version"):
        fa.attention(q.float(), q.float(), q.float(), kernel=fa.DEFAULT_FWD, kernel_bwd=None)
    # With no kernel named, the dispatch refuses what no kernel takes (a head dim past 256: every
    # one up to 256 is served, rounded up inside where no instance is), naming every row it tried.
    with pytest.raises(fa.UnsupportedError, match="no registered kernel runs fwd bf16 D264"):
        x = torch.randn(1, 2, 17, 264, device="cuda", dtype=torch.bfloat16)
        fa.attention(x, x, x)
    with pytest.raises(ValueError, match="CUDA tensors"):
        fa.attention(q.cpu(), q, q)
    with pytest.raises(ValueError, match="one dtype"):
        fa.attention(q, q.half(), q)
    with pytest.raises(ValueError, match=r"\[batch, heads, seq, head_dim\]"):
        fa.attention(q[0], q[0], q[0])
    with pytest.raises(ValueError, match="shapes must be"):  # 2 query heads, 3 K/V heads
        kv = torch.randn(1, 3, 17, 64, device="cuda", dtype=torch.bfloat16)
        fa.attention(q, kv, kv)
    with pytest.raises(ValueError, match="shapes must be"):
        fa.attention(q, q[..., :32], q[..., :32])
    # Fewer K/V heads is grouped-query attention, not an error; the default kernel refuses it.
    with pytest.raises(fa.UnsupportedError, match="no grouped-query attention"):
        fa.attention(q, q[:, :1], q[:, :1], kernel=fa.DEFAULT_FWD)
    with pytest.raises(ValueError, match="scale must be"):
        fa.attention(q, q, q, scale=0.0)
    with pytest.raises(ValueError, match="not a dtype the kernels take"):
        fa.attention(q.double(), q.double(), q.double())
    with pytest.raises(ValueError, match="at least 1"):
        e = q[:, :, :0]
        fa.attention(e, q, q)
    # A backward the kernel cannot do is refused before the forward runs.
    if fa.supported("bwd", "06/v1_fp32", "bf16", 64) is not None:
        with pytest.raises(fa.UnsupportedError, match="this kernel has no bf16 D=64 version"):
            fa.attention(q.requires_grad_(), q, q, kernel_bwd="06/v1_fp32")


def test_runs_on_the_current_stream(torch_cuda):
    torch = torch_cuda
    skip_unless_supported("fwd", fa.DEFAULT_FWD, "bf16", 64)
    q = torch.randn(2, 4, 513, 64, device="cuda", dtype=torch.bfloat16)
    expected = fa.attention(q, q, q, causal=True)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            got = fa.attention(q, q, q, causal=True)
            got = got * 1  # queued behind the kernel on the same stream
    torch.cuda.current_stream().wait_stream(side)
    assert torch.equal(got, expected)
