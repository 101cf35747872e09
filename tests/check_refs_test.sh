#!/usr/bin/env bash
# tools/check_refs.pl against a small tree made here: it must pass on a tree whose comments and docs
# name only what exists, and fail, naming the file and the stale name, on each kind of stale name
# planted in turn (a repository path, a {a,b} path, a bare file name, a reel:: function, a name()).
#
#   tests/check_refs_test.sh <tools/check_refs.pl>
set -euo pipefail
checker=$1
tmp=$(mktemp -d "${TMPDIR:-/tmp}/reel-check-refs.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
cd "$tmp"
git init -q .
mkdir -p core docs tools
cat >core/thing.h <<'H'
// core/thing.h: makes things (core/thing.{h,cpp}); see docs/thing.md and reel::core::make_thing.
#pragma once
int make_thing(int x);
H
cat >core/thing.cpp <<'H'
// The thing (thing.h): make_thing() doubles.
int make_thing(int x) { return 2 * x; }
H
printf '# Things\n`core/thing.h` declares `reel::make_thing`; the tree is `core/`.\n' >docs/thing.md
: >tools/check_refs.allow
git add -A

expect_pass() {
  perl "$checker" "$tmp" >out.log 2>&1 || { echo "check_refs_test: a clean tree was refused:"; cat out.log; exit 1; }
}
# expect_fail <file> <line to append> <text the report must hold>
expect_fail() {
  local file=$1 line=$2 want=$3
  cp "$file" saved
  echo "$line" >>"$file"
  if perl "$checker" "$tmp" >out.log 2>&1; then
    echo "check_refs_test: '$line' planted in $file was not caught"; exit 1
  fi
  grep -qF "$want" out.log || { echo "check_refs_test: the report does not name '$want':"; cat out.log; exit 1; }
  mv saved "$file"
  expect_pass
}

expect_pass
expect_fail core/thing.h '// moved to core/gone.h' 'core/thing.h: names core/gone.h'
expect_fail core/thing.cpp '// see core/thing.{h,cu}' 'core/thing.cpp: names core/thing.cu'
expect_fail docs/thing.md 'Built by `tools/build.sh`.' 'docs/thing.md: names tools/build.sh'
expect_fail core/thing.h '// the old helper.cpp did this' 'names the file helper.cpp'
expect_fail docs/thing.md 'Call `reel::core::unmake_thing`.' 'names reel::core::unmake_thing'
expect_fail core/thing.cpp '// finish_things() ran here' 'names finish_things()'
# A name that only a comment or a string holds is no definition.
expect_fail core/thing.cpp 'const char* s = "old_name"; // old_name() is gone' 'names old_name()'
echo "check_refs_test: 7 planted stale names caught, the clean tree passes"
