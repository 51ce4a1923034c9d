#!/bin/sh
# shellcheck disable=SC2317,SC2086 # t_* checks are called through check(); $SMALL splits
# test_gpu_cli.sh EXE: `--device cuda` end to end against `--device cpu` on a
# generated recording, where a GPU is present (label gpu; exits 77, skipped,
# otherwise):
#   - embed: cp 1, cp 2 ring (2 streams on one GPU), cp 3 ulysses and cp 2 causal
#     on the GPU give the CPU's embeddings within 5e-2 (normalised max error:
#     bf16 GEMMs and attention against f32);
#   - finetune: 3 mae steps on the GPU (cp 1 and cp 2) give the CPU's per-step
#     losses within 3e-2 relative;
#   - one process per GPU: `mpiexec -n 2 ringvit embed --backend mpi --device
#     cuda` (device buffers staged through host memory; both processes may share
#     one GPU) and `--backend nccl` (NCCL needs 2 GPUs: skipped, and said, with
#     one) give the CPU's single-rank embeddings within the same 5e-2; so does
#     `mpiexec -n 2 ringvit finetune --backend mpi --device cuda --cp 2` for the
#     losses. Skipped, and said, without MPI or mpiexec (MPIEXEC, else the one
#     on PATH).
# Run by ctest as `sh test_gpu_cli.sh $<TARGET_FILE:ringvit_cli>`; POSIX sh only.

EXE=$1
if [ -z "$EXE" ] || [ ! -x "$EXE" ]; then
    echo "usage: sh test_gpu_cli.sh PATH/TO/ringvit" >&2
    exit 2
fi
EXE=$(cd "$(dirname "$EXE")" && pwd)/$(basename "$EXE")
HERE=$(cd "$(dirname "$0")" && pwd)
PY=/usr/bin/python3
if "$EXE" --version | grep -Eq '^cuda: (no|.* 0 devices)'; then
    echo "SKIPPED: no GPU ($("$EXE" --version | grep "^cuda:"))"
    exit 77
fi
for dep in ffmpeg "$PY"; do
    command -v "$dep" >/dev/null 2>&1 || { echo "FAILED: no $dep (scripts/install-deps.sh)"; exit 1; }
done
NGPU=$("$EXE" --version | sed -n 's/^cuda: .*, \([0-9][0-9]*\) devices*.*/\1/p')
MPIEXEC=${MPIEXEC:-$(command -v mpiexec 2>/dev/null)}
HAVE_MPI=0
if "$EXE" --version | grep -q '^mpi: yes' && [ -n "$MPIEXEC" ]; then
    HAVE_MPI=1
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
fi

tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT INT TERM
cd "$tmp" || exit 1
pass=0
fail=0
skip=0
failed=""
why=""
# A check returns 77 to be skipped; its last line of output says why.
check() {
    why=""
    "$2" >"$tmp/log" 2>&1
    st=$?
    if [ "$st" -eq 0 ]; then
        pass=$((pass + 1))
        echo "ok   $1 $(tail -n 1 "$tmp/log")"
    elif [ "$st" -eq 77 ]; then
        skip=$((skip + 1))
        echo "SKIP $1: $(tail -n 1 "$tmp/log")"
    else
        fail=$((fail + 1))
        failed="$failed $1"
        echo "FAIL $1: ${why:-see below}"
        tail -n 15 "$tmp/log" | sed 's/^/     | /'
    fi
}

ff() { ffmpeg -nostdin -v error -y "$@"; }
ff -f lavfi -i testsrc2=size=64x64:rate=8 -f lavfi -i sine=frequency=440:sample_rate=16000 \
    -t 4 -c:v libx264 -c:a aac clip.mp4 || { echo "FAILED: ffmpeg"; exit 1; }
for k in 0 1 2 3; do
    ff -f lavfi -i "testsrc2=size=64x64:rate=8" -f lavfi \
        -i "sine=frequency=$((300 + 100 * k)):sample_rate=16000" -t 2 -c:v libx264 -c:a aac \
        "m$k.mp4" || { echo "FAILED: ffmpeg"; exit 1; }
done
printf 'm0.mp4\nm1.mp4\nm2.mp4\nm3.mp4\n' >mae.txt
SMALL="--size 32 --fps 2 --quiet"

# embed ARGS...: the CPU and GPU runs of one configuration, compared.
embed_pair() {
    name=$1
    shift
    "$EXE" embed clip.mp4 $SMALL --tokens "$@" -o "cpu_$name.safetensors" &&
        "$EXE" embed clip.mp4 $SMALL --tokens "$@" --device cuda -o "gpu_$name.safetensors" &&
        "$PY" "$HERE/embed_compare.py" same "gpu_$name.safetensors" "cpu_$name.safetensors" \
            --rtol 5e-2
}
t_embed_cp1() { embed_pair cp1 --cp 1; }
t_embed_ring2() { embed_pair ring2 --cp 2 --strategy ring; }
t_embed_ulysses3() { embed_pair uly3 --cp 3 --strategy ulysses; }
t_embed_causal2() { embed_pair causal2 --cp 2 --causal; }

