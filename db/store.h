/* db/store.h: the store handle's insides and the small helpers every file of db/ shares */
#ifndef KF_DB_STORE_H
#define KF_DB_STORE_H

#include <sqlite3.h>

#include "db/db.h"

#define DB_BUSY_TIMEOUT_MS 10000

struct db_store {
    sqlite3 *sql;
    char *path;
    int readonly;
    char journal_mode[16];
    char msg[512];
};

/* Sets the message from fmt and returns DB_ERROR. */
db_rc db_fail(db_store *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* "cannot <what> in '<path>': <SQLite's message>"; returns DB_ERROR.
 * Call it before db_rollback(), which would replace SQLite's message. */
db_rc db_fail_sql(db_store *s, const char *what_fmt, ...) __attribute__((format(printf, 2, 3)));

/* sqlite3_prepare_v2; on failure sets the message (what as in db_fail_sql). */
db_rc db_prepare(db_store *s, sqlite3_stmt **st, const char *sql, const char *what);

/* BEGIN IMMEDIATE (takes the write lock now, waiting up to the busy timeout),
 * COMMIT, ROLLBACK. begin and commit set the message on failure. */
db_rc db_begin(db_store *s, const char *what);
db_rc db_commit(db_store *s, const char *what);
void db_rollback(db_store *s);

/* The writes of db_binary_put and db_winner_put without their own transaction, for a
 * caller that holds one (an import of several rows, all or nothing). */
db_rc db_binary_insert(db_store *s, const db_binary *b, int *inserted);
db_rc db_winner_upsert(db_store *s, const db_winner *w);

/* Binds v as text, or NULL when v is NULL. */
int db_bind_str(sqlite3_stmt *st, int i, const char *v);
/* Binds v, or NULL when v is NaN (SQLite would do the same, but say it). */
int db_bind_real(sqlite3_stmt *st, int i, double v);
/* Column i as text, or NULL; valid until the next step or finalize. */
const char *db_col_str(sqlite3_stmt *st, int i);
/* Column i as a malloc'd copy, or NULL when the column is NULL.
 * *oom is set to 1 when malloc failed. */
char *db_col_dup(sqlite3_stmt *st, int i, int *oom);

#endif
