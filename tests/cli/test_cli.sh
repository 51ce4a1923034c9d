#!/bin/sh
# shellcheck disable=SC2317 # the t_* checks are called indirectly, through check()
# test_cli.sh EXE: command-line behaviour of the `ringvit` tool: exit codes
# (0 ok, 1 failure, 2 usage error), help and version output, usage errors, and
# tiny `bench attention --json` and `bench comm --json` runs whose output must be
# valid JSON.
# Run by ctest as `sh test_cli.sh $<TARGET_FILE:ringvit_cli>`; POSIX sh only.
# Prints one line per check, then "N passed, M failed"; exits 1 on any failure.

EXE=$1
if [ -z "$EXE" ] || [ ! -x "$EXE" ]; then
    echo "usage: sh test_cli.sh PATH/TO/ringvit" >&2
    exit 2
fi

tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT INT TERM

pass=0
fail=0
failed=""
rc=0
why=""

# run_exe ARGS...: runs EXE; stdout to $tmp/out, stderr to $tmp/err, status to rc.
run_exe() {
    "$EXE" "$@" >"$tmp/out" 2>"$tmp/err"
    rc=$?
}
want_rc() {
    [ "$rc" -eq "$1" ] || { why="exit status $rc, want $1"; return 1; }
}
want_out() { # extended regular expression expected on stdout
    grep -Eq -- "$1" "$tmp/out" || { why="stdout lacks /$1/"; return 1; }
}
want_err() { # extended regular expression expected on stderr
    grep -Eq -- "$1" "$tmp/err" || { why="stderr lacks /$1/"; return 1; }
}
want_no_out() {
    [ ! -s "$tmp/out" ] || { why="stdout should be empty"; return 1; }
}
want_some_err() {
    [ -s "$tmp/err" ] || { why="stderr should say what is wrong"; return 1; }
}

# check NAME FUNCTION: runs one check and records the result.
check() {
    why=""
    if "$2"; then
        pass=$((pass + 1))
        echo "ok   $1"
    else
        fail=$((fail + 1))
        failed="$failed $1"
        echo "FAIL $1: ${why:-check failed}"
        if [ -s "$tmp/out" ]; then echo "     stdout:"; head -n 20 "$tmp/out" | sed 's/^/     | /'; fi
        if [ -s "$tmp/err" ]; then echo "     stderr:"; head -n 20 "$tmp/err" | sed 's/^/     | /'; fi
    fi
}

