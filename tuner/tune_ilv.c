/* tuner/tune_ilv.c: interleaved timing of a shape: input sets to rotate, the order of the rounds, the control band and the paired decision (pure) */
#include "tuner/tune_ilv.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

int tune_rotate_sets(double set_bytes, double l2_bytes)
{
    if (!(l2_bytes > 0) || !(set_bytes > 0) || set_bytes >= 2 * l2_bytes)
        return 1;
    double n = ceil(2 * l2_bytes / set_bytes);
    return n > TUNE_ROTATE_MAX_SETS ? TUNE_ROTATE_MAX_SETS : (int)n;
}

void tune_ilv_plan(int samples, int *rounds, int *slot_samples)
{
    int r = (samples + TUNE_ILV_SLOT - 1) / TUNE_ILV_SLOT;
    r = r < 2 ? 2 : r;
    int s = (samples + r - 1) / r;
    *rounds = r;
    *slot_samples = s < TUNE_ILV_SLOT ? TUNE_ILV_SLOT : s;
}

int tune_burst_calls(double one_ms, double burst_ms, int every, int sets, int graph)
{
    double want = one_ms > 0 ? ceil(burst_ms / one_ms) : 2;
    int n = want < 2 ? 2 : want > 100000 ? 100000 : (int)want;
    int step = every > 0 ? every : 1;
    n = (n + step - 1) / step * step;
    for (int k = 0; graph && sets > 1 && (n + (every > 0 ? n / every : 0)) % sets && k < sets; k++)
        n += step;
    return n;
}

int tune_ilv_order(int n_cand, int rounds, int *slots, int cap)
{
    if (rounds < 1)
        rounds = 1;
    if (n_cand <= 0) {
        if (slots && cap > 0)
            slots[0] = -1;
        return 1;
    }
    int k = 0;
    for (int r = 0; r < rounds; r++)
        for (int c = 0; c < n_cand; c++) {
            if (slots && k < cap)
                slots[k] = -1;
            k++;
            if (slots && k < cap)
                slots[k] = c;
            k++;
        }
    if (slots && k < cap)
        slots[k] = -1;
    return k + 1;
}

