/* bench/api_costs.c: host costs of the runtime API (run, cold and warm plan, bundle load) and the bundle path's bitwise check */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/stat.h>
#include <unistd.h>

#include "db/bundle.h"
#include "runtime/family.h"
#include "db/db.h"
#include "runtime/cuda.h"
#include "runtime/kforge.h"
#include "runtime/plan.h"
#include "tuner/check.h"

/*
 * usage: kf_api_costs [WORKDIR]   (needs a GPU; writes WORKDIR/costs.db and costs.kfb)
 * Prints one line per figure: cold plan (JIT: render + NVRTC + module load), warm plan
 * (the same description again: selection + module cache), kf_attn_run host cost (argument
 * checks + enqueue, median of 20000 calls, the queue drained every 500 calls outside the
 * timing), kf_open with a bundle of 500 kernels (median of 5), and whether a plan from the
 * bundle with JIT forbidden gives bit for bit the output of the database path.
 */

static double now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp);
    return v[n / 2];
}

#define DIE(...) (fprintf(stderr, "error: " __VA_ARGS__), fputc('\n', stderr), exit(1))

static kf_attn_desc desc_of(int b)
{
    kf_attn_desc d = KF_ATTN_DESC_INIT;
    d.kind = KF_ATTN_DECODE;
    d.dtype = KF_BF16;
    d.hq = 32, d.hkv = 8, d.d = 128;
    d.max_batch = b, d.max_q = 1, d.max_kv = 8192;
    return d;
}

typedef struct bufs {
    CUdeviceptr q, k, v, o;
    size_t nq, nk;
} bufs;

static void bufs_init(const rt_cu *cu, bufs *x, int b)
{
    x->nq = (size_t)b * 32 * 128, x->nk = (size_t)b * 8192 * 8 * 128;
    uint16_t *h = malloc(x->nk * 2);
    cu->MemAlloc(&x->q, x->nq * 2), cu->MemAlloc(&x->k, x->nk * 2), cu->MemAlloc(&x->v, x->nk * 2);
    cu->MemAlloc(&x->o, x->nq * 2);
    check_fill_uniform(CHECK_BF16, h, x->nk, 7);
    cu->MemcpyHtoD(x->k, h, x->nk * 2);
    check_fill_uniform(CHECK_BF16, h, x->nk, 8);
    cu->MemcpyHtoD(x->v, h, x->nk * 2);
    check_fill_uniform(CHECK_BF16, h, x->nq, 9);
    cu->MemcpyHtoD(x->q, h, x->nq * 2);
    free(h);
}

static kf_attn_tensors tensors_of(const bufs *x, int b)
{
    kf_attn_tensors t;
    memset(&t, 0, sizeof t);
    t.q = (void *)(uintptr_t)x->q, t.k = (void *)(uintptr_t)x->k, t.v = (void *)(uintptr_t)x->v;
    t.o = (void *)(uintptr_t)x->o;
    t.batch = b, t.q_len = 1, t.kv_len_all = 8192;
    return t;
}

/* Runs a plan on the inputs and copies o back (malloc'd). */
static uint16_t *run_once(const rt_cu *cu, kf_ctx *c, kf_plan *p, const bufs *x, int b)
{
    kf_attn_tensors t = tensors_of(x, b);
    cu->MemsetD8(x->o, 0xFF, x->nq * 2);
    if (kf_attn_run(p, &t, NULL) != KF_OK)
        DIE("run: %s", kf_errmsg(c));
    cu->CtxSynchronize();
    uint16_t *o = malloc(x->nq * 2);
    cu->MemcpyDtoH(o, x->o, x->nq * 2);
    return o;
}

struct first {
    char key[600], params[1024], variant[512];
};