# ---- top level ----------------------------------------------------------------
t_help() { run_exe --help; want_rc 0 && want_out '^usage: ringvit' && want_out '^  bench '; }
t_help_short() { run_exe -h; want_rc 0 && want_out '^  bench '; }
t_version() {
    run_exe --version
    want_rc 0 && want_out '^ringvit [0-9]+\.[0-9]+\.[0-9]+$' &&
        want_out '^cuda: (no|backend built \(sm_[0-9,]+\), [0-9]+ devices?.*)$' && want_out '^mpi: (yes|no)$' && want_out '^media: (yes|no)' &&
        want_out '^gemm: oneDNN [0-9]+\.[0-9]+\.[0-9]+, isa [a-z0-9_]+$' && want_out '^threads: [1-9]' &&
        want_out '^cpu kernels: (avx512|avx2|blas) \(best on this CPU: (avx512|avx2|blas)\)$'
}
# RINGVIT_CPU_KERNELS: the forced set is the one --version and a bench header name;
# an unknown set is refused by the command that needs the CPU backend.
t_kernels_forced() {
    RINGVIT_CPU_KERNELS=blas run_exe --version
    want_rc 0 && want_out '^cpu kernels: blas \(best' || return 1
    RINGVIT_CPU_KERNELS=blas run_exe bench attention --seq 64 --heads 2 --dim 32
    want_rc 0 && want_out '^# ringvit bench attention: backend cpu kernels blas,'
}
# RINGVIT_CPU_KERNELS=avx2: the backend as on an AVX2-only CPU, oneDNN capped at
# AVX2 too (the bench's sgemm reference is the AVX2 rate) and bf16 refused.
t_kernels_avx2() {
    if ! grep -qw avx2 /proc/cpuinfo; then echo "  (kernels-avx2 skipped: this CPU lacks AVX2)"; return 0; fi
    RINGVIT_CPU_KERNELS=avx2 run_exe --version
    want_rc 0 && want_out '^gemm: oneDNN [0-9.]+, isa avx2$' && want_out '^cpu bf16: no \(' || return 1
    RINGVIT_CPU_KERNELS=avx2 run_exe bench attention --seq 64 --heads 2 --dim 32 --precision bf16
    want_rc 1 && want_err 'precision bf16: RINGVIT_CPU_KERNELS=avx2' || return 1
    RINGVIT_CPU_KERNELS=avx2 run_exe bench attention --seq 64 --heads 2 --dim 32 --json
    want_rc 0 && want_out '"gemm_isa": "avx2"'
}
# --precision: a bad name is a usage error; RINGVIT_CPU_BF16=0 refuses bf16 on any
# CPU, before any work, with a message naming the variable.
t_precision_refused() {
    run_exe bench attention --seq 64 --heads 2 --dim 32 --precision fp8
    want_rc 2 && want_err '--precision wants auto, f32 or bf16' || return 1
    RINGVIT_CPU_BF16=0 run_exe bench attention --seq 64 --heads 2 --dim 32 --precision bf16
    want_rc 1 && want_err 'precision bf16: turned off on the CPU by RINGVIT_CPU_BF16=0' || return 1
    RINGVIT_CPU_BF16=0 run_exe bench encoder --seq 64 --precision bf16
    want_rc 1 && want_err 'RINGVIT_CPU_BF16=0' || return 1
    RINGVIT_CPU_BF16=0 run_exe --version
    want_rc 0 && want_out '^cpu bf16: no \(precision bf16: turned off'
}
t_kernels_unknown() {
    RINGVIT_CPU_KERNELS=avx1024 run_exe bench attention --seq 64 --heads 2 --dim 32
    want_rc 1 && want_err 'RINGVIT_CPU_KERNELS=avx1024: unknown kernel set'
}
t_no_args() { run_exe; want_rc 2 && want_no_out && want_err '^usage: ringvit'; }
t_unknown_command() {
    run_exe nosuch
    want_rc 2 && want_no_out && want_err "^ringvit: unknown command 'nosuch'; see 'ringvit --help'"
}
t_unknown_option() {
    run_exe --no-such-option
    want_rc 2 && want_no_out && want_err "^ringvit: unknown option '--no-such-option'"
}
t_help_help() { run_exe help; want_rc 0 && want_out '^  bench '; }
t_help_nosuch() { run_exe help nosuch; want_rc 2 && want_err "^ringvit: unknown command 'nosuch'"; }

# ---- bench --------------------------------------------------------------------
t_help_bench() { run_exe help bench; want_rc 0 && want_out '^usage: ringvit bench' && want_out 'attention'; }
t_bench_help_same() {
    run_exe help bench && cp "$tmp/out" "$tmp/help1" && run_exe bench --help && want_rc 0 &&
        { cmp -s "$tmp/help1" "$tmp/out" || { why="'help bench' and 'bench --help' differ"; return 1; }; }
}
t_bench_no_bench() { run_exe bench; want_rc 2 && want_err 'attention'; }
t_bench_nosuch() {
    run_exe bench nosuch
    want_rc 2 && want_no_out && want_err "^ringvit: bench: unknown bench 'nosuch'"
}
t_bench_bad_flag() { run_exe bench --no-such-flag; want_rc 2 && want_no_out && want_some_err; }

# ---- bench attention ----------------------------------------------------------
t_attn_bad_flag() { run_exe bench attention --no-such-flag; want_rc 2 && want_no_out && want_some_err; }
t_attn_bad_number() { run_exe bench attention --seq notanumber; want_rc 2 && want_some_err; }
t_attn_help() { run_exe bench attention --help; want_rc 0 && want_out '--seq'; }
t_help_attn() { run_exe help bench attention; want_rc 0 && want_out '--seq'; }
t_attn_json() {
    run_exe bench attention --seq 64 --heads 2 --dim 32 --json
    want_rc 0 || return 1
    # stdout must be exactly one JSON document with a "gflops" key somewhere in it.
    /usr/bin/python3 -c '
import json, sys
doc = json.load(sys.stdin)
def has(o, key):
    if isinstance(o, dict):
        return key in o or any(has(v, key) for v in o.values())
    if isinstance(o, list):
        return any(has(v, key) for v in o)
    return False
sys.exit(0 if has(doc, "gflops") else 3)
' <"$tmp/out" 2>"$tmp/pyerr"
    case $? in
    0) return 0 ;;
    3) why="JSON has no \"gflops\" key" ;;
    *) why="stdout is not valid JSON: $(tail -n 1 "$tmp/pyerr")" ;;
    esac
    return 1
}

