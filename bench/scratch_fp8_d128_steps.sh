#!/usr/bin/env bash
# scratch: FP8 at D 128, steps t36-t40 on the GPU (minimal: the device time is short).
set -u
OUT=${OUT:-$PWD/out}; mkdir -p "$OUT"
BOUT=$PWD/out_build; mkdir -p "$BOUT"
OUT=$BOUT LIMIT=200 bash bench/device_run.sh build > "$BOUT/build_console.log" 2>&1
tail -2 "$BOUT/build_console.log"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$OUT/gpu.txt" 2>&1
T=build/bin/fa_gpu_tests
K="07_fp8_t36_p_in_registers 07_fp8_t37_tree_reductions 07_fp8_t38_lean_descriptors 07_fp8_t39_v_scale_in_exponent 07_fp8_t40_wide_key_tiles"
F=$(for k in $K; do printf 'Registered/AttentionFwdFp8Kernels.*/%s:' $k; done)
timeout 90 $T --gtest_filter="${F%:}" > "$OUT/gtest_fp8_t36_t40.log" 2>&1
echo "gtest rc=$?" | tee -a "$OUT/gtest_fp8_t36_t40.log"; grep -E "^\[  (FAILED|PASSED)|FAILED  \]" "$OUT/gtest_fp8_t36_t40.log" | head
R="07_fp8_v2 07_fp8_t34_d128_port $K"
Rrev=$(echo $R | tr ' ' '\n' | tac | tr '\n' ' ')
for r in 1 2 3; do
  if ((r % 2 == 0)); then ks=$Rrev; else ks=$R; fi
  for k in $ks; do echo "round $r $k"; timeout 30 $T --gtest_filter="Registered/AttentionFwdFp8Kernels.LongTimedN8192/$k" 2>&1 | grep "timing"; done
done > "$OUT/timed_fp8_t36_t40.log"
grep timing "$OUT/timed_fp8_t36_t40.log" | awk '{print $4, ($10=="causal:")?"causal":"full", $(NF-1)}' | sort | awk '{k=$1" "$2; a[k]=a[k]" "$3} END {for (k in a) print k ":" a[k]}' | sort
# One launch of the last step under Nsight Compute (D 128, B 2, H 16, N 8192), as run 38 profiled t34.
timeout 100 ncu --set full --import-source no -k regex:flash_fwd_fp8_t39 --launch-count 1 -o "$OUT/t39" \
  $T --gtest_filter="Registered/AttentionFwdFp8Kernels.LongTimedN8192/07_fp8_t39_v_scale_in_exponent" > "$BOUT/ncu_console.log" 2>&1
echo "ncu rc=$?"; tail -3 "$BOUT/ncu_console.log"
ncu -i "$OUT/t39.ncu-rep" > "$OUT/t39_ncu.txt" 2>&1
ncu -i "$OUT/t39.ncu-rep" --page source --csv --print-source sass 2>/dev/null | gzip > "$OUT/t39_ncu_sass.csv.gz"
rm -f "$OUT/t39.ncu-rep"
FA_SANITIZE_ONLY='07/fp8_t36,07/fp8_t37,07/fp8_t38,07/fp8_t39,07/fp8_t40' timeout 130 ctest --test-dir build -L sanitize -E finds_missing -j 4 -V > "$OUT/sanitize_fp8_t36_t40.log" 2>&1
echo "sanitize rc=$?" >> "$OUT/sanitize_fp8_t36_t40.log"
grep -E "tests passed|ERROR SUMMARY|RACECHECK SUMMARY" "$OUT/sanitize_fp8_t36_t40.log" | sort | uniq -c
gzip "$OUT/sanitize_fp8_t36_t40.log"
