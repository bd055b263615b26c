/* db/migrate.c: schema versions, the steps between them, and the check that a file is kforge's */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "db/migrate.h"

#define DB_NOW "(strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))"

/* One step takes the schema from version to - 1 to version to. Append steps;
 * never edit one that has been released. Steps hold DDL only (no values). */
typedef struct db_step {
    int to;
    const char *sql;
} db_step;

static const db_step db_steps[] = {
    { 1,
      "CREATE TABLE meta("
      "  key TEXT PRIMARY KEY, value TEXT NOT NULL);"
      "INSERT INTO meta(key, value) VALUES ('application', 'kforge');"
      "INSERT INTO meta(key, value) VALUES ('created', " DB_NOW ");"
      "CREATE TABLE devices("
      "  id INTEGER PRIMARY KEY,"
      "  name TEXT NOT NULL, uuid TEXT NOT NULL DEFAULT '',"
      "  cc_major INTEGER, cc_minor INTEGER, sms INTEGER,"
      "  driver TEXT NOT NULL DEFAULT '', nvrtc TEXT NOT NULL DEFAULT '',"
      "  kforge_rev TEXT NOT NULL DEFAULT '',"
      "  first_seen TEXT NOT NULL DEFAULT " DB_NOW ","
      "  UNIQUE(uuid, name, driver, nvrtc, kforge_rev));"
      "CREATE TABLE templates("
      "  id INTEGER PRIMARY KEY, name TEXT NOT NULL, hash TEXT NOT NULL, source TEXT,"
      "  created TEXT NOT NULL DEFAULT " DB_NOW ","
      "  UNIQUE(name, hash));"
      "CREATE TABLE binaries("
      "  cache_key TEXT PRIMARY KEY, variant_key TEXT NOT NULL, family TEXT NOT NULL,"
      "  template_hash TEXT, arch TEXT, nvrtc TEXT, options TEXT, params TEXT,"
      "  kernels TEXT, image BLOB NOT NULL, image_size INTEGER NOT NULL,"
      "  is_ptx INTEGER NOT NULL DEFAULT 0, compile_ms REAL,"
      "  regs INTEGER, smem_static INTEGER, spill_bytes INTEGER,"
      "  created TEXT NOT NULL DEFAULT " DB_NOW ");"
      "CREATE INDEX binaries_family ON binaries(family, variant_key);"
      "CREATE INDEX binaries_template ON binaries(template_hash);"
      "CREATE TABLE runs("
      "  id INTEGER PRIMARY KEY, device_id INTEGER REFERENCES devices(id),"
      "  command TEXT, sm_clock_mhz INTEGER, mem_clock_mhz INTEGER,"
      "  started TEXT NOT NULL DEFAULT " DB_NOW ");"
      "CREATE TABLE measurements("
      "  id INTEGER PRIMARY KEY, run_id INTEGER NOT NULL REFERENCES runs(id),"
      "  family TEXT NOT NULL, shape_key TEXT NOT NULL, variant_key TEXT NOT NULL,"
      "  cache_key TEXT,"
      "  status TEXT NOT NULL CHECK (status IN ('ok', 'wrong', 'error')),"
      "  error REAL, message TEXT,"
      "  samples TEXT NOT NULL DEFAULT '[]' CHECK (json_valid(samples)),"
      "  median_ms REAL, spread_ms REAL, throughput REAL, throughput_unit TEXT,"
      "  ceiling_frac REAL, is_control INTEGER NOT NULL DEFAULT 0,"
      "  superseded INTEGER NOT NULL DEFAULT 0,"
      "  created TEXT NOT NULL DEFAULT " DB_NOW ");"
      "CREATE INDEX measurements_key ON measurements(family, shape_key, variant_key);"
      "CREATE INDEX measurements_run ON measurements(run_id);"
      "CREATE TABLE winners("
      "  gpu TEXT NOT NULL, family TEXT NOT NULL, shape_key TEXT NOT NULL,"
      "  variant_key TEXT NOT NULL,"
      "  cache_key TEXT REFERENCES binaries(cache_key),"
      "  params TEXT, median_ms REAL, speedup REAL, band REAL,"
      "  measurement_id INTEGER REFERENCES measurements(id),"
      "  updated TEXT NOT NULL DEFAULT " DB_NOW ","
      "  PRIMARY KEY(gpu, family, shape_key));"
      "CREATE INDEX winners_cache_key ON winners(cache_key);"
      "CREATE TABLE ceilings("
      "  gpu TEXT NOT NULL, kind TEXT NOT NULL CHECK (kind IN ('copy', 'gemm_bf16')),"
      "  value REAL NOT NULL, unit TEXT NOT NULL,"
      "  measured_at TEXT NOT NULL DEFAULT " DB_NOW ","
      "  PRIMARY KEY(gpu, kind));" },
    /* 2: the "read" ceiling (streaming device read). SQLite cannot alter a CHECK, so the
     * table is rebuilt with its rows. */
    { 2,
      "CREATE TABLE ceilings_v2("
      "  gpu TEXT NOT NULL, kind TEXT NOT NULL CHECK (kind IN ('copy', 'read', 'gemm_bf16')),"
      "  value REAL NOT NULL, unit TEXT NOT NULL,"
      "  measured_at TEXT NOT NULL DEFAULT " DB_NOW ","
      "  PRIMARY KEY(gpu, kind));"
      "INSERT INTO ceilings_v2(gpu, kind, value, unit, measured_at)"
      "  SELECT gpu, kind, value, unit, measured_at FROM ceilings;"
      "DROP TABLE ceilings;"
      "ALTER TABLE ceilings_v2 RENAME TO ceilings;" },
    /* 3: how a measurement was timed (sustained or burst, calls per sample, input sets
     * rotated over), the SM clock, board power and temperature during its samples (NULL:
     * unknown, no NVML), and the paired default time it was compared with. Older rows keep
     * NULL: they were timed the burst way, with nothing recorded. */
    { 3,
      "ALTER TABLE measurements ADD COLUMN timing TEXT;"
      "ALTER TABLE measurements ADD COLUMN launches INTEGER;"
      "ALTER TABLE measurements ADD COLUMN sets INTEGER;"
      "ALTER TABLE measurements ADD COLUMN sm_clock_min REAL;"
      "ALTER TABLE measurements ADD COLUMN sm_clock_mean REAL;"
      "ALTER TABLE measurements ADD COLUMN power_mean REAL;"
      "ALTER TABLE measurements ADD COLUMN power_max REAL;"
      "ALTER TABLE measurements ADD COLUMN temp_max REAL;"
      "ALTER TABLE measurements ADD COLUMN ref_ms REAL;" },
    /* { 4, "ALTER TABLE ...;" }, */
};

