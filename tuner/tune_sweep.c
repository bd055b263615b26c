/* tuner/tune_sweep.c: one tuning worker on one GPU: plan, compile ahead, gate, time, store, pick winners */
#include "tuner/tune_sweep.h"
#include "runtime/device.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "db/db.h"
#include "gen/build.h"
#include "gen/json.h"
#include "gen/nvrtc.h"
#include "gen/sweep.h"
#include "runtime/cuda.h"
#include "tuner/attn_run.h"
#include "tuner/tune_ceiling.h"
#include "tuner/tune_enum.h"
#include "tuner/tune_eta.h"
#include "tuner/tune_family.h"
#include "tuner/tune_gate.h"
#include "tuner/tune_ilv.h"
#include "tuner/tune_select.h"
#include "tuner/tune_work.h"

/*
 * Compile ahead: every variant of every shape is planned (rendered and keyed, on this
 * thread: the Lua host is single-threaded) before anything runs; then one compile thread
 * builds the binaries shape by shape (gen_build_run on its own database handle, NVRTC on
 * -j threads, each binary stored as soon as it is built) while this thread gates and times
 * the shapes whose binaries are ready. A binary shared by several shapes (same fixed values)
 * is built once, with the first shape that needs it.
 */

/* The current measurements of one shape, as the selection reads them. */
typedef struct meas_list {
    tune_meas *m;
    int n, cap;
} meas_list;

typedef struct plan {
    const gen_kvset *shape;
    char family[64];
    char shape_key[512];
    gen_tmpl *t;
    tune_space sp;
    int *todo;                   /* indices into sp.v of the variants this run looks at */
    int n_todo;
    const tune_runner *run;      /* the family's runner (tuner/tune_family.h) */
    void *run_st;                /* its per-shape state */
    int ref_job;                 /* the job of the reference binary the runner's gates need, or -1 */
    tune_work work;
    double ceiling;              /* of work.ceiling on this GPU, NaN when not measured */
    const char *ceiling_kind;    /* the stored kind it came from ("copy" for an older "read"), or NULL */
    int job_lo, job_hi;          /* the jobs first needed by this shape */
    int ok;                      /* planned without error */
    long units;                  /* variants still to measure when planned (ETA) */
    tune_phases ph;              /* where this shape's time went */
    double t_start;              /* when the sweep started waiting for it */
} plan;

typedef struct sweep {
    const tune_opts *o;
    tune_stats *st;
    gen_host *h;
    gen_target tg;
    rt_devinfo info;
    db_store *db;
    long long run_id;
    tune_ctx *ctx;
    gen_job *jobs;
    int n_jobs, cap_jobs;
    int *job_last;               /* last plan that needs each job (its binary is freed after) */
    plan *p;
    int n;
    int mutated;
    /* the compile thread */
    pthread_t th;
    int th_started;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int built;                   /* plans whose binaries are ready */
    int build_failed;            /* the database write of a binary failed */
    char build_err[512];
    volatile int cancel;
    /* progress */
    double t0;
    long units_total, units_done;
    int tty;
} sweep;

static double now_s(void)
{
    return tune_now();
}

static int stopped(const sweep *w)
{
    return w->o->stop && *w->o->stop;
}

/* ---- measurements of a shape ------------------------------------------------- */

static void meas_free(meas_list *l)
{
    for (int i = 0; i < l->n; i++)
        free((char *)l->m[i].variant_key);
    free(l->m);
    memset(l, 0, sizeof *l);
}

static int meas_add(meas_list *l, const char *key, int status, int is_control, int n_samples,
                    double median_ms, double spread_ms, long long id, int paired)
{
    if (l->n == l->cap) {
        int cap = l->cap ? 2 * l->cap : 64;
        tune_meas *m = realloc(l->m, sizeof *m * (size_t)cap);
        if (!m)
            return -1;
        l->m = m;
        l->cap = cap;
    }
    tune_meas *m = &l->m[l->n];
    m->variant_key = strdup(key);
    if (!m->variant_key)
        return -1;
    m->status = status;
    m->is_control = is_control;
    m->n_samples = n_samples;
    m->median_ms = median_ms;
    m->spread_ms = spread_ms;
    m->id = id;
    m->paired = paired;
    l->n++;
    return 0;
}

static int find_variant(const plan *p, const char *key)
{
    for (int i = 0; i < p->sp.n; i++)
        if (!strcmp(p->sp.v[i].key, key))
            return i;
    return -1;
}

struct load_ctx {
    sweep *w;
    plan *p;
    meas_list *l;
    int rc;
};

static int load_cb(const db_tune_meas *m, void *arg)
{
    struct load_ctx *c = arg;
    int vi = find_variant(c->p, m->variant_key);
    /* a measurement of another binary (older template, other options) is not this variant's */
    if (vi < 0 || !m->cache_key || strcmp(m->cache_key, c->w->jobs[c->p->sp.v[vi].job].cache_key))
        return 0;
    if (meas_add(c->l, m->variant_key, tune_status_parse(m->status), m->is_control, m->n_samples,
                 m->median_ms, m->spread_ms, m->id, m->ref_ms > 0)) {
        c->rc = -1;
        return 1;
    }
    return 0;
}

static int meas_load(sweep *w, plan *p, meas_list *l)
{
    double t = now_s();
    meas_free(l);
    struct load_ctx c = {w, p, l, 0};
    int rc = db_tune_meas_each(w->db, w->info.name, p->family, p->shape_key, load_cb, &c) != DB_OK || c.rc;
    tune_lap(&p->ph.db, &t);
    return rc ? -1 : 0;
}

/* ---- planning ------------------------------------------------------------------ */

/* Index of the job building (fixed, params) of t, added when new. -1 with the host's message. */
static int job_for(sweep *w, gen_tmpl *t, const gen_kvset *fixed, const gen_kvset *params)
{
    if (w->n_jobs == w->cap_jobs) {
        int cap = w->cap_jobs ? 2 * w->cap_jobs : 256;
        gen_job *j = realloc(w->jobs, sizeof *j * (size_t)cap);
        if (j)
            w->jobs = j;
        int *last = j ? realloc(w->job_last, sizeof *last * (size_t)cap) : NULL;
        if (last)
            w->job_last = last;
        if (!j || !last)
            return gen_host_fail(w->h, "out of memory planning jobs");
        w->cap_jobs = cap;
    }
    gen_job *j = &w->jobs[w->n_jobs];
    memset(j, 0, sizeof *j);
    j->tmpl = t;
    j->fixed = *fixed;
    j->params = *params;
    if (gen_build_prepare(j, &w->tg)) {
        gen_job_free(j);
        return -1;
    }
    if (w->o->mutate && w->o->mutate(j->binary_key, &j->src, w->o->mutate_arg) == 1) {
        size_t k = strlen(j->cache_key);
        snprintf(j->cache_key + k, sizeof j->cache_key - k, ".mut%d", ++w->mutated);
    }
    for (int i = 0; i < w->n_jobs; i++)
        if (!strcmp(w->jobs[i].cache_key, j->cache_key)) {
            gen_job_free(j);
            return i;
        }
    return w->n_jobs++;
}

static void shape_label(const plan *p, char *buf, size_t n)
{
    snprintf(buf, n, "%s %s", p->family, p->shape_key);
}

/* The variants this run looks at: all, or a seeded random subset under --budget. */
static int plan_todo(sweep *w, plan *p)
{
    p->todo = malloc(sizeof(int) * (size_t)(p->sp.n + 1));
    if (!p->todo)
        return -1;
    const tune_opts *o = w->o;
    if (o->budget > 0 && o->strategy == TUNE_STRAT_RANDOM)
        p->n_todo = tune_pick_random(p->sp.n, o->budget, tune_seed_of(p->shape_key, o->seed),
                                     p->sp.idefault, p->todo);
    else
        p->n_todo = tune_pick_random(p->sp.n, p->sp.n, 0, -1, p->todo);
    return 0;
}

