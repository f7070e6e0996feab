#!/usr/bin/env bash
# scratch: FP8 at D 128, step t41 on the GPU, and the Python layer with t40 as its default.
set -u
OUT=${OUT:-$PWD/out}; mkdir -p "$OUT"
BOUT=$PWD/out_build; mkdir -p "$BOUT"
OUT=$BOUT LIMIT=200 bash bench/device_run.sh build > "$BOUT/build_console.log" 2>&1
tail -1 "$BOUT/build_console.log"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$OUT/gpu.txt" 2>&1
T=build/bin/fa_gpu_tests
export FA_LIBRARY="$PWD/build/lib/libfa_python.so" PYTHONPATH=python
timeout 70 python3 -m pytest -rs -p no:cacheprovider python/tests/test_fp8.py > "$OUT/pytest_fp8_default_t40.log" 2>&1
echo "pytest (default t40) rc=$?"; tail -1 "$OUT/pytest_fp8_default_t40.log"
timeout 60 $T --gtest_filter='Registered/AttentionFwdFp8Kernels.*/07_fp8_t41_exp2_on_fma' > "$OUT/gtest_fp8_t41.log" 2>&1
echo "gtest rc=$?" | tee -a "$OUT/gtest_fp8_t41.log"; grep -E "^\[  (FAILED|PASSED)|FAILED  \]" "$OUT/gtest_fp8_t41.log" | head
R="07_fp8_v2 07_fp8_t40_wide_key_tiles 07_fp8_t41_exp2_on_fma"
Rrev=$(echo $R | tr ' ' '\n' | tac | tr '\n' ' ')
for r in 1 2; do
  if ((r % 2 == 0)); then ks=$Rrev; else ks=$R; fi
  for k in $ks; do echo "round $r $k"; timeout 30 $T --gtest_filter="Registered/AttentionFwdFp8Kernels.LongTimedN8192/$k" 2>&1 | grep "timing"; done
done > "$OUT/timed_fp8_t41.log"
grep timing "$OUT/timed_fp8_t41.log" | awk '{print $4, ($10=="causal:")?"causal":"full", $(NF-1)}' | sort | awk '{k=$1" "$2; a[k]=a[k]" "$3} END {for (k in a) print k ":" a[k]}' | sort
FA_SANITIZE_ONLY='07/fp8_t41' timeout 50 ctest --test-dir build -L sanitize -E finds_missing -j 4 -V > "$OUT/sanitize_fp8_t41.log" 2>&1
echo "sanitize rc=$?" >> "$OUT/sanitize_fp8_t41.log"
grep -E "tests passed|ERROR SUMMARY|RACECHECK SUMMARY" "$OUT/sanitize_fp8_t41.log" | sort | uniq -c
gzip "$OUT/sanitize_fp8_t41.log"
