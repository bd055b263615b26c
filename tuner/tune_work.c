/* tuner/tune_work.c: the work of one shape: bytes or FLOPs per call, unit, ceiling kind (pure), through the family table */
#include "tuner/tune_work.h"
#include "tuner/tune_family.h"

#include <math.h>
#include <string.h>

void tune_work_of(const char *family, const gen_kvset *shape, tune_work *w)
{
    const tune_family *f = tune_family_find(family);
    w->amount = NAN;
    w->unit = "B/s";
    if (f && f->work)
        f->work(shape, w);
    w->ceiling = tune_work_ceiling(family, w->unit);
}

const char *tune_work_ceiling(const char *family, const char *unit)
{
    if (unit && !strcmp(unit, "FLOP/s"))
        return "gemm_bf16";
    const tune_family *f = tune_family_find(family);
    return f && f->bytes_ceiling ? f->bytes_ceiling : "read";
}

double tune_throughput(const tune_work *w, double median_ms)
{
    if (isnan(w->amount) || !(median_ms > 0))
        return NAN;
    return w->amount / (median_ms * 1e-3);
}

double tune_cost_estimate(const char *family, const gen_kvset *shape)
{
    tune_work w;
    tune_work_of(family, shape, &w);
    double t = 20e-6;  /* launch and set-up floor */
    if (!isnan(w.amount))
        t += w.amount / (strcmp(w.unit, "B/s") ? 4e14 : 3e12);
    return t;
}
