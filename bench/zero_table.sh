#!/usr/bin/env bash
# The per-rank memory of data parallelism's sharding levels, side by side: char_gpt on two ranks of
# the CPU (mpirun) under ZeRO 0/1/2/3 x checkpoint {none, sqrt} x reduce {per-micro-batch,
# per-window} (the reduce mode only matters for 2 and 3), ZeRO 3 also with units {block, layer} x
# prefetch {ahead of use, off} and layer units with the prefetch after the gradients (the examples'
# default), and one process for reference. Per row: rank 0's joint peak of parameter +
# gradient + optimizer bytes (held at the same moment: MemoryStats::model_state_peak_bytes) and as a
# fraction of one process's, the sum of the three categories' own peaks (the older, overstated
# measure), its activation peak, the step time, and the validation loss after the run with its
# relative difference from plain data parallel's (ZeRO 0, same checkpointing). Then mixed precision
# (--precision bf16: under ZeRO 2/3 bf16 parameters gathered from f32 master shards) against one
# process under bf16 autocast, and the same target row (ZeRO 3, sqrt, per-micro-batch, layer units) on
# deeper models. The tables of docs/memory.md.
#
#   bench/zero_table.sh [build dir=build] [steps=50] [deeper n_layer list="8 12"]
# Every row trains the same model from the same seed on the same windows (2 micro-batches per step).
set -euo pipefail
build=${1:-build}
steps=${2:-50}
deeper=${3-"8 12"}
gpt="$build/examples/char_gpt"
[ -x "$gpt" ] || { echo "zero_table: $gpt not built" >&2; exit 1; }
export OMP_NUM_THREADS=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mpi=(mpirun -np 2)
if mpirun --version 2>/dev/null | grep -q "Open MPI"; then mpi+=(--oversubscribe); fi
common=(--max-steps "$steps" --accum-steps 2 --optimizer adamw --quiet --sample-chars 0 --eval-every 100000
        --eval-windows 64 --threads 1 --seed 3)

# run <command...>: prints "joint together activation seconds val_loss" of the run.
run() {
  local out
  out=$("$@" 2>&1) || { echo "$out" >&2; echo "zero_table: failed: $*" >&2; exit 1; }
  local bytes
  bytes=$(grep -m1 "peak bytes:" <<<"$out")
  echo "$(sed -E 's/.*at once ([0-9]+).*/\1/' <<<"$bytes")" \
       "$(sed -E 's/.*together ([0-9]+).*/\1/' <<<"$bytes")" \
       "$(sed -E 's/.*activation ([0-9]+).*/\1/' <<<"$bytes")" \
       "$(grep -m1 "^trained:" <<<"$out" | sed -E 's/.* in ([0-9.]+) s.*/\1/')" \
       "$(grep -m1 "^val loss:" <<<"$out" | awk '{print $3}')"
}
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.3f", a / b }'; }
ms() { awk -v s="$1" -v n="$steps" 'BEGIN { printf "%.1f", 1000 * s / n }'; }

format="%-10s %-52s %12s %8s %12s %12s %8s %9s %9s\n"
# row checkpoint label joint together activation seconds val: one table row. The first row after
# plain_val is emptied is the reference of the val-loss column ("vs ZeRO 0"); the others print their
# relative difference from it.
row() {
  local rel=-
  if [ -z "$plain_val" ]; then plain_val=$7
  else rel=$(awk -v a="$7" -v b="$plain_val" 'BEGIN { d = (a - b) / b; printf "%.1e", d < 0 ? -d : d }'); fi
  printf "$format" "$1" "$2" "$3" "$(ratio "$3" "$single_joint")" "$4" "$5" "$(ms "$6")" "$7" "$rel"
}
printf "char_gpt, %s steps of 2 micro-batches; rank 0's peak bytes on cpu (2 ranks under mpirun, 1 thread each)\n" "$steps"
printf "$format" checkpoint run "state peak" "x 1 proc" "sum of peaks" activation "ms/step" "val loss" "vs ZeRO 0"
read -r single_joint together activation seconds val < <(run "$gpt" "${common[@]}")
printf "$format" none "1 process" "$single_joint" 1.000 "$together" "$activation" "$(ms "$seconds")" "$val" -
for ckpt in none sqrt; do
  plain_val=""
  for zero in 0 1 2 3; do
    modes=(per-micro-batch)
    if [ "$zero" -ge 2 ]; then modes=(per-micro-batch per-window); fi
    for mode in "${modes[@]}"; do
      variants=("block 1")
      if [ "$zero" -eq 3 ]; then variants=("block 1" "block 0" "layer 1" "layer 0" "layer 2"); fi
      for variant in "${variants[@]}"; do
        read -r units prefetch <<<"$variant"
        extra=()
        if [ "$zero" -ge 2 ]; then extra=(--reduce "$mode" --fsdp-units "$units" --fsdp-prefetch "$prefetch"); fi
        read -r joint together activation seconds val < <(run "${mpi[@]}" "$gpt" "${common[@]}" --dist --zero "$zero" \
          --checkpoint "$ckpt" "${extra[@]}")
        label="ZeRO $zero"
        if [ "$zero" -eq 2 ]; then label="ZeRO 2, $mode"; fi
        if [ "$zero" -eq 3 ]; then
          label="ZeRO 3, $mode, $units"
          if [ "$prefetch" = 0 ]; then label="$label, no prefetch"; fi
          if [ "$prefetch" = 2 ]; then label="$label, prefetch after grads"; fi
        fi
        row "$ckpt" "$label" "$joint" "$together" "$activation" "$seconds" "$val"
      done
    done
  done
