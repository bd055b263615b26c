/* db/ceilings.c: measured throughput ceilings (device copy, device read, bf16 GEMM) per GPU model */
#include "db/store.h"

db_rc db_ceiling_put(db_store *s, const char *gpu, const char *kind, double value,
                     const char *unit)
{
    if (!gpu || !kind || !unit)
        return db_fail(s, "cannot store ceiling: gpu, kind and unit are required");
    sqlite3_stmt *st;
    if (db_prepare(s, &st, "INSERT OR REPLACE INTO ceilings(gpu, kind, value, unit)"
                           " VALUES (?1, ?2, ?3, ?4)", "store ceiling") != DB_OK)
        return DB_ERROR;
    db_bind_str(st, 1, gpu);
    db_bind_str(st, 2, kind);
    db_bind_real(st, 3, value);
    db_bind_str(st, 4, unit);
    db_rc rc = db_begin(s, "store ceiling");
    if (rc == DB_OK && sqlite3_step(st) != SQLITE_DONE) {
        rc = db_fail_sql(s, "store ceiling '%s' of '%s'", kind, gpu);
        db_rollback(s);
    }
    sqlite3_finalize(st);
    return rc == DB_OK ? db_commit(s, "store ceiling") : rc;
}

db_rc db_ceiling_get(db_store *s, const char *gpu, const char *kind, double *value)
{
    *value = 0;
    sqlite3_stmt *st;
    if (db_prepare(s, &st, "SELECT value FROM ceilings WHERE gpu = ?1 AND kind = ?2",
                   "look up ceiling") != DB_OK)
        return DB_ERROR;
    db_bind_str(st, 1, gpu);
    db_bind_str(st, 2, kind);
    db_rc rc = DB_OK;
    int step = sqlite3_step(st);
    if (step == SQLITE_ROW) {
        *value = sqlite3_column_double(st, 0);
    } else if (step == SQLITE_DONE) {
        db_fail(s, "no ceiling '%s' for '%s'", kind ? kind : "", gpu ? gpu : "");
        rc = DB_NOTFOUND;
    } else {
        rc = db_fail_sql(s, "look up ceiling");
    }
    sqlite3_finalize(st);
    return rc;
}
