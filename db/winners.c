/* db/winners.c: the best variant per (GPU model, family, shape) */
#include <string.h>

#include "db/store.h"

static db_rc db_winner_check(db_store *s, const db_winner *w)
{
    if (!w || !w->gpu || !w->family || !w->shape_key || !w->variant_key)
        return db_fail(s, "cannot store winner: gpu, family, shape and variant are required");
    return DB_OK;
}

db_rc db_winner_upsert(db_store *s, const db_winner *w)
{
    if (db_winner_check(s, w) != DB_OK)
        return DB_ERROR;
    sqlite3_stmt *st;
    if (db_prepare(s, &st,
                   "INSERT INTO winners(gpu, family, shape_key, variant_key, cache_key, params,"
                   " median_ms, speedup, band, measurement_id)"
                   " VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)"
                   " ON CONFLICT(gpu, family, shape_key) DO UPDATE SET"
                   " variant_key = excluded.variant_key, cache_key = excluded.cache_key,"
                   " params = excluded.params, median_ms = excluded.median_ms,"
                   " speedup = excluded.speedup, band = excluded.band,"
                   " measurement_id = excluded.measurement_id,"
                   " updated = strftime('%Y-%m-%dT%H:%M:%fZ', 'now')",
                   "store winner") != DB_OK)
        return DB_ERROR;
    const char *strs[] = { w->gpu, w->family, w->shape_key, w->variant_key, w->cache_key,
                           w->params };
    for (int i = 0; i < 6; i++)
        db_bind_str(st, i + 1, strs[i]);
    db_bind_real(st, 7, w->median_ms);
    db_bind_real(st, 8, w->speedup);
    db_bind_real(st, 9, w->band);
    if (w->measurement_id)
        sqlite3_bind_int64(st, 10, w->measurement_id);
    db_rc rc = DB_OK;
    if (sqlite3_step(st) != SQLITE_DONE)
        rc = db_fail_sql(s, "store winner '%s' for '%s'", w->variant_key, w->shape_key);
    sqlite3_finalize(st);
    return rc;
}

db_rc db_winner_put(db_store *s, const db_winner *w)
{
    if (db_winner_check(s, w) != DB_OK || db_begin(s, "store winner") != DB_OK)
        return DB_ERROR;
    if (db_winner_upsert(s, w) != DB_OK) {
        db_rollback(s);
        return DB_ERROR;
    }
    return db_commit(s, "store winner");
}

#define DB_WINNER_COLS \
    "gpu, family, shape_key, variant_key, cache_key, params, median_ms, speedup, band," \
    " measurement_id"

/* Points w's strings into the row (valid until the next step). */
static void db_winner_view(sqlite3_stmt *st, db_winner *w)
{
    w->gpu = db_col_str(st, 0);
    w->family = db_col_str(st, 1);
    w->shape_key = db_col_str(st, 2);
    w->variant_key = db_col_str(st, 3);
    w->cache_key = db_col_str(st, 4);
    w->params = db_col_str(st, 5);
    w->median_ms = sqlite3_column_double(st, 6);
    w->speedup = sqlite3_column_double(st, 7);
    w->band = sqlite3_column_double(st, 8);
    w->measurement_id = sqlite3_column_int64(st, 9);
}

/* Copies *p into buf at *used and repoints it; -1 when buf is too small. */
static int db_pack(const char **p, char *buf, size_t bufsize, size_t *used)
{
    if (!*p)
        return 0;
    size_t n = strlen(*p) + 1;
    if (*used + n > bufsize) {
        *used += n;
        return -1;
    }
    memcpy(buf + *used, *p, n);
    *p = buf + *used;
    *used += n;
    return 0;
}

db_rc db_winner_get(db_store *s, const char *gpu, const char *family, const char *shape_key,
                    db_winner *w, char *buf, size_t bufsize)
{
    memset(w, 0, sizeof *w);
    sqlite3_stmt *st;
    if (db_prepare(s, &st, "SELECT " DB_WINNER_COLS " FROM winners"
                           " WHERE gpu = ?1 AND family = ?2 AND shape_key = ?3",
                   "look up winner") != DB_OK)
        return DB_ERROR;
    db_bind_str(st, 1, gpu);
    db_bind_str(st, 2, family);
    db_bind_str(st, 3, shape_key);
    db_rc rc = DB_OK;
    int step = sqlite3_step(st);
    if (step == SQLITE_DONE) {
        db_fail(s, "no winner for '%s' on '%s'", shape_key ? shape_key : "", gpu ? gpu : "");
        rc = DB_NOTFOUND;
    } else if (step != SQLITE_ROW) {
        rc = db_fail_sql(s, "look up winner");
    } else {
        db_winner_view(st, w);
        const char **strs[] = { &w->gpu, &w->family, &w->shape_key, &w->variant_key,
                                &w->cache_key, &w->params };
        size_t used = 0;
        int short_buf = 0;
        for (int i = 0; i < 6; i++)
            short_buf |= db_pack(strs[i], buf, bufsize, &used);
        if (short_buf) {
            memset(w, 0, sizeof *w);
            rc = db_fail(s, "cannot look up winner for '%s': buffer of %zu bytes is too small"
                         " (%zu needed)", shape_key, bufsize, used);
        }
    }
    sqlite3_finalize(st);
    return rc;
}

db_rc db_winner_each(db_store *s, const char *gpu, const char *family,
                     int (*fn)(const db_winner *w, void *arg), void *arg)
{
    sqlite3_stmt *st;
    if (db_prepare(s, &st, "SELECT " DB_WINNER_COLS " FROM winners"
                           " WHERE (?1 IS NULL OR gpu = ?1) AND (?2 IS NULL OR family = ?2)"
                           " ORDER BY gpu, family, shape_key",
                   "list winners") != DB_OK)
        return DB_ERROR;
    db_bind_str(st, 1, gpu);
    db_bind_str(st, 2, family);
    db_rc rc = DB_OK;
    int step;
    while ((step = sqlite3_step(st)) == SQLITE_ROW) {
        db_winner w;
        db_winner_view(st, &w);
        if (fn(&w, arg))
            break;
    }
    if (step != SQLITE_ROW && step != SQLITE_DONE)
        rc = db_fail_sql(s, "list winners");
    sqlite3_finalize(st);
    return rc;
}
