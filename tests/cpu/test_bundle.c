/* tests/cpu/test_bundle.c: bundle export/import round trip and refusal of altered, foreign or truncated bundles */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "db/bundle.h"
#include "db/db.h"

static char dir[128];

static void path_of(char *buf, size_t n, const char *name) { snprintf(buf, n, "%s/%s", dir, name); }

static db_store *fresh_db(const char *name)
{
    char p[256];
    path_of(p, sizeof p, name);
    unlink(p);
    db_store *s = NULL;
    assert_int_equal(db_open(&s, p, DB_CREATE), DB_OK);
    return s;
}

/* Two binaries with recognisable images and their winners on "NVIDIA H200". */
static void fill(db_store *s)
{
    for (int i = 0; i < 2; i++) {
        unsigned char img[3000];
        for (size_t k = 0; k < sizeof img; k++)
            img[k] = (unsigned char)(k * 7 + i);
        memcpy(img + 1000, "KFIMAGEMARK", 11);
        char key[64], var[64], params[128];
        snprintf(key, sizeof key, "attn_decode.tm16.w%d.sm_90a.0123456789abcdef", 4 * (i + 1));
        snprintf(var, sizeof var, "attn_decode.tm16.w%d", 4 * (i + 1));
        snprintf(params, sizeof params, "causal=0,d=128,dtype=bf16,g=4,sp=%d,tm=16,w=%d", 8 << i, 4 * (i + 1));
        db_binary b = {0};
        b.cache_key = key, b.variant_key = var, b.family = "attn_decode", b.arch = "sm_90a", b.nvrtc = "13.0";
        b.params = params, b.kernels = "kf_attn_decode/128/9216,kf_attn_combine/128/0";
        b.image = img, b.image_size = sizeof img;
        int ins;
        assert_int_equal(db_binary_put(s, &b, &ins), DB_OK);
        db_winner w = {0};
        char shape[128];
        snprintf(shape, sizeof shape, "b%d.causal0.d128.dtype-bf16.hkv8.hq32.skv8192.sq1", 1 << (3 * i));
        w.gpu = "NVIDIA H200", w.family = "attn_decode", w.shape_key = shape, w.variant_key = var;
        w.cache_key = key, w.params = params, w.median_ms = 0.1 * (i + 1), w.speedup = 1.2, w.band = 0.01;
        assert_int_equal(db_winner_put(s, &w), DB_OK);
    }
}

static unsigned char *slurp(const char *p, size_t *n)
{
    FILE *f = fopen(p, "rb");
    assert_non_null(f);
    fseek(f, 0, SEEK_END);
    *n = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *b = malloc(*n);
    assert_int_equal(fread(b, 1, *n, f), *n);
    fclose(f);
    return b;
}

static void spit(const char *p, const unsigned char *b, size_t n)
{
    FILE *f = fopen(p, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(b, 1, n, f), n);
    fclose(f);
}

static void export_one(const char *dbname, const char *out)
{
    db_store *s = fresh_db(dbname);
    fill(s);
    char p[256];
    path_of(p, sizeof p, out);
    int nw, nb;
    assert_int_equal(db_bundle_export(s, "NVIDIA H200", NULL, p, "test", &nw, &nb), DB_OK);
    assert_int_equal(nw, 2);
    assert_int_equal(nb, 2);
    db_close(s);
}

static void expect_refused(const char *file, const char *arch, const char *needle)
{
    char p[256], err[1024];
    path_of(p, sizeof p, file);
    db_bundle *b = (db_bundle *)1;
    assert_int_equal(db_bundle_load(p, arch, &b, err, sizeof err), -1);
    assert_null(b);
    if (!strstr(err, needle))
        fail_msg("'%s' lacks '%s'", err, needle);
}

static void test_bundle__round_trip_is_identical(void **state)
{
    export_one("a.db", "a.kfb");
    char pa[256], pb[256];
    path_of(pa, sizeof pa, "a.kfb");
    path_of(pb, sizeof pb, "b.kfb");
    db_store *s = fresh_db("b.db");
    int nw, nb;
    assert_int_equal(db_bundle_import(s, pa, &nw, &nb), DB_OK);
    assert_int_equal(nw, 2);
    assert_int_equal(nb, 2);
    assert_int_equal(db_bundle_export(s, "NVIDIA H200", NULL, pb, "test", &nw, &nb), DB_OK);
    db_close(s);
    size_t na, nb2;
    unsigned char *a = slurp(pa, &na), *b = slurp(pb, &nb2);
    assert_int_equal(na, nb2);
    assert_memory_equal(a, b, na);
    free(a), free(b);
    /* and it loads, serving both winners and images */
    db_bundle *bd;
    char err[512];
    assert_int_equal(db_bundle_load(pa, "sm_90a", &bd, err, sizeof err), 0);
    assert_int_equal(db_bundle_n_winners(bd), 2);
    const db_bundle_binary *x = db_bundle_find(bd, db_bundle_winner_at(bd, 0)->cache_key);
    assert_non_null(x);
    assert_int_equal(x->size, 3000);
    db_bundle_free(bd);
}

