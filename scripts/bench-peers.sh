#!/bin/sh
# bench-peers.sh [--precision P] [RINGVIT] [SECONDS]: ringvit against the PyTorch
# pipeline a user would write (tests/peer/peer_pipeline.py: PyAV decode, PIL
# resize and crop, torch float32 reference architectures, batched), issue 39's
# side-by-side benchmark. The same SECONDS (default 60) of generated 640x360
# 30 fps H.264 with AAC audio through both, for three jobs with random weights of
# the base sizes (tests/peer/hub_models.py make-base):
#   CLIP-B/16 per frame at 1 fps     ringvit --attention frame --fps 1    block_projected
#   VideoMAE-B per 16-frame clip     ringvit --attention block=2 --fps 8  block_pooled
#   AST-B per 10.24 s window         ringvit --attention block=10.24      block_pooled
# Both sides on THREADS (default 2) compute threads. Wall time is each process
# from start to exit (model load, and torch's import, included on both sides).
# The peer runs on its best BLAS: a probe times a base-size linear layer through
# torch's F.linear (the BLAS it was built on: Debian's OpenBLAS) and through
# oneDNN (MkldnnLinear), with OPENBLAS_CORETYPE as the caller has it and unset,
# and the peer runs under the fastest of the four; ringvit runs in the caller's
# environment. Encoder rate: ringvit's encode GFLOP/s over the sgemm 2048^3 of
# `ringvit bench attention` on the same threads right after; the peer's model
# FLOPs over its model time, over torch's 2048^3 product on what its linear
# layers ran on, in the same process after the run. peer_pipeline.py check then
# compares ringvit's rows with the same float32 torch model fed ringvit's own
# decoded frames (relative tolerance 1e-3 in f32), so both sides computed the
# same embeddings. --precision P (or RINGVIT_PRECISION=P) passes
# `--precision P` to ringvit embed (the bf16 row; check tolerance 5e-2 then).
# Prints a Markdown table and an OK/FAILED footer; exits 1 when a side fails or
# the check does, 2 on bad usage.
PREC=${RINGVIT_PRECISION:-}
if [ "$1" = "--precision" ]; then
    PREC=$2
    shift 2
