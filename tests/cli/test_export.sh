#!/bin/sh
# shellcheck disable=SC2317 # the t_* checks are called indirectly, through check()
# test_export.sh EXE: `ringvit export` over a batch that `ringvit embed
# --out-dir` made of three short generated clips and a corrupt file (its input
# fails: embed exits 3, and its index lists three outputs), tiny preset, with
# --attention frame for the block level. Checked by export_check.py against
# the outputs themselves: row counts, shard boundaries (--shard-rows 6), the
# metadata lines aligned with the rows (t_start / t_end equal to the output's
# tensors), the rows equal to the tensors (f32 exactly, f16 as numpy rounds
# them, --normalize as embed --normalize writes them), the segment and global
# levels, the top labels of outputs with logits (softmax, sigmoid); FAISS
# (python3-faiss) finds each of 20 sampled rows itself first; --resume after an
# input is added writes only its rows (the earlier shards kept byte for byte, a
# partial last one completed with its first rows unchanged), a run that stopped
# before its manifest is redone, a moved folder adds nothing. Refused, each
# with a clear message and the export left as it was: an output of another
# model (both files named), a folder that is not an export, an export without
# --resume, a truncated shard of an earlier run, outputs whose tensors disagree
# with their metadata, an export another run holds.
# Run by ctest as `sh test_export.sh $<TARGET_FILE:ringvit_cli>`; POSIX sh only.
# Prints one line per check, then "N passed, M failed"; exits 1 on any failure,
# including a missing test dependency (ffmpeg, numpy, python3-faiss).

EXE=$1
if [ -z "$EXE" ] || [ ! -x "$EXE" ]; then
    echo "usage: sh test_export.sh PATH/TO/ringvit" >&2
    exit 2
fi
EXE=$(cd "$(dirname "$EXE")" && pwd)/$(basename "$EXE")
HERE=$(cd "$(dirname "$0")" && pwd)
PY=/usr/bin/python3
CHK="$HERE/export_check.py"
if ! command -v ffmpeg >/dev/null 2>&1; then
    echo "FAILED: no ffmpeg command to generate the test recordings (a test dependency: scripts/install-deps.sh)"
    exit 1
fi
if ! "$PY" -c 'import numpy, faiss' 2>/dev/null; then
    echo "FAILED: $PY lacks numpy or faiss (python3-faiss; test dependencies: scripts/install-deps.sh)"
    exit 1
fi

tmp=$(mktemp -d) || exit 1
holder=""
trap 'if [ -n "$holder" ]; then kill "$holder" 2>/dev/null; fi; rm -rf "$tmp"' EXIT INT TERM
cd "$tmp" || exit 1
. "$HERE/cli_lib.sh"

# chk ARGS...: export_check.py, its last line as the reason when it fails.
chk() {
    "$PY" "$CHK" "$@" >"$tmp/chk" 2>&1 || { why="$(tail -n 1 "$tmp/chk")"; return 1; }
}
# digest DIR: one line per file of DIR (name and sha1), to show nothing changed.
digest() {
    (cd "$1" && find . -type f ! -name .export.lock | sort | xargs sha1sum)
}
unchanged() { # DIR SAVED: DIR is what digest saved in SAVED
    digest "$1" >"$tmp/now.sha" && cmp -s "$tmp/now.sha" "$2" ||
        { why="${why:+$why; }$1 changed"; return 1; }
}
no_tmp_files() {
    left=$(find "$1" -name '*.tmp.*' | head -n 3)
    [ -z "$left" ] || { why="temporary files left: $left"; return 1; }
}

# Four clips of distinct patterns and tones (no two blocks alike), 4 fps, 32 px.
clip() { # NAME SOURCE SECONDS FREQUENCY
    ffmpeg -loglevel error -f lavfi -i "$2" -f lavfi -i "sine=frequency=$4:sample_rate=16000" \
        -t "$3" -c:v libx264 -pix_fmt yuv420p -c:a aac -shortest "$1" ||
        { echo "FAILED: ffmpeg could not make $1"; exit 1; }
}
mkdir media
clip media/a.mp4 testsrc2=size=64x48:rate=25 3 440
clip media/b.mp4 "life=size=64x48:rate=25:seed=3:mold=10" 2 300
clip media/c.mp4 mandelbrot=size=64x48:rate=25 5 660
clip media/d.mp4 testsrc=size=64x48:rate=25 3 520
head -c 40000 /dev/urandom >media/noise.mp4
printf 'a.mp4\nnoise.mp4\nb.mp4\nc.mp4\n' >media/list.txt
EMB="--size 32 --fps 4 --attention frame --segment 1 --quiet"

