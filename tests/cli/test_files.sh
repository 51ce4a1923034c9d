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
#   - outputs that fit the ecosystem (issue 22): `-o -` of embed, frames and
#     tokens piped into Python reads the same tensors as the file output, leaves
#     no file behind, and is refused on a terminal (under `script`), with --json,
#     and (embed) with --resume; a reader that goes away is a reported error, not
#     a silent death; embed --dtype f16/bf16 equals torch's conversion of the f32
#     output bit for bit, --normalize gives rows of norm 1 equal to the f32 rows
#     over their norm; --resume redoes an output of another --dtype or
#     --normalize; --out-dir's index.jsonl lists the complete outputs in input
#     order (ok, skipped); a heartbeat line with --progress 1 when stderr is a file.
#   - corrupt-data tolerance scales with the file (issue 22): 64 KiB of garbage in
#     the middle of 40 s of video passes `frames` with a warning by default (past
#     32, within 1% of its packets); --max-corrupt 32, 10 and 0.1% refuse it,
#     naming the count, the share and the limit; 5% passes; bad values exit 2.
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

# ---- outputs that fit the ecosystem: -o -, --dtype, --normalize, the index, progress -------
# st.py: safetensors read in a few lines of numpy (the header parsed by hand: the
# safetensors package is not a test dependency). `st.py same FILE [KEY...]`: the
# bytes on standard input hold the same tensors, bit for bit, and the same
# metadata but KEY... as FILE.
cat >st.py <<'PY'
import json, struct, sys
import numpy as np
DT = {"F64": "<f8", "F32": "<f4", "F16": "<f2", "BF16": "<u2", "I64": "<i8", "U8": "u1"}
def parse(b):
    n = struct.unpack("<Q", b[:8])[0]
    head = json.loads(b[8:8 + n])
    meta = head.pop("__metadata__", {})
    data, out = b[8 + n:], {}
    for k, v in head.items():
        s, e = v["data_offsets"]
        out[k] = (v["dtype"], np.frombuffer(data[s:e], DT[v["dtype"]]).reshape(v["shape"]))
    return out, meta
def load(path):
    with open(path, "rb") as f:
        return parse(f.read())
if __name__ == "__main__" and sys.argv[1] == "same":
    got, gmeta = parse(sys.stdin.buffer.read())
    want, wmeta = load(sys.argv[2])
    assert got.keys() == want.keys(), (sorted(got), sorted(want))
    for k, (dt, a) in want.items():
        assert got[k][0] == dt and got[k][1].shape == a.shape, k
        assert got[k][1].tobytes() == a.tobytes(), k
    for k in set(gmeta) | set(wmeta):
        assert k in sys.argv[3:] or gmeta.get(k) == wmeta.get(k), k
