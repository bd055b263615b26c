/* db/bundle.c: kernel bundles: one SQLite file of winners and their cubins for a GPU model, checksummed */
#include "db/bundle.h"
#include "db/store.h"

#include <errno.h>
#include <fcntl.h>
#include <openssl/evp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/*
 * A bundle is an SQLite file (application_id DB_BUNDLE_APP_ID) with
 *   meta(key, value): format_version, gpu, arch, nvrtc, kforge, content_sha256
 *   binaries(cache_key, variant_key, family, arch, nvrtc, params, kernels, image, sha256)
 *   winners(family, shape_key, variant_key, cache_key, params, median_ms, speedup, band)
 * content_sha256 covers every row of binaries (an image through its sha256) and winners
 * in key order, and each image is checked against its sha256, so a changed byte
 * anywhere in the content is found. Export writes rows in key order with no timestamps: the same content gives
 * the same bytes.
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

/* SHA-256 over the content rows of schema `s` ("main" or "b"), in key order. Images
 * enter through their own SHA-256 (each checked against its bytes when loaded), so
 * every byte is hashed once. */
static int content_hash(sqlite3 *db, const char *s, char hex[65], char *err, size_t errn)
{
    char sql[512];
    EVP_MD_CTX *md = EVP_MD_CTX_new();
    EVP_DigestInit_ex(md, EVP_sha256(), NULL);
    const char *queries[2] = {
        "SELECT cache_key, variant_key, family, arch, nvrtc, params, kernels, sha256 FROM %s.binaries ORDER BY cache_key",
        "SELECT family, shape_key, variant_key, cache_key, params, median_ms, speedup, band FROM %s.winners ORDER BY family, shape_key"};
    int rc = 0;
    for (int q = 0; q < 2 && !rc; q++) {
        snprintf(sql, sizeof sql, queries[q], s);
        sqlite3_stmt *st;
        if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK) {
            snprintf(err, errn, "%s", sqlite3_errmsg(db));
            rc = -1;
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
        if (r != SQLITE_DONE) {
            snprintf(err, errn, "%s", sqlite3_errmsg(db));
            rc = -1;
        }
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

static int exec_bound(sqlite3 *db, const char *sql, const char *a, const char *b, const char *c, char *err,
                      size_t errn)
{
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK) {
        snprintf(err, errn, "%s", sqlite3_errmsg(db));
        return -1;
    }
    const char *v[3] = {a, b, c};
    for (int i = 0; i < 3 && i < sqlite3_bind_parameter_count(st); i++)
        v[i] ? sqlite3_bind_text(st, i + 1, v[i], -1, SQLITE_STATIC) : sqlite3_bind_null(st, i + 1);
    int r = sqlite3_step(st);
    sqlite3_finalize(st);
    if (r != SQLITE_DONE && r != SQLITE_ROW) {
        snprintf(err, errn, "%s", sqlite3_errmsg(db));
        return -1;
    }
    return 0;
}

db_rc db_bundle_export(db_store *s, const char *gpu, const char *family, const char *path,
                       const char *kforge_rev, int *n_winners, int *n_binaries)
{
    char err[512], tmp[1100];
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
    if (exec_bound(db, "ATTACH DATABASE ?1 AS b", tmp, NULL, NULL, err, sizeof err)) {
        unlink(tmp);
        return db_fail(s, "cannot create bundle '%s': %s", path, err);
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
        snprintf(err, sizeof err, "%s", sqlite3_errmsg(db));
    if (!rc)
        rc = exec_bound(db,
                        "INSERT INTO b.winners SELECT w.family, w.shape_key, w.variant_key, w.cache_key, w.params,"
                        " w.median_ms, w.speedup, w.band FROM main.winners w JOIN main.binaries x"
                        " ON x.cache_key = w.cache_key WHERE w.gpu = ?1 AND (?2 IS NULL OR w.family = ?2)"
                        " ORDER BY w.family, w.shape_key",
                        gpu, family, NULL, err, sizeof err);
    if (!rc)
        rc = exec_bound(db,
                        "INSERT INTO b.binaries SELECT x.cache_key, x.variant_key, x.family, x.arch, x.nvrtc,"
                        " x.params, x.kernels, x.image, kf_sha256(x.image) FROM main.binaries x"
                        " WHERE x.cache_key IN (SELECT cache_key FROM b.winners) ORDER BY x.cache_key",
                        NULL, NULL, NULL, err, sizeof err);
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
                snprintf(err, sizeof err, "the winners for '%s' span several archs; export one arch at a time", gpu);
                rc = -1;
            }
        }
        sqlite3_finalize(st);
    }
    if (!rc && *n_winners == 0) {
        snprintf(err, sizeof err, "no winners for GPU '%s'%s%s%s", gpu, family ? " and family '" : "",
                 family ? family : "", family ? "'" : "");
        rc = -1;
    }
    if (!rc)
        rc = content_hash(db, "b", hash, err, sizeof err);
    char fmt[16];
    snprintf(fmt, sizeof fmt, "%d", DB_BUNDLE_FORMAT);
    const char *meta[][2] = {{"format_version", fmt}, {"gpu", gpu}, {"arch", arch}, {"nvrtc", nvrtc},
                             {"kforge", kforge_rev ? kforge_rev : "unknown"}, {"content_sha256", hash}};
    for (int i = 0; i < 6 && !rc; i++)
        rc = exec_bound(db, "INSERT INTO b.meta(key, value) VALUES (?1, ?2)", meta[i][0], meta[i][1], NULL, err,
                        sizeof err);
    sqlite3_exec(db, "DETACH DATABASE b", NULL, NULL, NULL);
    if (!rc && rename(tmp, path) != 0) {
        snprintf(err, sizeof err, "cannot move the bundle into place");
        rc = -1;
    }
    if (rc) {
        unlink(tmp);
        return db_fail(s, "cannot export bundle '%s': %s", path, err);
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

static char *dupcol(sqlite3_stmt *st, int i)
{
    const char *s = (const char *)sqlite3_column_text(st, i);
    return strdup(s ? s : "");
}

static int read_meta(sqlite3 *db, const char *key, char *out, size_t n)
{
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(db, "SELECT value FROM meta WHERE key = ?1", -1, &st, NULL) != SQLITE_OK)
        return -1;
    sqlite3_bind_text(st, 1, key, -1, SQLITE_STATIC);
    int rc = -1;
    if (sqlite3_step(st) == SQLITE_ROW) {
        snprintf(out, n, "%s", (const char *)sqlite3_column_text(st, 0));
        rc = 0;
    }
    sqlite3_finalize(st);
    return rc;
}

