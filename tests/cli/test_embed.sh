#!/bin/sh
# shellcheck disable=SC2317 # the t_* checks are called indirectly, through check()
# test_embed.sh EXE: `ringvit embed` end to end on recordings generated with the
# ffmpeg command (a 6 s test pattern with a tone, a still image, a tone alone, a
# video without audio): the outputs of --cp 1, 2, 3, 4 and of every strategy
# agree within 1e-5 relative; modalities, a weights file, the per-token metadata
# against `ringvit tokens`; a batch of 8 good and 3 bad files (exit 3, the log);
# a batch killed with SIGKILL and rerun with --resume; two --shard jobs over one
# folder, a stale claim taken over and a live one left; SIGTERM; usage errors
# (exit 2) and setup failures (exit 1); --json. Outputs are read by
# embed_compare.py (json + numpy, no safetensors package).
# Run by ctest as `sh test_embed.sh $<TARGET_FILE:ringvit_cli>`; POSIX sh only.
# Prints one line per check, then "N passed, M failed"; exits 1 on any failure,
# including a missing test dependency (ffmpeg, numpy).

EXE=$1
if [ -z "$EXE" ] || [ ! -x "$EXE" ]; then
    echo "usage: sh test_embed.sh PATH/TO/ringvit" >&2
    exit 2
fi
EXE=$(cd "$(dirname "$EXE")" && pwd)/$(basename "$EXE")
HERE=$(cd "$(dirname "$0")" && pwd)
PY=/usr/bin/python3
CMP="$HERE/embed_compare.py"
if ! command -v ffmpeg >/dev/null 2>&1; then
    echo "FAILED: no ffmpeg command to generate the test recordings (a test dependency: scripts/install-deps.sh)"
    exit 1
fi
if ! "$PY" -c 'import numpy' 2>/dev/null; then
    echo "FAILED: $PY has no numpy to read the outputs (a test dependency: scripts/install-deps.sh)"
    exit 1
fi

tmp=$(mktemp -d) || exit 1
bg=""
trap 'if [ -n "$bg" ]; then kill -9 "$bg" 2>/dev/null; fi; rm -rf "$tmp"' EXIT INT TERM
cd "$tmp" || exit 1

pass=0
fail=0
failed=""
rc=0
why=""
# Small and fast: 32 px frames (2 x 2 patches) at 2 fps.
SMALL="--size 32 --fps 2 --quiet"

run_exe() {
    "$EXE" "$@" >"$tmp/out" 2>"$tmp/err"
    rc=$?
}
want_rc() {
    [ "$rc" -eq "$1" ] || { why="exit status $rc, want $1"; return 1; }
}
want_err() {
    grep -Eq -- "$1" "$tmp/err" || { why="stderr lacks /$1/"; return 1; }
}
want_no_out() {
    [ ! -s "$tmp/out" ] || { why="stdout should be empty"; return 1; }
}
# same A B [RTOL]: the outputs agree (default 1e-5 relative).
same() {
    "$PY" "$CMP" same "$1" "$2" --rtol "${3:-1e-5}" >"$tmp/cmp" 2>&1 ||
        { why="$1 vs $2: $(tail -n 1 "$tmp/cmp")"; return 1; }
}
# ok FILE key=value...: a complete output with these counts.
ok() {
    "$PY" "$CMP" check "$@" >"$tmp/cmp" 2>&1 || { why="$(tail -n 1 "$tmp/cmp")"; return 1; }
}
no_tmp_files() { # DIR: no temporary or scratch file left
    left=$(find "$1" -name '*.tmp.*' -o -name '.ringvit-scratch*' | head -n 3)
    [ -z "$left" ] || { why="temporary files left: $left"; return 1; }
}

