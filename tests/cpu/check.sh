# tests/cpu/check.sh: sourced by the shell tests: a temporary folder $T, the pass/fail counts and check()
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
pass=0 fail=0
check() {  # check NAME EXPECTED_RC PATTERN -- command...
  local name=$1 want=$2 pat=$3; shift 4
  local out rc
  out=$("$@" 2>&1); rc=$?
  if [ "$rc" -eq "$want" ] && printf '%s' "$out" | grep -qE -- "$pat"; then
    pass=$((pass+1)); echo "ok   $name"
  else
    fail=$((fail+1)); echo "FAIL $name (rc $rc, want $want; pattern '$pat')"; printf '%s\n' "$out" | head -20
  fi
}
