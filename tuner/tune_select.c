/* tuner/tune_select.c: winner selection over recorded measurements: control band, resume state, merge preference (pure) */
#include "tuner/tune_select.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tuner/tune_enum.h"

int tune_status_parse(const char *s)
{
    if (s && !strcmp(s, "ok"))
        return TUNE_OK;
    if (s && !strcmp(s, "wrong"))
        return TUNE_WRONG;
    return TUNE_ERROR;
}

const char *tune_status_str(int status)
{
    return status == TUNE_OK ? "ok" : status == TUNE_WRONG ? "wrong" : "error";
}

double tune_band(double a_ms, double b_ms, double floor)
{
    if (!(a_ms > 0) || !(b_ms > 0) || isinf(a_ms) || isinf(b_ms))
        return NAN;
    double lo = a_ms < b_ms ? a_ms : b_ms;
    double band = fabs(a_ms - b_ms) / lo;
    return band > floor ? band : floor;
}

static int is_full(const tune_meas *m, int min_samples)
{
    return m->status == TUNE_OK && m->n_samples >= min_samples && m->median_ms > 0 &&
           !isinf(m->median_ms);
}

static int variant_wrong(const tune_meas *m, int n, const char *key)
{
    for (int i = 0; i < n; i++)
        if (m[i].status == TUNE_WRONG && !strcmp(m[i].variant_key, key))
            return 1;
    return 0;
}

/* The full timing of key (control or not) that counts: most samples, then latest. */
static int best_of_variant(const tune_meas *m, int n, const char *key, int control, int min_samples)
{
    int k = -1;
    for (int i = 0; i < n; i++) {
        if (m[i].is_control != control || strcmp(m[i].variant_key, key) || !is_full(&m[i], min_samples))
            continue;
        if (k < 0 || m[i].n_samples > m[k].n_samples ||
            (m[i].n_samples == m[k].n_samples && m[i].id > m[k].id))
            k = i;
    }
    return k;
}

int tune_select(const tune_meas *m, int n, const char *default_key, int min_samples,
                double band_floor, tune_choice *out)
{
    memset(out, 0, sizeof *out);
    out->winner = -1;
    out->default_ms = out->best_ms = out->speedup = NAN;
    out->band = band_floor;
    int d1 = -1, d2 = -1;
    if (default_key && !variant_wrong(m, n, default_key)) {
        d1 = best_of_variant(m, n, default_key, 0, min_samples);
        d2 = best_of_variant(m, n, default_key, 1, min_samples);
    }
    out->default_ok = d1 >= 0;
    out->control_ok = d1 >= 0 && d2 >= 0;
    if (d1 >= 0) {
        out->default_ms = m[d1].median_ms;
        if (d2 >= 0) {
            out->band = tune_band(m[d1].median_ms, m[d2].median_ms, band_floor);
            if (m[d2].median_ms < out->default_ms)
                out->default_ms = m[d2].median_ms;
        }
    }
    int best = -1;
    for (int i = 0; i < n; i++) {
        if (m[i].is_control || !is_full(&m[i], min_samples))
            continue;
        if (default_key && !strcmp(m[i].variant_key, default_key))
            continue;
        if (variant_wrong(m, n, m[i].variant_key))
            continue;
        if (best_of_variant(m, n, m[i].variant_key, 0, min_samples) != i)
            continue;                       /* another timing of this variant counts */
        if (best < 0 || m[i].median_ms < m[best].median_ms)
            best = i;
    }
    if (best >= 0)
        out->best_ms = m[best].median_ms;
    if (d1 < 0) {
        out->winner = best;
        return best;
    }
    if (best >= 0 && (out->default_ms - m[best].median_ms) / out->default_ms > out->band) {
        out->winner = best;
        out->speedup = out->default_ms / m[best].median_ms;
    } else {
        out->winner = d1;
        out->default_kept = 1;
        out->speedup = 1.0;
    }
    return out->winner;
}

