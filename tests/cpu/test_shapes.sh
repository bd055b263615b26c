#!/usr/bin/env bash
# tests/cpu/test_shapes.sh: kforge gen and compile refuse the shapes the C API refuses, naming the key and the value (issue 14)
set -u
KF=${1:?usage: test_shapes.sh path/to/kforge}
. "$(dirname "$0")/check.sh"
export KFORGE_DB="$T/k.db" KFORGE_NO_GPU=1
dec() { echo "dtype=bf16,b=${b:-1},sq=${sq:-1},skv=${skv:-4096},hq=${hq:-32},hkv=${hkv:-8},d=128,causal=0$*"; }
for cmd in gen compile; do
  extra=()
  [ "$cmd" = compile ] && extra=(--arch sm_90a --quiet)
  k() { "$KF" "$cmd" "${extra[@]}" "$@"; }
  check shapes__${cmd}_valid_decode 0 "" -- k attn_decode --shape "$(dec)"
  check shapes__${cmd}_g_3_75 2 "^error: bad --shape for 'attn_decode': hq \(30\) must be a multiple of hkv \(8\)" -- k attn_decode --shape "$(hq=30 dec)"
  check shapes__${cmd}_negative_batch 2 "error: .*b must be positive, got -5" -- k attn_decode --shape "$(b=-5 dec)"
  check shapes__${cmd}_zero_sq 2 "error: .*sq must be positive, got 0" -- k attn_decode --shape "$(sq=0 dec)"
  check shapes__${cmd}_negative_skv 2 "error: .*skv must be >= 0, got -1" -- k attn_decode --shape "$(skv=-1 dec)"
  check shapes__${cmd}_decode_sq_17 2 "error: .*sq = 17" -- k attn_decode --shape "$(sq=17 dec)"
  check shapes__${cmd}_unknown_key 2 "error: .*unknown shape key 'foo' for 'attn_decode'" -- k attn_decode --shape "$(dec ,foo=1)"
  check shapes__${cmd}_duplicate_key 2 "error: bad --shape: 'b' is given twice" -- k attn_decode --shape "$(dec ,b=2)"
  check shapes__${cmd}_hkv_0 2 "error: .*hkv must be positive, got 0" -- k attn_decode --shape "$(hkv=0 dec)"
  check shapes__${cmd}_overflow 2 "error: bad --shape: value '9223372036854775807k' of 'skv' is out of range" -- k attn_decode --shape "$(skv=9223372036854775807k dec)"
  check shapes__${cmd}_past_int 2 "error: .*b = 4294967298 is outside the range of an int" -- k attn_decode --shape "$(b=4294967298 dec)"
  check shapes__${cmd}_missing_key 1 "error: .*lacks .causal." -- k attn_decode --shape "dtype=bf16,b=1,sq=1,skv=4096,hq=32,hkv=8,d=128"
  check shapes__${cmd}_kda_heads 2 "error: .*hv \(6\) must be a multiple of h \(4\)" -- k kda_prefill --shape "n=3,t=11,h=4,hv=6,dk=128,dv=128"
  check shapes__${cmd}_prefill_head_dim 2 "error: .*head dim d = 96" -- k attn_prefill --shape "dtype=bf16,b=1,sq=128,skv=128,hq=8,hkv=2,d=96,causal=1"
done
# the --all path (shape_jobs) takes the same check
check shapes__compile_all_checks_too 2 "error: .*hq \(30\) must be a multiple of hkv \(8\)" -- "$KF" compile --arch sm_90a --quiet --all attn_decode --shape "$(hq=30 dec)"
# kforge tune takes its --shape through the same check (before any GPU is looked for)
check shapes__tune_checks_too 1 "error: .*hq \(30\) must be a multiple of hkv \(8\)" -- "$KF" tune attn_decode --shape "$(hq=30 dec)" --db "$T/tune.db"
# no Lua library message leaks for hkv=0 (was "attempt to divide by zero" from lib/attn.lua)
out=$("$KF" gen attn_decode --shape "$(hkv=0 dec)" 2>&1)
if printf '%s' "$out" | grep -q "divide by zero"; then fail=$((fail+1)); echo "FAIL shapes__no_lua_division ($out)"; else pass=$((pass+1)); echo "ok   shapes__no_lua_division"; fi
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
