#!/bin/sh
# shellcheck disable=SC2317 # the t_* checks are called indirectly, through check()
# test_models.sh EXE: `ringvit embed --model DIR` and `ringvit inspect` on
# checkpoints in the Hugging Face hub layout (config.json, model.safetensors,
# preprocessor_config.json) of every family ringvit runs: ViT (with and without
# a pooler, tanh GELU), DINOv2, VideoMAE (classification and pre-training
# layouts), AST, CLIP (CLIPModel and CLIPVisionModel), plus F16/BF16 weights.
# tests/peer/hub_models.py makes tiny random checkpoints with the real tensor
# names and recomputes every output in float64 with its own torch reference of
# each published architecture, from ringvit's decoded inputs (`ringvit frames`,
# the fbank of `ringvit tokens`); per-token hidden states and the pooled output
# must agree within 1e-4 relative, at --cp 1 and --cp 3 (ring), on a 40-frame
# clip (VideoMAE, trained on 4 frames), 10.24 s and 25 s of audio (AST; the
# longer one resamples its positions along time) and frames of a clip with a
# patch grid other than the stored one (ViT, DINOv2, CLIP: bicubic positions).
# Also: hostile folders (exit 1 naming the problem), an unknown tensor (warned,
# named), the modality rule (--audio on a video-only model: exit 2), the
# random-weights warning and metadata, and `inspect` (family, modalities,
# parameter count, tensors ignored).
# Run by ctest as `sh test_models.sh $<TARGET_FILE:ringvit_cli>`; POSIX sh only.
# Prints one line per check, then "N passed, M failed"; exits 1 on any failure,
# including a missing test dependency (ffmpeg, torch, numpy).

EXE=$1
if [ -z "$EXE" ] || [ ! -x "$EXE" ]; then
    echo "usage: sh test_models.sh PATH/TO/ringvit" >&2
    exit 2
fi
EXE=$(cd "$(dirname "$EXE")" && pwd)/$(basename "$EXE")
HERE=$(cd "$(dirname "$0")" && pwd)
PY=/usr/bin/python3
PEER="$HERE/../peer/hub_models.py"
if ! command -v ffmpeg >/dev/null 2>&1; then
    echo "FAILED: no ffmpeg command to generate the test recordings (a test dependency: scripts/install-deps.sh)"
    exit 1
fi
if ! "$PY" -c 'import numpy, torch' 2>/dev/null; then
    echo "FAILED: $PY lacks numpy or torch for the reference (test dependencies: scripts/install-deps.sh)"
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

run_exe() {
    "$EXE" "$@" >"$tmp/out" 2>"$tmp/err"
    rc=$?
}
want_rc() {
    [ "$rc" -eq "$1" ] || { why="exit status $rc, want $1: $(head -c 300 "$tmp/err")"; return 1; }
}
want_err() {
    grep -Eq -- "$1" "$tmp/err" || { why="stderr lacks /$1/: $(head -c 300 "$tmp/err")"; return 1; }
}
no_err() {
    ! grep -Eq -- "$1" "$tmp/err" || { why="stderr has /$1/"; return 1; }
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
    fi
}

# ---- inputs -------------------------------------------------------------------------
"$PY" "$PEER" make models || { echo "FAILED: hub_models.py make"; exit 1; }
# 5 s of a test pattern with a tone: 40 frames at 8 fps, 5 at 1 fps.
ffmpeg -loglevel error -f lavfi -i testsrc2=size=96x96:rate=8 -f lavfi -i sine=f=440:r=16000 \
    -t 5 -c:v libx264 -pix_fmt yuv420p -c:a aac clip.mp4 || { echo "FAILED: ffmpeg"; exit 1; }
