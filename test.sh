#!/usr/bin/env bash
# test.sh: build kforge and run every test; GPU tests say "skipped: no CUDA device" without one
set -euo pipefail
cd "$(dirname "$0")"
./build.sh
cd build
# GPU tests first and verbose, so their "skipped: no CUDA device" lines are visible;
# then the CPU tests, whose summary closes the run.
ctest -L gpu -V "$@" | grep -vE '^(UpdateCTestConfiguration|Parse|Test project|Constructing|Checking|Updating|Add|Test command|Environment|Removing|Will)' || exit 1
ctest -LE gpu --output-on-failure -j"$(nproc)" "$@"
