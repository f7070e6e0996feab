"""check_attention(fn): your attention callable against float64, the way the harness judges.

Inputs are the harness's (common/harness_run.cpp): seeded normal draws with mean 0.5 and standard
deviation 1, rounded to the dtype; the shapes are ragged (1, 17, 127, 129, 1000 rows; seq_q !=
seq_k both ways; causal masks aligned bottom-right, including rows that see no key). Tolerances are
notes/conventions.md's, their numbers common/tolerances.h's (read at import, as the harness
includes them):
  fp32:        |x - ref| <= atol + rtol * |ref| elementwise, an (atol, rtol) per output
               (FP32_TOL below), as the harness's fp32 checks;
  fp16, bf16:  the FlashAttention rule, max|x - ref| <= factor x max|naive - ref| + floor, factor 2
               for O and L and 3 for the gradients (FLASH_TOL), naive being the same computation
               done plainly in that precision (reference.naive_attention_lowp).
NaN or Inf where the reference is finite always fails; an infinite reference (L = -inf for a row
that sees no key) must be matched exactly.
"""
import math

import torch

from ._tolerances import TOL
from .reference import naive_attention_lowp, reference_attention

# (batch, heads, seq_q, seq_k): the repository's ragged lengths, seq_q != seq_k both ways
# (seq_q > seq_k under the causal mask leaves rows that see no key).
RAGGED_SHAPES = [
    (1, 1, 1, 1),
    (1, 2, 17, 17),
    (2, 2, 127, 129),
    (1, 3, 129, 127),
    (1, 1, 1000, 1000),
    (2, 1, 17, 1000),
    (1, 2, 1000, 17),
]

INPUT_MEAN, INPUT_STD, SEED = 0.5, 1.0, 20261121

# (atol, rtol) for fp32; (factor, floor) for the FlashAttention rule: the harness's numbers, read
# from common/tolerances.h (_tolerances.py), so the two cannot drift apart.
_GRAD_FP32 = (TOL["kFp32GradAtol"], TOL["kFp32GradRtol"])
_GRAD_FLASH = (TOL["kFlashBwdFactor"], TOL["kFlashFloor"])
FP32_TOL = {"O": (TOL["kFp32OAtol"], TOL["kFp32ORtol"]),
            "L": (TOL["kFp32LAtol"], TOL["kFp32LRtol"]),
            "dQ": _GRAD_FP32, "dK": _GRAD_FP32, "dV": _GRAD_FP32}
FLASH_TOL = {"O": (TOL["kFlashFwdFactor"], TOL["kFlashFloor"]),
             "L": (TOL["kFlashFwdFactor"], TOL["kFlashFloor"]),
             "dQ": _GRAD_FLASH, "dK": _GRAD_FLASH, "dV": _GRAD_FLASH}


def make_inputs(b, h, nq, nk, d, dtype, device="cuda", seed=SEED):
    """q, k, v, dO as the harness draws them (mean 0.5, std 1), rounded to dtype."""
    g = torch.Generator(device="cpu").manual_seed(seed + hash((b, h, nq, nk, d)) % (1 << 30))

    def draw(*shape):
        x = torch.randn(*shape, generator=g, dtype=torch.float32) * INPUT_STD + INPUT_MEAN
        return x.to(dtype).to(device)

    return draw(b, h, nq, d), draw(b, h, nk, d), draw(b, h, nk, d), draw(b, h, nq, d)


def compare(what, got, ref, naive, dtype):
    """One check: dict(what, ok, max_err, bound or tolerance text, where)."""
    got = got.detach().double()
    ref = ref.detach().double()
    finite = torch.isfinite(ref)
    bad_inf = bool(((~finite) & (got != ref)).any())  # -inf must be matched exactly
    bad_nan = bool((finite & ~torch.isfinite(got)).any())
    err = (got - ref).abs().where(finite, torch.zeros_like(ref))
    max_err = float(err.max()) if err.numel() else 0.0
    if dtype == torch.float32:
        atol, rtol = FP32_TOL[what]
        allowed = atol + rtol * ref.abs().where(finite, torch.zeros_like(ref))
        ok = bool((err <= allowed).all())
        tol = "atol %.0e + rtol %.0e" % (atol, rtol)
        worst = (err - allowed).flatten().argmax()
    else:
        factor, floor = FLASH_TOL[what]
        n_err = (naive.double() - ref).abs().where(finite, torch.zeros_like(ref))
        naive_err = float(n_err.max()) if n_err.numel() else 0.0
        bound = factor * naive_err + floor
        ok = max_err <= bound
        tol = "%.0fx naive %.3g + %.0e = %.3g" % (factor, naive_err, floor, bound)
        worst = err.flatten().argmax()
    ok = ok and not bad_inf and not bad_nan
    where = tuple(int(i) for i in torch.unravel_index(worst, ref.shape)) if ref.numel() else ()
    note = "NaN/Inf where the reference is finite" if bad_nan else (
        "an infinite reference not matched" if bad_inf else "")
    return {"what": what, "ok": ok, "max_err": max_err, "tolerance": tol, "worst_at": where,
            "note": note}


