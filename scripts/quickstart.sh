#!/usr/bin/env bash
# quickstart.sh: from a fresh checkout to a first ringvit run. Installs the
# dependencies, builds build/ in Release, then shows the build facts and times
# the attention kernel. (Once `ringvit embed` exists this will generate a sample
# recording with ffmpeg and embed it.)
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"

echo "== installing dependencies"
scripts/install-deps.sh

echo "== building build/ (Release)"
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release
cmake --build build -j"$(nproc)"

echo "== build/ringvit --version"
build/ringvit --version

echo "== build/ringvit bench attention --seq 4096 --heads 4 --dim 64"
build/ringvit bench attention --seq 4096 --heads 4 --dim 64

echo
echo "quickstart: built build/ringvit, printed its version and build facts, and timed"
echo "one attention block (4096 tokens, 4 heads of 64)."
echo "Next: scripts/test.sh runs the test suite; build/ringvit --help lists the commands."