# 10.24 s (AST's 1024 fbank frames: its stored grid) and 25 s of 16 kHz audio.
"$PY" - <<'EOF' || { echo "FAILED: writing the WAV files"; exit 1; }
import numpy as np, wave
rng = np.random.default_rng(7)
for name, n in (("a10.wav", 163840), ("a25.wav", 400000)):
    t = np.arange(n) / 16000
    x = 0.3 * np.sin(2 * np.pi * 440 * t) + 0.2 * np.sin(2 * np.pi * (300 + 150 * t) * t)
    x = np.clip(x + 0.05 * rng.normal(size=n), -1, 1)
    w = wave.open(name, "wb")
    w.setnchannels(1), w.setsampwidth(2), w.setframerate(16000)
    w.writeframes((x * 32767).astype("<i2").tobytes())
    w.close()
EOF
"$EXE" frames clip.mp4 --fps 1 --size 48 -o f48.safetensors 2>/dev/null &&
    "$EXE" frames clip.mp4 --fps 2 --size 48 -o f48x2.safetensors 2>/dev/null &&
    "$EXE" frames clip.mp4 --fps 8 --size 32 -o f32x8.safetensors 2>/dev/null &&
    "$EXE" frames clip.mp4 --fps 1 --size 32 -o f32.safetensors 2>/dev/null &&
    "$EXE" tokens a10.wav -o t10.safetensors >/dev/null 2>&1 &&
    "$EXE" tokens a25.wav -o t25.safetensors >/dev/null 2>&1 ||
    { echo "FAILED: ringvit frames / tokens of the inputs"; exit 1; }

# The comparisons with the peer's float64 references run at the end, all in one
# Python process (torch is imported once, each reference computed once):
# compare NAME MODEL_DIR KIND OUT REF_INPUT [WAV] queues one; compare_all runs
# them and counts each as a check of its own ("NAME-vs-reference").
: >"$tmp/compare.tsv"
g_n=0
compare() {
    printf '%s\t%s\t%s\t%s\t%s\t%s\t-\n' "$1" "$2" "$3" "$4" "$5" "${6:--}" >>"$tmp/compare.tsv"
}
compare_all() {
    "$PY" "$PEER" check-batch "$tmp/compare.tsv" >"$tmp/compare.out" 2>"$tmp/compare.err"
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
    done <"$tmp/compare.out"
    # Every queued comparison must have answered.
    if [ "$(wc -l <"$tmp/compare.out")" -ne "$(wc -l <"$tmp/compare.tsv")" ]; then
        fail=$((fail + 1))
        failed="$failed compare-all"
        echo "FAIL compare-all: $(wc -l <"$tmp/compare.out") of $(wc -l <"$tmp/compare.tsv") comparisons ran"
        sed 's/^/     | /' "$tmp/compare.err" | tail -n 20
    fi
}

# golden NAME MODEL KIND INPUT REF_INPUT CP [embed flags...]: embed at --cp CP;
# the comparison with the reference is queued.
golden() {
    g_name=$1 g_model=$2 g_kind=$3 g_in=$4 g_ref=$5 g_cp=$6
    shift 6
    g_n=$((g_n + 1))
    g_out="$tmp/o_$g_n.safetensors"
    run_exe embed "$g_in" --model "models/$g_model" --cp "$g_cp" --tokens --quiet -o "$g_out" "$@"
    want_rc 0 || return 1
    g_wav=""
    case "$g_in" in *.wav) g_wav=$g_in ;; esac
    compare "$g_name" "models/$g_model" "$g_kind" "$g_out" "$g_ref" "$g_wav"
}