static int first_cb(const db_binary *b, void *arg)
{
    struct first *f = arg;
    if (rt_family_find(b->family) != &rt_families[RT_FAM_ATTN_DECODE])
        return 0;
    snprintf(f->key, sizeof f->key, "%s", b->cache_key);
    snprintf(f->params, sizeof f->params, "%s", b->params);
    snprintf(f->variant, sizeof f->variant, "%s", b->variant_key);
    return 1;
}

int main(int argc, char **argv)
{
    const char *dir = argc > 1 ? argv[1] : ".";
    core_err err = CORE_ERR_INIT;
    char dbp[1024], kfb[1024];
    snprintf(dbp, sizeof dbp, "%s/costs.db", dir);
    snprintf(kfb, sizeof kfb, "%s/costs.kfb", dir);
    if (mkdir(dir, 0777) != 0 && errno != EEXIST)
        DIE("cannot create the work directory '%s': %s", dir, strerror(errno));
    unlink(dbp), unlink(kfb);
    const rt_cu *cu = rt_cuda(&err);
    if (!cu)
        DIE("%s", err.msg);
    const int B = 32;

    /* cold plan: a fresh context compiles the default variant */
    kf_config cfg = KF_CONFIG_INIT;
    cfg.db_path = dbp;
    kf_ctx *c;
    if (kf_open(&c, &cfg) != KF_OK)
        DIE("kf_open: %s", kf_errmsg(c));
    kf_attn_desc d = desc_of(B);
    kf_plan *p;
    double t0 = now_us();
    if (kf_attn_plan(c, &d, &p) != KF_OK)
        DIE("plan: %s", kf_errmsg(c));
    double cold = now_us() - t0;
    printf("cold plan (JIT)        %9.1f ms   %s (%s)\n", cold / 1e3, kf_plan_variant(p), kf_plan_source(p));

    double v[20000];
    for (int i = 0; i < 100; i++) {
        kf_plan *q;
        t0 = now_us();
        kf_attn_plan(c, &d, &q);
        v[i] = now_us() - t0;
        kf_plan_free(q);
    }
    printf("warm plan              %9.2f us   median of 100 (workspace %zu B)\n", median(v, 100),
           kf_plan_workspace(p));

    bufs x;
    bufs_init(cu, &x, B);
    kf_attn_tensors t = tensors_of(&x, B);
    for (int i = 0; i < 20000; i++) {
        if (i % 500 == 0)
            cu->CtxSynchronize();
        t0 = now_us();
        kf_attn_run(p, &t, NULL);
        v[i] = now_us() - t0;
    }
    cu->CtxSynchronize();
    printf("kf_attn_run host cost  %9.2f us   median of 20000 (checks + %d cuLaunchKernel)\n", median(v, 20000),
           p->n_launch);

    /* the floor: the same kernel(s) enqueued by bare cuLaunchKernel calls with the plan's arguments */
    kf_attn_params a = p->base.attn;
    a.q = t.q, a.k = t.k, a.v = t.v, a.o = t.o, a.b = B, a.sq = 1, a.skv = 8192, a.ws_rows = B;
    if (p->ws_bytes) {
        a.ws_o = (float *)(uintptr_t)p->ws;
        a.ws_lse = (float *)((char *)(uintptr_t)p->ws + (size_t)a.splits * a.ws_rows * a.hq * d.d * 4);
    }
    void *args[] = {&a};
    unsigned grids[4][3];
    for (int k = 0; k < p->n_launch; k++)
        if (rt_attn_grid(&p->vp, &a, k, grids[k]))
            DIE("no grid for kernel %d", k);
    for (int i = 0; i < 20000; i++) {
        if (i % 500 == 0)
            cu->CtxSynchronize();
        t0 = now_us();
        for (int k = 0; k < p->n_launch; k++)
            cu->LaunchKernel(p->mod.fn[k], grids[k][0], grids[k][1], grids[k][2], (unsigned)p->mod.k[k].threads, 1,
                             1, (unsigned)p->mod.k[k].smem, NULL, args, NULL);
        v[i] = now_us() - t0;
    }
    cu->CtxSynchronize();
    printf("bare cuLaunchKernel    %9.2f us   median of 20000 (the same %d launch(es), no kforge code)\n",
           median(v, 20000), p->n_launch);
    uint16_t *o_db_jit = run_once(cu, c, p, &x, B);
    kf_plan_free(p);
    kf_close(c);

    /* a bundle of 500 winners: the compiled binary under 500 cache keys and shapes */
    db_store *s;
    if (db_open(&s, dbp, DB_CREATE) != DB_OK)
        DIE("%s", db_errmsg(s));
    struct first f = {{0}};
    db_binary_each(s, "attn_decode", first_cb, &f);
    db_binary b;
    if (!f.key[0] || db_binary_get(s, f.key, &b) != DB_OK)
        DIE("no compiled binary in %s", dbp);
    rt_devinfo info;
    rt_device_info(0, &info, &err);
    for (int i = 0; i < 500; i++) {
        char key[700], shape[256];
        snprintf(key, sizeof key, "%s#%d", f.key, i);
        snprintf(shape, sizeof shape, "b%d.causal0.d128.dtype-bf16.hkv8.hq32.skv8192.sq1", i == 0 ? B : 1000 + i);
        db_binary row = b;
        row.cache_key = key;
        int ins;
        if (db_binary_put(s, &row, &ins) != DB_OK)
            DIE("%s", db_errmsg(s));
        db_winner w = {0};
        char params[1100];
        snprintf(params, sizeof params, "%s", f.params);
        w.gpu = info.name, w.family = "attn_decode", w.shape_key = shape, w.variant_key = f.variant;
        w.cache_key = key, w.params = params, w.median_ms = 0.25, w.speedup = 1.0, w.band = 0.01;
        if (db_winner_put(s, &w) != DB_OK)
            DIE("%s", db_errmsg(s));
    }
    int nw, nb;
    if (db_bundle_export(s, info.name, NULL, kfb, "bench", &nw, &nb) != DB_OK)
        DIE("%s", db_errmsg(s));
    db_binary_free(&b);
    db_close(s);
    FILE *fp = fopen(kfb, "rb");
    fseek(fp, 0, SEEK_END);
    long size = ftell(fp);
    fclose(fp);

    const char *bundles[] = {kfb};
    kf_config bc = KF_CONFIG_INIT;
    bc.bundles = bundles, bc.n_bundles = 1, bc.jit = KF_JIT_FORBID;
    for (int i = 0; i < 5; i++) {
        t0 = now_us();
        if (kf_open(&c, &bc) != KF_OK)
            DIE("kf_open(bundle): %s", kf_errmsg(c));
        v[i] = now_us() - t0;
        if (i < 4)
            kf_close(c);
    }
    printf("kf_open, bundle of %d   %9.1f ms   median of 5 (%.1f MB, every image's SHA-256 checked)\n", nw,
           median(v, 5) / 1e3, size / 1e6);

    /* the bundle path, JIT forbidden, against the database path: bit for bit */
    if (kf_attn_plan(c, &d, &p) != KF_OK)
        DIE("plan from bundle: %s", kf_errmsg(c));
    uint16_t *o_bundle = run_once(cu, c, p, &x, B);
    int same = memcmp(o_bundle, o_db_jit, x.nq * 2) == 0;
    printf("bundle vs database     %s       %s (%s)\n", same ? "bitwise equal" : "DIFFERENT", kf_plan_variant(p),
           kf_plan_source(p));
    kf_plan_free(p);
    kf_attn_desc other = d;
    other.dtype = KF_FP16;
    kf_status st = kf_attn_plan(c, &other, &p);
    printf("shape not in bundle    %s: %s\n", kf_status_str(st), kf_errmsg(c));
    kf_close(c);
    free(o_bundle), free(o_db_jit);
    return same && st == KF_ERR_NOT_TUNED ? 0 : 1;
}
