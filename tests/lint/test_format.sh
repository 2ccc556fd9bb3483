#!/usr/bin/env bash
# The tree stays formatted: every C, C++ and CUDA source must be unchanged by clang-format-14 with the
# repository's .clang-format. Fails listing the files that are not (scripts/dev/format.sh fixes them). Another
# clang-format version formats differently, so only version 14 counts; a missing one fails the test.
set -euo pipefail
cd "${1:-$(dirname "$0")/../..}"
if ! command -v clang-format-14 >/dev/null 2>&1; then
  echo "test_format: clang-format-14 is not installed (scripts/setup-deps.sh installs it)" >&2
  exit 1
fi
source tests/lint/format_files.sh
bad=()
checked=0
while IFS= read -r -d '' f; do
  checked=$((checked + 1))
  if ! clang-format-14 --dry-run --Werror "$f" >/dev/null 2>&1; then bad+=("$f"); fi
done < <(format_files)
if [ "$checked" -eq 0 ]; then
  echo "test_format: no source files found (wrong directory?)" >&2
  exit 1
fi
if [ ${#bad[@]} -gt 0 ]; then
  echo "test_format: ${#bad[@]} of $checked files are not formatted (run scripts/dev/format.sh):" >&2
  printf '  %s\n' "${bad[@]}" >&2
  exit 1
fi
echo "test_format: all $checked files formatted"
