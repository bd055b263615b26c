/* tests/cpu/test_ref_feat.c: the fp64 reference's model features (window, softcap, sinks, FP8 K/V, paged prefill) against the definitions written out */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tuner/check.h"
#include "tuner/ref_attn.h"

/* One problem: q [b, sq, hq, d] bf16, k/v [b, skv, hkv, d] bf16 (or e4m3 bytes), contiguous; kv_len per sequence. */
typedef struct fprob {
    ref_attn_desc a;
    void *q, *k, *v;
    int kv_len[4];
    float sinks[16], ks[8], vs[8];
} fprob;

static void fprob_init(fprob *p, int b, int sq, int skv, int hq, int hkv, int d, int fp8, uint64_t seed)
{
    memset(p, 0, sizeof *p);
    ref_attn_desc *a = &p->a;
    a->dtype = CHECK_BF16;
    a->b = b, a->sq = sq, a->skv = skv, a->hq = hq, a->hkv = hkv, a->d = d, a->dv = d, a->causal = 1;
    a->scale = 1.0 / sqrt((double)d);
    a->q_sh = d, a->q_ss = (long long)hq * d, a->q_sb = a->q_ss * sq;
    a->k_sh = d, a->k_ss = (long long)hkv * d, a->k_sb = a->k_ss * skv;
    a->v_sh = a->k_sh, a->v_ss = a->k_ss, a->v_sb = a->k_sb;
    size_t nq = (size_t)b * sq * hq * d, nk = (size_t)b * skv * hkv * d;
    p->q = malloc(nq * 2);
    check_fill_normal(CHECK_BF16, p->q, nq, seed, 1.0);
    if (fp8) {
        p->k = malloc(nk);
        p->v = malloc(nk);
        uint64_t x = seed * 2654435761u + 1;
        for (size_t i = 0; i < nk; i++) {   /* every byte but the NaNs 0x7f / 0xff */
            unsigned char kb, vb;
            do { x = x * 6364136223846793005ull + 1442695040888963407ull; kb = (unsigned char)(x >> 56); } while ((kb & 0x7f) == 0x7f);
            do { x = x * 6364136223846793005ull + 1442695040888963407ull; vb = (unsigned char)(x >> 56); } while ((vb & 0x7f) == 0x7f);
            ((unsigned char *)p->k)[i] = kb;
            ((unsigned char *)p->v)[i] = vb;
        }
        for (int h = 0; h < hkv; h++)
            p->ks[h] = 0.002f * (h + 1), p->vs[h] = 0.01f / (h + 1);
        a->kv_fp8 = 1, a->k_scale = p->ks, a->v_scale = p->vs;
    } else {
        p->k = malloc(nk * 2);
        p->v = malloc(nk * 2);
        check_fill_normal(CHECK_BF16, p->k, nk, seed + 1, 2.0);
        check_fill_normal(CHECK_BF16, p->v, nk, seed + 2, 1.0);
    }
    a->q = p->q, a->k = p->k, a->v = p->v;
    for (int h = 0; h < hq && h < 16; h++)
        p->sinks[h] = (float)(h % 3) - 0.5f;
}

static void fprob_free(fprob *p) { free(p->q), free(p->k), free(p->v); }

/* The definition, written out for one (sequence b, row i, head h): visible keys j with
 * pi - W <= j <= pi (pi = i + n_kv - n_q), score_j = c tanh(scale q.k_j / c), weights e^score_j over
 * e^sink + sum e^score_j; lse = log of that sum. */
