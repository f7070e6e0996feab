"""A short training run with our kernels against the same run with PyTorch's SDPA.

Task: reverse a sequence. Each example is 19 random tokens (vocabulary 16), a separator, then the
19 tokens reversed; the model reads the first 38 positions (a length that fills no tile) and the
loss is the next-token cross-entropy on the reversed half. Model: two pre-LayerNorm causal transformer layers, d_model
128, 2 heads of 64, learned positions; attention in bf16 (q, k, v cast from the fp32 model),
through 05/v5_fewer_instructions + 06/v2_mma in one run and through
torch.nn.functional.scaled_dot_product_attention (is_causal: square, so top-left = bottom-right)
in the other. Same initialisation, same batches, AdamW, 250 steps.

The two runs differ only by bf16 rounding inside attention, which training amplifies slowly; the
band: over the last 50 steps, the 20-step moving averages of the two losses differ by at most
0.05 + 15% of SDPA's, on average. Both must learn (the averaged loss ends below three quarters
of where it started). The curves go to $FA_PYTHON_OUT (default python/out/): training_loss.csv
always, training_loss.png when matplotlib is installed. Both name the GPU, the date, PyTorch's
version and the kernels (the plot in its title, the CSV in a first "#" line), so that a copy kept
in notes/measured/<gpu>-<date>/ says where it came from; the test prints their paths.
"""
import datetime
import math
import os

import pytest

from conftest import fa, out_dir, torch_cuda_or_skip

STEPS, BATCH, HALF, VOCAB, D_MODEL, HEADS, LAYERS, LR = 250, 128, 19, 16, 128, 2, 2, 3e-3
SMOOTH, TAIL = 20, 50
BAND_ABS, BAND_REL = 0.05, 0.15


def build_model(torch, attend):
    nn = torch.nn
    seq = 2 * HALF + 1

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1, self.ln2 = nn.LayerNorm(D_MODEL), nn.LayerNorm(D_MODEL)
            self.qkv = nn.Linear(D_MODEL, 3 * D_MODEL)
            self.proj = nn.Linear(D_MODEL, D_MODEL)
            self.mlp = nn.Sequential(nn.Linear(D_MODEL, 4 * D_MODEL), nn.GELU(),
                                     nn.Linear(4 * D_MODEL, D_MODEL))

        def forward(self, x):
            b, n, _ = x.shape
            qkv = self.qkv(self.ln1(x)).view(b, n, 3, HEADS, D_MODEL // HEADS)
            q, k, v = (qkv[:, :, i].transpose(1, 2).to(torch.bfloat16) for i in range(3))
            o = attend(q, k, v).float().transpose(1, 2).reshape(b, n, D_MODEL)
            x = x + self.proj(o)
            return x + self.mlp(self.ln2(x))

    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.tok = nn.Embedding(VOCAB + 1, D_MODEL)
            self.pos = nn.Parameter(torch.randn(seq, D_MODEL) * 0.02)
            self.blocks = nn.ModuleList(Block() for _ in range(LAYERS))
            self.ln = nn.LayerNorm(D_MODEL)
            self.head = nn.Linear(D_MODEL, VOCAB)

        def forward(self, tokens):
            x = self.tok(tokens) + self.pos[: tokens.shape[1]]
            for blk in self.blocks:
                x = blk(x)
            return self.head(self.ln(x))

    return Model()


def batches(torch):
    g = torch.Generator(device="cuda").manual_seed(1234)
    out = []
    for _ in range(STEPS):
        x = torch.randint(0, VOCAB, (BATCH, HALF), device="cuda", generator=g)
        sep = torch.full((BATCH, 1), VOCAB, device="cuda", dtype=x.dtype)
        out.append(torch.cat([x, sep, x.flip(1)], dim=1))
    return out


def train(torch, attend, data):
    torch.manual_seed(0)
    model = build_model(torch, attend).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=0.0)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / 20))
    losses = []
    for seq in data:
        logits = model(seq[:, :-1])
        # positions HALF (the separator) .. 2*HALF-1 predict the reversed tokens
        pred, target = logits[:, HALF:], seq[:, HALF + 1:]
        loss = torch.nn.functional.cross_entropy(pred.reshape(-1, VOCAB), target.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        sched.step()
        losses.append(float(loss))
    return losses


def smooth(xs, w=SMOOTH):
    return [sum(xs[max(0, i - w + 1): i + 1]) / (i + 1 - max(0, i - w + 1)) for i in range(len(xs))]


def provenance(torch):
    """'NVIDIA H100 80GB HBM3, 2026-12-01, PyTorch 2.11.0+cu130': where and when the run was."""
    return "%s, %s, PyTorch %s" % (torch.cuda.get_device_name(), datetime.date.today().isoformat(),
                                   torch.__version__)


def save_curves(ours, sdpa, directory, where, gap, band):
    csv_path = os.path.join(directory, "training_loss.csv")
    with open(csv_path, "w") as f:
        f.write("# %s; ours: %s + %s\n" % (where, fa.DEFAULT_FWD, fa.DEFAULT_BWD))
        f.write("step,ours,sdpa\n")
        for i, (a, b) in enumerate(zip(ours, sdpa)):
            f.write("%d,%.6f,%.6f\n" % (i, a, b))
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return [csv_path]
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.plot(ours, alpha=0.3, color="C0")
    ax.plot(sdpa, alpha=0.3, color="C1")
    ax.plot(smooth(ours), color="C0", label="ours: %s + %s" % (fa.DEFAULT_FWD, fa.DEFAULT_BWD))
    ax.plot(smooth(sdpa), color="C1", label="PyTorch SDPA")
    ax.set_xlabel("step")
    ax.set_ylabel("cross-entropy (reversal task)")
    ax.set_yscale("log")
    ax.legend()
    ax.set_title("2-layer causal transformer, bf16 attention, %d steps\n%s\n"
                 "mean gap of the averages over the last %d steps %.4f (band %.4f)"
                 % (len(ours), where, TAIL, gap, band), fontsize=9)
    fig.tight_layout()
    png_path = os.path.join(directory, "training_loss.png")
    fig.savefig(png_path, dpi=120)
    plt.close(fig)
    return [csv_path, png_path]


def test_training_matches_sdpa():
    torch = torch_cuda_or_skip()
    for kind, name in (("fwd", fa.DEFAULT_FWD), ("bwd", fa.DEFAULT_BWD)):
        err = fa.supported(kind, name, "bf16", D_MODEL // HEADS)
        if err is not None:
            pytest.skip(str(err))
    import torch.nn.functional as F
    data = batches(torch)
    ours = train(torch, lambda q, k, v: fa.attention(q, k, v, causal=True), data)
    sdpa = train(torch, lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True),
                 data)
    so, ss = smooth(ours), smooth(sdpa)
    gap = sum(abs(a - b) for a, b in zip(so[-TAIL:], ss[-TAIL:])) / TAIL
    level = sum(ss[-TAIL:]) / TAIL
    band = BAND_ABS + BAND_REL * level
    where = provenance(torch)
    files = save_curves(ours, sdpa, out_dir(), where, gap, band)
    assert all(math.isfinite(x) for x in ours + sdpa)
    print("\n%s\nloss (20-step average): start %.3f, end ours %.4f, SDPA %.4f; mean gap over the "
          "last %d steps %.4f (band %.4f); curves: %s"
          % (where, ss[SMOOTH - 1], so[-1], ss[-1], TAIL, gap, band, ", ".join(files)))
    assert gap <= band
    for curve in (so, ss):
        assert curve[-1] < 0.75 * curve[SMOOTH - 1], "the model did not learn the task"
