#!/usr/bin/env bash
# check_format.sh: every C++/CUDA source follows the repository's .clang-format.
#   bash .ci/check_format.sh        # lists the files that differ, exits 1 if any
#   bash .ci/check_format.sh --fix  # rewrites them in place
# Not checked: chapters/*/exercises/ (generated from the solutions by fa_make_exercise) and
# chapters/user/snippets/ (quoted verbatim in README.md and chapters/user/README.md, laid out
# for reading in the README rather than by the formatter).
# The layout depends on the clang-format version; CI uses Debian 12's clang-format 14.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v clang-format >/dev/null || { echo "check_format: clang-format not found (apt-get install -y clang-format)"; exit 1; }
mapfile -t files < <(git ls-files '*.cu' '*.cuh' '*.cpp' '*.h' | grep -v -e '/exercises/' -e '^chapters/user/snippets/')
if [ "${1:-}" = "--fix" ]; then
  clang-format -i "${files[@]}"
  exit 0
fi
bad=()
for f in "${files[@]}"; do
  clang-format --dry-run -Werror "$f" >/dev/null 2>&1 || bad+=("$f")
done
if [ ${#bad[@]} -gt 0 ]; then
  echo "check_format: ${#bad[@]} file(s) differ from .clang-format ($(clang-format --version)):"
  printf '  %s\n' "${bad[@]}"
  echo "fix with: bash .ci/check_format.sh --fix"
  exit 1
fi
echo "check_format: ${#files[@]} files follow .clang-format"
