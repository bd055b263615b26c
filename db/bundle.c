/* db/bundle.c: kernel bundles: one SQLite file of winners and their cubins for a GPU model, checksummed */
#include "db/bundle.h"
#include "db/store.h"
#include "gen/kernels.h"
#include "gen/kv.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <openssl/evp.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/*
 * A bundle is an SQLite file (application_id APP_ID, rollback journal, no
 * WAL) with exactly the tables of bundle_schema:
 *   meta(key, value): format_version, gpu, arch, nvrtc, kforge, content_sha256
 *   binaries(cache_key, variant_key, family, arch, nvrtc, params, kernels, image, sha256)
 *   winners(family, shape_key, variant_key, cache_key, params, median_ms, speedup, band)
 * content_sha256 covers every meta row but itself (format 2; format 1 left meta out, so
 * a bundle could be moved to another GPU model unnoticed), every row of binaries (an
 * image through its sha256) and winners, in key order; each image is checked against
 * its sha256, so a changed byte anywhere in the content is found. Export writes rows in
 * key order with no timestamps: the same content gives the same bytes.
 * Loading then checks every field the runtime will parse (bundle_check_rows), so what
 * db_bundle_load accepts, kf_open and `kforge import` both accept, and nothing else.
 */

#define APP_ID 0x6b666231 /* "kfb1" */

void db_sha256_hex(const void *data, size_t n, char hex[65])
{
    unsigned char md[32];
    unsigned int len = 0;
    EVP_Digest(data, n, md, &len, EVP_sha256(), NULL);
    for (int i = 0; i < 32; i++)
        snprintf(hex + 2 * i, 3, "%02x", md[i]);
}

static void sql_sha256(sqlite3_context *ctx, int argc, sqlite3_value **argv)
{
    (void)argc;
    char hex[65];
    db_sha256_hex(sqlite3_value_blob(argv[0]), (size_t)sqlite3_value_bytes(argv[0]), hex);
    sqlite3_result_text(ctx, hex, 64, SQLITE_TRANSIENT);
}

/* SHA-256 over the meta rows (but content_sha256) and the content rows of schema `s`
 * ("main" or "b"), in key order, each table after a separator. Images enter through
 * their own SHA-256 (each checked against its bytes when loaded), so every byte is
 * hashed once. */
static int content_hash(sqlite3 *db, const char *s, char hex[65], core_err *e)
{
    char sql[512];
    EVP_MD_CTX *md = EVP_MD_CTX_new();
    EVP_DigestInit_ex(md, EVP_sha256(), NULL);
    const char *queries[3] = {
        "SELECT key, value FROM %s.meta WHERE key <> 'content_sha256' ORDER BY key",
        "SELECT cache_key, variant_key, family, arch, nvrtc, params, kernels, sha256 FROM %s.binaries ORDER BY cache_key",
        "SELECT family, shape_key, variant_key, cache_key, params, median_ms, speedup, band FROM %s.winners ORDER BY family, shape_key"};
    int rc = 0;
    for (int q = 0; q < 3 && !rc; q++) {
        snprintf(sql, sizeof sql, queries[q], s);
        EVP_DigestUpdate(md, "\x1e", 1);
        sqlite3_stmt *st;
        if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK) {
            rc = core_err_fail(e, KF_ERR_DB, "%s", sqlite3_errmsg(db));
            break;
        }
        int r;
        while ((r = sqlite3_step(st)) == SQLITE_ROW)
            for (int c = 0; c < sqlite3_column_count(st); c++) {
                const void *v = sqlite3_column_blob(st, c);
                int n = sqlite3_column_bytes(st, c);
                EVP_DigestUpdate(md, v ? v : "", (size_t)n);
                EVP_DigestUpdate(md, "\x1f", 1);
            }
        if (r != SQLITE_DONE)
            rc = core_err_fail(e, KF_ERR_DB, "%s", sqlite3_errmsg(db));
        sqlite3_finalize(st);
    }
    unsigned char out[32];
    unsigned int len = 0;
    EVP_DigestFinal_ex(md, out, &len);
    EVP_MD_CTX_free(md);
    for (int i = 0; i < 32; i++)
        snprintf(hex + 2 * i, 3, "%02x", out[i]);
    return rc;
}

static const char *bundle_schema =
    "CREATE TABLE b.meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);"
    "CREATE TABLE b.binaries(cache_key TEXT PRIMARY KEY, variant_key TEXT NOT NULL, family TEXT NOT NULL,"
    "  arch TEXT NOT NULL, nvrtc TEXT NOT NULL, params TEXT NOT NULL, kernels TEXT NOT NULL,"
    "  image BLOB NOT NULL, sha256 TEXT NOT NULL);"
    "CREATE TABLE b.winners(family TEXT NOT NULL, shape_key TEXT NOT NULL, variant_key TEXT NOT NULL,"
    "  cache_key TEXT NOT NULL, params TEXT NOT NULL, median_ms REAL, speedup REAL, band REAL,"
    "  PRIMARY KEY(family, shape_key));";

static int bundle_load(const char *path, const char *want_arch, db_bundle **out, char *why, size_t n);

static int exec_bound(sqlite3 *db, const char *sql, const char *a, const char *b, const char *c, core_err *e)
{
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK)
        return core_err_fail(e, KF_ERR_DB, "%s", sqlite3_errmsg(db));
    const char *v[3] = {a, b, c};
    for (int i = 0; i < 3 && i < sqlite3_bind_parameter_count(st); i++)
        v[i] ? sqlite3_bind_text(st, i + 1, v[i], -1, SQLITE_STATIC) : sqlite3_bind_null(st, i + 1);
    int r = sqlite3_step(st);
    sqlite3_finalize(st);
    if (r != SQLITE_DONE && r != SQLITE_ROW)
        return core_err_fail(e, KF_ERR_DB, "%s", sqlite3_errmsg(db));
    return 0;
}