check() {
    why=""
    if "$2"; then
        pass=$((pass + 1))
        echo "ok   $1"
    else
        fail=$((fail + 1))
        failed="$failed $1"
        echo "FAIL $1: ${why:-check failed}"
        if [ -s "$tmp/out" ]; then echo "     stdout:"; head -n 10 "$tmp/out" | sed 's/^/     | /'; fi
        if [ -s "$tmp/err" ]; then echo "     stderr:"; head -n 10 "$tmp/err" | sed 's/^/     | /'; fi
    fi
}

# ---- recordings ------------------------------------------------------------------
ff() { ffmpeg -nostdin -v error -y "$@" >/dev/null 2>&1; }
ff -f lavfi -i testsrc2=size=96x64:rate=10 -f lavfi -i sine=frequency=440:sample_rate=8000 \
    -t 6 -c:v libx264 -c:a aac -movflags +faststart clip.mp4 &&
    ff -f lavfi -i testsrc2=size=96x64:rate=10 -frames:v 1 still.png &&
    ff -f lavfi -i sine=frequency=330:sample_rate=16000 -t 3 tone.wav &&
    ff -f lavfi -i testsrc2=size=96x64:rate=10 -t 4 -c:v libx264 silent.mp4 &&
    ff -f lavfi -i testsrc2=size=64x64:rate=25 -f lavfi -i sine=sample_rate=16000 \
        -t 8 -c:v libx264 -c:a aac long.mp4 || {
    echo "FAIL ffmpeg could not generate the test recordings"
    exit 1
}

# ---- usage errors (2) and setup failures (1) ---------------------------------------
t_help() {
    run_exe embed --help
    want_rc 0 && grep -q -- '--cp C' "$tmp/out" && grep -q -- '--ranks W' "$tmp/out" &&
        grep -q -- '--prefetch N' "$tmp/out" && grep -q 'RANDOM' "$tmp/out" &&
        grep -q -- '--shard I/N ' "$tmp/out" && grep -q -- '--claim-stale SEC ' "$tmp/out" ||
        { why="${why:-help lacks --cp, --shard or the random-weights warning}"; return 1; }
}
usage() { # ARGS...: exit 2, nothing on stdout, a message naming embed
    run_exe embed "$@"
    want_rc 2 && want_no_out && want_err '^ringvit: embed: '
}
t_no_input() { usage; }
t_bad_flag() { usage clip.mp4 --no-such-flag; }
t_o_two() { usage clip.mp4 still.png -o x.safetensors; }
t_o_and_dir() { usage clip.mp4 -o x.safetensors --out-dir d; }
t_nothing_left() { usage clip.mp4 --no-audio --no-video; }
t_bad_strategy() { usage clip.mp4 --strategy diagonal; }
t_bad_backend() { usage clip.mp4 --backend carrier-pigeon; }
t_bad_cp() { usage clip.mp4 --cp 0; }
t_bad_manifest() { usage --manifest "$tmp/no-such-list.txt"; }
t_ulysses_heads() { usage clip.mp4 --strategy ulysses --cp 2; } # tiny has 3 heads
t_bad_size() { usage clip.mp4 --size 40; }
t_bad_preset() { usage clip.mp4 --model enormous; }
t_stdin() { usage -; }
t_missing_model() {
    run_exe embed clip.mp4 --model "$tmp/no-such-model.safetensors" -o x.safetensors
    want_rc 1 && want_no_out && want_err 'no-such-model' &&
        { [ ! -e x.safetensors ] || { why="an output was written"; return 1; }; }
}
# Without a GPU (this machine) --device cuda fails cleanly: a build without CUDA
# refuses the flag (usage, 2), a CUDA build finds no device (1); nothing is written.
t_cuda() {
    run_exe embed clip.mp4 --device cuda -o x.safetensors
    { { want_rc 1 && want_err 'no CUDA device'; } ||
        { want_rc 2 && want_err 'device cuda: this build has no CUDA'; }; } && [ ! -e x.safetensors ]
}
t_bad_ranks() { usage clip.mp4 --ranks 3 --cp 2; }
t_ranks_mpi() { usage clip.mp4 --ranks 2 --backend mpi; }
# --backend nccl is a usage error here: no NCCL in the build, or no --device cuda.
t_nccl() {
    run_exe embed clip.mp4 --backend nccl -o x.safetensors
    want_rc 2 && want_err 'backend nccl: this build has no NCCL|backend nccl moves GPU memory' &&
        [ ! -e x.safetensors ]
}
t_shard_usage() {
    for v in 2/2 x 1/0; do
        usage clip.mp4 --out-dir d --shard "$v" && want_err "^ringvit: embed: --shard wants I/N.*'$v'" ||
            return 1
    done
    usage clip.mp4 --shard 0/2 && want_err '^ringvit: embed: --shard needs --out-dir' &&
        usage clip.mp4 --shard 0/2 -o - && want_err '^ringvit: embed: --shard .* -o - ' &&
        usage clip.mp4 --out-dir d --claim-stale 5 && want_err '^ringvit: embed: --claim-stale .*--shard'
}

