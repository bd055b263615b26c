/* tests/gpu/test_tune_gpu.c: the tuner end to end on a GPU: a small sweep, resume with nothing re-timed, a planted wrong variant caught by the gate, a planted slower default replaced and an identical twin not */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "db/db.h"
#include "gen/sweep.h"
#include "runtime/cuda.h"
#include "runtime/nvml.h"
#include "tuner/tune_enum.h"
#include "tuner/tune_ilv.h"
#include "tuner/tune_select.h"
#include "tuner/tune_sweep.h"

static char g_dir[256], g_db[300];
static rt_devinfo g_info;

/* Two decode (one GQA 64/8 speculative Sq 4), two prefill and two KDA shapes, small enough for seconds. */
static const char *const SHAPES[] = {
    "family=attn_decode,dtype=bf16,b=2,sq=1,skv=4096,hq=32,hkv=8,d=128,causal=0",
    "family=attn_decode,dtype=bf16,b=1,sq=4,skv=8192,hq=64,hkv=8,d=128,causal=1",
    "family=attn_prefill,dtype=bf16,b=1,sq=1024,skv=1024,hq=32,hkv=8,d=128,causal=1",
    "family=attn_prefill,dtype=fp16,b=2,sq=512,skv=512,hq=8,hkv=2,d=64,causal=0",
    "family=kda_prefill,n=2,t=300,h=2,hv=4,dk=128,dv=128",
    "family=kda_decode,n=16,t=1,h=4,hv=8,dk=128,dv=128",
};
enum { N_SHAPES = sizeof SHAPES / sizeof SHAPES[0] };

static gen_kvset g_shapes[N_SHAPES];

static void parse_shapes(void)
{
    char err[256];
    for (int i = 0; i < N_SHAPES; i++)
        if (gen_kv_parse(&g_shapes[i], SHAPES[i], err, sizeof err))
            fail_msg("bad shape %s: %s", SHAPES[i], err);
}

static tune_opts opts(int budget)
{
    tune_opts o = {0};
    o.db_path = g_db;
    o.samples = 20;
    o.budget = budget;
    o.strategy = TUNE_STRAT_RANDOM;
    o.seed = 1;
    o.quiet = 0;
    o.command = "test_tune_gpu";
    o.kforge_rev = "test";
    return o;
}

static void test_tune_gpu__small_sweep_then_resume(void **state)
{
    parse_shapes();
    tune_opts o = opts(6);
    tune_stats st;
    core_err e = CORE_ERR_INIT;
    int rc = tune_sweep_run(&o, g_shapes, N_SHAPES, &st, &e);
    if (rc)
        fail_msg("tune_sweep_run: %s", e.msg);
    print_message("first run: %d shapes, %ld variants, %ld measured, %ld wrong, %ld errors, %ld winners\n",
                  st.shapes_done, st.variants, st.measured, st.wrong, st.errors, st.winners);
    assert_int_equal(st.shapes_done, N_SHAPES);
    assert_int_equal(st.wrong, 0);
    assert_int_equal(st.winners, N_SHAPES);
    assert_true(st.measured >= st.variants);        /* every variant, plus a control per shape */
    db_store *db;
    assert_int_equal(db_open(&db, g_db, 0), DB_OK);
    for (int i = 0; i < N_SHAPES; i++) {
        char key[512], buf[4096];
        gen_shape_key(&g_shapes[i], key, sizeof key);
        db_winner w;
        assert_int_equal(db_winner_get(db, g_info.name, gen_kv_str(&g_shapes[i], "family"), key, &w, buf,
                                       sizeof buf), DB_OK);
        assert_non_null(w.cache_key);
        assert_non_null(strstr(w.params, gen_kv_str(&g_shapes[i], "dtype") ? "dtype=" : "dk="));
        assert_true(w.median_ms > 0);
        assert_true(w.band >= TUNE_BAND_FLOOR);
        db_binary b = {0};
        assert_int_equal(db_binary_get(db, w.cache_key, &b), DB_OK);  /* the winner's binary is stored */
        db_binary_free(&b);
    }
    db_close(db);

    /* the same command again: everything is found, nothing is timed again, every winner kept
     * (tune_ilv_resume_plan decides; test_tune__ilv_resume_* on the CPU) */
    tune_stats again;
    rc = tune_sweep_run(&o, g_shapes, N_SHAPES, &again, &e);
    if (rc)
        fail_msg("re-run: %s", e.msg);
    assert_int_equal(again.measured, 0);
    assert_int_equal(again.shapes_done, N_SHAPES);
    assert_int_equal(again.winners, N_SHAPES);      /* kept from the database, counted as such */
    assert_int_equal(again.improved, st.improved);
    assert_true(again.resumed >= st.variants);
}

