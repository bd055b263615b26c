/* tuner/parts_run.c: the tuner's split-score decode runner (attn_parts_decode): a correctness gate against tuner/ref_parts and L2-flushed timing */
#include "tuner/parts_run.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/family.h"
#include "runtime/parts_launch.h"
#include "runtime/parts_tmap.h"
#include "tuner/check.h"
#include "tuner/ref_parts.h"
#include "tuner/tune_ilv.h"

#define NCACHE KF_PARTS_MAXC
#define GATE_B 3

/* One problem on the device (and, for the gate, on the host): caches in tile order, queries, outputs. */
typedef struct prob {
    int b, skv, npages, max_pages;
    int lens[GATE_B];
    int *bt;                       /* host [b, max_pages] (paged) */
    int ncache;
    int cdim[NCACHE];
    int joint;                     /* the caches side by side in one row a token (the absorbed layout, one layer):
                                    * cache 0 owns the buffers, cache c > 0 is a view coff[c] columns in */
    int coff[NCACHE], rw;          /* a cache's first column in the row; the row's columns (one head) */
    unsigned char *hc[NCACHE];     /* host caches: 16-bit values, or e4m3 bytes (FP8) */
    uint16_t *hq[KF_PARTS_MAXL][KF_PARTS_MAXK];
    size_t nc[NCACHE], nq;         /* elements */
    float *hs;                     /* FP8: host per-token scales [rows, hkv] (NaN past every length) */
    size_t ns;
    CUdeviceptr dc[NCACHE], dq[KF_PARTS_MAXL][KF_PARTS_MAXK], dout[KF_PARTS_MAXL], dlse[KF_PARTS_MAXL], ds;
    CUdeviceptr dbt, dlen, dws;
    size_t ws_bytes;
    kf_parts_params p;
} prob;

/* Sustained timing: a copy of the timing case's caches and queries. */
typedef struct pset {
    CUdeviceptr dc[NCACHE], dq[KF_PARTS_MAXL][KF_PARTS_MAXK], ds;
} pset;

struct tune_parts {
    check_dtype dt;
    int b, sq, skv, hq, hkv, nk, dims[KF_PARTS_MAXK], separate, dv, layers, ps, causal;
    int fp8;                       /* kv_dtype e4m3: the caches are e4m3 bytes with per-token fp32 scales */
    size_t esz;                    /* bytes of a cache element: 2, or 1 (FP8) */
    double scale;
    int time_ready;
    prob time;
    pset *tset;                    /* [TUNE_ROTATE_MAX_SETS] (set 0: time's buffers), or NULL */
    int tsets;
    /* The gate case, one draw per shape and run: made and its reference computed at the first gate,
     * then every variant of the shape is gated on it (gate_build) */
    uint64_t gate_seed;            /* drawn at the first gate; 0: not yet */
    int gate_ready;                /* gate, gate_ro and gate_rlr are complete */
    prob gate;                     /* host inputs kept: re-uploaded before every variant */
    double *gate_ro, *gate_rlr;    /* the fp64 reference per layer: o [L][nq * dv], lse [L][b, hq, sq] */
};

static int parse_parts(const char *s, int dims[KF_PARTS_MAXK])
{
    int n = 0;
    while (s && *s) {
        if (n == KF_PARTS_MAXK || *s < 'a' || *s > 'z')
            return -1;
        while (*s >= 'a' && *s <= 'z')
            s++;
        if (*s < '0' || *s > '9')
            return -1;
        dims[n++] = (int)strtol(s, (char **)&s, 10);
        if (*s == '_')
            s++;
    }
    return n;
}

tune_parts *tune_parts_new(const gen_kvset *shape, core_err *e)
{
    tune_parts *k = calloc(1, sizeof *k);
    if (!k) {
        core_err_set(e, KF_ERR_NOMEM, "out of memory");
        return NULL;
    }
    const char *dt = gen_kv_str(shape, "dtype"), *parts = gen_kv_str(shape, "parts"), *value = gen_kv_str(shape, "value");
    k->dt = dt && !strcmp(dt, "fp16") ? CHECK_FP16 : CHECK_BF16;
    k->b = (int)gen_kv_int(shape, "b", 0), k->sq = (int)gen_kv_int(shape, "sq", 0);
    k->skv = (int)gen_kv_int(shape, "skv", -1), k->hq = (int)gen_kv_int(shape, "hq", 0);
    k->hkv = (int)gen_kv_int(shape, "hkv", 0), k->dv = (int)gen_kv_int(shape, "dv", 0);
    k->layers = (int)gen_kv_int(shape, "layers", 0), k->ps = (int)gen_kv_int(shape, "page_size", -1);
    k->causal = (int)gen_kv_int(shape, "causal", 0);
    k->nk = parse_parts(parts, k->dims);
    k->separate = value && !strcmp(value, "separate");
    const char *kv = gen_kv_str(shape, "kv_dtype");
    k->fp8 = kv && !strcmp(kv, "e4m3");
    k->esz = k->fp8 ? 1 : 2;
    int sum = 0;
    for (int i = 0; i < k->nk; i++)
        sum += k->dims[i];
    if (k->nk < 1 || k->b < 1 || k->sq < 1 || k->skv < 0 || k->hq < 1 || k->hkv < 1 || k->hq % k->hkv || k->dv < 16 ||
        k->layers < 1 || k->layers > KF_PARTS_MAXL || k->ps < 0 || !value ||
        (k->separate ? k->dv != sum : strncmp(value, "alias_", 6) || k->dv > k->dims[0]) ||
        (k->fp8 && (k->separate || k->layers != 1))) {
        core_err_set(e, KF_ERR_ARG, "not an attn_parts_decode shape (parts '%s', value '%s', b %d, sq %d, hq %d,"
                     " hkv %d, dv %d, layers %d, page_size %d)", parts ? parts : "?", value ? value : "?", k->b, k->sq,
                     k->hq, k->hkv, k->dv, k->layers, k->ps);
        free(k);
        return NULL;
    }
    k->scale = 1.0 / sqrt((double)sum);
    return k;
}

