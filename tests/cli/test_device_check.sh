#!/bin/sh
# shellcheck disable=SC2317,SC2034 # the t_* checks are called through check(), which reads why and rc
# test_device_check.sh SCRIPT: scripts/device-check.sh without a GPU, on a fake
# device: a fake bundle (sh scripts standing for bin/ringvit and the GPU tests,
# printing what the real ones print) and fake CUDA library trees under
# DEVICE_CHECK_LIB_ROOT. Checks that a run with nothing failing exits 0 (also when
# the native configure fails as it does on the device), a real failure exits 1
# and is named, only device-check.json and device-check.log land in $OUT, the JSON
# parses and names every check with its figures, NCCL missing skips only the NCCL
# checks, --dry-run runs no GPU program, and the libraries are found in each
# layout (symlinked lib64, site-packages/nvidia/*/lib, a python3 sys.path entry,
# LD_LIBRARY_PATH) with the path reported. Run by ctest as
# `sh test_device_check.sh scripts/device-check.sh`; needs bash, tar, xz and
# python3 (to read the JSON). Prints one line per check, then "N passed, M failed".

SCRIPT=$1
if [ -z "$SCRIPT" ] || [ ! -f "$SCRIPT" ]; then
    echo "usage: sh test_device_check.sh PATH/TO/scripts/device-check.sh" >&2
    exit 2
fi
for tool in bash tar xz python3; do
    if ! command -v "$tool" >/dev/null 2>&1; then
        echo "test_device_check.sh: needs $tool, which is not installed" >&2
        exit 1
    fi
done

# /usr/bin/python3 where there is one: a version manager's shim takes seconds to start.
PY=python3
if [ -x /usr/bin/python3 ]; then
    PY=/usr/bin/python3
fi

tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT INT TERM
# shellcheck source=/dev/null # cli_lib.sh, beside this file
. "$(dirname "$0")/cli_lib.sh"

# ---- the fake device ------------------------------------------------------------------------
# bin/ringvit: `bench attention` prints jansson-shaped JSON with a fwd and a bwd
# row (ratios FAKE_FWD, default 0.5, and 0.35: a check reading the wrong row shows);
# `bench ring` prints fwd_ratio 1.05, or ok false and exit 1 under FAKE_RING_BAD.
# Every fake program touches $FAKE_MARK when it runs.
mkdir -p "$tmp/b/bin" "$tmp/b/lib/fallback" "$tmp/b/tests"
cat >"$tmp/b/bin/ringvit" <<'EOF'
#!/bin/sh
[ -n "$FAKE_MARK" ] && touch "$FAKE_MARK"
case "$1 $2" in
"bench attention")
    cat <<JSON
{
  "bench": "attention",
  "backend": "cuda",
  "mask": "none",
  "gemm_gflops": 600000.0,
  "tolerance": 0.02,
  "rows": [
    {
      "seq": 16384,
      "pass": "fwd",
      "gflops": 300000.0,
      "ratio": ${FAKE_FWD:-0.5},
      "max_err": 0.00125
    },
    {
      "seq": 16384,
      "pass": "bwd",
      "gflops": 210000.0,
      "ratio": 0.35,
      "max_err": null
    }
  ],
  "ok": true
}
JSON
    ;;
"bench ring")
    ok=true
    [ -n "$FAKE_RING_BAD" ] && ok=false
    cat <<JSON
{
  "bench": "ring",
  "attention": "full",
  "tolerance": 0.02,
  "fwd_ratio": 1.05,
  "fwd_ratio_runs": [
    1.05
  ],
  "max_abs_err_o": 0.0031,
  "ranks": [
    {
      "rank": 0,
      "ratio": 9.0
    }
  ],
  "ok": $ok
}
JSON
    [ "$ok" = true ] || exit 1
    ;;
*) echo "ringvit 0.1.0 (fake)" ;;
esac
EOF
cat >"$tmp/b/tests/test_cuda_ops" <<'EOF'
#!/bin/sh
[ -n "$FAKE_MARK" ] && touch "$FAKE_MARK"
echo "cuda_ops: gemm 64x64x64                                 err 1.000e-03  tol 2e-02"
echo "cuda_ops: layernorm_fwd 8x256                           err 4.500e-03  tol 2e-02"
if [ "$FAKE_FAIL" = cuda_ops ]; then
    echo "cuda_ops: attn_block_fwd S=256                          err 9.000e-02  tol 2e-02  FAILED"
