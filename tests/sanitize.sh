#!/usr/bin/env bash
# tests/sanitize.sh: builds kforge and its CPU tests with AddressSanitizer and UBSan into build-san/ and runs them
# (not the slow test_compile_all, nor the tests that load the libraries into Python or install them)
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v nvcc >/dev/null 2>&1 && [ -x /usr/local/cuda/bin/nvcc ]; then
  export PATH=/usr/local/cuda/bin:$PATH
fi
start=$(date +%s)
cmake -S . -B build-san -DCMAKE_BUILD_TYPE=RelWithDebInfo -DKF_SANITIZE=ON >/dev/null
cmake --build build-san -j"$(nproc)" >/dev/null
built=$(date +%s)
# the first report fails the test (UBSan with its stack); leaks are reported too
export ASAN_OPTIONS=${ASAN_OPTIONS:-halt_on_error=1:detect_leaks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
cd build-san
ctest -L cpu -E '^(test_compile_all.*|test_python_binding|test_bench_harness|test_install|test_libs)$' \
      -j"$(nproc)" --output-on-failure "$@"
end=$(date +%s)
echo "sanitize.sh: build $((built - start)) s, tests $((end - built)) s"
