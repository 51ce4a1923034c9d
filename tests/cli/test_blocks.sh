#!/bin/sh
# shellcheck disable=SC2317 # the t_* checks are called indirectly, through check()
# test_blocks.sh EXE: the per-block outputs of `ringvit embed --attention frame`
# and `--attention block=S` (block_pooled, block_projected, block_start,
# block_end) on checkpoints in the Hugging Face hub layout (tests/peer/
# hub_models.py makes them), against the peer's float64 reference run on each
# block alone (tests/peer/block_check.py): the frames of the block (CLIP with
# visual_projection, i.e. get_image_features per frame; DINOv2, ViT, per frame;
# VideoMAE per clip, with a block whose last tubelet is partial), or the block's
# own samples through torchaudio's Kaldi fbank (AST at block=10.24 on 25 s),
# within 1e-4 relative, at --cp 1 and 3; block_logits of the ViT, DINOv2,
# VideoMAE and AST classifier checkpoints against their task models' logits.
# Also: the block bounds on the file's clock, --dtype / --normalize on the block
# tensors, no block tensors without blocks, and --resume asking for them.
# Run by ctest as `sh test_blocks.sh $<TARGET_FILE:ringvit_cli>`; POSIX sh only.
# Prints one line per check, then "N passed, M failed"; exits 1 on any failure.

EXE=$1
if [ -z "$EXE" ] || [ ! -x "$EXE" ]; then
    echo "usage: sh test_blocks.sh PATH/TO/ringvit" >&2
    exit 2
fi
EXE=$(cd "$(dirname "$EXE")" && pwd)/$(basename "$EXE")
HERE=$(cd "$(dirname "$0")" && pwd)
PY=/usr/bin/python3
PEER="$HERE/../peer/hub_models.py"
BLOCKS="$HERE/../peer/block_check.py"
if ! command -v ffmpeg >/dev/null 2>&1; then
    echo "FAILED: no ffmpeg command to generate the test recordings (a test dependency)"
    exit 1
fi
if ! "$PY" -c 'import numpy, torch, torchaudio' 2>/dev/null; then
    echo "FAILED: $PY lacks numpy, torch or torchaudio for the reference (test dependencies)"
    exit 1
fi

tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT INT TERM
cd "$tmp" || exit 1

pass=0
fail=0
failed=""
why=""
check() {
    why=""
    if "$2"; then
        pass=$((pass + 1))
        echo "ok   $1"
    else
        fail=$((fail + 1))
        failed="$failed $1"
        echo "FAIL $1: ${why:-check failed}"
    fi
}

"$PY" "$PEER" make models || { echo "FAILED: hub_models.py make"; exit 1; }
# 3 s of a test pattern (96x64, so the 32 px crop is a new grid for no model)
# and 25 s of 16 kHz audio (two full 10.24 s blocks and a last one of 4.52 s).
ffmpeg -loglevel error -f lavfi -i testsrc2=size=96x64:rate=25 -t 3 -c:v libx264 \
    -pix_fmt yuv420p clip.mp4 || { echo "FAILED: ffmpeg"; exit 1; }
"$PY" - <<'PYEOF' || { echo "FAILED: writing the WAV file"; exit 1; }
import numpy as np, wave
rng = np.random.default_rng(11)
n = 400000
t = np.arange(n) / 16000
x = 0.3 * np.sin(2 * np.pi * 440 * t) + 0.2 * np.sin(2 * np.pi * (300 + 90 * t) * t)
x = np.clip(x + 0.05 * rng.normal(size=n), -1, 1)
w = wave.open("a25.wav", "wb")
w.setnchannels(1), w.setsampwidth(2), w.setframerate(16000)
w.writeframes((x * 32767).astype("<i2").tobytes())
w.close()
PYEOF
for fps in 2 3 4; do
    "$EXE" frames clip.mp4 --fps $fps --size 32 -o f$fps.safetensors >/dev/null 2>&1 ||
        { echo "FAILED: ringvit frames"; exit 1; }
done

# block NAME MODEL KIND INPUT REF_INPUT CP [embed flags...]: embeds with --cp CP
# and queues the comparison; all of them run at the end in one Python process.
: >"$tmp/blocks.tsv"
n=0
block() {
    b_name=$1 b_model=$2 b_kind=$3 b_in=$4 b_ref=$5 b_cp=$6
    shift 6
    n=$((n + 1))
    out="$tmp/b_$n.safetensors"
    if "$EXE" embed "$b_in" --model "models/$b_model" --cp "$b_cp" --quiet -o "$out" "$@" \
        2>"$tmp/err_$n"; then
        printf '%s\t%s\t%s\t%s\t%s\n' "$b_name" "models/$b_model" "$b_kind" "$out" "$b_ref" \
            >>"$tmp/blocks.tsv"
    else
        fail=$((fail + 1))
        failed="$failed $b_name"
        echo "FAIL $b_name: embed failed: $(head -c 300 "$tmp/err_$n")"
    fi
}
for cp in 1 3; do
    block clip-frames-cp$cp clip video clip.mp4 f2.safetensors $cp --attention frame --fps 2
    block dinov2-frames-cp$cp dinov2 video clip.mp4 f2.safetensors $cp --attention frame --fps 2
    block dinov2-cls-frames-cp$cp dinov2_cls video clip.mp4 f2.safetensors $cp --attention frame --fps 2
    block vit-frames-cp$cp vit video clip.mp4 f2.safetensors $cp --attention frame --fps 2
    block vit-cls-frames-cp$cp vit_cls video clip.mp4 f2.safetensors $cp --attention frame --fps 2
    block videomae-clips-cp$cp videomae video clip.mp4 f4.safetensors $cp --attention block=1 --fps 4
    # 3 frames a block: its last tubelet of 2 is partial (the block's own last frame)
    block videomae-partial-cp$cp videomae video clip.mp4 f3.safetensors $cp --attention block=1 --fps 3
    block ast-windows-cp$cp ast audio a25.wav a25.wav $cp --attention block=10.24
