#!/bin/sh
# shellcheck disable=SC2317 # the t_* checks are called indirectly, through check()
# shellcheck disable=SC2015 # `A && B || { why=...; return 1; }`: C is meant to run when A or B fails
# test_files.sh EXE: what an output path and an input path may name (the
# hostile-input issue):
#   - an output (-o of init, embed, frames, tokens, finetune; finetune's --ckpt;
#     embed's and finetune's --log) that is a character device, a FIFO or a
#     directory is refused with exit 1 and "OUT: is a ...; refusing to ...", and
#     is left as it was (the device node is still a device node). A device node
#     needs mknod, so the script runs as root (as scripts/test.sh and CI do);
#   - a symlink to a regular file is written through: the link stays a link and
#     its target holds the new output; a dangling symlink creates its target;
#   - an input that is a FIFO (or a directory, a device) is refused at once:
#     `embed f.mp4 x.wav --out-dir o` fails f.mp4 and embeds x.wav (exit 3);
#     probe, frames and tokens of a FIFO exit 1; `probe -` still reads standard
#     input.
#   - a PNG declaring 16000x16000 is refused before a picture is allocated;
#   - --threads past 1024 and empty flag values are usage errors; a log that
#     cannot be written fails the run; a non-UTF-8 file name keeps every JSON
#     field (\xNN escapes); --max-tokens (embed, tokens) and --max-frames
#     (frames) refuse an input before decoding it.
# Every command runs under `timeout 60`, so a regression fails instead of hanging.
# Run by ctest as `sh test_files.sh $<TARGET_FILE:ringvit_cli>`; POSIX sh only.
# Prints one line per check, then "N passed, M failed"; exits 1 on any failure,
# including a missing test dependency (ffmpeg, timeout).

EXE=$1
if [ -z "$EXE" ] || [ ! -x "$EXE" ]; then
    echo "usage: sh test_files.sh PATH/TO/ringvit" >&2
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

ff() { ffmpeg -nostdin -v error -y "$@" >/dev/null 2>&1; }
ff -f lavfi -i testsrc2=size=64x48:rate=10 -f lavfi -i sine=frequency=440:sample_rate=16000 \
    -t 2 -c:v libx264 -pix_fmt yuv420p -c:a aac -shortest clip.mp4 &&
    ff -f lavfi -i sine=frequency=330:sample_rate=16000 -t 2 x.wav || {
    echo "FAIL ffmpeg could not generate the test recordings"
    exit 1
}
cp clip.mp4 clip2.mp4
printf 'clip.mp4\nclip2.mp4\n' >mae.txt

# A device node to aim outputs at: /dev/null's numbers, so nothing is harmed if
# a regression writes to it. Only root may make one: the tests run as root (as
# scripts/test.sh and CI do); elsewhere this fails rather than skip the case.
if ! { mknod dev c 1 3 2>/dev/null && [ -c dev ]; }; then
    echo "FAIL mknod dev c 1 3: the device-node cases need root (run as scripts/test.sh does)"
    exit 1
fi
mkfifo fifo && mkdir folder || { echo "FAIL mkfifo/mkdir"; exit 1; }

# The commands that write one output, each with OUT last (run_out NAME OUT).
run_out() {
    case $1 in
    init) run_t init --preset tiny -o "$2" ;;
    embed) run_t embed x.wav --model tiny --quiet -o "$2" ;;
    frames) run_t frames clip.mp4 --size 32 --fps 2 -o "$2" ;;
    tokens) run_t tokens clip.mp4 --size 32 --fps 2 -o "$2" ;;
    finetune) run_t finetune --task mae --manifest mae.txt --model tiny --size 32 --fps 2 --quiet --steps 1 \
        --threads 1 -o "$2" ;;
    esac
}
# The output is refused: exit 1, the message names the path and what it is.
refused() { # CMD OUT KIND
    run_out "$1" "$2"
    want_rc 1 && want_err "$2: is $3; refusing to replace it \\(only a regular file is replaced\\)"
}
# A safetensors file: 8-byte little-endian header length, then '{'.
is_st() {
    [ -f "$1" ] && [ "$(od -An -c -j 8 -N 1 "$1" | tr -d ' ')" = "{" ] ||
        { why="$1 is not a safetensors file"; return 1; }
}

