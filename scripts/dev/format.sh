#!/usr/bin/env bash
# Formats every C, C++ and CUDA source of the repository in place with clang-format-14 (.clang-format).
# tests/lint/test_format.sh is the check that CI runs.
set -euo pipefail
cd "$(dirname "$0")/../.."
source tests/lint/format_files.sh
format_files | xargs -0 -r clang-format-14 -i
