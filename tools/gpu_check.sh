#!/usr/bin/env bash
# tools/gpu_check.sh: the one command that checks everything GPU-only of reel on a machine with a
# real NVIDIA GPU, in one run of at most 8 minutes (16 cores, one H200), ending with one summary
# table: part, PASS / FAIL / SKIP, seconds, key figure. Each part degrades on its own: a missing
# tool or library is reported as "skipped: <why>" and the other parts run.
#
#   tools/gpu_check.sh --prepare    on a machine with the Debian packages (tools/setup.sh): copies
#                                   into .deps/ (git-ignored; bring it along with the working tree)
#                                   what the GPU machine lacks: the third-party headers (doctest,
#                                   Eigen, nlohmann-json, CLI11), zlib + libz.a (CMake falls back to
#                                   them: cmake/reel_deps.cmake), ninja, the fortunes corpus
#                                   (char_gpt) and the Fashion-MNIST IDX files (fashion_mnist_cnn).
#   tools/gpu_check.sh              on the GPU machine (nvcc, CMake >= 3.25, a C++17 host compiler;
#                                   no downloads), build folder build-gpu/:
#     1 build      the nvcc flavour for sm_90, examples and benchmarks included (ccache if present)
#     2 ctest      the whole suite on the device; a skipped test counts as a failure (except the
#                  tests labelled needs_torch, left out: the GPU machine has no PyTorch)
#     3 nccl       tests/test_nccl_single: NCCL with a world of one, no MPI, and two ranks on one
#                  device where NCCL allows it (it refuses duplicate GPUs; then said so)
#     4 sanitizer  compute-sanitizer memcheck and racecheck over the CUDA kernel tests
#     5 char_gpt   200 steps on cuda with --profile and --predict h200: measured kernel table
#                  beside the predicted one (--profile alone where the binary lacks --predict)
#     6 cnn        fashion_mnist_cnn, one epoch on cuda: its test accuracy
#     7 bench      bench_kernels cuda: the kernel table, then the copy bandwidth (host <-> device,
#                  device -> device) beside the memory roof
#     8 kernel_lab examples/kernel_lab: the three LayerNorm versions checked and timed on the device
#                  beside their H200 prediction, and the planted race (docs/kernel_lab.md)
#     9 graph      char_gpt's eager step and its --cuda-graph step side by side (the same run
#                  otherwise): per step launches and host syncs, the predicted H200 step, the
#                  profiled step and the wall step (from tokens/s), one row each
#   tools/gpu_check.sh --emulated   the same parts on the default flavour (CPU + cuda emulated by
#                                   kernels/simt, no nvcc) in build/, at small sizes, so that CI
#                                   proves the script itself (tools/dev.sh test runs it after
#                                   building build/, which it reuses: nothing is compiled twice).
#                                   Part 2 runs only the tests that touch cuda (dev.sh runs the whole
#                                   suite), part 4 is skipped (no compute-sanitizer on the host).
#
# Environment: CUDA_ARCH (default 90), JOBS (default: all cores), BUILD_DIR (default build-gpu, or
# build with --emulated), BENCH_REPEATS (default 20), SANITIZER_TIMEOUT (seconds per test and tool,
# default 120). Logs: <build dir>/gpu_check/. Exit status: 0 when no part FAILed.
set -uo pipefail
cd "$(dirname "$0")/.."
root=$(pwd -P)

