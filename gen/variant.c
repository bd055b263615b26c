/* gen/variant.c: a variant of a shape, resolved once (see variant.h) */
#include "gen/variant.h"

#include <stdio.h>

int gen_variant_check(gen_tmpl *t, const gen_kvset *fixed, const gen_kvset *params, const gen_device *dev, int checks,
                      char *why, size_t whyn)
{
    if (whyn)
        why[0] = 0;
    if ((checks & GEN_RESOLVE_SPACE) && gen_tmpl_check_params(t, params))
        return -1;
    if (!(checks & GEN_RESOLVE_VALID))
        return 0;
    int ok = gen_tmpl_valid(t, fixed, params, dev, why, whyn);
    return ok < 0 ? -1 : ok ? 0 : 1;
}

int gen_variant_resolve(gen_tmpl *t, const gen_kvset *shape, const gen_device *dev, const gen_kvset *over, int checks,
                        gen_kvset *fixed, gen_kvset *params, char *why, size_t whyn)
{
    if (whyn)
        why[0] = 0;
    if (gen_tmpl_fixed(t, shape, fixed) || gen_tmpl_default(t, shape, dev, params))
        return -1;
    if (over)
        gen_kv_merge(params, over);
    return gen_variant_check(t, fixed, params, dev, checks, why, whyn);
}
