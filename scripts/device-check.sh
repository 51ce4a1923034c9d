#!/usr/bin/env bash
# device-check.sh: the one script run on the GPU machine (an H200, 16 cores), in
# one call of at most ~8 minutes. It
#   1. prints the device (nvidia-smi -L) and the CUDA compiler version,
#   2. finds the CUDA libraries (runtime, cuBLAS, cuBLASLt, NCCL; see find_lib)
#      and exports LD_LIBRARY_PATH with their folders,
#   3. configures and builds the CUDA build (build-device: ringvit_cli and the
#      tests labelled gpu, nothing else); where that cannot configure (the device
#      image lacks oneDNN, jansson, Criterion and FFmpeg: expected there, not a
#      failure) it unpacks the carried .devbundle/bundle.tar.xz instead: the same
#      binaries built with CUDA on the development machine by
#      scripts/device-bundle.sh, run on the device's own CUDA libraries (call the
#      device with carry [".devbundle"]),
#   4. runs the gpu tests one by one (ctest -R, or the bundle's test executables),
#      each one check with its measured errors against the CPU backend,
#   5. runs the attention and ring benchmarks with --json and prints one row per
#      run against its target: attention fwd >= 0.45 and bwd >= 0.30 of cuBLAS
#      bf16 GEMM TFLOP/s measured in the same run, ring (cp 4 as streams on one
#      GPU) <= 1.10 x one rank; window fwd >= 0.25, window ring <= 1.50 x.
#
# Outputs: exactly two files in $OUT (the device tool brings back at most 8):
#   device-check.json  every check: name, kind, status (pass, fail or skip), the
#                      reason, its figures, its error against the CPU where it has
#                      one, and each benchmark's own --json object; the libraries
#                      found and where they came from; a summary.
#   device-check.log   everything, one section per step ("---- NAME" headers)
#                      holding that step's command, whole output and exit status.
# Everything else (the unpacked bundle, step outputs) lives in a scratch folder
# removed at exit. The terminal gets one line per check and the benchmark table.
#
# Every step runs under `timeout` and inside one overall deadline. The exit status
# is 1 when any check failed, else 0. Not failures: a skipped check (no GPU test
# to run, no NCCL for the NCCL checks, a dry run), the native configure failing
# where the bundle is there to run instead, and a benchmark that ran correctly but
# missed its speed target (MISS in the table, "target_met": false in the JSON).
#
# Options: --dry-run (or RINGVIT_DEVICE_CHECK_DRY=1): no native configure or
# build and no GPU program: finds the libraries, unpacks and inspects the bundle
# when there is one, records every GPU check as "skip: dry run" and writes the
# outputs; for a quick look at a machine and for tests/cli/test_device_check.sh.
#
# Environment: OUT (output folder; default the build folder), DEVICE_BUILD_DIR
# (default build-device), DEVICE_CHECK_BUDGET (seconds for everything, default
# 470), DEVICE_CHECK_JOBS (build jobs, default 16), DEVICE_CHECK_BUILD_TIMEOUT
# (default 180), DEVICE_CHECK_MODE=bundle (skip the native build, run the bundle),
# DEVICE_CHECK_BUNDLE (the bundle file, default .devbundle/bundle.tar.xz),
# DEVICE_CHECK_LIBS (the libraries to find, default "libcudart.so.13
# libcublas.so.13 libcublasLt.so.13 libnccl.so.2"; ringvit uses no cuDNN),
# DEVICE_CHECK_LIB_ROOT (a root prefix for the library search, for tests: the
# system folders and the Python folders are looked for under it, LD_LIBRARY_PATH
# is used as it is, and ldconfig, which describes this machine, is not asked).
set -euo pipefail

DRY=${RINGVIT_DEVICE_CHECK_DRY:-0}
for arg in "$@"; do
    case $arg in
    --dry-run) DRY=1 ;;
    -h | --help)
        sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'
        exit 0
        ;;
    *)
        echo "device-check.sh: unknown argument '$arg' (known: --dry-run, --help)" >&2
        exit 2
        ;;
    esac
done
[ "$DRY" = 1 ] || DRY=0
# Byte-wise patterns (json_str) and tool messages in plain ASCII.
LC_ALL=C

cd "$(dirname "$0")/.."
BUILD=${DEVICE_BUILD_DIR:-build-device}
OUTDIR=${OUT:-$BUILD}
JOBS=${DEVICE_CHECK_JOBS:-16}
BUDGET=${DEVICE_CHECK_BUDGET:-470}
BUILD_TIMEOUT=${DEVICE_CHECK_BUILD_TIMEOUT:-180}
BUNDLE_TAR=${DEVICE_CHECK_BUNDLE:-.devbundle/bundle.tar.xz}
read -ra WANT_LIBS <<<"${DEVICE_CHECK_LIBS:-libcudart.so.13 libcublas.so.13 libcublasLt.so.13 libnccl.so.2}"
mkdir -p "$OUTDIR"
OUTDIR=$(cd "$OUTDIR" && pwd)
LOG=$OUTDIR/device-check.log
JSON=$OUTDIR/device-check.json
: >"$LOG"
rm -f "$JSON"
SCRATCH=$(mktemp -d "${TMPDIR:-/tmp}/ringvit-device-check.XXXXXX")
T0=$(date +%s)
S0=$SECONDS
STARTED=$(date -u +%Y-%m-%dT%H:%M:%SZ)
DEADLINE=$((T0 + BUDGET))
MODE=native
DEVICE_TEXT=""
NVCC_TEXT=""
JSON_DONE=0