static int cmp_dbl(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

double tune_median(const double *v, int n)
{
    if (n <= 0)
        return NAN;
    double *c = malloc(sizeof *c * (size_t)n);
    if (!c)
        return NAN;
    memcpy(c, v, sizeof *c * (size_t)n);
    qsort(c, (size_t)n, sizeof *c, cmp_dbl);
    double m = n % 2 ? c[n / 2] : 0.5 * (c[n / 2 - 1] + c[n / 2]);
    free(c);
    return m;
}

/* Appends slot k's samples to buf (of *len). */
static void pool(double *buf, int *len, const double *const *samples, const int *ns, int k)
{
    if (ns[k] > 0) {
        memcpy(buf + *len, samples[k], sizeof *buf * (size_t)ns[k]);
        *len += ns[k];
    }
}

/* The median of the default slot nearest to slot k in direction dir (-1 or 1) that has samples,
 * NaN when none. */
static double neighbour(const int *who, const double *const *samples, const int *ns, int n_slots, int k, int dir)
{
    for (int j = k + dir; j >= 0 && j < n_slots; j += dir)
        if (who[j] < 0 && ns[j] > 0)
            return tune_median(samples[j], ns[j]);
    return NAN;
}

/* The per-slot noise s from the log ratios of consecutive default slots (see tune_ilv_decide);
 * NaN with no pair. */
static double slot_noise(const double *dmed, int nd, double *tmp)
{
    int nf = 0;
    for (int i = 1; i < nd; i++)
        if (dmed[i] > 0 && dmed[i - 1] > 0)
            tmp[nf++] = log(dmed[i] / dmed[i - 1]);
    if (nf == 0)
        return NAN;
    if (nf < 5) {
        double q = 0;
        for (int i = 0; i < nf; i++)
            q += tmp[i] * tmp[i];
        return sqrt(q / nf) / sqrt(2.0);
    }
    double m = tune_median(tmp, nf);
    for (int i = 0; i < nf; i++)
        tmp[i] = fabs(tmp[i] - m);
    return 1.4826 * tune_median(tmp, nf) / sqrt(2.0);
}

int tune_ilv_decide(const int *who, const double *const *samples, const int *ns, int n_slots, int n_cand,
                    double floor, tune_ilv_cand *cand, tune_ilv_result *res)
{
    memset(res, 0, sizeof *res);
    res->winner = -1;
    res->band = floor;
    res->drift = res->default_ms = res->speedup = NAN;
    long total = 0;
    for (int k = 0; k < n_slots; k++)
        total += ns[k] > 0 ? ns[k] : 0;
    double *buf = malloc(sizeof *buf * (size_t)(total + 1));
    double *dmed = malloc(sizeof *dmed * (size_t)(n_slots + 1));
    double *tmp = malloc(sizeof *tmp * (size_t)(n_slots + 1));
    for (int c = 0; c < n_cand; c++) {
        memset(&cand[c], 0, sizeof cand[c]);
        cand[c].ms = cand[c].ref_ms = cand[c].ratio = NAN;
        cand[c].band = floor;
    }
    int len = 0, nd = 0;
    if (!buf || !dmed || !tmp)
        goto out;
    buf[0] = 0;
    /* the default: every sample, each slot's median, the drift over them */
    for (int k = 0; k < n_slots; k++)
        if (who[k] < 0 && ns[k] > 0) {
            pool(buf, &len, samples, ns, k);
            dmed[nd++] = tune_median(samples[k], ns[k]);
        }
    res->default_n = len;
    res->default_ms = tune_median(buf, len);
    if (nd > 0) {
        double lo = dmed[0], hi = dmed[0];
        for (int i = 1; i < nd; i++) {
            lo = dmed[i] < lo ? dmed[i] : lo;
            hi = dmed[i] > hi ? dmed[i] : hi;
        }
        res->drift = lo > 0 ? (hi - lo) / lo : NAN;
    }
    if (!(res->default_ms > 0)) {
        res->speedup = NAN;
        goto out;
    }
    /* each candidate: its samples pooled (reported), its neighbours pooled (reported), and the
     * paired ratio of each of its slots (decided on) */
    int rounds = 0;
    for (int c = 0; c < n_cand; c++) {
        len = 0;
        int nr = 0;
        for (int k = 0; k < n_slots; k++) {
            if (who[k] != c || ns[k] <= 0)
                continue;
            pool(buf, &len, samples, ns, k);
            double a = neighbour(who, samples, ns, n_slots, k, -1), b = neighbour(who, samples, ns, n_slots, k, 1);
            double ref = isnan(a) ? b : isnan(b) ? a : 0.5 * (a + b);
            if (ref > 0)
                tmp[nr++] = tune_median(samples[k], ns[k]) / ref;
        }
        cand[c].n = len;
        cand[c].slots = nr;
        cand[c].ms = tune_median(buf, len);
        cand[c].ratio = tune_median(tmp, nr);
        rounds = nr > rounds ? nr : rounds;
        len = 0;
        for (int k = 0; k < n_slots; k++) {
            if (who[k] != c || ns[k] <= 0)
                continue;
            for (int dir = -1; dir <= 1; dir += 2)
                for (int j = k + dir; j >= 0 && j < n_slots; j += dir)
                    if (who[j] < 0 && ns[j] > 0) {
                        pool(buf, &len, samples, ns, j);
                        break;
                    }
        }
        cand[c].ref_ms = tune_median(buf, len);
    }
    double s = slot_noise(dmed, nd, tmp);
    if (rounds > 0 && s > 0) {
        double b = TUNE_ILV_Z * 1.2533 * sqrt(1.5) * s / sqrt((double)rounds);
        res->band = b > floor ? b : floor;
    }
    res->speedup = 1.0;
    double best = INFINITY;
    for (int c = 0; c < n_cand; c++) {
        if (cand[c].slots == 0)
            continue;
        double b = res->band * sqrt((double)rounds / cand[c].slots);
        cand[c].band = b > floor ? b : floor;
        cand[c].faster = cand[c].ratio > 0 && 1.0 - cand[c].ratio > cand[c].band;
        if (cand[c].faster && cand[c].ratio < best) {
            best = cand[c].ratio;
            res->winner = c;
        }
    }
    if (res->winner >= 0)
        res->speedup = 1.0 / best;
out:
    free(buf);
    free(dmed);
    free(tmp);
    return res->winner;
}

int tune_ilv_drop(const int *who, const double *const *samples, const int *ns, int n_slots, int n_cand,
                  double floor, double target, int *dropped)
{
    tune_ilv_cand *c = malloc(sizeof *c * (size_t)(n_cand + 1));
    if (!c)
        return -1;
    tune_ilv_result res;
    tune_ilv_decide(who, samples, ns, n_slots, n_cand, floor, c, &res);
    int n = 0, keep = -1;
    for (int i = 0; i < n_cand; i++) {
        if (!dropped[i] && c[i].slots >= TUNE_ILV_DROP_AFTER && c[i].ratio > 1.0 + TUNE_ILV_DROP_BANDS * c[i].band) {
            dropped[i] = 2;                              /* dropped now */
            if (keep < 0 || c[i].ratio < c[keep].ratio)
                keep = i;
        }
        n += dropped[i] != 0;
    }
    /* the last ones out at once while the band is wider than the target: the closest of them stays, so the
     * default keeps a partner and the band keeps narrowing over the rounds left */
    if (n == n_cand && keep >= 0 && res.band > target) {
        dropped[keep] = 0;
        n--;
    }
    for (int i = 0; i < n_cand; i++)
        dropped[i] = dropped[i] != 0;
    free(c);
    return n;
}

int tune_ilv_skip(const int *who, int n_slots, int k, const int *dropped)
{
    if (k < 0 || k >= n_slots)
        return 0;
    if (who[k] >= 0)
        return dropped[who[k]] != 0;
    return k + 1 < n_slots && who[k + 1] >= 0 && dropped[who[k + 1]];
}

int tune_ilv_more_rounds(int rounds, double band, double target, double floor)
{
    if (rounds < 1 || !(band > target) || !(target > 0) || !(floor < target))
        return rounds;
    double want = ceil(rounds * (band / target) * (band / target) - 1e-9);
    int cap = rounds * TUNE_ILV_MORE;
    return want >= cap ? cap : (int)want;
}
