#!/usr/bin/env bash
# tests/device_mut.sh: chosen mutants of test_mutants in one device call, from a build made elsewhere: each index's
# child (-1: the unmutated baseline, which must pass) after all of them are compiled with the GPU hidden (16 cores);
# exit status and the failing rows of each under $OUT. The whole set (test_mutants) outlasts one device command.
# usage: KF_BUILD=.devbuild [BUDGET_S=300] bash tests/device_mut.sh -1 0 3 7   (indices: tests/gpu/gpu_suite.c
#        suite_mutants, from 0)
KF_LOGS=mut; KF_BUDGET_DEFAULT=300; . "$(dirname "$0")/device_lib.sh"
export KFORGE_TEST_DB=/tmp/kf_mut_test.db
mutants "" "$@"
say "done"
pack
