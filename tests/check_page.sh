#!/usr/bin/env bash
# The memory timeline page of a real training step, rendered by a browser: runs
# examples/fashion_mnist_mlp with --memory-timeline (a few tiny steps, checkpoint segments every two
# layers), renders the page with headless Chromium, and fails on any console message (the page has
# no script, so any message is an error: "Uncaught ...", a failed load), on a missing or empty
# screenshot, or when the rendered DOM lacks the SVG areas, the phases, the peak marker or the live
# tables. Skips (exit 77) only where chromium is not installed.
#
#   tests/check_page.sh <fashion_mnist_mlp> <output dir>
set -euo pipefail
example=$1
out=$2
browser=$(command -v chromium || command -v chromium-browser || true)
if [[ -z "$browser" ]]; then
  echo "check_page: chromium is not installed (tools/setup.sh installs it): skipped"
  exit 77
fi
mkdir -p "$out"
page=$out/memory_timeline.html
shot=$out/memory_timeline.png
rm -f "$page" "$shot" "$out/memory_timeline.json"

"$example" --train-limit 600 --test-limit 100 --quiet --max-steps 3 --batch 64 --checkpoint every:2 \
  --memory-timeline "$page" | tee "$out/example.log"
grep -q "memory timeline: step 2" "$out/example.log" || { echo "check_page: the example did not report the timeline"; exit 1; }
[[ -s "$page" && -s "$out/memory_timeline.json" ]] || { echo "check_page: $page or its .json is missing"; exit 1; }

flags=(--headless --no-sandbox --disable-gpu --no-first-run --window-size=1280,900)
# Chromium prints the page's console as lines holding CONSOLE (at level INFO, errors included); its
# own D-Bus and sandbox warnings on a machine without a session bus are not the page's.
"$browser" "${flags[@]}" --screenshot="$shot" --enable-logging=stderr --v=0 "file://$page" \
  >"$out/chromium.log" 2>&1 || { cat "$out/chromium.log"; echo "check_page: chromium failed"; exit 1; }
if grep -q "CONSOLE" "$out/chromium.log"; then
  grep "CONSOLE" "$out/chromium.log"
  echo "check_page: the page logged to the console"
  exit 1
fi
[[ -s "$shot" ]] || { echo "check_page: no screenshot at $shot"; exit 1; }

"$browser" "${flags[@]}" --dump-dom "file://$page" >"$out/dom.html" 2>/dev/null
areas=$(grep -o '<polygon class="area"' "$out/dom.html" | wc -l)
[[ "$areas" -eq 6 ]] || { echo "check_page: $areas category areas in the DOM, expected 6 (one per category)"; exit 1; }
for want in 'id="timeline"' 'id="peak"' 'id="peak-live"' 'id="activation-peak-live"' 'data-phase="forward"' \
            'data-phase="backward"' 'data-phase="replay ' 'data-phase="optimizer"' 'held by checkpoint segment' \
            'saved by '; do
  grep -qF "$want" "$out/dom.html" || { echo "check_page: the rendered page lacks $want"; exit 1; }
done
rows=$(grep -o '<tr><td>[0-9]' "$out/dom.html" | wc -l)
[[ "$rows" -ge 2 ]] || { echo "check_page: the live tables have $rows rows"; exit 1; }
echo "check_page: ok; screenshot at $shot, page at $page"
