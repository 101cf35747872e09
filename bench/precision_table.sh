#!/usr/bin/env bash
# Issue 27's memory and training targets for char_gpt in one table: the activation peak of a step
# in f32, bf16 and f16 (autocast, f32 master weights), without checkpointing and with `sqrt`, as a
# fraction of the f32 plain peak, beside the target each row has (bf16 plain at most 0.55x, bf16
# with sqrt at most 0.30x). With a step count it then trains each precision that many steps from the
# same seed and prints the validation loss, its difference from f32's, and f16's skipped windows
# (targets: bf16 within 2 % of f32, f16 skipping at most 1 % of windows). The GEMM and step-time
# targets are bench_gemm16's and bench/vs_torch's.
#
#   bench/precision_table.sh [build dir=build] [training steps=0: peaks only] [seed=0]
#   bench/precision_table.sh build 2000      # the 2,000-step losses of docs/memory.md (about 7 min)
# The peaks are the allocator's, over 2 steps (the bytes do not depend on the step count).
set -euo pipefail
build=${1:-build}
steps=${2:-0}
seed=${3:-0}
gpt="$build/examples/char_gpt"
[ -x "$gpt" ] || { echo "precision_table: $gpt not built" >&2; exit 1; }
common=(--quiet --sample-chars 0 --threads 1 --seed "$seed")

# run <args...>: prints the run's whole output; a failed run stops the script with its output.
# (Read it from a variable: a pipe into grep -m1 would end the printing early, a failure under
# pipefail.)
run() {
  local out
  out=$("$gpt" "${common[@]}" "$@" 2>&1) || { echo "$out" >&2; echo "precision_table: failed: $*" >&2; exit 1; }
  echo "$out"
}
activation() { grep -m1 "peak bytes:" | sed -E 's/.*activation ([0-9]+).*/\1/'; }

printf "char_gpt (3 blocks, n_embd 96, 32 x 64 tokens): activation peak of a step\n"
printf "%-10s %-10s %14s %10s %12s %8s\n" precision checkpoint bytes MiB "x f32 plain" target
reference=""
for precision in f32 bf16 f16; do
  for checkpoint in none sqrt; do
    out=$(run --max-steps 2 --precision "$precision" --checkpoint "$checkpoint")
    bytes=$(activation <<<"$out")
    [ -n "$reference" ] || reference=$bytes
    target=-
    if [ "$precision" = bf16 ]; then target=$([ "$checkpoint" = none ] && echo "<= 0.55" || echo "<= 0.30"); fi
    awk -v p="$precision" -v c="$checkpoint" -v b="$bytes" -v r="$reference" -v t="$target" \
      'BEGIN { printf "%-10s %-10s %14d %10.2f %12.3f %8s\n", p, c, b, b / 1048576, b / r, t }'
  done
done

[ "$steps" -gt 0 ] || exit 0
printf "\n%s training steps, seed %s, one thread: validation loss\n" "$steps" "$seed"
printf "%-10s %10s %10s %16s  %s\n" precision "val loss" "vs f32" target "loss scaler"
f32_loss=""
for precision in f32 bf16 f16; do
  out=$(run --max-steps "$steps" --precision "$precision")
  loss=$(grep -m1 "^val loss:" <<<"$out" | awk '{print $3}')
  scaler=$(grep -m1 "^loss scaler:" <<<"$out" | sed -E 's/^loss scaler: //' || true)
  [ -n "$f32_loss" ] || f32_loss=$loss
  target=-
  if [ "$precision" = bf16 ]; then target="<= 2 %"; fi
  if [ "$precision" = f16 ]; then target="<= 1 % skipped"; fi
  awk -v p="$precision" -v l="$loss" -v r="$f32_loss" -v t="$target" -v s="${scaler:--}" \
    'BEGIN { printf "%-10s %10.4f %+9.2f%% %16s  %s\n", p, l, 100 * (l - r) / r, t, s }'
done
