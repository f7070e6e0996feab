#!/usr/bin/env python3
"""ladder_ch01.svg ... ladder_ch09.svg: each chapter's main path, rung by rung, beside its peers,
every number of a chart from the logs of ONE run (RUNS[chapter], a folder of notes/measured/), the
GPU, the date and the run's folder in the chart's title.

    python3 notes/figures/fig_ladders.py                  # the nine charts, each of its RUNS -> here
    python3 notes/figures/fig_ladders.py --tables [05 07] # the same runs as markdown ladder tables
    python3 notes/figures/fig_ladders.py --run FOLDER --out DIR   # every chart from another run

What each chart sets against what (the unit of the chapter's own tables):
  01, 02  row softmax, GB/s, against the copy bandwidth measured in the same run
  03      GEMM at 4096^3, TFLOP/s: the fp32 rungs against cuBLAS fp32, the tensor-core ones
          against cuBLAS bf16
  04      transpose, GB/s, against the copy bandwidth
  05      forward, bf16 D 128, TFLOP/s, against PyTorch SDPA's FlashAttention-2 and cuDNN backends
  06      backward, the same peers (FLOPs: 2.5x the forward's)
  07      forward (from chapter 05's final rung) and backward, the same peers
  08      decoding, GB/s, against the copy bandwidth and SDPA's backends on the same shapes
  09      the serving kernels against their contiguous counterparts: the fixed-length kernels
          padded to the longest sequence or called once per sequence, the window kernels without
          the window, paged decoding against chapter 08's kernel on the same cache stored whole

Each chapter's run is a choice of its own (RUNS below): a run that timed only the attention
ladders (fa_bench and SDPA, no tour) can chart chapters 05-08 while chapters 01-04 and 09 stay on
the last run that had a tour. A run is the name of its folder under notes/measured/, optionally
followed by "/" and a glob of the files to read (e.g. "h200-2026-12-01/ladder_*": the ladder
stage's files, not the later stages' JSONs of the same folder, which hold some of the same rows).
The files are found by what they hold, not by their names; the script uses:

  the tour log      (required for chapters 01-04 and 09) the output of
                    `cmake --build --preset tour`, or of `bash bench/device_run.sh tour`
                    (tour.log; a .gz is read as well): every chapter's program at its default
                    sizes. The GPU's name, the copy bandwidth and cuBLAS come from it, and
                    chapters 01-04 and 09 entirely; chapters 05-08 when the run has no fa_bench
                    JSON for them. Without a tour the GPU's name is read from fa_bench's log
                    ("fa_bench on <GPU> (sm_..."), the copy bandwidth from its JSON.
  fa_bench JSON     (optional) Google Benchmark JSON written by fa_bench (`--benchmark_out`),
                    e.g. the `ladder` stage of bench/device_run.sh: ladder_fwd_d128.json,
                    ladder_bwd_d128.json, ladder_decode.json. Where it has a chapter's rungs at
                    bf16 D 128 N 8192 (decoding: its decode shapes), the chart shows those
                    instead of the tour's (B = 16384/N, H = 2048/D, the protocol of the peers).
                    Several JSONs may hold the same row: the newest (its context.date) wins.
  compare_sdpa CSV  (optional) bench/compare_sdpa.py's sdpa_compare.csv (header D, causal, N, B,
                    H, ...): FlashAttention-2 and cuDNN, forward and backward, on the protocol
                    shapes; used where the shape (B, H, N, D) is the rung's. Where several CSVs
                    hold a shape, one that timed our kernels of the same direction wins (SDPA's
                    forward is in a backward run's CSV too), then the one written from the
                    newest fa_bench JSON of the folder (matched by our kernels' figures in it).
  compare_decode    (optional) bench/compare_decode.py's decode_compare.csv, or its printed
                    table in a log: SDPA's backends on the decode shapes (GB/s).

A peer the run did not time at a rung's shape is not drawn; the panel says so. A chapter its run
has nothing for stops the script (no chart is left from another run).

A new run, charts and tables together (what the issue asks: both from one named run):
  1. on the GPU, `bash bench/device_run.sh build tour ladder pack` (LADDER_D=128, the default):
     the tour log, ladder_{fwd,bwd}_d128.json with their peers' CSVs, ladder_decode.json with
     compare_decode's output; commit them as notes/measured/<gpu>-<date>/ with the run's section
     in notes/measured/README.md;
  2. set the chapters' entries of RUNS below to that folder and run
     `/usr/bin/python3 notes/figures/make_figures.py` (Debian's matplotlib, which the committed
     SVGs are pinned to);
  3. `python3 notes/figures/fig_ladders.py --tables NN` prints chapter NN's ladder from the same
     run as a markdown table, every shape the run has (fa_bench: every N, full and causal): its
     figures replace those of the chapter README's ladder table, whose first columns (the rung,
     its idea) stay as written, and the table's sentence names the new run and links its logs.
make_figures.py runs main() (the CPU test FiguresAreCurrent checks the committed SVGs).
"""
import argparse
import csv
import glob
import gzip
import json
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import figstyle as fs  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(HERE))
MEASURED = os.path.join(ROOT, "notes", "measured")