elapsed() { echo $((SECONDS - S0)); }

# say TEXT...: one line to the terminal and to the combined log.
say() {
    printf '%s\n' "$*"
    printf '%s\n' "$*" >>"$LOG"
}

# json_str TEXT: TEXT as a JSON string. Keeps printable ASCII, tab and newline
# only (a test's output may hold any byte; the document must stay valid UTF-8).
json_str() {
    local s=$1
    # shellcheck disable=SC2101 # one bracket: not [:graph:], space, tab or newline
    if [[ $s == *[^[:graph:]$' \t\n']* ]]; then
        s=$(printf '%s' "$s" | LC_ALL=C tr -cd '\11\12\40-\176')
    fi
    s=${s//\\/\\\\}
    s=${s//\"/\\\"}
    s=${s//$'\t'/\\t}
    s=${s//$'\n'/\\n}
    printf '"%s"' "$s"
}

# json_num TEXT: TEXT when it is a JSON number, else null.
json_num() {
    if [[ $1 =~ ^-?[0-9]+(\.[0-9]+)?([eE][-+]?[0-9]+)?$ ]]; then
        printf '%s' "$1"
    else
        printf 'null'
    fi
}

# ---- checks ------------------------------------------------------------------------------
# Every result is one check: add_check NAME KIND STATUS REASON [MEMBERS], where
# MEMBERS are further JSON members ("\"k\": v, ...") for its figures.
CHECKS=()
FAILS=()
NPASS=0
NFAIL=0
NSKIP=0
NMISS=0
add_check() {
    local name=$1 kind=$2 status=$3 reason=$4 extra=${5:-} obj
    obj="{\"name\": $(json_str "$name"), \"kind\": $(json_str "$kind"), \"status\": \"$status\""
    if [ -n "$reason" ]; then
        obj+=", \"reason\": $(json_str "$reason")"
    fi
    if [ -n "$extra" ]; then
        obj+=", $extra"
    fi
    CHECKS+=("$obj}")
    case $status in
    pass) NPASS=$((NPASS + 1)) ;;
    skip) NSKIP=$((NSKIP + 1)) ;;
    *)
        NFAIL=$((NFAIL + 1))
        FAILS+=("$name${reason:+: $reason}")
        ;;
    esac
    say "$(printf '%-4s  %s%s' "$status" "$name" "${reason:+  ($reason)}")"
}

# run_step NAME LIMIT CMD...: runs CMD under timeout, capped by the overall
# deadline, its stdout in $STEP_OUT and stderr in $STEP_ERR, both appended to the
# log under a "---- NAME" header. Sets STEP_RC (124: timed out or not started,
# the budget being spent) and STEP_WHY (empty, or why it did not succeed). It
# records nothing: the caller decides what the exit status means.
STEP_OUT=$SCRATCH/step.out
STEP_ERR=$SCRATCH/step.err
STEP_RC=0
STEP_WHY=""
STEP_SECS=0
run_step() {
    local name=$1 limit=$2 left t1
    shift 2
    left=$((DEADLINE - $(date +%s)))
    if ((left < limit)); then
        limit=$left
    fi
    : >"$STEP_OUT"
    : >"$STEP_ERR"
    STEP_RC=0
    STEP_WHY=""
    STEP_SECS=0
    {
        echo
        echo "---- $name (limit ${limit} s, at $(elapsed) s)"
        echo "\$ $*"
    } >>"$LOG"
    if ((limit < 5)); then
        STEP_RC=124
        STEP_WHY="not started: the ${BUDGET} s budget is spent"
        echo "---- $name: $STEP_WHY" >>"$LOG"
        return 0
    fi
    t1=$(date +%s)
    timeout --kill-after=10 "$limit" "$@" >"$STEP_OUT" 2>"$STEP_ERR" </dev/null || STEP_RC=$?
    STEP_SECS=$(($(date +%s) - t1))
    if ((STEP_RC == 124 || STEP_RC == 137)); then
        STEP_WHY="timed out after ${limit} s (exit $STEP_RC)"
    elif ((STEP_RC != 0)); then
        STEP_WHY="exit $STEP_RC"
    fi
    {
        cat "$STEP_OUT"
        if [ -s "$STEP_ERR" ]; then
            echo "-- stderr:"
            cat "$STEP_ERR"
        fi
        echo "---- $name: exit $STEP_RC after $STEP_SECS s"
    } >>"$LOG"
}

# show_tail N: the last N lines of the step's output, indented, on the terminal
# (the log has all of it).
show_tail() {
    cat "$STEP_OUT" "$STEP_ERR" | tail -n "$1" | sed 's/^/      | /'
}

# ---- outputs -------------------------------------------------------------------------------
LIB_JSON=()
write_json() {
    local sep="" c f
    {
        printf '{\n  "tool": "ringvit scripts/device-check.sh",\n'
        printf '  "started": "%s",\n  "seconds": %d,\n  "budget_s": %d,\n' "$STARTED" "$(elapsed)" "$BUDGET"
        printf '  "mode": "%s",\n  "dry_run": %s,\n' "$MODE" "$([ "$DRY" = 1 ] && echo true || echo false)"
        printf '  "device": %s,\n  "nvcc": %s,\n' "$(json_str "$DEVICE_TEXT")" "$(json_str "$NVCC_TEXT")"
        printf '  "ld_library_path": %s,\n' "$(json_str "${LD_LIBRARY_PATH:-}")"
        printf '  "libraries": ['
        for c in ${LIB_JSON[@]+"${LIB_JSON[@]}"}; do
            printf '%s\n    %s' "$sep" "$c"
            sep=","
        done
        printf '\n  ],\n  "checks": ['
        sep=""
        for c in ${CHECKS[@]+"${CHECKS[@]}"}; do
            printf '%s\n    %s' "$sep" "$c"
            sep=","
        done
        printf '\n  ],\n  "summary": {"checks": %d, "pass": %d, "fail": %d, "skip": %d, "targets_missed": %d},\n' \
            $((NPASS + NFAIL + NSKIP)) "$NPASS" "$NFAIL" "$NSKIP" "$NMISS"
        printf '  "failed": ['
        sep=""
        for f in ${FAILS[@]+"${FAILS[@]}"}; do
            printf '%s%s' "$sep" "$(json_str "$f")"
            sep=", "
        done
        printf '],\n  "log": "device-check.log"\n}\n'
    } >"$JSON.tmp"
    mv "$JSON.tmp" "$JSON"
    JSON_DONE=1
}

# A stop on an unexpected error (set -e) still leaves a JSON naming it.
on_exit() {
    local rc=$?
    if ((JSON_DONE == 0)); then
        add_check "device-check.sh" script fail "stopped early (exit $rc) at $(elapsed) s; see device-check.log" >&2 || true
        write_json || true
    fi
    rm -rf "$SCRATCH"
    exit "$rc"
}
trap on_exit EXIT

# ---- the CUDA libraries ----------------------------------------------------------------------
ldconfig_p() {
    local lc
    lc=$(command -v ldconfig || echo /sbin/ldconfig)
    "$lc" -p 2>/dev/null || true
}

# python_site_dirs: the folders where each python3 looks for packages, where a
# pip-installed nvidia-* wheel lives: site-packages, the user's, and sys.path (a
# virtual environment or PYTHONPATH shows up there only).
python_site_dirs() {
    local py seen=" "
    for py in "$(command -v python3 || true)" /usr/bin/python3 /usr/local/bin/python3; do
        if [ -z "$py" ] || [ ! -x "$py" ] || [[ $seen == *" $py "* ]]; then
            continue
        fi
        seen+="$py "
        timeout 20 "$py" -c '
import site, sys
dirs = []
try:
    dirs += site.getsitepackages()
except Exception:
    pass
try:
    dirs.append(site.getusersitepackages())
except Exception:
    pass
dirs += sys.path
print("\n".join(d for d in dirs if d.startswith("/")))' 2>/dev/null || true
    done
}

# lib_dirs [ROOT]: the folders searched after LD_LIBRARY_PATH and ldconfig, as
# "SOURCE<TAB>FOLDER" lines in order of preference: the CUDA toolkits' (lib64 is
# often a symlink to targets/<arch>/lib: a test with -d follows it), the
# system's, then every site-packages/nvidia/*/lib (the NCCL and cuBLAS wheels).
lib_dirs() {
    local root=${1:-} d sp
    for d in "$root"/usr/local/cuda*/lib64 "$root"/usr/local/cuda*/lib "$root"/usr/local/cuda*/targets/*/lib; do
        [ -d "$d" ] && printf 'cuda toolkit\t%s\n' "$d"
    done
    for d in "$root"/usr/lib/x86_64-linux-gnu "$root"/lib/x86_64-linux-gnu "$root"/usr/lib64 "$root"/usr/local/lib; do
        [ -d "$d" ] && printf 'system\t%s\n' "$d"
    done
    while IFS= read -r sp; do
        for d in "$root$sp"/nvidia/*/lib; do
            [ -d "$d" ] && printf 'python site-packages\t%s\n' "$d"
        done
    done <<<"${PY_SITES-$(python_site_dirs | awk '!seen[$0]++')}"
    # The usual spellings, for a machine whose python3 is not the one pip used.
    for d in "$root"/usr/local/lib/python3*/dist-packages/nvidia/*/lib \
        "$root"/usr/local/lib/python3*/site-packages/nvidia/*/lib \
        "$root"/usr/lib/python3/dist-packages/nvidia/*/lib "$root"/usr/lib/python3*/site-packages/nvidia/*/lib \
        "$root${HOME:-/root}"/.local/lib/python3*/site-packages/nvidia/*/lib \
        "$root"/opt/conda/lib/python3*/site-packages/nvidia/*/lib; do
        [ -d "$d" ] && printf 'python site-packages\t%s\n' "$d"
    done
    return 0
}

# find_lib NAME [ROOT]: prints "PATH<TAB>SOURCE" for the first NAME found, in the
# loader's own order first (LD_LIBRARY_PATH, then ldconfig's cache), then
# lib_dirs, then anything under a CUDA toolkit (find -L: through symlinks; never
# a stubs/ folder, those are for linking only). ROOT (default
# $DEVICE_CHECK_LIB_ROOT) prefixes every system folder; ldconfig is not asked
# under a ROOT. Returns 1 when NAME is nowhere.
find_lib() {
    local name=$1 root=${2-${DEVICE_CHECK_LIB_ROOT:-}} d p src
    local -a ldp=()
    IFS=: read -ra ldp <<<"${LD_LIBRARY_PATH:-}"
    for d in ${ldp[@]+"${ldp[@]}"}; do
        if [ -n "$d" ] && [ -e "$d/$name" ]; then
            printf '%s\tLD_LIBRARY_PATH\n' "$d/$name"
            return 0
        fi
    done
    if [ -z "$root" ]; then
        p=$(ldconfig_p | awk -v l="$name" '$1 == l && /x86-64/ {print $NF; exit}') || true
        if [ -n "$p" ] && [ -e "$p" ]; then
            printf '%s\tldconfig\n' "$p"
            return 0
        fi
    fi
    while IFS=$'\t' read -r src d; do
        if [ -e "$d/$name" ]; then
            printf '%s\t%s\n' "$d/$name" "$src"
            return 0
        fi
    done < <(lib_dirs "$root")
    p=$(find -L "$root"/usr/local/cuda* -maxdepth 5 -name "$name" -not -path '*/stubs/*' 2>/dev/null |
        head -n 1) || true
    if [ -n "$p" ]; then
        printf '%s\tcuda toolkit (find)\n' "$p"
        return 0
    fi
    return 1
}

say "== ringvit device check$([ "$DRY" = 1 ] && echo ' (dry run: no GPU program is run)'), outputs in $OUTDIR"

# ---- 1. device and compiler -----------------------------------------------------------------
if command -v nvidia-smi >/dev/null 2>&1; then
    DEVICE_TEXT=$(timeout 30 nvidia-smi -L 2>&1) || DEVICE_TEXT="(nvidia-smi -L failed: $DEVICE_TEXT)"
else
    DEVICE_TEXT="(no nvidia-smi)"
fi
NVCC=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
if [ -x "$NVCC" ]; then
    NVCC_TEXT=$("$NVCC" --version 2>&1 | tail -n 2) || true
else
    NVCC_TEXT="(no nvcc)"
fi
say "device: $DEVICE_TEXT"
say "nvcc: $NVCC_TEXT"

# ---- 2. the CUDA libraries --------------------------------------------------------------------
# The bundle runs on the device's own CUDA libraries, and a build that loads NCCL
# with dlopen finds it through LD_LIBRARY_PATH, so their folders are exported.
HAVE_NCCL=0
found_dirs=()
# Asked once: python3 is slow to start, and lib_dirs runs once per library.
PY_SITES=$(python_site_dirs | awk '!seen[$0]++')
for lib in "${WANT_LIBS[@]}"; do
    hit=$(find_lib "$lib") || hit=""
    if [ -n "$hit" ]; then
        path=${hit%%$'\t'*}
        src=${hit#*$'\t'}
        real=$(readlink -f "$path" 2>/dev/null || echo "$path")
        found_dirs+=("$(dirname "$path")")
        LIB_JSON+=("{\"name\": $(json_str "$lib"), \"path\": $(json_str "$path"), \"resolved\": $(json_str "$real"), \"source\": $(json_str "$src")}")
        [[ $lib == libnccl.so* ]] && HAVE_NCCL=1
        add_check "library $lib" library pass "" "\"path\": $(json_str "$path"), \"source\": $(json_str "$src")"
        say "      $lib: $path (from $src)"
    else
        LIB_JSON+=("{\"name\": $(json_str "$lib"), \"path\": null, \"source\": null}")
        if [[ $lib == libnccl.so* ]]; then
            add_check "library $lib" library skip "no $lib found; the NCCL checks are skipped"
        else
            add_check "library $lib" library fail "no $lib found (LD_LIBRARY_PATH, ldconfig, /usr/local/cuda*, system folders, Python site-packages/nvidia/*/lib)"
        fi
    fi
done
if ((${#found_dirs[@]})); then
    dirs=$(printf '%s\n' "${found_dirs[@]}" | awk '!seen[$0]++' | paste -sd: -)
    export LD_LIBRARY_PATH="$dirs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
say "LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}"

# nccl_reason NAME MISSING: why the check NAME cannot run ("" when it can):
# NAME is an NCCL check and there is no NCCL, or the build links libnccl.so.2
# (builds before NCCL was loaded with dlopen) and the loader cannot find it.
nccl_reason() {
    if ((HAVE_NCCL == 0)) && [[ $1 == *nccl* ]]; then
        echo "skip: no libnccl.so.2 found"
    elif ((HAVE_NCCL == 0)) && [[ " $2 " == *" libnccl.so.2 "* ]]; then
        echo "skip: this build links libnccl.so.2 and none was found"
    fi
}

# missing_libs FILE: the libraries FILE needs that the loader cannot find, on one
# line ("" for a script or a binary that loads). Where the lookup found no NCCL,
# a libnccl.so.2 FILE links counts as missing even when the loader has one (only
# a root prefix or the file's RUNPATH can show it one): the NCCL rule stays one.
missing_libs() {
    { ldd "$1" 2>/dev/null || true; } | awk -v nonccl=$((1 - HAVE_NCCL)) '
        /=> *not found/ { print $1; next }
        nonccl && $1 ~ /^libnccl\.so/ { print $1 }' | sort -u | paste -sd' ' -
}

# ---- 3. build: here with CUDA, or the prebuilt bundle -----------------------------------------
# The device image has CUDA and CMake but none of FFmpeg, oneDNN, jansson or
# Criterion: there the native configure is expected to fail and the bundle runs.
BUILD_OK=0
TEST_BINS=()
NATIVE_TESTS=()
RINGVIT=""
native_ok=0
if [ "$DRY" = 1 ]; then
    add_check configure build skip "dry run"
elif [ "${DEVICE_CHECK_MODE:-}" = bundle ]; then
    add_check configure build skip "DEVICE_CHECK_MODE=bundle"
else
    run_step configure 90 cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DRINGVIT_CUDA=ON \
        -DRINGVIT_MEDIA=AUTO
    if ((STEP_RC == 0)); then
        native_ok=1
        add_check configure build pass ""
    else
        why=$(cat "$STEP_OUT" "$STEP_ERR" | grep -E -m 1 "Could NOT|not found|No package|Error" || true)
        if [ -f "$BUNDLE_TAR" ]; then
            # Expected on the device: recorded, not a failure, the bundle runs.
            add_check configure build skip "native configure failed ($STEP_WHY${why:+: $why}); running the bundle $BUNDLE_TAR"
        else
            add_check configure build fail "$STEP_WHY${why:+: $why}; and no $BUNDLE_TAR to run instead (run scripts/device-bundle.sh first, then carry .devbundle)"
            show_tail 20
        fi
    fi
fi

if ((native_ok)); then
    # The gpu tests' executables are test_<name> (tests/CMakeLists.txt, rv_add_test);
    # only those that are build targets are asked for.
    mapfile -t NATIVE_TESTS < <(ctest --test-dir "$BUILD" -L gpu -N 2>/dev/null |
        sed -n 's/^ *Test *#[0-9]*: *\([A-Za-z0-9_]*\).*/\1/p')
    TARGETS=(ringvit_cli)
    ALL_TARGETS=$(cmake --build "$BUILD" --target help 2>/dev/null || true)
    for t in ${NATIVE_TESTS[@]+"${NATIVE_TESTS[@]}"}; do
        if grep -qw "test_$t" <<<"$ALL_TARGETS"; then
            TARGETS+=("test_$t")
        fi
    done
    run_step build "$BUILD_TIMEOUT" cmake --build "$BUILD" -j"$JOBS" --target "${TARGETS[@]}"
    nwarn=$(cat "$STEP_OUT" "$STEP_ERR" | grep -c "warning" || true)
    if ((STEP_RC == 0)); then
        BUILD_OK=1
        add_check build build pass "" "\"targets\": $(json_str "${TARGETS[*]}"), \"warnings\": ${nwarn:-0}"
    else
        add_check build build fail "$STEP_WHY" "\"targets\": $(json_str "${TARGETS[*]}")"
        cat "$STEP_OUT" "$STEP_ERR" | grep -E "error|Error" | head -n 20 | sed 's/^/      | /' || true
    fi
    RINGVIT="$BUILD/ringvit"
elif [ -f "$BUNDLE_TAR" ]; then
    MODE=bundle
    BUNDLE=$SCRATCH/bundle
    mkdir -p "$BUNDLE"
    run_step bundle 120 tar -C "$BUNDLE" -xJf "$BUNDLE_TAR"
    if ((STEP_RC != 0)) || [ ! -f "$BUNDLE/bin/ringvit" ]; then
        add_check bundle build fail "cannot unpack $BUNDLE_TAR (${STEP_WHY:-no bin/ringvit in it})"
        show_tail 10
    else
        sed -n '1,5p' "$BUNDLE/manifest.txt" 2>/dev/null | sed 's/^/      /' | tee -a "$LOG" || true
        # Compiler runtimes: the machine's, ours only where it has none.
        for f in "$BUNDLE"/lib/fallback/*; do
            [ -e "$f" ] || continue
            have=$(ldconfig_p | grep -c "$(basename "$f")" || true)
            if [ "${have:-0}" -eq 0 ]; then
                cp "$f" "$BUNDLE/lib/" && say "      using the bundle's $(basename "$f")"
            fi
        done
        export LD_LIBRARY_PATH="$BUNDLE/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
        RINGVIT="$BUNDLE/bin/ringvit"
        for t in "$BUNDLE"/tests/test_*; do
            [ -e "$t" ] && TEST_BINS+=("$t")
        done
        BUILD_OK=1
        add_check bundle build pass "" "\"file\": $(json_str "$BUNDLE_TAR"), \"manifest\": $(json_str "$(head -n 5 "$BUNDLE/manifest.txt" 2>/dev/null || true)"), \"tests\": ${#TEST_BINS[@]}"
    fi
elif [ "$DRY" = 1 ] || [ "${DEVICE_CHECK_MODE:-}" = bundle ]; then
    MODE=bundle
    if [ "$DRY" = 1 ]; then
        add_check bundle build skip "dry run and no $BUNDLE_TAR"
    else
        add_check bundle build fail "DEVICE_CHECK_MODE=bundle but no $BUNDLE_TAR (run scripts/device-bundle.sh first, then carry .devbundle)"
    fi
fi

# ---- 4. gpu tests -------------------------------------------------------------------------------
# test_figures FILE: JSON members for a GPU test's output: how many errors it
# printed ("err X", each one against the CPU backend), the largest, how many
# checks were above tolerance (a line ending FAILED), the WORST lines (which
# repeat an error already counted), and
# Criterion's synthesis.
test_figures() {
    local figs worst="" sep="" line
    figs=$(awk '
        /WORST/ { next }
        { s = $0
          while (match(s, /(^|[ ,])err +[-+]?([0-9.]+([eE][-+]?[0-9]+)?|nan|inf)/)) {
              v = substr(s, RSTART, RLENGTH); sub(/.*err +/, "", v)
              n++
              if (v ~ /nan|inf/) bad = 1; else if (n == 1 || v + 0 > max + 0) max = v
              s = substr(s, RSTART + RLENGTH)
          }
        }
        /  FAILED$/ { above++ }
        /Synthesis: Tested:/ { syn = $0; gsub(/[^0-9|]/, "", syn); split(syn, f, "|") }
        END {
          printf "\"errors\": %d, \"max_err\": %s, \"above_tolerance\": %d", n, (bad ? "null" : (n ? max : "null")), above
          if (syn != "") printf ", \"criterion\": {\"tested\": %d, \"passing\": %d, \"failing\": %d, \"crashing\": %d}", f[1], f[2], f[3], f[4]
        }' "$1" "$2")
    while IFS= read -r line; do
        worst+="$sep$(json_str "$line")"
        sep=", "
    done < <(grep -a "WORST" "$1" "$2" -h | head -n 20 || true)
    printf '%s, "worst": [%s]' "$figs" "$worst"
}

# gpu_test NAME CMD...: one GPU test as one check. Exit 77 (or ctest's
# "Skipped") is a skip, any other non-zero status a failure.
gpu_test() {
    local name=$1 st reason figs
    shift
    run_step "$name" 240 "$@"
    figs=$(test_figures "$STEP_OUT" "$STEP_ERR")
    figs+=", \"exit\": $STEP_RC, \"seconds\": $STEP_SECS"
    if ((STEP_RC == 77)) || { ((STEP_RC == 0)) && grep -aq -E '\*\*\*Skipped|(^|: )SKIPPED:' "$STEP_OUT"; }; then
        st=skip
        reason=$(grep -a -h -o -m 1 "SKIPPED:.*" "$STEP_OUT" "$STEP_ERR" | head -n 1 || true)
        reason=${reason:-skipped (exit 77)}
    elif ((STEP_RC == 0)); then
        st=pass
        reason=""
    else
        st=fail
        reason=$STEP_WHY
    fi
    add_check "$name" "gpu test" "$st" "$reason" "$figs"
    grep -a -h "WORST" "$STEP_OUT" "$STEP_ERR" | head -n 8 | sed 's/^/      /' || true
    if [ "$st" = fail ]; then
        grep -a -h -E "  FAILED$|Assertion|CRASH|\[FAIL\]" "$STEP_OUT" "$STEP_ERR" | head -n 15 | sed 's/^/      | /' || true
        show_tail 10
    fi
}

if ((BUILD_OK)) && [ "$MODE" = native ]; then
    for t in ${NATIVE_TESTS[@]+"${NATIVE_TESTS[@]}"}; do
        r=$(nccl_reason "$t" "")
        if [ -n "$r" ]; then
            add_check "$t" "gpu test" skip "${r#skip: }"
        else
            gpu_test "$t" ctest --test-dir "$BUILD" -R "^$t\$" -V
        fi
    done
    if ((${#NATIVE_TESTS[@]} == 0)); then
        add_check "gpu tests" "gpu test" fail "ctest lists no test labelled gpu in $BUILD"
    fi
elif ((BUILD_OK)); then
    for t in ${TEST_BINS[@]+"${TEST_BINS[@]}"}; do
        name=$(basename "$t")
        miss=$(missing_libs "$t")
        r=$(nccl_reason "$name" "$miss")
        if [ -n "$r" ]; then
            add_check "$name" "gpu test" skip "${r#skip: }"
        elif [ "$DRY" = 1 ]; then
            add_check "$name" "gpu test" skip "dry run" "\"missing_libraries\": $(json_str "$miss")"
        elif [ -n "$miss" ]; then
            add_check "$name" "gpu test" fail "cannot load: $miss not found"
        else
            gpu_test "$name" "$t" --jobs 4
        fi
    done
    if ((${#TEST_BINS[@]} == 0)); then
        add_check "gpu tests" "gpu test" fail "the bundle holds no tests/test_* executable"
    fi
elif [ "$DRY" = 1 ]; then
    add_check "gpu tests" "gpu test" skip "dry run"
else
    add_check "gpu tests" "gpu test" fail "not run: there is nothing to run (no build)"
fi

# ---- 5. benchmarks ------------------------------------------------------------------------------
# bench_figures FILE PASS: "key<TAB>value" lines read from a bench's --json output
# (jansson's indented form, one member per line): the top-level members, then
# those of the first "rows" entry whose "pass" is PASS (as row.KEY). Depth is
# counted from the brackets outside strings.
bench_figures() {
    awk -v want="\"$2\"" '
        { line = $0; bare = line; gsub(/"([^"\\]|\\.)*"/, "\"\"", bare)
          if (match(line, /^[ \t]*"[^"]*"[ \t]*:/)) {
              k = substr(line, RSTART, RLENGTH); sub(/^[ \t]*"/, "", k); sub(/"[ \t]*:$/, "", k)
              v = substr(line, RSTART + RLENGTH); sub(/^[ \t]*/, "", v); sub(/[ \t]*,?[ \t]*$/, "", v)
              if (depth == 1) { print k "\t" v; if (k == "rows") inrows = 1 }
              else if (depth == 3 && inrows) row[k] = v
          }
          o = gsub(/[{[]/, "", bare); c = gsub(/[]}]/, "", bare)
          depth += o - c
          if (inrows && depth == 2 && c > 0) {
              if (!picked && row["pass"] == want) { for (k in row) print "row." k "\t" row[k]; picked = 1 }
              split("", row)
          }
          if (inrows && depth < 2) inrows = 0
        }' "$1"
}

