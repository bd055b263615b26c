/* runtime/family.h: the family table, runtime side: one entry per kernel family, iterated by the runtime, the tuner and the CLI */
#ifndef KF_RT_FAMILY_H
#define KF_RT_FAMILY_H

#include <stddef.h>

#include "gen/kv.h"
#include "runtime/shape.h"

/*
 * A kernel family is one registered unit (git's commands[], ggml-cuda's one selection function).
 * The registry is two tables keyed by one index, rt_family_id:
 *  - this one (runtime/family.c), in both libraries: what a plan needs, and nothing that needs Lua,
 *    NVRTC, SQLite's tuner tables or a CPU reference: the names and doc, the C API that serves the
 *    family, the shape built from a description, the rules of its shape (a description's and a
 *    --shape string's), the selection keys, the one launch function that answers support, workspace
 *    and launch count for a variant and a call, and the grid of each kernel;
 *  - tuner/tune_family.c, in the tuner and the CLI only: the work figure, the tuner runner (make
 *    inputs, gate, time, free, with its per-shape state), the CPU reference, the `kforge run` report.
 * Two tables rather than one with function pointers into the tuner, so that libkforge_rt links none
 * of the tuner: the tuner's table lists its entries in the same order and checks at start-up that
 * each names the family of the same index here (tune_family_check; tests/cpu/test_tune asserts it).
 * A new family adds one line to each table (templates/README.md, "Adding a family").
 * Outside the two tables no code compares a family name: it looks the entry up (rt_family_find,
 * rt_family_of) and reads its fields, or compares entries.
 */
typedef enum {
    RT_FAM_ATTN_PREFILL = 0,
    RT_FAM_ATTN_DECODE,
    RT_FAM_ATTN_NAIVE,
    RT_FAM_ATTN_COMBINE,
    RT_FAM_PARTS_DECODE,
    RT_FAM_KDA_PREFILL,
    RT_FAM_KDA_DECODE,
    RT_FAM_KDA_NAIVE,
    RT_FAM_CEIL_GEMM,
    RT_FAM_COUNT
} rt_family_id;

/* The C API a family's plans come from (its description and tensors). */
typedef enum { RT_API_NONE = 0, RT_API_ATTN, RT_API_PARTS, RT_API_KDA } rt_api;

/* What a call of a variant launches, from the variant and the call's params alone. */
typedef struct rt_launch {
    int n;             /* kernels a call launches, in module order (a binary may hold more: the
                        * combine kernel of attn_decode serves its split variants only) */
    int kernels;       /* kernels of the module a call uses (attn_parts_decode launches its combine
                        * kernel once per layer: n launches of 2 kernels) */
    size_t ws_bytes;   /* workspace the call needs; SIZE_MAX when it does not fit (the caller refuses) */
} rt_launch;

typedef struct rt_family {
    rt_family_id id;
    const char *name;                   /* the template's family (templates/<name>.lua) */
    const char *doc;                    /* one line */
    rt_api api;                         /* RT_API_NONE: a helper no description asks for */
    int tuned;                          /* `kforge tune` times it (it has a tuner runner) */
    const rt_shape_rules *shape;        /* the rules of its shape (runtime/shape.c) */
    /* the shape of a description of api (a kf_attn_desc, an rt_parts_info, a kf_kda_desc), its
     * "family" the one of this API the description asks for (kind, mode); NULL for RT_API_NONE */
    void (*desc_shape)(const void *desc, gen_kvset *shape);
    /* selection: the nearest winner has the same class_keys and the least log distance over
     * dist_keys (NULL-terminated; NULL for a family no plan selects) */
    const char *const *class_keys;
    const char *const *dist_keys;
    /* Support, workspace and launch count of variant vp for a call of params (the family's
     * kf_*_params): 0, or -1 when the variant cannot serve it (a value missing from vp, params
     * inconsistent with it). The runtime's plans and runs and the tuner's runners call it alone,
     * so the three answers never disagree. NULL: no launch code (ceil_gemm). */
    int (*launch)(const gen_kvset *vp, const void *params, rt_launch *out);
    /* The grid of kernel k of a call: 0, or -1 (no such kernel, a value missing or out of range). */
    int (*grid)(const gen_kvset *vp, const void *params, int k, unsigned grid[3]);
} rt_family;

extern const rt_family rt_families[RT_FAM_COUNT];

/* The entry named name, or NULL (a family of a template folder that the table does not list). */
const rt_family *rt_family_find(const char *name);
/* The entry of kv's "family", or NULL. */
const rt_family *rt_family_of(const gen_kvset *kv);
/* Whether kv's "family" is family id. */
int rt_family_is(const gen_kvset *kv, rt_family_id id);
/* The name of family id (static text). */
static inline const char *rt_family_name(rt_family_id id) { return rt_families[id].name; }

/* The family of api that desc asks for, with its shape in shape (desc_shape of the API's entries). */
const rt_family *rt_family_for_desc(rt_api api, const void *desc, gen_kvset *shape);

/* "a, b and c": the names of the families with tuned set (or all, tuned_only 0), for messages. */
void rt_family_list(int tuned_only, char *buf, size_t n);

#endif