# The run each chapter's chart and table come from: a folder of notes/measured/, or a folder and a
# glob of its files. Chapters 05-08: the ladder stage of the newest run, on an H200 (fa_bench JSON
# with SDPA's FlashAttention-2 and cuDNN timed in the same run; no tour, and no softmax, GEMM,
# transpose or serving benchmarks). Chapters 01-04 and 09: the newest run with a tour (of those
# chapters only), on an H200.
TOUR_RUN = "h200-2026-12-02/tour*"
LADDER_RUN = "h200-2026-12-01/ladder_*"
RUNS = {"01": TOUR_RUN, "02": TOUR_RUN, "03": TOUR_RUN, "04": TOUR_RUN, "05": LADDER_RUN,
        "06": LADDER_RUN, "07": LADDER_RUN, "08": LADDER_RUN, "09": TOUR_RUN}

CHART_N = 8192  # the sequence length of the fa_bench charts (the protocol's shape, B 2, H 16)
CHART_D = 128

RUNG_COLOUR = fs.BLUE
START_COLOUR = fs.SKY  # the rung a chapter starts from (chapter 05's final rung in chapter 07)
PEER_COLOURS = {"flash": fs.ORANGE, "cudnn": fs.VERMILLION, "cublas": fs.ORANGE,
                "other": fs.GREY}


