#!/usr/bin/env bash
# scratch: fp8_t45 with its V^T map over the whole row: tests, sanitizers, pytest (P order), timing beside t40.
set -u
FINAL=${OUT:-$PWD/out}; OUT=$(mktemp -d); mkdir -p "$FINAL"
pack() { tar czf "$FINAL/fp8_t45_logs.tgz" -C "$OUT" . ; }  # after each stage: a cut run still returns its logs
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader > "$OUT/gpu.txt" 2>&1; cat "$OUT/gpu.txt"
cmake --preset default -DCMAKE_CUDA_ARCHITECTURES=90 > /dev/null 2>&1
timeout 200 cmake --build build -j 16 --target fa_gpu_tests fa_python > "$OUT/build_tail.log" 2>&1
echo "build rc=$?"; tail -1 "$OUT/build_tail.log"
T=build/bin/fa_gpu_tests
# The sanitizers beside the correctness tests (neither is timed); the timings after both.
(FA_SANITIZE_ONLY='07/fp8_t45_vt_in_p_order,07/fp8_t47_lazy_rescale' timeout 120 ctest --test-dir build -L sanitize -E finds_missing -j 4 -V > "$OUT/fp8_t45_sanitize.log" 2>&1
 echo "sanitize rc=$?"; grep -E "tests passed|ERROR SUMMARY: [1-9]|Failed" "$OUT/fp8_t45_sanitize.log" | head -4; gzip -f "$OUT/fp8_t45_sanitize.log") &
for k in 07_fp8_t45_vt_in_p_order 07_fp8_t47_lazy_rescale; do
  timeout 60 $T --gtest_filter="Registered/AttentionFwdFp8Kernels.*/$k:-*LongTimedN8192*" > "$OUT/${k}_gtest.log" 2>&1
  echo "$k gtest rc=$?"; grep -E "FAILED  \]|PASSED  \]|FAIL" "$OUT/${k}_gtest.log" | head -8
done
wait; pack
for r in $(seq ${ROUNDS:-2}); do for k in 07_fp8_t40_wide_key_tiles 07_fp8_t45_vt_in_p_order 07_fp8_t47_lazy_rescale; do
  timeout 20 $T --gtest_filter="Registered/AttentionFwdFp8Kernels.LongTimedN8192/$k" 2>&1 | grep "timing"
done; done | tee "$OUT/fp8_t40_t45_rounds.log"; pack
export FA_LIBRARY="$PWD/build/lib/libfa_python.so" PYTHONPATH=python
timeout 120 python3 -m pytest -rs -p no:cacheprovider python/tests/test_fp8.py > "$OUT/fp8_pytest.log" 2>&1
echo "pytest rc=$?"; grep -E "FAILED|passed|failed" "$OUT/fp8_pytest.log" | tail -6; pack
# Nsight Compute: t40 and t45 at N 8192 (one launch each, after warm-up): where the consumer's turn goes.
M=sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active,sm__inst_executed_pipe_tensor_op_gmma.sum
for r in barrier long_scoreboard math_pipe_throttle mio_throttle selected short_scoreboard wait dispatch_stall no_instruction sleeping; do
  M=$M,smsp__average_warp_latency_issue_stalled_$r.ratio; done
M=$M,smsp__inst_executed.sum,smsp__issue_active.avg.pct_of_peak_sustained_active,sm__inst_executed_pipe_xu.avg.pct_of_peak_sustained_active,sm__inst_executed_pipe_fma.avg.pct_of_peak_sustained_active,sm__inst_executed_pipe_alu.avg.pct_of_peak_sustained_active
for k in t45 t47; do
  case $k in t40) g=07_fp8_t40_wide_key_tiles;; t45) g=07_fp8_t45_vt_in_p_order;; t47) g=07_fp8_t47_lazy_rescale;; esac
  timeout 80 ncu --section SpeedOfLight --section WarpStateStats --section ComputeWorkloadAnalysis --section SourceCounters \
    --metrics "$M" -k regex:flash_fwd_fp8_${k}_kernel -s 3 -c 1 -o "$OUT/ncu_$k" \
    $T --gtest_filter="Registered/AttentionFwdFp8Kernels.LongTimedN8192/$g" > /dev/null 2>&1
  echo "ncu $k rc=$?"
  ncu -i "$OUT/ncu_$k.ncu-rep" >> "$OUT/fp8_ncu.txt" 2>&1
  ncu -i "$OUT/ncu_$k.ncu-rep" --page source --csv --print-source sass 2>/dev/null | gzip > "$OUT/ncu_${k}_sass.csv.gz"
  rm -f "$OUT/ncu_$k.ncu-rep"
  pack
done
grep -E "tensor_cycles|gmma.sum|issue_active|stalled_(long|wait|barrier|math|short|mio|selected)|pipe_xu|pipe_fma|Duration" "$OUT/fp8_ncu.txt" | head -40
cp "$OUT/gpu.txt" "$OUT/fp8_t40_t45_rounds.log" "$FINAL/"
pack; ls -la "$FINAL"