for cp in 1 3; do
    eval "t_vit_$cp() { golden golden-vit-cp$cp vit video clip.mp4 f48.safetensors $cp --fps 1 --size 48; }"
    eval "t_vit_t2_$cp() { golden golden-vit_t2-cp$cp vit video clip.mp4 f48x2.safetensors $cp --fps 2 --size 48 --tubelet 2; }"
    eval "t_vit_cls_$cp() { golden golden-vit_cls-cp$cp vit_cls video clip.mp4 f32.safetensors $cp --fps 1; }"
    eval "t_dinov2_$cp() { golden golden-dinov2-cp$cp dinov2 video clip.mp4 f48.safetensors $cp --fps 1 --size 48; }"
    eval "t_clip_$cp() { golden golden-clip-cp$cp clip video clip.mp4 f48.safetensors $cp --fps 1 --size 48; }"
    eval "t_clip_vision_t2_$cp() { golden golden-clip_vision_t2-cp$cp clip_vision video clip.mp4 f48x2.safetensors $cp --fps 2 --size 48 --tubelet 2; }"
    eval "t_videomae_$cp() { golden golden-videomae-cp$cp videomae video clip.mp4 f32x8.safetensors $cp --fps 8; }"
    eval "t_videomae_pt_$cp() { golden golden-videomae_pt-cp$cp videomae_pt video clip.mp4 f32x8.safetensors $cp --fps 8; }"
    eval "t_ast_10s_$cp() { golden golden-ast_10s-cp$cp ast audio a10.wav t10.safetensors $cp; }"
    eval "t_ast_25s_$cp() { golden golden-ast_25s-cp$cp ast audio a25.wav t25.safetensors $cp; }"
    for t in vit vit_t2 vit_cls dinov2 clip clip_vision_t2 videomae videomae_pt ast_10s ast_25s; do
        check "golden-$t-cp$cp" "t_${t}_$cp"
    done
done
t_ulysses() { golden golden-dinov2-ulysses-cp2 dinov2 video clip.mp4 f48.safetensors 2 --fps 1 --size 48 --strategy ulysses; }
check golden-dinov2-ulysses-cp2 t_ulysses
t_allgather() { golden golden-ast-allgather-cp3 ast audio a25.wav t25.safetensors 3 --strategy allgather; }
check golden-ast-allgather-cp3 t_allgather
t_f16() { golden golden-vit-f16 vit_f16 video clip.mp4 f48.safetensors 1 --fps 1 --size 48; }
check golden-vit-f16 t_f16
t_bf16() { golden golden-vit-bf16 vit_bf16 video clip.mp4 f48.safetensors 2 --fps 1 --size 48; }
check golden-vit-bf16 t_bf16

# Shards: vit's tensors split over two files listed by model.safetensors.index.json.
t_sharded() {
    mkdir -p models/vit_sharded && cp models/vit/config.json models/vit/preprocessor_config.json \
        models/vit_sharded/ || return 1
    "$PY" - models/vit/model.safetensors models/vit_sharded <<'EOF' || { why="splitting"; return 1; }
import json, struct, sys
raw = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
h = json.loads(raw[8:8 + n])
meta = h.pop("__metadata__", None)
names = sorted(h)
index = {"metadata": {"total_size": len(raw) - 8 - n}, "weight_map": {}}
for part, group in enumerate((names[::2], names[1::2])):
    fname = f"model-0000{part + 1}-of-00002.safetensors"
    head, blobs, off = {}, [], 0
    for k in group:
        a, b = h[k]["data_offsets"]
        blob = raw[8 + n + a:8 + n + b]
        head[k] = dict(h[k], data_offsets=[off, off + len(blob)])
        blobs.append(blob)
        off += len(blob)
        index["weight_map"][k] = fname
    if meta:
        head["__metadata__"] = meta
    hb = json.dumps(head).encode()
    hb += b" " * (-len(hb) % 8)
    with open(f"{sys.argv[2]}/{fname}", "wb") as f:
        f.write(struct.pack("<Q", len(hb)) + hb + b"".join(blobs))
json.dump(index, open(f"{sys.argv[2]}/model.safetensors.index.json", "w"))
EOF
    # the same weights as vit/: compare with vit/'s reference
    run_exe embed clip.mp4 --model models/vit_sharded --fps 1 --size 48 --tokens --quiet \
        -o sharded.safetensors
    want_rc 0 || return 1
    compare golden-vit-sharded models/vit video sharded.safetensors f48.safetensors
}
check golden-vit-sharded t_sharded

