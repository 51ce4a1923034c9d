#!/usr/bin/env bash
# install-deps.sh [run|test]: installs the Debian 12 packages ringvit needs.
#   run    what building and running need: the compiler, CMake, FFmpeg, oneDNN,
#          OpenMPI, jansson, and python3 with NumPy (the Python package and the
#          quickstart's reader); scripts/quickstart.sh installs this set.
#   test   the run set plus what the tests need: Criterion, clang and its OpenMP
#          runtime (the fuzz targets), the peers that make golden data under
#          tests/peer (torch, torchvision, torchaudio, PyAV), FAISS (the export
#          test builds an index from the shards) and the Python package's tests
#          (pytest, pip, setuptools); scripts/test.sh installs it.
# With no argument: everything (the test set). Idempotent: packages already present
# are left alone, and apt is not touched at all when everything is installed.
set -euo pipefail

run_packages=(
  # build
  build-essential cmake pkg-config
  # media (ingest/tokenize) and the ffmpeg command (the quickstart's sample, the tests)
  libavformat-dev libavcodec-dev libavutil-dev libswscale-dev libswresample-dev ffmpeg
  # compute, communication, JSON
  libdnnl-dev libopenmpi-dev openmpi-bin libjansson-dev
  # the Python package (apps/python) and reading outputs with NumPy
  python3 python3-numpy
)
test_packages=(
  # the Criterion tests
  libcriterion-dev
  # the fuzz targets (scripts/fuzz.sh: libFuzzer, and clang's OpenMP runtime)
  clang-14 libomp-14-dev
  # peers that generate golden data under tests/peer
  python3-torch python3-torchvision python3-torchaudio python3-av
  # the export test: an inner-product index from the .npy shards
  python3-faiss
  # the Python package's tests (apps/python: pytest, pip install of the package)
  python3-pytest python3-pip python3-setuptools
)

set_name=${1:-test}
case $set_name in
run) packages=("${run_packages[@]}") ;;
test | all)
  set_name="test"
  packages=("${run_packages[@]}" "${test_packages[@]}")
  ;;
-h | --help)
  sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'
  exit 0
  ;;
*)
  echo "install-deps: unknown set '$set_name' (known: run, test)" >&2
  exit 2
  ;;
esac

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#packages[@]} packages of the $set_name set present"
  exit 0
fi

sudo=""
if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
echo "install-deps: installing ${missing[*]}"
$sudo apt-get update -q
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends "${missing[@]}"
