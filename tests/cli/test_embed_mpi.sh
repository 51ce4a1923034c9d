#!/bin/sh
# test_embed_mpi.sh MPIEXEC EXE: `ringvit embed --backend mpi` under
# `mpiexec -n 3 --oversubscribe` gives the same outputs as `--cp 3` with the
# local backend (ring and allgather, --tokens), a batch with a bad file on 4
# processes in 2 groups of 2 exits 3 on every process with the failure in rank
# 0's log and the other outputs equal to one-by-one local runs, and a rank
# stopped (kill -STOP) in the middle of a batch is named by the others, which
# end the job within about 2 x --timeout.
# Run by ctest (label mpi); POSIX sh only. Exits 77 (skipped) in a build
# without MPI; fails without ffmpeg or numpy (test dependencies).

MPIEXEC=$1
EXE=$2
if [ -z "$MPIEXEC" ] || [ -z "$EXE" ] || [ ! -x "$EXE" ]; then
    echo "usage: sh test_embed_mpi.sh MPIEXEC PATH/TO/ringvit" >&2
    exit 2
fi
EXE=$(cd "$(dirname "$EXE")" && pwd)/$(basename "$EXE")
HERE=$(cd "$(dirname "$0")" && pwd)
PY=/usr/bin/python3
CMP="$HERE/embed_compare.py"
if ! command -v ffmpeg >/dev/null 2>&1; then
    echo "FAILED: no ffmpeg command to generate the test recording (a test dependency: scripts/install-deps.sh)"
    exit 1
fi
if ! "$PY" -c 'import numpy' 2>/dev/null; then
    echo "FAILED: $PY has no numpy to read the outputs (a test dependency: scripts/install-deps.sh)"
    exit 1
fi
if ! "$EXE" --version | grep -q '^mpi: yes'; then
    echo "SKIPPED: this ringvit is built without MPI"
    exit 77
fi
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1

tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT INT TERM
cd "$tmp" || exit 1
pass=0
fail=0

result() { # NAME STATUS MESSAGE
    if [ "$2" -eq 0 ]; then
        pass=$((pass + 1))
        echo "ok   $1"
    else
        fail=$((fail + 1))
        echo "FAIL $1: $3"
        [ -s err ] && sed 's/^/     | /' err | head -n 20
    fi
}

ffmpeg -nostdin -v error -y -f lavfi -i testsrc2=size=96x64:rate=10 \
    -f lavfi -i sine=frequency=440:sample_rate=8000 -t 6 -c:v libx264 -c:a aac \
    -movflags +faststart clip.mp4 >/dev/null 2>&1 || { echo "FAIL ffmpeg could not make a clip"; exit 1; }
SMALL="--size 32 --fps 2 --tokens --quiet"

for s in ring allgather; do
    "$EXE" embed clip.mp4 $SMALL --cp 3 --strategy $s -o "local-$s.safetensors" 2>err &&
        "$MPIEXEC" -n 3 --oversubscribe "$EXE" embed --backend mpi clip.mp4 $SMALL --strategy $s \
            -o "mpi-$s.safetensors" 2>err &&
        "$PY" "$CMP" check "mpi-$s.safetensors" cp=3 tokens=321 per_token=1 >cmp 2>&1 &&
        "$PY" "$CMP" same "mpi-$s.safetensors" "local-$s.safetensors" >cmp 2>&1
    result "mpi-3-same-as-local-cp3-$s" $? "$(tail -n 1 cmp 2>/dev/null)"
done

# A batch with a file that is not media, on 4 processes in 2 groups of 2: every
# process exits 3, rank 0 logs every input once (the failure too), and each
# output equals the one-by-one local run's (cp 1) within the default relative
# tolerance of embed_compare.py (cp 2 splits attention's sums otherwise).
echo "not media" >notes.mp4
ffmpeg -nostdin -v error -y -f lavfi -i testsrc2=size=64x48:rate=10 \
    -f lavfi -i sine=frequency=330:sample_rate=8000 -t 4 -c:v libx264 -c:a aac clip2.mp4 \
    >/dev/null 2>&1