int tune_parts_work(const gen_kvset *shape, double *bytes, double *flops)
{
    tune_parts *k = tune_parts_new(shape, NULL);   /* not a parts shape: -1, the reason unused */
    *bytes = *flops = 0;
    if (!k)
        return -1;
    double cols = 0, dk = 0;   /* columns of a cache row over every cache; key columns of a layer */
    for (int p = 0; p < k->nk; p++) {
        cols += (double)k->dims[p] * (p ? k->layers : 1) * (k->separate ? 2 : 1);
        dk += k->dims[p];
    }
    /* FP8: the e4m3 bytes and each token's fp32 scale */
    *bytes = (double)k->esz * k->b * (double)k->skv * k->hkv * cols + (k->fp8 ? 4.0 * k->b * (double)k->skv * k->hkv : 0);
    *flops = 2.0 * k->sq * (double)k->skv * k->b * k->hq * (dk + k->dv) * k->layers;
    free(k);
    return 0;
}

static void prob_free(tune_ctx *ctx, prob *d)
{
    const rt_cu *cu = ctx ? tune_ctx_cu(ctx) : NULL;
    for (int i = 0; i < (d->joint ? 1 : NCACHE); i++) {
        free(d->hc[i]);
        if (cu && d->dc[i])
            cu->MemFree(d->dc[i]);
    }
    for (int l = 0; l < KF_PARTS_MAXL; l++) {
        for (int p = 0; p < KF_PARTS_MAXK; p++) {
            free(d->hq[l][p]);
            if (cu && d->dq[l][p])
                cu->MemFree(d->dq[l][p]);
        }
        if (cu && d->dout[l])
            cu->MemFree(d->dout[l]);
        if (cu && d->dlse[l])
            cu->MemFree(d->dlse[l]);
    }
    if (cu && d->dbt)
        cu->MemFree(d->dbt);
    if (cu && d->dlen)
        cu->MemFree(d->dlen);
    if (cu && d->dws)
        cu->MemFree(d->dws);
    if (cu && d->ds)
        cu->MemFree(d->ds);
    free(d->hs);
    free(d->bt);
    memset(d, 0, sizeof *d);
}

/* Frees the gate case and its reference; the next gate makes them again (same seed). */
static void gate_drop(tune_ctx *ctx, tune_parts *k)
{
    prob_free(ctx, &k->gate);
    free(k->gate_ro), free(k->gate_rlr);
    k->gate_ro = k->gate_rlr = NULL;
    k->gate_ready = 0;
}

void tune_parts_free(tune_parts *k, tune_ctx *ctx)
{
    if (!k)
        return;
    prob_free(ctx, &k->time);
    gate_drop(ctx, k);
    const rt_cu *cu = ctx ? tune_ctx_cu(ctx) : NULL;
    for (int s = 1; cu && k->tset && s < k->tsets; s++) {
        for (int c = 0; c < (k->time.joint ? 1 : NCACHE); c++)
            if (k->tset[s].dc[c])
                cu->MemFree(k->tset[s].dc[c]);
        for (int l = 0; l < KF_PARTS_MAXL; l++)
            for (int q = 0; q < KF_PARTS_MAXK; q++)
                if (k->tset[s].dq[l][q])
                    cu->MemFree(k->tset[s].dq[l][q]);
        if (k->tset[s].ds)
            cu->MemFree(k->tset[s].ds);
    }
    free(k->tset);
    free(k);
}

/* Rows of a contiguous cache per sequence (at least 1). */
static int cap_rows(const prob *d) { return d->skv > 0 ? d->skv : 1; }