# fig KEY: a value from $FIGS (bench_figures' output), "" when absent.
fig() {
    awk -F '\t' -v k="$1" '$1 == k {print $2; exit}' <<<"$FIGS"
}

BENCH_ROWS=()
# bench WHAT S CAUSAL LIMIT ARGS...: one benchmark run as one check, its --json
# object kept in the JSON, its ratio against the target printed in the table.
bench() {
    local what=$1 seq=$2 causal=$3 limit=$4 tag name op goal pass rc_json gemm rate ratio err tol ok
    local st reason="" met="null" raw tfl gtfl miss miss_r shown last
    shift 4
    tag="$what-$seq-$([ "$causal" = 1 ] && echo causal || echo full)"
    name="bench $tag"
    case $what in
    fwd) op=">=" goal=0.45 pass=fwd ;;
    bwd) op=">=" goal=0.30 pass=bwd ;;
    wfwd) op=">=" goal=0.25 pass=fwd ;;
    ring) op="<=" goal=1.10 pass=fwd ;;
    *) op="<=" goal=1.50 pass=fwd ;;
    esac
    local base
    base="\"command\": $(json_str "ringvit $*"), \"target\": $(json_str "$op $goal")"
    if ((BUILD_OK == 0)) || [ -z "$RINGVIT" ]; then
        if [ "$DRY" = 1 ]; then
            add_check "$name" bench skip "dry run" "$base"
            shown=skip
        else
            add_check "$name" bench fail "no ringvit binary (no build)" "$base"
            shown="FAILED (not run)"
        fi
        BENCH_ROWS+=("$(printf '%-5s %6s %6s %8s %12s %6s %8s %7s %s' "$what" "$seq" "$causal" - - - - "$op$goal" "$shown")")
        return 0
    fi
    if [ -z "${RINGVIT_MISSING+set}" ]; then
        RINGVIT_MISSING=$(missing_libs "$RINGVIT") # once: ldd is slow, and there are 12 runs
    fi
    miss=$RINGVIT_MISSING
    miss_r=$(nccl_reason "" "$miss")
    if [ -n "$miss_r" ] || [ "$DRY" = 1 ]; then
        [ "$DRY" = 1 ] && miss_r="dry run"
        add_check "$name" bench skip "${miss_r#skip: }" "$base"
        BENCH_ROWS+=("$(printf '%-5s %6s %6s %8s %12s %6s %8s %7s %s' "$what" "$seq" "$causal" - - - - "$op$goal" "skip")")
        return 0
    elif [ -n "$miss" ]; then
        add_check "$name" bench fail "cannot load: $miss not found" "$base"
        BENCH_ROWS+=("$(printf '%-5s %6s %6s %8s %12s %6s %8s %7s %s' "$what" "$seq" "$causal" - - - - "$op$goal" "FAILED")")
        return 0
    fi
    run_step "$name" "$limit" "$RINGVIT" "$@"
    # The bench's own object goes into the JSON when it looks whole (jansson
    # writes it at the end, so a cut-off run has no closing brace).
    raw=$(cat "$STEP_OUT")
    rc_json=null
    if [[ $raw =~ ^[[:space:]]*\{ ]] && [[ $raw =~ \}[[:space:]]*$ ]]; then
        rc_json=$raw
    fi
    FIGS=""
    if [ "$rc_json" != null ]; then
        FIGS=$(bench_figures "$STEP_OUT" "$pass")
    fi
    gemm=$(json_num "$(fig gemm_gflops)")
    rate=$(json_num "$(fig row.gflops)")
    ratio=$(json_num "$(fig row.ratio)")
    err=$(json_num "$(fig row.max_err)")
    if [[ $what == *ring ]]; then
        ratio=$(json_num "$(fig fwd_ratio)")
        err=$(json_num "$(fig max_abs_err_o)")
    fi
    tol=$(json_num "$(fig tolerance)")
    ok=$(fig ok)
    [[ $ok == true || $ok == false ]] || ok=null
    tfl=$(awk -v g="$rate" 'BEGIN { if (g == "null") print "null"; else printf "%.4g", g / 1000 }')
    gtfl=$(awk -v g="$gemm" 'BEGIN { if (g == "null") print "null"; else printf "%.4g", g / 1000 }')
    if ((STEP_RC != 0)) && [ "$ok" = false ]; then
        st=fail reason="error $err above the tolerance $tol (against the CPU reference)"
    elif ((STEP_RC != 0)); then
        # ringvit names the cause in its last message (no device, out of memory, ...)
        last=$(grep -a -v '^[[:space:]]*$' "$STEP_ERR" | tail -n 1 || true)
        st=fail reason="$STEP_WHY${last:+: $last}"
    elif [ "$rc_json" = null ]; then
        st=fail reason="no JSON object on stdout"
    elif [ "$ratio" = null ]; then
        st=fail reason="no ratio in its JSON"
    else
        st=pass
        if awk -v r="$ratio" -v g="$goal" -v op="$op" 'BEGIN { exit !((op == ">=") ? (r >= g) : (r <= g)) }'; then
            met=true
        else
            met=false
            NMISS=$((NMISS + 1))
            reason="missed its target: ratio $ratio, want $op $goal"
        fi
    fi
    add_check "$name" bench "$st" "$reason" "$base, \"exit\": $STEP_RC, \"seconds\": $STEP_SECS, \"figures\": {\"tflops\": $tfl, \"gemm_tflops\": $gtfl, \"ratio\": $ratio, \"target_met\": $met}, \"error\": {\"max_err\": $err, \"tolerance\": $tol, \"ok\": $ok}, \"result\": $rc_json"
    if [ "$st" = fail ]; then
        show_tail 5
    fi
    shown=$st
    [ "$met" = false ] && shown=MISS
    [ "$st" = pass ] && [ "$met" = true ] && shown=OK
    [ "$st" = fail ] && shown="FAILED ($reason)"
    BENCH_ROWS+=("$(printf '%-5s %6s %6s %8s %12s %6s %8s %7s %s' "$what" "$seq" "$([ "$causal" = 1 ] && echo yes || echo no)" \
        "${tfl/null/-}" "${gtfl/null/-}" "${ratio/null/-}" "${err/null/-}" "$op$goal" "$shown")")
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