done
"$PY" "$BLOCKS" batch "$tmp/blocks.tsv" >"$tmp/blocks.out" 2>"$tmp/blocks.err"
while IFS="$(printf '\t')" read -r c_name c_rc c_line; do
    if [ "$c_rc" = 0 ]; then
        pass=$((pass + 1))
        echo "ok   $c_name-vs-reference"
        echo "     $c_line"
    else
        fail=$((fail + 1))
        failed="$failed $c_name-vs-reference"
        echo "FAIL $c_name-vs-reference: $c_line"
    fi
done <"$tmp/blocks.out"
if [ "$(wc -l <"$tmp/blocks.out")" -ne "$(wc -l <"$tmp/blocks.tsv")" ]; then
    fail=$((fail + 1))
    failed="$failed compare-all"
    echo "FAIL compare-all: $(wc -l <"$tmp/blocks.out") of $(wc -l <"$tmp/blocks.tsv") ran"
    tail -n 20 "$tmp/blocks.err"
fi

# The bounds: frame blocks are the sampled frames' times on the file's clock
# (a video starting at 1.4 s), one block a frame, the last ending with the video.
t_bounds() {
    ffmpeg -loglevel error -f lavfi -i testsrc2=size=96x64:rate=25 -t 3 -c:v libx264 \
        -pix_fmt yuv420p -output_ts_offset 1.4 -f mpegts late.ts || { why="ffmpeg"; return 1; }
    "$EXE" embed late.ts --model models/clip --attention frame --fps 2 -o late.safetensors \
        --quiet 2>"$tmp/err" || { why="embed: $(head -c 300 "$tmp/err")"; return 1; }
    "$EXE" frames late.ts --fps 2 --size 32 -o lf.safetensors >/dev/null 2>&1 ||
        { why="frames"; return 1; }
    why=$("$PY" -c '
import sys
sys.path.insert(0, sys.argv[1])
import hub_models as hm
o, m = hm.read_st("late.safetensors")
f, _ = hm.read_st("lf.safetensors")
s, e, t = o["block_start"][1], o["block_end"][1], f["frame_time"][1]
if len(s) != len(t) or list(s) != list(t):
    print(f"block_start {list(s)} are not the frame times {list(t)}"); sys.exit(1)
if list(e[:-1]) != list(s[1:]):
    print("a block does not end where the next starts"); sys.exit(1)
rec_end = float(m["start_s"]) + float(m["recording_s"])
if not (t[0] > 1.3 and abs(e[-1] - rec_end) < 1e-9):
    print(f"first frame at {t[0]}, last block ends {e[-1]}, recording {rec_end}"); sys.exit(1)
' "$HERE/../peer")
}
check bounds-on-the-file-clock t_bounds

# --dtype and --normalize apply to the block tensors; without blocks there are none.
t_forms() {
    "$EXE" embed clip.mp4 --model models/clip --attention frame --fps 2 --dtype f16 \
        --normalize -o f16.safetensors --quiet 2>"$tmp/err" &&
        "$EXE" embed clip.mp4 --model models/clip --attention frame --fps 2 \
            -o f32.safetensors --quiet 2>>"$tmp/err" &&
        "$EXE" embed clip.mp4 --model models/clip --fps 2 -o full.safetensors --quiet \
            2>>"$tmp/err" || { why="embed: $(head -c 300 "$tmp/err")"; return 1; }
    why=$("$PY" -c '
import sys
import numpy as np
sys.path.insert(0, sys.argv[1])
import hub_models as hm
a, _ = hm.read_st("f16.safetensors")
b, _ = hm.read_st("f32.safetensors")
c, _ = hm.read_st("full.safetensors")
for k in ("block_pooled", "block_projected"):
    dt, x = a[k]
    if dt != "F16":
        print(f"{k} is {dt} under --dtype f16"); sys.exit(1)
    ref = b[k][1].astype(np.float64)
    ref = ref / np.linalg.norm(ref, axis=1, keepdims=True)
    if np.abs(x.astype(np.float64) - ref).max() > 1e-3:
        print(f"{k} is not the L2-normalised rows in f16"); sys.exit(1)
extra = sorted(k for k in c if k.startswith("block_"))
if extra:
    print(f"full attention wrote {extra}"); sys.exit(1)
' "$HERE/../peer")
}
check dtype-normalize-and-none-without-blocks t_forms

# --resume: an output without the block tensors is not complete for a block run.
t_resume() {
    cp full.safetensors r.safetensors
    "$EXE" embed clip.mp4 --model models/clip --attention frame --fps 2 -o r.safetensors \
        --resume --quiet 2>"$tmp/err" || { why="embed: $(head -c 300 "$tmp/err")"; return 1; }
    "$PY" -c '
import sys
sys.path.insert(0, sys.argv[1])
import hub_models as hm
o, _ = hm.read_st("r.safetensors")
sys.exit(0 if "block_pooled" in o else 1)
' "$HERE/../peer" || { why="--resume kept an output without block_pooled"; return 1; }
}
check resume-wants-the-blocks t_resume

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ] || { echo "failed:$failed"; exit 1; }
