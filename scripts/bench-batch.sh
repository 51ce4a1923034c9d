#!/bin/sh
# bench-batch.sh [RINGVIT] [CLIPS] [SECONDS]: batch throughput of `ringvit embed`
# on one machine: CLIPS (default 16) generated recordings of SECONDS (default
# 30) each (640x360 H.264 at 30 fps with AAC stereo, as a phone records),
# embedded at --fps 1 with the tiny preset, in recordings per hour for:
#   sequential   --ranks 1 --prefetch 0 (one input after another, decode then encode)
#   prefetch     --ranks 1 --prefetch 1 (the next input decoded while one encodes)
#   dp 2 x cp 1  --ranks 2 --cp 1 (two groups, each with prefetch 1)
#   dp 1 x cp 2  --ranks 2 --cp 2 (one group of two ranks, prefetch 1)
# Every row embeds the same clips; the ratio is against the sequential row of
# the same run; "cores busy" is the run's CPU time over wall time x cores (what
# overlap can gain is bounded by the idle rest). Prints a Markdown table; exits
# 1 when a run fails.
RV=${1:-build/ringvit}
N=${2:-16}
SECS=${3:-30}
if [ ! -x "$RV" ]; then
    echo "usage: scripts/bench-batch.sh [PATH/TO/ringvit] [CLIPS] [SECONDS]" >&2
    exit 2
fi
RV=$(cd "$(dirname "$RV")" && pwd)/$(basename "$RV")
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT INT TERM
cd "$tmp" || exit 1

i=1
while [ "$i" -le "$N" ]; do
    # Each clip its own pattern and tone, so no decoder cache helps the next.
    ffmpeg -nostdin -v error -y -f lavfi -i "testsrc2=size=640x360:rate=30,hue=h=$((i * 20))" \
        -f lavfi -i "sine=frequency=$((200 + i * 30)):sample_rate=48000" -ac 2 -t "$SECS" \
        -c:v libx264 -preset veryfast -pix_fmt yuv420p -c:a aac -b:a 128k "clip$i.mp4" \
        >/dev/null 2>&1 || { echo "bench-batch: ffmpeg could not generate clip$i.mp4" >&2; exit 1; }
    echo "clip$i.mp4" >>list.txt
    i=$((i + 1))
done

cpu=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')
isa=$(grep -m1 '^flags' /proc/cpuinfo | grep -o -w -E 'avx512f|avx2' | sort -u | tr '\n' ' ')
echo "ringvit embed, $N clips of $SECS s (640x360 30 fps H.264 + AAC), --fps 1, tiny"
echo "CPU: $cpu ($isa), $(nproc) cores"
echo
echo "| run | flags | wall s | recordings / hour | vs sequential | encoder wait s (sum) | CPU s | cores busy |"
echo "|---|---|---|---|---|---|---|---|"
base=""
row() { # NAME FLAGS...
    name=$1
    shift
    rm -rf out
    t0=$(date +%s.%N)
    /usr/bin/python3 -c '
import resource, subprocess, sys
r = subprocess.run(sys.argv[1:], stdout=open("run.json", "wb"), stderr=open("run.err", "wb"))
u = resource.getrusage(resource.RUSAGE_CHILDREN)
open("cpu", "w").write("%f" % (u.ru_utime + u.ru_stime))
sys.exit(r.returncode)
' "$RV" embed --manifest list.txt --out-dir out --fps 1 --quiet --json "$@" ||
        { echo "bench-batch: $name failed:" >&2; cat run.err >&2; exit 1; }
    t1=$(date +%s.%N)
    /usr/bin/python3 - "$name" "$*" "$t0" "$t1" "$N" "${base:-0}" "$(cat cpu)" "$(nproc)" <<'EOF' || exit 1
import json, sys
name, flags, t0, t1, n, base, cpu, cores = sys.argv[1:9]
wall = float(t1) - float(t0)
lines = [json.loads(l) for l in open("run.json")]
assert len(lines) == int(n) and all(l["status"] == "ok" for l in lines), "not every clip embedded"
wait = sum(l["encoder_wait_s"] for l in lines)
rate = int(n) * 3600 / wall
ratio = "1.00" if float(base) == 0 else "%.2f" % (rate / float(base))
print("| %s | `%s` | %.1f | %.0f | %s | %.1f | %.1f | %.0f%% |" % (name, flags, wall, rate, ratio, wait,
      float(cpu), 100 * float(cpu) / (wall * int(cores))))
open("rate", "w").write("%f" % rate)
EOF
    [ -n "$base" ] || base=$(cat rate)
}
row sequential --ranks 1 --prefetch 0
row prefetch --ranks 1 --prefetch 1
row "dp 2 x cp 1" --ranks 2 --cp 1
row "dp 1 x cp 2" --ranks 2 --cp 2
