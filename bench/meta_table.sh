#!/usr/bin/env bash
# The meta device against emulated cuda:0 (docs/memory.md, "Before you run: dry runs"), and what a
# dry run costs the host.
#
# The matrix: char_gpt, fashion_mnist_mlp and fashion_mnist_cnn, small, run for a few steps on each
# device under the levers (checkpoint policy, a budget plan, precision, accumulation, offload), and
# ZeRO 0 and 3 as rank 0 of a real two-rank job (mpirun, --dist) against --simulate-ranks 2 on meta;
# every run profiled with --predict h100 and with its --memory-timeline written. A row is `same`
# when the two runs give the same: memory report of the device (per-category current and peak
# bytes, allocation counts, reserved bytes, the pinned pool's), rank 0's peaks by category and its
# model-state peak, predicted step (tools/meta_digest.awk), memory timeline's event count, and
# profiled kernel records (kernel, dtype, shapes, phase, bytes, FLOPs, each with its count; from the
# trace). tests/test_meta.cpp asserts the same record by record in one process. The last columns
# are each run's wall time: the dry run computes nothing.
#
# Then the cost of a dry run at GPT-2's sizes: GPT-2 small and XL at 16 x 1,024 tokens, two
# optimizer steps and the memory timeline page of the second, wall time and the process's peak
# resident memory (GNU time; tools/setup_bench.sh installs it).
#
#   bench/meta_table.sh [build dir=build]
set -euo pipefail
build=${1:-build}
here=$(cd "$(dirname "$0")" && pwd)
gpt="$build/examples/char_gpt" mlp="$build/examples/fashion_mnist_mlp" cnn="$build/examples/fashion_mnist_cnn"
for p in "$gpt" "$mlp" "$cnn"; do [ -x "$p" ] || { echo "meta_table: $p not built" >&2; exit 1; }; done
export OMP_NUM_THREADS=2 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
common=(--max-steps 4 --quiet --profile-steps 1 --predict h100)
gpt_args=(--n-layer 4 --n-head 2 --n-embd 32 --block-size 32 --batch 8 --eval-windows 8 --sample-chars 0)
mnist_args=(--train-limit 256 --test-limit 64 --batch 32)

# What the two runs must give alike: the printed digest, the timeline's event count, the kernel
# records summarised from the trace (the device's name and the times dropped).
digest() {  # <dir of a run>
  awk -f "$here/../tools/meta_digest.awk" "$1/out"
  grep -o '[0-9]* allocator events' "$1/timeline.html" | head -1
  grep -o '{"args":{"bytes_read":[0-9]*,"bytes_written":[0-9]*,[^}]*},"cat":"kernel","dur":[0-9.e+-]*,"name":"[^"]*"' "$1/trace.json" |
    sed 's/"device":"[^"]*",//; s/"dur":[^,]*,//' | sort | uniq -c
}

# run <dir> <command...>: one run with the profile and the timeline in <dir>, its wall seconds in <dir>/s.
run() {
  local dir=$1 start end
  shift
  mkdir -p "$dir"
  start=$(date +%s.%N)
  "$@" "${common[@]}" --profile "$dir/trace.json" --memory-timeline "$dir/timeline.html" >"$dir/out" 2>&1 ||
    { cat "$dir/out" >&2; echo "meta_table: failed: $*" >&2; exit 1; }
  end=$(date +%s.%N)
  printf "%.1f" "$(echo "$end - $start" | bc)" >"$dir/s"
  digest "$dir" >"$dir/digest"
}

# compare <label>: the row of the runs in $tmp/cuda and $tmp/meta.
compare() {
  local same peak step kernels
  if cmp -s "$tmp/cuda/digest" "$tmp/meta/digest"; then same=yes; else same=NO; fi
  peak=$(awk '$1 == "total" {print $4, $5; exit}' "$tmp/meta/digest")
  step=$(sed -n 's/^step on h100: predicted \([0-9.]*\) us.*/\1/p' "$tmp/meta/digest")
  kernels=$(awk '$1 ~ /^[0-9]+$/ && $2 ~ /^\{"args"/ {n += $1} END {print n + 0}' "$tmp/meta/digest")
  printf "%-76s %-5s %12s %13s %8s %7s %7s\n" "$1" "$same" "$peak" "$step" "$kernels" "$(cat "$tmp/cuda/s")" \
    "$(cat "$tmp/meta/s")"
  [ "$same" = yes ] || diff "$tmp/cuda/digest" "$tmp/meta/digest" >&2 || true
}

