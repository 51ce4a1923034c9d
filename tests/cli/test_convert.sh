#!/bin/sh
# shellcheck disable=SC2317 # the t_* checks are called indirectly, through check()
# shellcheck disable=SC2015 # `A && B || { why=...; return 1; }`: C is meant to run when A or B fails
# test_convert.sh EXE: scripts/convert-torchvision.py on tiny torchvision
# VisionTransformers made here (image 32, patch 8, 2 layers, seeded, every bias,
# LayerNorm parameter and the class token perturbed so that none is 0 or 1):
#   A: D 128, 2 heads (= D / 64, the head count ringvit takes for a file without
#      its config), MLP 192;  B: D 96, 3 heads (D / 64 is not whole).
# Checks:
#   - the state dict saved plain, as {"model": sd}, "module."-prefixed, as
#     {"model_state": "module."-prefixed}, with torchvision 0.12's legacy MLP names
#     and as a whole pickled module (refused without --unsafe-pickle): every tensor
#     of the output equals the state dict bit for bit (read back with json +
#     numpy), in sorted order, F32, heads.* dropped unless --keep-head, the
#     metadata exactly {format, source, converted_by}; F16/BF16 inputs become F32
#     (or stay with --keep-dtype);
#   - `ringvit embed IMG.png --model A.safetensors --tokens` on a 32 x 32 PNG gives
#     per-token outputs equal to torchvision's float64 run of the same picture
#     (x = _process_input(img); cat(class_token, x); encoder(x)) within 1e-4
#     relative, CLS first; the --keep-head file gives the same, with ringvit's
#     warning about the classifier;
#   - refusals: a ResNet state dict, a ViT missing a layer tensor, a truncated and
#     a garbage .pth, a missing input, OUT a directory or a symbolic link, unknown
#     flags, no -o -> exit 1 (2 for usage errors) and a message naming the file and
#     the problem; D 96 prints the --heads note;
#   - OUT.tmp.<pid> is gone after a success and after a failure in mid-write (an
#     injected ENOSPC, an injected SIGTERM exit), and an existing OUT is untouched
#     by a failure.
# Most conversions run in one python process that imports the script and calls
# its main(argv) (torch is imported once: the test takes seconds, not a minute);
# the real command runs for help, usage errors, refusals of paths and one conversion,
# whose bytes must equal the in-process one's.
# Run by ctest as `sh test_convert.sh $<TARGET_FILE:ringvit_cli>`; POSIX sh only.
# Prints one line per check, then "N passed, M failed"; exits 1 on any failure,
# including a missing test dependency (torch, torchvision, numpy in /usr/bin/python3);
# when EXE is not an executable the ringvit checks are skipped (said on a line)
# and, if nothing failed, the exit status is 77 (ctest: skipped).

EXE=$1
if [ -z "$EXE" ]; then
    echo "usage: sh test_convert.sh PATH/TO/ringvit" >&2
    exit 2
fi
have_exe=1
if [ ! -x "$EXE" ]; then
    have_exe=0
    echo "SKIPPED (ringvit checks): no ringvit executable at $EXE"
else
    EXE=$(cd "$(dirname "$EXE")" && pwd)/$(basename "$EXE")
fi
HERE=$(cd "$(dirname "$0")" && pwd)
CONV=$(cd "$HERE/../.." && pwd)/scripts/convert-torchvision.py
PY=/usr/bin/python3
if [ ! -f "$CONV" ]; then
    echo "FAILED: no $CONV"
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
mkdir res

pass=0
fail=0
skipped=0
failed=""
rc=0
why=""