# ---- the same outputs for every rank count and strategy ----------------------------
# 6 s at 2 fps, 32 px: 12 frames -> 6 tubelets x 4 patches = 24 video tokens;
# 96000 samples -> 598 fbank frames -> 37 steps x 8 bands = 296 audio; + CLS.
t_cp1() {
    run_exe embed clip.mp4 $SMALL --tokens -o cp1.safetensors
    want_rc 0 && ok cp1.safetensors tokens=321 video=24 audio=296 cls=1 per_token=1 dim=192 cp=1
}
t_cp() {
    for n in 2 3 4; do
        run_exe embed clip.mp4 $SMALL --tokens --cp "$n" -o "cp$n.safetensors"
        want_rc 0 && ok "cp$n.safetensors" cp="$n" && same "cp$n.safetensors" cp1.safetensors || return 1
    done
}
t_strategies() {
    for s in allgather ulysses; do
        run_exe embed clip.mp4 $SMALL --tokens --cp 3 --strategy "$s" -o "$s.safetensors"
        want_rc 0 && same "$s.safetensors" cp1.safetensors || return 1
    done
}
t_causal() {
    run_exe embed clip.mp4 $SMALL --tokens --causal -o causal1.safetensors && want_rc 0 &&
        run_exe embed clip.mp4 $SMALL --tokens --causal --cp 3 -o causal3.safetensors && want_rc 0 &&
        same causal3.safetensors causal1.safetensors || return 1
    # and causal attention does change the result
    if "$PY" "$CMP" same causal1.safetensors cp1.safetensors >/dev/null 2>&1; then
        why="causal and full attention gave the same output"
        return 1
    fi
}
# A weights file written by `ringvit init` with the preset's seed is the preset.
t_weights_file() {
    run_exe init --preset tiny --seed 0 -o tiny.safetensors && want_rc 0 &&
        run_exe embed clip.mp4 $SMALL --tokens --model tiny.safetensors --cp 2 -o file.safetensors &&
        want_rc 0 && same file.safetensors cp1.safetensors
}
# The per-token metadata is what `ringvit tokens` makes of the same recording.
t_token_meta() {
    run_exe tokens clip.mp4 --size 32 --fps 2 --cls -o tok.safetensors && want_rc 0 || return 1
    CMPDIR="$HERE" "$PY" -c '
import os, sys
sys.path.insert(0, os.environ["CMPDIR"])
from embed_compare import load
import numpy as np
a, _ = load(sys.argv[1]); b, _ = load(sys.argv[2])
for k in ("token_time", "token_pos", "token_modality"):
    if not np.array_equal(a[k], b[k]):
        print(k + " differs from ringvit tokens"); sys.exit(1)
' cp1.safetensors tok.safetensors >"$tmp/cmp" 2>&1 || { why="$(tail -n 1 "$tmp/cmp")"; return 1; }
}