# row <program> <label> <levers...>: the program on each device.
row() {
  local prog=$1 label=$2
  shift 2
  local args=("${gpt_args[@]}")
  [ "$prog" = "$gpt" ] || args=("${mnist_args[@]}")
  rm -rf "$tmp/cuda" "$tmp/meta"
  run "$tmp/cuda" "$prog" "${args[@]}" --device cuda "$@"
  run "$tmp/meta" "$prog" "${args[@]}" --device meta "$@"
  compare "$label $*"
}

# dist_row <program> <label> <stage> <levers...>: rank 0 of mpirun -np 2 on cuda against
# --simulate-ranks 2 on meta.
dist_row() {
  local prog=$1 label=$2 stage=$3
  shift 3
  local args=("${gpt_args[@]}")
  [ "$prog" = "$gpt" ] || args=("${mnist_args[@]}")
  rm -rf "$tmp/cuda" "$tmp/meta"
  run "$tmp/cuda" mpirun -np 2 --oversubscribe "$prog" "${args[@]}" --device cuda --dist --zero "$stage" "$@"
  run "$tmp/meta" "$prog" "${args[@]}" --device meta --simulate-ranks 2 --zero "$stage" "$@"
  compare "$label 2 ranks --zero $stage $*"
}

printf "Each program a few steps on cuda:0 (emulated) and on meta, the profiled step predicted on h100\n"
printf "char_gpt: 4 blocks of width 32, 8 x 32 tokens; fashion_mnist_mlp / _cnn: batches of 32\n"
printf "%-76s %-5s %12s %13s %8s %7s %7s\n" "program and levers" same "peak (meta)" "h100 step us" kernels "cuda s" "meta s"
row "$gpt" char_gpt --checkpoint none
row "$gpt" char_gpt --checkpoint sqrt
row "$gpt" char_gpt --checkpoint every:2
row "$gpt" char_gpt --checkpoint selective
row "$gpt" char_gpt --checkpoint budget:1MiB
row "$gpt" char_gpt --checkpoint budget:1MiB --offload auto
row "$gpt" char_gpt --checkpoint sqrt --precision bf16
row "$gpt" char_gpt --checkpoint none --precision f16
row "$gpt" char_gpt --checkpoint sqrt --accum-steps 4
row "$gpt" char_gpt --checkpoint sqrt --offload boundaries
row "$gpt" char_gpt --checkpoint none --offload all
dist_row "$gpt" char_gpt 0 --checkpoint none
dist_row "$gpt" char_gpt 3 --checkpoint sqrt --accum-steps 4 --precision bf16
row "$mlp" fashion_mnist_mlp --checkpoint none
row "$mlp" fashion_mnist_mlp --checkpoint sqrt --precision bf16 --accum-steps 4
row "$mlp" fashion_mnist_mlp --checkpoint budget:200KiB --offload boundaries
dist_row "$mlp" fashion_mnist_mlp 3 --checkpoint every:2
row "$cnn" fashion_mnist_cnn --checkpoint none
row "$cnn" fashion_mnist_cnn --checkpoint selective --precision bf16 --accum-steps 4
row "$cnn" fashion_mnist_cnn --checkpoint sqrt --offload boundaries
dist_row "$cnn" fashion_mnist_cnn 0 --checkpoint sqrt

printf "\nA dry run's cost on this host: two optimizer steps of GPT-2 at 16 x 1,024 tokens on meta and the memory timeline\n"
printf "page of the second (wall time and peak resident memory of the whole process, corpus loading included)\n"
printf "%-12s %10s %12s %14s\n" preset "wall s" "peak RSS" "device peak"
for preset in gpt2 gpt2-xl; do
  if [ -x /usr/bin/time ]; then
    /usr/bin/time -f "%e %M" -o "$tmp/time" "$gpt" --device meta --preset "$preset" --batch 16 --max-steps 2 \
      --eval-windows 1 --sample-chars 0 --quiet --memory-timeline "$tmp/$preset.html" >"$tmp/out" 2>&1 ||
      { cat "$tmp/out" >&2; exit 1; }
    read -r wall rss <"$tmp/time"
    rss="$((rss / 1024)) MiB"
  else
    "$gpt" --device meta --preset "$preset" --batch 16 --max-steps 2 --eval-windows 1 --sample-chars 0 --quiet \
      --memory-timeline "$tmp/$preset.html" >"$tmp/out" 2>&1 || { cat "$tmp/out" >&2; exit 1; }
    wall="-" rss="- (no GNU time)"
  fi
  peak=$(awk '/^memory on meta$/ {on = 1} on && $1 == "total" {print $4, $5; exit}' "$tmp/out")
  printf "%-12s %10s %12s %14s\n" "$preset" "$wall" "$rss" "$peak"
done
