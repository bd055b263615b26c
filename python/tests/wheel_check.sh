#!/usr/bin/env bash
# python/tests/wheel_check.sh: `pip install ./python` (and `pip install .` from the root) in a fresh venv builds
# libkforge with CMake and ships it inside the package: `import kforge` then finds it with no environment
# variable, prints kforge.version(), and `python -m kforge doctor` names the packaged library.
# Exit 77 (skipped, with a line saying so) only when pip cannot reach a package index.
# Usage: wheel_check.sh [SOURCE_DIR]   (KFORGE_WHEEL_ROOT=0 skips the root-pyproject install)
set -u
SRC=$(cd "${1:-$(dirname "$0")/../..}" && pwd)
PY=${PYTHON:-python3}
T=$(mktemp -d /tmp/kforge-wheel-XXXXXX); trap 'rm -rf "$T"' EXIT
export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1
unset KFORGE_LIB KFORGE_PREFIX KFORGE_DB
pass=0 fail=0
ok() { pass=$((pass+1)); echo "ok   $1"; }
bad() { fail=$((fail+1)); echo "FAIL $1"; [ -n "${2:-}" ] && tail -n 30 "$2"; }

"$PY" -m venv "$T/venv" || { echo "FAIL wheel__venv: $PY -m venv failed"; exit 1; }
VPY=$T/venv/bin/python
# an index pip can reach (scikit-build-core comes from it, or from pip's cache)
if ! timeout 60 "$VPY" -m pip download -q --no-deps -d "$T/probe" "scikit-build-core>=0.10" >"$T/probe.log" 2>&1; then
  echo "skipped: pip cannot reach a package index to fetch scikit-build-core (the build backend)"; tail -n 3 "$T/probe.log"
  exit 77
fi

check_install() {  # check_install NAME DIR
  local name=$1 dir=$2
  if "$VPY" -m pip install -q "$dir" >"$T/$name.log" 2>&1; then ok "wheel__${name}_installs"; else bad "wheel__${name}_installs" "$T/$name.log"; return; fi
  # away from the source tree, with no KFORGE_* variable: the packaged library is found first
  local out
  out=$(cd "$T" && env -u KFORGE_LIB "$VPY" -c "import kforge, os; print(kforge.version()); print(kforge.library_path())" 2>&1)
  echo "     kforge.version() = $(printf '%s' "$out" | head -1); library: $(printf '%s' "$out" | sed -n 2p)"
  local site; site=$(cd "$T" && "$VPY" -c "import sysconfig; print(sysconfig.get_paths()['platlib'])")
  if [ "$(printf '%s' "$out" | head -1)" = "0.1.0" ] && [ "$(printf '%s' "$out" | sed -n 2p)" = "$site/kforge/lib/libkforge.so" ]; then
    ok "wheel__${name}_imports_packaged_library"
  else bad "wheel__${name}_imports_packaged_library"; printf '%s\n' "$out"; fi
  [ -f "$site/kforge/lib/libkforge_rt.so" ] && ok "wheel__${name}_ships_libkforge_rt" || bad "wheel__${name}_ships_libkforge_rt"
  out=$(cd "$T" && "$VPY" -m kforge doctor --no-torch 2>&1)
  if printf '%s' "$out" | grep -q "^library:  $site/kforge/lib/libkforge.so" && printf '%s' "$out" | grep -q "^version:  0.1.0" \
     && printf '%s' "$out" | grep -q "^device:   " && printf '%s' "$out" | grep -q "^database: "; then
    ok "wheel__${name}_doctor"
  else bad "wheel__${name}_doctor"; printf '%s\n' "$out"; fi
  "$VPY" -m pip uninstall -q -y kforge >/dev/null 2>&1
}
check_install python "$SRC/python"
if [ "${KFORGE_WHEEL_ROOT:-1}" != 0 ] && [ -f "$SRC/pyproject.toml" ]; then check_install root "$SRC"; fi
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