# ---- 6. table, JSON, summary --------------------------------------------------------------------
say ""
say "$(printf '%-5s %6s %6s %8s %12s %6s %8s %7s %s' what S causal TFLOP/s "GEMM TFLOP/s" ratio "max err" target status)"
for r in "${BENCH_ROWS[@]}"; do
    say "$r"
done
write_json
# The JSON is built by hand; where a checker is at hand (jq starts faster than
# python3), it is read back once.
if command -v jq >/dev/null 2>&1; then
    if ! jq empty "$JSON" 2>>"$LOG"; then
        say "FAILED: $JSON is not valid JSON (jq could not read it; see device-check.log)"
        NFAIL=$((NFAIL + 1))
    fi
elif command -v python3 >/dev/null 2>&1; then
    if ! python3 -c 'import json, sys; json.load(open(sys.argv[1]))' "$JSON" 2>>"$LOG"; then
        say "FAILED: $JSON is not valid JSON (python3 could not read it; see device-check.log)"
        NFAIL=$((NFAIL + 1))
    fi
fi
say ""
say "== device-check done in $(elapsed) s ($MODE$([ "$DRY" = 1 ] && echo ', dry run')): $NPASS passed, $NFAIL failed, $NSKIP skipped, $NMISS benchmark targets missed"
say "   outputs: $JSON, $LOG"
if ((NFAIL)); then
    say "FAILED checks ($NFAIL):"
    for f in ${FAILS[@]+"${FAILS[@]}"}; do
        say "  $f"
    done
    exit 1
fi
say "all checks passed"