db_rc db_bundle_export(db_store *s, const char *gpu, const char *family, const char *path,
                       const char *kforge_rev, int *n_winners, int *n_binaries)
{
    core_err e;
    char tmp[1100];
    *n_winners = *n_binaries = 0;
    snprintf(tmp, sizeof tmp, "%s.tmp%d", path, (int)getpid());
    unlink(tmp);
    /* ATTACH opens the new file with the connection's flags, and a database opened without
     * SQLITE_OPEN_CREATE (the CLI's export) cannot create it: make it here, empty (an empty file is
     * an empty SQLite database), exclusively so a planted link at the temporary name is not followed */
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW, 0644);
    if (fd < 0)
        return db_fail(s, "cannot create bundle '%s': cannot create '%s': %s", path, tmp, strerror(errno));
    close(fd);
    sqlite3 *db = s->sql;
    sqlite3_create_function(db, "kf_sha256", 1, SQLITE_UTF8 | SQLITE_DETERMINISTIC, NULL, sql_sha256, NULL, NULL);
    if (exec_bound(db, "ATTACH DATABASE ?1 AS b", tmp, NULL, NULL, &e)) {
        unlink(tmp);
        return db_fail(s, "cannot create bundle '%s': %s", path, e.msg);
    }
    int rc = 0;
    char arch[32] = "", nvrtc[32] = "", hash[65];
    rc = sqlite3_exec(db, "PRAGMA b.journal_mode=OFF; PRAGMA b.page_size=4096;", NULL, NULL, NULL) != SQLITE_OK;
    if (!rc) {
        char pragma[64];
        snprintf(pragma, sizeof pragma, "PRAGMA b.application_id=%d;", APP_ID);
        rc = sqlite3_exec(db, pragma, NULL, NULL, NULL) != SQLITE_OK ||
             sqlite3_exec(db, bundle_schema, NULL, NULL, NULL) != SQLITE_OK;
    }
    if (rc)
        core_err_set(&e, KF_ERR_DB, "%s", sqlite3_errmsg(db));
    if (!rc)
        rc = exec_bound(db,
                        "INSERT INTO b.winners SELECT w.family, w.shape_key, w.variant_key, w.cache_key, w.params,"
                        " w.median_ms, w.speedup, w.band FROM main.winners w JOIN main.binaries x"
                        " ON x.cache_key = w.cache_key WHERE w.gpu = ?1 AND (?2 IS NULL OR w.family = ?2)"
                        " ORDER BY w.family, w.shape_key",
                        gpu, family, NULL, &e);
    if (!rc)
        rc = exec_bound(db,
                        "INSERT INTO b.binaries SELECT x.cache_key, x.variant_key, x.family, x.arch, x.nvrtc,"
                        " x.params, x.kernels, x.image, kf_sha256(x.image) FROM main.binaries x"
                        " WHERE x.cache_key IN (SELECT cache_key FROM b.winners) ORDER BY x.cache_key",
                        NULL, NULL, NULL, &e);
    sqlite3_stmt *st;
    if (!rc && sqlite3_prepare_v2(db, "SELECT (SELECT count(*) FROM b.winners), (SELECT count(*) FROM b.binaries),"
                                      " (SELECT min(arch) FROM b.binaries), (SELECT count(DISTINCT arch) FROM b.binaries),"
                                      " (SELECT min(nvrtc) FROM b.binaries)", -1, &st, NULL) == SQLITE_OK) {
        if (sqlite3_step(st) == SQLITE_ROW) {
            *n_winners = sqlite3_column_int(st, 0);
            *n_binaries = sqlite3_column_int(st, 1);
            snprintf(arch, sizeof arch, "%s", db_col_str(st, 2) ? db_col_str(st, 2) : "");
            snprintf(nvrtc, sizeof nvrtc, "%s", db_col_str(st, 4) ? db_col_str(st, 4) : "");
            if (sqlite3_column_int(st, 3) > 1) {
                rc = core_err_fail(&e, KF_ERR_DB, "the winners for '%s' span several archs; export one arch at a time",
                                   gpu);
            }
        }
        sqlite3_finalize(st);
    }
    if (!rc && *n_winners == 0) {
        rc = core_err_fail(&e, KF_ERR_DB, "no winners for GPU '%s'%s%s%s", gpu, family ? " and family '" : "",
                           family ? family : "", family ? "'" : "");
    }
    char fmt[16];
    snprintf(fmt, sizeof fmt, "%d", DB_BUNDLE_FORMAT);
    const char *meta[][2] = {{"format_version", fmt}, {"gpu", gpu}, {"arch", arch}, {"nvrtc", nvrtc},
                             {"kforge", kforge_rev ? kforge_rev : "unknown"}, {"content_sha256", hash}};
    /* the meta rows first: the checksum covers them */
    for (int i = 0; i < 6 && !rc; i++) {
        if (i == 5)
            rc = content_hash(db, "b", hash, &e);
        if (!rc)
            rc = exec_bound(db, "INSERT INTO b.meta(key, value) VALUES (?1, ?2)", meta[i][0], meta[i][1], NULL, &e);
    }
    sqlite3_exec(db, "DETACH DATABASE b", NULL, NULL, NULL);
    /* what export writes, the loader takes: a database row it would refuse (a malformed
     * shape key, an empty image) fails the export, not a deployment */
    db_bundle *check = NULL;
    char why[768];
    if (!rc && bundle_load(tmp, NULL, &check, why, sizeof why))
        rc = core_err_fail(&e, KF_ERR_DB, "it would not load: %s", why);
    db_bundle_free(check);
    if (!rc && rename(tmp, path) != 0)
        rc = core_err_fail(&e, KF_ERR_DB, "cannot move '%s' into place: %s", tmp, strerror(errno));
    if (rc) {
        unlink(tmp);
        return db_fail(s, "cannot export bundle '%s': %s", path, e.msg);
    }
    return DB_OK;
}