fi
echo "cuda_ops: WORST ops: layernorm_fwd 8x256: err 4.500e-03 tol 2e-02"
echo "[====] Synthesis: Tested: 3 | Passing: 3 | Failing: 0 | Crashing: 0" >&2
[ "$FAKE_FAIL" = cuda_ops ] && exit 1
exit 0
EOF
cat >"$tmp/b/tests/test_cp_attention_gpu" <<'EOF'
#!/bin/sh
[ -n "$FAKE_MARK" ] && touch "$FAKE_MARK"
if [ -n "$FAKE_SKIP" ]; then echo "SKIPPED: no GPU: no CUDA device is visible"; exit 77; fi
echo "cp_attention_gpu: ring      cp 2 contig S=512   H=2 d=32  fwd err 3.00e-03"
exit 0
EOF
cat >"$tmp/b/tests/test_comm_nccl" <<'EOF'
#!/bin/sh
[ -n "$FAKE_MARK" ] && touch "$FAKE_MARK"
echo "comm_nccl: allreduce ok"
EOF
echo "ringvit device bundle (fake, tests/cli/test_device_check.sh)" >"$tmp/b/manifest.txt"
chmod +x "$tmp/b/bin/ringvit" "$tmp/b/tests/"*
tar -C "$tmp/b" -cf - . | xz -1 >"$tmp/bundle.tar.xz" || exit 1

# Library layouts, one root each. Empty files: the lookup only tests existence.
# lib64: a CUDA toolkit whose lib64 is a symlink to targets/x86_64-linux/lib (what
#        find without -L does not enter), NCCL from a pip wheel in dist-packages.
# venv:  everything from wheels in a site-packages only python3's sys.path names.
# nonccl: the toolkit without any NCCL.
r=$tmp/lib64
mkdir -p "$r/usr/local/cuda-13.0/targets/x86_64-linux/lib" "$r/usr/local/lib/python3.12/dist-packages/nvidia/nccl/lib"
for l in libcudart.so.13 libcublas.so.13 libcublasLt.so.13; do
    : >"$r/usr/local/cuda-13.0/targets/x86_64-linux/lib/$l"
done
ln -s targets/x86_64-linux/lib "$r/usr/local/cuda-13.0/lib64"
: >"$r/usr/local/lib/python3.12/dist-packages/nvidia/nccl/lib/libnccl.so.2"
venv_sp=/opt/venv/lib/python3.11/site-packages
r=$tmp/venv$venv_sp/nvidia
mkdir -p "$r/cuda_runtime/lib" "$r/cublas/lib" "$r/nccl/lib"
: >"$r/cuda_runtime/lib/libcudart.so.13"
: >"$r/cublas/lib/libcublas.so.13"
: >"$r/cublas/lib/libcublasLt.so.13"
: >"$r/nccl/lib/libnccl.so.2"
mkdir -p "$tmp/nonccl/usr/local/cuda-13.0/lib64" "$tmp/ldp" "$tmp/empty"
for l in libcudart.so.13 libcublas.so.13 libcublasLt.so.13; do
    : >"$tmp/nonccl/usr/local/cuda-13.0/lib64/$l"
done
: >"$tmp/ldp/libnccl.so.2"
: >"$tmp/ldp/libcudart.so.13"

# A fake cmake that fails to configure, as the real one does on the device image.
mkdir -p "$tmp/fakebin"
printf '#!/bin/sh\necho "-- Could NOT find BLAS (missing: BLAS_LIBRARIES)" >&2\nexit 1\n' >"$tmp/fakebin/cmake"
chmod +x "$tmp/fakebin/cmake"
# The script asks python3 for its site folders in every run: the fast one here.
if [ "$PY" = /usr/bin/python3 ]; then
    ln -s /usr/bin/python3 "$tmp/fakebin/python3"
fi

