#!/usr/bin/env bash
# Scratch (removed before landing): the dispatch with t56 on a GPU, t56's long tests, clocks.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/out}; mkdir -p "$OUT"
log() { echo "[$(date +%H:%M:%S)] $*" | tee -a "$OUT/steps.log"; }
log "gpu: $(nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader 2>&1)"
cmake --preset default -DCMAKE_CUDA_ARCHITECTURES=90 > "$OUT/configure.log" 2>&1 || { tail -30 "$OUT/configure.log"; exit 1; }
cmake --build build -j 16 > "$OUT/build.log" 2>&1 || { grep -E "error" "$OUT/build.log" | head -40; exit 1; }
log "build done"
ctest --test-dir build -R 'Dispatch|07_t56_' -LE sanitize -j 8 --output-on-failure --timeout 600 > "$OUT/dispatch_t56_ctest.log" 2>&1
log "ctest (dispatch, t56 default and long) rc=$? $(grep -E 'tests passed|tests failed' "$OUT/dispatch_t56_ctest.log")"
FA_LIBRARY=build/lib/libfa_python.so timeout 120 python3 -m pytest python/tests/test_dispatch.py python/tests/test_kernels.py -k "dispatch or t56 or auto or pick" -q -p no:cacheprovider > "$OUT/pytest_dispatch_kernels.log" 2>&1
log "pytest rc=$? $(tail -1 "$OUT/pytest_dispatch_kernels.log")"
./build/bin/fa_bench --benchmark_filter='attn_fwd/auto/bf16/D(64|128|256)/' --benchmark_out="$OUT/auto_fwd.json" --benchmark_out_format=json > "$OUT/auto_fwd.log" 2>&1
log "auto rows rc=$?"
PYTHONUNBUFFERED=1 python3 bench/compare_sdpa.py "$OUT/auto_fwd.json" --out "$OUT/auto_sdpa" > "$OUT/auto_fwd_peers.log" 2>&1
log "sdpa rc=$?"
FA_LIBRARY=build/lib/libfa_python.so timeout 90 python3 bench/scratch_clock.py > "$OUT/clock.log" 2>&1
log "clock rc=$?"; cat "$OUT/clock.log"
cd "$OUT" && tar czf /tmp/verify.tgz . && mv /tmp/verify.tgz "$OUT/" && find "$OUT" -type f ! -name verify.tgz ! -name steps.log ! -name auto_fwd_peers.log ! -name clock.log -delete
log packed