/* ---- reading ------------------------------------------------------------------ */

struct db_bundle {
    char path[1024];
    char gpu[256], arch[32], nvrtc[32];
    int n_winners, n_binaries;
    db_bundle_winner *winners;
    db_bundle_binary *binaries;
};

/* Why the file at path cannot be a bundle, read from its first 100 bytes (SQLite's
 * header) before SQLite opens it, or NULL. A device, a pipe or a directory is never
 * handed to SQLite; a symbolic link is followed (a deployment may point one at its
 * current bundle) and what it names is checked like any file. */
static const char *bundle_precheck(const char *path, char *why, size_t n)
{
    struct stat st;
    if (!path || !*path)
        return "no path given";
    if (stat(path, &st) != 0) {
        struct stat ln;
        if (errno == ENOENT && lstat(path, &ln) == 0 && S_ISLNK(ln.st_mode))
            return "no such file (a symbolic link to nothing)";
        return errno == ENOENT ? "no such file" : strerror(errno);
    }
    if (S_ISDIR(st.st_mode))
        return "is a directory";
    if (!S_ISREG(st.st_mode))
        return "not a regular file";
    if (st.st_size == 0)
        return "empty file (0 bytes)";
    unsigned char h[100];
    int fd = open(path, O_RDONLY);
    if (fd < 0)
        return strerror(errno);
    ssize_t got = read(fd, h, sizeof h);
    close(fd);
    if (got < (ssize_t)sizeof h || memcmp(h, "SQLite format 3", 16))
        return snprintf(why, n, "not a kforge bundle (not an SQLite file, %lld bytes)", (long long)st.st_size), why;
    uint32_t app = (uint32_t)h[68] << 24 | (uint32_t)h[69] << 16 | (uint32_t)h[70] << 8 | h[71];
    if (app != APP_ID)
        return snprintf(why, n, "not a kforge bundle (application_id 0x%08x)", (unsigned)app), why;
    if (h[18] != 1 || h[19] != 1)
        return "its SQLite header says WAL mode; a bundle is one self-contained file";
    long long page = h[16] << 8 | h[17];
    if (page == 1)
        page = 65536;
    uint32_t pages = (uint32_t)h[28] << 24 | (uint32_t)h[29] << 16 | (uint32_t)h[30] << 8 | h[31];
    if (page < 512 || (page & (page - 1)) || memcmp(h + 24, h + 92, 4) || (long long)pages * page != st.st_size)
        return snprintf(why, n, "the file is %lld bytes and its header says %u pages of %lld bytes (truncated,"
                        " padded or damaged)", (long long)st.st_size, (unsigned)pages, page), why;
    return NULL;
}

/* The schema every bundle of this format has, as SQLite stores it: one row a schema
 * object, built once from bundle_schema in a database in memory. */
static char expected_schema[4096];
static pthread_once_t expected_once = PTHREAD_ONCE_INIT;

static int schema_text(sqlite3 *db, const char *s, char *out, size_t n)
{
    char sql[160];
    snprintf(sql, sizeof sql, "SELECT type, name, tbl_name, coalesce(sql, '') FROM %s.sqlite_schema ORDER BY name", s);
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK)
        return -1;
    size_t len = 0;
    int r;
    out[0] = 0;
    while ((r = sqlite3_step(st)) == SQLITE_ROW)
        for (int c = 0; c < 4 && len < n; c++)
            len += (size_t)snprintf(out + len, n - len, "%s%c", db_col_str(st, c) ? db_col_str(st, c) : "",
                                    c == 3 ? '\n' : '|');
    sqlite3_finalize(st);
    return r != SQLITE_DONE ? -1 : len < n ? 0 : -2;  /* -2: longer than n */
}

static void build_expected_schema(void)
{
    sqlite3 *db = NULL;
    if (sqlite3_open_v2(":memory:", &db, SQLITE_OPEN_READWRITE, NULL) != SQLITE_OK ||
        sqlite3_exec(db, "ATTACH DATABASE ':memory:' AS b", NULL, NULL, NULL) != SQLITE_OK ||
        sqlite3_exec(db, bundle_schema, NULL, NULL, NULL) != SQLITE_OK ||
        schema_text(db, "b", expected_schema, sizeof expected_schema))
        expected_schema[0] = 0;  /* then no bundle matches: refused, never accepted */
    sqlite3_close(db);
}

/* Refuses any schema but bundle_schema: extra tables, views or triggers, a table
 * without its primary key (so duplicate rows), other columns or types. */