static void brute(const fprob *p, int b, int i, int h, double *o, double *lse)
{
    const ref_attn_desc *a = &p->a;
    int n_kv = a->kv_len ? a->kv_len[b] : a->skv, n_q = a->sq, kh = h / (a->hq / a->hkv);
    long long pi = i + n_kv - n_q;
    double den = a->sinks ? exp(a->sinks[h]) : 0.0;
    double *num = calloc((size_t)a->d, sizeof *num);
    for (long long j = 0; j < n_kv; j++) {
        if (j > pi || (a->window && j < pi - a->window_left))
            continue;
        double s = 0;
        for (int c = 0; c < a->d; c++) {
            double q = check_load(CHECK_BF16, a->q, (size_t)(((long long)b * a->sq + i) * a->hq * a->d + h * a->d + c));
            size_t ki = (size_t)(((long long)b * a->skv + j) * a->hkv * a->d + kh * a->d + c);
            double k = a->kv_fp8 ? a->k_scale[kh] * ref_e4m3(((const unsigned char *)a->k)[ki]) : check_load(CHECK_BF16, a->k, ki);
            s += q * k;
        }
        s *= a->scale;
        if (a->softcap > 0)
            s = a->softcap * tanh(s / a->softcap);
        double w = exp(s);
        den += w;
        for (int c = 0; c < a->d; c++) {
            size_t vi = (size_t)(((long long)b * a->skv + j) * a->hkv * a->d + kh * a->d + c);
            num[c] += w * (a->kv_fp8 ? a->v_scale[kh] * ref_e4m3(((const unsigned char *)a->v)[vi]) : check_load(CHECK_BF16, a->v, vi));
        }
    }
    for (int c = 0; c < a->d; c++)
        o[c] = den > 0 ? num[c] / den : 0.0;
    *lse = log(den);   /* -inf when nothing is visible and there is no sink */
    free(num);
}

/* ref_attn against brute() on every row; returns the worst relative difference (o and lse). */
static double against_brute(const fprob *p)
{
    const ref_attn_desc *a = &p->a;
    long long rows = ref_attn_rows(a);
    double *o = malloc(sizeof *o * (size_t)(rows * a->hq * a->dv)), *lse = malloc(sizeof *lse * (size_t)(rows * a->hq));
    double *bo = malloc(sizeof *bo * (size_t)a->dv), worst = 0;
    ref_attn(a, o, lse);
    for (int b = 0; b < a->b; b++)
        for (int i = 0; i < a->sq; i++)
            for (int h = 0; h < a->hq; h++) {
                double bl;
                long long rid = ((long long)b * a->sq + i) * a->hq + h;
                brute(p, b, i, h, bo, &bl);
                if (isinf(bl) || isinf(lse[rid]))
                    assert_true(isinf(bl) && isinf(lse[rid]) && bl < 0 && lse[rid] < 0);
                else
                    worst = fmax(worst, fabs(bl - lse[rid]));
                for (int c = 0; c < a->dv; c++)
                    worst = fmax(worst, fabs(bo[c] - o[rid * a->dv + c]) / (1e-30 + fabs(bo[c]) + 1e-3));
            }
    free(o), free(lse), free(bo);
    return worst;
}

static void test_ref_feat__window_matches_definition(void **state)
{
    (void)state;
    int wins[] = {0, 1, 5, 63, 200};   /* window 0 (the diagonal only), 1, below a tile, >= length */
    for (size_t w = 0; w < sizeof wins / sizeof wins[0]; w++) {
        fprob p;
        fprob_init(&p, 2, 9, 150, 8, 2, 64, 0, 11 + w);
        p.kv_len[0] = 150, p.kv_len[1] = 5;   /* 5 < sq: rows before the first key see nothing */
        p.a.kv_len = p.kv_len;
        p.a.window = 1, p.a.window_left = wins[w];
        assert_true(against_brute(&p) < 1e-9);
        fprob_free(&p);
    }
}

static void test_ref_feat__softcap_matches_definition(void **state)
{
    (void)state;
    fprob p;
    fprob_init(&p, 1, 7, 90, 4, 1, 64, 0, 21);
    p.a.scale = 3.0;   /* large logits: the cap decides */
    p.a.softcap = 5.0;
    assert_true(against_brute(&p) < 1e-9);
    fprob_free(&p);
}