def _call(fn, q, k, v, causal, scale):
    out = fn(q, k, v, causal=causal, scale=scale)
    if isinstance(out, (tuple, list)):
        return out[0], (out[1] if len(out) > 1 else None)
    return out, None


def check_attention(fn, dtypes=(torch.bfloat16,), head_dims=(64,), shapes=None,
                    causal=(False, True), grads=True, scale=None, device="cuda", verbose=True,
                    raise_on_failure=True):
    """Runs fn(q, k, v, causal=bool, scale=float or None) -> O (or (O, L)) on every shape, dtype,
    head dim and mask, and compares O (and L if returned; dQ, dK, dV through autograd when grads)
    with float64. Returns the list of result rows; raises AssertionError listing the failures
    unless raise_on_failure=False. A callable may refuse a case by raising
    flash_from_scratch.UnsupportedError: that row is reported as UNSUPPORTED, not failed."""
    from ._lib import UnsupportedError

    shapes = RAGGED_SHAPES if shapes is None else shapes
    rows = []
    for dtype in dtypes:
        for d in head_dims:
            for (b, h, nq, nk) in shapes:
                for c in causal:
                    rows.append(_check_one(fn, b, h, nq, nk, d, dtype, c, grads, scale, device,
                                           UnsupportedError))
    if verbose:
        print(format_table(rows))
    failed = [r for r in rows if r["status"] == "FAIL"]
    if failed and raise_on_failure:
        raise AssertionError("%d of %d attention checks failed:\n%s"
                             % (len(failed), len(rows), format_table(failed, details=True)))
    return rows


def _check_one(fn, b, h, nq, nk, d, dtype, causal, grads, scale, device, unsupported_error):
    row = {"shape": "B=%d H=%d Nq=%d Nk=%d D=%d" % (b, h, nq, nk, d), "dtype": str(dtype)[6:],
           "causal": causal, "checks": [], "status": "PASS", "message": ""}
    q, k, v, do = make_inputs(b, h, nq, nk, d, dtype, device)
    q, k, v = (t.requires_grad_(grads) for t in (q, k, v))
    try:
        o, lse = _call(fn, q, k, v, causal, scale)
        if grads:
            dq, dk, dv = torch.autograd.grad(o, (q, k, v), do)
    except unsupported_error as e:
        row["status"], row["message"] = "UNSUPPORTED", str(e)
        return row
    if q.is_cuda:
        torch.cuda.synchronize()
    q64, k64, v64 = (t.detach().double().requires_grad_(grads) for t in (q, k, v))
    ref_o, ref_l = reference_attention(q64, k64, v64, causal, scale)
    naive = (naive_attention_lowp(q.detach(), k.detach(), v.detach(), do if grads else None,
                                  causal, scale) if dtype != torch.float32 else {})
    if tuple(o.shape) != (b, h, nq, d):
        row["status"], row["message"] = "FAIL", "O has shape %s" % (tuple(o.shape),)
        return row
    row["checks"].append(compare("O", o, ref_o, naive.get("O"), dtype))
    if lse is not None:
        row["checks"].append(compare("L", lse, ref_l, naive.get("L"), dtype))
    if grads:
        rq, rk, rv = torch.autograd.grad(ref_o, (q64, k64, v64), do.double())
        for name, got, ref in (("dQ", dq, rq), ("dK", dk, rk), ("dV", dv, rv)):
            row["checks"].append(compare(name, got, ref, naive.get(name), dtype))
    if not all(c["ok"] for c in row["checks"]):
        row["status"] = "FAIL"
    return row


def format_table(rows, details=False):
    lines = ["%-30s %-9s %-6s %-11s %s" % ("shape", "dtype", "causal", "status",
                                           "max error per output")]
    for r in rows:
        errs = "  ".join("%s %.2e%s" % (c["what"], c["max_err"], "" if c["ok"] else "!")
                         for c in r["checks"])
        lines.append("%-30s %-9s %-6s %-11s %s" % (r["shape"], r["dtype"], r["causal"],
                                                   r["status"], errs or r["message"]))
        if details:
            for c in r["checks"]:
                if not c["ok"]:
                    lines.append("    %s: max error %.3g > %s, worst at %s %s"
                                 % (c["what"], c["max_err"], c["tolerance"], c["worst_at"],
                                    c["note"]))
            if r["message"]:
                lines.append("    " + r["message"])
    return "\n".join(lines)
