#!/usr/bin/env bash
# Sources stay small enough to read: no file under src/ over 450 lines and no function there over 80 lines (public
# headers in include/ are exempt). Functions are found by universal-ctags (scripts/setup-deps.sh installs it) in C,
# C++ and CUDA sources (.c .h .cpp .hpp .cu .cuh); a function's length runs from the line of its name to its closing
# brace, so lambdas and local classes inside it count within it (a lambda outside any function counts alone). Fails
# listing each file and function over its limit with its place and length.
#
#   test_sizes.sh [ROOT]      checks ROOT/src (ROOT: the repository, by default the one holding this script)
#   test_sizes.sh --self-test checks fixtures it writes: an 81-line function and a 451-line file must be reported,
#                             an 80-line function and a 450-line file must not (so the check can fail)
set -euo pipefail
readonly MAX_FILE_LINES=450 MAX_FUNCTION_LINES=80

# check_sizes DIR: prints one line per file or function over its limit, then "checked F files, N functions";
# returns 1 when it printed any.
check_sizes() {
  local dir=$1
  if ! ctags --version 2>/dev/null | grep -q 'Universal Ctags'; then
    echo "test_sizes: universal-ctags is not installed (scripts/setup-deps.sh installs it)" >&2
    return 2
  fi
  local files
  files=$(mktemp)
  (cd "$dir" && find src -type f \( -name '*.c' -o -name '*.h' -o -name '*.cpp' -o -name '*.hpp' -o -name '*.cu' \
    -o -name '*.cuh' \) | LC_ALL=C sort) > "$files"
  if [ ! -s "$files" ]; then
    echo "test_sizes: no sources under $dir/src (wrong directory?)" >&2
    rm -f "$files"
    return 2
  fi
  # CUDA qualifiers would otherwise be taken for the function's name.
  local status=0
  (cd "$dir" && ctags --sort=no --output-format=json --fields=+ne --kinds-C=f --kinds-C++=f --kinds-CUDA=f \
    -D '__launch_bounds__(...)=' -D '__global__=' -D '__device__=' -D '__host__=' -L "$files" -f - |
    python3 -c '
import json, sys
max_file, max_function, listing = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
over, functions, missing_end = [], 0, []
paths = [line.rstrip("\n") for line in open(listing)]
for path in paths:
    with open(path, "rb") as f:
        n = len(f.read().splitlines())
    if n > max_file:
        over.append(f"file {path}: {n} lines (limit {max_file})")
for line in sys.stdin:
    tag = json.loads(line)
    if tag.get("_type") != "tag" or tag.get("kind") != "function":
        continue
    path, line, name = tag["path"], tag["line"], tag["name"]
    if name.startswith("__anon"):
        if tag.get("scopeKind") == "function":
            continue  # a lambda inside a function counts within it
        name = "lambda"
    functions += 1
    if "end" not in tag:
        missing_end.append(f"{path}:{line} {name}")
        continue
    length = tag["end"] - line + 1
    if length > max_function:
        scope = "::".join(s for s in tag.get("scope", "").split("::") if s and not s.startswith("__anon"))
        if scope:
            name = scope + "::" + name
        over.append(f"function {name} at {path}:{line}: {length} lines (limit {max_function})")
for o in over:
    print(o)
for m in missing_end:
    print(f"function {m}: ctags found no end line")
print(f"checked {len(paths)} files, {functions} functions")
if functions == 0:
    print("ctags found no functions (not universal-ctags?)")
    sys.exit(2)
sys.exit(1 if over or missing_end else 0)
' "$MAX_FILE_LINES" "$MAX_FUNCTION_LINES" "$files") || status=$?
  rm -f "$files"
  return $status
}

# lines N TEXT: N lines, each TEXT.
lines() { for ((i = 0; i < $1; i++)); do echo "$2"; done; }

# function_of NAME BODY_LINES: a C++ function NAME of 2 + BODY_LINES lines whose body holds a lambda, so the lambda's
# lines count within it.
function_of() {
  echo "int $1(int x) {"
  echo "  auto twice = [](int y) {"
  lines $(($2 - 3)) "    y += 1;"
  echo "  };"
  echo "  return twice(x);"
  echo "}"
}

self_test() {
  local fixture
  fixture=$(mktemp -d)
  trap 'rm -rf "$fixture"' RETURN
  mkdir -p "$fixture/src/a" "$fixture/src/cuda"
  # Over the limits: an 81-line function with a lambda inside, an 81-line member function defined in a header, an
  # 81-line CUDA kernel, an 81-line lambda at namespace scope, a 451-line file.
  function_of too_long 79 > "$fixture/src/a/long.cpp"
  {
    echo "struct Holder {"
    echo "  void too_long_member() {"
    lines 79 "    ++count;"
    echo "  }"
    echo "  int count = 0;"
    echo "};"
  } > "$fixture/src/a/holder.h"
  {
    echo "__global__ void __launch_bounds__(64, 2) too_long_kernel(int* x) {"
    lines 79 "  *x += 1;"
    echo "}"
  } > "$fixture/src/cuda/kernel.cu"
  lines 451 "// filler" > "$fixture/src/a/big.cpp"
  {
    echo "const int table = [] {"
    lines 79 "  int unused = 0;"
    echo "}();"
  } > "$fixture/src/a/table.cpp"
  # At the limits: an 80-line function, a 450-line file.
  function_of just_fits 78 > "$fixture/src/a/fits.cpp"
  lines 450 "// filler" > "$fixture/src/a/full.cpp"

  local out status=0
  out=$(check_sizes "$fixture" 2>&1) || status=$?
  local failed=0
  if [ "$status" -ne 1 ]; then
    echo "test_sizes: self-test: the check exited $status on the fixtures, expected 1 (violations found)" >&2
    failed=1
  fi
  local expect
  for expect in "function too_long at src/a/long.cpp:1: 81 lines" \
    "function Holder::too_long_member at src/a/holder.h:2: 81 lines" \
    "function too_long_kernel at src/cuda/kernel.cu:1: 81 lines" \
    "function lambda at src/a/table.cpp:1: 81 lines" \
    "file src/a/big.cpp: 451 lines"; do
    if ! grep -qF "$expect" <<<"$out"; then
      echo "test_sizes: self-test: the report lacks '$expect'" >&2
      failed=1
    fi
  done
  if [ "$(grep -c ' lines (limit ' <<<"$out")" -ne 5 ]; then
    echo "test_sizes: self-test: expected 5 findings (a lambda counts within its function, not again)" >&2
    failed=1
  fi
  for absent in just_fits full.cpp; do
    if grep -qF "$absent" <<<"$out"; then
      echo "test_sizes: self-test: the report names '$absent', which is within the limits" >&2
      failed=1
    fi
  done
  if [ "$failed" -ne 0 ]; then
    echo "test_sizes: self-test: the check's report was:" >&2
    echo "$out" >&2
    return 1
  fi
  # The same tree without the violations passes.
  rm "$fixture/src/a/long.cpp" "$fixture/src/a/holder.h" "$fixture/src/cuda/kernel.cu" "$fixture/src/a/big.cpp" \
    "$fixture/src/a/table.cpp"
  echo 'int kernel_free() { return 0; }' > "$fixture/src/cuda/kernel.cu"
  status=0
  out=$(check_sizes "$fixture" 2>&1) || status=$?
  if [ "$status" -ne 0 ]; then
    echo "test_sizes: self-test: the check failed on fixtures within the limits:" >&2
    echo "$out" >&2
    return 1
  fi
  echo "test_sizes: self-test: 81-line functions (one holding a lambda, a header's member, a CUDA kernel, a" \
    "namespace-scope lambda) and a 451-line file are reported with place and length; 80 and 450 lines are not"
}

if [ "${1:-}" = "--self-test" ]; then
  self_test
  exit
fi
root=$(cd "${1:-$(dirname "$0")/../..}" && pwd)
status=0
out=$(check_sizes "$root" 2>&1) || status=$?
if [ "$status" -eq 2 ]; then
  echo "$out" >&2
  exit 1
elif [ "$status" -ne 0 ]; then
  echo "test_sizes: src/ has files over $MAX_FILE_LINES lines or functions over $MAX_FUNCTION_LINES lines:" >&2
  echo "$out" | sed 's/^/  /' >&2
  exit 1
fi
echo "test_sizes: no file under src/ over $MAX_FILE_LINES lines, no function over $MAX_FUNCTION_LINES lines ($out)"
