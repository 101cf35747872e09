#!/usr/bin/env bash
# The two commands of the README, and what .ci/run calls.
#   tools/dev.sh example   install what is missing, build, run the main example (fashion_mnist_mlp)
#   tools/dev.sh test      install what is missing, build every flavour, run the whole suite
# Build folders: build/ (default flavour: CPU + CUDA emulated through kernels/simt),
# build-asan/ (the same with AddressSanitizer + UBSan), build-nvcc/ (nvcc for sm_90), build-clang/
# (the unit suite with clang), build-fuzz/ (tools/fuzz.sh: the libFuzzer harnesses).
set -euo pipefail
cd "$(dirname "$0")/.."
mode=${1:-test}
jobs=${JOBS:-$(nproc)}

tools/setup.sh

configure_only() {  # dir, cmake args...
  local dir=$1
  shift
  cmake -S . -B "$dir" -G Ninja "$@" >"$dir.configure.log" 2>&1 || { cat "$dir.configure.log"; return 1; }
}

configure_and_build() {  # dir, cmake args...
  configure_only "$@"
  cmake --build "$1" -j "$jobs"
}

# install_test <build dir>: `cmake --install` into a fresh temporary prefix, then tests/install (an
# outside project: find_package(reel), one training step) configured, built and run against that
# prefix only. Its sources are copied out of the tree first, and the check fails when reel_DIR is
# not under the prefix or the outside build names any path of this source tree.
install_test() {
  local build_dir=$1 root tmp
  root=$(pwd -P)
  tmp=$(mktemp -d "${TMPDIR:-/tmp}/reel-install-test.XXXXXX")
  cmake --install "$build_dir" --prefix "$tmp/prefix" >"$tmp/install.log" 2>&1 || { cat "$tmp/install.log"; return 1; }
  cp -r tests/install "$tmp/src"
  env -u CMAKE_PREFIX_PATH cmake -S "$tmp/src" -B "$tmp/build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_PREFIX_PATH="$tmp/prefix" -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF >"$tmp/configure.log" 2>&1 ||
    { cat "$tmp/configure.log"; return 1; }
  local reel_dir
  reel_dir=$(sed -n 's/^reel_DIR:PATH=//p' "$tmp/build/CMakeCache.txt")
  case "$reel_dir" in
    "$tmp/prefix"/*) ;;
    *) echo "install test: reel found at '$reel_dir', not under the prefix $tmp/prefix" >&2; return 1 ;;
  esac
  if grep -qF "$root/" "$tmp/build/build.ninja"; then
    echo "install test: the outside build uses paths of the source tree:" >&2
    grep -oF "$root/[^ ]*" "$tmp/build/build.ninja" | sort -u | head >&2
    return 1
  fi
  cmake --build "$tmp/build" -j "$jobs" >"$tmp/build.log" 2>&1 || { cat "$tmp/build.log"; return 1; }
  "$tmp/build/reel_install_test"
  rm -rf "$tmp"
}

case "$mode" in
  example)
    configure_only build -DCMAKE_BUILD_TYPE=Release
    cmake --build build -j "$jobs" --target fashion_mnist_mlp
    # One epoch of the 784-512-512-10 MLP on Fashion-MNIST: test accuracy and the memory report.
    ./build/examples/fashion_mnist_mlp --epochs 1
    ;;
  test)
    tools/check_layers.sh  # no layer includes one above it (the link-time check is in the build)
    # The full suite runs last, so the last CTest summary printed is the whole suite's.
    nvcc_bin=$(command -v nvcc || true)
    [ -z "$nvcc_bin" ] && [ -x /usr/local/cuda/bin/nvcc ] && nvcc_bin=/usr/local/cuda/bin/nvcc
    if [ -n "$nvcc_bin" ]; then
      # Without a GPU every test of this flavour would only skip, so it is compiled and linked,
      # not run; tools/gpu_check.sh runs it on a real GPU.
      echo "== nvcc flavour (sm_90): compile and link"
      configure_and_build build-nvcc -DCMAKE_BUILD_TYPE=Release -DREEL_CUDA=ON \
        -DCMAKE_CUDA_COMPILER="$nvcc_bin" -DCMAKE_CUDA_ARCHITECTURES="${CUDA_ARCH:-90}"
    else
      echo "== nvcc flavour skipped: no CUDA toolkit on this machine (nvcc not found)"
    fi
    echo "== the unit suite (emulated CUDA included) under AddressSanitizer + UBSan"
    # Every unit test (test_*); the examples' end-to-end runs are not built here (-O1, no
    # -march=native: a sanitizer build is for finding bugs). ASAN_TESTS narrows it.
    asan_tests=${ASAN_TESTS:-^test_}
    configure_only build-asan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g -DNDEBUG" \
      -DREEL_SANITIZE=address,undefined -DREEL_NATIVE=OFF -DREEL_BUILD_EXAMPLES=OFF -DREEL_BUILD_BENCH=OFF
    # A test is named after its executable, or after it and a suffix (test_dist_failure_throw runs
    # test_dist_failure): each test's target is the longest test executable its name starts with.
    mapfile -t asan_names < <(cd build-asan && ctest -N -R "$asan_tests" | sed -n 's/^ *Test *#[0-9]*: *//p')
    mapfile -t test_executables < <(ninja -C build-asan -t targets all | sed -n 's/^\(test_[A-Za-z0-9_]*\): phony$/\1/p')
    asan_targets=()
    for name in "${asan_names[@]}"; do
      best=""
      for exe in "${test_executables[@]}"; do
        if [[ $name == "$exe" || $name == "${exe}_"* ]] && ((${#exe} > ${#best})); then best=$exe; fi
      done
      if [ -n "$best" ]; then asan_targets+=("$best"); fi
    done
    cmake --build build-asan -j "$jobs" --target "${asan_targets[@]}"
    (cd build-asan && ASAN_OPTIONS=detect_leaks=0 ctest --output-on-failure -j "$jobs" -R "$asan_tests")
    if command -v clang++ >/dev/null; then
      echo "== the unit suite built with clang"
      # Without oneDNN (on by default where found), so that Eigen's f32 GEMM path is built and tested.
      configure_and_build build-clang -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_COMPILER=clang++ \
        -DREEL_BUILD_EXAMPLES=OFF -DREEL_BUILD_BENCH=OFF -DREEL_ONEDNN=OFF
      (cd build-clang && ctest --output-on-failure -j "$jobs")
    fi
    echo "== the parsers under libFuzzer: committed corpora replayed, then ${FUZZ_SECONDS:-60} s per harness"
    tools/fuzz.sh
    echo "== default flavour (CPU + emulated CUDA): build and test"
    configure_and_build build -DCMAKE_BUILD_TYPE=Release
    echo "== install into a temporary prefix; an outside project builds against it and trains one step"
    install_test build
    if [ -f kernels/simt/simt.h ]; then
      echo "== emulated threads resumed in reverse order"
      (cd build && SIMT_ORDER=reverse ctest --output-on-failure -j "$jobs")
    fi
    echo "== the whole suite, emulated threads resumed in forward order"
    (cd build && SIMT_ORDER=forward ctest --output-on-failure -j "$jobs")
    ;;
  *)
    echo "usage: tools/dev.sh example|test" >&2
    exit 2
    ;;
esac
