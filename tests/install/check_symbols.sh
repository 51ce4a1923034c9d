#!/bin/sh
# check_symbols.sh LIB HEADER_OR_DIR...: libringvit's public surface is exactly
# what its installed headers mark RV_API (kernels/rv_api.h). LIB is a shared
# libringvit; each further argument is a header, or a folder whose *.h are read
# (the installed include/ringvit). Fails, naming each one, for a symbol in LIB's
# dynamic table (nm -D --defined-only) that no header marks RV_API (an internal
# function leaking), and for an RV_API name LIB does not export (a public
# function left hidden, or not built). The functions of rv_cuda.h are absent
# together from a build without CUDA (its header says so); present, all must be.
# A marked declaration starts its line with RV_API and names what it declares
# on that line (as every installed header writes them).
# Run by ctest on the build tree (install_symbols) and by scripts/test.sh on
# the installed library.
set -eu

if [ $# -lt 2 ]; then
  echo "usage: check_symbols.sh LIB HEADER_OR_DIR..." >&2
  exit 2
fi
lib=$1
shift
[ -f "$lib" ] || { echo "check_symbols: no library $lib" >&2; exit 2; }

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

: >"$work/headers"
for a in "$@"; do
  if [ -d "$a" ]; then
    find "$a" -maxdepth 1 -name '*.h' >>"$work/headers"
  elif [ -f "$a" ]; then
    echo "$a" >>"$work/headers"
  else
    echo "check_symbols: no header or folder $a" >&2
    exit 2
  fi
done

# Each marked name: the last identifier before the first '(', '[', '=' or ';'
# of a line that starts with RV_API.
marked() {
  # shellcheck disable=SC2046 # one word per header path (no spaces in them)
  grep -h '^RV_API[[:space:]]' $(cat "$1") |
    sed -e 's/^RV_API//' -e 's/[(;=[].*//' |
    grep -o '[A-Za-z_][A-Za-z_0-9]*[[:space:]]*$' | tr -d ' \t' | sort -u
}
marked "$work/headers" >"$work/api"
grep '/rv_cuda\.h$' "$work/headers" >"$work/cuda_header" || true
if [ -s "$work/cuda_header" ]; then
  marked "$work/cuda_header" >"$work/cuda"
else
  : >"$work/cuda"
fi

nm -D --defined-only "$lib" | awk 'NF >= 3 { print $3 }' | sed 's/@.*//' | sort -u \
  >"$work/exported"
[ -s "$work/exported" ] || { echo "check_symbols: $lib exports nothing (not a shared library?)" >&2; exit 1; }
[ -s "$work/api" ] || { echo "check_symbols: no RV_API declaration in the headers" >&2; exit 1; }

status=0
comm -23 "$work/exported" "$work/api" >"$work/leaked"
if [ -s "$work/leaked" ]; then
  status=1
  echo "check_symbols: $lib exports $(wc -l <"$work/leaked") symbol(s) no installed header marks RV_API:"
  sed 's/^/  /' "$work/leaked"
fi
comm -13 "$work/exported" "$work/api" >"$work/missing"
# A build without CUDA: every rv_cuda.h name missing is allowed.
if [ -s "$work/cuda" ] && ! comm -12 "$work/exported" "$work/cuda" | grep -q .; then
  comm -23 "$work/missing" "$work/cuda" >"$work/missing2"
  mv "$work/missing2" "$work/missing"
fi
if [ -s "$work/missing" ]; then
  status=1
  echo "check_symbols: $(wc -l <"$work/missing") RV_API name(s) $lib does not export:"
  sed 's/^/  /' "$work/missing"
fi
if [ $status -eq 0 ]; then
  echo "check_symbols: $lib exports $(wc -l <"$work/exported") symbols, each marked RV_API" \
    "($(wc -l <"$work/api") marked)"
fi
exit $status