# conv ARGS...: the real command; stdout to $tmp/out, stderr to $tmp/err, status to rc.
conv() {
    "$PY" "$CONV" "$@" >"$tmp/out" 2>"$tmp/err"
    rc=$?
}
run_exe() {
    "$EXE" "$@" >"$tmp/out" 2>"$tmp/err"
    rc=$?
}
# case NAME: the in-process run NAME of the driver below, as if conv had run it.
case_of() {
    cp "res/$1.out" "$tmp/out" && cp "res/$1.err" "$tmp/err" && rc=$(cat "res/$1.rc") ||
        { why="the driver did not run case $1"; return 1; }
}
want_rc() {
    [ "$rc" -eq "$1" ] || { why="exit status $rc, want $1"; return 1; }
}
want_out() {
    grep -Eq -- "$1" "$tmp/out" || { why="stdout lacks /$1/"; return 1; }
}
want_err() {
    grep -Eq -- "$1" "$tmp/err" || { why="stderr lacks /$1/"; return 1; }
}
want_no_out() {
    [ ! -s "$tmp/out" ] || { why="stdout should be empty"; return 1; }
}
want_absent() {
    [ ! -e "$1" ] && [ ! -L "$1" ] || { why="$1 was written"; return 1; }
}
# cmp_ok NAME: the driver's bit-for-bit comparison of case NAME's output passed.
cmp_ok() {
    [ "$(cat "res/$1.cmp" 2>/dev/null)" = "ok" ] || { why="$(cat "res/$1.cmp" 2>/dev/null)"; return 1; }
}
no_tmp_files() {
    left=$(find "$tmp" -name '*.tmp.*' | head -n 3)
    [ -z "$left" ] || { why="temporary files left: $left"; return 1; }
}

check() {
    why=""
    note=""
    if "$2"; then
        pass=$((pass + 1))
        echo "ok   $1${note:+ ($note)}"
    else
        fail=$((fail + 1))
        failed="$failed $1"
        echo "FAIL $1: ${why:-check failed}"
        if [ -s "$tmp/out" ]; then echo "     stdout:"; head -n 10 "$tmp/out" | sed 's/^/     | /'; fi
        if [ -s "$tmp/err" ]; then echo "     stderr:"; head -n 10 "$tmp/err" | sed 's/^/     | /'; fi
    fi
}
skip() { # NAME WHY
    skipped=$((skipped + 1))
    echo "skip $1: $2"
}

# ---- models, checkpoints, the picture and torchvision's outputs; in-process runs ----
"$PY" - "$CONV" >"$tmp/driver.log" 2>&1 <<'EOF'
import contextlib, errno, importlib.util, io, json, os, struct, sys, zlib
sys.dont_write_bytecode = True  # no scripts/__pycache__ in the source tree
import numpy as np
import torch
from torchvision.models.resnet import BasicBlock, ResNet
from torchvision.models.vision_transformer import VisionTransformer

torch.set_num_threads(1)
spec = importlib.util.spec_from_file_location("convert_torchvision", sys.argv[1])
cv = importlib.util.module_from_spec(spec)
spec.loader.exec_module(cv)

MEAN = np.array([0.485, 0.456, 0.406], dtype=np.float32).astype(np.float64)
STD = np.array([0.229, 0.224, 0.225], dtype=np.float32).astype(np.float64)


def make_model(seed, **kw):
    torch.manual_seed(seed)
    m = VisionTransformer(image_size=32, patch_size=8, num_layers=2, **kw)
    g = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for name, p in m.named_parameters():
            noise = torch.randn(p.shape, generator=g)
            if name == "class_token":
                p.copy_(noise * 0.3)
            elif ".ln" in name or name.startswith("encoder.ln"):
                p.add_(noise * 0.1)
            elif name.endswith("bias") or name.startswith("heads."):
                p.add_(noise * 0.05)
            if name.endswith("bias") or ".ln" in name or name == "class_token":
                assert not ((p == 0) | (p == 1)).any(), name
    return m.eval()


def write_png(path, rgb):
    h, w, _ = rgb.shape

    def chunk(kind, data):
        c = kind + data
        return struct.pack(">I", len(data)) + c + struct.pack(">I", zlib.crc32(c) & 0xFFFFFFFF)

    raw = b"".join(b"\x00" + rgb[y].tobytes() for y in range(h))
    with open(path, "wb") as f:
        f.write(b"\x89PNG\r\n\x1a\n")
        f.write(chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0)))
        f.write(chunk(b"IDAT", zlib.compress(raw, 9)))
        f.write(chunk(b"IEND", b""))


def torchvision_tokens(m, rgb):
    """(1 + 16, D) float64: torchvision's per-token outputs, CLS first."""
    x = ((rgb.astype(np.float64) / 255.0 - MEAN) / STD).astype(np.float32)
    m64 = make_copy(m).double()
    with torch.no_grad():
        x = torch.from_numpy(x).double().permute(2, 0, 1).unsqueeze(0)
        x = m64._process_input(x)
        x = torch.cat([m64.class_token.expand(1, -1, -1), x], dim=1)
        return m64.encoder(x)[0].numpy()


