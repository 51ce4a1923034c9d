#!/usr/bin/env bash
# device-check.sh: the one script run on the GPU machine (an H200, 16 cores), in
# one call of at most ~8 minutes. It
#   1. prints the device (nvidia-smi -L) and the CUDA compiler version,
#   2. configures and builds the CUDA build (build-device: ringvit_cli and the
#      tests labelled gpu, nothing else); where that cannot configure (the device
#      image lacks OpenBLAS, jansson, Criterion and FFmpeg) it unpacks the carried
#      .devbundle/bundle.tar.xz instead: the same binaries built with CUDA on the
#      development machine by scripts/device-bundle.sh, run on the device's own
#      CUDA libraries (call the device with carry [".devbundle"]),
#   3. runs the gpu tests (ctest -L gpu, or the bundle's test executables; the
#      log with every measured error goes to $OUT or build-device/),
#   4. runs the attention and ring benchmarks with --json, gathers them into
#      device-check.json and prints one row per run against its target:
#      attention fwd >= 0.45 and bwd >= 0.30 of cuBLAS bf16 GEMM TFLOP/s measured
#      in the same run, ring (cp 4 as streams on one GPU) <= 1.10 x one rank.
# Every step runs under `timeout` and inside one overall deadline; a failing step
# prints FAILED with its exit code and the script goes on. The exit status is 1
# when any step failed (a benchmark that ran but missed its target is reported as
# MISS and does not change it), else 0.
#
# Environment: OUT (output folder; default the build folder), DEVICE_BUILD_DIR
# (default build-device), DEVICE_CHECK_BUDGET (seconds for everything, default
# 470), DEVICE_CHECK_JOBS (build jobs, default 16), DEVICE_CHECK_BUILD_TIMEOUT
# (default 180), DEVICE_CHECK_MODE=bundle (skip the native build, run the bundle).
set -euo pipefail

cd "$(dirname "$0")/.."
BUILD=${DEVICE_BUILD_DIR:-build-device}
OUTDIR=${OUT:-$BUILD}
JOBS=${DEVICE_CHECK_JOBS:-16}
BUDGET=${DEVICE_CHECK_BUDGET:-470}
BUILD_TIMEOUT=${DEVICE_CHECK_BUILD_TIMEOUT:-180}
mkdir -p "$OUTDIR"
OUTDIR=$(cd "$OUTDIR" && pwd)
T0=$(date +%s)
DEADLINE=$((T0 + BUDGET))
FAILED_STEPS=()
MANIFEST="$OUTDIR/bench-manifest.tsv"
: >"$MANIFEST"
exec 3>&1 # the terminal: step messages stay visible when a step's output is redirected

elapsed() { echo $(($(date +%s) - T0)); }

# step NAME TIMEOUT CMD...: runs CMD under timeout, capped by the overall deadline.
# Returns CMD's exit status (124 on timeout); prints FAILED and records the step
# when it is not 0.
step() {
    local name=$1 limit=$2 left rc=0
    shift 2
    left=$((DEADLINE - $(date +%s)))
    if ((left < limit)); then
        limit=$left
    fi
    if ((limit < 5)); then
        echo "FAILED: $name: not started, the ${BUDGET} s budget is spent" >&3
        FAILED_STEPS+=("$name (no time)")
        return 124
    fi
    echo "== $name (limit ${limit} s, at $(elapsed) s)" >&3
    timeout --kill-after=10 "$limit" "$@" || rc=$?
    if ((rc != 0)); then
        if ((rc == 124 || rc == 137)); then
            echo "FAILED: $name: timed out after ${limit} s (exit $rc)" >&3
        else
            echo "FAILED: $name: exit $rc" >&3
        fi
        FAILED_STEPS+=("$name (exit $rc)")
    fi
    return "$rc"
}

# ---- 1. device and compiler ---------------------------------------------------------
echo "== device"
if command -v nvidia-smi >/dev/null 2>&1; then
    nvidia-smi -L || echo "(nvidia-smi -L failed)"
else
    echo "(no nvidia-smi)"
fi
NVCC=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
if [ -x "$NVCC" ]; then
    "$NVCC" --version | tail -n 2
else
    echo "(no nvcc)"
fi