enum { DB_N_STEPS = sizeof db_steps / sizeof db_steps[0] };
_Static_assert(DB_N_STEPS == DB_SCHEMA_VERSION, "one migration step per schema version");

/* What a file holds, read before deciding whether it is ours. */
typedef struct db_state {
    int tables;      /* rows of sqlite_schema */
    int version;     /* PRAGMA user_version */
    int app_id;      /* PRAGMA application_id */
    int marker;      /* meta has application = 'kforge' */
} db_state;

static int db_int_query(sqlite3 *db, const char *sql, int *out)
{
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK)
        return -1;
    int rc = sqlite3_step(st);
    *out = rc == SQLITE_ROW ? sqlite3_column_int(st, 0) : 0;
    sqlite3_finalize(st);
    return rc == SQLITE_ROW || rc == SQLITE_DONE ? 0 : -1;
}

static db_rc db_read_state(db_store *s, db_state *st)
{
    memset(st, 0, sizeof *st);
    int has_meta = 0;
    /* The first read of the file: SQLite reports "file is not a database" or
     * "database disk image is malformed" (also for a truncated file) here. */
    if (db_int_query(s->sql, "SELECT count(*) FROM sqlite_schema", &st->tables)
        || db_int_query(s->sql, "PRAGMA user_version", &st->version)
        || db_int_query(s->sql, "PRAGMA application_id", &st->app_id)
        || db_int_query(s->sql, "SELECT count(*) FROM sqlite_schema"
                                " WHERE type = 'table' AND name = 'meta'", &has_meta)
        || (has_meta && db_int_query(s->sql, "SELECT count(*) FROM meta WHERE"
                                     " key = 'application' AND value = 'kforge'",
                                     &st->marker)))
        return db_fail(s, "cannot open database '%s': %s", s->path, sqlite3_errmsg(s->sql));
    return DB_OK;
}

