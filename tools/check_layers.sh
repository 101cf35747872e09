#!/usr/bin/env bash
# Fails when a layer includes a header it may not: the rule is cmake/layers.txt, one line per layer
# (its folder, then the layers it may include besides itself), read here and by CMake. A layer may
# include no layer its line does not name and none of the programs (examples/, bench/, tests/).
# Fails too when the list itself is inconsistent: a layer that names one not listed on an earlier
# line, or one that may include A without everything A may include. The link-time half of the same
# rule is cmake/layering.cmake.
set -euo pipefail
cd "$(dirname "$0")/.."
rules=cmake/layers.txt
programs=(examples bench tests)
declare -A allowed=()
layers=()
status=0
while read -r layer deps; do
  [[ -z "$layer" || "$layer" == \#* ]] && continue
  for dep in $deps; do
    if [[ -z "${allowed[$dep]+set}" ]]; then
      echo "layering: $rules: $layer names $dep, which no earlier line lists" >&2
      status=1
      continue
    fi
    for indirect in ${allowed[$dep]}; do
      if [[ " $deps " != *" $indirect "* ]]; then
        echo "layering: $rules: $layer may include $dep but does not name $indirect, which $dep may include" >&2
        status=1
      fi
    done
  done
  allowed[$layer]=$deps
  layers+=("$layer")
done <"$rules"

for layer in "${layers[@]}"; do
  [ -d "$layer" ] || continue
  forbidden=()
  for other in "${layers[@]}" "${programs[@]}"; do
    [[ "$other" == "$layer" || " ${allowed[$layer]} " == *" $other "* ]] || forbidden+=("$other")
  done
  [ ${#forbidden[@]} -gt 0 ] || continue
  pattern="#include \"($(IFS='|'; echo "${forbidden[*]}"))/"
  if hits=$(grep -rnE "$pattern" "$layer" --include='*.h' --include='*.cpp' --include='*.cu'); then
    echo "layering: $layer/ may include only ${allowed[$layer]:-nothing of reel} (cmake/layers.txt):" >&2
    echo "$hits" >&2
    status=1
  fi
done
[ "$status" -eq 0 ] && echo "layering: every include follows cmake/layers.txt (${layers[*]})"
exit "$status"
