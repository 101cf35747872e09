#!/usr/bin/env bash
# char_gpt with 6 blocks on cuda:0 (emulated by simt without CUDA), plain and under `--offload all`
# (docs/memory.md, "Which modes lower the peak"): the step after two warm-up steps profiled and its
# time predicted on a GPU of report/device_specs.cpp. Per run: the device activation peak and total
# peak, the pinned host peak, and the predicted step with the copy stream and the offload stalls at
# `--offload-inflight`'s default bound. The bytes are measured (exact), the times predicted by
# report/predict.h from the recorded kernels, so neither depends on the machine that runs this.
#
#   bench/offload_gpt_table.sh [build dir=build] [device=h100]
set -euo pipefail
build=${1:-build}
gpu=${2:-h100}
gpt="$build/examples/char_gpt"
[ -x "$gpt" ] || { echo "offload_gpt_table: $gpt not built" >&2; exit 1; }
common=(--device cuda --n-layer 6 --max-steps 3 --eval-windows 8 --sample-chars 0 --quiet --threads 2
        --profile "$(mktemp -u)" --profile-steps 1 --predict "$gpu")

# peak <section title> <output>: the `total` row's peak in that section of the memory report.
peak() {
  awk -v s="$1" '$0 == s { in_s = 1; next } /^memory / { in_s = 0 } in_s && $1 == "total" { print $(NF-1), $NF; exit }' <<<"$2"
}
printf "char_gpt, 6 blocks, n_embd 96, 32 x 64 tokens, on cuda:0 (emulated); the third step profiled, predicted on %s\n" "$gpu"
printf "%-15s %16s %12s %20s   %s\n" run "activation peak" "total peak" "host (pinned) peak" "predicted step"
details=""
for run in plain all; do
  extra=()
  if [ "$run" = all ]; then extra=(--offload all); fi
  out=$("$gpt" "${common[@]}" "${extra[@]}" 2>&1) || { echo "$out" >&2; echo "offload_gpt_table: failed: $run" >&2; exit 1; }
  activation=$(grep -m1 "peak bytes:" <<<"$out" | sed -E 's/.*activation [0-9]+ \(([^)]*)\).*/\1/')
  total=$(peak "memory on cuda:0" "$out")
  host=$(peak "memory in pinned host memory" "$out")
  step=$(grep -m1 "^step on " <<<"$out" | sed -E 's/^step on [^:]*: predicted ([0-9.]+ us).*/\1/')
  label=plain
  if [ "$run" = all ]; then label="--offload all"; fi
  printf "%-15s %16s %12s %20s   %s\n" "$label" "$activation" "$total" "${host:-0 B}" "$step"
  details+=$'\n'"$label:"$'\n'"$(grep -E '^step on |^  (copy stream|offload stalls|with the f32|the roofline)' <<<"$out")"
done
printf "%s\n" "$details"
