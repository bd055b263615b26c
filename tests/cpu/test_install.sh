#!/usr/bin/env bash
# tests/cpu/test_install.sh: `cmake --install --prefix P` gives a package that builds examples/decode.c through
# pkg-config (kforge and kforge_rt) and through find_package(kforge), also after the tree is moved; without a
# GPU each program stops with its own error
set -u
BUILD=${1:?build dir} SRC=${2:?source dir}
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
pass=0 fail=0
check() {  # check NAME EXPECTED_RC PATTERN -- command...  (an empty PATTERN: the exit status alone)
  local name=$1 want=$2 pat=$3; shift 4
  local out rc
  out=$("$@" 2>&1); rc=$?
  if [ "$rc" -eq "$want" ] && { [ -z "$pat" ] || printf '%s' "$out" | grep -qE -- "$pat"; }; then
    pass=$((pass+1)); echo "ok   $name"
  else
    fail=$((fail+1)); echo "FAIL $name (rc $rc, want $want; pattern '$pat')"; printf '%s\n' "$out" | head -20
  fi
}
cache() { sed -n "s/^$1:[A-Z]*=//p" "$BUILD/CMakeCache.txt"; }
# the program's own CUDA runtime (not kforge's: kforge loads the driver itself)
CUDART=$(cache CUDA_cudart_LIBRARY) CUDA_BIN=$(cache CUDAToolkit_BIN_DIR)
CUDA_CFLAGS="-I$CUDA_BIN/../include" CUDA_LIBS="-L$(dirname "$CUDART") -lcudart"
if nvidia-smi -L >/dev/null 2>&1; then GPU=1; else GPU=0; fi
# without a GPU decode.c stops at kf_open with kforge's message (exit 1); with one it plans and runs
# (libkforge: JIT; libkforge_rt with no bundle: the plan is refused, exit 1)
runs() {  # runs NAME LIBDIR PROGRAM JIT(0/1)
  if [ "$GPU" = 0 ]; then
    check "$1" 1 "^error: no CUDA driver/device found" -- env LD_LIBRARY_PATH="$2:$(dirname "$CUDART")" "$3"
  elif [ "$4" = 1 ]; then
    check "$1" 0 "\(ok\)" -- env LD_LIBRARY_PATH="$2:$(dirname "$CUDART")" "$3"
  else
    check "$1" 1 "^error: " -- env LD_LIBRARY_PATH="$2:$(dirname "$CUDART")" "$3"
  fi
}
P=$T/prefix
check install__cmake_install 0 "" -- cmake --install "$BUILD" --prefix "$P"
for pc in kforge kforge_rt; do
  check "install__pc_${pc}_names_its_tree" 0 "^-I$P/lib/pkgconfig/\.\./\.\./include -L$P/lib/pkgconfig/\.\./\.\./lib -l$pc *$" -- \
    env PKG_CONFIG_PATH="$P/lib/pkgconfig" pkg-config --cflags --libs "$pc"
  check "install__pkg_config_${pc}_builds_decode" 0 "" -- sh -c \
    "cc -std=c11 -o '$T/pc_$pc' '$SRC/examples/decode.c' \$(PKG_CONFIG_PATH='$P/lib/pkgconfig' pkg-config --cflags --libs $pc) $CUDA_CFLAGS $CUDA_LIBS -lm"
  runs "install__pkg_config_${pc}_decode_runs" "$P/lib" "$T/pc_$pc" $([ $pc = kforge ] && echo 1 || echo 0)
done
check install__find_package_configures 0 "" -- cmake -S "$SRC/examples" -B "$T/ex" -DCMAKE_PREFIX_PATH="$P"
check install__find_package_builds_decode 0 "" -- cmake --build "$T/ex"
runs install__find_package_decode_runs "$P/lib" "$T/ex/decode" 1
runs install__find_package_decode_rt_runs "$P/lib" "$T/ex/decode_rt" 0
check install__decode_rt_has_no_lua_or_nvrtc 0 "^clean$" -- sh -c "ldd '$T/ex/decode_rt' | grep -qiE 'lua|nvrtc' && echo dirty || echo clean"
# the installed tree moved elsewhere: its .pc files follow it
mv "$P" "$T/moved"
check install__pc_relocatable 0 "" -- sh -c \
  "cc -std=c11 -o '$T/moved_decode' '$SRC/examples/decode.c' \$(PKG_CONFIG_PATH='$T/moved/lib/pkgconfig' pkg-config --cflags --libs kforge_rt) $CUDA_CFLAGS $CUDA_LIBS -lm"
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
