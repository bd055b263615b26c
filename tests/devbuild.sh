#!/usr/bin/env bash
# tests/devbuild.sh: gather a built tree's binaries into .devbuild/ for a GPU machine without Lua/cmocka headers
# usage: bash tests/devbuild.sh [build-dir] [out-dir]   (then: KF_BUILD=.devbuild bash tests/device_run.sh ...)
set -eu
B=${1:-build}; D=${2:-.devbuild}
mkdir -p "$D/tests" "$D/devlibs"
cp -a "$B"/kforge "$B"/libkforge.so* "$B"/libkforge_rt.so* "$D/"
[ -x "$B/kf_api_costs" ] && cp -a "$B/kf_api_costs" "$D/"
for t in test_attn_gpu test_api_gpu test_kda_gpu test_kda_api_gpu test_tune_gpu test_mutants; do
  [ -x "$B/tests/$t" ] && cp -a "$B/tests/$t" "$D/tests/"
done
for db in "$B"/tests/*.db; do [ -f "$db" ] && cp -a "$db" "$D/tests/"; done
for l in cmocka lua5.4; do
  for f in $(ldconfig -p | awk -v l="lib$l.so" 'index($1, l) == 1 {print $NF}'); do cp -aL "$f" "$D/devlibs/"; done
done
du -sh "$D"
