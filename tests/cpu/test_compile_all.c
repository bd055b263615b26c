/* tests/cpu/test_compile_all.c: every valid variant of the default sweep (sm_90a, sm_80), of the KDA families and of the split-score sweeps (sm_90a) compiles with NVRTC, in parts that ctest runs as one test each */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "gen/build.h"
#include "gen/sweep.h"
#include "gen/template.h"

/*
 * The set (split into parts, see main): for every shape of the embedded default sweep, every valid variant of
 * its family's space (runtime params do not change the binary, so they are
 * compiled once), plus the default variant of each family across the dtype x
 * head dim x causal matrix (fp16/bf16, 64/128/256, 0/1, G 1 and 8), for both
 * sm_90a and sm_80. Distinct binaries only.
 */

typedef struct jobs {
    gen_job *v;
    int n, cap;
} jobs;

static gen_host *g_host;

/* A host for a test (also g_host, for add's messages) and tg, the target arch. */
static gen_host *open_host(const char *arch, gen_target *tg)
{
    gen_host *h = gen_host_new(NULL);
    g_host = h;
    assert_int_equal(gen_target_init(tg, arch, 0, NULL), 0);
    return h;
}

/* The template of family, which must load. */
static gen_tmpl *load_tmpl(gen_host *h, const char *family)
{
    gen_tmpl *t = gen_tmpl_load(h, family);
    if (!t)
        fail_msg("%s", gen_host_errmsg(h));
    return t;
}

static void add(jobs *l, gen_tmpl *t, const gen_kvset *fixed, const gen_kvset *params,
                const gen_target *tg)
{
    if (l->n == l->cap) {
        l->cap = l->cap ? 2 * l->cap : 256;
        l->v = realloc(l->v, (size_t)l->cap * sizeof *l->v);
    }
    gen_job *j = &l->v[l->n];
    memset(j, 0, sizeof *j);
    j->tmpl = t;
    j->fixed = *fixed;
    j->params = *params;
    if (gen_build_prepare(j, tg))
        fail_msg("prepare %s: %s", gen_tmpl_family(t), gen_host_errmsg(g_host));
    for (int i = 0; i < l->n; i++)
        if (!strcmp(l->v[i].cache_key, j->cache_key)) {
            gen_job_free(j);
            return;
        }
    l->n++;
}

/* Adds the variant of params text `text` on a fixed shape, which must be valid on tg's device. */
static void add_valid(jobs *l, gen_tmpl *t, const gen_kvset *fixed, const char *text, const gen_target *tg)
{
    gen_kvset params;
    char why[256];
    gen_kv_clear(&params);
    assert_int_equal(gen_kv_parse(&params, text, why, sizeof why), 0);
    if (gen_tmpl_valid(t, fixed, &params, &tg->dev, why, sizeof why) != 1)
        fail_msg("%s not valid on %s: %s", text, tg->arch, why);
    add(l, t, fixed, &params, tg);
}

struct ectx {
    jobs *l;
    gen_tmpl *t;
    const gen_kvset *fixed;
    const gen_target *tg;
};

static int each_cb(const gen_kvset *p, int valid, const char *why, void *arg)
{
    struct ectx *c = arg;
    if (valid)
        add(c->l, c->t, c->fixed, p, c->tg);
    return 0;
}

static void add_shape(gen_host *h, jobs *l, const gen_kvset *shape, int all, const gen_target *tg)
{
    gen_tmpl *t = load_tmpl(h, gen_kv_str(shape, "family"));
    gen_kvset fixed, params;
    if (gen_tmpl_fixed(t, shape, &fixed))
        fail_msg("%s", gen_host_errmsg(h));
    if (all) {
        struct ectx c = {l, t, &fixed, tg};
        if (gen_tmpl_enumerate(t, &fixed, &tg->dev, each_cb, &c))
            fail_msg("%s", gen_host_errmsg(h));
    } else {
        if (gen_tmpl_default(t, shape, &tg->dev, &params))
            fail_msg("%s", gen_host_errmsg(h));
        add(l, t, &fixed, &params, tg);
    }
}

