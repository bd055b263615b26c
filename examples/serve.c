/* examples/serve.c: serve the default sweep's shapes from a database or from a bundle, and write
 * their outputs to a file, so the two paths can be compared byte for byte (kforge's C API).
 *
 *   serve --db kforge.db OUT        plans from the database (libkforge: JIT allowed on a miss)
 *   serve --bundle h200.kfb OUT     plans from the bundle alone, JIT forbidden (libkforge or libkforge_rt)
 *
 * The same source links against either library (`pkg-config --libs kforge` or `kforge_rt`).
 * Inputs are N(0,1) from a fixed seed, so two runs see the same bytes; every output element is
 * poisoned (NaN) before the run and checked to be finite after it. */
#include <cuda_runtime.h>
#include <kforge.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    kf_attn_kind kind;
    int b, sq, skv, hq, hkv, d, causal;
} shape;

/* rows of templates/sweeps/default.lua that fit a quick check */
static const shape shapes[] = {
    {KF_ATTN_DECODE, 32, 4, 8192, 32, 8, 128, 0},
    {KF_ATTN_DECODE, 8, 4, 32768, 8, 1, 128, 0},
    {KF_ATTN_DECODE, 128, 1, 8192, 32, 8, 128, 0},
    {KF_ATTN_PREFILL, 1, 4096, 4096, 32, 8, 128, 1},
};

static uint16_t to_bf16(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return (uint16_t)((u + 0x7FFF + ((u >> 16) & 1)) >> 16);
}

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static double uniform(void)
{
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return ((rng >> 11) + 0.5) / 9007199254740992.0;
}
static float normal(void) { return (float)(sqrt(-2 * log(uniform())) * cos(6.283185307179586 * uniform())); }

static void *upload_normal(size_t n)
{
    uint16_t *h = malloc(n * 2);
    void *d = NULL;
    for (size_t i = 0; i < n; i++)
        h[i] = to_bf16(normal());
    if (!h || cudaMalloc(&d, n * 2) != cudaSuccess || cudaMemcpy(d, h, n * 2, cudaMemcpyHostToDevice) != cudaSuccess) {
        fprintf(stderr, "error: cannot upload %zu elements\n", n);
        exit(1);
    }
    free(h);
    return d;
}

int main(int argc, char **argv)
{
    if (argc != 4 || (strcmp(argv[1], "--db") && strcmp(argv[1], "--bundle"))) {
        fprintf(stderr, "usage: serve --db DB OUT | serve --bundle FILE.kfb OUT\n");
        return 2;
    }
    kf_config cfg = KF_CONFIG_INIT;
    const char *bundles[] = {argv[2]};
    if (!strcmp(argv[1], "--db"))
        cfg.db_path = argv[2];
    else
        cfg.bundles = bundles, cfg.n_bundles = 1, cfg.jit = KF_JIT_FORBID;
    FILE *out = fopen(argv[3], "wb");
    if (!out) {
        fprintf(stderr, "error: cannot write '%s'\n", argv[3]);
        return 1;
    }
    kf_ctx *ctx;
    if (kf_open(&ctx, &cfg) != KF_OK) {
        fprintf(stderr, "error: %s\n", kf_errmsg(ctx));
        kf_close(ctx);
        return 1;
    }
    cudaStream_t stream;
    cudaStreamCreate(&stream);
    int bad = 0;
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        const shape *s = &shapes[i];
        kf_attn_desc d = KF_ATTN_DESC_INIT;
        d.kind = s->kind, d.dtype = KF_BF16, d.hq = s->hq, d.hkv = s->hkv, d.d = s->d, d.causal = s->causal;
        d.max_batch = s->b, d.max_q = s->sq, d.max_kv = s->skv;
        kf_plan *plan;
        if (kf_attn_plan(ctx, &d, &plan) != KF_OK) {
            fprintf(stderr, "error: shape %zu: %s\n", i, kf_errmsg(ctx));
            bad = 1;
            continue;
        }
        size_t nq = (size_t)s->b * s->sq * s->hq * s->d, nk = (size_t)s->b * s->skv * s->hkv * s->d;
        kf_attn_tensors t = {0};
        t.q = upload_normal(nq), t.k = upload_normal(nk), t.v = upload_normal(nk); /* workspace NULL: the plan's own */
        cudaMalloc(&t.o, nq * 2);
        cudaMemset(t.o, 0xFF, nq * 2); /* NaN in bf16 */
        t.batch = s->b, t.q_len = s->sq, t.kv_len_all = s->skv;
        uint16_t *o = malloc(nq * 2);
        if (kf_attn_run(plan, &t, stream) != KF_OK) {
            fprintf(stderr, "error: shape %zu: %s\n", i, kf_errmsg(ctx));
            bad = 1;
        } else if (cudaStreamSynchronize(stream) != cudaSuccess ||
                   cudaMemcpy(o, t.o, nq * 2, cudaMemcpyDeviceToHost) != cudaSuccess) {
            fprintf(stderr, "error: shape %zu: the kernel failed\n", i);
            bad = 1;
        } else {
            size_t unwritten = 0;
            for (size_t j = 0; j < nq; j++)
                unwritten += (o[j] & 0x7F80) == 0x7F80; /* NaN or Inf */
            printf("%-8s b%d sq%d skv%d hq%d/%d: %s (from %s)%s\n", s->kind == KF_ATTN_DECODE ? "decode" : "prefill",
                   s->b, s->sq, s->skv, s->hq, s->hkv, kf_plan_variant(plan), kf_plan_source(plan),
                   unwritten ? " NOT FINITE" : "");
            bad |= unwritten != 0;
            fwrite(o, 2, nq, out);
        }
        free(o);
        cudaFree((void *)t.q), cudaFree((void *)t.k), cudaFree((void *)t.v), cudaFree(t.o);
        kf_plan_free(plan);
    }
    kf_close(ctx);
    return fclose(out) == 0 && !bad ? 0 : 1;
}
