#!/bin/sh
# shellcheck disable=SC2317 # the t_* checks are called indirectly, through check()
# shellcheck disable=SC2015 # `A && B || { why=...; return 1; }`: C is meant to run when A or B fails
# test_prefetch_memory.sh EXE: `ringvit embed --prefetch N` holds what its help
# and the README say, and no more: N + 1 token slices per rank, each
# (tokens / C) x (D x 4 + 49) bytes, plus the decoders of the inputs being
# prepared. A batch of 6 equal recordings (48 s of 32 px video at 25 fps: 78 000
# tokens of a 1-layer, D 48 encoder cut from `ringvit init`'s tiny, so a slice S
# is about 18 MiB and encodes in about half a second, two or three times its
# decode) runs at --prefetch 0, 1 and 3 with one compute thread per rank; the
# peak resident set of each run is embed's own (the largest peak_rss_mb of its
# --json lines: the peak of the work, not the exit's library teardown; the
# `tokens` runs from outside, getrusage of the child: prefetch_memory.py). Checks:
#   - every run embeds the 6 inputs, and the outputs of the three are identical
#     byte for byte;
#   - peak(N) - peak(0) <= N x S + N x decoder + worker + 2 MiB for N = 1 and
#     3, the allowance measured here: a decoder is what `ringvit tokens` (decode
#     and tokenize, nothing kept) holds over its plan alone, the worker what one
#     input at --prefetch 1 holds over --prefetch 0 (its thread, arena,
#     backend), 2 MiB the spread of a peak between runs. The allowance is under
#     one slice, so at N = 1 a queue one slice longer than stated fails; at
#     N = 3 the worker, two or three times as fast as the encoder, fills the
#     queue but cannot get further ahead within 6 inputs, so there a queue over
#     the whole batch (5 slices over peak(0)) is what fails, by 2 slices less
#     the allowance;
#   - peak(1) - peak(0) >= S / 2: the measure sees the slice prepared ahead.
# The figures are printed (slice, allowance, peaks, bound, margin). The
# resident set means nothing under the sanitizers (shadow memory, quarantine):
# the sanitizer pass, unit tests only, leaves this out. Run by ctest as
# `sh test_prefetch_memory.sh $<TARGET_FILE:ringvit_cli>`; POSIX sh only.
# Prints one line per check, then "N passed, M failed"; exits 1 on any failure,
# including a missing test dependency (ffmpeg, numpy).

EXE=$1
if [ -z "$EXE" ] || [ ! -x "$EXE" ]; then
    echo "usage: sh test_prefetch_memory.sh PATH/TO/ringvit" >&2
    exit 2
fi
EXE=$(cd "$(dirname "$EXE")" && pwd)/$(basename "$EXE")
HERE=$(cd "$(dirname "$0")" && pwd)
PY=/usr/bin/python3
MEM="$HERE/prefetch_memory.py"
if ! command -v ffmpeg >/dev/null 2>&1; then
    echo "FAILED: no ffmpeg command to generate the test recordings (a test dependency: scripts/install-deps.sh)"
    exit 1
fi
if ! "$PY" -c 'import numpy, resource' 2>/dev/null; then
    echo "FAILED: $PY has no numpy to make the test's model (a test dependency: scripts/install-deps.sh)"
    exit 1
fi

tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT INT TERM
cd "$tmp" || exit 1
# shellcheck source=tests/cli/cli_lib.sh
. "$HERE/cli_lib.sh"

BATCH=6
AHEAD=3
DIM=48
INPUTS="in1.mp4 in2.mp4 in3.mp4 in4.mp4 in5.mp4 in6.mp4"
# One compute and one decoder thread per rank: the worker and the encoder each
# have a core of their own on a 2-core machine, and no thread pool spins.
SAMPLING="--fps 25 --size 32"
EMBED="$SAMPLING --model $tmp/model.safetensors --attention frame --threads 1 --decode-threads 1 --quiet --json"

# ---- the recordings and the model ------------------------------------------------
ffmpeg -nostdin -v error -y -f lavfi -i testsrc2=size=32x32:rate=25 -t 48 -c:v libx264 \
    -pix_fmt yuv420p in1.mp4 >/dev/null 2>&1 &&
    for i in 2 3 4 5 6; do cp in1.mp4 "in$i.mp4" || exit 1; done || {
    echo "FAIL ffmpeg could not generate the test recording"
    exit 1
}
# Patch 4 on single frames: 64 tokens a frame (and its class token) from 48 values,
# so the decode and the patch projection are cheap next to the encoder.
"$EXE" init --preset tiny --patch 4 --tubelet 1 -o tiny.safetensors >/dev/null &&
    "$PY" "$MEM" model tiny.safetensors model.safetensors "$DIM" 1 || {
    echo "FAIL could not make the test's model"
    exit 1
}

