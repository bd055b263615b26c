/* tuner/tune_split.h: splitting a sweep's shapes among shards and GPU workers (pure) */
#ifndef KF_TUNER_TUNE_SPLIT_H
#define KF_TUNER_TUNE_SPLIT_H

#include <stddef.h>

#include "core/err.h"

/* "i/n" with 0 <= i < n: 0, or -1 with *e set (KF_ERR_ARG). */
int tune_parse_shard(const char *text, int *index, int *count, core_err *e);
/* "0,1,3": distinct ordinals 0..255, at most max of them. Returns the count, or -1 with *e set (KF_ERR_ARG). */
int tune_parse_devices(const char *text, int *ordinals, int max, core_err *e);

/*
 * Deterministic split of n items (estimated cost each) into parts: longest processing
 * time first (items by cost, descending, ties by index), each to the part with the
 * least total so far (ties: the lower part). owner[i] gets the part of item i. Every
 * process that calls it with the same input gets the same answer, so shards and
 * workers need not talk to each other.
 */
void tune_split(const double *cost, int n, int parts, int *owner);

/* Workers of one GPU model share its shapes; models each get every shape. Given the
 * model name of each worker, *rank gets worker w's position among the workers of its
 * model and *peers their count. */
void tune_worker_rank(const char *const *models, int n_workers, int w, int *rank, int *peers);

#endif