# ---- bench comm ---------------------------------------------------------------
t_comm_help() { run_exe bench comm --help; want_rc 0 && want_out '--backend' && want_out '--max-size'; }
t_comm_bad_backend() {
    run_exe bench comm --backend nosuch
    want_rc 2 && want_no_out && want_err "^ringvit: bench comm: --backend wants local or mpi"
}
t_comm_bad_size() { run_exe bench comm --max-size 1Q; want_rc 2 && want_no_out && want_err 'max-size'; }
t_comm_sizes_swapped() { run_exe bench comm --min-size 1M --max-size 4K; want_rc 2 && want_no_out && want_some_err; }
t_comm_json() {
    run_exe bench comm --backend local --ranks 2 --max-size 1M --json
    want_rc 0 || return 1
    # One JSON document: rows of both ops, none wrong, and "ok": true.
    /usr/bin/python3 -c '
import json, sys
doc = json.load(sys.stdin)
ops = {r["op"] for r in doc["rows"]}
good = doc["ok"] is True and ops == {"shift", "allreduce"} and all(r["wrong"] == 0 for r in doc["rows"])
good = good and doc["ranks"] == 2 and max(r["size"] for r in doc["rows"]) == 1 << 20
sys.exit(0 if good else 3)
' <"$tmp/out" 2>"$tmp/pyerr"
    case $? in
    0) return 0 ;;
    3) why="JSON lacks rows of both ops up to 1 MiB with no wrong elements and \"ok\": true" ;;
    *) why="stdout is not valid JSON: $(tail -n 1 "$tmp/pyerr")" ;;
    esac
    return 1
}
# The table: the heading, one row per op and size (4K and 8K), the footer.
t_comm_table() {
    run_exe bench comm --backend local --ranks 2 --max-size 8K
    want_rc 0 && want_out '^# op +size\(B\) +count +time\(us\) +algbw\(GB/s\) +busbw\(GB/s\) +#wrong$' &&
        want_out '^  allreduce +8192 +2048 +[0-9.]+ +[0-9.]+ +[0-9.]+ +0$' && want_out '^# OK$' || return 1
    [ "$(grep -cE '^  (shift|allreduce) ' "$tmp/out")" = 4 ] || { why="not 4 rows"; return 1; }
}

# ---- bench ring ----------------------------------------------------------------
t_ring_json() {
    run_exe bench ring --cp 3 --seq 300 --heads 3 --dim 16 --causal --backward --repeat 2 --json
    want_rc 0 || return 1
    /usr/bin/python3 -c '
import json, sys
d = json.load(sys.stdin)
ok = d["ok"] is True and d["cp"] == 3 and d["shard"] == "zigzag" and len(d["ranks"]) == 3
ok = ok and d["max_abs_err_o"] < 1e-5 and d["max_abs_err_dq"] < 1e-4 and d["repeat"] == 2
# zigzag: every rank the same causal work, adding up to the whole attention
# (4d per visible pair and head forward, 10d backward: 14 * 16 * 3 * 300*301/2)
gf = [r["gflop"] for r in d["ranks"]]
ok = ok and d["flops_spread"] < 0.05 and abs(sum(gf) - 14 * 16 * 3 * 300 * 301 / 2 * 1e-9) < 1e-9
# each run'"'"'s own ratio, and their median (of 2: the mean)
for p in ("fwd", "bwd"):
    runs = d[p + "_ratio_runs"]
    ok = ok and len(runs) == 2 and all(r > 0 for r in runs)
    ok = ok and abs(d[p + "_ratio_median"] - (runs[0] + runs[1]) / 2) < 1e-6 * max(runs)
sys.exit(0 if ok else 3)
' <"$tmp/out" 2>"$tmp/pyerr" || { why="bench ring JSON wrong: $(tail -n 1 "$tmp/pyerr")"; return 1; }
}
t_ring_ulysses_heads() {
    run_exe bench ring --strategy ulysses --cp 3 --heads 4 --seq 64
    want_rc 2 && want_no_out && want_err "heads.*4.*cp.*3"
}

