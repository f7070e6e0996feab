"""The package as PyTorch users expect it in 2026: every kernel call a torch.library operator that
torch.library.opcheck accepts, and a model calling attention() compiled with
torch.compile(fullgraph=True) (no graph break) giving eager's loss and gradients.

Two layers, as test_serving.py: the operators on CPU tensors with the library replaced by the
float64 emulation (python/tests/emulated.py: torch, no GPU), then on the GPU with the kernels.
"""
import pytest

from conftest import fa, torch_cuda_or_skip

SEED = 20261201
OPS = ("attention_fwd", "attention_bwd", "varlen_fwd", "varlen_bwd", "paged_fwd", "append_kv")


def test_operators_are_registered():
    torch = pytest.importorskip("torch", reason="torch is not installed")
    for name in OPS:
        assert hasattr(torch.ops.flash_from_scratch, name), name


D = 64  # a head dim every kind of kernel takes (chapter 09's: 64 and 128)


def _samples(torch, device, dtype):
    """(operator, args) for every operator, on small ragged problems: plain, causal with grouped
    heads, a window; a packed batch with an empty sequence; a paged cache and an append."""
    from flash_from_scratch import _launch
    g = torch.Generator(device="cpu").manual_seed(SEED)

    def rnd(*shape):
        return (torch.randn(*shape, generator=g) + 0.5).to(device=device, dtype=dtype)

    ops = torch.ops.flash_from_scratch
    out = []
    for (hkv, causal, window) in ((4, False, (-1, -1)), (2, True, (-1, -1)), (4, True, (5, 0))):
        q, k, v = rnd(2, 4, 17, D), rnd(2, hkv, 19, D), rnd(2, hkv, 19, D)
        for t in (q, k, v):
            t.requires_grad_(True)
        args = (q, k, v, causal, 0.0, window[0], window[1], "auto", "auto", False)
        out.append((ops.attention_fwd.default, args))
        o, lse = ops.attention_fwd(*(t.detach() if torch.is_tensor(t) else t for t in args))
        do = rnd(2, 4, 17, D)
        out.append((ops.attention_bwd.default, (do, q.detach(), k.detach(), v.detach(), o, lse,
                                                causal, 0.0, window[0], window[1], "auto",
                                                False)))
    plan = _launch.VarlenBatch.from_lengths([5, 0, 9], [7, 3, 9], device)
    q, k, v = rnd(4, 14, D), rnd(2, 19, D), rnd(2, 19, D)
    for t in (q, k, v):
        t.requires_grad_(True)
    vargs = (q, k, v, plan.dev_q, plan.dev_k, plan.cpu_q, plan.cpu_k, True, 0.0, -1, -1, "auto",
             "auto", False)
    out.append((ops.varlen_fwd.default, vargs))
    o, lse = ops.varlen_fwd(q.detach(), k.detach(), v.detach(), *vargs[3:])
    out.append((ops.varlen_bwd.default, (rnd(4, 14, D), q.detach(), k.detach(), v.detach(), o,
                                         lse, *vargs[3:11], "auto", False)))
    page = 16
    kp, vp = rnd(6, 2, page, D), rnd(6, 2, page, D)
    table = torch.tensor([[3, 0, -1], [5, 1, 2]], dtype=torch.int32, device=device)
    lens = torch.tensor([20, 40], dtype=torch.int32, device=device)
    host = torch.tensor([20, 40], dtype=torch.int64)
    out.append((ops.paged_fwd.default, (rnd(2, 4, 3, D), kp, vp, table, lens, host, True, 0.0,
                                        "auto")))
    out.append((ops.append_kv.default, (rnd(2, 2, 3, D), rnd(2, 2, 3, D), kp.clone(),
                                        vp.clone(), table, lens, host, "09/append_kv")))
    return out


def _opcheck_all(torch, device, dtype):
    for op, args in _samples(torch, device, dtype):
        result = torch.library.opcheck(op, args)
        bad = {k: v for k, v in result.items() if v != "SUCCESS"}
        assert not bad, "%s: %s" % (op, bad)


def test_opcheck_every_operator_emulated(emulated):
    """torch.library.opcheck (schema, fake tensors, autograd registration, AOT dispatch) on
    every operator, on the emulated library."""
    torch, _ = emulated
    _opcheck_all(torch, "cpu", torch.float32)


class Block:
    """A small pre-norm transformer block whose attention is fa.attention (grouped heads,
    causal): what a model built on the package looks like to torch.compile."""

    def __new__(cls, torch, dim=4 * D, heads=4, heads_kv=2, device="cpu", dtype=None):
        nn = torch.nn

        class _Block(nn.Module):
            def __init__(self):
                super().__init__()
                self.heads, self.heads_kv, self.d = heads, heads_kv, dim // heads
                self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
                self.qkv = nn.Linear(dim, (heads + 2 * heads_kv) * self.d)
                self.proj = nn.Linear(dim, dim)
                self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

            def forward(self, x):
                b, n, _ = x.shape
                qkv = self.qkv(self.norm1(x)).view(b, n, self.heads + 2 * self.heads_kv, self.d)
                q, k, v = qkv.transpose(1, 2).split([self.heads, self.heads_kv, self.heads_kv], 1)
                a = fa.attention(q, k, v, causal=True)
                x = x + self.proj(a.transpose(1, 2).reshape(b, n, -1))
                return x + self.mlp(self.norm2(x))

        return _Block().to(device=device, dtype=dtype)


