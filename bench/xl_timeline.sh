#!/usr/bin/env bash
# The picture of GPT-2 XL's step in docs/memory.md ("Before you run: dry runs"): char_gpt's
# --memory-timeline page of one optimizer step of GPT-2 XL (16 x 1,024 tokens, bf16 autocast,
# sqrt checkpointing) dry-run on the meta device, rendered by headless Chromium to a PNG (the
# chart and its legend: the page's first 760 pixels at 1280 wide).
#
#   bench/xl_timeline.sh [build dir=build] [png=docs/images/gpt2_xl_sqrt_timeline.png]
set -euo pipefail
build=${1:-build}
png=${2:-docs/images/gpt2_xl_sqrt_timeline.png}
gpt="$build/examples/char_gpt"
[ -x "$gpt" ] || { echo "xl_timeline: $gpt not built" >&2; exit 1; }
browser=$(command -v chromium || command -v chromium-browser) || { echo "xl_timeline: no chromium" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$gpt" --device meta --preset gpt2-xl --batch 16 --precision bf16 --checkpoint sqrt --max-steps 3 --eval-windows 16 \
  --sample-chars 0 --quiet --memory-timeline "$tmp/xl.html" >"$tmp/out" 2>&1 || { cat "$tmp/out" >&2; exit 1; }
"$browser" --headless --no-sandbox --disable-gpu --no-first-run --hide-scrollbars --window-size=1280,760 \
  --screenshot="$tmp/xl.png" "file://$tmp/xl.html" >/dev/null 2>&1
[ -s "$tmp/xl.png" ] || { echo "xl_timeline: chromium wrote no picture" >&2; exit 1; }
mkdir -p "$(dirname "$png")"
cp "$tmp/xl.png" "$png"
echo "xl_timeline: $png"