# ---- probe, frames, bench ingest ----------------------------------------------
t_probe_missing() {
    run_exe probe "$tmp/no-such.mp4"
    want_rc 1 && want_no_out && want_err "^ringvit: probe: .*/no-such\.mp4: no such file"
}
t_probe_no_file() { run_exe probe; want_rc 2 && want_no_out && want_err "^ringvit: probe: "; }
t_frames_no_output() {
    run_exe frames "$tmp/no-such.mp4"
    want_rc 2 && want_no_out && want_err "^ringvit: frames: no output file"
}
t_frames_bad_fps() { run_exe frames x.mp4 -o "$tmp/o.st" --fps 0; want_rc 2 && want_err -- '--fps'; }
t_frames_not_media() {
    echo "not a video" >"$tmp/notes.mp4"
    run_exe frames "$tmp/notes.mp4" -o "$tmp/o.st"
    want_rc 1 && want_no_out && want_err "notes\.mp4: not a media file" &&
        { [ ! -e "$tmp/o.st" ] || { why="no output may be written"; return 1; }; }
}
# One second of 64x36 video with a tone: probe --json, frames, bench ingest --json.
make_clip() {
    [ -s "$tmp/clip.mp4" ] || ffmpeg -nostdin -v error -y -f lavfi -i testsrc2=size=64x36:rate=10 \
        -f lavfi -i sine=sample_rate=8000 -t 1 -c:v libx264 -c:a aac "$tmp/clip.mp4" >/dev/null 2>&1
}
t_probe_json() {
    make_clip || { why="ffmpeg could not make a clip"; return 1; }
    run_exe probe "$tmp/clip.mp4" --json
    want_rc 0 && /usr/bin/python3 -c '
import json, sys
d = json.load(sys.stdin)
s = d["streams"]
sys.exit(0 if d["video_stream"] == 0 and s[0]["width"] == 64 and s[1]["type"] == "audio" else 3)
' <"$tmp/out" 2>"$tmp/pyerr" || { why="probe JSON wrong: $(tail -n 1 "$tmp/pyerr")"; return 1; }
}
t_probe_stdin() {
    make_clip || { why="ffmpeg could not make a clip"; return 1; }
    "$EXE" probe - --json <"$tmp/clip.mp4" >"$tmp/out" 2>"$tmp/err"
    rc=$?
    want_rc 0 && /usr/bin/python3 -c '
import json, sys
d = json.load(sys.stdin)
sys.exit(0 if d["path"] == "-" and d["streams"][0]["width"] == 64 else 3)
' <"$tmp/out" 2>"$tmp/pyerr" || { why="probe of standard input wrong: $(tail -n 1 "$tmp/pyerr")"; return 1; }
}
t_probe_stdin_empty() {
    "$EXE" probe - </dev/null >"$tmp/out" 2>"$tmp/err"
    rc=$?
    want_rc 1 && want_no_out && want_err "^ringvit: probe: standard input is empty"
}
t_frames_file() {
    make_clip || { why="ffmpeg could not make a clip"; return 1; }
    run_exe frames "$tmp/clip.mp4" --fps 4 --size 16 -o "$tmp/clip.safetensors"
    want_rc 0 && want_out 'clip\.safetensors: 4 frames' && /usr/bin/python3 -c '
import json, struct, sys
b = open(sys.argv[1], "rb").read()
h = json.loads(b[8:8 + struct.unpack("<Q", b[:8])[0]])
ok = h["frames"]["shape"] == [4, 16, 16, 3] and h["frames"]["dtype"] == "U8"
ok = ok and h["frame_time"]["dtype"] == "F64" and h["audio"]["shape"] == [16000]
ok = ok and json.loads(h["__metadata__"]["probe"])["video_stream"] == 0
sys.exit(0 if ok else 3)
' "$tmp/clip.safetensors" 2>"$tmp/pyerr" || { why="output tensors wrong: $(tail -n 1 "$tmp/pyerr")"; return 1; }
}
t_bench_ingest_json() {
    make_clip || { why="ffmpeg could not make a clip"; return 1; }
    run_exe bench ingest "$tmp/clip.mp4" --fps 5 --size 16 --json
    want_rc 0 && /usr/bin/python3 -c '
import json, sys
d = json.load(sys.stdin)
sys.exit(0 if d["ok"] is True and [r["decoder"] for r in d["rows"]] == ["ringvit", "ffmpeg"] else 3)
' <"$tmp/out" 2>"$tmp/pyerr" || { why="bench ingest JSON wrong: $(tail -n 1 "$tmp/pyerr")"; return 1; }
}