def _compiled_matches_eager(torch, device, dtype, backend, atol):
    torch.manual_seed(SEED)
    block = Block(torch, device=device, dtype=dtype)
    x = (torch.randn(2, 37, 4 * D, device=device) + 0.5).to(dtype)

    def loss_and_grads(fn):
        block.zero_grad(set_to_none=True)
        loss = fn(x).float().square().mean()
        loss.backward()
        return loss.detach(), [p.grad.detach().clone() for p in block.parameters()]

    eager_loss, eager_grads = loss_and_grads(block)
    torch._dynamo.reset()
    compiled = torch.compile(block, fullgraph=True, backend=backend)  # a graph break raises
    loss, grads = loss_and_grads(compiled)
    assert torch.allclose(loss, eager_loss, rtol=atol, atol=atol), (loss, eager_loss)
    for g, e in zip(grads, eager_grads):
        assert torch.allclose(g.float(), e.float(), rtol=10 * atol, atol=10 * atol), \
            (g.float() - e.float()).abs().max()


def test_compile_fullgraph_emulated(emulated):
    """torch.compile(fullgraph=True) of the block (the aot_eager backend: the graph capture and
    the autograd of the operators, no code generation), eager's loss and gradients."""
    torch, _ = emulated
    _compiled_matches_eager(torch, "cpu", torch.float32, "aot_eager", 1e-5)


# ---- On the GPU --------------------------------------------------------------------------------

def test_opcheck_every_operator_gpu():
    torch = torch_cuda_or_skip()
    _opcheck_all(torch, "cuda", torch.bfloat16)


def test_compile_fullgraph_gpu():
    """The block in bf16 on the GPU through the kernels, compiled with the default backend
    (inductor): no graph break, eager's loss (the same kernels run either way; the rest of the
    block is fused differently, hence a bf16-sized tolerance)."""
    torch = torch_cuda_or_skip()
    _compiled_matches_eager(torch, "cuda", torch.bfloat16, "inductor", 2e-2)


# ---- The eager path ----------------------------------------------------------------------------

def _eager_matches_operator(torch, device, dtype):
    """attention() in eager mode (ops._EagerAttention: no operator) against the operators called
    directly, with autograd through them: the same O, L and gradients, bit for bit (both run
    ops._forward and ops._backward), on plain, causal grouped and window problems."""
    g = torch.Generator(device="cpu").manual_seed(SEED)

    def rnd(*shape):
        return (torch.randn(*shape, generator=g) + 0.5).to(device=device, dtype=dtype)

    for (hkv, causal, window) in ((4, False, (-1, -1)), (2, True, (-1, -1)), (4, True, (5, 0))):
        q, k, v = rnd(2, 4, 17, D), rnd(2, hkv, 19, D), rnd(2, hkv, 19, D)
        do = rnd(2, 4, 17, D)
        runs = []
        for eager in (True, False):
            leaves = [t.clone().requires_grad_(True) for t in (q, k, v)]
            if eager:
                o, lse = fa.attention(*leaves, causal=causal, window=window, return_lse=True)
            else:
                o, lse = torch.ops.flash_from_scratch.attention_fwd(
                    *leaves, causal, 0.0, window[0], window[1], "auto", "auto", False)
            grads = torch.autograd.grad(o, leaves, do)
            runs.append([o, lse, *grads])
        for name, a, b in zip(("O", "L", "dQ", "dK", "dV"), *runs):
            assert torch.equal(a, b), "%s differs (hkv %d, causal %s, window %s)" % (
                name, hkv, causal, window)


def test_eager_path_matches_operator_emulated(emulated):
    torch, _ = emulated
    _eager_matches_operator(torch, "cpu", torch.float32)


def test_eager_path_matches_operator_gpu():
    torch = torch_cuda_or_skip()
    _eager_matches_operator(torch, "cuda", torch.bfloat16)


def test_eager_path_without_grad_records_nothing(emulated):
    """Under no_grad (or with inputs that need no grad) attention() runs the forward alone: no
    graph node on the output."""
    torch, _ = emulated
    q = torch.randn(1, 2, 5, D) + 0.5
    assert fa.attention(q, q, q).grad_fn is None
    q.requires_grad_(True)
    with torch.no_grad():
        assert fa.attention(q, q, q).grad_fn is None
    assert fa.attention(q, q, q).grad_fn is not None
