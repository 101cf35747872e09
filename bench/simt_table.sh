#!/usr/bin/env bash
# The emulator's speed (kernels/simt/README.md): test_simt's four timing kernels (axpy, a tiled
# SGEMM, a reduction, a row softmax; best of 3 launches each) on 1 and 2 workers, then on 2 workers
# with SIMT_CHECK=race,uninit (the race and uninitialised-memory checks on). Given a second build
# dir configured with -DREEL_SIMT_RACECHECK=OFF (no instrumentation of the .cu files), a last
# column times that build on 2 workers: what the instrumentation costs with the checks off.
#
#   bench/simt_table.sh [build dir=build] [uninstrumented build dir]
set -euo pipefail
build=${1:-build}
plain=${2:-}
test="$build/tests/test_simt"
[ -x "$test" ] || { echo "simt_table: $test not built" >&2; exit 1; }

# times <test_simt> [VAR=value...]: the four kernels' milliseconds, one a line.
times() {
  local exe=$1 out
  shift
  out=$(env "$@" "$exe" -tc='simt: timings' --no-skip 2>&1) || { echo "$out" >&2; echo "simt_table: failed: $*" >&2; exit 1; }
  grep -E '^ +[a-z].* ms$' <<<"$out" | awk '{print $(NF-1)}'
}
w1=$(times "$test" SIMT_WORKERS=1)
w2=$(times "$test" SIMT_WORKERS=2)
checked=$(times "$test" SIMT_WORKERS=2 SIMT_CHECK=race,uninit)
extra=""
if [ -n "$plain" ]; then extra=$(times "$plain/tests/test_simt" SIMT_WORKERS=2); fi

names=$'axpy 1M (1024 blocks x 256, grid-stride)\nSGEMM 256^3 (16x16 shared-memory tiles)\nreduce 1M (1024 x 256, shuffles + smem + atomicAdd)\nsoftmax 1024 x 1024 (256 threads a row)'
printf "test_simt -tc='simt: timings', ms, best of 3 launches\n"
printf "%-52s %10s %10s %22s" kernel "1 worker" "2 workers" "2, SIMT_CHECK=race,uninit"
if [ -n "$plain" ]; then printf " %24s" "2, RACECHECK=OFF build"; fi
printf "\n"
paste -d'|' <(echo "$names") <(echo "$w1") <(echo "$w2") <(echo "$checked") <(if [ -n "$plain" ]; then echo "$extra"; else printf '%s\n' '' '' '' ''; fi) |
  while IFS='|' read -r name a b c d; do
    printf "%-52s %10s %10s %22s" "$name" "$a" "$b" "$c"
    if [ -n "$d" ]; then printf " %24s" "$d"; fi
    printf "\n"
  done
