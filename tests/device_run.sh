#!/usr/bin/env bash
# tests/device_run.sh: on a GPU machine, from binaries built elsewhere: GPU tests, kforge run, tune, bench; logs under $OUT
# usage: KF_BUILD=.devbuild bash tests/device_run.sh tests|runs|py|mla|api|tune|bench|pack ...
# KF_BUILD holds kforge, libkforge*.so, tests/ (GPU test binaries and their caches), devlibs/ (cmocka, Lua).
set -u
OUT=${OUT:-/tmp/kf_out}; mkdir -p "$OUT"
ROOT=$(cd "$(dirname "$0")/.." && pwd)
B=$(cd "$ROOT/${KF_BUILD:-build}" && pwd)
export LD_LIBRARY_PATH=$B/devlibs:$B:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export KFORGE_LIB=$B/libkforge.so PYTHONUNBUFFERED=1
K=$B/kforge
DB=${KF_DB:-$B/run.db}
# test caches travel xz-compressed (tests/devbuild.sh)
for z in "$B"/tests/*.db.xz; do
  [ -f "$z" ] && python3 -c 'import lzma,shutil,sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2], "wb"))' "$z" "${z%.xz}"
done
nvidia-smi --query-gpu=name,uuid,driver_version,clocks.sm,clocks.mem --format=csv,noheader > "$OUT/env.txt" 2>&1
for what in "$@"; do
case $what in
tests)
  cd "$B/tests"
  for t in ${TESTS:-test_attn_gpu test_api_gpu test_kda_gpu test_kda_api_gpu test_mutants test_tune_gpu}; do
    timeout ${TEST_TIMEOUT:-400} ./$t > "$OUT/$t.log" 2>&1; rc=$?
    echo "$t: exit $rc; $(grep -E '[0-9]+ passed, [0-9]+ failed|PASSED|FAILED|killed' "$OUT/$t.log" | tail -3 | tr '\n' ' ')"
  done ;;
runs)
  {
  for s in "b=1,sq=1,skv=131072,hq=32,hkv=8" "b=32,sq=1,skv=32768,hq=32,hkv=8" "b=128,sq=1,skv=8192,hq=32,hkv=8" \
           "b=32,sq=1,skv=8192,hq=32,hkv=8" "b=32,sq=2,skv=8192,hq=32,hkv=8" "b=32,sq=4,skv=8192,hq=32,hkv=8" \
           "b=32,sq=8,skv=8192,hq=32,hkv=8" "b=1,sq=2,skv=131072,hq=64,hkv=8" "b=8,sq=4,skv=32768,hq=8,hkv=1"; do
    "$K" run attn_decode --shape "dtype=bf16,d=128,causal=0,$s" --db "$DB" --quiet 2>&1
  done
  for s in "sq=16384,skv=16384,d=128" "sq=4096,skv=4096,d=256" "sq=8192,skv=8192,d=64" "sq=4096,skv=4096,d=128"; do
    "$K" run attn_prefill --shape "dtype=bf16,b=1,hq=32,hkv=8,causal=1,$s" --db "$DB" --quiet 2>&1
  done
  } > "$OUT/runs.log" 2>&1
  grep -E "time|error|FAIL|pass" "$OUT/runs.log" | head -60 ;;
tune)
  "$K" doctor --measure --db "$DB" > "$OUT/doctor.log" 2>&1; tail -n 4 "$OUT/doctor.log"
  timeout ${TUNE_TIMEOUT:-300} "$K" tune --db "$DB" ${TUNE_ARGS:-} > "$OUT/tune.log" 2> "$OUT/tune.err"; echo "tune exit $?"
  tail -n 12 "$OUT/tune.err"
  "$K" report --db "$DB" --markdown > "$OUT/report.md" 2>&1; cat "$OUT/report.md"
  cp "$DB" "$OUT/tuned.db" ;;
py)
  cd "$ROOT/python/tests" && PYTHONPATH=$ROOT/python:$ROOT/python/tests timeout 300 python3 -m unittest -v test_gpu > "$OUT/py.log" 2>&1
  echo "python GPU tests: exit $?; $(grep -E '^(OK|FAILED|Ran )' "$OUT/py.log" | tr '\n' ' ')" ;;
mla)
  cd "$ROOT" && timeout 200 python3 -m bench.mla_torch > "$OUT/mla_torch.md" 2>&1; echo "mla_torch exit $?"; cat "$OUT/mla_torch.md" ;;
api)
  "$B/kf_api_costs" /tmp/kf_api > "$OUT/api.log" 2>&1; echo "kf_api_costs exit $?"; cat "$OUT/api.log"
  cd "$ROOT" && PYTHONPATH=$ROOT/python python3 bench/host_cost.py > "$OUT/host_cost.log" 2>&1; echo "host_cost exit $?"; tail -n 8 "$OUT/host_cost.log" ;;
bench)
  cd "$ROOT" && KFORGE_DB=$DB BENCH_TIME_BUDGET=${BENCH_BUDGET:-400} timeout ${BENCH_TIMEOUT:-560} bash bench/run.sh ${BENCH_ARGS:-} --out "$OUT/bench" > "$OUT/bench.log" 2>&1
  echo "bench exit $?"; tail -n 50 "$OUT/bench.log" ;;
pack)
  # the device tool returns at most 8 files: everything under $OUT as one archive
  tar czf /tmp/kf_logs.tgz -C "$OUT" . && find "$OUT" -mindepth 1 -delete && mv /tmp/kf_logs.tgz "$OUT/logs.tgz"
  echo "packed: $OUT/logs.tgz" ;;
esac
done
