/* tests/cpu/test_tune.c: the tuner's pure parts and its database work: enumeration, budget, band, winners, resume, merge, writers */
#include <ftw.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>
#include <sqlite3.h>

#include "db/db.h"
#include "db/migrate.h"
#include "gen/nvrtc.h"
#include "gen/template.h"
#include "runtime/cuda.h"
#include "runtime/nvml.h"
#include "tuner/tune_family.h"
#include "tuner/attn_run.h"
#include "tuner/ceil_read.h"
#include "tuner/tune_clock.h"
#include "tuner/tune_ilv.h"
#include "tuner/tune_ceiling.h"
#include "tuner/tune_enum.h"
#include "tuner/tune_eta.h"
#include "tuner/tune_gate.h"
#include "tuner/tune_phase.h"
#include "tuner/tune_select.h"
#include "tuner/tune_split.h"
#include "tuner/tune_work.h"

/* ---- fixtures ------------------------------------------------------------------ */

typedef struct fx {
    char dir[256];
    char a[300], b[300], out[300];
} fx;

static int rm_entry(const char *p, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb, (void)flag, (void)ftw;
    return remove(p);
}

static int setup(void **state)
{
    fx *f = calloc(1, sizeof *f);
    const char *tmp = getenv("TMPDIR");
    snprintf(f->dir, sizeof f->dir, "%s/kf_test_tune.XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(f->dir))
        return -1;
    snprintf(f->a, sizeof f->a, "%s/a.db", f->dir);
    snprintf(f->b, sizeof f->b, "%s/b.db", f->dir);
    snprintf(f->out, sizeof f->out, "%s/all.db", f->dir);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fx *f = *state;
    nftw(f->dir, rm_entry, 8, FTW_DEPTH | FTW_PHYS);
    free(f);
    return 0;
}

static gen_kvset shape_of(const char *text)
{
    gen_kvset s;
    char err[256];
    gen_kv_clear(&s);
    if (gen_kv_parse(&s, text, err, sizeof err))
        fail_msg("bad shape '%s': %s", text, err);
    return s;
}

/* ---- enumeration ------------------------------------------------------------------ */

static void test_tune__enumeration_prunes_by_device_limits(void **state)
{
    gen_host *h = gen_host_new(NULL);
    gen_tmpl *t = gen_tmpl_load(h, "attn_prefill");
    assert_non_null(t);
    gen_kvset shape = shape_of("family=attn_prefill,dtype=bf16,b=1,sq=4096,skv=4096,hq=32,hkv=8,d=128,causal=1");
    /* the limits are data: an H200 and the same GPU with only 48 KiB of shared memory a block */
    gen_device big, small;
    assert_int_equal(gen_device_for_arch(&big, "sm_90a"), 0);
    small = big;
    small.smem_optin = 48 * 1024;
    tune_space a, b;
    assert_int_equal(tune_enumerate(t, &shape, &big, &a), 0);
    assert_int_equal(tune_enumerate(t, &shape, &small, &b), 0);
    assert_int_equal(a.points, b.points);
    assert_int_equal(a.n + a.pruned - a.default_added, a.points);
    assert_true(b.n - b.default_added < a.n - a.default_added);
    assert_true(b.pruned > a.pruned);
    /* every listed variant is one valid() accepts on that device; keys are distinct */
    for (int i = 0; i < b.n; i++) {
        char why[256];
        if (b.v[i].is_default && b.default_added)
            continue;
        assert_int_equal(gen_tmpl_valid(t, &b.fixed, &b.v[i].params, &small, why, sizeof why), 1);
        for (int k = 0; k < i; k++)
            assert_string_not_equal(b.v[i].key, b.v[k].key);
    }
    /* the default is in the list, and its full params carry the fixed values */
    assert_true(a.idefault >= 0 && a.v[a.idefault].is_default);
    assert_non_null(strstr(a.v[a.idefault].full, "dtype=bf16"));
    assert_non_null(strstr(a.v[a.idefault].full, "g=4"));
    tune_space_free(&a);
    tune_space_free(&b);
    gen_host_free(h);
}

static void test_tune__decode_space_lists_runtime_splits(void **state)
{
    gen_host *h = gen_host_new(NULL);
    gen_tmpl *t = gen_tmpl_load(h, "attn_decode");
    assert_non_null(t);
    gen_kvset shape = shape_of("family=attn_decode,dtype=bf16,b=1,sq=1,skv=131072,hq=32,hkv=8,d=128,causal=0");
    gen_device dev;
    gen_device_for_arch(&dev, "sm_90a");
    tune_space s;
    assert_int_equal(tune_enumerate(t, &shape, &dev, &s), 0);
    int sp1 = 0, sp32 = 0;
    for (int i = 0; i < s.n; i++) {
        sp1 += gen_kv_int(&s.v[i].params, "sp", 0) == 1;
        sp32 += gen_kv_int(&s.v[i].params, "sp", 0) == 32;
    }
    assert_true(sp1 > 0 && sp1 == sp32);     /* the split count is a tuned knob of every tile config */
    tune_space_free(&s);
    gen_host_free(h);
}

static void test_tune__random_budget_is_seeded_and_keeps_default(void **state)
{
    int a[100], b[100], c[100];
    int na = tune_pick_random(100, 10, 42, 77, a);
    int nb = tune_pick_random(100, 10, 42, 77, b);
    int nc = tune_pick_random(100, 10, 43, 77, c);
    assert_int_equal(na, 10);
    assert_int_equal(nb, 10);
    assert_int_equal(nc, 10);
    assert_memory_equal(a, b, sizeof(int) * 10);
    assert_true(memcmp(a, c, sizeof(int) * 10) != 0);
    int has = 0;
    for (int i = 0; i < na; i++) {
        has |= a[i] == 77;
        if (i)
            assert_true(a[i] > a[i - 1]);
    }
    assert_true(has);
    assert_int_equal(tune_pick_random(5, 10, 1, 2, a), 5);
    assert_int_equal(tune_strategy_parse("halving"), TUNE_STRAT_HALVING);
    assert_int_equal(tune_strategy_parse("bogus"), -1);
    assert_true(tune_seed_of("b1.d128", 0) != tune_seed_of("b2.d128", 0));
}

static void test_tune__halving_keeps_the_fastest(void **state)
{
    double ms[] = {3.0, NAN, 1.0, 2.0, 0.5, -1, 2.0};
    int keep[7];
    int n = tune_halving_keep(ms, 7, 3, keep);
    assert_int_equal(n, 3);
    assert_int_equal(keep[0], 4);
    assert_int_equal(keep[1], 2);
    assert_int_equal(keep[2], 3);            /* tie 2.0 / 2.0: the lower index */
    assert_int_equal(tune_halving_keep(ms, 7, 10, keep), 5);  /* NaN and negative never kept */
    assert_true(tune_screen_samples(0) < tune_screen_samples(1));
    assert_true(tune_screen_samples(5) < TUNE_MIN_SAMPLES);
}

/* ---- winner selection on recorded samples --------------------------------------------- */

static tune_meas M(const char *key, int status, int control, int n, double ms, long long id)
{
    tune_meas m = {key, status, control, n, ms, ms * 0.02, id};
    return m;
}

static void test_tune__band_is_relative_difference_with_floor(void **state)
{
    assert_true(fabs(tune_band(1.0, 1.05, 0.01) - 0.05) < 1e-12);
    assert_true(fabs(tune_band(1.05, 1.0, 0.01) - 0.05) < 1e-12);
    assert_true(fabs(tune_band(1.0, 1.001, 0.01) - 0.01) < 1e-12);
    assert_true(isnan(tune_band(NAN, 1.0, 0.01)));
    assert_true(isnan(tune_band(0, 1.0, 0.01)));
}

static void test_tune__tie_inside_band_keeps_default(void **state)
{
    /* default 1.00 ms, control 1.03 ms: band 3%; the best other is 2% faster: noise */
    tune_meas m[] = {
        M("dflt", TUNE_OK, 0, 30, 1.00, 1), M("x", TUNE_OK, 0, 30, 0.98, 2),
        M("y", TUNE_OK, 0, 30, 1.20, 3), M("dflt", TUNE_OK, 1, 30, 1.03, 4),
    };
    tune_choice ch;
    int w = tune_select(m, 4, "dflt", TUNE_MIN_SAMPLES, TUNE_BAND_FLOOR, &ch);
    assert_int_equal(w, 0);
    assert_true(ch.default_kept);
    assert_true(fabs(ch.band - 0.03) < 1e-9);
    assert_true(fabs(ch.speedup - 1.0) < 1e-12);
    assert_true(fabs(ch.best_ms - 0.98) < 1e-12);
}

static void test_tune__faster_than_band_wins(void **state)
{
    tune_meas m[] = {
        M("dflt", TUNE_OK, 0, 30, 1.00, 1), M("x", TUNE_OK, 0, 30, 0.90, 2),
        M("dflt", TUNE_OK, 1, 30, 1.02, 3), M("y", TUNE_OK, 0, 30, 0.95, 4),
    };
    tune_choice ch;
    int w = tune_select(m, 4, "dflt", TUNE_MIN_SAMPLES, TUNE_BAND_FLOOR, &ch);
    assert_int_equal(w, 1);
    assert_false(ch.default_kept);
    assert_true(fabs(ch.speedup - 1.0 / 0.90) < 1e-9);   /* against the faster of the two default timings */
    assert_true(fabs(ch.band - 0.02) < 1e-9);
    /* without a control the floor is the band: 0.5% faster is not enough, 2% is */
    tune_meas n2[] = {M("dflt", TUNE_OK, 0, 30, 1.00, 1), M("x", TUNE_OK, 0, 30, 0.995, 2)};
    assert_int_equal(tune_select(n2, 2, "dflt", TUNE_MIN_SAMPLES, TUNE_BAND_FLOOR, &ch), 0);
    assert_false(ch.control_ok);
    n2[1].median_ms = 0.98;
    assert_int_equal(tune_select(n2, 2, "dflt", TUNE_MIN_SAMPLES, TUNE_BAND_FLOOR, &ch), 1);
}

static void test_tune__wrong_variant_never_wins(void **state)
{
    /* x is the fastest timing of all, but it also failed the gate once: out */
    tune_meas m[] = {
        M("dflt", TUNE_OK, 0, 30, 1.00, 1), M("x", TUNE_OK, 0, 30, 0.10, 2),
        M("x", TUNE_WRONG, 0, 0, NAN, 3),   M("dflt", TUNE_OK, 1, 30, 1.00, 4),
        M("z", TUNE_WRONG, 0, 0, NAN, 5),   M("e", TUNE_ERROR, 0, 0, NAN, 6),
        M("nan", TUNE_OK, 0, 30, NAN, 7),   M("few", TUNE_OK, 0, 5, 0.2, 8),
    };
    tune_choice ch;
    int w = tune_select(m, 8, "dflt", TUNE_MIN_SAMPLES, TUNE_BAND_FLOOR, &ch);
    assert_int_equal(w, 0);
    assert_true(ch.default_kept);
    /* a wrong default: the fastest passing candidate, no speed-up figure */
    tune_meas d[] = {
        M("dflt", TUNE_WRONG, 0, 0, NAN, 1), M("a", TUNE_OK, 0, 30, 2.0, 2), M("b", TUNE_OK, 0, 30, 1.5, 3),
    };
    w = tune_select(d, 3, "dflt", TUNE_MIN_SAMPLES, TUNE_BAND_FLOOR, &ch);
    assert_int_equal(w, 2);
    assert_false(ch.default_ok);
    assert_true(isnan(ch.speedup));
    /* nothing passed: no winner */
    tune_meas none[] = {M("dflt", TUNE_WRONG, 0, 0, NAN, 1), M("a", TUNE_ERROR, 0, 0, NAN, 2)};
    assert_int_equal(tune_select(none, 2, "dflt", TUNE_MIN_SAMPLES, TUNE_BAND_FLOOR, &ch), -1);
}

static void test_tune__more_samples_of_one_variant_count(void **state)
{
    /* successive halving left a 20-sample and a 30-sample timing of x: the 30 counts */
    tune_meas m[] = {
        M("dflt", TUNE_OK, 0, 30, 1.00, 1), M("x", TUNE_OK, 0, 20, 0.50, 2),
        M("x", TUNE_OK, 0, 30, 0.995, 3),   M("dflt", TUNE_OK, 1, 30, 1.00, 4),
    };
    tune_choice ch;
    assert_int_equal(tune_select(m, 4, "dflt", TUNE_MIN_SAMPLES, TUNE_BAND_FLOOR, &ch), 0);
    assert_true(ch.default_kept);
}

/* ---- resume ------------------------------------------------------------------------ */

static void test_tune__resume_state(void **state)
{
    tune_meas m[] = {
        M("done", TUNE_OK, 0, 30, 1.0, 1),   M("scr", TUNE_OK, 0, 5, 2.0, 2),
        M("wrong", TUNE_WRONG, 0, 0, NAN, 3), M("err", TUNE_ERROR, 0, 0, NAN, 4),
        M("done", TUNE_OK, 1, 30, 1.1, 5),
    };
    double ms;
    int n;
    assert_int_equal(tune_resume_state(m, 5, "done", 0, 30, 0, &ms, &n), TUNE_DONE);
    assert_true(ms == 1.0 && n == 30);
    assert_int_equal(tune_resume_state(m, 5, "done", 0, 40, 0, NULL, NULL), TUNE_SCREENED);
    assert_int_equal(tune_resume_state(m, 5, "scr", 0, 30, 0, &ms, &n), TUNE_SCREENED);
    assert_true(ms == 2.0 && n == 5);
    assert_int_equal(tune_resume_state(m, 5, "scr", 0, 5, 0, NULL, NULL), TUNE_DONE);
    assert_int_equal(tune_resume_state(m, 5, "wrong", 0, 30, 1, NULL, NULL), TUNE_REJECTED);
    assert_int_equal(tune_resume_state(m, 5, "err", 0, 30, 0, NULL, NULL), TUNE_REJECTED);
    assert_int_equal(tune_resume_state(m, 5, "err", 0, 30, 1, NULL, NULL), TUNE_TODO);
    assert_int_equal(tune_resume_state(m, 5, "new", 0, 30, 0, NULL, NULL), TUNE_TODO);
    assert_int_equal(tune_resume_state(m, 5, "done", 1, 30, 0, NULL, NULL), TUNE_DONE);
    assert_int_equal(tune_resume_state(m, 5, "scr", 1, 30, 0, NULL, NULL), TUNE_TODO);
}

/* ---- database helpers ------------------------------------------------------------------- */

static const db_device DEV = {"NVIDIA H200", "GPU-test", 9, 0, 132, 1980, 3201, "13.0", "13.0", "test"};

static void put_binary(db_store *s, const char *cache_key)
{
    db_binary b = {0};
    b.cache_key = (char *)cache_key;
    b.variant_key = (char *)cache_key;
    b.family = "attn_decode";
    b.image = "cubin";
    b.image_size = 6;
    int ins;
    assert_int_equal(db_binary_put(s, &b, &ins), DB_OK);
}

static long long put_meas(db_store *s, long long run, const char *shape, const char *variant, int status,
                          int n, double ms, int control)
{
    double samples[64];
    for (int i = 0; i < n; i++)
        samples[i] = ms * (1 + 0.001 * (i % 5));
    db_measurement m = {0};
    m.run_id = run;
    m.family = "attn_decode";
    m.shape_key = shape;
    m.variant_key = variant;
    m.cache_key = variant;
    m.status = tune_status_str(status);
    m.error = status == TUNE_WRONG ? 0.5 : 1e-3;
    m.samples_ms = samples;
    m.n_samples = n;
    m.median_ms = ms;
    m.spread_ms = ms * 0.004;
    m.throughput = 1e12;
    m.throughput_unit = "B/s";
    m.ceiling_frac = NAN;
    m.is_control = control;
    long long id;
    assert_int_equal(db_measure_put(s, &m, &id), DB_OK);
    return id;
}

struct collect {
    tune_meas m[64];
    char keys[64][64];
    int n;
};

static int collect_cb(const db_tune_meas *m, void *arg)
{
    struct collect *c = arg;
    snprintf(c->keys[c->n], sizeof c->keys[0], "%s", m->variant_key);
    c->m[c->n] = (tune_meas){c->keys[c->n], tune_status_parse(m->status), m->is_control, m->n_samples,
                             m->median_ms, m->spread_ms, m->id};
    c->n++;
    return 0;
}

/* The first run of test_tune_gpu's small sweep as stored: the default's 11 interleaved slots of 10
 * samples joined into one timing (2 rounds x 5 candidates + 1), each candidate's 2 slots into one. */
static void test_tune__ilv_resume_of_a_finished_shape_times_nothing(void **state)
{
    const char *keys[] = {"dflt", "a", "b", "c", "d", "e"};
    tune_meas m[] = {
        M("dflt", TUNE_OK, 0, 110, 1.00, 6), M("a", TUNE_OK, 0, 20, 1.05, 1), M("b", TUNE_OK, 0, 20, 0.90, 2),
        M("c", TUNE_OK, 0, 20, 1.20, 3),     M("d", TUNE_OK, 0, 20, 1.01, 4), M("e", TUNE_OK, 0, 20, 1.30, 5),
    };
    int st[6], fin[6];
    tune_ilv_resume r;
    tune_ilv_resume_plan(m, 6, keys, 6, 0, NULL, 20, 0, TUNE_ILV_FINALISTS, 1, st, fin, &r);
    assert_true(r.keep);
    assert_int_equal(r.n_gate, 0);
    assert_int_equal(r.n_screen, 0);
    assert_int_equal(r.n_time, 0);
    assert_int_equal(r.n_cand, 5);
    assert_int_equal(r.n_final, 5);
    assert_true(r.dflt);
    for (int k = 0; k < 6; k++)
        assert_int_equal(st[k], TUNE_DONE);
    /* the winner was not stored (interrupted after the timings): the rounds run again */
    tune_ilv_resume_plan(m, 6, keys, 6, 0, NULL, 20, 0, TUNE_ILV_FINALISTS, 0, st, fin, &r);
    assert_false(r.keep);
    assert_int_equal(r.n_time, 0);
    /* more samples asked for than stored: every candidate is timed again */
    tune_ilv_resume_plan(m, 6, keys, 6, 0, NULL, 30, 0, TUNE_ILV_FINALISTS, 1, st, fin, &r);
    assert_false(r.keep);
    assert_int_equal(r.n_time, 5);                  /* the default's 110 samples still count */
}

static void test_tune__ilv_resume_gates_then_times(void **state)
{
    const char *keys[] = {"dflt", "a", "bad", "err"};
    tune_meas m[] = {M("bad", TUNE_WRONG, 0, 0, NAN, 1), M("err", TUNE_ERROR, 0, 0, NAN, 2)};
    int st[4], fin[4];
    tune_ilv_resume r;
    tune_ilv_resume_plan(m, 2, keys, 4, 0, NULL, 20, 0, TUNE_ILV_FINALISTS, 0, st, fin, &r);
    assert_int_equal(r.n_gate, 2);                  /* dflt and a */
    assert_int_equal(r.n_rejected, 2);
    assert_int_equal(st[2], TUNE_REJECTED);
    assert_false(r.keep);
    unsigned char passed[4] = {1, 1, 0, 0};         /* both passed their gates in this run */
    tune_ilv_resume_plan(m, 2, keys, 4, 0, passed, 20, 0, TUNE_ILV_FINALISTS, 1, st, fin, &r);
    assert_int_equal(r.n_gate, 0);
    assert_int_equal(st[0], TUNE_SCREENED);
    assert_int_equal(r.n_cand, 1);
    assert_int_equal(r.n_final, 1);
    assert_int_equal(fin[0], 1);
    assert_int_equal(r.n_time, 2);
    assert_false(r.keep);
    /* --retry-errors: the error is gated again */
    tune_ilv_resume_plan(m, 2, keys, 4, 0, passed, 20, 1, TUNE_ILV_FINALISTS, 1, st, fin, &r);
    assert_int_equal(r.n_gate, 1);
    assert_int_equal(st[3], TUNE_TODO);
    /* only the default passed (1f46f24): its one full timing is all a resume needs */
    const char *one[] = {"dflt", "bad"};
    tune_meas d[] = {M("dflt", TUNE_OK, 0, 20, 1.0, 3), M("bad", TUNE_WRONG, 0, 0, NAN, 1)};
    tune_ilv_resume_plan(d, 2, one, 2, 0, NULL, 20, 0, TUNE_ILV_FINALISTS, 1, st, fin, &r);
    assert_true(r.keep);
    assert_int_equal(r.n_final, 0);
    /* a default that failed: the candidates are timed one by one, the timed ones reused */
    tune_meas f[] = {M("dflt", TUNE_WRONG, 0, 0, NAN, 1), M("a", TUNE_OK, 0, 20, 1.0, 2)};
    tune_ilv_resume_plan(f, 2, keys, 2, 0, NULL, 20, 0, TUNE_ILV_FINALISTS, 1, st, fin, &r);
    assert_false(r.dflt);
    assert_true(r.keep);
    assert_int_equal(r.n_final, 1);
}

/* Ten candidates: screened (5 samples), the 8 fastest timed in the rounds. In the rounds the two
 * slowest finalists came out slower than the screening figures of the two left out; a re-run that
 * ranked by the full timings would swap those in and time the rounds again. */
static void test_tune__ilv_resume_ranks_by_screening_figures(void **state)
{
    const char *keys[] = {"dflt", "c0", "c1", "c2", "c3", "c4", "c5", "c6", "c7", "c8", "c9"};
    tune_meas m[32];
    int n = 0;
    m[n++] = M("dflt", TUNE_OK, 0, 170, 1.0, 100);
    for (int c = 0; c < 10; c++) {
        m[n++] = M(keys[c + 1], TUNE_OK, 0, TUNE_ILV_SCREEN, 1.0 + 0.01 * c, 1 + c);  /* c0 fastest */
        if (c < 8)
            m[n++] = M(keys[c + 1], TUNE_OK, 0, 20, c >= 6 ? 1.5 : 1.0 + 0.01 * c, 50 + c);
    }
    int st[11], fin[11];
    tune_ilv_resume r;
    tune_ilv_resume_plan(m, n, keys, 11, 0, NULL, 20, 0, TUNE_ILV_FINALISTS, 1, st, fin, &r);
    assert_int_equal(r.n_cand, 10);
    assert_int_equal(r.n_screen, 0);
    assert_int_equal(r.n_final, TUNE_ILV_FINALISTS);
    for (int i = 0; i < r.n_final; i++)
        assert_int_equal(fin[i], i + 1);            /* c0..c7, fastest first */
    assert_int_equal(r.n_time, 0);
    assert_true(r.keep);
    /* before any screening: every candidate to screen, no finalists yet */
    tune_meas d[] = {M("dflt", TUNE_OK, 0, 20, 1.0, 1)};
    tune_ilv_resume_plan(d, 1, keys, 11, 0, NULL, 20, 0, TUNE_ILV_FINALISTS, 0, st, fin, &r);
    assert_int_equal(r.n_gate, 10);
    unsigned char passed[11];
    memset(passed, 1, sizeof passed);
    tune_ilv_resume_plan(d, 1, keys, 11, 0, passed, 20, 0, TUNE_ILV_FINALISTS, 0, st, fin, &r);
    assert_int_equal(r.n_screen, 10);
    assert_int_equal(r.n_final, 0);
    assert_false(r.keep);
    assert_true(isnan(tune_screen_figure(d, 1, "c0")));
    assert_true(tune_screen_figure(m, n, "c7") == 1.0 + 0.01 * 7);
}

/* A finalist dropped early in the rounds (its paired timing has 9 samples, fewer than the full 30) is
 * done: a re-run keeps the winner, times nothing again, and ranks by the screening figures, not by the
 * short timing of the rounds (session 8: test_tune_gpu's resume re-timed every dropped finalist). */
static void test_tune__ilv_resume_after_an_early_drop(void **state)
{
    (void)state;
    const char *keys[] = {"dflt", "c0", "c1", "c2", "c3", "c4", "c5", "c6", "c7"};
    tune_meas m[32];
    int n = 0;
    m[n] = M("dflt", TUNE_OK, 0, 48, 1.0, 100);
    m[n++].paired = 1;
    for (int c = 0; c < 8; c++) {
        m[n++] = M(keys[c + 1], TUNE_OK, 0, TUNE_ILV_SCREEN, 1.05 + 0.01 * c, 1 + c);
        if (c < TUNE_ILV_FINALISTS) {              /* the finalists, dropped after 3 rounds of 3 samples */
            m[n] = M(keys[c + 1], TUNE_OK, 0, 9, c == 0 ? 1.5 : 1.06 + 0.01 * c, 50 + c);
            m[n++].paired = 1;
        }
    }
    assert_int_equal(tune_resume_state(m, n, "c0", 0, 30, 0, NULL, NULL), TUNE_DONE);
    assert_int_equal(tune_resume_state(m, n, "c7", 0, 30, 0, NULL, NULL), TUNE_SCREENED);
    assert_true(tune_screen_figure(m, n, "c0") == 1.05);       /* its screening, not the 1.5 of the rounds */
    int st[9], fin[9];
    tune_ilv_resume r;
    tune_ilv_resume_plan(m, n, keys, 9, 0, NULL, 30, 0, TUNE_ILV_FINALISTS, 1, st, fin, &r);
    assert_int_equal(r.n_final, TUNE_ILV_FINALISTS);
    for (int i = 0; i < r.n_final; i++)
        assert_int_equal(fin[i], i + 1);
    assert_int_equal(r.n_time, 0);
    assert_true(r.keep);
    /* the same without the mark: the short timings are screening figures, the finalists are timed again */
    for (int i = 0; i < n; i++)
        m[i].paired = 0;
    tune_ilv_resume_plan(m, n, keys, 9, 0, NULL, 30, 0, TUNE_ILV_FINALISTS, 1, st, fin, &r);
    assert_false(r.keep);
}

static void test_tune__resume_reads_the_database(void **state)
{
    fx *f = *state;
    db_store *s;
    assert_int_equal(db_open(&s, f->a, DB_CREATE), DB_OK);
    long long r1, r2;
    assert_int_equal(db_run_begin(s, &DEV, "kforge tune", &r1), DB_OK);
    put_meas(s, r1, "b1", "v1", TUNE_OK, 30, 1.0, 0);
    put_meas(s, r1, "b1", "v2", TUNE_WRONG, 0, NAN, 0);
    put_meas(s, r1, "b2", "v1", TUNE_OK, 30, 1.0, 0);
    /* a second run (a resumed sweep) re-measures v1 of b1: the first is superseded */
    assert_int_equal(db_run_begin(s, &DEV, "kforge tune", &r2), DB_OK);
    put_meas(s, r2, "b1", "v1", TUNE_OK, 30, 0.9, 0);
    struct collect c = {0};
    assert_int_equal(db_tune_meas_each(s, DEV.name, "attn_decode", "b1", collect_cb, &c), DB_OK);
    assert_int_equal(c.n, 2);
    double ms;
    assert_int_equal(tune_resume_state(c.m, c.n, "v1", 0, 30, 0, &ms, NULL), TUNE_DONE);
    assert_true(ms == 0.9);
    assert_int_equal(tune_resume_state(c.m, c.n, "v2", 0, 30, 0, NULL, NULL), TUNE_REJECTED);
    assert_int_equal(tune_resume_state(c.m, c.n, "v3", 0, 30, 0, NULL, NULL), TUNE_TODO);
    assert_int_equal(c.m[1].n_samples, 30);
    /* another GPU model sees nothing */
    struct collect o = {0};
    assert_int_equal(db_tune_meas_each(s, "NVIDIA A100", "attn_decode", "b1", collect_cb, &o), DB_OK);
    assert_int_equal(o.n, 0);
    long long ok, wrong, err;
    assert_int_equal(db_tune_meas_count(s, DEV.name, NULL, &ok, &wrong, &err), DB_OK);
    assert_true(ok == 2 && wrong == 1 && err == 0);
    db_close(s);
}

/* ---- merge ---------------------------------------------------------------------------- */

static void fill_db(const char *path, const char *win_variant, int n_samples, double spread_frac,
                    const char *only_shape)
{
    db_store *s;
    assert_int_equal(db_open(&s, path, DB_CREATE), DB_OK);
    long long run;
    assert_int_equal(db_run_begin(s, &DEV, "kforge tune", &run), DB_OK);
    put_binary(s, win_variant);
    long long id = put_meas(s, run, "b1", win_variant, TUNE_OK, n_samples, 1.0, 0);
    db_winner w = {DEV.name, "attn_decode", "b1", win_variant, win_variant, "bn=64", 1.0, 1.1, 0.01, id};
    assert_int_equal(db_winner_put(s, &w), DB_OK);
    /* the spread is what the merge reads from the winner's measurement */
    (void)spread_frac;
    put_binary(s, only_shape);
    long long id2 = put_meas(s, run, only_shape, only_shape, TUNE_OK, 30, 2.0, 0);
    db_winner w2 = {DEV.name, "attn_decode", only_shape, only_shape, only_shape, "bn=32", 2.0, 1.0, 0.01, id2};
    assert_int_equal(db_winner_put(s, &w2), DB_OK);
    assert_int_equal(db_ceiling_put(s, DEV.name, "copy", 4.2e12, "B/s"), DB_OK);
    db_close(s);
}

struct resolve_ctx {
    int calls, differing;
};

static int resolve_cb(const db_tune_side *a, const db_tune_side *b, void *arg)
{
    struct resolve_ctx *c = arg;
    c->calls++;
    c->differing += strcmp(a->w.variant_key, b->w.variant_key) != 0;
    tune_merge_side x = {a->n_samples, a->w.median_ms, a->spread_ms};
    tune_merge_side y = {b->n_samples, b->w.median_ms, b->spread_ms};
    return tune_merge_prefer(&x, &y);
}

static int count_winners(const db_winner *w, void *arg)
{
    (*(int *)arg)++;
    return 0;
}

static void test_tune__merge_prefers_better_measured(void **state)
{
    fx *f = *state;
    fill_db(f->a, "va", 20, 0.01, "b2");       /* a: winner of b1 from 20 samples */
    fill_db(f->b, "vb", 40, 0.01, "b3");       /* b: a different winner of b1, 40 samples */
    db_store *s;
    assert_int_equal(db_open(&s, f->out, DB_CREATE), DB_OK);
    struct resolve_ctx rc = {0};
    db_tune_merge_stats st;
    assert_int_equal(db_tune_merge(s, f->a, resolve_cb, &rc, &st), DB_OK);
    assert_int_equal(st.winners_added, 2);
    assert_int_equal(db_tune_merge(s, f->b, resolve_cb, &rc, &st), DB_OK);
    assert_int_equal(st.winners_added, 1);    /* b3 */
    assert_int_equal(st.winners_replaced, 1); /* b1: 40 samples beat 20 */
    assert_int_equal(st.conflicts, 1);
    assert_int_equal(rc.calls, 1);
    assert_int_equal(rc.differing, 1);
    char buf[2048];
    db_winner w;
    assert_int_equal(db_winner_get(s, DEV.name, "attn_decode", "b1", &w, buf, sizeof buf), DB_OK);
    assert_string_equal(w.variant_key, "vb");
    assert_string_equal(w.cache_key, "vb");
    /* its measurement id points at the copied measurement of vb */
    struct collect c = {0};
    assert_int_equal(db_tune_meas_by_id(s, w.measurement_id, collect_cb, &c), DB_OK);
    assert_string_equal(c.keys[0], "vb");
    assert_int_equal(c.m[0].n_samples, 40);
    int n = 0;
    db_winner_each(s, NULL, NULL, count_winners, &n);
    assert_int_equal(n, 3);
    db_info info;
    assert_int_equal(db_get_info(s, &info), DB_OK);
    assert_int_equal(info.measurements, 4);
    assert_int_equal(info.runs, 2);
    assert_int_equal(info.devices, 1);
    double v;
    assert_int_equal(db_ceiling_get(s, DEV.name, "copy", &v), DB_OK);
    db_close(s);
    /* a file that is not a kforge database is refused, nothing changes */
    FILE *junk = fopen(f->a, "w");
    fputs("not a database at all, just text that is long enough to be read as a header", junk);
    fclose(junk);
    assert_int_equal(db_open(&s, f->out, 0), DB_OK);
    assert_int_equal(db_tune_merge(s, f->a, resolve_cb, &rc, &st), DB_ERROR);
    assert_non_null(strstr(db_errmsg(s), "a.db"));
    db_close(s);
}

static void test_tune__merge_prefer_rule(void **state)
{
    tune_merge_side a = {30, 1.0, 0.05}, b = {20, 0.5, 0.001};
    assert_int_equal(tune_merge_prefer(&a, &b), 0);     /* more samples first */
    b.n_samples = 30;
    assert_int_equal(tune_merge_prefer(&a, &b), 1);     /* then the smaller relative spread */
    b.spread_ms = 0.025;                                /* equal relative spread: a stays */
    assert_int_equal(tune_merge_prefer(&a, &b), 0);
    b.spread_ms = NAN;
    assert_int_equal(tune_merge_prefer(&a, &b), 0);
}

/* ---- several writers ------------------------------------------------------------------------ */

static void test_tune__two_writers_lose_nothing(void **state)
{
    fx *f = *state;
    db_store *s;
    assert_int_equal(db_open(&s, f->a, DB_CREATE), DB_OK);
    db_close(s);
    enum { PER = 150 };
    pid_t pid[2];
    for (int w = 0; w < 2; w++) {
        pid[w] = fork();
        if (pid[w] == 0) {
            db_store *d;
            if (db_open(&d, f->a, 0) != DB_OK)
                _exit(1);
            long long run;
            if (db_run_begin(d, &DEV, "kforge tune", &run) != DB_OK)
                _exit(2);
            double samples[20];
            for (int i = 0; i < 20; i++)
                samples[i] = 1.0 + i;
            for (int i = 0; i < PER; i++) {
                char shape[32], var[32];
                snprintf(shape, sizeof shape, "w%d.s%d", w, i % 7);
                snprintf(var, sizeof var, "v%d", i);
                db_measurement m = {0};
                m.run_id = run;
                m.family = "attn_decode";
                m.shape_key = shape;
                m.variant_key = var;
                m.status = "ok";
                m.samples_ms = samples;
                m.n_samples = 20;
                m.median_ms = 1.0;
                m.error = m.spread_ms = m.throughput = m.ceiling_frac = NAN;
                if (db_measure_put(d, &m, NULL) != DB_OK)
                    _exit(3);
            }
            db_close(d);
            _exit(0);
        }
    }
    for (int w = 0; w < 2; w++) {
        int st;
        waitpid(pid[w], &st, 0);
        assert_true(WIFEXITED(st));
        assert_int_equal(WEXITSTATUS(st), 0);
    }
    assert_int_equal(db_open(&s, f->a, 0), DB_OK);
    long long ok, wrong, err;
    assert_int_equal(db_tune_meas_count(s, DEV.name, "attn_decode", &ok, &wrong, &err), DB_OK);
    assert_int_equal(ok, 2 * PER);
    db_close(s);
}

/* ---- shards, workers, ETA, work, gate cases ----------------------------------------------------- */

static void test_tune__shard_split_covers_once_and_balances(void **state)
{
    double cost[10] = {5, 1, 1, 1, 1, 1, 4, 3, 2, 1};
    int owner[10], again[10];
    tune_split(cost, 10, 3, owner);
    tune_split(cost, 10, 3, again);
    assert_memory_equal(owner, again, sizeof owner);
    double load[3] = {0};
    for (int i = 0; i < 10; i++) {
        assert_true(owner[i] >= 0 && owner[i] < 3);
        load[owner[i]] += cost[i];
    }
    assert_true(load[0] + load[1] + load[2] == 20);
    for (int p = 0; p < 3; p++)
        assert_true(load[p] >= 6 && load[p] <= 7);
    /* equal costs spread round-robin */
    double eq[4] = {1, 1, 1, 1};
    tune_split(eq, 4, 2, owner);
    assert_true(owner[0] != owner[1] && owner[2] != owner[3]);
    int i, n;
    core_err err = CORE_ERR_INIT;
    assert_int_equal(tune_parse_shard("1/4", &i, &n, &err), 0);
    assert_true(i == 1 && n == 4);
    assert_int_equal(err.st, KF_OK);
    assert_int_equal(tune_parse_shard("4/4", &i, &n, &err), -1);
    assert_int_equal(err.st, KF_ERR_ARG);
    assert_string_equal(err.msg, "--shard wants i/n with 0 <= i < n, got '4/4'");
    assert_int_equal(tune_parse_shard("x", &i, &n, &err), -1);
    int devs[8];
    assert_int_equal(tune_parse_devices("0,1,3", devs, 8, &err), 3);
    assert_int_equal(devs[2], 3);
    assert_int_equal(tune_parse_devices("0,0", devs, 8, &err), -1);
    assert_string_equal(err.msg, "--devices lists GPU 0 twice in '0,0'");
    assert_int_equal(tune_parse_devices("a", devs, 8, &err), -1);
    const char *models[] = {"H200", "A100", "H200", "H200"};
    int rank, peers;
    tune_worker_rank(models, 4, 2, &rank, &peers);
    assert_true(rank == 1 && peers == 3);
    tune_worker_rank(models, 4, 1, &rank, &peers);
    assert_true(rank == 0 && peers == 1);
}

static void test_tune__eta(void **state)
{
    assert_true(tune_eta(10, 0, 100) < 0);
    assert_true(fabs(tune_eta(10, 10, 100) - 90) < 1e-9);
    assert_true(tune_eta(10, 100, 100) == 0);
    char b[32];
    assert_string_equal(tune_fmt_duration(45, b, sizeof b), "45s");
    assert_string_equal(tune_fmt_duration(190, b, sizeof b), "3m10s");
    assert_string_equal(tune_fmt_duration(7500, b, sizeof b), "2h05m");
    assert_string_equal(tune_fmt_duration(-1, b, sizeof b), "?");
}

static void test_tune__work_of_decode_and_prefill(void **state)
{
    tune_work w;
    gen_kvset d = shape_of("dtype=bf16,b=1,sq=1,skv=131072,hq=32,hkv=8,d=128,causal=0");
    tune_work_of("attn_decode", &d, &w);
    assert_true(w.amount == 2.0 * 131072 * 8 * 128 * 2);
    assert_string_equal(w.unit, "B/s");
    assert_string_equal(w.ceiling, "read");    /* bytes read: not a copy's read + written */
    assert_true(fabs(tune_throughput(&w, 0.138) - w.amount / 0.138e-3) < 1);
    gen_kvset p = shape_of("dtype=bf16,b=1,sq=16384,skv=16384,hq=32,hkv=8,d=128,causal=1");
    tune_work_of("attn_prefill", &p, &w);
    assert_true(w.amount == 4.0 * 32 * 16384.0 * 16384 * 128 * 0.5);
    assert_string_equal(w.unit, "FLOP/s");
    assert_string_equal(w.ceiling, "gemm_bf16");
    gen_kvset k = shape_of("n=1,t=1,h=16,hv=32,dk=128,dv=128");
    tune_work_of("kda_decode", &k, &w);
    assert_string_equal(w.unit, "B/s");
    assert_string_equal(w.ceiling, "copy");    /* KDA's bytes include the state written back */
    assert_string_equal(tune_work_ceiling("attn_parts_decode", "B/s"), "read");
    assert_string_equal(tune_work_ceiling("attn_parts_decode", "FLOP/s"), "gemm_bf16");
    /* MLA: the 576-column cache rows read once (memory-bound at Hq 16), or 2 sq skv hq (576 + 512) FLOPs */
    const char *mla = "dtype=bf16,b=128,sq=1,skv=4096,hkv=1,parts=latent512_rope64,value=alias_latent,dv=512,"
                      "layers=1,page_size=64,causal=0";
    char text[256];
    snprintf(text, sizeof text, "%s,hq=16", mla);
    gen_kvset m16 = shape_of(text);
    tune_work_of("attn_parts_decode", &m16, &w);
    assert_true(w.amount == 2.0 * 128 * 4096 * 576);
    assert_string_equal(w.unit, "B/s");
    snprintf(text, sizeof text, "%s,hq=128", mla);
    gen_kvset m128 = shape_of(text);
    tune_work_of("attn_parts_decode", &m128, &w);
    assert_true(w.amount == 2.0 * 4096 * 128 * 128 * (576 + 512));
    assert_string_equal(w.unit, "FLOP/s");
    tune_work_of("attn_combine", &p, &w);
    assert_true(isnan(w.amount));
    assert_true(isnan(tune_throughput(&w, 1.0)));
}

/* The family table's two halves (runtime/family.c, tuner/tune_family.c) list the same families in the
 * same order; every family the tuner times has a runner and a work figure; look-ups find each entry. */
static void test_tune__family_tables_agree(void **state)
{
    core_err err = CORE_ERR_INIT;
    assert_int_equal(tune_family_check(&err), 0);
    int tuned = 0;
    for (int i = 0; i < RT_FAM_COUNT; i++) {
        const rt_family *f = &rt_families[i];
        assert_int_equal(f->id, i);
        assert_ptr_equal(rt_family_find(f->name), f);
        assert_ptr_equal(tune_family_find(f->name), &tune_families[i]);
        assert_non_null(f->shape);
        if (f->tuned) {
            tuned++;
            assert_non_null(tune_families[i].runner);
            assert_non_null(tune_families[i].work);
            assert_non_null(f->class_keys);
            assert_non_null(f->launch);
        }
    }
    assert_int_equal(tuned, 5);
    assert_null(rt_family_find("no_such_family"));
    char names[256];
    rt_family_list(1, names, sizeof names);
    assert_string_equal(names, "attn_prefill, attn_decode, attn_parts_decode, kda_prefill and kda_decode");
}

/* ---- the read ceiling ------------------------------------------------------------- */

/* The kernel source compiles with NVRTC (no GPU needed) for the architectures kforge targets,
 * with no spills, and its name and block size are the ones the launch uses. */
static void test_tune__read_ceiling_kernel_compiles(void **state)
{
    (void)state;
    const char *src = tune_ceil_read_source();
    assert_non_null(strstr(src, "extern \"C\" __global__ void __launch_bounds__(512)\n" TUNE_READ_KERNEL "("));
    assert_non_null(strstr(src, "uint4"));
    const char *archs[] = {"sm_90a", "sm_80"};
    for (int i = 0; i < 2; i++) {
        gen_binary_out out;
        core_err err = CORE_ERR_INIT;
        int rc = tune_ceil_read_compile(archs[i], &out, &err);
        if (rc)
            fail_msg("%s: %s", archs[i], err.msg);
        assert_non_null(out.image);
        assert_true(out.size > 0 && !out.is_ptx);
        assert_true(out.regs > 0);
        assert_int_equal(out.spill_bytes, 0);
        assert_non_null(strstr(out.log, TUNE_READ_KERNEL));
        gen_binary_out_free(&out);
    }
    gen_binary_out out;
    core_err err = CORE_ERR_INIT;
    assert_int_equal(tune_ceil_read_compile("sm_12", &out, &err), -1);
    assert_int_equal(err.st, KF_ERR_NVRTC);
    assert_non_null(strstr(err.msg, "sm_12"));
}

/* Without a driver or device the measurement is a message, not a crash. */
static void test_tune__read_ceiling_without_device_fails_cleanly(void **state)
{
    (void)state;
    rt_devinfo info;
    core_err err = CORE_ERR_INIT;
    if (rt_device_info(0, &info, &err) == 0) {
        print_message("skipped: a GPU is present (%s), so the no-device path cannot be taken\n", info.name);
        skip();
    }
    tune_ceiling c;
    c.value = 1;
    err.msg[0] = 0;
    assert_int_equal(tune_ceiling_read(0, NULL, 1 << 20, 20, &c, &err), -1);
    assert_non_null(strstr(err.msg, "CUDA"));
    assert_true(c.value == 0);
    assert_int_equal(tune_ceiling_read(0, "sm_90a", 1 << 20, 20, &c, &err), -1);
    assert_true(strlen(err.msg) > 0);
}

static void put_row(db_store *s, long long run, const char *family, const char *unit, double thr)
{
    double samples[20];
    for (int i = 0; i < 20; i++)
        samples[i] = 1.0;
    db_measurement m = {0};
    m.run_id = run;
    m.family = family;
    m.shape_key = "s1";
    m.variant_key = family;
    m.status = "ok";
    m.error = 1e-3;
    m.samples_ms = samples;
    m.n_samples = 20;
    m.median_ms = 1.0;
    m.spread_ms = 0.01;
    m.throughput = thr;
    m.throughput_unit = unit;
    m.ceiling_frac = NAN;
    long long id;
    assert_int_equal(db_measure_put(s, &m, &id), DB_OK);
    db_winner w = {DEV.name, family, "s1", family, NULL, "", 1.0, 1.0, 0.01, id};
    assert_int_equal(db_winner_put(s, &w), DB_OK);
}

/* stdout of `kforge report FLAGS --db db` (malloc'd); ctest sets KFORGE_BIN. */
static char *report_of(const char *db, const char *flags)
{
    const char *bin = getenv("KFORGE_BIN");
    if (!bin || !*bin)
        fail_msg("KFORGE_BIN is not set (run through ctest)");
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "'%s' report %s --db '%s'", bin, flags, db);
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    size_t cap = 1 << 16;
    char *buf = malloc(cap);
    assert_non_null(buf);
    size_t n = fread(buf, 1, cap - 1, p);
    buf[n] = 0;
    assert_int_equal(pclose(p), 0);
    return buf;
}