/* The slice of the set this run compiles: the distinct binaries whose index is g_slice modulo g_of (the
 * order of add() is deterministic, so the g_of slices of one set are together the whole set). */
static int g_slice = 0, g_of = 1;

static void keep_slice(jobs *l)
{
    int n = 0;
    for (int i = 0; i < l->n; i++) {
        if (i % g_of == g_slice)
            l->v[n++] = l->v[i];
        else
            gen_job_free(&l->v[i]);
    }
    l->n = n;
}

/* Compiles the jobs on every core, reports failures (and spills), frees the jobs and the host, and
 * asserts that none failed, that ptxas serialized no kernel's wgmma (C7520: 25-35% slower, session 22) and, when
 * spill_max >= 0, that none spilled more than spill_max bytes. */
static void build_and_check(gen_host *h, jobs *l, const gen_target *tg, const char *what, int spill_max)
{
    keep_slice(l);
    int threads = (int)sysconf(_SC_NPROCESSORS_ONLN);
    time_t t0 = time(NULL);
    char err[256];
    int failed = gen_build_run(l->v, l->n, threads, NULL, tg, NULL, NULL, err, sizeof err);
    int spills = 0, over = 0, serial = 0;
    for (int i = 0; i < l->n; i++) {
        if (!l->v[i].failed && l->v[i].bin.wgmma_serial) {   /* every wgmma waiting for the last: a slow kernel */
            print_error("%s: ptxas serialized its wgmma (C7520)\n", l->v[i].variant_key);
            serial++;
        }
        if (l->v[i].failed) {
            print_error("%s\n", l->v[i].err);
        } else if (l->v[i].bin.spill_bytes) {
            if (spill_max >= 0 && l->v[i].bin.spill_bytes > spill_max) {
                print_error("%s: %d bytes of spills (at most %d)\n", l->v[i].variant_key, l->v[i].bin.spill_bytes,
                            spill_max);
                over++;
            }
            spills++;
        }
    }
    print_message("%s (slice %d of %d): %d distinct binaries compiled in %ld s on %d threads, %d failed, %d with spills\n",
                  what, g_slice + 1, g_of, l->n, (long)(time(NULL) - t0), threads, failed, spills);
    for (int i = 0; i < l->n; i++)
        gen_job_free(&l->v[i]);
    free(l->v);
    gen_host_free(h);
    assert_int_equal(failed, 0);
    assert_int_equal(over, 0);
    assert_int_equal(serial, 0);
}

/* The default sweep's shapes of family (every valid variant) and the family's default variant across the
 * dtype x head dim x causal x group matrix, for arch. Families are compiled apart (their binaries never
 * coincide), so the parts together are the whole set. */
static void compile_arch(const char *arch, const char *family)
{
    gen_target tg;
    gen_host *h = open_host(arch, &tg);
    jobs l = {0};
    gen_sweep sw;
    if (gen_sweep_load(h, "default", &sw))
        fail_msg("%s", gen_host_errmsg(h));
    for (int i = 0; i < sw.n; i++)
        if (!strcmp(gen_kv_str(&sw.shapes[i], "family"), family))
            add_shape(h, &l, &sw.shapes[i], 1, &tg);
    gen_sweep_free(&sw);
    /* the dtype x head dim x causal x group matrix, default variants */
    const char *dtypes[] = {"bf16", "fp16"};
    int dims[] = {64, 128, 256}, groups[] = {1, 8};
    for (int a = 0; a < 2; a++)
        for (int d = 0; d < 3; d++)
            for (int c = 0; c < 2; c++)
                for (int g = 0; g < 2; g++) {
                    gen_kvset s;
                    gen_kv_clear(&s);
                    gen_kv_set_str(&s, "family", family);
                    gen_kv_set_str(&s, "dtype", dtypes[a]);
                    gen_kv_set_int(&s, "b", 4);
                    gen_kv_set_int(&s, "sq", !strcmp(family, "attn_decode") ? 4 : 1024);
                    gen_kv_set_int(&s, "skv", 4096);
                    gen_kv_set_int(&s, "hq", 8);
                    gen_kv_set_int(&s, "hkv", 8 / groups[g]);
                    gen_kv_set_int(&s, "d", dims[d]);
                    gen_kv_set_int(&s, "causal", c);
                    add_shape(h, &l, &s, 0, &tg);
                }
    char what[64];
    snprintf(what, sizeof what, "%s %s", family, arch);
    build_and_check(h, &l, &tg, what, -1);
}


