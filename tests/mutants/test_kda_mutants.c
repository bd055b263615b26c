/* tests/mutants/test_kda_mutants.c: plant known KDA slips into the prefill and decode sources one at a time; the GPU suite must fail on every one */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "runtime/cuda.h"
#include "tests/mutants/spawn.h"

/*
 * The mutants live in tests/gpu/test_kda_gpu.c (kda_mutants: drop the state decay, apply the decay
 * after the correction, use beta twice, read the wrong chunk boundary in the serial pass, build the
 * tensor-core preparation's off-diagonal blocks of T without the diagonal inverse, ...); each is
 * planted by textual replacement in the lines of the rendered source marked // KF_MUTANT_*. This
 * driver runs `test_kda_gpu` (next to this binary) with KF_KDA_MUTANT=m in its own process per
 * mutant (a planted bug may fault and leave its CUDA context unusable; a crash counts as killed).
 * Child exit codes: 0 every case passed, 1 some case failed, 3 set-up error, 4 not planted,
 * 5 no mutant m (the end of the list). The test passes only when the unmutated source passes and
 * every mutant is planted and killed.
 */

static char g_child[1200];

static int spawn(int m)
{
    char arg[16];
    snprintf(arg, sizeof arg, "%d", m);
    return mut_spawn(g_child, NULL, NULL, "KF_KDA_MUTANT", arg);
}

static void test_kda_mutants__every_mutant_killed(void **state)
{
    (void)state;
    time_t t0 = time(NULL);
    printf("== baseline (unmutated source)\n");
    int st = spawn(-1);
    int base_ok = WIFEXITED(st) && WEXITSTATUS(st) == 0;
    printf("baseline: %s\n", base_ok ? "every case passes" : "FAILS (the suite or the kernels are broken)");
    int killed = 0, planted = 0, total = 0;
    for (int m = 0; m < 64; m++) {
        printf("== mutant %d\n", m);
        st = spawn(m);
        if (WIFEXITED(st) && WEXITSTATUS(st) == 5)
            break;
        total++;
        const char *verdict = mut_verdict(st, 1, &planted, &killed);
        printf("mutant %d %s\n", m, verdict);
    }
    printf("\nKDA mutants killed %d / planted %d (of %d); baseline %s (%ld s)\n", killed, planted, total,
           base_ok ? "pass" : "FAIL", (long)(time(NULL) - t0));
    assert_true(base_ok);
    assert_true(total > 0);
    assert_int_equal(planted, total);
    assert_int_equal(killed, planted);
}

int main(int argc, char **argv)
{
    (void)argc;
    char self[1024];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0)
        snprintf(self, sizeof self, "%s", argv[0]);
    else
        self[n] = 0;
    snprintf(g_child, sizeof g_child, "%s/test_kda_gpu", dirname(self));
    if (access(g_child, X_OK)) {
        printf("error: cannot run '%s' (build the test_kda_gpu target)\n", g_child);
        return 1;
    }
    core_err err = CORE_ERR_INIT;
    if (rt_cuda(&err) == NULL) {
        printf("skipped: no CUDA device (KFORGE_TEST_PRECOMPILE=1 test_kda_gpu precompiles the mutants)\n");
        return 77;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_kda_mutants__every_mutant_killed),
    };
    return cmocka_run_group_tests(tests, NULL, NULL) ? 1 : 0;
}
