"""The shared style of the generated diagrams in notes/figures/, and the one way they are saved.

Every figure script (fig_*.py, ch07_timeline.py) imports this module, draws with the helpers below
and ends with save(fig, out_dir, name). What keeps a regenerated SVG byte-identical to the
committed one (make_figures.py --check compares them):

  * svg.hashsalt fixed: the ids matplotlib gives clip paths and markers come from a hash of this
    salt instead of a random one;
  * metadata Date None: no time stamp in the file;
  * svg.fonttype "none": text is written as <text> elements, not as glyph outlines, so the output
    does not depend on the font files of the machine (only the viewer's font does);
  * fixed figure sizes and hand-placed coordinates (no tight bounding box, which would depend on
    the font metrics), and no random numbers.

The committed SVGs are made with Debian's python3-matplotlib (3.6.3): the check is byte-exact only
against that version (make_figures.py says so when the versions differ).
"""
import os

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.patches import FancyArrowPatch, FancyBboxPatch, Rectangle  # noqa: E402

# Okabe-Ito colours (readable by colour-blind readers), and light tints of them for fills.
BLUE = "#0072B2"
SKY = "#56B4E9"
ORANGE = "#E69F00"
GREEN = "#009E73"
VERMILLION = "#D55E00"
PURPLE = "#CC79A7"
YELLOW = "#F0E442"
GREY = "#999999"
INK = "#222222"

# Where each number lives (the forward's tiling, the backward's dataflow).
GLOBAL_FILL = "#E8E8E8"  # global memory (HBM, cached in L2)
SHARED_FILL = "#CFE6F5"  # shared memory
REG_FILL = "#FBE3B8"  # registers

# Written by make_figures.py --png DIR: a PNG copy of each figure goes there too (for viewing).
PNG_DIR = None

# One drawing unit is a tenth of an inch: canvas(140, 90) is a 14 x 9 inch figure.
UNITS_PER_INCH = 10.0


def tint(hex_colour, amount):
    """hex_colour mixed with white: amount 0 is white, 1 the colour itself."""
    r, g, b = (int(hex_colour[i : i + 2], 16) for i in (1, 3, 5))
    mix = [round(255 - (255 - c) * amount) for c in (r, g, b)]
    return "#%02X%02X%02X" % tuple(mix)



# The four lanes 4g + q (q = 0..3) of a quad, which share a fragment row (the FP8 figures).
QUAD_COLOURS = [tint(SKY, 0.55), tint(ORANGE, 0.5), tint(GREEN, 0.45), tint(PURPLE, 0.45)]

def apply():
    """The rcParams of every figure (make_figures.py calls it before each script)."""
    matplotlib.rcdefaults()
    plt.rcParams.update(
        {
            "svg.hashsalt": "flash-attention-from-scratch-figures",
            "svg.fonttype": "none",
            "font.family": "DejaVu Sans",
            "font.size": 9,
            "axes.titlesize": 10,
            "axes.unicode_minus": True,
        }
    )


apply()


def canvas(width, height):
    """A figure of width x height drawing units (tenths of an inch), y upwards, no axes drawn."""
    fig = plt.figure(figsize=(width / UNITS_PER_INCH, height / UNITS_PER_INCH))
    ax = fig.add_axes([0, 0, 1, 1])
    ax.set_xlim(0, width)
    ax.set_ylim(0, height)
    ax.set_aspect("equal")
    ax.axis("off")
    return fig, ax


def rect(ax, x, y, w, h, fc="none", ec=INK, lw=0.6, **kw):
    """A rectangle with its lower left corner at (x, y)."""
    patch = Rectangle((x, y), w, h, facecolor=fc, edgecolor=ec, linewidth=lw, **kw)
    ax.add_patch(patch)
    return patch


def rounded(ax, x, y, w, h, fc="none", ec=INK, lw=0.8, pad=0.6, **kw):
    """A rounded box, its corners at (x, y) and (x + w, y + h)."""
    patch = FancyBboxPatch(
        (x, y), w, h, boxstyle="round,pad=0,rounding_size=%g" % pad, facecolor=fc,
        edgecolor=ec, linewidth=lw, **kw
    )
    ax.add_patch(patch)
    return patch


def arrow(ax, start, end, color=INK, lw=1.0, style="-|>", rad=0.0, **kw):
    """An arrow from start to end (data coordinates), straight or bent by rad."""
    kw.setdefault("connectionstyle", "arc3,rad=%g" % rad)
    patch = FancyArrowPatch(
        start, end, arrowstyle=style, mutation_scale=9, color=color, linewidth=lw, shrinkA=0,
        shrinkB=0, **kw
    )
    ax.add_patch(patch)
    return patch


def text(ax, x, y, s, size=9, ha="left", va="center", **kw):
    return ax.text(x, y, s, fontsize=size, ha=ha, va=va, color=kw.pop("color", INK), **kw)


def swatch(ax, x, y, fc, label, size=8, w=2.0, h=1.4, ec=INK):
    """A legend entry: a small filled square at (x, y) (its lower left) and its label."""
    rect(ax, x, y, w, h, fc=fc, ec=ec, lw=0.5)
    text(ax, x + w + 0.8, y + h / 2, label, size=size)


def save(fig, out_dir, name):
    """Write out_dir/name.svg (deterministic bytes), and a PNG copy where PNG_DIR is set."""
    fig.savefig(os.path.join(out_dir, name + ".svg"), format="svg", metadata={"Date": None})
    if PNG_DIR:
        fig.savefig(os.path.join(PNG_DIR, name + ".png"), format="png", dpi=110)
    plt.close(fig)


def run_alone(main):
    """`python3 notes/figures/fig_x.py`: write that one figure next to the script."""
    main(os.path.dirname(os.path.abspath(__file__)))
