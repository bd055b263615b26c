/* tuner/tune_gate.c: the cases a shape is gated and timed on: full for timing, bounded for the correctness gate (pure) */
#include "tuner/tune_gate.h"
#include "runtime/family.h"

#include <stdio.h>
#include <string.h>

int tune_time_case(const gen_kvset *shape, uint64_t seed, tune_attn_case *c)
{
    memset(c, 0, sizeof *c);
    const char *dt = gen_kv_str(shape, "dtype");
    if (!dt || (strcmp(dt, "bf16") && strcmp(dt, "fp16")))
        return -1;
    c->dtype = strcmp(dt, "bf16") ? CHECK_FP16 : CHECK_BF16;
    c->b = (int)gen_kv_int(shape, "b", 0);
    c->sq = (int)gen_kv_int(shape, "sq", 0);
    c->skv = (int)gen_kv_int(shape, "skv", 0);
    c->hq = (int)gen_kv_int(shape, "hq", 0);
    c->hkv = (int)gen_kv_int(shape, "hkv", 0);
    c->d = (int)gen_kv_int(shape, "d", 0);
    c->causal = (int)gen_kv_int(shape, "causal", 0);
    /* the model features the variant was built for (issue 21): timed and gated with them, not as plain attention */
    c->window = gen_kv_find(shape, "window") != NULL, c->window_left = (int)gen_kv_int(shape, "window", 0);
    c->softcap = (double)gen_kv_int(shape, "softcap", 0), c->sinks = (int)gen_kv_int(shape, "sinks", 0);
    const char *kv = gen_kv_str(shape, "kv_dtype");
    c->kv_fp8 = kv && !strcmp(kv, "e4m3");
    c->page_size = (int)gen_kv_int(shape, "page_size", 0);   /* paged K/V: a shuffled pool, as the runtime's */
    c->seed = seed;
    if (c->b < 1 || c->sq < 1 || c->skv < 1 || c->hq < 1 || c->hkv < 1 || c->d < 1)
        return -1;
    return 0;
}

static long long kv_bytes(const tune_attn_case *c)
{
    return 2ll * c->b * c->skv * c->hkv * c->d * (long long)check_dtype_size(c->dtype);
}

static uint64_t next(uint64_t *x)
{
    uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

int tune_gate_case(const gen_kvset *shape, uint64_t seed, tune_attn_case *c, int *kv_len)
{
    if (tune_time_case(shape, 0, c))
        return -1;
    tune_attn_case full = *c;
    int prefill = rt_family_is(shape, RT_FAM_ATTN_PREFILL);
    if (prefill) {
        int same = c->sq == c->skv;
        if (c->skv > TUNE_GATE_PREFILL_MAX)
            c->skv = TUNE_GATE_PREFILL_MAX;
        if (same || c->sq > c->skv)
            c->sq = c->skv;
    }
    while (kv_bytes(c) > TUNE_GATE_KV_BYTES) {
        if (c->b > 1)
            c->b = (c->b + 1) / 2;
        else if (c->skv / 2 >= 256)
            c->skv /= 2;
        else
            break;
    }
    if (!prefill && c->sq > c->skv)
        c->sq = c->skv;
    if (!prefill) {
        uint64_t st = seed;
        for (int i = 0; i < c->b; i++) {
            int short_by = (int)(next(&st) % 64);
            kv_len[i] = i == 0 ? (c->skv > short_by ? c->skv - short_by : c->skv)
                               : 1 + (int)(next(&st) % (uint64_t)c->skv);
        }
        c->kv_len = kv_len;
    }
    return c->b != full.b || c->skv != full.skv || c->sq != full.sq;
}

void tune_case_str(const tune_attn_case *c, char *buf, size_t n)
{
    snprintf(buf, n, "b%d sq%d skv%d%s", c->b, c->sq, c->skv, c->kv_len ? " ragged" : "");
}