/* Every valid variant of a KDA family for K = V = 128 (and 64), sm_90a; kda_prefill's with no spill beyond
 * KDA_PREFILL_SPILL_MAX bytes (its state passes hold the state in registers, impl wgmma as a wgmma accumulator of up
 * to 64 fp32 a thread: a state spill is hundreds of bytes). The allowance covers a few values outside the state
 * products: chunk 16's kf_kda_prep at K 64 (ptxas takes it to 64 registers, 4 blocks an SM, and keeps a value across
 * the 16-thread forward substitution in local memory: 12 bytes; 4 blocks ran 3-7% faster on an H200 than 3 with no
 * spill, bench/NOTES.md session 16) and the fused path at chunk 64, K 64, vs 64, w 4 (the inlined preparation pushes
 * three of the state pass's per-chunk values to local memory: 24 bytes). */
#define KDA_PREFILL_SPILL_MAX 32
static void compile_kda(const char *family)
{
    gen_target tg;
    gen_host *h = open_host("sm_90a", &tg);
    jobs l = {0};
    int dims[] = {128, 64};
    for (int d = 0; d < 2; d++) {
            gen_kvset s;
            gen_kv_clear(&s);
            gen_kv_set_str(&s, "family", family);
            gen_kv_set_int(&s, "n", 4);
            gen_kv_set_int(&s, "t", 4096);
            gen_kv_set_int(&s, "h", 16);
            gen_kv_set_int(&s, "hv", 32);
            gen_kv_set_int(&s, "dk", dims[d]);
            gen_kv_set_int(&s, "dv", dims[d]);
            add_shape(h, &l, &s, 1, &tg);
        }
    char what[64];
    snprintf(what, sizeof what, "%s sm_90a", family);
    build_and_check(h, &l, &tg, what, !strcmp(family, "kda_prefill") ? KDA_PREFILL_SPILL_MAX : -1);
}

/* attn_prefill impl=wgmma, wgmma_ov and wgmma_pp (sm_90a, D 64 and 128 with stages 2 and 3, D 256 with 64-key
 * blocks and stages 2): both dtypes, causal or not, G 1 / 4 / 8 compile with no spill (the consumers hold O and S,
 * up to 160 fp32, in registers: a spill is a slow kernel). */
