#!/usr/bin/env bash
# Scratch (removed before landing): t56 and t57 against t52, tests, sanitizers, rounds, profiles.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/out}; mkdir -p "$OUT"
log() { echo "[$(date +%H:%M:%S)] $*" | tee -a "$OUT/steps.log"; }
STEP=${STEP:-A}
K56=07/t56_wide_o_stores; K57=07/t57_next_tile_in_l2; K52=07/t52_wide_kv_tiles_persistent
if [[ $STEP == A ]]; then
  log "gpu: $(nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader 2>&1)"
  cmake --preset default -DCMAKE_CUDA_ARCHITECTURES=90 > "$OUT/configure.log" 2>&1 || { tail -30 "$OUT/configure.log"; exit 1; }
  log "build fa_bench fa_gpu_tests"
  cmake --build build -j 16 --target fa_bench fa_gpu_tests > "$OUT/build.log" 2>&1 || { grep -E "error" "$OUT/build.log" | head -40; exit 1; }
  log "build done"
  ctest --test-dir build -R '07_t5[67]_' -LE 'long|sanitize' -j 8 --output-on-failure --timeout 600 > "$OUT/t56_t57_ctest.log" 2>&1
  log "ctest rc=$? $(grep -E 'tests passed|tests failed' "$OUT/t56_t57_ctest.log")"
  # Rounds: each kernel a process of its own, the order rotated every round.
  F='bf16/D(64|128|256)/'
  ks=("$K52" "$K56" "$K57")
  for r in 1 2 3; do
    for i in 0 1 2; do
      k=${ks[$(( (i + r) % 3 ))]}
      ./build/bin/fa_bench --benchmark_filter="attn_fwd/$k/$F" --benchmark_out="$OUT/r${r}_${k//\//_}.json" \
        --benchmark_out_format=json > "$OUT/r${r}_${k//\//_}.log" 2>&1
      log "round $r $k rc=$?"
    done
  done
  python3 - "$OUT" > "$OUT/rounds.md" <<'PY'
import json, glob, sys, collections, statistics, os
out = sys.argv[1]
t = collections.defaultdict(list)
for f in sorted(glob.glob(os.path.join(out, "r*_07_*.json"))):
    for b in json.load(open(f))["benchmarks"]:
        if "TFLOPs" in b: t[b["name"].split("/iterations")[0]].append(b["TFLOPs"])
rows = collections.defaultdict(dict)
for n, v in t.items():
    p = n.split("/"); k = "/".join(p[1:3]); shape = "/".join(p[4:])
    rows[shape][k] = (statistics.median(v), min(v), max(v))
ks = ["07/t52_wide_kv_tiles_persistent", "07/t56_wide_o_stores", "07/t57_next_tile_in_l2"]
print("| shape | t52 | t56 | t57 | t56/t52 | t57/t52 | t57/t56 |")
print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
def key(s):
    d, c, n = s.split("/"); return (int(d[1:]), c, int(n[1:]))
for s in sorted(rows, key=key):
    r = rows[s]
    if not all(k in r for k in ks): continue
    a, b, c = (r[k][0] for k in ks)
    print(f"| {s} | {a:.1f} | {b:.1f} | {c:.1f} | {b/a:.3f} | {c/a:.3f} | {c/b:.3f} |")
PY
  log "rounds done"; cat "$OUT/rounds.md"
  python3 - "$OUT" <<'PY'
import json, glob, sys, os
out = sys.argv[1]; merged = None
for f in sorted(glob.glob(os.path.join(out, "r1_07_*.json"))):
    j = json.load(open(f))
    if merged is None: merged = j
    else: merged["benchmarks"] += j["benchmarks"]
json.dump(merged, open(os.path.join(out, "round1_all.json"), "w"))
PY
  PYTHONUNBUFFERED=1 python3 bench/compare_sdpa.py "$OUT/round1_all.json" --out "$OUT/sdpa" > "$OUT/sdpa.log" 2>&1
  log "sdpa rc=$?"; grep -E "^\|" "$OUT/sdpa.log" | head -45
  FA_SANITIZE_ONLY="$K56,$K57" timeout 170 ctest --test-dir build -L sanitize -E finds_missing -j 4 -V --timeout 600 > "$OUT/sanitize.log" 2>&1
  log "sanitize rc=$? $(grep -E 'tests passed|tests failed' "$OUT/sanitize.log")"
fi
if [[ $STEP == B ]]; then
  M=sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active,sm__inst_executed_pipe_tensor_op_gmma.sum
  M=$M,smsp__inst_executed.sum,smsp__issue_active.avg.pct_of_peak_sustained_active
  M=$M,dram__bytes_read.sum,dram__bytes_write.sum,lts__t_sector_hit_rate.pct,sm__cycles_active.avg,sm__cycles_active.max
  S="--section SpeedOfLight --section WarpStateStats --section LaunchStats --section MemoryWorkloadAnalysis --section SourceCounters"
  for k in t56_wide_o_stores t57_next_tile_in_l2; do
    for D in 256 128; do
      X=ncu_${k%%_*}_D${D}_N512
      ncu $S --metrics "$M" -k "regex:flash_fwd_${k%%_*}_kernel" -s 2 -c 1 -o "$OUT/$X" \
        ./build/bin/fa_bench --benchmark_filter="attn_fwd/07/$k/bf16/D$D/full/N512/" > /dev/null 2>&1
      log "ncu $X rc=$?"
      ncu -i "$OUT/$X.ncu-rep" > "$OUT/$X.txt" 2>&1
      ncu -i "$OUT/$X.ncu-rep" --page source --csv --print-source sass 2>/dev/null | gzip > "$OUT/${X}_sass.csv.gz"
      rm -f "$OUT/$X.ncu-rep"
    done
  done
fi
cd "$OUT" && tar czf "/tmp/scratch_$STEP.tgz" . && mv "/tmp/scratch_$STEP.tgz" "$OUT/" && find "$OUT" -type f ! -name "scratch_$STEP.tgz" ! -name steps.log ! -name rounds.md ! -name sdpa.log -delete
log "packed"
