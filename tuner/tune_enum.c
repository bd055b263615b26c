/* tuner/tune_enum.c: the variants to tune for one shape on one device, and the budget strategies over them */
#include "tuner/tune_enum.h"
#include "gen/variant.h"
#include "tuner/tune_select.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

struct enum_ctx {
    gen_tmpl *t;
    tune_space *s;
    int rc;
};

static int push_variant(tune_space *s, gen_tmpl *t, const gen_kvset *params)
{
    if (s->n == s->cap) {
        int cap = s->cap ? 2 * s->cap : 64;
        tune_variant *v = realloc(s->v, sizeof *v * (size_t)cap);
        if (!v)
            return -1;
        s->v = v;
        s->cap = cap;
    }
    tune_variant *v = &s->v[s->n];
    memset(v, 0, sizeof *v);
    v->params = *params;
    v->job = -1;
    gen_kvset all = s->fixed;
    gen_kv_merge(&all, params);
    if (gen_variant_key(t, &s->fixed, params, 0, v->key, sizeof v->key) ||
        gen_kv_format(&all, v->full, sizeof v->full) < 0)
        return -1;
    s->n++;
    return 0;
}

static int enum_cb(const gen_kvset *params, int valid, const char *why, void *arg)
{
    struct enum_ctx *c = arg;
    c->s->points++;
    if (!valid) {
        c->s->pruned++;
        return 0;
    }
    if (push_variant(c->s, c->t, params)) {
        c->rc = -1;
        return 1;
    }
    return 0;
}

int tune_enumerate(gen_tmpl *t, const gen_kvset *shape, const gen_device *dev, tune_space *out)
{
    memset(out, 0, sizeof *out);
    out->idefault = -1;
    gen_kvset dflt;
    if (gen_variant_resolve(t, shape, dev, NULL, 0, &out->fixed, &dflt, NULL, 0))
        return -1;
    struct enum_ctx c = {t, out, 0};
    if (gen_tmpl_enumerate(t, &out->fixed, dev, enum_cb, &c) || c.rc)
        return -1;
    char key[512];
    if (gen_variant_key(t, &out->fixed, &dflt, 0, key, sizeof key))
        return -1;
    for (int i = 0; i < out->n && out->idefault < 0; i++)
        if (!strcmp(out->v[i].key, key))
            out->idefault = i;
    if (out->idefault < 0) {
        /* the default is tuned too: a heuristic outside the listed space is still the baseline */
        if (push_variant(out, t, &dflt))
            return -1;
        out->idefault = out->n - 1;
        out->default_added = 1;
    }
    out->v[out->idefault].is_default = 1;
    return 0;
}

void tune_space_free(tune_space *s)
{
    free(s->v);
    memset(s, 0, sizeof *s);
}

int tune_strategy_parse(const char *s)
{
    if (!strcmp(s, "all"))
        return TUNE_STRAT_ALL;
    if (!strcmp(s, "random"))
        return TUNE_STRAT_RANDOM;
    if (!strcmp(s, "halving"))
        return TUNE_STRAT_HALVING;
    return -1;
}

const char *tune_strategy_str(int s)
{
    return s == TUNE_STRAT_RANDOM ? "random" : s == TUNE_STRAT_HALVING ? "halving" : "all";
}

int tune_screen_samples(int round)
{
    int s = 5 << (round < 3 ? round : 3);
    return s < TUNE_MIN_SAMPLES ? s : TUNE_MIN_SAMPLES - 1;
}

/* splitmix64 */
static uint64_t mix(uint64_t *x)
{
    uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static int cmp_int(const void *a, const void *b)
{
    return *(const int *)a - *(const int *)b;
}

int tune_pick_random(int n, int k, uint64_t seed, int must, int *out)
{
    if (k >= n || k < 0) {
        for (int i = 0; i < n; i++)
            out[i] = i;
        return n;
    }
    int *perm = malloc(sizeof *perm * (size_t)(n > 0 ? n : 1));
    for (int i = 0; i < n; i++)
        perm[i] = i;
    uint64_t st = seed;
    for (int i = n - 1; i > 0; i--) {          /* Fisher-Yates */
        int j = (int)(mix(&st) % (uint64_t)(i + 1));
        int t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
    int m = 0, has_must = must < 0;
    for (int i = 0; i < k; i++) {
        out[m++] = perm[i];
        has_must |= perm[i] == must;
    }
    if (!has_must && m > 0)
        out[m - 1] = must;                     /* the default replaces the last pick */
    else if (!has_must)
        out[m++] = must;
    free(perm);
    qsort(out, (size_t)m, sizeof *out, cmp_int);
    return m;
}

int tune_halving_keep(const double *ms, int n, int keep, int *out)
{
    int m = 0;
    for (int i = 0; i < n; i++) {
        if (!(ms[i] > 0) || isinf(ms[i]))
            continue;
        int k = m++;                           /* insertion sort: by time, then index */
        while (k > 0 && ms[out[k - 1]] > ms[i])
            out[k] = out[k - 1], k--;
        out[k] = i;
    }
    return m < keep ? m : keep;
}

uint64_t tune_seed_of(const char *text, uint64_t seed)
{
    uint64_t h = 1469598103934665603ull ^ seed;
    for (const unsigned char *p = (const unsigned char *)text; *p; p++)
        h = (h ^ *p) * 1099511628211ull;
    return h;
}
