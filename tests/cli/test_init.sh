#!/bin/sh
# shellcheck disable=SC2317 # the t_* checks are called indirectly, through check()
# test_init.sh EXE: `ringvit init`: exit codes (0 ok, 1 failure, 2 usage error),
# help, the summary line and --json, determinism of a seed, and (when
# /usr/bin/python3 has torch and torchvision) that a written T = 1 file loads
# into torchvision's VisionTransformer with only the classifier head missing.
# Run by ctest as `sh test_init.sh $<TARGET_FILE:ringvit_cli>`; POSIX sh only.
# Prints one line per check, then "N passed, M failed"; exits 1 on any failure.

EXE=$1
if [ -z "$EXE" ] || [ ! -x "$EXE" ]; then
    echo "usage: sh test_init.sh PATH/TO/ringvit" >&2
    exit 2
fi

tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT INT TERM

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
    [ "$rc" -eq "$1" ] || { why="exit status $rc, want $1"; return 1; }
}
want_out() {
    grep -Eq -- "$1" "$tmp/out" || { why="stdout lacks /$1/"; return 1; }
}
want_err() {
    grep -Eq -- "$1" "$tmp/err" || { why="stderr lacks /$1/"; return 1; }
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
        if [ -s "$tmp/out" ]; then echo "     stdout:"; head -n 20 "$tmp/out" | sed 's/^/     | /'; fi
        if [ -s "$tmp/err" ]; then echo "     stderr:"; head -n 20 "$tmp/err" | sed 's/^/     | /'; fi
    fi
}

# The hash from a summary line "init: ..., hash H -> FILE".
hash_of() {
    sed -n 's/.*hash \([0-9a-f]\{16\}\) -> .*/\1/p' "$tmp/out"
}

t_help() {
    run_exe init --help
    want_rc 0 && want_out "usage: ringvit init" && want_out "example:"
}
t_listed() {
    run_exe --help
    want_rc 0 && want_out "^  init "
}
t_no_preset() {
    run_exe init -o "$tmp/x.safetensors"
    want_rc 2 && want_err "ringvit: init: .*--preset" && [ ! -e "$tmp/x.safetensors" ]
}
t_no_output() {
    run_exe init --preset tiny
    want_rc 2 && want_err "give -o"
}
t_bad_preset() {
    run_exe init --preset huge -o "$tmp/x.safetensors"
    want_rc 2 && want_err "huge"
}
t_bad_heads() {
    run_exe init --preset tiny --heads 5 -o "$tmp/x.safetensors"
    want_rc 2 && want_err "heads 5"
}
t_bad_flag() {
    run_exe init --preset tiny --bogus -o "$tmp/x.safetensors"
    want_rc 2 && want_err "--bogus"
}
t_bad_seed() {
    run_exe init --preset tiny --seed -1 -o "$tmp/x.safetensors"
    want_rc 2 && want_err "--seed"
}
t_unwritable() {
    run_exe init --preset tiny -o "$tmp/no/such/dir/x.safetensors"
    want_rc 1 && want_err "^ringvit: "
}
t_summary() {
    run_exe init --preset tiny --seed 1 -o "$tmp/a.safetensors"
    want_rc 0 || return 1
    want_out "^init: tiny, 5760192 parameters, seed 1, hash [0-9a-f]{16} -> " || return 1
    [ -s "$tmp/a.safetensors" ] || { why="no file written"; return 1; }
    h1=$(hash_of)
    run_exe init --preset tiny --seed 1 -o "$tmp/b.safetensors"
    want_rc 0 || return 1
    [ "$(hash_of)" = "$h1" ] || { why="same seed, another hash"; return 1; }
    cmp -s "$tmp/a.safetensors" "$tmp/b.safetensors" || { why="same seed, other bytes"; return 1; }
    run_exe init --preset tiny --seed 2 -o "$tmp/b.safetensors"
    want_rc 0 || return 1
    [ "$(hash_of)" != "$h1" ] || { why="another seed, same hash"; return 1; }
}
t_json() {
    run_exe init --preset tiny --tubelet 1 --patch 16 --grid 4 --no-cls --heads 6 --json \
        -o "$tmp/c.safetensors"
    want_rc 0 || return 1
    /usr/bin/python3 -c '
import json, sys
d = json.load(sys.stdin)
c = d["config"]
assert d["preset"] == "tiny" and c["preset"] == "custom", d
assert c["tubelet"] == 1 and c["grid"] == 4 and c["cls"] == 0 and c["heads"] == 6, c
assert len(d["hash"]) == 16 and d["params"] > 5000000, d
assert d["file"].endswith("c.safetensors"), d
' <"$tmp/out" 2>"$tmp/err" || { why="JSON output is wrong"; return 1; }
}
# The T = 1 file in torchvision (python3-torch and python3-torchvision are test
# dependencies, installed by scripts/install-deps.sh).
t_torchvision() {
    if ! /usr/bin/python3 -c 'import torch, torchvision' 2>/dev/null; then
        why="no torch/torchvision in /usr/bin/python3 (scripts/install-deps.sh installs them)"
        return 1
    fi
    run_exe init --preset tiny --tubelet 1 --grid 4 --seed 3 -o "$tmp/tv.safetensors"
    want_rc 0 || return 1
    /usr/bin/python3 - "$tmp/tv.safetensors" >"$tmp/out" 2>"$tmp/err" <<'EOF'
import json, struct, sys
import numpy as np, torch, torchvision
b = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", b[:8])[0]
h = json.loads(b[8:8 + n])
meta = h.pop("__metadata__")
assert meta["format"] == "pt", meta
c = json.loads(meta["ringvit.config"])
sd = {}
for k, v in h.items():
    s, e = v["data_offsets"]
    assert v["dtype"] == "F32", (k, v)
    a = np.frombuffer(b[8 + n + s:8 + n + e], dtype="<f4").reshape(v["shape"])
    sd[k] = torch.from_numpy(a.copy())
m = torchvision.models.VisionTransformer(
    image_size=c["grid"] * c["patch"], patch_size=c["patch"], num_layers=c["layers"],
    num_heads=c["heads"], hidden_dim=c["dim"], mlp_dim=c["mlp"])
r = m.load_state_dict(sd, strict=False)
assert sorted(r.missing_keys) == ["heads.head.bias", "heads.head.weight"], r.missing_keys
assert all(k.startswith("ringvit.") for k in r.unexpected_keys), r.unexpected_keys
# The init's spread matches torchvision's own (conv_proj std sqrt(1/fan_in)).
std = sd["conv_proj.weight"].std().item()
assert abs(std / (1 / (3 * 16 * 16)) ** 0.5 - 1) < 0.05, std
with torch.no_grad():
    y = m(torch.randn(1, 3, c["grid"] * c["patch"], c["grid"] * c["patch"]))
assert y.shape == (1, 1000) and torch.isfinite(y).all()
print("torchvision ok")
EOF
    [ $? -eq 0 ] || { why="torchvision could not use the file"; return 1; }
}

check help t_help
check listed t_listed
check no_preset t_no_preset
check no_output t_no_output
check bad_preset t_bad_preset
check bad_heads t_bad_heads
check bad_flag t_bad_flag
check bad_seed t_bad_seed
check unwritable t_unwritable
check summary t_summary
check json t_json
check torchvision t_torchvision

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ] || { echo "failed:$failed"; exit 1; }
exit 0
