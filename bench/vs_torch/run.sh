#!/usr/bin/env bash
# run.sh: reel against PyTorch, side by side in one run. Builds reel's half (reel_steps) if needed,
# checks that PyTorch runs on OpenBLAS, then runs each workload in alternating processes (reel,
# torch, reel, torch, ...) for several rounds and prints one table: each framework's median step
# time over the rounds, the ratio and the target of issue 15 for that row (gpt_bf16, the char GPT
# step in mixed precision, autocast to bf16 in both, has none: issue 27 asks for its ratio, and a
# line under the table gives each framework's bf16 step over its f32 one, gpt_bf16 / gpt_tied).
#
#   tools/setup_bench.sh && bench/vs_torch/run.sh              # the full table (about 5 minutes idle)
#   bench/vs_torch/run.sh --quick                             # one short round: a sanity check
#   bench/vs_torch/run.sh --rounds 7 --only mlp128,chain      # more rounds, some workloads
#   bench/vs_torch/run.sh --only gpt_tied,gpt_bf16            # f32 against bf16 autocast
#   bench/vs_torch/run.sh --idle-wait 60                      # each pair waits up to 60 s for idle CPUs
#   bench/vs_torch/run.sh --glibc-malloc                      # glibc's malloc defaults (see below)
#
# Why alternating processes: the machine is shared and its load moves over minutes. Interleaving
# the two frameworks round by round gives both the same conditions on average, and the median over
# rounds drops a round that an unlucky burst of load slowed down. The per-round ratios' range is
# printed beside the medians, so a table taken under shifting load shows itself. On 2 cores even
# one other busy process matters: a 2-thread OpenMP region waits for the time slice of whichever
# thread the scheduler parked, so a step of many short parallel regions can slow down tenfold.
# So each process's log line carries the share of the CPUs other processes used while it ran, and
# the table's medians are taken over the quiet rounds (neither process disturbed) when there are
# any. --idle-wait starts each reel/torch pair only once the CPUs have been idle for a second (or
# the wait ran out), which makes quiet rounds likelier.
#
# Both frameworks run with glibc's malloc told to keep what is freed (MALLOC_MMAP_THRESHOLD_ at its
# 32 MiB maximum, no heap trimming). By default glibc serves blocks above a threshold with mmap and
# trims the heap, so a step that frees and reallocates its large buffers faults them back in,
# zeroed, step after step; PyTorch's CPU tensors come straight from malloc and lose much of their
# speed to it, in a bimodal way that makes medians swing from run to run (reel's small MLP steps lose
# time to it too). That is the allocator, not the framework; --glibc-malloc measures it anyway.
#
# Environment: BUILD_DIR (default build), PYTHON (default /usr/bin/python3: Debian's python3-torch),
# THREADS (default 2, for both frameworks).
set -euo pipefail
cd "$(dirname "$0")/../.."

build_dir=${BUILD_DIR:-build}
python=${PYTHON:-/usr/bin/python3}
threads=${THREADS:-2}
rounds=5
quick=0
only=""
idle_wait=0
glibc_malloc=0
while (($#)); do
  case $1 in
    --quick) quick=1; rounds=1 ;;
    --rounds) rounds=$2; shift ;;
    --only) only=$2; shift ;;
    --idle-wait) idle_wait=$2; shift ;;
    --glibc-malloc) glibc_malloc=1 ;;
    -h|--help) sed -n '2,35p' "$0"; exit 0 ;;
    *) echo "run.sh: unknown option '$1' (--quick, --rounds N, --only w1,w2, --idle-wait S, --glibc-malloc)" >&2
       exit 2 ;;
  esac
  shift
done

# workload: timed steps and warm-up steps, full and --quick. Sized so the full run stays near five
# minutes on 2 idle cores: a few seconds of timed work per process at most, except the chain.
declare -A steps=([mlp128]=30 [mlp512]=20 [accum8x16]=30 [gpt_tied]=10 [gpt_untied]=10 [gpt_bf16]=10 [chain]=3)
declare -A warmup=([mlp128]=5 [mlp512]=3 [accum8x16]=5 [gpt_tied]=3 [gpt_untied]=3 [gpt_bf16]=3 [chain]=1)
if ((quick)); then
  steps=([mlp128]=5 [mlp512]=3 [accum8x16]=5 [gpt_tied]=2 [gpt_untied]=2 [gpt_bf16]=2 [chain]=1)
  warmup=([mlp128]=2 [mlp512]=1 [accum8x16]=2 [gpt_tied]=1 [gpt_untied]=1 [gpt_bf16]=1 [chain]=1)
fi
workloads=(mlp128 mlp512 accum8x16 gpt_tied gpt_untied gpt_bf16 chain)
workloads_all=("${workloads[@]}")
if [[ -n $only ]]; then
  IFS=, read -r -a workloads <<< "$only"
  for w in "${workloads[@]}"; do
    [[ -n ${steps[$w]:-} ]] || { echo "run.sh: unknown workload '$w' (${workloads_all[*]})" >&2; exit 2; }
  done
