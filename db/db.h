/* db/db.h: the SQLite store of kforge: schema, templates, binaries, runs, measurements, winners */
#ifndef KF_DB_H
#define KF_DB_H

#include <stddef.h>

/* Schema version written to PRAGMA user_version; migrations step 1 -> 2 -> ... */
#define DB_SCHEMA_VERSION 3

typedef enum {
    DB_OK = 0,
    DB_NOTFOUND = 1,   /* a lookup found no row */
    DB_ERROR = 2,      /* see db_errmsg() */
} db_rc;

enum { DB_CREATE = 1, DB_READONLY = 2 };

/* One db_store is used by one thread at a time (it is opened with
 * SQLITE_OPEN_NOMUTEX); open one per thread if several need it. Several
 * processes may share one file: it runs in WAL mode with a 10 s busy timeout,
 * and every write is its own IMMEDIATE transaction. */
typedef struct db_store db_store;

/* PRAGMA application_id of a kforge database ("kfor"). */
#define DB_APPLICATION_ID 0x6b666f72

/* Opens the database at path; with DB_CREATE a missing file is created.
 * An empty database (no tables) is migrated to DB_SCHEMA_VERSION, and so is an
 * older kforge schema, unless DB_READONLY, which never writes and refuses both.
 * *out is always set, also on failure, so the message can be read; close it
 * (it is NULL only when memory ran out; db_errmsg(NULL) says so).
 * Refuses a file that is not SQLite, is corrupt or truncated, is SQLite without
 * kforge's schema (a non-empty database whose user_version is 0 or that has no
 * kforge marker), and a schema newer than this build: the message names the path
 * and the reason, e.g. "cannot open database 'x.db': file is not a database". */
db_rc db_open(db_store **out, const char *path, int flags);
void db_close(db_store *s);                 /* NULL is a no-op */
const char *db_errmsg(const db_store *s);   /* last message on s; never NULL */
const char *db_path(const db_store *s);     /* as given to db_open; never NULL */
int db_user_version(db_store *s);           /* PRAGMA user_version, or -1 on error */

/* Templates seen by compile/tune: (name, hash) unique. */
db_rc db_template_put(db_store *s, const char *name, const char *hash, const char *source);

/* Compiled binaries. Strings are NUL-terminated; image is the cubin (or PTX text). */
typedef struct db_binary {
    char *cache_key;        /* primary key */
    char *variant_key;
    char *family;
    char *template_hash;
    char *arch;             /* "sm_90a" */
    char *nvrtc;            /* "13.0" */
    char *options;          /* compile options, one string */
    char *params;           /* canonical "name=value,..." of fixed values and params */
    char *kernels;          /* JSON array [{"name":..,"threads":..,"smem":..},...] */
    void *image;
    size_t image_size;
    int is_ptx;
    double compile_ms;
    int regs, smem_static, spill_bytes;
    char *created;          /* filled on get: ISO time */
} db_binary;

/* Looks up by cache key; DB_NOTFOUND when absent. Fills *out with malloc'd copies. */
db_rc db_binary_get(db_store *s, const char *cache_key, db_binary *out);
/* Inserts; a row with the same cache key already there is kept (*inserted = 0). */
db_rc db_binary_put(db_store *s, const db_binary *b, int *inserted);
void db_binary_free(db_binary *b);          /* frees the members, not b */
/* Calls fn for every binary (image not loaded: image = NULL, image_size set),
 * ordered by family then variant key; family may be NULL for all. fn returns
 * non-zero to stop. */
db_rc db_binary_each(db_store *s, const char *family,
                     int (*fn)(const db_binary *b, void *arg), void *arg);
/* Deletes binaries whose template_hash is not in keep_hashes (n of them, n may
 * be 0) and that no winner references; *removed (may be NULL) gets the count.
 * Freed pages are returned to the file system (incremental vacuum). */
db_rc db_gc(db_store *s, const char *const *keep_hashes, int n, int *removed);

/* Counts for `kforge db info`. */
typedef struct db_info {
    int schema_version;
    long long templates, binaries, devices, runs, measurements, winners;
    long long binary_bytes;
    const char *journal_mode;  /* static storage inside s, valid until next call */
} db_info;
db_rc db_get_info(db_store *s, db_info *out);