/* The line of report --json output for family's row (malloc'd). */
static char *row_of(const char *json, const char *family)
{
    char want[128];
    snprintf(want, sizeof want, "\"family\":\"%s\"", family);
    const char *at = strstr(json, want);
    if (!at)
        fail_msg("no row of %s in: %s", family, json);
    while (at > json && at[-1] != '\n')
        at--;
    const char *end = strchr(at, '\n');
    return strndup(at, end ? (size_t)(end - at) : strlen(at));
}

static void assert_row(const char *json, const char *family, const char *frac, const char *kind)
{
    char *r = row_of(json, family), want[64];
    snprintf(want, sizeof want, "\"ceiling_frac\":%s,\"ceiling\":\"%s\"", frac, kind);
    if (!strstr(r, want))
        fail_msg("%s: want %s in %s", family, want, r);
    free(r);
}

/* report compares decode's bytes read with "read" when the GPU has one, else with "copy" (a
 * database measured before "read" existed), KDA's bytes moved with "copy", FLOP/s with
 * "gemm_bf16", and says so. */
static void test_tune__report_picks_read_then_copy(void **state)
{
    fx *f = *state;
    db_store *s;
    assert_int_equal(db_open(&s, f->a, DB_CREATE), DB_OK);
    long long run;
    assert_int_equal(db_run_begin(s, &DEV, "kforge tune", &run), DB_OK);
    put_row(s, run, "attn_decode", "B/s", 4.58e12);
    put_row(s, run, "kda_decode", "B/s", 3.0e12);
    put_row(s, run, "attn_prefill", "FLOP/s", 500e12);
    assert_int_equal(db_ceiling_put(s, DEV.name, "copy", 4.2e12, "B/s"), DB_OK);
    assert_int_equal(db_ceiling_put(s, DEV.name, "gemm_bf16", 600e12, "FLOP/s"), DB_OK);
    double v = 0;
    assert_string_equal(tune_ceiling_lookup(s, DEV.name, "read", &v), "copy");
    assert_true(v == 4.2e12);
    assert_null(tune_ceiling_lookup(s, "NVIDIA A100", "read", &v));
    db_close(s);

    char *out = report_of(f->a, "--json");
    assert_row(out, "attn_decode", "1.0905", "copy");
    assert_row(out, "kda_decode", "0.7143", "copy");
    assert_row(out, "attn_prefill", "0.8333", "gemm_bf16");
    assert_int_equal(out[0], '[');
    assert_string_equal(out + strlen(out) - 4, "}\n]\n");     /* nothing after the array */
    free(out);
    out = report_of(f->a, "");
    assert_non_null(strstr(out, "% ceiling: share of the GPU's ceiling measured by"));
    assert_null(strstr(out, "\n  read "));
    assert_non_null(strstr(out, "\n  copy       cuMemcpyDtoD, bytes read + written per second\n"));
    assert_non_null(strstr(out, "1 row of bytes read compared with 'copy'"));
    free(out);

    assert_int_equal(db_open(&s, f->a, 0), DB_OK);
    assert_int_equal(db_ceiling_put(s, DEV.name, "read", 4.9e12, "B/s"), DB_OK);
    assert_string_equal(tune_ceiling_lookup(s, DEV.name, "read", &v), "read");
    assert_true(v == 4.9e12);
    db_close(s);
    out = report_of(f->a, "--json");
    assert_row(out, "attn_decode", "0.9347", "read");
    assert_row(out, "kda_decode", "0.7143", "copy");
    free(out);
    out = report_of(f->a, "--csv");
    assert_non_null(strstr(out, ",band,ceiling,timing,sm_clock_mean,sm_clock_min,power_mean,power_max,temp_max\n"));
    /* measured before clocks were recorded: timing and clocks unknown (empty) */
    assert_non_null(strstr(out, ",attn_decode,s1,attn_decode,1,4.58e+12,B/s,0.9347,1.0000,0.0100,read,,,,,,\n"));
    free(out);
    out = report_of(f->a, "");
    assert_non_null(strstr(out, "\n  read       streaming device read, bytes read per second\n"));
    assert_null(strstr(out, "compared with 'copy'"));
    free(out);
}

