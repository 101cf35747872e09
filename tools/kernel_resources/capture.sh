#!/usr/bin/env bash
# tools/kernel_resources/capture.sh: the CUDA compiler launcher of reel_kernels in the nvcc flavour
# (tools/kernel_resources/CMakeLists.txt). It runs the compile it is given (behind it ccache, when
# the build uses it: a cache hit replays ptxas's output too), writes ptxas's resource lines
# (--ptxas-options=-v: registers, spills, shared memory per kernel) to <object>.ptxas for the
# kernel_resources tool, and passes every other line of the compile's stderr through, so the build
# log stays as quiet as without -v.
set -uo pipefail
obj=""
prev=""
for arg in "$@"; do
  if [ "$prev" = -o ]; then obj=$arg; fi
  prev=$arg
done
log=$(mktemp "${TMPDIR:-/tmp}/reel-ptxas.XXXXXX")
"$@" 2>"$log"
rc=$?
# ptxas -v prints "ptxas info    : ..." lines and, under "Function properties for", one indented
# line of stack frame and spill bytes.
grep -vE '^(ptxas info +:|    [0-9]+ bytes stack frame)' "$log" >&2
if [ "$rc" -eq 0 ] && [ -n "$obj" ]; then
  grep -E '^(ptxas info +:|    [0-9]+ bytes stack frame)' "$log" >"$obj.ptxas.tmp"
  mv "$obj.ptxas.tmp" "$obj.ptxas"
fi
rm -f "$log"
exit "$rc"