# The batch: 3 outputs of 6, 4 and 10 blocks (20 rows), noise.mp4 failed.
"$EXE" embed --manifest media/list.txt --out-dir emb $EMB 2>"$tmp/embed.err"
rc=$?
if [ "$rc" -ne 3 ] || [ "$(wc -l <emb/index.jsonl)" -ne 3 ]; then
    echo "FAILED: embed of the batch: exit $rc (want 3), $(wc -l <emb/index.jsonl) index lines (want 3)"
    cat "$tmp/embed.err"
    exit 1
fi
OUTS="emb/a.safetensors emb/b.safetensors emb/c.safetensors"

t_export_block() {
    run_exe export emb --to ex --shard-rows 6
    want_rc 0 && want_err 'emb: 3 outputs taken from its index.jsonl' &&
        grep -q 'exported 20 rows of 3 outputs' "$tmp/out" || { why="${why:-summary: $(cat "$tmp/out")}"; return 1; }
    chk rows ex $OUTS --level block --shard-rows 6 || return 1
    # shards 6, 6, 6, 2: every shard but the last full
    [ "$(ls ex/emb)" = "$(printf 'emb_0000.npy\nemb_0001.npy\nemb_0002.npy\nemb_0003.npy')" ] ||
        { why="shards: $(ls ex/emb | tr '\n' ' ')"; return 1; }
    no_tmp_files ex
}
check export-block-rows-shards-metadata t_export_block

t_faiss() { chk faiss ex 20 && cat "$tmp/chk"; }
check faiss-finds-each-row-itself t_faiss

t_other_model() {
    "$EXE" embed media/a.mp4 $EMB --seed 7 -o other.safetensors 2>"$tmp/err" ||
        { why="embed --seed 7 failed"; return 1; }
    run_exe export emb other.safetensors --to ex_other
    want_rc 1 && want_err 'emb/a\.safetensors .*and other\.safetensors .*different models' ||
        return 1
    [ ! -e ex_other ] || { why="ex_other was made"; return 1; }
}
check another-model-refused-naming-both t_other_model

t_levels() {
    run_exe export emb --to ex_seg --level segment --dtype f16 --shard-rows 3
    want_rc 0 && chk rows ex_seg $OUTS --level segment --dtype f16 --shard-rows 3 || return 1
    run_exe export $OUTS --to ex_glob --level global --json
    want_rc 0 && chk rows ex_glob $OUTS --level global || return 1
    "$PY" -c 'import json,sys; j=json.load(open(sys.argv[1])); sys.exit(0 if j["rows"] == 3 and j["shards"] == 1 and j["level"] == "global" else 1)' "$tmp/out" ||
        { why="--json summary: $(cat "$tmp/out")"; return 1; }
}
check segment-f16-and-global-levels t_levels

# --normalize: the rows are what embed --normalize writes, bit for bit.
t_normalize() {
    "$EXE" embed media/a.mp4 $EMB --normalize -o norm.safetensors 2>"$tmp/err" ||
        { why="embed --normalize failed"; return 1; }
    run_exe export emb/a.safetensors --to ex_norm --normalize
    want_rc 0 && chk equal ex_norm norm.safetensors block_pooled &&
        chk rows ex_norm emb/a.safetensors --normalize || return 1
    run_exe export $OUTS --to ex_norm16 --normalize --dtype f16
    want_rc 0 && chk rows ex_norm16 $OUTS --normalize --dtype f16
}
check normalize-as-embed-writes-it t_normalize

# Outputs that normalise differently do not mix, unless --normalize makes them alike.
t_mixed_normalize() {
    run_exe export emb/b.safetensors norm.safetensors --to ex_mix
    want_rc 1 && want_err 'different --normalize' && [ ! -e ex_mix ] || return 1
    run_exe export emb/b.safetensors norm.safetensors --to ex_mix --normalize
    want_rc 0
}
check mixed-normalize-refused t_mixed_normalize