static int check_schema(sqlite3 *db, char *why, size_t n)
{
    pthread_once(&expected_once, build_expected_schema);
    char have[4096];
    int r = schema_text(db, "main", have, sizeof have);
    if (r == -2)
        return snprintf(why, n, "its schema is not the one kforge writes (it is longer)"), -1;
    if (r)
        return snprintf(why, n, "cannot read its schema: %s", sqlite3_errmsg(db)), -1;
    if (!expected_schema[0] || strcmp(have, expected_schema)) {
        /* name the first object that differs */
        const char *a = have, *b = expected_schema;
        while (*a && *a == *b) {
            const char *ea = strchr(a, '\n'), *eb = strchr(b, '\n');
            if (!ea || !eb || ea - a != eb - b || memcmp(a, b, (size_t)(ea - a)))
                break;
            a = ea + 1, b = eb + 1;
        }
        const char *bar = strchr(*a ? a : b, '|');
        const char *name = bar ? bar + 1 : "";
        size_t k = strcspn(name, "|\n");
        return snprintf(why, n, "its schema is not the one kforge writes (at '%.*s')", (int)k, name), -1;
    }
    return 0;
}

static char *dupcol(sqlite3_stmt *st, int i)
{
    const char *s = (const char *)sqlite3_column_text(st, i);
    return strdup(s ? s : "");
}

/* The meta table: exactly the six keys export writes, each a text value. */
static int read_meta(sqlite3 *db, db_bundle *b, char *fmt, size_t nfmt, char *hash, size_t nhash, char *why,
                     size_t n)
{
    static const char *keys[] = {"arch", "content_sha256", "format_version", "gpu", "kforge", "nvrtc"};
    char kforge[128] = "";
    struct { char *out; size_t n; } dst[] = {{b->arch, sizeof b->arch}, {hash, nhash}, {fmt, nfmt},
                                             {b->gpu, sizeof b->gpu}, {kforge, sizeof kforge},
                                             {b->nvrtc, sizeof b->nvrtc}};
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(db, "SELECT key, value, typeof(value) FROM meta ORDER BY key", -1, &st, NULL) != SQLITE_OK)
        return snprintf(why, n, "%s", sqlite3_errmsg(db)), -1;
    int k = 0, r, rc = 0;
    while (!rc && (r = sqlite3_step(st)) == SQLITE_ROW) {
        const char *key = db_col_str(st, 0), *val = db_col_str(st, 1);
        if (k >= 6 || strcmp(key, keys[k])) {
            snprintf(why, n, "its meta table has %s key '%s'", k < 6 && strcmp(key, keys[k]) > 0 ? "no" : "an unknown",
                     k < 6 && strcmp(key, keys[k]) > 0 ? keys[k] : key);
            rc = -1;
        } else if (strcmp(db_col_str(st, 2), "text") || !*val ||
                   (size_t)sqlite3_column_bytes(st, 1) >= dst[k].n || strlen(val) != (size_t)sqlite3_column_bytes(st, 1)) {
            snprintf(why, n, "its meta value '%s' is empty, too long or not text", key);
            rc = -1;
        } else {
            snprintf(dst[k].out, dst[k].n, "%s", val);
            k++;
        }
    }
    if (!rc && r != SQLITE_DONE)
        snprintf(why, n, "%s", sqlite3_errmsg(db)), rc = -1;
    sqlite3_finalize(st);
    if (!rc && k < 6)
        snprintf(why, n, "its meta table has no key '%s'", keys[k]), rc = -1;
    return rc;
}


/* Checks every image against its SHA-256, on up to 8 threads (hashing is most of a
 * load's time). */
struct verify_job {
    db_bundle_binary *v;
    int n, next, bad;
    pthread_mutex_t mu;
};

static void *verify_worker(void *arg)
{
    struct verify_job *j = arg;
    for (;;) {
        pthread_mutex_lock(&j->mu);
        int i = j->next < j->n && j->bad < 0 ? j->next++ : -1;
        pthread_mutex_unlock(&j->mu);
        if (i < 0)
            return NULL;
        char hex[65];
        db_sha256_hex(j->v[i].image, j->v[i].size, hex);
        if (strcmp(hex, j->v[i].sha256)) {
            pthread_mutex_lock(&j->mu);
            if (j->bad < 0 || i < j->bad)
                j->bad = i;
            pthread_mutex_unlock(&j->mu);
        }
    }
}

static int verify_images(db_bundle *b, char *why, size_t n)
{
    struct verify_job j = {b->binaries, b->n_binaries, 0, -1, PTHREAD_MUTEX_INITIALIZER};
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    int nt = cores < 1 ? 1 : cores > 8 ? 8 : (int)cores;
    if (nt > b->n_binaries)
        nt = b->n_binaries;
    pthread_t th[8];
    int started = 0;
    for (int t = 1; t < nt; t++)
        started += pthread_create(&th[started], NULL, verify_worker, &j) == 0;
    verify_worker(&j);
    for (int t = 0; t < started; t++)
        pthread_join(th[t], NULL);
    pthread_mutex_destroy(&j.mu);
    if (j.bad >= 0) {
        snprintf(why, n, "checksum mismatch for binary '%.120s'", b->binaries[j.bad].cache_key);
        return -1;
    }
    return 0;
}

/* Columns that must be text without NUL bytes, and numbers that must be NULL or finite. */
static int text_col(sqlite3_stmt *st, int i)
{
    if (sqlite3_column_type(st, i) != SQLITE_TEXT)  /* before reading it, which converts it */
        return 0;
    const char *v = db_col_str(st, i);
    return v && strlen(v) == (size_t)sqlite3_column_bytes(st, i);
}

static int num_col(sqlite3_stmt *st, int i, double *out)
{
    int t = sqlite3_column_type(st, i);
    *out = t == SQLITE_NULL ? NAN : sqlite3_column_double(st, i);
    return t == SQLITE_NULL || ((t == SQLITE_FLOAT || t == SQLITE_INTEGER) && isfinite(*out));
}

