/* runtime/parts_tmap.c: the tensor maps of attn_parts_decode impl=wgmma_tma and wg8 and its kernel's arguments (see parts_tmap.h) */
#include "runtime/parts_tmap.h"
#include "runtime/cuda.h"
#include "runtime/kforge.h"
#include "runtime/shape.h"
#include "runtime/tmap.h"

#include <stdio.h>
#include <string.h>

#define TMAP_PAGES (1ll << 31)   /* every int32 page index */

static int is_wg8(const gen_kvset *vp)
{
    const char *impl = gen_kv_str(vp, "impl");
    return impl && strcmp(impl, "wg8") == 0;
}

int rt_parts_tma(const gen_kvset *vp)
{
    const char *impl = gen_kv_str(vp, "impl");
    return impl && (strcmp(impl, "wgmma_tma") == 0 || strcmp(impl, "wg8") == 0);
}

/* impl wg8: one UINT8 map of the whole e4m3 row when the key parts are one tensor, else none (kv8 0: the kernel's
 * cp.async path, the same results); a layout no map describes, or a driver without maps, takes that path too */
static int parts_tmap8(const kf_parts_params *p, const int *dims, int nk, long long ps, kf_parts_tmaps *tm, core_err *e)
{
    int w = dims[0];
    for (int i = 1; i < nk; i++) {
        const kf_parts_tensor *a = &p->c[0], *c = &p->c[i];
        if ((const unsigned char *)c->p != (const unsigned char *)a->p + w || c->sb != a->sb || c->ss != a->ss
            || c->sh != a->sh)
            return 0;
        w += dims[i];
    }
    const kf_parts_tensor *c = &p->c[0];
    core_err le = CORE_ERR_INIT;
    if (rt_tmap_encode_es(NULL, &tm->c[0], "impl wg8", "k[0][0]", c->p, 1, w, ps ? ps : p->skv, p->hkv,
                          ps ? TMAP_PAGES : p->b, c->ss, c->sh, c->sb, 64, &le))
        return 0;
    const rt_cu *cu = rt_cuda(&le);
    if (!cu || !cu->TensorMapEncodeTiled)
        return 0;
    const int st = rt_tmap_encode_es(cu, &tm->c[0], "impl wg8", "k[0][0]", c->p, 1, w, ps ? ps : p->skv, p->hkv,
                           ps ? TMAP_PAGES : p->b, c->ss, c->sh, c->sb, 64, e);
    tm->kv8 = st == 0;
    return st;
}

int rt_parts_tmaps(const gen_kvset *vp, const kf_parts_params *p, kf_parts_tmaps *tm, core_err *e)
{
    memset(tm, 0, sizeof *tm);
    int dims[KF_PARTS_MAXK];
    const char *parts = gen_kv_str(vp, "parts");
    const int nk = parts ? rt_parts_parse(parts, dims) : -1;
    const long long ps = gen_kv_int(vp, "ps", -1);
    if (nk < 1 || ps < 0) {
        return core_err_set(e, KF_ERR_UNSUPPORTED, "impl %s: the variant names no key parts or page size (parts '%s')",
                            is_wg8(vp) ? "wg8" : "wgmma_tma", parts ? parts : "");
    }
    if (is_wg8(vp))
        return parts_tmap8(p, dims, nk, ps, tm, e);
    const rt_cu *cu = NULL;
    int st = 0;
    for (int pass = 0; pass < 2 && !st; pass++) {   /* the layout checks first: they need no driver */
        if (pass == 1 && !(cu = rt_tmap_driver("wgmma_ksl", &st, e)))
            return st;
        for (int i = 0; i < nk && !st; i++) {
            char name[24];   /* "k[0][" + any int + "]" */
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