t_labels() {
    chk with-logits emb/a.safetensors la.safetensors 4 --names cat,dog,bird,fish &&
        chk with-logits emb/b.safetensors lb.safetensors 6 --multi &&
        chk with-logits emb/c.safetensors lc.safetensors 7 --names m0,m1,m2,m3,m4,m5,m6 ||
        return 1
    run_exe export la.safetensors lb.safetensors lc.safetensors --to ex_lab --top 3
    want_rc 0 && chk labels ex_lab || return 1
    run_exe export la.safetensors lb.safetensors --to ex_lab_g --level global
    want_rc 0 && chk labels ex_lab_g || return 1
    run_exe export la.safetensors --to ex_lab_s --level segment
    want_rc 0 && ! grep -q '"labels"' ex_lab_s/metadata/metadata_0000.jsonl ||
        { why="${why:-segment rows have labels}"; return 1; }
}
check top-labels-softmax-sigmoid t_labels

# ---- resume --------------------------------------------------------------------------
t_exists() {
    digest ex >"$tmp/ex.sha"
    run_exe export emb --to ex --shard-rows 6
    want_rc 1 && want_err 'ex: exists .*--resume to add to it' && unchanged ex "$tmp/ex.sha"
}
check existing-export-wants-resume t_exists

t_nothing_new() {
    run_exe export emb --to ex --resume
    want_rc 0 && grep -q 'nothing new' "$tmp/out" && unchanged ex "$tmp/ex.sha"
}
check resume-nothing-new t_nothing_new

t_other_settings() {
    run_exe export emb --to ex --resume --level segment
    want_rc 1 && want_err 'level block, not level segment' && unchanged ex "$tmp/ex.sha"
}
check resume-with-other-settings-refused t_other_settings

t_resume_adds() {
    cp -R ex ex_before
    printf 'd.mp4\n' >>media/list.txt
    "$EXE" embed --manifest media/list.txt --out-dir emb $EMB --resume 2>"$tmp/err"
    [ "$(wc -l <emb/index.jsonl)" -eq 4 ] || { why="index: $(wc -l <emb/index.jsonl) lines"; return 1; }
    run_exe export emb --to ex --resume --json
    want_rc 0 || return 1
    "$PY" -c 'import json,sys; j=json.load(open(sys.argv[1])); sys.exit(0 if (j["rows"], j["already"], j["outputs"], j["total_rows"], j["first_written"]) == (6, 3, 1, 26, 3) else 1)' "$tmp/out" ||
        { why="summary: $(cat "$tmp/out")"; return 1; }
    chk resumed ex_before ex && chk rows ex $OUTS emb/d.safetensors --shard-rows 6 &&
        no_tmp_files ex
}
check resume-writes-only-new-rows t_resume_adds

t_faiss_after() { chk faiss ex 20; }
check faiss-after-resume t_faiss_after

# A run that stopped after its shards' renames but before its manifest: the
# previous export is what the manifest says; the next run redoes the same.
t_stopped_before_manifest() {
    cp -R ex ex_done
    cp -R ex_before ex_crash
    cp ex/emb/emb_0003.npy ex/emb/emb_0004.npy ex_crash/emb/
    cp ex/metadata/metadata_0003.jsonl ex_crash/metadata/
    touch ex_crash/export.json.tmp.12345 ex_crash/emb/emb_0004.npy.tmp.12345
    run_exe export emb --to ex_crash --resume
    want_rc 0 || return 1
    digest ex_done >"$tmp/done.sha"
    unchanged ex_crash "$tmp/done.sha"
}
check stopped-before-manifest-redone t_stopped_before_manifest

t_moved() {
    cp -R emb emb_moved
    digest ex >"$tmp/ex2.sha"
    run_exe export emb_moved emb/d.safetensors --to ex --resume
    want_rc 0 && grep -q 'nothing new' "$tmp/out" && unchanged ex "$tmp/ex2.sha"
}
check moved-folder-and-twice-given-add-nothing t_moved

t_changed() {
    cp emb/d.safetensors d_saved.safetensors
    "$EXE" embed media/a.mp4 $EMB -o emb/d.safetensors 2>"$tmp/err"
    run_exe export emb --to ex --resume
    cp d_saved.safetensors emb/d.safetensors
    want_rc 1 && want_err 'emb/d\.safetensors: changed since it was exported' &&
        unchanged ex "$tmp/ex2.sha"
}
check changed-output-refused t_changed

