#!/usr/bin/env bash
# fuzz.sh [SECONDS_EACH] [TARGET...]: builds the libFuzzer targets of tests/fuzz
# (clang-14, ASan + UBSan, in build-fuzz/) and runs each for SECONDS_EACH seconds
# (default 30) on a copy of its seed corpus (tests/fuzz/corpus/NAME), all of them
# or the TARGETs named (safetensors weights ckpt manifest media). Exits 1 on any
# finding: a crash, a sanitizer report, a leak, an input over 10 s or over the
# memory limits; the input that caused it is kept in build-fuzz/findings/ and the
# command to replay it is printed. Add such an input to tests/fuzz/corpus/NAME
# once fixed, so every later run checks it first. CI (scripts/test.sh) runs
# `scripts/fuzz.sh 4`; a longer local campaign is `scripts/fuzz.sh 3600 media`.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
secs=${1:-30}
shift || true
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(safetensors weights ckpt manifest media)
case "$secs" in
'' | *[!0-9]*) echo "fuzz.sh: SECONDS_EACH must be a whole number, got '$secs'" >&2; exit 2 ;;
esac
cc=$(command -v clang-14 || command -v clang || true)
if [ -z "$cc" ]; then
  echo "fuzz.sh: needs clang (Debian: clang-14; scripts/install-deps.sh installs it)" >&2
  exit 1
fi

cmake -S . -B build-fuzz -DCMAKE_C_COMPILER="$cc" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O1 -gline-tables-only" \
  -DRINGVIT_FUZZ=ON -DRINGVIT_CUDA=OFF -DRINGVIT_TESTS=OFF >/dev/null
cmake --build build-fuzz -j"$(nproc)" --target "${targets[@]/#/fuzz_}" >/dev/null

findings=build-fuzz/findings
mkdir -p "$findings"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
status=0
total=0
for t in "${targets[@]}"; do
  exe=build-fuzz/tests/fuzz/fuzz_$t
  seeds=tests/fuzz/corpus/$t
  if [ ! -x "$exe" ] || [ ! -d "$seeds" ]; then
    echo "fuzz.sh: no target '$t' (or no corpus $seeds)" >&2
    exit 2
  fi
  mkdir -p "$work/$t"
  # Leaks are findings too; stderr (the loaders' own messages) is closed, while
  # libFuzzer and the sanitizers keep reporting on their own copy of it.
  if ASAN_OPTIONS=detect_leaks=1:allocator_may_return_null=1 \
     UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
     "$exe" "$work/$t" "$seeds" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 \
       -malloc_limit_mb=1024 -close_fd_mask=2 -print_final_stats=1 \
       -artifact_prefix="$findings/$t-" >"$work/$t.log" 2>&1; then
    runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$work/$t.log" | tail -n 1)
    corpus=$(find "$work/$t" -type f | wc -l)
    printf 'fuzz %-12s ok      %10s runs in %s s, %s new inputs\n' "$t" "${runs:-?}" "$secs" "$corpus"
    total=$((total + ${runs:-0}))
  else
    status=1
    printf 'fuzz %-12s FINDING\n' "$t"
    grep -E 'ERROR|SUMMARY|runtime error|Test unit written|^ +#[0-9]+ ' "$work/$t.log" | head -n 40
    art=$(ls -t "$findings/$t-"* 2>/dev/null | head -n 1 || true)
    [ -n "$art" ] && echo "replay: $exe $art"
  fi
done
echo "fuzz: $total runs in all"
exit $status
