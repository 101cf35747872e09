#!/usr/bin/env bash
# A simulated rank against a real one: char_gpt (tiny) as rank 0 of --simulate-ranks 2 on the meta
# device, and as rank 0 of a real two-rank job on emulated cuda (mpirun, --dist), both at --zero
# STAGE and profiled with --predict h100. Rank 0's memory report, its peak bytes by category and
# the predicted step (the collectives' records included) must be the same (tools/meta_digest.awk).
#
#   tests/meta_simulate_check.sh CHAR_GPT STAGE MPIEXEC [MPIEXEC ARGS...]   (the launcher for 2 ranks)
set -euo pipefail
gpt=$1 stage=$2
shift 2
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
common=(--n-layer 2 --n-head 2 --n-embd 32 --block-size 32 --batch 8 --max-steps 3 --eval-windows 8
        --sample-chars 0 --quiet --profile-steps 1 --predict h100 --zero "$stage" --checkpoint sqrt --accum-steps 2)
"$gpt" "${common[@]}" --profile "$tmp/meta.json" --device meta --simulate-ranks 2 >"$tmp/meta.out" 2>&1 ||
  { cat "$tmp/meta.out"; echo "meta_simulate_check: the simulated run failed" >&2; exit 1; }
"$@" "$gpt" "${common[@]}" --profile "$tmp/cuda.json" --device cuda --dist >"$tmp/cuda.out" 2>&1 ||
  { cat "$tmp/cuda.out"; echo "meta_simulate_check: the two-rank run failed" >&2; exit 1; }
awk -f "$here/../tools/meta_digest.awk" "$tmp/meta.out" >"$tmp/meta.digest"
awk -f "$here/../tools/meta_digest.awk" "$tmp/cuda.out" >"$tmp/cuda.digest"
grep -q "^rank 0 peak bytes" "$tmp/meta.digest" && grep -q "^step on h100" "$tmp/meta.digest" ||
  { cat "$tmp/meta.out"; echo "meta_simulate_check: no peak bytes or predicted step printed" >&2; exit 1; }
if ! diff "$tmp/cuda.digest" "$tmp/meta.digest"; then
  echo "meta_simulate_check: --zero $stage: the simulated rank 0 differs from the real one (< cuda, > meta)" >&2
  exit 1
fi
grep "^step on h100\|^rank 0 peak" "$tmp/meta.digest"
echo "meta_simulate_check: --zero $stage: the simulated rank 0 is the real one"
