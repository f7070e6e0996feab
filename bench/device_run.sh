#!/usr/bin/env bash
# device_run.sh: everything a GPU run needs, in one script (configure, build, test, tour, benchmarks,
# PyTorch SDPA comparison, sanitizers), every log under $OUT (default ./out).
#
#   bash bench/device_run.sh build test          # first call
#   bash bench/device_run.sh tour bench sdpa     # second call, while the machine is warm
#
# Stages: build, test, testlong, tour (TOUR_CHAPTERS: some chapters), command2 (the README's command 2
# from an empty build folder, timed), bench, benchquick, sdpa, memdemo, sanitize, mystery, ch07, gqa,
# python, ncu_decode, ncu_fwd, ncu_bwd, ncu_pair (two backward kernels side by side: RUNG, BASE),
# ncu_ch07, ncu_cudnn, timeline07 (chapter 07's measured timeline, in a build folder of its own),
# ladder (the main path of 05-08 in one run, with the
# peers), serving (chapter 09: its program, the serving benchmarks, PyTorch's peers), e2e (fa.attention()
# end to end beside SDPA, bench/attention_e2e.py), host (the host's time per call,
# bench/host_overhead.py), dispatch (fa_bench's auto rows with peers),
# pip (pip install from an empty build, timed, then used from outside the repository), release
# (the student release made as CI makes it, its quick start's command 2 on this GPU from an empty
# build folder, its exercises' label), releasetour (that release's command 1, after release),
# autograde_gpu (the autograder's GPU path end to end: correct, wrong and not-compiling
# submissions of a GPU exercise, after build), rung (one kernel version end to end: RUNG=name [BASE=name]),
# rounds (RUNG and BASE against PyTorch SDPA, several alternating rounds, medians; ROUND_OP=bwd for
# the backward), varlen_rounds (two varlen forwards, RUNG and BASE, on fa_bench's packed batches,
# several rounds, medians), pack
# (fold the logs into one archive: the device returns at most 8 files).
#
# LIMIT=seconds gives the whole call a budget: each stage runs under `timeout` with what is left,
# so a stage that hangs or runs long costs its own logs only, and a final `pack` still runs (it is
# never cut). Without LIMIT the stages run unbounded.
#   LIMIT=540 RUNG=06/v5_warp_tiles BASE=06/v4_bc128_tuned \
#     bash bench/device_run.sh build rung ncu_bwd pack
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/out}
mkdir -p "$OUT"
BUILD=${BUILD:-build}
JOBS=${JOBS:-$(nproc)}
# Everything except 06/forward_helper, the deliberately simple forward that chapter 06 uses to make
# O and L on its own (one thread per query row: minutes at the protocol's largest shapes, and 0.15
# to 0.56 s per decode row on the H100). The 08 kernels are decoding kernels: fa_bench times them
# on the decode shapes only (attn_decode/08/...), never under attn_fwd/.
FULL_FILTER='ceiling|softmax|transpose|gemm|attn_fwd/0[57]/|attn_bwd/0[67]/|attn_decode/0[578]/|bwd_preprocess'
log() { echo "[$(date +%H:%M:%S)] $*" | tee -a "$OUT/steps.log"; }
# ncu_export P: the two Nsight Compute reports $OUT/P_ours.ncu-rep and P_fa2.ncu-rep as text
# (P_ours.txt, P_fa2.txt) and source pages (P_ours_sass.csv.gz, ...), then the reports removed.
ncu_export() {
  for w in ours fa2; do
    ncu -i "$OUT/$1_$w.ncu-rep" > "$OUT/$1_$w.txt" 2>&1
    ncu -i "$OUT/$1_$w.ncu-rep" --page source --csv --print-source sass 2>/dev/null | gzip > "$OUT/$1_${w}_sass.csv.gz"
    rm -f "$OUT/$1_$w.ncu-rep"
  done
}

# With LIMIT: run each stage in its own process under `timeout` (FA_STAGE_CHILD marks the child).
if [[ -n "${LIMIT:-}" && -z "${FA_STAGE_CHILD:-}" ]]; then
  start=$(date +%s)
  for stage in "$@"; do
    left=$((LIMIT - ($(date +%s) - start)))
    if [[ "$stage" == pack ]]; then
      FA_STAGE_CHILD=1 bash "$0" pack
    elif ((left < 10)); then
      log "skip $stage: the budget of $LIMIT s is spent"
    else
      FA_STAGE_CHILD=1 timeout "$left" bash "$0" "$stage"
      rc=$?
      ((rc == 124)) && log "$stage stopped by the budget (LIMIT=$LIMIT s) after $left s"
    fi
  done
  exit 0
fi