/* The machine a measurement was taken on. */
typedef struct db_device {
    const char *name;        /* "NVIDIA H200" (GPU model: winners are keyed by it) */
    const char *uuid;
    int cc_major, cc_minor, sms;
    int sm_clock_mhz, mem_clock_mhz;
    const char *driver;      /* "580.159.04" or driver API version */
    const char *nvrtc;
    const char *kforge_rev;
} db_device;

/* One tuning/benchmark run (environment recorded once); returns its id.
 * The device row is shared by runs with the same uuid, name, driver, nvrtc and
 * kforge_rev (NULL strings count as ""); the clocks are stored with the run.
 * d may be NULL (a run on no GPU). command may be NULL. */
db_rc db_run_begin(db_store *s, const db_device *d, const char *command, long long *run_id);

/* One measured (or rejected) variant for one shape. */
typedef struct db_measurement {
    long long run_id;
    const char *family, *shape_key, *variant_key, *cache_key;
    const char *status;          /* "ok", "wrong" (failed the gate), "error" (compile/launch failed) */
    double error;                /* relative error against the reference (NaN allowed) */
    const char *message;         /* why wrong/error, or NULL */
    const double *samples_ms;    /* n_samples timings */
    int n_samples;
    double median_ms, spread_ms; /* spread: (p90 - p10) or as the tuner defines; stored as given */
    double throughput;           /* bytes/s or FLOP/s */
    const char *throughput_unit; /* "B/s" or "FLOP/s" */
    double ceiling_frac;         /* throughput / measured ceiling, or NaN */
    int is_control;              /* 1 for the repeated default (control band) */
    /* schema 3; each stored as NULL when unknown (NULL string, 0 or NaN number) */
    const char *timing;          /* "sustained", "sustained-graph" (replays of a captured graph) or "burst" */
    int launches, sets;          /* calls per sample, input sets rotated over */
    double sm_clock_min, sm_clock_mean;  /* MHz during the samples */
    double power_mean, power_max;        /* W */
    double temp_max;                     /* C */
    double ref_ms;               /* interleaved: median of the default's timings next to this one's (the
                                    default's own measurement of the rounds: its median); NaN elsewhere */
} db_measurement;
/* Inserts m (cache_key and message may be NULL; samples are stored as a JSON
 * array, NaN as null). Earlier measurements of the same (GPU name, family,
 * shape, variant, is_control) from other runs are marked superseded, not
 * deleted. *id (may be NULL) gets the new row's id. */
db_rc db_measure_put(db_store *s, const db_measurement *m, long long *id);
/* How measurement `id` was timed and the clocks during it (schema 3); NULL columns: NaN / 0 /
 * timing "" (a measurement from before schema 3, or taken without NVML). DB_NOTFOUND when absent. */
typedef struct db_clocks {
    char timing[16];
    int launches, sets;
    double sm_clock_min, sm_clock_mean, power_mean, power_max, temp_max, ref_ms;
} db_clocks;
db_rc db_measure_clocks(db_store *s, long long id, db_clocks *out);
/* Whether a current (not superseded) "ok"/"wrong" measurement, not a control,
 * exists for (gpu, family, shape, variant): resume support. */
db_rc db_measure_exists(db_store *s, const char *gpu_name, const char *family,
                        const char *shape_key, const char *variant_key, int *exists);

typedef struct db_winner {
    const char *gpu, *family, *shape_key, *variant_key, *cache_key, *params;
    double median_ms, speedup, band;  /* speedup over the default; band: control spread fraction */
    long long measurement_id;
} db_winner;
/* Replaces the row for (gpu, family, shape_key). cache_key, when not NULL, must
 * name a row of binaries (foreign key: a winner always has its binary);
 * measurement_id 0 means none, otherwise it must name a measurement. */
db_rc db_winner_put(db_store *s, const db_winner *w);
/* DB_NOTFOUND when absent. Fills strings into buf (bufsize bytes) and points
 * w's members into it (NULL columns stay NULL); DB_ERROR when buf is too small. */
