#!/usr/bin/env bash
# Rewrites every generated table of the docs from a fresh run of the benchmark that makes it: one
# command for all the measured figures, so no figure in a doc is older than its last regeneration
# and none has to live in a code comment.
#
#   bench/tables.sh [build dir=build] [table names...]    # default: every table
#   bench/tables.sh build attention gemm16                 # only these
#   bench/tables.sh --list                                 # the names and their commands
#
# A generated table is a block of a Markdown file between two markers,
#   <!-- bench: NAME -->
#   ... (rewritten: a caption, then the benchmark's output in a code block)
#   <!-- /bench -->
# and the caption says where and when it was measured: the CPU model, its cores, the lscpu flags
# that decide the kernels' paths (AVX2, AVX-512 and its bf16/fp16, AMX), the load average before
# and after the run (a neighbour's load that came during a long run shows only in the second), the
# date and the exact command. A table whose benchmark is not built here, or whose
# tools are missing (mpirun, PyTorch), keeps its old text and the script says so; a benchmark that
# fails stops the script with its output, the doc untouched.
set -euo pipefail
cd "$(dirname "$0")/.."

# name | doc | command (run from the checkout's root; BUILD is the build dir)
tables=(
  "gemm16|docs/benchmarks.md|BUILD/bench/bench_gemm16 --rounds 3 --backward"
  "gemm_engines|docs/benchmarks.md|BUILD/bench/bench_gemm_engines --rounds 5 --threads 1,2"
  "attention|docs/benchmarks.md|BUILD/bench/bench_attention --threads 2"
  "op_overhead|docs/benchmarks.md|BUILD/bench/bench_op_overhead 5"
  "checkpoint|docs/benchmarks.md|BUILD/bench/bench_checkpoint cpu"
  "memory_plan|docs/benchmarks.md|BUILD/bench/bench_memory_plan cpu 16 256 64 3"
  "memory_lab|docs/benchmarks.md|BUILD/examples/memory_lab --out BUILD/memory_lab"
  "memory_lab_quick|docs/benchmarks.md|BUILD/examples/memory_lab --quick --out BUILD/memory_lab_quick"
  "offload|docs/benchmarks.md|BUILD/bench/bench_offload 3"
  "offload_gpt|docs/benchmarks.md|bench/offload_gpt_table.sh BUILD h100"
  "linear_cross_entropy|docs/benchmarks.md|BUILD/bench/bench_linear_cross_entropy cpu 5"
  "conv_engines|docs/benchmarks.md|BUILD/bench/bench_conv_engines --rounds 3 --threads 1 --min"
  "profiler|docs/benchmarks.md|BUILD/bench/bench_profiler cpu 20"
  "char_gpt|docs/benchmarks.md|BUILD/examples/char_gpt --sample-chars 0"
  "precision|docs/benchmarks.md|bench/precision_table.sh BUILD"
  "precision_2000|docs/benchmarks.md|bench/precision_table.sh BUILD 2000 0"
  "precision_2000_seed1|docs/benchmarks.md|bench/precision_table.sh BUILD 2000 1"
  "zero|docs/benchmarks.md|bench/zero_table.sh BUILD 20"
  "zero_loss|docs/benchmarks.md|bench/zero_loss_table.sh BUILD 100"
  "meta|docs/benchmarks.md|bench/meta_table.sh BUILD"
  "fit_presets|docs/memory.md|bench/fit_presets.sh BUILD"
  "estimators|docs/memory.md|bench/estimators_table.sh BUILD"
  "kill_resume|docs/benchmarks.md|bench/kill_resume.sh BUILD 20"
  "simt|docs/benchmarks.md|bench/simt_table.sh BUILD"
  "vs_torch|docs/benchmarks.md|bench/vs_torch/run.sh --rounds 3"
)

if [ "${1:-}" = --list ]; then
  for t in "${tables[@]}"; do IFS='|' read -r name doc cmd <<<"$t"; printf "%-22s %-20s %s\n" "$name" "$doc" "$cmd"; done
  exit 0
fi
build=${1:-build}
shift || true
wanted=("$@")

# The CPU flags that decide reel's CPU paths (kernels/cpu/gemm.h): the rest of lscpu's list is noise.
cpu_caption() {
  local model cores flags
  model=$(lscpu | sed -n 's/^Model name: *//p' | head -1)
  cores=$(nproc)
  flags=$(lscpu | sed -n 's/^Flags: *//p' | tr ' ' '\n' |
    grep -xE 'avx2|fma|avx512f|avx512bw|avx512vl|avx512_bf16|avx512_fp16|avx512_vnni|amx_bf16|amx_tile' | paste -sd' ')
  echo "${model:-unknown CPU}, ${cores} cores; flags: ${flags:-none of avx2/avx512}"
}

# replace_block <doc> <name> <file with the new body>: the text between the markers becomes the body.
replace_block() {
  local doc=$1 name=$2 body=$3
  grep -qF "<!-- bench: $name -->" "$doc" || { echo "tables: $doc has no block '<!-- bench: $name -->'" >&2; exit 1; }
  NAME="$name" BODY="$body" perl -0pi -e '
    my $name = quotemeta $ENV{NAME};
    open my $b, "<", $ENV{BODY} or die; local $/; my $body = <$b>;
    s/(<!-- bench: $name -->\n).*?(<!-- \/bench -->)/$1$body$2/s or die "no block $ENV{NAME}\n";' "$doc"
}

ran=0
for t in "${tables[@]}"; do
  IFS='|' read -r name doc cmd <<<"$t"
  if ((${#wanted[@]})) && [[ " ${wanted[*]} " != *" $name "* ]]; then continue; fi
  cmd=${cmd//BUILD/$build}
  exe=${cmd%% *}
  if [ ! -x "$exe" ]; then echo "tables: $name skipped: $exe is not built"; continue; fi
  if [[ $name = zero* ]] && ! command -v mpirun >/dev/null; then echo "tables: $name skipped: no mpirun"; continue; fi
  if [ "$name" = vs_torch ] && ! python3 -c "import torch" 2>/dev/null; then
    echo "tables: $name skipped: no PyTorch (tools/setup_bench.sh installs it)"; continue
  fi
  echo "tables: $name: $cmd"
  load=$(cut -d' ' -f1-3 /proc/loadavg)
  out=$(mktemp)
  body=$(mktemp)
  if ! (eval "$cmd") >"$out" 2>&1; then cat "$out" >&2; echo "tables: $name failed: $cmd" >&2; exit 1; fi
  {
    echo "Measured $(date -u +%Y-%m-%d) on $(cpu_caption); load average $load before the run, $(cut -d' ' -f1-3 /proc/loadavg) after;"
    echo "\`${cmd//$build/build}\`:"
    echo
    echo '```'
    cat "$out"
    echo '```'
  } >"$body"
  replace_block "$doc" "$name" "$body"
  rm -f "$out" "$body"
  ran=$((ran + 1))
done
echo "tables: $ran table(s) rewritten"
