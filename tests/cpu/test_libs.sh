#!/usr/bin/env bash
# tests/cpu/test_libs.sh: libkforge_rt links neither Lua nor NVRTC; both libraries export only kf_* symbols
set -u
RT=${1:?libkforge_rt.so} FULL=${2:?libkforge.so}
fail=0 pass=0
ok() { pass=$((pass+1)); echo "ok   $1"; }
bad() { fail=$((fail+1)); echo "FAIL $1"; }
if ldd "$RT" | grep -qiE 'lua|nvrtc'; then bad "libs__rt_links_no_lua_or_nvrtc"; else ok "libs__rt_links_no_lua_or_nvrtc"; fi
if nm -D "$RT" | grep -qiE ' (lua|luaL|nvrtc)'; then bad "libs__rt_has_no_lua_or_nvrtc_symbols"; else ok "libs__rt_has_no_lua_or_nvrtc_symbols"; fi
if nm -D --defined-only "$RT" "$FULL" | grep -E ' [TDB] ' | grep -vE ' kf_' | grep -q .; then bad "libs__export_only_kf"; else ok "libs__export_only_kf"; fi
if ldd "$FULL" | grep -q nvrtc; then ok "libs__full_has_nvrtc"; else bad "libs__full_has_nvrtc"; fi
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
