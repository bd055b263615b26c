/* tuner/tune_eta.c: progress arithmetic of a sweep: remaining time and its short text (pure) */
#include "tuner/tune_eta.h"

#include <math.h>
#include <stdio.h>

double tune_eta(double elapsed_s, long done, long total)
{
    if (done >= total)
        return 0;
    if (done <= 0 || !(elapsed_s >= 0))
        return -1;
    return elapsed_s / (double)done * (double)(total - done);
}

char *tune_fmt_duration(double s, char *buf, size_t n)
{
    if (!(s >= 0) || isinf(s)) {
        snprintf(buf, n, "?");
        return buf;
    }
    long t = lround(s);
    if (t < 60)
        snprintf(buf, n, "%lds", t);
    else if (t < 3600)
        snprintf(buf, n, "%ldm%02lds", t / 60, t % 60);
    else
        snprintf(buf, n, "%ldh%02ldm", t / 3600, (t % 3600) / 60);
    return buf;
}
