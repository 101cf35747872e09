#!/usr/bin/env bash
# --metrics and the progress lines of a run in two pieces (tests/check_metrics.sh CHAR_GPT OUT_DIR):
# char_gpt for 20 steps with --metrics, stopped after step 8 and resumed. The JSON lines must be
# 20, one per step in order, each with every field; the log (not a terminal) must hold the plain
# progress lines with the time left; the loss curve's SVG must render in headless Chromium with
# nothing on the console, as one polyline of 20 points. Skips (77) without chromium.
set -euo pipefail
gpt=$1 out=$2
browser=$(command -v chromium || command -v chromium-browser || true)
[[ -n "$browser" ]] || { echo "check_metrics: chromium is not installed (tools/setup.sh installs it): skipped"; exit 77; }
rm -rf "$out"
mkdir -p "$out"
run=("$gpt" --n-layer 2 --n-head 2 --n-embd 32 --block-size 32 --batch 8 --eval-windows 8 --sample-chars 0
     --max-steps 20 --metrics "$out/metrics.jsonl" --checkpoint-dir "$out/checkpoints")
"${run[@]}" --stop-at 8 >"$out/first.log" 2>&1 || { cat "$out/first.log"; exit 1; }
"${run[@]}" --resume >"$out/second.log" 2>&1 || { cat "$out/second.log"; exit 1; }
fail() { echo "check_metrics: $*"; exit 1; }
[[ $(wc -l <"$out/metrics.jsonl") -eq 20 ]] || fail "$(wc -l <"$out/metrics.jsonl") lines in metrics.jsonl, expected 20"
for i in $(seq 1 20); do
  line=$(sed -n "${i}p" "$out/metrics.jsonl")
  [[ $line == *"\"step\":$i,"* || $line == *"\"step\":$i}"* ]] || fail "line $i is not step $i: $line"
  for key in loss lr grad_norm scale skipped tokens_per_s peak_bytes; do
    [[ $line == *"\"$key\":"* ]] || fail "line $i has no $key: $line"
  done
done
grep -q "^step 8/20  loss [0-9.]*  [0-9]* tokens/s  elapsed [0-9]*:[0-9][0-9]  left [0-9]*:[0-9][0-9]$" "$out/first.log" ||
  fail "no plain progress line for step 8 in the first piece's log"
grep -q "^step 20/20  loss " "$out/second.log" || fail "no plain progress line for step 20 in the second piece's log"
grep -q "^metrics: 20 steps in .*, the loss curve in .*metrics.svg$" "$out/second.log" || fail "no metrics summary"
svg=$out/metrics.svg
flags=(--headless --no-sandbox --disable-gpu --no-first-run --window-size=1000,700)
"$browser" "${flags[@]}" --screenshot="$out/curve.png" --enable-logging=stderr --v=0 "file://$svg" \
  >"$out/chromium.log" 2>&1 || { cat "$out/chromium.log"; fail "chromium failed"; }
if grep -q "CONSOLE" "$out/chromium.log"; then grep "CONSOLE" "$out/chromium.log"; fail "the SVG logged to the console"; fi
[[ -s "$out/curve.png" ]] || fail "no screenshot of the curve"
"$browser" "${flags[@]}" --dump-dom "file://$svg" >"$out/dom.html" 2>/dev/null
grep -q "<svg" "$out/dom.html" || fail "the rendered document has no <svg>"
points=$(grep -o '<circle' "$out/dom.html" | wc -l)
[[ "$points" -eq 20 ]] || fail "$points points on the curve, expected 20"
echo "check_metrics: ok; 20 JSON lines, the progress lines, the curve rendered ($out/curve.png)"