ffmpeg -nostdin -v error -y -f lavfi -i sine=frequency=550:sample_rate=16000 -t 3 tone.wav \
    >/dev/null 2>&1
"$EXE" embed clip.mp4 clip2.mp4 tone.wav --size 32 --fps 2 --quiet --out-dir seq 2>err
# (timeout: a hang fails this check, not the whole test)
timeout 120 "$MPIEXEC" -n 4 --oversubscribe "$EXE" embed --backend mpi --cp 2 clip.mp4 notes.mp4 clip2.mp4 \
    tone.wav --size 32 --fps 2 --quiet --out-dir out >/dev/null 2>err
st=$?
ok=1
[ "$st" -eq 3 ] && [ ! -e out/notes.safetensors ] &&
    [ "$(grep -c '"status":"failed"' out/embed-log.jsonl)" -eq 1 ] &&
    [ "$(grep -c '"status":"ok"' out/embed-log.jsonl)" -eq 3 ] &&
    "$PY" "$CMP" same out/clip.safetensors seq/clip.safetensors >cmp 2>&1 &&
    "$PY" "$CMP" same out/clip2.safetensors seq/clip2.safetensors >cmp 2>&1 &&
    "$PY" "$CMP" same out/tone.safetensors seq/tone.safetensors >cmp 2>&1 &&
    [ "$(grep -o '"group":[0-9]*' out/embed-log.jsonl | sort -u | wc -l)" -eq 2 ] && ok=0
result mpi-4-cp2-batch-exit-3 "$ok" "exit status $st (want 3 from every process), or outputs/log wrong: $(tail -n 1 cmp 2>/dev/null)"

# A rank stopped mid-batch (SIGSTOP: alive to the launcher, silent to its peers).
# The survivors wait at most --timeout inside the encoder and --timeout past its
# last sign of work between stages, name it, and end the job.
for i in 1 2 3 4 5 6 7 8 9 10 11 12; do ln -sf clip.mp4 "stall$i.mp4"; done
: >err
"$MPIEXEC" -n 3 --oversubscribe "$EXE" embed --backend mpi stall*.mp4 --size 32 --fps 10 \
    --timeout 3 --out-dir stall 2>err &
mp=$!
n=0
while ! grep -q '^ringvit: embedded' err && [ "$n" -lt 600 ] && kill -0 "$mp" 2>/dev/null; do
    sleep 0.1
    n=$((n + 1))
done
victim=""
for p in $(pgrep -P "$mp"); do
    tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -q '^OMPI_COMM_WORLD_RANK=2$' && victim=$p
done
ok=1
if [ -n "$victim" ] && kill -STOP "$victim"; then
    t0=$(date +%s)
    n=0
    while kill -0 "$mp" 2>/dev/null && [ "$n" -lt 600 ]; do
        sleep 0.1
        n=$((n + 1))
    done
    took=$(($(date +%s) - t0))
    if kill -0 "$mp" 2>/dev/null; then
        kill -9 "$mp" "$victim" 2>/dev/null
        echo "     | still running 60 s after the stop"
    else
        wait "$mp"
        st=$?
        # 2 x 3 s and the launcher's teardown (about 6 s measured).
        [ "$st" -ne 0 ] && [ "$took" -le 10 ] && grep -q 'rank 2 has sent nothing' err && ok=0
        echo "     | exit $st $took s after the stop"
    fi
    kill -9 "$victim" 2>/dev/null
else
    kill -9 "$mp" 2>/dev/null
    echo "     | could not find rank 2's process (pid of mpiexec $mp) or the first output"
fi
result mpi-stopped-rank-named "$ok" "the survivors did not name rank 2 and end within 10 s"

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
