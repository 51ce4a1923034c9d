#!/bin/sh
# shellcheck disable=SC2317 # the t_* checks are called indirectly, through check()
# shellcheck disable=SC2015 # `A && B || { why=...; return 1; }`: C is meant to run when A or B fails
# test_spans.sh EXE: `ringvit embed --attention` end to end on recordings generated
# with the ffmpeg command:
#   - block=4 on a 12 s video equals embedding each 4 s block alone (--start,
#     --duration, full attention): every token's output, time and position, and
#     the block's segment equals the part's global mean; at cp 1 and cp 3 (ring)
#     and cp 2 (allgather); video only, and with audio at cp 1 and 3 (each block
#     is tokenized as the recording cut at its bounds: its own fbank frames and
#     audio patches from its first sample, none reading past its end; a part
#     interleaves its 2 s windows, so its tokens are matched by modality and
#     position);
#   - frame with a tiny torchvision ViT (tests/peer/frame_golden.py, converted by
#     scripts/convert-torchvision.py) equals torchvision's image model on every
#     frame of a losslessly encoded video (float64 golden, 1e-4 relative); cp 2
#     equals cp 1;
#   - window=3 with audio at cp 2 and 3 and every strategy (and causal) equals
#     cp 1 within 1e-5, and differs from full attention;
#   - --segment / --hop: overlapping and gapped segments against the definition;
#     block=W makes the segments the blocks; the metadata (attention, hop_s);
#     --json reports the peak memory of a rank; `tokens --block` agrees with
#     embed's token count;
#   - usage errors (exit 2): a bad span, seconds <= 0, a bad --hop, frame without
#     video.
# Outputs are read by span_check.py and embed_compare.py (json + numpy).
# Run by ctest as `sh test_spans.sh $<TARGET_FILE:ringvit_cli>`; POSIX sh only.
# Prints one line per check, then "N passed, M failed"; exits 1 on any failure,
# including a missing test dependency (ffmpeg, numpy, torch, torchvision).

EXE=$1
if [ -z "$EXE" ] || [ ! -x "$EXE" ]; then
    echo "usage: sh test_spans.sh PATH/TO/ringvit" >&2
    exit 2
fi
EXE=$(cd "$(dirname "$EXE")" && pwd)/$(basename "$EXE")
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
PY=/usr/bin/python3
CMP="$HERE/embed_compare.py"
SPAN="$HERE/span_check.py"
if ! command -v ffmpeg >/dev/null 2>&1; then
    echo "FAILED: no ffmpeg command to generate the test recordings (a test dependency: scripts/install-deps.sh)"
    exit 1
fi
if ! "$PY" -c 'import importlib.util as u, sys
sys.exit(not all(u.find_spec(m) for m in ("torch", "torchvision", "numpy")))' 2>/dev/null; then
    echo "FAILED: $PY lacks torch, torchvision or numpy (test dependencies: scripts/install-deps.sh)"
    exit 1
fi

tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT INT TERM
cd "$tmp" || exit 1

# shellcheck source=tests/cli/cli_lib.sh
. "$HERE/cli_lib.sh"
# Small and fast: 32 px frames (2 x 2 patches of the tiny preset) at 2 fps.
SMALL="--size 32 --fps 2 --quiet"

# emb ARGS...: ringvit embed, which must succeed.
emb() {
    run_exe embed "$@" && want_rc 0
}
same() { # A B: the outputs agree (1e-5 relative)
    "$PY" "$CMP" same "$1" "$2" >"$tmp/cmp" 2>&1 || { why="$1 vs $2: $(tail -n 1 "$tmp/cmp")"; return 1; }
}
span() { # span_check.py ARGS...
    "$PY" "$SPAN" "$@" >"$tmp/cmp" 2>&1 || { why="$(tail -n 1 "$tmp/cmp")"; return 1; }
}