static void test_compile__prefill_wgmma_sm_90a_no_spills(void **state)
{
    gen_target tg;
    gen_host *h = open_host("sm_90a", &tg);
    gen_tmpl *t = load_tmpl(h, "attn_prefill");
    jobs l = {0};
    const char *dtypes[] = {"bf16", "fp16"};
    int groups[] = {1, 4, 8};
    const char *impls[] = {"wgmma", "wgmma_ov", "wgmma_pp"};
    for (int k = 0; k < 3 * 3 * 2 * 2 * 3 * 2; k++) {
        const int d = k < 72 ? 64 : k < 144 ? 128 : 256, im = k / 24 % 3, a = k / 12 % 2, c = k / 6 % 2, g = k / 2 % 3;
        const int st = d == 256 ? 2 : 2 + k % 2, bn = d == 256 ? 64 : 128;
        if (d == 256 && k % 2)
            continue;   /* D 256: two stages only (three need 257 KB of shared memory) */
        gen_kvset s, fixed;
        gen_kv_clear(&s);
        gen_kv_set_str(&s, "dtype", dtypes[a]);
        gen_kv_set_int(&s, "b", 1);
        gen_kv_set_int(&s, "sq", 4096);
        gen_kv_set_int(&s, "skv", 4096);
        gen_kv_set_int(&s, "hq", 8 * groups[g]);
        gen_kv_set_int(&s, "hkv", 8);
        gen_kv_set_int(&s, "d", d);
        gen_kv_set_int(&s, "causal", c);
        char text[128];
        snprintf(text, sizeof text, "impl=%s,bm=128,w=8,bn=%d,stages=%d", impls[im], bn, st);
        if (gen_tmpl_fixed(t, &s, &fixed))
            fail_msg("%s", gen_host_errmsg(h));
        add_valid(&l, t, &fixed, text, &tg);
    }
    build_and_check(h, &l, &tg, "attn_prefill impl=wgmma* sm_90a", 0);
}

/* attn_parts_decode: every valid variant of the split-score shapes of sweeps mla_decode and audit_group
 * (absorbed MLA Hq 16..128, Sq 1/2, page 64; base 128 + delta 32, layers 4 and 1) compiles for sm_90a with
 * no spill. */
static void test_compile__every_parts_sweep_variant_sm_90a_no_spills(void **state)
{
    (void)state;
    gen_target tg;
    gen_host *h = open_host("sm_90a", &tg);
    jobs l = {0};
    const char *sweeps[] = {"mla_decode", "audit_group"};
    for (int k = 0; k < 2; k++) {
        gen_sweep sw;
        if (gen_sweep_load(h, sweeps[k], &sw))
            fail_msg("%s", gen_host_errmsg(h));
        for (int i = 0; i < sw.n; i++)
            if (!strcmp(gen_kv_str(&sw.shapes[i], "family"), "attn_parts_decode"))
                add_shape(h, &l, &sw.shapes[i], 1, &tg);
        gen_sweep_free(&sw);
    }
    build_and_check(h, &l, &tg, "attn_parts_decode sm_90a", 0);
}

/* attn_parts_decode on the FP8 latent cache (kv_dtype e4m3, absorbed MLA 576 / 512, sm_90a): every valid variant of
 * impl wg8 (parts/decode_wg8.cuh: e4m3 wgmma; the consumers hold O^T, 128 fp32, in registers) at Hq 16 / 40 / 128, Sq 1
 * and 2 causal, pages 64 and 256 and contiguous, compiles with no spill */
static void test_compile__fp8_mla_wg8_sm_90a_no_spills(void **state)
{
    (void)state;
    gen_target tg;
    gen_host *h = open_host("sm_90a", &tg);
    gen_tmpl *t = load_tmpl(h, "attn_parts_decode");
    jobs l = {0};
    const int hqs[] = {16, 40, 128}, pages[] = {64, 256, 0};
    for (int k = 0; k < 3 * 3 * 2; k++) {
        const int hq = hqs[k % 3], ps = pages[k / 3 % 3], causal = k / 9;
        char text[320], why[256];
        snprintf(text, sizeof text, "dtype=bf16,b=4,sq=%d,skv=4096,hq=%d,hkv=1,parts=latent512_rope64,value=alias_latent,"
                 "dv=512,layers=1,page_size=%d,causal=%d,kv_dtype=e4m3", causal ? 2 : 1, hq, ps, causal);
        gen_kvset s, fixed;
        gen_kv_clear(&s);
        assert_int_equal(gen_kv_parse(&s, text, why, sizeof why), 0);
        if (gen_tmpl_fixed(t, &s, &fixed))
            fail_msg("%s", gen_host_errmsg(h));
        for (int st = 2; st <= 4; st++) {
            snprintf(text, sizeof text, "impl=wg8,tm=16,wn=1,bn=64,stages=%d,sp=1", st);
            add_valid(&l, t, &fixed, text, &tg);
        }
    }
    build_and_check(h, &l, &tg, "attn_parts_decode impl=wg8 (FP8 latent) sm_90a", 0);
}