# dc NAME ROOT CMD...: runs CMD (the script) with OUT=$tmp/out-NAME, the
# fake bundle, library root ROOT, no LD_LIBRARY_PATH or PYTHONPATH of ctest's,
# the fake cmake first on PATH; stdout and stderr to $tmp/out and $tmp/err,
# status to rc (read by want_rc), the JSON at $J, the log at $L.
dc() {
    name=$1
    root=$2
    shift 2
    D=$tmp/out-$name
    J=$D/device-check.json
    L=$D/device-check.log
    rm -rf "$D" "$tmp/mark"
    env -u LD_LIBRARY_PATH -u PYTHONPATH -u DEVICE_CHECK_MODE -u RINGVIT_DEVICE_CHECK_DRY \
        OUT="$D" DEVICE_BUILD_DIR="$tmp/build-$name" DEVICE_CHECK_BUNDLE="$tmp/bundle.tar.xz" \
        DEVICE_CHECK_LIB_ROOT="$root" DEVICE_CHECK_BUDGET=200 FAKE_MARK="$tmp/mark" \
        PATH="$tmp/fakebin:$PATH" "$@" >"$tmp/out" 2>"$tmp/err"
    rc=$?
}

# jexpect PY_EXPR: evaluates PY_EXPR in python3 with j (the JSON) and c (the
# checks by name); ok when it is neither False nor an error (a bad JSON included).
jexpect() {
    out=$("$PY" - "$J" "$1" <<'EOF' 2>&1
import json, sys
j = json.load(open(sys.argv[1]))
c = {x["name"]: x for x in j["checks"]}
v = eval(sys.argv[2])
print(v)
sys.exit(0 if v is not False else 3)
EOF
    ) || { why="$J: want $1, got: $(echo "$out" | tail -n 1)"; return 1; }
}

want_outputs_only() {
    n=$(find "$D" -type f | wc -l)
    names=$(cd "$D" && find . -type f | sort | tr '\n' ' ')
    if [ "$n" -ne 2 ] || [ "$names" != "./device-check.json ./device-check.log " ]; then
        why="$D holds $n files ($names), want device-check.json and device-check.log only"
        return 1
    fi
}
want_out() {
    grep -Eq -- "$1" "$tmp/out" || { why="stdout lacks /$1/"; return 1; }
}
want_no_out() {
    ! grep -Eq -- "$1" "$tmp/out" || { why="stdout has /$1/"; return 1; }
}
want_log() {
    grep -Eq -- "$1" "$L" || { why="$L lacks /$1/"; return 1; }
}

BENCHES="'bench fwd-16384-full', 'bench bwd-16384-full', 'bench fwd-16384-causal', 'bench bwd-16384-causal',
 'bench fwd-65536-full', 'bench bwd-65536-full', 'bench fwd-65536-causal', 'bench bwd-65536-causal',
 'bench ring-65536-full', 'bench ring-65536-causal', 'bench wfwd-131072-full', 'bench wring-131072-full'"
ALL="{'library libcudart.so.13', 'library libcublas.so.13', 'library libcublasLt.so.13', 'library libnccl.so.2',
 'configure', 'bundle', 'test_cuda_ops', 'test_cp_attention_gpu', 'test_comm_nccl', $BENCHES}"

