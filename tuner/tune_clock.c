/* tuner/tune_clock.c: SM clock, power and temperature while the GPU runs: readings gathered by a sampling thread, their summary, the steady-state test */
#include "tuner/tune_clock.h"

#include <errno.h>
#include <math.h>
#include <string.h>
#include <time.h>

void tune_clock_init(tune_clock *c)
{
    memset(c, 0, sizeof *c);
    c->sm_min = c->sm_mean = c->power_mean = c->power_max = c->temp_max = NAN;
}

void tune_clock_add(tune_clock *c, const rt_nvml_reading *r)
{
    if (!isnan(r->sm_mhz)) {
        c->sm_min = c->n == 0 || r->sm_mhz < c->sm_min ? r->sm_mhz : c->sm_min;
        c->sm_sum += r->sm_mhz;
        c->n++;
        c->sm_mean = c->sm_sum / c->n;
    }
    if (!isnan(r->power_w)) {
        c->power_max = c->n_pw == 0 || r->power_w > c->power_max ? r->power_w : c->power_max;
        c->pw_sum += r->power_w;
        c->n_pw++;
        c->power_mean = c->pw_sum / c->n_pw;
    }
    if (!isnan(r->temp_c)) {
        c->temp_max = c->n_t == 0 || r->temp_c > c->temp_max ? r->temp_c : c->temp_max;
        c->n_t++;
    }
}

void tune_clock_merge(tune_clock *to, const tune_clock *f)
{
    if (f->n) {
        to->sm_min = to->n == 0 || f->sm_min < to->sm_min ? f->sm_min : to->sm_min;
        to->sm_sum += f->sm_sum;
        to->n += f->n;
        to->sm_mean = to->sm_sum / to->n;
    }
    if (f->n_pw) {
        to->power_max = to->n_pw == 0 || f->power_max > to->power_max ? f->power_max : to->power_max;
        to->pw_sum += f->pw_sum;
        to->n_pw += f->n_pw;
        to->power_mean = to->pw_sum / to->n_pw;
    }
    if (f->n_t) {
        to->temp_max = to->n_t == 0 || f->temp_max > to->temp_max ? f->temp_max : to->temp_max;
        to->n_t += f->n_t;
    }
}

/* Mean of field f (0: SM clock, 1: power) over h[lo..hi), NaN readings skipped (NaN: none). */
static double field_mean(const rt_nvml_reading *h, int lo, int hi, int f, int *cnt)
{
    double sum = 0;
    int k = 0;
    for (int i = lo; i < hi; i++) {
        double v = f == 0 ? h[i].sm_mhz : h[i].power_w;
        if (!isnan(v))
            sum += v, k++;
    }
    *cnt = k;
    return k ? sum / k : NAN;
}

int tune_warm_settled(const double *t_ms, const rt_nvml_reading *h, int n, double window_ms, double sm_rel,
                      double pw_rel)
{
    if (n < 4 || !(window_ms > 0))
        return 0;
    double T = t_ms[n - 1];
    if (t_ms[0] > T - 1.75 * window_ms)
        return 0;                                   /* not two windows of readings yet */
    int a = n, b;                                   /* last window h[a..n), the one before h[b..a) */
    while (a > 0 && t_ms[a - 1] > T - window_ms)
        a--;
    b = a;
    while (b > 0 && t_ms[b - 1] > T - 2 * window_ms)
        b--;
    if (n - a < 2 || a - b < 2)
        return 0;
    int tested = 0;
    const double rel[2] = {sm_rel, pw_rel};
    for (int f = 0; f < 2; f++) {
        int ka, kb;
        double ma = field_mean(h, a, n, f, &ka), mb = field_mean(h, b, a, f, &kb);
        if (!ka || !kb)
            continue;
        if (!(mb > 0) || fabs(ma - mb) / mb >= rel[f])
            return 0;
        tested = 1;
    }
    return tested;
}

int tune_warm_done(double done_ms, double call_ms, const double *t_ms, const rt_nvml_reading *h, int n)
{
    if (done_ms >= TUNE_WARM_MAX_MS)
        return 1;
    int known = 0;
    for (int i = 0; i < n && !known; i++)
        known = !isnan(h[i].sm_mhz) || !isnan(h[i].power_w);
    if (!known) {
        double want = TUNE_WARM_CALLS * call_ms;
        want = want > TUNE_WARM_MS ? want : TUNE_WARM_MS;
        return done_ms >= (want < TUNE_WARM_MAX_MS ? want : TUNE_WARM_MAX_MS);
    }
    return done_ms >= TUNE_WARM_MS &&
           tune_warm_settled(t_ms, h, n, TUNE_WARM_WINDOW_MS, TUNE_WARM_SM_REL, TUNE_WARM_PW_REL);
}

static void *sampler_main(void *arg)
{
    tune_sampler *s = arg;
    pthread_mutex_lock(&s->mu);
    for (;;) {
        int stop = s->stop;
        pthread_mutex_unlock(&s->mu);
        rt_nvml_reading r;
        rt_nvml_read(s->dev, &r);
        pthread_mutex_lock(&s->mu);
        tune_clock_add(&s->acc, &r);
        if (stop)
            break;
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        long ns = ts.tv_nsec + (long)s->period_us * 1000;
        ts.tv_sec += ns / 1000000000;
        ts.tv_nsec = ns % 1000000000;
        while (!s->stop && pthread_cond_timedwait(&s->cv, &s->mu, &ts) != ETIMEDOUT)
            ;
    }
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

void tune_sampler_start(tune_sampler *s, rt_nvml_dev *dev, int period_us)
{
    memset(s, 0, sizeof *s);
    tune_clock_init(&s->acc);
    s->dev = dev;
    s->period_us = period_us > 100 ? period_us : 100;
    if (!dev)
        return;
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    s->running = pthread_create(&s->th, NULL, sampler_main, s) == 0;
    if (!s->running) {
        pthread_mutex_destroy(&s->mu);
        pthread_cond_destroy(&s->cv);
    }
}

void tune_sampler_stop(tune_sampler *s, tune_clock *out)
{
    if (s->running) {
        pthread_mutex_lock(&s->mu);
        s->stop = 1;
        pthread_cond_signal(&s->cv);
        pthread_mutex_unlock(&s->mu);
        pthread_join(s->th, NULL);
        pthread_mutex_destroy(&s->mu);
        pthread_cond_destroy(&s->cv);
        s->running = 0;
    }
    if (out)
        tune_clock_merge(out, &s->acc);
}