# ---- modalities ---------------------------------------------------------------------
t_no_audio() {
    run_exe embed clip.mp4 $SMALL --no-audio --tokens --cp 2 -o na.safetensors
    want_rc 0 && ok na.safetensors video=24 audio=0 tokens=25
}
t_no_video() {
    run_exe embed clip.mp4 $SMALL --no-video --tokens --cp 2 -o nv.safetensors
    want_rc 0 && ok nv.safetensors video=0 audio=296 tokens=297
}
# A still image is a one-frame video: one tubelet (the frame repeated) of 4 patches.
t_still() {
    run_exe embed still.png $SMALL --tokens --cp 2 -o still.safetensors
    want_rc 0 && ok still.safetensors video=4 audio=0 tokens=5 segments=1
}
# 3 s of audio: 298 fbank frames -> 18 steps x 8 bands.
t_audio_only() {
    run_exe embed tone.wav $SMALL --tokens --cp 3 -o tone.safetensors &&
        want_rc 0 && ok tone.safetensors video=0 audio=144 tokens=145 &&
        run_exe embed tone.wav $SMALL --tokens -o tone1.safetensors && same tone.safetensors tone1.safetensors
}
t_silent_video() {
    run_exe embed silent.mp4 $SMALL --tokens --cp 2 -o silent.safetensors
    want_rc 0 && ok silent.safetensors video=16 audio=0 tokens=17
}
# --segment 2 over 6 s: three windows.
t_segments() {
    run_exe embed clip.mp4 $SMALL --segment 2 -o seg.safetensors
    want_rc 0 && ok seg.safetensors segments=3 per_token=0
}