static int load_rows(sqlite3 *db, db_bundle *b, char *why, size_t n)
{
    sqlite3_stmt *st;
    int nw = 0, nb = 0;
    if (sqlite3_prepare_v2(db, "SELECT (SELECT count(*) FROM winners), (SELECT count(*) FROM binaries)", -1, &st,
                           NULL) != SQLITE_OK || sqlite3_step(st) != SQLITE_ROW) {
        snprintf(why, n, "%s", sqlite3_errmsg(db));
        sqlite3_finalize(st);
        return -1;
    }
    nw = sqlite3_column_int(st, 0), nb = sqlite3_column_int(st, 1);
    sqlite3_finalize(st);
    b->winners = calloc((size_t)nw + 1, sizeof *b->winners);
    b->binaries = calloc((size_t)nb + 1, sizeof *b->binaries);
    if (!b->winners || !b->binaries)
        return snprintf(why, n, "out of memory for %d winners and %d binaries", nw, nb), -1;
    if (sqlite3_prepare_v2(db, "SELECT family, shape_key, variant_key, cache_key, params, median_ms, speedup, band"
                               " FROM winners ORDER BY family, shape_key", -1, &st, NULL) != SQLITE_OK)
        return snprintf(why, n, "%s", sqlite3_errmsg(db)), -1;
    int rc = 0, r = SQLITE_DONE;
    while (!rc && b->n_winners < nw && (r = sqlite3_step(st)) == SQLITE_ROW) {
        db_bundle_winner *w = &b->winners[b->n_winners++];
        /* the types first: reading a column as text converts it, and its type with it */
        int ok = 1;
        for (int c = 0; c < 5; c++)
            ok &= text_col(st, c);
        w->family = dupcol(st, 0), w->shape_key = dupcol(st, 1), w->variant_key = dupcol(st, 2);
        w->cache_key = dupcol(st, 3), w->params = dupcol(st, 4);
        ok &= num_col(st, 5, &w->median_ms) & num_col(st, 6, &w->speedup) & num_col(st, 7, &w->band);
        if (!ok)
            snprintf(why, n, "winner %d ('%.120s' for '%.120s') has a column of the wrong type, a NUL byte or a number that"
                     " is not finite", b->n_winners, w->variant_key, w->shape_key), rc = -1;
    }
    if (!rc && r != SQLITE_ROW && r != SQLITE_DONE)
        snprintf(why, n, "%s", sqlite3_errmsg(db)), rc = -1;
    sqlite3_finalize(st);
    if (rc)
        return rc;
    if (sqlite3_prepare_v2(db, "SELECT cache_key, kernels, image, sha256, arch, variant_key, family, nvrtc, params"
                               " FROM binaries ORDER BY cache_key", -1, &st, NULL) != SQLITE_OK)
        return snprintf(why, n, "%s", sqlite3_errmsg(db)), -1;
    while (!rc && b->n_binaries < nb && (r = sqlite3_step(st)) == SQLITE_ROW) {
        db_bundle_binary *x = &b->binaries[b->n_binaries++];
        int ok = sqlite3_column_type(st, 2) == SQLITE_BLOB;
        for (int c = 0; c < 9; c++)
            ok &= c == 2 || text_col(st, c);
        x->cache_key = dupcol(st, 0), x->kernels = dupcol(st, 1);
        x->variant_key = dupcol(st, 5), x->family = dupcol(st, 6), x->nvrtc = dupcol(st, 7), x->params = dupcol(st, 8);
        x->size = (size_t)sqlite3_column_bytes(st, 2);
        x->image = malloc(x->size ? x->size : 1);
        if (!x->image)
            return sqlite3_finalize(st), snprintf(why, n, "out of memory for binary '%.120s'", x->cache_key), -1;
        if (x->size)
            memcpy(x->image, sqlite3_column_blob(st, 2), x->size);
        const char *want = db_col_str(st, 3), *arch = db_col_str(st, 4);
        snprintf(x->sha256, sizeof x->sha256, "%s", want ? want : "");
        if (!ok)
            snprintf(why, n, "binary '%.120s' has a column of the wrong type or a NUL byte", x->cache_key), rc = -1;
        else if (strcmp(arch, b->arch))
            snprintf(why, n, "binary '%.120s' is for %s, the bundle says %s", x->cache_key, arch, b->arch), rc = -1;
    }
    if (!rc && r != SQLITE_ROW && r != SQLITE_DONE)
        snprintf(why, n, "%s", sqlite3_errmsg(db)), rc = -1;
    sqlite3_finalize(st);
    return rc;
}

/* ---- the fields, as the runtime will parse them -------------------------------- */

/* A key (cache key, variant key): 1 to max-1 printable characters, no space. */
static int key_ok(const char *s, size_t max)
{
    size_t n = strlen(s);
    if (n == 0 || n >= max)
        return 0;
    for (; *s; s++)
        if (*s <= ' ' || *s > '~')
            return 0;
    return 1;
}

/* "name=value,..." that gen_kv_parse reads back to the same text (canonical: sorted, no
 * spaces, nothing empty); family the same check as a value of the runtime's sets. */
static int params_ok(const char *text)
{
    gen_kvset set;
    char err[128], back[2048];
    gen_kv_clear(&set);
    return *text && !gen_kv_parse(&set, text, err, sizeof err) && set.n > 0 &&
           gen_kv_format(&set, back, sizeof back) >= 0 && !strcmp(back, text);
}

static int family_ok(const char *family)
{
    gen_kvset set;
    gen_kv_clear(&set);
    return !gen_kv_set_str(&set, "family", family);
}