# ---- item 1: the device's own flow, the native configure failing, passes ------------------------
t_device_flow_passes() {
    dc flow "$tmp/lib64" bash "$SCRIPT"
    want_rc 0 && want_out "all checks passed" && want_no_out "FAIL" &&
        jexpect "c['configure']['status'] == 'skip' and 'Could NOT find BLAS' in c['configure']['reason']" &&
        jexpect "j['mode'] == 'bundle' and j['summary']['fail'] == 0 and j['failed'] == []" &&
        jexpect "set(c) == $ALL" &&
        jexpect "all(c[n]['status'] == 'pass' for n in set(c) - {'configure'})" || return 1
    [ -f "$tmp/mark" ] || { why="no fake GPU program ran"; return 1; }
}
t_outputs_two_files() {
    want_outputs_only && want_log "^---- configure " && want_log "^---- test_cuda_ops " &&
        want_log "^cuda_ops: WORST ops: layernorm_fwd" && want_log "Synthesis: Tested: 3" &&
        want_log "^---- bench wring-131072-full"
}
t_json_figures() {
    jexpect "c['test_cuda_ops']['max_err'] == 0.0045 and c['test_cuda_ops']['errors'] == 2 and c['test_cuda_ops']['above_tolerance'] == 0" &&
        jexpect "c['test_cuda_ops']['worst'] == ['cuda_ops: WORST ops: layernorm_fwd 8x256: err 4.500e-03 tol 2e-02']" &&
        jexpect "c['test_cuda_ops']['criterion'] == {'tested': 3, 'passing': 3, 'failing': 0, 'crashing': 0}" &&
        jexpect "c['test_cp_attention_gpu']['max_err'] == 0.003" &&
        jexpect "c['bench fwd-16384-full']['figures'] == {'tflops': 300, 'gemm_tflops': 600, 'ratio': 0.5, 'target_met': True}" &&
        jexpect "c['bench fwd-16384-full']['error'] == {'max_err': 0.00125, 'tolerance': 0.02, 'ok': True}" &&
        jexpect "c['bench bwd-65536-causal']['figures']['ratio'] == 0.35 and c['bench bwd-65536-causal']['target'] == '>= 0.30'" &&
        jexpect "c['bench ring-65536-full']['figures']['ratio'] == 1.05 and c['bench ring-65536-full']['error']['max_err'] == 0.0031" &&
        jexpect "c['bench ring-65536-causal']['result']['ranks'][0]['ratio'] == 9.0" &&
        jexpect "all(c[n]['kind'] == 'bench' and c[n]['result']['ok'] is True for n in [$BENCHES])"
}

# ---- real failures exit 1 and are named ----------------------------------------------------------
t_failing_test_exits_1() {
    dc failtest "$tmp/lib64" env FAKE_FAIL=cuda_ops DEVICE_CHECK_MODE=bundle bash "$SCRIPT"
    want_rc 1 && want_out "FAILED checks \(1\)" && want_out "test_cuda_ops: exit 1" && want_outputs_only &&
        jexpect "c['test_cuda_ops']['status'] == 'fail' and c['test_cuda_ops']['above_tolerance'] == 1 and c['test_cuda_ops']['max_err'] == 0.09" &&
        jexpect "c['configure']['status'] == 'skip' and j['failed'] == ['test_cuda_ops: exit 1']"
}
# A ring run whose error is above tolerance fails (all three ring runs); forward
# ratios of 0.40 miss the 0.45 target, which is reported and is no failure.
t_bad_bench_fails_missed_target_does_not() {
    dc failbench "$tmp/lib64" env FAKE_RING_BAD=1 FAKE_FWD=0.40 DEVICE_CHECK_MODE=bundle bash "$SCRIPT"
    want_rc 1 && want_out "MISS" &&
        jexpect "c['bench ring-65536-full']['status'] == 'fail' and 'above the tolerance' in c['bench ring-65536-full']['reason']" &&
        jexpect "j['summary']['fail'] == 3 and sorted(j['failed'])[0].startswith('bench ring-65536-causal: error 0.0031 above')" &&
        jexpect "c['bench fwd-16384-full']['status'] == 'pass' and c['bench fwd-16384-full']['figures']['target_met'] is False" &&
        jexpect "j['summary']['targets_missed'] == 4 and c['bench bwd-16384-full']['figures']['target_met'] is True"
}
t_no_bundle_configure_fails() {
    dc nobundle "$tmp/lib64" env DEVICE_CHECK_BUNDLE="$tmp/none.tar.xz" bash "$SCRIPT"
    want_rc 1 && want_outputs_only && jexpect "c['configure']['status'] == 'fail' and 'none.tar.xz' in c['configure']['reason']"
}
t_missing_cudart_fails() {
    dc nocudart "$tmp/empty" env DEVICE_CHECK_MODE=bundle bash "$SCRIPT"
    want_rc 1 && jexpect "c['library libcudart.so.13']['status'] == 'fail' and c['library libnccl.so.2']['status'] == 'skip'"
}

# ---- item 3: NCCL missing skips the NCCL checks only ------------------------------------------
t_no_nccl_skips_nccl_checks() {
    dc nonccl "$tmp/nonccl" env DEVICE_CHECK_MODE=bundle bash "$SCRIPT"
    want_rc 0 && jexpect "c['library libnccl.so.2']['status'] == 'skip' and c['test_comm_nccl']['status'] == 'skip'" &&
        jexpect "c['test_comm_nccl']['reason'] == 'no libnccl.so.2 found'" &&
        jexpect "c['test_cuda_ops']['status'] == 'pass' and c['bench ring-65536-full']['status'] == 'pass'" &&
        jexpect "[l['path'] for l in j['libraries']] == ['$tmp/nonccl/usr/local/cuda-13.0/lib64/libcudart.so.13', '$tmp/nonccl/usr/local/cuda-13.0/lib64/libcublas.so.13', '$tmp/nonccl/usr/local/cuda-13.0/lib64/libcublasLt.so.13', None]"
}

