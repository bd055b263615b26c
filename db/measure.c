/* db/measure.c: devices, runs and the measurements taken in them */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "db/store.h"

static const char *db_or_empty(const char *v)
{
    return v ? v : "";
}

/* Finds or adds the devices row of d; the caller holds a transaction. */
static db_rc db_device_id(db_store *s, const db_device *d, long long *id)
{
    sqlite3_stmt *ins, *sel;
    if (db_prepare(s, &ins, "INSERT OR IGNORE INTO devices(name, uuid, cc_major, cc_minor, sms,"
                            " driver, nvrtc, kforge_rev) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
                   "record device") != DB_OK)
        return DB_ERROR;
    if (db_prepare(s, &sel, "SELECT id FROM devices WHERE uuid = ?2 AND name = ?1"
                            " AND driver = ?6 AND nvrtc = ?7 AND kforge_rev = ?8",
                   "record device") != DB_OK) {
        sqlite3_finalize(ins);
        return DB_ERROR;
    }
    sqlite3_stmt *both[] = { ins, sel };
    for (int i = 0; i < 2; i++) {
        db_bind_str(both[i], 1, db_or_empty(d->name));
        db_bind_str(both[i], 2, db_or_empty(d->uuid));
        db_bind_str(both[i], 6, db_or_empty(d->driver));
        db_bind_str(both[i], 7, db_or_empty(d->nvrtc));
        db_bind_str(both[i], 8, db_or_empty(d->kforge_rev));
    }
    sqlite3_bind_int(ins, 3, d->cc_major);
    sqlite3_bind_int(ins, 4, d->cc_minor);
    sqlite3_bind_int(ins, 5, d->sms);
    db_rc rc = DB_OK;
    if (sqlite3_step(ins) != SQLITE_DONE || sqlite3_step(sel) != SQLITE_ROW)
        rc = db_fail_sql(s, "record device '%s'", db_or_empty(d->name));
    else
        *id = sqlite3_column_int64(sel, 0);
    sqlite3_finalize(ins);
    sqlite3_finalize(sel);
    return rc;
}

static db_rc db_run_insert(db_store *s, const db_device *d, long long device_id,
                           const char *command, long long *run_id)
{
    sqlite3_stmt *st;
    if (db_prepare(s, &st, "INSERT INTO runs(device_id, command, sm_clock_mhz, mem_clock_mhz)"
                           " VALUES (?1, ?2, ?3, ?4)", "record run") != DB_OK)
        return DB_ERROR;
    if (d) {
        sqlite3_bind_int64(st, 1, device_id);
        sqlite3_bind_int(st, 3, d->sm_clock_mhz);
        sqlite3_bind_int(st, 4, d->mem_clock_mhz);
    }
    db_bind_str(st, 2, command);
    db_rc rc = DB_OK;
    if (sqlite3_step(st) != SQLITE_DONE)
        rc = db_fail_sql(s, "record run");
    else
        *run_id = sqlite3_last_insert_rowid(s->sql);
    sqlite3_finalize(st);
    return rc;
}

db_rc db_run_begin(db_store *s, const db_device *d, const char *command, long long *run_id)
{
    *run_id = 0;
    if (db_begin(s, "record run") != DB_OK)
        return DB_ERROR;
    long long device_id = 0;
    db_rc rc = d ? db_device_id(s, d, &device_id) : DB_OK;
    if (rc == DB_OK)
        rc = db_run_insert(s, d, device_id, command, run_id);
    if (rc != DB_OK) {
        db_rollback(s);
        *run_id = 0;
        return rc;
    }
    return db_commit(s, "record run");
}

/* Builds the JSON array of samples with SQLite's json functions (NaN becomes
 * null); *json is sqlite3_malloc'd. */