for cmd in init embed frames tokens finetune; do
    eval "t_dev_$cmd() { refused $cmd dev 'a character device' && [ -c dev ] ||
        { why=\"\${why:-dev is no longer a character device}\"; return 1; }; }"
    eval "t_fifo_$cmd() { refused $cmd fifo 'a FIFO' && [ -p fifo ] ||
        { why=\"\${why:-fifo is no longer a FIFO}\"; return 1; }; }"
    eval "t_dir_$cmd() { refused $cmd folder 'a directory' && [ -d folder ] ||
        { why=\"\${why:-folder is no longer a folder}\"; return 1; }; }"
    # Followed: the link remains a link, its target (regular) holds the output.
    eval "t_link_$cmd() {
        rm -f link_$cmd target_$cmd && echo old >target_$cmd && ln -s target_$cmd link_$cmd &&
            run_out $cmd link_$cmd && want_rc 0 &&
            { [ -L link_$cmd ] || { why='link_$cmd is no longer a symlink'; return 1; }; } &&
            is_st target_$cmd && ! ls target_$cmd.tmp.* >/dev/null 2>&1; }"
    # Dangling: the target is created (through a relative link into a folder).
    eval "t_dangling_$cmd() {
        mkdir -p sub && rm -f dangling_$cmd sub/new_$cmd && ln -s sub/new_$cmd dangling_$cmd &&
            run_out $cmd dangling_$cmd && want_rc 0 && [ -L dangling_$cmd ] && is_st sub/new_$cmd; }"
    # A link to a device is refused as the device would be.
    eval "t_link_dev_$cmd() {
        rm -f ldev_$cmd && ln -s dev ldev_$cmd && run_out $cmd ldev_$cmd && want_rc 1 &&
            want_err 'ldev_$cmd: is a symlink to dev, which is a character device; refusing' &&
            [ -c dev ]; }"
    check "$cmd-out-device" "t_dev_$cmd"
    check "$cmd-out-link-to-device" "t_link_dev_$cmd"
    check "$cmd-out-fifo" "t_fifo_$cmd"
    check "$cmd-out-directory" "t_dir_$cmd"
    check "$cmd-out-symlink-followed" "t_link_$cmd"
    check "$cmd-out-dangling-symlink-creates" "t_dangling_$cmd"
done