# ---- recordings and the torchvision golden --------------------------------------------
ff() { ffmpeg -nostdin -v error -y "$@" >/dev/null 2>&1; }
ff -f lavfi -i testsrc2=size=64x48:rate=10 -f lavfi -i sine=frequency=440:sample_rate=16000 \
    -t 12 -c:v libx264 -pix_fmt yuv420p -c:a aac -shortest clip.mp4 || {
    echo "FAIL ffmpeg could not generate the test recording"
    exit 1
}
if ! "$PY" "$ROOT/tests/peer/frame_golden.py" "$ROOT/scripts/convert-torchvision.py" fr \
    >"$tmp/golden.log" 2>&1 ||
    ! ff -f rawvideo -pix_fmt rgb24 -s 32x32 -r 2 -i fr/frames.rgb -c:v ffv1 -pix_fmt bgr0 \
        fr/frames.mkv; then
    echo "FAIL the torchvision golden (tests/peer/frame_golden.py) could not be made:"
    tail -n 5 "$tmp/golden.log"
    exit 1
fi

# ---- usage errors (2) ------------------------------------------------------------------
usage() { # ARGS...: exit 2, nothing on stdout, a message naming embed
    run_exe embed "$@"
    want_rc 2 && want_no_out && want_err '^ringvit: embed: '
}
t_bad_span() { usage clip.mp4 --attention diagonal && want_err 'window=SECONDS'; }
t_zero_window() { usage clip.mp4 --attention window=0; }
t_negative_block() { usage clip.mp4 --attention block=-4; }
t_bad_seconds() { usage clip.mp4 --attention window=abc; }
t_bad_hop() { usage clip.mp4 --hop 0; }
t_frame_no_video() { usage clip.mp4 --attention frame --no-video; }
check usage-bad-span t_bad_span
check usage-zero-window t_zero_window
check usage-negative-block t_negative_block
check usage-bad-seconds t_bad_seconds
check usage-bad-hop t_bad_hop
check usage-frame-without-video t_frame_no_video

# ---- block=W equals each block alone ----------------------------------------------------
t_parts() {
    for s in 0 4 8; do
        emb clip.mp4 $SMALL --no-audio --start $s --duration 4 --tokens -o part$s.safetensors ||
            return 1
    done
}
t_block() { # CP STRATEGY
    emb clip.mp4 $SMALL --no-audio --attention block=4 --tokens --cp "$1" --strategy "$2" \
        -o block_$1_$2.safetensors &&
        span blocks block_$1_$2.safetensors part0.safetensors part4.safetensors part8.safetensors
}
t_block_cp1() { t_block 1 ring; }
t_block_cp3() { t_block 3 ring; }
t_block_allgather() { t_block 2 allgather; }
t_parts_av() {
    for s in 0 4 8; do
        emb clip.mp4 $SMALL --start $s --duration 4 --tokens -o part_av$s.safetensors || return 1
    done
}
t_block_av() { # CP
    emb clip.mp4 $SMALL --attention block=4 --tokens --cp "$1" -o block_av_$1.safetensors &&
        span blocks-matched block_av_$1.safetensors part_av0.safetensors part_av4.safetensors \
            part_av8.safetensors
}
t_block_av_cp1() { t_block_av 1; }
t_block_av_cp3() { t_block_av 3; }
t_block_segments() {
    span meta block_1_ring.safetensors attention=block=4 segment_s=4 hop_s=4 &&
        "$PY" "$CMP" check block_1_ring.safetensors segments=3 per_token=1 >"$tmp/cmp" 2>&1 ||
        { why="${why:-$(tail -n 1 "$tmp/cmp")}"; return 1; }
}
# 3 blocks of 4 s, each its own recording: 1 class token, 4 tubelets of 2 x 2
# patches, 64000 samples -> 398 fbank frames -> 24 audio steps of 8 bands; 3 x
# (1 + 16 + 192) = 627 (the whole recording's audio grid cut by where each patch
# starts gave 74 steps in all: 643)
t_tokens_block() { # `ringvit tokens --block` lays out the same sequence
    run_exe tokens clip.mp4 --size 32 --fps 2 --cls --block 4 --json && want_rc 0 || return 1
    "$PY" -c 'import json, sys
d = json.load(open(sys.argv[1]))
t = d["tokens"]
n = t["video"] + t["audio"] + t["cls"]
b = d["blocks"]
ok = b["count"] == 3 and b["cls_each_window"] and t["cls"] == 3
sys.exit(0 if ok and str(n) == sys.argv[2] else 1)' "$tmp/out" 627 ||
        { why="tokens --block reports another layout than 3 blocks of 627 tokens"; return 1; }
    emb clip.mp4 $SMALL --attention block=4 -o block_av.safetensors &&
        span meta block_av.safetensors tokens=627
}
check block-parts t_parts
check block-equals-parts-cp1 t_block_cp1
check block-equals-parts-cp3-ring t_block_cp3
check block-equals-parts-cp2-allgather t_block_allgather
check block-parts-with-audio t_parts_av
check block-with-audio-equals-parts-cp1 t_block_av_cp1
check block-with-audio-equals-parts-cp3 t_block_av_cp3
check block-segments-are-the-blocks t_block_segments
check block-layout-as-tokens t_tokens_block

