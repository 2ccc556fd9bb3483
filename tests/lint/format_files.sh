# Sourced by scripts/dev/format.sh and tests/lint/test_format.sh: prints, NUL-separated, the C, C++ and CUDA
# sources that .clang-format covers (tracked files when the tree is a git checkout; recorded test inputs are not
# sources and are left alone).
format_files() {
  local pattern='\.(c|h|cpp|hpp|cu|cuh)$'
  if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    git ls-files -z | grep -zE "$pattern" | grep -zv '^tests/fixtures/'
  else
    find . -path ./.git -prune -o -path './build*' -prune -o -path ./tests/fixtures -prune -o -type f -print0 |
      grep -zE "$pattern" | sed -z 's|^\./||'
  fi
}