/* The parts, each its own CTest (tests/CMakeLists.txt reads the PART lines below): one per family and
 * arch, so ctest -j runs them side by side and reports each as it ends. */
typedef struct part {
    const char *name;
    void (*fn)(const char *a, const char *b);
    const char *a, *b;
    int slice, of;        /* this part compiles slice `slice` of `of` of its set (see keep_slice) */
} part;

static void run_arch(const char *arch, const char *family) { compile_arch(arch, family); }
static void run_kda(const char *family, const char *unused) { compile_kda(family); }
static void run_wgmma(const char *a, const char *b) { test_compile__prefill_wgmma_sm_90a_no_spills(NULL); }
static void run_parts(const char *a, const char *b) { test_compile__every_parts_sweep_variant_sm_90a_no_spills(NULL); }
static void run_mla8(const char *a, const char *b) { test_compile__fp8_mla_wg8_sm_90a_no_spills(NULL); }

/* The per-family parts of the default sweep cover it: it holds no family without a part of its own. */
static void run_covered(const char *a, const char *b)
{
    gen_host *h = gen_host_new(NULL);
    gen_sweep sw;
    if (gen_sweep_load(h, "default", &sw))
        fail_msg("%s", gen_host_errmsg(h));
    for (int i = 0; i < sw.n; i++) {
        const char *f = gen_kv_str(&sw.shapes[i], "family");
        if (strcmp(f, "attn_decode") && strcmp(f, "attn_prefill") && strcmp(f, "attn_naive"))
            fail_msg("the default sweep holds family '%s', which no part of test_compile_all compiles", f);
    }
    gen_sweep_free(&sw);
    gen_host_free(h);
}

static void run_slices(const char *a, const char *b);

/* PART: the whole set; PART_OF: slice i (0-based) of n. The slices of a set are listed together, all n
 * of them (tests/CMakeLists.txt reads these lines: one CTest each). Sets of a few minutes are sliced so
 * that no part runs much longer than the others on two cores. */
