/* tests/mutants/test_mutants.c: plant known bugs into the rendered attention source one at a time; the GPU suite must fail on every one */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "runtime/cuda.h"
#include "runtime/device.h"
#include "tests/gpu/gpu_suite.h"
#include "tests/mutants/spawn.h"

/*
 * Each mutant (suite_mutants in tests/gpu/gpu_suite.c: the head-mapping bugs (h/Hkv)%Hkv, h/Hkv,
 * h%Hkv; the causal bound off by one either way; two wrong split boundaries) is planted by
 * textual replacement in the lines of the rendered source marked // KF_MUTANT_*, compiled
 * with NVRTC (through gen_build_run, cached under a cache key of the mutated source), and run
 * on the suite's cases marked MUT_YES (decode and prefill; ratios 8/4, 8/2, 6/2; causal with
 * sq > 1; splits 1 and > 1). Each mutant runs in its own process (a planted bug may fault and
 * leave its CUDA context unusable); a crash counts as killed and is reported as such.
 * The test passes only when the unmutated source passes every case and every mutant is killed.
 * Exit codes of a child: 0 every case passed, 1 some case failed, 3 set-up error, 4 not planted.
 */

static char g_self[1024];

enum { ALL_CASES = 0, DIRECT_ONLY = 1, WG8_ONLY = 2 };

static int child(int m, int only)
{
    suite s;
    if (suite_open(&s, 1, m))
        return 3;
    /* the plain suites, the model features' cases, FP8 K/V and paged K/V (issue 21; the sm_90a impls' only on sm_90a),
     * attn_decode impl=direct's and impl=wg8's cases; DIRECT_ONLY, WG8_ONLY: that impl's cases alone (each mutant
     * must die on that kernel by itself) */
    int sm90 = strcmp(s.tg.arch, "sm_90a") == 0, all = only == ALL_CASES;
    enum { NSETS = 9 };
    const suite_case *sets[NSETS] = {suite_decode, suite_prefill, suite_feat, suite_feat_sm90, suite_kv8, suite_paged,
                                     suite_paged_sm90, suite_decode_direct, suite_decode_wg8};
    const int ns[NSETS] = {all * suite_decode_n, all * suite_prefill_n, all * suite_feat_n,
                           all * sm90 * suite_feat_sm90_n, all * suite_kv8_n, all * suite_paged_n,
                           all * sm90 * suite_paged_sm90_n, (all || only == DIRECT_ONLY) * suite_decode_direct_n,
                           (all || only == WG8_ONLY) * sm90 * suite_decode_wg8_n};
    const char *set_names[NSETS] = {"suite_decode", "suite_prefill", "suite_feat", "suite_feat_sm90", "suite_kv8",
                                    "suite_paged", "suite_paged_sm90", "suite_decode_direct", "suite_decode_wg8"};
    char why[512];
    for (int k = 0; k < NSETS; k++)
        for (int i = 0; i < ns[k]; i++)
            if (sets[k][i].mut == MUT_YES && suite_job(&s, &sets[k][i], 0, why, sizeof why) < 0) {
                printf("    %s (case %d of %s)\n", why, i, set_names[k]);
                suite_close(&s);
                return 3;
            }
    /* a mutant of one impl's fragment lives in the sources of that impl only; one it reaches nowhere is
     * not a test */
    if (m >= 0) {
        printf("    planted in %d of %d case sources%s%s\n", s.planted, s.planted + s.unplanted,
               s.unplanted ? "; e.g. " : "", s.unplanted ? s.unplanted_why : "");
        if (s.planted == 0) {
            suite_close(&s);
            return 4;
        }
    }
    suite_build(&s);
    if (getenv("KF_MUTANT_BUILD_ONLY")) {
        suite_close(&s);
        return 0;
    }
    core_err err = CORE_ERR_INIT;
    tune_ctx *ctx = tune_open(0, &err);
    if (!ctx) {
        printf("    %s\n", err.msg);
        suite_close(&s);
        return 3;
    }
    int failed = 0, run = 0;
    for (int k = 0; k < NSETS; k++)
        for (int i = 0; i < ns[k]; i++)
            if (sets[k][i].mut == MUT_YES) {
                run++;
                /* rows are printed for failing cases only: they show what caught the mutant */
                if (!suite_run_case(&s, ctx, &sets[k][i], 1)) {
                    failed++;
                    suite_run_case(&s, ctx, &sets[k][i], 0);
                }
            }
    printf("    %d of %d cases failed\n", failed, run);
    tune_close(ctx);
    suite_close(&s);
    return failed ? 1 : 0;
}

/* Runs `self --child m` (`m:direct`, `m:wg8`: that impl's cases alone) and returns its wait status. */
static int spawn(int m, int build_only, int only)
{
    char arg[32];
    snprintf(arg, sizeof arg, "%d%s", m, only == DIRECT_ONLY ? ":direct" : only == WG8_ONLY ? ":wg8" : "");
    return mut_spawn(g_self, "--child", arg, build_only ? "KF_MUTANT_BUILD_ONLY" : NULL, "1");
}