static void test_tune__gate_case_is_bounded(void **state)
{
    int kvl[256];
    tune_attn_case c, t;
    gen_kvset big = shape_of("family=attn_decode,dtype=bf16,b=16,sq=4,skv=131072,hq=64,hkv=8,d=128,causal=1");
    assert_int_equal(tune_time_case(&big, 7, &t), 0);
    assert_true(t.b == 16 && t.skv == 131072 && t.kv_len == NULL && t.seed == 7);
    assert_int_equal(tune_gate_case(&big, 1, &c, kvl), 1);
    assert_true(2ll * c.b * c.skv * c.hkv * c.d * 2 <= TUNE_GATE_KV_BYTES);
    assert_true(c.hq == 64 && c.hkv == 8 && c.sq == 4 && c.d == 128 && c.causal == 1);
    assert_non_null(c.kv_len);
    for (int i = 0; i < c.b; i++)
        assert_true(c.kv_len[i] >= 1 && c.kv_len[i] <= c.skv);
    assert_true(c.kv_len[0] > c.skv - 64);
    gen_kvset small = shape_of("family=attn_decode,dtype=fp16,b=2,sq=1,skv=1024,hq=8,hkv=2,d=64,causal=0");
    assert_int_equal(tune_gate_case(&small, 1, &c, kvl), 0);
    assert_true(c.dtype == CHECK_FP16 && c.b == 2 && c.skv == 1024);
    gen_kvset pre = shape_of("family=attn_prefill,dtype=bf16,b=1,sq=32768,skv=32768,hq=32,hkv=8,d=128,causal=1");
    assert_int_equal(tune_gate_case(&pre, 1, &c, kvl), 1);
    assert_true(c.sq == TUNE_GATE_PREFILL_MAX && c.skv == TUNE_GATE_PREFILL_MAX && c.kv_len == NULL);
    gen_kvset bad = shape_of("family=attn_decode,dtype=fp8,b=1,sq=1,skv=1,hq=1,hkv=1,d=64,causal=0");
    assert_int_equal(tune_gate_case(&bad, 1, &c, kvl), -1);
    /* the model features of the shape are the case's (a window, softcap, sinks, FP8 K/V kernel is not timed plain) */
    gen_kvset feat = shape_of("family=attn_decode,dtype=bf16,b=2,sq=1,skv=4096,hq=8,hkv=2,d=128,causal=1,window=0,"
                              "softcap=50,sinks=1,kv_dtype=e4m3");
    assert_int_equal(tune_gate_case(&feat, 1, &c, kvl), 0);
    assert_true(c.window == 1 && c.window_left == 0 && c.softcap == 50.0 && c.sinks == 1 && c.kv_fp8 == 1);
    assert_int_equal(tune_time_case(&small, 7, &t), 0);
    assert_true(t.window == 0 && t.softcap == 0 && t.sinks == 0 && t.kv_fp8 == 0);
}

