#!/usr/bin/env bash
# Fails when a layer includes a header of a layer above it. The layers, bottom to top:
#   core < kernels < autograd < optim < nn < dist < examples, bench
# (optim and nn are siblings in the design; nn may include optim, optim never nn). A folder may
# include itself and anything below. The link-time half of the same rule is cmake/layering.cmake.
set -euo pipefail
cd "$(dirname "$0")/.."
order=(core kernels autograd optim nn dist)
status=0
for ((i = 0; i < ${#order[@]}; ++i)); do
  layer=${order[i]}
  [ -d "$layer" ] || continue
  for ((j = i + 1; j < ${#order[@]}; ++j)); do
    above=${order[j]}
    if hits=$(grep -rnE "#include \"$above/" "$layer" --include='*.h' --include='*.cpp' --include='*.cu'); then
      echo "layering: $layer/ includes $above/, a layer above it:" >&2
      echo "$hits" >&2
      status=1
    fi
  done
done
[ "$status" -eq 0 ] && echo "layering: no upward include"
exit "$status"