/* The head-mapping slip (h % hkv for h / G): at 8/2 it reads the wrong KV head. */
static int plant(const char *binary_key, char **src, void *arg)
{
    if (strncmp(binary_key, "attn_decode.", 12))
        return 0;
    char *line = strstr(*src, "KF_MUTANT_KVHEAD");
    if (!line)
        return 0;
    char *start = line;
    while (start > *src && start[-1] != '\n')
        start--;
    char *at = strstr(start, "h / KF_G");
    if (!at || at > line)
        return 0;
    const char *to = "h % p.hkv";                    /* same length as "h / KF_G" plus one */
    size_t n = strlen(*src), from = strlen("h / KF_G"), tn = strlen(to);
    char *out = malloc(n + tn + 1);
    size_t pre = (size_t)(at - *src);
    memcpy(out, *src, pre);
    memcpy(out + pre, to, tn);
    strcpy(out + pre + tn, at + from);
    free(*src);
    *src = out;
    (*(int *)arg)++;
    return 1;
}

static void test_tune_gpu__planted_wrong_variant_is_caught(void **state)
{
    gen_kvset shape;
    char err[1024] = "";
    gen_kv_parse(&shape, "family=attn_decode,dtype=bf16,b=1,sq=1,skv=2048,hq=8,hkv=2,d=128,causal=0", err,
                 sizeof err);
    tune_opts o = opts(4);
    int planted = 0;
    o.mutate = plant;
    o.mutate_arg = &planted;
    tune_stats st;
    core_err se = CORE_ERR_INIT;
    int rc = tune_sweep_run(&o, &shape, 1, &st, &se);
    if (rc)
        fail_msg("tune_sweep_run: %s", se.msg);
    assert_true(planted > 0);
    print_message("planted in %d binaries: %ld variants, %ld wrong\n", planted, st.variants, st.wrong);
    assert_int_equal(st.wrong, st.variants);        /* every variant carries the slip: all caught */
    assert_int_equal(st.winners, 0);
    db_store *db;
    assert_int_equal(db_open(&db, g_db, 0), DB_OK);
    char key[512], buf[4096];
    gen_shape_key(&shape, key, sizeof key);
    db_winner w;
    assert_int_equal(db_winner_get(db, g_info.name, "attn_decode", key, &w, buf, sizeof buf), DB_NOTFOUND);
    long long ok, wrong, e;
    assert_int_equal(db_tune_meas_count(db, g_info.name, "attn_decode", &ok, &wrong, &e), DB_OK);
    assert_true(wrong >= st.variants);
    db_close(db);
}

/* One interleaved (sustained) tuning of a decode shape with its default and the default's twin
 * (same binary); slow: the default 10% slower (every 10th call launched twice). Returns the
 * winner's key (static) and its speed-up and band. */