PY
# One --out-dir through five runs (x.wav, a missing input, y.wav): the index
# after each, --resume against another --normalize or --dtype (redone, not
# skipped), and the outputs the dtype and -o - checks compare (one thread: the
# same sums every run). Not --quiet: stderr says embedded or skipped, and has no
# heartbeat (the inputs take far less than 30 s).
cp x.wav y.wav
ix_run() { run_t embed "$@" --model tiny --threads 1 --tokens --out-dir rs; }
# index_is LINE...: rs/index.jsonl holds these lines ("path status duration tokens").
index_is() {
    /usr/bin/python3 - "$@" <<'PY' || { why="index: $(cat rs/index.jsonl)"; return 1; }
import glob, json, sys
lines = [json.loads(l) for l in open("rs/index.jsonl")]
assert len(lines) == len(sys.argv) - 1, len(lines)
for l, want in zip(lines, sys.argv[1:]):
    path, status, dur, tokens = want.split()
    assert list(l) == ["path", "output", "duration_s", "tokens", "model_hash", "status"], l
    assert l["path"] == path and l["output"] == "rs/" + path[:-4] + ".safetensors", l
    assert l["status"] == status and l["duration_s"] == float(dur) and l["tokens"] == int(tokens), l
    with open(l["output"], "rb") as f:
        n = int.from_bytes(f.read(8), "little")
        assert json.loads(f.read(n))["__metadata__"]["model_hash"] == l["model_hash"], l
assert not glob.glob("rs/index.jsonl.tmp.*")
PY
}
t_index_resume() {
    rm -rf rs
    ix_run x.wav nothere.wav y.wav && want_rc 3 && index_is "x.wav ok 2 97" "y.wav ok 2 97" &&
        cp rs/x.safetensors e32.safetensors || return 1
    for opt in --normalize "--dtype f16" "--dtype bf16"; do
        # shellcheck disable=SC2086 # $opt is a flag and its value
        ix_run x.wav --resume $opt && want_rc 0 && want_err '^ringvit: embedded x.wav' &&
            index_is "x.wav ok 2 97" || { why="--resume $opt: ${why:-}"; return 1; }
        cp rs/x.safetensors "e${opt##* }.safetensors"
    done
    # Complete in bf16: skipped, its duration and tokens read from the output.
    ix_run x.wav nothere.wav --resume --dtype bf16 && want_rc 3 &&
        want_err '^ringvit: skipped x.wav' && index_is "x.wav skipped 2 97" || return 1
    ! grep -q 'progress' "$tmp/err" || { why="a heartbeat on a short input"; return 1; }
}
check embed-index-and-resume-of-dtype-normalize t_index_resume
# --dtype and --normalize against the f32 output of the same input: F16 and BF16
# equal torch's .to() (round to nearest even) bit for bit, times and counts
# unchanged; normalised rows of global, segments, tokens have norm 1 and equal
# the f32 rows over their norm; the other embeddings unchanged.
t_dtype_normalize() {
    [ -f e32.safetensors ] && [ -f ef16.safetensors ] && [ -f ebf16.safetensors ] &&
        [ -f e--normalize.safetensors ] || { why="no outputs from the index check"; return 1; }
    /usr/bin/python3 - >"$tmp/out" 2>&1 <<'PY' || { why="$(tail -n 1 "$tmp/out")"; return 1; }
import numpy as np, torch
from st import load
e32, m32 = load("e32.safetensors")
floats = {k for k, (dt, _) in e32.items() if dt == "F32"}
assert floats >= {"global", "segments", "video_mean", "audio_mean", "pooled", "tokens"}, floats
assert m32["dtype"] == "f32" and m32["normalize"] == "none", m32
for path, name, tdt in (("ef16", "F16", torch.float16), ("ebf16", "BF16", torch.bfloat16)):
    got, meta = load(path + ".safetensors")
    assert meta["dtype"] == name.lower() and meta["normalize"] == "none", meta
    assert got.keys() == e32.keys(), sorted(got)
    for k, (dt, a) in e32.items():
        if k not in floats:
            assert got[k][0] == dt and got[k][1].tobytes() == a.tobytes(), k
            continue
        want = torch.from_numpy(a.copy()).to(tdt).view(torch.int16).numpy().view(np.uint16)
        assert got[k][0] == name and np.array_equal(got[k][1].view(np.uint16), want), (path, k)
got, meta = load("e--normalize.safetensors")
assert meta["dtype"] == "f32" and meta["normalize"] == "l2", meta
for k, (dt, a) in e32.items():
    g = got[k][1]
    if k in ("global", "segments", "tokens"):
        rows = a.reshape(-1, a.shape[-1]).astype(np.float64)
        n = np.linalg.norm(rows, axis=1, keepdims=True)
        g = g.reshape(rows.shape).astype(np.float64)
        assert (n > 0).all() and np.abs(np.linalg.norm(g, axis=1) - 1).max() <= 1e-6, k
        assert np.abs(g - rows / n).max() <= 1e-6, k
    else:
        assert got[k][0] == dt and g.tobytes() == a.tobytes(), k
PY
}
check embed-dtype-f16-bf16-normalize-match-torch t_dtype_normalize
# stream_same FILE SKIP ARGS...: `ringvit ARGS` (-o - among them) piped into
# Python reads what FILE holds (metadata SKIP aside); ringvit's status in rc,
# its stderr in $tmp/err; no file appears in the folder.
stream_same() {
    want=$1 skip=$2
    shift 2
    : >"$tmp/rc"
    files=$(find . -maxdepth 1 | wc -l)
    # shellcheck disable=SC2086 # $skip: no word, or one metadata key
    { timeout 60 "$EXE" "$@" 2>"$tmp/err"; echo $? >"$tmp/rc"; } |
        /usr/bin/python3 st.py same "$want" $skip >"$tmp/out" 2>&1
    py=$?
    rc=$(cat "$tmp/rc")
    want_rc 0 || return 1
    [ "$py" -eq 0 ] || { why="Python read something else: $(tail -n 1 "$tmp/out")"; return 1; }
    [ "$(find . -maxdepth 1 | wc -l)" -eq "$files" ] || { why="-o - left a file in $tmp"; return 1; }
}
t_stream_embed() { # messages (not --quiet) stay on stderr, no log without --log
    [ -f e32.safetensors ] || run_t embed x.wav --model tiny --quiet --threads 1 --tokens -o e32.safetensors
    stream_same e32.safetensors "" embed x.wav --model tiny --threads 1 --tokens -o - &&
        want_err 'embedded x.wav: 97 tokens, .* -> -'
}
t_stream_frames() { # the summary line goes to stderr
    run_t frames clip.mp4 --size 32 --fps 2 -o sfr.safetensors && want_rc 0 || return 1
    stream_same sfr.safetensors "" frames clip.mp4 --size 32 --fps 2 -o - &&
        want_err '^-: 4 frames of 32x32'
}
t_stream_tokens() { # the table goes to stderr; metadata "tokens" holds timings
    run_t tokens clip.mp4 --size 32 --fps 2 -o st.safetensors && want_rc 0 || return 1
    stream_same st.safetensors tokens tokens clip.mp4 --size 32 --fps 2 -o - &&
        want_err '^wrote: +standard output'
}
check embed-stdout-stream-equals-file t_stream_embed
check frames-stdout-stream-equals-file t_stream_frames
check tokens-stdout-stream-equals-file t_stream_tokens
# A terminal as standard output is refused (usage, nothing written); under the
# same pseudo-terminal, the command with its stdout piped runs.
t_stream_terminal() {
    for cmd in "embed x.wav --model tiny --quiet" "frames clip.mp4 --size 32" "tokens x.wav"; do
        script -qec "\"$EXE\" $cmd -o -" /dev/null </dev/null >"$tmp/out" 2>&1
        rc=$?
        want_rc 2 && grep -q 'which is a terminal: pipe it' "$tmp/out" ||
            { why="$cmd: ${why:-no refusal}"; return 1; }
    done
    script -qec "\"$EXE\" frames clip.mp4 --size 32 -o - | wc -c" /dev/null </dev/null >"$tmp/out" 2>&1
    rc=$?
    want_rc 0 || { why="frames -o - | wc -c: $why"; return 1; }
}
if command -v script >/dev/null 2>&1; then
    check stdout-stream-refuses-terminal t_stream_terminal