/* A big feature shape is gated against the GPU naive kernel built with the same features (issue 21): the runner
 * asks for the naive reference, its variant carries the features as fixed values (and keys), a plain shape's naive
 * variant is the one of before, and the gate takes that reference (no refusal before it looks at the context). */
static void test_tune__naive_reference_carries_the_features(void **state)
{
    (void)state;
    gen_host *h = gen_host_new(NULL);
    gen_target tg;
    assert_int_equal(gen_target_init(&tg, "sm_90a", 0, NULL), 0);
    const tune_family *tf = tune_family_find("attn_prefill");
    assert_non_null(tf);
    assert_non_null(tf->runner);
    assert_non_null(tf->runner->ref_job);
    struct { const char *shape, *keys[4]; } cases[] = {
        {"family=attn_prefill,dtype=bf16,b=1,sq=8192,skv=8192,hq=64,hkv=8,d=64,causal=1,window=128,sinks=1",
         {".sink1.", ".win1", NULL}},
        {"family=attn_prefill,dtype=bf16,b=1,sq=8192,skv=8192,hq=16,hkv=8,d=256,causal=1,window=4096,softcap=50",
         {"attn_naive.cap1.", ".win1", NULL}},
        {"family=attn_prefill,dtype=fp16,b=1,sq=8192,skv=8192,hq=32,hkv=8,d=128,causal=0,kv_dtype=e4m3",
         {".kv-e4m3.", NULL}},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        gen_kvset shape = shape_of(cases[i].shape);
        core_err e = CORE_ERR_INIT;
        void *st = tf->runner->make(&shape, &e);
        if (!st)
            fail_msg("%s: %s", cases[i].shape, e.msg);
        gen_job j;
        assert_int_equal(tf->runner->ref_job(st, h, &tg, &j), 1);   /* too big for the CPU reference: the naive */
        for (int k = 0; cases[i].keys[k]; k++)
            if (!strstr(j.variant_key, cases[i].keys[k]))
                fail_msg("%s: the naive reference %s lacks '%s'", cases[i].shape, j.variant_key, cases[i].keys[k]);
        assert_non_null(strstr(j.src, "#define KF_ATTN_EXT 1"));
        if (strstr(cases[i].shape, "e4m3"))
            assert_non_null(strstr(j.src, "#define KF_KV8 1"));
        /* the features the gate runs with are those the naive reference was built for */
        tune_attn_case c;
        int kvl[2];
        assert_true(tune_gate_case(&shape, 1, &c, kvl) >= 0);
        tune_compiled v = {.family = "attn_prefill"}, nv = {.family = "attn_naive", .key = j.variant_key};
        tune_attn_result r;
        assert_int_equal(tune_attn_check(NULL, &v, &c, &nv, 0, &r, NULL), -1);   /* no context here: that is all */
        if (*r.msg)                           /* no verdict: what failed would be on the session, and there is none */
            fail_msg("%s: the gate refused the naive reference: %s", cases[i].shape, r.msg);
        assert_non_null(strstr(tune_ctx_errmsg(NULL), "CUDA context"));
        tune_attn_result_free(&r);
        gen_job_free(&j);
        tf->runner->release(st, NULL);
    }
    /* a plain shape: the naive reference's key and defines as before the features (no KF_ATTN_EXT) */
    tune_attn_case plain = {.dtype = CHECK_BF16, .b = 1, .sq = 4096, .skv = 4096, .hq = 32, .hkv = 8, .d = 128,
                            .causal = 1};
    gen_job j;
    assert_int_equal(tune_attn_naive_job(h, &plain, &tg, &j), 0);
    assert_string_equal(j.variant_key, "attn_naive.causal1.d128.dtype-bf16.threads128");
    assert_null(strstr(j.src, "#define KF_ATTN_EXT"));
    assert_null(strstr(j.src, "#define KF_FP8_CUH"));   /* common/fp8.cuh is not rendered */
    gen_job_free(&j);
    gen_host_free(h);
}

