/* runtime/tmap.c: one tiled tensor map of 16-bit or 8-bit elements, checked and encoded on the host (see tmap.h) */
#include "runtime/tmap.h"
#include "runtime/kforge.h"

#include <assert.h>
#include <stdint.h>
#include <stdio.h>

#define TMAP_STRIDE_MAX (1ll << 40)

int rt_tmap_encode_es(const rt_cu *cu, kf_tmap *m, const char *impl, const char *name, const void *base, int esize, int d,
                      long long rows, long long heads, long long batch, long long ss, long long sh, long long sb,
                      int box_rows, core_err *e)
{
    assert(esize == 1 || esize == 2);
    if ((uintptr_t)base & 15u) {
        return core_err_set(e, KF_ERR_UNSUPPORTED,
                            "%s: tensor %s = %p is not 16-byte aligned (a tensor map needs it)", impl, name, base);
    }
    const long long dm[4] = {d, rows < 1 ? 1 : rows, heads, batch < 1 ? 1 : batch};
    long long st[3] = {ss, sh, sb};
    /* a dimension of size 1 is never stepped: its stride is whatever the layout says (0 for a packed batch);
     * give the map the dense one so that no unused stride is refused */
    for (int i = 0; i < 3; i++)
        if (dm[i + 1] == 1)
            st[i] = i == 0 ? d : st[i - 1] * dm[i];
    static const char *const sname[3] = {"sequence", "head", "batch"};
    unsigned long long strides[3];
    for (int i = 0; i < 3; i++) {
        long long bytes = st[i] * esize;
        if (st[i] < 0 || bytes % 16 || bytes >= TMAP_STRIDE_MAX) {
            return core_err_set(e, KF_ERR_UNSUPPORTED,
                                "%s: tensor %s's %s stride %lld elements (%lld bytes) is not a multiple of "
                                "16 bytes below 2^40: a tensor map cannot describe it", impl, name, sname[i], st[i], bytes);
        }
        strides[i] = (unsigned long long)bytes;
    }
    unsigned long long dims[4];
    for (int i = 0; i < 4; i++) {
        if (dm[i] < 1 || dm[i] > (1ll << 32)) {
            return core_err_set(e, KF_ERR_UNSUPPORTED,
                                "%s: tensor %s's dimension %d is %lld, outside 1..2^32", impl, name, i, dm[i]);
        }
        dims[i] = (unsigned long long)dm[i];
    }
    if (!cu)
        return 0;
    const unsigned box[4] = {128u / (unsigned)esize, (unsigned)box_rows, 1, 1}, es[4] = {1, 1, 1, 1};
    CUresult r = cu->TensorMapEncodeTiled(m, esize == 1 ? RT_CU_TMAP_UINT8 : RT_CU_TMAP_UINT16, 4, (void *)base, dims, strides, box, es,
                                          RT_CU_TMAP_INTERLEAVE_NONE, RT_CU_TMAP_SWIZZLE_128B, RT_CU_TMAP_L2_128B,
                                          RT_CU_TMAP_OOB_ZERO);
    if (r) {
        char es[128];
        rt_cuda_errstr(r, es, sizeof es);
        return core_err_set(e, KF_ERR_CUDA,
                            "%s: cuTensorMapEncodeTiled for tensor %s (dims %llu x %llu x %llu x %llu, "
                            "strides %llu %llu %llu bytes) failed: %s", impl, name, dims[0], dims[1], dims[2], dims[3], strides[0],
                            strides[1], strides[2], es);
    }
    return 0;
}

int rt_tmap_encode(const rt_cu *cu, kf_tmap *m, const char *name, const void *base, int d, long long rows, long long heads,
                   long long batch, long long ss, long long sh, long long sb, int box_rows, core_err *e)
{
    return rt_tmap_encode_es(cu, m, "impl wgmma_tma", name, base, 2, d, rows, heads, batch, ss, sh, sb, box_rows, e);
}

const rt_cu *rt_tmap_driver(const char *fallback, int *st, core_err *e)
{
    const rt_cu *cu = rt_cuda(e);
    if (!cu) {
        *st = KF_ERR_CUDA;
        return NULL;
    }
    if (!cu->TensorMapEncodeTiled) {
        *st = core_err_set(e, KF_ERR_UNSUPPORTED,
                           "impl wgmma_tma: the CUDA driver lacks cuTensorMapEncodeTiled (driver 12.0 or later): use "
                           "impl %s", fallback);
        return NULL;
    }
    return cu;
}