#define PART(name, fn, a, b) {name, fn, a, b, 0, 1}
#define PART_OF(name, fn, a, b, i, n) {name, fn, a, b, i, n}
static const part parts[] = {
    PART_OF("attn_decode_sm_90a_1of3", run_arch, "sm_90a", "attn_decode", 0, 3),
    PART_OF("attn_decode_sm_90a_2of3", run_arch, "sm_90a", "attn_decode", 1, 3),
    PART_OF("attn_decode_sm_90a_3of3", run_arch, "sm_90a", "attn_decode", 2, 3),
    PART_OF("attn_prefill_sm_90a_1of2", run_arch, "sm_90a", "attn_prefill", 0, 2),
    PART_OF("attn_prefill_sm_90a_2of2", run_arch, "sm_90a", "attn_prefill", 1, 2),
    PART("attn_naive_sm_90a", run_arch, "sm_90a", "attn_naive"),
    PART_OF("attn_decode_sm_80_1of3", run_arch, "sm_80", "attn_decode", 0, 3),
    PART_OF("attn_decode_sm_80_2of3", run_arch, "sm_80", "attn_decode", 1, 3),
    PART_OF("attn_decode_sm_80_3of3", run_arch, "sm_80", "attn_decode", 2, 3),
    PART("attn_prefill_sm_80", run_arch, "sm_80", "attn_prefill"),
    PART("attn_naive_sm_80", run_arch, "sm_80", "attn_naive"),
    PART_OF("kda_prefill_sm_90a_1of5", run_kda, "kda_prefill", NULL, 0, 5),
    PART_OF("kda_prefill_sm_90a_2of5", run_kda, "kda_prefill", NULL, 1, 5),
    PART_OF("kda_prefill_sm_90a_3of5", run_kda, "kda_prefill", NULL, 2, 5),
    PART_OF("kda_prefill_sm_90a_4of5", run_kda, "kda_prefill", NULL, 3, 5),
    PART_OF("kda_prefill_sm_90a_5of5", run_kda, "kda_prefill", NULL, 4, 5),
    PART("kda_decode_sm_90a", run_kda, "kda_decode", NULL),
    PART("kda_naive_sm_90a", run_kda, "kda_naive", NULL),
    PART_OF("prefill_wgmma_sm_90a_no_spills_1of4", run_wgmma, NULL, NULL, 0, 4),
    PART_OF("prefill_wgmma_sm_90a_no_spills_2of4", run_wgmma, NULL, NULL, 1, 4),
    PART_OF("prefill_wgmma_sm_90a_no_spills_3of4", run_wgmma, NULL, NULL, 2, 4),
    PART_OF("prefill_wgmma_sm_90a_no_spills_4of4", run_wgmma, NULL, NULL, 3, 4),
    PART_OF("parts_sweeps_sm_90a_no_spills_1of2", run_parts, NULL, NULL, 0, 2),
    PART_OF("parts_sweeps_sm_90a_no_spills_2of2", run_parts, NULL, NULL, 1, 2),
    PART("fp8_mla_wg8_sm_90a_no_spills", run_mla8, NULL, NULL),
    PART("default_sweep_families_covered", run_covered, NULL, NULL),
    PART("slices_complete", run_slices, NULL, NULL),
};
#define N_PARTS (int)(sizeof parts / sizeof parts[0])

/* Every sliced set has each of its slices once: together they are the whole set. */
static void run_slices(const char *a, const char *b)
{
    for (int i = 0; i < N_PARTS; i++) {
        const part *p = &parts[i];
        int seen = 0;
        for (int k = 0; k < N_PARTS; k++) {
            const part *q = &parts[k];
            if (q->fn == p->fn && q->a == p->a && q->b == p->b) {
                if (q->of != p->of)
                    fail_msg("parts %s and %s slice one set in %d and %d", p->name, q->name, p->of, q->of);
                seen |= 1 << q->slice;
            }
        }
        if (seen != (1 << p->of) - 1)
            fail_msg("the set of part %s lacks a slice of its %d (seen mask %#x)", p->name, p->of, seen);
    }
}

static const part *g_part;
static void run_part(void **state)
{
    g_slice = g_part->slice, g_of = g_part->of;
    g_part->fn(g_part->a, g_part->b);
}

/* test_compile_all [PART ...]: the named parts (default: every part, one after the other); --list names them. */
int main(int argc, char **argv)
{
    unsetenv("KFORGE_TEMPLATE_DIR");
    if (argc == 2 && !strcmp(argv[1], "--list")) {
        for (int i = 0; i < N_PARTS; i++)
            puts(parts[i].name);
        return 0;
    }
    for (int k = 1; k < argc; k++) {
        int known = 0;
        for (int i = 0; i < N_PARTS; i++)
            known |= !strcmp(argv[k], parts[i].name);
        if (!known) {
            fprintf(stderr, "error: no part '%s' (see 'test_compile_all --list')\n", argv[k]);
            return 2;
        }
    }
    int failed = 0;
    for (int i = 0; i < N_PARTS; i++) {
        int want = argc < 2;
        for (int k = 1; k < argc; k++)
            want |= !strcmp(argv[k], parts[i].name);
        if (!want)
            continue;
        g_part = &parts[i];
        char name[128];
        snprintf(name, sizeof name, "test_compile__%s", parts[i].name);
        const struct CMUnitTest t[] = {{name, run_part, NULL, NULL, NULL}};
        failed += cmocka_run_group_tests_name(name, t, NULL, NULL);
    }
    return failed ? 1 : 0;
}
