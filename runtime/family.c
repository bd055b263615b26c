/* runtime/family.c: the family table, runtime side (see family.h): one entry per kernel family */
#include "runtime/family.h"

#include <stdio.h>
#include <string.h>

#include "runtime/attn_launch.h"
#include "runtime/combine_launch.h"
#include "runtime/kda_launch.h"
#include "runtime/parts_launch.h"
#include "runtime/parts_plan.h"
#include "runtime/select.h"

/* ---- selection keys --------------------------------------------------------------------------- */

static const char *const gqa_class[] = {"family", "dtype", "hq", "hkv", "d", "causal",
                                         "window", "softcap", "sinks", "kv_dtype", "page_size",
                                         NULL};   /* features and paged K/V: optional */
static const char *const gqa_dist[] = {"b", "sq", "skv", NULL};
/* decode: Sq (x Hq / Hkv: the rows of a KV head's tile) decides the row tile, so a winner never crosses Sq (a Sq 4
 * winner's 16-row tile ran a Sq 8 shape 1.13-1.20x slower than its default, H200 2026-12-01) */
static const char *const gqa_decode_class[] = {"family", "dtype", "hq", "hkv", "d", "causal", "sq",
                                                "window", "softcap", "sinks", "kv_dtype", "page_size", NULL};
static const char *const decode_dist[] = {"b", "skv", NULL};
static const char *const parts_class[] = {"family", "dtype", "hq", "hkv", "parts", "value", "dv", "sq",
                                          "layers", "page_size", "causal", "kv_dtype", NULL};   /* kv_dtype: optional */
static const char *const kda_class[] = {"family", "h", "hv", "dk", "dv", NULL};
static const char *const kda_dist[] = {"n", "t", NULL};

/* ---- launch: the families' launch code through one signature ---------------------------------- */

static int attn_grid(const gen_kvset *vp, const void *p, int k, unsigned g[3]) { return rt_attn_grid(vp, p, k, g); }
static int attn_launch(const gen_kvset *vp, const void *p, rt_launch *out) { return rt_attn_launch(vp, p, out); }
static int combine_grid(const gen_kvset *vp, const void *p, int k, unsigned g[3]) { return rt_combine_grid(vp, p, k, g); }
static int combine_launch(const gen_kvset *vp, const void *p, rt_launch *out) { return rt_combine_launch(vp, p, out); }
static int parts_grid(const gen_kvset *vp, const void *p, int k, unsigned g[3]) { return rt_parts_grid(vp, p, k, g); }
static int parts_launch(const gen_kvset *vp, const void *p, rt_launch *out) { return rt_parts_launch(vp, p, out); }
static int kda_grid(const gen_kvset *vp, const void *p, int k, unsigned g[3]) { return rt_kda_grid(vp, p, k, g); }
static int kda_launch(const gen_kvset *vp, const void *p, rt_launch *out) { return rt_kda_launch(vp, p, out); }

/* ---- the table: one line per family, in rt_family_id order ------------------------------------ */

const rt_family rt_families[RT_FAM_COUNT] = {
    {RT_FAM_ATTN_PREFILL, "attn_prefill", "GQA attention prefill (packed or padded q, causal bottom-right)",
     RT_API_ATTN, 1, &rt_shape_gqa, rt_attn_desc_shape, gqa_class, gqa_dist, attn_launch, attn_grid},
    {RT_FAM_ATTN_DECODE, "attn_decode", "GQA attention decode (packed G x Sq tiles, split-KV with a combine)",
     RT_API_ATTN, 1, &rt_shape_gqa_decode, rt_attn_desc_shape, gqa_decode_class, decode_dist, attn_launch, attn_grid},
    {RT_FAM_ATTN_NAIVE, "attn_naive", "GQA attention reference kernel (fp32 math) of the tuner's gates",
     RT_API_NONE, 0, &rt_shape_gqa_naive, NULL, NULL, NULL, attn_launch, attn_grid},
    {RT_FAM_ATTN_COMBINE, "attn_combine", "split-KV combine of normalised partials and their LSE",
     RT_API_NONE, 0, &rt_shape_combine, NULL, NULL, NULL, combine_launch, combine_grid},
    {RT_FAM_PARTS_DECODE, "attn_parts_decode", "split-score decode (absorbed MLA, base + per-layer delta caches)",
     RT_API_PARTS, 1, &rt_shape_parts, rt_parts_desc_shape, parts_class, decode_dist, parts_launch, parts_grid},
    {RT_FAM_KDA_PREFILL, "kda_prefill", "Kimi Delta Attention, chunked prefill", RT_API_KDA, 1, &rt_shape_kda,
     rt_kda_desc_shape, kda_class, kda_dist, kda_launch, kda_grid},
    {RT_FAM_KDA_DECODE, "kda_decode", "Kimi Delta Attention, one token per sequence", RT_API_KDA, 1, &rt_shape_kda,
     rt_kda_desc_shape, kda_class, kda_dist, kda_launch, kda_grid},
    {RT_FAM_KDA_NAIVE, "kda_naive", "Kimi Delta Attention reference kernel (the token recurrence)", RT_API_NONE, 0,
     &rt_shape_kda_naive, NULL, NULL, NULL, kda_launch, kda_grid},
    {RT_FAM_CEIL_GEMM, "ceil_gemm", "bf16 GEMM of kforge doctor --measure's ceiling", RT_API_NONE, 0, &rt_shape_gemm,
     NULL, NULL, NULL, NULL, NULL},
};

/* ---- look-ups ------------------------------------------------------------------------------- */

const rt_family *rt_family_find(const char *name)
{
    for (int i = 0; name && i < RT_FAM_COUNT; i++)
        if (!strcmp(rt_families[i].name, name))
            return &rt_families[i];
    return NULL;
}

const rt_family *rt_family_of(const gen_kvset *kv) { return kv ? rt_family_find(gen_kv_str(kv, "family")) : NULL; }

int rt_family_is(const gen_kvset *kv, rt_family_id id) { return rt_family_of(kv) == &rt_families[id]; }

const rt_family *rt_family_for_desc(rt_api api, const void *desc, gen_kvset *shape)
{
    for (int i = 0; i < RT_FAM_COUNT; i++)
        if (rt_families[i].api == api && rt_families[i].desc_shape) {
            rt_families[i].desc_shape(desc, shape);
            return rt_family_of(shape);
        }
    return NULL;
}

void rt_family_list(int tuned_only, char *buf, size_t n)
{
    int m = 0, k = 0;
    for (int i = 0; i < RT_FAM_COUNT; i++)
        m += !tuned_only || rt_families[i].tuned;
    size_t len = 0;
    buf[0] = 0;
    for (int i = 0; i < RT_FAM_COUNT && len < n; i++) {
        if (tuned_only && !rt_families[i].tuned)
            continue;
        k++;
        len += (size_t)snprintf(buf + len, n - len, "%s%s", k == 1 ? "" : k == m ? " and " : ", ", rt_families[i].name);
    }
}
