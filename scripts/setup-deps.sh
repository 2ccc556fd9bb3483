#!/usr/bin/env bash
# Installs, from Debian packages, whatever libbasp's build, demo and tests need and this machine lacks.
# Idempotent: does nothing (and needs no network) when everything is present. Run as root (or with sudo).
set -euo pipefail

# One package per line; keep sorted. CUDA and NCCL are not Debian packages here: the build uses them when
# /usr/local/cuda (or CUDA on PATH) has them, and builds without them otherwise. python3-* are for python/ and its
# tests, which run with /usr/bin/python3 (the interpreter these packages belong to); python3-venv makes the torch test
# venv (scripts/python/env.sh); python3-matplotlib draws the benchmark plots (scripts/bench/plot_benchmarks.py).
PACKAGES=(
  catch2
  clang
  clang-format-14
  cmake
  g++
  hwloc
  iproute2
  libbenchmark-dev
  libclang-rt-14-dev
  libhwloc-dev
  libopenmpi-dev
  ninja-build
  openmpi-bin
  pkg-config
  python3-matplotlib
  python3-mpi4py
  python3-numpy
  python3-torch
  python3-venv
  universal-ctags
)

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "setup-deps: all ${#PACKAGES[@]} packages present"
  exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1; then SUDO="sudo"; else
    echo "setup-deps: missing packages (${missing[*]}) and not root: install them and rerun" >&2
    exit 1
  fi
fi
echo "setup-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