done

# Mixed precision: --precision bf16, the forwards under autocast everywhere; under ZeRO 2/3 the
# parameters are also gathered in bf16 from f32 master shards (distributed/fsdp.h's param_dtype). Against one
# process under bf16 autocast (the same f32 parameter, gradient and optimizer bytes as in f32).
printf "\nmixed precision (--precision bf16), checkpoint sqrt, per-micro-batch\n"
read -r single_joint together activation seconds val < <(run "$gpt" "${common[@]}" --precision bf16)
printf "$format" sqrt "1 process, bf16 autocast" "$single_joint" 1.000 "$together" "$activation" "$(ms "$seconds")" "$val" -
plain_val=""
for variant in "0 block 1" "2 block 1" "3 block 1" "3 block 0" "3 layer 1" "3 layer 0" "3 layer 2"; do
  read -r zero units prefetch <<<"$variant"
  extra=()
  if [ "$zero" -ge 2 ]; then extra=(--fsdp-units "$units" --fsdp-prefetch "$prefetch"); fi
  read -r joint together activation seconds val < <(run "${mpi[@]}" "$gpt" "${common[@]}" --dist --zero "$zero" \
    --checkpoint sqrt --precision bf16 "${extra[@]}")
  label="ZeRO $zero, bf16"
  if [ "$zero" -eq 2 ]; then label="ZeRO 2, bf16 parameters"; fi
  if [ "$zero" -eq 3 ]; then
    label="ZeRO 3, bf16 parameters, $units"
    if [ "$prefetch" = 0 ]; then label="$label, no prefetch"; fi
    if [ "$prefetch" = 2 ]; then label="$label, prefetch after grads"; fi
  fi
  row sqrt "$label" "$joint" "$together" "$activation" "$seconds" "$val"
done

# Deeper models: each block a smaller share of the parameters, so the units in flight weigh less.
[ -n "$deeper" ] || exit 0
printf "\ndeeper char_gpt (n_embd 96), ZeRO 3 with sqrt and per-micro-batch against one process\n"
format2="%-8s %-30s %12s %8s %9s\n"
printf "$format2" n_layer run "state peak" "x 1 proc" "ms/step"
for n in $deeper; do
  read -r single_joint together activation seconds val < <(run "$gpt" "${common[@]}" --n-layer "$n")
  printf "$format2" "$n" "1 process" "$single_joint" 1.000 "$(ms "$seconds")"
  for variant in "block 1" "layer 1" "layer 0" "layer 2"; do
    read -r units prefetch <<<"$variant"
    read -r joint together activation seconds val < <(run "${mpi[@]}" "$gpt" "${common[@]}" --n-layer "$n" --dist \
      --zero 3 --checkpoint sqrt --fsdp-units "$units" --fsdp-prefetch "$prefetch")
    label="ZeRO 3, $units"
    if [ "$prefetch" = 0 ]; then label="$label, no prefetch"; fi
    if [ "$prefetch" = 2 ]; then label="$label, prefetch after"; fi
    printf "$format2" "$n" "$label" "$joint" "$(ratio "$joint" "$single_joint")" "$(ms "$seconds")"
  done
done