# ---- --prepare ---------------------------------------------------------------------------------
prepare() {
  set -e
  rm -rf .deps
  mkdir -p .deps/include .deps/lib .deps/bin .deps/fortunes .deps/fashion-mnist
  cp -r /usr/include/doctest /usr/include/eigen3 /usr/include/nlohmann /usr/include/CLI .deps/include/
  cp /usr/include/zlib.h /usr/include/zconf.h .deps/include/
  cp "$(gcc -print-file-name=libz.a)" .deps/lib/libz.a 2>/dev/null || cp /usr/lib/x86_64-linux-gnu/libz.a .deps/lib/
  cp "$(command -v ninja)" .deps/bin/  # used only where the GPU machine has none
  # The fortune files (no dot in the name: nn::load_fortunes skips .dat/.u8), links followed.
  find -L /usr/share/games/fortunes -maxdepth 1 -type f ! -name '*.*' -exec cp -L {} .deps/fortunes/ \;
  cp /usr/share/datasets/fashion-mnist/*-ubyte.gz .deps/fashion-mnist/
  echo "gpu_check: .deps/ ready ($(du -sh .deps | cut -f1)): doctest, eigen3, nlohmann, CLI11, zlib, ninja," \
    "fortunes ($(ls .deps/fortunes | wc -l) files), fashion-mnist"
  echo "gpu_check: not bundled (the GPU machine has them or the part is skipped): MPI (distributed/ and its tests)," \
    "cuDNN, NCCL, compute-sanitizer, ccache"
}

mode=device
case "${1:-}" in
  --prepare) prepare; exit 0 ;;
  --emulated) mode=emulated ;;
  "") ;;
  *) echo "usage: tools/gpu_check.sh [--prepare|--emulated]" >&2; exit 2 ;;
esac

start=$SECONDS
jobs=${JOBS:-$(nproc)}
arch=${CUDA_ARCH:-90}
if [ "$mode" = emulated ]; then dir=${BUILD_DIR:-build}; else dir=${BUILD_DIR:-build-gpu}; fi
logs="$dir/gpu_check"
[ -d .deps/bin ] && ! command -v ninja >/dev/null && export PATH="$root/.deps/bin:$PATH"

# The data the examples read: the system's (Debian packages), else what --prepare bundled.
data_dir() {  # system dir, bundled dir: prints the one that has files, or nothing
  local d
  for d in "$@"; do
    if [ -d "$d" ] && [ -n "$(ls -A "$d" 2>/dev/null)" ]; then echo "$d"; return; fi
  done
}
fortunes=$(data_dir /usr/share/games/fortunes "$root/.deps/fortunes")
fashion=$(data_dir /usr/share/datasets/fashion-mnist "$root/.deps/fashion-mnist")

# ---- the summary table -------------------------------------------------------------------------
# run_part <name> <function>: runs the function, which prints what it does, sets `figure` (the key
# figure) and returns 0 (PASS), 77 (SKIP, `figure` says why) or anything else (FAIL).
names=() statuses=() secs=() figures=()
run_part() {
  local name=$1 fn=$2 t0=$SECONDS rc
  figure=""
  echo
  echo "== $name"
  "$fn"
  rc=$?
  local status=FAIL
  if [ $rc = 0 ]; then status=PASS; elif [ $rc = 77 ]; then status=SKIP; fi
  [ $status = SKIP ] && echo "skipped: $figure"
  names+=("$name") statuses+=("$status") secs+=($((SECONDS - t0))) figures+=("$figure")
  echo "-- $name: $status in $((SECONDS - t0)) s${figure:+: $figure}"
}
summary() {
  local i failed=0
  echo
  echo "== gpu_check summary ($mode, $dir/, $(machine_line)), $((SECONDS - start)) s in all"
  printf "%-10s %-6s %6s  %s\n" part status time "key figure"
  for i in "${!names[@]}"; do
    printf "%-10s %-6s %5ds  %s\n" "${names[i]}" "${statuses[i]}" "${secs[i]}" "${figures[i]}"
    [ "${statuses[i]}" = FAIL ] && failed=1
  done
  return $failed
}
machine_line() {
  if [ "$mode" = emulated ]; then
    echo "cuda emulated by simt on $(nproc) cores"
  else
    echo "$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1 || echo 'no nvidia-smi'), $(nproc) cores"
  fi
}

# ---- 1. the build --------------------------------------------------------------------------------
part_build() {
  mkdir -p "$dir"
  local args=(-DCMAKE_BUILD_TYPE=Release) gen=(-G Ninja)
  command -v ninja >/dev/null || { gen=(-G "Unix Makefiles"); echo "no ninja: Unix Makefiles"; }
  [ -f "$dir/CMakeCache.txt" ] && gen=()  # the folder keeps its generator
  if command -v ccache >/dev/null; then
    args+=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
    export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$root} CCACHE_NOHASHDIR=${CCACHE_NOHASHDIR:-true}
  fi
  local cmake_version
  cmake_version=$(cmake --version 2>/dev/null | sed -n 's/^cmake version \([0-9.]*\).*/\1/p')
  if [ -z "$cmake_version" ] || [ "$(printf '%s\n3.25\n' "$cmake_version" | sort -V | head -1)" != 3.25 ]; then
    figure="CMake ${cmake_version:-missing}: reel needs >= 3.25"
    return 1
  fi
  if [ "$mode" = device ]; then
    local nvcc_bin
    nvcc_bin=$(command -v nvcc || true)
    [ -z "$nvcc_bin" ] && [ -x /usr/local/cuda/bin/nvcc ] && nvcc_bin=/usr/local/cuda/bin/nvcc
    if [ -z "$nvcc_bin" ]; then figure="nvcc not found (PATH or /usr/local/cuda/bin)"; return 1; fi
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null || echo "(no nvidia-smi)"
    "$nvcc_bin" --version | tail -1
    args+=(-DREEL_CUDA=ON -DCMAKE_CUDA_COMPILER="$nvcc_bin" -DCMAKE_CUDA_ARCHITECTURES="$arch")
    command -v ccache >/dev/null && args+=(-DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
  fi
  echo "cmake $cmake_version, $(command -v ninja >/dev/null && echo ninja || echo make), ccache:" \
    "$(command -v ccache >/dev/null && echo yes || echo no), mpirun: $(command -v mpirun >/dev/null && echo yes || echo no)"
  if [ "$mode" = emulated ] && [ -f "$dir/CMakeCache.txt" ]; then
    # Configured already (tools/dev.sh test built it just before): configuring again would
    # regenerate the layer checks' sources and rebuild them.
    echo "$dir/ configured already: reused as it is" | tee "$logs/configure.log"
  elif ! cmake -S . -B "$dir" "${gen[@]}" "${args[@]}" >"$logs/configure.log" 2>&1; then
    tail -30 "$logs/configure.log"
    figure="configure failed ($logs/configure.log)"
    return 1
  fi
  grep -E "^-- reel:" "$logs/configure.log"
  local found
  found=$(grep -qE "^-- reel: cuDNN found" "$logs/configure.log" && echo "cuDNN" || echo "no cuDNN")
  found+=", $(grep -qE "^-- reel: NCCL found" "$logs/configure.log" && echo "NCCL" || echo "no NCCL (or no dist)")"
  found+=", $(grep -q "^REEL_DISTRIBUTED:BOOL=ON" "$dir/CMakeCache.txt" && echo "MPI" || echo "no MPI")"
  [ "$mode" = emulated ] && found="emulated cuDNN/NCCL, $(grep -q "^REEL_DISTRIBUTED:BOOL=ON" "$dir/CMakeCache.txt" && echo MPI || echo "no MPI")"
  # -k 0: build everything that builds, so that one broken file still leaves the rest testable.
  local keep=(-- -k 0)
  [ "${gen[*]:-}" = "-G Unix Makefiles" ] && keep=(-- -k)
  if ! cmake --build "$dir" -j "$jobs" "${keep[@]}" >"$logs/build.log" 2>&1; then
    grep -E "FAILED|error" "$logs/build.log" | head -40
    figure="build FAILED ($logs/build.log); $found"
    return 1
  fi
  # grep -c exits 1 when it counts 0 (nothing to rebuild): a count, not a failure.
  figure="$(grep -cE '^\[[1-9][0-9]*/[0-9]+\]' "$logs/build.log" || true) build steps; $found"
  return 0
}

# ---- 2. the test suite on the device -------------------------------------------------------------
part_ctest() {
  local regex=()
  # Emulated: the tests that touch cuda (tools/dev.sh runs the whole suite there already).
  [ "$mode" = emulated ] && regex=(-R '^(test_cuda|test_cudnn|test_nn_kernels_attention|test_attention_strided|test_nccl)')
  [ -f "$dir/CTestTestfile.cmake" ] || { figure="no build to test"; return 1; }
  ctest --test-dir "$dir" --output-on-failure -j "$jobs" --timeout 300 -LE needs_torch "${regex[@]}" >"$logs/ctest.log" 2>&1
  tail -25 "$logs/ctest.log"
  local summary skipped
  summary=$(grep -E "tests passed, " "$logs/ctest.log" | tail -1)
  skipped=$(grep -c "(Skipped)\|Not Run" "$logs/ctest.log")
  figure="${summary:-no summary}; $skipped skipped"
  [ -n "$summary" ] && grep -q "100% tests passed" <<<"$summary" && [ "$skipped" = 0 ]
}

# ---- 3. NCCL --------------------------------------------------------------------------------------
part_nccl() {
  local exe="$dir/tests/test_nccl_single"
  if [ ! -x "$exe" ]; then
    if [ "$mode" = emulated ]; then figure="not built: the emulated NCCL runs over MPI, which this machine lacks"
    else figure="not built: CMake found no NCCL (nccl.h and libnccl)"; fi
    return 77
  fi
  local rc=0
  OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 "$exe" >"$logs/nccl.log" 2>&1 || rc=$?
  grep -E "MESSAGE|ERROR|two ranks|Status|SKIPPED" "$logs/nccl.log"
  local version two
  version=$(sed -n 's/.*NCCL world of one: //p' "$logs/nccl.log" | head -1)
  two=$(sed -n 's/^two ranks on one device: //p' "$logs/nccl.log" | head -1)
  if [ "$mode" = emulated ]; then
    two="2 ranks: the emulated NCCL needs mpirun (test_dist_nccl_emu in ctest)"
  elif [ -z "$two" ]; then
    two="2 ranks on one device: not reached"
  else
    two="2 ranks on one device: ${two:0:80}"
  fi
  figure="world of one: $([ $rc = 0 ] && echo ok || echo "FAILED (exit $rc)") on ${version:-?}; $two"
  return $rc
}

# ---- 4. compute-sanitizer ---------------------------------------------------------------------------
sanitize_one() {  # tool test: one run, its log; exit status 0 when clean
  local tool=$1 test=$2 log="$logs/sanitizer_$1_$2.log"
  timeout "${SANITIZER_TIMEOUT:-120}" "$sanitizer" --tool "$tool" --error-exitcode 99 --print-limit 20 \
    "$dir/tests/$test" >"$log" 2>&1
  local rc=$?
  echo "$tool $test: $([ $rc = 0 ] && echo clean || { [ $rc = 124 ] && echo "timed out" || echo "FAILED (exit $rc)"; })" \
    "$(grep -hE 'ERROR SUMMARY|RACECHECK SUMMARY' "$log" | tail -1 | sed 's/^=* *//')"
  return $rc
}
part_sanitizer() {
  if [ "$mode" = emulated ]; then
    figure="no compute-sanitizer for the emulated build (simt runs on the host; tools/dev.sh runs the suite under ASan)"
    return 77
  fi
  sanitizer=$(command -v compute-sanitizer || true)
  [ -z "$sanitizer" ] && [ -x /usr/local/cuda/bin/compute-sanitizer ] && sanitizer=/usr/local/cuda/bin/compute-sanitizer
  if [ -z "$sanitizer" ]; then figure="compute-sanitizer not found (PATH or /usr/local/cuda/bin)"; return 77; fi
  local tests=() t
  for t in test_cuda_ops test_cuda_nn_ops test_attention_strided "$dir"/tests/test_nn_kernels_* "$dir"/tests/test_cudnn_emu*; do
    t=$(basename "$t")
    [ -x "$dir/tests/$t" ] && tests+=("$t")
  done
  ((${#tests[@]})) || { figure="no CUDA kernel test was built"; return 1; }
  export sanitizer dir logs
  export -f sanitize_one
  # Every (tool, test) pair at once: the GPU is shared, the host cores keep the sanitizers fed.
  printf '%s\n' "${tests[@]}" | sed 's/^/memcheck /; p; s/^memcheck /racecheck /' |
    xargs -P "$jobs" -L 1 bash -c 'sanitize_one "$0" "$1"' | sort | tee "$logs/sanitizer.log"
  local runs clean
  runs=$(wc -l <"$logs/sanitizer.log")
  clean=$(grep -c ": clean" "$logs/sanitizer.log")
  figure="$clean of $runs runs clean (memcheck + racecheck over ${#tests[@]} tests)"
  grep -q "timed out" "$logs/sanitizer.log" && figure+=", $(grep -c "timed out" "$logs/sanitizer.log") timed out"
  [ "$clean" = "$runs" ]
}

# ---- 5. char_gpt: the measured kernel table beside the prediction ---------------------------------
part_char_gpt() {
  local exe="$dir/examples/char_gpt"
  [ -x "$exe" ] || { figure="char_gpt was not built"; return 1; }
  [ -n "$fortunes" ] || { figure="no fortunes corpus (Debian: fortunes; or gpu_check.sh --prepare)"; return 77; }
  local args=(--device cuda --sample-chars 0 --corpus-dir "$fortunes" --profile "$logs/char_gpt.trace.json")
  if [ "$mode" = emulated ]; then
    args+=(--max-steps 20 --n-layer 1 --n-head 2 --n-embd 16 --block-size 32 --batch 16 --eval-windows 8)
  else
    args+=(--max-steps 200)
  fi
  local predict="--predict h200"
  if "$exe" --help 2>&1 | grep -- "--predict" >/dev/null; then  # all of it read: grep -q would close the pipe early, and pipefail would see char_gpt die of SIGPIPE
    args+=(--predict h200)
  else
    predict="no --predict in this char_gpt: measured table only"
    echo "$predict"
  fi
  local rc=0
  "$exe" "${args[@]}" >"$logs/char_gpt.log" 2>&1 || rc=$?
  # The profile's tables (measured, and predicted where asked) and the run's closing lines.
  grep -E "kernel times: " "$logs/char_gpt.log"  # CUPTI activity records, or cudaEvent pairs and why
  sed -n '/^kernel /,/^profile: /p' "$logs/char_gpt.log"
  grep -E "^(trained|tokens/s|val loss|error)" "$logs/char_gpt.log"
  [ $rc = 0 ] || { tail -5 "$logs/char_gpt.log"; figure="exit $rc ($logs/char_gpt.log)"; return 1; }
  figure="$(sed -n 's/^tokens\/s: //p' "$logs/char_gpt.log") tokens/s, $(grep -m1 '^val loss' "$logs/char_gpt.log" | cut -d' ' -f3) val loss; $predict"
  grep -q "^profile: trace" "$logs/char_gpt.log" || { figure+="; no profile table"; return 1; }
  local source
  source=$(grep -m1 -E "^cuda:0 kernel times: " "$logs/char_gpt.log" | sed 's/^cuda:0 kernel times: //')
  [ -n "$source" ] && figure+="; times: ${source%% (*}"
  return 0
}

# ---- 8. kernel_lab: the three LayerNorm versions measured, the planted race ----------------------
part_kernel_lab() {
  local exe="$dir/examples/kernel_lab"
  [ -x "$exe" ] || { figure="kernel_lab was not built"; return 1; }
  local args=()
  [ "$mode" = emulated ] && args=(--rows 256 --cols 768 --repeats 3)
  local rc=0
  "$exe" "${args[@]}" >"$logs/kernel_lab.log" 2>&1 || rc=$?
  cat "$logs/kernel_lab.log"
  local times
  times=$(awk '$1 ~ /^v[123]$/ { for (i = 1; i <= NF; i++) if ($i == "ok") { printf "%s%s %s %s", sep, $1, $(i+1), $(i+2); sep = ", " } }' \
    "$logs/kernel_lab.log")
  figure="${times:-no version checked ok}"
  [ $rc = 0 ] && [ -n "$times" ]
}

# ---- 6. fashion_mnist_cnn: one epoch and its accuracy ---------------------------------------------
part_cnn() {
  local exe="$dir/examples/fashion_mnist_cnn"
  [ -x "$exe" ] || { figure="fashion_mnist_cnn was not built"; return 1; }
  [ -n "$fashion" ] || { figure="no Fashion-MNIST files (Debian: dataset-fashion-mnist; or gpu_check.sh --prepare)"; return 77; }
  local args=(--device cuda --quiet --data-dir "$fashion")
  if [ "$mode" = emulated ]; then
    args+=(--train-limit 256 --test-limit 100 --batch 64 --max-steps 4)  # a fraction of an epoch: it runs
  else
    args+=(--epochs 1 --min-accuracy 0.8)  # one epoch on the GPU reaches about 0.88
  fi
  local rc=0
  "$exe" "${args[@]}" >"$logs/cnn.log" 2>&1 || rc=$?
  grep -E "^(model|data|epoch|test accuracy|train samples/s)|error|below" "$logs/cnn.log"
  figure="test accuracy $(sed -n 's/^test accuracy: //p' "$logs/cnn.log"), $(sed -n 's/^train samples\/s: //p' "$logs/cnn.log") samples/s"
  [ "$mode" = emulated ] && figure+=" (4 steps of 64)"
  return $rc
}

# ---- 7. the kernel benchmark against the copy bandwidth --------------------------------------------
part_bench() {
  local exe="$dir/bench/bench_kernels"
  [ -x "$exe" ] || { figure="bench_kernels was not built"; return 1; }
  local args=(cuda "${BENCH_REPEATS:-20}")
  [ "$mode" = emulated ] && args=(cuda 3 "add (")  # one row: the emulator is the host
  local rc=0
  "$exe" "${args[@]}" >"$logs/bench.log" 2>&1 || rc=$?
  cat "$logs/bench.log"
  local d2d h2d roof
  d2d=$(sed -n 's/^copy bandwidth device -> device *\([0-9.]*\) GB\/s.*/\1/p' "$logs/bench.log")
  h2d=$(sed -n 's/^copy bandwidth host -> device (pinned) *\([0-9.]*\) GB\/s.*/\1/p' "$logs/bench.log")
  roof=$(sed -n 's/^roof [^ ]*: \([0-9.]*\) GB\/s.*/\1/p' "$logs/bench.log")
  figure="copy d2d ${d2d:-?} GB/s, h2d pinned ${h2d:-?} GB/s; roof ${roof:-?} GB/s"
  [ $rc = 0 ] && [ -n "$d2d" ]
}

# ---- 9. the eager step beside the CUDA graph step ---------------------------------------------------
# One char_gpt run each way with the same arguments; from each log: the profile's "per step:" line
# (launches, or the graph launch and its nodes, and host syncs), its "step on h200" line (the
# predicted step, and the profiled one: kernel times on a GPU, host time emulated) and the wall step,
# batch x block size / tokens/s (every step of the run, log lines included).
graph_row() {  # label log: one table row
  local label=$1 log=$2 tokens per_step predicted profiled tps wall
  # "training: N steps of B sequences x T characters ...": B x T tokens a step
  tokens=$(sed -n 's/^training: [0-9]* steps of \([0-9]*\) sequences x \([0-9]*\) characters.*/\1 \2/p' "$log" |
    awk '{ print $1 * $2 }')
  per_step=$(sed -n 's/^per step: //p' "$log" | head -1)
  predicted=$(sed -n 's/^step on h200: predicted \([0-9.]*\) us.*/\1 us/p' "$log" | head -1)
  profiled=$(sed -n 's/^step on h200: .*; measured \([0-9.]* ms\).*/\1/p' "$log" | head -1)
  tps=$(sed -n 's/^tokens\/s: \([0-9.]*\).*/\1/p' "$log" | head -1)
  wall=$(awk -v t="${tokens:-0}" -v r="${tps:-0}" 'BEGIN { if (r > 0) printf "%.3f ms", 1000 * t / r; else print "?" }')
  printf "%-6s %-62s %12s %12s %12s\n" "$label" "${per_step:-?}" "${predicted:-?}" "${profiled:-?}" "$wall"
}
part_graph() {
  local exe="$dir/examples/char_gpt"
  [ -x "$exe" ] || { figure="char_gpt was not built"; return 1; }
  [ -n "$fortunes" ] || { figure="no fortunes corpus (Debian: fortunes; or gpu_check.sh --prepare)"; return 77; }
  "$exe" --help 2>&1 | grep -- "--cuda-graph" >/dev/null || { figure="no --cuda-graph in this char_gpt"; return 77; }
  local args=(--device cuda --sample-chars 0 --corpus-dir "$fortunes" --predict h200)
  if [ "$mode" = emulated ]; then
    args+=(--max-steps 12 --n-layer 1 --n-head 2 --n-embd 16 --block-size 32 --batch 16 --eval-windows 8)
  else
    args+=(--max-steps 200)  # char_gpt's default model: the step docs/profiling.md predicts
  fi
  local rc=0 mode_name
  for mode_name in eager graph; do
    local extra=()
    [ $mode_name = graph ] && extra=(--cuda-graph)
    "$exe" "${args[@]}" "${extra[@]}" --profile "$logs/graph_$mode_name.trace.json" >"$logs/graph_$mode_name.log" 2>&1 ||
      { rc=$?; tail -5 "$logs/graph_$mode_name.log"; }
  done
  printf "%-6s %-62s %12s %12s %12s\n" step "per step" "predicted" "profiled" "wall"
  graph_row eager "$logs/graph_eager.log" | tee "$logs/graph.table"
  graph_row graph "$logs/graph_graph.log" | tee -a "$logs/graph.table"
  [ $rc = 0 ] || { figure="exit $rc ($logs/graph_eager.log, $logs/graph_graph.log)"; return 1; }
  # The key figure: each step's predicted and wall time.
  figure=$(awk '{ printf "%s%s predicted %s %s, wall %s %s", sep, $1, $(NF-5), $(NF-4), $(NF-1), $NF; sep = "; " }' \
    "$logs/graph.table")
  grep -q "graph launch" "$logs/graph.table" || { figure+="; the graph run made no graph launch"; return 1; }
  return 0
}

mkdir -p "$logs"
echo "gpu_check ($mode): build folder $dir/, logs in $logs/, $jobs jobs"
run_part build part_build
run_part ctest part_ctest
run_part nccl part_nccl
run_part sanitizer part_sanitizer
run_part char_gpt part_char_gpt
run_part cnn part_cnn
run_part bench part_bench
run_part kernel_lab part_kernel_lab
run_part graph part_graph
summary
