/* gen/variant.h: a variant of a shape, resolved once: fixed values, the default's params, overrides, the checks */
#ifndef KF_GEN_VARIANT_H
#define KF_GEN_VARIANT_H

#include <stddef.h>

#include "gen/kv.h"
#include "gen/template.h"

/* What gen_variant_resolve checks of the result. */
enum {
    GEN_RESOLVE_SPACE = 1,   /* every param is one of the template's, with a value its space lists */
    GEN_RESOLVE_VALID = 2,   /* valid(p, f, dev) accepts it */
};

/*
 * The one resolution of a variant of shape for dev: fixed = fixed(shape); params = default(shape, dev)
 * with over merged on top (over NULL: none); then the checks `checks` asks for (GEN_RESOLVE_*), the
 * space before valid. Returns 0, 1 when a check refuses (why says why: "the template's message"),
 * or -1 on an error of the template or the host (gen_host_errmsg). Every caller that turns a shape
 * into a variant (kforge gen, run and compile, the runtime's JIT default, the tuner's enumeration and
 * its naive reference) goes through it.
 */
int gen_variant_resolve(gen_tmpl *t, const gen_kvset *shape, const gen_device *dev, const gen_kvset *over, int checks,
                        gen_kvset *fixed, gen_kvset *params, char *why, size_t whyn);

/* The checks alone, of a variant given as fixed values and params (the runtime's JIT of a tuned
 * winner): 0, 1 with why, or -1 (gen_host_errmsg). */
int gen_variant_check(gen_tmpl *t, const gen_kvset *fixed, const gen_kvset *params, const gen_device *dev, int checks,
                      char *why, size_t whyn);

#endif
