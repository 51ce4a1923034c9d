#!/bin/sh
# shellcheck disable=SC2317 # the t_* checks are called indirectly, through check()
# test_finetune.sh EXE: `ringvit finetune` end to end on recordings generated with
# the ffmpeg command: two classes of 2 s clips (a square moving right with a low
# tone, moving left with a high tone; start, height and pitch jittered),
# 16 + 16 for training and 8 + 8 for validation, at 32 px (the tiny preset's
# 14 x 14 position grid resampled to 2 x 2) and 2 frames/s:
#   - classify from fresh weights reaches >= 95% validation accuracy; the output
#     loads in `ringvit embed --model` and names its classes;
#   - mae: the reconstruction loss falls by >= 30%;
#   - a run stopped at step 3 (--stop-at, checkpoint) and resumed to step 6 gives
#     bit-identical per-step losses and final weights to an uninterrupted run;
#   - dp 2 x cp 2 equals dp 1 x cp 1 with --accum 2 (the same global batch):
#     losses within 1e-4 relative, weights after 2 steps within 1e-4 (see t_dp_cp);
#   - cp 2 (ring, allgather) and cp 3 (ulysses: tiny has 3 heads) equal cp 1;
#   - usage errors exit 2 (bad task, missing manifest, unknown val label, ...);
#     a resume with other settings is refused naming the field.
# Logs and weights are read by finetune_check.py (json + numpy).
# Run by ctest as `sh test_finetune.sh $<TARGET_FILE:ringvit_cli>`; POSIX sh only.
# Prints one line per check, then "N passed, M failed"; exits 1 on any failure,
# including a missing test dependency (ffmpeg, numpy).

EXE=$1
if [ -z "$EXE" ] || [ ! -x "$EXE" ]; then
    echo "usage: sh test_finetune.sh PATH/TO/ringvit" >&2
    exit 2
fi
EXE=$(cd "$(dirname "$EXE")" && pwd)/$(basename "$EXE")
HERE=$(cd "$(dirname "$0")" && pwd)
PY=/usr/bin/python3
CHK="$HERE/finetune_check.py"
if ! command -v ffmpeg >/dev/null 2>&1; then
    echo "FAILED: no ffmpeg command to generate the test recordings (a test dependency: scripts/install-deps.sh)"
    exit 1
fi
if ! "$PY" -c 'import numpy' 2>/dev/null; then
    echo "FAILED: $PY has no numpy to read the outputs (a test dependency: scripts/install-deps.sh)"
    exit 1
fi

tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT INT TERM
cd "$tmp" || exit 1

pass=0
fail=0
failed=""
rc=0
why=""
# Small and fast: 32 px frames (2 x 2 patches) at 2 fps; one compute thread per
# rank keeps the runs deterministic and the machine shareable.
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
py() { # finetune_check.py ARGS...: the check's last line is the reason on failure
    "$PY" "$CHK" "$@" >"$tmp/chk" 2>&1 || { why="$(tail -n 1 "$tmp/chk")"; return 1; }
}

check() {
    why=""
    t0=$(date +%s)
    if "$2"; then
        pass=$((pass + 1))
        echo "ok   $1 ($(($(date +%s) - t0)) s) $(tail -n 1 "$tmp/chk" 2>/dev/null)"
    else
        fail=$((fail + 1))
        failed="$failed $1"
        echo "FAIL $1: ${why:-check failed}"
        if [ -s "$tmp/out" ]; then echo "     stdout:"; head -n 10 "$tmp/out" | sed 's/^/     | /'; fi
        if [ -s "$tmp/err" ]; then echo "     stderr:"; tail -n 10 "$tmp/err" | sed 's/^/     | /'; fi
    fi
    : >"$tmp/chk"
}

# ---- recordings --------------------------------------------------------------------
ff() { ffmpeg -nostdin -v error -y "$@" >/dev/null 2>&1; }
# clip NAME right|left K: 2 s, 64 x 64, a white 16 px square crossing at 20 px/s
# with a tone (right: 300-329 Hz, left: 3000-3299 Hz); K jitters the start, the
# height and the pitch.
clip() {
    x0=$(($3 * 7 % 5))
    if [ "$2" = right ]; then
        f=$((300 + $3 * 13 % 30)); x="${x0}+t*20"
    else
        f=$((3000 + $3 * 29 % 300)); x="W-w-${x0}-t*20"
    fi
    ff -f lavfi -i color=c=black:s=64x64:r=10:d=2 -f lavfi -i color=c=white:s=16x16:r=10:d=2 \
        -f lavfi -i "sine=frequency=$f:sample_rate=16000:duration=2" \
        -filter_complex "[0][1]overlay=x='$x':y=$((22 + $3 % 3 * 2))[v]" -map "[v]" -map 2 \
        -t 2 -c:v libx264 -c:a aac "$1"
}
mkdir -p media
printf '# training clips\n' >train.tsv
: >val.tsv
ok_media=1
for k in 0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15; do
    for cl in right left; do
        clip "media/tr_${cl}_$k.mp4" $cl $k || ok_media=0
        printf 'media/tr_%s_%d.mp4\t%s\n' $cl $k $cl >>train.tsv
    done
