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

/* Whether the last w values of field f are within rel of each other (NaN anywhere: not tested). */
static int within(const rt_nvml_reading *h, int n, int w, int f, double rel)
{
    double lo = INFINITY, hi = -INFINITY;
    for (int i = n - w; i < n; i++) {
        double v = f == 0 ? h[i].sm_mhz : h[i].power_w;
        if (isnan(v))
            return 1;
        lo = v < lo ? v : lo;
        hi = v > hi ? v : hi;
    }
    return lo > 0 && (hi - lo) / lo <= rel;
}

int tune_clock_settled(const rt_nvml_reading *hist, int n, int w)
{
    if (w < 1 || n < w)
        return 0;
    return within(hist, n, w, 0, 0.01) && within(hist, n, w, 1, 0.03);
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
