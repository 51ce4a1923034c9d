#!/bin/sh
# shellcheck disable=SC2317 # the t_* checks are called indirectly, through check()
# test_models.sh EXE: `ringvit embed --model DIR` and `ringvit inspect` on
# checkpoints in the Hugging Face hub layout (config.json, model.safetensors,
# preprocessor_config.json) of every family ringvit runs: ViT (with and without
# a pooler, tanh GELU), DINOv2, VideoMAE (classification and pre-training
# layouts), AST, CLIP (CLIPModel and CLIPVisionModel), plus F16/BF16 weights;
# the four classification layouts (ViT, DINOv2, VideoMAE, AST) also have their
# `logits` checked against the task model's, and their labels and multi_label.
# tests/peer/hub_models.py makes tiny random checkpoints with the real tensor
# names and recomputes every output in float64 with its own torch reference of
# each published architecture, from ringvit's decoded inputs (`ringvit frames`,
# the fbank of `ringvit tokens`); per-token hidden states and the pooled output
# must agree within 1e-4 relative, at --cp 1 and --cp 3 (ring), on a 40-frame
# clip (VideoMAE, trained on 4 frames), 10.24 s and 25 s of audio (AST; the
# longer one resamples its positions along time) and frames of a clip with a
# patch grid other than the stored one (ViT, DINOv2, CLIP: bicubic positions).
# Also: hostile folders (exit 1 naming the problem; an id2label gap), an unknown
# tensor (warned, named), the modality rule (--audio on a video-only model: exit
# 2), the random-weights warning and metadata, `inspect` (family, modalities,
# parameter count, tensors ignored, the head and its labels), and `ringvit
# labels`: a classifier built so that a known label wins (softmax, sigmoid,
# --top, --json), AST's multi-label metadata, per-block rows, logits kept F32
# under --dtype, bad files and usage, a finetune classify head read back.
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
# head_ok HEAD CLASSES MULTI_LABEL LABELS_JSON: the last inspect --json names the head
head_ok() {
    "$PY" - "$tmp/out" "$@" <<'EOF' >"$tmp/cmp" 2>&1 || { why="$(tail -n 1 "$tmp/cmp")"; return 1; }
import json, sys
o = json.load(open(sys.argv[1]))
want = (sys.argv[2], int(sys.argv[3]), sys.argv[4] == "true", json.loads(sys.argv[5]))
got = (o["head"], o["classes"], o["multi_label"], o["labels"])
if got != want:
    sys.exit(f"head {got}, want {want}")
if any(n.startswith("classifier") for n in o["ignored"]):
    sys.exit(f"classifier tensors ignored: {o['ignored']}")
EOF
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
    eval "t_dinov2_cls_$cp() { golden golden-dinov2_cls-cp$cp dinov2_cls video clip.mp4 f48.safetensors $cp --fps 1 --size 48; }"
    eval "t_clip_$cp() { golden golden-clip-cp$cp clip video clip.mp4 f48.safetensors $cp --fps 1 --size 48; }"
    eval "t_clip_vision_t2_$cp() { golden golden-clip_vision_t2-cp$cp clip_vision video clip.mp4 f48x2.safetensors $cp --fps 2 --size 48 --tubelet 2; }"
    eval "t_videomae_$cp() { golden golden-videomae-cp$cp videomae video clip.mp4 f32x8.safetensors $cp --fps 8; }"
    eval "t_videomae_pt_$cp() { golden golden-videomae_pt-cp$cp videomae_pt video clip.mp4 f32x8.safetensors $cp --fps 8; }"
    eval "t_ast_10s_$cp() { golden golden-ast_10s-cp$cp ast audio a10.wav t10.safetensors $cp; }"
    eval "t_ast_25s_$cp() { golden golden-ast_25s-cp$cp ast audio a25.wav t25.safetensors $cp; }"
    for t in vit vit_t2 vit_cls dinov2 dinov2_cls clip clip_vision_t2 videomae videomae_pt ast_10s ast_25s; do
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
    want_rc 0 || return 1
    # its trained head (on the mean of the tokens) replaces AST's own, with the
    # manifest's classes as labels
    run_exe inspect ast-tuned.safetensors --json
    want_rc 0 && head_ok mean 2 false '["x","y"]' || return 1
    run_exe embed a10.wav --model ast-tuned.safetensors --quiet -o ast-tuned-emb.safetensors
    want_rc 0 && meta ast-tuned-emb.safetensors labels '["x","y"]' || { why="${why:-labels metadata}"; return 1; }
    run_exe labels ast-tuned-emb.safetensors --top 1
    want_rc 0 && grep -Eq "^0:00:00.000 +0:00:10.240 +[xy] 0\.[0-9]{4}$" "$tmp/out" ||
        { why="${why:-labels: $(tail -n 1 "$tmp/out")}"; return 1; }
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
t_badlabels() {
    run_exe embed clip.mp4 --model models/bad_labels -o x.safetensors
    want_rc 1 && want_err "bad_labels.*config.json: \"id2label\" has no label for class 2 \(the classifier 'classifier.weight' has 5 rows"
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
check hostile-id2label-gap t_badlabels
check hostile-extra-tensor-warned t_extra
check hostile-missing-folder t_nofolder
check hostile-nothing-written t_no_output_left

# ---- modalities, random weights, metadata ----------------------------------------------
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
t_inspect_videomae() {
    inspect_ok videomae videomae video &&
        head_ok mean_norm 5 false '["LABEL_0","LABEL_1","LABEL_2","LABEL_3","LABEL_4"]'
}
t_inspect_dinov2_cls() {
    inspect_ok dinov2_cls dinov2 video &&
        head_ok cls_mean 6 false '["tabby cat","L\u00f6we","\u72ac","\"quoted\" bird","caf\u00e9, terrace","\ud83e\udd89 owl"]'
}
t_inspect_ast_head() {
    run_exe inspect models/ast --json
    want_rc 0 && head_ok cls_dist_norm 7 true '["Speech","Music","Dog","Rain","Guitar","Siren","Bird vocalization, bird call"]'
}
t_inspect_vit_nohead() {
    run_exe inspect models/vit --json
    want_rc 0 && head_ok none 0 false '[]'
}
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
for t in vit dinov2 videomae dinov2_cls ast_head vit_nohead videomae_pt ast clip text bad usage; do
    check "inspect-$t" "t_inspect_$t"
done

# ---- logits and `ringvit labels` ---------------------------------------------------------
# labels_want FILE SIGMOID(0|1) TOP LEVEL(block|recording): Python's own softmax or
# sigmoid of the file's logits, one JSON line per row [start, end, [[label, p]...]]
# (times as h:mm:ss.sss) in $tmp/want.
labels_want() {
    "$PY" - "$@" <<'EOF' >"$tmp/want" || return 1
import json, struct, sys
import numpy as np
raw = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
h = json.loads(raw[8:8 + n])
meta = h.pop("__metadata__")
def t(name):
    e = h[name]
    a, b = e["data_offsets"]
    dt = {"F32": "<f4", "F64": "<f8"}[e["dtype"]]
    return np.frombuffer(raw[8 + n + a:8 + n + b], dtype=dt).reshape(e["shape"]).astype(np.float64)
labels = json.loads(meta["labels"])
sig, top, level = sys.argv[2] == "1", int(sys.argv[3]), sys.argv[4]
if level == "block":
    z, s, e = t("block_logits"), t("block_start"), t("block_end")
else:
    z, s, e = t("logits")[None], t("segment_start")[:1], t("segment_end")[-1:]
def clock(x):
    ms = round(abs(x) * 1000)
    return ("-" if x < 0 else "") + f"{ms // 3600000}:{ms // 60000 % 60:02d}:{ms // 1000 % 60:02d}.{ms % 1000:03d}"
for r in range(z.shape[0]):
    if sig:
        p = 1 / (1 + np.exp(-z[r]))
    else:
        p = np.exp(z[r] - z[r].max())
        p /= p.sum()
    order = sorted(range(len(p)), key=lambda i: (-p[i], i))[:top]
    print(json.dumps([clock(s[r]), clock(e[r]), [[labels[i], float(p[i])] for i in order]]))
EOF
}
# want_known JSON: $tmp/want is that one row (probabilities within 1e-4).
want_known() {
    "$PY" - "$tmp/want" "$1" <<'EOF' >"$tmp/cmp" 2>&1 || { why="reference: $(tail -n 1 "$tmp/cmp")"; return 1; }
import json, sys
got = [json.loads(l) for l in open(sys.argv[1])]
want = [json.loads(sys.argv[2])]
ok = len(got) == 1 and got[0][:2] == want[0][:2] and \
    [l for l, _ in got[0][2]] == [l for l, _ in want[0][2]] and \
    all(abs(a[1] - b[1]) <= 1e-4 for a, b in zip(got[0][2], want[0][2]))
if not ok:
    sys.exit(f"{got} is not the known {want}")
EOF
}
# labels_table FILE ARGS...: `ringvit labels FILE ARGS` prints $tmp/want's rows: the
# same times and labels in order, each probability within 1.5e-4 (4 decimals).
labels_table() {
    run_exe labels "$@"
    want_rc 0 || return 1
    "$PY" - "$tmp/out" "$tmp/want" <<'EOF' >"$tmp/cmp" 2>&1 || { why="$(tail -n 1 "$tmp/cmp")"; return 1; }
import json, re, sys
lines = open(sys.argv[1], encoding="utf-8").read().splitlines()
want = [json.loads(l) for l in open(sys.argv[2])]
if not lines[0].startswith("start") or len(lines) - 1 != len(want):
    sys.exit(f"{len(lines) - 1} rows (header {lines[0]!r}), want {len(want)}")
for line, w in zip(lines[1:], want):
    m = re.match(r"(\S+) +(\S+)  (.*)$", line)  # pairs are two spaces apart
    if not m:
        sys.exit(f"row {line!r} is not START END  label p ...")
    times = [m.group(1), m.group(2)]
    got = [p.strip().rsplit(" ", 1) for p in m.group(3).strip().split("  ")]
    if times != w[:2] or [g[0] for g in got] != [x[0] for x in w[2]]:
        sys.exit(f"row {line!r}, want {w}")
    if any(abs(float(g[1]) - x[1]) > 1.5e-4 for g, x in zip(got, w[2])):
        sys.exit(f"row {line!r}, want {w}")
EOF
}
# A classifier built so that LABEL_3 wins: vit_cls/ with classifier row 3 =
# 3 cls / |cls|^2 (cls: the model's own CLS output on clip.mp4) and every
# other weight and bias 0, so the logits are (0, 0, 0, 3, 0).
t_labels_known() {
    run_exe embed clip.mp4 --model models/vit_cls --fps 1 --quiet -o lk0.safetensors
    want_rc 0 || return 1
    rm -rf models/vit_known && cp -r models/vit_cls models/vit_known || return 1
    "$PY" - "$PEER" lk0.safetensors models/vit_known/model.safetensors <<'EOF' >"$tmp/cmp" 2>&1 || { why="$(tail -n 1 "$tmp/cmp")"; return 1; }
import os, sys
import numpy as np
sys.path.insert(0, os.path.dirname(sys.argv[1]))
import hub_models as hm
o, _ = hm.read_st(sys.argv[2])
cls = o["cls"][1].astype(np.float64)
t, meta = hm.read_st(sys.argv[3])
w = np.zeros((5, cls.shape[0]))
w[3] = 3 * cls / (cls @ cls)
t["classifier.weight"] = ("F32", w.astype(np.float32))
t["classifier.bias"] = ("F32", np.zeros(5, np.float32))
hm.write_st(sys.argv[3], [(k, a, dt) for k, (dt, a) in t.items()], meta)
EOF
    run_exe embed clip.mp4 --model models/vit_known --fps 1 --quiet -o lk.safetensors
    want_rc 0 || return 1
    "$PY" - lk.safetensors <<'EOF' >"$tmp/cmp" 2>&1 || { why="$(tail -n 1 "$tmp/cmp")"; return 1; }
import json, struct, sys
import numpy as np
raw = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
h = json.loads(raw[8:8 + n])
e = h["logits"]
a, b = e["data_offsets"]
z = np.frombuffer(raw[8 + n + a:8 + n + b], "<f4")
if e["dtype"] != "F32" or not np.allclose(z, [0, 0, 0, 3, 0], atol=1e-5):
    sys.exit(f"logits {e['dtype']} {z}, want (0, 0, 0, 3, 0)")
EOF
    # softmax: e^3 / (e^3 + 4) = 0.83393, then the lowest of the tied ids
    labels_want lk.safetensors 0 2 recording &&
        want_known '["0:00:00.000", "0:00:05.000", [["LABEL_3", 0.83393], ["LABEL_0", 0.04152]]]' &&
        labels_table lk.safetensors --top 2
}
t_labels_sigmoid() {
    # sigmoid(3) = 0.95257, sigmoid(0) = 0.5
    labels_want lk.safetensors 1 3 recording &&
        want_known '["0:00:00.000", "0:00:05.000", [["LABEL_3", 0.95257], ["LABEL_0", 0.5], ["LABEL_1", 0.5]]]' &&
        labels_table lk.safetensors --top 3 --multi-label
}
t_labels_json() {
    run_exe labels lk.safetensors --json --top 5
    want_rc 0 || return 1
    "$PY" - "$tmp/out" <<'EOF' >"$tmp/cmp" 2>&1 || { why="$(tail -n 1 "$tmp/cmp")"; return 1; }
import json, math, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
if len(rows) != 1:
    sys.exit(f"{len(rows)} JSON lines, want 1")
r = rows[0]
ids = [x["id"] for x in r["labels"]]
p = [x["p"] for x in r["labels"]]
e3 = math.exp(3)
want_p = [e3 / (e3 + 4)] + [1 / (e3 + 4)] * 4
if (r["level"], r["index"], r["start"], r["end"], r["multi_label"]) != ("recording", 0, 0.0, 5.0, False):
    sys.exit(f"row {r}")
if ids != [3, 0, 1, 2, 4] or [x["label"] for x in r["labels"]] != [f"LABEL_{i}" for i in ids]:
    sys.exit(f"ids {ids}")
if max(abs(a - b) for a, b in zip(p, want_p)) > 1e-6:
    sys.exit(f"p {p}, want {want_p}")
EOF
}
# The file's own multi_label (AST: problem_type multi_label_classification) picks
# sigmoid; --softmax overrides it.
t_labels_ast() {
    run_exe embed a10.wav --model models/ast --quiet -o lab_ast.safetensors
    want_rc 0 || return 1
    meta lab_ast.safetensors multi_label true || { why="multi_label metadata"; return 1; }
    labels_want lab_ast.safetensors 1 4 recording && labels_table lab_ast.safetensors --top 4 || return 1
    labels_want lab_ast.safetensors 0 7 recording && labels_table lab_ast.safetensors --top 7 --softmax
}
# Logits are scores: F32 and unnormalised under --dtype f16 --normalize, the
# same bytes as the f32 run (one computation).
t_logits_not_converted() {
    run_exe embed clip.mp4 --model models/vit_known --fps 1 --quiet --dtype f16 --normalize -o lk16.safetensors
    want_rc 0 || return 1
    "$PY" - lk.safetensors lk16.safetensors <<'EOF' >"$tmp/cmp" 2>&1 || { why="$(tail -n 1 "$tmp/cmp")"; return 1; }
import json, struct, sys
def get(path, name):
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    h = json.loads(raw[8:8 + n])
    a, b = h[name]["data_offsets"]
    return h[name]["dtype"], raw[8 + n + a:8 + n + b]
(d1, b1), (d2, b2) = get(sys.argv[1], "logits"), get(sys.argv[2], "logits")
if (d1, d2) != ("F32", "F32") or b1 != b2:
    sys.exit(f"logits {d1} vs {d2}, bytes equal {b1 == b2}")
if get(sys.argv[2], "global")[0] != "F16":
    sys.exit("global is not F16")
EOF
}
# Per block: an output with block_logits (G, C), block_start, block_end (written
# here as embed writes them), three blocks, a known winner in each.
t_labels_blocks() {
    "$PY" - "$PEER" blocks.safetensors <<'EOF' >"$tmp/cmp" 2>&1 || { why="$(tail -n 1 "$tmp/cmp")"; return 1; }
import json, os, sys
import numpy as np
sys.path.insert(0, os.path.dirname(sys.argv[1]))
import hub_models as hm
z = np.array([[4, 0, 1, 0], [0, 0, 0, 5], [0.5, 2, 0, 0]], np.float32)
hm.write_st(sys.argv[2], [
    ("block_start", np.array([0.0, 10.24, 3605.5]), "F64"),
    ("block_end", np.array([10.24, 20.48, 3615.74]), "F64"),
    ("segment_start", np.array([0.0]), "F64"), ("segment_end", np.array([3615.74]), "F64"),
    ("block_logits", z, "F32"), ("logits", z.mean(0), "F32")],
    {"format": "ringvit-embed", "labels": json.dumps(["chat", "Bär", "rain, heavy", "🎸"]),
     "multi_label": "false"})
EOF
    labels_want blocks.safetensors 0 2 block && labels_table blocks.safetensors --top 2 || return 1
    grep -q "^1:00:05.500 *1:00:15.740 *Bär 0.6" "$tmp/out" || { why="block 2's row: $(tail -n 1 "$tmp/out")"; return 1; }
    labels_want blocks.safetensors 1 4 block && labels_table blocks.safetensors --top 9 --multi-label || return 1
    labels_want blocks.safetensors 0 3 recording && labels_table blocks.safetensors --top 3 --level recording
}
t_labels_bad() {
    run_exe labels models/vit/model.safetensors
    want_rc 1 && want_err "models/vit/model.safetensors' is not a ringvit embed output" || return 1
    run_exe embed clip.mp4 --model models/vit --fps 1 --size 48 --quiet -o nohead.safetensors
    want_rc 0 || return 1
    run_exe labels nohead.safetensors
    want_rc 1 && want_err "nohead.safetensors' holds no logits" || return 1
    run_exe labels nohead.safetensors --level block
    want_rc 1 && want_err "nohead.safetensors" || return 1
    "$PY" - "$PEER" badlab.safetensors <<'EOF' || { why="writing badlab"; return 1; }
import json, os, sys
import numpy as np
sys.path.insert(0, os.path.dirname(sys.argv[1]))
import hub_models as hm
hm.write_st(sys.argv[2], [("segment_start", np.array([0.0]), "F64"),
                          ("segment_end", np.array([1.0]), "F64"),
                          ("logits", np.zeros(4, np.float32), "F32")],
            {"format": "ringvit-embed", "labels": json.dumps(["a", "b", "c"])})
EOF
    run_exe labels badlab.safetensors
    want_rc 1 && want_err "badlab.safetensors.*'logits'.*names 3 labels" || return 1
    run_exe labels lab_missing.safetensors
    want_rc 1 && want_err "lab_missing.safetensors"
}
t_labels_usage() {
    run_exe labels
    want_rc 2 && want_err "which file" || return 1
    run_exe labels lk.safetensors --top 0
    want_rc 2 && want_err "--top" || return 1
    run_exe labels lk.safetensors --level frames
    want_rc 2 && want_err "--level wants block or recording" || return 1
    run_exe labels lk.safetensors --multi-label --softmax
    want_rc 2 && want_err "exclude each other" || return 1
    run_exe labels --help
    want_rc 0 && grep -q "^More: docs/" "$tmp/out"
}
for t in known sigmoid json ast blocks bad usage; do
    check "labels-$t" "t_labels_$t"
done
check logits-not-converted t_logits_not_converted

compare_all

echo "$pass passed, $fail failed"
if [ "$fail" -ne 0 ]; then
    echo "FAILED:$failed"
    exit 1
fi
exit 0
