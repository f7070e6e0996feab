#!/usr/bin/env bash
# scratch: the Python layer with t40 as its FP8 default at D 128, and step t41 (tests, one round).
set -u
OUT=${OUT:-$PWD/out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$OUT/gpu.txt" 2>&1
cmake --preset default -DCMAKE_CUDA_ARCHITECTURES=90 > /dev/null 2>&1
timeout 150 cmake --build build -j 16 --target fa_gpu_tests fa_python > "$OUT/build_tail.log" 2>&1
echo "build rc=$?"; tail -1 "$OUT/build_tail.log"
export FA_LIBRARY="$PWD/build/lib/libfa_python.so" PYTHONPATH=python
timeout 60 python3 -m pytest -rs -p no:cacheprovider python/tests/test_fp8.py > "$OUT/pytest_fp8_default_t40.log" 2>&1
echo "pytest (default t40) rc=$?"; tail -1 "$OUT/pytest_fp8_default_t40.log"
T=build/bin/fa_gpu_tests
timeout 40 $T --gtest_filter='Registered/AttentionFwdFp8Kernels.*/07_fp8_t41_exp2_on_fma:-*LongTimedN8192*' > "$OUT/gtest_fp8_t41.log" 2>&1
echo "gtest rc=$?" | tee -a "$OUT/gtest_fp8_t41.log"; grep -E "^\[  (FAILED|PASSED)|FAILED  \]" "$OUT/gtest_fp8_t41.log" | head
for k in 07_fp8_v2 07_fp8_t40_wide_key_tiles 07_fp8_t41_exp2_on_fma 07_fp8_t40_wide_key_tiles 07_fp8_t41_exp2_on_fma; do
  timeout 20 $T --gtest_filter="Registered/AttentionFwdFp8Kernels.LongTimedN8192/$k" 2>&1 | grep "timing"
done | tee "$OUT/timed_fp8_t41.log"