# ---- frame: an image model on every frame -----------------------------------------------
FR="--model fr/vit.safetensors --fps 2 --size 32 --no-audio --attention frame --tokens --quiet"
t_frame_golden() {
    emb fr/frames.mkv $FR -o frame1.safetensors && span golden frame1.safetensors fr/golden.npy
}
t_frame_cp2() {
    emb fr/frames.mkv $FR --cp 2 -o frame2.safetensors && same frame2.safetensors frame1.safetensors
}
check frame-equals-torchvision-per-frame t_frame_golden
check frame-cp2-equals-cp1 t_frame_cp2

# ---- window: every rank count and strategy equals cp 1 -----------------------------------
t_window() {
    emb clip.mp4 $SMALL --attention window=3 --tokens -o win1.safetensors || return 1
    for s in "2 ring" "3 ring" "2 allgather" "3 ulysses"; do
        set -- $s
        emb clip.mp4 $SMALL --attention window=3 --tokens --cp "$1" --strategy "$2" \
            -o win_$1_$2.safetensors && same win_$1_$2.safetensors win1.safetensors ||
            { why="cp $1 $2: $why"; return 1; }
    done
}
t_window_causal() {
    emb clip.mp4 $SMALL --attention window=3 --causal --tokens -o winc1.safetensors &&
        emb clip.mp4 $SMALL --attention window=3 --causal --tokens --cp 3 -o winc3.safetensors &&
        same winc3.safetensors winc1.safetensors && span differ winc1.safetensors win1.safetensors
}
t_window_applied() {
    emb clip.mp4 $SMALL --tokens -o full.safetensors && span differ win1.safetensors full.safetensors &&
        span meta win1.safetensors attention=window=3
}
check window-cp-and-strategies-equal-cp1 t_window
check window-causal-cp3-equals-cp1 t_window_causal
check window-differs-from-full t_window_applied

# ---- segments with a hop; --json ---------------------------------------------------------
t_hop_overlap() {
    emb clip.mp4 $SMALL --attention window=3 --segment 4 --hop 1.5 --tokens -o hop.safetensors &&
        span hop hop.safetensors 4 1.5 && span meta hop.safetensors hop_s=1.5 segment_s=4
}
t_hop_gaps() {
    emb clip.mp4 $SMALL --segment 1 --hop 2.5 --tokens --cp 2 -o gaps.safetensors &&
        span hop gaps.safetensors 1 2.5
}
t_json_memory() {
    run_exe embed clip.mp4 $SMALL --attention window=3 --cp 2 --json -o j.safetensors &&
        want_rc 0 || return 1
    "$PY" -c 'import json, sys
d = json.loads(open(sys.argv[1]).readline())
sys.exit(0 if d["status"] == "ok" and d["rank_peak_mb"] > 0 else 1)' "$tmp/out" ||
        { why="--json lacks a positive rank_peak_mb"; return 1; }
}
check hop-overlapping-segments t_hop_overlap
check hop-gapped-segments t_hop_gaps
check json-reports-rank-memory t_json_memory

cli_summary