# ---- the other outputs: --out-dir entries, --log, --ckpt ----------------------------------
t_outdir_fifo() {
    mkdir -p od && rm -rf od/* && mkfifo od/x.safetensors &&
        run_t embed x.wav --model tiny --quiet --out-dir od && want_rc 1 &&
        want_err 'od/x.safetensors: is a FIFO; refusing to replace it' && [ -p od/x.safetensors ]
}
t_log_fifo() {
    rm -f lg.safetensors && run_t embed x.wav --model tiny --quiet -o lg.safetensors --log fifo &&
        want_rc 1 && want_err 'fifo: is a FIFO; refusing to write it' && [ -p fifo ] &&
        [ ! -e lg.safetensors ]
}
t_log_dir_finetune() {
    run_t finetune --task mae --manifest mae.txt --model tiny --size 32 --fps 2 --quiet --steps 1 --threads 1 \
        -o ftl.safetensors --log folder
    want_rc 1 && want_err 'folder: is a directory; refusing to write it' && [ -d folder ]
}
t_log_link() {
    rm -f ll.safetensors log_target loglink && echo '{"old":1}' >log_target &&
        ln -s log_target loglink &&
        run_t embed x.wav --model tiny --quiet -o ll.safetensors --log loglink && want_rc 0 &&
        [ -L loglink ] && [ "$(wc -l <log_target)" -eq 2 ] ||
        { why="${why:-the log link was not appended through}"; return 1; }
}
t_ckpt_fifo() {
    run_t finetune --task mae --manifest mae.txt --model tiny --size 32 --fps 2 --quiet --steps 1 --threads 1 \
        -o ftc.safetensors --ckpt fifo
    want_rc 1 && want_err 'fifo: is a FIFO; refusing to replace it' && [ -p fifo ]
}
check embed-out-dir-entry-fifo t_outdir_fifo
check embed-log-fifo t_log_fifo
check finetune-log-directory t_log_dir_finetune
check embed-log-symlink-followed t_log_link
check finetune-ckpt-fifo t_ckpt_fifo

# ---- inputs: only regular files are read ----------------------------------------------------
t_embed_fifo_batch() { # the reporter's command
    mkfifo f.mp4 && run_t embed f.mp4 x.wav --model tiny --quiet --out-dir eo &&
        want_rc 3 && want_err 'f.mp4: is a FIFO; only regular files are read' &&
        is_st eo/x.safetensors && grep -q '"path":"f.mp4".*"status":"failed"' eo/embed-log.jsonl ||
        { why="${why:-the log lacks f.mp4 failed}"; return 1; }
}
t_probe_fifo() { run_t probe fifo && want_rc 1 && want_err 'fifo: is a FIFO; only regular files are read'; }
t_frames_fifo() {
    run_t frames fifo -o ff.safetensors && want_rc 1 &&
        want_err 'fifo: is a FIFO; only regular files are read' && [ ! -e ff.safetensors ]
}
t_tokens_fifo() { run_t tokens fifo -o tf.safetensors && want_rc 1 && want_err 'is a FIFO; only regular files'; }
t_probe_dir() { run_t probe folder && want_rc 1 && want_err 'folder: is a directory'; }
t_probe_dev() { run_t probe dev && want_rc 1 && want_err 'dev: is a character device; only regular'; }
t_probe_stdin() { # '-' is standard input, spooled to a regular file: still read
    run_t probe - <clip.mp4
    want_rc 0 && grep -q '^file: *-$' "$tmp/out" ||
        { why="${why:-probe - did not report path -}"; return 1; }
}
check embed-input-fifo-batch-goes-on t_embed_fifo_batch
check probe-input-fifo t_probe_fifo
check frames-input-fifo t_frames_fifo
check tokens-input-fifo t_tokens_fifo
check probe-input-directory t_probe_dir
check probe-input-device t_probe_dev
check probe-stdin-dash t_probe_stdin

# ---- output names: linear in the inputs ---------------------------------------------------
# 20 000 missing inputs all named a.mp4: every one gets its own a-K name, in order,
# and the whole batch (naming, then 20 000 quick failures) ends in seconds; naming
# was quadratic (29 s on this 2-core machine before, 1.9 s after).
t_many_same_names() {
    i=1
    while [ $i -le 20000 ]; do echo "d$i/a.mp4"; i=$((i + 1)); done >same.txt
    start=$(date +%s)
    run_t embed --manifest same.txt --model tiny --quiet --out-dir so
    took=$(($(date +%s) - start))
    want_rc 3 || return 1
    [ "$took" -le 15 ] || { why="20 000 inputs took ${took} s"; return 1; }
    [ "$(grep -c '"status":"failed"' so/embed-log.jsonl)" -eq 20000 ] &&
        grep -q '"path":"d1/a.mp4","output":"so/a.safetensors"' so/embed-log.jsonl &&
        grep -q '"path":"d20000/a.mp4","output":"so/a-20000.safetensors"' so/embed-log.jsonl &&
        [ "$(sed -n 's/.*"output":"\([^"]*\)".*/\1/p' so/embed-log.jsonl | sort -u | wc -l)" -eq 20000 ] ||
        { why="${why:-the names are not a, a-2 .. a-20000, all different}"; return 1; }
}
check embed-20000-same-names-linear t_many_same_names

# A NUL byte in a manifest line is a usage error naming the line (it was never seen:
# the check compared two string lengths that both stop at the NUL).
t_manifest_nul() {
    printf 'x.wav\nclip.mp4\000junk\n' >nul.txt
    run_t embed --manifest nul.txt --model tiny --quiet --out-dir no &&
        want_rc 2 && want_err 'nul.txt:2: a NUL byte in the line' && [ ! -e no/x.safetensors ]
}
check embed-manifest-nul-byte t_manifest_nul

