#!/usr/bin/env bash
# tools/gpu_check.sh: the one command that checks reel on a machine with a real NVIDIA GPU.
#
#   tools/gpu_check.sh --prepare   on a machine with the Debian -dev packages (tools/setup.sh):
#                                  copies the third-party headers the GPU machine lacks (doctest,
#                                  Eigen, nlohmann-json, CLI11, zlib + libz.a) into .deps/ (git-ignored),
#                                  which CMake falls back to (cmake/reel_deps.cmake). Bring .deps/
#                                  along with the working tree.
#   tools/gpu_check.sh             on the GPU machine (nvcc, CMake >= 3.25, ninja, a C++17 host
#                                  compiler; no package downloads): builds the nvcc flavour in
#                                  build-gpu/ for sm_90, runs the whole test suite on the device
#                                  (ctest; a skipped test counts as a failure here, since skipping
#                                  means the device did not answer), and prints last a table per
#                                  kernel: median time, MB moved, GFLOP, achieved GB/s and GFLOP/s
#                                  (bench/bench_kernels.cpp).
#
# About 3-5 minutes on a 16-core machine (most of it the build). Environment: CUDA_ARCH (default
# 90), JOBS (default: all cores), BUILD_DIR (default build-gpu), BENCH_REPEATS (default 20).
# Exit status: 0 when the build and every test passed on the device.
set -uo pipefail
cd "$(dirname "$0")/.."

if [ "${1:-}" = "--prepare" ]; then
  set -e
  rm -rf .deps
  mkdir -p .deps/include .deps/lib
  cp -r /usr/include/doctest /usr/include/eigen3 /usr/include/nlohmann /usr/include/CLI .deps/include/
  cp /usr/include/zlib.h /usr/include/zconf.h .deps/include/
  cp "$(gcc -print-file-name=libz.a)" .deps/lib/libz.a 2>/dev/null || cp /usr/lib/x86_64-linux-gnu/libz.a .deps/lib/
  echo "gpu_check: .deps/ ready ($(du -sh .deps | cut -f1)): doctest, eigen3, nlohmann, CLI11, zlib"
  exit 0
fi

start=$SECONDS
jobs=${JOBS:-$(nproc)}
arch=${CUDA_ARCH:-90}
dir=${BUILD_DIR:-build-gpu}
repeats=${BENCH_REPEATS:-20}
nvcc_bin=$(command -v nvcc || true)
[ -z "$nvcc_bin" ] && [ -x /usr/local/cuda/bin/nvcc ] && nvcc_bin=/usr/local/cuda/bin/nvcc
if [ -z "$nvcc_bin" ]; then
  echo "gpu_check: nvcc not found (PATH or /usr/local/cuda/bin)" >&2
  exit 2
fi
status=0

echo "== machine"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null || echo "(nvidia-smi not available)"
"$nvcc_bin" --version | tail -1
echo "cores: $(nproc), jobs: $jobs, arch: sm_$arch"

echo "== configure and build the nvcc flavour in $dir/"
if ! cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DREEL_CUDA=ON -DCMAKE_CUDA_COMPILER="$nvcc_bin" \
    -DCMAKE_CUDA_ARCHITECTURES="$arch" -DREEL_BUILD_EXAMPLES=OFF >"$dir.configure.log" 2>&1; then
  cat "$dir.configure.log"
  echo "gpu_check: FAILED to configure" >&2
  exit 1
fi
grep -E "^-- reel:" "$dir.configure.log" || true
# -k 0: build everything that builds, so that one broken file still leaves the rest testable.
if ! cmake --build "$dir" -j "$jobs" -- -k 0 >"$dir.build.log" 2>&1; then
  grep -E "FAILED|error" "$dir.build.log" | head -40
  echo "gpu_check: the build FAILED (log: $dir.build.log); testing what was built" >&2
  status=1
fi
echo "build: $((SECONDS - start)) s"

echo "== tests on the device (ctest)"
ctest --test-dir "$dir" --output-on-failure -j "$jobs" --timeout 300 2>&1 | tee "$dir.ctest.log" | tail -25
if ! grep -q "100% tests passed" "$dir.ctest.log"; then
  echo "gpu_check: tests FAILED" >&2
  status=1
fi
if grep -q "(Skipped)" "$dir.ctest.log"; then
  echo "gpu_check: tests were SKIPPED: no CUDA device answered" >&2
  status=1
fi
echo "tests: $((SECONDS - start)) s"

echo "== kernel benchmark (bench_kernels cuda, median of $repeats)"
bench_log="$dir.bench.log"
if [ -x "$dir/bench/bench_kernels" ]; then
  "$dir/bench/bench_kernels" cuda "$repeats" >"$bench_log" 2>&1 || status=1
else
  echo "gpu_check: bench_kernels was not built" >"$bench_log"
  status=1
fi
echo "gpu_check: $([ $status = 0 ] && echo PASSED || echo FAILED) in $((SECONDS - start)) s"
echo
cat "$bench_log"  # last: the table per kernel
exit $status
