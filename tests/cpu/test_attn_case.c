/* tests/cpu/test_attn_case.c: the GPU harness's host half without a GPU: FP8 (e4m3) inputs and their encoder, paged K/V (shuffled pages, NaN elsewhere) give the reference of the same logical problem */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tuner/attn_run.h"
#include "tuner/ref_attn.h"

/* Every finite e4m3 value encodes to itself; halfway values round to the even mantissa; past 448 saturates */
static void test_attn_case__e4m3_encode(void **state)
{
    (void)state;
    for (int b = 0; b < 256; b++) {
        double x = ref_e4m3((unsigned char)b);
        if (isnan(x))
            continue;
        unsigned char e = tune_e4m3_encode(x);
        if (x == 0.0)
            assert_int_equal(e & 0x7f, 0);
        else
            assert_int_equal(e, b);
    }
    assert_int_equal(tune_e4m3_encode(448.0), 0x7e);
    assert_int_equal(tune_e4m3_encode(1e9), 0x7e);
    assert_int_equal(tune_e4m3_encode(-460.0), 0xfe);
    assert_true(ref_e4m3(tune_e4m3_encode(1.0625)) == 1.0);      /* halfway between 1 and 1.125: even */
    assert_true(ref_e4m3(tune_e4m3_encode(1.1875)) == 1.25);     /* halfway between 1.125 and 1.25: even */
    assert_true(ref_e4m3(tune_e4m3_encode(0.001)) == 0.001953125);  /* nearest subnormal, 2^-9 */
    /* neighbouring kv heads have different scales (the wrong-head mutant must change the result) */
    for (int kh = 0; kh + 1 < 16; kh++) {
        assert_true(tune_attn_kv_scale(0, kh) != tune_attn_kv_scale(0, kh + 1));
        assert_true(tune_attn_kv_scale(1, kh) != tune_attn_kv_scale(1, kh + 1));
    }
}

static int ref_of(const tune_attn_case *c, uint64_t seed, double **o, double **l, long long *rows)
{
    core_err e = CORE_ERR_INIT;
    int rc = tune_attn_case_reference(c, seed, o, l, rows, &e);
    if (rc)
        print_error("%s\n", e.msg);
    return rc;
}

/* Bitwise equality of two references, NaN nowhere; -inf lse only where both have it */
static void same_ref(const tune_attn_case *a, const tune_attn_case *b, uint64_t seed)
{
    double *oa, *la, *ob, *lb;
    long long ra, rb;
    assert_int_equal(ref_of(a, seed, &oa, &la, &ra), 0);
    assert_int_equal(ref_of(b, seed, &ob, &lb, &rb), 0);
    assert_int_equal(ra, rb);
    size_t n = (size_t)ra * a->hq, bad = 0, nan = 0;
    for (size_t i = 0; i < n * (size_t)a->d; i++) {
        bad += memcmp(&oa[i], &ob[i], sizeof(double)) != 0;
        nan += isnan(oa[i]);
    }
    for (size_t i = 0; i < n; i++) {
        bad += memcmp(&la[i], &lb[i], sizeof(double)) != 0;
        nan += isnan(la[i]);
    }
    if (bad || nan)
        print_error("%zu values differ, %zu NaN (of %zu rows x heads)\n", bad, nan, n);
    assert_int_equal(bad, 0);
    assert_int_equal(nan, 0);
    free(oa), free(la), free(ob), free(lb);
}

/* Paged K/V (pages 16, 64, 128; the pool shuffled, unused pages and tails NaN): the same reference as the contiguous
 * cache, for dense and packed q, bf16 and FP8; a reference that read a page of another sequence or a NaN page fails */
static void test_attn_case__paged_equals_contiguous(void **state)
{
    (void)state;
    static const int kvl[4] = {300, 0, 1, 129}, ql[4] = {40, 0, 1, 17};
    const int pages[3] = {16, 64, 128};
    for (int fp8 = 0; fp8 < 2; fp8++)
        for (int k = 0; k < 3; k++)
            for (int packed = 0; packed < 2; packed++) {
                tune_attn_case c;
                memset(&c, 0, sizeof c);
                c.dtype = CHECK_BF16;
                c.b = 4, c.sq = 40, c.skv = 300, c.hq = 8, c.hkv = 2, c.d = 64, c.causal = 1;
                c.kv_len = kvl;
                c.q_lens = packed ? ql : NULL;
                c.kv_fp8 = fp8;
                c.layout = k == 1 ? TUNE_LAYOUT_BHSD : TUNE_LAYOUT_BSHD;
                tune_attn_case pc = c;
                pc.page_size = pages[k];
                same_ref(&c, &pc, 0x1234 + (uint64_t)k);
            }
}

/* FP8 with K/V expanded to hq heads (each keeps its logical head's scales), paged or not: the same reference */
static void test_attn_case__fp8_expanded_same(void **state)
{
    (void)state;
    static const int kvl[2] = {200, 1};
    for (int pg = 0; pg < 2; pg++) {
        tune_attn_case c;
        memset(&c, 0, sizeof c);
        c.dtype = CHECK_FP16;
        c.b = 2, c.sq = 4, c.skv = 200, c.hq = 8, c.hkv = 4, c.d = 64, c.causal = 1;
        c.kv_len = kvl;
        c.kv_fp8 = 1;
        c.page_size = pg ? 16 : 0;
        tune_attn_case e = c;
        e.expand_kv = 1;
        same_ref(&c, &e, 99);
    }
}

/* An FP8 case gives a finite reference; a negative page size and pages over packed K/V are refused */
static void test_attn_case__fp8_finite_bad_pages_refused(void **state)
{
    (void)state;
    tune_attn_case c;
    memset(&c, 0, sizeof c);
    c.dtype = CHECK_BF16;
    c.b = 1, c.sq = 1, c.skv = 64, c.hq = 2, c.hkv = 2, c.d = 64;
    c.kv_fp8 = 1;
    double *o, *l;
    long long rows;
    assert_int_equal(ref_of(&c, 7, &o, &l, &rows), 0);
    assert_int_equal(rows, 1);
    for (int i = 0; i < 2 * 64; i++)
        assert_true(isfinite(o[i]));
    assert_true(isfinite(l[0]) && isfinite(l[1]));
    free(o), free(l);
    tune_attn_case bad = c;
    bad.page_size = -1;
    core_err e = CORE_ERR_INIT;
    assert_int_equal(tune_attn_case_reference(&bad, 7, &o, &l, &rows, &e), -1);
    assert_int_equal(e.st, KF_ERR_ARG);
    assert_non_null(strstr(e.msg, "page_size"));
    bad = c;
    bad.page_size = 16;
    static const int ql[1] = {1}, kl[1] = {64};
    bad.q_lens = ql, bad.kv_len = kl, bad.packed_kv = 1;
    assert_int_equal(tune_attn_case_reference(&bad, 7, &o, &l, &rows, &e), -1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_attn_case__e4m3_encode),
        cmocka_unit_test(test_attn_case__paged_equals_contiguous),
        cmocka_unit_test(test_attn_case__fp8_expanded_same),
        cmocka_unit_test(test_attn_case__fp8_finite_bad_pages_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