# Training: VideoMAE's masked reconstruction learns (the loss falls), and the
# tuned file is read back as a VideoMAE.
t_finetune_videomae() {
    printf 'clip.mp4\n' >mae.txt
    run_exe finetune --task mae --manifest mae.txt --model models/videomae --fps 8 --steps 12 \
        --lr 1e-3 --warmup 2 --quiet -o tuned.safetensors
    want_rc 0 || return 1
    "$PY" - tuned.log.jsonl <<'EOF' >"$tmp/cmp" 2>&1 || { why="$(tail -n 1 "$tmp/cmp")"; return 1; }
import json, sys
loss = [json.loads(l)["loss"] for l in open(sys.argv[1]) if '"loss"' in l and '"step"' in l]
if len(loss) < 12 or not loss[-1] < 0.8 * loss[0]:
    sys.exit(f"mae loss {loss[:1]} -> {loss[-1:]}: not down by 20%")
EOF
    run_exe inspect tuned.safetensors --json
    want_rc 0 && grep -q '"family": "videomae"' "$tmp/out" || { why="${why:-not a videomae}"; return 1; }
    run_exe embed clip.mp4 --model tuned.safetensors --fps 8 --quiet -o tuned-emb.safetensors
    want_rc 0
}
check finetune-videomae-mae t_finetune_videomae
t_finetune_ast() {
    printf 'a10.wav\tx\na25.wav\ty\n' >cls.tsv
    run_exe finetune --task classify --manifest cls.tsv --model models/ast --steps 2 --quiet \
        -o ast-tuned.safetensors
    want_rc 0
}
check finetune-ast-classify t_finetune_ast

# ---- hostile folders ------------------------------------------------------------------
t_noconfig() {
    run_exe embed clip.mp4 --model models/bad_noconfig -o x.safetensors
    want_rc 1 && want_err "bad_noconfig.*no config.json"
}
t_badtype() {
    run_exe embed clip.mp4 --model models/bad_type -o x.safetensors
    want_rc 1 && want_err "model_type 'llama' is not one ringvit runs"
}
t_badshape() {
    run_exe embed clip.mp4 --model models/bad_shape -o x.safetensors
    want_rc 1 && want_err "projection.weight' has shape \[64, 3, 8, 8\]; expected \[96, 3, 8, 8\] \(as config.json says\)"
}
t_missing() {
    run_exe embed clip.mp4 --model models/bad_missing -o x.safetensors
    want_rc 1 && want_err "missing tensor 'encoder.layer.1.attention.attention.key.weight'"
}
t_extra() {
    run_exe embed clip.mp4 --model models/vit_extra --fps 1 --size 48 --tokens -o extra.safetensors
    want_rc 0 && want_err "warning: .*vit_extra.*unknown tensor: 'foo.bar'" &&
        compare hostile-extra-tensor models/vit_extra video extra.safetensors f48.safetensors
}
t_nofolder() {
    run_exe embed clip.mp4 --model models/none/ -o x.safetensors
    want_rc 1 && want_err "models/none"
}
t_no_output_left() {
    [ ! -e x.safetensors ] || { why="a failed run left x.safetensors"; return 1; }
}
check hostile-no-config t_noconfig
check hostile-model-type t_badtype
check hostile-config-vs-shapes t_badshape
check hostile-missing-tensor t_missing
check hostile-extra-tensor-warned t_extra
check hostile-missing-folder t_nofolder
check hostile-nothing-written t_no_output_left

