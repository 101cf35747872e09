#!/usr/bin/env bash
# A run in pieces equals the run in one go, bit for bit: PROGRAM ARGS run whole (--save), then the
# same run stopped after each step in STOPS (--checkpoint-dir, --stop-at; from the second piece on
# with --resume) and finished with --resume (--save); the two weight files must be the same bits
# (safetensors_diff --atol 0). Each piece is a separate process: nothing survives but the folder.
#
#   tests/resume_check.sh SAFETENSORS_DIFF OUT_DIR STOPS PROGRAM [ARGS...]    (STOPS: 7,16)
set -euo pipefail
diff_tool=$1 out=$2 stops=$3
shift 3
rm -rf "$out"
mkdir -p "$out"
"$@" --save "$out/whole.safetensors" >"$out/whole.log" 2>&1 || { cat "$out/whole.log"; exit 1; }
resume=()
for stop in ${stops//,/ }; do
  "$@" --checkpoint-dir "$out/checkpoints" --stop-at "$stop" "${resume[@]}" >"$out/piece_$stop.log" 2>&1 ||
    { cat "$out/piece_$stop.log"; exit 1; }
  grep -q "stopped after optimizer step $stop" "$out/piece_$stop.log" || { cat "$out/piece_$stop.log"; exit 1; }
  resume=(--resume)
done
"$@" --checkpoint-dir "$out/checkpoints" --resume --save "$out/pieces.safetensors" >"$out/last.log" 2>&1 ||
  { cat "$out/last.log"; exit 1; }
grep "^resume:" "$out"/piece_*.log "$out/last.log" || true
grep -h "skipped window" "$out/whole.log" "$out/last.log" || true  # the scaler's counts, whole and resumed
"$diff_tool" "$out/whole.safetensors" "$out/pieces.safetensors" --atol 0 | tail -1
