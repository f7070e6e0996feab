"""torch.autograd.gradcheck of the fp32 kernels: 05/v1_scalar_fp32 forward with each fp32
backward kernel (06/v1_fp32, and 06/v1_fp32_atomic_dq whose atomics make it non-deterministic).

gradcheck wants float64 inputs; the kernels take fp32. The wrapped function casts to fp32 inside
and back to float64 outside, so gradcheck compares our analytical backward with central finite
differences of our own fp32 forward. How the tolerances are set:
  - each fp32 forward evaluation is off from the exact value by a few 1e-7 (|O| ~ 1, fp32 unit
    roundoff 6e-8, short sums here) and, at most, by the harness's fp32 tolerance 1e-4;
  - a central difference divides the difference of two evaluations by 2 * eps: with eps = 1e-2
    the rounding noise is ~1e-6 / 2e-2 = 5e-5 (5e-3 in the harness's worst case);
  - its truncation error is eps^2 / 6 * |f'''|, ~2e-5 for attention with scale 1/sqrt(32);
  - the fp32 rounding of x +- eps perturbs the step by at most 3e-8 / 2e-2 relative.
So atol = 1e-2, rtol = 1e-2 is several times the error of a right gradient, while a wrong
gradient (a missing scale, a dropped term, a wrong mask) is off by O(0.1 - 1). nondet_tol covers
the atomic dQ kernel's reordering of fp32 additions (a few ulps of dQ ~ 1e-6).
Shapes are small (the numerical Jacobian costs two forward calls per input element) and ragged:
seq_q < seq_k, seq_q > seq_k (causal rows that see no key), seq_q = 1.
"""
import pytest

from conftest import fa, torch_cuda_or_skip

FP32_BACKWARDS = ["06/v1_fp32", "06/v1_fp32_atomic_dq"]
CASES = [  # (batch, heads, seq_q, seq_k, causal)
    (1, 2, 5, 7, False),
    (1, 2, 5, 7, True),
    (2, 1, 9, 4, True),
    (1, 1, 1, 6, False),
]
EPS, ATOL, RTOL, NONDET_TOL = 1e-2, 1e-2, 1e-2, 1e-5
HEAD_DIM = 32


@pytest.mark.parametrize("kernel_bwd", FP32_BACKWARDS)
@pytest.mark.parametrize("case", CASES, ids=lambda c: "B%dH%dNq%dNk%d%s" % (
    c[0], c[1], c[2], c[3], "causal" if c[4] else ""))
def test_gradcheck_fp32(kernel_bwd, case):
    torch = torch_cuda_or_skip()
    for kind, name in (("fwd", "05/v1_scalar_fp32"), ("bwd", kernel_bwd)):
        err = fa.supported(kind, name, "fp32", HEAD_DIM)
        if err is not None:
            pytest.skip(str(err))
    b, h, nq, nk, causal = case
    g = torch.Generator(device="cpu").manual_seed(7)
    q, k, v = (torch.randn(b, h, n, HEAD_DIM, generator=g, dtype=torch.float64).add_(0.5)
               .to(torch.float32).to(torch.float64).cuda().requires_grad_()
               for n in (nq, nk, nk))  # values exact in fp32: the cast inside loses nothing

    def f(q, k, v):
        o = fa.attention(q.float(), k.float(), v.float(), causal=causal,
                         kernel="05/v1_scalar_fp32", kernel_bwd=kernel_bwd)
        return o.double()

    assert torch.autograd.gradcheck(f, (q, k, v), eps=EPS, atol=ATOL, rtol=RTOL,
                                    nondet_tol=NONDET_TOL)
