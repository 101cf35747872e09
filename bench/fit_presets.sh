#!/usr/bin/env bash
# What fits where (docs/memory.md, "Before you run: dry runs"): char_gpt's --fit over GPT-2's four
# sizes at 16 x 1,024 tokens a step, on an 80 GB H100 (74.51 GiB) and a 24 GiB RTX 4090, each
# search a set of dry runs on the meta device priced on that GPU. A row is the fastest candidate
# that fits (its levers, peak and predicted step), or the smallest peak when none does. The figures
# are exact (allocator bytes, predictions from kernel records), not host timings.
#
#   bench/fit_presets.sh [build dir=build]
set -euo pipefail
build=${1:-build}
gpt="$build/examples/char_gpt"
[ -x "$gpt" ] || { echo "fit_presets: $gpt not built" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

printf "GPT-2 at 16 x 1,024 tokens a step, AdamW: the fastest levers that fit (char_gpt --fit SIZE --predict GPU)\n"
printf "%-12s %-16s %-72s %27s %9s %9s\n" preset "GPU (budget)" levers "peak" "step ms" "tokens/s"
for preset in gpt2 gpt2-medium gpt2-large gpt2-xl; do
  for target in "h100 80GB" "rtx4090 24GiB"; do
    read -r gpu size <<<"$target"
    status=0
    "$gpt" --preset "$preset" --batch 16 --fit "$size" --predict "$gpu" >"$tmp/out" 2>&1 || status=$?
    if line=$(grep "^fastest that fits" "$tmp/out"); then
      levers=$(sed -n 's/^fastest that fits in [^:]*: \(.*\), peak .*/\1/p' <<<"$line")
      peak=$(sed -n 's/.*, peak \([^(]*\) (\([0-9]*\) B).*/\2/p' <<<"$line")
      step=$(sed -n 's/.*predicted step \([0-9.]*\) ms.*/\1/p' <<<"$line")
      rate=$(sed -n 's/.* (\([0-9]*\) tokens\/s)$/\1/p' <<<"$line")
      gib=$(awk -v b="$peak" 'BEGIN {printf "%.2f", b / 2^30}')
      printf "%-12s %-16s %-72s %27s %9s %9s\n" "$preset" "$gpu ($size)" "$levers" "$peak B ($gib GiB)" "$step" "$rate"
    elif [ "$status" = 1 ] && line=$(grep "^fit: nothing fits" "$tmp/out"); then
      least=$(sed -n 's/.*the smallest peak is \([^(]*\) (\([0-9]*\) B), with \(.*\)/\2 B with \3/p' <<<"$line")
      printf "%-12s %-16s nothing fits; the smallest peak is %s\n" "$preset" "$gpu ($size)" "$least"
    else
      cat "$tmp/out" >&2
      echo "fit_presets: --preset $preset --fit $size --predict $gpu failed" >&2
      exit 1
    fi
  done
done