# ---- the runs ----------------------------------------------------------------------
# measure NAME ARGS...: ringvit ARGS under prefetch_memory.py peak; stdout in
# NAME.out, "PEAK_KIB STATUS" in NAME.peak. glibc's mmap threshold is fixed at
# 1 MiB: blocks that large are mapped and given back when freed, so the resident
# set follows the buffers alive. With glibc's default (a threshold that grows to
# the largest block freed, which then stays cached in the heap or a thread's
# arena) a peak varied by up to 1.5 slices between runs of the same command,
# more than the bound's margin.
export MALLOC_MMAP_THRESHOLD_=1048576
measure() {
    name=$1
    shift
    "$PY" "$MEM" peak "$name.out" -- "$EXE" "$@" >"$name.peak" 2>"$name.err"
}
peak_of() { cut -d ' ' -f 1 "$1.peak"; }
status_of() { cut -d ' ' -f 2 "$1.peak"; }

t_runs() {
    for n in 0 1 $AHEAD; do
        # shellcheck disable=SC2086 # word splitting of the flag lists is meant
        measure "pf$n" embed $INPUTS $EMBED --prefetch "$n" --out-dir "out$n"
        cp "pf$n.out" "$tmp/out" && cp "pf$n.err" "$tmp/err"
        [ "$(status_of "pf$n")" = 0 ] || { why="--prefetch $n: exit status $(status_of "pf$n")"; return 1; }
        got=$(grep -c '"status":"ok"' "pf$n.out")
        [ "$got" -eq "$BATCH" ] || { why="--prefetch $n: $got of $BATCH inputs embedded"; return 1; }
    done
    : >"$tmp/out" && : >"$tmp/err"
}
t_identical() {
    for i in 1 2 3 4 5 6; do
        for n in 1 $AHEAD; do
            cmp "out0/in$i.safetensors" "out$n/in$i.safetensors" >/dev/null 2>&1 ||
                { why="in$i: --prefetch $n differs from --prefetch 0"; return 1; }
        done
    done
}
# The allowance, measured: the decoders (`tokens` decodes and tokenizes as a
# prepared input does, streamed and nothing kept: over its plan alone that is one
# input's decoder and chunks) and the worker (one input, its first 8 s, at
# --prefetch 1 over --prefetch 0: nothing overlaps, what is left is the thread,
# its arena, its backend), plus a tolerance of 2 MiB for the spread of a peak
# between runs (about 1 MiB seen).
t_bound() {
    TOKENS="$SAMPLING --patch 4 --tubelet 1 --frame --cls --threads 1"
    # shellcheck disable=SC2086
    measure plan tokens in1.mp4 $TOKENS --plan-only && [ "$(status_of plan)" = 0 ] &&
        measure full tokens in1.mp4 $TOKENS && [ "$(status_of full)" = 0 ] ||
        { why="ringvit tokens failed: $(cat plan.err full.err)"; return 1; }
    for n in 0 1; do
        # shellcheck disable=SC2086
        measure "alone$n" embed in1.mp4 $EMBED --duration 8 --prefetch "$n" --out-dir "alone$n" &&
            [ "$(status_of "alone$n")" = 0 ] ||
            { why="one input at --prefetch $n failed: $(cat "alone$n.err")"; return 1; }
    done
    "$PY" "$MEM" bound --json pf0.out --dim "$DIM" --batch "$BATCH" \
        --decoder "$(peak_of plan),$(peak_of full)" --worker "$(peak_of alone0),$(peak_of alone1)" \
        --tolerance 2048 \
        "0=$(peak_of pf0)" "1=$(peak_of pf1)" "$AHEAD=$(peak_of "pf$AHEAD")" >bound.txt 2>&1
    st=$?
    sed 's/^/     /' bound.txt
    [ "$st" -eq 0 ] || { why="$(grep FAILED bound.txt | head -n 1)"; return 1; }
}

check prefetch-runs t_runs
check prefetch-outputs-identical t_identical
check prefetch-memory-bound t_bound
cli_summary