int db_bundle_shape_parse(const char *shape_key, gen_kvset *out, core_err *e)
{
    char shape[DB_BUNDLE_SHAPE_MAX], conv[1024] = "", why[256];
    gen_kv_clear(out);
    if (!*shape_key || strlen(shape_key) >= sizeof shape)
        return core_err_fail(e, KF_ERR_BUNDLE, "empty or longer than %d characters", DB_BUNDLE_SHAPE_MAX - 1);
    snprintf(shape, sizeof shape, "%s", shape_key);
    size_t n = 0;
    char *save = NULL;
    for (char *tok = strtok_r(shape, ".", &save); tok; tok = strtok_r(NULL, ".", &save)) {
        char *dash = strchr(tok, '-');
        size_t k = 0;
        if (dash)
            k = (size_t)(dash - tok);
        else
            while (tok[k] && (tok[k] < '0' || tok[k] > '9'))
                k++;
        n += (size_t)snprintf(conv + n, sizeof conv - n, "%s%.*s=%s", n ? "," : "", (int)k, tok,
                              tok + k + (dash ? 1 : 0));
        if (n >= sizeof conv)
            return core_err_fail(e, KF_ERR_BUNDLE, "too long");
    }
    if (gen_kv_parse(out, conv, why, sizeof why))
        return core_err_fail(e, KF_ERR_BUNDLE, "%s", why);
    char back[DB_BUNDLE_SHAPE_MAX];
    if (gen_kv_find(out, "family") || gen_kv_keyform(out, back, sizeof back) < 0 || strcmp(back, shape_key))
        return core_err_fail(e, KF_ERR_BUNDLE, "not in the canonical form ('%.120s' reads back as '%.120s')", shape_key,
                             gen_kv_find(out, "family") ? "a shape with a family" : back);
    return 0;
}