# ---- 2. build: here with CUDA, or the prebuilt bundle -----------------------------
# The device image has CUDA and CMake but none of FFmpeg, OpenBLAS, jansson or
# Criterion. A native build is tried first (it works on a machine with the
# dependencies); when it cannot configure and .devbundle/bundle.tar.xz was carried
# (scripts/device-bundle.sh, built with CUDA for sm_90 on the development machine),
# the bundle's binaries run instead, on the device's own CUDA libraries.
BUILD_OK=0
MODE=native
RUN_ENV=()
TEST_BINS=()
RINGVIT=""
if [ "${DEVICE_CHECK_MODE:-}" != bundle ] && step configure 90 cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DRINGVIT_CUDA=ON \
    -DRINGVIT_MEDIA=AUTO >"$OUTDIR/configure.log" 2>&1; then
    # The gpu tests' executables are test_<name> (tests/CMakeLists.txt, rv_add_test);
    # only those that are build targets are asked for.
    TARGETS=(ringvit_cli)
    ALL_TARGETS=$(cmake --build "$BUILD" --target help 2>/dev/null || true)
    for t in $(ctest --test-dir "$BUILD" -L gpu -N 2>/dev/null |
        sed -n 's/^ *Test *#[0-9]*: *\([A-Za-z0-9_]*\).*/\1/p'); do
        if grep -qw "test_$t" <<<"$ALL_TARGETS"; then
            TARGETS+=("test_$t")
        fi
    done
    echo "targets: ${TARGETS[*]}"
    if step build "$BUILD_TIMEOUT" cmake --build "$BUILD" -j"$JOBS" --target "${TARGETS[@]}" \
        >"$OUTDIR/build.log" 2>&1; then
        BUILD_OK=1
    else
        grep -E "error|Error" "$OUTDIR/build.log" | head -n 30 || true
        tail -n 20 "$OUTDIR/build.log"
    fi
    grep -E "warning" "$OUTDIR/build.log" | head -n 20 || true
    RINGVIT="$BUILD/ringvit"
