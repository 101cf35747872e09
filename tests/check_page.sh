# The memory timeline page of a real training step, rendered by a browser: runs
# examples/fashion_mnist_mlp with --memory-timeline (a few tiny steps, checkpoint segments every two
# layers), renders the page with headless Chromium, and fails on any console message (the page has
# no script, so any message is an error: "Uncaught ...", a failed load), on a missing or empty
# screenshot, or when the rendered DOM lacks the SVG areas, the phases, the peak marker or the live
# tables. Twice: on cpu (every category stacked: 6 areas, no host side), then, where the build
# serves a cuda device (emulated or real), on cuda with --offload all, whose page must draw the host
# side: 5 device areas above the axis and one "host (offloaded)" band below it, with a non-zero peak
# in the legend and its own live table. Skips (exit 77) only where chromium is not installed.
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
flags=(--headless --no-sandbox --disable-gpu --no-first-run --window-size=1280,900)

# check_page NAME AREAS HOST EXAMPLE_ARGS...: one run of the example and its page in $out/NAME.
# AREAS: the device's category areas expected; HOST: 1 when the page must draw the host side.
check_page() {
  local name=$1 want_areas=$2 want_host=$3
  shift 3
  local dir=$out/$name
  mkdir -p "$dir"
  local page=$dir/memory_timeline.html shot=$dir/memory_timeline.png
  rm -f "$page" "$shot" "$dir/memory_timeline.json"

  "$example" --train-limit 600 --test-limit 100 --quiet --max-steps 3 --batch 64 --checkpoint every:2 \
    --memory-timeline "$page" "$@" | tee "$dir/example.log"
  grep -q "memory timeline: step 2" "$dir/example.log" || { echo "check_page $name: the example did not report the timeline"; exit 1; }
  [[ -s "$page" && -s "$dir/memory_timeline.json" ]] || { echo "check_page $name: $page or its .json is missing"; exit 1; }

  # Chromium prints the page's console as lines holding CONSOLE (at level INFO, errors included); its
  # own D-Bus and sandbox warnings on a machine without a session bus are not the page's.
  "$browser" "${flags[@]}" --screenshot="$shot" --enable-logging=stderr --v=0 "file://$page" \
    >"$dir/chromium.log" 2>&1 || { cat "$dir/chromium.log"; echo "check_page $name: chromium failed"; exit 1; }
  if grep -q "CONSOLE" "$dir/chromium.log"; then
    grep "CONSOLE" "$dir/chromium.log"
    echo "check_page $name: the page logged to the console"
    exit 1
  fi
  [[ -s "$shot" ]] || { echo "check_page $name: no screenshot at $shot"; exit 1; }

  "$browser" "${flags[@]}" --dump-dom "file://$page" >"$dir/dom.html" 2>/dev/null
  local areas host_bands
  areas=$(grep -o '<polygon class="area"' "$dir/dom.html" | wc -l)
  [[ "$areas" -eq "$want_areas" ]] || { echo "check_page $name: $areas category areas in the DOM, expected $want_areas"; exit 1; }
  host_bands=$({ grep -o '<polygon class="host-area"' "$dir/dom.html" || true; } | wc -l)  # none on cpu
  [[ "$host_bands" -eq "$want_host" ]] || { echo "check_page $name: $host_bands host bands in the DOM, expected $want_host"; exit 1; }
  local wants=('id="timeline"' 'id="peak"' 'id="peak-live"' 'id="activation-peak-live"' 'data-phase="forward"'
               'data-phase="backward"' 'data-phase="replay ' 'data-phase="optimizer"' 'held by checkpoint segment'
               'saved by ')
  if [[ "$want_host" -eq 1 ]]; then
    wants+=('host (offloaded) (peak ' 'id="host-peak-live"')
    # The offloaded saves were on the host: its peak in the legend is not zero.
    if grep -qF 'host (offloaded) (peak 0 B)' "$dir/dom.html"; then
      echo "check_page $name: the host side's peak is 0 B"
      exit 1
    fi
  fi
  for want in "${wants[@]}"; do
    grep -qF "$want" "$dir/dom.html" || { echo "check_page $name: the rendered page lacks $want"; exit 1; }
  done
  local rows
  rows=$(grep -o '<tr><td>[0-9]' "$dir/dom.html" | wc -l)
  [[ "$rows" -ge 2 ]] || { echo "check_page $name: the live tables have $rows rows"; exit 1; }
  echo "check_page $name: ok; screenshot at $shot, page at $page"
}

check_page cpu 6 0
# A build that serves cuda (emulated by default) answers this with a device; a cpu-only one does not.
if "$example" --train-limit 64 --test-limit 64 --quiet --max-steps 1 \
     --batch 64 --device cuda >/dev/null 2>&1; then
  check_page cuda_offload 5 1 --device cuda --offload all
else
  echo "check_page: no cuda device in this build: the host side's page is not checked"
fi
