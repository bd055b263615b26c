#!/usr/bin/env bash
# tests/cpu/test_install.sh: `cmake --install` gives a package that builds the examples (find_package and pkg-config)
set -eu
BUILD=${1:?build dir} SRC=${2:?source dir}
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
cmake --install "$BUILD" --prefix "$T/prefix" >/dev/null
cmake -S "$SRC/examples" -B "$T/ex" -DCMAKE_PREFIX_PATH="$T/prefix" >/dev/null
cmake --build "$T/ex" >/dev/null
test -x "$T/ex/decode" && test -x "$T/ex/decode_rt"
PKG_CONFIG_PATH="$T/prefix/lib/pkgconfig" pkg-config --cflags --libs kforge_rt | grep -q -- "-lkforge_rt"
if ldd "$T/ex/decode_rt" | grep -qiE 'lua|nvrtc'; then echo "FAIL decode_rt pulls in Lua or NVRTC"; exit 1; fi
echo "1 passed, 0 failed"
