#!/usr/bin/env bash
# Installs, from Debian's packages, whatever reel needs that this machine lacks. Idempotent: a
# second run installs nothing. The CUDA toolkit (nvcc, cuBLAS, cuDNN) is not a Debian package
# here; the nvcc flavour is built only where /usr/local/cuda (or nvcc on PATH) exists.
set -euo pipefail

packages=(
  cmake ninja-build g++ pkg-config
  ccache                 # compiler cache: tools/dev.sh and tools/fuzz.sh compile through it
  clang libomp-dev libclang-rt-dev  # the second compiler, and libFuzzer for tests/fuzz
  libeigen3-dev          # CPU GEMM and vectorised loops
  libdnnl-dev            # oneDNN: the CPU's f32 GEMM (REEL_ONEDNN)
  ocl-icd-opencl-dev     # only a Recommends of libdnnl-dev, but its CMake package requires OpenCL
  doctest-dev            # tests
  libboost-context-dev   # fibers of the CUDA emulator (kernels/simt)
  zlib1g-dev             # reading the gzip-compressed IDX files of Fashion-MNIST
  nlohmann-json3-dev     # safetensors headers, JSON exports
  libcli11-dev           # command lines of the examples
  dataset-fashion-mnist  # real data for the MLP example
  fortunes               # real text for the character GPT example
  libopenmpi-dev openmpi-bin  # distributed/: data parallel over MPI (its tests run under mpirun)
  chromium               # renders the memory timeline page headless (tests/check_page.sh)
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  sudo_cmd=()
  [ "$(id -u)" -ne 0 ] && sudo_cmd=(sudo)
  export DEBIAN_FRONTEND=noninteractive
  "${sudo_cmd[@]}" apt-get update -qq
  "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
else
  echo "setup: all packages present"
fi