static int bundle_fail(char *err, size_t errn, const char *path, const char *why)
{
    snprintf(err, errn, "cannot load bundle '%s': %s", path, why);
    return -1;
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
        snprintf(why, n, "checksum mismatch for binary '%s'", b->binaries[j.bad].cache_key);
        return -1;
    }
    return 0;
}

static int load_rows(sqlite3 *db, db_bundle *b, char *why, size_t n)
{
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(db, "SELECT count(*) FROM winners", -1, &st, NULL) != SQLITE_OK)
        return snprintf(why, n, "%s", sqlite3_errmsg(db)), -1;
    sqlite3_step(st);
    int nw = sqlite3_column_int(st, 0);
    sqlite3_finalize(st);
    if (sqlite3_prepare_v2(db, "SELECT count(*) FROM binaries", -1, &st, NULL) != SQLITE_OK)
        return snprintf(why, n, "%s", sqlite3_errmsg(db)), -1;
    sqlite3_step(st);
    int nb = sqlite3_column_int(st, 0);
    sqlite3_finalize(st);
    b->winners = calloc((size_t)nw + 1, sizeof *b->winners);
    b->binaries = calloc((size_t)nb + 1, sizeof *b->binaries);
    if (sqlite3_prepare_v2(db, "SELECT family, shape_key, variant_key, cache_key, params, median_ms, speedup, band"
                               " FROM winners"
                               " ORDER BY family, shape_key", -1, &st, NULL) != SQLITE_OK)
        return snprintf(why, n, "%s", sqlite3_errmsg(db)), -1;
    while (b->n_winners < nw && sqlite3_step(st) == SQLITE_ROW) {
        db_bundle_winner *w = &b->winners[b->n_winners++];
        w->family = dupcol(st, 0), w->shape_key = dupcol(st, 1), w->variant_key = dupcol(st, 2);
        w->cache_key = dupcol(st, 3), w->params = dupcol(st, 4);
        for (int c = 5; c < 8; c++) {
            double v = sqlite3_column_type(st, c) == SQLITE_NULL ? 0.0 / 0.0 : sqlite3_column_double(st, c);
            *(c == 5 ? &w->median_ms : c == 6 ? &w->speedup : &w->band) = v;
        }
    }
    sqlite3_finalize(st);
    if (sqlite3_prepare_v2(db, "SELECT cache_key, kernels, image, sha256, arch, variant_key, family, nvrtc, params"
                               " FROM binaries ORDER BY cache_key", -1,
                           &st, NULL) != SQLITE_OK)
        return snprintf(why, n, "%s", sqlite3_errmsg(db)), -1;
    int rc = 0;
    while (!rc && b->n_binaries < nb && sqlite3_step(st) == SQLITE_ROW) {
        db_bundle_binary *x = &b->binaries[b->n_binaries++];
        x->cache_key = dupcol(st, 0), x->kernels = dupcol(st, 1);
        x->variant_key = dupcol(st, 5), x->family = dupcol(st, 6), x->nvrtc = dupcol(st, 7), x->params = dupcol(st, 8);
        x->size = (size_t)sqlite3_column_bytes(st, 2);
        x->image = malloc(x->size ? x->size : 1);
        if (x->size)
            memcpy(x->image, sqlite3_column_blob(st, 2), x->size);
        const char *want = (const char *)sqlite3_column_text(st, 3);
        const char *arch = (const char *)sqlite3_column_text(st, 4);
        snprintf(x->sha256, sizeof x->sha256, "%s", want ? want : "");
        if (!arch || strcmp(arch, b->arch)) {
            snprintf(why, n, "binary '%s' is for %s, the bundle says %s", x->cache_key, arch ? arch : "?", b->arch);
            rc = -1;
        }
    }
    sqlite3_finalize(st);
    if (!rc && verify_images(b, why, n))
        rc = -1;
    for (int i = 0; !rc && i < b->n_winners; i++) {
        int found = 0;
        for (int k = 0; k < b->n_binaries && !found; k++)
            found = !strcmp(b->binaries[k].cache_key, b->winners[i].cache_key);
        if (!found) {
            snprintf(why, n, "winner '%s' has no binary", b->winners[i].variant_key);
            rc = -1;
        }
    }
    return rc;
}

