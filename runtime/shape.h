/* runtime/shape.h: the one check of a family's shape that the C API's descriptions and the CLI's --shape strings go through */
#ifndef KF_RT_SHAPE_H
#define KF_RT_SHAPE_H

#include <stddef.h>

#include "core/err.h"
#include "gen/kv.h"
#include "runtime/kforge.h"
#include "templates/common/attn_params.h"   /* before parts_params.h: kf_tmap */
#include "templates/common/parts_params.h"

/* How messages name a field. */
typedef enum {
    RT_NAMES_SHAPE = 0,   /* the shape's keys: "hq (30) must be a multiple of hkv (8)" (kforge gen / compile) */
    RT_NAMES_DESC = 1,    /* the description's fields: "desc.hq (30) must be a multiple of desc.hkv (8)" (the C API) */
} rt_names;

/* A field of a family's shape: its key, its name in the C API's description, its type. */
typedef struct rt_shape_field {
    const char *key;
    const char *desc;
    int is_str;
    int optional;              /* may be left out (a model feature that is off) */
} rt_shape_field;

/* The rules of a family's shape (an entry of the family table points at one). */
typedef struct rt_shape_rules rt_shape_rules;
struct rt_shape_rules {
    const rt_shape_field *fields;  /* NULL-key terminated */
    kf_status (*check)(const rt_shape_rules *r, const gen_kvset *s, rt_names names, core_err *e);
    int reference;                 /* a reference kernel (attn_naive, kda_naive): any head dim */
    int max_sq;                    /* query rows per sequence at most (decode: 16); 0: no limit */
};
extern const rt_shape_rules rt_shape_gqa, rt_shape_gqa_decode, rt_shape_gqa_naive, rt_shape_combine, rt_shape_parts,
    rt_shape_kda, rt_shape_kda_naive, rt_shape_gemm;

/*
 * Checks shape as a shape of family (NULL: shape's "family"): for the families of the family table
 * (runtime/family.h) by the entry's rules: every field present with its type, each integer within the range of the C
 * API's int field, and the rules between fields (hq a multiple of hkv, decode Sq 1..16, head dims,
 * b * sq rows within an int, ...); for other families every integer in 0..INT_MAX. Keys other than
 * "family" must be in declared (the template's shape fields) when declared is given, else in the
 * family's own list. A field missing from shape is refused, except one that declared lists: that is left
 * to the template's own check (gen_tmpl_fixed), which names it. KF_OK, or KF_ERR_ARG / KF_ERR_UNSUPPORTED
 * with a message in *e naming the key (or description field) and its value. Pure.
 */
kf_status rt_shape_check(const char *family, const gen_kvset *shape, const gen_kvset *declared, rt_names names,
                         core_err *e);

/* "latent512_rope64" -> dims {512, 64}: the number of parts (1..KF_PARTS_MAXK), or -1 when malformed. */
int rt_parts_parse(const char *s, int dims[KF_PARTS_MAXK]);

/* Checked arithmetic on sizes, strides and counts: 0, or 1 when the result does not fit (*out unset). */
static inline int rt_mul_ll(long long a, long long b, long long *out) { return __builtin_mul_overflow(a, b, out); }
static inline int rt_add_ll(long long a, long long b, long long *out) { return __builtin_add_overflow(a, b, out); }

/* Elements a strided tensor spans, 1 + sum over dims of (extent - 1) * stride (0 when an extent is 0);
 * -1 when it does not fit in 63 bits. Extents and strides >= 0. */
long long rt_span(int ndim, const long long *extent, const long long *stride);

#endif
