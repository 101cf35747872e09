#!/usr/bin/env bash
# Kill and resume, bit for bit (docs/benchmarks.md, "Runs that survive a kill"): each case runs a
# training once uninterrupted (--save), then again with --checkpoint-dir, --save-every and
# --resume, killed with SIGKILL at random moments and started again each time with the same
# command, until a start runs to the end; the final weights must equal the uninterrupted run's bit
# for bit (safetensors_diff --atol 0). A kill that finds a checkpoint's temporary in the folder
# came during a save. Cases: char_gpt f32 with dropout, sqrt recomputation and 4 micro-batches (a
# checkpoint every step, so that kills land inside saves); char_gpt f16 on (emulated) cuda with its
# loss scaler started at 10^6 (windows skipped for overflow inside the run); mpirun -np 2 char_gpt --dist --zero 3 (each
# start in its own session, killed whole: mpirun and both ranks); fashion_mnist_mlp over 3 epochs with
# a cosine schedule; and a re-shard: fashion_mnist_mlp under --zero 3 killed 5 times on 2 ranks and
# finished on 1 (equal within 1e-6: the same samples, the sums in another order). The last column is what the checkpoints cost at that --save-every: the last
# start's saves' time against a whole run's. Then the cost at --save-every 100 on char_gpt's default
# model (KILL_RESUME_CASES picks the parts: gpt,gpt_f16,gpt_zero3,reshard,mlp,cost).
#
#   bench/kill_resume.sh [build dir=build] [kills per case=20] [seed=1]
# tests/CMakeLists.txt runs it with 3 kills per case on char_gpt only (example_gpt_kill_resume).
set -euo pipefail
build=${1:-build}
kills=${2:-20}
seed=${3:-1}
cases=${KILL_RESUME_CASES:-gpt,gpt_f16,gpt_zero3,reshard,mlp,cost}
gpt="$build/examples/char_gpt" mlp="$build/examples/fashion_mnist_mlp" diff_tool="$build/examples/safetensors_diff"
for p in "$gpt" "$mlp" "$diff_tool"; do [ -x "$p" ] || { echo "kill_resume: $p not built" >&2; exit 1; }; done
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
RANDOM=$seed