/* The e4m3 byte of x * TUNE_KV8_AMP_K (up to +-448: |x| > 2.8 saturates there), never zero */
static unsigned char e4m3_of(double x)
{
    unsigned char q8 = tune_e4m3_encode(x * TUNE_KV8_AMP_K);
    return (q8 & 0x7f) ? q8 : (unsigned char)(q8 | 0x01);
}

/* The per-token scale of token j of sequence b, kv head kh: (0.5 .. 1.25) / TUNE_KV8_AMP_K from a hash, so that
 * neighbouring tokens differ (a kernel reading another token's scale fails) and the dequantised key ~ N(0, ~1). */
static float token_scale(uint64_t seed, int b, int j, int kh)
{
    uint64_t h = (seed ^ ((uint64_t)b << 48) ^ ((uint64_t)j << 8) ^ (uint64_t)kh) * 0x9E3779B97F4A7C15ull;
    return (float)((0.5 + 0.75 * (double)(h >> 40) / (double)(1ull << 24)) / TUNE_KV8_AMP_K);
}

/* Timing inputs of the FP8 cache: bytes e4m3 bytes at dst (a host tile of N(0, 1) draws, repeated), or (scales)
 * n fp32 scales of token_scale's range. 0 or -1 (error on ctx). */
static int fill_fp8(tune_ctx *ctx, CUdeviceptr dst, size_t n, int scales, uint64_t seed)
{
    const rt_cu *cu = tune_ctx_cu(ctx);
    size_t tile = ((size_t)1 << 20) + 7, es = scales ? 4 : 1, m = n < tile ? n : tile;
    unsigned char *h = malloc(m * es + 16);
    if (!h)
        return tune_ctx_seterr(ctx, KF_ERR_NOMEM, "out of host memory");
    check_rng r;
    check_rng_seed(&r, seed);
    for (size_t i = 0; i < m; i++) {
        if (scales)
            ((float *)h)[i] = token_scale(seed, 0, (int)i, 0);
        else
            h[i] = e4m3_of(check_rng_normal(&r));
    }
    int rc = 0;
    for (size_t at = 0; at < n && !rc; at += m) {
        CUresult e = cu->MemcpyHtoD(dst + at * es, h, (n - at < m ? n - at : m) * es);
        if (e)
            rc = tune_ctx_fail(ctx, e, "cuMemcpyHtoD (FP8 timing inputs)");
    }
    free(h);
    return rc;
}

/* Lays out problem d (b sequences, lens or skv keys each): block table (gate: pages shuffled;
 * timing: consecutive), cache dims in tile order. host: fill host buffers with N(0, 1) values (NaN
 * past every length and in unused pages), which prob_upload copies to the device buffers; else the
 * device buffers get N(0, 1) values from a repeated host tile (tune_ctx_fill_normal: the statistics
 * of real data, filled fast). */
