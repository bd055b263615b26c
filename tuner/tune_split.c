/* tuner/tune_split.c: splitting a sweep's shapes among shards and GPU workers (pure) */
#include "tuner/tune_split.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int tune_parse_shard(const char *text, int *index, int *count, core_err *e)
{
    char *end;
    long i = strtol(text, &end, 10);
    if (end == text || *end != '/') {
        core_err_set(e, KF_ERR_ARG, "--shard wants i/n (e.g. 0/4), got '%s'", text);
        return -1;
    }
    const char *q = end + 1;
    long n = strtol(q, &end, 10);
    if (end == q || *end || n < 1 || n > 4096 || i < 0 || i >= n) {
        core_err_set(e, KF_ERR_ARG, "--shard wants i/n with 0 <= i < n, got '%s'", text);
        return -1;
    }
    *index = (int)i;
    *count = (int)n;
    return 0;
}

int tune_parse_devices(const char *text, int *ordinals, int max, core_err *e)
{
    int n = 0;
    const char *p = text;
    while (*p) {
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p || v < 0 || v > 255 || (*end && *end != ',')) {
            core_err_set(e, KF_ERR_ARG, "--devices wants GPU ordinals like 0,1, got '%s'", text);
            return -1;
        }
        for (int k = 0; k < n; k++)
            if (ordinals[k] == v) {
                core_err_set(e, KF_ERR_ARG, "--devices lists GPU %ld twice in '%s'", v, text);
                return -1;
            }
        if (n == max) {
            core_err_set(e, KF_ERR_ARG, "--devices lists more than %d GPUs", max);
            return -1;
        }
        ordinals[n++] = (int)v;
        p = *end ? end + 1 : end;
    }
    if (n == 0)
        core_err_set(e, KF_ERR_ARG, "--devices is empty");
    return n ? n : -1;
}

struct item {
    double cost;
    int index;
};

static int by_cost_desc(const void *a, const void *b)
{
    const struct item *x = a, *y = b;
    if (x->cost != y->cost)
        return x->cost < y->cost ? 1 : -1;
    return x->index - y->index;
}

void tune_split(const double *cost, int n, int parts, int *owner)
{
    if (parts < 1)
        parts = 1;
    struct item *it = malloc(sizeof *it * (size_t)(n > 0 ? n : 1));
    double *load = calloc((size_t)parts, sizeof *load);
    for (int i = 0; i < n; i++)
        it[i] = (struct item){cost[i] > 0 ? cost[i] : 0, i};
    qsort(it, (size_t)n, sizeof *it, by_cost_desc);
    for (int k = 0; k < n; k++) {
        int best = 0;
        for (int p = 1; p < parts; p++)
            if (load[p] < load[best])
                best = p;
        owner[it[k].index] = best;
        /* a zero-cost item still counts, so equal items spread round-robin */
        load[best] += it[k].cost + 1e-9;
    }
    free(it);
    free(load);
}

void tune_worker_rank(const char *const *models, int n_workers, int w, int *rank, int *peers)
{
    *rank = 0;
    *peers = 0;
    for (int i = 0; i < n_workers; i++) {
        if (strcmp(models[i], models[w]))
            continue;
        if (i < w)
            (*rank)++;
        (*peers)++;
    }
}
