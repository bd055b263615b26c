/* examples/decode.c: plan a GQA decode step once (from JIT, a database or a bundle), run it on a stream, check it, close (kforge's C API) */
#include <cuda_runtime.h>
#include <kforge.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { B = 2, HQ = 32, HKV = 8, D = 128, SKV = 1000 };

static uint16_t to_bf16(float f) { uint32_t u; memcpy(&u, &f, 4); return (uint16_t)((u + 0x7FFF + ((u >> 16) & 1)) >> 16); }
static float from_bf16(uint16_t h) { uint32_t u = (uint32_t)h << 16; float f; memcpy(&f, &u, 4); return f; }

/* FNV-1a of the output's bytes: equal hashes from two runs (a database, a bundle) mean bit-identical outputs. */
static unsigned long long fnv1a(const void *p, size_t n)
{
    unsigned long long h = 14695981039346656037ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ ((const unsigned char *)p)[i]) * 1099511628211ull;
    return h;
}

/* usage: decode [DB|-] [BUNDLE.kfb]   (a bundle given: served with JIT forbidden) */
int main(int argc, char **argv)
{
    kf_config cfg = KF_CONFIG_INIT;
    cfg.db_path = argc > 1 && strcmp(argv[1], "-") ? argv[1] : NULL;   /* winners and cached binaries, optional */
    const char *bundles[1];
    if (argc > 2) {                                 /* a tuned bundle (kforge export), no compiler needed */
        bundles[0] = argv[2];
        cfg.bundles = bundles, cfg.n_bundles = 1;
        cfg.jit = KF_JIT_FORBID;
    }
    kf_ctx *ctx;
    if (kf_open(&ctx, &cfg) != KF_OK) {
        fprintf(stderr, "error: %s\n", kf_errmsg(ctx));
        kf_close(ctx);
        return 1;
    }
    kf_attn_desc d = KF_ATTN_DESC_INIT;             /* q [B, 1, HQ, D], k/v [B, SKV, HKV, D], contiguous */
    d.kind = KF_ATTN_DECODE;
    d.dtype = KF_BF16;
    d.hq = HQ, d.hkv = HKV, d.d = D;
    d.max_batch = B, d.max_q = 1, d.max_kv = SKV;
    kf_plan *plan;
    if (kf_attn_plan(ctx, &d, &plan) != KF_OK) {    /* may compile: do it once, at start-up */
        fprintf(stderr, "error: %s\n", kf_errmsg(ctx));
        kf_close(ctx);
        return 1;
    }
    printf("variant %s (from %s)\n", kf_plan_variant(plan), kf_plan_source(plan));

    size_t nq = (size_t)B * HQ * D, nk = (size_t)B * SKV * HKV * D;
    uint16_t *q = malloc(nq * 2), *k = malloc(nk * 2), *v = malloc(nk * 2), *o = malloc(nq * 2);
    srand(1);
    for (size_t i = 0; i < nq; i++) q[i] = to_bf16((float)rand() / RAND_MAX - 0.5f);
    for (size_t i = 0; i < nk; i++) k[i] = to_bf16((float)rand() / RAND_MAX - 0.5f), v[i] = to_bf16((float)rand() / RAND_MAX - 0.5f);
    void *dq, *dk, *dv, *dout;
    cudaStream_t stream;
    cudaMalloc(&dq, nq * 2), cudaMalloc(&dk, nk * 2), cudaMalloc(&dv, nk * 2), cudaMalloc(&dout, nq * 2);
    cudaMemcpy(dq, q, nq * 2, cudaMemcpyHostToDevice);
    cudaMemcpy(dk, k, nk * 2, cudaMemcpyHostToDevice);
    cudaMemcpy(dv, v, nk * 2, cudaMemcpyHostToDevice);
    cudaStreamCreate(&stream);

    kf_attn_tensors t = {0};
    t.q = dq, t.k = dk, t.v = dv, t.o = dout;
    t.batch = B, t.q_len = 1, t.kv_len_all = SKV;
    if (kf_attn_run(plan, &t, stream) != KF_OK) {   /* checks and enqueues; no sync, no allocation */
        fprintf(stderr, "error: %s\n", kf_errmsg(ctx));
        return 1;
    }
    cudaStreamSynchronize(stream);
    cudaMemcpy(o, dout, nq * 2, cudaMemcpyDeviceToHost);

    /* check one head of each sequence against a plain softmax */
    double worst = 0;
    for (int b = 0; b < B; b++) {
        int h = 13, kh = h / (HQ / HKV);
        double s[SKV], m = -1e300, l = 0;
        for (int j = 0; j < SKV; j++) {
            double dot = 0;
            for (int c = 0; c < D; c++)
                dot += from_bf16(q[((size_t)b * HQ + h) * D + c]) * from_bf16(k[(((size_t)b * SKV + j) * HKV + kh) * D + c]);
            s[j] = dot / sqrt((double)D);
            m = s[j] > m ? s[j] : m;
        }
        for (int j = 0; j < SKV; j++) l += exp(s[j] - m);
        for (int c = 0; c < D; c++) {
            double acc = 0;
            for (int j = 0; j < SKV; j++) acc += exp(s[j] - m) / l * from_bf16(v[(((size_t)b * SKV + j) * HKV + kh) * D + c]);
            double err = fabs(acc - from_bf16(o[((size_t)b * HQ + h) * D + c]));
            worst = err > worst ? err : worst;
        }
    }
    printf("max abs error against the reference: %.2e %s\n", worst, worst < 2e-2 ? "(ok)" : "(WRONG)");
    printf("output hash %016llx\n", fnv1a(o, nq * 2));
    kf_plan_free(plan);
    kf_close(ctx);
    cudaFree(dq), cudaFree(dk), cudaFree(dv), cudaFree(dout);
    free(q), free(k), free(v), free(o);
    return worst < 2e-2 ? 0 : 1;
}
