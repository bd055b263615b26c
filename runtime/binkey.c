/* runtime/binkey.c: which binary a chosen variant runs (a winner's timed cubin, or its params under the current templates) */
#include "runtime/binkey.h"

#include <stdio.h>
#include <string.h>

int rt_binary_keys(rt_jit *jit, const rt_choice *ch, const rt_devinfo *dev, char *variant, size_t vn,
                   char *key, size_t kn, core_err *e)
{
    const rt_winner *w = ch->winner;
    if (!w) {
        if (!jit)
            return core_err_fail(e, KF_ERR_NOT_TUNED, "no winner and no generator");
        return rt_jit_keys(jit, &ch->vp, dev, variant, vn, key, kn, e) ? -1 : 0;
    }
    snprintf(variant, vn, "%s", w->variant);
    snprintf(key, kn, "%s", w->cache_key);
    if (!jit || w->from_bundle)
        return 0;
    char v2[512], k2[600];   /* the current template refuses the winner's params: its own binary, no error */
    if (rt_jit_keys(jit, &ch->vp, dev, v2, sizeof v2, k2, sizeof k2, NULL) || !strcmp(k2, key))
        return 0;
    snprintf(variant, vn, "%s", v2);
    snprintf(key, kn, "%s", k2);
    return 1;
}
