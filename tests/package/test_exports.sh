#!/usr/bin/env bash
# The shared library exports the C ABI and nothing else, entry point by entry point: the checked-in list
# (tests/package/exports.txt) is compared both ways with the library's defined dynamic symbols (nm -D) and with every
# BASP_API declaration in basp.h. An entry point removed from the library or the header, or one added without being
# listed, fails the test naming it.
# usage: test_exports.sh <path-to-libbasp.so> [<basp.h> [<exports.txt>]]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
lib=$1
header=${2:-$here/../../include/basp/basp.h}
list=${3:-$here/exports.txt}
export LC_ALL=C
for f in "$lib" "$header" "$list"; do
  [ -f "$f" ] || { echo "test_exports: $f not found" >&2; exit 1; }
done
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# The list: one symbol per line, '#' comments and blank lines ignored, sorted and without duplicates.
grep -v -e '^#' -e '^[[:space:]]*$' "$list" > "$tmp/listed.raw" || true
sort -u "$tmp/listed.raw" > "$tmp/listed"
if ! cmp -s "$tmp/listed.raw" "$tmp/listed"; then
  echo "test_exports: $list must be sorted (LC_ALL=C sort) without duplicates" >&2
  exit 1
fi

# The library: every defined dynamic symbol but the version nodes (type A, e.g. BASP_0), without its version.
nm -D --defined-only "$lib" | awk 'NF >= 3 && $2 != "A" {print $3}' | sed 's/@.*//' | sort -u > "$tmp/exported"

# The header: the name before the first '(' of each BASP_API declaration, comments and preprocessor lines removed.
perl -0777 -ne '
  s{/\*.*?\*/}{ }gs; s{//[^\n]*}{}g; s{^[ \t]*#[^\n]*}{}mg;
  while (/\bBASP_API\b[^;{(]*?\b([A-Za-z_]\w*)\s*\(/g) { print "$1\n"; }
' "$header" | sort -u > "$tmp/declared"

fail=0
# compare <a> <b> <message>: each symbol in a but not in b, with the message.
compare() {
  local only
  only=$(comm -23 "$1" "$2")
  if [ -n "$only" ]; then
    while IFS= read -r s; do echo "test_exports: $s: $3" >&2; done <<< "$only"
    fail=1
  fi
}
compare "$tmp/listed" "$tmp/exported" "listed in exports.txt but not exported by $(basename "$lib") (entry point removed?)"
compare "$tmp/exported" "$tmp/listed" "exported by $(basename "$lib") but not listed in exports.txt (new entry point? add it)"
compare "$tmp/listed" "$tmp/declared" "listed in exports.txt but not declared BASP_API in basp.h (declaration removed?)"
compare "$tmp/declared" "$tmp/listed" "declared BASP_API in basp.h but not listed in exports.txt (new entry point? add it)"
if [ "$fail" -ne 0 ]; then
  echo "test_exports: the C ABI differs from $list" >&2
  exit 1
fi
echo "test_exports: $(wc -l < "$tmp/listed") entry points listed, exported and declared"