static db_rc db_samples_json(db_store *s, const double *v, int n, char **json)
{
    *json = sqlite3_mprintf("[]");
    if (!*json)
        return db_fail(s, "cannot store measurement: out of memory");
    if (n <= 0)
        return DB_OK;
    sqlite3_stmt *st;
    if (db_prepare(s, &st, "SELECT json_insert(?1, '$[#]', ?2)", "encode samples") != DB_OK)
        return DB_ERROR;
    db_rc rc = DB_OK;
    for (int i = 0; i < n && rc == DB_OK; i++) {
        sqlite3_bind_text(st, 1, *json, -1, SQLITE_STATIC);
        db_bind_real(st, 2, v[i]);
        if (sqlite3_step(st) != SQLITE_ROW) {
            rc = db_fail_sql(s, "encode samples");
            break;
        }
        char *next = sqlite3_mprintf("%s", db_col_str(st, 0));
        sqlite3_reset(st);
        sqlite3_free(*json);
        *json = next;
        if (!next)
            rc = db_fail(s, "cannot store measurement: out of memory");
    }
    sqlite3_finalize(st);
    return rc;
}

/* Marks the earlier measurements m makes obsolete; the caller holds a transaction. */
static db_rc db_measure_supersede(db_store *s, const db_measurement *m)
{
    sqlite3_stmt *st;
    if (db_prepare(s, &st,
                   "UPDATE measurements SET superseded = 1 WHERE superseded = 0"
                   " AND family = ?2 AND shape_key = ?3 AND variant_key = ?4 AND is_control = ?5"
                   " AND run_id <> ?1 AND run_id IN"
                   "  (SELECT r.id FROM runs r JOIN devices d ON d.id = r.device_id"
                   "   WHERE d.name IS (SELECT d2.name FROM runs r2 JOIN devices d2"
                   "                    ON d2.id = r2.device_id WHERE r2.id = ?1))",
                   "store measurement") != DB_OK)
        return DB_ERROR;
    sqlite3_bind_int64(st, 1, m->run_id);
    db_bind_str(st, 2, m->family);
    db_bind_str(st, 3, m->shape_key);
    db_bind_str(st, 4, m->variant_key);
    sqlite3_bind_int(st, 5, m->is_control != 0);
    db_rc rc = DB_OK;
    if (sqlite3_step(st) != SQLITE_DONE)
        rc = db_fail_sql(s, "mark superseded measurements");
    sqlite3_finalize(st);
    return rc;
}

static db_rc db_measure_insert(db_store *s, const db_measurement *m, const char *samples,
                               long long *id)
{
    sqlite3_stmt *st;
    if (db_prepare(s, &st,
                   "INSERT INTO measurements(run_id, family, shape_key, variant_key, cache_key,"
                   " status, error, message, samples, median_ms, spread_ms, throughput,"
                   " throughput_unit, ceiling_frac, is_control, timing, launches, sets, sm_clock_min,"
                   " sm_clock_mean, power_mean, power_max, temp_max, ref_ms)"
                   " VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, json(?9), ?10, ?11, ?12, ?13, ?14, ?15,"
                   " ?16, ?17, ?18, ?19, ?20, ?21, ?22, ?23, ?24)",
                   "store measurement") != DB_OK)
        return DB_ERROR;
    sqlite3_bind_int64(st, 1, m->run_id);
    db_bind_str(st, 2, m->family);
    db_bind_str(st, 3, m->shape_key);
    db_bind_str(st, 4, m->variant_key);
    db_bind_str(st, 5, m->cache_key);
    db_bind_str(st, 6, m->status);
    db_bind_real(st, 7, m->error);
    db_bind_str(st, 8, m->message);
    db_bind_str(st, 9, samples);
    db_bind_real(st, 10, m->median_ms);
    db_bind_real(st, 11, m->spread_ms);
    db_bind_real(st, 12, m->throughput);
    db_bind_str(st, 13, m->throughput_unit);
    db_bind_real(st, 14, m->ceiling_frac);
    sqlite3_bind_int(st, 15, m->is_control != 0);
    db_bind_str(st, 16, m->timing);
    if (m->launches > 0)
        sqlite3_bind_int(st, 17, m->launches);
    if (m->sets > 0)
        sqlite3_bind_int(st, 18, m->sets);
    const double fig[] = { m->sm_clock_min, m->sm_clock_mean, m->power_mean, m->power_max, m->temp_max,
                           m->ref_ms };
    for (int i = 0; i < 6; i++)
        db_bind_real(st, 19 + i, fig[i] > 0 ? fig[i] : NAN);   /* 0 or NaN: unknown, NULL */
    db_rc rc = DB_OK;
    if (sqlite3_step(st) != SQLITE_DONE)
        rc = db_fail_sql(s, "store measurement of '%s' for '%s'", m->variant_key, m->shape_key);
    else if (id)
        *id = sqlite3_last_insert_rowid(s->sql);
    sqlite3_finalize(st);
    return rc;
}

