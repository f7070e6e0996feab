#!/usr/bin/env bash
# scratch: fp8_t45 with its V^T map over the whole row: tests, sanitizers, pytest (P order), timing beside t40.
set -u
OUT=${OUT:-$PWD/out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader > "$OUT/gpu.txt" 2>&1; cat "$OUT/gpu.txt"
cmake --preset default -DCMAKE_CUDA_ARCHITECTURES=90 > /dev/null 2>&1
timeout 200 cmake --build build -j 16 --target fa_gpu_tests fa_python > "$OUT/build_tail.log" 2>&1
echo "build rc=$?"; tail -1 "$OUT/build_tail.log"
T=build/bin/fa_gpu_tests
timeout 60 $T --gtest_filter="Registered/AttentionFwdFp8Kernels.*/07_fp8_t45_vt_in_p_order:-*LongTimedN8192*" > "$OUT/fp8_t45_gtest.log" 2>&1
echo "t45 gtest rc=$?"; grep -E "FAILED  \]|PASSED  \]|FAIL" "$OUT/fp8_t45_gtest.log" | head -8
for r in 1 2 3; do for k in 07_fp8_t40_wide_key_tiles 07_fp8_t45_vt_in_p_order; do
  timeout 20 $T --gtest_filter="Registered/AttentionFwdFp8Kernels.LongTimedN8192/$k" 2>&1 | grep "timing"
done; done | tee "$OUT/fp8_t40_t45_rounds.log"
FA_SANITIZE_ONLY='07/fp8_t45_vt_in_p_order' timeout 120 ctest --test-dir build -L sanitize -E finds_missing -j 4 -V > "$OUT/fp8_t45_sanitize.log" 2>&1
echo "sanitize rc=$?"; grep -E "tests passed|ERROR SUMMARY: [1-9]|Failed" "$OUT/fp8_t45_sanitize.log" | head -4; gzip -f "$OUT/fp8_t45_sanitize.log"
export FA_LIBRARY="$PWD/build/lib/libfa_python.so" PYTHONPATH=python
timeout 120 python3 -m pytest -rs -p no:cacheprovider python/tests/test_fp8.py > "$OUT/fp8_pytest.log" 2>&1
echo "pytest rc=$?"; grep -E "FAILED|passed|failed" "$OUT/fp8_pytest.log" | tail -6