static int prob_make(tune_ctx *ctx, const tune_parts *k, prob *d, int host, uint64_t seed)
{
    const rt_cu *cu = tune_ctx_cu(ctx);
    int L = k->layers;
    d->ncache = 0;
    for (int pass = 0; pass < (k->separate ? 2 : 1); pass++)
        for (int p = 0; p < k->nk; p++)
            for (int l = 0; l < (p ? L : 1); l++)
                d->cdim[d->ncache++] = k->dims[p];
    /* One layer with the value aliased (absorbed MLA): the key parts side by side in one row a token, as engines
     * store the latent cache (FlashMLA's and vLLM's [pages, 64, 576]) and as impl wg8's copy engine reads it */
    d->joint = !k->separate && L == 1 && d->ncache > 1;
    d->rw = 0;
    for (int c = 0; c < d->ncache; c++)
        d->coff[c] = d->joint ? d->rw : 0, d->rw += d->cdim[c];
    if (k->ps) {
        d->npages = 0, d->max_pages = 1;
        for (int b = 0; b < d->b; b++) {
            int np = ((host ? d->lens[b] : d->skv) + k->ps - 1) / k->ps;
            d->npages += np;
            d->max_pages = np + 1 > d->max_pages ? np + 1 : d->max_pages;
        }
        d->npages += host ? 3 : 0;
        int *perm = malloc(sizeof(int) * (size_t)(d->npages + 1));
        d->bt = malloc(sizeof(int) * (size_t)d->b * d->max_pages);
        if (!perm || !d->bt) {
            free(perm);
            tune_ctx_seterr(ctx, KF_ERR_NOMEM, "out of host memory");
            return -1;
        }
        check_rng r;
        check_rng_seed(&r, seed ^ 0x9a9e5);
        for (int i = 0; i < d->npages; i++)
            perm[i] = i;
        for (int i = d->npages - 1; host && i > 0; i--) {
            int j = (int)(check_rng_next(&r) % (uint64_t)(i + 1)), t = perm[i];
            perm[i] = perm[j], perm[j] = t;
        }
        int next = 0;
        for (int b = 0; b < d->b; b++)
            for (int pg = 0; pg < d->max_pages; pg++)
                d->bt[b * d->max_pages + pg] = pg * k->ps < (host ? d->lens[b] : d->skv) ? perm[next++] : -1;
        free(perm);
    }
    size_t rows = k->ps ? (size_t)d->npages * k->ps : (size_t)d->b * cap_rows(d);
    d->nq = (size_t)d->b * k->sq * k->hq;
    int r = 0;
    for (int c = 0; c < d->ncache; c++) {
        if (d->joint && c > 0) {   /* a view of cache 0's row */
            d->nc[c] = 0;
            d->dc[c] = d->dc[0] + (CUdeviceptr)d->coff[c] * k->esz;
            if (host)
                d->hc[c] = d->hc[0] + (size_t)d->coff[c] * k->esz;
            continue;
        }
        size_t row = (size_t)k->hkv * (d->joint ? d->rw : d->cdim[c]);
        d->nc[c] = rows * row;
        r = r ? r : cu->MemAlloc(&d->dc[c], d->nc[c] * k->esz + 16);
        if (r)
            break;
        if (!host) {
            if (k->fp8 ? fill_fp8(ctx, d->dc[c], d->nc[c], 0, seed ^ ((uint64_t)c << 56))
                       : tune_ctx_fill_normal(ctx, d->dc[c], d->nc[c], k->dt, seed ^ ((uint64_t)c << 56), 1.0))
                return -1;
            continue;
        }
        if (!(d->hc[c] = malloc(d->nc[c] * k->esz + 16))) {
            tune_ctx_seterr(ctx, KF_ERR_NOMEM, "out of host memory");
            return -1;
        }
        if (k->fp8)
            memset(d->hc[c], 0x7f, d->nc[c]);   /* e4m3 NaN */
        else
            check_fill_nan(k->dt, d->hc[c], d->nc[c]);
        for (int b = 0; b < d->b; b++)
            for (int j = 0; j < d->lens[b]; j++) {
                size_t at = k->ps ? ((size_t)d->bt[b * d->max_pages + j / k->ps] * k->ps + j % k->ps) * row
                                  : ((size_t)b * cap_rows(d) + j) * row;
                uint64_t rsd = seed ^ ((uint64_t)c << 56) ^ ((uint64_t)b << 40) ^ (uint64_t)j;
                if (k->fp8) {
                    check_rng g;
                    check_rng_seed(&g, rsd);
                    for (size_t x = 0; x < row; x++)
                        d->hc[c][at + x] = e4m3_of(check_rng_normal(&g));
                } else {
                    check_fill_normal(k->dt, d->hc[c] + at * 2, row, rsd, 1.0);
                }
            }
    }
    /* FP8: the per-token scales [rows, hkv] (+ 2 rows of slack), NaN past every length and in unused pages */
    if (!r && k->fp8) {
        d->ns = rows * (size_t)k->hkv;
        r = cu->MemAlloc(&d->ds, d->ns * 4 + 16 + 8 * (size_t)k->hkv);
        if (!r && !host && fill_fp8(ctx, d->ds, d->ns, 1, seed ^ 0x5ca1e))
            return -1;
        if (!r && host) {
            if (!(d->hs = malloc(d->ns * 4 + 16))) {
                tune_ctx_seterr(ctx, KF_ERR_NOMEM, "out of host memory");
                return -1;
            }
            for (size_t x = 0; x < d->ns; x++)
                d->hs[x] = NAN;
            for (int b = 0; b < d->b; b++)
                for (int j = 0; j < d->lens[b]; j++)
                    for (int kh = 0; kh < k->hkv; kh++) {
                        size_t at = k->ps ? (size_t)d->bt[b * d->max_pages + j / k->ps] * k->ps + j % k->ps
                                          : (size_t)b * cap_rows(d) + j;
                        d->hs[at * k->hkv + kh] = token_scale(seed, b, j, kh);
                    }
        }
    }
    for (int l = 0; !r && l < L; l++)
        for (int p = 0; !r && p < k->nk; p++) {
            size_t n = d->nq * k->dims[p];
            r = cu->MemAlloc(&d->dq[l][p], n * 2 + 16);
            if (r)
                break;
            if (!host) {
                if (tune_ctx_fill_normal(ctx, d->dq[l][p], n, k->dt, seed ^ (0x51ull << 48) ^ ((uint64_t)l << 8) ^ (uint64_t)p,
                                         1.0))
                    return -1;
                continue;
            }
            if (!(d->hq[l][p] = malloc(n * 2 + 16))) {
                tune_ctx_seterr(ctx, KF_ERR_NOMEM, "out of host memory");
                return -1;
            }
            check_fill_normal(k->dt, d->hq[l][p], n, seed ^ (0x51ull << 48) ^ ((uint64_t)l << 8) ^ (uint64_t)p, 1.0);
        }
    for (int l = 0; !r && l < L; l++) {
        r = cu->MemAlloc(&d->dout[l], d->nq * k->dv * 2 + 16);
        if (!r)
            r = cu->MemAlloc(&d->dlse[l], d->nq * 4 + 16);
    }
    int lens[GATE_B];
    for (int b = 0; b < GATE_B; b++)
        lens[b] = d->lens[b];
    if (!r && host)
        r = tune_ctx_upload(ctx, &d->dlen, lens, sizeof lens, 0);
    if (!r && k->ps)
        r = tune_ctx_upload(ctx, &d->dbt, d->bt, sizeof(int) * (size_t)d->b * d->max_pages, 0);
    if (r)
        return tune_ctx_fail(ctx, r, "split-score inputs: cuMemAlloc/cuMemcpyHtoD/cuMemsetD32");
    /* the kernel's params (workspace set per variant) */
    kf_parts_params *p = &d->p;
    memset(p, 0, sizeof *p);
    long long crow = k->ps ? k->ps : cap_rows(d);
    for (int c = 0; c < d->ncache; c++) {
        const int rw = d->joint ? d->rw : d->cdim[c];
        long long w = (long long)k->hkv * rw;
        p->c[c] = (kf_parts_tensor){(const void *)(uintptr_t)d->dc[c], crow * w, w, rw};
    }
    if (k->fp8)
        p->cs = (kf_parts_tensor){(const void *)(uintptr_t)d->ds, crow * k->hkv, k->hkv, 1};
    for (int l = 0; l < L; l++) {
        for (int q = 0; q < k->nk; q++) {
            long long w = k->dims[q];
            p->q[l][q] = (kf_parts_tensor){(const void *)(uintptr_t)d->dq[l][q], (long long)k->sq * k->hq * w, k->hq * w, w};
        }
        p->o[l] = (kf_parts_tensor){(const void *)(uintptr_t)d->dout[l], (long long)k->sq * k->hq * k->dv,
                                    (long long)k->hq * k->dv, k->dv};
        p->lse[l] = (float *)(uintptr_t)d->dlse[l];
    }
    p->lse_sb = (long long)k->hq * k->sq, p->lse_sh = k->sq;
    p->kv_len = host ? (const int *)(uintptr_t)d->dlen : NULL;
    p->block_table = k->ps ? (const int *)(uintptr_t)d->dbt : NULL;
    p->bt_sb = d->max_pages;
    p->b = d->b, p->sq = k->sq, p->skv = d->skv, p->hq = k->hq, p->hkv = k->hkv;
    p->ws_rows = d->b * k->sq;
    p->scale = (float)k->scale, p->scale_log2 = (float)(k->scale * 1.4426950408889634);
    return 0;
}