def make_copy(m):
    import copy
    return copy.deepcopy(m)


A = make_model(1000, num_heads=2, hidden_dim=128, mlp_dim=192)
B = make_model(2000, num_heads=3, hidden_dim=96, mlp_dim=192)
sdA = A.state_dict()
torch.save(sdA, "A.pth")
# (no float besides the tensors: torch 1.13's weights_only loader refuses floats)
torch.save({"model": sdA, "epoch": 7, "optimizer": {"step": 70}}, "A_wrapped.pth")
torch.save({"module." + k: v for k, v in sdA.items()}, "A_module.pth")
torch.save({"model_state": {"module." + k: v for k, v in sdA.items()}, "step": 3}, "A_ddp.pth")
torch.save({k.replace(".mlp.0.", ".mlp.linear_1.").replace(".mlp.3.", ".mlp.linear_2."): v
            for k, v in sdA.items()}, "A_legacy.pth")
torch.save(A, "A_whole.pth")
half = {k: v.to(torch.bfloat16 if k.endswith("weight") else torch.float16) for k, v in sdA.items()}
torch.save(half, "A_half.pth")
broken = dict(sdA)
del broken["encoder.layers.encoder_layer_1.mlp.3.bias"]
torch.save(broken, "A_broken.pth")
torch.save(B.state_dict(), "B.pth")
torch.manual_seed(0)
torch.save(ResNet(BasicBlock, [1, 1, 1, 1], num_classes=10).state_dict(), "resnet.pth")
raw = open("A.pth", "rb").read()
open("truncated.pth", "wb").write(raw[:len(raw) // 2])
open("garbage.pth", "wb").write(b"these are not the weights you are looking for\n")

rng = np.random.default_rng(20240611)
yy, xx = np.mgrid[0:32, 0:32].astype(np.float64) / 31
img = np.stack([255 * xx, 255 * yy, 128 + 100 * np.sin(9 * xx + 5 * yy)], axis=-1)
img = np.clip(np.rint(img + rng.normal(0, 10, img.shape)), 0, 255).astype(np.uint8)
write_png("img.png", img)
np.save("ref_A.npy", torchvision_tokens(A, img))
np.save("ref_B.npy", torchvision_tokens(B, img))
n_params = sum(v.numel() for k, v in sdA.items() if not k.startswith("heads."))
open("paramsA", "w").write("%d\n" % n_params)


def read_st(path):
    b = open(path, "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    assert n % 8 == 0, "header length %d is not a multiple of 8" % n
    head = json.loads(b[8:8 + n].decode("utf-8"))  # padded with spaces: json allows them
    return b, n, head


def expect_bytes(t, code):
    t = t.detach().contiguous()
    if code == "F32":
        return t.to(torch.float32).numpy().astype("<f4").tobytes()
    return t.view(torch.int16).numpy().astype("<i2").tobytes()


def compare(path, sd, source, keep_head=False, codes=None):
    """'ok' or why not: every tensor of path equals sd's bit for bit."""
    b, n, head = read_st(path)
    meta = head.pop("__metadata__", None)
    want_meta = {"format": "pt", "source": source, "converted_by": "ringvit convert-torchvision"}
    if meta != want_meta:
        return "metadata %r, want %r" % (meta, want_meta)
    want = sorted(k for k in sd if keep_head or not k.startswith("heads."))
    if sorted(head) != want:
        return "tensors differ: extra %s, missing %s" % (sorted(set(head) - set(want))[:3],
                                                        sorted(set(want) - set(head))[:3])
    end = 0
    for k in sorted(head):  # sorted name order, contiguous
        v = head[k]
        code = (codes or {}).get(k, "F32")
        if v["dtype"] != code:
            return "%s: dtype %s, want %s" % (k, v["dtype"], code)
        if v["shape"] != list(sd[k].shape):
            return "%s: shape %s, want %s" % (k, v["shape"], list(sd[k].shape))
        s, e = v["data_offsets"]
        if s != end:
            return "%s: starts at %d, want %d (sorted order, no gaps)" % (k, s, end)
        end = e
        if b[8 + n + s:8 + n + e] != expect_bytes(sd[k], code):
            return "%s: values differ from the state dict" % k
    if len(b) != 8 + n + end:
        return "file is %d bytes, want %d" % (len(b), 8 + n + end)
    return "ok"


def run(name, argv, inject=None):
    """main(argv) in this process, as the command would run; files res/NAME.*."""
    out, err = io.StringIO(), io.StringIO()
    saved = cv.tensor_bytes
    if inject:
        calls = [0]

        def failing(torch_, t, code):
            calls[0] += 1
            if calls[0] == 3:
                inject()
            return saved(torch_, t, code)
        cv.tensor_bytes = failing
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                rc = cv.main(argv)
            except SystemExit as e:
                rc = e.code
    finally:
        cv.tensor_bytes = saved
    for ext, text in (("out", out.getvalue()), ("err", err.getvalue()), ("rc", "%s\n" % rc)):
        open("res/%s.%s" % (name, ext), "w").write(text)


def cmp_case(name, path, *args, **kw):
    try:
        r = compare(path, *args, **kw)
    except Exception as e:
        r = "%s: %s: %s" % (path, type(e).__name__, e)
    open("res/%s.cmp" % name, "w").write(r + "\n")


run("plain", ["A.pth", "-o", "A_inproc.safetensors"])
cmp_case("plain", "A_inproc.safetensors", sdA, "A.pth")
run("wrapped", ["A_wrapped.pth", "-o", "A_wrapped.safetensors", "--quiet"])
cmp_case("wrapped", "A_wrapped.safetensors", sdA, "A_wrapped.pth")
run("module", ["A_module.pth", "-o", "A_module.safetensors"])
cmp_case("module", "A_module.safetensors", sdA, "A_module.pth")
run("ddp", ["A_ddp.pth", "-o", "A_ddp.safetensors"])
cmp_case("ddp", "A_ddp.safetensors", sdA, "A_ddp.pth")
run("legacy", ["A_legacy.pth", "-o", "A_legacy.safetensors"])
cmp_case("legacy", "A_legacy.safetensors", sdA, "A_legacy.pth")
run("whole", ["A_whole.pth", "-o", "A_refused.safetensors"])
run("whole_unsafe", ["A_whole.pth", "-o", "A_whole.safetensors", "--unsafe-pickle"])
cmp_case("whole_unsafe", "A_whole.safetensors", sdA, "A_whole.pth")
run("keep_head", ["A.pth", "-o", "A_head.safetensors", "--keep-head"])
cmp_case("keep_head", "A_head.safetensors", sdA, "A.pth", keep_head=True)
run("half", ["A_half.pth", "-o", "A_half32.safetensors"])
cmp_case("half", "A_half32.safetensors", half, "A_half.pth")
run("keep_dtype", ["A_half.pth", "-o", "A_half.safetensors", "--keep-dtype"])
cmp_case("keep_dtype", "A_half.safetensors", half, "A_half.pth",
         codes={k: "BF16" if v.dtype == torch.bfloat16 else "F16" for k, v in half.items()})
run("B", ["B.pth", "-o", "B.safetensors"])
cmp_case("B", "B.safetensors", B.state_dict(), "B.pth")
run("broken", ["A_broken.pth", "-o", "A_broken.safetensors"])
run("resnet", ["resnet.pth", "-o", "resnet.safetensors"])
run("truncated", ["truncated.pth", "-o", "truncated.safetensors"])
run("garbage", ["garbage.pth", "-o", "garbage.safetensors"])


def enospc():
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def sigterm():
    raise SystemExit(128 + 15)  # what the script's SIGTERM handler raises


for name, inject in (("nospace", enospc), ("sigterm", sigterm)):
    open("old_%s.safetensors" % name, "wb").write(b"the previous output\n")
    run(name, ["A.pth", "-o", "old_%s.safetensors" % name], inject=inject)
print("driver done")
EOF
drv=$?

# ---- in-process conversions ---------------------------------------------------------
t_driver() {
    [ "$drv" -eq 0 ] || { why="the python driver failed: $(tail -n 3 "$tmp/driver.log")"; return 1; }
}
converted() { # NAME OUT: exit 0, a summary line naming OUT unless quiet, equal bits
    case_of "$1" && want_rc 0 && cmp_ok "$1"
}
t_plain() {
    converted plain &&
        want_out "^A\.pth: 30 tensors, $(cat paramsA) parameters, D 128, 2 layers, patch 8, grid 4 \(32 px\), [0-9.]+ MB \(heads\.\* dropped\) -> A_inproc\.safetensors$"
}
t_wrapped() { converted wrapped && want_no_out; }
t_module() { converted module; }
t_ddp() { converted ddp; }
t_legacy() { converted legacy; }
t_whole_refused() {
    case_of whole && want_rc 1 && want_err "A_whole\.pth holds pickled Python objects" &&
        want_err "--unsafe-pickle" && want_absent A_refused.safetensors
}
t_whole_unsafe() { converted whole_unsafe; }
t_keep_head() { converted keep_head && want_out "32 tensors.*heads\.\* kept"; }
t_half() { converted half; }
t_keep_dtype() { converted keep_dtype; }
t_heads_note() {
    converted B && want_err "note: D 96 is not a multiple of 64" && want_err "--heads"
}
t_broken() {
    case_of broken && want_rc 1 && want_no_out &&
        want_err "A_broken\.pth is not a complete torchvision VisionTransformer checkpoint: missing encoder\.layers\.encoder_layer_1\.mlp\.3\.bias" &&
        want_absent A_broken.safetensors
}
t_truncated() {
    case_of truncated && want_rc 1 && want_err "truncated\.pth: not a readable PyTorch checkpoint" &&
        want_absent truncated.safetensors
}
t_garbage() {
    case_of garbage && want_rc 1 && want_err "garbage\.pth: not a readable PyTorch checkpoint" &&
        want_absent garbage.safetensors
}
unchanged_old() { # NAME: the earlier OUT is as it was, no temporary file
    [ "$(cat "old_$1.safetensors")" = "the previous output" ] || { why="the old OUT was replaced"; return 1; }
    no_tmp_files
}
t_nospace() {
    case_of nospace && want_rc 1 && want_err "old_nospace\.safetensors: cannot write it \(No space left" &&
        unchanged_old nospace
}
t_sigterm() { case_of sigterm && want_rc 143 && unchanged_old sigterm; }

# ---- the command itself ---------------------------------------------------------------
t_help() {
    conv --help
    want_rc 0 && want_out "vit_b_16-c867db91\.pth -o vit_b_16\.safetensors" &&
        want_out "ringvit embed talk\.mp4 --model vit_b_16\.safetensors" &&
        want_out "--unsafe-pickle" && want_out "runs any code"
}
t_cli_plain() {
    printf 'an older file\n' >A.safetensors
    conv A.pth -o A.safetensors
    want_rc 0 && want_out "^A\.pth: 30 tensors, .* -> A\.safetensors$" || return 1
    cmp -s A.safetensors A_inproc.safetensors || { why="the command's bytes differ from main()'s"; return 1; }
    no_tmp_files
}
t_resnet() {
    case_of resnet && want_rc 1 && want_no_out &&
        want_err "resnet\.pth is not a torchvision VisionTransformer checkpoint: missing conv_proj\.weight" &&
        want_err "class_token" && want_absent resnet.safetensors
}
t_cli_missing() {
    conv no-such.pth -o x.safetensors
    want_rc 1 && want_err "no-such\.pth: no such file" && want_absent x.safetensors
}
t_cli_out_dir() {
    mkdir -p outdir
    conv A.pth -o outdir
    want_rc 1 && want_err "outdir: it exists and is a directory" && [ -d outdir ] &&
        [ -z "$(ls -A outdir)" ] || { why="${why:-the directory was changed}"; return 1; }
}
t_cli_out_link() {
    printf 'keep me\n' >target && ln -sf target link.safetensors
    conv A.pth -o link.safetensors
    want_rc 1 && want_err "link\.safetensors: it exists and is a symbolic link" &&
        [ -L link.safetensors ] && [ "$(cat target)" = "keep me" ] ||
        { why="${why:-the link or its target was changed}"; return 1; }
}
t_cli_bad_flag() {
    conv A.pth -o y.safetensors --bogus
    want_rc 2 && want_no_out && want_err "--bogus" && want_absent y.safetensors
}
t_cli_no_out() { conv A.pth; want_rc 2 && want_err "-o"; }
t_cli_no_input() { conv -o y.safetensors; want_rc 2 && want_err "INPUT"; }
t_cli_same() { conv A.pth -o A.pth; want_rc 2 && want_err "is the input"; }
t_no_tmp() { no_tmp_files; }

# ---- ringvit reads the output as torchvision's model -----------------------------------
# compare_tokens E.safetensors REF.npy: tokens (1 + 16, D), CLS first, within 1e-4
# relative of torchvision's float64 run (each token against its own largest value).
compare_tokens() {
    "$PY" - "$1" "$2" >"$tmp/cmp" 2>&1 <<'EOF' || { why="$(tail -n 1 "$tmp/cmp")"; return 1; }
import json, struct, sys
import numpy as np
raw = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
head = json.loads(raw[8:8 + n])
head.pop("__metadata__", None)
dt = {"F32": "<f4", "F64": "<f8", "I64": "<i8", "U8": "u1"}
t = {k: np.frombuffer(raw[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]],
                      dt[v["dtype"]]).reshape(v["shape"]) for k, v in head.items()}
ref = np.load(sys.argv[2])
got = t["tokens"].astype(np.float64)
if got.shape != ref.shape:
    sys.exit("tokens %s, torchvision %s" % (got.shape, ref.shape))
mod = t["token_modality"]
if mod[0] != 2 or (mod[1:] != 0).any():
    sys.exit("token_modality %s: want the CLS first, then video" % mod.tolist())
pos = t["token_pos"]
if [tuple(p) for p in pos[1:, 1:]] != [(y, x) for y in range(4) for x in range(4)]:
    sys.exit("patches not in row order: %s" % pos[1:].tolist())
err = np.abs(got - ref).max(axis=1) / np.abs(ref).max(axis=1)
print("largest relative error %.2g" % err.max())
if not err.max() <= 1e-4:
    sys.exit("token %d differs from torchvision by %.3g relative" % (err.argmax(), err.max()))
EOF
    note=$(tail -n 1 "$tmp/cmp")
}
t_embed() {
    run_exe embed img.png --model A.safetensors --tokens -o e.safetensors
    want_rc 0 && compare_tokens e.safetensors ref_A.npy || return 1
    if grep -q 'ignoring' "$tmp/err"; then why="ringvit ignored tensors of the file"; return 1; fi
}
t_embed_head() {
    run_exe embed img.png --model A_head.safetensors --tokens -o eh.safetensors
    want_rc 0 && want_err "ignoring 2 unknown tensors.*'heads\.head\.(bias|weight)'" &&
        compare_tokens eh.safetensors ref_A.npy
}
t_embed_heads_flag() {
    run_exe embed img.png --model B.safetensors --heads 3 --tokens -o eb.safetensors
    want_rc 0 && compare_tokens eb.safetensors ref_B.npy
}

check driver t_driver
check convert-plain t_plain
check convert-model-wrapped t_wrapped
check convert-module-prefix t_module
check convert-model_state-module t_ddp
check convert-legacy-mlp-names t_legacy
check refuse-pickled-module t_whole_refused
check convert-pickled-module-unsafe t_whole_unsafe
check keep-head t_keep_head
check half-to-f32 t_half
check keep-dtype t_keep_dtype
check heads-note-d96 t_heads_note
check refuse-missing-layer-tensor t_broken
check refuse-truncated t_truncated
check refuse-garbage t_garbage
check fail-mid-write-nospace t_nospace
check fail-mid-write-sigterm t_sigterm
check refuse-resnet t_resnet
check help t_help
check command-plain t_cli_plain
check refuse-missing-input t_cli_missing
check refuse-out-directory t_cli_out_dir
check refuse-out-symlink t_cli_out_link
check usage-bad-flag t_cli_bad_flag
check usage-no-output t_cli_no_out
check usage-no-input t_cli_no_input
check usage-output-is-input t_cli_same
if [ "$have_exe" -eq 1 ]; then
    check embed-equals-torchvision t_embed
    check embed-keep-head-warns t_embed_head
    if "$EXE" embed --help 2>/dev/null | grep -q -- '--heads'; then
        check embed-heads-3-d96 t_embed_heads_flag
    else
        skip embed-heads-3-d96 "ringvit embed has no --heads flag (the D 96 file needs 3 heads)"
    fi
else
    skip embed-equals-torchvision "no ringvit executable"
    skip embed-keep-head-warns "no ringvit executable"
fi
check no-temporary-files t_no_tmp

if [ "$skipped" -gt 0 ]; then
    echo "$pass passed, $fail failed, $skipped skipped"
else
    echo "$pass passed, $fail failed"
fi
if [ "$fail" -ne 0 ]; then
    echo "failed:$failed"
    exit 1
fi
[ "$have_exe" -eq 1 ] || exit 77
exit 0