int db_bundle_load(const char *path, const char *want_arch, db_bundle **out, char *err, size_t errn)
{
    *out = NULL;
    sqlite3 *db = NULL;
    if (sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL) != SQLITE_OK) {
        int r = bundle_fail(err, errn, path, db ? sqlite3_errmsg(db) : "out of memory");
        sqlite3_close(db);
        return r;
    }
    /* reads through a memory map: the images are copied once, not read() then copied */
    sqlite3_exec(db, "PRAGMA mmap_size = 1073741824", NULL, NULL, NULL);
    db_bundle *b = calloc(1, sizeof *b);
    snprintf(b->path, sizeof b->path, "%s", path);
    char why[512] = "", fmt[32] = "", hash[65] = "", have[65];
    sqlite3_stmt *st;
    int rc = 0, app = 0;
    /* No PRAGMA quick_check: it reads every page once more. A damaged b-tree makes
     * SQLite's reads below fail (SQLITE_CORRUPT), and a changed byte of content fails
     * the content checksum or an image's SHA-256; bytes no row uses do not matter. */
    if (!rc && sqlite3_prepare_v2(db, "PRAGMA application_id", -1, &st, NULL) == SQLITE_OK) {
        if (sqlite3_step(st) == SQLITE_ROW)
            app = sqlite3_column_int(st, 0);
        sqlite3_finalize(st);
    }
    if (!rc && app != APP_ID)
        rc = -1, snprintf(why, sizeof why, "not a kforge bundle");
    if (!rc && (read_meta(db, "format_version", fmt, sizeof fmt) || read_meta(db, "gpu", b->gpu, sizeof b->gpu) ||
                read_meta(db, "arch", b->arch, sizeof b->arch) || read_meta(db, "nvrtc", b->nvrtc, sizeof b->nvrtc) ||
                read_meta(db, "content_sha256", hash, sizeof hash)))
        rc = -1, snprintf(why, sizeof why, "its meta table is incomplete");
    if (!rc && atoi(fmt) != DB_BUNDLE_FORMAT)
        rc = -1, snprintf(why, sizeof why, "format version %s, this build reads %d", fmt, DB_BUNDLE_FORMAT);
    if (!rc && want_arch && strcmp(want_arch, b->arch))
        rc = -1, snprintf(why, sizeof why, "it holds %s binaries and this device is %s", b->arch, want_arch);
    if (!rc && content_hash(db, "main", have, why, sizeof why))
        rc = -1;
    if (!rc && strcmp(have, hash))
        rc = -1, snprintf(why, sizeof why, "content checksum mismatch (altered after export)");
    if (!rc)
        rc = load_rows(db, b, why, sizeof why);
    sqlite3_close(db);
    if (rc) {
        db_bundle_free(b);
        return bundle_fail(err, errn, path, why);
    }
    *out = b;
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
    for (int i = 0; i < b->n_binaries; i++)
        if (!strcmp(b->binaries[i].cache_key, cache_key))
            return &b->binaries[i];
    return NULL;
}