for stage in "$@"; do
  case "$stage" in
    build)
      log "gpu: $(nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader 2>&1)"
      nvidia-smi > "$OUT/nvidia-smi.txt" 2>&1
      log "configure"
      cmake --preset default -DCMAKE_CUDA_ARCHITECTURES=90 > "$OUT/configure.log" 2>&1 || { tail -30 "$OUT/configure.log"; exit 1; }
      log "build (-j$JOBS)"
      cmake --build "$BUILD" -j "$JOBS" > "$OUT/build.log" 2>&1 || { grep -E "error|Error" "$OUT/build.log" | head -40; exit 1; }
      grep -E "warning" "$OUT/build.log" | sort | uniq -c | sort -rn | head -20 > "$OUT/build_warnings.txt"
      # ptxas's reports of wgmmas serialized (C7520: a branch around them; C7514: their
      # accumulators read while they are in flight) cost a kernel silently: bwd_t53 at D 192 ran
      # 1.07-1.27x faster once its C7520 was gone. Name the kernels they are reported for.
      grep -E "wgmma.mma_async instructions are serialized" "$OUT/build.log" |
        sed -E "s/.*function '([^']*)'.*/\1/" | sort -u > "$OUT/ptxas_serialized.txt"
      log "ptxas serialized the wgmmas of $(wc -l < "$OUT/ptxas_serialized.txt") kernels (ptxas_serialized.txt)"
      log "build done"
      ;;
    test)
      log "ctest (cpu + gpu, no long)"
      ctest --test-dir "$BUILD" -LE "long|sanitize" -j "$JOBS" --output-on-failure --timeout 900 > "$OUT/ctest.log" 2>&1
      log "ctest rc=$?"; tail -25 "$OUT/ctest.log"
      ;;
    testlong)
      # One after the other the long label takes about half an hour on an H100 (2026-11-25: the
      # README commands '*Bwd*' 5.5 minutes and fa_bench attn_fwd 4.5; each test past 2^31
      # elements about 18 s), more than one device call (10 minutes at most). LONG_JOBS (default
      # 3) runs that many
      # at once: most of their time is the float64 reference on the CPU; the tests past 2^31
      # elements share one lock (tests/CMakeLists.txt) and run one at a time. LONG_FILTER (a ctest -R regex) runs a part, to split the label over calls.
      log "ctest long (-j ${LONG_JOBS:-3}${LONG_FILTER:+, -R $LONG_FILTER})"
      ctest --test-dir "$BUILD" -L long ${LONG_FILTER:+-R "$LONG_FILTER"} -j "${LONG_JOBS:-3}" \
        --output-on-failure --timeout 900 > "$OUT/ctest_long.log" 2>&1
      log "ctest long rc=$?"; tail -15 "$OUT/ctest_long.log"
      ;;
    tour)
      # TOUR_CHAPTERS (e.g. "00 01 02 03 04 09") runs only those chapters: the charts of chapters
      # 01-04 and 09 are read from a tour log (notes/figures/fig_ladders.py), and those six take a
      # fraction of the whole tour's time.
      log "tour ${TOUR_CHAPTERS:-(every chapter)}"
      "$BUILD/bin/tour" ${TOUR_CHAPTERS:-} > "$OUT/tour.log" 2>&1
      log "tour rc=$?"; tail -12 "$OUT/tour.log"
      ;;
    command2)
      # The README's command 2 as a new user runs it, from an empty build folder, timed: the
      # README's timing and test count come from this log (workflow_command2.log.gz). Removes
      # build/ first (the preset's folder) and leaves it built for the local GPU.
      rm -rf build
      log "command 2: cmake --workflow --preset default (from an empty build folder)"
      start=$(date +%s)
      cmake --workflow --preset default > "$OUT/workflow_command2.log" 2>&1
      rc=$?
      log "command 2 rc=$rc in $(($(date +%s) - start)) s"
      grep -E "tests passed|tests failed|Total Test time" "$OUT/workflow_command2.log"
      grep -E "\(Failed\)|Timeout" "$OUT/workflow_command2.log" | head -20
      gzip -f "$OUT/workflow_command2.log"
      ;;
    bench)
      log "fa_bench"
      "$BUILD/bin/fa_bench" --benchmark_format=console --benchmark_out="$OUT/bench.json" \
        --benchmark_out_format=json --benchmark_filter="${BENCH_FILTER:-$FULL_FILTER}" > "$OUT/bench.log" 2>&1
      log "fa_bench rc=$?"
      ;;
    benchquick)
      log "fa_bench quick"
      "$BUILD/bin/fa_bench" --benchmark_filter='ceiling|softmax/.*/4096x4096|softmax/.*/16384x1024|transpose|gemm/.*/4096x|attn_fwd/05/v[2-9].*/(bf16)/.*/N(4096|8192)|attn_bwd/06/v[2-9].*/bf16/.*/N(4096|8192)' \
        --benchmark_out="$OUT/bench.json" --benchmark_out_format=json > "$OUT/bench.log" 2>&1
      log "fa_bench rc=$?"
      ;;
    sdpa)
      log "compare_sdpa"
      PYTHONUNBUFFERED=1 python3 bench/compare_sdpa.py "$OUT/bench.json" --out "$OUT" > "$OUT/sdpa.log" 2>&1
      log "sdpa rc=$?"; tail -40 "$OUT/sdpa.log"
      ;;
    memdemo)
      log "chapter 05 memory demo (N = 65536)"
      "$BUILD/bin/ch05_flash_forward" --memory-demo > "$OUT/memdemo.log" 2>&1
      log "memdemo rc=$?"; tail -15 "$OUT/memdemo.log"
      ;;
    sanitize)
      log "ctest sanitize"
      ctest --test-dir "$BUILD" -L sanitize --output-on-failure --timeout 900 > "$OUT/sanitize.log" 2>&1
      log "sanitize rc=$?"; tail -15 "$OUT/sanitize.log"
      ;;
    mystery)
      log "matmul mystery sweep"
      "$BUILD/bin/ch03_tiled_matmul" --sweep=1536:2304:16 --csv="$OUT/mystery.csv" > "$OUT/mystery.log" 2>&1
      python3 chapters/03_tiled_matmul/plot_mystery.py "$OUT/mystery.csv" "$OUT/mystery.png" >> "$OUT/mystery.log" 2>&1
      log "mystery rc=$?"
      ;;
    ch07)
      # Chapter 07 (Hopper) in one call, after `build`: its GPU tests (every forward test of the
      # 07/ kernels, long ones included), memcheck + racecheck of the small forward cases, the
      # chapter program at D = 128 and 64, and the protocol sweep of 05/v5 and 07/ in bf16.
      log "ch07: ctest -R 07_"
      ctest --test-dir "$BUILD" -R "07_" --output-on-failure --timeout 900 > "$OUT/ch07_ctest.log" 2>&1
      log "ch07 ctest rc=$?"; tail -25 "$OUT/ch07_ctest.log"
      for tool in memcheck racecheck; do
        log "ch07: compute-sanitizer $tool (small forward cases of every kernel)"
        compute-sanitizer --tool $tool --error-exitcode 1 "$BUILD/bin/fa_gpu_tests" \
          --gtest_filter=SanitizeSmall.AttentionForwardKernels > "$OUT/ch07_$tool.log" 2>&1
        log "ch07 $tool rc=$?"; tail -6 "$OUT/ch07_$tool.log"
      done
      log "ch07: chapter program"
      "$BUILD/bin/ch07_flash_hopper" > "$OUT/ch07.log" 2>&1
      log "ch07 program rc=$?"; tail -30 "$OUT/ch07.log"
      "$BUILD/bin/ch07_flash_hopper" --head_dim=64 --big_seq=0 > "$OUT/ch07_d64.log" 2>&1
      log "ch07 program D=64 rc=$?"; tail -12 "$OUT/ch07_d64.log"
      log "ch07: fa_bench attn_fwd (05/v5 and 07/, bf16)"
      "$BUILD/bin/fa_bench" --benchmark_filter='attn_fwd/(05/v5_fewer_instructions|07/).*bf16.*' --benchmark_format=console \
        --benchmark_out="$OUT/bench_ch07.json" --benchmark_out_format=json > "$OUT/bench_ch07.log" 2>&1
      log "ch07 fa_bench rc=$?"; grep -E "attn_fwd" "$OUT/bench_ch07.log" | head -60
      ;;
    gqa)
      # Grouped K/V heads in chapter 07's final rungs: fa_bench's attn_gqa rows (07/v5_persistent,
      # 07/bwd_v1 .. bwd_v6, and any other fixed-length kernel that takes grouped heads) at
      # B 2, H 32, H_kv 32 (MHA) / 8 / 4 / 1 (MQA), N 4096 and 8192, D 128 (D 64 rows too, left out
      # unless GQA_FILTER names them), bf16, causal and full;
      # each row timed alone (a fa_bench process of its own), GQA_ROUNDS rounds (default 3) that
      # alternate the rows; then each row's median over its Hkv32 row (the time per query head
      # against MHA, to be at most 1.05; bench/gqa_ratios.py says why rows timed one after the
      # other in one process are not comparable), then the registry's GPU tests of the grouped
      # shapes. GQA_FILTER (a fa_bench filter, default the D 128 rows, attn_gqa/.*/D128/) narrows
      # or widens the rows, e.g. 'attn_gqa/bwd/07/bwd_v[14]' or 'attn_gqa/bwd/.*/D64/'; GQA_TESTS
      # (a ctest -R regex, default chapter 07's GroupedKvHeads tests) the tests run after them.
      # After `build`. Logs: gqa_rounds.log, gqa.log (the ratios), gqa_tests.log.
      log "gqa: fa_bench ${GQA_FILTER:-attn_gqa/.*/D128/}, each row alone, ${GQA_ROUNDS:-3} rounds"
      rows=$("$BUILD/bin/fa_bench" --benchmark_list_tests --benchmark_filter="${GQA_FILTER:-attn_gqa/.*/D128/}" |
        grep -o '^attn_gqa/[^ ]*/Hkv[0-9]*' | sort -u)
      : > "$OUT/gqa_rounds.log"
      for r in $(seq "${GQA_ROUNDS:-3}"); do
        for row in $rows; do
          "$BUILD/bin/fa_bench" --benchmark_filter="^$row/" 2>&1 | grep -E "^attn_gqa" |
            awk -v r="$r" '{print "round " r, $1, $2, $3}' >> "$OUT/gqa_rounds.log"
        done
      done
      log "gqa fa_bench: $(wc -l < "$OUT/gqa_rounds.log") samples"
      python3 bench/gqa_ratios.py "$OUT/gqa_rounds.log" > "$OUT/gqa.log" 2>&1
      log "gqa ratios rc=$?"; cat "$OUT/gqa.log"
      ctest --test-dir "$BUILD" -L gpu -R "${GQA_TESTS:-\.GroupedKvHeads/07_(v5_persistent|bwd_v[1-6]_)}" \
        --output-on-failure > "$OUT/gqa_tests.log" 2>&1
      log "gqa tests rc=$?"; tail -5 "$OUT/gqa_tests.log"
      ;;
    python)
      # The PyTorch package (README "From PyTorch"), after `build`: the pytest suite (every
      # registered kernel through libfa_python.so against float64 on ragged shapes, gradcheck of
      # the fp32 kernels, a training run against SDPA, the README's python lines including the
      # example's timing table). Writes python_tests.log, training_loss.png and .csv, and
      # bench_attention.csv (my_attention | ours | SDPA) to $OUT.
      log "python: pytest python/tests"
      FA_LIBRARY="$PWD/$BUILD/lib/libfa_python.so" FA_PYTHON_OUT="$OUT" PYTHONPATH=python \
        python3 -m pytest -s -rs -p no:cacheprovider python/tests > "$OUT/python_tests.log" 2>&1
      log "python pytest rc=$?"; tail -40 "$OUT/python_tests.log"
      ;;
    ncu_decode)
      # The GQA decode shape (B 8, H 32, H_kv 8, seq_k 32768, bf16, D 128) in Nsight Compute: our
      # split kernel (DECODE_KERNEL, default 08/v5_swizzled_ring) and FlashAttention-2's, with the
      # same DRAM and L2 counters, for the comparison notes/08_decoding.md ("Five percent short")
      # asks for. The source page of each (per SASS instruction: L2 sectors and shared-memory
      # wavefronts asked for, and the ideal counts) is saved as CSV, gzipped. After `build`.
      K=${DECODE_KERNEL:-08/v5_swizzled_ring}
      M=dram__bytes_read.sum.per_second,dram__sectors_read.sum,lts__t_sectors_srcunit_tex_op_read.sum
      M=$M,lts__t_sectors_srcunit_tex_op_read_lookup_hit.sum,smsp__inst_executed.sum
      M=$M,smsp__average_warp_latency_issue_stalled_long_scoreboard.ratio
      M=$M,smsp__average_warp_latency_issue_stalled_barrier.ratio
      SECTIONS="--section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy --section LaunchStats"
      SECTIONS="$SECTIONS --section SourceCounters"
      log "ncu_decode: $K"
      ncu $SECTIONS --metrics "$M" -k regex:split_kernel -s 2 -c 1 -o "$OUT/ncu_decode_ours" "$BUILD/bin/fa_bench" \
        --benchmark_filter="attn_decode/$K/bf16/D128/B8_H32_Hkv8/" > /dev/null 2>&1
      log "ncu_decode ours rc=$?"
      log "ncu_decode: FlashAttention-2 (PyTorch SDPA)"
      # The split kernel only: "splitkv" alone also matches flash_fwd_splitkv_combine_kernel (the
      # merge), which is what the first run of this stage profiled (notes/08).
      ncu $SECTIONS --metrics "$M" -k regex:flash_fwd_splitkv_kernel -s 1 -c 1 -o "$OUT/ncu_decode_fa2" \
        python3 bench/profile_sdpa.py decode 8 32 8 32768 > /dev/null 2>&1
      log "ncu_decode fa2 rc=$?"
      ncu_export ncu_decode
      python3 bench/sass_memory.py "$OUT"/ncu_decode_*_sass.csv.gz > "$OUT/ncu_decode_memory.txt" 2>&1
      log "ncu_decode memory per opcode: $OUT/ncu_decode_memory.txt"
      ;;
    ncu_fwd)
      # The forward at bf16 D 128 N 8192 (B 2, H 16, non-causal) in Nsight Compute: ours (FWD_KERNEL,
      # default 05/v5_fewer_instructions) and FlashAttention-2's, stall reasons and the source page
      # (CSV, gzipped; bench/sass_memory.py sums its memory traffic per opcode). After `build`.
      # FWD_N=1024 (any protocol N): that length instead (B = 16384 / N), files named ncu_fwd_N1024_*;
      # FWD_D=256: that head dim (H = 2048 / D), files ncu_fwd_D256_*.
      K=${FWD_KERNEL:-05/v5_fewer_instructions}
      N=${FWD_N:-8192}
      D=${FWD_D:-128}
      X=ncu_fwd${FWD_D:+_D$FWD_D}${FWD_N:+_N$FWD_N}
      M=sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active
      for r in barrier long_scoreboard math_pipe_throttle mio_throttle selected short_scoreboard wait; do
        M=$M,smsp__average_warp_latency_issue_stalled_$r.ratio; done
      M=$M,smsp__inst_executed.sum,smsp__inst_executed_op_ldsm.sum,smsp__issue_active.avg.pct_of_peak_sustained_active
      SECTIONS="--section SpeedOfLight --section WarpStateStats --section LaunchStats --section Occupancy"
      SECTIONS="$SECTIONS --section SourceCounters"
      log "ncu_fwd: $K"
      ncu $SECTIONS --metrics "$M" -k 'regex:flash_fwd_(v[0-9]|t[0-9]+|mtiles)_kernel' -s 2 -c 1 -o "$OUT/${X}_ours" \
        "$BUILD/bin/fa_bench" --benchmark_filter="attn_fwd/$K/bf16/D$D/full/N$N/" > /dev/null 2>&1
      log "ncu_fwd ours rc=$?"
      log "ncu_fwd: FlashAttention-2 (PyTorch SDPA)"
      ncu $SECTIONS --metrics "$M" -k regex:flash_fwd_kernel -s 1 -c 1 -o "$OUT/${X}_fa2" \
        python3 bench/profile_sdpa.py fwd $D n=$N > /dev/null 2>&1
      log "ncu_fwd fa2 rc=$?"
      ncu_export "$X"
      python3 bench/sass_memory.py "$OUT/${X}_ours_sass.csv.gz" "$OUT/${X}_fa2_sass.csv.gz" > "$OUT/${X}_memory.txt" 2>&1
      log "ncu_fwd memory per opcode: $OUT/${X}_memory.txt"
      ;;
    ncu_pair)
      # Two of chapter 07's backward kernels (RUNG, BASE, e.g. RUNG=07/bwd_t48_dq_in_turns
      # BASE=07/bwd_v6_head_groups) in Nsight Compute, their dK/dV kernel at bf16 D BWD_D (default
      # 64) N BWD_N (default 8192; B = 16384 / N, H = 2048 / D), full: the fp32 reduce-adds into
      # L2 (sectors and their rate), the tensor pipe, and the stall reasons, side by side. For
      # telling which of a step's changes paid (tuning/README.md, t48: half the dQ traffic or the
      # warpgroups out of step). After `build`. Logs: ncu_pair_<kernel>_D<d>_N<n>.txt.
      : "${RUNG:?set RUNG and BASE to two backward kernels}" "${BASE:?set BASE}"
      D=${BWD_D:-64}
      N=${BWD_N:-8192}
      M=lts__t_sectors_op_red.sum,lts__t_sectors_op_red.sum.per_second
      M=$M,sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active
      M=$M,sm__inst_executed_pipe_tensor_op_gmma.sum,smsp__issue_active.avg.pct_of_peak_sustained_active
      for r in barrier long_scoreboard math_pipe_throttle mio_throttle membar short_scoreboard wait; do
        M=$M,smsp__average_warp_latency_issue_stalled_$r.ratio; done
      for k in "$RUNG" "$BASE"; do
        X=ncu_pair_${k//\//_}_D${D}_N$N
        log "ncu_pair: $k, D $D, N $N"
        ncu --section SpeedOfLight --section WarpStateStats --section MemoryWorkloadAnalysis \
          --metrics "$M" -k 'regex:dkdv_dq_kernel' -s 2 -c 1 -o "$OUT/$X" "$BUILD/bin/fa_bench" \
          --benchmark_filter="attn_bwd/$k/bf16/D$D/full/N$N/" > /dev/null 2>&1
        log "ncu_pair $k rc=$?"
        ncu -i "$OUT/$X.ncu-rep" > "$OUT/$X.txt" 2>&1
        rm -f "$OUT/$X.ncu-rep"
      done
      ;;
    ncu_bwd)
      # The backward's dK/dV kernel at bf16 D 128 N 8192 (B 2, H 16, non-causal) in Nsight Compute,
      # ours (BWD_KERNEL, default 06/v5_warp_tiles) and FlashAttention-2's, with the source page
      # saved as CSV and summed per SASS opcode, as notes/06_flash_backward.md (section 5c) did by
      # hand. After `build`. BWD_N=16384 (any protocol N): that length instead, files ncu_bwd_N16384_*;
      # BWD_D=256: that head dim (B 2, H 8), files ncu_bwd_D256_*.
      K=${BWD_KERNEL:-06/v5_warp_tiles}
      N=${BWD_N:-8192}
      D=${BWD_D:-128}
      X=ncu_bwd${BWD_D:+_D$BWD_D}${BWD_N:+_N$BWD_N}
      M=lts__t_sectors_op_red.sum,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active
      for r in barrier long_scoreboard math_pipe_throttle mio_throttle selected short_scoreboard wait; do
        M=$M,smsp__average_warp_latency_issue_stalled_$r.ratio; done
      M=$M,smsp__inst_executed.sum,smsp__inst_executed_op_ldsm.sum,smsp__issue_active.avg.pct_of_peak_sustained_active
      SECTIONS="--section SpeedOfLight --section InstructionStats --section WarpStateStats --section LaunchStats --section SourceCounters"
      log "ncu_bwd: $K"
      ncu $SECTIONS --metrics "$M" -k 'regex:dkdv_kernel|kv128_kernel|warp_tiles_kernel' -s 2 -c 1 -o "$OUT/${X}_ours" "$BUILD/bin/fa_bench" \
        --benchmark_filter="attn_bwd/$K/bf16/D$D/full/N$N/" > /dev/null 2>&1
      log "ncu_bwd ours rc=$?"
      log "ncu_bwd: FlashAttention-2 (PyTorch SDPA)"
      ncu $SECTIONS --metrics "$M" -k regex:flash_bwd_dq_dk -s 1 -c 1 -o "$OUT/${X}_fa2" python3 bench/profile_sdpa.py bwd $D n=$N \
        > /dev/null 2>&1
      log "ncu_bwd fa2 rc=$?"
      ncu_export "$X"
      python3 notes/measured/h100-2026-11-23f/sass_mix.py "$OUT/${X}_ours_sass.csv.gz" "$OUT/${X}_fa2_sass.csv.gz" > "$OUT/${X}_opcodes.txt" 2>&1
      python3 bench/sass_memory.py "$OUT/${X}_ours_sass.csv.gz" "$OUT/${X}_fa2_sass.csv.gz" >> "$OUT/${X}_opcodes.txt" 2>&1
      log "ncu_bwd opcodes: $OUT/${X}_opcodes.txt"
      ;;
    ncu_ch07)
      # Chapter 07's rungs side by side in Nsight Compute (notes/07_flash_hopper.md, "Why v2 loses to
      # v1 at D = 64"): NCU07_RUNGS (default v1 and v2) at bf16 D NCU07_D (default 64), N 8192,
      # B 2, H 2048/D, non-causal: blocks and warps per SM (Occupancy, LaunchStats), the tensor
      # pipe's busy cycles (wgmma counts in sm__pipe_tensor_cycles_active, not in the hmma
      # metrics), issue-slot use and the warp stall reasons. After `build`. Text reports
      # ncu_ch07_D<D>_<rung>.txt and source pages _sass.csv.gz.
      D=${NCU07_D:-64}
      M=sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active,sm__inst_executed_pipe_tensor_op_gmma.sum
      M=$M,sm__warps_active.avg.pct_of_peak_sustained_active,sm__ctas_launched.sum
      for r in barrier long_scoreboard math_pipe_throttle mio_throttle selected short_scoreboard wait sleeping; do
        M=$M,smsp__average_warp_latency_issue_stalled_$r.ratio; done
      M=$M,smsp__inst_executed.sum,smsp__issue_active.avg.pct_of_peak_sustained_active
      SECTIONS="--section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats"
      SECTIONS="$SECTIONS --section SourceCounters"
      for R in ${NCU07_RUNGS:-v1_tma_wgmma v2_warp_specialized}; do
        X=ncu_ch07_D${D}_$R
        log "ncu_ch07: 07/$R, D $D"
        ncu $SECTIONS --metrics "$M" -k 'regex:flash_fwd_v[0-9]_kernel' -s 2 -c 1 -o "$OUT/$X" \
          "$BUILD/bin/fa_bench" --benchmark_filter="attn_fwd/07/$R/bf16/D$D/full/N8192/" > /dev/null 2>&1
        log "ncu_ch07 $R rc=$?"
        ncu -i "$OUT/$X.ncu-rep" > "$OUT/$X.txt" 2>&1
        ncu -i "$OUT/$X.ncu-rep" --page source --csv --print-source sass 2>/dev/null | gzip > "$OUT/${X}_sass.csv.gz"
        rm -f "$OUT/$X.ncu-rep"
      done
      ;;
    ncu_cudnn)
      # cuDNN's SDPA kernels in Nsight Compute next to chapter 07's kernels (OURS_FWD, default
      # 07/v5_persistent; OURS_BWD, default 07/bwd_v5_producer: the dispatch's), forward and
      # backward, bf16 D 128 at N CUDNN_N (default 8192; B = 16384 / N, H 16, non-causal): where
      # cuDNN's cycles go, for the profile-first step of beating it. cuDNN's kernel names are not
      # known in advance, so every kernel of the second and third SDPA call is profiled (-s/-c
      # over all launches) and the text reports name them. After `build`.
      N=${CUDNN_N:-8192}
      SECTIONS="--section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats"
      M=sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active,sm__inst_executed_pipe_tensor_op_gmma.sum
      M=$M,smsp__inst_executed.sum,smsp__issue_active.avg.pct_of_peak_sustained_active
      for dir in fwd bwd; do
        X=ncu_cudnn_${dir}_N$N
        log "ncu_cudnn: cuDNN $dir N $N"
        ncu $SECTIONS --metrics "$M" -s 4 -c 8 -o "$OUT/$X" \
          python3 bench/profile_sdpa.py $dir 128 n=$N backend=cudnn > "$OUT/$X.run.log" 2>&1
        log "ncu_cudnn $dir rc=$?"
        ncu -i "$OUT/$X.ncu-rep" > "$OUT/$X.txt" 2>&1
        rm -f "$OUT/$X.ncu-rep"
      done
      F=${OURS_FWD:-07/v5_persistent}
      B=${OURS_BWD:-07/bwd_v5_producer}
      X=ncu_ours_fwd_N$N
      log "ncu_cudnn: ours, $F"
      ncu $SECTIONS --metrics "$M" -k 'regex:flash_fwd_v[0-9]_kernel' -s 2 -c 1 -o "$OUT/$X" \
        "$BUILD/bin/fa_bench" --benchmark_filter="attn_fwd/$F/bf16/D128/full/N$N/" > /dev/null 2>&1
      ncu -i "$OUT/$X.ncu-rep" > "$OUT/$X.txt" 2>&1
      rm -f "$OUT/$X.ncu-rep"
      X=ncu_ours_bwd_N$N
      log "ncu_cudnn: ours, $B"
      ncu $SECTIONS --metrics "$M" -k 'regex:(dkdv|dq)_kernel' -s 2 -c 2 -o "$OUT/$X" \
        "$BUILD/bin/fa_bench" --benchmark_filter="attn_bwd/$B/bf16/D128/full/N$N/" > /dev/null 2>&1
      ncu -i "$OUT/$X.ncu-rep" > "$OUT/$X.txt" 2>&1
      rm -f "$OUT/$X.ncu-rep"
      ;;
    timeline07)
      # Chapter 07's measured timeline (notes/07_flash_hopper.md; notes/figures/ch07_timeline.py
      # draws it). A build folder of its own (TIMELINE_BUILD, default build-timeline) configured
      # with -DFA_CH07_TIMELINE=ON, in which only the program ch07_timeline is built: the forward
      # rungs v1-v4 with phase timestamps. Then v1-v4 at bf16 N 8192, B 2, non-causal: D 128
      # (H 16) into ch07_timeline.csv and D 64 (H 32) into ch07_timeline_d64.csv, the program's
      # summary in timeline07.log. Needs no other stage; after `build` it reuses the dependency
      # archives that stage downloaded, if any.
      TB=${TIMELINE_BUILD:-build-timeline}
      MIRROR=()
      [[ -f "$BUILD/_deps/downloads/eigen-3.4.0.tar.gz" ]] && MIRROR=(-DFA_DEPENDENCY_URL_BASE="file://$PWD/$BUILD/_deps/downloads")
      log "timeline07: configure $TB (-DFA_CH07_TIMELINE=ON)"
      cmake -S . -B "$TB" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 \
        -DFA_CH07_TIMELINE=ON -DFA_BUILD_TESTS=OFF -DFA_BUILD_BENCHMARKS=OFF ${MIRROR[@]+"${MIRROR[@]}"} \
        > "$OUT/timeline07_configure.log" 2>&1 || { tail -30 "$OUT/timeline07_configure.log"; exit 1; }
      log "timeline07: build ch07_timeline (-j$JOBS)"
      cmake --build "$TB" --target ch07_timeline -j "$JOBS" > "$OUT/timeline07_build.log" 2>&1 ||
        { grep -E "error|Error" "$OUT/timeline07_build.log" | head -40; exit 1; }
      log "timeline07: D 128"
      "$TB/bin/ch07_timeline" --head_dim=128 --out="$OUT/ch07_timeline.csv" > "$OUT/timeline07.log" 2>&1
      log "timeline07 D 128 rc=$?"
      "$TB/bin/ch07_timeline" --head_dim=64 --out="$OUT/ch07_timeline_d64.csv" >> "$OUT/timeline07.log" 2>&1
      log "timeline07 D 64 rc=$?"; cat "$OUT/timeline07.log"
      ;;
    ladder)
      # The main path of chapters 05-08 in one run, beside the peers measured in the same run: the
      # chapter READMEs' ladder tables come from here. After `build`. fa_bench of the forward rungs
      # (05/v0-v5, 07/v1-v5) and the backward rungs (06/v1-v5, 07/bwd_v1-v5) at D LADDER_D (default
      # 128) on the protocol shapes (B = 16384/N, H = 2048/D), then PyTorch SDPA (FlashAttention-2
      # and cuDNN) on the same shapes; the decoding rungs 08/v1-v6 on the decode shapes with the
      # copy ceiling, then PyTorch's decode peers. Logs and CSVs: ladder_{fwd,bwd}_d<D>*, ladder_decode*.
      # LADDER_D may list head dims ("64 128 256"); each gets its own logs (ladder_<part>_d<D>*).
      for D in ${LADDER_D:-128}; do
        for part in fwd bwd; do
          case $part in
            fwd) F="attn_fwd/(05/v[0-5]|07/v[1-5])[^/]*/(bf16|fp32)/D$D/" ;;
            bwd) F="attn_bwd/(06/v[1-5]|07/bwd_v[1-6])[^/]*/bf16/D$D/" ;;
          esac
          log "ladder $part D$D: fa_bench $F"
          "$BUILD/bin/fa_bench" --benchmark_filter="$F" --benchmark_out="$OUT/ladder_${part}_d$D.json" \
            --benchmark_out_format=json > "$OUT/ladder_${part}_d$D.log" 2>&1
          log "ladder $part D$D fa_bench rc=$?"
          PYTHONUNBUFFERED=1 python3 bench/compare_sdpa.py "$OUT/ladder_${part}_d$D.json" \
            --out "$OUT/ladder_${part}_d${D}_peers" > "$OUT/ladder_${part}_d${D}_peers.log" 2>&1
          log "ladder $part D$D peers rc=$?"; grep -E "^\|" "$OUT/ladder_${part}_d${D}_peers.log" | head -40
        done
      done
      log "ladder decode: fa_bench ceiling/copy|attn_decode/08/v[1-6]"
      "$BUILD/bin/fa_bench" --benchmark_filter="ceiling/copy|attn_decode/08/v[1-6]" \
        --benchmark_out="$OUT/ladder_decode.json" --benchmark_out_format=json > "$OUT/ladder_decode.log" 2>&1
      log "ladder decode fa_bench rc=$?"
      PYTHONUNBUFFERED=1 python3 bench/compare_decode.py "$OUT/ladder_decode.json" \
        --out "$OUT/ladder_decode_peers" > "$OUT/ladder_decode_peers.log" 2>&1
      log "ladder decode peers rc=$?"; grep -E "^\|" "$OUT/ladder_decode_peers.log" | head -20
      ;;
    dispatch)
      # The dispatch's choice at the protocol shapes (fa_bench attn_fwd/auto, attn_bwd/auto; the
      # row's label names the kernel) beside every chapter 07 rung at D 128 and PyTorch SDPA on
      # the same shapes, so that compare_sdpa.py's best/ours column shows a row that picks a
      # slower kernel; the auto rows alone at D 64 and 256; the fp32 backwards (the dispatch's
      # fp32 row). Logs: dispatch_d<D>*, fp32_bwd.log.
      for D in 128 64 256; do
        F="attn_(fwd|bwd)/auto/bf16/D$D/"
        [[ $D == 128 ]] && F="attn_(fwd|bwd)/(auto|07/[^/]*)/bf16/D$D/"
        log "dispatch D$D: fa_bench $F"
        "$BUILD/bin/fa_bench" --benchmark_filter="$F" --benchmark_out="$OUT/dispatch_d$D.json" \
          --benchmark_out_format=json > "$OUT/dispatch_d$D.log" 2>&1
        log "dispatch D$D fa_bench rc=$?"
        PYTHONUNBUFFERED=1 python3 bench/compare_sdpa.py "$OUT/dispatch_d$D.json" \
          --out "$OUT/dispatch_d${D}_peers" > "$OUT/dispatch_d${D}_peers.log" 2>&1
        log "dispatch D$D peers rc=$?"; grep -E "^\|" "$OUT/dispatch_d${D}_peers.log" | head -30
      done
      "$BUILD/bin/fa_bench" --benchmark_filter='attn_bwd/06/v1_fp32[^/]*/fp32/' > "$OUT/fp32_bwd.log" 2>&1
      log "fp32 backwards rc=$?"
      ;;
    release)
      # The student release (README "Exercises", tests/course/make_release.py) as a course hands it
      # out and as CI makes it (.ci/run): from an archive of this tree's files, into
      # build/student_release. Its quick start on this GPU: README
      # command 2 (configure, build, the default test label) from an empty build folder, timed;
      # on an untouched release it must pass (the exercise kernels are their own label, and the
      # chapter programs report them as not written yet). Then its exercises' label, which must
      # fail, naming the TODOs. CCACHE_BASEDIR at this checkout: the release's unchanged sources
      # hit the compiler cache of `build`. Logs: release_*.
      export CCACHE_BASEDIR=$PWD
      rm -rf build/archive build/student_release
      mkdir -p build/archive
      # The files as they are, without the git metadata, as a downloaded archive has them (the
      # walk in make_release.py leaves out what .gitignore names). Not `git archive HEAD`: that
      # is the last commit, and a copy of this tree may carry files newer than its git metadata.
      tar -c --exclude=./.git --exclude=./build --exclude='./build-*' --exclude=./out . |
        tar -x -C build/archive
      SRC=build/archive
      log "release: make_release.py from $SRC"
      python3 "$SRC/tests/course/make_release.py" build/student_release > "$OUT/release_make.log" 2>&1 ||
        { tail -20 "$OUT/release_make.log"; exit 1; }
      log "release: command 2 (cmake --workflow --preset default, -j$JOBS)"
      start=$(date +%s)
      (cd build/student_release && CMAKE_BUILD_PARALLEL_LEVEL=$JOBS cmake --workflow --preset default) \
        > "$OUT/release_command2.log" 2>&1
      rc=$?
      log "release command 2 rc=$rc in $(($(date +%s) - start)) s"
      grep -E "tests passed|tests failed|Total Test time" "$OUT/release_command2.log"
      grep -E "\*\*\*Failed|\(Failed\)|Timeout" "$OUT/release_command2.log" | head -40
      (cd build/student_release && ctest --test-dir build -L exercise -j "$JOBS" --output-on-failure \
        --timeout 900) > "$OUT/release_exercises.log" 2>&1
      rc=$?
      todo=$(grep -c "TODO in chapters/" "$OUT/release_exercises.log")
      log "release exercises rc=$rc (must be non-zero), $todo lines name a TODO (must be > 0)"
      grep -E "tests passed|tests failed" "$OUT/release_exercises.log"
      ;;
    releasetour)
      # The student release's command 1 (the tour: every chapter program at its default sizes) on
      # this GPU, after `release`: on an untouched release it exits 0, each exercise kernel
      # reported as not written yet. Log: release_tour.log.
      log "release: command 1 (cmake --build --preset tour)"
      start=$(date +%s)
      (cd build/student_release && cmake --build --preset tour) > "$OUT/release_tour.log" 2>&1
      log "release command 1 rc=$? in $(($(date +%s) - start)) s"
      grep -A14 "== Tour summary ==" "$OUT/release_tour.log"
      grep -c "its exercise is not written yet" "$OUT/release_tour.log"
      ;;
    autograde_gpu)
      # The autograder's GPU path end to end (tests/course/autograder/README.md, "The GPU half"),
      # after `build`: test_autograder.py --gpu grades a correct, a wrong and a not-compiling
      # submission of exercise 01 with the GPU checks (public and hidden), in a grading tree under
      # $BUILD/autograder_e2e_gpu/ built with $JOBS jobs (the compiler cache of `build` serves its
      # unchanged sources). Log: autograde_gpu.log.
      export CCACHE_BASEDIR=$PWD
      log "autograde_gpu: test_autograder.py --gpu"
      start=$(date +%s)
      FA_AUTOGRADER_JOBS=$JOBS python3 tests/course/autograder/test_autograder.py \
        --reference-build "$BUILD" --gpu > "$OUT/autograde_gpu.log" 2>&1
      log "autograde_gpu rc=$? in $(($(date +%s) - start)) s"
      grep -E "^FAIL|autograder end to end" "$OUT/autograde_gpu.log"
      ;;
    pip)
      # README "From PyTorch": pip install in a fresh environment (a venv that sees this machine's
      # torch), the library built from source into an empty build folder (build-python/), timed;
      # then the installed package used from a folder outside the repository: its library, the
      # dispatch's choice, an attention call forward and backward against SDPA. Logs: pip_*.
      rm -rf build-python /tmp/fa_pip_venv
      python3 -m venv /tmp/fa_pip_venv
      # The venv sees this machine's torch (python3 may itself be a venv, whose packages a new
      # venv's --system-site-packages would not reach): a .pth line naming them.
      python3 -c "import torch, os; print(os.path.dirname(os.path.dirname(torch.__file__)))" \
        > "$(/tmp/fa_pip_venv/bin/python -c 'import site; print(site.getsitepackages()[0])')/machine_torch.pth"
      log "pip install --no-build-isolation . (empty build-python/)"
      start=$(date +%s)
      /tmp/fa_pip_venv/bin/python -m pip install --no-build-isolation --no-deps . > "$OUT/pip_install.log" 2>&1
      rc=$?
      log "pip install rc=$rc in $(($(date +%s) - start)) s"; tail -3 "$OUT/pip_install.log"
      (cd /tmp && /tmp/fa_pip_venv/bin/python - > "$OUT/pip_use.log" 2>&1 <<'PY'
import torch, flash_from_scratch as fa
print("library inside the package:", "/site-packages/flash_from_scratch/lib/" in fa.find_library())
q, k, v = (torch.randn(2, 8, 1000, 128, device="cuda", dtype=torch.bfloat16, requires_grad=True)
           for _ in range(3))
o = fa.attention(q, k, v, causal=True)
o.float().square().sum().backward()
ref = torch.nn.functional.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=True)
print("max |O - SDPA fp32|: %.3g" % (o.float() - ref).abs().max().item())
print(*fa.explain(q, k, v, causal=True), sep="\n")
PY
      )
      log "pip use rc=$?"; cat "$OUT/pip_use.log"
      ;;
    e2e)
      # What a PyTorch user gets (bench/attention_e2e.py): fa.attention() forward + backward with
      # its defaults, beside named kernel pairs (E2E_PAIRS, space-separated FWD:BWD) and SDPA's
      # FlashAttention-2 and cuDNN backends, at E2E_SHAPES (space-separated B,H,N,D; default the
      # B 4, H 16, N 4096, D 128 of the dispatch's goal). E2E_PROFILE=1 adds each column's GPU
      # kernels from torch.profiler (--profile); E2E_ROUNDS=R times the columns R times in turn
      # (default 5; medians of the rounds: one round's ratio to cuDNN has read 0.89-0.97 where the
      # five rounds' medians read 0.92); E2E_TRACE=1 adds one call's timeline, host beside GPU (--trace,
      # Chrome traces under traces/), E2E_HOST=1 the host's time inside one call (--host),
      # E2E_REPEATS the timed calls per column and round (default 50), E2E_HEADS_KV the K/V heads
      # (grouped heads: fewer than H; the peak MiB column then shows whether a backward repeats K
      # and V), E2E_WINDOW a sliding window of that many keys (--window). Logs:
      # e2e_<shape>[_hkv<H_kv>][_w<W>].log, .csv.
      for shape in ${E2E_SHAPES:-4,16,4096,128}; do
        pairs=()
        for pr in ${E2E_PAIRS:-07/v5_persistent:07/bwd_v1_tma_wgmma}; do pairs+=(--pair "$pr"); done
        tag=${shape//,/_}${E2E_HEADS_KV:+_hkv$E2E_HEADS_KV}${E2E_WINDOW:+_w$E2E_WINDOW}
        log "e2e $shape"
        FA_LIBRARY="$PWD/$BUILD/lib/libfa_python.so" PYTHONUNBUFFERED=1 python3 bench/attention_e2e.py \
          --shape "$shape" ${E2E_HEADS_KV:+--heads_kv "$E2E_HEADS_KV"} ${E2E_WINDOW:+--window "$E2E_WINDOW"} "${pairs[@]}" --csv "$OUT/e2e_$tag.csv" ${E2E_PROFILE:+--profile} ${E2E_TRACE:+--trace "$OUT/traces"} ${E2E_HOST:+--host} --rounds "${E2E_ROUNDS:-5}" --repeats "${E2E_REPEATS:-50}" > "$OUT/e2e_$tag.log" 2>&1
        log "e2e $shape rc=$?"; cat "$OUT/e2e_$tag.log"
      done
      ;;
    host)
      # The host's time per call of fa.attention(), its operator and SDPA on a tiny problem, then
      # the layers of one call timed alone, and cProfile of fa.attention (bench/host_overhead.py
      # --stages --profile). After `build`. Log: host_overhead.log.
      log "host: bench/host_overhead.py"
      FA_LIBRARY="$PWD/$BUILD/lib/libfa_python.so" PYTHONUNBUFFERED=1 python3 bench/host_overhead.py \
        --stages --profile > "$OUT/host_overhead.log" 2>&1
      log "host rc=$?"; head -28 "$OUT/host_overhead.log"
      ;;
    rung)
      # One kernel version end to end, after `build`: RUNG (a registered name), BASE (optional,
      # the version it improves on). Its GPU tests (default label), compute-sanitizer on it (the
      # sanitize label, FA_SANITIZE_ONLY), fa_bench of RUNG and BASE at bf16 on the protocol
      # shapes, and PyTorch SDPA timed on the same shapes in the same call. Logs: rung_<RUNG>_*, so
      # one call may run the stage for several rungs (RUNG=a ... rung; RUNG=b ... rung).
      # RUNG may name several versions of one chapter, separated by '|' (logs: rung_a+b+c_*).
      # RUNG_LONG=1 runs their long tests too (after the default label); RUNG_BENCH replaces the
      # fa_bench filter (for versions of several families, or rows other than the protocol's);
      # RUNG_SDPA=0 leaves out PyTorch's timing of the same shapes.
      : "${RUNG:?set RUNG to a registered kernel name, e.g. RUNG=06/v5_warp_tiles}"
      case "$RUNG" in 06/* | */bwd_*) P=attn_bwd ;; 08/*) P=attn_decode ;; *) P=attn_fwd ;; esac
      R=${RUNG//\//_}
      T=${R//|/+}
      log "rung $RUNG: ctest -R $R"
      ctest --test-dir "$BUILD" -R "$R" -LE "long|sanitize" -j "$JOBS" --output-on-failure \
        --timeout 900 > "$OUT/rung_${T}_ctest.log" 2>&1
      log "rung ctest rc=$? $(grep -E 'tests passed|tests failed' "$OUT/rung_${T}_ctest.log")"
      if [[ -n "${RUNG_LONG:-}" ]]; then
        ctest --test-dir "$BUILD" -R "$R" -L long -j "$JOBS" --output-on-failure --timeout 900 \
          > "$OUT/rung_${T}_long.log" 2>&1
        log "rung long rc=$? $(grep -E 'tests passed|tests failed' "$OUT/rung_${T}_long.log")"
      fi
      FA_SANITIZE_ONLY="${RUNG//|/,}" ctest --test-dir "$BUILD" -L sanitize --output-on-failure \
        --timeout 900 > "$OUT/rung_${T}_sanitize.log" 2>&1
      log "rung sanitize rc=$? $(grep -E 'tests passed|tests failed' "$OUT/rung_${T}_sanitize.log")"
      F=${RUNG_BENCH:-"$P/(${RUNG}${BASE:+|$BASE})/bf16/"}
      [[ $P == attn_decode || -n "${RUNG_BENCH:-}" ]] && F="ceiling/copy|$F"  # GB/s are read against it
      "$BUILD/bin/fa_bench" --benchmark_filter="$F" \
        --benchmark_out="$OUT/rung_${T}_bench.json" --benchmark_out_format=json > "$OUT/rung_${T}_bench.log" 2>&1
      log "rung fa_bench rc=$?"; grep -E "^(attn|ceiling)" "$OUT/rung_${T}_bench.log" | head -80
      if [[ "${RUNG_SDPA:-1}" == 0 ]]; then
        log "rung sdpa: left out (RUNG_SDPA=0)"
      else
        if [[ $P == attn_decode ]]; then
          PYTHONUNBUFFERED=1 python3 bench/compare_decode.py "$OUT/rung_${T}_bench.json" --out "$OUT" \
            > "$OUT/rung_${T}_sdpa.log" 2>&1
        else
          PYTHONUNBUFFERED=1 python3 bench/compare_sdpa.py "$OUT/rung_${T}_bench.json" --out "$OUT" \
            > "$OUT/rung_${T}_sdpa.log" 2>&1
        fi
        log "rung sdpa rc=$?"; grep -E "^\|" "$OUT/rung_${T}_sdpa.log" | head -40
      fi
      ;;
    rounds)
      # Several rounds of (fa_bench of RUNG and BASE, then PyTorch SDPA) on the forward protocol
      # shapes of one head dim (ROUND_D, default 128), ROUNDS times (default 3), alternating, then
      # the median per shape (bench/rounds_summary.py). Why: one fa_bench run and one SDPA run are
      # minutes apart, and the same kernel measured twice in one call has differed by up to 4%
      # (the GPU's clocks under sustained tensor load); ratios near 1.0 need more than one round.
      # ROUND_OP=bwd: the backward's rows instead (attn_bwd, the peers' backward columns).
      # RUNG and BASE share one fa_bench process here, which favours the one timed first (the
      # power cap; bench/fair_rounds.sh says why): compare two of ours with fair_rounds.sh.
      : "${RUNG:?set RUNG to one or more forward kernels, e.g. RUNG=05/v5_fewer_instructions}"
      D=${ROUND_D:-128}
      OP=${ROUND_OP:-fwd}
      F="attn_$OP/(${RUNG}${BASE:+|$BASE})/bf16/D$D/"
      for r in $(seq 1 "${ROUNDS:-3}"); do
        mkdir -p "$OUT/round$r"
        log "round $r: fa_bench $F"
        "$BUILD/bin/fa_bench" --benchmark_filter="$F" --benchmark_out="$OUT/round$r/bench.json" \
          --benchmark_out_format=json > "$OUT/round$r/bench.log" 2>&1
        log "round $r: fa_bench rc=$?"
        PYTHONUNBUFFERED=1 python3 bench/compare_sdpa.py "$OUT/round$r/bench.json" --out "$OUT/round$r" \
          > "$OUT/round$r/sdpa.log" 2>&1
        log "round $r: sdpa rc=$?"
      done
      python3 bench/rounds_summary.py $([ "$OP" = bwd ] && echo --bwd) "$OUT"/round*/ > "$OUT/rounds_D$D.md" 2>&1
      log "rounds summary rc=$?"; cat "$OUT/rounds_D$D.md"
      ;;
    varlen_rounds)
      # Two varlen forwards (RUNG against BASE, e.g. RUNG=09/hopper_v3_varlen_persistent
      # BASE=09/hopper_v1_varlen) on fa_bench's packed batches (attn_varlen: mixed, square and
      # long; VARLEN_BATCHES narrows them) at VARLEN_DIMS (default 64|96|128|192|256), causal and
      # full, ROUNDS rounds (default 3) of one fa_bench process timing both, then
      # bench/pair_rounds.py: each kernel's median, the speedup and its spread over the rounds. Why
      # rounds: on the long batch single runs have put them 5% apart either way
      # (chapters/09_serving/README.md, "The steps as diffs").
      # One process timing both favours the one timed first (bench/fair_rounds.sh says why).
      # After `build`. Logs: varlen_round<r>.log and .json, varlen_rounds.md.
      : "${RUNG:?set RUNG and BASE to two varlen forwards}" "${BASE:?set BASE}"
      F="attn_varlen/(${RUNG}|${BASE})/bf16/D(${VARLEN_DIMS:-64|96|128|192|256})/.*/(${VARLEN_BATCHES:-mixed|square|long})/"
      for r in $(seq 1 "${ROUNDS:-3}"); do
        "$BUILD/bin/fa_bench" --benchmark_filter="$F" --benchmark_out="$OUT/varlen_round$r.json" \
          --benchmark_out_format=json > "$OUT/varlen_round$r.log" 2>&1
        log "varlen round $r: fa_bench rc=$?"
      done
      if compgen -G "$OUT/varlen_round*.json" > /dev/null; then
        python3 bench/pair_rounds.py "$RUNG" "$BASE" "$OUT"/varlen_round*.json > "$OUT/varlen_rounds.md" 2>&1
        log "varlen rounds summary rc=$?"; cat "$OUT/varlen_rounds.md"
      else
        log "varlen rounds: fa_bench wrote no JSON (varlen_round1.log says why)"
      fi
      ;;
    serving)
      # Chapter 09 after `build`: the chapter program (its default run, then --full: the window
      # problem at N 32768, 4095 keys to the left), fa_bench of the serving families with the
      # copy ceiling (attn_varlen, attn_window, attn_paged and their _bwd/_append rows) to
      # serving_bench.json, then bench/compare_serving.py (PyTorch's peers on the same shapes)
      # when it is there. Logs: serving_*.
      log "serving: ch09_serving"
      "$BUILD/bin/ch09_serving" > "$OUT/serving_ch09.log" 2>&1
      log "serving ch09 rc=$?"; tail -40 "$OUT/serving_ch09.log"
      log "serving: ch09_serving --full"
      "$BUILD/bin/ch09_serving" --full --parts=window,backward > "$OUT/serving_ch09_full.log" 2>&1
      log "serving ch09 --full rc=$?"; tail -20 "$OUT/serving_ch09_full.log"
      log "serving: fa_bench attn_varlen|attn_window|attn_paged|ceiling"
      "$BUILD/bin/fa_bench" --benchmark_filter='attn_varlen|attn_window|attn_paged|ceiling' \
        --benchmark_format=console --benchmark_out="$OUT/serving_bench.json" \
        --benchmark_out_format=json > "$OUT/serving_bench.log" 2>&1
      log "serving fa_bench rc=$?"; grep -E "attn_(varlen|window|paged)" "$OUT/serving_bench.log" | head -80
      # compare_serving.py times our kernels itself, beside the peers, on the same shapes.
      FA_LIBRARY="$PWD/$BUILD/lib/libfa_python.so" PYTHONPATH=python PYTHONUNBUFFERED=1 \
        python3 bench/compare_serving.py --out "$OUT/serving_compare" > "$OUT/serving_peers.log" 2>&1
      log "serving compare_serving rc=$?"; grep -E "^\|" "$OUT/serving_peers.log" | head -60
      ;;
    pack)
      # The device returns at most 8 files per call: fold every log of this call into one archive
      # (keeping steps.log beside it for a quick look). Put it last: bash bench/device_run.sh ... pack
      log "pack: $OUT/logs.tgz"
      # Only the top folder's steps.log stays: a stage that wrote into a subfolder (rounds with its
      # own OUT) has a steps.log there too, and keeping it would leave the folder undeletable and
      # stop the chain before the archive is moved back.
      tar czf /tmp/fa_logs.tgz -C "$OUT" --exclude=logs.tgz . &&
        find "$OUT" -mindepth 1 ! -path "$OUT/steps.log" -delete && mv /tmp/fa_logs.tgz "$OUT/logs.tgz"
      ;;
    *) echo "unknown stage $stage"; exit 2 ;;
  esac
done
