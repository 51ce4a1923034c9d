#!/usr/bin/env bash
# install-deps.sh: installs exactly the Debian 12 packages ringvit needs to build,
# test and run. Idempotent: packages already present are left alone, and apt is
# not touched at all when everything is installed.
set -euo pipefail

packages=(
  # build
  build-essential cmake pkg-config
  # media (ingest/tokenize) and the ffmpeg command used by tests and quickstart
  libavformat-dev libavcodec-dev libavutil-dev libswscale-dev libswresample-dev ffmpeg
  # compute, communication, JSON, tests
  libopenblas-dev libopenblas-openmp-dev libopenmpi-dev openmpi-bin libjansson-dev libcriterion-dev
  # the fuzz targets (scripts/fuzz.sh: libFuzzer, and clang's OpenMP runtime)
  clang-14 libomp-14-dev
  # peers that generate golden data under tests/peer
  python3 python3-numpy python3-torch python3-torchvision python3-torchaudio python3-av
  # the Python package's tests (apps/python: pytest, pip install of the package)
  python3-pytest python3-pip python3-setuptools
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#packages[@]} packages present"
  exit 0
fi

sudo=""
if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
echo "install-deps: installing ${missing[*]}"
$sudo apt-get update -q
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends "${missing[@]}"