fi

# ---- reel's half: configure once, then bring reel_steps up to date ----
if [[ ! -f $build_dir/build.ninja && ! -f $build_dir/Makefile ]]; then
  generator=()
  command -v ninja > /dev/null && generator=(-G Ninja)
  cmake -S . -B "$build_dir" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release > /dev/null
fi
if ! out=$(cmake --build "$build_dir" --target reel_steps -j"$(nproc)" 2>&1); then
  echo "$out" >&2
  exit 1
fi
reel_steps=$build_dir/bench/vs_torch/reel_steps

# ---- PyTorch's half: refuse to compare against the reference BLAS ----
if ! blas=$("$python" bench/vs_torch/torch_steps.py --blas --threads "$threads"); then
  echo "run.sh: PyTorch is not on OpenBLAS; run tools/setup_bench.sh first (no comparison made)" >&2
  exit 1
fi
torch_version=$("$python" -c 'import torch; print(torch.__version__)')

# The CPUs' busy and idle time so far, in clock ticks, from the kernel's counters (busy: user,
# nice, system, irq, softirq, steal; idle: idle, iowait).
cpu_ticks() {
  local a
  read -r -a a < /proc/stat
  echo $((a[1] + a[2] + a[3] + a[6] + a[7] + a[8])) $((a[4] + a[5]))
}
# CPU time (ticks) of this script's finished children, the benchmark processes among them.
child_ticks() {
  local s f
  s=$(< "/proc/$$/stat")
  read -r -a f <<< "${s##*) }"  # the fields after the command name: state is f[0], cutime f[13]
  echo $((f[13] + f[14]))
}
# Percent of the CPUs' time busy over the next second.
busy_percent() {
  local b0 i0 b1 i1
  read -r b0 i0 <<< "$(cpu_ticks)"
  sleep 1
  read -r b1 i1 <<< "$(cpu_ticks)"
  echo $((100 * (b1 - b0) / (b1 - b0 + i1 - i0 + 1)))
}
# Runs one benchmark process and appends its line to the log, tagged with the round, the CPUs'
# busy percent before the pair and "other_percent": the share of the CPUs' time that processes
# other than this script's used while it ran (the load that disturbed it).
run_one() {
  local b0 i0 c0 b1 i1 c1 out other
  read -r b0 i0 <<< "$(cpu_ticks)"
  c0=$(child_ticks)
  out=$("$@" | grep '^vs_torch ')
  read -r b1 i1 <<< "$(cpu_ticks)"
  c1=$(child_ticks)
  other=$(((b1 - b0) - (c1 - c0)))
  if ((other < 0)); then other=0; fi
  other=$((100 * other / (b1 - b0 + i1 - i0 + 1)))
  echo "{\"round\": $r, \"busy_before\": $busy, \"other_percent\": $other, ${out#vs_torch \{}" >> "$log"
}

export OMP_NUM_THREADS=$threads  # both frameworks' OpenMP pools (and OpenBLAS's, which shares torch's)
malloc_note="glibc malloc defaults"
if ((!glibc_malloc)); then
  export MALLOC_MMAP_THRESHOLD_=33554432 MALLOC_TRIM_THRESHOLD_=1099511627776  # keep freed memory (above)
  malloc_note="malloc keeps freed memory"
fi
log=$build_dir/vs_torch.log
: > "$log"
echo "reel vs PyTorch $torch_version on $blas; $threads threads each, $rounds round(s), $(nproc) cores, $malloc_note"
echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
for ((r = 1; r <= rounds; r++)); do
  for w in "${workloads[@]}"; do
    busy=-1  # not measured
    if ((idle_wait > 0)); then
      end=$((SECONDS + idle_wait))
      while busy=$(busy_percent) && ((busy >= 10 && SECONDS < end)); do :; done
    fi
    args=("$w" "${steps[$w]}" --warmup "${warmup[$w]}" --threads "$threads")
    run_one "$reel_steps" "${args[@]}"
    run_one "$python" bench/vs_torch/torch_steps.py "${args[@]}"
    if [[ -t 2 ]]; then printf '\rround %d/%d: %-10s' "$r" "$rounds" "$w" >&2; fi  # progress, on a terminal
  done
done
if [[ -t 2 ]]; then printf '\r%40s\r' '' >&2; fi
echo "load average at end:   $(cut -d' ' -f1-3 /proc/loadavg)"
echo "per-step times of every process: $log"
echo

"$python" - "$log" << 'EOF'
# The table: per workload and framework, the median over rounds of each process's median step,
# over the rounds in which neither process was disturbed by other load when there are any.
import json, sys
from collections import defaultdict

QUIET = 5  # percent of the CPUs' time used by other processes below which a process counts as undisturbed
runs = defaultdict(dict)  # (framework, workload) -> round -> median ms
other = defaultdict(dict)  # (framework, workload) -> round -> other processes' share of the CPUs
best = {}  # (framework, workload) -> the fastest step of any round
params = {}
for line in open(sys.argv[1]):
    r = json.loads(line)
    key = (r["framework"], r["workload"])
    runs[key][r["round"]] = r["median_ms"]
    other[key][r["round"]] = r["other_percent"]
    best[key] = min(r["ms"] + [best.get(key, float("inf"))])
    params[key] = r["params"]

