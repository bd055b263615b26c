#!/usr/bin/env bash
# tests/device_export.sh: the third use on a GPU machine, as a user walks it: a tuned database -> kforge export ->
# kforge import into a fresh database -> examples/serve.c linked through pkg-config against the installed
# libkforge (database, JIT allowed) and libkforge_rt (the bundle alone, JIT forbidden): outputs byte for byte equal
# usage: KF_BUILD=.devbuild KF_PREFIX=.devbuild/prefix bash tests/device_export.sh TUNED.db     (logs under $OUT)
set -u
OUT=${OUT:-/tmp/kf_out}; mkdir -p "$OUT"
ROOT=$(cd "$(dirname "$0")/.." && pwd)
B=$(cd "$ROOT/${KF_BUILD:-.devbuild}" && pwd)
P=$(cd "$ROOT/${KF_PREFIX:-.devbuild/prefix}" && pwd)
DB=${1:?usage: device_export.sh TUNED.db}
CUDA=${CUDA_HOME:-/usr/local/cuda}
export LD_LIBRARY_PATH=$B/devlibs:$CUDA/lib64:${LD_LIBRARY_PATH:-}
K=$P/bin/kforge
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -n 1)
W=/tmp/kf_export; rm -rf "$W"; mkdir -p "$W"
step() { echo "\$ $*"; "$@"; local rc=$?; echo "  (exit $rc)"; return $rc; }
{
step "$K" export --gpu "$GPU" --db "$DB" -o "$W/gpu.kfb"
step "$K" import "$W/gpu.kfb" --db "$W/fresh.db"
step "$K" report --db "$W/fresh.db"
export PKG_CONFIG_PATH=$P/lib/pkgconfig:$P/lib64/pkgconfig
for lib in kforge kforge_rt; do
  step cc -O2 -std=c11 -I"$CUDA/include" examples/serve.c -o "$W/serve_$lib" $(pkg-config --cflags --libs $lib) \
    -L"$CUDA/lib64" -lcudart -lm -Wl,-rpath,"$P/lib"
done
step "$W/serve_kforge" --db "$DB" "$W/out_db.bin"
step "$W/serve_kforge_rt" --bundle "$W/gpu.kfb" "$W/out_bundle.bin"
step env LD_LIBRARY_PATH= "$W/serve_kforge_rt" --bundle "$W/gpu.kfb" "$W/out_bundle2.bin" 2>&1 | tail -n 2
sha256sum "$W"/out_*.bin
if cmp -s "$W/out_db.bin" "$W/out_bundle.bin" && [ -s "$W/out_db.bin" ]; then
  echo "bundle (libkforge_rt, JIT forbidden) = database (libkforge): bit for bit, $(stat -c %s "$W/out_db.bin") bytes"
else
  echo "bundle and database outputs DIFFER"
fi
ldd "$W/serve_kforge_rt" | grep -E "kforge|lua|nvrtc" 
} 2>&1 | (cd "$ROOT" && cat) | tee "$OUT/export.log"