static int plan_finish(sweep *w, plan *p, const gen_kvset *shape);

static int plan_shape(sweep *w, plan *p, const gen_kvset *shape)
{
    p->shape = shape;
    p->job_lo = w->n_jobs;
    p->ceiling = NAN;
    p->ceiling_kind = NULL;
    const char *fam = gen_kv_str(shape, "family");
    snprintf(p->family, sizeof p->family, "%s", fam ? fam : "");
    if (gen_shape_key(shape, p->shape_key, sizeof p->shape_key))
        return gen_host_fail(w->h, "shape key of a %s shape is too long", p->family);
    const tune_family *tf = tune_family_find(p->family);
    const tune_runner *run = tf ? tf->runner : NULL;
    if (!run) {
        char names[256];
        rt_family_list(1, names, sizeof names);
        return gen_host_fail(w->h, "the tuner times %s shapes, not '%s'", names, p->family);
    }
    p->t = gen_tmpl_load(w->h, p->family);
    if (!p->t || tune_enumerate(p->t, shape, &w->tg.dev, &p->sp) || plan_todo(w, p))
        return -1;
    for (int i = 0; i < p->sp.n; i++) {
        int j = job_for(w, p->t, &p->sp.fixed, &p->sp.v[i].params);
        if (j < 0)
            return -1;
        p->sp.v[i].job = j;
    }
    if (w->o->test_twin) {
        if (p->sp.n == p->sp.cap) {
            tune_variant *v = realloc(p->sp.v, sizeof *v * (size_t)(p->sp.n + 1));
            if (!v)
                return gen_host_fail(w->h, "out of memory planning the twin of the default");
            p->sp.v = v;
            p->sp.cap = p->sp.n + 1;
        }
        tune_variant *t = &p->sp.v[p->sp.n];
        *t = p->sp.v[p->sp.idefault];
        t->is_default = 0;
        size_t kl = strlen(t->key);
        snprintf(t->key + kl, sizeof t->key - kl, ".twin");
        p->todo[p->n_todo++] = p->sp.n++;     /* room: todo has sp.n + 1 entries */
    }
    p->ref_job = -1;
    core_err e = CORE_ERR_INIT;
    if (!(p->run_st = run->make(shape, &e)))
        return gen_host_fail(w->h, "shape '%s': %.399s", p->shape_key, e.msg);
    p->run = run;
    if (run->ref_job) {
        gen_job rj;
        memset(&rj, 0, sizeof rj);
        int need = run->ref_job(p->run_st, w->h, &w->tg, &rj);
        if (need > 0)
            p->ref_job = job_for(w, rj.tmpl, &rj.fixed, &rj.params);
        gen_job_free(&rj);
        if (need < 0 || (need > 0 && p->ref_job < 0))
            return -1;
    }
    return plan_finish(w, p, shape);
}

/* The shape's work figure and ceiling; marks the plan ready. */
static int plan_finish(sweep *w, plan *p, const gen_kvset *shape)
{
    tune_work_of(p->family, shape, &p->work);
    double c;
    p->ceiling_kind = tune_ceiling_lookup(w->db, w->info.name, p->work.ceiling, &c);
    if (p->ceiling_kind)
        p->ceiling = c;
    p->job_hi = w->n_jobs;
    p->ok = 1;
    return 0;
}

/* Variants still to measure in a shape (for the ETA): the planned ones without a full
 * timing or verdict, plus the control. */
static long plan_units(sweep *w, plan *p)
{
    meas_list l = {0};
    long u = 0;
    if (meas_load(w, p, &l) == 0) {
        int samples = w->o->samples;
        for (int k = 0; k < p->n_todo; k++) {
            int s = tune_resume_state(l.m, l.n, p->sp.v[p->todo[k]].key, 0, samples, w->o->retry_errors,
                                      NULL, NULL);
            u += s == TUNE_TODO || s == TUNE_SCREENED;
        }
        u += tune_resume_state(l.m, l.n, p->sp.v[p->sp.idefault].key, 1, samples, 1, NULL, NULL) != TUNE_DONE;
    }
    meas_free(&l);
    return u;
}

static void plan_free(sweep *w, plan *p)
{
    if (p->run)
        p->run->release(p->run_st, w->ctx);
    p->run = NULL, p->run_st = NULL;
    tune_space_free(&p->sp);
    free(p->todo);
}

/* ---- the compile thread --------------------------------------------------------- */

static void *compile_main(void *arg)
{
    sweep *w = arg;
    db_store *db = NULL;
    int threads = w->o->jobs > 0 ? w->o->jobs : (int)sysconf(_SC_NPROCESSORS_ONLN);
    char err[512] = "";
    int failed = db_open(&db, w->o->db_path, DB_CREATE) != DB_OK;
    if (failed)
        snprintf(err, sizeof err, "%s", db_errmsg(db));
    for (int i = 0; i < w->n && !failed && !w->cancel; i++) {
        plan *p = &w->p[i];
        if (p->ok && p->job_hi > p->job_lo &&
            gen_build_run(w->jobs + p->job_lo, p->job_hi - p->job_lo, threads, db, &w->tg, NULL, NULL,
                          err, sizeof err) < 0)
            failed = 1;
        pthread_mutex_lock(&w->mu);
        w->built = i + 1;
        pthread_cond_broadcast(&w->cv);
        pthread_mutex_unlock(&w->mu);
    }
    db_close(db);
    pthread_mutex_lock(&w->mu);
    if (failed) {
        w->build_failed = 1;
        snprintf(w->build_err, sizeof w->build_err, "%s", err);
    }
    w->built = w->n;
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
    return NULL;
}

/* Waits until plan i's binaries are built; -1 when the compile thread failed. */
static int wait_built(sweep *w, int i)
{
    pthread_mutex_lock(&w->mu);
    while (w->built <= i && !w->build_failed)
        pthread_cond_wait(&w->cv, &w->mu);
    int rc = w->build_failed ? -1 : 0;
    pthread_mutex_unlock(&w->mu);
    return rc;
}

/* ---- one measurement -------------------------------------------------------------- */

/* Stores one measurement (and adds it to l; ref_ms: the paired default time of an interleaved
 * timing, else NaN); -1 on a database error. */
static int store_ref(sweep *w, plan *p, meas_list *l, int vi, int is_control, int status, double error,
                     const char *msg, const tune_timing *t, double ref_ms)
{
    tune_variant *v = &p->sp.v[vi];
    db_measurement m;
    memset(&m, 0, sizeof m);
    m.run_id = w->run_id;
    m.family = p->family;
    m.shape_key = p->shape_key;
    m.variant_key = v->key;
    m.cache_key = w->jobs[v->job].cache_key;
    m.status = tune_status_str(status);
    m.error = error;
    m.message = msg && *msg ? msg : NULL;
    m.median_ms = m.spread_ms = m.throughput = m.ceiling_frac = NAN;
    m.throughput_unit = p->work.unit;
    m.is_control = is_control;
    if (t) {
        m.samples_ms = t->samples_ms;
        m.n_samples = t->samples;
        m.median_ms = t->median_ms;
        m.spread_ms = t->p90_ms - t->p10_ms;
        m.throughput = tune_throughput(&p->work, t->median_ms);
        m.ceiling_frac = m.throughput / p->ceiling;
        m.timing = t->graph ? "sustained-graph" : tune_timing_str(t->mode);
        m.launches = t->launches;
        m.sets = t->sets;
        m.sm_clock_min = t->clk.sm_min, m.sm_clock_mean = t->clk.sm_mean;
        m.power_mean = t->clk.power_mean, m.power_max = t->clk.power_max;
        m.temp_max = t->clk.temp_max;
        m.ref_ms = ref_ms;
    }
    long long id = 0;
    double t0 = now_s();
    db_rc dr = db_measure_put(w->db, &m, &id);
    tune_lap(&p->ph.db, &t0);
    if (dr != DB_OK)
        return -1;
    w->st->measured++;
    w->st->wrong += status == TUNE_WRONG;
    w->st->errors += status == TUNE_ERROR;
    return meas_add(l, v->key, status, is_control, m.n_samples, m.median_ms, m.spread_ms, id, m.ref_ms > 0);
}