static void test_ref_feat__sinks_match_definition_and_empty_rows(void **state)
{
    (void)state;
    fprob p;
    fprob_init(&p, 2, 4, 60, 6, 2, 64, 0, 31);
    p.kv_len[0] = 60, p.kv_len[1] = 0;   /* an empty sequence: o = 0, lse = the sink */
    p.a.kv_len = p.kv_len;
    p.a.sinks = p.sinks;
    assert_true(against_brute(&p) < 1e-9);
    long long rows = ref_attn_rows(&p.a);
    double *o = malloc(sizeof *o * (size_t)(rows * 6 * 64)), *lse = malloc(sizeof *lse * (size_t)(rows * 6));
    ref_attn(&p.a, o, lse);
    for (int i = 0; i < 4; i++)
        for (int h = 0; h < 6; h++) {
            long long rid = ((long long)1 * 4 + i) * 6 + h;
            assert_true(fabs(lse[rid] - p.sinks[h]) < 1e-12);
            for (int c = 0; c < 64; c++)
                assert_true(o[rid * 64 + c] == 0.0);
        }
    free(o), free(lse);
    fprob_free(&p);
}

/* Split partials carry no sink; the combine adds it once: equal to the unsplit reference with sinks. */
static void test_ref_feat__split_combine_with_sinks_equals_unsplit(void **state)
{
    (void)state;
    fprob p;
    fprob_init(&p, 2, 2, 300, 8, 2, 64, 0, 41);
    p.kv_len[0] = 300, p.kv_len[1] = 1;
    p.a.kv_len = p.kv_len;
    p.a.window = 1, p.a.window_left = 100;
    p.a.softcap = 20.0;
    p.a.sinks = p.sinks;
    long long n = ref_attn_rows(&p.a) * 8;
    int sp = 4;
    double *wo = malloc(sizeof *wo * (size_t)(sp * n * 64)), *wl = malloc(sizeof *wl * (size_t)(sp * n));
    double *o = malloc(sizeof *o * (size_t)(n * 64)), *l = malloc(sizeof *l * (size_t)n);
    double *o2 = malloc(sizeof *o2 * (size_t)(n * 64)), *l2 = malloc(sizeof *l2 * (size_t)n);
    ref_attn_split(&p.a, 64, sp, wo, wl);
    ref_attn_combine_sinks(sp, n, 64, 8, p.sinks, wo, wl, o, l);
    ref_attn(&p.a, o2, l2);
    for (long long r = 0; r < n; r++) {
        assert_true(fabs(l[r] - l2[r]) < 1e-9);
        for (int c = 0; c < 64; c++)
            assert_true(fabs(o[r * 64 + c] - o2[r * 64 + c]) < 1e-9);
    }
    free(wo), free(wl), free(o), free(l), free(o2), free(l2);
    fprob_free(&p);
}

static void test_ref_feat__e4m3_known_values(void **state)
{
    (void)state;
    assert_true(ref_e4m3(0x00) == 0.0);
    assert_true(ref_e4m3(0x38) == 1.0);          /* e 7, m 0 */
    assert_true(ref_e4m3(0xb8) == -1.0);
    assert_true(ref_e4m3(0x7e) == 448.0);        /* the largest: e 15, m 6 */
    assert_true(ref_e4m3(0xfe) == -448.0);
    assert_true(ref_e4m3(0x01) == ldexp(1.0, -9));   /* the smallest subnormal */
    assert_true(ref_e4m3(0x07) == 7 * ldexp(1.0, -9));
    assert_true(ref_e4m3(0x08) == ldexp(1.0, -6));   /* the smallest normal */
    assert_true(isnan(ref_e4m3(0x7f)) && isnan(ref_e4m3(0xff)));
    /* the kernels' conversion (common/fp8.cuh kf_e4m3x4, kf_e4m3_f32): the byte's bits 6..0 at bits 13..7 of an
     * fp16, the sign at bit 15, is the value / 256 for every finite byte, subnormals included */
    for (int b = 0; b < 256; b++) {
        if ((b & 0x7f) == 0x7f)
            continue;
        uint16_t h = (uint16_t)(((b & 0x80) << 8) | ((b & 0x7f) << 7));
        unsigned char hb[2] = {(unsigned char)(h & 0xff), (unsigned char)(h >> 8)};
        assert_true(check_load(CHECK_FP16, hb, 0) * 256.0 == ref_e4m3((unsigned char)b));
    }
}

