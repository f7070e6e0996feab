#!/usr/bin/env bash
# fair_rounds.sh: several kernels of one family timed against each other, each in an fa_bench
# process of its own, the order rotated from round to round, a pause between processes.
#
#   bash bench/fair_rounds.sh OUT_DIR FAMILY SHAPES KERNEL...
#   bash bench/fair_rounds.sh out/fair bwd 'bf16/D(64|128)/' 07/bwd_t61_turns_wide_stores \
#       07/bwd_t48_dq_in_turns
#   python3 bench/pair_rounds.py 07/bwd_t61_turns_wide_stores 07/bwd_t48_dq_in_turns \
#       $(bash bench/fair_rounds.sh --rounds out/fair bwd 07/bwd_t61_turns_wide_stores \
#       07/bwd_t48_dq_in_turns)
#
# Why not one process timing all of them: fa_bench times its kernels one after the other in the
# registry's order, and the first runs more of its rows before the GPU's power cap lowers the
# clocks. On an H100 the same machine code timed first and second in one process read 1.01-1.18x
# apart; one process each, rotated, put it within 0.96-1.01x of itself
# (notes/measured/h100-2026-12-07e/in_process_rounds.md, fair_rounds_fwd.md).
#
# Writes OUT_DIR/r<round>_<family>_<kernel with / as _>.json. ROUNDS (default 3), PAUSE (seconds
# between processes, default 1.5), BUILD (default build). With --rounds first, prints instead
# the arguments bench/pair_rounds.py takes for those files: one comma-joined group per round.
set -euo pipefail
if [[ "${1:-}" == --rounds ]]; then
  shift
  out=$1 family=$2
  shift 2
  for r in $(seq 1 "${ROUNDS:-3}"); do
    group=""
    for k in "$@"; do group+="${group:+,}$out/r${r}_${family}_${k//\//_}.json"; done
    printf '%s ' "$group"
  done
  echo
  exit 0
fi
[[ $# -ge 4 ]] || { sed -n '2,20p' "$0"; exit 2; }
out=$1 family=$2 shapes=$3
shift 3
kernels=("$@")
n=${#kernels[@]}
mkdir -p "$out"
for r in $(seq 1 "${ROUNDS:-3}"); do
  for i in $(seq 0 $((n - 1))); do
    k=${kernels[$(((i + r) % n))]}
    "${BUILD:-build}/bin/fa_bench" --benchmark_filter="attn_$family/$k/$shapes" \
      --benchmark_out="$out/r${r}_${family}_${k//\//_}.json" --benchmark_out_format=json > /dev/null
    sleep "${PAUSE:-1.5}"
  done
  echo "round $r done"
done