static int store(sweep *w, plan *p, meas_list *l, int vi, int is_control, int status, double error,
                 const char *msg, const tune_timing *t)
{
    return store_ref(w, p, l, vi, is_control, status, error, msg, t, NAN);
}

/* How a sustained timing's calls ran. */
static const char *how(const tune_timing *t)
{
    return t->graph ? "replayed as a captured graph" : "back to back";
}

/* ", 1712 MHz (min 1695), 684 W, 61 C" of a timing's clocks, or "" when unknown. */
static void clock_str(const tune_clock *c, char *buf, size_t n)
{
    buf[0] = '\0';
    if (c->n > 0)
        snprintf(buf, n, ", SM %.0f MHz (min %.0f), %.0f W (max %.0f), %.0f C", c->sm_mean, c->sm_min,
                 c->power_mean, c->power_max, c->temp_max);
}

/* Results of a measurement step. */
enum { M_OK = 0, M_REJECTED = 1, M_BROKEN = 2, M_STOP = 3, M_DBERR = -1 };

/* The correctness gate: the bounded gate case on inputs drawn fresh once per shape and run (the
 * runner keeps them and their reference for the shape's variants), poisoned outputs, against
 * the reference. M_OK when it passed (nothing stored), else the verdict is stored. */
static int gate(sweep *w, plan *p, meas_list *l, int vi, const tune_compiled *tv)
{
    int pass;
    double e;
    char msg[800], r[700];
    tune_compiled ref;
    if (p->ref_job >= 0 && tune_compiled_from_job(&ref, &w->jobs[p->ref_job])) {
        snprintf(msg, sizeof msg, "gate: the %s reference did not build: %.600s",
                 gen_tmpl_family(w->jobs[p->ref_job].tmpl), w->jobs[p->ref_job].err);
        return store(w, p, l, vi, 0, TUNE_ERROR, NAN, msg, NULL) ? M_DBERR : M_REJECTED;
    }
    if (p->run->gate(w->ctx, p->run_st, tv, p->ref_job >= 0 ? &ref : NULL, &pass, &e, r, sizeof r)) {
        snprintf(msg, sizeof msg, "gate: %.699s", tune_ctx_errmsg(w->ctx));
        return store(w, p, l, vi, 0, TUNE_ERROR, NAN, msg, NULL) ? M_DBERR
               : tune_broken(w->ctx)                        ? M_BROKEN
                                                                 : M_REJECTED;
    }
    if (pass)
        return M_OK;
    snprintf(msg, sizeof msg, "gate: %s", r);
    return store(w, p, l, vi, 0, TUNE_WRONG, isfinite(e) ? e : NAN, msg, NULL) ? M_DBERR : M_REJECTED;
}

/* Variant vi as the runners take it: its binary and this variant's runtime params (not the
 * job's). -1 (with the compile error stored) when its binary did not build. */
static int variant_of(sweep *w, plan *p, meas_list *l, int vi, int is_control, tune_compiled *tv, int *rc)
{
    tune_variant *v = &p->sp.v[vi];
    gen_job *j = &w->jobs[v->job];
    if (j->failed) {
        char msg[2300];
        snprintf(msg, sizeof msg, "compile: %.2200s", j->err);
        *rc = store(w, p, l, vi, is_control, TUNE_ERROR, NAN, msg, NULL) ? M_DBERR : M_REJECTED;
        return -1;
    }
    tune_compiled_from_job(tv, j);
    tv->vp = p->sp.fixed;
    gen_kv_merge(&tv->vp, &v->params);
    gen_kv_set_str(&tv->vp, "family", p->family);
    tv->key = v->key;
    return 0;
}

/* One timing of tv on the shape's timing case (the family's runner); -1 with the error on w->ctx. */
static int time_variant(sweep *w, plan *p, const tune_compiled *tv, int samples, tune_timing *t)
{
    return p->run->time(w->ctx, p->run_st, tv, samples, t);
}

/* Gates (when do_gate) and times variant vi with `samples` samples, storing the result. */
static int measure(sweep *w, plan *p, meas_list *l, int vi, int samples, int do_gate, int is_control,
                   const char *note)
{
    char msg[2300];
    tune_compiled tv;
    int vrc;
    if (variant_of(w, p, l, vi, is_control, &tv, &vrc))
        return vrc;
    if (do_gate) {
        int g = gate(w, p, l, vi, &tv);
        if (g != M_OK)
            return g;
    }
    tune_timing t;
    int bad = time_variant(w, p, &tv, samples, &t);
    if (bad) {
        snprintf(msg, sizeof msg, "timing: %.511s", tune_ctx_errmsg(w->ctx));
        int rc = store(w, p, l, vi, is_control, TUNE_ERROR, NAN, msg, NULL) ? M_DBERR
                 : tune_broken(w->ctx)                                 ? M_BROKEN
                                                                            : M_REJECTED;
        tune_timing_free(&t);
        return rc;
    }
    char ck[160];
    clock_str(&t.clk, ck, sizeof ck);
    if (t.mode == TUNE_TIMING_BURST)
        snprintf(msg, sizeof msg, "%s%sspread %.1f%% (p90-p10)/median, %d samples, L2 flushed (burst)%s",
                 note ? note : "", note ? "; " : "", 100.0 * t.spread, t.samples, ck);
    else
        snprintf(msg, sizeof msg, "%s%sspread %.1f%% (p90-p10)/median, %d samples of %d calls %s over %d"
                 " input sets (sustained)%s", note ? note : "", note ? "; " : "", 100.0 * t.spread, t.samples,
                 t.launches, how(&t), t.sets, ck);
    int rc = store(w, p, l, vi, is_control, TUNE_OK, NAN, msg, &t) ? M_DBERR : M_OK;
    tune_timing_free(&t);
    return rc;
}

/* ---- progress ----------------------------------------------------------------------- */

static void progress(sweep *w, int pi, const meas_list *l, int done, int total, int final,
                     const char *tail)
{
    if (w->o->quiet || (!final && !w->tty))
        return;
    plan *p = &w->p[pi];
    int best = -1;
    for (int i = 0; i < l->n; i++)
        if (l->m[i].status == TUNE_OK && !l->m[i].is_control &&
            (best < 0 || l->m[i].median_ms < l->m[best].median_ms))
            best = i;
    char eta[32], lbl[600];
    tune_fmt_duration(tune_eta(now_s() - w->t0, w->units_done, w->units_total), eta, sizeof eta);
    shape_label(p, lbl, sizeof lbl);
    fprintf(stderr, "%s%s%s[%d/%d] %s  %d/%d variants", w->tty ? "\r\033[K" : "",
            w->o->label ? w->o->label : "", w->o->label ? " " : "", pi + 1, w->n, lbl, done, total);
    if (best >= 0)
        fprintf(stderr, "  best %.4f ms %s", l->m[best].median_ms, l->m[best].variant_key);
    fprintf(stderr, "  ETA %s%s%s", eta, tail ? "  " : "", tail ? tail : "");
    if (final)
        fputc('\n', stderr);
    fflush(stderr);
}

