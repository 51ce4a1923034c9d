#!/usr/bin/env bash
# device-bundle.sh: prepares .devbundle/, what scripts/device-check.sh runs on a
# GPU machine that lacks this project's build dependencies (the device image has
# CUDA, CMake and Python but no FFmpeg, oneDNN, jansson or Criterion, and
# nothing can be installed there). Run it here, where they are installed, before
# a device session; then call the device with carry [".devbundle"] and
# `bash scripts/device-check.sh`.
#
# It builds build-bundle/ with CUDA (sm_90), without FFmpeg (RINGVIT_MEDIA=OFF:
# compute only), MPI or -march=native, and packs into .devbundle/bundle.tar.xz
# (about 12 MB; the device call's whole tree must stay under 64 MiB):
#   bin/ringvit, lib/libringvit.so.0, tests/test_<gpu tests>,
#   lib/ every shared library they need that is neither glibc's, the compiler
#        runtime's (libstdc++, libgcc_s, libgomp: the device's own are used, and
#        fallback/ holds ours for a machine without them) nor CUDA's (the
#        device's toolkit provides cuBLAS, the runtime and NCCL);
#   manifest.txt what was built from (commit, flags, library list).
# The binaries need glibc 2.34 or newer.
set -euo pipefail

cd "$(dirname "$0")/.."
ROOT=$(pwd)
BUILD=build-bundle
OUT=$BUILD/stage
JOBS=$(nproc)

cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DRINGVIT_CUDA=ON -DRINGVIT_MEDIA=OFF \
    -DRINGVIT_MPI=OFF -DRINGVIT_NATIVE=OFF -DRINGVIT_TESTS=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
    -DCMAKE_BUILD_RPATH_USE_ORIGIN=ON >/dev/null
gpu_tests=$(ctest --test-dir "$BUILD" -L gpu -N | sed -n 's/^ *Test *#[0-9]*: *\([A-Za-z0-9_]*\).*/\1/p' |
    tr '\n' ' ')
targets=(ringvit_cli)
for t in $gpu_tests; do
    targets+=("test_$t")
done
cmake --build "$BUILD" -j"$JOBS" --target "${targets[@]}"

rm -rf "$OUT"
mkdir -p "$OUT/bin" "$OUT/lib" "$OUT/lib/fallback" "$OUT/tests"
cp "$BUILD/ringvit" "$OUT/bin/"
cp -L "$BUILD/libringvit.so.0" "$OUT/lib/"
for t in $gpu_tests; do
    cp "$BUILD/tests/test_$t" "$OUT/tests/"
done

# Shared libraries: glibc's stay the machine's; so do CUDA's and the driver's.
skip='^(linux-vdso|ld-linux|libc\.so|libm\.so|libdl\.so|libpthread\.so|librt\.so|libresolv\.so|libutil\.so|libcuda\.so|libcudart|libcublas|libnccl|libnvidia|libringvit)'
compiler='^(libstdc\+\+\.so|libgcc_s\.so|libgomp\.so)'
for f in "$OUT"/bin/* "$OUT"/tests/* "$OUT"/lib/libringvit.so.0; do
    LD_LIBRARY_PATH="$ROOT/$BUILD" ldd "$f"
done | awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}' | sort -u |
    while read -r name path; do
        if [[ $name =~ $skip ]]; then
            continue
        elif [[ $name =~ $compiler ]]; then
            cp -L "$path" "$OUT/lib/fallback/$name"
        else
            cp -L "$path" "$OUT/lib/$name"
        fi
    done

{
    echo "ringvit device bundle"
    echo "commit: $(git rev-parse HEAD)$(git diff --quiet HEAD || echo ' (with uncommitted changes)')"
    echo "built: $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(. /etc/os-release && echo "$PRETTY_NAME"), $(ldd --version | head -n 1)"
    echo "flags: CUDA sm_90, RINGVIT_MEDIA=OFF, RINGVIT_MPI=OFF, RINGVIT_NATIVE=OFF"
    echo "gpu tests: $gpu_tests"
    echo "libraries:"
    (cd "$OUT/lib" && ls -1 ./*.so* fallback/*.so* 2>/dev/null | sed 's|^\./||; s/^/  /')
} >"$OUT/manifest.txt"
mkdir -p .devbundle
rm -f .devbundle/bundle.tar.xz
tar -C "$OUT" -cf - . | xz -T"$JOBS" -6 >.devbundle/bundle.tar.xz
cat "$OUT/manifest.txt"
ls -l .devbundle/bundle.tar.xz