done
for k in 100 101 102 103 104 105 106 107; do
    for cl in right left; do
        clip "media/va_${cl}_$k.mp4" $cl $k || ok_media=0
        printf 'media/va_%s_%d.mp4\t%s\n' $cl $k $cl >>val.tsv
    done
done
if [ $ok_media -ne 1 ]; then
    echo "FAIL ffmpeg could not generate the test recordings"
    exit 1
fi
cut -f1 train.tsv | grep -v '^#' >mae.txt
head -n 9 train.tsv >small.tsv   # the comment and 8 clips, 4 per class
printf 'media/va_right_100.mp4\tright\nmedia/va_left_100.mp4\tupward\n' >badval.tsv

# ---- usage errors (2) ----------------------------------------------------------------
t_help() {
    run_exe finetune --help
    want_rc 0 && grep -q -- '--task' "$tmp/out" && grep -q -- '--resume' "$tmp/out" ||
        { why="${why:-help lacks --task or --resume}"; return 1; }
}
usage() { # ARGS...: exit 2, nothing on stdout, a message naming finetune
    run_exe finetune "$@"
    want_rc 2 && want_no_out && want_err '^ringvit: finetune: '
}
t_no_task() { usage --manifest train.tsv -o x.safetensors; }
t_bad_task() { usage --task regress --manifest train.tsv -o x.safetensors && want_err regress; }
t_no_manifest() { usage --task classify -o x.safetensors; }
t_missing_manifest() { usage --task classify --manifest no-such.tsv -o x.safetensors && want_err no-such; }
t_no_output() { usage --task classify --manifest train.tsv; }
t_unknown_label() { usage --task classify --manifest train.tsv --val badval.tsv -o x.safetensors && want_err "'upward'"; }
t_no_label() { usage --task classify --manifest mae.txt -o x.safetensors && want_err 'no label'; }
t_bad_flag() { usage --task mae --manifest mae.txt -o x.safetensors --no-such-flag; }
t_epochs_steps() { usage --task mae --manifest mae.txt -o x.safetensors --epochs 1 --steps 3; }
t_bad_size() { usage --task mae --manifest mae.txt -o x.safetensors --size 40; }
t_ulysses_heads() { usage --task mae --manifest mae.txt -o x.safetensors --cp 2 --strategy ulysses; }
t_bad_strategy() { usage --task mae --manifest mae.txt -o x.safetensors --strategy diagonal; }
t_missing_model() {
    run_exe finetune --task mae --manifest mae.txt --model "$tmp/no-such-model.safetensors" -o x.safetensors
    want_rc 1 && want_err 'no-such-model'
}
check help t_help
check usage-no-task t_no_task
check usage-bad-task t_bad_task
check usage-no-manifest t_no_manifest
check usage-missing-manifest t_missing_manifest
check usage-no-output t_no_output
check usage-unknown-val-label t_unknown_label
check usage-no-label t_no_label
check usage-bad-flag t_bad_flag
check usage-epochs-and-steps t_epochs_steps
check usage-bad-size t_bad_size
check usage-ulysses-heads t_ulysses_heads
check usage-bad-strategy t_bad_strategy
check missing-model t_missing_model

# ---- resume: bit-identical to an uninterrupted run -------------------------------------
# 6 steps of 2 recordings; mae (hidden tokens from the data position) and classify.
RES="$SMALL --threads 1 --steps 6 --accum 2 --lr 2e-4 --warmup 2 --seed 5"
t_resume() {
    for task in mae classify; do
        m=small.tsv
        run_exe finetune --task $task --manifest $m $RES -o full_$task.safetensors &&
            want_rc 0 || return 1
        run_exe finetune --task $task --manifest $m $RES --stop-at 3 -o part_$task.safetensors &&
            want_rc 0 || return 1
        [ -f part_$task.ckpt ] || { why="no checkpoint part_$task.ckpt"; return 1; }
        [ ! -e part_$task.safetensors ] || { why="--stop-at wrote the output"; return 1; }
        run_exe finetune --task $task --manifest $m $RES --resume part_$task.ckpt \
            -o part_$task.safetensors && want_rc 0 || return 1
        py same-losses part_$task.log.jsonl full_$task.log.jsonl --steps 6 || return 1
        py same-weights part_$task.safetensors full_$task.safetensors || return 1
    done
}
t_resume_refused() {
    run_exe finetune --task mae --manifest small.tsv $RES --lr 1e-4 --resume part_mae.ckpt -o r.safetensors
    want_rc 2 && want_err '"?lr"? ' && want_err 'checkpoint'
}
t_embed_reads() {
    run_exe embed media/va_left_100.mp4 --model full_classify.safetensors $SMALL -o e.safetensors
    want_rc 0 && py classes full_classify.safetensors left right
}
check resume-bit-identical t_resume
check resume-other-settings-refused t_resume_refused
check output-loads-in-embed t_embed_reads