# ---- item 3: each layout, the path and the source reported ------------------------------------
t_layout_symlinked_lib64_and_dist_packages() {
    lib=$tmp/lib64/usr/local/cuda-13.0/lib64
    dc dry "$tmp/lib64" bash "$SCRIPT" --dry-run
    want_rc 0 &&
        jexpect "{l['name']: (l['path'], l['source']) for l in j['libraries']} == {
            'libcudart.so.13': ('$lib/libcudart.so.13', 'cuda toolkit'),
            'libcublas.so.13': ('$lib/libcublas.so.13', 'cuda toolkit'),
            'libcublasLt.so.13': ('$lib/libcublasLt.so.13', 'cuda toolkit'),
            'libnccl.so.2': ('$tmp/lib64/usr/local/lib/python3.12/dist-packages/nvidia/nccl/lib/libnccl.so.2', 'python site-packages')}" &&
        jexpect "j['ld_library_path'].split(':')[1:3] == ['$lib', '$tmp/lib64/usr/local/lib/python3.12/dist-packages/nvidia/nccl/lib']" &&
        want_log "libnccl.so.2: $tmp/lib64/usr/local/lib/python3.12/dist-packages/nvidia/nccl/lib/libnccl.so.2 \(from python site-packages\)"
}
t_layout_python_sys_path() {
    dc venv "$tmp/venv" env PYTHONPATH="$venv_sp" bash "$SCRIPT" --dry-run
    sp=$tmp/venv$venv_sp/nvidia
    want_rc 0 &&
        jexpect "{l['name']: (l['path'], l['source']) for l in j['libraries']} == {
            'libcudart.so.13': ('$sp/cuda_runtime/lib/libcudart.so.13', 'python site-packages'),
            'libcublas.so.13': ('$sp/cublas/lib/libcublas.so.13', 'python site-packages'),
            'libcublasLt.so.13': ('$sp/cublas/lib/libcublasLt.so.13', 'python site-packages'),
            'libnccl.so.2': ('$sp/nccl/lib/libnccl.so.2', 'python site-packages')}"
}
t_layout_ld_library_path() {
    dc ldp "$tmp/nonccl" env LD_LIBRARY_PATH="$tmp/nowhere:$tmp/ldp" bash "$SCRIPT" --dry-run
    want_rc 0 &&
        jexpect "{l['name']: (l['path'], l['source']) for l in j['libraries']} == {
            'libcudart.so.13': ('$tmp/ldp/libcudart.so.13', 'LD_LIBRARY_PATH'),
            'libcublas.so.13': ('$tmp/nonccl/usr/local/cuda-13.0/lib64/libcublas.so.13', 'cuda toolkit'),
            'libcublasLt.so.13': ('$tmp/nonccl/usr/local/cuda-13.0/lib64/libcublasLt.so.13', 'cuda toolkit'),
            'libnccl.so.2': ('$tmp/ldp/libnccl.so.2', 'LD_LIBRARY_PATH')}" &&
        jexpect "j['ld_library_path'].endswith(':$tmp/nowhere:$tmp/ldp')"
}

# ---- --dry-run runs no GPU program ----------------------------------------------------------------
# On the output of the dry run of t_layout_symlinked_lib64_and_dist_packages,
# checked just before.
t_dry_run() {
    [ "$D" = "$tmp/out-dry" ] || { why="run after a check other than the dry run's ($D)"; return 1; }
    want_outputs_only && jexpect "j['dry_run'] is True and c['configure']['reason'] == 'dry run'" &&
        jexpect "set(c) == $ALL" &&
        jexpect "all(c[n]['status'] == 'skip' and c[n]['reason'] == 'dry run' for n in ['test_cuda_ops', 'test_comm_nccl', $BENCHES])" &&
        { [ ! -e "$tmp/mark" ] || { why="a fake GPU program ran in a dry run"; return 1; }; }
}
t_dry_run_env_no_bundle() {
    dc drynb "$tmp/lib64" env RINGVIT_DEVICE_CHECK_DRY=1 DEVICE_CHECK_BUNDLE="$tmp/none.tar.xz" bash "$SCRIPT"
    want_rc 0 && jexpect "c['bundle']['status'] == 'skip' and c['gpu tests']['reason'] == 'dry run'"
}
t_bad_argument() {
    dc badarg "$tmp/lib64" bash "$SCRIPT" --frobnicate
    want_rc 2 && want_err "unknown argument '--frobnicate'"
}

