#!/usr/bin/env bash
# The two commands of the README, and what .ci/run calls.
#   tools/dev.sh example   install what is missing, build, run the main example (fashion_mnist_mlp)
#   tools/dev.sh test      install what is missing, build every flavour, run the whole suite
# Build folders: build/ (default flavour: CPU + CUDA emulated through kernels/simt),
# build-asan/ (the unit suite built with clang, without oneDNN, under AddressSanitizer + UBSan +
# LeakSanitizer), build-nvcc/ (nvcc for sm_90), build-fuzz/ (tools/fuzz.sh: the libFuzzer harnesses).
#
# Each flavour builds only what its own checks use: the examples and benchmarks are built once, in
# the default flavour (the examples' end-to-end tests run there, tools/gpu_check.sh --emulated
# proves the GPU check script on it, and the CUDA kernel tests run again under simt's race checker);
# the nvcc flavour compiles what differs under nvcc (the library, the tests, bench_kernels) and
# checks every kernel's registers, spills and occupancy (the kernel_resources target), the sanitizer
# flavour the unit tests, tools/fuzz.sh the CPU-only layers its harnesses link. g++ builds the
# default and nvcc flavours, clang the sanitizer flavour and the fuzz harnesses: both compilers
# build the library and every unit test, one flavour each, which keeps a cold CI run under an hour.
# Every compile goes through ccache where it is installed (tools/setup.sh installs it): a first run
# gains from it too, since every test program compiles the same reel.cpp, and a later run on the
# same machine reuses the cache (ccache's own folder, `ccache -k cache_dir`, ~/.cache/ccache by
# default; paths are hashed relative to this checkout, so a fresh clone elsewhere hits it too).
# Each phase prints its time, and a table of them closes the run.
# Disk: with REEL_DROP_BUILDS=1 (.ci/run sets it) each flavour's build folder is deleted once its
# checks are done, after printing its size: with full debug info (-g) the sanitizer flavour's test
# programs (~160 MB each) passed 9 GiB half-built, more than a CI machine sometimes has free. The sanitizer builds
# keep -g1 (line tables: file:line in every report) rather than -g for the same reason.
set -euo pipefail
cd "$(dirname "$0")/.."
mode=${1:-test}
jobs=${JOBS:-$(nproc)}

tools/setup.sh

# ---- ccache ----
launcher=()        # every flavour's C++ compiles
cuda_launcher=()   # the nvcc flavour's CUDA compiles
if command -v ccache >/dev/null; then
  launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
  cuda_launcher=(-DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
  export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$(pwd -P)}  # relative paths: another clone hits the cache
  export CCACHE_NOHASHDIR=${CCACHE_NOHASHDIR:-true}    # and -g's working directory does not miss it
