#!/usr/bin/env bash
# tests/device_kda.sh: the KDA GPU work of issue 17 in one device call (~6 min), from a build made elsewhere:
# test_kda_gpu, test_kda_api_gpu and test_kda_mutants side by side (correctness; their NVRTC compiles overlap),
# then the harness KDA rows, sustained, kforge against fla (chunk_kda, fused_recurrent_kda) and the torch
# chunked peer, every contender checked against the fp64 oracle first. Installs the fla wheels from .whl/
# when present (no network). Logs gather in one folder, packed into $OUT/logs.tgz after each stage (the
# device tool brings back at most 8 files); $OUT/summary.txt is the short story.
# usage: KF_BUILD=.devbuild BUDGET_S=360 [SHAPES=id,id] [TESTS=" "] [NCU='shape|params ...'] [TUNE='shape ...']
#        [CONTENDERS=a,b] [HARNESS=0] bash tests/device_kda.sh
#   SHAPES: the harness rows, as --shapes; the Triton cache a call brings back, copied to .triton/cache.tgz and
#   carried, saves the next call fla's compiles. TESTS=" ": no suites; HARNESS=0: no harness. NCU: kda_prefill shapes (kforge run's fields,
#   e.g. n=3,t=17,h=2,hv=4,dk=128,dv=128, optionally "|params"), each kernel's duration from Nsight Compute over one
#   call (every kernel of it) after the check's calls: the kernels' own time beside the harness's time a call. TUNE:
#   kda_prefill / kda_decode shapes ("family:fields") tuned into the harness's database first (the harness's
#   kforge-tuned contender then runs their winners; a packed call's plan shape is n = its sequences, t = ceil(tokens
#   / n)), with TUNE_ARGS (e.g. "--budget 24 --strategy halving": 215 variants are valid at n 3 t 17); CONTENDERS: the
#   harness's contenders (default kforge-default, its control, fla's two, the torch graph). KFORGE_TEMPLATE_DIR (an
#   absolute path) runs the precompile, the suites and the harness on that template folder instead of the build's
#   embedded templates (the tests' cache KF_TEST_DB: one compiled here for that folder, or the device compiles it).
KF_LOGS=kda; KF_BUDGET_DEFAULT=360; . "$(dirname "$0")/device_lib.sh"
export KFORGE_LIB=$B/libkforge.so PYTHONUNBUFFERED=1
result() { grep -hE '[0-9]+ passed, [0-9]+ failed|PASSED|FAILED|killed|comparison\(s\) failed|skipped' "$OUT/$1.log" | tail -n 4 | tr '\n' ' '; }
# the tests' binary caches, when the build brought them compressed (tests/devbuild.sh)
# 0. fla (the KDA peer), installed from the wheels beside the tree, if any
if ls "$ROOT"/.whl/*.whl > /dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site "$ROOT"/.whl/*.whl > "$OUT/pip.log" 2>&1
  export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
  say "fla wheels: pip exit $?; $(python3 -c 'import fla; print("fla", fla.__version__)' 2>&1 | tail -n 1)"
else
  say "fla wheels: none under .whl/ (the fla rows will say unsupported)"
fi
# Triton's compile cache (fla's kernels compile for ~110 s on a fresh machine): restored from .triton/cache.tgz
# when the tree carries one (the device tool's carry: [".triton"]), and brought back as $OUT/triton_cache.tgz
export TRITON_CACHE_DIR=/tmp/kf_triton; mkdir -p "$TRITON_CACHE_DIR"
[ -f "$ROOT/.triton/cache.tgz" ] && tar xzf "$ROOT/.triton/cache.tgz" -C "$TRITON_CACHE_DIR" 2> /dev/null
save_triton() { tar czf "$RET/triton_cache.tgz" -C "$TRITON_CACHE_DIR" . 2> /dev/null
  [ "$(stat -c %s "$RET/triton_cache.tgz" 2> /dev/null || echo 0)" -gt 15000000 ] && rm -f "$RET/triton_cache.tgz"; }
# 1. correctness, side by side (the mutants driver runs test_kda_gpu once per planted slip)
cd "$B/tests"
par="${TESTS:-test_kda_gpu test_kda_api_gpu test_kda_mutants}"
# seconds the suites leave for what follows them (ncu, tuning, the harness); nothing follows with HARNESS=0 and no
# NCU or TUNE rows, so the suites may take the whole budget (session 32's call 1: 120 s kept for no harness cut them)
after=120; [ "${HARNESS:-1}" = 0 ] && [ -z "${NCU:-}${TUNE:-}" ] && after=10
# every binary the suite and the mutant runs load, compiled first on all of the machine's cores with the GPU hidden
# (the suite itself compiles one at a time: a template change left the suites past 180 s, session 19)
if [ -n "${par// /}" ]; then
  CUDA_VISIBLE_DEVICES= KFORGE_TEST_PRECOMPILE=1 timeout "$(left $((after + 80)))" ./test_kda_gpu > "$OUT/precompile.log" 2>&1
  say "precompile: $(grep -E 'precompiled' "$OUT/precompile.log" | tail -n 1)"
fi
lim=$(left $after); [ "$lim" -gt 240 ] && lim=240
# with a carried cache the suites take ~45 s side by side (session 32, H100); a budget that leaves them less is said
[ -n "${par// /}" ] && [ "$lim" -lt 60 ] && say "warning: the suites get ${lim} s (BUDGET_S ${BUDGET_S:-$KF_BUDGET_DEFAULT} less ${after} s for what follows); they may be cut (exit 124)"
for t in $par; do ( timeout "$lim" ./$t > "$OUT/$t.log" 2>&1; echo $? > "$OUT/$t.rc" ) & done
wait
for t in $par; do say "$t: exit $(cat "$OUT/$t.rc"); $(result $t)"; done
if [ -n "${par// /}" ]; then
  grep -hE "^  time " "$OUT/test_kda_gpu.log" 2>/dev/null | sort -k9 -n | head -n 40 > "$OUT/kda_timings.txt"
  grep -hE "time decode" "$OUT/test_kda_gpu.log" 2>/dev/null | sort -k6 -n | head -n 6 | tee -a "$SUM"
  grep -hE "^mutant [0-9]+ |KDA mutants killed" "$OUT/test_kda_mutants.log" 2>/dev/null | tee -a "$SUM"
fi
# 2. Nsight Compute: each kernel's own duration in one call of each NCU row (launch-to-launch gaps excluded)
for row in ${NCU:-}; do
  command -v ncu > /dev/null || { say "ncu: not found"; break; }
  [ "$(left 20)" -lt 60 ] && { say "ncu $row: skipped (budget)"; continue; }
  prm=$( [ "${row#*|}" != "$row" ] && echo "--params ${row#*|}" ); r=${row%%|*}
  f="$OUT/ncu_$(echo "$row" | tr -c 'a-z0-9=\n' '_').log"
  timeout "$(left 15)" ncu -k regex:kf_kda --launch-skip 8 --launch-count 4 \
    --metrics gpu__time_duration.sum,sm__cycles_elapsed.max,smsp__cycles_active.avg \
    "$K" run kda_prefill --shape "$r" $prm --timing burst --db /tmp/kf_kda_ncu.db --quiet > "$f" 2>&1
  say "ncu $row: exit $? $(grep -E 'kf_kda|gpu__time_duration|sm__cycles_elapsed' "$f" | tr -s ' ' | tr '\n' ';' | cut -c1-600)"
done
# 3. tuning: the TUNE shapes' winners into the harness's database (its kforge-tuned contender)
export KFORGE_DB=/tmp/kf_kda_bench.db
for ts in ${TUNE:-}; do
  [ "$(left 20)" -lt 90 ] && { say "tune $ts: skipped (budget)"; continue; }
  f="$OUT/tune_$(echo "$ts" | tr -c 'a-z0-9=\n' '_').log"
  timeout "$(left 90)" "$K" tune "${ts%%:*}" --shape "${ts#*:}" --db "$KFORGE_DB" ${TUNE_ARGS:-} --json > "$f" 2> "$f.err"
  say "tune $ts: exit $? $(python3 -c 'import json,sys
for l in open(sys.argv[1]):
  try: d=json.loads(l)
  except Exception: continue
  print(d.get("winner"), d.get("median_ms"), "ms; default kept:", d.get("default_kept"), "speedup", d.get("speedup"), "band", d.get("band"))' "$f" 2>&1 | tail -n 2 | tr '\n' ' ')"
done
# 4. the harness KDA rows, sustained: kforge against fla and the torch peers
if [ "${HARNESS:-1}" != 0 ] && [ "$(left 20)" -gt 40 ]; then
  ( cd "$ROOT" && PYTHONPATH=$ROOT/python${PYTHONPATH:+:$PYTHONPATH} \
      timeout "$(left 15)" python3 -m bench run --set kda ${SHAPES:+--shapes "$SHAPES"} \
      --contenders "${CONTENDERS:-kforge-default,kforge-default#2,fla-chunk,fla-recurrent,torch-chunked-graph}" \
      --rounds 3 --samples 7 --timing sustained --time-budget "$(left 25)" --out "$OUT/bench" --no-append \
      --no-plots > "$OUT/bench.log" 2>&1 )
  say "harness (set kda, sustained): exit $?"
  save_triton
  grep -E "^\| KDA|^\|  \| " "$OUT/bench/results.md" 2>/dev/null | head -n 60 | cut -c1-260 | tee -a "$SUM"
else
  say "harness: skipped (HARNESS=0, or no time left)"
fi
save_triton
say "done; Triton cache: $(du -sh "$TRITON_CACHE_DIR" 2> /dev/null | cut -f1) ($( [ -f "$RET/triton_cache.tgz" ] && echo "brought back" || echo "over 15 MB, left"))"
pack