# ---- bad input ---------------------------------------------------------------------
t_not_export() {
    mkdir notex
    echo "my notes" >notex/notes.txt
    for r in "" --resume; do
        run_exe export emb --to notex $r
        want_rc 1 && want_err 'notex: exists and is not an export' || return 1
    done
    [ "$(ls -A notex)" = "notes.txt" ] || { why="notex now holds $(ls -A notex | tr '\n' ' ')"; return 1; }
    run_exe export emb --to emb --resume
    want_rc 1 && want_err 'emb: exists and is not an export' || return 1
    mkdir empty
    run_exe export emb --to empty
    want_rc 0
}
check folder-not-an-export-refused t_not_export

t_truncated() {
    for k in 0001 0003; do
        rm -rf ex_trunc
        cp -R ex_before ex_trunc
        sz=$(wc -c <"ex_trunc/emb/emb_$k.npy")
        head -c $((sz - 100)) "ex_before/emb/emb_$k.npy" >"ex_trunc/emb/emb_$k.npy"
        digest ex_trunc >"$tmp/trunc.sha"
        run_exe export emb --to ex_trunc --resume
        want_rc 1 && want_err "emb_$k\.npy: .*truncated" && unchanged ex_trunc "$tmp/trunc.sha" ||
            return 1
    done
    rm -rf ex_trunc
    cp -R ex_before ex_trunc
    printf '{"row":' >>ex_trunc/metadata/metadata_0001.jsonl
    run_exe export emb --to ex_trunc --resume
    want_rc 1 && want_err 'metadata_0001\.jsonl: .*bytes, but the manifest lists'
}
check truncated-shard-refused t_truncated

t_disagree() {
    digest ex >"$tmp/ex3.sha"
    for kind in dtype dim times labels; do
        chk spoil emb/d.safetensors "spoilt_$kind.safetensors" $kind || return 1
        run_exe export emb "spoilt_$kind.safetensors" --to ex --resume
        want_rc 1 && want_err "spoilt_$kind\.safetensors: " && unchanged ex "$tmp/ex3.sha" ||
            { why="$kind: $why"; return 1; }
    done
    run_exe export emb spoilt_dtype.safetensors --to ex --resume
    want_err 'tensor block_pooled is F32, but its metadata says dtype f16' || return 1
    run_exe export emb spoilt_times.safetensors --to ex --resume
    want_err 'block_start .* but block_pooled has 6 rows' || return 1
    echo "not a safetensors file" >junk.safetensors
    run_exe export junk.safetensors --to ex --resume
    want_rc 1 && want_err 'junk\.safetensors' && unchanged ex "$tmp/ex3.sha"
}
check tensors-disagreeing-with-metadata-refused t_disagree

t_no_blocks() {
    "$EXE" embed media/a.mp4 --size 32 --fps 2 --quiet -o full.safetensors 2>"$tmp/err"
    run_exe export full.safetensors --to ex_full --level block
    want_rc 1 && want_err 'full\.safetensors: no tensor block_pooled' && [ ! -e ex_full ] ||
        return 1
    # without --level: segments, as one output has no blocks
    run_exe export emb/a.safetensors full.safetensors --to ex_full
    want_rc 0 && chk rows ex_full emb/a.safetensors full.safetensors --level segment
}
check no-blocks-for-block-level t_no_blocks

t_locked() {
    flock ex/.export.lock sleep 30 &
    holder=$!
    sleep 0.5
    run_exe export emb --to ex --resume
    kill "$holder" 2>/dev/null
    wait "$holder" 2>/dev/null
    holder=""
    want_rc 1 && want_err 'another ringvit export is writing it' && unchanged ex "$tmp/ex3.sha"
}
check export-held-by-another-run t_locked

t_usage() {
    run_exe export emb
    want_rc 2 && want_err 'give the export folder with --to' || return 1
    run_exe export --to x
    want_rc 2 || return 1
    run_exe export emb --to x --level frames
    want_rc 2 && want_err '--level wants block, segment or global' || return 1
    run_exe export emb --to x --dtype bf16
    want_rc 2 && want_err '--dtype wants f32 or f16' || return 1
    run_exe export emb --to x --shard-rows 0
    want_rc 2 && [ ! -e x ] || return 1
    run_exe export --help
    want_rc 0 && tail -n 1 "$tmp/out" | grep -q 'More: docs/export.md'
}
check usage-errors-and-help t_usage

cli_summary