else
    grep -E "Could NOT|not found|No package|Error" "$OUTDIR/configure.log" 2>/dev/null | head -n 10 || true
    if [ -f .devbundle/bundle.tar.xz ]; then
        MODE=bundle
        BUNDLE=/tmp/ringvit-bundle
        rm -rf "$BUNDLE" && mkdir -p "$BUNDLE"
        xz -dc .devbundle/bundle.tar.xz | tar -C "$BUNDLE" -xf -
        sed -n '1,5p' "$BUNDLE/manifest.txt"
        # The device's CUDA libraries: the toolkit's, else the Python wheels'.
        libdirs=("$BUNDLE/lib")
        for lib in libcudart.so.13 libcublas.so.13 libcublasLt.so.13 libnccl.so.2; do
            found=$( (ldconfig -p 2>/dev/null | awk -v l="$lib" '$1 == l {print $NF}'
                find /usr/local/cuda*/lib64 /usr/local/cuda*/targets/*/lib /usr/lib/x86_64-linux-gnu \
                    /usr/local/lib/python3*/dist-packages/nvidia /usr/local/lib/python3*/site-packages/nvidia \
                    /usr/lib/python3*/dist-packages/nvidia -name "$lib" 2>/dev/null || true) |
                awk 'NR == 1' || true)
            if [ -n "$found" ]; then
                libdirs+=("$(dirname "$found")")
                echo "cuda library $lib: $found"
            else
                echo "cuda library $lib: NOT FOUND"
            fi
        done
        # Compiler runtimes: the machine's, ours only where it has none.
        for f in "$BUNDLE"/lib/fallback/*; do
            have=$(ldconfig -p 2>/dev/null | grep -c "$(basename "$f")" || true)
            if [ "${have:-0}" -eq 0 ]; then
                cp "$f" "$BUNDLE/lib/" && echo "using the bundle's $(basename "$f")"
            fi
        done
        LDPATH=$(printf '%s:' "${libdirs[@]}" | awk '!seen[$0]++' RS=: ORS=: | sed 's/:$//')
        RUN_ENV=(env "LD_LIBRARY_PATH=$LDPATH${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}")
        RINGVIT="$BUNDLE/bin/ringvit"
        missing=$("${RUN_ENV[@]}" ldd "$RINGVIT" "$BUNDLE"/tests/* 2>&1 | grep "not found" | sort -u || true)
        if [ -n "$missing" ]; then
            echo "FAILED: the bundle's binaries miss libraries:"
            echo "$missing"
            FAILED_STEPS+=("bundle libraries")
        else
            BUILD_OK=1
            TEST_BINS=("$BUNDLE"/tests/test_*)
        fi
        "${RUN_ENV[@]}" "$RINGVIT" --version || true
    else
        echo "FAILED: cannot configure here and no .devbundle/bundle.tar.xz was carried"
        echo "        (run scripts/device-bundle.sh first, then carry .devbundle)"
        tail -n 30 "$OUTDIR/configure.log"
    fi
fi
if ((BUILD_OK)); then
    echo "build ($MODE): ok at $(elapsed) s"
else
    echo "build ($MODE): FAILED at $(elapsed) s"
    FAILED_STEPS+=("build")
fi

# ---- 3. gpu tests ------------------------------------------------------------------------
if ((BUILD_OK)) && [ "$MODE" = native ]; then
    rm -f "$BUILD/Testing/Temporary/LastTest.log"
    # All of ctest's output goes to ctest-gpu.log; the terminal gets it without the
    # per-check "cuda_ops:" lines and at most 150 lines (awk reads to the end, so
    # tee never sees a closed pipe). The step's status is ctest's.
    # shellcheck disable=SC2016 # $1, $2 are the inner shell's arguments
    step "ctest -L gpu" 240 bash -c 'ctest --test-dir "$1" -L gpu --output-on-failure 2>&1 |
        tee "$2/ctest-gpu.log" | grep -av "^cuda_ops: " | awk "NR <= 150"
        exit "${PIPESTATUS[0]}"' _ "$BUILD" "$OUTDIR" || true
    if [ -f "$BUILD/Testing/Temporary/LastTest.log" ]; then
        cp "$BUILD/Testing/Temporary/LastTest.log" "$OUTDIR/ctest-gpu-full.log"
    fi
elif ((BUILD_OK)); then
    # The bundle's test executables, one by one (exit 77: skipped).
    : >"$OUTDIR/ctest-gpu-full.log"
    for t in "${TEST_BINS[@]}"; do
        name=$(basename "$t")
        rc=0
        step "$name" 120 "${RUN_ENV[@]}" "$t" --jobs 4 >"$OUTDIR/$name.log" 2>&1 || rc=$?
        cat "$OUTDIR/$name.log" >>"$OUTDIR/ctest-gpu-full.log"
        grep -av "^cuda_ops: " "$OUTDIR/$name.log" | grep -a -E "SKIPPED|FAIL|Synthesis|WORST|cp_attention_gpu" | head -n 40
        echo "$name: exit $rc"
    done
else
    echo "FAILED: gpu tests: not run, there is nothing to run"
    FAILED_STEPS+=("gpu tests (no build)")
fi
if [ -s "$OUTDIR/ctest-gpu-full.log" ]; then
    echo "== measured errors (worst per test; every check is in ctest-gpu-full.log)"
    grep -a "cuda_ops: WORST" "$OUTDIR/ctest-gpu-full.log" || echo "(none printed)"
    nfail=$(grep -ac "  FAILED$" "$OUTDIR/ctest-gpu-full.log" || true)
    echo "checks above tolerance: ${nfail:-0}"
    grep -a "  FAILED$" "$OUTDIR/ctest-gpu-full.log" | head -n 20 || true
fi

# ---- 4. benchmarks -------------------------------------------------------------------------
# bench WHAT S CAUSAL LIMIT ARGS...: one benchmark run, its --json output kept.
bench() {
    local what=$1 seq=$2 causal=$3 limit=$4 rc=0 tag
    shift 4
    tag="$what-$seq-full"
    if ((causal)); then
        tag="$what-$seq-causal"
    fi
    local out="$OUTDIR/bench-$tag.json"
    if ((BUILD_OK)) && [ -x "$RINGVIT" ]; then
        step "bench $tag" "$limit" ${RUN_ENV[@]+"${RUN_ENV[@]}"} "$RINGVIT" "$@" >"$out" 2>"$OUTDIR/bench-$tag.err" || rc=$?
        tail -n 3 "$OUTDIR/bench-$tag.err" | sed 's/^/    /'
    else
        echo "FAILED: bench $tag: no ringvit binary"
        FAILED_STEPS+=("bench $tag (no binary)")
        rc=127
    fi
    printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$what" "$seq" "$causal" "$rc" "$out" "$*" >>"$MANIFEST"
}

for S in 16384 65536; do
    for causal in 0 1; do
        c=()
        if ((causal)); then c=(--causal); fi
        bench fwd "$S" "$causal" 60 bench attention --device cuda --seq "$S" --heads 16 --dim 128 \
            ${c[@]+"${c[@]}"} --json
        bench bwd "$S" "$causal" 75 bench attention --device cuda --seq "$S" --heads 16 --dim 128 \
            ${c[@]+"${c[@]}"} --backward --json
    done
done
for causal in 0 1; do
    c=()
    if ((causal)); then c=(--causal); fi
    bench ring 65536 "$causal" 90 bench ring --device cuda --strategy ring --cp 4 --seq 65536 \
        --heads 16 --dim 128 ${c[@]+"${c[@]}"} --json
done
# Attention spans (a 16 s sliding window over 150 tokens/s): the span kernels'
# rate over the visible pairs, and the span ring (K/V exchanged with the ranks in
# reach only) against single-rank span attention.
bench wfwd 131072 0 60 bench attention --device cuda --seq 131072 --heads 16 --dim 128 \
    --window 16 --json
bench wring 131072 0 90 bench ring --device cuda --strategy ring --cp 4 --seq 131072 \
    --heads 16 --dim 128 --window 16 --json

# ---- 5. table and device-check.json ------------------------------------------------------------
PY=/usr/bin/python3
if [ ! -x "$PY" ]; then
    PY=$(command -v python3 || true)
fi
if [ -n "$PY" ]; then
    "$PY" - "$MANIFEST" "$OUTDIR/device-check.json" <<'EOF' || FAILED_STEPS+=("benchmarks (runs FAILED in the table)")
import json, math, sys

manifest, out_path = sys.argv[1], sys.argv[2]
TARGET = {"fwd": (">=", 0.45), "bwd": (">=", 0.30), "ring": ("<=", 1.10),
          "wfwd": (">=", 0.25), "wring": ("<=", 1.50)}


def walk(x):
    if isinstance(x, dict):
        yield x
        for v in x.values():
            yield from walk(v)
    elif isinstance(x, list):
        for v in x:
            yield from walk(v)


def pick_row(root, what):
    """The object holding the run's numbers: a row with "pass" equal to fwd/bwd
    when rows carry one, else the first object with tflops or ratio, else root."""
    cands = [d for d in walk(root) if "tflops" in d or "gflops" in d or "ratio" in d]
    what = {"wfwd": "fwd"}.get(what, what)
    if what in ("fwd", "bwd"):
        same = [d for d in cands if d.get("pass") == what]
        if same:
            return same[0]
    return cands[0] if cands else root


def field(row, root, *names):
    """The first number found under names, in the row, then at the top level; a
    name may carry a factor (name, 1e-3) for older unit spellings (GFLOP/s)."""
    for src in (row, root):
        for n in names:
            n, scale = n if isinstance(n, tuple) else (n, 1.0)
            v = src.get(n) if isinstance(src, dict) else None
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                return float(v) * scale
    return None


def fmt(v, spec):
    return format(v, spec) if v is not None and math.isfinite(v) else "-"


runs, failed, missed = [], 0, 0
with open(manifest) as f:
    for line in f:
        what, seq, causal, rc, path, cmd = line.rstrip("\n").split("\t")
        run = {"what": what, "seq": int(seq), "causal": causal == "1", "rc": int(rc),
               "command": "ringvit " + cmd, "json": None}
        try:
            with open(path) as jf:
                run["json"] = json.load(jf)
        except (OSError, ValueError) as e:
            run["parse_error"] = str(e)
        root = run["json"] if isinstance(run["json"], dict) else {}
        row = pick_row(root, what) if root else {}
        run["tflops"] = field(row, root, "tflops", ("gflops", 1e-3))
        run["gemm_tflops"] = field(row, root, "gemm_tflops", ("gemm_gflops", 1e-3))
        run["ratio"] = field(row, root, "ratio", "fwd_ratio")
        run["max_err"] = field(row, root, "max_err", "max_abs_err_o")
        op, goal = TARGET[what]
        run["target"] = f"{op} {goal}"
        r = run["ratio"]
        if run["rc"] != 0 or run["json"] is None or r is None:
            run["status"] = "FAILED"
            failed += 1
        elif (r >= goal) if op == ">=" else (r <= goal):
            run["status"] = "OK"
        else:
            run["status"] = "MISS"
            missed += 1
        runs.append(run)

with open(out_path, "w") as f:
    json.dump({"runs": runs, "failed": failed, "missed": missed}, f, indent=2)

print(f"{'what':<5} {'S':>6} {'causal':>6} {'TFLOP/s':>8} {'GEMM TFLOP/s':>12} "
      f"{'ratio':>6} {'max err':>8} {'target':>7} status")
for r in runs:
    status = r["status"] + ("" if r["rc"] == 0 else f" (exit {r['rc']})")
    print(f"{r['what']:<5} {r['seq']:>6} {('yes' if r['causal'] else 'no'):>6} "
          f"{fmt(r['tflops'], '8.1f'):>8} {fmt(r['gemm_tflops'], '12.1f'):>12} "
          f"{fmt(r['ratio'], '6.3f'):>6} {fmt(r['max_err'], '8.2g'):>8} {r['target']:>7} {status}")
print(f"benchmarks: {len(runs)} runs, {failed} failed, {missed} missed their target; "
      f"details in {out_path}")
sys.exit(1 if failed else 0)
EOF
else
    echo "FAILED: no python3 to read the benchmark JSON; the raw files are in $OUTDIR:"
    FAILED_STEPS+=("table (no python3)")
    cat "$MANIFEST"
fi

# ---- summary ------------------------------------------------------------------------------------
echo "== device-check done in $(elapsed) s; outputs in $OUTDIR"
if ((${#FAILED_STEPS[@]})); then
    echo "FAILED steps (${#FAILED_STEPS[@]}):"
    printf '  %s\n' "${FAILED_STEPS[@]}"
    exit 1
fi
echo "all steps passed"