db_rc db_bundle_import(db_store *s, const char *path, int *n_winners, int *n_binaries)
{
    char err[1024];
    db_bundle *b;
    *n_winners = *n_binaries = 0;
    if (db_bundle_load(path, NULL, &b, err, sizeof err))
        return db_fail(s, "%s", err);
    db_rc rc = DB_OK;
    /* The rows come from the verified copy in memory, written through the store's API. */
    for (int i = 0; i < b->n_binaries && rc == DB_OK; i++) {
        const db_bundle_binary *x = &b->binaries[i];
        db_binary row = {0};
        row.cache_key = x->cache_key;
        row.variant_key = x->variant_key;
        row.family = x->family;
        row.arch = b->arch;
        row.nvrtc = x->nvrtc;
        row.params = x->params;
        row.kernels = x->kernels;
        row.image = x->image;
        row.image_size = x->size;
        int inserted = 0;
        rc = db_binary_put(s, &row, &inserted);
        *n_binaries += inserted;
    }
    for (int i = 0; i < b->n_winners && rc == DB_OK; i++) {
        const db_bundle_winner *w = &b->winners[i];
        db_winner row = {0};
        row.gpu = b->gpu, row.family = w->family, row.shape_key = w->shape_key;
        row.variant_key = w->variant_key, row.cache_key = w->cache_key, row.params = w->params;
        row.median_ms = w->median_ms, row.speedup = w->speedup, row.band = w->band;
        rc = db_winner_put(s, &row);
        *n_winners += rc == DB_OK;
    }
    db_bundle_free(b);
    return rc;
}
