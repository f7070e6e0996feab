#!/bin/bash
mkdir -p /tmp/k; L=/tmp/k; rm -f $L/*
step(){ echo "[$(date +%T)] $*" >> $L/steps.log; }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader >> $L/steps.log
cmake --preset default -B build -DCMAKE_CUDA_ARCHITECTURES=90 > $L/cfg.log 2>&1
cmake --build build -j16 --target ch03_tiled_matmul fa_gpu_tests > $L/build.log 2>&1; step build rc=$?
grep -E "C75[0-9]+" $L/build.log | head -5 >> $L/steps.log
B=build/bin
K=03/t15_balanced_grid,03/t16_three_stage_ring,03/t17_conflict_free_staging,03/t18_two_accumulators,03/t19_epilogue_under_mainloop
for r in 1 2 3; do
  for n in 4096 8192; do
    $B/ch03_tiled_matmul --kernel=$K --dtype=bf16 --m=$n --n=$n --k=$n > $L/ch03_${n}_r$r.log 2>&1; step ch03 $n r$r rc=$?
  done
done
tar czf $OUT/k.tgz -C /tmp k
for s in memcheck racecheck synccheck initcheck; do
  FA_SANITIZE_ONLY='03/t18,03/t19' timeout 120 ctest --test-dir build -L sanitize -R "sanitize_$s\$" -V > $L/sanitize_$s.log 2>&1; step sanitize $s rc=$?
done
tar czf $OUT/k.tgz -C /tmp k
$B/fa_gpu_tests --gtest_filter='Registered/GemmKernels.*/03_t18*:Registered/GemmKernels.*/03_t19*' > $L/gtest_t18_t19.log 2>&1; step gtest rc=$?
step done
tar czf $OUT/k.tgz -C /tmp k
