#!/usr/bin/env python3
"""Regenerate the diagrams of notes/figures/ (SVG, matplotlib), or check that they are current.

    python3 notes/figures/make_figures.py            # rewrite every SVG in notes/figures/
    python3 notes/figures/make_figures.py --check    # regenerate into a temporary folder and fail,
                                                     # listing them, if a committed SVG differs
    python3 notes/figures/make_figures.py --png DIR  # also a PNG copy of each (for viewing)

Every script notes/figures/fig_*.py, and ch07_timeline.py where it exists, is one figure (or a
few): it exposes main(out_dir), draws with figstyle.py and saves with figstyle.save. The CPU test
FiguresAreCurrent runs --check.

The committed SVGs are written by Debian's python3-matplotlib (3.6.3, what CI installs). Another
matplotlib version writes other bytes for the same drawing: --check then says so and exits 77
(the test reports it as skipped, not passed); regenerate with that package's python
(/usr/bin/python3 on Debian and Ubuntu) to compare.
"""
import argparse
import glob
import importlib.util
import os
import re
import shutil
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
INSTALL = "apt-get install python3-matplotlib"
EXIT_VERSION_MISMATCH = 77


def figure_scripts():
    scripts = sorted(glob.glob(os.path.join(HERE, "fig_*.py")))
    timeline = os.path.join(HERE, "ch07_timeline.py")
    if os.path.exists(timeline):
        scripts.append(timeline)
    return scripts


def load(path):
    name = "_figure_" + os.path.splitext(os.path.basename(path))[0]
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    if not hasattr(module, "main"):
        sys.exit("%s: no main(out_dir)" % os.path.relpath(path, HERE))
    return module


def generate(out_dir, png_dir=None):
    """Run every figure script into out_dir; returns the names of the SVGs written."""
    import matplotlib.pyplot as plt

    import figstyle

    figstyle.PNG_DIR = png_dir
    for path in figure_scripts():
        figstyle.apply()  # each script starts from the same rcParams
        load(path).main(out_dir)
        plt.close("all")
    return sorted(os.path.basename(p) for p in glob.glob(os.path.join(out_dir, "*.svg")))


def made_with(svg_path):
    """The matplotlib version recorded in an SVG's metadata (dc:title of the creator)."""
    with open(svg_path, encoding="utf-8", errors="replace") as f:
        m = re.search(r"Matplotlib v([0-9][^,\s<]*)", f.read(4000))
    return m.group(1) if m else None


def check():
    import matplotlib

    tmp = tempfile.mkdtemp(prefix="fa_figures_")
    try:
        fresh = generate(tmp)
        committed = sorted(os.path.basename(p) for p in glob.glob(os.path.join(HERE, "*.svg")))
        stale, missing, versions = [], [], set()
        for name in fresh:
            mine = os.path.join(HERE, name)
            if not os.path.exists(mine):
                missing.append(name)
                continue
            with open(mine, "rb") as a, open(os.path.join(tmp, name), "rb") as b:
                if a.read() != b.read():
                    stale.append(name)
                    versions.add(made_with(mine))
        orphans = [name for name in committed if name not in fresh]
    finally:
        shutil.rmtree(tmp)

    for name in missing:
        print("missing: notes/figures/%s (a script draws it; it is not committed)" % name)
    for name in orphans:
        print("orphan:  notes/figures/%s (no script draws it any more)" % name)
    if stale:
        other = sorted(v for v in versions if v and v != matplotlib.__version__)
        if other and not missing and not orphans:
            print(
                "notes/figures: %d figure(s) differ, but they were made with matplotlib %s and "
                "this is %s, which writes other bytes for the same drawing: not compared. Run "
                "the check with the python of Debian's python3-matplotlib (%s)."
                % (len(stale), ", ".join(other), matplotlib.__version__, INSTALL)
            )
            return EXIT_VERSION_MISMATCH
        for name in stale:
            print("stale:   notes/figures/%s" % name)
    if stale or missing or orphans:
        print("Regenerate with the python of Debian's python3-matplotlib, e.g. "
              "/usr/bin/python3 notes/figures/make_figures.py, and commit the SVGs")
        return 1
    print("notes/figures: %d figures, all current" % len(fresh))
    return 0


def main():
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--check", action="store_true",
                    help="compare with the committed SVGs instead of writing them")
    ap.add_argument("--png", metavar="DIR", help="also write a PNG copy of each figure to DIR")
    args = ap.parse_args()

    try:
        import matplotlib  # noqa: F401
    except ImportError:
        print(
            "notes/figures: this python (%s) has no matplotlib. Install it: %s "
            "(then re-run cmake if the test picked this python)." % (sys.executable, INSTALL)
        )
        return 1
    sys.path.insert(0, HERE)
    if args.check:
        return check()
    if args.png:
        os.makedirs(args.png, exist_ok=True)
    names = generate(HERE, png_dir=args.png)
    print("notes/figures: wrote %s" % ", ".join(names))
    return 0


if __name__ == "__main__":
    sys.exit(main())