fi
ccache_counts() {  # prints "hits misses" of the cache so far (it may be shared with other builds)
  ccache --print-stats 2>/dev/null | awk -F'\t' '$1 ~ /^(direct|preprocessed)_cache_hit$/ { h += $2 }
    $1 == "cache_miss" { m += $2 } END { print h + 0, m + 0 }'
}
if ((${#launcher[@]})); then read -r ccache_hits0 ccache_misses0 < <(ccache_counts); fi

# ---- phase timing ----
# phase "title": closes the phase before (printing its time) and opens this one; phase_end closes
# the last and prints every phase's time.
phase_names=()
phase_secs=()
phase_start=$SECONDS
phase_close() {
  if ((${#phase_names[@]})); then
    local last=$((${#phase_names[@]} - 1))
    phase_secs[last]=$((SECONDS - phase_start))
    printf -- "-- %s: %d s\n" "${phase_names[last]}" "${phase_secs[last]}"
  fi
}
phase() {
  phase_close
  phase_names+=("$1")
  phase_start=$SECONDS
  echo "== $1"
}
phase_end() {
  phase_close
  echo "== time per phase"
  local i
  for i in "${!phase_names[@]}"; do
    printf "%5d:%02d  %s\n" $((phase_secs[i] / 60)) $((phase_secs[i] % 60)) "${phase_names[i]}"
  done
  printf "%5d:%02d  total\n" $((SECONDS / 60)) $((SECONDS % 60))
  if ((${#launcher[@]})); then
    local hits misses
    read -r hits misses < <(ccache_counts)
    echo "ccache: $((hits - ccache_hits0)) compiles served from the cache, $((misses - ccache_misses0)) compiled" \
      "(cache: $(ccache -k cache_dir))"
  fi
}

drop_build() {  # dir: prints its size, and deletes it where REEL_DROP_BUILDS=1
  echo "$1: $(du -sh "$1" | cut -f1) on disk"
  if [ "${REEL_DROP_BUILDS:-0}" = 1 ]; then rm -rf "$1"; fi
}

configure_only() {  # dir, cmake args...
  local dir=$1
  shift
  cmake -S . -B "$dir" -G Ninja "${launcher[@]}" "$@" >"$dir.configure.log" 2>&1 ||
    { cat "$dir.configure.log"; return 1; }
}

# test_targets <build dir> <ctest regex>: the executables that the tests matching the regex run. A
# test is named after its executable, or after it and a suffix (test_dist_failure_throw runs
# test_dist_failure): each test's target is the longest test executable its name starts with.
test_targets() {
  local dir=$1 regex=$2 name exe best
  local names executables
  mapfile -t names < <(cd "$dir" && ctest -N -R "$regex" | sed -n 's/^ *Test *#[0-9]*: *//p')
  mapfile -t executables < <(ninja -C "$dir" -t targets all | sed -n 's/^\(test_[A-Za-z0-9_]*\): phony$/\1/p')
  for name in "${names[@]}"; do
    best=""
    for exe in "${executables[@]}"; do
      if [[ $name == "$exe" || $name == "${exe}_"* ]] && ((${#exe} > ${#best})); then best=$exe; fi
    done
    if [ -n "$best" ]; then echo "$best"; fi
  done | sort -u
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
  env -u CMAKE_PREFIX_PATH cmake -S "$tmp/src" -B "$tmp/build" -G Ninja -DCMAKE_BUILD_TYPE=Release "${launcher[@]}" \
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
    trap phase_end EXIT  # the times so far, also when a phase fails
    phase "layer includes (tools/check_layers.sh)"
    tools/check_layers.sh  # no layer includes one above it (the link-time check is in the build)
    phase "comments and docs name what exists (tools/check_refs.pl)"
    perl tools/check_refs.pl  # every repository path, file name and reel:: function they name
    # The full suite runs last, so the last CTest summary printed is the whole suite's.
    nvcc_bin=$(command -v nvcc || true)
    [ -z "$nvcc_bin" ] && [ -x /usr/local/cuda/bin/nvcc ] && nvcc_bin=/usr/local/cuda/bin/nvcc
    if [ -n "$nvcc_bin" ]; then
      # Without a GPU every test of this flavour would only skip, so it is compiled and linked,
      # not run; tools/gpu_check.sh runs it on a real GPU. Built: the library, the layer checks, the
      # tests and bench_kernels (their code differs under nvcc); not the examples and the other
      # benchmarks, host code the default flavour compiles the same way.
      phase "nvcc flavour (sm_90): compile and link"
      configure_only build-nvcc -DCMAKE_BUILD_TYPE=Release -DREEL_CUDA=ON "${cuda_launcher[@]}" \
        -DCMAKE_CUDA_COMPILER="$nvcc_bin" -DCMAKE_CUDA_ARCHITECTURES="${CUDA_ARCH:-90}" -DREEL_BUILD_EXAMPLES=OFF
      # kernel_resources: each kernel's registers, spills and sm_90 occupancy, from this same compile
      # (tools/kernel_resources); it fails the build on a kernel that spills or cannot keep one block
      # per SM at its __launch_bounds__, unless tools/kernel_resources/allow.txt names it.
      mapfile -t nvcc_targets < <(ninja -C build-nvcc -t targets all |
        sed -n 's/^\(test_[A-Za-z0-9_]*\|layer_check_[A-Za-z0-9_]*\|bench_kernels\|kernel_resources\): phony$/\1/p')
      cmake --build build-nvcc -j "$jobs" --target "${nvcc_targets[@]}"
      if [ -f build-nvcc/kernel_resources.txt ]; then cat build-nvcc/kernel_resources.txt; fi  # sm_90 only
      drop_build build-nvcc
    else
      phase "nvcc flavour skipped: no CUDA toolkit on this machine (nvcc not found)"
    fi
    phase "the unit suite (emulated CUDA included) built with clang, under AddressSanitizer + UBSan + LeakSanitizer"
    # Every unit test (test_*); the examples' end-to-end runs are not built here (-O1, no
    # -march=native: a sanitizer build is for finding bugs). ASAN_TESTS narrows it. A leak fails
    # its test, except the third-party ones tools/lsan.supp names, each with its reason. Built by
    # clang where it is installed (tools/setup.sh installs it), so that the one flavour proves the
    # second compiler too, and without oneDNN (on by default where found), so that Eigen's f32 GEMM
    # path is built and tested.
    asan_tests=${ASAN_TESTS:-^test_}
    asan_compiler=()
    if command -v clang++ >/dev/null; then asan_compiler=(-DCMAKE_CXX_COMPILER=clang++); fi
    configure_only build-asan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1 -DNDEBUG" \
      "${asan_compiler[@]}" -DREEL_ONEDNN=OFF \
      -DREEL_SANITIZE=address,undefined -DREEL_NATIVE=OFF -DREEL_BUILD_EXAMPLES=OFF -DREEL_BUILD_BENCH=OFF
    mapfile -t asan_targets < <(test_targets build-asan "$asan_tests")
    cmake --build build-asan -j "$jobs" --target "${asan_targets[@]}"
    lsan_options="suppressions=$(pwd -P)/tools/lsan.supp:print_suppressions=0"
    # The tests under mpiexec (test_dist*, test_fsdp*, test_grad_scaler_dist), and test_nccl_single
    # (MPI's singleton: the emulated NCCL runs over MPI), leak Open MPI's runtime state, which the
    # suppressions can match only on a full stack: Open MPI has no frame pointers, so there malloc's stack is
    # taken by the slower DWARF unwinder (fast_unwind_on_malloc=0). The other tests keep the fast one.
    mpi_tests='^(test_dist|test_fsdp|test_grad_scaler_dist|test_nccl_single)'
    (cd build-asan && ASAN_OPTIONS=detect_leaks=1 LSAN_OPTIONS=$lsan_options \
      ctest --output-on-failure -j "$jobs" -R "$asan_tests" -E "$mpi_tests")
    mapfile -t asan_mpi_names < <(cd build-asan && ctest -N -R "$asan_tests" | sed -n 's/^ *Test *#[0-9]*: *//p' |
      grep -E "$mpi_tests" || true)
    if ((${#asan_mpi_names[@]})); then
      asan_mpi_regex="^($(IFS='|'; echo "${asan_mpi_names[*]}"))\$"
      (cd build-asan && ASAN_OPTIONS=detect_leaks=1:fast_unwind_on_malloc=0 LSAN_OPTIONS=$lsan_options \
        ctest --output-on-failure -j "$jobs" -R "$asan_mpi_regex")
    fi
    drop_build build-asan
    phase "the parsers under libFuzzer: committed corpora replayed, then ${FUZZ_SECONDS:-60} s per harness"
    tools/fuzz.sh
    if [ -d build-fuzz ]; then drop_build build-fuzz; fi
    phase "default flavour (CPU + emulated CUDA): build everything (examples and benchmarks too)"
    configure_and_build build -DCMAKE_BUILD_TYPE=Release
    phase "install into a temporary prefix; an outside project builds against it and trains one step"
    install_test build
    phase "tools/gpu_check.sh --emulated: the GPU check script's every part, on build/ (nothing rebuilt)"
    JOBS=$jobs tools/gpu_check.sh --emulated
    if [ -f kernels/simt/simt.h ]; then
      # The unit tests hold every kernel's checks; the examples' end-to-end runs (CPU mostly, and
      # minutes of them) run once, in the forward pass below.
      phase "the unit suite, emulated threads resumed in reverse order"
      (cd build && SIMT_ORDER=reverse ctest --output-on-failure -j "$jobs" -R '^test_')
    fi
    if [ -f kernels/simt/simt_check.cpp ]; then
      # Every CUDA kernel test again, each launch checked for races between barriers and reads of
      # unwritten shared memory (kernels/simt/README.md, SIMT_CHECK): the same build, no rebuild.
      phase "the CUDA kernel tests under the race checker (SIMT_CHECK=race,uninit)"
      race_tests='^(test_simt|test_simt_race|test_cuda_ops|test_cuda_nn_ops|test_nn_kernels_.*|test_attention_strided|test_op_table|test_kernel_lab|example_kernel_lab)$'
      (cd build && SIMT_CHECK=race,uninit ctest --output-on-failure -j "$jobs" -R "$race_tests")
    fi
    phase "the whole suite, emulated threads resumed in forward order"
    (cd build && SIMT_ORDER=forward ctest --output-on-failure -j "$jobs") | tee build/ctest-forward.log
    trap - EXIT
    phase_end
    # The whole suite's summary last, for whoever reads only the closing lines.
    grep -E "tests passed|tests failed" build/ctest-forward.log | tail -1
    ;;
  *)
    echo "usage: tools/dev.sh example|test" >&2
    exit 2
    ;;
esac