/* The parallel input fill seeds each part by skipping draws: skip(n) must be n draws. */
/* The gates of a shape's variants share one fill of the inputs and one reference (tune_attn_check
 * keeps them for the same case): the key must tell apart everything that changes the inputs,
 * and only that. */
static void test_tune__gate_inputs_are_kept_per_case(void **state)
{
    (void)state;
    int kv[2] = {4000, 17}, kv2[2] = {4000, 18};
    tune_attn_case a = {.dtype = CHECK_BF16, .b = 2, .sq = 1, .skv = 4096, .hq = 32, .hkv = 8, .d = 128,
                        .kv_len = kv, .seed = 77};
    tune_attn_case b = a;
    b.splits = 8, b.keep_outputs = 1;               /* another variant's splits: the same inputs */
    assert_true(tune_attn_same_inputs(&a, &b));
    int copy[2] = {4000, 17};
    b.kv_len = copy;                                /* lengths compared by value */
    assert_true(tune_attn_same_inputs(&a, &b));
    b.kv_len = kv2;
    assert_false(tune_attn_same_inputs(&a, &b));
    b = a, b.seed = 78;
    assert_false(tune_attn_same_inputs(&a, &b));
    b = a, b.kv_len = NULL;
    assert_false(tune_attn_same_inputs(&a, &b));
    b = a, b.causal = 1;
    assert_false(tune_attn_same_inputs(&a, &b));
    b = a, b.dtype = CHECK_FP16;
    assert_false(tune_attn_same_inputs(&a, &b));
    b = a, b.row_pad = 2;
    assert_false(tune_attn_same_inputs(&a, &b));
    b = a, b.hkv = 4;
    assert_false(tune_attn_same_inputs(&a, &b));
}

static void test_tune__rng_skip_is_n_draws(void **state)
{
    (void)state;
    check_rng a, b;
    check_rng_seed(&a, 42);
    check_rng_seed(&b, 42);
    for (int i = 0; i < 1000; i++)
        check_rng_next(&a);
    check_rng_skip(&b, 1000);
    assert_true(check_rng_next(&a) == check_rng_next(&b));
    check_rng_seed(&a, 7);
    check_rng_seed(&b, 7);
    for (int i = 0; i < 10; i++)
        check_rng_normal(&a);                 /* two draws each */
    check_rng_skip(&b, 20);
    assert_true(check_rng_normal(&a) == check_rng_normal(&b));
    check_rng_skip(&a, 0);
    assert_true(check_rng_uniform(&a) == check_rng_uniform(&b));
}

static void test_tune__phases_add_and_print(void **state)
{
    (void)state;
    tune_phases a = {0}, s = {0};
    a.wall = 10, a.wait = 1, a.gate_fill = 2, a.gate_ref = 3, a.db = 0.5, a.gates = 4, a.timings = 5;
    assert_true(fabs(tune_phases_accounted(&a) - 6.5) < 1e-12);
    char buf[600];
    tune_phases_str(&a, buf, sizeof buf);
    assert_string_equal(buf, "gate 5.0 s (fill 2.0, ref 3.0, run 0.0), time 0.0 s (fill 0.0, load 0.0, run 0.0),"
                             " db 0.5 s, compile wait 1.0 s, other 3.5 s");
    tune_phases_json(&a, buf, sizeof buf);
    assert_non_null(strstr(buf, "\"wall_s\":10.0000,"));
    assert_non_null(strstr(buf, "\"gate_s\":5.0000,"));
    assert_non_null(strstr(buf, "\"other_s\":3.5000,"));
    assert_non_null(strstr(buf, "\"gates\":4,\"timings\":5"));
    s.plan = 0.25;
    tune_phases_add(&s, &a);
    tune_phases_add(&s, &a);
    assert_true(s.wall == 20 && s.plan == 0.25 && s.gate_ref == 6 && s.gates == 8 && s.timings == 10);
    tune_phases_str(&s, buf, sizeof buf);
    assert_true(!strncmp(buf, "plan 0.2 s, gate 10.0 s", 23) || !strncmp(buf, "plan 0.3 s, gate 10.0 s", 23));
    double acc = 0, t = tune_now() - 1.0;
    tune_lap(&acc, &t);
    assert_true(acc >= 1.0 && acc < 60.0);
    tune_lap(NULL, &t);                       /* no counter: restarts the lap only */
    assert_true(tune_now() - t < 60.0);
}


/* ---- interleaved timing (tuner/tune_ilv.c) ------------------------------------------- */

static void test_tune__ilv_order_alternates_with_the_default(void **state)
{
    (void)state;
    int slots[16];
    assert_int_equal(tune_ilv_order(2, 2, NULL, 0), 9);
    assert_int_equal(tune_ilv_order(2, 2, slots, 16), 9);
    const int want[9] = {-1, 0, -1, 1, -1, 0, -1, 1, -1};
    for (int i = 0; i < 9; i++)
        assert_int_equal(slots[i], want[i]);
    assert_int_equal(tune_ilv_order(0, 3, slots, 16), 1);
    assert_int_equal(slots[0], -1);
    /* every candidate slot has a default on both sides */
    int n = tune_ilv_order(5, 3, slots, 16);
    assert_int_equal(n, 31);
    int big[31];
    tune_ilv_order(5, 3, big, 31);
    for (int i = 0; i < n; i++)
        if (big[i] >= 0)
            assert_true(i > 0 && i < n - 1 && big[i - 1] == -1 && big[i + 1] == -1);
    int r, k;
    tune_ilv_plan(30, &r, &k);
    assert_true(r == 10 && k == 3);
    tune_ilv_plan(20, &r, &k);
    assert_true(r == 7 && k == 3);
    tune_ilv_plan(100, &r, &k);
    assert_true(r == 34 && k == 3);
    assert_true(r * k >= TUNE_MIN_SAMPLES);
    tune_ilv_plan(1, &r, &k);
    assert_true(r == 2 && k == 3);
}