static const char *twin_run(const char *db_name, int slow, double *speedup, double *band, db_clocks *clk)
{
    gen_kvset shape;
    char err[1024] = "";
    gen_kv_parse(&shape, "family=attn_decode,dtype=bf16,b=4,sq=1,skv=4096,hq=32,hkv=8,d=128,causal=0", err,
                 sizeof err);
    static char path[400];
    snprintf(path, sizeof path, "%s/%s", g_dir, db_name);
    tune_opts o = opts(1);                          /* the default alone, and its twin */
    o.db_path = path;
    o.samples = 30;
    o.test_twin = 1;
    o.test_slow_default = slow;
    tune_stats st;
    core_err e = CORE_ERR_INIT;
    if (tune_sweep_run(&o, &shape, 1, &st, &e))
        fail_msg("tune_sweep_run: %s", e.msg);
    assert_int_equal(st.variants, 2);
    assert_int_equal(st.winners, 1);
    db_store *db;
    assert_int_equal(db_open(&db, path, 0), DB_OK);
    char key[512], buf[4096];
    static char win[512];
    gen_shape_key(&shape, key, sizeof key);
    db_winner w;
    assert_int_equal(db_winner_get(db, g_info.name, "attn_decode", key, &w, buf, sizeof buf), DB_OK);
    snprintf(win, sizeof win, "%s", w.variant_key);
    *speedup = w.speedup, *band = w.band;
    assert_int_equal(db_measure_clocks(db, w.measurement_id, clk), DB_OK);
    db_close(db);
    return win;
}

static void test_tune_gpu__planted_slower_default_is_replaced_and_twin_is_not(void **state)
{
    double sp, band;
    db_clocks k;
    const char *win = twin_run("twin.db", 0, &sp, &band, &k);
    print_message("identical twin: winner %s, speed-up %.4f, band %.2f%%, %s, %d calls a sample, %d sets,"
                  " SM %.0f MHz, %.0f W\n", win, sp, 100 * band, k.timing, k.launches, k.sets, k.sm_clock_mean,
                  k.power_mean);
    assert_null(strstr(win, ".twin"));              /* the default stays */
    assert_true(sp == 1.0);
    assert_true(!strcmp(k.timing, "sustained") || !strcmp(k.timing, "sustained-graph"));  /* ~20 us a call: a graph */
    /* one set is 64 MiB of K/V (+ q): the copies rotated over exceed 2x L2 */
    double set = 2.0 * 4 * 4096 * 8 * 128 * 2 + 4.0 * 32 * 128 * 2;
    assert_int_equal(k.sets, tune_rotate_sets(set, (double)g_info.l2));
    assert_true(k.launches >= 2);
    rt_nvml_dev *nv = rt_nvml_open(g_info.uuid);
    if (nv)
        assert_true(k.sm_clock_mean > 0 && k.power_mean > 0);   /* recorded where NVML is */
    else
        print_message("no NVML (%s): clocks recorded as unknown\n", rt_nvml_why());
    rt_nvml_close(nv);

    win = twin_run("slow.db", 1, &sp, &band, &k);
    print_message("10%%-slower default: winner %s, speed-up %.4f, band %.2f%%\n", win, sp, 100 * band);
    assert_non_null(strstr(win, ".twin"));          /* replaced by its (faster) twin */
    assert_true(sp > 1.05 && sp < 1.16);
}

static int rm_entry(const char *p, const struct stat *sb, int flag, struct FTW *ftw)
{
    return remove(p);
}

int main(void)
{
    core_err err = CORE_ERR_INIT;
    if (rt_device_info(0, &g_info, &err)) {
        printf("skipped: no CUDA device (%s)\n", err.msg);
        return 77;
    }
    const char *tmp = getenv("TMPDIR");
    snprintf(g_dir, sizeof g_dir, "%s/kf_test_tune_gpu.XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(g_dir))
        return 1;
    snprintf(g_db, sizeof g_db, "%s/tune.db", g_dir);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tune_gpu__small_sweep_then_resume),
        cmocka_unit_test(test_tune_gpu__planted_wrong_variant_is_caught),
        cmocka_unit_test(test_tune_gpu__planted_slower_default_is_replaced_and_twin_is_not),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    if (!getenv("KFORGE_KEEP_TEST_DB"))
        nftw(g_dir, rm_entry, 8, FTW_DEPTH | FTW_PHYS);
    return rc;
}
