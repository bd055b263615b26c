/* db/tune_merge.c: `kforge db merge`: copy another kforge database into this one, resolving winners */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "db/store.h"

/* Runs one statement of the merge; *changes (may be NULL) gets the rows it changed. */
static db_rc db_merge_exec(db_store *s, const char *sql, long long a, long long b, long long *changes)
{
    sqlite3_stmt *st;
    if (db_prepare(s, &st, sql, "merge") != DB_OK)
        return DB_ERROR;
    if (sqlite3_bind_parameter_count(st) >= 1)
        sqlite3_bind_int64(st, 1, a);
    if (sqlite3_bind_parameter_count(st) >= 2)
        sqlite3_bind_int64(st, 2, b);
    db_rc rc = DB_OK;
    if (sqlite3_step(st) != SQLITE_DONE)
        rc = db_fail_sql(s, "merge");
    else if (changes)
        *changes = sqlite3_changes(s->sql);
    sqlite3_finalize(st);
    return rc;
}

static db_rc db_merge_max_id(db_store *s, const char *table, long long *out)
{
    char sql[128];
    snprintf(sql, sizeof sql, "SELECT coalesce(max(id), 0) FROM main.%s", table);
    sqlite3_stmt *st;
    if (db_prepare(s, &st, sql, "merge") != DB_OK)
        return DB_ERROR;
    db_rc rc = DB_OK;
    if (sqlite3_step(st) == SQLITE_ROW)
        *out = sqlite3_column_int64(st, 0);
    else
        rc = db_fail_sql(s, "merge");
    sqlite3_finalize(st);
    return rc;
}

/* Everything but the winners: templates, binaries, devices, runs, measurements, ceilings. */
static db_rc db_merge_rows(db_store *s, long long roff, long long moff, db_tune_merge_stats *st)
{
    db_rc rc = db_merge_exec(s,
        "INSERT OR IGNORE INTO main.templates(name, hash, source, created)"
        " SELECT name, hash, source, created FROM src.templates", 0, 0, &st->templates);
    if (rc == DB_OK)
        rc = db_merge_exec(s,
            "INSERT OR IGNORE INTO main.binaries(cache_key, variant_key, family, template_hash, arch,"
            " nvrtc, options, params, kernels, image, image_size, is_ptx, compile_ms, regs,"
            " smem_static, spill_bytes, created)"
            " SELECT cache_key, variant_key, family, template_hash, arch, nvrtc, options, params,"
            " kernels, image, image_size, is_ptx, compile_ms, regs, smem_static, spill_bytes, created"
            " FROM src.binaries", 0, 0, &st->binaries);
    if (rc == DB_OK)
        rc = db_merge_exec(s,
            "INSERT OR IGNORE INTO main.devices(name, uuid, cc_major, cc_minor, sms, driver, nvrtc,"
            " kforge_rev, first_seen) SELECT name, uuid, cc_major, cc_minor, sms, driver, nvrtc,"
            " kforge_rev, first_seen FROM src.devices", 0, 0, NULL);
    if (rc == DB_OK)
        rc = db_merge_exec(s,
            "INSERT INTO main.runs(id, device_id, command, sm_clock_mhz, mem_clock_mhz, started)"
            " SELECT r.id + ?1, (SELECT d.id FROM main.devices d JOIN src.devices x"
            "   ON d.uuid = x.uuid AND d.name = x.name AND d.driver = x.driver"
            "   AND d.nvrtc = x.nvrtc AND d.kforge_rev = x.kforge_rev WHERE x.id = r.device_id),"
            " r.command, r.sm_clock_mhz, r.mem_clock_mhz, r.started FROM src.runs r",
            roff, 0, &st->runs);
    if (rc == DB_OK)
        rc = db_merge_exec(s,
            "INSERT INTO main.measurements(id, run_id, family, shape_key, variant_key, cache_key,"
            " status, error, message, samples, median_ms, spread_ms, throughput, throughput_unit,"
            " ceiling_frac, is_control, superseded, created, timing, launches, sets, sm_clock_min,"
            " sm_clock_mean, power_mean, power_max, temp_max, ref_ms)"
            " SELECT id + ?2, run_id + ?1, family, shape_key, variant_key, cache_key, status, error,"
            " message, samples, median_ms, spread_ms, throughput, throughput_unit, ceiling_frac,"
            " is_control, superseded, created, timing, launches, sets, sm_clock_min, sm_clock_mean,"
            " power_mean, power_max, temp_max, ref_ms FROM src.measurements", roff, moff, &st->measurements);
    /* one current measurement per (GPU model, family, shape, variant, control) and run pair */
    if (rc == DB_OK)
        rc = db_merge_exec(s,
            "UPDATE main.measurements SET superseded = 1 WHERE superseded = 0 AND EXISTS ("
            " SELECT 1 FROM main.measurements m2 JOIN main.runs r2 ON r2.id = m2.run_id"
            " JOIN main.devices d2 ON d2.id = r2.device_id"
            " WHERE m2.superseded = 0 AND m2.family = measurements.family"
            " AND m2.shape_key = measurements.shape_key AND m2.variant_key = measurements.variant_key"
            " AND m2.is_control = measurements.is_control AND m2.run_id <> measurements.run_id"
            " AND (m2.created > measurements.created"
            "      OR (m2.created = measurements.created AND m2.id > measurements.id))"
            " AND d2.name IS (SELECT d.name FROM main.runs r JOIN main.devices d ON d.id = r.device_id"
            "                 WHERE r.id = measurements.run_id))", 0, 0, NULL);
    if (rc == DB_OK)
        rc = db_merge_exec(s,
            "INSERT OR REPLACE INTO main.ceilings(gpu, kind, value, unit, measured_at)"
            " SELECT x.gpu, x.kind, x.value, x.unit, x.measured_at FROM src.ceilings x"
            " WHERE NOT EXISTS (SELECT 1 FROM main.ceilings c WHERE c.gpu = x.gpu AND c.kind = x.kind"
            " AND c.measured_at >= x.measured_at)", 0, 0, &st->ceilings);
    return rc;
}

