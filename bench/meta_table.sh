#!/usr/bin/env bash
# The meta device against emulated cuda:0 (docs/memory.md, "Before you run: dry runs"): char_gpt,
# small, run for a few steps on each device under a matrix of levers (checkpoint policy, precision,
# accumulation, offload), profiled with --predict h100. A row compares what the two runs print: the
# memory report of the device (per-category current and peak bytes, allocation counts, reserved
# bytes) and the predicted step, which meta must give exactly (its kernels and allocations are
# cuda:0's; tests/test_meta.cpp asserts it record by record). The last columns are each run's wall
# time: the dry run computes nothing.
#
#   bench/meta_table.sh [build dir=build]
set -euo pipefail
build=${1:-build}
gpt="$build/examples/char_gpt"
[ -x "$gpt" ] || { echo "meta_table: $gpt not built" >&2; exit 1; }
export OMP_NUM_THREADS=2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
common=(--n-layer 4 --n-head 2 --n-embd 32 --block-size 32 --batch 8 --max-steps 4 --eval-windows 8
        --sample-chars 0 --quiet --profile "$tmp/trace.json" --profile-steps 1 --predict h100)

# What the two runs must print alike (tools/meta_digest.awk).
digest() { awk -f "$(dirname "$0")/../tools/meta_digest.awk" "$1"; }

# row <levers...>: both runs, the comparison, the times.
row() {
  local start end cuda_s meta_s same peak step
  for dev in cuda meta; do
    start=$(date +%s.%N)
    "$gpt" "${common[@]}" --device "$dev" "$@" >"$tmp/$dev.out" 2>&1 ||
      { cat "$tmp/$dev.out" >&2; echo "meta_table: failed: --device $dev $*" >&2; exit 1; }
    end=$(date +%s.%N)
    printf -v "${dev}_s" "%.1f" "$(echo "$end - $start" | bc)"
    digest "$tmp/$dev.out" >"$tmp/$dev.digest"
  done
  if cmp -s "$tmp/cuda.digest" "$tmp/meta.digest"; then same=yes; else same=NO; fi
  peak=$(awk '$1 == "total" {print $4, $5; exit}' "$tmp/meta.digest")
  step=$(sed -n 's/^step on h100: predicted \([0-9.]*\) us.*/\1/p' "$tmp/meta.digest")
  printf "%-48s %-5s %12s %14s %9s %9s\n" "$*" "$same" "$peak" "$step" "$cuda_s" "$meta_s"
  [ "$same" = yes ] || diff "$tmp/cuda.digest" "$tmp/meta.digest" >&2 || true
}

printf "char_gpt (4 blocks of width 32, 8 x 32 tokens), 4 steps, the profiled step predicted on h100\n"
printf "%-48s %-5s %12s %14s %9s %9s\n" levers same "peak (meta)" "h100 step us" "cuda s" "meta s"
row --checkpoint none
row --checkpoint sqrt
row --checkpoint every:2
row --checkpoint selective
row --checkpoint budget:1MiB
row --checkpoint sqrt --precision bf16
row --checkpoint none --precision f16
row --checkpoint sqrt --accum-steps 4
row --checkpoint sqrt --offload boundaries
row --checkpoint none --offload all
