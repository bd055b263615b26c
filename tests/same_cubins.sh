#!/usr/bin/env bash
# tests/same_cubins.sh: does a kernel refactor change any cubin? Compiles every variant of the given sweeps with two kforge builds and compares the images
# usage: bash tests/same_cubins.sh OLD_KFORGE NEW_KFORGE [--arch A] SWEEP...   e.g. with a build of HEAD~1 in build-old:
#        bash tests/same_cubins.sh build-old/kforge build/kforge kda prefill
# Needs no GPU (NVRTC only) and the sqlite3 command (its sha3). Exit 0 when every variant's cubin is byte-identical (the refactor needs no GPU run),
# 1 when some differ (listed: run the GPU suite before committing), 2 on bad usage or a failed compile.
set -u
[ $# -ge 3 ] || { sed -n 3,6p "$0" >&2; exit 2; }
OLD=$1 NEW=$2; shift 2
ARCH=sm_90a
if [ "${1:-}" = --arch ]; then ARCH=$2; shift 2; fi
W=$(mktemp -d); trap 'rm -rf "$W"' EXIT
for side in old new; do
  K=$OLD; [ $side = new ] && K=$NEW
  for s in "$@"; do
    "$K" compile --sweep "$s" --all --arch "$ARCH" --db "$W/$side.db" --quiet || { echo "error: $K compile --sweep $s failed" >&2; exit 2; }
  done
  sqlite3 "$W/$side.db" "select variant_key || ' ' || lower(hex(sha3(image))) from binaries order by variant_key" > "$W/$side.txt"
done
n=$(wc -l < "$W/new.txt")
if diff -q "$W/old.txt" "$W/new.txt" > /dev/null; then
  echo "same cubins: all $n variants of sweeps $* on $ARCH are byte-identical"
  exit 0
fi
echo "cubins differ (variant, old sha3 / new sha3):"
join -a1 -a2 -e - -o 0,1.2,2.2 "$W/old.txt" "$W/new.txt" | awk '$2 != $3 {print "  " $1 "  " substr($2, 1, 16) " / " substr($3, 1, 16)}'
exit 1
