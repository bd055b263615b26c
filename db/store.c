/* db/store.c: opening and closing the store, its error message and shared statement helpers */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "db/migrate.h"
#include "db/store.h"

db_rc db_fail(db_store *s, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(s->msg, sizeof s->msg, fmt, ap);
    va_end(ap);
    return DB_ERROR;
}

db_rc db_fail_sql(db_store *s, const char *what_fmt, ...)
{
    char what[256];
    va_list ap;
    va_start(ap, what_fmt);
    vsnprintf(what, sizeof what, what_fmt, ap);
    va_end(ap);
    const char *why = s->sql ? sqlite3_errmsg(s->sql) : "no connection";
    return db_fail(s, "cannot %s in '%s': %s", what, s->path, why);
}

db_rc db_prepare(db_store *s, sqlite3_stmt **st, const char *sql, const char *what)
{
    *st = NULL;
    if (sqlite3_prepare_v2(s->sql, sql, -1, st, NULL) != SQLITE_OK)
        return db_fail_sql(s, "%s", what);
    return DB_OK;
}

static db_rc db_exec_plain(db_store *s, const char *sql, const char *what)
{
    if (sqlite3_exec(s->sql, sql, NULL, NULL, NULL) != SQLITE_OK)
        return db_fail_sql(s, "%s", what);
    return DB_OK;
}

db_rc db_begin(db_store *s, const char *what)
{
    return db_exec_plain(s, "BEGIN IMMEDIATE", what);
}

db_rc db_commit(db_store *s, const char *what)
{
    db_rc rc = db_exec_plain(s, "COMMIT", what);
    if (rc != DB_OK)
        db_rollback(s);
    return rc;
}

void db_rollback(db_store *s)
{
    if (!sqlite3_get_autocommit(s->sql))
        sqlite3_exec(s->sql, "ROLLBACK", NULL, NULL, NULL);
}

int db_bind_str(sqlite3_stmt *st, int i, const char *v)
{
    return v ? sqlite3_bind_text(st, i, v, -1, SQLITE_STATIC) : sqlite3_bind_null(st, i);
}

int db_bind_real(sqlite3_stmt *st, int i, double v)
{
    return v != v ? sqlite3_bind_null(st, i) : sqlite3_bind_double(st, i, v);
}

const char *db_col_str(sqlite3_stmt *st, int i)
{
    return (const char *)sqlite3_column_text(st, i);
}

char *db_col_dup(sqlite3_stmt *st, int i, int *oom)
{
    const char *v = db_col_str(st, i);
    if (!v)
        return NULL;
    char *c = strdup(v);
    if (!c)
        *oom = 1;
    return c;
}

/* Why path cannot be opened before SQLite is asked, or NULL when it may be. */
static const char *db_open_precheck(const char *path, int flags)
{
    struct stat st;
    if (strcmp(path, ":memory:") == 0)
        return NULL;
    if (stat(path, &st) != 0) {
        if (errno == ENOENT && (flags & DB_CREATE) && !(flags & DB_READONLY))
            return NULL;
        return errno == ENOENT ? "no such file" : strerror(errno);
    }
    if (S_ISDIR(st.st_mode))
        return "is a directory";
    /* SQLite would open a device or a pipe as an empty database and fail later with
     * a message about vacuum or journal settings that names neither */
    if (!S_ISREG(st.st_mode))
        return S_ISCHR(st.st_mode) ? "not a regular file (a character device)"
               : S_ISBLK(st.st_mode) ? "not a regular file (a block device)"
               : S_ISFIFO(st.st_mode) ? "not a regular file (a pipe)"
               : S_ISSOCK(st.st_mode) ? "not a regular file (a socket)"
                                      : "not a regular file";
    return NULL;
}

db_rc db_open(db_store **out, const char *path, int flags)
{
    db_store *s = calloc(1, sizeof *s);
    *out = s;
    if (!s)
        return DB_ERROR;
    s->readonly = (flags & DB_READONLY) != 0;
    s->path = strdup(path ? path : "");
    if (!s->path)
        return db_fail(s, "cannot open database: out of memory");
    if (!path || !*path)
        return db_fail(s, "cannot open database '': no path given");

    const char *why = db_open_precheck(path, flags);
    if (why)
        return db_fail(s, "cannot open database '%s': %s", path, why);

    int of = SQLITE_OPEN_NOMUTEX;
    if (s->readonly)
        of |= SQLITE_OPEN_READONLY;
    else
        of |= SQLITE_OPEN_READWRITE | ((flags & DB_CREATE) ? SQLITE_OPEN_CREATE : 0);
    if (sqlite3_open_v2(path, &s->sql, of, NULL) != SQLITE_OK)
        return db_fail(s, "cannot open database '%s': %s", path,
                       s->sql ? sqlite3_errmsg(s->sql) : "out of memory");
    sqlite3_extended_result_codes(s->sql, 1);
    sqlite3_busy_timeout(s->sql, DB_BUSY_TIMEOUT_MS);
    if (sqlite3_exec(s->sql, "PRAGMA foreign_keys = ON", NULL, NULL, NULL) != SQLITE_OK)
        return db_fail(s, "cannot open database '%s': %s", path, sqlite3_errmsg(s->sql));
    return db_schema_open(s);
}

void db_close(db_store *s)
{
    if (!s)
        return;
    sqlite3_close_v2(s->sql);
    free(s->path);
    free(s);
}

const char *db_errmsg(const db_store *s)
{
    if (!s)
        return "cannot open database: out of memory";
    return s->msg;
}

const char *db_path(const db_store *s)
{
    return s && s->path ? s->path : "";
}

int db_user_version(db_store *s)
{
    sqlite3_stmt *st;
    if (db_prepare(s, &st, "PRAGMA user_version", "read the schema version") != DB_OK)
        return -1;
    int v = -1;
    if (sqlite3_step(st) == SQLITE_ROW)
        v = sqlite3_column_int(st, 0);
    else
        db_fail_sql(s, "read the schema version");
    sqlite3_finalize(st);
    return v;
}