/* Two loads of a bundle hold the same winners and images. */
static void same_content(const db_bundle *a, const db_bundle *b)
{
    assert_string_equal(db_bundle_gpu(a), db_bundle_gpu(b));
    assert_string_equal(db_bundle_arch(a), db_bundle_arch(b));
    assert_int_equal(db_bundle_n_winners(a), db_bundle_n_winners(b));
    for (int i = 0; i < db_bundle_n_winners(a); i++) {
        const db_bundle_winner *x = db_bundle_winner_at(a, i), *y = db_bundle_winner_at(b, i);
        assert_string_equal(x->shape_key, y->shape_key);
        assert_string_equal(x->variant_key, y->variant_key);
        assert_string_equal(x->params, y->params);
        assert_string_equal(x->cache_key, y->cache_key);
        const db_bundle_binary *u = db_bundle_find(a, x->cache_key), *v = db_bundle_find(b, y->cache_key);
        assert_non_null(u);
        assert_non_null(v);
        assert_string_equal(u->kernels, v->kernels);
        assert_int_equal(u->size, v->size);
        assert_memory_equal(u->image, v->image, u->size);
    }
}

static void test_bundle__flipped_byte_is_refused(void **state)
{
    export_one("c.db", "c.kfb");
    char p[256];
    path_of(p, sizeof p, "c.kfb");
    size_t n;
    unsigned char *b = slurp(p, &n);
    unsigned char *m = memmem(b, n, "KFIMAGEMARK", 11);
    assert_non_null(m);
    m[3] ^= 0x20;  /* inside a cubin image */
    char q[256];
    path_of(q, sizeof q, "flip.kfb");
    spit(q, b, n);
    expect_refused("flip.kfb", "sm_90a", "checksum mismatch");
    m[3] ^= 0x20;  /* the original again */
    /* single flips across the file: refused, or a byte no content depends on (what loads
     * then is exactly the original content); never a crash */
    db_bundle *orig;
    char err0[512];
    assert_int_equal(db_bundle_load(p, "sm_90a", &orig, err0, sizeof err0), 0);
    int refused = 0, tried = 0;
    for (size_t off = 100; off < n; off += 397) {
        unsigned char *c = malloc(n);
        memcpy(c, b, n);
        c[off] ^= 0x01;
        spit(q, c, n);
        db_bundle *bd = NULL;
        char err[1024];
        if (db_bundle_load(q, "sm_90a", &bd, err, sizeof err))
            refused++;
        else
            same_content(orig, bd);
        db_bundle_free(bd);
        tried++;
        free(c);
    }
    print_message("flipped single bytes at %d offsets: %d refused, %d loaded the original content\n", tried,
                  refused, tried - refused);
    assert_true(refused > 0);
    db_bundle_free(orig);
    free(b);
}

static void test_bundle__wrong_arch_newer_format_foreign_truncated(void **state)
{
    export_one("d.db", "d.kfb");
    expect_refused("d.kfb", "sm_80", "it holds sm_90a binaries and this device is sm_80");
    char p[256], q[256];
    path_of(p, sizeof p, "d.kfb");
    path_of(q, sizeof q, "newer.kfb");
    size_t n;
    unsigned char *b = slurp(p, &n);
    spit(q, b, n);
    sqlite3 *db;
    assert_int_equal(sqlite3_open(q, &db), SQLITE_OK);
    assert_int_equal(sqlite3_exec(db, "UPDATE meta SET value = '2' WHERE key = 'format_version'", 0, 0, 0), SQLITE_OK);
    sqlite3_close(db);
    expect_refused("newer.kfb", "sm_90a", "format version 2, this build reads 1");
    path_of(q, sizeof q, "trunc.kfb");
    spit(q, b, n / 2);
    expect_refused("trunc.kfb", "sm_90a", "cannot load bundle");
    path_of(q, sizeof q, "foreign.kfb");
    assert_int_equal(sqlite3_open(q, &db), SQLITE_OK);
    assert_int_equal(sqlite3_exec(db, "CREATE TABLE t(x)", 0, 0, 0), SQLITE_OK);
    sqlite3_close(db);
    expect_refused("foreign.kfb", "sm_90a", "not a kforge bundle");
    path_of(q, sizeof q, "text.kfb");
    spit(q, (const unsigned char *)"hello, this is not a database at all", 36);
    expect_refused("text.kfb", "sm_90a", "cannot load bundle");
    free(b);
}

static void test_bundle__export_needs_winners(void **state)
{
    db_store *s = fresh_db("e.db");
    char p[256];
    path_of(p, sizeof p, "e.kfb");
    int nw, nb;
    assert_int_equal(db_bundle_export(s, "NVIDIA H100", NULL, p, "test", &nw, &nb), DB_ERROR);
    assert_non_null(strstr(db_errmsg(s), "no winners for GPU 'NVIDIA H100'"));
    assert_int_equal(access(p, F_OK), -1);  /* nothing left behind */
    db_close(s);
}

int main(void)
{
    snprintf(dir, sizeof dir, "/tmp/kf_bundle_XXXXXX");
    if (!mkdtemp(dir))
        return 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bundle__round_trip_is_identical),
        cmocka_unit_test(test_bundle__flipped_byte_is_refused),
        cmocka_unit_test(test_bundle__wrong_arch_newer_format_foreign_truncated),
        cmocka_unit_test(test_bundle__export_needs_winners),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    char cmd[200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd))
        rc = 1;
    return rc;
}
