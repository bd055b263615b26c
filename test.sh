#!/usr/bin/env bash
# test.sh: build kforge and run every test; GPU tests say "skipped: no CUDA device" without one
set -euo pipefail
cd "$(dirname "$0")"
./build.sh
cd build
# GPU tests first and verbose, so their "skipped: no CUDA device" lines are visible;
# then the CPU tests, whose summary closes the run.
# (grep --line-buffered: each line shows as it comes, also when the output goes to a pipe or a file)
ctest -L gpu -V "$@" | grep --line-buffered -vE '^(UpdateCTestConfiguration|Parse|Test project|Constructing|Checking|Updating|Add|Test command|Environment|Removing|Will)' || exit 1
# CPU tests side by side; ctest prints a line as each starts and as each ends (test_compile_all runs as
# one test per family and arch, the slowest a few minutes on two cores)
echo "CPU tests, $(nproc) at a time:" >&2
ctest -LE gpu --output-on-failure -j"$(nproc)" "$@"
