/* tuner/tune_enum.h: the variants to tune for one shape on one device, and the budget strategies over them */
#ifndef KF_TUNER_TUNE_ENUM_H
#define KF_TUNER_TUNE_ENUM_H

#include <stdint.h>

#include "gen/template.h"

typedef struct tune_variant {
    gen_kvset params;        /* the variant's params (runtime params included) */
    char key[512];           /* variant key (names the measurement) */
    char full[1024];         /* fixed values + params, "name=value,...": what a winner stores */
    int is_default;          /* the template's default for the shape */
    int job;                 /* index of its binary's build job (the sweep fills it) */
} tune_variant;

typedef struct tune_space {
    gen_kvset fixed;
    tune_variant *v;         /* valid variants, in enumeration order (default included) */
    int n, cap;
    int points;              /* size of the cartesian product */
    int pruned;              /* points valid() refused for the device */
    int idefault;            /* index of the default in v */
    int default_added;       /* 1: default() gave a point enumeration did not list (kept anyway) */
} tune_space;

/* Every valid variant of t's space for shape on dev (dev's limits as valid() sees
 * them: smem_optin, regs_sm, sms, ...), plus the default. 0, or -1 with the host's message. */
int tune_enumerate(gen_tmpl *t, const gen_kvset *shape, const gen_device *dev, tune_space *out);
void tune_space_free(tune_space *s);

/* How a budget smaller than the space is spent. */
enum {
    TUNE_STRAT_ALL = 0,      /* exhaustive (the default, and any budget >= the space) */
    TUNE_STRAT_RANDOM = 1,   /* a seeded random subset of `budget` variants, the default included */
    TUNE_STRAT_HALVING = 2,  /* successive halving: screen all on few samples, keep the best half,
                                re-screen with twice the samples, ... until <= budget remain; they
                                (and the default) get full timings */
};
int tune_strategy_parse(const char *s);     /* -1 when unknown */
const char *tune_strategy_str(int s);

/* Samples of screening round r (0, 1, ...): 5, 10, then capped below TUNE_MIN_SAMPLES. */
int tune_screen_samples(int round);

/* A seeded random subset: k of n indices (all when k >= n), `must` always included
 * (-1: none), ascending. Returns the count written to out (n entries of room). */
int tune_pick_random(int n, int k, uint64_t seed, int must, int *out);
/* The indices of the `keep` smallest of ms[0..n) (NaN and <= 0 never kept), ascending
 * by time, ties by index. Returns the count. */
int tune_halving_keep(const double *ms, int n, int keep, int *out);
/* A 64-bit seed of a text (FNV-1a), mixed with seed: per-shape random subsets. */
uint64_t tune_seed_of(const char *text, uint64_t seed);

#endif