db_rc db_measure_put(db_store *s, const db_measurement *m, long long *id)
{
    if (id)
        *id = 0;
    if (!m || !m->family || !m->shape_key || !m->variant_key || !m->status)
        return db_fail(s, "cannot store measurement: family, shape, variant and status are required");
    if (m->n_samples > 0 && !m->samples_ms)
        return db_fail(s, "cannot store measurement: %d samples but no array", m->n_samples);
    char *samples = NULL;
    db_rc rc = db_samples_json(s, m->samples_ms, m->n_samples, &samples);
    if (rc == DB_OK)
        rc = db_begin(s, "store measurement");
    if (rc == DB_OK) {
        rc = db_measure_supersede(s, m);
        if (rc == DB_OK)
            rc = db_measure_insert(s, m, samples, id);
        if (rc == DB_OK)
            rc = db_commit(s, "store measurement");
        else
            db_rollback(s);
    }
    sqlite3_free(samples);
    if (rc != DB_OK && id)
        *id = 0;
    return rc;
}

db_rc db_measure_clocks(db_store *s, long long id, db_clocks *out)
{
    memset(out, 0, sizeof *out);
    double *fig[] = { &out->sm_clock_min, &out->sm_clock_mean, &out->power_mean, &out->power_max,
                      &out->temp_max, &out->ref_ms };
    for (int i = 0; i < 6; i++)
        *fig[i] = NAN;
    sqlite3_stmt *st;
    if (db_prepare(s, &st, "SELECT timing, launches, sets, sm_clock_min, sm_clock_mean, power_mean,"
                           " power_max, temp_max, ref_ms FROM measurements WHERE id = ?1",
                   "read the clocks of a measurement") != DB_OK)
        return DB_ERROR;
    sqlite3_bind_int64(st, 1, id);
    int r = sqlite3_step(st);
    db_rc rc = r == SQLITE_ROW ? DB_OK : r == SQLITE_DONE ? DB_NOTFOUND
                                      : db_fail_sql(s, "read the clocks of measurement %lld", id);
    if (r == SQLITE_ROW) {
        snprintf(out->timing, sizeof out->timing, "%s", db_or_empty(db_col_str(st, 0)));
        out->launches = sqlite3_column_int(st, 1);
        out->sets = sqlite3_column_int(st, 2);
        for (int i = 0; i < 6; i++)
            if (sqlite3_column_type(st, 3 + i) != SQLITE_NULL)
                *fig[i] = sqlite3_column_double(st, 3 + i);
    }
    sqlite3_finalize(st);
    return rc;
}

db_rc db_measure_exists(db_store *s, const char *gpu_name, const char *family,
                        const char *shape_key, const char *variant_key, int *exists)
{
    *exists = 0;
    sqlite3_stmt *st;
    if (db_prepare(s, &st,
                   "SELECT EXISTS (SELECT 1 FROM measurements m"
                   " JOIN runs r ON r.id = m.run_id JOIN devices d ON d.id = r.device_id"
                   " WHERE d.name = ?1 AND m.family = ?2 AND m.shape_key = ?3"
                   " AND m.variant_key = ?4 AND m.status IN ('ok', 'wrong') AND m.superseded = 0"
                   " AND m.is_control = 0)",
                   "look up measurement") != DB_OK)
        return DB_ERROR;
    db_bind_str(st, 1, gpu_name);
    db_bind_str(st, 2, family);
    db_bind_str(st, 3, shape_key);
    db_bind_str(st, 4, variant_key);
    db_rc rc = DB_OK;
    if (sqlite3_step(st) == SQLITE_ROW)
        *exists = sqlite3_column_int(st, 0);
    else
        rc = db_fail_sql(s, "look up measurement of '%s'", variant_key ? variant_key : "");
    sqlite3_finalize(st);
    return rc;
}
