#!/usr/bin/env bash
# run.sh: reel against PyTorch, side by side in one run. Builds reel's half (reel_steps) if needed,
# checks that PyTorch runs on OpenBLAS, then runs each workload in alternating processes (reel,
# torch, reel, torch, ...) for several rounds and prints one table: each framework's median step
# time over the rounds, the ratio and the target of issue 15 for that row.
#
#   tools/setup_bench.sh && bench/vs_torch/run.sh              # the full table (about 5 minutes idle)
#   bench/vs_torch/run.sh --quick                             # one short round: a sanity check
#   bench/vs_torch/run.sh --rounds 7 --only mlp128,chain      # more rounds, some workloads
#   bench/vs_torch/run.sh --idle-wait 60                      # each pair waits up to 60 s for idle CPUs
#
# Why alternating processes: the machine is shared and its load moves over minutes. Interleaving
# the two frameworks round by round gives both the same conditions on average, and the median over
# rounds drops a round that an unlucky burst of load slowed down. The per-round ratios' range is
# printed beside the medians, so a table taken under shifting load shows itself. On 2 cores even
# one other busy process matters: a 2-thread OpenMP region waits for the time slice of whichever
# thread the scheduler parked, so a step of many short parallel regions can slow down tenfold.
# --idle-wait starts each reel/torch pair only once the CPUs have been idle for a second (or the
# wait ran out), and the table counts the pairs that started on busy CPUs.
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
while (($#)); do
  case $1 in
    --quick) quick=1; rounds=1 ;;
    --rounds) rounds=$2; shift ;;
    --only) only=$2; shift ;;
    --idle-wait) idle_wait=$2; shift ;;
    -h|--help) sed -n '2,24p' "$0"; exit 0 ;;
    *) echo "run.sh: unknown option '$1' (--quick, --rounds N, --only w1,w2, --idle-wait S)" >&2; exit 2 ;;
  esac
  shift
done

# workload: timed steps and warm-up steps, full and --quick. Sized so the full run stays near five
# minutes on 2 idle cores: a few seconds of timed work per process at most, except the chain.
declare -A steps=([mlp128]=30 [mlp512]=20 [accum8x16]=30 [gpt_tied]=10 [gpt_untied]=10 [chain]=3)
declare -A warmup=([mlp128]=5 [mlp512]=3 [accum8x16]=5 [gpt_tied]=3 [gpt_untied]=3 [chain]=1)
if ((quick)); then
  steps=([mlp128]=5 [mlp512]=3 [accum8x16]=5 [gpt_tied]=2 [gpt_untied]=2 [chain]=1)
  warmup=([mlp128]=2 [mlp512]=1 [accum8x16]=2 [gpt_tied]=1 [gpt_untied]=1 [chain]=1)
fi
workloads=(mlp128 mlp512 accum8x16 gpt_tied gpt_untied chain)
if [[ -n $only ]]; then
  IFS=, read -r -a workloads <<< "$only"
  for w in "${workloads[@]}"; do
    [[ -n ${steps[$w]:-} ]] || { echo "run.sh: unknown workload '$w' (${!steps[*]})" >&2; exit 2; }
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

# Percent of the CPUs' time busy over the next second, from the kernel's counters (user, nice,
# system, irq, softirq, steal against idle and iowait).
busy_percent() {
  local a b
  read -r -a a < /proc/stat
  sleep 1
  read -r -a b < /proc/stat
  local busy=$(((b[1] + b[2] + b[3] + b[6] + b[7] + b[8]) - (a[1] + a[2] + a[3] + a[6] + a[7] + a[8])))
  local idle=$(((b[4] + b[5]) - (a[4] + a[5])))
  echo $((100 * busy / (busy + idle + 1)))
}

export OMP_NUM_THREADS=$threads  # both frameworks' OpenMP pools (and OpenBLAS's, which shares torch's)
log=$build_dir/vs_torch.log
: > "$log"
echo "reel vs PyTorch $torch_version on $blas; $threads threads each, $rounds round(s), $(nproc) cores"
echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
for ((r = 1; r <= rounds; r++)); do
  for w in "${workloads[@]}"; do
    busy=-1  # not measured
    if ((idle_wait > 0)); then
      end=$((SECONDS + idle_wait))
      while busy=$(busy_percent) && ((busy >= 10 && SECONDS < end)); do :; done
    fi
    args=("$w" "${steps[$w]}" --warmup "${warmup[$w]}" --threads "$threads")
    tag="s/^vs_torch {/{\"round\": $r, \"busy_before\": $busy, /"
    "$reel_steps" "${args[@]}" | grep '^vs_torch ' | sed "$tag" >> "$log"
    "$python" bench/vs_torch/torch_steps.py "${args[@]}" | grep '^vs_torch ' | sed "$tag" >> "$log"
    if [[ -t 2 ]]; then printf '\rround %d/%d: %-10s' "$r" "$rounds" "$w" >&2; fi  # progress, on a terminal
  done
