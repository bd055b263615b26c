/* tests/cpu/test_db.c: the SQLite store: schema, refusals, round trips, gc, several writers */
#include <errno.h>
#include <fcntl.h>
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
#include "db/store.h"

/* ---- fixtures: one mkdtemp directory per test ------------------------------ */

typedef struct fx {
    char dir[256];
    char path[300];  /* dir/t.db, not created */
} fx;

static int rm_entry(const char *p, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb, (void)flag, (void)ftw;
    return remove(p);
}

static int setup(void **state)
{
    fx *f = calloc(1, sizeof *f);
    if (!f)
        return -1;
    const char *tmp = getenv("TMPDIR");
    snprintf(f->dir, sizeof f->dir, "%s/kf_test_db.XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(f->dir)) {
        free(f);
        return -1;
    }
    snprintf(f->path, sizeof f->path, "%s/t.db", f->dir);
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

/* ---- helpers ------------------------------------------------------------- */

static db_store *open_ok(const char *path, int flags)
{
    db_store *s = NULL;
    db_rc rc = db_open(&s, path, flags);
    if (rc != DB_OK)
        print_error("db_open: %s\n", db_errmsg(s));
    assert_int_equal(rc, DB_OK);
    return s;
}

/* Opens path expecting DB_ERROR with a message holding each of the needles. */
static void open_refused(const char *path, int flags, const char *needle1, const char *needle2)
{
    db_store *s = NULL;
    db_rc rc = db_open(&s, path, flags);
    assert_non_null(s);
    if (rc == DB_OK)
        print_error("db_open of '%s' succeeded; expected a refusal\n", path);
    assert_int_equal(rc, DB_ERROR);
    const char *msg = db_errmsg(s);
    if ((needle1 && !strstr(msg, needle1)) || (needle2 && !strstr(msg, needle2)))
        print_error("message: %s\n", msg);
    assert_non_null(strstr(msg, "cannot open database '"));
    assert_non_null(strstr(msg, path));
    if (needle1)
        assert_non_null(strstr(msg, needle1));
    if (needle2)
        assert_non_null(strstr(msg, needle2));
    db_close(s);
}

static void write_file(const char *path, const void *data, size_t n)
{
    FILE *fp = fopen(path, "wb");
    assert_non_null(fp);
    assert_int_equal(fwrite(data, 1, n, fp), n);
    assert_int_equal(fclose(fp), 0);
}

static void *read_file(const char *path, size_t *n)
{
    FILE *fp = fopen(path, "rb");
    assert_non_null(fp);
    fseek(fp, 0, SEEK_END);
    *n = (size_t)ftell(fp);
    fseek(fp, 0, SEEK_SET);
    void *p = malloc(*n + 1);
    assert_non_null(p);
    assert_int_equal(fread(p, 1, *n, fp), *n);
    fclose(fp);
    return p;
}

/* Runs sql on path with a plain SQLite connection (no kforge checks). */
static void raw_exec(const char *path, const char *sql)
{
    sqlite3 *db;
    assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
    char *err = NULL;
    int rc = sqlite3_exec(db, sql, NULL, NULL, &err);
    if (rc != SQLITE_OK)
        print_error("raw_exec: %s\n", err ? err : "?");
    sqlite3_free(err);
    assert_int_equal(rc, SQLITE_OK);
    assert_int_equal(sqlite3_close(db), SQLITE_OK);
}

/* First column of the first row of sql, as a malloc'd string ("" for NULL). */
static char *raw_text(const char *path, const char *sql)
{
    sqlite3 *db;
    sqlite3_stmt *st;
    assert_int_equal(sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    assert_int_equal(sqlite3_prepare_v2(db, sql, -1, &st, NULL), SQLITE_OK);
    assert_int_equal(sqlite3_step(st), SQLITE_ROW);
    const char *v = (const char *)sqlite3_column_text(st, 0);
    char *c = strdup(v ? v : "");
    sqlite3_finalize(st);
    sqlite3_close(db);
    return c;
}

static long long raw_int(const char *path, const char *sql)
{
    char *t = raw_text(path, sql);
    long long v = atoll(t);
    free(t);
    return v;
}

static void fill_binary(db_binary *b, const char *key, const char *family, const char *hash,
                        unsigned char *img, size_t n)
{
    memset(b, 0, sizeof *b);
    b->cache_key = (char *)key;
    b->variant_key = (char *)key;
    b->family = (char *)family;
    b->template_hash = (char *)hash;
    b->arch = "sm_90a";
    b->nvrtc = "13.0";
    b->options = "--gpu-architecture=sm_90a -default-device";
    b->params = "block_n=64,warps=4";
    b->kernels = "[{\"name\":\"k\",\"threads\":128,\"smem\":0}]";
    b->image = img;
    b->image_size = n;
    b->compile_ms = 12.5;
    b->regs = 96;
    b->smem_static = 1024;
    b->spill_bytes = 8;
}

static void put_binary(db_store *s, const char *key, const char *family, const char *hash)
{
    unsigned char img[16] = { 0x7f, 'E', 'L', 'F', 0, 1, 2, 3 };
    db_binary b;
    fill_binary(&b, key, family, hash, img, sizeof img);
    int inserted = -1;
    db_rc rc = db_binary_put(s, &b, &inserted);
    if (rc != DB_OK)
        print_error("db_binary_put: %s\n", db_errmsg(s));
    assert_int_equal(rc, DB_OK);
    assert_int_equal(inserted, 1);
}

static long long begin_run(db_store *s, const char *gpu, const char *uuid)
{
    db_device d = { .name = gpu, .uuid = uuid, .cc_major = 9, .cc_minor = 0, .sms = 132,
                    .sm_clock_mhz = 1980, .mem_clock_mhz = 3201, .driver = "580.159.04",
                    .nvrtc = "13.0", .kforge_rev = "abc123" };
    long long run = 0;
    assert_int_equal(db_run_begin(s, &d, "kforge tune", &run), DB_OK);
    assert_true(run > 0);
    return run;
}

static db_measurement measurement(long long run, const char *variant, double median)
{
    static const double samples[] = { 0.5, 0.25, 0.125 };
    db_measurement m = { .run_id = run, .family = "attn_decode", .shape_key = "b1.h32_8.d128",
                         .variant_key = variant, .cache_key = NULL, .status = "ok",
                         .error = 1e-3, .samples_ms = samples, .n_samples = 3,
                         .median_ms = median, .spread_ms = 0.01, .throughput = 3.9e12,
                         .throughput_unit = "B/s", .ceiling_frac = 0.92 };
    return m;
}

/* ---- opening, creating, migrating ---------------------------------------- */

static void test_db__creates_and_migrates_missing_file(void **state)
{
    fx *f = *state;
    db_store *s = open_ok(f->path, DB_CREATE);
    assert_int_equal(db_user_version(s), DB_SCHEMA_VERSION);
    assert_string_equal(db_path(s), f->path);
    db_info info;
    assert_int_equal(db_get_info(s, &info), DB_OK);
    assert_int_equal(info.schema_version, DB_SCHEMA_VERSION);
    assert_string_equal(info.journal_mode, "wal");
    assert_int_equal(info.binaries + info.winners + info.runs + info.measurements, 0);
    /* WAL with synchronous NORMAL: no fsync per commit (the tuner commits per measurement) */
    sqlite3_stmt *st;
    assert_int_equal(sqlite3_prepare_v2(s->sql, "PRAGMA synchronous", -1, &st, NULL), SQLITE_OK);
    assert_int_equal(sqlite3_step(st), SQLITE_ROW);
    assert_int_equal(sqlite3_column_int(st, 0), 1);
    sqlite3_finalize(st);
    db_close(s);
    assert_int_equal(raw_int(f->path, "PRAGMA application_id"), DB_APPLICATION_ID);
    char *marker = raw_text(f->path, "SELECT value FROM meta WHERE key = 'application'");
    assert_string_equal(marker, "kforge");
    free(marker);
    assert_int_equal(raw_int(f->path, "PRAGMA auto_vacuum"), 2);  /* incremental */
}

static void test_db__migrates_empty_existing_file(void **state)
{
    fx *f = *state;
    write_file(f->path, "", 0);
    db_store *s = open_ok(f->path, 0);  /* exists: no DB_CREATE needed */
    assert_int_equal(db_user_version(s), DB_SCHEMA_VERSION);
    db_close(s);
}

/* Every older schema this build knows how to create is brought up to date:
 * 0 (an empty file), 1 -> 2 (the "read" ceiling) and later steps once appended. */
static void test_db__migrates_every_older_version(void **state)
{
    fx *f = *state;
    for (int from = 0; from < DB_SCHEMA_VERSION; from++) {
        char path[320], msg[256];
        snprintf(path, sizeof path, "%s/v%d.db", f->dir, from);
        assert_int_equal(db_create_at_version(path, from, msg, sizeof msg), DB_OK);
        assert_int_equal(raw_int(path, "PRAGMA user_version"), from);
        open_refused(path, DB_READONLY, from ? "older than this build" : "empty", NULL);
        db_store *s = open_ok(path, 0);
        assert_int_equal(db_user_version(s), DB_SCHEMA_VERSION);
        db_close(s);
        char *marker = raw_text(path, "SELECT value FROM meta WHERE key = 'application'");
        assert_string_equal(marker, "kforge");
        free(marker);
    }
    /* The current version can be created by the same path and is left as is. */
    char path[320], msg[256];
    snprintf(path, sizeof path, "%s/current.db", f->dir);
    assert_int_equal(db_create_at_version(path, DB_SCHEMA_VERSION, msg, sizeof msg), DB_OK);
    db_store *s = open_ok(path, DB_READONLY);
    assert_int_equal(db_user_version(s), DB_SCHEMA_VERSION);
    db_close(s);
}

/* A kforge database whose user_version was set back to 0 is not re-migrated:
 * step 1 would fail on the existing tables, so it must be refused up front. */
static void test_db__refuses_reset_version(void **state)
{
    fx *f = *state;
    db_close(open_ok(f->path, DB_CREATE));
    raw_exec(f->path, "PRAGMA user_version = 0");
    open_refused(f->path, 0, "not a kforge database", "no schema version");
}

static void test_db__refuses_missing_file_without_create(void **state)
{
    fx *f = *state;
    open_refused(f->path, 0, "no such file", NULL);
    open_refused(f->path, DB_READONLY | DB_CREATE, "no such file", NULL);
    assert_int_equal(access(f->path, F_OK), -1);  /* nothing was created */
}

static void test_db__refuses_directory(void **state)
{
    fx *f = *state;
    open_refused(f->dir, DB_CREATE, "is a directory", NULL);
}

/* A device or a pipe is refused by what it is, not by the first SQLite statement that
 * fails on it ("cannot choose incremental vacuum" for /dev/null). */
static void test_db__refuses_device_and_pipe(void **state)
{
    fx *f = *state;
    open_refused("/dev/null", DB_CREATE, "not a regular file (a character device)", NULL);
    open_refused("/dev/null", DB_READONLY, "not a regular file (a character device)", NULL);
    assert_int_equal(mkfifo(f->path, 0600), 0);
    open_refused(f->path, DB_CREATE, "not a regular file (a pipe)", NULL);
}

/* A kforge database whose user_version was set to -1 is refused as damaged; it was
 * taken for an old schema and migrated, failing with "table meta already exists". */
static void test_db__refuses_negative_version(void **state)
{
    fx *f = *state;
    db_close(open_ok(f->path, DB_CREATE));
    raw_exec(f->path, "PRAGMA user_version = -1");
    open_refused(f->path, 0, "schema version -1 is not one kforge writes", "damaged");
    open_refused(f->path, DB_READONLY, "schema version -1 is not one kforge writes", NULL);
}

static void test_db__refuses_foreign_file(void **state)
{
    fx *f = *state;
    raw_exec(f->path, "CREATE TABLE notes(id INTEGER PRIMARY KEY, body TEXT);"
                      "INSERT INTO notes(body) VALUES ('hello')");
    size_t n0, n1;
    unsigned char *before = read_file(f->path, &n0);
    open_refused(f->path, DB_CREATE, "not a kforge database", NULL);
    open_refused(f->path, DB_READONLY, "not a kforge database", NULL);
    unsigned char *after = read_file(f->path, &n1);
    /* Refusing must not touch the file (no WAL switch, no migration). */
    assert_int_equal(n0, n1);
    assert_memory_equal(before, after, n0);
    free(before);
    free(after);
}

/* Another application's database that also sets a user_version. */
static void test_db__refuses_foreign_file_with_version(void **state)
{
    fx *f = *state;
    raw_exec(f->path, "CREATE TABLE meta(key TEXT, value TEXT); PRAGMA user_version = 1");
    open_refused(f->path, 0, "not a kforge database", "no kforge marker");
    char other[320];
    snprintf(other, sizeof other, "%s/other.db", f->dir);
    raw_exec(other, "PRAGMA application_id = 42; CREATE TABLE x(a); PRAGMA user_version = 1");
    open_refused(other, 0, "not a kforge database", "application_id");
}

static void test_db__refuses_random_bytes(void **state)
{
    fx *f = *state;
    unsigned char junk[8192];
    srand(7);
    for (size_t i = 0; i < sizeof junk; i++)
        junk[i] = (unsigned char)rand();
    write_file(f->path, junk, sizeof junk);
    open_refused(f->path, 0, "file is not a database", NULL);
    open_refused(f->path, DB_READONLY, "file is not a database", NULL);
    write_file(f->path, "SQLite format 2\n not really", 27);
    open_refused(f->path, 0, "file is not a database", NULL);
}

static void test_db__refuses_newer_schema(void **state)
{
    fx *f = *state;
    db_close(open_ok(f->path, DB_CREATE));
    char sql[64];
    snprintf(sql, sizeof sql, "PRAGMA user_version = %d", DB_SCHEMA_VERSION + 1);
    raw_exec(f->path, sql);
    char want[64];
    snprintf(want, sizeof want, "schema version %d is newer than this build", DB_SCHEMA_VERSION + 1);
    open_refused(f->path, 0, want, NULL);
    open_refused(f->path, DB_READONLY, want, NULL);
}

/* A kforge database with some binaries, checkpointed into the main file, then
 * cut at several points: every open is refused (never a crash, never a
 * silent re-creation). */
static void test_db__refuses_truncated_file(void **state)
{
    fx *f = *state;
    db_store *s = open_ok(f->path, DB_CREATE);
    for (int i = 0; i < 50; i++) {
        char key[32];
        snprintf(key, sizeof key, "key%03d", i);
        unsigned char img[3000];
        memset(img, i, sizeof img);
        db_binary b;
        fill_binary(&b, key, "attn_decode", "h1", img, sizeof img);
        int ins;
        assert_int_equal(db_binary_put(s, &b, &ins), DB_OK);
    }
    db_close(s);  /* last connection: checkpoints and removes the WAL */
    raw_exec(f->path, "PRAGMA journal_mode = DELETE");
    size_t n;
    unsigned char *whole = read_file(f->path, &n);
    assert_true(n > 16 * 4096);
    const size_t cuts[] = { 50, 99, 100, 1000, 4096, 4097, 8192, n / 2, n - 4096, n - 1 };
    for (size_t i = 0; i < sizeof cuts / sizeof cuts[0]; i++) {
        write_file(f->path, whole, cuts[i]);
        db_store *t = NULL;
        db_rc rc = db_open(&t, f->path, 0);
        if (rc == DB_OK)
            print_error("truncated to %zu bytes: opened\n", cuts[i]);
        assert_int_equal(rc, DB_ERROR);
        assert_non_null(strstr(db_errmsg(t), f->path));
        db_close(t);
    }
    free(whole);
}

static void test_db__readonly_refuses_writes(void **state)
{
    fx *f = *state;
    db_close(open_ok(f->path, DB_CREATE));
    db_store *s = open_ok(f->path, DB_READONLY);
    unsigned char img[4] = { 1, 2, 3, 4 };
    db_binary b;
    fill_binary(&b, "k", "attn_decode", "h", img, sizeof img);
    int ins = -1;
    assert_int_equal(db_binary_put(s, &b, &ins), DB_ERROR);
    assert_int_equal(ins, 0);
    assert_non_null(strstr(db_errmsg(s), "readonly"));
    assert_non_null(strstr(db_errmsg(s), f->path));
    db_close(s);
}

static void test_db__memory_database(void **state)
{
    (void)state;
    db_store *s = open_ok(":memory:", DB_CREATE);
    assert_int_equal(db_user_version(s), DB_SCHEMA_VERSION);
    put_binary(s, "k", "attn_decode", "h");
    db_binary b;
    assert_int_equal(db_binary_get(s, "k", &b), DB_OK);
    db_binary_free(&b);
    db_close(s);
}

/* ---- binaries ------------------------------------------------------------ */

static void test_db__reopen_keeps_data(void **state)
{
    fx *f = *state;
    db_store *s = open_ok(f->path, DB_CREATE);
    put_binary(s, "a", "attn_decode", "h1");
    assert_int_equal(db_template_put(s, "attn_decode", "h1", "return {}"), DB_OK);
    db_close(s);
    s = open_ok(f->path, 0);
    db_binary b;
    assert_int_equal(db_binary_get(s, "a", &b), DB_OK);
    db_binary_free(&b);
    db_info info;
    assert_int_equal(db_get_info(s, &info), DB_OK);
    assert_int_equal(info.binaries, 1);
    assert_int_equal(info.templates, 1);
    assert_int_equal(info.binary_bytes, 16);
    db_close(s);
}

static void test_db__binary_round_trip(void **state)
{
    fx *f = *state;
    db_store *s = open_ok(f->path, DB_CREATE);
    unsigned char img[70000];
    for (size_t i = 0; i < sizeof img; i++)
        img[i] = (unsigned char)(i * 131 + (i >> 8));  /* zeros included */
    db_binary in;
    fill_binary(&in, "attn_decode.bf16.d128.g8.bn64@h1.sm_90a", "attn_decode", "h1", img, sizeof img);
    in.variant_key = "attn_decode.bf16.d128.g8.bn64";
    in.is_ptx = 1;
    int ins = -1;
    assert_int_equal(db_binary_put(s, &in, &ins), DB_OK);
    assert_int_equal(ins, 1);

    db_binary out;
    assert_int_equal(db_binary_get(s, in.cache_key, &out), DB_OK);
    assert_string_equal(out.cache_key, in.cache_key);
    assert_string_equal(out.variant_key, in.variant_key);
    assert_string_equal(out.family, in.family);
    assert_string_equal(out.template_hash, in.template_hash);
    assert_string_equal(out.arch, in.arch);
    assert_string_equal(out.nvrtc, in.nvrtc);
    assert_string_equal(out.options, in.options);
    assert_string_equal(out.params, in.params);
    assert_string_equal(out.kernels, in.kernels);
    assert_int_equal(out.image_size, sizeof img);
    assert_memory_equal(out.image, img, sizeof img);
    assert_int_equal(out.is_ptx, 1);
    assert_true(out.compile_ms == 12.5);
    assert_int_equal(out.regs, 96);
    assert_int_equal(out.smem_static, 1024);
    assert_int_equal(out.spill_bytes, 8);
    assert_non_null(out.created);
    assert_int_equal(strlen(out.created), 24);  /* 2025-01-02T03:04:05.678Z */
    db_binary_free(&out);
    assert_null(out.image);

    assert_int_equal(db_binary_get(s, "missing", &out), DB_NOTFOUND);
    assert_non_null(strstr(db_errmsg(s), "missing"));
    db_close(s);
}

static void test_db__binary_second_put_is_hit(void **state)
{
    fx *f = *state;
    db_store *s = open_ok(f->path, DB_CREATE);
    put_binary(s, "k1", "attn_decode", "h1");
    unsigned char other[3] = { 9, 9, 9 };
    db_binary b;
    fill_binary(&b, "k1", "attn_decode", "h1", other, sizeof other);
    int ins = -1;
    assert_int_equal(db_binary_put(s, &b, &ins), DB_OK);
    assert_int_equal(ins, 0);
    db_binary got;
    assert_int_equal(db_binary_get(s, "k1", &got), DB_OK);
    assert_int_equal(got.image_size, 16);  /* the first row is kept */
    db_binary_free(&got);
    db_close(s);
}

static void test_db__binary_put_checks_arguments(void **state)
{
    fx *f = *state;
    db_store *s = open_ok(f->path, DB_CREATE);
    db_binary b;
    fill_binary(&b, "k", "attn_decode", "h", NULL, 5);
    int ins = -1;
    assert_int_equal(db_binary_put(s, &b, &ins), DB_ERROR);
    assert_non_null(strstr(db_errmsg(s), "image is NULL"));
    fill_binary(&b, NULL, "attn_decode", "h", NULL, 0);
    assert_int_equal(db_binary_put(s, &b, &ins), DB_ERROR);
    fill_binary(&b, "empty", "attn_decode", "h", NULL, 0);  /* an empty image is allowed */
    assert_int_equal(db_binary_put(s, &b, &ins), DB_OK);
    assert_int_equal(ins, 1);
    db_close(s);
}

typedef struct seen {
    int n;
    char keys[8][32];
    size_t sizes[8];
    int null_images;
} seen;

static int collect(const db_binary *b, void *arg)
{
    seen *v = arg;
    if (v->n < 8) {
        snprintf(v->keys[v->n], sizeof v->keys[0], "%s", b->variant_key);
        v->sizes[v->n] = b->image_size;
    }
    v->null_images += b->image == NULL;
    v->n++;
    return 0;
}

static int stop_at_first(const db_binary *b, void *arg)
{
    (void)b;
    ++*(int *)arg;
    return 1;
}

static void test_db__binary_each_orders_and_filters(void **state)
{
    fx *f = *state;
    db_store *s = open_ok(f->path, DB_CREATE);
    put_binary(s, "z", "attn_prefill", "h1");
    put_binary(s, "c", "attn_decode", "h1");
    put_binary(s, "a", "attn_decode", "h1");
    seen all = { 0 }, dec = { 0 };
    assert_int_equal(db_binary_each(s, NULL, collect, &all), DB_OK);
    assert_int_equal(all.n, 3);
    assert_int_equal(all.null_images, 3);
    assert_string_equal(all.keys[0], "a");
    assert_string_equal(all.keys[1], "c");
    assert_string_equal(all.keys[2], "z");
    assert_int_equal(all.sizes[0], 16);
    assert_int_equal(db_binary_each(s, "attn_decode", collect, &dec), DB_OK);
    assert_int_equal(dec.n, 2);
    int calls = 0;
    assert_int_equal(db_binary_each(s, NULL, stop_at_first, &calls), DB_OK);
    assert_int_equal(calls, 1);
    db_close(s);
}

static void test_db__gc_keeps_winner_binaries(void **state)
{
    fx *f = *state;
    db_store *s = open_ok(f->path, DB_CREATE);
    put_binary(s, "old_winner", "attn_decode", "old");
    put_binary(s, "old_loser", "attn_decode", "old");
    put_binary(s, "old_loser2", "attn_decode", "older");
    put_binary(s, "new1", "attn_decode", "new");
    put_binary(s, "new2", "attn_prefill", "new2");
    db_winner w = { .gpu = "NVIDIA H200", .family = "attn_decode", .shape_key = "s1",
                    .variant_key = "old_winner", .cache_key = "old_winner" };
    assert_int_equal(db_winner_put(s, &w), DB_OK);
    const char *keep[] = { "new", "new2" };
    int removed = -1;
    assert_int_equal(db_gc(s, keep, 2, &removed), DB_OK);
    assert_int_equal(removed, 2);
    db_binary b;
    const char *kept[] = { "old_winner", "new1", "new2" };
    for (int i = 0; i < 3; i++) {
        assert_int_equal(db_binary_get(s, kept[i], &b), DB_OK);
        db_binary_free(&b);
    }
    assert_int_equal(db_binary_get(s, "old_loser", &b), DB_NOTFOUND);
    assert_int_equal(db_binary_get(s, "old_loser2", &b), DB_NOTFOUND);
    /* Nothing to keep: only the winner's binary survives. */
    assert_int_equal(db_gc(s, NULL, 0, &removed), DB_OK);
    assert_int_equal(removed, 2);
    db_info info;
    assert_int_equal(db_get_info(s, &info), DB_OK);
    assert_int_equal(info.binaries, 1);
    db_close(s);
}

static void test_db__gc_gives_pages_back(void **state)
{
    fx *f = *state;
    db_store *s = open_ok(f->path, DB_CREATE);
    static unsigned char img[1 << 20];
    for (int i = 0; i < 4; i++) {
        char key[8];
        snprintf(key, sizeof key, "big%d", i);
        db_binary b;
        fill_binary(&b, key, "attn_decode", "gone", img, sizeof img);
        int ins;
        assert_int_equal(db_binary_put(s, &b, &ins), DB_OK);
    }
    int removed;
    assert_int_equal(db_gc(s, NULL, 0, &removed), DB_OK);
    assert_int_equal(removed, 4);
    db_close(s);
    assert_true(raw_int(f->path, "PRAGMA page_count") * raw_int(f->path, "PRAGMA page_size")
                < (1 << 20));
}

/* ---- runs, measurements, winners, ceilings ------------------------------- */

static void test_db__device_is_deduplicated(void **state)
{
    fx *f = *state;
    db_store *s = open_ok(f->path, DB_CREATE);
    long long r1 = begin_run(s, "NVIDIA H200", "GPU-1");
    long long r2 = begin_run(s, "NVIDIA H200", "GPU-1");
    long long r3 = begin_run(s, "NVIDIA H200", "GPU-2");
    assert_true(r1 < r2 && r2 < r3);
    long long r4 = 0;
    assert_int_equal(db_run_begin(s, NULL, NULL, &r4), DB_OK);  /* no device */
    db_info info;
    assert_int_equal(db_get_info(s, &info), DB_OK);
    assert_int_equal(info.devices, 2);
    assert_int_equal(info.runs, 4);
    db_close(s);
    assert_int_equal(raw_int(f->path, "SELECT sm_clock_mhz FROM runs WHERE id = 1"), 1980);
}

static void test_db__measurements_and_winners_round_trip(void **state)
{
    fx *f = *state;
    db_store *s = open_ok(f->path, DB_CREATE);
    put_binary(s, "ck1", "attn_decode", "h1");
    long long run = begin_run(s, "NVIDIA H200", "GPU-1");
    db_measurement m = measurement(run, "v1", 0.25);
    m.cache_key = "ck1";
    long long id = 0;
    assert_int_equal(db_measure_put(s, &m, &id), DB_OK);
    assert_true(id > 0);
    db_measurement bad = measurement(run, "v2", NAN);
    bad.status = "wrong";
    bad.error = NAN;
    bad.message = "max rel error 0.3";
    bad.n_samples = 0;
    assert_int_equal(db_measure_put(s, &bad, NULL), DB_OK);
    db_measurement err = measurement(run, "v3", NAN);
    err.status = "error";
    assert_int_equal(db_measure_put(s, &err, NULL), DB_OK);
    db_measurement typo = measurement(run, "v4", 1);
    typo.status = "fine";
    assert_int_equal(db_measure_put(s, &typo, NULL), DB_ERROR);
    assert_non_null(strstr(db_errmsg(s), "CHECK constraint"));

    int exists = -1;
    const char *shape = "b1.h32_8.d128";
    assert_int_equal(db_measure_exists(s, "NVIDIA H200", "attn_decode", shape, "v1", &exists), DB_OK);
    assert_int_equal(exists, 1);
    assert_int_equal(db_measure_exists(s, "NVIDIA H200", "attn_decode", shape, "v2", &exists), DB_OK);
    assert_int_equal(exists, 1);
    assert_int_equal(db_measure_exists(s, "NVIDIA H200", "attn_decode", shape, "v3", &exists), DB_OK);
    assert_int_equal(exists, 0);  /* "error" rows are retried on resume */
    assert_int_equal(db_measure_exists(s, "NVIDIA H100", "attn_decode", shape, "v1", &exists), DB_OK);
    assert_int_equal(exists, 0);

    db_winner w = { .gpu = "NVIDIA H200", .family = "attn_decode", .shape_key = shape,
                    .variant_key = "v1", .cache_key = "ck1", .params = "block_n=64",
                    .median_ms = 0.25, .speedup = 1.4, .band = 0.02, .measurement_id = id };
    assert_int_equal(db_winner_put(s, &w), DB_OK);
    char buf[256];
    db_winner g;
    assert_int_equal(db_winner_get(s, "NVIDIA H200", "attn_decode", shape, &g, buf, sizeof buf), DB_OK);
    assert_string_equal(g.gpu, "NVIDIA H200");
    assert_string_equal(g.family, "attn_decode");
    assert_string_equal(g.shape_key, shape);
    assert_string_equal(g.variant_key, "v1");
    assert_string_equal(g.cache_key, "ck1");
    assert_string_equal(g.params, "block_n=64");
    assert_true(g.median_ms == 0.25 && g.speedup == 1.4 && g.band == 0.02);
    assert_int_equal(g.measurement_id, id);
    assert_true(g.gpu >= buf && g.gpu < buf + sizeof buf);
    assert_int_equal(db_winner_get(s, "NVIDIA H200", "attn_decode", shape, &g, buf, 10), DB_ERROR);
    assert_non_null(strstr(db_errmsg(s), "too small"));
    assert_int_equal(db_winner_get(s, "NVIDIA H100", "attn_decode", shape, &g, buf, sizeof buf),
                     DB_NOTFOUND);
    db_close(s);

    char *samples = raw_text(f->path, "SELECT samples FROM measurements WHERE variant_key = 'v1'");
    assert_string_equal(samples, "[0.5,0.25,0.125]");
    free(samples);
    samples = raw_text(f->path, "SELECT samples FROM measurements WHERE variant_key = 'v2'");
    assert_string_equal(samples, "[]");
    free(samples);
    assert_int_equal(raw_int(f->path, "SELECT error IS NULL AND median_ms IS NULL"
                                      " FROM measurements WHERE variant_key = 'v2'"), 1);
    assert_int_equal(raw_int(f->path, "SELECT json_array_length(samples) FROM measurements"
                                      " WHERE variant_key = 'v3'"), 3);
}

static void test_db__samples_keep_full_precision(void **state)
{
    fx *f = *state;
    db_store *s = open_ok(f->path, DB_CREATE);
    long long run = begin_run(s, "NVIDIA H200", "GPU-1");
    double v[40];
    for (int i = 0; i < 40; i++)
        v[i] = 0.1 + i / 3.0;
    v[7] = NAN;
    db_measurement m = measurement(run, "v1", 0.3);
    m.samples_ms = v;
    m.n_samples = 40;
    assert_int_equal(db_measure_put(s, &m, NULL), DB_OK);
    db_close(s);
    assert_int_equal(raw_int(f->path, "SELECT json_array_length(samples) FROM measurements"), 40);
    assert_int_equal(raw_int(f->path, "SELECT json_type(samples, '$[7]') = 'null' FROM measurements"), 1);
    char *t = raw_text(f->path, "SELECT json_extract(samples, '$[39]') FROM measurements");
    assert_true(strtod(t, NULL) == v[39]);
    free(t);
}

static void test_db__measure_supersedes_earlier_runs(void **state)
{
    fx *f = *state;
    db_store *s = open_ok(f->path, DB_CREATE);
    long long r1 = begin_run(s, "NVIDIA H200", "GPU-1");
    long long r2 = begin_run(s, "NVIDIA H200", "GPU-2");  /* same model, other card */
    long long r3 = begin_run(s, "NVIDIA H100", "GPU-3");
    db_measurement m = measurement(r1, "v1", 0.3);
    assert_int_equal(db_measure_put(s, &m, NULL), DB_OK);
    m.is_control = 1;  /* a control of the same run supersedes nothing */
    assert_int_equal(db_measure_put(s, &m, NULL), DB_OK);
    m.is_control = 0;
    assert_int_equal(db_measure_put(s, &m, NULL), DB_OK);  /* same run: both kept current */
    m.run_id = r3;
    assert_int_equal(db_measure_put(s, &m, NULL), DB_OK);  /* other GPU model */
    m.run_id = r2;
    m.status = "error";
    assert_int_equal(db_measure_put(s, &m, NULL), DB_OK);
    int exists = -1;
    assert_int_equal(db_measure_exists(s, "NVIDIA H200", "attn_decode", "b1.h32_8.d128", "v1",
                                       &exists), DB_OK);
    assert_int_equal(exists, 0);  /* the latest is an error: measure again */
    assert_int_equal(db_measure_exists(s, "NVIDIA H100", "attn_decode", "b1.h32_8.d128", "v1",
                                       &exists), DB_OK);
    assert_int_equal(exists, 1);
    db_close(s);
    assert_int_equal(raw_int(f->path, "SELECT count(*) FROM measurements"), 5);
    assert_int_equal(raw_int(f->path, "SELECT count(*) FROM measurements WHERE superseded"), 2);
    assert_int_equal(raw_int(f->path, "SELECT count(*) FROM measurements WHERE superseded"
                                      " AND run_id = 1 AND is_control = 0"), 2);
}

static int count_winners(const db_winner *w, void *arg)
{
    seen *v = arg;
    if (v->n < 8)
        snprintf(v->keys[v->n], sizeof v->keys[0], "%s/%s", w->shape_key, w->variant_key);
    v->n++;
    return 0;
}

static void test_db__winner_replace(void **state)
{
    fx *f = *state;
    db_store *s = open_ok(f->path, DB_CREATE);
    put_binary(s, "ck1", "attn_decode", "h1");
    put_binary(s, "ck2", "attn_decode", "h1");
    db_winner w = { .gpu = "NVIDIA H200", .family = "attn_decode", .shape_key = "s1",
                    .variant_key = "v1", .cache_key = "ck1", .median_ms = 0.3, .speedup = 1.1 };
    assert_int_equal(db_winner_put(s, &w), DB_OK);
    w.variant_key = "v2";
    w.cache_key = "ck2";
    w.median_ms = 0.2;
    assert_int_equal(db_winner_put(s, &w), DB_OK);
    w.shape_key = "s2";
    assert_int_equal(db_winner_put(s, &w), DB_OK);
    w.gpu = "NVIDIA H100";
    assert_int_equal(db_winner_put(s, &w), DB_OK);

    char buf[256];
    db_winner g;
    assert_int_equal(db_winner_get(s, "NVIDIA H200", "attn_decode", "s1", &g, buf, sizeof buf), DB_OK);
    assert_string_equal(g.variant_key, "v2");
    assert_string_equal(g.cache_key, "ck2");
    assert_true(g.median_ms == 0.2);
    assert_null(g.params);
    assert_int_equal(g.measurement_id, 0);
    seen v = { 0 };
    assert_int_equal(db_winner_each(s, "NVIDIA H200", NULL, count_winners, &v), DB_OK);
    assert_int_equal(v.n, 2);
    assert_string_equal(v.keys[0], "s1/v2");
    assert_string_equal(v.keys[1], "s2/v2");
    seen all = { 0 };
    assert_int_equal(db_winner_each(s, NULL, "attn_decode", count_winners, &all), DB_OK);
    assert_int_equal(all.n, 3);
    db_close(s);
}

static void test_db__winner_needs_its_binary(void **state)
{
    fx *f = *state;
    db_store *s = open_ok(f->path, DB_CREATE);
    db_winner w = { .gpu = "NVIDIA H200", .family = "attn_decode", .shape_key = "s1",
                    .variant_key = "v1", .cache_key = "no_such_binary" };
    assert_int_equal(db_winner_put(s, &w), DB_ERROR);
    assert_non_null(strstr(db_errmsg(s), "FOREIGN KEY"));
    w.cache_key = NULL;
    assert_int_equal(db_winner_put(s, &w), DB_OK);
    db_close(s);
}

static void test_db__ceiling_round_trip(void **state)
{
    fx *f = *state;
    db_store *s = open_ok(f->path, DB_CREATE);
    double v = -1;
    assert_int_equal(db_ceiling_get(s, "NVIDIA H200", "copy", &v), DB_NOTFOUND);
    assert_int_equal(db_ceiling_put(s, "NVIDIA H200", "copy", 4.23e12, "B/s"), DB_OK);
    assert_int_equal(db_ceiling_put(s, "NVIDIA H200", "copy", 4.25e12, "B/s"), DB_OK);
    assert_int_equal(db_ceiling_put(s, "NVIDIA H200", "gemm_bf16", 693e12, "FLOP/s"), DB_OK);
    assert_int_equal(db_ceiling_put(s, "NVIDIA H200", "read", 4.6e12, "B/s"), DB_OK);
    assert_int_equal(db_ceiling_put(s, "NVIDIA H200", "gemm_fp8", 1, "FLOP/s"), DB_ERROR);
    assert_int_equal(db_ceiling_get(s, "NVIDIA H200", "copy", &v), DB_OK);
    assert_true(v == 4.25e12);
    assert_int_equal(db_ceiling_get(s, "NVIDIA H200", "gemm_bf16", &v), DB_OK);
    assert_true(v == 693e12);
    assert_int_equal(db_ceiling_get(s, "NVIDIA H200", "read", &v), DB_OK);
    assert_true(v == 4.6e12);
    db_close(s);
    assert_int_equal(raw_int(f->path, "SELECT count(*) FROM ceilings"), 3);
}

/* Schema 1 allowed only 'copy' and 'gemm_bf16': the step to 2 keeps the rows
 * (and their times) and lets 'read' in. */
static void test_db__migration_2_keeps_ceilings_and_allows_read(void **state)
{
    fx *f = *state;
    char msg[256];
    assert_int_equal(db_create_at_version(f->path, 1, msg, sizeof msg), DB_OK);
    raw_exec(f->path, "INSERT INTO ceilings(gpu, kind, value, unit, measured_at)"
                      " VALUES ('NVIDIA H200', 'copy', 4.2e12, 'B/s', '2026-01-02T03:04:05.000Z')");
    db_store *s = open_ok(f->path, 0);
    assert_int_equal(db_user_version(s), DB_SCHEMA_VERSION);
    double v = -1;
    assert_int_equal(db_ceiling_get(s, "NVIDIA H200", "copy", &v), DB_OK);
    assert_true(v == 4.2e12);
    assert_int_equal(db_ceiling_get(s, "NVIDIA H200", "read", &v), DB_NOTFOUND);
    assert_int_equal(db_ceiling_put(s, "NVIDIA H200", "read", 4.6e12, "B/s"), DB_OK);
    assert_int_equal(db_ceiling_put(s, "NVIDIA H200", "gemm_fp8", 1, "FLOP/s"), DB_ERROR);
    db_close(s);
    char *at = raw_text(f->path, "SELECT measured_at FROM ceilings WHERE kind = 'copy'");
    assert_string_equal(at, "2026-01-02T03:04:05.000Z");
    free(at);
    assert_int_equal(raw_int(f->path, "SELECT count(*) FROM ceilings"), 2);
}

/* ---- several processes --------------------------------------------------- */

enum { PER_CHILD = 200, SHARED = 50 };

/* Child body: no cmocka here (its failures would unwind into a copy of the
 * parent's test); returns the number of shared keys it inserted, or -1. */
static int child_write(const char *path, int child, int go_fd)
{
    char c;
    if (read(go_fd, &c, 1) < 0)
        return -1;
    db_store *s = NULL;
    if (db_open(&s, path, DB_CREATE) != DB_OK) {
        fprintf(stderr, "child %d: %s\n", child, db_errmsg(s));
        db_close(s);
        return -1;
    }
    int won = 0;
    unsigned char img[512];
    for (int i = 0; i < PER_CHILD + SHARED; i++) {
        char key[48];
        if (i < PER_CHILD)
            snprintf(key, sizeof key, "child%d.key%03d", child, i);
        else
            snprintf(key, sizeof key, "shared.key%03d", i - PER_CHILD);
        memset(img, child + i, sizeof img);
        db_binary b;
        fill_binary(&b, key, "attn_decode", "h1", img, sizeof img);
        int ins = -1;
        if (db_binary_put(s, &b, &ins) != DB_OK || (i < PER_CHILD && ins != 1)) {
            fprintf(stderr, "child %d, %s: %s\n", child, key, db_errmsg(s));
            db_close(s);
            return -1;
        }
        won += i >= PER_CHILD && ins;
    }
    db_close(s);
    return won;
}

/* Two processes create the same new file at once, then write 200 binaries each
 * plus 50 shared keys: no row is lost and every shared key is inserted once. */
static void test_db__two_processes_write_at_once(void **state)
{
    fx *f = *state;
    int go[2], res[2];
    assert_int_equal(pipe(go), 0);
    assert_int_equal(pipe(res), 0);
    pid_t pids[2];
    for (int c = 0; c < 2; c++) {
        pids[c] = fork();
        assert_true(pids[c] >= 0);
        if (pids[c] == 0) {
            close(go[1]);
            int won = child_write(f->path, c, go[0]);
            ssize_t w = write(res[1], &won, sizeof won);
            _exit(won < 0 || w != sizeof won ? 1 : 0);
        }
    }
    close(go[0]);
    close(go[1]);  /* both children start now */
    int status[2], won_total = 0;
    for (int c = 0; c < 2; c++) {
        assert_int_equal(waitpid(pids[c], &status[c], 0), pids[c]);
        int won = 0;
        assert_int_equal(read(res[0], &won, sizeof won), sizeof won);
        won_total += won;
    }
    close(res[0]);
    close(res[1]);
    for (int c = 0; c < 2; c++) {
        assert_true(WIFEXITED(status[c]));
        assert_int_equal(WEXITSTATUS(status[c]), 0);
    }
    assert_int_equal(won_total, SHARED);
    db_store *s = open_ok(f->path, 0);
    db_info info;
    assert_int_equal(db_get_info(s, &info), DB_OK);
    assert_int_equal(info.binaries, 2 * PER_CHILD + SHARED);
    assert_int_equal(info.schema_version, DB_SCHEMA_VERSION);
    db_close(s);
    assert_int_equal(raw_int(f->path, "SELECT count(*) FROM meta WHERE key = 'application'"), 1);
}

/* ---- merge: checked and all or nothing ---------------------------------------- */

/* A source with two binaries, a run, a measurement and a winner. */
static void merge_source(const char *path)
{
    db_store *s = open_ok(path, DB_CREATE);
    put_binary(s, "src1", "attn_decode", "h1");
    put_binary(s, "src2", "attn_decode", "h1");
    long long run = begin_run(s, "NVIDIA H200", "GPU-1");
    db_measurement m = measurement(run, "src1", 0.25);
    long long id = 0;
    assert_int_equal(db_measure_put(s, &m, &id), DB_OK);
    db_winner w = { .gpu = "NVIDIA H200", .family = "attn_decode", .shape_key = "b1.h32_8.d128",
                    .variant_key = "src1", .cache_key = "src1", .params = "block_n=64",
                    .median_ms = 0.25, .speedup = 1.4, .band = 0.02, .measurement_id = id };
    assert_int_equal(db_winner_put(s, &w), DB_OK);
    db_close(s);
}

/* Everything a merge may write, as text. */
static char *merge_digest(const char *path)
{
    return raw_text(path, "SELECT (SELECT count(*) FROM runs) || ',' || (SELECT count(*) FROM measurements) || ','"
                          " || (SELECT count(*) FROM devices) || ',' || (SELECT count(*) FROM templates) || ','"
                          " || coalesce((SELECT group_concat(cache_key || hex(image) || image_size) FROM binaries), '')"
                          " || ',' || coalesce((SELECT group_concat(gpu || shape_key || variant_key) FROM winners), '')");
}

/* needle in the message; check_too: db_tune_merge_check refuses it as well (a bad source,
 * not a write failing midway) */
static void merge_refused(const char *out, const char *src, const char *needle, int check_too)
{
    char *before = merge_digest(out);
    db_store *s = open_ok(out, 0);
    db_tune_merge_stats st;
    assert_int_equal(db_tune_merge_check(s, src), check_too ? DB_ERROR : DB_OK);
    assert_int_equal(db_tune_merge(s, src, NULL, NULL, &st), DB_ERROR);
    const char *m = db_errmsg(s);
    if (!strstr(m, src) || !strstr(m, needle) || !strstr(m, "nothing was merged"))
        fail_msg("message: %s", m);
    db_close(s);
    char *after = merge_digest(out);
    assert_string_equal(before, after);
    free(before);
    free(after);
}

/* `db merge` copied an image_size of 999999999999 with an empty image; sizes are checked
 * against the images and a bad one refuses the whole merge. */
static void test_db__merge_checks_image_sizes(void **state)
{
    fx *f = *state;
    char src[320];
    snprintf(src, sizeof src, "%s/src.db", f->dir);
    db_store *s = open_ok(f->path, DB_CREATE);
    put_binary(s, "mine", "attn_decode", "h0");
    db_close(s);
    const char *edits[][2] = {
        {"UPDATE binaries SET image = x'', image_size = 999999999999 WHERE cache_key = 'src2'",
         "binary 'src2' has image_size 999999999999 but its image is 0 bytes"},
        {"UPDATE binaries SET image_size = 17 WHERE cache_key = 'src2'", "has image_size 17 but its image is 16 bytes"},
        {"UPDATE binaries SET image = x'', image_size = 0 WHERE cache_key = 'src2'",
         "has image_size 0 but its image is 0 bytes"},
        {"UPDATE binaries SET image = 'text' WHERE cache_key = 'src2'", "an image that is text, not a blob"},
        {"UPDATE binaries SET cache_key = '' WHERE cache_key = 'src2'", "an empty key"},
    };
    for (size_t i = 0; i < sizeof edits / sizeof edits[0]; i++) {
        unlink(src);
        merge_source(src);
        raw_exec(src, edits[i][0]);
        merge_refused(f->path, src, edits[i][1], 1);
    }
    /* the same source as written: merged */
    unlink(src);
    merge_source(src);
    s = open_ok(f->path, 0);
    db_tune_merge_stats st;
    assert_int_equal(db_tune_merge(s, src, NULL, NULL, &st), DB_OK);
    assert_int_equal(st.binaries, 2);
    db_close(s);
}

/* Schema 3's figures of a measurement (how it was timed, clocks, power, temperature, the paired
 * default) came through `db merge` as NULL: they are copied with the measurement. */
static void test_db__merge_keeps_the_clocks_of_measurements(void **state)
{
    fx *f = *state;
    char src[320];
    snprintf(src, sizeof src, "%s/src.db", f->dir);
    db_store *s = open_ok(src, DB_CREATE);
    put_binary(s, "src1", "attn_decode", "h1");
    long long run = begin_run(s, "NVIDIA H200", "GPU-1");
    db_measurement m = measurement(run, "src1", 0.25);
    m.timing = "sustained-graph";
    m.launches = 40, m.sets = 3;
    m.sm_clock_min = 1695, m.sm_clock_mean = 1710, m.power_mean = 684, m.power_max = 699;
    m.temp_max = 61, m.ref_ms = 0.26;
    assert_int_equal(db_measure_put(s, &m, NULL), DB_OK);
    db_measurement old = measurement(run, "src2", 0.30);   /* an older one: its figures unknown */
    assert_int_equal(db_measure_put(s, &old, NULL), DB_OK);
    db_close(s);
    s = open_ok(f->path, DB_CREATE);
    long long mine = begin_run(s, "NVIDIA H200", "GPU-1");   /* ids in the output move up */
    db_measurement pre = measurement(mine, "mine", 0.5);
    assert_int_equal(db_measure_put(s, &pre, NULL), DB_OK);
    db_tune_merge_stats st;
    assert_int_equal(db_tune_merge(s, src, NULL, NULL, &st), DB_OK);
    assert_int_equal(st.measurements, 2);
    long long id = raw_int(f->path, "SELECT id FROM measurements WHERE variant_key = 'src1'");
    db_clocks k;
    assert_int_equal(db_measure_clocks(s, id, &k), DB_OK);
    assert_string_equal(k.timing, "sustained-graph");
    assert_int_equal(k.launches, 40);
    assert_int_equal(k.sets, 3);
    assert_true(k.sm_clock_min == 1695 && k.sm_clock_mean == 1710);
    assert_true(k.power_mean == 684 && k.power_max == 699);
    assert_true(k.temp_max == 61 && k.ref_ms == 0.26);
    id = raw_int(f->path, "SELECT id FROM measurements WHERE variant_key = 'src2'");
    assert_int_equal(db_measure_clocks(s, id, &k), DB_OK);
    assert_true(isnan(k.sm_clock_mean) && isnan(k.ref_ms));
    assert_int_equal(k.launches, 0);
    db_close(s);
}

/* A write failing midway (a trigger raising at the 2nd binary, or at the winner after the
 * binaries, runs and measurements are in) leaves the output as it was. */
static void test_db__merge_failing_midway_leaves_nothing(void **state)
{
    fx *f = *state;
    char src[320];
    snprintf(src, sizeof src, "%s/src.db", f->dir);
    merge_source(src);
    db_store *s = open_ok(f->path, DB_CREATE);
    put_binary(s, "mine", "attn_decode", "h0");
    db_close(s);
    raw_exec(f->path, "CREATE TRIGGER full BEFORE INSERT ON binaries WHEN (SELECT count(*) FROM binaries) >= 2"
                      " BEGIN SELECT RAISE(ABORT, 'database or disk is full (simulated)'); END");
    merge_refused(f->path, src, "database or disk is full (simulated)", 0);
    raw_exec(f->path, "DROP TRIGGER full; CREATE TRIGGER full BEFORE INSERT ON winners"
                      " BEGIN SELECT RAISE(ABORT, 'disk I/O error (simulated)'); END");
    merge_refused(f->path, src, "disk I/O error (simulated)", 0);
    raw_exec(f->path, "DROP TRIGGER full");
    char *d = merge_digest(f->path);
    assert_non_null(strstr(d, "0,0,0,"));  /* no run, measurement or device came through */
    free(d);
}

/* `kforge db merge good.db bad.db -o out.db` checks both before merging either. */
static void test_db__cli_merge_checks_every_input_first(void **state)
{
    fx *f = *state;
    const char *kf = getenv("KFORGE_BIN");
    if (!kf || access(kf, X_OK)) {
        print_message("skipped: KFORGE_BIN does not name the kforge binary (run through ctest)\n");
        skip();
    }
    char good[320], bad[320], cmd[1400], out[2048];
    snprintf(good, sizeof good, "%s/good.db", f->dir);
    snprintf(bad, sizeof bad, "%s/bad.db", f->dir);
    merge_source(good);
    merge_source(bad);
    raw_exec(bad, "UPDATE binaries SET image = x'', image_size = 999999999999 WHERE cache_key = 'src2'");
    db_close(open_ok(f->path, DB_CREATE));
    snprintf(cmd, sizeof cmd, "'%s' db merge '%s' '%s' -o '%s' 2>&1", kf, good, bad, f->path);
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    size_t len = fread(out, 1, sizeof out - 1, p);
    out[len] = 0;
    int st = pclose(p);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 1 || !strstr(out, "error: cannot merge '") ||
        !strstr(out, "image_size 999999999999 but its image is 0 bytes"))
        fail_msg("status %d: %s", st, out);
    assert_int_equal(raw_int(f->path, "SELECT count(*) FROM binaries"), 0);
    assert_int_equal(raw_int(f->path, "SELECT count(*) FROM runs"), 0);
}

int main(void)
{
#define T(name) cmocka_unit_test_setup_teardown(name, setup, teardown)
    const struct CMUnitTest tests[] = {
        T(test_db__creates_and_migrates_missing_file),
        T(test_db__migrates_empty_existing_file),
        T(test_db__migrates_every_older_version),
        T(test_db__refuses_reset_version),
        T(test_db__refuses_missing_file_without_create),
        T(test_db__refuses_directory),
        T(test_db__refuses_device_and_pipe),
        T(test_db__refuses_negative_version),
        T(test_db__refuses_foreign_file),
        T(test_db__refuses_foreign_file_with_version),
        T(test_db__refuses_random_bytes),
        T(test_db__refuses_newer_schema),
        T(test_db__refuses_truncated_file),
        T(test_db__readonly_refuses_writes),
        T(test_db__memory_database),
        T(test_db__reopen_keeps_data),
        T(test_db__binary_round_trip),
        T(test_db__binary_second_put_is_hit),
        T(test_db__binary_put_checks_arguments),
        T(test_db__binary_each_orders_and_filters),
        T(test_db__gc_keeps_winner_binaries),
        T(test_db__gc_gives_pages_back),
        T(test_db__device_is_deduplicated),
        T(test_db__measurements_and_winners_round_trip),
        T(test_db__samples_keep_full_precision),
        T(test_db__measure_supersedes_earlier_runs),
        T(test_db__winner_replace),
        T(test_db__winner_needs_its_binary),
        T(test_db__ceiling_round_trip),
        T(test_db__migration_2_keeps_ceilings_and_allows_read),
        T(test_db__two_processes_write_at_once),
        T(test_db__merge_checks_image_sizes),
        T(test_db__merge_keeps_the_clocks_of_measurements),
        T(test_db__merge_failing_midway_leaves_nothing),
        T(test_db__cli_merge_checks_every_input_first),
    };
#undef T
    return cmocka_run_group_tests_name("db", tests, NULL, NULL);
}
