#!/usr/bin/env bash
# The per-rank memory of data parallelism's sharding levels, side by side: char_gpt on two ranks of
# the CPU (mpirun) under ZeRO 0/1/2/3 x checkpoint {none, sqrt} x reduce {per-micro-batch,
# per-window} (the reduce mode only matters for 2 and 3), and one process for reference. Per row:
# rank 0's peak bytes of parameters, gradients and optimizer state together (and as a fraction of
# one process's), its activation peak, the step time, and the validation loss after the run with
# its relative difference from plain data parallel's (ZeRO 0, same checkpointing). The table of
# docs/memory.md.
#
#   bench/zero_table.sh [build dir=build] [steps=50]
# Every row trains the same model from the same seed on the same windows (2 micro-batches per step).
set -euo pipefail
build=${1:-build}
steps=${2:-50}
gpt="$build/examples/char_gpt"
[ -x "$gpt" ] || { echo "zero_table: $gpt not built" >&2; exit 1; }
export OMP_NUM_THREADS=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mpi=(mpirun -np 2)
if mpirun --version 2>/dev/null | grep -q "Open MPI"; then mpi+=(--oversubscribe); fi
common=(--max-steps "$steps" --accum-steps 2 --optimizer adamw --quiet --sample-chars 0 --eval-every 100000
        --eval-windows 64 --threads 1 --seed 3)

# run <command...>: prints "together activation seconds val_loss" of the run.
run() {
  local out
  out=$("$@" 2>&1) || { echo "$out" >&2; echo "zero_table: failed: $*" >&2; exit 1; }
  local bytes
  bytes=$(grep -m1 "peak bytes:" <<<"$out")
  echo "$(sed -E 's/.*together ([0-9]+).*/\1/' <<<"$bytes")" \
       "$(sed -E 's/.*activation ([0-9]+).*/\1/' <<<"$bytes")" \
       "$(grep -m1 "^trained:" <<<"$out" | sed -E 's/.* in ([0-9.]+) s.*/\1/')" \
       "$(grep -m1 "^val loss:" <<<"$out" | awk '{print $3}')"
}

format="%-10s %-22s %14s %9s %14s %10s %9s %10s\n"
printf "char_gpt, %s steps of 2 micro-batches; rank 0's peak bytes on cpu (2 ranks under mpirun, 1 thread each)\n" "$steps"
printf "$format" checkpoint run "param+grad+opt" "x 1 proc" activation "ms/step" "val loss" "vs ZeRO 0"
read -r single_together activation seconds val < <(run "$gpt" "${common[@]}")
printf "$format" none "1 process" "$single_together" 1.000 "$activation" \
  "$(awk -v s="$seconds" -v n="$steps" 'BEGIN { printf "%.1f", 1000 * s / n }')" "$val" -
for ckpt in none sqrt; do
  plain_val=""
  for zero in 0 1 2 3; do
    modes=(per-micro-batch)
    if [ "$zero" -ge 2 ]; then modes=(per-micro-batch per-window); fi
    for mode in "${modes[@]}"; do
      read -r together activation seconds val < <(run "${mpi[@]}" "$gpt" "${common[@]}" --dist --zero "$zero" \
        --reduce "$mode" --checkpoint "$ckpt")
      label="ZeRO $zero"
      if [ "$zero" -ge 2 ]; then label="ZeRO $zero, $mode"; fi
      rel=-
      if [ -z "$plain_val" ]; then plain_val=$val
      else rel=$(awk -v a="$val" -v b="$plain_val" 'BEGIN { d = (a - b) / b; printf "%.1e", d < 0 ? -d : d }'); fi
      printf "$format" "$ckpt" "$label" "$together" \
        "$(awk -v a="$together" -v b="$single_together" 'BEGIN { printf "%.3f", a / b }')" "$activation" \
        "$(awk -v s="$seconds" -v n="$steps" 'BEGIN { printf "%.1f", 1000 * s / n }')" "$val" "$rel"
    done
  done
done
