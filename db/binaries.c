/* db/binaries.c: templates seen, the compiled-binary cache, and its garbage collection */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "db/store.h"

db_rc db_template_put(db_store *s, const char *name, const char *hash, const char *source)
{
    if (!name || !hash)
        return db_fail(s, "cannot store template: name and hash are required");
    sqlite3_stmt *st;
    if (db_prepare(s, &st, "INSERT OR IGNORE INTO templates(name, hash, source)"
                           " VALUES (?1, ?2, ?3)", "store template") != DB_OK)
        return DB_ERROR;
    db_bind_str(st, 1, name);
    db_bind_str(st, 2, hash);
    db_bind_str(st, 3, source);
    db_rc rc = DB_OK;
    if (sqlite3_step(st) != SQLITE_DONE)
        rc = db_fail_sql(s, "store template '%s'", name);
    sqlite3_finalize(st);
    return rc;
}

/* Columns in the order db_binary_read() expects; image last. */
#define DB_BINARY_COLS \
    "cache_key, variant_key, family, template_hash, arch, nvrtc, options, params," \
    " kernels, image_size, is_ptx, compile_ms, regs, smem_static, spill_bytes, created"

/* Points b's strings into the row (valid until the next step). */
static void db_binary_view(sqlite3_stmt *st, db_binary *b)
{
    memset(b, 0, sizeof *b);
    char **strs[] = { &b->cache_key, &b->variant_key, &b->family, &b->template_hash,
                      &b->arch, &b->nvrtc, &b->options, &b->params, &b->kernels };
    for (int i = 0; i < 9; i++)
        *strs[i] = (char *)db_col_str(st, i);
    b->image_size = (size_t)sqlite3_column_int64(st, 9);
    b->is_ptx = sqlite3_column_int(st, 10);
    b->compile_ms = sqlite3_column_double(st, 11);
    b->regs = sqlite3_column_int(st, 12);
    b->smem_static = sqlite3_column_int(st, 13);
    b->spill_bytes = sqlite3_column_int(st, 14);
    b->created = (char *)db_col_str(st, 15);
}

/* Fills out with malloc'd copies of the row, image from column 16. */
static int db_binary_copy(sqlite3_stmt *st, db_binary *out)
{
    db_binary v;
    db_binary_view(st, &v);
    *out = v;
    int oom = 0;
    char **strs[] = { &out->cache_key, &out->variant_key, &out->family, &out->template_hash,
                      &out->arch, &out->nvrtc, &out->options, &out->params, &out->kernels,
                      &out->created };
    int cols[] = { 0, 1, 2, 3, 4, 5, 6, 7, 8, 15 };
    for (int i = 0; i < 10; i++)
        *strs[i] = db_col_dup(st, cols[i], &oom);
    const void *img = sqlite3_column_blob(st, 16);
    size_t n = (size_t)sqlite3_column_bytes(st, 16);
    out->image_size = n;
    out->image = malloc(n ? n : 1);
    if (!out->image)
        oom = 1;
    else if (n)
        memcpy(out->image, img, n);
    return oom ? -1 : 0;
}

db_rc db_binary_get(db_store *s, const char *cache_key, db_binary *out)
{
    memset(out, 0, sizeof *out);
    if (!cache_key)
        return db_fail(s, "cannot look up binary: no cache key");
    sqlite3_stmt *st;
    if (db_prepare(s, &st, "SELECT " DB_BINARY_COLS ", image FROM binaries WHERE cache_key = ?1",
                   "look up binary") != DB_OK)
        return DB_ERROR;
    db_bind_str(st, 1, cache_key);
    db_rc rc;
    int step = sqlite3_step(st);
    if (step == SQLITE_DONE) {
        db_fail(s, "no binary '%s' in '%s'", cache_key, s->path);
        rc = DB_NOTFOUND;
    } else if (step != SQLITE_ROW) {
        rc = db_fail_sql(s, "look up binary '%s'", cache_key);
    } else if (db_binary_copy(st, out) != 0) {
        db_binary_free(out);
        rc = db_fail(s, "cannot look up binary '%s': out of memory", cache_key);
    } else {
        rc = DB_OK;
    }
    sqlite3_finalize(st);
    return rc;
}

void db_binary_free(db_binary *b)
{
    if (!b)
        return;
    char *strs[] = { b->cache_key, b->variant_key, b->family, b->template_hash, b->arch,
                     b->nvrtc, b->options, b->params, b->kernels, b->created };
    for (size_t i = 0; i < sizeof strs / sizeof strs[0]; i++)
        free(strs[i]);
    free(b->image);
    memset(b, 0, sizeof *b);
}

static void db_binary_bind(sqlite3_stmt *st, const db_binary *b)
{
    const char *strs[] = { b->cache_key, b->variant_key, b->family, b->template_hash,
                           b->arch, b->nvrtc, b->options, b->params, b->kernels };
    for (int i = 0; i < 9; i++)
        db_bind_str(st, i + 1, strs[i]);
    if (b->image_size)
        sqlite3_bind_blob64(st, 10, b->image, b->image_size, SQLITE_STATIC);
    else
        sqlite3_bind_zeroblob(st, 10, 0);
    sqlite3_bind_int64(st, 11, (sqlite3_int64)b->image_size);
    sqlite3_bind_int(st, 12, b->is_ptx != 0);
    db_bind_real(st, 13, b->compile_ms);
    sqlite3_bind_int(st, 14, b->regs);
    sqlite3_bind_int(st, 15, b->smem_static);
    sqlite3_bind_int(st, 16, b->spill_bytes);
}

