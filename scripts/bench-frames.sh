#!/bin/sh
# bench-frames.sh [RINGVIT] [MINUTES]: per-frame embedding throughput, the job of
# issue 34's benchmark: one CLIP-B/16 image embedding (block_projected) per frame
# at 1 fps over MINUTES (default 10) of generated 640x360 30 fps H.264 video, with
# `ringvit embed --attention frame` (random weights of the base size, from
# tests/peer/hub_models.py make-base), on every core. Reports frames per second
# end to end and for the encoder alone, and the encoder's FLOPs over the sgemm
# rate of the same run (`ringvit bench encoder`'s sgemm, same threads): the time
# no implementation on these GEMMs could beat. Prints a Markdown table; exits 1
# when a run fails.
RV=${1:-build/ringvit}
MIN=${2:-10}
if [ ! -x "$RV" ]; then
    echo "usage: scripts/bench-frames.sh [PATH/TO/ringvit] [MINUTES]" >&2
    exit 2
fi
RV=$(cd "$(dirname "$RV")" && pwd)/$(basename "$RV")
HERE=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT INT TERM
cd "$tmp" || exit 1

/usr/bin/python3 "$HERE/../tests/peer/hub_models.py" make-base models ||
    { echo "bench-frames: hub_models.py make-base failed" >&2; exit 1; }
ffmpeg -nostdin -v error -y -f lavfi -i testsrc2=size=640x360:rate=30 -t $((MIN * 60)) \
    -c:v libx264 -preset ultrafast -pix_fmt yuv420p video.mp4 ||
    { echo "bench-frames: ffmpeg could not generate the video" >&2; exit 1; }

"$RV" embed video.mp4 --model models/clip-vit-base-patch16 --attention frame --fps 1 \
    -o out.safetensors --json --quiet >embed.json 2>embed.err ||
    { echo "bench-frames: embed failed: $(head -c 400 embed.err)" >&2; exit 1; }
"$RV" bench encoder --model models/clip-vit-base-patch16 --seq 197 --repeat 3 --json \
    >gemm.json 2>gemm.err || { echo "bench-frames: bench encoder failed" >&2; exit 1; }

cpu=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')
isa=$(grep -m1 '^flags' /proc/cpuinfo | grep -o -w -E 'avx512f|avx2' | sort -u | tr '\n' ' ')
/usr/bin/python3 - "$cpu" "$isa" "$MIN" <<'PYEOF'
import json, struct, sys
cpu, isa, minutes = sys.argv[1], sys.argv[2].strip(), sys.argv[3]
e = json.load(open("embed.json"))
g = json.load(open("gemm.json"))
raw = open("out.safetensors", "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
head = json.loads(raw[8:8 + n])
frames = head["block_projected"]["shape"][0]
enc = e["stages_s"]["encode"]
flops = e["encode_gflops_per_s"] * 1e9 * enc
sgemm = g["sgemm_gflops"] * 1e9
floor = flops / sgemm
print(f"ringvit embed --attention frame --fps 1, CLIP-B/16 (random weights), {minutes} min of "
      f"640x360 30 fps H.264")
print(f"CPU: {cpu} ({isa}), {g['threads']} threads, GEMM {g['gemm']} (isa {g['gemm_isa']}), "
      f"cpu kernels {g['cpu_kernels']}")
print()
print("| frames | wall s | frames/s | encode s | encode frames/s | encoder GFLOP | "
      "sgemm GFLOP/s | floor s (FLOPs / sgemm) | encode / floor |")
print("|---|---|---|---|---|---|---|---|---|")
print(f"| {frames} | {e['seconds']:.1f} | {frames / e['seconds']:.2f} | {enc:.1f} | "
      f"{frames / enc:.2f} | {flops / 1e9:.0f} | {sgemm / 1e9:.1f} | {floor:.1f} | "
      f"{enc / floor:.2f} |")
PYEOF