# ---- batches ------------------------------------------------------------------------
make_batch() {
    mkdir -p batch && cd batch || return 1
    for i in 1 2 3 4 5 6 7 8; do cp ../clip.mp4 "good$i.mp4"; done
    sz=$(wc -c <../clip.mp4)
    head -c $((sz / 2)) ../clip.mp4 >cut.mp4          # headers fine, the data stops at 3 s
    head -c 40000 /dev/urandom >noise.mp4               # not media at all
    echo "these are not the frames you are looking for" >notes.txt
    printf '# a batch\n\ngood1.mp4\ngood2.mp4\n  cut.mp4\ngood3.mp4\ngood4.mp4\nnoise.mp4\n' >list.txt
    printf 'good5.mp4\ngood6.mp4   \nnotes.txt\n# good9.mp4\ngood7.mp4\ngood8.mp4\n' >>list.txt
    cd .. || return 1
}
t_batch() {
    make_batch || { why="could not make the batch"; return 1; }
    run_exe embed --manifest batch/list.txt --out-dir batchout --size 32 --fps 2 --cp 2 --json
    want_rc 3 || return 1
    n=$(find batchout -name '*.safetensors' | wc -l)
    [ "$n" -eq 8 ] || { why="$n outputs, want 8"; return 1; }
    for i in 1 2 3 4 5 6 7 8; do ok "batchout/good$i.safetensors" tokens=321 || return 1; done
    "$PY" -c '
import json, sys
log = [json.loads(l) for l in open("batchout/embed-log.jsonl")]
bad = [e for e in log if e["status"] == "failed"]
assert len(log) == 11, "%d log lines" % len(log)
assert sorted(e["path"].split("/")[-1] for e in bad) == ["cut.mp4", "noise.mp4", "notes.txt"], bad
assert all(e["error"] and e["output"] for e in bad), bad
assert all(e["status"] == "ok" and e["tokens"] == 321 and e["error"] is None for e in log if e not in bad)
lines = [json.loads(l) for l in open(sys.argv[1])]
assert len(lines) == 11 and all({"path", "output", "status", "seconds", "tokens", "stages_s",
                                  "peak_rss_mb"} <= set(l) for l in lines)
assert [l["status"] for l in lines].count("failed") == 3
' "$tmp/out" >"$tmp/cmp" 2>&1 || { why="log or --json wrong: $(tail -n 1 "$tmp/cmp")"; return 1; }
    grep -q 'cut\.mp4' "$tmp/err" && grep -q 'noise\.mp4' "$tmp/err" ||
        { why="the failed inputs are not named on stderr"; return 1; }
}
t_resume_skips() {
    run_exe embed --manifest batch/list.txt --out-dir batchout --size 32 --fps 2 --resume --json
    want_rc 3 && [ "$(grep -c '"status":"skipped"' "$tmp/out")" -eq 8 ] ||
        { why="${why:-want 8 skipped inputs}"; return 1; }
}
# Data parallel: 4 threads in groups of 2, then of 1, take the batch's inputs as
# each group becomes free: the outputs equal the one-group run's (batchout, --cp
# 2): exactly in groups of 2 (the same computation: cp 2, one thread a rank), within
# the default relative tolerance in groups of 1 (cp 1: attention's sums split
# otherwise); every input is logged once, with the same three failures.
dp_batch() { # W C DIR
    run_exe embed --manifest batch/list.txt --out-dir "$3" --size 32 --fps 2 --ranks "$1" \
        --cp "$2" --json
    want_rc 3 || return 1
    tol=$([ "$2" -eq 2 ] && echo 0 || echo 1e-5)
    for i in 1 2 3 4 5 6 7 8; do same "$3/good$i.safetensors" "batchout/good$i.safetensors" "$tol" || return 1; done
    "$PY" -c '
import json, sys
groups = int(sys.argv[2])
log = [json.loads(l) for l in open(sys.argv[1] + "/embed-log.jsonl")]
names = sorted(e["path"].split("/")[-1] for e in log)
assert len(log) == 11 and len(set(names)) == 11, names
bad = sorted(e["path"].split("/")[-1] for e in log if e["status"] == "failed")
assert bad == ["cut.mp4", "noise.mp4", "notes.txt"], bad
used = {e["group"] for e in log}
assert used <= set(range(groups)) and len(used) >= 2, used
lines = [json.loads(l) for l in open(sys.argv[3])]
assert len(lines) == 11 and all(l["groups"] == groups and "encoder_wait_s" in l for l in lines)
' "$3" $(($1 / $2)) "$tmp/out" >"$tmp/cmp" 2>&1 || { why="log or --json wrong: $(tail -n 1 "$tmp/cmp")"; return 1; }
}
t_dp_cp2() { dp_batch 4 2 dp42; }
t_dp_cp1() { dp_batch 4 1 dp41; }