/* ---- a shape ----------------------------------------------------------------------- */

/* Variant vi at `samples` samples: measured unless the database has it. Returns M_*,
 * *ms (may be NULL) the median of its best timing (NaN when rejected). */
static int visit(sweep *w, plan *p, meas_list *l, int vi, int samples, int is_control, const char *note,
                 int *resumed, double *ms)
{
    double best;
    int s = tune_resume_state(l->m, l->n, p->sp.v[vi].key, is_control, samples, w->o->retry_errors,
                              &best, NULL);
    if (is_control && s == TUNE_TODO)       /* the control needs no gate: its variant passed it */
        s = TUNE_SCREENED;
    int rc = M_OK;
    if (s == TUNE_DONE || s == TUNE_REJECTED) {
        (*resumed)++;
        w->st->resumed++;
    } else {
        rc = measure(w, p, l, vi, samples, s == TUNE_TODO, is_control, note);
        if (rc == M_REJECTED)
            rc = M_OK;                      /* recorded; the sweep goes on */
        w->units_done++;
    }
    if (ms) {
        tune_resume_state(l->m, l->n, p->sp.v[vi].key, is_control, 1, 0, &best, NULL);
        int rej = tune_resume_state(l->m, l->n, p->sp.v[vi].key, is_control, 1, w->o->retry_errors, NULL,
                                    NULL) == TUNE_REJECTED;
        *ms = rej ? NAN : best;
    }
    return rc;
}

/* Successive halving over the planned variants down to the budget; leaves the survivors
 * in p->todo. */
static int halving(sweep *w, plan *p, meas_list *l, int pi, int *resumed)
{
    double *score = malloc(sizeof(double) * (size_t)(p->n_todo + 1));
    int *keep = malloc(sizeof(int) * (size_t)(p->n_todo + 1));
    int rc = M_OK;
    for (int round = 0; p->n_todo > w->o->budget && rc == M_OK; round++) {
        int samples = tune_screen_samples(round);
        char note[64];
        snprintf(note, sizeof note, "screening round %d of successive halving", round);
        for (int k = 0; k < p->n_todo && rc == M_OK; k++) {
            if (stopped(w))
                rc = M_STOP;
            else
                rc = visit(w, p, l, p->todo[k], samples, 0, note, resumed, &score[k]);
            progress(w, pi, l, k + 1, p->n_todo, 0, note);
        }
        int want = (p->n_todo + 1) / 2 > w->o->budget ? (p->n_todo + 1) / 2 : w->o->budget;
        int m = tune_halving_keep(score, p->n_todo, want, keep);
        for (int k = 0; k < m; k++)
            keep[k] = p->todo[keep[k]];
        memcpy(p->todo, keep, sizeof(int) * (size_t)m);
        int had = p->n_todo;
        p->n_todo = m;
        if (m == had)
            break;                            /* nothing left to drop (rejections) */
    }
    /* the default is always timed in full: it is the baseline */
    int has = 0;
    for (int k = 0; k < p->n_todo; k++)
        has |= p->todo[k] == p->sp.idefault;
    if (!has)
        p->todo[p->n_todo++] = p->sp.idefault;
    free(score);
    free(keep);
    return rc;
}

/* One JSON line of a shape's result on stdout (ir: the interleaved decision, or NULL). */
static void json_line(sweep *w, plan *p, const tune_choice *ch, const tune_meas *win, int resumed,
                      const tune_ilv_result *ir)
{
    char jg[1024], jf[256], js[1024];
    printf("{\"gpu\":%s,\"family\":%s,\"shape\":%s,\"variants\":%d,\"resumed\":%d",
           gen_json_str(jg, sizeof jg, w->info.name), gen_json_str(jf, sizeof jf, p->family),
           gen_json_str(js, sizeof js, p->shape_key), p->n_todo, resumed);
    if (win) {
        double thr = tune_throughput(&p->work, win->median_ms);
        printf(",\"winner\":%s,\"median_ms\":%.6g,\"default_kept\":%s",
               gen_json_str(js, sizeof js, win->variant_key), win->median_ms, ch->default_kept ? "true" : "false");
        printf(isnan(ch->speedup) ? ",\"speedup\":null" : ",\"speedup\":%.4f", ch->speedup);
        printf(isnan(ch->band) ? ",\"band\":null" : ",\"band\":%.4f", ch->band);
        printf(isnan(thr) ? ",\"throughput\":null" : ",\"throughput\":%.6g", thr);
        printf(",\"unit\":%s", gen_json_str(jf, sizeof jf, p->work.unit));
        printf(isnan(thr / p->ceiling) ? ",\"ceiling_frac\":null" : ",\"ceiling_frac\":%.4f",
               thr / p->ceiling);
        printf(p->ceiling_kind ? ",\"ceiling\":\"%s\"" : ",\"ceiling\":null", p->ceiling_kind);
        printf(",\"timing\":\"%s\"", ir ? "sustained-interleaved" : tune_timing_str(w->o->timing));
        if (ir)
            printf(isnan(ir->drift) ? ",\"drift\":null" : ",\"drift\":%.4f", ir->drift);
    } else {
        printf(",\"winner\":null");
    }
    char ph[600];
    tune_phases_json(&p->ph, ph, sizeof ph);
    printf(",\"phases\":{%s}}\n", ph);
    fflush(stdout);
}

/* Stores variant vi as the shape's winner; -1 on a database error. */
static int put_winner(sweep *w, plan *p, int vi, double median_ms, double speedup, double band, long long meas_id)
{
    tune_variant *v = &p->sp.v[vi];
    db_winner dw = {0};
    dw.gpu = w->info.name;
    dw.family = p->family;
    dw.shape_key = p->shape_key;
    dw.variant_key = v->key;
    dw.cache_key = w->jobs[v->job].cache_key;
    dw.params = v->full;
    dw.median_ms = median_ms;
    dw.speedup = speedup;
    dw.band = band;
    dw.measurement_id = meas_id;
    double t0 = now_s();
    db_rc dr = db_winner_put(w->db, &dw);
    tune_lap(&p->ph.db, &t0);
    return dr == DB_OK ? 0 : -1;
}

/* Appends "  | 12.3 s, 336 gates, 1344 timings: <phases>" (the shape's wall time so far) to tail. */
static void phase_tail(plan *p, char *tail, size_t n)
{
    p->ph.wall = now_s() - p->t_start;
    char ph[400];
    size_t tl = strlen(tail);
    tune_phases_str(&p->ph, ph, sizeof ph);
    snprintf(tail + tl, n - tl, "  | %.1f s, %ld gates, %ld timings: %s", p->ph.wall, p->ph.gates, p->ph.timings, ph);
}

/* Picks and stores the winner of a shape from every current measurement. */
static int pick(sweep *w, plan *p, int pi, meas_list *l, int resumed)
{
    if (meas_load(w, p, l))
        return M_DBERR;
    double floor = w->o->band_floor > 0 ? w->o->band_floor : TUNE_BAND_FLOOR;
    tune_choice ch;
    int k = tune_select(l->m, l->n, p->sp.v[p->sp.idefault].key, TUNE_MIN_SAMPLES, floor, &ch);
    char tail[768] = "no variant passed the gate";
    const tune_meas *win = k >= 0 ? &l->m[k] : NULL;
    if (win) {
        if (put_winner(w, p, find_variant(p, win->variant_key), win->median_ms, ch.speedup, ch.band, win->id))
            return M_DBERR;
        w->st->winners++;
        w->st->improved += !ch.default_kept && ch.default_ok;
        if (ch.default_kept)
            snprintf(tail, sizeof tail, "default kept (best other %.4f ms inside the %.1f%% band)",
                     ch.best_ms, 100 * ch.band);
        else if (ch.default_ok)
            snprintf(tail, sizeof tail, "x%.3f over the default (band %.1f%%)", ch.speedup, 100 * ch.band);
        else
            snprintf(tail, sizeof tail, "the default failed: fastest passing variant kept");
    }
    phase_tail(p, tail, sizeof tail);
    progress(w, pi, l, p->n_todo, p->n_todo, 1, tail);
    if (w->o->json)
        json_line(w, p, &ch, win, resumed, NULL);
    return M_OK;
}

