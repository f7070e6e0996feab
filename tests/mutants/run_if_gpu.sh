#!/bin/sh
# run_if_gpu.sh SANITIZER [ARGS...]: run compute-sanitizer with ARGS, or exit 77 (ctest's
# SKIP_RETURN_CODE for the sanitizer tests) when the tool or an NVIDIA GPU is missing:
# compute-sanitizer cannot run without a device, and a machine without one should report
# "skipped", not "failed".
tool="$1"
shift
if [ ! -x "$tool" ] && ! command -v "$tool" >/dev/null 2>&1; then
  echo "FA_SANITIZE_SKIP: compute-sanitizer not found ($tool); pass -DFA_COMPUTE_SANITIZER=/path"
  exit 77
fi
if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1; then
  echo "FA_SANITIZE_SKIP: no NVIDIA GPU (nvidia-smi absent or finds no device)"
  exit 77
fi
exec "$tool" "$@"