/* More rounds for a band wider than the target (tune_ilv_more_rounds): the band falls as 1 / sqrt(rounds), the
 * planned rounds are a prefix of the longer order, at most TUNE_ILV_MORE x as many */
static void test_tune__ilv_more_rounds_for_a_wide_band(void **state)
{
    (void)state;
    assert_int_equal(tune_ilv_more_rounds(10, 0.0211, 0.02, 0.01), 12);     /* 10 x 1.055^2 = 11.13 */
    assert_int_equal(tune_ilv_more_rounds(10, 0.02, 0.02, 0.01), 10);       /* within the target */
    assert_int_equal(tune_ilv_more_rounds(10, 0.015, 0.02, 0.01), 10);
    assert_int_equal(tune_ilv_more_rounds(10, 0.04, 0.02, 0.01), 10 * TUNE_ILV_MORE);   /* 40 wanted: the cap */
    assert_int_equal(tune_ilv_more_rounds(7, 0.025, 0.02, 0.01), 11);       /* 7 x 1.5625 = 10.9 */
    assert_int_equal(tune_ilv_more_rounds(10, NAN, 0.02, 0.01), 10);
    assert_int_equal(tune_ilv_more_rounds(10, 0.03, 0.02, 0.02), 10);       /* the floor is the target: no use */
    assert_int_equal(tune_ilv_more_rounds(0, 0.03, 0.02, 0.01), 0);
    /* after the band shrinks as predicted, the longer plan's band is within the target */
    int r = tune_ilv_more_rounds(10, 0.0211, 0.02, 0.01);
    assert_true(0.0211 * sqrt(10.0 / r) <= 0.02);
    /* the planned order is a prefix of the longer one (tune_sweep.c continues it) */
    int a[64], b[64];
    int na = tune_ilv_order(3, 4, a, 64), nb = tune_ilv_order(3, 8, b, 64);
    assert_true(na == 25 && nb == 49);
    for (int i = 0; i < na; i++)
        assert_int_equal(a[i], b[i]);
}

static void test_tune__rotate_sets_exceed_twice_l2(void **state)
{
    (void)state;
    double l2 = 60e6;
    assert_int_equal(tune_rotate_sets(16e6, l2), 8);        /* 8 x 16 MB >= 120 MB */
    assert_true(tune_rotate_sets(16e6, l2) * 16e6 >= 2 * l2);
    assert_int_equal(tune_rotate_sets(120e6, l2), 1);
    assert_int_equal(tune_rotate_sets(500e6, l2), 1);
    assert_int_equal(tune_rotate_sets(1e3, l2), TUNE_ROTATE_MAX_SETS);
    assert_int_equal(tune_rotate_sets(16e6, 0), 1);          /* L2 unknown */
    assert_int_equal(tune_rotate_sets(0, l2), 1);
}

/* A deterministic noise in [-1, 1). */
static double noise(uint64_t *x)
{
    *x = *x * 6364136223846793005ull + 1442695040888963407ull;
    return (double)(*x >> 11) / (double)(1ull << 52) - 1.0;
}

/* A synthetic sample stream: slot k of the order, speed[c] the candidates' true times relative to
 * the default's (the default 1.0), the GPU slowing down by `drift` from the first slot to the
 * last, each sample off by up to +-noise_frac. */
typedef struct stream {
    int who[128], ns[128], n;
    double buf[128][10];
    const double *sp[128];
} stream;

static void make_stream(stream *st, int nc, int rounds, const double *speed, double drift, double noise_frac,
                        uint64_t seed)
{
    st->n = tune_ilv_order(nc, rounds, st->who, 128);
    assert_true(st->n <= 128);
    for (int k = 0; k < st->n; k++) {
        double base = 1.0 * (1.0 + drift * k / (st->n - 1)) * (st->who[k] < 0 ? 1.0 : speed[st->who[k]]);
        for (int i = 0; i < 10; i++)
            st->buf[k][i] = base * (1.0 + noise_frac * noise(&seed));
        st->ns[k] = 10;
        st->sp[k] = st->buf[k];
    }
}

static void test_tune__ilv_faster_inside_drift_wins(void **state)
{
    (void)state;
    /* a 5% faster candidate (1) among identical ones, on a GPU drifting 3% over the run */
    const double speed[3] = {1.0, 0.95, 1.0};
    stream st;
    make_stream(&st, 3, 3, speed, 0.03, 0.002, 1);
    tune_ilv_cand c[3];
    tune_ilv_result r;
    assert_int_equal(tune_ilv_decide(st.who, st.sp, st.ns, st.n, 3, TUNE_BAND_FLOOR, c, &r), 1);
    assert_int_equal(r.winner, 1);
    assert_true(c[1].faster && !c[0].faster && !c[2].faster);
    assert_true(fabs(c[1].ratio - 0.95) < 0.005);
    assert_true(fabs(r.speedup - 1 / 0.95) < 0.01);
    assert_true(r.drift > 0.025 && r.drift < 0.035);  /* reported */
    assert_true(r.band < 0.02);                         /* but not in the band */
    assert_int_equal(c[1].n, 30);
    assert_int_equal(r.default_n, 100);     /* 10 default slots of 10 */
}

static void test_tune__ilv_noise_is_not_a_win(void **state)
{
    (void)state;
    /* 0.5% better, with 0.5% noise a sample: inside the 1% floor */
    const double speed[4] = {0.995, 1.0, 1.003, 0.996};
    stream st;
    make_stream(&st, 4, 3, speed, 0.0, 0.005, 7);
    tune_ilv_cand c[4];
    tune_ilv_result r;
    assert_int_equal(tune_ilv_decide(st.who, st.sp, st.ns, st.n, 4, TUNE_BAND_FLOOR, c, &r), -1);
    assert_true(r.speedup == 1.0);
    for (int i = 0; i < 4; i++)
        assert_false(c[i].faster);
    assert_true(r.band >= TUNE_BAND_FLOOR);
}

static void test_tune__ilv_drift_moves_no_candidate(void **state)
{
    (void)state;
    /* identical variants on a GPU slowing down 10% over the run: the first and last candidates
     * pair at ~1.0, while a comparison with the default's overall median would see them ~5% apart */
    double speed[6];
    for (int i = 0; i < 6; i++)
        speed[i] = 1.0;
    stream st;
    make_stream(&st, 6, 2, speed, 0.10, 0.002, 3);
    tune_ilv_cand c[6];
    tune_ilv_result r;
    assert_int_equal(tune_ilv_decide(st.who, st.sp, st.ns, st.n, 6, TUNE_BAND_FLOOR, c, &r), -1);
    for (int i = 0; i < 6; i++)
        assert_true(fabs(c[i].ratio - 1.0) < 0.006);
    double naive_first = c[0].ms / r.default_ms, naive_last = c[5].ms / r.default_ms;
    assert_true(naive_last - naive_first > 0.02);     /* the test would see an unpaired comparison fail */
    /* and a 4% faster candidate late in the run still wins, an early one too */
    speed[0] = 0.96, speed[5] = 0.96;
    make_stream(&st, 6, 2, speed, 0.10, 0.002, 3);
    tune_ilv_decide(st.who, st.sp, st.ns, st.n, 6, TUNE_BAND_FLOOR, c, &r);
    assert_true(c[0].faster && c[5].faster);
    assert_true(fabs(c[0].ratio - 0.96) < 0.006 && fabs(c[5].ratio - 0.96) < 0.006);
    for (int i = 1; i < 5; i++)
        assert_false(c[i].faster);
}

/* Slots whose level wanders by +-sigma each (a GPU at its power limit), samples within a slot
 * nearly equal: the band follows sigma / sqrt(rounds), a candidate 4% faster wins over 10 rounds,
 * the same ones do not, and the band shrinks as the rounds grow. */
static void make_wander(stream *st, int nc, int rounds, const double *speed, double sigma, uint64_t seed)
{
    st->n = tune_ilv_order(nc, rounds, st->who, 128);
    assert_true(st->n <= 128);
    for (int k = 0; k < st->n; k++) {
        double base = (1.0 + sigma * 1.7320508 * noise(&seed)) * (st->who[k] < 0 ? 1.0 : speed[st->who[k]]);
        for (int i = 0; i < 3; i++)
            st->buf[k][i] = base * (1.0 + 0.0005 * noise(&seed));
        st->ns[k] = 3;
        st->sp[k] = st->buf[k];
    }
}

static void test_tune__ilv_band_from_slot_noise_over_rounds(void **state)
{
    (void)state;
    const double speed[3] = {1.0, 0.96, 1.0};
    stream st;
    tune_ilv_cand c[3];
    tune_ilv_result r, r2;
    int wins = 0, false_wins = 0;
    for (uint64_t seed = 1; seed <= 20; seed++) {
        make_wander(&st, 3, 10, speed, 0.02, seed);
        tune_ilv_decide(st.who, st.sp, st.ns, st.n, 3, TUNE_BAND_FLOOR, c, &r);
        assert_true(r.band > 0.01 && r.band < 0.045);    /* ~ 2 x 1.25 x 1.22 x 2% / sqrt(10) = 1.9% */
        assert_int_equal(c[1].slots, 10);
        wins += r.winner == 1;
        false_wins += c[0].faster || c[2].faster;
    }
    print_message("4%% faster won %d / 20, an equal one 'won' %d / 20\n", wins, false_wins);
    assert_true(wins >= 14);
    assert_true(false_wins <= 2);
    /* the same noise over 2 rounds: a band too wide for a 4% gain to be sure */
    make_wander(&st, 3, 2, speed, 0.02, 3);
    tune_ilv_decide(st.who, st.sp, st.ns, st.n, 3, TUNE_BAND_FLOOR, c, &r2);
    assert_true(r2.band > r.band);
    /* a candidate that lost slots gets a wider band than the others */
    make_wander(&st, 3, 10, speed, 0.02, 5);
    int lost = 0;
    for (int k = 0; k < st.n && lost < 6; k++)
        if (st.who[k] == 2)
            st.ns[k] = 0, lost++;
    tune_ilv_decide(st.who, st.sp, st.ns, st.n, 3, TUNE_BAND_FLOOR, c, &r);
    assert_int_equal(c[2].slots, 4);
    assert_true(c[2].band > c[0].band * 1.5);
}

static void test_tune__ilv_failed_slots(void **state)
{
    (void)state;
    const double speed[2] = {0.8, 0.9};
    stream st;
    make_stream(&st, 2, 2, speed, 0.0, 0.001, 5);
    /* candidate 0 failed in every slot; a default slot next to candidate 1 failed */
    for (int k = 0; k < st.n; k++)
        if (st.who[k] == 0)
            st.ns[k] = 0;
    st.ns[2] = 0;
    tune_ilv_cand c[2];
    tune_ilv_result r;
    assert_int_equal(tune_ilv_decide(st.who, st.sp, st.ns, st.n, 2, TUNE_BAND_FLOOR, c, &r), 1);
    assert_int_equal(c[0].n, 0);
    assert_true(isnan(c[0].ms) && !c[0].faster);
    assert_true(fabs(c[1].ratio - 0.9) < 0.003);
    /* no default at all: nothing to pair with, no winner, speedup unknown */
    for (int k = 0; k < st.n; k++)
        if (st.who[k] < 0)
            st.ns[k] = 0;
    assert_int_equal(tune_ilv_decide(st.who, st.sp, st.ns, st.n, 2, TUNE_BAND_FLOOR, c, &r), -1);
    assert_true(isnan(r.speedup) && isnan(r.default_ms));
}

/* Early drop: after three rounds a candidate 6% slower is dropped, a 4% faster one and an equal one are not;
 * its slots and the default slot before each are skipped from then on; the winner is unchanged. */
