#!/usr/bin/env bash
# tests/devbuild.sh: gather a built tree's binaries into .devbuild/ for a GPU machine without Lua/cmocka headers
# usage: bash tests/devbuild.sh [build-dir] [out-dir]   (binaries stripped, test caches as .db.xz)   (then: KF_BUILD=.devbuild bash tests/device_run.sh ...)
set -eu
B=${1:-build}; D=${2:-.devbuild}
mkdir -p "$D/tests" "$D/devlibs"
cp -a "$B"/kforge "$B"/libkforge.so* "$B"/libkforge_rt.so* "$D/"
[ -x "$B/kf_api_costs" ] && cp -a "$B/kf_api_costs" "$D/"
for t in test_attn_gpu test_api_gpu test_kda_gpu test_kda_api_gpu test_tune_gpu test_parts_gpu test_mutants \
         test_kda_mutants; do
  [ -x "$B/tests/$t" ] && cp -a "$B/tests/$t" "$D/tests/"
done
# the tests' binary caches compress ~10x (xz): device_run.sh unpacks them
for db in "$B"/tests/*.db; do [ -f "$db" ] && xz -T2 -6 -c "$db" > "$D/tests/$(basename "$db").xz"; done
for l in cmocka lua5.4; do
  for f in $(ldconfig -p | awk -v l="lib$l.so" 'index($1, l) == 1 {print $NF}'); do cp -aL "$f" "$D/devlibs/"; done
done
strip --strip-unneeded "$D"/kforge "$D"/libkforge*.so.*.*.* "$D"/tests/test_* 2>/dev/null || true
[ -x "$D/kf_api_costs" ] && strip --strip-unneeded "$D/kf_api_costs"
du -sh "$D"