/* ---- interleaved rounds (sustained timing) ------------------------------------------ */

/* The timings of the slots of one variant as one timing: samples in slot order, statistics
 * over them, the clocks of every slot; launches and sets of the last slot. */
static void timing_join(tune_timing *out, tune_timing *const *parts, int n)
{
    memset(out, 0, sizeof *out);
    tune_clock_init(&out->clk);
    int total = 0;
    for (int i = 0; i < n; i++)
        total += parts[i]->samples;
    out->samples_ms = malloc(sizeof(double) * (size_t)(total + 1));
    if (!out->samples_ms || !total) {
        free(out->samples_ms);
        out->samples_ms = NULL;
        return;
    }
    for (int i = 0; i < n; i++) {
        memcpy(out->samples_ms + out->samples, parts[i]->samples_ms, sizeof(double) * (size_t)parts[i]->samples);
        out->samples += parts[i]->samples;
        tune_clock_merge(&out->clk, &parts[i]->clk);
        out->mode = parts[i]->mode, out->launches = parts[i]->launches, out->sets = parts[i]->sets;
        out->graph = parts[i]->graph;
    }
    tune_timing_stats(out);
}

/* Results of run_interleaved besides M_*: the shape's winner is stored (or kept from the
 * database), pick() is not needed. */
enum { M_PICKED = 10 };

/* Without a default to pair with: each candidate (not failed) timed once in full, pick() chooses. */
static int time_each(sweep *w, plan *p, meas_list *l, const int *cand, const int *failed, int nc)
{
    int rc = M_OK;
    for (int c = 0; c < nc && rc == M_OK; c++) {
        if (failed && failed[c])
            continue;
        rc = stopped(w) ? M_STOP : measure(w, p, l, cand[c], w->o->samples, 0, 0, "no default to pair with");
        if (rc == M_REJECTED)
            rc = M_OK;
        w->units_done++;
    }
    return rc;
}

/* The shape's stored winner, when it is the default or one of the nf finalists (final: indices into
 * p->todo) with the binary this run built: a re-run keeps it. 1 with *dw filled (strings in buf). */
static int stored_winner(sweep *w, plan *p, const int *final, int nf, db_winner *dw, char *buf, size_t n)
{
    if (db_winner_get(w->db, w->info.name, p->family, p->shape_key, dw, buf, n) != DB_OK || !dw->variant_key)
        return 0;
    int vi = find_variant(p, dw->variant_key);
    if (vi < 0 || !dw->cache_key || strcmp(dw->cache_key, w->jobs[p->sp.v[vi].job].cache_key))
        return 0;
    if (vi == p->sp.idefault)
        return 1;
    for (int i = 0; i < nf; i++)
        if (p->todo[final[i]] == vi)
            return 1;
    return 0;
}

/* A shape resumed whole: its stored winner kept, counted and reported like a new one. */
static void report_kept(sweep *w, plan *p, int pi, const db_winner *dw, int resumed)
{
    int is_default = !strcmp(dw->variant_key, p->sp.v[p->sp.idefault].key);
    w->st->winners++;
    w->st->improved += !is_default && dw->speedup > 1;
    char tail[900];
    if (is_default)
        snprintf(tail, sizeof tail, "resumed: default kept (band %.1f%%), nothing timed again", 100 * dw->band);
    else
        snprintf(tail, sizeof tail, "resumed: winner kept (x%.3f over the default, band %.1f%%), nothing timed"
                 " again", dw->speedup, 100 * dw->band);
    phase_tail(p, tail, sizeof tail);
    meas_list one = {0};
    meas_add(&one, dw->variant_key, TUNE_OK, 0, 0, dw->median_ms, NAN, dw->measurement_id, 0);
    progress(w, pi, &one, p->n_todo, p->n_todo, 1, tail);
    if (w->o->json && one.n) {
        tune_choice ch;
        memset(&ch, 0, sizeof ch);
        ch.default_kept = is_default;
        ch.default_ok = 1;
        ch.speedup = dw->speedup;
        ch.band = dw->band;
        json_line(w, p, &ch, &one.m[0], resumed, NULL);
    }
    meas_free(&one);
}

/* tune_ilv_resume_plan over the shape's planned variants (p->todo) and current measurements. */
static void resume_plan(sweep *w, plan *p, const meas_list *l, const char **keys, const unsigned char *passed,
                        int has_winner, int *state, int *final, tune_ilv_resume *r)
{
    int idef = -1;
    for (int k = 0; k < p->n_todo; k++) {
        keys[k] = p->sp.v[p->todo[k]].key;
        if (p->todo[k] == p->sp.idefault)
            idef = k;
    }
    tune_ilv_resume_plan(l->m, l->n, keys, p->n_todo, idef, passed, w->o->samples, w->o->retry_errors,
                         TUNE_ILV_FINALISTS, has_winner, state, final, r);
}

/*
 * Sustained timing of a shape: every planned variant gated first (resumed verdicts reused),
 * then the passing ones timed in interleaved rounds with the default (tuner/tune_ilv.h), the
 * decision paired, every variant's slots stored as one measurement with the paired default
 * time, the winner stored. Without a passing default the candidates are timed one by one
 * and pick() chooses (M_OK). What is measured and what is reused follows tune_ilv_resume_plan:
 * a shape with nothing left to measure keeps its stored winner (M_PICKED), timing nothing.
 */
