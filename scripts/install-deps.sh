#!/usr/bin/env bash
# Installs the Debian packages pcoll builds, tests and benchmarks with, where missing.
set -euo pipefail
packages=(build-essential pkg-config meson ninja-build cmake libfabric-dev libfabric-bin
          libhwloc-dev libucx-dev ucx-utils doctest-dev libopenmpi-dev openmpi-bin
          python3 python3-matplotlib iproute2 procps
          # the Python package (python/) and its tests and benchmark, for /usr/bin/python3
          python3-dev pybind11-dev python3-numpy python3-torch python3-sklearn python3-pytest
          # perf/train_imbalance.py's convolutional workloads (ResNet-18, MobileNetV2)
          python3-torchvision
          # pip install . (pyproject.toml): meson-python, pip and venv for a PEP 668 environment
          python3-mesonpy python3-pip python3-venv
          # pcoll_sim (perf/sim): the engine replayed on SimGrid
          libsimgrid-dev
          # fuzzing (scripts/fuzz.sh): clang and its libFuzzer runtime
          clang libclang-rt-14-dev
          # cluster integration (tests/cluster): launchers, PMI libraries, namespaces
          slurm-wlm munge libpmi2-0-dev libpmix-dev mpich hwloc)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "install-deps: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