#define DB_MERGE_WINNER_SQL(db) \
    "SELECT w.gpu, w.family, w.shape_key, w.variant_key, w.cache_key, w.params, w.median_ms," \
    " w.speedup, w.band, w.measurement_id, coalesce(json_array_length(m.samples), 0), m.spread_ms" \
    " FROM " db ".winners w LEFT JOIN " db ".measurements m ON m.id = w.measurement_id"

static double db_real_or_nan(sqlite3_stmt *st, int i)
{
    return sqlite3_column_type(st, i) == SQLITE_NULL ? NAN : sqlite3_column_double(st, i);
}

static void db_merge_side(sqlite3_stmt *st, db_tune_side *x)
{
    memset(x, 0, sizeof *x);
    x->w.gpu = db_col_str(st, 0);
    x->w.family = db_col_str(st, 1);
    x->w.shape_key = db_col_str(st, 2);
    x->w.variant_key = db_col_str(st, 3);
    x->w.cache_key = db_col_str(st, 4);
    x->w.params = db_col_str(st, 5);
    x->w.median_ms = db_real_or_nan(st, 6);
    x->w.speedup = db_real_or_nan(st, 7);
    x->w.band = db_real_or_nan(st, 8);
    x->w.measurement_id = sqlite3_column_int64(st, 9);
    x->n_samples = sqlite3_column_int(st, 10);
    x->spread_ms = db_real_or_nan(st, 11);
}