# --------------------------------------------------------------------------- reading the run
def read_text(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8", errors="replace") as f:
        return f.read()


TOUR_ROW = re.compile(
    r"^(?P<kernel>\S+)\s+(?P<shape>.*?)\s+(?P<dtype>fp32|bf16|fp16|e4m3)\s+(?P<ms>\S+)\s+"
    r"(?P<tf>\S+)\s+(?P<gbs>-|\d+)\s*(?P<pct>-|[0-9.]+% \w+)\s+(?P<passes>\S+)\s+(?P<err>\S+)\s+"
    r"(?P<status>PASS|FAIL\S*)\s*$")


def num(s):
    try:
        return float(s)
    except (TypeError, ValueError):
        return None


class Tour:
    """The rows of every table the tour printed, with their chapter and section."""

    def __init__(self, text):
        self.rows, self.gpu, self.copy, self.text = [], None, None, text
        chapter, section = None, ""
        seen = {}
        for line in text.splitlines():
            m = re.match(r"^# Chapter (\d\d):", line)
            if m:
                chapter, section = m.group(1), ""
                continue
            if line.startswith("== "):
                section = line.strip("= ").strip()
                continue
            m = re.search(r"GPU: (.+?) \(sm_", line)
            if m and not self.gpu:
                self.gpu = m.group(1).strip()
            m = re.match(r"^\s*device-to-device copy\s+(\d+) GB/s", line)
            if m and self.copy is None:
                self.copy = float(m.group(1))
            m = TOUR_ROW.match(line)
            if m and chapter and m.group("kernel") != "kernel":
                key = (chapter, section, m.group("kernel"), m.group("shape"), m.group("dtype"))
                seen[key] = seen.get(key, 0) + 1
                self.rows.append({
                    "chapter": chapter, "section": section, "kernel": m.group("kernel"),
                    "shape": m.group("shape").strip(), "dtype": m.group("dtype"),
                    "tflops": num(m.group("tf")), "gbs": num(m.group("gbs")),
                    "pct": m.group("pct"), "n": seen[key],
                })
        if self.copy is None:
            m = re.search(r"copy (?:bandwidth|ceiling) (\d+) GB/s", text)
            self.copy = float(m.group(1)) if m else None

    def select(self, chapter, section_prefix):
        return [r for r in self.rows
                if r["chapter"] == chapter and r["section"].startswith(section_prefix)]


def parse_shape(shape):
    """{'B', 'H', 'N', 'D', 'causal', 'Hkv'} of a tour shape 'B4 H16 Nq4096 Nk4096 D128 causal'."""
    out = {"causal": " causal" in shape}
    for key, pat in (("B", r"\bB(\d+)"), ("H", r"\bH(\d+)"), ("N", r"\bNq(\d+)"),
                     ("Nk", r"\bNk(\d+)"), ("D", r"\bD(\d+)"), ("Hkv", r"\bHkv(\d+)")):
        m = re.search(pat, shape)
        out[key] = int(m.group(1)) if m else None
    if out["Hkv"] is None:
        out["Hkv"] = out["H"]
    return out


class Run:
    """Everything the charts need from one folder of notes/measured/."""

    def __init__(self, spec):
        folder, _, pattern = spec.partition("/")
        self.name, self.spec = folder, spec  # the folder; the folder and the glob of its files
        self.folder = os.path.join(MEASURED, folder)
        if not os.path.isdir(self.folder):
            raise SystemExit(f"fig_ladders: no run folder notes/measured/{folder}/")
        m = re.search(r"(\d{4}-\d\d-\d\d)", folder)
        self.date = m.group(1) if m else folder
        files = sorted(glob.glob(os.path.join(self.folder, pattern or "*")))
        if not files:
            raise SystemExit(f"fig_ladders: no file notes/measured/{spec} in the run folder")
        self.tour, self.bench, self.peers, self.decode_peers = None, {}, {}, {}
        self.copy_json = None
        jsons, csvs, logs = [], [], []
        for path in files:
            base = os.path.basename(path)
            if base.endswith(".json"):
                jsons.append(path)
            elif base.endswith(".csv"):
                csvs.append(path)
            elif re.search(r"\.(log|txt|md)(\.gz)?$", base):
                logs.append(path)
        self._read_tour(logs)
        bench_dates = self._read_bench(jsons)
        self._read_peers(csvs, logs, bench_dates)
        self.gpu = self.tour.gpu or self._gpu_of_bench(logs) or folder

    def where(self):
        """notes/measured/<folder>/, or notes/measured/<folder>/<glob> where the run is a subset."""
        return f"notes/measured/{self.spec}" + ("/" if self.spec == self.name else "")

    def _read_tour(self, logs):
        tours = []
        for path in logs:
            if os.path.getsize(path) > 20_000_000:
                continue
            text = read_text(path)
            if "FlashAttention from scratch: the tour" in text:
                tours.append(Tour(text))
        # Several tours: the one with the most rows (a whole tour over a partial one). None: an
        # empty one, so that the chapters drawn from the tour find no rows (and stop the script).
        self.tour = max(tours, key=lambda t: len(t.rows)) if tours else Tour("")

    @staticmethod
    def _gpu_of_bench(logs):
        """The GPU fa_bench names in its log's first line ("fa_bench on NVIDIA H200 (sm_90, ...")."""
        for path in logs:
            if os.path.getsize(path) > 20_000_000:
                continue
            m = re.search(r"^fa_bench on (.+?) \(sm_", read_text(path), re.M)
            if m:
                return m.group(1).strip()
        return None

    def _read_bench(self, jsons):
        """self.bench[name] = (counters, date); returns {path: (date, set of values)}."""
        dates = {}
        for path in jsons:
            try:
                with open(path, encoding="utf-8") as f:
                    doc = json.load(f)
            except (ValueError, OSError):
                continue
            if "benchmarks" not in doc:
                continue
            date = doc.get("context", {}).get("date", "")
            values = set()
            for b in doc["benchmarks"]:
                name = b["name"].split("/iterations:")[0]
                counters = {k: b[k] for k in ("TFLOPs", "GBps") if k in b}
                values.update(round(v, 6) for v in counters.values())
                if name not in self.bench or self.bench[name][1] < date:
                    self.bench[name] = (counters, date)
                if name == "ceiling/copy_bandwidth" and "GBps" in b:
                    if self.copy_json is None or self.copy_json[1] < date:
                        self.copy_json = (b["GBps"], date)
            dates[path] = (date, values)
        return dates

    @staticmethod
    def _date_of(ours_values, bench_dates):
        """The date of the newest fa_bench JSON that holds one of these figures ('' if none)."""
        best = ""
        for date, values in bench_dates.values():
            if any(round(v, 6) in values for v in ours_values if v is not None):
                best = max(best, date)
        return best

    def _read_peers(self, csvs, logs, bench_dates):
        for path in csvs:
            with open(path, encoding="utf-8", newline="") as f:
                rows = list(csv.DictReader(f))
            if not rows:
                continue
            head = rows[0].keys()
            if {"D", "causal", "N", "B", "H"} <= set(head):
                ours = [num(r.get(k)) for r in rows for k in ("ours_fwd", "ours_bwd")]
                date = self._date_of(ours, bench_dates)
                for r in rows:
                    key = (int(r["D"]), r["causal"] == "True", int(r["N"]))
                    for what in ("flash_fwd", "cudnn_fwd", "flash_bwd", "cudnn_bwd"):
                        v = num(r.get(what))
                        if v is None:
                            continue
                        # A CSV timed beside our kernels of this direction first (compare_sdpa
                        # times SDPA's forward for a backward-only JSON too), then the newest.
                        rank = (num(r.get("ours_" + what.split("_")[1])) is not None, date)
                        slot = self.peers.setdefault(key, {})
                        if what not in slot or slot[what][1] < rank:
                            slot[what] = (v, rank, int(r["B"]), int(r["H"]))
            elif {"H_kv", "Nk", "flash_gbps", "cudnn_gbps"} <= set(head):
                ours = [num(r.get("ours_gbps")) for r in rows]
                date = self._date_of(ours, bench_dates)
                for r in rows:
                    key = (int(r["B"]), int(r["H"]), int(r["H_kv"]), int(r["Nk"]), int(r["D"]))
                    self._decode_peer(key, num(r["flash_gbps"]), num(r["cudnn_gbps"]), date)
        # compare_decode's printed table, where its CSV did not come back.
        row = re.compile(r"^\| B(\d+) H(\d+) Hkv(\d+) Nq\d+ Nk(\d+) D(\d+) \S+ \| (\S+) \| [^|]+\|"
                         r" ([\d.]+) \|[^|]+\|[^|]+\| ([\d.]+) \|[^|]+\|[^|]+\| ([\d.]+) \|")
        for path in logs:
            if os.path.getsize(path) > 2_000_000:
                continue
            text = read_text(path)
            if "Decoding on " not in text:
                continue
            for line in text.splitlines():
                m = row.match(line)
                if m:
                    key = tuple(int(m.group(i)) for i in (1, 2, 3, 4, 5))
                    date = self._date_of([float(m.group(7))], bench_dates)
                    self._decode_peer(key, float(m.group(8)), float(m.group(9)), date)

    def _decode_peer(self, key, flash, cudnn, date):
        slot = self.decode_peers.get(key)
        if slot is None or slot[2] <= date:
            self.decode_peers[key] = (flash, cudnn, date)

    # -- lookups
    def copy_ceiling(self, prefer_json=False):
        if prefer_json and self.copy_json:
            return self.copy_json[0]
        return self.tour.copy if self.tour.copy else (self.copy_json or (None,))[0]

    def bench_rows(self, family, chapter, pattern, counter="TFLOPs"):
        """{(kernel, rest-of-name): value} of fa_bench rows family/chapter/kernel/..."""
        out = {}
        for name, (counters, _) in self.bench.items():
            parts = name.split("/")
            if len(parts) < 4 or parts[0] != family or parts[1] != chapter:
                continue
            kernel = f"{parts[1]}/{parts[2]}"
            if re.match(pattern, kernel) and counter in counters:
                out[(kernel, "/".join(parts[3:]))] = counters[counter]
        return out

    def peer(self, d, causal, n, b, h, what):
        slot = self.peers.get((d, causal, n), {}).get(what)
        if slot and slot[2] == b and slot[3] == h:
            return slot[0]
        return None


# --------------------------------------------------------------------------- the charts' content
def rung_order(kernel):
    m = re.search(r"/(?:\w+_)?v(\d+)", kernel)
    return (int(m.group(1)) if m else 99, kernel)


def is_main_path(kernel, chapter, prefix="v"):
    return re.match(rf"^{chapter}/{prefix}\d+_", kernel) is not None


class Panel:
    def __init__(self, title, unit, note=""):
        self.title, self.unit, self.note = title, unit, note
        self.bars = []  # (label, value, kind, annotation); kind: rung, start, flash, cudnn, ...
        self.lines = []  # (label, value): ceilings drawn across the panel

    def add(self, label, value, kind="rung", annotation=None):
        if value is not None:
            self.bars.append((label, value, kind, annotation))

    def missing_note(self, names):
        if names:
            text = "not timed at this shape: " + ", ".join(names)
            self.note = (self.note + "; " if self.note else "") + text


class Chart:
    def __init__(self, chapter, topic, panels, columns=2, table=None):
        self.chapter, self.topic, self.panels, self.columns = chapter, topic, panels, columns
        self.table = table  # the panels --tables prints (default: the chart's)


def pct(value, ceiling):
    return f"{value:.0f} ({100.0 * value / ceiling:.0f}%)" if ceiling else f"{value:.0f}"


def gbs_panels(run, chapter, section, shapes, title_of, rung_prefix="v"):
    """GB/s panels of a chapter's tour rows against the copy bandwidth."""
    copy = run.copy_ceiling()
    rows = run.tour.select(chapter, section)
    panels = []
    for shape in shapes:
        p = Panel(title_of(shape), "GB/s")
        mine = sorted((r for r in rows if r["shape"] == shape and r["n"] == 1
                       and is_main_path(r["kernel"], chapter, rung_prefix)),
                      key=lambda r: rung_order(r["kernel"]))
        for r in mine:
            p.add(r["kernel"], r["gbs"], "rung", pct(r["gbs"], copy))
        if copy:
            p.lines.append(("copy bandwidth", copy))
        panels.append(p)
    return panels


def shapes_in_order(rows):
    """The shapes of tour rows, in the order the table printed them."""
    shapes = []
    for r in rows:
        if r["shape"] not in shapes:
            shapes.append(r["shape"])
    return shapes


def softmax_chart(run, chapter, topic):
    shapes = shapes_in_order(run.tour.select(chapter, "Row softmax"))
    panels = gbs_panels(run, chapter, "Row softmax", shapes,
                        lambda s: f"fp32 {s.replace('x', ' × ')}")
    return Chart(chapter, f"{topic}, GB/s of x read once and y written once", panels)


def chapter_01(run):
    return softmax_chart(run, "01", "safe softmax")


def chapter_02(run):
    return softmax_chart(run, "02", "online softmax")


def chapter_03(run):
    rows = run.tour.select("03", "Speed at")
    panels = []
    for dtype, title in (("fp32", "fp32 on the CUDA cores"), ("bf16", "bf16 on the tensor cores")):
        mine = [r for r in rows if r["dtype"] == dtype]
        if not mine:
            continue
        shape = mine[0]["shape"]
        p = Panel(f"{title}, {shape.replace('x', ' × ')}", "TFLOP/s")
        cublas = next((r["tflops"] for r in mine if r["kernel"] == "ref/cublas"), None)
        for r in sorted((r for r in mine if is_main_path(r["kernel"], "03")),
                        key=lambda r: rung_order(r["kernel"])):
            share = f" ({100 * r['tflops'] / cublas:.0f}%)" if cublas else ""
            p.add(r["kernel"], r["tflops"], "rung", f"{r['tflops']:.1f}{share}")
        p.add(f"cuBLAS {dtype}", cublas, "cublas", f"{cublas:.1f}" if cublas else None)
        panels.append(p)
    return Chart("03", "GEMM, TFLOP/s, against cuBLAS on the same shape", panels)


def chapter_04(run):
    shapes = shapes_in_order(run.tour.select("04", "Transpose speed"))
    panels = gbs_panels(run, "04", "Transpose speed", shapes,
                        lambda s: f"transpose fp32 {s.replace('x', ' × ')}")
    return Chart("04", "coalesced loads: transpose, GB/s of the matrix read and written", panels,
                 columns=1)


def bench_ns(run, family, chapter, pattern):
    """The sequence lengths at which the run's fa_bench JSON has a chapter's rungs (bf16 D 128)."""
    ns = set()
    for _, rest in run.bench_rows(family, chapter, pattern):
        m = re.match(rf"bf16/D{CHART_D}/(?:full|causal)/N(\d+)$", rest)
        if m:
            ns.add(int(m.group(1)))
    return sorted(ns)


def attention_panels(run, chapter, family, direction, pattern, start=None, n=CHART_N):
    """Full and causal panels of a chapter's attention rungs: fa_bench at D 128, N n where the
    run has them, else the tour's table of the chapter at bf16 D 128 (its largest shape)."""
    what = "forward" if direction == "fwd" else "backward"
    rows = run.bench_rows(family, chapter, pattern)
    panels = []
    have_bench = n in bench_ns(run, family, chapter, pattern)
    for causal in (False, True):
        mask = "causal" if causal else "full"
        note = ""
        if have_bench:
            b, h = 16384 // n, 2048 // CHART_D
            shape = {"B": b, "H": h, "N": n, "D": CHART_D, "causal": causal}
            values = {k: v for (k, rest), v in rows.items()
                      if rest == f"bf16/D{CHART_D}/{mask}/N{n}"}
            start_v = None
            if start:
                st = run.bench_rows(family, start.split("/")[0], re.escape(start))
                start_v = st.get((start, f"bf16/D{CHART_D}/{mask}/N{n}"))
            fp32 = {k: v for (k, rest), v in rows.items()
                    if rest == f"fp32/D{CHART_D}/{mask}/N{n}" and k not in values}
        else:
            note = "the chapter program's own size, from the tour"
            tour = [r for r in run.tour.select(chapter, "")
                    if re.match(pattern, r["kernel"]) and r["dtype"] in ("bf16", "fp32")]
            big = [r for r in tour if parse_shape(r["shape"])["D"] == CHART_D
                   and r["dtype"] == "bf16"]
            pool = big if big else tour
            if not pool:
                return panels
            # the largest shape the tour timed the rungs at (its last table), this mask
            sizes = sorted({(parse_shape(r["shape"])["N"] or 0, r["section"]) for r in pool})
            section = sizes[-1][1]
            sel = [r for r in run.tour.select(chapter, "") if r["section"] == section
                   and parse_shape(r["shape"])["causal"] == causal]
            if not sel:
                continue
            shape = parse_shape(sel[0]["shape"])
            values = {r["kernel"]: r["tflops"] for r in sel if re.match(pattern, r["kernel"])
                      and r["dtype"] == "bf16"}
            fp32 = {r["kernel"]: r["tflops"] for r in sel if re.match(pattern, r["kernel"])
                    and r["dtype"] == "fp32"}
            start_v = next((r["tflops"] for r in sel if r["kernel"] == start), None) \
                if start else None
        title = (f"{what}, {'causal' if causal else 'full'}: B {shape['B']}, H {shape['H']}, "
                 f"N {shape['N']}, D {shape['D']}")
        p = Panel(title, "TFLOP/s", note)
        if start and start_v is not None:
            p.add(start, start_v, "start", f"{start_v:.1f}")
        for k in sorted(set(values) | set(fp32), key=rung_order):
            if k in values:
                p.add(k, values[k], "rung", f"{values[k]:.1f}")
            else:
                p.add(k + " (fp32)", fp32[k], "rung", f"{fp32[k]:.1f}")
        missing = []
        for name, label in (("flash", "PyTorch FlashAttention-2"), ("cudnn", "PyTorch cuDNN")):
            v = run.peer(shape["D"], causal, shape["N"], shape["B"], shape["H"],
                         f"{name}_{direction}")
            if v is None:
                missing.append(label)
            p.add(label, v, name, f"{v:.1f}" if v is not None else None)
        if missing:
            p.note = (p.note + "; " if p.note else "") + "PyTorch SDPA not timed at this shape"
        # The rungs of the main path that the run timed elsewhere but not at this shape.
        known = {r["kernel"] for r in run.tour.select(chapter, "")
                 if re.match(pattern, r["kernel"])}
        known |= {k for k, _ in rows}
        shown = {b[0].split(" ")[0] for b in p.bars}
        p.missing_note([k.split("/")[1] for k in sorted(known, key=rung_order) if k not in shown])
        panels.append(p)
    return panels


def attention_table(run, chapter, family, direction, pattern, start=None):
    """Panels for every N the run's fa_bench JSON has (the README tables' columns), or None."""
    ns = bench_ns(run, family, chapter, pattern)
    if not ns:
        return None
    return [p for n in ns for p in attention_panels(run, chapter, family, direction, pattern,
                                                    start, n)]


def chapter_05(run):
    panels = attention_panels(run, "05", "attn_fwd", "fwd", r"^05/v\d+_")
    return Chart("05", "the fused forward, bf16, TFLOP/s (4·B·H·D per visible pair)", panels,
                 table=attention_table(run, "05", "attn_fwd", "fwd", r"^05/v\d+_"))


def chapter_06(run):
    panels = attention_panels(run, "06", "attn_bwd", "bwd", r"^06/v\d+_")
    return Chart("06", "the backward, TFLOP/s (2.5× the forward's FLOPs)", panels,
                 table=attention_table(run, "06", "attn_bwd", "bwd", r"^06/v\d+_"))


def chapter_07(run):
    fwd = attention_panels(run, "07", "attn_fwd", "fwd", r"^07/v\d+_",
                           start="05/v5_fewer_instructions")
    bwd = attention_panels(run, "07", "attn_bwd", "bwd", r"^07/bwd_v\d+_")
    if not bwd:
        fwd[-1].note += ("; " if fwd[-1].note else "") + "the backward rungs: not timed in this run"
    tf = attention_table(run, "07", "attn_fwd", "fwd", r"^07/v\d+_",
                         start="05/v5_fewer_instructions")
    tb = attention_table(run, "07", "attn_bwd", "bwd", r"^07/bwd_v\d+_")
    table = (tf or fwd) + (tb or bwd) if (tf or tb) else None
    return Chart("07", "FlashAttention on Hopper, bf16, TFLOP/s: forward, then backward",
                 fwd + bwd, table=table)


def chapter_08(run):
    rows = run.bench_rows("attn_decode", "08", r"^08/v\d+_", counter="GBps")
    panels = []
    if rows:
        copy = run.copy_ceiling(prefer_json=True)
        for rest in sorted({rest for _, rest in rows}):
            m = re.match(r"bf16/D(\d+)/B(\d+)_H(\d+)_Hkv(\d+)/Nq1/Nk(\d+)", rest)
            if not m:
                continue
            d, b, h, hkv, nk = (int(x) for x in m.groups())
            values = {k: v for (k, r), v in rows.items() if r == rest}
            panels.append(decode_panel(run, values, b, h, hkv, nk, d, copy))
    else:
        copy = run.copy_ceiling()
        sel = run.tour.select("08", "08: the same queries")
        for shape in shapes_in_order(sel):
            s = parse_shape(shape)
            values = {r["kernel"]: r["gbs"] for r in sel if r["shape"] == shape
                      and is_main_path(r["kernel"], "08")}
            panels.append(decode_panel(run, values, s["B"], s["H"], s["Hkv"], s["Nk"], s["D"],
                                       copy))
    return Chart("08", "decoding, bf16, one query row, GB/s of Q, K, V, O and L", panels,
                 columns=1)


def decode_panel(run, values, b, h, hkv, nk, d, copy):
    kind = "MHA" if hkv == h else ("MQA" if hkv == 1 else "GQA")
    p = Panel(f"{kind}: B {b}, H {h}, H_kv {hkv}, seq_k {nk}, D {d}", "GB/s")
    for k in sorted(values, key=rung_order):
        p.add(k, values[k], "rung", pct(values[k], copy))
    peer = run.decode_peers.get((b, h, hkv, nk, d))
    if peer:
        p.add("PyTorch FlashAttention-2", peer[0], "flash", pct(peer[0], copy))
        p.add("PyTorch cuDNN", peer[1], "cudnn", pct(peer[1], copy))
    else:
        p.note = "PyTorch SDPA not timed at this shape in this run"
    if copy:
        p.lines.append(("copy bandwidth", copy))
    return p


def chapter_09(run):
    panels = []
    var = run.tour.select("09", "09: varlen forward")
    for causal in (False, True):
        sel = [r for r in var if (" causal" in r["shape"]) == causal]
        mixed = [r for r in sel if not re.search(r"\(max 512\)", r["shape"])]
        if not mixed:
            continue
        head = re.search(r"varlen (\d+) seqs Tq(\d+) \(max (\d+)\)", mixed[0]["shape"])
        title = (f"varlen forward, {'causal' if causal else 'full'}: {head.group(1)} sequences, "
                 f"{head.group(2)} tokens, the longest {head.group(3)}") if head else "varlen"
        p = Panel(title, "TFLOP/s")
        for r in sorted((r for r in mixed if r["kernel"].startswith("09/")),
                        key=lambda r: ("hopper" in r["kernel"], rung_order(r["kernel"]))):
            if r["n"] == 1 and "(max 512)" not in r["shape"]:
                p.add(r["kernel"], r["tflops"], "rung", f"{r['tflops']:.1f}")
        for r in mixed:
            if not r["kernel"].startswith("09/"):
                how = "padded" if r["n"] == 1 else "once per sequence"
                p.add(f"{r['kernel']}, {how}", r["tflops"], "other", f"{r['tflops']:.1f}")
        panels.append(p)
    win = run.tour.select("09", "09: sliding window")
    if win:
        w = re.search(r"window\((\d+),(\d+)\)", " ".join(r["shape"] for r in win))
        n = re.search(r"Tq(\d+)", win[0]["shape"])
        title = (f"sliding window {int(w.group(1)) + 1}, causal, N {n.group(1)}: with the window "
                 f"and without it") if w and n else "sliding window"
        p = Panel(title, "TFLOP/s")
        for r in sorted(win, key=lambda r: ("hopper" in r["kernel"], rung_order(r["kernel"]))):
            if r["kernel"].startswith("09/"):
                with_w = "window(" in r["shape"]
                p.add(f"{r['kernel']}, {'window' if with_w else 'no window'}", r["tflops"],
                      "rung" if with_w else "other", f"{r['tflops']:.1f}")
        for r in win:
            if not r["kernel"].startswith("09/"):
                p.add(f"{r['kernel']}, no window", r["tflops"], "other", f"{r['tflops']:.1f}")
        panels.append(p)
    paged = run.tour.select("09", "09: paged forward")
    if paged:
        copy = run.copy_ceiling()
        dec = [r for r in paged if "Nq1 " in r["shape"] and r["n"] == 1]
        first = {}
        for r in dec:
            first.setdefault((r["kernel"], r["shape"]), r)
        s = parse_shape(dec[0]["shape"]) if dec else {}
        nk = re.search(r"Nk<=(\d+)", dec[0]["shape"]).group(1) if dec else "?"
        p = Panel(f"paged decoding: B {s.get('B')}, H {s.get('H')}, H_kv {s.get('Hkv')}, "
                  f"seq_k up to {nk}, D {s.get('D')}", "GB/s")
        for (kernel, shape), r in first.items():
            if kernel == "09/paged_v1_decode":
                page = re.search(r"page(\d+)", shape).group(1)
                p.add(f"{kernel}, page {page}", r["gbs"], "rung", pct(r["gbs"], copy))
        for (kernel, shape), r in first.items():
            if kernel.startswith("08/"):
                p.add(f"{kernel}, contiguous cache", r["gbs"], "other", pct(r["gbs"], copy))
        if copy:
            p.lines.append(("copy bandwidth", copy))
        panels.append(p)
    return Chart("09", "serving kernels against their contiguous counterparts, bf16 D 128",
                 panels)


CHAPTERS = [chapter_01, chapter_02, chapter_03, chapter_04, chapter_05, chapter_06, chapter_07,
            chapter_08, chapter_09]


# --------------------------------------------------------------------------- drawing
BAR_IN = 0.24  # inches per bar
WIDTH_IN = 11.0
CHAR_IN = 0.064  # about the width of a character of the 8-point labels (DejaVu Sans)

LEGEND = [
    ("rung", RUNG_COLOUR, "the chapter's rungs, in order"),
    ("start", START_COLOUR, "the rung the chapter starts from"),
    ("peer", PEER_COLOURS["flash"], "the peers"),
    ("other", PEER_COLOURS["other"], "the same work without the chapter's idea"),
]


def panel_height(p):
    return len(p.bars) * BAR_IN + 0.62 + (0.2 if p.note else 0.0)


def draw(chart, run, out_dir):
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D
    from matplotlib.patches import Rectangle

    cols = max(1, min(chart.columns, len(chart.panels)))
    grid = [chart.panels[i : i + cols] for i in range(0, len(chart.panels), cols)]
    longest = max(len(b[0]) for p in chart.panels for b in p.bars)
    label_in = min(0.25 + CHAR_IN * longest, 3.2)
    top_in, bottom_in, gap_in = 1.0, 0.25, 0.3
    heights = [max(panel_height(p) for p in row) for row in grid]
    height = top_in + sum(heights) + gap_in * (len(grid) - 1) + bottom_in

    def fx(x):
        return x / WIDTH_IN

    def fy(y):  # inches from the bottom
        return y / height

    fig = plt.figure(figsize=(WIDTH_IN, height))
    fig.text(fx(0.3), fy(height - 0.28), f"Chapter {chart.chapter}: {chart.topic}", fontsize=11,
             weight="bold", ha="left", va="center", color=fs.INK)
    fig.text(fx(0.3), fy(height - 0.52),
             f"{run.gpu}, {run.date}: one run, {run.where()}", fontsize=8.5,
             ha="left", va="center", color="#555555")
    # The legend: only what this chart shows.
    kinds = {("peer" if b[2] in PEER_COLOURS and b[2] != "other" else b[2])
             for p in chart.panels for b in p.bars}
    x = 0.3
    for kind, colour, text in LEGEND:
        if kind not in kinds:
            continue
        swatches = [colour]
        if kind == "peer" and any(b[2] == "cudnn" for p in chart.panels for b in p.bars):
            swatches.append(PEER_COLOURS["cudnn"])
        for colour in swatches:
            fig.patches.append(Rectangle((fx(x), fy(height - 0.81)), fx(0.14), fy(0.1),
                                         transform=fig.transFigure, facecolor=colour,
                                         edgecolor="none"))
            x += 0.17
        fig.text(fx(x + 0.03), fy(height - 0.76), text, fontsize=8, ha="left", va="center",
                 color=fs.INK)
        x += 0.28 + CHAR_IN * len(text)
    if any(p.lines for p in chart.panels):
        fig.lines.append(Line2D([fx(x), fx(x + 0.3)], [fy(height - 0.76)] * 2,
                                transform=fig.transFigure, color=fs.INK, linewidth=0.9,
                                linestyle=(0, (4, 3))))
        fig.text(fx(x + 0.38), fy(height - 0.76), "a ceiling measured in the same run",
                 fontsize=8, ha="left", va="center", color=fs.INK)

    col_w = (WIDTH_IN - 0.3) / cols
    y_top = height - top_in
    for row, h_row in zip(grid, heights):
        for c, p in enumerate(row):
            left = 0.15 + c * col_w
            x0 = left + label_in
            w = col_w - label_in - 0.75
            h = len(p.bars) * BAR_IN
            bottom = y_top - 0.32 - h
            ax = fig.add_axes([fx(x0), fy(bottom), fx(w), fy(h)])
            draw_panel(ax, p)
            fig.text(fx(left + 0.15), fy(y_top - 0.12), p.title, fontsize=9, ha="left",
                     va="center", color=fs.INK, weight="bold")
            if p.note:
                fig.text(fx(left + 0.15), fy(bottom - 0.45), p.note, fontsize=7.5, ha="left",
                         va="center", color="#555555", style="italic")
        y_top -= h_row + gap_in
    fs.save(fig, out_dir, f"ladder_ch{chart.chapter}")


def draw_panel(ax, p):
    n = len(p.bars)
    values = [b[1] for b in p.bars] + [v for _, v in p.lines]
    xmax = max(values) * 1.22 if values else 1.0
    colours = {"rung": RUNG_COLOUR, "start": START_COLOUR}
    for i, (label, value, kind, annotation) in enumerate(p.bars):
        y = n - 1 - i
        colour = colours.get(kind, PEER_COLOURS.get(kind, fs.GREY))
        ax.barh(y, value, height=0.68, color=colour, edgecolor="none")
        # On a white ground, so that a ceiling's dashed line does not run through the figure.
        ax.text(value + xmax * 0.01, y, annotation or f"{value:g}", fontsize=7.5, va="center",
                ha="left", color=fs.INK,
                bbox=dict(facecolor="white", edgecolor="none", pad=0.4) if p.lines else None)
    # A rule between the rungs and the peers, where the peers come after all the rungs.
    ours = [i for i, b in enumerate(p.bars) if b[2] in ("rung", "start")]
    if ours and len(ours) < n and max(ours) == len(ours) - 1:
        ax.axhline(n - len(ours) - 0.5, color="#BBBBBB", linewidth=0.6)
    for label, value in p.lines:
        ax.axvline(value, color=fs.INK, linewidth=0.9, linestyle=(0, (4, 3)))
        ax.text(value, n - 0.45, f"{label} {value:.0f}", fontsize=7.5, va="bottom", ha="right",
                color=fs.INK)
    ax.set_ylim(-0.6, n - 0.4 + (0.55 if p.lines else 0.0))
    ax.set_xlim(0, xmax)
    ax.set_yticks(range(n))
    ax.set_yticklabels([b[0] for b in reversed(p.bars)], fontsize=8)
    ax.tick_params(axis="y", length=0)
    ax.tick_params(axis="x", labelsize=7.5)
    ax.set_xlabel(p.unit, fontsize=8, labelpad=2)
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)


