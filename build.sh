#!/usr/bin/env bash
# build.sh: install what kforge needs on a Debian machine with the CUDA toolkit, then build it into ./build
set -euo pipefail
cd "$(dirname "$0")"
pkgs="cmake gcc make pkg-config liblua5.4-dev libsqlite3-dev libssl-dev libxxhash-dev libcmocka-dev"
missing=""
for p in $pkgs; do dpkg -s "$p" >/dev/null 2>&1 || missing="$missing $p"; done
if [ -n "$missing" ]; then
  echo "installing:$missing" >&2
  if [ "$(id -u)" -ne 0 ]; then SUDO=sudo; else SUDO=""; fi
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq $missing >/dev/null
fi
if ! command -v nvcc >/dev/null 2>&1 && [ -x /usr/local/cuda/bin/nvcc ]; then
  export PATH=/usr/local/cuda/bin:$PATH
fi
command -v nvcc >/dev/null 2>&1 || { echo "error: the CUDA toolkit (nvcc, NVRTC) is not installed" >&2; exit 1; }
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j"$(nproc)"
