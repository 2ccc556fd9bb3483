#!/usr/bin/env bash
# The shared library exports the C ABI and nothing else: every defined dynamic symbol starts with basp_.
# usage: test_exports.sh <path-to-libbasp.so>
set -euo pipefail
lib=$1
symbols=$(nm -D --defined-only "$lib" | awk '$2 ~ /^[TtDdBbRrVvWw]$/ {print $3}' | sed 's/@.*//' | sort -u)
count=$(printf '%s\n' "$symbols" | grep -c '^basp_' || true)
foreign=$(printf '%s\n' "$symbols" | grep -v '^basp_' | grep -v '^BASP_' || true)
echo "exported basp_* symbols: $count"
if [ "$count" -lt 10 ]; then
  echo "expected the C ABI (at least 10 basp_* functions), found $count" >&2
  exit 1
fi
if [ -n "$foreign" ]; then
  echo "symbols outside the C ABI are exported:" >&2
  printf '%s\n' "$foreign" >&2
  exit 1
fi
