#!/usr/bin/env bash
# test.sh: the whole test run, the same locally and in CI (.ci/run):
#   1. install the build and test dependencies (scripts/install-deps.sh test),
#   2. Release build in build/ with tests, then every ctest test (unit, cli, mpi,
#      and gpu where a GPU is present; the others report themselves skipped),
#   3. AddressSanitizer + UBSan build in build-asan/ (CPU only), then the unit tests,
#   4. the libFuzzer targets (scripts/fuzz.sh, build-fuzz/), 10 s each.
# RINGVIT_SKIP_ASAN=1 skips steps 3 and 4 for quick local iteration; CI never sets it.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
jobs=$(nproc)

section() {
  printf '\n==== %s ====\n' "$*"
}

# mpiexec refuses to run as root (containers, CI) unless told it is fine.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

section "dependencies"
scripts/install-deps.sh test

section "release build (build/)"
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DRINGVIT_TESTS=ON
cmake --build build -j"$jobs"

section "tests (build/)"
(cd build && ctest --output-on-failure)

section "install check (cmake --install, find_package, pkg-config)"
prefix=$(mktemp -d)
trap 'rm -rf "$prefix"' EXIT
cmake --install build --prefix "$prefix" >/dev/null
# Its exported symbols are exactly the RV_API names of its installed headers.
sh tests/install/check_symbols.sh "$(find "$prefix" -name 'libringvit.so' | head -n 1)" \
  "$prefix/include/ringvit"
cmake -S tests/install -B "$prefix/consumer-build" -DCMAKE_PREFIX_PATH="$prefix" >/dev/null
cmake --build "$prefix/consumer-build" >/dev/null
"$prefix/consumer-build/consumer"
# The C example (docs/c-library.md) embeds a clip across 2 ranks with the library's
# embed job; its file must equal the command's, every tensor and metadata entry. The
# clip's video starts at 1.4 s, so times on the container's clock are checked too.
ffmpeg -nostdin -v error -y -f lavfi -i testsrc2=size=320x240:rate=25 \
  -f lavfi -i sine=frequency=440:sample_rate=44100 -t 6 -c:v libx264 -pix_fmt yuv420p \
  -c:a aac -output_ts_offset 1.4 -f mpegts "$prefix/clip.ts"
"$prefix/bin/ringvit" init --preset tiny -o "$prefix/tiny.safetensors" >/dev/null
"$prefix/bin/ringvit" embed "$prefix/clip.ts" --model "$prefix/tiny.safetensors" --cp 2 \
  -o "$prefix/clip.safetensors" --quiet
"$prefix/consumer-build/embed_two_ranks" "$prefix/tiny.safetensors" "$prefix/clip.ts" \
  "$prefix/clip-c.safetensors"
/usr/bin/python3 tests/install/compare_outputs.py "$prefix/clip.safetensors" \
  "$prefix/clip-c.safetensors"
pcdir=$(dirname "$(find "$prefix" -name ringvit.pc)")
# shellcheck disable=SC2046 # pkg-config prints several words on purpose
cc tests/install/consumer.c -o "$prefix/consumer-pc" \
  $(PKG_CONFIG_PATH="$pcdir" pkg-config --cflags --libs ringvit) -lm
LD_LIBRARY_PATH="$(dirname "$pcdir")" "$prefix/consumer-pc"
"$prefix/bin/ringvit" --version

if [ "${RINGVIT_SKIP_ASAN:-0}" = "1" ]; then
  section "sanitizer pass and fuzzing skipped (RINGVIT_SKIP_ASAN=1)"
else
  section "sanitizer build (build-asan/: ASan + UBSan, CPU only)"
  cmake -S . -B build-asan -DRINGVIT_SANITIZE=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DRINGVIT_CUDA=OFF -DRINGVIT_TESTS=ON
  cmake --build build-asan -j"$jobs"

  section "unit tests under sanitizers (build-asan/)"
  (cd build-asan &&
    ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
    UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    ctest -L unit --output-on-failure)

  section "fuzzing (build-fuzz/: libFuzzer + ASan + UBSan, 4 s per target)"
  scripts/fuzz.sh 4
fi

section "all tests passed"
