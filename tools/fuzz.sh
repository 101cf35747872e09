#!/usr/bin/env bash
# Builds the libFuzzer harnesses of tests/fuzz with clang (AddressSanitizer + UBSan, CPU only),
# replays every committed input of tests/fuzz/corpus/<harness>/ (seeds and the reproducers of
# fixed bugs: a failure there is a regression), then fuzzes each harness for FUZZ_SECONDS
# (default 60), with LeakSanitizer on (the harnesses link no MPI, so no suppression applies: a leak
# is reel's). New inputs go to a scratch folder, not into the committed corpus; a crash leaves
# its input in build-fuzz/crashes/ to commit as a reproducer once fixed.
#   tools/fuzz.sh            FUZZ_SECONDS=0 tools/fuzz.sh   (replay only)
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${FUZZ_SECONDS:-60}
jobs=${JOBS:-$(nproc)}
clangxx=$(command -v clang++ || true)
if [ -z "$clangxx" ]; then
  echo "== fuzzing skipped: clang++ not found (tools/setup.sh installs it)"
  exit 0
fi
mkdir -p build-fuzz
# Through ccache where it is installed (tools/dev.sh says how the cache is kept).
launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
harnesses=(fuzz_safetensors fuzz_state_dict fuzz_idx fuzz_checkpoint_policy)
# Only what the harnesses link: CPU only, no distributed/, no tests, examples or benchmarks.
cmake -S . -B build-fuzz -G Ninja -DCMAKE_CXX_COMPILER="$clangxx" "${launcher[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1 -DNDEBUG" -DREEL_FUZZ=ON -DREEL_SANITIZE=address,undefined \
  -DREEL_NATIVE=OFF -DREEL_EMULATE_CUDA=OFF -DREEL_DISTRIBUTED=OFF -DREEL_BUILD_TESTS=OFF -DREEL_BUILD_EXAMPLES=OFF \
  -DREEL_BUILD_BENCH=OFF >build-fuzz/configure.log 2>&1 || { cat build-fuzz/configure.log; exit 1; }
cmake --build build-fuzz -j "$jobs" --target "${harnesses[@]}"
mkdir -p build-fuzz/crashes
for h in "${harnesses[@]}"; do
  corpus=tests/fuzz/corpus/$h
  echo "== $h: replaying $(ls "$corpus" | wc -l) committed inputs"
  ASAN_OPTIONS=detect_leaks=1 "build-fuzz/tests/fuzz/$h" -rss_limit_mb=2048 "$corpus"/* 2>build-fuzz/$h.replay.log ||
    { tail -40 build-fuzz/$h.replay.log; exit 1; }
  if [ "$seconds" -gt 0 ]; then
    echo "== $h: fuzzing for ${seconds} s"
    scratch=build-fuzz/scratch/$h
    mkdir -p "$scratch"
    ASAN_OPTIONS=detect_leaks=1 "build-fuzz/tests/fuzz/$h" -max_total_time="$seconds" -rss_limit_mb=2048 \
      -max_len=65536 -timeout=10 -artifact_prefix=build-fuzz/crashes/$h- "$scratch" "$corpus" \
      2>build-fuzz/$h.fuzz.log || { tail -60 build-fuzz/$h.fuzz.log; exit 1; }
    tail -1 build-fuzz/$h.fuzz.log
  fi
done