# finetune ARGS...: 3 mae steps on the CPU and the GPU, per-step losses compared.
tune_pair() {
    name=$1
    shift
    for dev in cpu cuda; do
        "$EXE" finetune --task mae --manifest mae.txt $SMALL --steps 3 --warmup 1 --seed 5 \
            --device $dev "$@" -o "${dev}_$name.safetensors" --log "${dev}_$name.log.jsonl" ||
            return 1
    done
    "$PY" "$HERE/finetune_check.py" same-losses "cuda_$name.log.jsonl" "cpu_$name.log.jsonl" \
        --rtol 3e-2 --steps 3
}
t_tune_cp1() { tune_pair cp1 --cp 1; }
t_tune_cp2() { tune_pair cp2 --cp 2; }

# One process per GPU under mpiexec -n 2, against the CPU's single rank
# (cpu_cp1.safetensors, the first check's; made here if it did not run).
need_mpi() {
    if [ "$HAVE_MPI" -ne 1 ]; then
        echo "SKIPPED: this ringvit has no MPI, or no mpiexec (set MPIEXEC)"
        return 77
    fi
    [ -s cpu_cp1.safetensors ] ||
        "$EXE" embed clip.mp4 $SMALL --tokens --cp 1 -o cpu_cp1.safetensors
}
# mpi_pair NAME ARGS...: mpiexec -n 2 with --device cuda, compared with cpu_cp1.
mpi_pair() {
    name=$1
    shift
    "$MPIEXEC" -n 2 --oversubscribe "$EXE" embed clip.mp4 $SMALL --tokens --device cuda "$@" \
        -o "gpu_$name.safetensors" 2>"$name.err" || { cat "$name.err"; return 1; }
    "$PY" "$HERE/embed_compare.py" same "gpu_$name.safetensors" cpu_cp1.safetensors --rtol 5e-2
}
t_mpi_staged() { need_mpi || return $?; mpi_pair mpi2 --backend mpi --strategy ring; }
t_mpi_staged_ag() { need_mpi || return $?; mpi_pair mpi2ag --backend mpi --strategy allgather; }
t_mpi_nccl() {
    need_mpi || return $?
    if [ "${NGPU:-0}" -lt 2 ]; then
        echo "SKIPPED: --backend nccl needs 2 GPUs (NCCL puts one rank on each), this machine has ${NGPU:-0}"
        return 77
    fi
    # A GPU build without NCCL cannot run this check: a failure, not a skip.
    if ! "$EXE" --version | grep -q '^nccl: built'; then
        echo "this ringvit is built without NCCL (configure with CUDA and NCCL found)"
        return 1
    fi
    mpi_pair nccl2 --backend nccl --strategy ring || return 1
    # Without --quiet every rank says which GPU it took: two different ones.
    "$MPIEXEC" -n 2 "$EXE" embed clip.mp4 --size 32 --fps 2 --backend nccl --device cuda \
        -o nccl_log.safetensors 2>nccl.err || { cat nccl.err; return 1; }
    grep 'GPU [0-9]' nccl.err
    [ "$(grep -c 'rank [01] of 2 on .*: GPU [0-9].*over NCCL' nccl.err)" -eq 2 ] &&
        [ "$(sed -n 's/.*: GPU \([0-9]*\) .*/\1/p' nccl.err | sort -u | wc -l)" -eq 2 ]
}
t_tune_mpi_staged() {
    need_mpi || return $?
    [ -s cpu_cp2.log.jsonl ] || tune_pair cp2 --cp 2 || return 1
    "$MPIEXEC" -n 2 --oversubscribe "$EXE" finetune --task mae --manifest mae.txt $SMALL \
        --steps 3 --warmup 1 --seed 5 --backend mpi --device cuda --cp 2 \
        -o mpi_cp2.safetensors --log mpi_cp2.log.jsonl || return 1
    "$PY" "$HERE/finetune_check.py" same-losses mpi_cp2.log.jsonl cpu_cp2.log.jsonl \
        --rtol 3e-2 --steps 3
}

check embed-cp1 t_embed_cp1
check embed-ring-cp2 t_embed_ring2
check embed-ulysses-cp3 t_embed_ulysses3
check embed-causal-cp2 t_embed_causal2
check finetune-mae-cp1 t_tune_cp1
check finetune-mae-cp2 t_tune_cp2
check embed-mpiexec2-mpi-staged t_mpi_staged
check embed-mpiexec2-mpi-staged-allgather t_mpi_staged_ag
check embed-mpiexec2-nccl t_mpi_nccl
check finetune-mpiexec2-mpi-staged-cp2 t_tune_mpi_staged
echo "$pass passed, $fail failed, $skip skipped"
[ "$fail" -eq 0 ] || { echo "failed:$failed"; exit 1; }
