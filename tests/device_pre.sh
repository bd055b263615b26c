#!/usr/bin/env bash
# tests/device_pre.sh: issue 19's prefill checks in one device call, from a build made elsewhere: the GPU suite's
# prefill cases (test_attn_gpu, its binaries first compiled on the GPU machine's cores with the GPU hidden), then
# sustained kforge run figures of parameter sets against each other on prefill rows, interleaved by round, then
# (MATRIX set) the harness's prefill-matrix rows against SDPA's cuDNN backend. Logs tarred under $OUT, summary.txt
# beside them.
# usage: KF_BUILD=.devbuild [TESTS='*prefill_tma* *features*'] [PARAMS='sched=grid sched=persist'] [ROWS='...']
#        [ROUNDS=1] [MATRIX=d64] [NCU='...'] [BUDGET_S=500] bash tests/device_pre.sh
#   PARAMS: --params overrides on each row's default (space-separated sets, "default" for none); ROWS: shape fields
#   after dtype=bf16,causal=1 (space-separated; a row ending in @N runs K/V in pages of N rows); MATRIX: --shapes filter of bench/sets/prefill-matrix.json ("all":
#   every row; unset: no harness); NCU: rows (as ROWS, each optionally "|params" for --params) of which Nsight Compute
#   reads one launch, every section (--set full): the report ncu_<row>.ncu-rep, its details page (.txt) and raw
#   metrics (.raw.csv, the warp stall reasons among them); TESTS=" ": no suite.
KF_LOGS=pre; KF_BUDGET_DEFAULT=500; . "$(dirname "$0")/device_lib.sh"
export KFORGE_TEST_DB=/tmp/kf_pre_test.db
# 1. correctness: the suite's filters (tests/device_lib.sh)
attn_suite ${TESTS-'*prefill*' '*features*'}
# 2. figures, sustained (kforge run: warm-up to steady state, back-to-back calls over rotating inputs; clock and power)
ROWS=${ROWS:-"d=64,b=8,hq=32,hkv=8,sq=2k,skv=2k d=64,b=2,hq=32,hkv=8,sq=8k,skv=8k d=128,b=1,hq=32,hkv=8,sq=16k,skv=16k d=256,b=4,hq=32,hkv=8,sq=4k,skv=4k"}
PARAMS=${PARAMS:-"default"}
for r in $(seq 1 "${ROUNDS:-1}"); do
  for row in $ROWS; do
    for pr in $PARAMS; do
      [ "$(left 30)" -lt 25 ] && { say "run $row $pr: skipped (budget)"; continue; }
      split_row "$row"
      say "run r$r $row $pr: $(run_row "$OUT/run_r${r}_$(echo "$row $pr" | tr -c 'a-z0-9=\n' '_').json" \
        attn_prefill "dtype=bf16,causal=1,$shp" $pg $( [ "$pr" != default ] && echo --params "$pr" ) \
        --db /tmp/kf_pre_run.db)"
    done
  done
done
# 3. the harness: prefill-matrix rows against cuDNN, same process, sustained
if [ -n "${MATRIX:-}" ] && [ "$(left 30)" -gt 60 ]; then
  ( cd "$ROOT" && KFORGE_LIB=$B/libkforge.so KFORGE_DB=/tmp/kf_pre_bench.db PYTHONPATH=$ROOT/python PYTHONUNBUFFERED=1 \
      timeout "$(left 15)" python3 -m bench run --set prefill-matrix $( [ "$MATRIX" != all ] && echo --shapes "$MATRIX" ) \
      --contenders kforge-default,sdpa-cudnn --rounds 2 --samples 10 --timing sustained --time-budget "$(left 40)" \
      --out "$OUT/bench" --no-append --no-plots > "$OUT/bench.log" 2>&1 )
  say "harness (prefill-matrix ${MATRIX}): exit $?"
  grep -E "^\| prefill|^\|  \| " "$OUT/bench/results.md" 2>/dev/null | cut -c1-200 | tee -a "$SUM"
fi
# 4. Nsight Compute, one launch of each NCU row (after the check's and two more)
for row in ${NCU:-}; do
  command -v ncu > /dev/null || { say "ncu: not found"; break; }
  [ "$(left 20)" -lt 60 ] && { say "ncu $row: skipped (budget)"; continue; }
  prm=$( [ "${row#*|}" != "$row" ] && echo "--params ${row#*|}" ); r=${row%%|*}
  split_row "$r"
  f="$OUT/ncu_$(echo "$row" | tr -c 'a-z0-9=\n' '_')"
  timeout "$(left 15)" ncu --set full -k regex:kf_attn_prefill --launch-skip 3 --launch-count 1 -f -o "$f" \
    "$K" run attn_prefill --shape "dtype=bf16,causal=1,$shp" $pg $prm --timing burst --db /tmp/kf_pre_run.db --quiet \
    > "$f.log" 2>&1
  rc=$?
  # the details page (sections and rules) and every raw metric (the warp stall reasons among them), as text
  ncu --import "$f.ncu-rep" --page details --print-units base > "$f.txt" 2>&1
  ncu --import "$f.ncu-rep" --page raw --csv > "$f.raw.csv" 2>&1
  f="$f.txt"
  say "ncu $row: exit $rc $(grep -E '^ +(Duration|DRAM Throughput|L2 Hit Rate|Compute \(SM\) Throughput) ' "$f" | tr -s ' ' | tr '\n' ';')"
  say "  stalls: $(python3 "$ROOT/tests/ncu_stalls.py" "${f%.txt}.raw.csv" 2>&1 | tr '\n' ' ')"
done
say "done"
pack