fi
RV=${1:-build/ringvit}
DUR=${2:-60}
THREADS=${THREADS:-2}
if [ ! -x "$RV" ] || ! [ "$DUR" -ge 11 ] 2>/dev/null || [ $# -gt 2 ]; then
    echo "usage: scripts/bench-peers.sh [--precision f32|bf16] [PATH/TO/ringvit] [SECONDS >= 11]" >&2
    exit 2
fi
RV=$(cd "$(dirname "$RV")" && pwd)/$(basename "$RV")
HERE=$(cd "$(dirname "$0")" && pwd)
PEER="$HERE/../tests/peer/peer_pipeline.py"
PY=/usr/bin/python3
TOL=1e-3
PREC_FLAG=
if [ -n "$PREC" ] && [ "$PREC" != f32 ]; then
    PREC_FLAG="--precision $PREC"
    TOL=5e-2
fi
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT INT TERM
cd "$tmp" || exit 1

now() { date +%s.%N; }
note() { echo "bench-peers: $*" >&2; }

$PY "$HERE/../tests/peer/hub_models.py" make-base models >/dev/null ||
    { note "hub_models.py make-base failed"; exit 1; }
ffmpeg -nostdin -v error -y -f lavfi -i testsrc2=size=640x360:rate=30 \
    -f lavfi -i sine=frequency=440:sample_rate=44100 -t "$DUR" \
    -c:v libx264 -preset ultrafast -pix_fmt yuv420p -c:a aac video.mp4 ||
    { note "ffmpeg could not generate the video"; exit 1; }

# The peer's best BLAS: F.linear (OpenBLAS) or oneDNN, core pinned or detected.
$PY "$PEER" blas --threads "$THREADS" >probe-env.json &&
    env -u OPENBLAS_CORETYPE $PY "$PEER" blas --threads "$THREADS" >probe-unset.json ||
    { note "peer_pipeline.py blas failed"; exit 1; }
choice=$($PY - <<'PYEOF'
import json
best = None
for env in ("env", "unset"):
    p = json.load(open(f"probe-{env}.json"))
    for lin, r in p["linear_gflops"].items():
        if best is None or r > best[0]:
            best = (r, env, lin)
print(best[1], best[2])
PYEOF
) || { note "no BLAS probe result"; exit 1; }
PEER_ENV=${choice% *}
PEER_LINEAR=${choice#* }
peer_env() {
    if [ "$PEER_ENV" = unset ]; then env -u OPENBLAS_CORETYPE "$@"; else "$@"; fi
}

fail=0
# job: name model-folder fps attention frames-fps
for job in "clip clip-vit-base-patch16 1 frame 1" "videomae videomae-base 8 block=2 8" \
           "ast ast-base 1 block=10.24 1"; do
    set -- $job
    name=$1 model=models/$2 fps=$3 span=$4 ffps=$5
    t0=$(now)
    # shellcheck disable=SC2086
    if "$RV" embed video.mp4 --model "$model" --attention "$span" --fps "$fps" \
        --threads "$THREADS" $PREC_FLAG -o "$name-rv.safetensors" --json --quiet \
        >"$name-rv.json" 2>"$name-rv.err"; then
        echo "$(now) $t0" | awk '{printf "%.3f\n", $1 - $2}' >"$name-rv.wall"
    else
        note "$name: ringvit embed failed: $(head -c 400 "$name-rv.err")"
        fail=1
        continue
    fi
    "$RV" bench attention --seq 256 --heads 1 --dim 64 --threads "$THREADS" --json \
        >"$name-sgemm.json" 2>/dev/null || { note "$name: ringvit bench failed"; fail=1; }
    t0=$(now)
    if peer_env $PY "$PEER" run "$model" video.mp4 "$name-peer.safetensors" --fps "$fps" \
        --threads "$THREADS" --linear "$PEER_LINEAR" --gemm >"$name-peer.json" \
        2>"$name-peer.err"; then
        echo "$(now) $t0" | awk '{printf "%.3f\n", $1 - $2}' >"$name-peer.wall"
    else
        note "$name: peer run failed: $(tail -c 400 "$name-peer.json" "$name-peer.err")"
        fail=1
        continue
    fi
    "$RV" frames video.mp4 -o "$name-frames.safetensors" --fps "$ffps" --size 224 \
        >/dev/null 2>"$name-frames.err" ||
        { note "$name: ringvit frames failed: $(head -c 400 "$name-frames.err")"; fail=1; continue; }
    $PY "$PEER" check "$model" "$name-rv.safetensors" "$name-frames.safetensors" \
        "$name-peer.safetensors" --tol "$TOL" --threads "$THREADS" >"$name-check.json" ||
        { note "$name: check FAILED: $(cat "$name-check.json")"; fail=1; }
done

cpu=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')
isa=$(grep -m1 '^flags' /proc/cpuinfo | grep -o -w -E 'avx512f|avx512_bf16|amx_bf16|avx2' |
      sort -u | tr '\n' ' ')
$PY - "$cpu" "$isa" "$DUR" "$THREADS" "${PREC:-f32}" "$PEER_ENV" "$PEER_LINEAR" \
    "${OPENBLAS_CORETYPE:-}" "$fail" <<'PYEOF' || fail=1
import json, os, sys
cpu, isa, dur, threads, prec, penv, plin, coretype, fail = sys.argv[1:]
def load(p):
    return json.load(open(p)) if os.path.exists(p) and os.path.getsize(p) else None
def txt(p):
    return float(open(p).read()) if os.path.exists(p) else None
print(f"ringvit against the PyTorch pipeline (tests/peer/peer_pipeline.py), {dur} s of "
      f"640x360 30 fps H.264 + AAC, random weights of the base sizes, {threads} threads "
      f"each side, ringvit precision {prec}")
print(f"CPU: {cpu} ({isa.strip()}); OPENBLAS_CORETYPE in the environment: "
      f"{coretype or '(unset)'}")
for env in ("env", "unset"):
    p = load(f"probe-{env}.json")
    r = p["linear_gflops"]
    print(f"peer BLAS probe, OPENBLAS_CORETYPE {p['openblas_coretype'] or 'unset'} "
          f"(OpenBLAS core {p['blas_core'] or '-'}): F.linear {r['blas']} GFLOP/s, "
          f"oneDNN {r['mkldnn']} GFLOP/s")
print(f"peer runs on: {'oneDNN (MkldnnLinear)' if plin == 'mkldnn' else 'F.linear (OpenBLAS)'}, "
      f"OPENBLAS_CORETYPE {'unset' if penv == 'unset' else (coretype or 'unset')}")
print()
print("| model | unit | units | ringvit wall s | peer wall s | peer / ringvit | "
      "ringvit encode GFLOP/s / sgemm | peer model GFLOP/s / GEMM | check err (tol) | "
      "end-to-end diff |")
print("|---|---|---|---|---|---|---|---|---|---|")
ok = fail == "0"
names = {"clip": "CLIP-B/16 per frame, 1 fps", "videomae": "VideoMAE-B per 16-frame clip, 8 fps",
         "ast": "AST-B per 10.24 s window"}
for n in ("clip", "videomae", "ast"):
    rv, pe, ck = load(f"{n}-rv.json"), load(f"{n}-peer.json"), load(f"{n}-check.json")
    sg = load(f"{n}-sgemm.json")
    rw, pw = txt(f"{n}-rv.wall"), txt(f"{n}-peer.wall")
    if not (rv and pe and ck and sg and rw and pw):
        print(f"| {names[n]} | failed | | | | | | | | |")
        ok = False
        continue
    sgemm = sg["sgemm_gflops"]
    enc = rv["encode_gflops_per_s"]
    prate = pe["model_gflop"] / pe["seconds"]["model"]
    gemm = pe["gemm_gflops"]
    ok &= bool(ck["ok"])
    print(f"| {names[n]} | {pe['unit']} | {ck['units']} | {rw:.1f} (encode "
          f"{rv['stages_s']['encode']:.1f}) | {pw:.1f} (model {pe['seconds']['model']:.1f}) | "
          f"{pw / rw:.2f} | {enc:.0f} / {sgemm:.0f} = {enc / sgemm:.2f} | "
          f"{prate:.0f} / {gemm:.0f} = {prate / gemm:.2f} | {ck['err']:.2g} ({ck['tol']:g}) "
          f"{'ok' if ck['ok'] else 'FAILED'} | {ck['e2e_err']:.2g} |")
print()
print("OK" if ok else "FAILED")
sys.exit(0 if ok else 1)
PYEOF
exit $fail