# kill_session <sid>: SIGKILL to every process of the session (a start run under setsid: mpirun and
# its ranks, which Open MPI puts in process groups of their own), read from /proc.
kill_session() {
  local f line fields pids=()
  for f in /proc/[0-9]*/stat; do  # no process started per entry: the kill lands at once
    { read -r line <"$f"; } 2>/dev/null || continue  # gone since the glob
    read -r -a fields <<<"${line##*) }"  # state ppid pgrp session ...
    [ "${fields[3]:-}" = "$1" ] && pids+=("${f//[^0-9]/}")
  done
  ((${#pids[@]})) && kill -9 "${pids[@]}" 2>/dev/null
  return 0
}

# The newest checkpoint's step in a folder (0: none).
newest_step() {  # in the shell alone: polled every 10 ms while saves come every 30 ms
  local f n s=0
  for f in "$1"/step-*.safetensors; do
    [ -e "$f" ] || continue
    n=${f##*/step-}
    n=${n%.safetensors}
    [[ $n =~ ^[0-9]+$ ]] || continue  # a rank's shard (step-N.rank-R): its manifest, written last, counts
    n=$((10#$n))
    ((n > s)) && s=$n
  done
  echo "$s"
}

# one_case <name> <save every> <program and args...>
one_case() {
  local name=$1 every=$2
  shift 2
  local dir=$tmp/$name start whole_s killed=0 in_save=0 starts=0 status interval=""
  mkdir -p "$dir"
  start=$(date +%s.%N)
  "$@" --save "$dir/whole.safetensors" >"$dir/whole.log" 2>&1 || { cat "$dir/whole.log" >&2; exit 1; }
  whole_s=$(echo "$(date +%s.%N) - $start" | bc)
  local total  # the run's optimizer steps, as its log says ("training: N steps ...")
  total=$(sed -n 's/^training: \([0-9]*\) steps.*/\1/p' "$dir/whole.log" | head -1)
  [ -n "$total" ] || { cat "$dir/whole.log" >&2; echo "kill_resume: $name: no 'training: N steps' line" >&2; exit 1; }
  while :; do
    starts=$((starts + 1))
    # Its own session (setsid), so that the kill takes mpirun and every rank at once
    # (kill_session), as a lost machine would.
    setsid "$@" --checkpoint-dir "$dir/checkpoints" --save-every "$every" --resume --save "$dir/pieces.safetensors" \
      >"$dir/start_$starts.log" 2>&1 &
    local pid=$!
    if ((killed < kills)); then
      # Kill i lands once this start has saved past the i-th of `kills` random steps spread over
      # the run (progress, not time: a start that runs faster than the whole run did is still
      # killed `kills` times), then at a random moment within one save interval (measured once,
      # between two saves of the first start), so that kills land in saves as often as saves take
      # the time; a start resumed past its step is killed that soon after it began.
      local span=$((total > 4 * every ? total - 2 * every : total))
      local target=$((span * killed / (kills + 1) + 1 + span * RANDOM / 32768 / (kills + 1)))
      while (($(newest_step "$dir/checkpoints") < target)) && kill -0 "$pid" 2>/dev/null; do sleep 0.01; done
      if [ -z "$interval" ]; then
        local seen t0
        seen=$(newest_step "$dir/checkpoints")
        while (($(newest_step "$dir/checkpoints") == seen)) && kill -0 "$pid" 2>/dev/null; do sleep 0.01; done
        seen=$(newest_step "$dir/checkpoints")
        t0=$(date +%s.%N)
        while (($(newest_step "$dir/checkpoints") == seen)) && kill -0 "$pid" 2>/dev/null; do sleep 0.01; done
        interval=$(echo "$(date +%s.%N) - $t0" | bc)
      fi
      sleep "$(awk -v d="$interval" -v r=$RANDOM 'BEGIN {printf "%.3f", d * r / 32768}')"
      if kill -0 "$pid" 2>/dev/null; then
        compgen -G "$dir/checkpoints/*.tmp" >/dev/null && in_save=$((in_save + 1))
        kill_session "$pid"
        wait "$pid" 2>/dev/null || true
        killed=$((killed + 1))
        continue
      fi
    fi
    status=0
    wait "$pid" || status=$?
    [ "$status" = 0 ] || { cat "$dir/start_$starts.log" >&2; echo "kill_resume: $name: start $starts failed" >&2; exit 1; }
    break
  done
  local same saves
  if "$diff_tool" "$dir/whole.safetensors" "$dir/pieces.safetensors" --atol 0 >"$dir/diff.log"; then same=yes; else same=NO; fi
  saves=$(sed -n 's/^checkpoints: \([0-9]*\) written .*, \([0-9.]*\) ms each on average$/\1 \2/p' "$dir/start_$starts.log")
  local cost
  cost=$(awk -v s="$saves" -v w="$whole_s" 'BEGIN {split(s, a, " "); printf "%.1f ms a save, %.2f %% of the run", a[2], 100 * a[1] * a[2] / 1000 / w}')
  local skipped
  skipped=$(sed -n 's/^loss scaler: .*, \([0-9]*\) skipped windows*$/, \1 windows skipped/p' "$dir/whole.log")
  printf "%-48s %6d %9d %7d  %-5s %s%s\n" "$name" "$killed" "$in_save" "$starts" "$same" "$cost" "$skipped"
  [ "$same" = yes ] || { tail -3 "$dir/diff.log" >&2; exit 1; }
}

# reshard_case <name> <save every> <kills> <args...>: fashion_mnist_mlp under --zero 3 on 2 ranks,
# killed `kills` times and resumed on 2, then finished on 1 rank (mpirun -np 1): the parts of 2 cut
# anew for 1. The windows are the same samples; only the order of the sums changes, so the weights
# equal the uninterrupted 2-rank run's within 1e-6, not bit for bit.
reshard_case() {
  local name=$1 every=$2 n_kills=$3
  shift 3
  local dir=${KILL_RESUME_KEEP:-$tmp}/reshard start whole_s killed=0 in_save=0 starts=0
  mkdir -p "$dir"
  start=$(date +%s.%N)
  mpirun -np 2 --oversubscribe "$@" --save "$dir/whole.safetensors" >"$dir/whole.log" 2>&1 || { cat "$dir/whole.log" >&2; exit 1; }
  whole_s=$(echo "$(date +%s.%N) - $start" | bc)
  while ((killed < n_kills)); do
    starts=$((starts + 1))
    setsid mpirun -np 2 --oversubscribe "$@" --checkpoint-dir "$dir/checkpoints" --save-every "$every" --resume \
      >"$dir/start_$starts.log" 2>&1 &
    local pid=$!
    # Once this start has written a checkpoint of its own, at a random moment within the next few
    # steps: every start gets a little further, and the 1-rank start finishes most of the run.
    local before now waited=0
    before=$(newest_step "$dir/checkpoints")
    now=$before
    while [ "$now" = "$before" ] && kill -0 "$pid" 2>/dev/null && ((waited < 3000)); do
      sleep 0.02
      waited=$((waited + 1))
      now=$(newest_step "$dir/checkpoints")
    done
    sleep "$(awk -v w="$whole_s" -v r=$RANDOM 'BEGIN {printf "%.3f", 0.02 * w * r / 32768}')"
    if ! kill -0 "$pid" 2>/dev/null; then wait "$pid" || true; break; fi
    compgen -G "$dir/checkpoints/*.tmp" >/dev/null && in_save=$((in_save + 1))
    kill_session "$pid"
    wait "$pid" 2>/dev/null || true
    killed=$((killed + 1))
  done
  starts=$((starts + 1))
  mpirun -np 1 "$@" --checkpoint-dir "$dir/checkpoints" --save-every "$every" --resume \
    --save "$dir/pieces.safetensors" >"$dir/start_$starts.log" 2>&1 || { cat "$dir/start_$starts.log" >&2; exit 1; }
  grep -q "resumed on 1" "$dir/start_$starts.log" && ! grep -q "nothing left to do" "$dir/start_$starts.log" ||
    { cat "$dir/start_$starts.log" >&2; echo "kill_resume: the 1-rank start did not re-shard and train" >&2; exit 1; }
  local from
  from=$(sed -n 's/^resume: from .*, after optimizer step \([0-9]*\)$/\1/p' "$dir/start_$starts.log")
  local same max
  if "$diff_tool" "$dir/whole.safetensors" "$dir/pieces.safetensors" --atol 1e-6 >"$dir/diff.log"; then same="1e-6"; else same=NO; fi
  max=$(sed -n 's/.*max|a-b| \([0-9.e+-]*\).*/\1/p' "$dir/diff.log" | tail -1)
  printf "%-48s %6d %9d %7d  %-5s 2 ranks to step %s, 1 rank from there: max |difference| %s\n" "$name" "$killed" \
    "$in_save" "$starts" "$same" "$from" "$max"
  [ "$same" != NO ] || { tail -3 "$dir/diff.log" >&2; exit 1; }
}

printf "kill -9 at random moments (seed %d), each start the same command with --resume; weights against the uninterrupted run's\n" "$seed"
printf "%-48s %6s %9s %7s  %-5s %s\n" case kills "in a save" starts same "the last start's saves (their share of a whole run)"
gpt_args=(--n-layer 2 --n-head 2 --n-embd 64 --block-size 64 --batch 16 --eval-windows 8 --sample-chars 0 --quiet
)
[[ ",$cases," == *",gpt,"* ]] &&
  one_case "char_gpt f32, dropout, sqrt, 4 micro-batches" 1 "$gpt" "${gpt_args[@]}" --dropout 0.1 --checkpoint sqrt \
    --accum-steps 4 --max-steps 200
[[ ",$cases," == *",gpt_f16,"* ]] &&
  one_case "char_gpt f16, scaler from 10^6, cuda (emulated)" 3 "$gpt" "${gpt_args[@]}" --precision f16 --device cuda \
    --max-steps 40 --loss-scale 1e6
[[ ",$cases," == *",gpt_zero3,"* ]] && command -v mpirun >/dev/null &&
  OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1 \
  one_case "mpirun -np 2 char_gpt --dist --zero 3, sqrt" 3 mpirun -np 2 --oversubscribe "$gpt" "${gpt_args[@]}" \
    --dist --zero 3 --optimizer adamw --checkpoint sqrt --max-steps 100
[[ ",$cases," == *",reshard,"* ]] && command -v mpirun >/dev/null &&
  OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1 \
  reshard_case "fashion_mnist_mlp --zero 3, 2 ranks then 1" 4 "$((kills < 5 ? kills : 5))" "$mlp" --train-limit 6000 --test-limit 100 \
    --batch 64 --epochs 3 --quiet --optimizer adamw --dist --zero 3
[[ ",$cases," == *",mlp,"* ]] &&
  one_case "fashion_mnist_mlp, 3 epochs, cosine" 4 "$mlp" --train-limit 2000 --test-limit 100 --batch 64 \
    --epochs 3 --quiet --schedule cosine

# What the checkpoints cost a default char_gpt run (3 blocks of width 96, 32 x 64 tokens a step):
# --save-every 100 over 300 steps, its saves' time against the run's.
if [[ ",$cases," == *",cost,"* ]]; then
  dir=$tmp/cost
  start=$(date +%s.%N)
  "$gpt" --max-steps 300 --eval-windows 8 --sample-chars 0 --quiet --checkpoint-dir "$dir" --save-every 100 \
    >"$tmp/cost.log" 2>&1 || { cat "$tmp/cost.log" >&2; exit 1; }
  run_s=$(echo "$(date +%s.%N) - $start" | bc)
  line=$(grep "^checkpoints:" "$tmp/cost.log")
  read -r n ms bytes < <(sed -n 's/^checkpoints: \([0-9]*\) written .*, \([0-9]*\) bytes), \([0-9.]*\) ms each.*/\1 \3 \2/p' <<<"$line")
  printf "\nchar_gpt's default model, 300 steps, --save-every 100: %d checkpoints of %d bytes, %.1f ms each, %.2f %% of the run's %.1f s\n" \
    "$n" "$bytes" "$ms" "$(echo "100 * $n * $ms / 1000 / $run_s" | bc -l)" "$run_s"
fi
exit 0
