/* tuner/tune_phase.h: wall-clock accounting of where a sweep's time goes (CLOCK_MONOTONIC seconds) */
#ifndef KF_TUNER_TUNE_PHASE_H
#define KF_TUNER_TUNE_PHASE_H

#include <stddef.h>
#include <time.h>

/* Seconds spent in each phase of the per-variant path, added up per shape and per sweep.
 * gate_* and time_* are taken inside tune_attn_check / tune_attn_time (tune_set_phases),
 * the rest by the sweep; other = the shape's wall time minus every phase below. */
typedef struct tune_phases {
    double wall;         /* the whole shape (or sweep): waiting, measuring, storing */
    double plan;         /* sweep only: device, templates rendered and keyed, resume state read */
    double wait;         /* waiting for the compile thread */
    double gate_fill;    /* gate: fresh host inputs (fill) and their upload */
    double gate_ref;     /* gate: the reference (CPU fp64 or GPU naive: load, launch, readback) */
    double gate_run;     /* gate: buffers, module load, launch, readback, compare */
    double time_fill;    /* timing: inputs of the case, filled and uploaded once per case */
    double time_load;    /* timing: buffers and module load */
    double time_run;     /* timing: warm-up, the L2-flushed samples, readout */
    double db;           /* database: measurements, winners, re-reading the shape's measurements */
    long gates, timings; /* calls counted */
} tune_phases;

static inline double tune_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Adds the time since *t to *acc (acc may be NULL) and restarts *t: one lap per phase. */
static inline void tune_lap(double *acc, double *t)
{
    double n = tune_now();
    if (acc)
        *acc += n - *t;
    *t = n;
}

/* The phases' sum, besides wall. */
double tune_phases_accounted(const tune_phases *p);
/* to += from, field by field. */
void tune_phases_add(tune_phases *to, const tune_phases *from);
/* "gate 0.9 s (fill 0.2, ref 0.6, run 0.1), time 0.3 s (fill 0.0, load 0.0, run 0.3), db 0.1 s,
 * compile wait 0.0 s, other 0.0 s" ("plan 1.0 s, " first when planning is counted) */
void tune_phases_str(const tune_phases *p, char *buf, size_t n);
/* The same as JSON object members (no braces): "\"wall_s\":1.5,\"gate_s\":0.9,..." */
void tune_phases_json(const tune_phases *p, char *buf, size_t n);

#endif
