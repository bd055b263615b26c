/* runtime/parts_tmap.c: the tensor maps of attn_parts_decode impl=wgmma_tma and its kernel's arguments (see parts_tmap.h) */
#include "runtime/parts_tmap.h"
#include "runtime/cuda.h"
#include "runtime/kforge.h"
#include "runtime/shape.h"
#include "runtime/tmap.h"

#include <stdio.h>
#include <string.h>

#define TMAP_PAGES (1ll << 31)   /* every int32 page index */

int rt_parts_tma(const gen_kvset *vp)
{
    const char *impl = gen_kv_str(vp, "impl");
    return impl && strcmp(impl, "wgmma_tma") == 0;
}

int rt_parts_tmaps(const gen_kvset *vp, const kf_parts_params *p, kf_parts_tmaps *tm, core_err *e)
{
    memset(tm, 0, sizeof *tm);
    int dims[KF_PARTS_MAXK];
    const char *parts = gen_kv_str(vp, "parts");
    const int nk = parts ? rt_parts_parse(parts, dims) : -1;
    const long long ps = gen_kv_int(vp, "ps", -1);
    if (nk < 1 || ps < 0) {
        return core_err_set(e, KF_ERR_UNSUPPORTED, "impl wgmma_tma: the variant names no key parts or page size (parts '%s')",
                            parts ? parts : "");
    }
    const rt_cu *cu = NULL;
    int st = 0;
    for (int pass = 0; pass < 2 && !st; pass++) {   /* the layout checks first: they need no driver */
        if (pass == 1 && !(cu = rt_tmap_driver("wgmma_ksl", &st, e)))
            return st;
        for (int i = 0; i < nk && !st; i++) {
            char name[16];
            snprintf(name, sizeof name, "k[0][%d]", i);
            const kf_parts_tensor *c = &p->c[i];
            st = rt_tmap_encode(cu, &tm->c[i], name, c->p, dims[i], ps ? ps : p->skv, p->hkv, ps ? TMAP_PAGES : p->b,
                                c->ss, c->sh, c->sb, 64, e);
        }
    }
    return st;
}

int rt_parts_args(const gen_kvset *vp, const kf_parts_params *p, kf_parts_tmaps *tm, void *args[2], core_err *e)
{
    args[0] = (void *)p;
    args[1] = tm;
    return rt_parts_tma(vp) ? rt_parts_tmaps(vp, p, tm, e) : 0;
}