/* The kernel list plan.c parses: 1 to 8 "name/threads/smem", canonical. */
static int kernels_ok(const char *text)
{
    gen_kernel k[8];
    char back[1024];
    int n = gen_kernels_parse(text, k, 8);
    if (n < 1)
        return 0;
    for (int i = 0; i < n; i++) {
        if (!k[i].name[0] || (k[i].name[0] >= '0' && k[i].name[0] <= '9') || k[i].threads < 1 ||
            k[i].threads > 1024 || k[i].smem < 0)
            return 0;
        for (const char *c = k[i].name; *c; c++)
            if (!(*c == '_' || (*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9')))
                return 0;
    }
    gen_kernels_format(k, n, back, sizeof back);
    return !strcmp(back, text);
}

static int hex64_ok(const char *s)
{
    if (strlen(s) != 64)
        return 0;
    for (; *s; s++)
        if (!((*s >= '0' && *s <= '9') || (*s >= 'a' && *s <= 'f')))
            return 0;
    return 1;
}

static int arch_ok(const char *s)
{
    if (strncmp(s, "sm_", 3) || s[3] < '1' || s[3] > '9')
        return 0;
    s += 3;
    while (*s >= '0' && *s <= '9')
        s++;
    return !*s || (s[0] >= 'a' && s[0] <= 'z' && !s[1]);
}

/* Whether key is "prefix.something": a variant key starts with its family, a cache key
 * with its variant key. */
static int prefixed(const char *key, const char *prefix)
{
    size_t n = strlen(prefix);
    return n && !strncmp(key, prefix, n) && key[n] == '.' && key[n + 1];
}

static int printable(const char *s)
{
    for (; *s; s++)
        if ((unsigned char)*s < ' ' || *s == 0x7f)
            return 0;
    return 1;
}

/* Every field of every row as the runtime (and a later kf_open on the database an
 * import fills) will read it; rows are in key order, so duplicates are neighbours. */
static int bundle_check_rows(db_bundle *b, char *why, size_t n)
{
    if (!arch_ok(b->arch))
        return snprintf(why, n, "its arch '%.120s' is not an arch (sm_90a, sm_80, ...)", b->arch), -1;
    if (!printable(b->gpu) || !printable(b->nvrtc))
        return snprintf(why, n, "its GPU name or NVRTC version holds control characters"), -1;
    if (b->n_winners == 0)
        return snprintf(why, n, "it holds no winners"), -1;
    for (int i = 0; i < b->n_binaries; i++) {
        const db_bundle_binary *x = &b->binaries[i];
        const char *bad = !key_ok(x->cache_key, DB_BUNDLE_KEY_MAX)                ? "cache key"
                          : !family_ok(x->family)                                 ? "family"
                          : !key_ok(x->variant_key, DB_BUNDLE_KEY_MAX) || !prefixed(x->variant_key, x->family)
                              ? "variant key (not FAMILY.fields)"
                          : !prefixed(x->cache_key, x->variant_key)               ? "cache key (not VARIANT.arch.hash)"
                          : !*x->nvrtc || !printable(x->nvrtc)                    ? "NVRTC version"
                          : !params_ok(x->params)                                 ? "params"
                          : !kernels_ok(x->kernels)                               ? "kernel list"
                          : x->size == 0                                          ? "image (empty)"
                          : !hex64_ok(x->sha256)                                  ? "sha256"
                          : i > 0 && !strcmp(x->cache_key, b->binaries[i - 1].cache_key) ? "cache key (a duplicate)"
                                                                                  : NULL;
        if (bad)
            return snprintf(why, n, "binary %d ('%.120s') has a malformed %s", i + 1, x->cache_key, bad), -1;
    }
    char *used = calloc((size_t)b->n_binaries + 1, 1);
    if (!used)
        return snprintf(why, n, "out of memory"), -1;
    int rc = 0;
    for (int i = 0; i < b->n_winners && !rc; i++) {
        const db_bundle_winner *w = &b->winners[i];
        gen_kvset shape;
        core_err se = CORE_ERR_INIT;
        const char *err = se.msg;
        const db_bundle_binary *x = key_ok(w->cache_key, DB_BUNDLE_KEY_MAX) ? db_bundle_find(b, w->cache_key) : NULL;
        const char *bad = !family_ok(w->family)                                        ? "family"
                          : db_bundle_shape_parse(w->shape_key, &shape, &se)             ? "shape key"
                          : !key_ok(w->variant_key, DB_BUNDLE_KEY_MAX) || !prefixed(w->variant_key, w->family)
                              ? "variant key (not FAMILY.fields)"
                          : !key_ok(w->cache_key, DB_BUNDLE_KEY_MAX)                     ? "cache key"
                          : !params_ok(w->params)                                        ? "params"
                          : !(w->median_ms > 0) && !isnan(w->median_ms)                  ? "median time"
                          : !(w->speedup > 0) && !isnan(w->speedup)                      ? "speed-up"
                          : !(w->band >= 0) && !isnan(w->band)                           ? "control band"
                          : i > 0 && !strcmp(w->family, b->winners[i - 1].family) &&
                                    !strcmp(w->shape_key, b->winners[i - 1].shape_key)
                              ? "shape key (a duplicate)"
                              : NULL;
        if (bad)
            rc = -1, snprintf(why, n, "winner %d ('%.120s' for shape '%.120s') has a malformed %s%s%s", i + 1,
                              w->variant_key, w->shape_key, bad, *err ? ": " : "", err);
        else if (!x)
            rc = -1, snprintf(why, n, "winner '%.120s' has no binary", w->variant_key);
        else if (strcmp(x->family, w->family))
            rc = -1, snprintf(why, n, "winner '%.120s' is of family '%.120s' and its binary '%.120s' of '%.120s'", w->variant_key,
                              w->family, x->cache_key, x->family);
        else
            used[x - b->binaries] = 1;
    }
    /* every binary serves a winner: export writes no others */
    for (int i = 0; i < b->n_binaries && !rc; i++)
        if (!used[i])
            rc = -1, snprintf(why, n, "binary '%.120s' serves no winner", b->binaries[i].cache_key);
    free(used);
    return rc ? rc : verify_images(b, why, n);
}

/* db_bundle_load without the "cannot load bundle" prefix: why gets the reason. */
static int bundle_load(const char *path, const char *want_arch, db_bundle **out, char *why, size_t n)
{
    *out = NULL;
    const char *pre = bundle_precheck(path, why, n);
    if (pre) {
        if (pre != why)
            snprintf(why, n, "%s", pre);
        return -1;
    }
    sqlite3 *db = NULL;
    if (sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL) != SQLITE_OK) {
        snprintf(why, n, "%s", db ? sqlite3_errmsg(db) : "out of memory");
        sqlite3_close(db);
        return -1;
    }
    /* reads through a memory map: the images are copied once, not read() then copied */
    sqlite3_exec(db, "PRAGMA mmap_size = 1073741824", NULL, NULL, NULL);
    db_bundle *b = calloc(1, sizeof *b);
    if (!b) {
        sqlite3_close(db);
        return snprintf(why, n, "out of memory"), -1;
    }
    snprintf(b->path, sizeof b->path, "%s", path);
    char fmt[32] = "", hash[65] = "", have[65], want_fmt[16];
    snprintf(want_fmt, sizeof want_fmt, "%d", DB_BUNDLE_FORMAT);
    /* No PRAGMA quick_check: it reads every page once more. A damaged b-tree makes
     * SQLite's reads below fail (SQLITE_CORRUPT), and a changed byte of content fails
     * the content checksum or an image's SHA-256; bytes no row uses do not matter. */
    int rc = check_schema(db, why, n) || read_meta(db, b, fmt, sizeof fmt, hash, sizeof hash, why, n);
    if (!rc && strcmp(fmt, want_fmt)) {
        char *end;
        long v = strtol(fmt, &end, 10);
        if (*end || v < 1)
            snprintf(why, n, "format version '%s' is not a number", fmt);
        else if (v < DB_BUNDLE_FORMAT)
            snprintf(why, n, "format version %ld is older than this build reads (%d: the checksum covers the GPU"
                     " model and arch); export it again from its database with this kforge", v, DB_BUNDLE_FORMAT);
        else
            snprintf(why, n, "format version %ld, this build reads %d", v, DB_BUNDLE_FORMAT);
        rc = -1;
    }
    if (!rc && !hex64_ok(hash))
        rc = -1, snprintf(why, n, "its content checksum '%s' is not a SHA-256", hash);
    core_err he;
    if (!rc && content_hash(db, "main", have, &he))
        rc = -1, snprintf(why, n, "%.700s", he.msg);
    if (!rc && strcmp(have, hash))
        rc = -1, snprintf(why, n, "content checksum mismatch (altered after export)");
    if (!rc && want_arch && strcmp(want_arch, b->arch))
        rc = -1, snprintf(why, n, "it holds %s binaries and this device is %s", b->arch, want_arch);
    if (!rc)
        rc = load_rows(db, b, why, n) || bundle_check_rows(b, why, n);
    sqlite3_close(db);
    if (rc) {
        db_bundle_free(b);
        return -1;
    }
    *out = b;
    return 0;
}

int db_bundle_load(const char *path, const char *want_arch, db_bundle **out, core_err *e)
{
    char why[768] = "";
    if (bundle_load(path, want_arch, out, why, sizeof why))
        return core_err_fail(e, KF_ERR_BUNDLE, "cannot load bundle '%s': %s", path ? path : "", why);
    return 0;
}

void db_bundle_free(db_bundle *b)
{
    if (!b)
        return;
    for (int i = 0; i < b->n_winners; i++) {
        db_bundle_winner *w = &b->winners[i];
        free(w->family), free(w->shape_key), free(w->variant_key), free(w->cache_key), free(w->params);
    }
    for (int i = 0; i < b->n_binaries; i++)
        free(b->binaries[i].cache_key), free(b->binaries[i].kernels), free(b->binaries[i].image),
            free(b->binaries[i].variant_key), free(b->binaries[i].family), free(b->binaries[i].nvrtc),
            free(b->binaries[i].params);
    free(b->winners);
    free(b->binaries);
    free(b);
}

const char *db_bundle_gpu(const db_bundle *b) { return b->gpu; }
const char *db_bundle_arch(const db_bundle *b) { return b->arch; }
int db_bundle_n_winners(const db_bundle *b) { return b->n_winners; }
const db_bundle_winner *db_bundle_winner_at(const db_bundle *b, int i) { return &b->winners[i]; }
const db_bundle_binary *db_bundle_find(const db_bundle *b, const char *cache_key)
{
    /* binaries are in cache-key order (strcmp order: SQLite's BINARY collation) */
    int lo = 0, hi = b->n_binaries - 1;
    while (lo <= hi) {
        int mid = lo + (hi - lo) / 2, c = strcmp(b->binaries[mid].cache_key, cache_key);
        if (!c)
            return &b->binaries[mid];
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid - 1;
    }
    return NULL;
}

/* ---- import ------------------------------------------------------------------- */

/* A binary the database already holds under x's cache key must be x's image: the key
 * names one compile (source, NVRTC, arch, options), so another image under it is a
 * damaged or poisoned one, and keeping it would serve it for the bundle's winners. */
static db_rc same_image(db_store *s, const db_bundle_binary *x)
{
    db_binary have;
    db_rc rc = db_binary_get(s, x->cache_key, &have);
    if (rc != DB_OK)
        return DB_ERROR;
    char hex[65];
    db_sha256_hex(have.image, have.image_size, hex);
    if (strcmp(hex, x->sha256))
        rc = db_fail(s, "binary '%.120s' is in '%s' already with another image (SHA-256 %.16s..., the bundle's"
                     " %.16s...): a cache key names one compile; remove that binary or import into another"
                     " database", x->cache_key, db_path(s), hex, x->sha256);
    db_binary_free(&have);
    return rc;
}

/* Writes one verified bundle's rows; the caller holds the transaction. */
static db_rc import_rows(db_store *s, const db_bundle *b, int *n_winners, int *n_binaries)
{
    db_rc rc = DB_OK;
    for (int i = 0; i < b->n_binaries && rc == DB_OK; i++) {
        const db_bundle_binary *x = &b->binaries[i];
        db_binary row = {0};
        row.cache_key = x->cache_key, row.variant_key = x->variant_key, row.family = x->family;
        row.arch = (char *)b->arch, row.nvrtc = x->nvrtc, row.params = x->params, row.kernels = x->kernels;
        row.image = x->image, row.image_size = x->size;
        int inserted = 0;
        rc = db_binary_insert(s, &row, &inserted);
        *n_binaries += inserted;
        if (rc == DB_OK && !inserted)
            rc = same_image(s, x);
    }
    for (int i = 0; i < b->n_winners && rc == DB_OK; i++) {
        const db_bundle_winner *w = &b->winners[i];
        db_winner row = {0};
        row.gpu = b->gpu, row.family = w->family, row.shape_key = w->shape_key;
        row.variant_key = w->variant_key, row.cache_key = w->cache_key, row.params = w->params;
        row.median_ms = w->median_ms, row.speedup = w->speedup, row.band = w->band;
        rc = db_winner_upsert(s, &row);
        *n_winners += rc == DB_OK;
    }
    return rc;
}

db_rc db_bundle_import(db_store *s, const char *const *paths, int n, int *n_winners, int *n_binaries)
{
    core_err e;
    for (int i = 0; i < n; i++)
        n_winners[i] = n_binaries[i] = 0;
    if (n < 1)
        return db_fail(s, "cannot import: no bundle given");
    db_bundle **b = calloc((size_t)n, sizeof *b);
    if (!b)
        return db_fail(s, "cannot import: out of memory");
    db_rc rc = DB_OK;
    /* every bundle is read and verified before the database is touched */
    for (int i = 0; i < n && rc == DB_OK; i++)
        if (db_bundle_load(paths[i], NULL, &b[i], &e))
            rc = db_fail(s, "%s (nothing was imported)", e.msg);
    if (rc == DB_OK)
        rc = db_begin(s, "start the import");
    int failed = -1;
    for (int i = 0; i < n && rc == DB_OK; i++)
        if ((rc = import_rows(s, b[i], &n_winners[i], &n_binaries[i])) != DB_OK)
            failed = i;
    if (failed >= 0) {
        /* keep SQLite's reason: db_rollback would replace its message */
        core_err_set(&e, KF_ERR_DB, "%s", db_errmsg(s));
        db_rollback(s);
        db_fail(s, "cannot import bundle '%s' into '%s': %s (nothing was imported)", paths[failed], db_path(s), e.msg);
    } else if (rc == DB_OK) {
        rc = db_commit(s, "commit the import");
    }
    if (rc != DB_OK)
        for (int i = 0; i < n; i++)
            n_winners[i] = n_binaries[i] = 0;
    for (int i = 0; i < n; i++)
        db_bundle_free(b[i]);
    free(b);
    return rc;
}