static void test_mutants__every_mutant_killed(void **state)
{
    (void)state;
    time_t t0 = time(NULL);
    printf("== baseline (unmutated source)\n");
    int st = spawn(-1, 0, 0);
    int base_ok = WIFEXITED(st) && WEXITSTATUS(st) == 0;
    printf("baseline: %s\n", base_ok ? "every case passes" : "FAILS (the suite or the kernels are broken)");
    int killed = 0, planted = 0;
    for (int m = 0; m < suite_mutants_n; m++) {
        printf("== mutant %d: %s (%s: '%s' -> '%s')\n", m, suite_mutants[m].name, suite_mutants[m].marker,
               suite_mutants[m].from, suite_mutants[m].to);
        st = spawn(m, 0, 0);
        const char *verdict = mut_verdict(st, 0, &planted, &killed);
        printf("mutant %d %-22s %s\n", m, suite_mutants[m].name, verdict);
    }
    printf("\nmutants killed %d / planted %d (of %d); baseline %s (%ld s)\n", killed, planted, suite_mutants_n,
           base_ok ? "pass" : "FAIL", (long)(time(NULL) - t0));
    assert_true(base_ok);
    assert_int_equal(planted, suite_mutants_n);
    assert_int_equal(killed, planted);
}

/* The decode mutants (every one but the persistent prefill's) on one decode impl's cases alone: each mutant must
 * be planted in that kernel's source and die there, not only in the other kernels */
static void decode_impl_mutants(int only, const char *impl)
{
    time_t t0 = time(NULL);
    int killed = 0, planted = 0, n = 0;
    for (int m = 0; m < suite_mutants_n; m++) {
        if (suite_mutants[m].prefill_sm90)
            continue;   /* the persistent prefill's schedule: not in the decode source */
        n++;
        printf("== mutant %d on impl=%s: %s\n", m, impl, suite_mutants[m].name);
        const char *verdict = mut_verdict(spawn(m, 0, only), 0, &planted, &killed);
        printf("mutant %d %-22s %s\n", m, suite_mutants[m].name, verdict);
    }
    printf("\nimpl=%s: mutants killed %d / planted %d (of %d) (%ld s)\n", impl, killed, planted, n,
           (long)(time(NULL) - t0));
    assert_int_equal(planted, n);
    assert_int_equal(killed, planted);
}

/* attn/decode_direct.cuh carries every marker but the persistent prefill's */
static void test_mutants__every_mutant_killed_on_direct_decode(void **state)
{
    (void)state;
    decode_impl_mutants(DIRECT_ONLY, "direct");
}

/* attn/decode_wg8.cuh (sm_90a) carries the same markers */
static void test_mutants__every_mutant_killed_on_wg8_decode(void **state)
{
    (void)state;
    rt_devinfo info;
    gen_device dev;
    core_err err = CORE_ERR_INIT;
    const int ok = rt_device_info(0, &info, &err) == 0;
    if (ok)
        rt_gen_device(&info, &dev);
    if (!ok || strcmp(dev.arch, "sm_90a")) {
        printf("== impl=wg8 mutants: skipped, the GPU is not sm_90a\n");
        return;
    }
    decode_impl_mutants(WG8_ONLY, "wg8");
}

int main(int argc, char **argv)
{
    if (argc == 3 && !strcmp(argv[1], "--child"))
        return child(atoi(argv[2]), strstr(argv[2], ":direct") ? DIRECT_ONLY : strstr(argv[2], ":wg8") ? WG8_ONLY
                                                                                                  : ALL_CASES);
    ssize_t n = readlink("/proc/self/exe", g_self, sizeof g_self - 1);
    if (n <= 0)
        snprintf(g_self, sizeof g_self, "%s", argv[0]);
    else
        g_self[n] = 0;
    core_err err = CORE_ERR_INIT;
    int have_gpu = rt_cuda(&err) != NULL;
    const char *pre = getenv("KFORGE_TEST_PRECOMPILE");
    if (!have_gpu) {
        if (pre && *pre && strcmp(pre, "0")) {
            for (int m = -1; m < suite_mutants_n; m++)   /* compile every mutant into the cache */
                spawn(m, 1, 0);
            printf("skipped: no CUDA device (mutants precompiled)\n");
        } else {
            printf("skipped: no CUDA device\n");
        }
        return 77;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_mutants__every_mutant_killed),
        cmocka_unit_test(test_mutants__every_mutant_killed_on_direct_decode),
        cmocka_unit_test(test_mutants__every_mutant_killed_on_wg8_decode),
    };
    return cmocka_run_group_tests(tests, NULL, NULL) ? 1 : 0;
}