def median(xs):
    xs = sorted(xs)
    return xs[len(xs) // 2]  # the upper median, as both halves compute it

def compare(a, b):
    """(a's median, b's median, ratio, 'quiet/all', per-round ratio range, best ratio) over the rounds
    both ran in, only the quiet ones (neither disturbed) when there are any; None if either is missing."""
    if a not in runs or b not in runs:
        return None
    both = sorted(set(runs[a]) & set(runs[b]))
    quiet = [k for k in both if other[a][k] < QUIET and other[b][k] < QUIET]
    use = quiet or both
    am, bm = median([runs[a][k] for k in use]), median([runs[b][k] for k in use])
    pairs = [runs[a][k] / runs[b][k] for k in use]
    spread = "%.2f-%.2f" % (min(pairs), max(pairs)) if len(pairs) > 1 else ""
    return am, bm, am / bm, "%d/%d" % (len(quiet), len(both)), spread, best[a] / best[b]

# Issue 15's targets (reel's step at most this times PyTorch's); gpt_bf16 has none (issue 27 asks
# for its ratio only).
targets = {"mlp128": 0.8, "mlp512": 0.7, "gpt_tied": 0.75, "gpt_untied": 0.75, "accum8x16": 0.8, "chain": 0.9}
names = {"mlp128": "MLP SGD step, batch 128", "mlp512": "MLP SGD step, batch 512",
         "accum8x16": "MLP 8 x 16 accumulated", "gpt_tied": "char GPT AdamW step, tied",
         "gpt_untied": "char GPT AdamW step, untied", "gpt_bf16": "char GPT, tied, bf16 autocast",
         "chain": "chain 64 x Linear+GELU fwd+bwd"}
rows = []
for w in names:
    c = compare(("reel", w), ("torch", w))
    if c is None:
        continue
    rm, tm, ratio, quiet, spread, best_ratio = c
    target, met = ("<= %.2fx PyTorch" % targets[w], "yes" if ratio <= targets[w] else "no") if w in targets \
        else ("issue 27: report", "-")
    rows.append((names[w], "%.2f" % rm, "%.2f" % tm, "%.2f" % ratio, quiet, spread, "%.2f" % best_ratio, target, met))
    own = compare(("reel", w), ("reel", "mlp128")) if w == "accum8x16" else None
    if own is not None:
        rm, om, ratio, quiet, spread, best_ratio = own
        rows.append(("  same, vs reel's own 1 x 128", "%.2f" % rm, "(%.2f)" % om, "%.2f" % ratio, quiet, spread,
                     "%.2f" % best_ratio, "<= 1.60x reel 1 x 128", "yes" if ratio <= 1.6 else "no"))

header = ("workload", "reel ms", "PyTorch ms", "ratio", "quiet", "per round", "best", "target", "met")
widths = [max(len(str(row[i])) for row in rows + [header]) for i in range(len(header))]
def show(row):
    print("  ".join(str(c).ljust(widths[i]) if i == 0 else str(c).rjust(widths[i]) for i, c in enumerate(row)))
show(header)
show(["-" * n for n in widths])
for row in rows:
    show(row)
print("""
ms: the median over rounds of each process's median step, over the quiet rounds (other processes used
under %d%% of the CPUs while either of the two ran) when there are any, else over all; quiet: quiet
rounds / rounds; ratio: reel's / PyTorch's (below 1: reel is faster); per round: the range of the same
ratio round by round; best: the ratio of the fastest single steps of all rounds. The accumulation's
second row compares with reel's own 1 x 128 step (in parentheses).""" % QUIET)

# Mixed precision against each framework's own f32 step: gpt_bf16 is gpt_tied under bf16 autocast.
own = [(label, compare((fw, "gpt_bf16"), (fw, "gpt_tied"))) for fw, label in (("reel", "reel"), ("torch", "PyTorch"))]
if all(c is not None for _, c in own):
    print("\nbf16 autocast over f32, each framework's own char GPT step (gpt_bf16 / gpt_tied; below 1: bf16 is faster):")
    for label, (bm, fm, ratio, quiet, spread, best_ratio) in own:
        print("  %-8s %8.2f / %8.2f ms = %.2f  (quiet %s%s, best %.2f)"
              % (label, bm, fm, ratio, quiet, ", per round " + spread if spread else "", best_ratio))

print("\nparameters (reel, PyTorch):")
bad = False
for w in names:
    if ("reel", w) in params and ("torch", w) in params:
        a, b = params[("reel", w)], params[("torch", w)]
        bad |= a != b
        print("  %-11s %10d %10d  %s" % (w, a, b, "same" if a == b else "MISMATCH"))
sys.exit(1 if bad else 0)
EOF
