# cli_lib.sh: what the command-line test scripts share, sourced by them (POSIX sh):
# running the tool with its output captured, the expectations a check chains, and
# check NAME FUNCTION, which runs one check and counts it. The sourcing script sets
# EXE (the ringvit executable) and tmp (its scratch folder) before calling these,
# and ends with cli_summary.
pass=0
fail=0
failed=""
rc=0
why=""

# run_exe ARGS...: ringvit; stdout to $tmp/out, stderr to $tmp/err, status to rc.
run_exe() {
    "$EXE" "$@" >"$tmp/out" 2>"$tmp/err"
    rc=$?
}
want_rc() {
    [ "$rc" -eq "$1" ] || { why="exit status $rc, want $1"; return 1; }
}
want_err() {
    grep -Eq -- "$1" "$tmp/err" || { why="stderr lacks /$1/"; return 1; }
}
want_no_out() {
    [ ! -s "$tmp/out" ] || { why="stdout should be empty"; return 1; }
}

# check NAME FUNCTION: runs FUNCTION; prints "ok NAME" or "FAIL NAME: why" with the
# captured output of the last command.
check() {
    why=""
    if "$2"; then
        pass=$((pass + 1))
        echo "ok   $1"
    else
        fail=$((fail + 1))
        failed="$failed $1"
        echo "FAIL $1: ${why:-check failed}"
        if [ -s "$tmp/out" ]; then echo "     stdout:"; head -n 10 "$tmp/out" | sed 's/^/     | /'; fi
        if [ -s "$tmp/err" ]; then echo "     stderr:"; head -n 10 "$tmp/err" | sed 's/^/     | /'; fi
    fi
}

# cli_summary: "N passed, M failed"; exits 1 when any check failed, else 0.
cli_summary() {
    echo "$pass passed, $fail failed"
    if [ "$fail" -gt 0 ]; then
        echo "failed:$failed"
        exit 1
    fi
    exit 0
}
