#!/usr/bin/env bash
# Installs, from Debian's packages, what the comparative benchmarks need beyond tools/setup.sh:
# the candidate CPU GEMM libraries (OpenBLAS, BLIS, oneDNN, libxsmm) and PyTorch for the side-by-side
# runs of bench/vs_torch. Idempotent. PyTorch must run on OpenBLAS: Debian's default BLAS is the
# reference implementation (no blocking, no vector kernels), far slower, which would make any
# comparison meaningless, so the system BLAS alternative is pointed at OpenBLAS's OpenMP build
# explicitly.
set -euo pipefail
cd "$(dirname "$0")/.."
tools/setup.sh

packages=(
  libopenblas-openmp-dev libopenblas0-openmp  # OpenBLAS (cblas), OpenMP threading like reel's own
  libblis-dev libblis4-openmp                 # BLIS
  libdnnl-dev                                 # oneDNN: matmul primitive with bias and post-ops
  libxsmm-dev                                 # small-matrix JIT GEMM
  python3-torch python3-numpy                 # the reference framework
  time                                        # GNU time: peak resident memory (bench/meta_table.sh)
)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
sudo_cmd=()
[ "$(id -u)" -ne 0 ] && sudo_cmd=(sudo)
if ((${#missing[@]})); then
  echo "setup_bench: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  "${sudo_cmd[@]}" apt-get update -qq
  "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
arch=$(dpkg-architecture -qDEB_HOST_MULTIARCH 2>/dev/null || echo x86_64-linux-gnu)
for lib in libblas.so.3 liblapack.so.3; do
  target=/usr/lib/$arch/openblas-openmp/$lib
  [ -e "$target" ] && "${sudo_cmd[@]}" update-alternatives --quiet --set "$lib-$arch" "$target"
done
echo "setup_bench: libblas.so.3 -> $(readlink -f /usr/lib/$arch/libblas.so.3)"