static void test_tune__ilv_drop_slower_after_three_rounds(void **state)
{
    (void)state;
    const double speed[4] = {1.06, 0.96, 1.0, 1.10};
    stream st;
    make_wander(&st, 4, 10, speed, 0.005, 11);
    int dropped[4] = {0, 0, 0, 0};
    int per_round = 2 * 4;
    /* before three rounds nothing is dropped */
    assert_int_equal(tune_ilv_drop(st.who, st.sp, st.ns, 2 * per_round, 4, TUNE_BAND_FLOOR, TUNE_ILV_BAND_TARGET, dropped), 0);
    assert_int_equal(tune_ilv_drop(st.who, st.sp, st.ns, 3 * per_round, 4, TUNE_BAND_FLOOR, TUNE_ILV_BAND_TARGET, dropped), 2);
    assert_true(dropped[0] && dropped[3] && !dropped[1] && !dropped[2]);
    /* the slots skipped from round 4 on: C0 and C3 and the default slot before each; the closing default stays */
    int skipped = 0;
    for (int k = 3 * per_round; k < st.n; k++) {
        int sk = tune_ilv_skip(st.who, st.n, k, dropped);
        if (st.who[k] == 0 || st.who[k] == 3)
            assert_true(sk);
        if (st.who[k] == 1 || st.who[k] == 2)
            assert_false(sk);
        if (st.who[k] < 0)
            assert_int_equal(sk, k + 1 < st.n && (st.who[k + 1] == 0 || st.who[k + 1] == 3));
        skipped += sk;
    }
    assert_int_equal(skipped, 7 * 4);                  /* 7 rounds x 2 candidates x 2 slots */
    assert_false(tune_ilv_skip(st.who, st.n, st.n - 1, dropped));
    for (int k = 3 * per_round; k < st.n; k++)
        if (tune_ilv_skip(st.who, st.n, k, dropped))
            st.ns[k] = 0;
    tune_ilv_cand c[4];
    tune_ilv_result r;
    assert_int_equal(tune_ilv_decide(st.who, st.sp, st.ns, st.n, 4, TUNE_BAND_FLOOR, c, &r), 1);
    assert_int_equal(c[1].slots, 10);
    assert_int_equal(c[0].slots, 3);
    /* dropped stays dropped; a noisy GPU (2% a slot) widens the band, and a 6% slower one then stays in */
    assert_int_equal(tune_ilv_drop(st.who, st.sp, st.ns, st.n, 4, TUNE_BAND_FLOOR, TUNE_ILV_BAND_TARGET, dropped), 2);
    const double close[2] = {1.06, 0.96};
    int d2[2] = {0, 0};
    make_wander(&st, 2, 10, close, 0.03, 4);
    assert_int_equal(tune_ilv_drop(st.who, st.sp, st.ns, 3 * 4, 2, TUNE_BAND_FLOOR, TUNE_ILV_BAND_TARGET, d2), 0);
}

/* Early drop with a wide band: when every candidate is out at once and the band is wider than the target, the
 * closest stays in (the default keeps a partner, the band narrows over the rounds left); with a band within the
 * target all go. */
static void test_tune__ilv_drop_keeps_the_closest_while_the_band_is_wide(void **state)
{
    (void)state;
    const double slow[2] = {1.30, 1.25};
    stream st;
    tune_ilv_cand c[2];
    tune_ilv_result r;
    make_wander(&st, 2, 10, slow, 0.04, 7);
    tune_ilv_decide(st.who, st.sp, st.ns, 3 * 4, 2, TUNE_BAND_FLOOR, c, &r);
    assert_true(r.band > TUNE_ILV_BAND_TARGET);
    assert_true(c[0].ratio > 1.0 + TUNE_ILV_DROP_BANDS * c[0].band && c[1].ratio > 1.0 + TUNE_ILV_DROP_BANDS * c[1].band);
    int d[2] = {0, 0};
    assert_int_equal(tune_ilv_drop(st.who, st.sp, st.ns, 3 * 4, 2, TUNE_BAND_FLOOR, TUNE_ILV_BAND_TARGET, d), 1);
    assert_true(d[0] && !d[1]);                       /* 1.25 stays, 1.30 goes */
    /* the same stream judged against a target wider than its band: both go */
    int e[2] = {0, 0};
    assert_int_equal(tune_ilv_drop(st.who, st.sp, st.ns, 3 * 4, 2, TUNE_BAND_FLOOR, 2 * r.band, e), 2);
    /* a quiet GPU (band at the floor, within the target): both go */
    make_wander(&st, 2, 10, slow, 0.001, 7);
    int q[2] = {0, 0};
    assert_int_equal(tune_ilv_drop(st.who, st.sp, st.ns, 3 * 4, 2, TUNE_BAND_FLOOR, TUNE_ILV_BAND_TARGET, q), 2);
}

/* ---- clocks and power (tuner/tune_clock.c, runtime/nvml.c) ----------------------------- */

static void test_tune__clock_summary(void **state)
{
    (void)state;
    tune_clock c;
    tune_clock_init(&c);
    assert_true(isnan(c.sm_min) && isnan(c.sm_mean) && isnan(c.power_mean) && isnan(c.power_max) &&
                isnan(c.temp_max));
    rt_nvml_reading unknown = {NAN, NAN, NAN};
    tune_clock_add(&c, &unknown);
    assert_int_equal(c.n, 0);
    assert_true(isnan(c.sm_mean) && isnan(c.power_mean));
    rt_nvml_reading a = {1700, 690, 60}, b = {1980, 400, 55}, pw_only = {NAN, 500, NAN};
    tune_clock_add(&c, &a);
    tune_clock_add(&c, &b);
    tune_clock_add(&c, &pw_only);
    assert_int_equal(c.n, 2);
    assert_true(c.sm_min == 1700 && c.sm_mean == 1840);
    assert_true(fabs(c.power_mean - 530) < 1e-9 && c.power_max == 690 && c.temp_max == 60);
    tune_clock d;
    tune_clock_init(&d);
    tune_clock_merge(&d, &c);
    tune_clock_merge(&d, &c);
    assert_true(d.n == 4 && d.sm_min == 1700 && d.sm_mean == 1840 && d.power_max == 690);
}

/* A series of warm-up readings every 50 ms: the clock falls from 1980 MHz as the power climbs to
 * the limit, with (tau_ms) the time constant, then stays; noise of +-0.3% alternating. */
static int warm_series(double *t, rt_nvml_reading *h, int n, double tau_ms, int nvml)
{
    for (int i = 0; i < n; i++) {
        t[i] = 50.0 * (i + 1);
        double e = exp(-t[i] / tau_ms), z = i % 2 ? 1.003 : 0.997;
        h[i].sm_mhz = nvml ? (1700 + 280 * e) * z : NAN;
        h[i].power_w = nvml ? (700 - 500 * e) * z : NAN;
        h[i].temp_c = nvml ? 38 + 16 * (1 - e) : NAN;
    }
    /* the first n where a warm-up that read these would stop */
    for (int i = 1; i <= n; i++)
        if (tune_warm_done(t[i - 1], 3.9, t, h, i))
            return i;
    return -1;
}

static void test_tune__warm_up_settles_over_windows(void **state)
{
    (void)state;
    enum { N = 110 };
    double t[N];
    rt_nvml_reading h[N];
    /* a fast settle (decode: 40 ms): two 300 ms windows of readings, then steady */
    int k = warm_series(t, h, N, 40, 1);
    assert_true(k >= 12 && k <= 14);                /* 600-700 ms: the floor is passed, both windows full */
    assert_true(tune_warm_settled(t, h, k, TUNE_WARM_WINDOW_MS, TUNE_WARM_SM_REL, TUNE_WARM_PW_REL));
    assert_false(tune_warm_settled(t, h, 4, TUNE_WARM_WINDOW_MS, TUNE_WARM_SM_REL, TUNE_WARM_PW_REL));
    /* a heating prefill (tau 1.2 s): the 210 ms the old rule took is far too short; it stops only
     * once a window's means moved < 1% (clock) and < 2% (power) */
    k = warm_series(t, h, N, 1200, 1);
    assert_true(k > 40);
    double e = exp(-t[k - 1] / 1200);
    assert_true(280 * e / 1700 < 0.05);             /* within 5% of the steady clock by then */
    /* a series that never settles (the clock still falling 1.5% a window): the cap */
    for (int i = 0; i < N; i++)
        h[i].sm_mhz = 1980 * (1 - 0.05 * t[i] / 1000), h[i].power_w = 690;
    k = -1;
    for (int i = 1; i <= N && k < 0; i++)
        if (tune_warm_done(t[i - 1], 3.9, t, h, i))
            k = i;
    assert_int_equal(k, (int)(TUNE_WARM_MAX_MS / 50));
    /* without NVML: max(200 ms, 100 calls) */
    k = warm_series(t, h, N, 40, 0);
    assert_int_equal(k, 8);                         /* 100 x 3.9 ms = 390 ms: the 8th reading, 400 ms */
    assert_true(tune_warm_done(200, 0.02, t, h, 0));
    assert_false(tune_warm_done(150, 0.02, t, h, 0));
    assert_true(tune_warm_done(TUNE_WARM_MAX_MS, 1000, t, h, 0));   /* 100 s-calls: the cap */
    /* power alone (a board without a clock figure) is enough to test */
    rt_nvml_reading p[N];
    for (int i = 0; i < N; i++)
        p[i] = (rt_nvml_reading){NAN, 690, NAN};
    assert_true(tune_warm_settled(t, p, 14, TUNE_WARM_WINDOW_MS, TUNE_WARM_SM_REL, TUNE_WARM_PW_REL));
}

static void test_tune__nvml_absent_is_unknown(void **state)
{
    (void)state;
    /* the first NVML use of this process: a library that is not there */
    setenv("KFORGE_NVML_LIB", "/nonexistent/libnvidia-ml.so.1", 1);
    assert_null(rt_nvml_open("GPU-00000000-0000-0000-0000-000000000000"));
    assert_non_null(strstr(rt_nvml_why(), "/nonexistent/libnvidia-ml.so.1"));
    rt_nvml_reading r;
    rt_nvml_read(NULL, &r);
    assert_true(isnan(r.sm_mhz) && isnan(r.power_w) && isnan(r.temp_c));
    tune_sampler smp;
    tune_clock out;
    tune_clock_init(&out);
    tune_sampler_start(&smp, NULL, 1000);
    tune_sampler_stop(&smp, &out);
    assert_int_equal(out.n, 0);
    assert_true(isnan(out.sm_min) && isnan(out.power_mean) && isnan(out.temp_max));
}

/* One value of a raw SQL query as text ("NULL" for NULL). */
static void raw_col(const char *path, const char *sql, char *out, size_t n)
{
    sqlite3 *db;
    sqlite3_stmt *st;
    assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
    assert_int_equal(sqlite3_prepare_v2(db, sql, -1, &st, NULL), SQLITE_OK);
    assert_int_equal(sqlite3_step(st), SQLITE_ROW);
    const unsigned char *t = sqlite3_column_text(st, 0);
    snprintf(out, n, "%s", t ? (const char *)t : "NULL");
    sqlite3_finalize(st);
    sqlite3_close(db);
}

static void test_tune__measurement_keeps_clocks_and_unknowns(void **state)
{
    fx *f = *state;
    db_store *s;
    assert_int_equal(db_open(&s, f->a, DB_CREATE), DB_OK);
    long long run, id1, id2;
    assert_int_equal(db_run_begin(s, &DEV, "kforge tune", &run), DB_OK);
    double smp[3] = {1.3, 1.31, 1.32};
    db_measurement m = {0};
    m.run_id = run, m.family = "attn_prefill", m.shape_key = "s", m.variant_key = "v1", m.status = "ok";
    m.samples_ms = smp, m.n_samples = 3, m.median_ms = 1.31, m.spread_ms = 0.02;
    m.error = m.throughput = m.ceiling_frac = NAN;
    m.timing = "sustained", m.launches = 2, m.sets = 1;
    m.sm_clock_min = 1695, m.sm_clock_mean = 1702.5, m.power_mean = 686, m.power_max = 699, m.temp_max = 61;
    m.ref_ms = 1.35;
    assert_int_equal(db_measure_put(s, &m, &id1), DB_OK);
    /* no NVML: NaN figures, and a caller that never set them (0) */
    db_measurement u = m;
    u.variant_key = "v2";
    u.sm_clock_min = u.sm_clock_mean = u.power_mean = u.power_max = u.temp_max = NAN;
    u.ref_ms = 0;
    u.timing = NULL, u.launches = 0, u.sets = 0;
    assert_int_equal(db_measure_put(s, &u, &id2), DB_OK);
    db_close(s);
    char q[400], v[64];
    snprintf(q, sizeof q, "SELECT timing || ' ' || launches || ' ' || sets || ' ' || sm_clock_min || ' ' || sm_clock_mean"
             " || ' ' || power_mean || ' ' || power_max || ' ' || temp_max || ' ' || ref_ms FROM measurements WHERE id = %lld", id1);
    raw_col(f->a, q, v, sizeof v);
    assert_string_equal(v, "sustained 2 1 1695.0 1702.5 686.0 699.0 61.0 1.35");
    const char *cols[] = {"timing", "launches", "sets", "sm_clock_min", "sm_clock_mean", "power_mean", "power_max",
                          "temp_max", "ref_ms"};
    for (size_t i = 0; i < sizeof cols / sizeof cols[0]; i++) {
        snprintf(q, sizeof q, "SELECT %s FROM measurements WHERE id = %lld", cols[i], id2);
        raw_col(f->a, q, v, sizeof v);
        assert_string_equal(v, "NULL");
    }
}