static db_rc db_binary_check(db_store *s, const db_binary *b)
{
    if (!b || !b->cache_key || !b->variant_key || !b->family)
        return db_fail(s, "cannot store binary: cache key, variant key and family are required");
    if (b->image_size && !b->image)
        return db_fail(s, "cannot store binary '%s': image is NULL but image_size is %zu",
                       b->cache_key, b->image_size);
    return DB_OK;
}

db_rc db_binary_insert(db_store *s, const db_binary *b, int *inserted)
{
    if (inserted)
        *inserted = 0;
    if (db_binary_check(s, b) != DB_OK)
        return DB_ERROR;
    sqlite3_stmt *st;
    if (db_prepare(s, &st,
                   "INSERT OR IGNORE INTO binaries(cache_key, variant_key, family,"
                   " template_hash, arch, nvrtc, options, params, kernels, image, image_size,"
                   " is_ptx, compile_ms, regs, smem_static, spill_bytes)"
                   " VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16)",
                   "store binary") != DB_OK)
        return DB_ERROR;
    db_binary_bind(st, b);
    db_rc rc = DB_OK;
    if (sqlite3_step(st) != SQLITE_DONE)
        rc = db_fail_sql(s, "store binary '%s'", b->cache_key);
    else if (inserted)
        *inserted = sqlite3_changes(s->sql) > 0;
    sqlite3_finalize(st);
    return rc;
}

db_rc db_binary_put(db_store *s, const db_binary *b, int *inserted)
{
    if (inserted)
        *inserted = 0;
    if (db_binary_check(s, b) != DB_OK || db_begin(s, "store binary") != DB_OK)
        return DB_ERROR;
    int ins = 0;
    if (db_binary_insert(s, b, &ins) != DB_OK) {
        db_rollback(s);
        return DB_ERROR;
    }
    if (db_commit(s, "store binary") != DB_OK)
        return DB_ERROR;
    if (inserted)
        *inserted = ins;
    return DB_OK;
}

db_rc db_binary_each(db_store *s, const char *family,
                     int (*fn)(const db_binary *b, void *arg), void *arg)
{
    sqlite3_stmt *st;
    if (db_prepare(s, &st, "SELECT " DB_BINARY_COLS " FROM binaries"
                           " WHERE ?1 IS NULL OR family = ?1 ORDER BY family, variant_key",
                   "list binaries") != DB_OK)
        return DB_ERROR;
    db_bind_str(st, 1, family);
    db_rc rc = DB_OK;
    int step;
    while ((step = sqlite3_step(st)) == SQLITE_ROW) {
        db_binary b;
        db_binary_view(st, &b);
        if (fn(&b, arg))
            break;
    }
    if (step != SQLITE_ROW && step != SQLITE_DONE)
        rc = db_fail_sql(s, "list binaries");
    sqlite3_finalize(st);
    return rc;
}

/* Fills temp.db_keep with the hashes to keep; the caller holds a transaction. */
static db_rc db_gc_keep(db_store *s, const char *const *keep_hashes, int n)
{
    if (sqlite3_exec(s->sql, "CREATE TEMP TABLE IF NOT EXISTS db_keep(hash TEXT PRIMARY KEY);"
                             "DELETE FROM temp.db_keep", NULL, NULL, NULL) != SQLITE_OK)
        return db_fail_sql(s, "collect garbage");
    sqlite3_stmt *st;
    if (db_prepare(s, &st, "INSERT OR IGNORE INTO temp.db_keep(hash) VALUES (?1)",
                   "collect garbage") != DB_OK)
        return DB_ERROR;
    db_rc rc = DB_OK;
    for (int i = 0; i < n && rc == DB_OK; i++) {
        if (!keep_hashes[i])
            continue;
        db_bind_str(st, 1, keep_hashes[i]);
        if (sqlite3_step(st) != SQLITE_DONE)
            rc = db_fail_sql(s, "collect garbage");
        sqlite3_reset(st);
    }
    sqlite3_finalize(st);
    return rc;
}

db_rc db_gc(db_store *s, const char *const *keep_hashes, int n, int *removed)
{
    if (removed)
        *removed = 0;
    if (n < 0 || (n > 0 && !keep_hashes))
        return db_fail(s, "cannot collect garbage: %d hashes to keep but no list", n);
    if (db_begin(s, "collect garbage") != DB_OK)
        return DB_ERROR;
    sqlite3_stmt *st = NULL;
    db_rc rc = db_gc_keep(s, keep_hashes, n);
    if (rc == DB_OK)
        rc = db_prepare(s, &st,
                        "DELETE FROM binaries WHERE"
                        " (template_hash IS NULL OR template_hash NOT IN (SELECT hash FROM temp.db_keep))"
                        " AND cache_key NOT IN"
                        "  (SELECT cache_key FROM winners WHERE cache_key IS NOT NULL)",
                        "collect garbage");
    if (rc == DB_OK && sqlite3_step(st) != SQLITE_DONE)
        rc = db_fail_sql(s, "collect garbage");
    int changed = rc == DB_OK ? sqlite3_changes(s->sql) : 0;
    sqlite3_finalize(st);
    if (rc != DB_OK) {
        db_rollback(s);
        return rc;
    }
    if (db_commit(s, "collect garbage") != DB_OK)
        return DB_ERROR;
    if (removed)
        *removed = changed;
    /* Give the freed pages back; harmless when auto_vacuum is off. */
    if (sqlite3_exec(s->sql, "PRAGMA incremental_vacuum", NULL, NULL, NULL) != SQLITE_OK)
        return db_fail_sql(s, "vacuum after collecting garbage");
    return DB_OK;
}