static int run_interleaved(sweep *w, plan *p, meas_list *l, int pi, int *resumed)
{
    const tune_opts *o = w->o;
    int rounds, slot_n;
    tune_ilv_plan(o->samples, &rounds, &slot_n);
    int nt = p->n_todo;
    int *cand = malloc(sizeof(int) * (size_t)(nt + 1));
    int *state = malloc(sizeof(int) * (size_t)(nt + 1));
    int *final = malloc(sizeof(int) * (size_t)(nt + 1));
    const char **keys = malloc(sizeof *keys * (size_t)(nt + 1));
    unsigned char *passed = calloc((size_t)nt + 1, 1);
    int nc = 0, dflt = 0, rc = M_OK;
    int *who = NULL, *ns = NULL, *failed = NULL, *dropped = NULL, n_slots = 0;
    tune_timing *tt = NULL;
    const double **sp = NULL;
    tune_ilv_cand *cr = NULL;
    tune_ilv_resume rp;
    if (!cand || !state || !final || !keys || !passed) {
        free(cand), free(state), free(final), free(keys), free(passed);
        return M_DBERR;
    }
    /* gates, the default first (p->todo[0]); verdicts in the database are reused */
    resume_plan(w, p, l, keys, passed, 0, state, final, &rp);
    for (int k = 0; k < nt && rc == M_OK; k++) {
        int vi = p->todo[k];
        if (state[k] == TUNE_REJECTED) {
            (*resumed)++;
            w->st->resumed++;
            continue;
        }
        if (state[k] != TUNE_TODO)
            continue;
        if (stopped(w)) {
            rc = M_STOP;
            break;
        }
        tune_compiled tv;
        int g;
        if (variant_of(w, p, l, vi, 0, &tv, &g) == 0)
            g = gate(w, p, l, vi, &tv);
        if (g == M_OK)
            passed[k] = 1;
        else if (g == M_REJECTED)
            w->units_done++;
        else
            rc = g;
        progress(w, pi, l, k + 1, nt, 0, "gates");
    }
    if (rc != M_OK)
        goto out;
    resume_plan(w, p, l, keys, passed, 0, state, final, &rp);
    /* many candidates: each screened once (a short sustained timing, stored as a screening figure
     * that never wins; one already in the database is reused), the fastest go to the rounds */
    if (rp.n_screen) {
        /* the GPU brought to its steady state by the default (after the gates it is idle) */
        tune_compiled dv;
        int drc;
        if (variant_of(w, p, l, p->sp.idefault, 0, &dv, &drc) == 0) {
            tune_timing wt;
            if (time_variant(w, p, &dv, 2, &wt) == 0)       /* a failure shows in the timings that follow */
                tune_timing_free(&wt);
        }
        for (int k = 0, c = 0; k < nt && rc == M_OK; k++) {
            if (state[k] == TUNE_REJECTED || p->todo[k] == p->sp.idefault)
                continue;
            c++;
            if (!isnan(tune_screen_figure(l->m, l->n, keys[k])))
                continue;
            if (stopped(w)) {
                rc = M_STOP;
                break;
            }
            rc = measure(w, p, l, p->todo[k], TUNE_ILV_SCREEN, 0, 0, "screening before the interleaved rounds");
            rc = rc == M_REJECTED ? M_OK : rc;
            progress(w, pi, l, c, rp.n_cand, 0, "screening");
        }
        if (rc != M_OK)
            goto out;
        int before = rp.n_cand;
        resume_plan(w, p, l, keys, passed, 0, state, final, &rp);
        w->units_done += before - rp.n_final;
    }
    char wbuf[4096];
    db_winner dw;
    int has_winner = stored_winner(w, p, final, rp.n_final, &dw, wbuf, sizeof wbuf);
    resume_plan(w, p, l, keys, passed, has_winner, state, final, &rp);
    dflt = rp.dflt;
    for (int i = 0; i < rp.n_final; i++)
        cand[nc++] = p->todo[final[i]];
    if (rp.keep) {
        *resumed += rp.n_cand + dflt;
        w->st->resumed += rp.n_cand + dflt;
        report_kept(w, p, pi, &dw, *resumed);
        rc = M_PICKED;
        goto out;
    }
    if (!dflt) {
        for (int c = 0; c < nc; c++)          /* full timings already stored are reused */
            final[c] = state[final[c]] == TUNE_DONE;
        rc = time_each(w, p, l, cand, final, nc);
        goto out;
    }
    if (nc == 0)
        slot_n = o->samples;                  /* the default alone: one slot of a full timing */
    /* room for the most rounds (TUNE_ILV_MORE x the planned ones); the planned rounds are a prefix of that order */
    const int cap_slots = tune_ilv_order(nc, rounds * TUNE_ILV_MORE, NULL, 0);
    n_slots = tune_ilv_order(nc, rounds, NULL, 0);
    who = malloc(sizeof(int) * (size_t)cap_slots);
    ns = calloc((size_t)cap_slots, sizeof(int));
    failed = calloc((size_t)nc + 1, sizeof(int));
    tt = calloc((size_t)cap_slots, sizeof *tt);
    sp = calloc((size_t)cap_slots, sizeof *sp);
    cr = calloc((size_t)nc + 1, sizeof *cr);
    dropped = calloc((size_t)nc + 1, sizeof(int));
    if (!who || !ns || !failed || !tt || !sp || !cr || !dropped) {
        rc = M_DBERR;
        goto out;
    }
    tune_ilv_order(nc, rounds * TUNE_ILV_MORE, who, cap_slots);
    int per_round = 2 * nc > 0 ? 2 * nc : 1, n_dropped = 0, all_rounds = rounds, k0 = 0;
    double floor = o->band_floor > 0 ? o->band_floor : TUNE_BAND_FLOOR;
    /* each slot in its variant's own steady state: TUNE_ILV_REWARM_MS (at most TUNE_REWARM_CALLS calls), or
     * --rewarm's ms whatever a call takes */
    if (w->o->rewarm_ms > 0)
        tune_set_rewarm(w->ctx, w->o->rewarm_ms, 0);
    else
        tune_set_rewarm(w->ctx, TUNE_ILV_REWARM_MS, TUNE_REWARM_CALLS);
more_rounds:
    for (int k = k0; k < n_slots && rc == M_OK; k++) {
        int c = who[k], vi = c < 0 ? p->sp.idefault : cand[c];
        /* a whole round done (whichever of its slots ran), rounds left: candidates clearly slower than the
         * default are timed no more */
        int done_rounds = k / per_round;
        if (nc > 0 && k > 0 && k % per_round == 0 && done_rounds >= TUNE_ILV_DROP_AFTER && done_rounds < all_rounds) {
            int nd = tune_ilv_drop(who, (const double *const *)sp, ns, k, nc, floor, TUNE_ILV_BAND_TARGET, dropped);
            if (nd > n_dropped) {
                w->units_done += nd - n_dropped;     /* they will not reach the last round */
                n_dropped = nd;
            }
        }
        if ((c >= 0 && failed[c]) || tune_ilv_skip(who, n_slots, k, dropped))
            continue;
        if (stopped(w)) {
            rc = M_STOP;
            break;
        }
        tune_compiled tv;
        int vrc;
        if (variant_of(w, p, l, vi, 0, &tv, &vrc)) {        /* its binary failed (error stored) */
            rc = vrc == M_REJECTED ? M_OK : vrc;
            if (c < 0) {
                dflt = 0;
                break;
            }
            failed[c] = 1;
            continue;
        }
        tune_set_extra(w->ctx, o->test_slow_default && c < 0 ? 10 : 0);
        int bad = time_variant(w, p, &tv, slot_n, &tt[k]);
        tune_set_extra(w->ctx, 0);
        if (bad) {
            char msg[700];
            snprintf(msg, sizeof msg, "timing (interleaved round %d): %.511s", k / per_round + 1,
                     tune_ctx_errmsg(w->ctx));
            tune_timing_free(&tt[k]);
            memset(&tt[k], 0, sizeof tt[k]);
            if (store(w, p, l, vi, 0, TUNE_ERROR, NAN, msg, NULL))
                rc = M_DBERR;
            else if (tune_broken(w->ctx))
                rc = M_BROKEN;
            else if (c < 0)
                rc = M_OK, dflt = 0;         /* the default failed: no pairing; pick() decides */
            else
                failed[c] = 1;
            if (c < 0)
                break;
            continue;
        }
        ns[k] = tt[k].samples;
        sp[k] = tt[k].samples_ms;
        if (c >= 0 && k / per_round == rounds - 1)
            w->units_done++;
        char note[64];
        snprintf(note, sizeof note, "interleaved round %d/%d", k / per_round + 1, all_rounds);
        progress(w, pi, l, c < 0 ? 0 : c + 1, nc, 0, note);
    }
    if (rc == M_OK && dflt && nc > 0 && all_rounds == rounds && n_dropped < nc) {
        /* the band after the planned rounds wider than the target: more rounds, once (tune_ilv_more_rounds) */
        tune_ilv_result pre;
        int live = 0;
        for (int c = 0; c < nc; c++)
            live += !failed[c] && !dropped[c];
        tune_ilv_decide(who, sp, ns, n_slots, nc, floor, cr, &pre);
        int more = live ? tune_ilv_more_rounds(rounds, pre.band, TUNE_ILV_BAND_TARGET, floor) : rounds;
        if (more > rounds) {
            all_rounds = more;
            k0 = n_slots;
            n_slots = tune_ilv_order(nc, more, NULL, 0);
            goto more_rounds;
        }
    }
    tune_set_rewarm(w->ctx, 0, 0);
    if (rc == M_OK && !dflt)                  /* the default failed in the rounds */
        rc = time_each(w, p, l, cand, failed, nc);
    if (rc != M_OK || !dflt)
        goto out;
    tune_ilv_result res;
    tune_ilv_decide(who, sp, ns, n_slots, nc, floor, cr, &res);
    /* every variant's slots as one measurement */
    tune_timing **parts = malloc(sizeof *parts * (size_t)(n_slots + 1));
    long long win_id = 0, dflt_id = 0;
    for (int c = -1; c < nc && rc == M_OK && parts; c++) {
        int np = 0;
        for (int k = 0; k < n_slots; k++)
            if (who[k] == c && ns[k] > 0)
                parts[np++] = &tt[k];
        if (!np)
            continue;
        tune_timing j;
        timing_join(&j, parts, np);
        if (!j.samples) {
            rc = M_DBERR;
            break;
        }
        char msg[900], ck[160];
        clock_str(&j.clk, ck, sizeof ck);
        if (c < 0)
            snprintf(msg, sizeof msg, "interleaved default: %d slots of %d samples, band %.2f%%, drift %.2f%%; %d calls"
                     " a sample %s over %d input sets (sustained)%s", np, slot_n, 100 * res.band,
                     100 * res.drift, j.launches, how(&j), j.sets, ck);
        else
            snprintf(msg, sizeof msg, "interleaved: %d rounds of %d samples; paired default %.4f ms, x%.3f%s (band"
                     " %.2f%%); %d calls a sample %s over %d input sets (sustained)%s", np, slot_n,
                     cr[c].ref_ms, 1 / cr[c].ratio, cr[c].faster ? " faster" : "", 100 * res.band, j.launches, how(&j),
                     j.sets, ck);
        int vi = c < 0 ? p->sp.idefault : cand[c];
        /* ref_ms marks a timing of the rounds (complete for resume, early drop or not); the default's is its own */
        if (store_ref(w, p, l, vi, 0, TUNE_OK, NAN, msg, &j, c < 0 ? res.default_ms : cr[c].ref_ms))
            rc = M_DBERR;
        else if (c < 0)
            dflt_id = l->m[l->n - 1].id;
        else if (c == res.winner)
            win_id = l->m[l->n - 1].id;
        tune_timing_free(&j);
    }
    free(parts);
    w->units_done++;                          /* the default (the control's unit) */
    if (rc != M_OK)
        goto out;
    int wi = res.winner >= 0 ? cand[res.winner] : p->sp.idefault;
    tune_variant *v = &p->sp.v[wi];
    double win_ms = res.winner >= 0 ? cr[res.winner].ms : res.default_ms;
    if (put_winner(w, p, wi, win_ms, res.speedup, res.band, res.winner >= 0 ? win_id : dflt_id)) {
        rc = M_DBERR;
        goto out;
    }
    w->st->winners++;
    w->st->improved += res.winner >= 0;
    int best = -1;
    for (int c = 0; c < nc; c++)
        if (cr[c].n && (best < 0 || cr[c].ratio < cr[best].ratio))
            best = c;
    char tail[900];
    if (res.winner >= 0)
        snprintf(tail, sizeof tail, "x%.3f over the default, paired (band %.1f%%, drift %.1f%%)", res.speedup,
                 100 * res.band, 100 * res.drift);
    else if (best >= 0)
        snprintf(tail, sizeof tail, "default kept (best other x%.3f paired, inside the %.1f%% band; drift %.1f%%)",
                 1 / cr[best].ratio, 100 * res.band, 100 * res.drift);
    else
        snprintf(tail, sizeof tail, "default kept (no other variant timed; band %.1f%%, drift %.1f%%)",
                 100 * res.band, 100 * res.drift);
    if (n_dropped) {
        size_t at = strlen(tail);
        snprintf(tail + at, sizeof tail - at, "; %d of %d finalists dropped early (slower by over %.0fx their band)",
                 n_dropped, nc, TUNE_ILV_DROP_BANDS);
    }
    if (all_rounds > rounds) {
        size_t at = strlen(tail);
        snprintf(tail + at, sizeof tail - at, "; %d rounds, %d more than planned for a band within %.0f%%",
                 all_rounds, all_rounds - rounds, 100 * TUNE_ILV_BAND_TARGET);
    }
    phase_tail(p, tail, sizeof tail);
    /* the final line names the winner */
    meas_list one = {0};
    meas_add(&one, v->key, TUNE_OK, 0, 0, win_ms, NAN, 0, 0);
    progress(w, pi, &one, nc, nc, 1, tail);
    if (w->o->json) {
        tune_choice ch;
        memset(&ch, 0, sizeof ch);
        ch.default_kept = res.winner < 0;
        ch.default_ok = 1;
        ch.speedup = res.speedup;
        ch.band = res.band;
        json_line(w, p, &ch, one.n ? &one.m[0] : NULL, *resumed, &res);
    }
    meas_free(&one);
    rc = M_PICKED;
out:
    for (int k = 0; k < n_slots && tt; k++)
        tune_timing_free(&tt[k]);
    free(tt), free(sp), free(who), free(ns), free(failed), free(dropped), free(cr), free(cand);
    free(state), free(final), free(keys), free(passed);
    return rc;
}


