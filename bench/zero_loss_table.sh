#!/usr/bin/env bash
# The validation loss of char_gpt after a longer run under ZeRO's mixed precision (docs/memory.md,
# "Mixed precision: bf16 parameters"): one process in f32, under bf16 autocast and under f16
# autocast with its loss scaler, then two ranks (mpirun) under plain data parallel (ZeRO 0) in f32
# and bf16 autocast and under ZeRO 3 with `sqrt` in f32, with bf16 parameters and with f16
# parameters (f32 master shards, the loss scaler). The two-rank rows train on the same windows;
# the one-process rows on others (each rank draws its own).
#
#   bench/zero_loss_table.sh [build dir=build] [steps=100]
set -euo pipefail
build=${1:-build}
steps=${2:-100}
gpt="$build/examples/char_gpt"
[ -x "$gpt" ] || { echo "zero_loss_table: $gpt not built" >&2; exit 1; }
export OMP_NUM_THREADS=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mpi=(mpirun -np 2)
if mpirun --version 2>/dev/null | grep -q "Open MPI"; then mpi+=(--oversubscribe); fi
common=(--max-steps "$steps" --accum-steps 2 --optimizer adamw --quiet --sample-chars 0 --eval-every 100000
        --eval-windows 64 --threads 1 --seed 3)

# row <label> <command...>: the run's validation loss and, under f16, its loss scaler's line.
row() {
  local label=$1 out loss scaler
  shift
  out=$("$@" 2>&1) || { echo "$out" >&2; echo "zero_loss_table: failed: $*" >&2; exit 1; }
  loss=$(grep -m1 "^val loss:" <<<"$out" | awk '{print $3}')
  scaler=$(grep -m1 "^loss scaler:" <<<"$out" | sed -E 's/^loss scaler: //' || true)
  printf "%-46s %9s  %s\n" "$label" "$loss" "${scaler:--}"
}
printf "char_gpt, %s steps of 2 micro-batches, seed 3: validation loss\n" "$steps"
printf "%-46s %9s  %s\n" run "val loss" "loss scaler"
row "1 process, f32" "$gpt" "${common[@]}"
row "1 process, bf16 autocast" "$gpt" "${common[@]}" --precision bf16
row "1 process, f16 autocast + loss scaler" "$gpt" "${common[@]}" --precision f16
row "2 ranks, ZeRO 0, f32" "${mpi[@]}" "$gpt" "${common[@]}" --dist --zero 0
row "2 ranks, ZeRO 3 sqrt, f32" "${mpi[@]}" "$gpt" "${common[@]}" --dist --zero 3 --checkpoint sqrt
row "2 ranks, ZeRO 0, bf16 autocast" "${mpi[@]}" "$gpt" "${common[@]}" --dist --zero 0 --precision bf16
row "2 ranks, ZeRO 3 sqrt, bf16 parameters" "${mpi[@]}" "$gpt" "${common[@]}" --dist --zero 3 --checkpoint sqrt \
  --precision bf16
row "2 ranks, ZeRO 3 sqrt, f16 parameters + scaler" "${mpi[@]}" "$gpt" "${common[@]}" --dist --zero 3 \
  --checkpoint sqrt --precision f16