static void test_ref_feat__fp8_matches_definition(void **state)
{
    (void)state;
    fprob p;
    fprob_init(&p, 2, 3, 80, 8, 2, 64, 1, 51);
    p.kv_len[0] = 80, p.kv_len[1] = 17;
    p.a.kv_len = p.kv_len;
    assert_true(against_brute(&p) < 1e-9);
    fprob_free(&p);
}

/* Everything on at once, and a paged cache (shuffled pages) equal to the contiguous one */
static void test_ref_feat__all_features_paged_equals_contiguous(void **state)
{
    (void)state;
    fprob p;
    fprob_init(&p, 2, 5, 96, 8, 2, 64, 0, 61);
    p.kv_len[0] = 96, p.kv_len[1] = 33;
    p.a.kv_len = p.kv_len;
    p.a.window = 1, p.a.window_left = 20;
    p.a.softcap = 10.0;
    p.a.sinks = p.sinks;
    assert_true(against_brute(&p) < 1e-9);
    /* pages of 16 rows: page j of sequence b is pool page bt[b][j], a shuffle of all 12 */
    int ps = 16, bt[2 * 6] = {7, 2, 11, 0, 5, 9, 3, 10, 1, 8, 6, 4};
    size_t row = (size_t)2 * 64 * 2;   /* hkv * d bf16 */
    unsigned char *kp = malloc(12 * ps * row), *vp = malloc(12 * ps * row);
    for (int b = 0; b < 2; b++)
        for (int j = 0; j < 96; j++) {
            size_t src = ((size_t)b * 96 + j) * row, dst = ((size_t)bt[b * 6 + j / ps] * ps + j % ps) * row;
            memcpy(kp + dst, (unsigned char *)p.k + src, row);
            memcpy(vp + dst, (unsigned char *)p.v + src, row);
        }
    ref_attn_desc pg = p.a;
    pg.k = kp, pg.v = vp, pg.block_table = bt, pg.bt_sb = 6, pg.page_size = ps;
    pg.k_sb = pg.v_sb = (long long)ps * 2 * 64;
    long long n = ref_attn_rows(&p.a) * 8;
    double *o = malloc(sizeof *o * (size_t)(n * 64)), *l = malloc(sizeof *l * (size_t)n);
    double *o2 = malloc(sizeof *o2 * (size_t)(n * 64)), *l2 = malloc(sizeof *l2 * (size_t)n);
    ref_attn(&p.a, o, l);
    ref_attn(&pg, o2, l2);
    assert_memory_equal(o, o2, sizeof *o * (size_t)(n * 64));
    assert_memory_equal(l, l2, sizeof *l * (size_t)n);
    free(o), free(l), free(o2), free(l2), free(kp), free(vp);
    fprob_free(&p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ref_feat__window_matches_definition),
        cmocka_unit_test(test_ref_feat__softcap_matches_definition),
        cmocka_unit_test(test_ref_feat__sinks_match_definition_and_empty_rows),
        cmocka_unit_test(test_ref_feat__split_combine_with_sinks_equals_unsplit),
        cmocka_unit_test(test_ref_feat__e4m3_known_values),
        cmocka_unit_test(test_ref_feat__fp8_matches_definition),
        cmocka_unit_test(test_ref_feat__all_features_paged_equals_contiguous),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