/* Measures one shape: planned variants (default first), the control last, then the winner. */
static int run_plan(sweep *w, int pi)
{
    plan *p = &w->p[pi];
    meas_list l = {0};
    int resumed = 0, rc = M_OK;
    if (meas_load(w, p, &l)) {
        meas_free(&l);
        return M_DBERR;
    }
    if (w->o->budget > 0 && w->o->strategy == TUNE_STRAT_HALVING && p->n_todo > w->o->budget)
        rc = halving(w, p, &l, pi, &resumed);
    /* the default first: the baseline, and the first of the two control timings */
    for (int k = 0; k < p->n_todo; k++)
        if (p->todo[k] == p->sp.idefault) {
            p->todo[k] = p->todo[0];
            p->todo[0] = p->sp.idefault;
        }
    int sustained = w->o->timing != TUNE_TIMING_BURST;
    if (rc == M_OK && sustained)
        rc = run_interleaved(w, p, &l, pi, &resumed);
    for (int k = 0; k < p->n_todo && rc == M_OK && !sustained; k++) {
        if (stopped(w)) {
            rc = M_STOP;
            break;
        }
        rc = visit(w, p, &l, p->todo[k], w->o->samples, 0, NULL, &resumed, NULL);
        progress(w, pi, &l, k + 1, p->n_todo, 0, NULL);
    }
    /* the control: the default timed again, as late as possible after its first timing */
    if (rc == M_OK && !sustained && !stopped(w) &&
        tune_resume_state(l.m, l.n, p->sp.v[p->sp.idefault].key, 0, TUNE_MIN_SAMPLES, 1, NULL, NULL) ==
            TUNE_DONE)
        rc = visit(w, p, &l, p->sp.idefault, w->o->samples, 1, "control: the default timed again",
                   &resumed, NULL);
    if (stopped(w) && rc == M_OK)
        rc = M_STOP;
    if (rc == M_OK)
        rc = pick(w, p, pi, &l, resumed);
    if (rc == M_PICKED)
        rc = M_OK;                          /* interleaved: the winner is stored */
    if (rc == M_OK)
        w->st->shapes_done++;
    meas_free(&l);
    return rc;
}

