/* tuner/tune_work.c: the work of one attention shape: bytes or FLOPs per call, unit, ceiling kind (pure) */
#include "tuner/tune_work.h"
#include "tuner/parts_run.h"

#include <math.h>
#include <string.h>

static double esize(const gen_kvset *shape)
{
    const char *dt = gen_kv_str(shape, "dtype");
    return dt && !strcmp(dt, "fp32") ? 4.0 : 2.0;
}

void tune_work_of(const char *family, const gen_kvset *shape, tune_work *w)
{
    double b = (double)gen_kv_int(shape, "b", 1), sq = (double)gen_kv_int(shape, "sq", 1);
    double skv = (double)gen_kv_int(shape, "skv", 0), hq = (double)gen_kv_int(shape, "hq", 0);
    double hkv = (double)gen_kv_int(shape, "hkv", 0), d = (double)gen_kv_int(shape, "d", 0);
    w->amount = NAN;
    w->unit = "B/s";
    if (family && !strcmp(family, "attn_decode")) {
        w->amount = 2.0 * b * skv * hkv * d * esize(shape);
    } else if (family && !strcmp(family, "attn_prefill")) {
        w->amount = 4.0 * b * hq * sq * skv * d * (gen_kv_int(shape, "causal", 0) ? 0.5 : 1.0);
        w->unit = "FLOP/s";
    } else if (family && !strcmp(family, "attn_parts_decode")) {
        /* cache bytes read once, or FLOPs (2 sq skv hq (key dims + dv) per layer) when the shape is
         * compute-bound on an H200-like ridge (about 200 FLOP per byte of bf16 GEMM vs copy) */
        double bytes, flops;
        tune_parts_work(shape, &bytes, &flops);
        w->amount = bytes;
        if (flops > 200.0 * bytes) {
            w->amount = flops;
            w->unit = "FLOP/s";
        }
    } else if (family && (!strcmp(family, "kda_prefill") || !strcmp(family, "kda_decode"))) {
        double n = (double)gen_kv_int(shape, "n", 0), t = (double)gen_kv_int(shape, "t", 0);
        double h = (double)gen_kv_int(shape, "h", 0), hv = (double)gen_kv_int(shape, "hv", 0);
        double dk = (double)gen_kv_int(shape, "dk", 0), dv = (double)gen_kv_int(shape, "dv", 0);
        /* q, k (bf16, h heads), v, o (bf16), g (fp32 [hv, dk]), beta (fp32) per token, and the
         * fp32 state read and written once per (sequence, value head) */
        w->amount = n * t * (2.0 * h * dk * 2 + 2.0 * hv * dv * 2 + 4.0 * hv * dk + 4.0 * hv) + 2.0 * n * hv * dk * dv * 4;
    }
    w->ceiling = tune_work_ceiling(family, w->unit);
}

const char *tune_work_ceiling(const char *family, const char *unit)
{
    if (unit && !strcmp(unit, "FLOP/s"))
        return "gemm_bf16";
    return family && !strncmp(family, "kda_", 4) ? "copy" : "read";
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