# ---- pixel limits before decoding ---------------------------------------------------
# 266 bytes of PNG declaring 16000x16000 (a first IDAT row, then nothing) are refused
# within 100 MB of the peak memory a 64x48 PNG takes; the stream information's
# decoder allocated the picture first (940 MB, 6 s on this 2-core machine before).
# peak_kb ARGS...: ringvit ARGS under python's resource accounting; sets rc and
# kb (peak resident KB), stderr in $tmp/err.
peak_kb() {
    set -- "$(/usr/bin/python3 - "$EXE" "$@" <<'PY'
import resource, subprocess, sys
with open("err", "wb") as err:
    r = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=err, timeout=60)
print(r.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
PY
)"
    rc=${1%% *}
    kb=${1##* }
}
t_png_bomb() {
    /usr/bin/python3 - <<'PY' || { why="cannot write big.png"; return 1; }
import struct, zlib
def chunk(t, d):
    return struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d))
w = h = 16000
png = (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0))
       + chunk(b"IDAT", zlib.compress(b"\0" * (1 + 3 * w) * 4, 9)) + chunk(b"IEND", b""))
open("big.png", "wb").write(png)
PY
    ff -f lavfi -i testsrc=size=64x48:rate=1 -frames:v 1 small.png || { why="ffmpeg: small.png"; return 1; }
    peak_kb frames small.png -o small.safetensors
    want_rc 0 || return 1
    small=$kb
    peak_kb frames big.png -o big.safetensors
    want_rc 1 && want_err 'big.png: video stream 0 has no picture size .*exceed 67108864 px' &&
        [ ! -e big.safetensors ] || return 1
    [ "$kb" -le $((small + 102400)) ] || { why="peak RSS ${kb} KB against ${small} KB for 64x48"; return 1; }
    peak_kb probe big.png
    [ "$kb" -le $((small + 102400)) ] || { why="probe: peak RSS ${kb} KB against ${small} KB"; return 1; }
}
check png-16000x16000-refused-before-decoding t_png_bomb