else
    echo "skip stdout-stream-refuses-terminal: no script command (util-linux) for a terminal"
fi
t_stream_usage() {
    run_t embed x.wav --model tiny -o - --json && want_rc 2 && want_err '-o - and --json both want' &&
        want_no_out || return 1
    run_t embed x.wav --model tiny -o - --resume && want_rc 2 && want_err '--resume has no output' &&
        want_no_out || return 1
    run_t tokens x.wav -o - --json && want_rc 2 && want_err '-o - and --json both want' && want_no_out
}
check stdout-stream-usage-errors t_stream_usage
# A reader that goes away: a reported write error (EPIPE), not death by SIGPIPE.
# Both outputs are larger than a pipe holds, so the write fails whenever `true` ends.
t_stream_epipe() {
    { timeout 60 "$EXE" frames clip.mp4 --size 224 --fps 10 -o - 2>"$tmp/err"; echo $? >"$tmp/rc"; } | true
    rc=$(cat "$tmp/rc")
    want_rc 1 && want_err 'frames: standard output: writing failed: Broken pipe' || return 1
    { timeout 60 "$EXE" embed x.wav --model tiny --quiet --threads 1 --tokens -o - 2>"$tmp/err"; echo $? >"$tmp/rc"; } | true
    rc=$(cat "$tmp/rc")
    want_rc 3 && want_err 'x.wav: writing -: standard output: writing failed: Broken pipe'
}
check stdout-stream-reader-gone-is-an-error t_stream_epipe

# Standard error is a file: with --progress 0.5 an input of a second or more gets
# a heartbeat line (which input, stage, tokens, elapsed), at most two a second.
# 70 s of audio takes 1.3 s on a fast machine (a heartbeat at 0.5 or 1 s) and
# well under the minute's limit under the sanitizers; with --progress 1 the fast
# machine printed none half the time.
t_heartbeat() {
    ff -f lavfi -i sine=frequency=330:sample_rate=16000 -t 70 long.wav || { why="ffmpeg: long.wav"; return 1; }
    start=$(date +%s)
    run_t embed long.wav --model tiny --threads 1 --progress 0.5 -o long.safetensors
    took=$(($(date +%s) - start))
    want_rc 0 && want_err 'embed: progress \[1/1\] long\.wav: [a-z]+ for [0-9]+:[0-9]{2}(, [0-9/]+ tokens, 70 s of recording)?, [0-9]+:[0-9]{2} elapsed' ||
        return 1
    [ "$(grep -c 'embed: progress' "$tmp/err")" -le $((2 * took + 2)) ] ||
        { why="more than two heartbeats a second"; return 1; }
}
check embed-progress-heartbeat-when-stderr-is-a-file t_heartbeat