# --shard: two jobs started at once over one folder, as on two machines sharing
# it (the batch reordered so that neither starts on a failing input: job 0 at
# input 0, job 1 at input 5). Each exits 3 when it failed an input of its own,
# else 0; every output equals the one-job run's (cp 2, theirs cp 1: within the
# default relative tolerance); over the two logs
# every input appears once, the failures as failed; the claims of the failures
# stay, marked failed, the others are gone; the index lists the 8 outputs
# whichever job wrote them; each job says how many it left to the other.
t_shard_two_jobs() {
    printf 'good1.mp4\ngood2.mp4\ncut.mp4\ngood3.mp4\ngood4.mp4\ngood5.mp4\nnoise.mp4\n' >batch/shard.txt
    printf 'good6.mp4\nnotes.txt\ngood7.mp4\ngood8.mp4\n' >>batch/shard.txt
    for s in 0 1; do
        "$EXE" embed --manifest batch/shard.txt --out-dir shards --size 32 --fps 2 --threads 1 \
            --shard "$s/2" >"$tmp/shard$s.out" 2>"$tmp/shard$s.err" &
        eval "pid$s=\$!"
    done
    wait "$pid0"
    rc0=$?
    wait "$pid1"
    rc1=$?
    cat "$tmp/shard0.err" "$tmp/shard1.err" >"$tmp/err"
    CMPDIR="$HERE" "$PY" -c '
import glob, json, os, re, sys
sys.path.insert(0, os.environ["CMPDIR"])
from embed_compare import SAME_RTOL, same
rcs, errs = [int(sys.argv[1]), int(sys.argv[2])], sys.argv[3:5]
for i in range(1, 9):
    same("shards/good%d.safetensors" % i, "batchout/good%d.safetensors" % i, SAME_RTOL)
logs = [[json.loads(l) for l in open("shards/embed-log.shard-%d-of-2.jsonl" % s)] for s in (0, 1)]
names = sorted(os.path.basename(e["path"]) for log in logs for e in log)
assert len(names) == 11 and len(set(names)) == 11, names
bad = sorted(os.path.basename(e["path"]) for log in logs for e in log if e["status"] == "failed")
assert bad == ["cut.mp4", "noise.mp4", "notes.txt"], bad
for s in (0, 1):
    failed = any(e["status"] == "failed" for e in logs[s])
    assert rcs[s] == (3 if failed else 0), ("job %d exit %d" % (s, rcs[s]), failed)
    left = re.search(r", (\d+) left to other shards of 11", open(errs[s]).read())
    assert left and int(left.group(1)) == 11 - len(logs[s]), ("job %d summary" % s, left and left.group(0))
claims = sorted(os.path.basename(p) for p in glob.glob("shards/*.claim"))
assert claims == ["cut.safetensors.claim", "noise.safetensors.claim", "notes.safetensors.claim"], claims
assert all(json.load(open("shards/" + c))["status"] == "failed" for c in claims)
index = [json.loads(l) for l in open("shards/index.jsonl")]
assert sorted(os.path.basename(e["output"]) for e in index) == ["good%d.safetensors" % i for i in range(1, 9)], index
assert all(e["status"] == "ok" and e["tokens"] == 321 for e in index), index
left = [p for p in os.listdir("shards") if p.startswith(".") or ".tmp." in p or p.endswith(".lock")]
assert not left, left
' "$rc0" "$rc1" "$tmp/shard0.err" "$tmp/shard1.err" >"$tmp/cmp" 2>&1 ||
        { why="$(tail -n 1 "$tmp/cmp")"; return 1; }
}
# A claim left by a dead job (not refreshed for over --claim-stale) is taken
# over and its input embedded; a live one (just written) is left to its job.
t_shard_stale() {
    mkdir -p stale && touch -d '1 hour ago' stale/good1.safetensors.claim &&
        echo '{"host":"elsewhere","pid":1,"shard":"1/2","status":"running"}' >stale/good2.safetensors.claim ||
        { why="could not make the claims"; return 1; }
    run_exe embed batch/good1.mp4 batch/good2.mp4 --out-dir stale --size 32 --fps 2 --threads 1 \
        --shard 0/1 --claim-stale 60
    want_rc 0 && want_err 'good1\.mp4: taking over the claim' &&
        want_err ': 1 ok, 0 failed, 0 skipped, 1 left to other shards of 2 ' &&
        same stale/good1.safetensors batchout/good1.safetensors || return 1
    [ ! -e stale/good2.safetensors ] || { why="the input of a live claim was embedded"; return 1; }
    [ ! -e stale/good1.safetensors.claim ] && [ -e stale/good2.safetensors.claim ] ||
        { why="claims: $(ls stale)"; return 1; }
}

# Two inputs named alike: the second output gets -2, and the log says why.
t_same_names() {
    mkdir -p a b && cp still.png a/pic.png && cp still.png b/pic.png &&
        run_exe embed a/pic.png b/pic.png $SMALL --out-dir same && want_rc 0 &&
        ok same/pic.safetensors && ok same/pic-2.safetensors &&
        grep -q '"note"' same/embed-log.jsonl || { why="${why:-no note in the log}"; return 1; }
}