# ---- tokens -------------------------------------------------------------------
t_tokens_missing() {
    run_exe tokens "$tmp/no-such.mp4"
    want_rc 1 && want_no_out && want_err "^ringvit: tokens: .*/no-such\.mp4: no such file"
}
t_tokens_bad_shard() {
    run_exe tokens x.mp4 --shard diagonal
    want_rc 2 && want_no_out && want_err "^ringvit: tokens: --shard wants contiguous or zigzag"
}
# Two seconds at 4 fps, 32 px: 8 frames -> 4 tubelets x 4 patches = 16 video
# tokens; 32000 samples -> 198 fbank frames -> 12 steps x 8 bands = 96 audio.
t_tokens_json() {
    [ -s "$tmp/clip2.mp4" ] || ffmpeg -nostdin -v error -y -f lavfi -i testsrc2=size=64x36:rate=10 \
        -f lavfi -i sine=sample_rate=8000 -t 2 -c:v libx264 -c:a aac "$tmp/clip2.mp4" >/dev/null 2>&1 ||
        { why="ffmpeg could not make a clip"; return 1; }
    run_exe tokens "$tmp/clip2.mp4" --fps 4 --size 32 --cp 3 --shard zigzag --json -o "$tmp/tok.st"
    want_rc 0 && /usr/bin/python3 -c '
import json, struct, sys
d = json.load(open(sys.argv[1]))
b = open(sys.argv[2], "rb").read()
h = json.loads(b[8:8 + struct.unpack("<Q", b[:8])[0]])
ok = d["seq_len"] == 112 and d["tokens"] == {"video": 16, "audio": 96, "cls": 0}
ok = ok and sum(r["len"] for r in d["shard"]["per_rank"]) == d["seq_len"] and len(d["shard"]["per_rank"]) == 3
ok = ok and h["token_modality"]["shape"] == [112] and h["video_patches"]["shape"] == [16, 1536]
ok = ok and h["audio_fbank"]["shape"] == [198, 128] and h["token_time"]["dtype"] == "F64"
sys.exit(0 if ok else 3)
' "$tmp/out" "$tmp/tok.st" 2>"$tmp/pyerr" || { why="tokens JSON or output wrong: $(tail -n 1 "$tmp/pyerr")"; return 1; }
}

check help t_help
check help-short t_help_short
check version t_version
check kernels-forced t_kernels_forced
check kernels-unknown t_kernels_unknown
check no-args t_no_args
check unknown-command t_unknown_command
check unknown-option t_unknown_option
check help-alone t_help_help
check help-nosuch t_help_nosuch
check help-bench t_help_bench
check bench-help-same t_bench_help_same
check bench-no-bench t_bench_no_bench
check bench-nosuch t_bench_nosuch
check bench-bad-flag t_bench_bad_flag
check attention-bad-flag t_attn_bad_flag
check attention-bad-number t_attn_bad_number
check attention-help t_attn_help
check help-bench-attention t_help_attn
check attention-json t_attn_json
check comm-help t_comm_help
check comm-bad-backend t_comm_bad_backend
check comm-bad-size t_comm_bad_size
check comm-sizes-swapped t_comm_sizes_swapped
check comm-json t_comm_json
check comm-table t_comm_table
check ring-json t_ring_json
check ring-ulysses-heads t_ring_ulysses_heads
check kernels-avx2 t_kernels_avx2
check precision-refused t_precision_refused
check probe-missing t_probe_missing
check probe-no-file t_probe_no_file
check frames-no-output t_frames_no_output
check frames-bad-fps t_frames_bad_fps
check frames-not-media t_frames_not_media
check probe-json t_probe_json
check probe-stdin t_probe_stdin
check probe-stdin-empty t_probe_stdin_empty
check frames-file t_frames_file
check bench-ingest-json t_bench_ingest_json
check tokens-missing t_tokens_missing
check tokens-bad-shard t_tokens_bad_shard
check tokens-json t_tokens_json

echo "$pass passed, $fail failed"
if [ "$fail" -ne 0 ]; then
    echo "failed:$failed"
    exit 1
fi
exit 0