/* SQLite notices a file shorter than its header says by whole pages, but not
 * a cut inside the last page (it reads the missing bytes as zeros). SQLite
 * writes whole pages, and the kernel grows a file in steps of its own 4 KiB
 * pages, so a reader racing a writer never sees a size off that grid. */
static db_rc db_check_size(db_store *s)
{
    int page = 0;
    struct stat sb;
    if (db_int_query(s->sql, "PRAGMA page_size", &page) || page <= 0)
        return db_fail(s, "cannot open database '%s': %s", s->path, sqlite3_errmsg(s->sql));
    if (stat(s->path, &sb) != 0) {
        if (errno == ENOENT)  /* ":memory:", or not created yet: nothing to check */
            return DB_OK;
        return db_fail(s, "cannot open database '%s': %s", s->path, strerror(errno));
    }
    long long grid = page < 4096 ? page : 4096;
    if (sb.st_size % grid != 0)
        return db_fail(s, "cannot open database '%s': file is truncated (%lld bytes is not"
                       " a whole number of %d-byte pages)", s->path, (long long)sb.st_size, page);
    return DB_OK;
}

/* Why the file is not one this build may use, or DB_OK. */
static db_rc db_check_state(db_store *s, const db_state *st)
{
    if (st->version == 0 && st->tables == 0)
        return DB_OK;  /* empty: ours to create */
    /* kforge writes 1..DB_SCHEMA_VERSION; a negative one would be taken for "older" and
     * migrated from nothing, failing on the tables that are there */
    if (st->version < 0)
        return db_fail(s, "cannot open database '%s': schema version %d is not one kforge"
                       " writes (1 to %d): the file is damaged or not kforge's", s->path,
                       st->version, DB_SCHEMA_VERSION);
    if (st->version == 0)
        return db_fail(s, "cannot open database '%s': not a kforge database"
                       " (it has %d schema objects but no schema version)", s->path, st->tables);
    if (st->app_id != 0 && st->app_id != DB_APPLICATION_ID)
        return db_fail(s, "cannot open database '%s': not a kforge database"
                       " (application_id 0x%08x)", s->path, (unsigned)st->app_id);
    if (!st->marker)
        return db_fail(s, "cannot open database '%s': not a kforge database"
                       " (user_version %d but no kforge marker)", s->path, st->version);
    if (st->version > DB_SCHEMA_VERSION)
        return db_fail(s, "cannot open database '%s': schema version %d is newer than"
                       " this build (%d)", s->path, st->version, DB_SCHEMA_VERSION);
    return DB_OK;
}

/* Runs the steps after `from` up to `to`; the caller holds a transaction. */
static db_rc db_run_steps(sqlite3 *db, int from, int to, char *msg, size_t msgsize)
{
    for (int i = 0; i < DB_N_STEPS; i++) {
        const db_step *step = &db_steps[i];
        if (step->to <= from || step->to > to)
            continue;
        char *err = NULL;
        /* user_version cannot be bound; the number is this table's constant. */
        char pragma[64];
        snprintf(pragma, sizeof pragma, "PRAGMA user_version = %d", step->to);
        if (sqlite3_exec(db, step->sql, NULL, NULL, &err) != SQLITE_OK
            || sqlite3_exec(db, pragma, NULL, NULL, &err) != SQLITE_OK) {
            snprintf(msg, msgsize, "migration to schema version %d failed: %s", step->to,
                     err ? err : sqlite3_errmsg(db));
            sqlite3_free(err);
            return DB_ERROR;
        }
    }
    return DB_OK;
}

db_rc db_migrate(db_store *s, int target)
{
    if (target > DB_SCHEMA_VERSION)
        return db_fail(s, "cannot migrate '%s' to schema version %d: this build knows %d",
                       s->path, target, DB_SCHEMA_VERSION);
    if (db_begin(s, "start the migration") != DB_OK)
        return DB_ERROR;
    db_state st;
    if (db_read_state(s, &st) != DB_OK || db_check_state(s, &st) != DB_OK) {
        db_rollback(s);
        return DB_ERROR;
    }
    if (st.version >= target) {  /* another process got there first */
        db_rollback(s);
        return DB_OK;
    }
    char why[320];
    if (st.version == 0) {
        char pragma[64];
        snprintf(pragma, sizeof pragma, "PRAGMA application_id = %d", DB_APPLICATION_ID);
        if (sqlite3_exec(s->sql, pragma, NULL, NULL, NULL) != SQLITE_OK) {
            db_fail_sql(s, "set the application id");
            db_rollback(s);
            return DB_ERROR;
        }
    }
    if (db_run_steps(s->sql, st.version, target, why, sizeof why) != DB_OK) {
        db_rollback(s);
        return db_fail(s, "cannot open database '%s': %s", s->path, why);
    }
    return db_commit(s, "commit the migration");
}