# ---- a bundle whose binaries link libnccl.so.2 (builds before the dlopen change) ------------------
# Real ELF files: ldd must report the missing NCCL for the script to skip them.
t_linked_nccl_build() {
    if ! command -v cc >/dev/null 2>&1; then
        echo "     (no cc: the linked-NCCL bundle is not built; this check passes vacuously)"
        return 0
    fi
    e=$tmp/elf
    mkdir -p "$e/lib" "$e/b/bin" "$e/b/lib" "$e/b/tests" "$e/root/usr/local/cuda-13.0/lib64" || return 1
    echo 'int ncclGetVersion(int *v) { *v = 22703; return 0; }' >"$e/nccl.c"
    printf '#include <stdio.h>\nint ncclGetVersion(int *);\nint main(void) { int v; ncclGetVersion(&v);\n printf("vit_gpu: ringvit  cp 1 y err 2.50e-04, gradient err 7.00e-04\\n"); return 0; }\n' >"$e/t.c"
    if ! cc -shared -fPIC -Wl,-soname,libnccl.so.2 -o "$e/root/usr/local/cuda-13.0/lib64/libnccl.so.2" "$e/nccl.c" ||
        ! cc -o "$e/b/tests/test_vit_gpu" "$e/t.c" "$e/root/usr/local/cuda-13.0/lib64/libnccl.so.2"; then
        why="cc could not build the linked-NCCL fake"
        return 1
    fi
    cp "$tmp/b/bin/ringvit" "$e/b/bin/" && tar -C "$e/b" -cf - . | xz -1 >"$e/bundle.tar.xz"
    for l in libcudart.so.13 libcublas.so.13 libcublasLt.so.13; do : >"$e/root/usr/local/cuda-13.0/lib64/$l"; done
    dc linked "$e/root" env DEVICE_CHECK_MODE=bundle DEVICE_CHECK_BUNDLE="$e/bundle.tar.xz" bash "$SCRIPT"
    want_rc 0 && jexpect "c['test_vit_gpu']['status'] == 'pass' and c['test_vit_gpu']['max_err'] == 0.0007 and c['test_vit_gpu']['errors'] == 2" || return 1
    rm "$e/root/usr/local/cuda-13.0/lib64/libnccl.so.2"
    dc linked "$e/root" env DEVICE_CHECK_MODE=bundle DEVICE_CHECK_BUNDLE="$e/bundle.tar.xz" bash "$SCRIPT"
    want_rc 0 && jexpect "c['test_vit_gpu']['status'] == 'skip' and c['test_vit_gpu']['reason'] == 'this build links libnccl.so.2 and none was found'" &&
        jexpect "c['bench fwd-16384-full']['status'] == 'pass'"
}

check device_flow_passes t_device_flow_passes
check outputs_two_files t_outputs_two_files
check json_figures t_json_figures
check failing_test_exits_1 t_failing_test_exits_1
check bad_bench_fails_missed_target_does_not t_bad_bench_fails_missed_target_does_not
check no_bundle_configure_fails t_no_bundle_configure_fails
check missing_cudart_fails t_missing_cudart_fails
check no_nccl_skips_nccl_checks t_no_nccl_skips_nccl_checks
check layout_symlinked_lib64_and_dist_packages t_layout_symlinked_lib64_and_dist_packages
check dry_run t_dry_run
check layout_python_sys_path t_layout_python_sys_path
check layout_ld_library_path t_layout_ld_library_path
check dry_run_env_no_bundle t_dry_run_env_no_bundle
check bad_argument t_bad_argument
check linked_nccl_build t_linked_nccl_build
cli_summary
