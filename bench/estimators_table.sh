#!/usr/bin/env bash
# reel's exact bytes beside the closed-form estimators people use (docs/memory.md, "Before you run:
# dry runs"): GPT-2's four sizes dry-run on the meta device at one sequence of 1,024 tokens with
# AdamW and dropout 0.1, each as rank 0 of a one-rank job (char_gpt prints its peaks by category in
# bytes). Model state: reel's parameter, gradient and AdamW peaks in f32 against Hugging Face
# accelerate's `estimate-memory` (float32: model 4P, gradients 4P, Adam 8P; its 16-bit figure 8P) and
# DeepSpeed's `estimate_zero2/3_model_states_mem_needs` for one GPU (ZeRO-2: 2P + 18P, ZeRO-3: 4 x the
# largest layer + 18P). Activations: reel's activation peak under bf16 autocast with no
# checkpointing and with every block checkpointed (every:1), against the "transformer math"
# formula (Korthikanti et al. 2022) for 16-bit activations, s b h (34 + 5 a s / h) bytes a layer,
# and 2 s b h a layer under full recomputation. P is read back from reel's f32 parameter bytes.
# The figures are exact allocator bytes, not host timings.
#
#   bench/estimators_table.sh [build dir=build]
set -euo pipefail
build=${1:-build}
gpt="$build/examples/char_gpt"
[ -x "$gpt" ] || { echo "estimators_table: $gpt not built" >&2; exit 1; }

# peaks <levers...>: "parameter gradient optimizer activation" bytes of rank 0's line.
peaks() {
  local out
  out=$("$gpt" --device meta --batch 1 --max-steps 2 --eval-windows 1 --sample-chars 0 --quiet --dropout 0.1 "$@" 2>&1) ||
    { echo "$out" >&2; echo "estimators_table: char_gpt $* failed" >&2; exit 1; }
  sed -n 's/^rank 0 peak bytes: parameter \([0-9]*\), gradient \([0-9]*\), optimizer state \([0-9]*\), .*activation \([0-9]*\) .*/\1 \2 \3 \4/p' <<<"$out"
}

printf "Model state, one GPU, bytes: reel's parameters + gradients + AdamW (f32, and bf16 autocast) against the estimators\n"
printf "%-12s %14s %40s %15s %15s %15s %15s %15s\n" preset P "reel f32: parameter / gradient / AdamW" "reel f32" \
  "reel bf16" "accelerate f32" "DeepSpeed Z2" "DeepSpeed Z3"
rows=()
for spec in "gpt2 12 768 12" "gpt2-medium 24 1024 16" "gpt2-large 36 1280 20" "gpt2-xl 48 1600 25"; do
  read -r preset L C A <<<"$spec"
  read -r p g o _ <<<"$(peaks --preset "$preset" --precision f32 --checkpoint none)"
  read -r bp bg bo act <<<"$(peaks --preset "$preset" --precision bf16 --checkpoint none)"
  read -r _ _ _ act_full <<<"$(peaks --preset "$preset" --precision bf16 --checkpoint every:1)"
  P=$((p / 4))
  largest=$((50257 * C))  # DeepSpeed's largest layer: the (tied) token embedding
  printf "%-12s %14d %40s %15d %15d %15d %15d %15d\n" "$preset" "$P" "$p / $g / $o" $((p + g + o)) $((bp + bg + bo)) $((16 * P)) \
    $((2 * P + 18 * P)) $((4 * largest + 18 * P))
  rows+=("$preset $L $C $A $act $act_full")
done
printf "\nActivations, one sequence of 1,024 tokens, bytes: reel bf16 autocast against s b h (34 + 5 a s / h) x L\n"
printf "%-12s %18s %18s %8s %20s %18s %8s\n" preset "reel, none" "formula" "ratio" "reel, every:1" "formula (2sbh L)" "ratio"
for row in "${rows[@]}"; do
  read -r preset L C A act act_full <<<"$row"
  s=1024
  formula=$((s * C * (34 + 5 * A * s / C) * L))
  full=$((2 * s * C * L))
  printf "%-12s %18d %18d %8s %20d %18d %8s\n" "$preset" "$act" "$formula" \
    "$(awk -v a="$act" -v f="$formula" 'BEGIN {printf "%.2f", a / f}')" "$act_full" "$full" \
    "$(awk -v a="$act_full" -v f="$full" 'BEGIN {printf "%.2f", a / f}')"
done