/* Upsert of a winner without its own transaction (the merge holds one). */
static db_rc db_merge_put_winner(db_store *s, const db_winner *w)
{
    sqlite3_stmt *st;
    if (db_prepare(s, &st,
                   "INSERT OR REPLACE INTO main.winners(gpu, family, shape_key, variant_key, cache_key,"
                   " params, median_ms, speedup, band, measurement_id)"
                   " VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)", "merge winner") != DB_OK)
        return DB_ERROR;
    const char *strs[] = { w->gpu, w->family, w->shape_key, w->variant_key, w->cache_key, w->params };
    for (int i = 0; i < 6; i++)
        db_bind_str(st, i + 1, strs[i]);
    db_bind_real(st, 7, w->median_ms);
    db_bind_real(st, 8, w->speedup);
    db_bind_real(st, 9, w->band);
    if (w->measurement_id)
        sqlite3_bind_int64(st, 10, w->measurement_id);
    db_rc rc = DB_OK;
    if (sqlite3_step(st) != SQLITE_DONE)
        rc = db_fail_sql(s, "merge winner '%s' for '%s'", w->variant_key, w->shape_key);
    sqlite3_finalize(st);
    return rc;
}

static db_rc db_merge_winners(db_store *s, long long moff,
                              int (*resolve)(const db_tune_side *, const db_tune_side *, void *),
                              void *arg, db_tune_merge_stats *stats)
{
    sqlite3_stmt *src, *dst;
    if (db_prepare(s, &src, DB_MERGE_WINNER_SQL("src"), "merge winners") != DB_OK)
        return DB_ERROR;
    if (db_prepare(s, &dst, DB_MERGE_WINNER_SQL("main")
                   " WHERE w.gpu = ?1 AND w.family = ?2 AND w.shape_key = ?3", "merge winners") != DB_OK) {
        sqlite3_finalize(src);
        return DB_ERROR;
    }
    db_rc rc = DB_OK;
    int step;
    while (rc == DB_OK && (step = sqlite3_step(src)) == SQLITE_ROW) {
        db_tune_side b;
        db_merge_side(src, &b);
        if (b.w.measurement_id)
            b.w.measurement_id += moff;
        sqlite3_reset(dst);
        db_bind_str(dst, 1, b.w.gpu);
        db_bind_str(dst, 2, b.w.family);
        db_bind_str(dst, 3, b.w.shape_key);
        int ds = sqlite3_step(dst);
        if (ds == SQLITE_DONE) {
            rc = db_merge_put_winner(s, &b.w);
            stats->winners_added++;
        } else if (ds == SQLITE_ROW) {
            db_tune_side a;
            db_merge_side(dst, &a);
            if (strcmp(a.w.variant_key, b.w.variant_key))
                stats->conflicts++;
            if (resolve && resolve(&a, &b, arg)) {
                sqlite3_reset(dst);     /* a's strings are not needed past here */
                rc = db_merge_put_winner(s, &b.w);
                stats->winners_replaced++;
            } else {
                stats->winners_kept++;
            }
        } else {
            rc = db_fail_sql(s, "merge winners");
        }
    }
    if (rc == DB_OK && step != SQLITE_DONE && step != SQLITE_ROW)
        rc = db_fail_sql(s, "merge winners");
    sqlite3_finalize(src);
    sqlite3_finalize(dst);
    return rc;
}

/* Why the binaries of schema `db` ("main" of a connection to the source, or "src" attached)
 * cannot be merged, or DB_OK: each must have its keys and an image that is a non-empty blob
 * of exactly image_size bytes (a size of 999999999999 with an empty image was copied). */
