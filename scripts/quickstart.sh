#!/usr/bin/env bash
# quickstart.sh: from a fresh checkout to a first embedding. Installs what
# building and running need (scripts/install-deps.sh run: no test packages),
# builds build/ in Release without the tests, generates a 2-minute sample recording
# with the ffmpeg command (a moving test pattern with a 440 Hz tone, H.264/AAC)
# unless sample.mp4 exists, embeds it on 2 ranks with
#   build/ringvit embed sample.mp4 --cp 2 -o sample.safetensors
# and shows how to read the result in Python.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
# Debian's python3 (with python3-numpy from install-deps.sh), not a pyenv shim.
py=/usr/bin/python3
[ -x "$py" ] || py=python3

echo "== installing what building and running need"
scripts/install-deps.sh run

echo "== building build/ (Release, without the tests: scripts/test.sh builds them)"
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DRINGVIT_TESTS=OFF
cmake --build build -j"$(nproc)"

echo "== build/ringvit --version"
build/ringvit --version

if [ ! -s sample.mp4 ]; then
    echo "== generating sample.mp4 (2 minutes, 640x360 30 fps test pattern, 440 Hz tone)"
    ffmpeg -nostdin -v error -y \
        -f lavfi -i testsrc2=size=640x360:rate=30 \
        -f lavfi -i sine=frequency=440:sample_rate=48000 \
        -t 120 -c:v libx264 -preset veryfast -pix_fmt yuv420p -c:a aac -b:a 96k \
        -movflags +faststart sample.mp4
else
    echo "== sample.mp4 exists; using it"
fi

echo "== build/ringvit embed sample.mp4 --cp 2 -o sample.safetensors"
echo "   (the tiny preset with random weights: it shows the pipeline, the numbers"
echo "    mean nothing; pass --model with a Hugging Face folder such as"
echo "    videomae-base/ or ast-finetuned-audioset-10-10-0.4593/ for real embeddings:"
echo "    see docs/models.md)"
summary=$(mktemp)
trap 'rm -f "$summary"' EXIT
build/ringvit embed sample.mp4 --cp 2 -o sample.safetensors --json >"$summary"
"$py" - "$summary" <<'EOF'
import json, sys
d = json.loads(open(sys.argv[1]).readline())
s = d["stages_s"]
print(f"embedded {d['path']}: {d['tokens']} tokens ({d['video_tokens']} video, "
      f"{d['audio_tokens']} audio) in {d['seconds']:.1f} s -> {d['output']}")
print(f"stages: decode {s['decode']:.1f} s, tokenize {s['tokenize']:.1f} s, "
      f"encode {s['encode']:.1f} s, write {s['write']:.2f} s; "
      f"peak memory {d['peak_rss_mb']:.0f} MB")
EOF

cat <<'EOF'

== reading sample.safetensors in Python (json + numpy; or safetensors.torch.load_file)

import json, struct, numpy as np
def load(path):
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    head = json.loads(raw[8:8 + n]); meta = head.pop("__metadata__", {})
    dt = {"F32": np.float32, "F64": np.float64, "I64": np.int64, "U8": np.uint8}
    return {k: np.frombuffer(raw[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]],
                             dt[v["dtype"]]).reshape(v["shape"]) for k, v in head.items()}, meta
t, meta = load("sample.safetensors")
print(t["global"].shape, t["segments"].shape, t["segment_start"][:3], meta["model"])
# torch: torch.from_numpy(t["segments"].copy())

EOF
"$py" - <<'EOF'
import json, struct, numpy as np
def load(path):
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    head = json.loads(raw[8:8 + n]); meta = head.pop("__metadata__", {})
    dt = {"F32": np.float32, "F64": np.float64, "I64": np.int64, "U8": np.uint8}
    return {k: np.frombuffer(raw[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]],
                             dt[v["dtype"]]).reshape(v["shape"]) for k, v in head.items()}, meta
t, meta = load("sample.safetensors")
print("global", t["global"].shape, "segments", t["segments"].shape,
      "segment_start", t["segment_start"][:3], "model", meta["model"], meta["model_hash"])
EOF

echo
echo "quickstart: built build/ringvit, made sample.mp4 and embedded it on 2 ranks into"
echo "sample.safetensors (global, segments of 10 s, per-modality means)."
echo "Next: build/ringvit embed --help; scripts/test.sh runs the test suite."