/* Copies the host inputs of a gate problem (caches, queries, lengths, block table) to its device
 * buffers: each variant sees them as drawn, whatever an earlier one wrote there. */
static int prob_upload(tune_ctx *ctx, const tune_parts *k, const prob *d)
{
    const rt_cu *cu = tune_ctx_cu(ctx);
    int r = 0;
    for (int c = 0; !r && c < d->ncache; c++)
        r = d->nc[c] ? cu->MemcpyHtoD(d->dc[c], d->hc[c], d->nc[c] * k->esz) : 0;   /* (views: nc 0) */
    if (!r && k->fp8)
        r = cu->MemcpyHtoD(d->ds, d->hs, d->ns * 4);
    for (int l = 0; !r && l < k->layers; l++)
        for (int p = 0; !r && p < k->nk; p++)
            r = cu->MemcpyHtoD(d->dq[l][p], d->hq[l][p], d->nq * k->dims[p] * 2);
    if (!r)
        r = cu->MemcpyHtoD(d->dlen, d->lens, sizeof d->lens);
    if (!r && k->ps)
        r = cu->MemcpyHtoD(d->dbt, d->bt, sizeof(int) * (size_t)d->b * d->max_pages);
    return r ? tune_ctx_fail(ctx, r, "gate: split-score inputs: cuMemcpyHtoD") : 0;
}

/* The variant's split count and workspace (poisoned) on d. */
static int prepare(tune_ctx *ctx, const tune_compiled *v, prob *d)
{
    const rt_cu *cu = tune_ctx_cu(ctx);
    d->p.splits = (int)gen_kv_int(&v->vp, "sp", 1);
    rt_launch l;
    if (rt_parts_launch(&v->vp, &d->p, &l) || l.kernels > v->n_kernels) {
        tune_ctx_seterr(ctx, KF_ERR_ARG, "%s: its binary has %d kernels", v->key ? v->key : v->family, v->n_kernels);
        return -1;
    }
    size_t ws = l.ws_bytes;
    if (ws > d->ws_bytes) {
        if (d->dws)
            cu->MemFree(d->dws);
        d->dws = 0, d->ws_bytes = 0;
        int r = cu->MemAlloc(&d->dws, ws);
        if (r)
            return tune_ctx_fail(ctx, r, "split-score workspace: cuMemAlloc");
        d->ws_bytes = ws;
    }
    if (ws) {
        int r = cu->MemsetD8(d->dws, 0xFF, ws);
        if (r)
            return tune_ctx_fail(ctx, r, "split-score workspace: cuMemsetD8");
    }
    rt_parts_set_workspace(&v->vp, &d->p, ws ? (void *)(uintptr_t)d->dws : NULL);
    return 0;
}