# --------------------------------------------------------------------------- tables
def markdown_table(chart, run):
    panels = chart.table or chart.panels
    labels = []
    for p in panels:
        for b in p.bars:
            if b[0] not in labels:
                labels.append(b[0])
    lines = [f"Chapter {chart.chapter}: {chart.topic}. {run.gpu}, {run.date} "
             f"([notes/measured/{run.name}/](../../notes/measured/{run.name}/)"
             f"{', ' + run.spec.partition('/')[2] if run.spec != run.name else ''})", ""]
    head = "| rung | " + " | ".join(p.title for p in panels) + " |"
    lines += [head, "| --- |" + " ---: |" * len(panels)]
    for label in labels:
        cells = []
        for p in panels:
            bar = next((b for b in p.bars if b[0] == label), None)
            cells.append((bar[3] or f"{bar[1]:g}") if bar else "—")
        m = re.match(r"^(\d\d/\w+)(.*)$", label)
        name = f"`{m.group(1)}`{m.group(2)}" if m else label
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    ceilings = sorted({l for p in panels for l, _ in p.lines})
    for c in ceilings:
        cells = [next((f"{v:.0f}" for l, v in p.lines if l == c), "—") for p in panels]
        lines.append(f"| {c} | " + " | ".join(cells) + " |")
    notes = [f"{p.title}: {p.note}" for p in panels if p.note]
    if notes:
        lines += [""] + [f"- {n}" for n in notes]
    return "\n".join(lines)


