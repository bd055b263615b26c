/* db/tune_query.c: the tuner's reads of measurements: a shape's current ones, one by id, counts */
#include <math.h>
#include <string.h>

#include "db/store.h"

#define DB_TUNE_MEAS_COLS \
    "m.id, m.run_id, d.name, m.family, m.shape_key, m.variant_key, m.cache_key, m.status," \
    " m.message, m.throughput_unit, m.created, m.is_control, json_array_length(m.samples)," \
    " m.superseded, m.error, m.median_ms, m.spread_ms, m.throughput, m.ceiling_frac, m.ref_ms"
#define DB_TUNE_MEAS_FROM \
    " FROM measurements m JOIN runs r ON r.id = m.run_id LEFT JOIN devices d ON d.id = r.device_id"

static double db_col_real(sqlite3_stmt *st, int i)
{
    return sqlite3_column_type(st, i) == SQLITE_NULL ? NAN : sqlite3_column_double(st, i);
}

static void db_tune_meas_view(sqlite3_stmt *st, db_tune_meas *m)
{
    m->id = sqlite3_column_int64(st, 0);
    m->run_id = sqlite3_column_int64(st, 1);
    m->gpu = db_col_str(st, 2);
    m->family = db_col_str(st, 3);
    m->shape_key = db_col_str(st, 4);
    m->variant_key = db_col_str(st, 5);
    m->cache_key = db_col_str(st, 6);
    m->status = db_col_str(st, 7);
    m->message = db_col_str(st, 8);
    m->throughput_unit = db_col_str(st, 9);
    m->created = db_col_str(st, 10);
    m->is_control = sqlite3_column_int(st, 11);
    m->n_samples = sqlite3_column_int(st, 12);
    m->superseded = sqlite3_column_int(st, 13);
    m->error = db_col_real(st, 14);
    m->median_ms = db_col_real(st, 15);
    m->spread_ms = db_col_real(st, 16);
    m->throughput = db_col_real(st, 17);
    m->ceiling_frac = db_col_real(st, 18);
    m->ref_ms = db_col_real(st, 19);
}

/* Steps st to the end, calling fn per row; *rows (may be NULL) gets the count. */
static db_rc db_tune_meas_loop(db_store *s, sqlite3_stmt *st, int (*fn)(const db_tune_meas *, void *),
                               void *arg, int *rows)
{
    int step, n = 0;
    while ((step = sqlite3_step(st)) == SQLITE_ROW) {
        db_tune_meas m;
        db_tune_meas_view(st, &m);
        n++;
        if (fn(&m, arg))
            break;
    }
    if (rows)
        *rows = n;
    if (step != SQLITE_ROW && step != SQLITE_DONE)
        return db_fail_sql(s, "read measurements");
    return DB_OK;
}

db_rc db_tune_meas_each(db_store *s, const char *gpu, const char *family, const char *shape_key,
                        int (*fn)(const db_tune_meas *m, void *arg), void *arg)
{
    sqlite3_stmt *st;
    if (db_prepare(s, &st, "SELECT " DB_TUNE_MEAS_COLS DB_TUNE_MEAS_FROM
                           " WHERE d.name = ?1 AND m.family = ?2 AND m.shape_key = ?3"
                           " AND m.superseded = 0 ORDER BY m.id",
                   "read measurements") != DB_OK)
        return DB_ERROR;
    db_bind_str(st, 1, gpu);
    db_bind_str(st, 2, family);
    db_bind_str(st, 3, shape_key);
    db_rc rc = db_tune_meas_loop(s, st, fn, arg, NULL);
    sqlite3_finalize(st);
    return rc;
}

db_rc db_tune_meas_by_id(db_store *s, long long id, int (*fn)(const db_tune_meas *m, void *arg),
                         void *arg)
{
    sqlite3_stmt *st;
    if (db_prepare(s, &st, "SELECT " DB_TUNE_MEAS_COLS DB_TUNE_MEAS_FROM " WHERE m.id = ?1",
                   "read measurement") != DB_OK)
        return DB_ERROR;
    sqlite3_bind_int64(st, 1, id);
    int rows = 0;
    db_rc rc = db_tune_meas_loop(s, st, fn, arg, &rows);
    sqlite3_finalize(st);
    if (rc == DB_OK && rows == 0) {
        db_fail(s, "no measurement %lld", id);
        rc = DB_NOTFOUND;
    }
    return rc;
}

db_rc db_tune_meas_count(db_store *s, const char *gpu, const char *family, long long *ok,
                         long long *wrong, long long *error)
{
    *ok = *wrong = *error = 0;
    sqlite3_stmt *st;
    if (db_prepare(s, &st, "SELECT m.status, count(*)" DB_TUNE_MEAS_FROM
                           " WHERE m.superseded = 0 AND (?1 IS NULL OR d.name = ?1)"
                           " AND (?2 IS NULL OR m.family = ?2) GROUP BY m.status",
                   "count measurements") != DB_OK)
        return DB_ERROR;
    db_bind_str(st, 1, gpu);
    db_bind_str(st, 2, family);
    int step;
    while ((step = sqlite3_step(st)) == SQLITE_ROW) {
        const char *k = db_col_str(st, 0);
        long long n = sqlite3_column_int64(st, 1);
        if (k && !strcmp(k, "ok"))
            *ok = n;
        else if (k && !strcmp(k, "wrong"))
            *wrong = n;
        else
            *error += n;
    }
    db_rc rc = step == SQLITE_DONE ? DB_OK : db_fail_sql(s, "count measurements");
    sqlite3_finalize(st);
    return rc;
}