typedef struct launch_arg {
    const tune_compiled *v;
    const rt_module *m;
    kf_parts_params *p;
    int layers;
    prob *d;
    const tune_parts *k;           /* rotation: set s > 0 reads k->tset[s] */
} launch_arg;

static int bind(tune_ctx *ctx, void *arg, const rt_module *m)
{
    launch_arg *a = arg;
    a->m = m;
    return prepare(ctx, a->v, a->d);
}

static int launch(tune_ctx *ctx, void *arg, int set)
{
    launch_arg *a = arg;
    if (a->k && set > 0) {
        kf_parts_params ps = *a->p;
        const pset *t = &a->k->tset[set];
        for (int c = 0; c < a->d->ncache; c++)
            ps.c[c].p = (const void *)(uintptr_t)t->dc[c];
        if (a->k->fp8)
            ps.cs.p = (const void *)(uintptr_t)t->ds;
        for (int l = 0; l < a->layers; l++)
            for (int q = 0; q < a->k->nk; q++)
                ps.q[l][q].p = (const void *)(uintptr_t)t->dq[l][q];
        launch_arg b = *a;
        b.p = &ps, b.k = NULL;
        return launch(ctx, &b, 0);
    }
    unsigned grid[3];
    kf_parts_tmaps tm;         /* impl wgmma_tma: its second argument, encoded for these pointers */
    void *args[2];
    if (rt_parts_args(&a->v->vp, a->p, &tm, args, tune_ctx_err(ctx)))
        return -1;
    if (rt_parts_grid(&a->v->vp, a->p, 0, grid)) {
        tune_ctx_seterr(ctx, KF_ERR_ARG, "rt_parts_grid refused %s", a->v->key ? a->v->key : a->v->family);
        return -1;
    }
    if (rt_module_launch(a->m, 0, grid, args, tune_ctx_stream(ctx), tune_ctx_err(ctx)))
        return -1;
    for (int l = 0; a->p->splits > 1 && l < a->layers; l++) {
        kf_attn_params c;
        rt_parts_combine_params(a->p, l, &c);
        void *cargs[] = {&c};
        if (rt_parts_grid(&a->v->vp, a->p, 1, grid))   /* (its message was an unset buffer's before issue 16) */
            return tune_ctx_seterr(ctx, KF_ERR_ARG, "rt_parts_grid refused %s", a->v->key ? a->v->key : a->v->family);
        if (rt_module_launch(a->m, 1, grid, cargs, tune_ctx_stream(ctx), tune_ctx_err(ctx)))
            return -1;
    }
    return 0;
}

static ref_strided rs(const void *p, const kf_parts_tensor *t)
{
    ref_strided r = {p, t->sb, t->ss, t->sh};
    return r;
}

/* Layer l of the gate problem as a ref_parts_desc over the host buffers. */
static ref_parts_desc layer_desc(const tune_parts *k, const prob *d, int l)
{
    ref_parts_desc a;
    memset(&a, 0, sizeof a);
    a.dtype = k->dt;
    a.nk = k->nk;
    int L = k->layers;
    for (int p = 0; p < k->nk; p++) {
        int c = p ? 1 + (p - 1) * L + l : 0;
        a.kp[p] = (ref_kpart){rs(d->hc[c], &d->p.c[c]), rs(d->hq[l][p], &d->p.q[l][p]), k->dims[p], k->hkv, k->ps > 0};
    }
    if (k->separate) {
        int base = 1 + (k->nk - 1) * L;
        a.nv = k->nk;
        for (int p = 0; p < k->nk; p++) {
            int c = base + (p ? 1 + (p - 1) * L + l : 0);
            a.vp[p].alias = -1, a.vp[p].v = rs(d->hc[c], &d->p.c[c]), a.vp[p].dim = k->dims[p];
            a.vp[p].heads = k->hkv, a.vp[p].paged = k->ps > 0;
        }
    } else {
        a.nv = 1;
        a.vp[0].alias = 0, a.vp[0].dim = k->dv;
    }
    a.kv_len = d->lens;
    a.block_table = d->bt;
    a.bt_sb = d->max_pages;
    a.page_size = k->ps;
    a.b = d->b, a.sq = k->sq, a.skv = d->skv, a.hq = k->hq, a.causal = k->causal, a.scale = k->scale;
    a.kv_fp8 = k->fp8;
    if (k->fp8)
        a.kv_scale = rs(d->hs, &d->p.cs);
    return a;
}