db_rc db_winner_get(db_store *s, const char *gpu, const char *family, const char *shape_key,
                    db_winner *w, char *buf, size_t bufsize);
/* Calls fn for every winner of gpu and family (NULL: any), ordered by gpu,
 * family, shape_key; w's strings are valid during the call. fn returns
 * non-zero to stop. */
db_rc db_winner_each(db_store *s, const char *gpu, const char *family,
                     int (*fn)(const db_winner *w, void *arg), void *arg);

/* Measured ceilings of a GPU model, for throughput / ceiling ratios.
 * kind is "copy" (cuMemcpyDtoD, bytes read + written, unit "B/s"), "read" (a streaming-read
 * kernel, bytes read, unit "B/s"; schema 2) or "gemm_bf16" (unit "FLOP/s").
 * put replaces the row for (gpu, kind) and stamps measured_at (ISO time). */
db_rc db_ceiling_put(db_store *s, const char *gpu, const char *kind, double value,
                     const char *unit);
/* DB_NOTFOUND when absent; *value gets the figure. */
db_rc db_ceiling_get(db_store *s, const char *gpu, const char *kind, double *value);


/* ---- the tuner's queries (db/tune_query.c) and merge (db/tune_merge.c) ---- */

/* One measurement as the tuner reads it back; strings valid during the callback. */
typedef struct db_tune_meas {
    long long id, run_id;
    const char *gpu, *family, *shape_key, *variant_key, *cache_key, *status, *message;
    const char *throughput_unit, *created;
    int is_control, n_samples, superseded;
    double error, median_ms, spread_ms, throughput, ceiling_frac;  /* NULL columns: NaN */
    double ref_ms;               /* interleaved: the paired default's time (NaN: not from the rounds) */
} db_tune_meas;
/* Calls fn for every current (not superseded) measurement of (gpu, family, shape_key),
 * oldest first. fn returns non-zero to stop. */
db_rc db_tune_meas_each(db_store *s, const char *gpu, const char *family, const char *shape_key,
                        int (*fn)(const db_tune_meas *m, void *arg), void *arg);
/* The measurement with this id (superseded or not); DB_NOTFOUND when absent. */
db_rc db_tune_meas_by_id(db_store *s, long long id, int (*fn)(const db_tune_meas *m, void *arg),
                         void *arg);
/* Counts of measurements of (gpu, family) (NULL: any) by status, current ones only. */
db_rc db_tune_meas_count(db_store *s, const char *gpu, const char *family, long long *ok,
                         long long *wrong, long long *error);

/* A winner with the figures of its measurement, for merge decisions. */
typedef struct db_tune_side {
    db_winner w;
    int n_samples;            /* of its measurement (0 when none) */
    double spread_ms;         /* of its measurement (NaN when none) */
} db_tune_side;
typedef struct db_tune_merge_stats {
    long long templates, binaries, runs, measurements, ceilings;
    long long winners_added, winners_replaced, winners_kept, conflicts;
} db_tune_merge_stats;
/* Copies everything of the kforge database at src_path into s: templates and binaries
 * (same keys kept once), devices, runs and measurements (new ids; current measurements
 * of one (GPU model, family, shape, variant, is_control) from different runs: all but
 * the latest are marked superseded), ceilings (the later measured one kept), winners:
 * a (gpu, family, shape) only one side has is copied; when both have one, resolve(a =
 * the one in s, b = src's) decides: non-zero takes b. resolve is called for every such
 * pair (differing variant or not). One transaction: all or nothing; a binary whose image
 * is empty or not image_size bytes refuses the whole merge. st may be NULL. */
db_rc db_tune_merge(db_store *s, const char *src_path,
                    int (*resolve)(const db_tune_side *a, const db_tune_side *b, void *arg),
                    void *arg, db_tune_merge_stats *st);
/* The checks db_tune_merge makes of src_path before it writes (a kforge database of this
 * schema version; every binary with its keys and an image of exactly image_size bytes, not
 * empty), without writing: a caller merging several sources checks them all first. The
 * message goes on s. */
db_rc db_tune_merge_check(db_store *s, const char *src_path);

#endif