static db_rc db_merge_check_binaries(db_store *s, sqlite3 *db, const char *schema, const char *src_path)
{
    char sql[512];
    snprintf(sql, sizeof sql,
             "SELECT cache_key, typeof(image), CASE typeof(image) WHEN 'blob' THEN length(image) ELSE -1 END,"
             " image_size FROM %s.binaries WHERE cache_key = '' OR variant_key = '' OR family = ''"
             " OR typeof(image) <> 'blob' OR length(image) = 0 OR image_size IS NOT length(image) LIMIT 1", schema);
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK)
        return db_fail(s, "cannot merge '%s': cannot read its binaries: %s", src_path, sqlite3_errmsg(db));
    db_rc rc = DB_OK;
    int step = sqlite3_step(st);
    if (step == SQLITE_ROW) {
        const char *key = db_col_str(st, 0), *type = db_col_str(st, 1);
        if (!key || !*key || sqlite3_column_type(st, 3) == SQLITE_NULL || strcmp(type, "blob"))
            rc = db_fail(s, "cannot merge '%s': binary '%.120s' has an empty key, no image_size or an image that"
                         " is %s, not a blob (nothing was merged)", src_path, key ? key : "", type);
        else
            rc = db_fail(s, "cannot merge '%s': binary '%.120s' has image_size %lld but its image is %lld bytes"
                         " (nothing was merged)", src_path, key, (long long)sqlite3_column_int64(st, 3),
                         (long long)sqlite3_column_int64(st, 2));
    } else if (step != SQLITE_DONE) {
        rc = db_fail(s, "cannot merge '%s': cannot read its binaries: %s", src_path, sqlite3_errmsg(db));
    }
    sqlite3_finalize(st);
    return rc;
}

db_rc db_tune_merge_check(db_store *s, const char *src_path)
{
    db_store *probe = NULL;
    if (db_open(&probe, src_path, DB_READONLY) != DB_OK) {
        db_fail(s, "%s", db_errmsg(probe));
        db_close(probe);
        return DB_ERROR;
    }
    int version = db_user_version(probe);
    db_rc rc = DB_OK;
    if (version != DB_SCHEMA_VERSION)
        rc = db_fail(s, "cannot merge '%s': schema version %d, this database has %d (open it"
                     " with this kforge once to migrate it)", src_path, version, DB_SCHEMA_VERSION);
    else
        rc = db_merge_check_binaries(s, probe->sql, "main", src_path);
    db_close(probe);
    return rc;
}

db_rc db_tune_merge(db_store *s, const char *src_path,
                    int (*resolve)(const db_tune_side *a, const db_tune_side *b, void *arg),
                    void *arg, db_tune_merge_stats *st)
{
    db_tune_merge_stats local;
    if (!st)
        st = &local;
    memset(st, 0, sizeof *st);
    /* the source must be a kforge database this build reads: open it once to check */
    if (db_tune_merge_check(s, src_path) != DB_OK)
        return DB_ERROR;
    sqlite3_stmt *att;
    if (db_prepare(s, &att, "ATTACH DATABASE ?1 AS src", "attach") != DB_OK)
        return DB_ERROR;
    db_bind_str(att, 1, src_path);
    int ok = sqlite3_step(att) == SQLITE_DONE;
    db_rc rc = ok ? DB_OK : db_fail_sql(s, "attach '%s'", src_path);
    sqlite3_finalize(att);
    if (rc != DB_OK)
        return rc;
    long long roff = 0, moff = 0;
    rc = db_begin(s, "merge");
    if (rc == DB_OK) {
        /* again inside the transaction: what is copied is what was checked */
        rc = db_merge_check_binaries(s, s->sql, "src", src_path);
        if (rc == DB_OK)
            rc = db_merge_max_id(s, "runs", &roff);
        if (rc == DB_OK)
            rc = db_merge_max_id(s, "measurements", &moff);
        if (rc == DB_OK)
            rc = db_merge_rows(s, roff, moff, st);
        if (rc == DB_OK)
            rc = db_merge_winners(s, moff, resolve, arg, st);
        if (rc == DB_OK) {
            rc = db_commit(s, "merge");
        } else {
            /* the message first: it may quote SQLite's, which the rollback replaces */
            char why[sizeof s->msg];
            snprintf(why, sizeof why, "%s", s->msg);
            db_rollback(s);
            if (!strstr(why, "nothing was merged"))
                db_fail(s, "cannot merge '%s' into '%s': %s (nothing was merged)", src_path, s->path, why);
        }
    }
    sqlite3_exec(s->sql, "DETACH DATABASE src", NULL, NULL, NULL);
    return rc;
}