/* The gate case of k->gate_seed and its per-layer reference, made at the shape's first gate and
 * kept for its other variants (the fill and the fp64 reference are most of a gate's time); phases
 * from *t. On failure nothing is kept: the next gate tries again. */
static int gate_build(tune_ctx *ctx, tune_parts *k, double *t)
{
    if (k->gate_ready)
        return 0;
    if (!k->gate_seed)
        k->gate_seed = check_fresh_seed();
    prob *d = &k->gate;
    memset(d, 0, sizeof *d);
    d->b = GATE_B;
    d->lens[0] = k->skv < 700 ? k->skv : 700, d->lens[1] = 0, d->lens[2] = k->skv < 65 ? k->skv : 65;
    d->skv = d->lens[0] > d->lens[2] ? d->lens[0] : d->lens[2];
    if (prob_make(ctx, k, d, 1, k->gate_seed)) {
        gate_drop(ctx, k);
        return -1;
    }
    tune_ctx_phase(ctx, TUNE_PH_GATE_FILL, t);
    size_t no = d->nq * k->dv, L = (size_t)k->layers;
    k->gate_ro = malloc(sizeof(double) * (no * L + 1));
    k->gate_rlr = malloc(sizeof(double) * (d->nq * L + 1));
    double *rl = malloc(sizeof(double) * (d->nq + 1));
    if (!k->gate_ro || !k->gate_rlr || !rl) {
        free(rl);
        gate_drop(ctx, k);
        return tune_ctx_seterr(ctx, KF_ERR_NOMEM, "gate: out of host memory");
    }
    for (int l = 0; l < k->layers; l++) {
        ref_parts_desc a = layer_desc(k, d, l);
        double *rlr = k->gate_rlr + (size_t)l * d->nq;
        ref_parts(&a, k->gate_ro + (size_t)l * no, rl);
        /* lse [b, hq, sq] -> the reference's [b, sq, hq] */
        for (int b = 0; b < d->b; b++)
            for (int i = 0; i < k->sq; i++)
                for (int h = 0; h < k->hq; h++)
                    rlr[((size_t)b * k->hq + h) * k->sq + i] = rl[((size_t)b * k->sq + i) * k->hq + h];
    }
    free(rl);
    tune_ctx_phase(ctx, TUNE_PH_GATE_REF, t);
    k->gate_ready = 1;
    return 0;
}

int tune_parts_gate(tune_ctx *ctx, tune_parts *k, const tune_compiled *v, int *pass, double *rel_err,
                    char *verdict, size_t verdictn)
{
    *pass = 0, *rel_err = NAN, *verdict = '\0';
    const rt_cu *cu = tune_ctx_cu(ctx);
    double t;
    tune_ctx_phase(ctx, TUNE_PH_GATE_CALL, &t);
    if (gate_build(ctx, k, &t))
        return -1;
    prob *d = &k->gate;
    uint64_t seed = k->gate_seed;
    rt_module own;
    memset(&own, 0, sizeof own);
    const rt_module *m;
    int rc = -1, L = k->layers;
    uint16_t *ob = NULL;
    float *lb = NULL;
    if (prob_upload(ctx, k, d))
        goto out;
    tune_ctx_phase(ctx, TUNE_PH_GATE_FILL, &t);
    if (!(m = tune_ctx_module(ctx, v, 0, &own)) || prepare(ctx, v, d))
        goto out;
    int r = 0;
    for (int l = 0; !r && l < L; l++) {
        r = cu->MemsetD8(d->dout[l], 0xFF, d->nq * k->dv * 2);
        if (!r)
            r = cu->MemsetD32(d->dlse[l], CHECK_POISON32, d->nq);
    }
    if (r) {
        tune_ctx_fail(ctx, r, "gate: poison outputs");
        goto out;
    }
    launch_arg a = {v, m, &d->p, L};
    if (tune_ctx_run(ctx, launch, &a, "gate: the kernels failed"))
        goto out;
    ob = malloc(d->nq * k->dv * 2 + 2), lb = malloc(d->nq * 4 + 4);
    if (!ob || !lb) {
        tune_ctx_seterr(ctx, KF_ERR_NOMEM, "gate: out of host memory");
        goto out;
    }
    int all = 1;
    double worst = 0;
    char first[480] = "";
    for (int l = 0; l < L; l++) {
        if ((r = cu->MemcpyDtoH(ob, d->dout[l], d->nq * k->dv * 2)) || (r = cu->MemcpyDtoH(lb, d->dlse[l], d->nq * 4))) {
            tune_ctx_fail(ctx, r, "gate: cuMemcpyDtoH");
            goto out;
        }
        check_stats so;
        check_lse_stats sl;
        check_compare(k->dt, ob, k->gate_ro + (size_t)l * d->nq * k->dv, d->nq * k->dv, &so);
        check_compare_lse(lb, k->gate_rlr + (size_t)l * d->nq, d->nq, &sl);
        int ok = check_pass(&so, check_tol(k->dt)) && check_lse_pass(&sl, CHECK_LSE_TOL);
        if (!(so.rel_err <= worst))
            worst = so.rel_err;
        if (!ok && all) {
            char x[200], y[200];
            check_format(x, sizeof x, &so, check_tol(k->dt));
            check_format_lse(y, sizeof y, &sl, CHECK_LSE_TOL);
            snprintf(first, sizeof first, "layer %d: o %s; lse %s", l, x, y);
        }
        all &= ok;
    }
    *pass = all, *rel_err = worst;
    if (all)
        snprintf(verdict, verdictn, "pass: o rel %.2e (tol %.0e), %d layer%s, lens [%d, 0, %d], seed %llu", worst,
                 check_tol(k->dt), L, L > 1 ? "s" : "", d->lens[0], d->lens[2], (unsigned long long)seed);
    else
        snprintf(verdict, verdictn, "FAIL: %s; lens [%d, 0, %d], seed %llu", first, d->lens[0], d->lens[2],
                 (unsigned long long)seed);
    rc = 0;
out:
    tune_ctx_phase(ctx, TUNE_PH_GATE_RUN, &t);   /* the run, its outputs copied back and compared */
    if (own.mod)
        rt_module_unload(&own);
    free(ob), free(lb);
    return rc;
}

