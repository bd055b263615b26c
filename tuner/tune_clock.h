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

/* Steady state from a history of readings (oldest first): the last `w` SM clocks within 1%
 * of each other and the last `w` powers within 3% (a figure NVML does not give is not
 * tested). 0 with fewer than w readings. */
int tune_clock_settled(const rt_nvml_reading *hist, int n, int w);

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