static void test_tune__schema_2_database_migrates_with_its_measurements(void **state)
{
    fx *f = *state;
    char msg[256];
    /* a database as the previous release left it, with a measurement */
    assert_int_equal(db_create_at_version(f->a, 2, msg, sizeof msg), DB_OK);
    sqlite3 *raw;
    assert_int_equal(sqlite3_open(f->a, &raw), SQLITE_OK);
    assert_int_equal(sqlite3_exec(raw, "INSERT INTO runs(id, command) VALUES (1, 'kforge tune');"
                                       "INSERT INTO measurements(run_id, family, shape_key, variant_key, status,"
                                       " median_ms) VALUES (1, 'attn_decode', 's', 'old', 'ok', 0.5)",
                                  NULL, NULL, NULL), SQLITE_OK);
    sqlite3_close(raw);
    db_store *s;
    assert_int_equal(db_open(&s, f->a, 0), DB_OK);
    db_info info;
    assert_int_equal(db_get_info(s, &info), DB_OK);
    assert_int_equal(info.schema_version, 3);
    assert_int_equal(info.measurements, 1);
    /* new measurements carry the new columns */
    db_measurement m = {0};
    m.run_id = 1, m.family = "attn_decode", m.shape_key = "s", m.variant_key = "new", m.status = "ok";
    m.median_ms = 0.4, m.spread_ms = m.error = m.throughput = m.ceiling_frac = NAN;
    m.timing = "burst", m.launches = 1, m.sets = 1, m.sm_clock_mean = 1980;
    long long id;
    assert_int_equal(db_measure_put(s, &m, &id), DB_OK);
    db_close(s);
    char v[64];
    raw_col(f->a, "SELECT median_ms || ' ' || ifnull(timing, 'NULL') || ' ' || ifnull(sm_clock_mean, 'NULL')"
                  " FROM measurements WHERE variant_key = 'old'", v, sizeof v);
    assert_string_equal(v, "0.5 NULL NULL");
    raw_col(f->a, "SELECT timing || ' ' || sm_clock_mean FROM measurements WHERE variant_key = 'new'", v, sizeof v);
    assert_string_equal(v, "burst 1980.0");
    /* and opening again changes nothing */
    assert_int_equal(db_open(&s, f->a, 0), DB_OK);
    assert_int_equal(db_get_info(s, &info), DB_OK);
    assert_int_equal(info.schema_version, 3);
    db_close(s);
}

/* `kforge tune|run --timing X` takes sustained or burst only, `kforge tune --rewarm MS` 1 to 5000 ms (run takes no
 * --rewarm): a usage error (2) naming the value otherwise. */
static void test_tune__timing_and_rewarm_options_are_checked(void **state)
{
    (void)state;
    const char *bin = getenv("KFORGE_BIN");
    if (!bin || !*bin)
        fail_msg("KFORGE_BIN is not set (run through ctest)");
    const char *args[] = {"tune --timing bursty", "run attn_decode --shape b=1 --timing fast", "tune --rewarm 0",
                          "tune --rewarm 9000", "tune --rewarm 50ms", "run attn_decode --shape b=1 --rewarm 50"};
    const char *want[] = {"error: --timing wants sustained or burst, got '", "error: --timing wants sustained or burst, got '",
                          "error: --rewarm wants milliseconds from 1 to 5000, got '0'",
                          "error: --rewarm wants milliseconds from 1 to 5000, got '9000'",
                          "error: --rewarm wants milliseconds from 1 to 5000, got '50ms'", "does not take --rewarm"};
    for (int i = 0; i < 6; i++) {
        char cmd[1024], out[1024];
        snprintf(cmd, sizeof cmd, "'%s' %s --db /nonexistent/k.db 2>&1", bin, args[i]);
        FILE *p = popen(cmd, "r");
        assert_non_null(p);
        size_t n = fread(out, 1, sizeof out - 1, p);
        out[n] = 0;
        int st = pclose(p);
        assert_true(WIFEXITED(st));
        assert_int_equal(WEXITSTATUS(st), 2);
        if (!strstr(out, want[i]))
            fail_msg("'kforge %s' printed '%s', not '%s'", args[i], out, want[i]);
    }
}

/* kforge report shows how the winner was timed and the clocks during it; unknown: null / "-". */
static void test_tune__report_shows_timing_and_clocks(void **state)
{
    fx *f = *state;
    db_store *s;
    assert_int_equal(db_open(&s, f->a, DB_CREATE), DB_OK);
    long long run, id;
    assert_int_equal(db_run_begin(s, &DEV, "kforge tune", &run), DB_OK);
    double samples[20];
    for (int i = 0; i < 20; i++)
        samples[i] = 1.31;
    db_measurement m = {0};
    m.run_id = run, m.family = "attn_prefill", m.shape_key = "s1", m.variant_key = "attn_prefill.v", m.status = "ok";
    m.samples_ms = samples, m.n_samples = 20, m.median_ms = 1.31, m.spread_ms = 0.01;
    m.error = m.throughput = m.ceiling_frac = NAN, m.throughput_unit = "FLOP/s";
    m.timing = "sustained", m.launches = 2, m.sets = 1;
    m.sm_clock_min = 1695, m.sm_clock_mean = 1702.5, m.power_mean = 686, m.power_max = 699, m.temp_max = 61;
    assert_int_equal(db_measure_put(s, &m, &id), DB_OK);
    db_winner w = {DEV.name, "attn_prefill", "s1", "attn_prefill.v", NULL, "", 1.31, 1.0, 0.01, id};
    assert_int_equal(db_winner_put(s, &w), DB_OK);
    put_row(s, run, "attn_decode", "B/s", 4e12);     /* no clocks: an older measurement */
    db_close(s);
    char *out = report_of(f->a, "--json");
    char *r = row_of(out, "attn_prefill");
    assert_non_null(strstr(r, "\"timing\":\"sustained\",\"sm_clock_mean\":1702.5,\"sm_clock_min\":1695.0,"
                              "\"power_mean\":686.0,\"power_max\":699.0,\"temp_max\":61.0}"));
    free(r);
    r = row_of(out, "attn_decode");
    assert_non_null(strstr(r, "\"timing\":null,\"sm_clock_mean\":null,"));
    free(r);
    free(out);
    out = report_of(f->a, "");
    assert_non_null(strstr(out, "sustained       1702 MHz (min 1695), 686 W, 61 C\n"));
    free(out);
    out = report_of(f->a, "--csv");
    assert_non_null(strstr(out, ",sustained,1702.5,1695.0,686.0,699.0,61.0\n"));
    free(out);
}

static void test_tune__burst_calls(void **state)
{
    (void)state;
    assert_int_equal(tune_burst_calls(0.25, 1.0, 0, 1, 0), 4);
    assert_int_equal(tune_burst_calls(1.3, 1.0, 0, 1, 0), 2);          /* at least 2 */
    assert_int_equal(tune_burst_calls(0, 1.0, 0, 1, 0), 2);
    assert_int_equal(tune_burst_calls(1e-9, 1.0, 0, 1, 0), 100000);
    assert_int_equal(tune_burst_calls(0.3, 1.0, 10, 1, 0), 10);        /* a multiple of every */
    assert_int_equal(tune_burst_calls(0.02, 1.0, 0, 3, 0), 50);        /* plain: rotation runs on */
    for (int sets = 1; sets <= TUNE_ROTATE_MAX_SETS; sets++)
        for (int every = 0; every <= 10; every += 10) {
            int n = tune_burst_calls(0.02, 1.0, every, sets, 1);
            int calls = n + (every ? n / every : 0);
            assert_true(n >= 50);
            assert_int_equal(calls % sets, 0);                          /* whole rotations */
            if (every)
                assert_int_equal(n % every, 0);
        }
}

int main(void)
{
    unsetenv("KFORGE_TEMPLATE_DIR");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tune__enumeration_prunes_by_device_limits),
        cmocka_unit_test(test_tune__decode_space_lists_runtime_splits),
        cmocka_unit_test(test_tune__random_budget_is_seeded_and_keeps_default),
        cmocka_unit_test(test_tune__halving_keeps_the_fastest),
        cmocka_unit_test(test_tune__band_is_relative_difference_with_floor),
        cmocka_unit_test(test_tune__tie_inside_band_keeps_default),
        cmocka_unit_test(test_tune__faster_than_band_wins),
        cmocka_unit_test(test_tune__wrong_variant_never_wins),
        cmocka_unit_test(test_tune__more_samples_of_one_variant_count),
        cmocka_unit_test(test_tune__resume_state),
        cmocka_unit_test(test_tune__ilv_resume_of_a_finished_shape_times_nothing),
        cmocka_unit_test(test_tune__ilv_resume_gates_then_times),
        cmocka_unit_test(test_tune__ilv_resume_ranks_by_screening_figures),
        cmocka_unit_test_setup_teardown(test_tune__resume_reads_the_database, setup, teardown),
        cmocka_unit_test_setup_teardown(test_tune__merge_prefers_better_measured, setup, teardown),
        cmocka_unit_test(test_tune__merge_prefer_rule),
        cmocka_unit_test_setup_teardown(test_tune__two_writers_lose_nothing, setup, teardown),
        cmocka_unit_test(test_tune__shard_split_covers_once_and_balances),
        cmocka_unit_test(test_tune__eta),
        cmocka_unit_test(test_tune__work_of_decode_and_prefill),
        cmocka_unit_test(test_tune__family_tables_agree),
        cmocka_unit_test(test_tune__read_ceiling_kernel_compiles),
        cmocka_unit_test(test_tune__read_ceiling_without_device_fails_cleanly),
        cmocka_unit_test_setup_teardown(test_tune__report_picks_read_then_copy, setup, teardown),
        cmocka_unit_test(test_tune__gate_case_is_bounded),
        cmocka_unit_test(test_tune__gate_inputs_are_kept_per_case),
        cmocka_unit_test(test_tune__naive_reference_carries_the_features),
        cmocka_unit_test(test_tune__rng_skip_is_n_draws),
        cmocka_unit_test(test_tune__phases_add_and_print),
        cmocka_unit_test(test_tune__timing_and_rewarm_options_are_checked),
        cmocka_unit_test_setup_teardown(test_tune__report_shows_timing_and_clocks, setup, teardown),
        cmocka_unit_test(test_tune__ilv_order_alternates_with_the_default),
        cmocka_unit_test(test_tune__ilv_more_rounds_for_a_wide_band),
        cmocka_unit_test(test_tune__rotate_sets_exceed_twice_l2),
        cmocka_unit_test(test_tune__burst_calls),
        cmocka_unit_test(test_tune__ilv_faster_inside_drift_wins),
        cmocka_unit_test(test_tune__ilv_noise_is_not_a_win),
        cmocka_unit_test(test_tune__ilv_drift_moves_no_candidate),
        cmocka_unit_test(test_tune__ilv_band_from_slot_noise_over_rounds),
        cmocka_unit_test(test_tune__ilv_failed_slots),
        cmocka_unit_test(test_tune__ilv_drop_slower_after_three_rounds),
        cmocka_unit_test(test_tune__ilv_drop_keeps_the_closest_while_the_band_is_wide),
        cmocka_unit_test(test_tune__ilv_resume_after_an_early_drop),
        cmocka_unit_test(test_tune__clock_summary),
        cmocka_unit_test(test_tune__warm_up_settles_over_windows),
        cmocka_unit_test(test_tune__nvml_absent_is_unknown),
        cmocka_unit_test_setup_teardown(test_tune__measurement_keeps_clocks_and_unknowns, setup, teardown),
        cmocka_unit_test_setup_teardown(test_tune__schema_2_database_migrates_with_its_measurements, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