def run_of(chapter, runs, override=None):
    """The Run of a chapter: override (every chapter from one run) or RUNS[chapter], read once."""
    spec = override or RUNS[chapter]
    if spec not in runs:
        runs[spec] = Run(spec)
    return runs[spec]


def main(out_dir, run_name=None):
    runs = {}
    for build in CHAPTERS:
        fs.apply()
        run = run_of(build.__name__[-2:], runs, run_name)
        chart = build(run)
        if not chart.panels:
            # Never leave another run's chart in place: every chart is from its run or none is.
            raise SystemExit(f"fig_ladders: {run.where()} has nothing for chapter "
                             f"{chart.chapter}'s ladder (no tour log, or it lacks the chapter?)")
        draw(chart, run, out_dir)


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--run", default=None,
                    help="a folder of notes/measured/ (optionally /GLOB) for every chapter "
                         "(default: each chapter's entry of RUNS)")
    ap.add_argument("--out", default=HERE, help="where the SVGs go (default: here)")
    ap.add_argument("--tables", nargs="*", metavar="NN",
                    help="print the chapters' ladder tables (markdown) instead of drawing")
    args = ap.parse_args()
    if args.tables is not None:
        the_runs = {}
        for build in CHAPTERS:
            ch = build.__name__[-2:]
            if not args.tables or ch in args.tables:
                the_run = run_of(ch, the_runs, args.run)
                print(markdown_table(build(the_run), the_run) + "\n")
    else:
        os.makedirs(args.out, exist_ok=True)
        main(args.out, args.run)
