#!/usr/bin/env bash
# Scratch (removed before landing): the forward rows the dispatch reads, with t56 among them.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/out}; mkdir -p "$OUT"
log() { echo "[$(date +%H:%M:%S)] $*" | tee -a "$OUT/steps.log"; }
log "gpu: $(nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader 2>&1)"
cmake --preset default -DCMAKE_CUDA_ARCHITECTURES=90 > "$OUT/configure.log" 2>&1 || { tail -30 "$OUT/configure.log"; exit 1; }
cmake --build build -j 16 --target fa_bench > "$OUT/build.log" 2>&1 || { grep -E "error" "$OUT/build.log" | head -40; exit 1; }
log "build done"
ks=(07/v1_tma_wgmma 07/v5_persistent 07/t51_wide_kv_tiles 07/t52_wide_kv_tiles_persistent 07/t56_wide_o_stores)
n=${#ks[@]}
for r in 1 2 3; do
  for i in $(seq 0 $((n - 1))); do
    k=${ks[$(( (i + r) % n ))]}
    F="attn_fwd/$k/bf16/D(64|80|96|128|192|256)/"
    [[ $k == 07/v1_tma_wgmma ]] && F="attn_fwd/$k/bf16/D64/"
    ./build/bin/fa_bench --benchmark_filter="$F" --benchmark_out="$OUT/r${r}_${k//\//_}.json" \
      --benchmark_out_format=json > /dev/null 2>&1
    log "round $r $k rc=$?"
  done
  for k in 07/t56_wide_o_stores 07/v5_persistent 07/t52_wide_kv_tiles_persistent; do
    ./build/bin/fa_bench --benchmark_filter="attn_gqa/fwd/$k/bf16/D128/" --benchmark_out="$OUT/g${r}_${k//\//_}.json" \
      --benchmark_out_format=json > /dev/null 2>&1
    log "gqa round $r $k rc=$?"
  done
done
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
log "sdpa rc=$?"
cd "$OUT" && tar czf /tmp/dispatch_rows.tgz . && mv /tmp/dispatch_rows.tgz "$OUT/" && find "$OUT" -type f ! -name dispatch_rows.tgz ! -name steps.log ! -name sdpa.log -delete
log packed