int tune_parts_time(tune_ctx *ctx, tune_parts *k, const tune_compiled *v, int samples, tune_timing *t)
{
    memset(t, 0, sizeof *t);
    double tm;
    tune_ctx_phase(ctx, TUNE_PH_TIME_CALL, &tm);
    if (!k->time_ready) {
        prob *d = &k->time;
        memset(d, 0, sizeof *d);
        d->b = k->b, d->skv = k->skv;
        if (prob_make(ctx, k, d, 0, 0x7061727473ull)) {
            prob_free(ctx, d);
            return -1;
        }
        k->time_ready = 1;
        k->tsets = 1;
    }
    /* sustained: copies of the caches and queries, so that the rotated sets exceed the L2 */
    prob *d = &k->time;
    double set_bytes = 0;
    for (int c = 0; c < d->ncache; c++)
        set_bytes += (double)k->esz * (double)d->nc[c];
    set_bytes += 4.0 * (double)d->ns;
    for (int p = 0; p < k->nk; p++)
        set_bytes += 2.0 * (double)d->nq * k->dims[p] * k->layers;
    int sets = tune_ctx_sets(ctx, set_bytes);
    if (sets > 1 && !k->tset && !(k->tset = calloc(TUNE_ROTATE_MAX_SETS, sizeof *k->tset))) {
        tune_ctx_seterr(ctx, KF_ERR_NOMEM, "out of host memory");
        return -1;
    }
    for (; k->tsets < sets; k->tsets++) {
        pset *s = &k->tset[k->tsets];
        int r = 0;
        for (int c = 0; c < d->ncache && !r; c++) {
            if (!d->nc[c])         /* a view of cache 0's row */
                s->dc[c] = s->dc[0] + (CUdeviceptr)d->coff[c] * k->esz;
            else
                r = tune_ctx_clone(ctx, &s->dc[c], d->dc[c], d->nc[c] * k->esz);
        }
        if (!r && k->fp8)
            r = tune_ctx_clone(ctx, &s->ds, d->ds, d->ns * 4);
        for (int l = 0; l < k->layers && !r; l++)
            for (int p = 0; p < k->nk && !r; p++)
                r = tune_ctx_clone(ctx, &s->dq[l][p], d->dq[l][p], d->nq * k->dims[p] * 2);
        if (r) {
            k->tsets++;
            return tune_ctx_fail(ctx, r, "timing: copies of the split-score inputs (cuMemAlloc/cuMemcpyDtoD)");
        }
    }
    tune_ctx_phase(ctx, TUNE_PH_TIME_FILL, &tm);
    launch_arg a = {v, NULL, &k->time.p, k->layers, &k->time, k->tsets > 1 ? k : NULL};
    return tune_ctx_time_variant(ctx, v, bind, launch, &a, k->tsets, samples, t, &tm);
}

void tune_parts_work_of(const gen_kvset *shape, tune_work *w)
{
    /* cache bytes read once, or FLOPs (2 sq skv hq (key dims + dv) per layer) when the shape is
     * compute-bound on an H200-like ridge (about 200 FLOP per byte of bf16 GEMM vs copy) */
    double bytes, flops;
    tune_parts_work(shape, &bytes, &flops);
    w->amount = bytes;
    w->unit = "B/s";
    if (flops > 200.0 * bytes) {
        w->amount = flops;
        w->unit = "FLOP/s";
    }
}