int tune_resume_state(const tune_meas *m, int n, const char *variant_key, int is_control,
                      int samples, int retry_errors, double *best_ms, int *best_n)
{
    double ms = NAN;
    int bn = 0, rejected = 0, passed = 0, paired = 0;
    for (int i = 0; i < n; i++) {
        if (m[i].is_control != is_control || strcmp(m[i].variant_key, variant_key))
            continue;
        if (m[i].status == TUNE_WRONG || (m[i].status == TUNE_ERROR && !retry_errors))
            rejected = 1;
        if (m[i].status == TUNE_OK && m[i].median_ms > 0 && !isinf(m[i].median_ms)) {
            passed = 1;
            paired |= m[i].paired;
            if (m[i].n_samples > bn) {
                bn = m[i].n_samples;
                ms = m[i].median_ms;
            }
        }
    }
    if (best_ms)
        *best_ms = ms;
    if (best_n)
        *best_n = bn;
    if (rejected)
        return TUNE_REJECTED;
    if (passed)
        return bn >= samples || paired ? TUNE_DONE : TUNE_SCREENED;
    return TUNE_TODO;
}

double tune_screen_figure(const tune_meas *m, int n, const char *key)
{
    int scr = -1, full = -1;
    for (int i = 0; i < n; i++) {
        if (m[i].is_control || strcmp(m[i].variant_key, key) || m[i].status != TUNE_OK ||
            !(m[i].median_ms > 0) || isinf(m[i].median_ms))
            continue;
        if (m[i].n_samples < TUNE_MIN_SAMPLES && !m[i].paired) {   /* the screening itself, not the rounds */
            if (scr < 0 || m[i].id > m[scr].id)
                scr = i;
        } else if (full < 0 || m[i].n_samples > m[full].n_samples) {
            full = i;
        }
    }
    return scr >= 0 ? m[scr].median_ms : full >= 0 ? m[full].median_ms : NAN;
}

void tune_ilv_resume_plan(const tune_meas *m, int n, const char *const *keys, int nk, int idefault,
                          const unsigned char *passed, int samples, int retry_errors, int finalists,
                          int has_winner, int *state, int *final, tune_ilv_resume *out)
{
    memset(out, 0, sizeof *out);
    int *cand = malloc(sizeof(int) * (size_t)(nk + 1));
    double *fig = malloc(sizeof(double) * (size_t)(nk + 1));
    int *keep = malloc(sizeof(int) * (size_t)(nk + 1));
    if (!cand || !fig || !keep) {              /* out of memory: everything to do, nothing kept */
        for (int k = 0; k < nk; k++)
            state[k] = TUNE_TODO, final[k] = k;
        out->n_gate = out->n_cand = out->n_final = out->n_time = nk;
        free(cand), free(fig), free(keep);
        return;
    }
    for (int k = 0; k < nk; k++) {
        int s = tune_resume_state(m, n, keys[k], 0, samples, retry_errors, NULL, NULL);
        if (s == TUNE_TODO && passed && passed[k])
            s = TUNE_SCREENED;
        state[k] = s;
        out->n_gate += s == TUNE_TODO;
        out->n_rejected += s == TUNE_REJECTED;
        if (s == TUNE_REJECTED)
            continue;
        if (k == idefault)
            out->dflt = 1;
        else
            cand[out->n_cand++] = k;
    }
    int screening = out->dflt && out->n_cand > finalists;
    for (int c = 0; c < out->n_cand; c++) {
        fig[c] = tune_screen_figure(m, n, keys[cand[c]]);
        out->n_screen += screening && isnan(fig[c]);
    }
    if (!screening) {
        for (int c = 0; c < out->n_cand; c++)
            final[out->n_final++] = cand[c];
    } else if (!out->n_screen) {
        out->n_final = tune_halving_keep(fig, out->n_cand, finalists, keep);
        for (int i = 0; i < out->n_final; i++)
            final[i] = cand[keep[i]];
    }
    if (out->dflt)
        out->n_time += state[idefault] != TUNE_DONE;
    for (int i = 0; i < out->n_final; i++)
        out->n_time += state[final[i]] != TUNE_DONE;
    out->keep = has_winner && !out->n_gate && !out->n_screen && !out->n_time && (out->dflt || out->n_final);
    free(cand), free(fig), free(keep);
}

static double rel_spread(const tune_merge_side *s)
{
    if (!(s->median_ms > 0) || isnan(s->spread_ms))
        return INFINITY;
    return s->spread_ms / s->median_ms;
}

int tune_merge_prefer(const tune_merge_side *a, const tune_merge_side *b)
{
    if (a->n_samples != b->n_samples)
        return b->n_samples > a->n_samples;
    return rel_spread(b) < rel_spread(a);
}