# A model whose activations overflow (a LayerNorm bias of 3e38: finite weights,
# infinite activations) stops at its first step with a clear error, and neither a
# checkpoint nor the output is written.
t_diverged_stops() {
    run_exe init --preset tiny -o ok.safetensors && want_rc 0 || return 1
    /usr/bin/python3 - <<'PY' || { why="cannot write huge.safetensors"; return 1; }
import json, struct
b = bytearray(open("ok.safetensors", "rb").read())
n = struct.unpack("<Q", b[:8])[0]
s, e = json.loads(b[8:8 + n])["encoder.layers.encoder_layer_0.ln_1.bias"]["data_offsets"]
b[8 + n + s:8 + n + e] = struct.pack("<f", 3e38) * ((e - s) // 4)
open("huge.safetensors", "wb").write(b)
PY
    run_exe finetune --task classify --manifest small.tsv --model huge.safetensors $SMALL \
        --threads 1 --steps 4 --save-every 1 --ckpt huge.ckpt -o huge_out.safetensors
    want_rc 1 && want_err 'not finite' && [ ! -e huge.ckpt ] && [ ! -e huge_out.safetensors ] ||
        { why="${why:-a checkpoint or output of a diverged run was written}"; return 1; }
}
check diverged-run-stops-unsaved t_diverged_stops

# ---- dp x cp equals one rank with the same global batch ----------------------------------
EQ="$SMALL --threads 1 --steps 2 --lr 2e-4 --seed 3"
t_dp_cp() {
    for task in classify mae; do
        run_exe finetune --task $task --manifest small.tsv $EQ --accum 2 -o one_$task.safetensors &&
            want_rc 0 || return 1
        run_exe finetune --task $task --manifest small.tsv $EQ --dp 2 --cp 2 --check-sync 1 \
            -o mesh_$task.safetensors && want_rc 0 || return 1
        # Weights within 1e-4 of each tensor's scale, plus 1e-6 (1/400 of the two
        # steps' movement, 2 lr) for the elements Adam moves by about lr whatever
        # their tiny gradient; the key bias, whose exact gradient is zero, is left
        # out (see finetune_check.py).
        py same-losses mesh_$task.log.jsonl one_$task.log.jsonl --rtol 1e-4 --steps 2 &&
            py same-weights mesh_$task.safetensors one_$task.safetensors --rtol 1e-4 \
                --atol 1e-6 --no-key-bias || return 1
    done
}
t_cp_strategies() {
    for s in "2 ring" "2 allgather" "3 ulysses"; do
        set -- $s
        run_exe finetune --task mae --manifest small.tsv $EQ --accum 2 --cp "$1" --strategy "$2" \
            -o cp_$2.safetensors && want_rc 0 || return 1
        py same-losses cp_$2.log.jsonl one_mae.log.jsonl --rtol 1e-4 --steps 2 || { why="$2: $why"; return 1; }
    done
}
# Attention spans: the losses at cp 2 and 3 equal cp 1's, and differ from full
# attention's (one_mae), so the span is applied in training too.
t_cp_spans() {
    for a in window=1 block=1; do
        run_exe finetune --task mae --manifest small.tsv $EQ --accum 2 --attention $a \
            -o span1_$a.safetensors && want_rc 0 || return 1
        for s in "2 ring" "3 allgather"; do
            set -- $s
            run_exe finetune --task mae --manifest small.tsv $EQ --accum 2 --attention $a \
                --cp "$1" --strategy "$2" -o span_$1_$a.safetensors && want_rc 0 || return 1
            py same-losses span_$1_$a.log.jsonl span1_$a.log.jsonl --rtol 1e-4 --steps 2 ||
                { why="$a cp $1 $2: $why"; return 1; }
        done
        if py same-losses span1_$a.log.jsonl one_mae.log.jsonl --rtol 1e-6 --steps 2; then
            why="$a: the losses equal full attention's"
            return 1
        fi
    done
}
check dp2-cp2-equals-one-rank t_dp_cp
check cp-strategies-equal-cp1 t_cp_strategies
check cp-spans-equal-cp1 t_cp_spans

# ---- learning ----------------------------------------------------------------------------
t_classify_learns() {
    run_exe finetune --task classify --manifest train.tsv --val val.tsv $SMALL --epochs 4 \
        --accum 4 --lr 1e-4 --warmup 2 --json -o cls.safetensors
    want_rc 0 && py val-acc cls.log.jsonl 0.95 &&
        grep -q '"val_accuracy"' "$tmp/out" || { why="${why:-no val_accuracy in the --json summary}"; return 1; }
}
t_mae_learns() {
    run_exe finetune --task mae --manifest mae.txt $SMALL --steps 30 --accum 2 --lr 3e-4 \
        --warmup 5 -o mae.safetensors
    want_rc 0 && py loss-drop mae.log.jsonl 0.30 2 5
}
check classify-learns t_classify_learns
check mae-learns t_mae_learns

echo "$pass passed, $fail failed"
if [ $fail -ne 0 ]; then
    echo "failed:$failed"
    exit 1
fi
exit 0
