#!/bin/sh
# shellcheck disable=SC2317 # the t_* checks are called indirectly, through check()
# shellcheck disable=SC2015 # `A && B || { why=...; return 1; }`: C is meant to run when A or B fails
# test_timeline.sh EXE: times on the file's own clock (issue 22). `frames`,
# `tokens` and `embed` of an MPEG-TS file whose audio starts 1.4 s before its
# first video frame write metadata time_origin (PyAV's pts of the first video
# frame), sample from where the recording starts (the first audio), give PyAV's
# pts as frame_source_time with PyAV's pictures, keep and tokenize the audio
# before the first frame, and take --start on the same clock; the checks are
# tests/cli/timeline_check.py's. Run by ctest as `sh test_timeline.sh
# $<TARGET_FILE:ringvit_cli>`; POSIX sh only. Prints one line per check, then
# "N passed, M failed"; exits 1 on any failure, including a missing test
# dependency (ffmpeg, timeout, PyAV).

EXE=$1
if [ -z "$EXE" ] || [ ! -x "$EXE" ]; then
    echo "usage: sh test_timeline.sh PATH/TO/ringvit" >&2
    exit 2
fi
EXE=$(cd "$(dirname "$EXE")" && pwd)/$(basename "$EXE")
HERE=$(cd "$(dirname "$0")" && pwd)
for dep in ffmpeg timeout; do
    if ! command -v $dep >/dev/null 2>&1; then
        echo "FAILED: no $dep command (a test dependency: scripts/install-deps.sh)"
        exit 1
    fi
done

tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT INT TERM
cd "$tmp" || exit 1

# shellcheck source=tests/cli/cli_lib.sh
. "$HERE/cli_lib.sh"

# run_t ARGS...: ringvit under `timeout 60` (a hang is exit 124, never a stall).
run_t() {
    timeout 60 "$EXE" "$@" >"$tmp/out" 2>"$tmp/err"
    rc=$?
}

t_timeline() {
    ffmpeg -v error -y -f lavfi -i sine=frequency=440:sample_rate=44100:duration=5 \
        -itsoffset 1.4 -f lavfi -i testsrc2=size=64x64:rate=25:duration=3 -map 1:v -map 0:a \
        -c:v mpeg2video -bf 0 -c:a mp2 -muxdelay 0 -muxpreload 0 -f mpegts pre.ts ||
        { why="ffmpeg could not make pre.ts"; return 1; }
    run_t frames pre.ts --size 64 --fps 2 -o tl-f.safetensors && want_rc 0 || return 1
    run_t frames pre.ts --size 64 --fps 2 --start 2.25 -o tl-s.safetensors && want_rc 0 || return 1
    run_t tokens pre.ts --size 64 --fps 2 --patch 16 -o tl-t.safetensors && want_rc 0 || return 1
    run_t embed pre.ts --model tiny --size 64 --fps 2 --tokens --quiet -o tl-e.safetensors &&
        want_rc 0 || return 1
    out=$(/usr/bin/python3 "$HERE/timeline_check.py" pre.ts tl-f.safetensors tl-t.safetensors \
        tl-e.safetensors tl-s.safetensors 2.25 2>&1) || { why=$out; return 1; }
}
check times-on-the-files-clock-match-pyav t_timeline

cli_summary