# A heavier batch, killed part-way: 8 s at 25 fps -> 64 px frames at 8 fps.
HEAVY="--size 64 --fps 8 --tokens --quiet"
start_bg() { # DIR [FLAGS...]: the batch in the background; waits for its first output
    d=$1
    shift
    mkdir -p heavy
    for i in 1 2 3 4 5 6; do cp long.mp4 "heavy/rec$i.mp4"; done
    "$EXE" embed heavy/rec1.mp4 heavy/rec2.mp4 heavy/rec3.mp4 heavy/rec4.mp4 heavy/rec5.mp4 \
        heavy/rec6.mp4 --out-dir "$d" $HEAVY "$@" >/dev/null 2>"$tmp/bg.err" &
    bg=$!
    n=0
    while [ -z "$(find "$d" -name '*.safetensors' 2>/dev/null | head -n 1)" ] &&
        kill -0 "$bg" 2>/dev/null && [ "$n" -lt 600 ]; do
        sleep 0.05
        n=$((n + 1))
    done
}
t_kill_resume() {
    start_bg killed
    kill -9 "$bg" 2>/dev/null
    wait "$bg" 2>/dev/null
    bg=""
    # What a kill during a write leaves: a temporary file of a process now gone,
    # and, as a writer without temp+rename would, a cut-off output.
    dead=$(sh -c 'echo $$')
    head -c 100 killed/rec1.safetensors >"killed/rec5.safetensors.tmp.$dead"
    [ -e killed/rec6.safetensors ] || head -c 100 killed/rec1.safetensors >killed/rec6.safetensors
    run_exe embed heavy/rec1.mp4 heavy/rec2.mp4 heavy/rec3.mp4 heavy/rec4.mp4 heavy/rec5.mp4 \
        heavy/rec6.mp4 --out-dir killed $HEAVY --resume
    want_rc 0 || return 1
    for i in 1 2 3 4 5 6; do ok "killed/rec$i.safetensors" per_token=1 || return 1; done
    no_tmp_files killed && grep -q '"status":"skipped"' killed/embed-log.jsonl ||
        { why="${why:-nothing was skipped: the first output was not kept}"; return 1; }
    # The resumed outputs equal a run that was never interrupted.
    run_exe embed heavy/rec6.mp4 $HEAVY -o whole6.safetensors && same killed/rec6.safetensors whole6.safetensors
}
# Killed with 2 groups, resumed with 3: every input ends complete, embedded once
# in the resumed run unless its output was already complete, and equal to a run
# never interrupted.
t_dp_kill_resume() {
    start_bg dpkilled --ranks 2 --cp 1
    kill -9 "$bg" 2>/dev/null
    wait "$bg" 2>/dev/null
    bg=""
    before=$("$PY" "$CMP" complete dpkilled/*.safetensors 2>/dev/null | wc -l)
    run_exe embed heavy/rec1.mp4 heavy/rec2.mp4 heavy/rec3.mp4 heavy/rec4.mp4 heavy/rec5.mp4 \
        heavy/rec6.mp4 --out-dir dpkilled $HEAVY --resume --ranks 3 --cp 1 --json
    want_rc 0 || return 1
    for i in 1 2 3 4 5 6; do ok "dpkilled/rec$i.safetensors" per_token=1 || return 1; done
    skipped=$(grep -c '"status":"skipped"' "$tmp/out")
    embedded=$(grep -c '"status":"ok"' "$tmp/out")
    [ "$skipped" -eq "$before" ] && [ "$embedded" -eq $((6 - before)) ] ||
        { why="$before complete before, then $skipped skipped and $embedded embedded"; return 1; }
    no_tmp_files dpkilled && same dpkilled/rec6.safetensors whole6.safetensors
}
# --prefetch 1 on equal files: each input after the first is decoded and tokenized
# while the encoder works on the one before, so the encoder waits under 5% of its
# encode time for it; --prefetch 0 waits for every decode. (The small preset: its
# encode takes several times the decode, so a loaded machine does not flake it.)
t_prefetch() {
    mkdir -p pf && for i in 1 2 3 4; do cp long.mp4 "pf/eq$i.mp4"; done
    run_exe embed pf/eq1.mp4 pf/eq2.mp4 pf/eq3.mp4 pf/eq4.mp4 --size 64 --fps 8 --quiet --json --model small \
        --out-dir pf1 --prefetch 1
    want_rc 0 && cp "$tmp/out" "$tmp/pf1.json" || return 1
    run_exe embed pf/eq1.mp4 pf/eq2.mp4 pf/eq3.mp4 pf/eq4.mp4 --size 64 --fps 8 --quiet --json --model small \
        --out-dir pf0 --prefetch 0
    want_rc 0 || return 1
    for i in 1 2 3 4; do same "pf1/eq$i.safetensors" "pf0/eq$i.safetensors" 0 || return 1; done
    "$PY" -c '
import json, sys
ahead = [json.loads(l) for l in open(sys.argv[1])]
turn = [json.loads(l) for l in open(sys.argv[2])]
for l in ahead[1:]:
    assert l["encoder_wait_s"] < 0.05 * l["stages_s"]["encode"], (l["path"], l["encoder_wait_s"], l["stages_s"]["encode"])
assert all(l["encoder_wait_s"] > 0.01 for l in turn), [l["encoder_wait_s"] for l in turn]
' "$tmp/pf1.json" "$tmp/out" >"$tmp/cmp" 2>&1 || { why="$(tail -n 1 "$tmp/cmp")"; return 1; }
}
t_sigterm() {
    start_bg termed
    kill -TERM "$bg" 2>/dev/null
    wait "$bg"
    rc=$?
    bg=""
    cp "$tmp/bg.err" "$tmp/err"
    [ "$rc" -eq 143 ] || { why="exit status $rc after SIGTERM, want 143"; return 1; }
    want_err 'stopped by a signal' && no_tmp_files termed || return 1
    for f in termed/*.safetensors; do ok "$f" per_token=1 || return 1; done
}

check help t_help
check usage-no-input t_no_input
check usage-bad-flag t_bad_flag
check usage-o-two-inputs t_o_two
check usage-o-and-out-dir t_o_and_dir
check usage-no-modality t_nothing_left
check usage-bad-strategy t_bad_strategy
check usage-bad-backend t_bad_backend
check usage-bad-cp t_bad_cp
check usage-bad-manifest t_bad_manifest
check usage-ulysses-heads t_ulysses_heads
check usage-bad-size t_bad_size
check usage-bad-preset t_bad_preset
check usage-stdin t_stdin
check fail-missing-model t_missing_model
check fail-cuda t_cuda
check fail-nccl t_nccl
check usage-ranks-not-multiple t_bad_ranks
check usage-ranks-under-mpi t_ranks_mpi
check usage-shard t_shard_usage
check cp1 t_cp1
check cp-2-3-4-same t_cp
check strategies-same t_strategies
check causal-same t_causal
check weights-file t_weights_file
check token-metadata t_token_meta
check no-audio t_no_audio
check no-video t_no_video
check still-image t_still
check audio-only t_audio_only
check video-without-audio t_silent_video
check segments t_segments
check batch-8-good-3-bad t_batch
check resume-skips t_resume_skips
check dp-4-ranks-cp2-same t_dp_cp2
check dp-4-ranks-cp1-same t_dp_cp1
check shard-two-jobs-same t_shard_two_jobs
check shard-stale-claim t_shard_stale
check same-names t_same_names
check kill-9-resume t_kill_resume
check dp-kill-resume-other-ranks t_dp_kill_resume
check prefetch-hides-decode t_prefetch
check sigterm t_sigterm

echo "$pass passed, $fail failed"
if [ "$fail" -ne 0 ]; then
    echo "failed:$failed"
    exit 1
fi
exit 0