/* PRAGMA journal_mode = WAL needs the file to itself for a moment; another
 * process opening at the same time makes it busy without a busy handler. */
static db_rc db_set_wal(db_store *s)
{
    struct timespec pause = { 0, 10 * 1000 * 1000 };
    for (int waited = 0;; waited += 10) {
        sqlite3_stmt *st;
        if (db_prepare(s, &st, "PRAGMA journal_mode = WAL", "turn on WAL") != DB_OK)
            return DB_ERROR;
        int rc = sqlite3_step(st);
        if (rc == SQLITE_ROW) {
            snprintf(s->journal_mode, sizeof s->journal_mode, "%s", db_col_str(st, 0));
            sqlite3_finalize(st);
            /* In WAL mode, NORMAL syncs at checkpoints rather than at every commit: a
             * process that is killed loses nothing committed (only an OS crash or power
             * loss can drop the last transactions), and the tuner's one-commit-per-
             * measurement stops paying an fsync each time. */
            if (sqlite3_exec(s->sql, "PRAGMA synchronous = NORMAL", NULL, NULL, NULL) != SQLITE_OK)
                return db_fail_sql(s, "set synchronous = NORMAL");
            return DB_OK;
        }
        sqlite3_finalize(st);
        if ((rc & 0xff) != SQLITE_BUSY || waited >= DB_BUSY_TIMEOUT_MS)
            return db_fail_sql(s, "turn on WAL");
        nanosleep(&pause, NULL);
    }
}

db_rc db_schema_open(db_store *s)
{
    db_state st;
    if (db_read_state(s, &st) != DB_OK || db_check_size(s) != DB_OK
        || db_check_state(s, &st) != DB_OK)
        return DB_ERROR;
    if (s->readonly) {
        if (st.version < DB_SCHEMA_VERSION)
            return db_fail(s, "cannot open database '%s' read-only: %s", s->path,
                           st.version == 0 ? "it is empty (no kforge schema)"
                                           : "schema version is older than this build;"
                                             " open it read-write to migrate");
        return DB_OK;
    }
    /* Incremental vacuum lets db_gc give pages back; it can only be chosen
     * before the first table exists, and is a no-op otherwise. */
    if (st.version == 0
        && sqlite3_exec(s->sql, "PRAGMA auto_vacuum = INCREMENTAL", NULL, NULL, NULL) != SQLITE_OK)
        return db_fail_sql(s, "choose incremental vacuum");
    if (db_set_wal(s) != DB_OK)
        return DB_ERROR;
    if (st.version < DB_SCHEMA_VERSION)
        return db_migrate(s, DB_SCHEMA_VERSION);
    return DB_OK;
}

db_rc db_create_at_version(const char *path, int version, char *msg, size_t msgsize)
{
    sqlite3 *db = NULL;
    db_rc rc = DB_ERROR;
    if (msgsize)
        msg[0] = '\0';
    if (version < 0 || version > DB_SCHEMA_VERSION) {
        snprintf(msg, msgsize, "no schema version %d", version);
        return DB_ERROR;
    }
    if (sqlite3_open_v2(path, &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, NULL) != SQLITE_OK) {
        snprintf(msg, msgsize, "cannot create '%s': %s", path, db ? sqlite3_errmsg(db) : "no memory");
        goto out;
    }
    char pragma[64];
    snprintf(pragma, sizeof pragma, "PRAGMA application_id = %d", DB_APPLICATION_ID);
    if (version > 0 && (sqlite3_exec(db, "BEGIN", NULL, NULL, NULL) != SQLITE_OK
                        || sqlite3_exec(db, pragma, NULL, NULL, NULL) != SQLITE_OK
                        || db_run_steps(db, 0, version, msg, msgsize) != DB_OK
                        || sqlite3_exec(db, "COMMIT", NULL, NULL, NULL) != SQLITE_OK)) {
        if (!*msg)
            snprintf(msg, msgsize, "%s", sqlite3_errmsg(db));
        goto out;
    }
    rc = DB_OK;
out:
    sqlite3_close_v2(db);
    return rc;
}
