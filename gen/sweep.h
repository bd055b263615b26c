/* gen/sweep.h: sweep files: named sets of shapes (templates/sweeps/<name>.lua) */
#ifndef KF_GEN_SWEEP_H
#define KF_GEN_SWEEP_H

#include "gen/kv.h"
#include "gen/template.h"

#define GEN_SWEEP_MAX 1024

typedef struct gen_sweep {
    char name[64];
    char doc[256];
    int n;
    gen_kvset *shapes;     /* each has "family" (string) and the family's shape fields */
} gen_sweep;

/* Loads templates/sweeps/<name>.lua in the host's sandbox. A sweep file returns
 * { doc = "...", shapes = { { family = "attn_decode", dtype = "bf16", ... }, ... } }.
 * Returns 0, or -1 with the host's message. */
int gen_sweep_load(gen_host *h, const char *name, gen_sweep *out);
void gen_sweep_free(gen_sweep *s);
/* Calls fn with each sweep name, sorted. */
int gen_sweep_names(gen_host *h, int (*fn)(const char *name, void *arg), void *arg);
/* Canonical shape key of a shape (without "family"): "b1.causal0.d128.dtype-bf16..." */
int gen_shape_key(const gen_kvset *shape, char *buf, size_t n);

#endif