/* Frees the binaries no later shape needs. */
static void release_jobs(sweep *w, int pi)
{
    for (int j = 0; j < w->n_jobs; j++)
        if (w->job_last[j] == pi)
            gen_binary_out_free(&w->jobs[j].bin);
}

/* ---- set-up ------------------------------------------------------------------------- */

static int open_device(sweep *w, core_err *e)
{
    if (tune_family_check(e) || rt_device_info(w->o->ordinal, &w->info, e))
        return -1;
    gen_device dev;
    rt_gen_device(&w->info, &dev);
    const char *arch = w->o->arch ? w->o->arch : w->info.arch;
    if (gen_target_init(&w->tg, arch, 0, &dev))
        return core_err_fail(e, KF_ERR_ARG, "unknown arch '%s'", arch);
    w->ctx = tune_open(w->o->ordinal, e);
    tune_set_timing(w->ctx, w->o->timing);
    return w->ctx ? 0 : -1;
}

static int begin_run(sweep *w, core_err *e)
{
    if (db_open(&w->db, w->o->db_path, DB_CREATE) != DB_OK)
        return core_err_fail(e, KF_ERR_DB, "%s", db_errmsg(w->db));
    char nvrtc[16];
    gen_nvrtc_version(nvrtc, sizeof nvrtc);
    db_device d = {0};
    d.name = w->info.name;
    d.uuid = w->info.uuid;
    d.cc_major = w->info.cc_major;
    d.cc_minor = w->info.cc_minor;
    d.sms = w->info.sms;
    d.sm_clock_mhz = w->info.clock_mhz;
    d.mem_clock_mhz = w->info.mem_clock_mhz;
    d.driver = w->info.driver;
    d.nvrtc = nvrtc;
    d.kforge_rev = w->o->kforge_rev ? w->o->kforge_rev : "unknown";
    if (db_run_begin(w->db, &d, w->o->command, &w->run_id) != DB_OK)
        return core_err_fail(e, KF_ERR_DB, "%s", db_errmsg(w->db));
    return 0;
}

static int plan_all(sweep *w, const gen_kvset *shapes, int n)
{
    w->p = calloc((size_t)(n > 0 ? n : 1), sizeof *w->p);
    if (!w->p)
        return -1;
    w->n = n;
    for (int i = 0; i < n; i++) {
        plan *p = &w->p[i];
        if (plan_shape(w, p, &shapes[i])) {
            char lbl[600];
            shape_label(p, lbl, sizeof lbl);
            fprintf(stderr, "error: %s: %s\n", lbl, gen_host_errmsg(w->h));
            p->ok = 0;
            p->job_hi = p->job_lo = w->n_jobs;
            w->st->shapes_failed++;
            continue;
        }
        w->st->variants += p->n_todo;
        p->units = plan_units(w, p);
        w->units_total += p->units;
    }
    for (int j = 0; j < w->n_jobs; j++)
        w->job_last[j] = -1;
    for (int i = 0; i < n; i++) {
        plan *p = &w->p[i];
        for (int k = 0; p->ok && k < p->sp.n; k++)
            w->job_last[p->sp.v[k].job] = i;
        if (p->ok && p->ref_job >= 0)
            w->job_last[p->ref_job] = i;
    }
    return 0;
}

static void sweep_free(sweep *w)
{
    if (w->th_started) {
        w->cancel = 1;
        pthread_join(w->th, NULL);
    }
    for (int i = 0; i < w->n; i++)
        plan_free(w, &w->p[i]);
    free(w->p);
    for (int j = 0; j < w->n_jobs; j++)
        gen_job_free(&w->jobs[j]);
    free(w->jobs);
    free(w->job_last);
    tune_close(w->ctx);
    db_close(w->db);
    gen_host_free(w->h);
    pthread_mutex_destroy(&w->mu);
    pthread_cond_destroy(&w->cv);
}

int tune_sweep_run(const tune_opts *oin, const gen_kvset *shapes, int n, tune_stats *st, core_err *e)
{
    tune_opts o = *oin;
    if (o.samples <= 0)
        o.samples = TUNE_DEFAULT_SAMPLES;
    if (o.samples < TUNE_MIN_SAMPLES)
        o.samples = TUNE_MIN_SAMPLES;
    memset(st, 0, sizeof *st);
    st->shapes = n;
    double t_begin = now_s();
    sweep w;
    memset(&w, 0, sizeof w);
    w.o = &o;
    w.st = st;
    w.tty = isatty(2);
    pthread_mutex_init(&w.mu, NULL);
    pthread_cond_init(&w.cv, NULL);
    int rc = -1;
    w.h = gen_host_new(o.templates);
    if (!w.h) {
        core_err_set(e, KF_ERR_NOMEM, "cannot start the template host: out of memory");
        goto out;
    }
    if (open_device(&w, e) || begin_run(&w, e))
        goto out;
    if (plan_all(&w, shapes, n)) {
        core_err_set(e, KF_ERR_NOMEM, "out of memory planning the sweep");
        goto out;
    }
    if (pthread_create(&w.th, NULL, compile_main, &w)) {
        core_err_set(e, KF_ERR_NOMEM, "cannot start the compile thread");
        goto out;
    }
    w.th_started = 1;
    w.t0 = now_s();
    st->phases.plan = w.t0 - t_begin;
    rc = 0;
    for (int i = 0; i < w.n && rc == 0; i++) {
        plan *p = &w.p[i];
        p->t_start = now_s();
        int built = wait_built(&w, i);
        p->ph.wait = now_s() - p->t_start;
        if (built) {
            core_err_set(e, KF_ERR_DB, "%s", w.build_err);
            rc = -1;
            break;
        }
        if (!p->ok) {
            st->phases.wait += p->ph.wait;
            continue;
        }
        /* the shape's binaries stay allocated until release_jobs: its modules may stay loaded */
        tune_set_phases(w.ctx, &p->ph);
        tune_hold(w.ctx, 1);
        int r = run_plan(&w, i);
        tune_hold(w.ctx, 0);
        tune_set_phases(w.ctx, NULL);
        release_jobs(&w, i);
        p->ph.wall = now_s() - p->t_start;
        tune_phases_add(&st->phases, &p->ph);
        if (r == M_DBERR) {
            core_err_set(e, KF_ERR_DB, "%s", db_errmsg(w.db));
            rc = -1;
        } else if (r == M_BROKEN) {
            core_err_set(e, KF_ERR_CUDA, "a kernel of %s %s left the CUDA context unusable (recorded as"
                         " 'error'); run again to resume", w.p[i].family, w.p[i].shape_key);
            rc = TUNE_RC_BROKEN;
        } else if (r == M_STOP) {
            st->interrupted = 1;
            break;
        }
    }
    if (rc == 0 && st->shapes_failed)
        core_err_set(e, KF_ERR_UNSUPPORTED, "%d shape%s could not be planned", st->shapes_failed,
                     st->shapes_failed == 1 ? "" : "s");
    st->phases.wall = now_s() - t_begin;
    if (o.json && w.db) {
        char ph[600];
        tune_phases_json(&st->phases, ph, sizeof ph);
        char jg[1024];
        printf("{\"gpu\":%s,\"total\":true,\"shapes\":%d,\"shapes_done\":%d,\"measured\":%ld,"
               "\"resumed\":%ld,\"phases\":{%s}}\n", gen_json_str(jg, sizeof jg, w.info.name), st->shapes,
               st->shapes_done, st->measured, st->resumed, ph);
        fflush(stdout);
    }
out:
    if (w.tty && !o.quiet)
        fflush(stderr);
    sweep_free(&w);
    return rc;
}