# ---- the small inconsistencies -------------------------------------------------------
# --threads 4096 passed the parser, then failed every input (the decoders take at
# most 256): a usage error now (up to 1024 run, with at most 256 decoder threads;
# not run here: a team of hundreds of threads takes seconds on 2 cores).
t_threads_4096() {
    run_t embed x.wav --model tiny --quiet --threads 4096 -o t4096.safetensors &&
        want_rc 2 && want_err '--threads wants an integer in \[1, 1024\]' && [ ! -e t4096.safetensors ]
}
check embed-threads-4096-usage-error t_threads_4096
# An empty value is a usage error before any work (-o "" failed after the work).
t_empty_output() {
    run_t embed x.wav --model tiny --quiet -o "" &&
        want_rc 2 && want_err "flag '-o' needs a value, not an empty one" || return 1
    run_t frames x.wav --output= && want_rc 2 && want_err "flag '--output' needs a value"
}
check empty-flag-value-is-usage-error t_empty_output
# A log that cannot be written fails the run (it exited 0 with a warning): a file
# size limit stands in for a full disk, the log already past it, the output below.
t_log_full() {
    head -c 300000 /dev/zero | tr '\0' '\n' >full.jsonl
    timeout 60 sh -c 'trap "" XFSZ; ulimit -f 256; exec "$0" "$@"' "$EXE" embed x.wav \
        --model tiny --quiet --out-dir lf --log full.jsonl >"$tmp/out" 2>"$tmp/err"
    rc=$?
    want_rc 1 && want_err 'writing the log full.jsonl failed' &&
        want_err 'the outputs are written; the log is incomplete' && [ -s lf/x.safetensors ]
}
check embed-log-on-full-disk-fails t_log_full
# A file name that is not UTF-8 embeds, and its log line, --json line and output
# metadata keep every field, the bad byte written as \xFF.
t_non_utf8_path() {
    bad=$(printf 'n\377.wav')
    cp x.wav "$bad" || { why="cannot make a non-UTF-8 name"; return 1; }
    run_t embed "$bad" --model tiny --quiet --json --out-dir nu --log nu.jsonl
    want_rc 0 || return 1
    grep -q '"path":"n\\\\xFF.wav","output":"nu/n\\\\xFF.safetensors","status":"ok"' nu.jsonl ||
        { why="log line: $(cat nu.jsonl)"; return 1; }
    grep -q '"path":"n\\\\xFF.wav"' "$tmp/out" || { why="--json lacks the path"; return 1; }
    /usr/bin/python3 - "nu/$(printf 'n\377').safetensors" <<'PY' || { why="metadata source"; return 1; }
import json, struct, sys
with open(sys.argv[1].encode("utf-8", "surrogateescape"), "rb") as f:
    n = struct.unpack("<Q", f.read(8))[0]
    meta = json.loads(f.read(n))["__metadata__"]
sys.exit(0 if meta["source"] == "n\\xFF.wav" else 1)
PY
}
check non-utf8-path-escaped-in-json t_non_utf8_path
# --max-tokens: refused from the plan, before decoding, naming the flag; a WAV
# whose header says 1 Hz (2 s of samples read as 32 000 s) is refused at once.
t_max_tokens() {
    run_t embed x.wav --model tiny --quiet --max-tokens 10 -o mt.safetensors &&
        want_rc 3 && want_err 'x.wav: 97 tokens and 1 segments .* more than --max-tokens 10' &&
        [ ! -e mt.safetensors ] || return 1
    /usr/bin/python3 - <<'PY' || { why="cannot write slow.wav"; return 1; }
import struct
data = open("x.wav", "rb").read()
i = data.index(b"fmt ")
# the sample rate and byte rate of the fmt chunk: 1 Hz, 2 bytes a second
data = data[:i + 12] + struct.pack("<II", 1, 2) + data[i + 20:]
open("slow.wav", "wb").write(data)
PY
    start=$(date +%s)
    run_t embed slow.wav --model tiny --quiet --max-tokens 100000 -o slow.safetensors
    took=$(($(date +%s) - start))
    want_rc 3 && want_err 'slow.wav: [0-9]+ tokens .* more than --max-tokens 100000' || return 1
    [ "$took" -le 10 ] || { why="took ${took} s"; return 1; }
}
check embed-max-tokens t_max_tokens
# tokens and frames: the same refusal from the plan (or the stated duration), and
# while decoding when the count passes the limit.
t_max_tokens_frames() {
    run_t tokens x.wav --max-tokens 10 -o mt.safetensors &&
        want_rc 1 && want_err 'x.wav: the sequence reaches 96 tokens .* more than --max-tokens 10' &&
        [ ! -e mt.safetensors ] || return 1
    run_t tokens x.wav --max-tokens 96 -o mt.safetensors && want_rc 0 || return 1
    run_t frames clip.mp4 --fps 10 --size 32 --max-frames 5 -o mf.safetensors &&
        want_rc 1 && want_err 'clip.mp4: 20 frames .* more than --max-frames 5' &&
        [ ! -e mf.safetensors ] || return 1
    run_t frames clip.mp4 --fps 10 --size 32 --max-frames 20 -o mf.safetensors && want_rc 0 ||
        return 1
    # A raw H.264 stream states no duration: both stop while decoding.
    ff -i clip.mp4 -an -c:v copy -bsf:v h264_mp4toannexb raw.h264 || { why="no raw.h264"; return 1; }
    rm -f mf.safetensors mt.safetensors
    run_t frames raw.h264 --fps 10 --size 32 --max-frames 5 -o mf.safetensors &&
        want_rc 1 && want_err 'raw.h264: more than --max-frames 5' && [ ! -e mf.safetensors ] ||
        return 1
    run_t tokens raw.h264 --fps 10 --size 32 --max-tokens 30 -o mt.safetensors &&
        want_rc 1 && want_err 'raw.h264: the sequence reaches [0-9]+ tokens .* --max-tokens 30' &&
        [ ! -e mt.safetensors ]
}
check tokens-frames-max-limits t_max_tokens_frames

cli_summary