# Corrupt-data tolerance scales with the file (issue 22). 40 s of 64x64 H.264 at
# 100 fps with MP2 audio in MP4 (5667 packets, as the file states), 64 KiB of
# seeded garbage written over its middle: `frames` counts about 41 corrupt
# packets or frames. The old limit, 32 whatever the length (--max-corrupt 32
# now), refuses it; the default (past both 32 and 1%: 56 here) decodes it with
# a warning; --max-corrupt 10 and 0.1% refuse it, naming the count, the share and
# the limit; 5% lets it through. About 4 s on 2 cores.
t_corrupt_share() {
    ff -f lavfi -i testsrc2=size=64x64:rate=100 -f lavfi -i sine=frequency=440:sample_rate=48000 \
        -t 40 -c:v libx264 -threads 1 -pix_fmt yuv420p -g 100 -b:v 400k -c:a mp2 -b:a 384k \
        garbled.mp4 || { why="ffmpeg: garbled.mp4"; return 1; }
    /usr/bin/python3 - <<'PY' || { why="cannot damage garbled.mp4"; return 1; }
import random
with open("garbled.mp4", "r+b") as f:
    f.seek(0, 2)
    f.seek(f.tell() // 2)
    f.write(random.Random(22).randbytes(65536))
PY
    run_t frames garbled.mp4 --size 32 -o gd.safetensors
    want_rc 0 && [ -s gd.safetensors ] &&
        want_err 'warning: garbled\.mp4: [0-9]+ corrupt packets or frames skipped or concealed, 0\.[0-9]+% of 5[0-9]{3} packets, within the 5[0-9] allowed \(32 or 1% of the file.s packets, whichever is more\)' ||
        return 1
    n=$(sed -n 's/.*garbled\.mp4: \([0-9]*\) corrupt packets or frames skipped.*/\1/p' "$tmp/err")
    [ "${n:-0}" -gt 32 ] || { why="$n corrupt: the case needs more than the old limit, 32"; return 1; }
    rm -f gd.safetensors
    run_t frames garbled.mp4 --size 32 --max-corrupt 32 -o gd.safetensors
    want_rc 1 && [ ! -e gd.safetensors ] &&
        want_err 'frames: garbled\.mp4: 33 corrupt packets or frames, 0\.[0-9]+% of about 5667 packets, more than the 32 allowed \(the last: stream [01], ' ||
        return 1
    run_t frames garbled.mp4 --size 32 --max-corrupt 10 -o gd.safetensors
    want_rc 1 && [ ! -e gd.safetensors ] &&
        want_err 'frames: garbled\.mp4: 11 corrupt packets or frames, 0\.[0-9]+% of about 5667 packets, more than the 10 allowed' ||
        return 1
    run_t frames garbled.mp4 --size 32 --max-corrupt 0.1% -o gd.safetensors
    want_rc 1 && [ ! -e gd.safetensors ] &&
        want_err 'frames: garbled\.mp4: 6 corrupt packets or frames, 0\.1[0-9]*% of about 5667 packets, more than the 5 allowed \(0\.1% of the file.s packets; the last' ||
        return 1
    run_t frames garbled.mp4 --size 32 --max-corrupt=5% -o gd.safetensors
    want_rc 0 && [ -s gd.safetensors ] &&
        want_err "garbled\.mp4: [34][0-9] corrupt packets or frames skipped or concealed, .* within the 28[0-9] allowed \(5% of the file.s packets\)" ||
        return 1
    for bad in 101% -1 2.5 1e1% %; do
        run_t frames garbled.mp4 --max-corrupt "$bad" -o gd.safetensors
        want_rc 2 && want_err "max-corrupt wants a count of corrupt packets \(0 to 1073741824\) or a share of the file's packets from 0% to 100% \(like 0\.5%\), got '$bad'" ||
            { why="--max-corrupt $bad: $why"; return 1; }
    done
}
check frames-corrupt-tolerance-scales-with-the-file t_corrupt_share

cli_summary
