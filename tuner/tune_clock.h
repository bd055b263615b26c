/* tuner/tune_clock.h: SM clock, power and temperature while the GPU runs: readings gathered by a sampling thread, their summary, the steady-state test */
#ifndef KF_TUNER_TUNE_CLOCK_H
#define KF_TUNER_TUNE_CLOCK_H

#include <pthread.h>

#include "runtime/nvml.h"

/* The summary of the readings taken during a timing; every figure NaN when none was taken
 * (no NVML): unknown, recorded as NULL. */
typedef struct tune_clock {
    int n;                       /* readings with an SM clock */
    double sm_min, sm_mean;      /* MHz */
    double power_mean, power_max;/* W */
    double temp_max;             /* C */
    /* running sums */
    double sm_sum, pw_sum;
    int n_pw, n_t;
} tune_clock;

void tune_clock_init(tune_clock *c);                            /* empty: every figure NaN */
void tune_clock_add(tune_clock *c, const rt_nvml_reading *r);   /* NaN fields are skipped */
void tune_clock_merge(tune_clock *to, const tune_clock *from);

/*
 * The warm-up of a sustained timing: the variant run back to back in chunks of about
 * TUNE_WARM_POLL_MS, NVML read after each, until the GPU is at its steady state: the mean SM
 * clock of the readings of the last TUNE_WARM_WINDOW_MS within TUNE_WARM_SM_REL of the mean of
 * the window before it, and the mean power within TUNE_WARM_PW_REL; at least TUNE_WARM_MS, at
 * most TUNE_WARM_MAX_MS. Without NVML figures: a fixed warm-up of max(TUNE_WARM_MS,
 * TUNE_WARM_CALLS calls), at most TUNE_WARM_MAX_MS. A 3.9 ms tensor-core call heats the chip
 * for seconds (a 16K causal prefill drifted 17% after a 210 ms warm-up); power-bound decode
 * settles within the first two windows.
 */
#define TUNE_WARM_MS 200.0
#define TUNE_WARM_MAX_MS 5000.0
#define TUNE_WARM_POLL_MS 50.0
#define TUNE_WARM_WINDOW_MS 300.0
#define TUNE_WARM_SM_REL 0.01
#define TUNE_WARM_PW_REL 0.02
#define TUNE_WARM_CALLS 100

/* Steady state over readings h[0..n) taken at t_ms[i] (ms, increasing): the readings in the last
 * window_ms (t > T - window_ms, T the last time) against those in the window_ms before it, at
 * least 2 readings in each and the readings spanning most of both windows (t_ms[0] <= T -
 * 1.75 window_ms); mean SM clock within sm_rel and mean power within pw_rel of the earlier
 * window's (a figure missing from either window is not tested). 0 when neither figure can be
 * tested. */
int tune_warm_settled(const double *t_ms, const rt_nvml_reading *h, int n, double window_ms, double sm_rel,
                      double pw_rel);

/* Whether a warm-up that has run done_ms (calls of call_ms each) may stop, from its readings so
 * far (as tune_warm_settled; n 0 or no figure in any: no NVML, the fixed warm-up). */
int tune_warm_done(double done_ms, double call_ms, const double *t_ms, const rt_nvml_reading *h, int n);

/* A thread that reads NVML every period_ms while a timing runs. dev may be NULL: the
 * sampler then starts no thread and its summary stays unknown. */
typedef struct tune_sampler {
    rt_nvml_dev *dev;
    int period_us;
    pthread_t th;
    int running;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int stop;
    tune_clock acc;
} tune_sampler;

void tune_sampler_start(tune_sampler *s, rt_nvml_dev *dev, int period_us);
/* Stops the thread (after one last reading) and adds the summary to *out. */
void tune_sampler_stop(tune_sampler *s, tune_clock *out);

#endif
