/* tuner/tune_sweep.h: one tuning worker on one GPU: plan, compile ahead, gate, time, store, pick winners */
#ifndef KF_TUNER_TUNE_SWEEP_H
#define KF_TUNER_TUNE_SWEEP_H

#include <signal.h>
#include <stddef.h>
#include <stdint.h>

#include "core/err.h"
#include "gen/kv.h"
#include "tuner/tune_phase.h"

/* tune_sweep_run's results besides 0 and -1. */
#define TUNE_RC_BROKEN 2     /* a kernel left the CUDA context unusable: restart the worker to go on */

/* Full timings default to this many samples (>= TUNE_MIN_SAMPLES). */
#define TUNE_DEFAULT_SAMPLES 30

typedef struct tune_opts {
    const char *db_path;         /* required; created when missing */
    const char *templates;       /* template folder, NULL: $KFORGE_TEMPLATE_DIR or the embedded copy */
    const char *arch;            /* NULL: the GPU's */
    int ordinal;                 /* CUDA device */
    int jobs;                    /* compile threads (0: the number of cores) */
    int samples;                 /* samples of a full timing (0: TUNE_DEFAULT_SAMPLES) */
    int budget;                  /* variants fully timed per shape; 0: every one */
    int strategy;                /* TUNE_STRAT_RANDOM or TUNE_STRAT_HALVING when budget is set */
    uint64_t seed;               /* of random subsets */
    double band_floor;           /* 0: TUNE_BAND_FLOOR */
    double rewarm_ms;            /* interleaved slots' re-warm (0: TUNE_ILV_REWARM_MS, <= TUNE_REWARM_CALLS calls) */
    int timing;                  /* TUNE_TIMING_SUSTAINED (0, the default: interleaved rounds, see
                                  * tuner/tune_ilv.h) or TUNE_TIMING_BURST (each variant once, then
                                  * the default again as the control) */
    int retry_errors;            /* re-measure variants recorded as 'error' */
    int quiet, json;             /* no progress on stderr; JSON lines per shape on stdout */
    const char *label;           /* prefix of progress lines ("gpu1"), or NULL */
    const char *command;         /* recorded with the run */
    const char *kforge_rev;      /* recorded with the device */
    /* Tests: may alter the rendered source of a binary before it compiles (a planted
     * bug); returns 1 when it did (the binary's cache key then gets ".mut<N>"). */
    int (*mutate)(const char *binary_key, char **src, void *arg);
    void *mutate_arg;
    /* Tests of the decision on a GPU: test_twin also times a copy of each shape's default (same
     * binary) as a candidate named "<default key>.twin"; test_slow_default launches every 10th
     * call of the default (not of its twin) twice in sustained timings: a 10%-slower default. */
    int test_twin, test_slow_default;
    /* Set (from a signal handler) to stop after the measurement in progress. */
    volatile sig_atomic_t *stop;
} tune_opts;

typedef struct tune_stats {
    int shapes;                  /* given */
    int shapes_done;             /* every planned variant measured or resumed, winner picked */
    int shapes_failed;           /* template or planning errors */
    long variants;               /* planned (budget applied) */
    long measured;               /* timings and gate verdicts taken in this run (controls included) */
    long resumed;                /* found in the database, not measured again */
    long wrong, errors;          /* recorded in this run */
    long winners, improved;      /* winners stored; of them, faster than the default by more than the band */
    int interrupted;
    tune_phases phases;          /* where the sweep's wall time went (plan and every shape) */
} tune_stats;

/* Tunes shapes (each with "family") on GPU o->ordinal into o->db_path. Returns 0 (*e set,
 * KF_ERR_UNSUPPORTED, when some shapes could not be planned: st->shapes_failed), -1 with *e set,
 * or TUNE_RC_BROKEN with *e set (everything measured so far is stored; running again resumes past
 * the variant that broke the context, recorded as 'error'). e may be NULL. */
int tune_sweep_run(const tune_opts *o, const gen_kvset *shapes, int n, tune_stats *st, core_err *e);

#endif