# ---- modalities, random weights, metadata ----------------------------------------------
meta() { # FILE KEY VALUE: the output's metadata KEY is VALUE
    "$PY" - "$@" <<'EOF' || return 1
import json, struct, sys
raw = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
m = json.loads(raw[8:8 + n]).get("__metadata__", {})
if m.get(sys.argv[2]) != sys.argv[3]:
    sys.exit(f"{sys.argv[2]} is {m.get(sys.argv[2])!r}, want {sys.argv[3]!r}")
EOF
}
t_video_only() {
    run_exe embed clip.mp4 --model models/vit --fps 1 --size 48 -o vo.safetensors
    want_rc 0 && want_err "video only: the vit model has no audio weights" || return 1
    meta vo.safetensors audio_tokens 0 && meta vo.safetensors family vit &&
        meta vo.safetensors random_weights false || { why="metadata"; return 1; }
}
t_audio_refused() {
    run_exe embed clip.mp4 --model models/videomae --audio -o x.safetensors
    want_rc 2 && want_err "--audio: the videomae model has no audio weights"
}
t_video_refused() {
    run_exe embed clip.mp4 --model models/ast --video -o x.safetensors
    want_rc 2 && want_err "--video: the ast model has no video weights"
}
t_audio_only() {
    run_exe embed clip.mp4 --model models/ast -o ao.safetensors
    want_rc 0 && want_err "audio only: the ast model" || return 1
    meta ao.safetensors video_tokens 0 || { why="video tokens in an AST output"; return 1; }
}
t_random() {
    run_exe embed clip.mp4 --model tiny --size 32 -o rnd.safetensors
    want_rc 0 && want_err "warning: embed: --model tiny has RANDOM weights" || return 1
    meta rnd.safetensors random_weights true || { why="random_weights metadata"; return 1; }
}
t_random_quiet() {
    run_exe embed clip.mp4 --model tiny --size 32 --quiet -o rnd2.safetensors
    want_rc 0 && no_err "RANDOM"
}
check modality-video-only t_video_only
check modality-audio-refused t_audio_refused
check modality-video-refused t_video_refused
check modality-audio-only t_audio_only
check random-weights-warned t_random
check random-weights-quiet t_random_quiet

# ---- inspect ----------------------------------------------------------------------------
# inspect_ok MODEL FAMILY MODALITIES: the JSON names them, and its parameter count
# is the checkpoint's tensors less the ignored ones (VideoMAE: plus its zero k biases).
inspect_ok() {
    run_exe inspect "models/$1" --json
    want_rc 0 || return 1
    "$PY" - "$tmp/out" "models/$1/model.safetensors" "$2" "$3" <<'EOF' >"$tmp/cmp" 2>&1 ||
import json, struct, sys
o = json.load(open(sys.argv[1]))
raw = open(sys.argv[2], "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
h = json.loads(raw[8:8 + n])
h.pop("__metadata__", None)
want = 0
for name, t in h.items():
    if name in o["ignored"]:
        continue
    k = 1
    for e in t["shape"]:
        k *= e
    want += k
c = o["config"]
if o["family"] == "videomae":
    want += c["layers"] * c["dim"]  # the k bias VideoMAE fixes at zero
errs = []
if o["family"] != sys.argv[3]:
    errs.append(f"family {o['family']}, want {sys.argv[3]}")
if ",".join(o["modalities"]) != sys.argv[4]:
    errs.append(f"modalities {o['modalities']}, want {sys.argv[4]}")
if o["params"] != want:
    errs.append(f"params {o['params']}, want {want}")
if o["unknown"]:
    errs.append(f"unknown tensors {o['unknown']}")
if errs:
    sys.exit("; ".join(errs))
EOF
        { why="$(tail -n 1 "$tmp/cmp")"; return 1; }
}
t_inspect_vit() { inspect_ok vit vit video; }
t_inspect_dinov2() { inspect_ok dinov2 dinov2 video; }
t_inspect_videomae() { inspect_ok videomae videomae video && grep -q '"classifier.weight"' "$tmp/out"; }
t_inspect_videomae_pt() { inspect_ok videomae_pt videomae video && grep -q '"decoder.head.weight"' "$tmp/out"; }
t_inspect_ast() { inspect_ok ast ast audio; }
t_inspect_clip() { inspect_ok clip clip video && grep -q '"logit_scale"' "$tmp/out"; }
t_inspect_text() {
    run_exe inspect models/videomae
    want_rc 0 && grep -q "^family: *videomae" "$tmp/out" && grep -q "fc_norm" "$tmp/out" ||
        { why="${why:-the table lacks the family or the pooling note}"; return 1; }
}
t_inspect_bad() {
    run_exe inspect models/bad_type
    want_rc 1 && want_err "llama"
}
t_inspect_usage() {
    run_exe inspect
    want_rc 2 && want_err "which model"
}
for t in vit dinov2 videomae videomae_pt ast clip text bad usage; do
    check "inspect-$t" "t_inspect_$t"
done

compare_all

echo "$pass passed, $fail failed"
if [ "$fail" -ne 0 ]; then
    echo "FAILED:$failed"
    exit 1
fi
exit 0
