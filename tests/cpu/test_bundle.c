/* tests/cpu/test_bundle.c: bundle export/import round trip, refusal of altered, foreign or truncated bundles, the crafted-bundle set, all-or-nothing imports */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
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

/* Two binaries with recognisable images and their winners on "NVIDIA H200"; another
 * seed gives other variants (tile tm 16 << seed) and images for the same two shapes. */
static void fill_seed(db_store *s, int seed)
{
    for (int i = 0; i < 2; i++) {
        unsigned char img[3000];
        for (size_t k = 0; k < sizeof img; k++)
            img[k] = (unsigned char)(k * 7 + i + 31 * seed);
        memcpy(img + 1000, "KFIMAGEMARK", 11);
        char key[64], var[64], params[128];
        int tm = 16 << seed;
        snprintf(key, sizeof key, "attn_decode.tm%d.w%d.sm_90a.0123456789abcdef", tm, 4 * (i + 1));
        snprintf(var, sizeof var, "attn_decode.tm%d.w%d", tm, 4 * (i + 1));
        snprintf(params, sizeof params, "causal=0,d=128,dtype=bf16,g=4,sp=%d,tm=%d,w=%d", 8 << i, tm, 4 * (i + 1));
        db_binary b = {0};
        b.cache_key = key, b.variant_key = var, b.family = "attn_decode", b.arch = "sm_90a", b.nvrtc = "13.0";
        /* the second with its kernels launched behind their predecessors (programmatic dependent launch) */
        b.params = params, b.kernels = i ? "kf_attn_decode/128/9216/pdl,kf_attn_combine/128/0/pdl"
                                         : "kf_attn_decode/128/9216,kf_attn_combine/128/0";
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

static void fill(db_store *s) { fill_seed(s, 0); }

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
    core_err err = CORE_ERR_INIT;
    char p[256];
    path_of(p, sizeof p, file);
    db_bundle *b = (db_bundle *)1;
    assert_int_equal(db_bundle_load(p, arch, &b, &err), -1);
    assert_null(b);
    if (!strstr(err.msg, needle))
        fail_msg("'%s' lacks '%s'", err.msg, needle);
}

static void test_bundle__round_trip_is_identical(void **state)
{
    export_one("a.db", "a.kfb");
    char pa[256], pb[256];
    path_of(pa, sizeof pa, "a.kfb");
    path_of(pb, sizeof pb, "b.kfb");
    db_store *s = fresh_db("b.db");
    int nw, nb;
    const char *paths[] = {pa};
    assert_int_equal(db_bundle_import(s, paths, 1, &nw, &nb), DB_OK);
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
    core_err err = CORE_ERR_INIT;
    assert_int_equal(db_bundle_load(pa, "sm_90a", &bd, &err), 0);
    assert_int_equal(db_bundle_n_winners(bd), 2);
    const db_bundle_binary *x = db_bundle_find(bd, db_bundle_winner_at(bd, 0)->cache_key);
    assert_non_null(x);
    assert_int_equal(x->size, 3000);
    int pdl = 0;   /* the kernel lists travel as written, "/pdl" with them */
    for (int i = 0; i < 2; i++) {
        const db_bundle_binary *y = db_bundle_find(bd, db_bundle_winner_at(bd, i)->cache_key);
        assert_non_null(y);
        pdl += !strcmp(y->kernels, "kf_attn_decode/128/9216/pdl,kf_attn_combine/128/0/pdl");
    }
    assert_int_equal(pdl, 1);
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
    core_err err0 = CORE_ERR_INIT;
    assert_int_equal(db_bundle_load(p, "sm_90a", &orig, &err0), 0);
    int refused = 0, tried = 0;
    for (size_t off = 100; off < n; off += 397) {
        unsigned char *c = malloc(n);
        memcpy(c, b, n);
        c[off] ^= 0x01;
        spit(q, c, n);
        db_bundle *bd = NULL;
        core_err err = CORE_ERR_INIT;
        if (db_bundle_load(q, "sm_90a", &bd, &err))
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
    assert_int_equal(sqlite3_exec(db, "UPDATE meta SET value = '3' WHERE key = 'format_version'", 0, 0, 0), SQLITE_OK);
    sqlite3_close(db);
    expect_refused("newer.kfb", "sm_90a", "format version 3, this build reads 2");
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

/* ---- the format, as a crafter would recompute it ------------------------------- */

static void sql_sha256(sqlite3_context *ctx, int argc, sqlite3_value **argv)
{
    (void)argc;
    char hex[65];
    db_sha256_hex(sqlite3_value_blob(argv[0]), (size_t)sqlite3_value_bytes(argv[0]), hex);
    sqlite3_result_text(ctx, hex, 64, SQLITE_TRANSIENT);
}

/* Recomputes content_sha256 from the format's definition (format 2): meta but the
 * checksum, binaries, winners, in key order, each table after 0x1e, each value after
 * its bytes 0x1f. A variant that passes the checksum this way reaches the row checks. */
static void rehash(sqlite3 *db)
{
    const char *q[3] = {
        "SELECT key, value FROM meta WHERE key <> 'content_sha256' ORDER BY key",
        "SELECT cache_key, variant_key, family, arch, nvrtc, params, kernels, sha256 FROM binaries ORDER BY cache_key",
        "SELECT family, shape_key, variant_key, cache_key, params, median_ms, speedup, band FROM winners"
        " ORDER BY family, shape_key"};
    size_t cap = 1 << 16, len = 0;
    unsigned char *buf = malloc(cap);
    for (int t = 0; t < 3; t++) {
        buf[len++] = 0x1e;
        sqlite3_stmt *st;
        if (sqlite3_prepare_v2(db, q[t], -1, &st, NULL) != SQLITE_OK)
            continue;  /* a variant without that table: the checksum cannot help it anyway */
        while (sqlite3_step(st) == SQLITE_ROW)
            for (int c = 0; c < sqlite3_column_count(st); c++) {
                const void *v = sqlite3_column_blob(st, c);
                size_t n = (size_t)sqlite3_column_bytes(st, c);
                while (len + n + 2 > cap)
                    buf = realloc(buf, cap *= 2);
                if (n)
                    memcpy(buf + len, v, n);
                len += n;
                buf[len++] = 0x1f;
            }
        sqlite3_finalize(st);
    }
    char hex[65];
    db_sha256_hex(buf, len, hex);
    free(buf);
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(db, "UPDATE meta SET value = ?1 WHERE key = 'content_sha256'", -1, &st, NULL) == SQLITE_OK) {
        sqlite3_bind_text(st, 1, hex, -1, SQLITE_STATIC);
        sqlite3_step(st);
    }
    sqlite3_finalize(st);
}

/* Runs sql on the bundle at p (a plain SQLite connection, kf_sha256() available), then
 * recomputes the content checksum when asked. */
static void alter(const char *p, const char *sql, int with_rehash)
{
    sqlite3 *db;
    assert_int_equal(sqlite3_open(p, &db), SQLITE_OK);
    sqlite3_create_function(db, "kf_sha256", 1, SQLITE_UTF8, NULL, sql_sha256, NULL, NULL);
    char *e = NULL;
    if (sqlite3_exec(db, sql, NULL, NULL, &e) != SQLITE_OK)
        fail_msg("crafting with '%s': %s", sql, e ? e : "?");
    if (with_rehash)
        rehash(db);
    sqlite3_close(db);
}

static void test_bundle__meta_is_in_the_checksum(void **state)
{
    export_one("m.db", "m.kfb");
    char p[256], q[256];
    path_of(p, sizeof p, "m.kfb");
    size_t n;
    unsigned char *b = slurp(p, &n);
    const char *edits[][2] = {{"gpu", "NVIDIA A100"}, {"arch", "sm_80"}, {"nvrtc", "12.4"}, {"kforge", "other"}};
    for (int i = 0; i < 4; i++) {
        path_of(q, sizeof q, "m2.kfb");
        spit(q, b, n);
        char sql[160];
        snprintf(sql, sizeof sql, "UPDATE meta SET value = '%s' WHERE key = '%s'", edits[i][1], edits[i][0]);
        alter(q, sql, 0);
        expect_refused("m2.kfb", NULL, "content checksum mismatch");
    }
    /* recomputed by the format's definition, it loads: the test's checksum is the loader's */
    spit(q, b, n);
    alter(q, "UPDATE meta SET value = 'NVIDIA A100' WHERE key = 'gpu'", 1);
    db_bundle *bd;
    core_err err = CORE_ERR_INIT;
    if (db_bundle_load(q, NULL, &bd, &err))
        fail_msg("%s", err.msg);
    assert_string_equal(db_bundle_gpu(bd), "NVIDIA A100");
    db_bundle_free(bd);
    /* an older format is refused with what to do */
    spit(q, b, n);
    alter(q, "UPDATE meta SET value = '1' WHERE key = 'format_version'", 0);
    expect_refused("m2.kfb", NULL, "format version 1 is older than this build reads (2");
    expect_refused("m2.kfb", NULL, "export it again from its database");
    free(b);
}

/* The CLI opens the database of `kforge export` without DB_CREATE, and ATTACH of the new
 * bundle file inherits the connection's flags: export from a database opened that way. */
static void test_bundle__export_from_database_opened_as_the_cli_does(void **state)
{
    char p[256], out[256];
    path_of(p, sizeof p, "cli.db");
    path_of(out, sizeof out, "cli.kfb");
    db_store *s = fresh_db("cli.db");
    fill(s);
    db_close(s);
    s = NULL;
    assert_int_equal(db_open(&s, p, 0), DB_OK);
    int nw, nb;
    if (db_bundle_export(s, "NVIDIA H200", NULL, out, "test", &nw, &nb) != DB_OK)
        fail_msg("%s", db_errmsg(s));
    assert_int_equal(nw, 2);
    db_close(s);
    db_bundle *bd;
    core_err err = CORE_ERR_INIT;
    assert_int_equal(db_bundle_load(out, "sm_90a", &bd, &err), 0);
    db_bundle_free(bd);
}

/* Export refuses to write what the loader would refuse, so no deployment finds out. */
static void test_bundle__export_refuses_rows_the_loader_refuses(void **state)
{
    char p[256], out[256];
    db_store *s = fresh_db("bad.db");
    fill(s);
    path_of(p, sizeof p, "bad.db");
    db_close(s);
    alter(p, "UPDATE winners SET shape_key = 'B1..x' WHERE shape_key LIKE 'b1.%'", 0);
    s = NULL;
    assert_int_equal(db_open(&s, p, 0), DB_OK);
    path_of(out, sizeof out, "bad.kfb");
    int nw, nb;
    assert_int_equal(db_bundle_export(s, "NVIDIA H200", NULL, out, "test", &nw, &nb), DB_ERROR);
    if (!strstr(db_errmsg(s), "it would not load") || !strstr(db_errmsg(s), "malformed shape key"))
        fail_msg("%s", db_errmsg(s));
    assert_int_equal(access(out, F_OK), -1);
    db_close(s);
}

/* ---- the crafted-bundle set ---------------------------------------------------- */

/* What the target database holds: every winner and binary, images included, as text. */
static char *db_digest(const char *p)
{
    sqlite3 *db;
    assert_int_equal(sqlite3_open_v2(p, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    const char *q = "SELECT group_concat(r, '|') FROM (SELECT gpu || family || shape_key || variant_key ||"
                    " coalesce(cache_key, '') || coalesce(params, '') || coalesce(median_ms, '') AS r FROM winners"
                    " UNION ALL SELECT cache_key || hex(image) || image_size FROM binaries ORDER BY 1)";
    sqlite3_stmt *st;
    assert_int_equal(sqlite3_prepare_v2(db, q, -1, &st, NULL), SQLITE_OK);
    assert_int_equal(sqlite3_step(st), SQLITE_ROW);
    const char *v = (const char *)sqlite3_column_text(st, 0);
    char *d = strdup(v ? v : "");
    sqlite3_finalize(st);
    sqlite3_close(db);
    return d;
}

typedef struct crafted {
    const char *name;
    const char *sql;     /* run on a copy of the valid bundle, or NULL: make() builds the file */
    int rehash;          /* recompute the content checksum after sql: the row checks must catch it */
    const char *needle;  /* in both messages */
    void (*make)(const char *p, const unsigned char *orig, size_t n);
} crafted;

static void mk_empty(const char *p, const unsigned char *o, size_t n) { spit(p, o, 0); }
static void mk_dir(const char *p, const unsigned char *o, size_t n) { mkdir(p, 0700); }
static void mk_missing(const char *p, const unsigned char *o, size_t n) { (void)p; }
static void mk_dangling(const char *p, const unsigned char *o, size_t n) { symlink("/nonexistent/kfb", p); }
static void mk_loop(const char *p, const unsigned char *o, size_t n) { symlink(p, p); }
static void mk_fifo(const char *p, const unsigned char *o, size_t n) { mkfifo(p, 0600); }
static void mk_devnull(const char *p, const unsigned char *o, size_t n) { symlink("/dev/null", p); }
static void mk_text(const char *p, const unsigned char *o, size_t n)
{
    const char *t = "hello, this is not a database at all, but it is long enough to have a header"
                    " of a hundred bytes or so, surely.";
    spit(p, (const unsigned char *)t, strlen(t));
}
static void mk_half(const char *p, const unsigned char *o, size_t n) { spit(p, o, n / 2); }
static void mk_minus1(const char *p, const unsigned char *o, size_t n) { spit(p, o, n - 1); }
static void mk_header_only(const char *p, const unsigned char *o, size_t n) { spit(p, o, 100); }
static void mk_50(const char *p, const unsigned char *o, size_t n) { spit(p, o, 50); }
static void mk_padded(const char *p, const unsigned char *o, size_t n)
{
    unsigned char *c = calloc(1, n + 4096);
    memcpy(c, o, n);
    spit(p, c, n + 4096);
    free(c);
}
static void mk_byte(const char *p, const unsigned char *o, size_t n, size_t off, unsigned char x)
{
    unsigned char *c = malloc(n);
    memcpy(c, o, n);
    c[off] ^= x;
    spit(p, c, n);
    free(c);
}
static void mk_magic(const char *p, const unsigned char *o, size_t n) { mk_byte(p, o, n, 3, 0x01); }
static void mk_pagesize(const char *p, const unsigned char *o, size_t n) { mk_byte(p, o, n, 16, 0x01); }
static void mk_counter(const char *p, const unsigned char *o, size_t n) { mk_byte(p, o, n, 95, 0x01); }
static void mk_image_flip(const char *p, const unsigned char *o, size_t n)
{
    const unsigned char *m = memmem(o, n, "KFIMAGEMARK", 11);
    assert_non_null(m);
    mk_byte(p, o, n, (size_t)(m - o) + 3, 0x20);
}
static void mk_btree_flip(const char *p, const unsigned char *o, size_t n) { mk_byte(p, o, n, 4096 + 3, 0x7f); }
static void mk_foreign(const char *p, const unsigned char *o, size_t n)
{
    sqlite3 *db;
    sqlite3_open(p, &db);
    sqlite3_exec(db, "CREATE TABLE t(x); INSERT INTO t VALUES (1)", 0, 0, 0);
    sqlite3_close(db);
}
static void mk_foreign_link(const char *p, const unsigned char *o, size_t n)
{
    char q[300];
    snprintf(q, sizeof q, "%s.target", p);
    mk_foreign(q, o, n);
    symlink(q, p);
}
static void mk_kforge_db(const char *p, const unsigned char *o, size_t n)
{
    db_store *s = NULL;
    db_open(&s, p, DB_CREATE);
    db_close(s);
}
static void mk_wal(const char *p, const unsigned char *o, size_t n)
{
    spit(p, o, n);
    sqlite3 *db;
    sqlite3_open(p, &db);
    sqlite3_exec(db, "PRAGMA journal_mode = WAL; UPDATE meta SET value = value WHERE key = 'gpu'", 0, 0, 0);
    sqlite3_close(db);
}

#define REP10(x) x x x x x x x x x x
#define W1 "(SELECT min(shape_key) FROM winners)"
#define B1 "(SELECT min(cache_key) FROM binaries)"
static const crafted crafted_set[] = {
    /* the file */
    {"zero-length file", NULL, 0, "empty file (0 bytes)", mk_empty},
    {"a directory", NULL, 0, "is a directory", mk_dir},
    {"no file", NULL, 0, "no such file", mk_missing},
    {"a dangling symbolic link", NULL, 0, "a symbolic link to nothing", mk_dangling},
    {"a symbolic link to itself", NULL, 0, "symbolic links", mk_loop},
    {"a symbolic link to a foreign SQLite file", NULL, 0, "not a kforge bundle (application_id 0x00000000)",
     mk_foreign_link},
    {"a symbolic link to /dev/null", NULL, 0, "not a regular file", mk_devnull},
    {"a pipe", NULL, 0, "not a regular file", mk_fifo},
    {"a text file", NULL, 0, "not an SQLite file", mk_text},
    {"truncated to half", NULL, 0, "truncated, padded or damaged", mk_half},
    {"one byte short", NULL, 0, "truncated, padded or damaged", mk_minus1},
    {"its header only", NULL, 0, "truncated, padded or damaged", mk_header_only},
    {"50 bytes", NULL, 0, "not an SQLite file", mk_50},
    {"a page of zeros appended", NULL, 0, "truncated, padded or damaged", mk_padded},
    {"SQLite magic altered", NULL, 0, "not an SQLite file", mk_magic},
    {"page size altered", NULL, 0, "truncated, padded or damaged", mk_pagesize},
    {"header's size not valid (change counter)", NULL, 0, "truncated, padded or damaged", mk_counter},
    {"a foreign SQLite file", NULL, 0, "not a kforge bundle", mk_foreign},
    {"a kforge database", NULL, 0, "not a kforge bundle (application_id 0x6b666f72)", mk_kforge_db},
    {"WAL mode", NULL, 0, "WAL mode", mk_wal},
    {"a flipped byte in an image", NULL, 0, "checksum mismatch for binary", mk_image_flip},
    {"a flipped byte in a b-tree page", NULL, 0, "cannot load bundle", mk_btree_flip},
    {"wrong application_id", "PRAGMA application_id = 1", 0, "application_id 0x00000001", NULL},
    /* meta */
    {"GPU changed to an A100", "UPDATE meta SET value = 'NVIDIA A100' WHERE key = 'gpu'", 0, "content checksum mismatch", NULL},
    {"arch changed", "UPDATE meta SET value = 'sm_80' WHERE key = 'arch'", 0, "content checksum mismatch", NULL},
    {"NVRTC changed", "UPDATE meta SET value = '11.0' WHERE key = 'nvrtc'", 0, "content checksum mismatch", NULL},
    {"checksum row removed", "DELETE FROM meta WHERE key = 'content_sha256'", 0, "no key 'content_sha256'", NULL},
    {"gpu row removed", "DELETE FROM meta WHERE key = 'gpu'", 1, "no key 'gpu'", NULL},
    {"an unknown meta key", "INSERT INTO meta VALUES ('zzz', 'x')", 1, "an unknown key 'zzz'", NULL},
    {"checksum not hex", "UPDATE meta SET value = 'zz' WHERE key = 'content_sha256'", 0, "is not a SHA-256", NULL},
    {"checksum altered", "UPDATE meta SET value = printf('%064d', 0) WHERE key = 'content_sha256'", 0,
     "content checksum mismatch", NULL},
    {"format 1", "UPDATE meta SET value = '1' WHERE key = 'format_version'", 1, "export it again", NULL},
    {"format 3", "UPDATE meta SET value = '3' WHERE key = 'format_version'", 1, "format version 3, this build reads 2", NULL},
    {"format not a number", "UPDATE meta SET value = '2x' WHERE key = 'format_version'", 1, "is not a number", NULL},
    {"GPU as a blob", "UPDATE meta SET value = CAST(value AS BLOB) WHERE key = 'gpu'", 1, "not text", NULL},
    {"GPU empty", "UPDATE meta SET value = '' WHERE key = 'gpu'", 1, "is empty", NULL},
    {"GPU with a newline", "UPDATE meta SET value = 'NVIDIA' || char(10) || 'H200' WHERE key = 'gpu'", 1,
     "control characters", NULL},
    {"arch not an arch", "UPDATE meta SET value = 'gfx90a' WHERE key = 'arch'; UPDATE binaries SET arch = 'gfx90a'", 1,
     "is not an arch", NULL},
    /* schema */
    {"an extra table", "CREATE TABLE extra(x)", 1, "its schema is not the one kforge writes (at 'extra')", NULL},
    {"a view", "CREATE VIEW v AS SELECT 1", 1, "its schema is not the one kforge writes (at 'v')", NULL},
    {"a trigger", "CREATE TRIGGER tr AFTER INSERT ON meta BEGIN SELECT 1; END", 1, "at 'tr'", NULL},
    {"an extra column", "ALTER TABLE winners ADD COLUMN note TEXT", 1, "at 'winners'", NULL},
    {"duplicate binaries with other images (no primary key)",
     "CREATE TABLE b2 AS SELECT * FROM binaries; DROP TABLE binaries; ALTER TABLE b2 RENAME TO binaries;"
     " INSERT INTO binaries SELECT cache_key, variant_key, family, arch, nvrtc, params, kernels, x'00112233',"
     " kf_sha256(x'00112233') FROM binaries", 1, "its schema is not the one kforge writes", NULL},
    {"a schema longer than kforge's", "CREATE TABLE meta2(x DEFAULT '" REP10(REP10("0123456789012345678901234567890123456789"))
     "')", 1, "its schema is not the one kforge writes (it is longer)", NULL},
    {"winners table dropped", "DROP TABLE winners", 0, "its schema is not the one kforge writes", NULL},
    /* rows, with the checksum made right again */
    {"no winners", "DELETE FROM winners; DELETE FROM binaries", 1, "it holds no winners", NULL},
    {"empty image", "UPDATE binaries SET image = x'', sha256 = kf_sha256(x'') WHERE cache_key = " B1, 1,
     "malformed image (empty)", NULL},
    {"image as text", "UPDATE binaries SET image = CAST(image AS TEXT) WHERE cache_key = " B1, 1, "wrong type", NULL},
    {"image changed, sha256 not", "UPDATE binaries SET image = x'00' WHERE cache_key = " B1, 1, "checksum mismatch for binary",
     NULL},
    {"sha256 not hex", "UPDATE binaries SET sha256 = 'not hex' WHERE cache_key = " B1, 1, "malformed sha256", NULL},
    {"empty cache key", "UPDATE winners SET cache_key = '' WHERE cache_key = " B1 "; UPDATE binaries SET cache_key = ''"
     " WHERE cache_key = " B1, 1, "malformed cache key", NULL},
    {"cache key with a space", "UPDATE winners SET cache_key = 'a b' WHERE cache_key = " B1 "; UPDATE binaries SET"
     " cache_key = 'a b' WHERE cache_key = " B1, 1, "malformed cache key", NULL},
    {"cache key with a NUL byte", "UPDATE winners SET cache_key = cache_key || char(0) || 'x';"
     " UPDATE binaries SET cache_key = cache_key || char(0) || 'x'", 1, "NUL byte", NULL},
    {"cache key of 600 characters", "UPDATE winners SET cache_key = printf('%600s', 'k') WHERE cache_key = " B1 ";"
     " UPDATE binaries SET cache_key = replace(printf('%600s', 'k'), ' ', 'k') WHERE cache_key = " B1 ";"
     " UPDATE winners SET cache_key = replace(cache_key, ' ', 'k')", 1, "malformed cache key", NULL},
    {"empty variant key", "UPDATE winners SET variant_key = '' WHERE shape_key = " W1, 1, "malformed variant key", NULL},
    {"binary's empty variant key", "UPDATE binaries SET variant_key = '' WHERE cache_key = " B1, 1,
     "malformed variant key", NULL},
    {"empty family", "UPDATE binaries SET family = '' WHERE cache_key = " B1, 1, "malformed family", NULL},
    {"family with a dash", "UPDATE winners SET family = 'attn-decode'; UPDATE binaries SET family = 'attn-decode'", 1,
     "malformed family", NULL},
    {"winner and binary of other families", "UPDATE winners SET family = 'attn_prefill',"
     " variant_key = 'attn_prefill.' || substr(variant_key, 13) WHERE shape_key = " W1, 1,
     "is of family 'attn_prefill' and its binary", NULL},
    {"malformed shape key", "UPDATE winners SET shape_key = 'B1..x' WHERE shape_key = " W1, 1, "malformed shape key", NULL},
    {"empty shape key", "UPDATE winners SET shape_key = '' WHERE shape_key = " W1, 1, "malformed shape key", NULL},
    {"shape key out of order", "UPDATE winners SET shape_key = 'sq1.' || replace(shape_key, '.sq1', '') WHERE shape_key = " W1, 1,
     "not in the canonical form", NULL},
    {"shape key naming a family", "UPDATE winners SET shape_key = shape_key || '.family-x' WHERE shape_key = " W1, 1,
     "malformed shape key", NULL},
    {"shape key of 700 characters", "UPDATE winners SET shape_key = 'b1.' || replace(printf('%700s', 'z'), ' ', 'z')"
     " WHERE shape_key = " W1, 1, "malformed shape key", NULL},
    {"malformed winner params", "UPDATE winners SET params = 'd=128,,x' WHERE shape_key = " W1, 1, "malformed params", NULL},
    {"winner params with a capital", "UPDATE winners SET params = 'D=128' WHERE shape_key = " W1, 1, "malformed params", NULL},
    {"empty winner params", "UPDATE winners SET params = '' WHERE shape_key = " W1, 1, "malformed params", NULL},
    {"malformed binary params", "UPDATE binaries SET params = 'w=4=4' WHERE cache_key = " B1, 1, "malformed params", NULL},
    {"empty kernel list", "UPDATE binaries SET kernels = '' WHERE cache_key = " B1, 1, "malformed kernel list", NULL},
    {"kernel with 0 threads", "UPDATE binaries SET kernels = 'kf_attn_decode/0/0' WHERE cache_key = " B1, 1,
     "malformed kernel list", NULL},
    {"kernel list not name/threads/smem", "UPDATE binaries SET kernels = 'kf_attn_decode/128' WHERE cache_key = " B1, 1,
     "malformed kernel list", NULL},
    {"kernel list with junk numbers", "UPDATE binaries SET kernels = 'kf_attn_decode/128x/0' WHERE cache_key = " B1, 1,
     "malformed kernel list", NULL},
    {"nine kernels", "UPDATE binaries SET kernels = 'a/1/0,b/1/0,c/1/0,d/1/0,e/1/0,f/1/0,g/1/0,h/1/0,i/1/0'"
     " WHERE cache_key = " B1, 1, "malformed kernel list", NULL},
    {"a winner without its binary", "UPDATE winners SET cache_key = 'nosuch' WHERE shape_key = " W1, 1, "has no binary", NULL},
    {"a binary without a winner", "DELETE FROM winners WHERE shape_key = " W1, 1, "serves no winner", NULL},
    {"binary of another arch", "UPDATE binaries SET arch = 'sm_80' WHERE cache_key = " B1, 1, "is for sm_80, the bundle says",
     NULL},
    {"negative median", "UPDATE winners SET median_ms = -1 WHERE shape_key = " W1, 1, "malformed median time", NULL},
    {"median as text", "UPDATE winners SET median_ms = 'fast' WHERE shape_key = " W1, 1, "wrong type", NULL},
    {"infinite speed-up", "UPDATE winners SET speedup = 1e999 WHERE shape_key = " W1, 1, "not finite", NULL},
    {"zero speed-up", "UPDATE winners SET speedup = 0 WHERE shape_key = " W1, 1, "malformed speed-up", NULL},
    {"negative band", "UPDATE winners SET band = -0.5 WHERE shape_key = " W1, 1, "malformed control band", NULL},
    {"variant key as a number", "UPDATE winners SET variant_key = 42 WHERE shape_key = " W1, 1,
     "malformed variant key (not FAMILY.fields)", NULL},
    {"variant key as a blob", "UPDATE winners SET variant_key = CAST(variant_key AS BLOB) WHERE shape_key = " W1, 1,
     "wrong type", NULL},
    {"variant key of another family", "UPDATE binaries SET variant_key = 'attn_prefill.x' WHERE cache_key = " B1, 1,
     "malformed variant key", NULL},
    {"cache key not of its variant", "UPDATE binaries SET variant_key = 'attn_decode.other' WHERE cache_key = " B1, 1,
     "malformed cache key (not VARIANT.arch.hash)", NULL},
};
#undef W1
#undef B1
#undef REP10

/* Loads and imports p in a child process (a crash is counted, not fatal); out gets
 * "loader rc, import rc, loader message \x1f import message". */
static int try_hostile(const char *p, const char *target, char *out, size_t n)
{
    int fd[2];
    assert_int_equal(pipe(fd), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        close(fd[0]);
        core_err err = CORE_ERR_INIT;
        db_bundle *b = NULL;
        int lr = db_bundle_load(p, NULL, &b, &err);
        db_bundle_free(b);
        db_store *s = NULL;
        int ir = db_open(&s, target, 0) != DB_OK ? 9 : 0;
        int nw = 0, nb = 0;
        if (!ir)
            ir = db_bundle_import(s, &p, 1, &nw, &nb) == DB_OK ? 0 : 1;
        dprintf(fd[1], "%d %d %s\x1f%s", lr, ir, err.msg, db_errmsg(s));
        db_close(s);
        _exit(0);
    }
    close(fd[1]);
    size_t len = 0;
    ssize_t r;
    while (len + 1 < n && (r = read(fd[0], out + len, n - 1 - len)) > 0)
        len += (size_t)r;
    out[len] = 0;
    close(fd[0]);
    int status;
    waitpid(pid, &status, 0);
    return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : -1;
}

static void test_bundle__crafted_set_is_refused_by_loader_and_import(void **state)
{
    export_one("v.db", "v.kfb");
    char p[256], target[256];
    path_of(p, sizeof p, "v.kfb");
    size_t n;
    unsigned char *orig = slurp(p, &n);
    /* the target already holds a tuned set (other variants, the same shapes) */
    export_one("t0.db", "t0.kfb");
    db_store *t = fresh_db("target.db");
    fill_seed(t, 1);
    db_close(t);
    path_of(target, sizeof target, "target.db");
    char *before = db_digest(target);
    int n_crafted = 0, refused_load = 0, refused_import = 0, crashes = 0, bad = 0, changed = 0;
    for (size_t i = 0; i < sizeof crafted_set / sizeof crafted_set[0]; i++) {
        const crafted *c = &crafted_set[i];
        char q[256], out[4096];
        snprintf(q, sizeof q, "%s/hostile%02zu.kfb", dir, i);
        if (c->make)
            c->make(q, orig, n);
        else {
            spit(q, orig, n);
            alter(q, c->sql, c->rehash);
        }
        n_crafted++;
        if (try_hostile(q, target, out, sizeof out)) {
            crashes++;
            print_error("CRASH  %-50s\n", c->name);
            continue;
        }
        int lr = 0, ir = 0, k = 0;
        sscanf(out, "%d %d %n", &lr, &ir, &k);
        char *lmsg = out + k, *imsg = strchr(lmsg, '\x1f');
        if (imsg)
            *imsg++ = 0;
        char want[300];
        snprintf(want, sizeof want, "cannot load bundle '%s': ", q);
        int lok = lr == -1 && strstr(lmsg, want) && strstr(lmsg, c->needle);
        int iok = ir == 1 && imsg && strstr(imsg, want) && strstr(imsg, c->needle) && strstr(imsg, "nothing was imported");
        refused_load += lr == -1;
        refused_import += ir == 1;
        char *after = db_digest(target);
        int same = !strcmp(before, after);
        changed += !same;
        free(after);
        if (!lok || !iok || !same) {
            bad++;
            print_error("FAIL   %-50s loader %d '%s'; import %d '%s'; target %s (want '%s')\n", c->name, lr, lmsg, ir,
                        imsg ? imsg : "", same ? "unchanged" : "CHANGED", c->needle);
        } else
            print_message("refused %-50s %s\n", c->name, strstr(lmsg, "': ") + 3);
    }
    print_message("crafted bundles: %d crafted, %d refused by the loader, %d refused by import, %d crashes,"
                  " target database changed after %d\n", n_crafted, refused_load, refused_import, crashes, changed);
    free(before);
    free(orig);
    assert_true(n_crafted >= 40);
    assert_int_equal(bad, 0);
    assert_int_equal(crashes, 0);
    assert_int_equal(changed, 0);
    assert_int_equal(refused_load, n_crafted);
    assert_int_equal(refused_import, n_crafted);
}

/* A symbolic link to a valid bundle is followed (a deployment may point one at its
 * current bundle): it loads like the file. */
static void test_bundle__symlink_to_a_valid_bundle_loads(void **state)
{
    export_one("s.db", "s.kfb");
    core_err err = CORE_ERR_INIT;
    char p[256], l[256];
    path_of(p, sizeof p, "s.kfb");
    path_of(l, sizeof l, "current.kfb");
    unlink(l);
    assert_int_equal(symlink(p, l), 0);
    db_bundle *b;
    assert_int_equal(db_bundle_load(l, "sm_90a", &b, &err), 0);
    db_bundle_free(b);
}

/* ---- all or nothing ------------------------------------------------------------ */

static void raw(const char *p, const char *sql)
{
    sqlite3 *db;
    assert_int_equal(sqlite3_open(p, &db), SQLITE_OK);
    char *e = NULL;
    if (sqlite3_exec(db, sql, NULL, NULL, &e) != SQLITE_OK)
        fail_msg("%s: %s", sql, e ? e : "?");
    sqlite3_close(db);
}

static long long raw_count(const char *p, const char *table)
{
    sqlite3 *db;
    sqlite3_stmt *st;
    char sql[96];
    snprintf(sql, sizeof sql, "SELECT count(*) FROM %s", table);
    assert_int_equal(sqlite3_open(p, &db), SQLITE_OK);
    assert_int_equal(sqlite3_prepare_v2(db, sql, -1, &st, NULL), SQLITE_OK);
    assert_int_equal(sqlite3_step(st), SQLITE_ROW);
    long long v = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    sqlite3_close(db);
    return v;
}

static void import_fails_midway(const char *trigger, const char *needle)
{
    char a[256], target[256];
    path_of(a, sizeof a, "x.kfb");
    path_of(target, sizeof target, "mid.db");
    db_store *s = fresh_db("mid.db");
    db_close(s);
    raw(target, trigger);
    s = NULL;
    assert_int_equal(db_open(&s, target, 0), DB_OK);
    const char *paths[] = {a};
    int nw = -1, nb = -1;
    assert_int_equal(db_bundle_import(s, paths, 1, &nw, &nb), DB_ERROR);
    const char *m = db_errmsg(s);
    if (!strstr(m, a) || !strstr(m, needle) || !strstr(m, "nothing was imported"))
        fail_msg("message: %s", m);
    assert_int_equal(nw, 0);
    assert_int_equal(nb, 0);
    db_close(s);
    assert_int_equal(raw_count(target, "binaries"), 0);
    assert_int_equal(raw_count(target, "winners"), 0);
}

/* A write that fails midway (a full disk, simulated by a trigger raising on the second
 * insert) leaves nothing of the bundle: before, the first binary stayed committed. */
static void test_bundle__import_failing_midway_leaves_nothing(void **state)
{
    export_one("x.db", "x.kfb");
    import_fails_midway("CREATE TRIGGER full BEFORE INSERT ON binaries WHEN (SELECT count(*) FROM binaries) >= 1"
                        " BEGIN SELECT RAISE(ABORT, 'database or disk is full (simulated)'); END",
                        "database or disk is full (simulated)");
    import_fails_midway("CREATE TRIGGER full BEFORE INSERT ON winners WHEN (SELECT count(*) FROM winners) >= 1"
                        " BEGIN SELECT RAISE(ABORT, 'disk I/O error (simulated)'); END",
                        "disk I/O error (simulated)");
    print_message("a failure at the second binary and at the second winner: nothing imported\n");
}

/* A binary already in the database under a bundle's cache key, with another image (a
 * damaged or poisoned cache entry), refuses the import: it used to be kept silently and
 * served for the bundle's winners. The same image is fine (a second import). */
static void test_bundle__import_refuses_another_image_under_the_same_key(void **state)
{
    export_one("k.db", "k.kfb");
    char p[256], target[256];
    path_of(p, sizeof p, "k.kfb");
    path_of(target, sizeof target, "k_target.db");
    db_store *s = fresh_db("k_target.db");
    const char *paths[] = {p, p};
    int nw[2], nb[2];
    assert_int_equal(db_bundle_import(s, paths, 2, nw, nb), DB_OK);  /* the same bundle twice */
    assert_int_equal(nb[0], 2);
    assert_int_equal(nb[1], 0);
    db_close(s);
    raw(target, "UPDATE binaries SET image = x'00112233', image_size = 4 WHERE cache_key ="
                " (SELECT min(cache_key) FROM binaries); DELETE FROM winners");
    char *before = db_digest(target);
    s = NULL;
    assert_int_equal(db_open(&s, target, 0), DB_OK);
    assert_int_equal(db_bundle_import(s, paths, 1, nw, nb), DB_ERROR);
    if (!strstr(db_errmsg(s), "already with another image") || !strstr(db_errmsg(s), p))
        fail_msg("%s", db_errmsg(s));
    db_close(s);
    char *after = db_digest(target);
    assert_string_equal(before, after);
    free(before);
    free(after);
}

/* Several bundles: all imported in order (a later winner replaces an earlier one for
 * the same shape), or, when any is refused, none. */
static void test_bundle__import_of_several_is_all_or_nothing(void **state)
{
    export_one("y0.db", "y0.kfb");
    db_store *s = fresh_db("y1.db");
    fill_seed(s, 1);
    char p1[256], p0[256], bad[256];
    path_of(p0, sizeof p0, "y0.kfb");
    path_of(p1, sizeof p1, "y1.kfb");
    int nw[3], nb[3];
    assert_int_equal(db_bundle_export(s, "NVIDIA H200", NULL, p1, "test", &nw[0], &nb[0]), DB_OK);
    db_close(s);
    path_of(bad, sizeof bad, "ybad.kfb");
    size_t n;
    unsigned char *b = slurp(p1, &n);
    spit(bad, b, n);
    free(b);
    alter(bad, "UPDATE winners SET params = '' WHERE shape_key = (SELECT max(shape_key) FROM winners)", 1);
    char target[256];
    path_of(target, sizeof target, "y.db");
    s = fresh_db("y.db");
    const char *with_bad[] = {p0, p1, bad};
    assert_int_equal(db_bundle_import(s, with_bad, 3, nw, nb), DB_ERROR);
    if (!strstr(db_errmsg(s), bad) || !strstr(db_errmsg(s), "malformed params"))
        fail_msg("%s", db_errmsg(s));
    assert_int_equal(nw[0] + nw[1] + nw[2] + nb[0] + nb[1] + nb[2], 0);
    assert_int_equal(raw_count(target, "winners"), 0);
    assert_int_equal(raw_count(target, "binaries"), 0);
    const char *good[] = {p0, p1};
    assert_int_equal(db_bundle_import(s, good, 2, nw, nb), DB_OK);
    assert_int_equal(nw[0], 2);
    assert_int_equal(nb[0], 2);
    assert_int_equal(nw[1], 2);
    assert_int_equal(nb[1], 2);
    assert_int_equal(raw_count(target, "winners"), 2);   /* same two shapes: y1's replaced y0's */
    assert_int_equal(raw_count(target, "binaries"), 4);
    db_winner w;
    char buf[2048];
    assert_int_equal(db_winner_get(s, "NVIDIA H200", "attn_decode", "b1.causal0.d128.dtype-bf16.hkv8.hq32.skv8192.sq1",
                                   &w, buf, sizeof buf), DB_OK);
    assert_string_equal(w.variant_key, "attn_decode.tm32.w4");
    db_close(s);
}

/* ---- the CLI binary ------------------------------------------------------------ */

static int run_cli(char *out, size_t n, const char *fmt, ...)
{
    char args[2048], cmd[2300];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(args, sizeof args, fmt, ap);
    va_end(ap);
    snprintf(cmd, sizeof cmd, "'%s' %s 2>&1", getenv("KFORGE_BIN"), args);
    FILE *f = popen(cmd, "r");
    assert_non_null(f);
    size_t len = fread(out, 1, n - 1, f);
    out[len] = 0;
    int st = pclose(f);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* `kforge import a.kfb b.kfb` imports both (it ignored b); with a refused one, none;
 * `--db /dev/null` says what is wrong with it. */
static void test_bundle__cli_imports_every_bundle_named(void **state)
{
    if (!getenv("KFORGE_BIN") || access(getenv("KFORGE_BIN"), X_OK)) {
        print_message("skipped: KFORGE_BIN does not name the kforge binary (run through ctest)\n");
        skip();
    }
    export_one("z0.db", "z0.kfb");
    db_store *s = fresh_db("z1.db");
    fill_seed(s, 1);
    char p0[256], p1[256], bad[256], db1[256], db2[256], out[4096];
    path_of(p0, sizeof p0, "z0.kfb");
    path_of(p1, sizeof p1, "z1.kfb");
    path_of(bad, sizeof bad, "zbad.kfb");
    path_of(db1, sizeof db1, "z_all.db");
    path_of(db2, sizeof db2, "z_none.db");
    int nw, nb;
    assert_int_equal(db_bundle_export(s, "NVIDIA H200", NULL, p1, "test", &nw, &nb), DB_OK);
    db_close(s);
    spit(bad, (const unsigned char *)"", 0);
    int rc = run_cli(out, sizeof out, "import '%s' '%s' --db '%s'", p0, p1, db1);
    char want0[300], want1[300];
    snprintf(want0, sizeof want0, "imported %s: 2 winners, 2 new binaries", p0);
    snprintf(want1, sizeof want1, "imported %s: 2 winners, 2 new binaries", p1);
    if (rc != 0 || !strstr(out, want0) || !strstr(out, want1))
        fail_msg("rc %d: %s", rc, out);
    assert_int_equal(raw_count(db1, "binaries"), 4);
    s = fresh_db("z_none.db");
    db_close(s);
    rc = run_cli(out, sizeof out, "import '%s' '%s' --db '%s'", p0, bad, db2);
    char wantbad[400];
    snprintf(wantbad, sizeof wantbad, "error: cannot load bundle '%s': empty file (0 bytes) (nothing was imported)", bad);
    if (rc != 1 || !strstr(out, wantbad))
        fail_msg("rc %d: %s", rc, out);
    assert_int_equal(raw_count(db2, "winners"), 0);
    assert_int_equal(raw_count(db2, "binaries"), 0);
    rc = run_cli(out, sizeof out, "import '%s' --db /dev/null", p0);
    if (rc != 1 || !strstr(out, "error: cannot open database '/dev/null': not a regular file"))
        fail_msg("rc %d: %s", rc, out);
    print_message("kforge import of two bundles: both; with an empty one: none; --db /dev/null: named\n");
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
        cmocka_unit_test(test_bundle__meta_is_in_the_checksum),
        cmocka_unit_test(test_bundle__export_from_database_opened_as_the_cli_does),
        cmocka_unit_test(test_bundle__export_refuses_rows_the_loader_refuses),
        cmocka_unit_test(test_bundle__crafted_set_is_refused_by_loader_and_import),
        cmocka_unit_test(test_bundle__symlink_to_a_valid_bundle_loads),
        cmocka_unit_test(test_bundle__import_failing_midway_leaves_nothing),
        cmocka_unit_test(test_bundle__import_of_several_is_all_or_nothing),
        cmocka_unit_test(test_bundle__import_refuses_another_image_under_the_same_key),
        cmocka_unit_test(test_bundle__cli_imports_every_bundle_named),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    char cmd[200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd))
        rc = 1;
    return rc;
}
