/* tests/cpu/test_ref_kda.c: the fp64 KDA references: chunked form and segment maps against the token recurrence */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tuner/check.h"
#include "tuner/ref_kda.h"

typedef struct outs {
    double *o, *ht;
    size_t no, nht;
} outs;

static outs outs_new(const kf_kda_params *p)
{
    outs r;
    r.no = (size_t)ref_kda_rows(p) * p->hv_heads * p->dv;
    r.nht = (size_t)p->nseq * p->hv_heads * p->dk * p->dv;
    r.o = calloc(r.no + 1, sizeof(double));
    r.ht = calloc(r.nht + 1, sizeof(double));
    assert_non_null(r.o);
    assert_non_null(r.ht);
    return r;
}

static void outs_free(outs *r) { free(r->o); free(r->ht); }

static double rel(const double *a, const double *b, size_t n)
{
    double num = 0, den = 0;
    for (size_t i = 0; i < n; ++i) {
        if (!isfinite(a[i]) || !isfinite(b[i]))
            return INFINITY;
        num += (a[i] - b[i]) * (a[i] - b[i]);
        den += b[i] * b[i];
    }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

static ref_kda_case base_case(int dk, int dv)
{
    ref_kda_case c;
    memset(&c, 0, sizeof c);
    c.h = 1; c.hv = 2; c.dk = dk; c.dv = dv;
    c.gate = 1; c.lower_bound = -5.0; c.l2norm = 1; c.beta_sigmoid = 1;
    c.h0 = 1; c.ht = 1;
    return c;
}

/* Chunked (every chunk size) against the recurrence on one case; returns the worst error. */
static double chunked_vs_recurrence(const ref_kda_case *c, ref_kda_mut mut, int chunk)
{
    ref_kda_host hp;
    assert_int_equal(ref_kda_host_make(&hp, c, check_fresh_seed()), 0);
    outs a = outs_new(&hp.p), b = outs_new(&hp.p);
    ref_kda(&hp.p, 0, 0, a.o, a.ht);
    assert_int_equal(ref_kda_chunked(&hp.p, chunk, mut, 0, 0, b.o, b.ht), 0);
    double e1 = rel(b.o, a.o, a.no), e2 = rel(b.ht, a.ht, a.nht);
    outs_free(&a);
    outs_free(&b);
    ref_kda_host_free(&hp);
    return e1 > e2 ? e1 : e2;
}

static void run_all_chunks(const ref_kda_case *c, const char *what)
{
    static const int chunks[] = { 16, 32, 64 };
    for (int i = 0; i < 3; ++i) {
        double e = chunked_vs_recurrence(c, REF_KDA_EXACT, chunks[i]);
        if (!(e <= 1e-10))
            fail_msg("%s, chunk %d: chunked vs recurrence rel err %.3e > 1e-10", what, chunks[i], e);
    }
}

static void test_ref_kda__chunked_matches_recurrence_lower_bound(void **state)
{
    (void)state;
    static const int lens[] = { 17, 0, 16 };
    ref_kda_case c = base_case(64, 64);
    c.nseq = 3; c.lens = lens;
    run_all_chunks(&c, "[17,0,16] lb -5 HV=2H");
    c.cu64 = 1; c.h0 = 2; c.ht = 2;
    run_all_chunks(&c, "[17,0,16] int64 V-first state");
}

static void test_ref_kda__chunked_matches_recurrence_log_gate_near_zero(void **state)
{
    (void)state;
    static const int one[] = { 1 }, three[] = { 63, 64, 65 };
    ref_kda_case c = base_case(64, 32);
    c.gate = 0; c.log_gate_max = 1e-3; c.l2norm = 0; c.beta_sigmoid = 0;
    c.nseq = 1; c.lens = one;
    run_all_chunks(&c, "[1] log gate near 0");
    c.nseq = 3; c.lens = three; c.h0 = 2;
    run_all_chunks(&c, "[63,64,65] log gate near 0 V-first");
    c.log_gate_max = 8.0;   /* steep decay: exp(-G) alone would overflow */
    run_all_chunks(&c, "[63,64,65] steep log gate");
}

static void test_ref_kda__chunked_matches_recurrence_padded_strided(void **state)
{
    (void)state;
    ref_kda_case c = base_case(32, 64);
    c.nseq = 2; c.t = 40; c.h = 2; c.hv = 4; c.pad_qk = 8; c.pad_state = 4; c.h0 = 2;
    run_all_chunks(&c, "padded 2x40 padded rows");
}

/* Layout invariance: padded strides and V-first states give the same numbers as dense K-first. */
static void test_ref_kda__layouts_agree(void **state)
{
    (void)state;
    static const int lens[] = { 9, 0, 30 };
    ref_kda_case c = base_case(32, 32);
    c.nseq = 3; c.lens = lens;
    ref_kda_host a, b;
    const uint64_t seed = check_fresh_seed();
    assert_int_equal(ref_kda_host_make(&a, &c, seed), 0);
    c.pad_qk = 8; c.pad_state = 8; c.h0 = 2;
    assert_int_equal(ref_kda_host_make(&b, &c, seed), 0);
    /* same values: copy a's q, k and state into b's layouts */
    for (size_t r = 0; r < a.nq / 32; ++r) {
        memcpy((uint16_t *)b.q + r * 40, (uint16_t *)a.q + r * 32, 64);
        memcpy((uint16_t *)b.k + r * 40, (uint16_t *)a.k + r * 32, 64);
    }
    memcpy(b.v, a.v, a.nv * 2); memcpy(b.g, a.g, a.ng * 4); memcpy(b.beta, a.beta, a.nbeta * 4);
    memcpy(b.a_log, a.a_log, a.nalog * 4); memcpy(b.dt_bias, a.dt_bias, a.ndt * 4);
    for (int nh = 0; nh < 3 * 2; ++nh)
        for (int kk = 0; kk < 32; ++kk)
            for (int vv = 0; vv < 32; ++vv)
                b.h0[(size_t)nh * 32 * 40 + vv * 40 + kk] = a.h0[(size_t)nh * 32 * 32 + kk * 32 + vv];
    outs x = outs_new(&a.p), y = outs_new(&b.p);
    ref_kda(&a.p, 0, 0, x.o, x.ht);
    ref_kda(&b.p, 0, 0, y.o, y.ht);
    assert_true(rel(y.o, x.o, x.no) == 0.0);
    assert_true(rel(y.ht, x.ht, x.nht) == 0.0);
    outs_free(&x); outs_free(&y);
    ref_kda_host_free(&a); ref_kda_host_free(&b);
}

/* One token, dk = dv = 1, log gate, no norm: the recurrence by hand. */
static void test_ref_kda__scalar_by_hand(void **state)
{
    (void)state;
    static const int lens[] = { 2 };
    ref_kda_case c = base_case(1, 1);
    c.nseq = 1; c.lens = lens; c.h = 1; c.hv = 1; c.gate = 0; c.log_gate_max = 1.0;
    c.l2norm = 0; c.beta_sigmoid = 0;
    ref_kda_host hp;
    assert_int_equal(ref_kda_host_make(&hp, &c, 7), 0);
    outs a = outs_new(&hp.p);
    ref_kda(&hp.p, 0, 0, a.o, a.ht);
    double s = hp.h0[0];
    for (int i = 0; i < 2; ++i) {
        const double q = check_bf16_to_f32(((uint16_t *)hp.q)[i]), k = check_bf16_to_f32(((uint16_t *)hp.k)[i]);
        const double v = check_bf16_to_f32(((uint16_t *)hp.v)[i]);
        s *= exp(hp.g[i]);
        s += k * hp.beta[i] * (v - s * k);
        assert_true(fabs(a.o[i] - s * q * (double)hp.p.scale) < 1e-12);
    }
    assert_true(fabs(a.ht[0] - s) < 1e-12);
    outs_free(&a);
    ref_kda_host_free(&hp);
}

/* The in-kernel gate form equals the log-space form fed the same g by hand. */
static void test_ref_kda__gate_form_matches_log_gate(void **state)
{
    (void)state;
    static const int lens[] = { 5 };
    ref_kda_case c = base_case(16, 16);
    c.nseq = 1; c.lens = lens;
    ref_kda_host hp;
    assert_int_equal(ref_kda_host_make(&hp, &c, check_fresh_seed()), 0);
    outs a = outs_new(&hp.p), b = outs_new(&hp.p);
    ref_kda(&hp.p, 0, 0, a.o, a.ht);
    for (size_t i = 0; i < hp.ng; ++i) {
        const int hv = (int)(i / 16 % 2), d = (int)(i % 16);
        const double x = exp((double)hp.a_log[hv]) * ((double)hp.g[i] + hp.dt_bias[hv * 16 + d]);
        const double g = -5.0 / (1.0 + exp(-x));
        assert_true(g >= -5.0 && g <= 0.0);
        hp.g[i] = (float)g;
    }
    hp.p.gate = 0;
    ref_kda(&hp.p, 0, 0, b.o, b.ht);
    assert_true(rel(b.o, a.o, a.no) < 1e-6);   /* g rounded to fp32 */
    outs_free(&a); outs_free(&b);
    ref_kda_host_free(&hp);
}

/* The tests above can fail: each planted slip of the chunked form is detected. */
static void test_ref_kda__mutants_detected(void **state)
{
    (void)state;
    static const int lens[] = { 17, 0, 16 };
    static const ref_kda_mut muts[] = { REF_KDA_MUT_NO_DECAY, REF_KDA_MUT_NO_DIAG, REF_KDA_MUT_NO_INTER };
    ref_kda_case c = base_case(32, 32);
    c.nseq = 3; c.lens = lens;
    for (int m = 0; m < 3; ++m) {
        double e = chunked_vs_recurrence(&c, muts[m], 16);
        if (!(e > 1e-3))
            fail_msg("mutant %d not detected: rel err %.3e", (int)muts[m], e);
    }
}

/* Segment maps (A, B) composed from the initial state give the final state of the recurrence. */
static void test_ref_kda__segments_compose(void **state)
{
    (void)state;
    static const int lens[] = { 70 };
    ref_kda_case c = base_case(16, 24);
    c.nseq = 1; c.lens = lens; c.hv = 1;
    ref_kda_host hp;
    assert_int_equal(ref_kda_host_make(&hp, &c, check_fresh_seed()), 0);
    outs a = outs_new(&hp.p);
    ref_kda(&hp.p, 0, 0, a.o, a.ht);
    const int dk = 16, dv = 24;
    double s[16 * 24], t[16 * 24], A[16 * 16], B[16 * 24];
    for (int kk = 0; kk < dk; ++kk)
        for (int vv = 0; vv < dv; ++vv)
            s[kk * dv + vv] = hp.h0[kk * dv + vv];
    static const long long cuts[] = { 0, 16, 48, 70 };   /* segments of whole chunks of 16 */
    for (int sg = 0; sg < 3; ++sg) {
        assert_int_equal(ref_kda_segment(&hp.p, 16, 0, 0, cuts[sg], cuts[sg + 1], A, B), 0);
        for (int kk = 0; kk < dk; ++kk)
            for (int vv = 0; vv < dv; ++vv) {
                double acc = B[kk * dv + vv];
                for (int j = 0; j < dk; ++j)
                    acc += A[kk * dk + j] * s[j * dv + vv];
                t[kk * dv + vv] = acc;
            }
        memcpy(s, t, sizeof s);
    }
    assert_true(rel(s, a.ht, (size_t)dk * dv) < 1e-10);
    outs_free(&a);
    ref_kda_host_free(&hp);
}

/* fill_rows (the tuner's timing inputs): the first rows drawn, the rest repeating them; 0 draws every row */
static void test_ref_kda__fill_rows_repeats_the_first_rows(void **state)
{
    (void)state;
    ref_kda_case c;
    memset(&c, 0, sizeof c);
    c.nseq = 2, c.t = 13, c.h = 2, c.hv = 4, c.dk = 16, c.dv = 8, c.log_gate_max = 0.1, c.h0 = 1, c.ht = 1;
    c.fill_rows = 3;
    ref_kda_host a, b;
    assert_int_equal(ref_kda_host_make(&a, &c, 7), 0);
    c.fill_rows = 0;
    assert_int_equal(ref_kda_host_make(&b, &c, 7), 0);
    const size_t rq = (size_t)c.h * c.dk, rv = (size_t)c.hv * c.dv, rg = (size_t)c.hv * c.dk, rb = c.hv;
    const size_t rows = (size_t)c.nseq * c.t;
    for (size_t r = 3; r < rows; r++) {
        assert_memory_equal((uint16_t *)a.q + r * rq, (uint16_t *)a.q + (r % 3) * rq, rq * 2);
        assert_memory_equal((uint16_t *)a.k + r * rq, (uint16_t *)a.k + (r % 3) * rq, rq * 2);
        assert_memory_equal((uint16_t *)a.v + r * rv, (uint16_t *)a.v + (r % 3) * rv, rv * 2);
        assert_memory_equal(a.g + r * rg, a.g + (r % 3) * rg, rg * 4);
        assert_memory_equal(a.beta + r * rb, a.beta + (r % 3) * rb, rb * 4);
    }
    /* every row drawn: row 3 is not row 0 */
    assert_memory_not_equal((uint16_t *)b.q + 3 * rq, b.q, rq * 2);
    ref_kda_host_free(&a);
    ref_kda_host_free(&b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ref_kda__scalar_by_hand),
        cmocka_unit_test(test_ref_kda__gate_form_matches_log_gate),
        cmocka_unit_test(test_ref_kda__layouts_agree),
        cmocka_unit_test(test_ref_kda__chunked_matches_recurrence_lower_bound),
        cmocka_unit_test(test_ref_kda__chunked_matches_recurrence_log_gate_near_zero),
        cmocka_unit_test(test_ref_kda__chunked_matches_recurrence_padded_strided),
        cmocka_unit_test(test_ref_kda__mutants_detected),
        cmocka_unit_test(test_ref_kda__segments_compose),
        cmocka_unit_test(test_ref_kda__fill_rows_repeats_the_first_rows),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
