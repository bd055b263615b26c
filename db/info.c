/* db/info.c: row counts and settings for `kforge db info` */
#include <stdio.h>
#include <string.h>

#include "db/store.h"

static db_rc db_count(db_store *s, const char *sql, long long *out)
{
    sqlite3_stmt *st;
    if (db_prepare(s, &st, sql, "count rows") != DB_OK)
        return DB_ERROR;
    db_rc rc = DB_OK;
    if (sqlite3_step(st) == SQLITE_ROW)
        *out = sqlite3_column_int64(st, 0);
    else
        rc = db_fail_sql(s, "count rows");
    sqlite3_finalize(st);
    return rc;
}

static db_rc db_journal_mode(db_store *s)
{
    sqlite3_stmt *st;
    if (db_prepare(s, &st, "PRAGMA journal_mode", "read the journal mode") != DB_OK)
        return DB_ERROR;
    db_rc rc = DB_OK;
    if (sqlite3_step(st) == SQLITE_ROW)
        snprintf(s->journal_mode, sizeof s->journal_mode, "%s", db_col_str(st, 0));
    else
        rc = db_fail_sql(s, "read the journal mode");
    sqlite3_finalize(st);
    return rc;
}

db_rc db_get_info(db_store *s, db_info *out)
{
    memset(out, 0, sizeof *out);
    out->schema_version = db_user_version(s);
    if (out->schema_version < 0 || db_journal_mode(s) != DB_OK)
        return DB_ERROR;
    out->journal_mode = s->journal_mode;
    struct { const char *sql; long long *out; } q[] = {
        { "SELECT count(*) FROM templates", &out->templates },
        { "SELECT count(*) FROM binaries", &out->binaries },
        { "SELECT count(*) FROM devices", &out->devices },
        { "SELECT count(*) FROM runs", &out->runs },
        { "SELECT count(*) FROM measurements", &out->measurements },
        { "SELECT count(*) FROM winners", &out->winners },
        { "SELECT coalesce(sum(image_size), 0) FROM binaries", &out->binary_bytes },
    };
    for (size_t i = 0; i < sizeof q / sizeof q[0]; i++)
        if (db_count(s, q[i].sql, q[i].out) != DB_OK)
            return DB_ERROR;
    return DB_OK;
}