done
if [[ -t 2 ]]; then printf '\r%40s\r' '' >&2; fi
echo "load average at end:   $(cut -d' ' -f1-3 /proc/loadavg)"
echo "per-step times of every process: $log"
echo

"$python" - "$log" << 'EOF'
# The table: per workload and framework, the median over rounds of each process's median step.
import json, sys
from collections import defaultdict

runs = defaultdict(dict)  # (framework, workload) -> round -> median ms
best = {}  # (framework, workload) -> the fastest step of any round
params = {}
busy_pairs, pairs = 0, 0
for line in open(sys.argv[1]):
    r = json.loads(line)
    if r["framework"] == "reel":
        pairs += 1
        busy_pairs += r["busy_before"] >= 10
    runs[(r["framework"], r["workload"])][r["round"]] = r["median_ms"]
    best[(r["framework"], r["workload"])] = min(r["ms"] + [best.get((r["framework"], r["workload"]), float("inf"))])
    params[(r["framework"], r["workload"])] = r["params"]

def median(xs):
    xs = sorted(xs)
    return xs[len(xs) // 2]  # the upper median, as both halves compute it

def med(fw, w):
    return median(runs[(fw, w)].values()) if (fw, w) in runs else None

def ratio_range(a, b):
    """min-max over rounds of a's time over b's in the same round."""
    pairs = [a[k] / b[k] for k in a if k in b]
    return "%.2f-%.2f" % (min(pairs), max(pairs)) if len(pairs) > 1 else ""

targets = {"mlp128": 0.8, "mlp512": 0.7, "gpt_tied": 0.75, "gpt_untied": 0.75, "accum8x16": 0.8, "chain": 0.9}
names = {"mlp128": "MLP SGD step, batch 128", "mlp512": "MLP SGD step, batch 512",
         "accum8x16": "MLP 8 x 16 accumulated", "gpt_tied": "char GPT AdamW step, tied",
         "gpt_untied": "char GPT AdamW step, untied", "chain": "chain 64 x Linear+GELU fwd+bwd"}
rows = []
for w in names:
    rm, tm = med("reel", w), med("torch", w)
    if rm is None or tm is None:
        continue
    ratio = rm / tm
    rows.append((names[w], "%.2f" % rm, "%.2f" % tm, "%.2f" % ratio,
                 ratio_range(runs[("reel", w)], runs[("torch", w)]),
                 "%.2f" % (best[("reel", w)] / best[("torch", w)]), "<= %.2fx PyTorch" % targets[w],
                 "yes" if ratio <= targets[w] else "no"))
    if w == "accum8x16" and med("reel", "mlp128") is not None:
        own = rm / med("reel", "mlp128")
        rows.append(("  same, vs reel's own 1 x 128", "%.2f" % rm, "", "%.2f" % own,
                     ratio_range(runs[("reel", w)], runs[("reel", "mlp128")]),
                     "%.2f" % (best[("reel", w)] / best[("reel", "mlp128")]), "<= 1.60x reel 1 x 128",
                     "yes" if own <= 1.6 else "no"))

header = ("workload", "reel ms", "PyTorch ms", "ratio", "per round", "best", "target", "met")
widths = [max(len(str(row[i])) for row in rows + [header]) for i in range(len(header))]
def show(row):
    print("  ".join(str(c).ljust(widths[i]) if i == 0 else str(c).rjust(widths[i]) for i, c in enumerate(row)))
show(header)
show(["-" * n for n in widths])
for row in rows:
    show(row)
print("\nms: the median over rounds of each process's median step; ratio: reel's / PyTorch's (below 1: reel is "
      "faster);\nper round: the range of the same ratio round by round; best: the ratio of the fastest single "
      "steps,\nthe least disturbed by other load (a wide per-round range says the load moved during the run)")

if any(json.loads(line)["busy_before"] >= 0 for line in open(sys.argv[1])):
    print("\n%d of %d reel/PyTorch pairs started on busy CPUs (the idle wait ran out)" % (busy_pairs, pairs))

print("\nparameters (reel, PyTorch):")
bad = False
for w in names:
    if ("reel", w) in params and ("torch", w) in params:
        a, b = params[("reel", w)], params[("torch", w)]
        bad |= a != b
        print("  %-11s %10d %10d  %s" % (w, a, b, "same" if a == b else "MISMATCH"))
sys.exit(1 if bad else 0)
EOF
