/* tests/cpu/test_jit.c: the runtime's generator: defaults and keys are those of the templates, answered once */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include "gen/build.h"
#include "gen/sweep.h"
#include "gen/template.h"
#include "runtime/binkey.h"
#include "runtime/jit.h"
#include "tests/cpu/api_util.h"

static gen_kvset shape_of(const char *text)
{
    gen_kvset s;
    char err[128];
    gen_kv_clear(&s);
    assert_int_equal(gen_kv_parse(&s, text, err, sizeof err), 0);
    return s;
}

static void test_jit__default_and_keys_match_the_template_and_are_kept(void **state)
{
    core_err err = CORE_ERR_INIT;
    rt_jit *j = rt_jit_new(NULL, &err);
    assert_non_null(j);
    rt_devinfo dev = api_h200();
    gen_kvset shape = shape_of("family=attn_decode,dtype=bf16,b=32,sq=1,skv=8192,hq=32,hkv=8,d=128,causal=0");
    gen_kvset vp1, vp2;
    assert_int_equal(rt_jit_default(j, &shape, &dev, &vp1, &err), 0);
    assert_int_equal(rt_jit_default(j, &shape, &dev, &vp2, &err), 0);
    assert_memory_equal(&vp1, &vp2, sizeof vp1);
    assert_string_equal(gen_kv_str(&vp1, "family"), "attn_decode");
    assert_int_equal(gen_kv_int(&vp1, "g", 0), 4);

    /* the same answer as the generator gives directly */
    gen_host *h = gen_host_new(NULL);
    gen_tmpl *t = gen_tmpl_load(h, "attn_decode");
    gen_device g;
    assert_int_equal(gen_device_for_arch(&g, "sm_90a"), 0);
    gen_kvset fixed, params;
    assert_int_equal(gen_tmpl_fixed(t, &shape, &fixed), 0);
    assert_int_equal(gen_tmpl_default(t, &shape, &g, &params), 0);
    gen_job job;
    memset(&job, 0, sizeof job);
    job.tmpl = t, job.fixed = fixed, job.params = params;
    gen_target tg;
    assert_int_equal(gen_target_init(&tg, "sm_90a", 0, &g), 0);
    assert_int_equal(gen_build_prepare(&job, &tg), 0);

    char variant[512], key[600];
    long before = rt_jit_renders(j);
    assert_int_equal(rt_jit_keys(j, &vp1, &dev, variant, sizeof variant, key, sizeof key, &err), 0);
    assert_int_equal(rt_jit_renders(j), before + 1);
    assert_string_equal(variant, job.variant_key);
    assert_string_equal(key, job.cache_key);
    /* asked again: the kept answer, no render */
    char variant2[512], key2[600];
    assert_int_equal(rt_jit_keys(j, &vp1, &dev, variant2, sizeof variant2, key2, sizeof key2, &err), 0);
    assert_int_equal(rt_jit_renders(j), before + 1);
    assert_string_equal(variant2, variant);
    assert_string_equal(key2, key);
    /* another device's facts are another question */
    rt_devinfo a100 = dev;
    snprintf(a100.arch, sizeof a100.arch, "sm_80");
    a100.sms = 108, a100.smem_optin = 166912;
    assert_int_equal(rt_jit_keys(j, &vp1, &a100, variant2, sizeof variant2, key2, sizeof key2, &err), 0);
    assert_int_equal(rt_jit_renders(j), before + 2);
    assert_string_not_equal(key2, key);
    gen_job_free(&job);
    gen_host_free(h);
    rt_jit_free(j);
}

/* A database winner timed on an older template is keyed anew under the current one (its old
 * cubin is not used); a bundle winner, a winner without a generator, and a winner whose params
 * the current template refuses keep the binary they name. */
static void test_jit__winner_of_an_older_template_is_keyed_anew(void **state)
{
    core_err err = CORE_ERR_INIT;
    rt_jit *j = rt_jit_new(NULL, &err);
    assert_non_null(j);
    rt_devinfo dev = api_h200();
    gen_kvset shape = shape_of("family=attn_decode,dtype=bf16,b=32,sq=1,skv=8192,hq=32,hkv=8,d=128,causal=0");
    rt_winner w;
    memset(&w, 0, sizeof w);
    w.shape = shape;
    assert_int_equal(rt_jit_default(j, &shape, &dev, &w.vp, &err), 0);
    char now_v[512], now_k[600];
    assert_int_equal(rt_jit_keys(j, &w.vp, &dev, now_v, sizeof now_v, now_k, sizeof now_k, &err), 0);
    snprintf(w.variant, sizeof w.variant, "%s", now_v);
    snprintf(w.cache_key, sizeof w.cache_key, "%s.sm_90a.0123456789abcdef", now_v);   /* an older template's */
    rt_choice ch;
    memset(&ch, 0, sizeof ch);
    ch.shape = shape, ch.vp = w.vp, ch.winner = &w;

    char v[512], k[600];
    assert_int_equal(rt_binary_keys(j, &ch, &dev, v, sizeof v, k, sizeof k, &err), 1);
    assert_string_equal(k, now_k);
    assert_string_equal(v, now_v);
    /* the winner is of the current template: nothing to re-key */
    snprintf(w.cache_key, sizeof w.cache_key, "%s", now_k);
    assert_int_equal(rt_binary_keys(j, &ch, &dev, v, sizeof v, k, sizeof k, &err), 0);
    assert_string_equal(k, now_k);
    /* from a bundle, or without a generator: the winner's own binary */
    snprintf(w.cache_key, sizeof w.cache_key, "%s.sm_90a.0123456789abcdef", now_v);
    w.from_bundle = 1;
    assert_int_equal(rt_binary_keys(j, &ch, &dev, v, sizeof v, k, sizeof k, &err), 0);
    assert_string_equal(k, w.cache_key);
    w.from_bundle = 0;
    assert_int_equal(rt_binary_keys(NULL, &ch, &dev, v, sizeof v, k, sizeof k, &err), 0);
    assert_string_equal(k, w.cache_key);
    /* params the current template refuses (a knob it no longer has a value for): the winner's own binary */
    gen_kv_set_int(&ch.vp, "bn", 48);
    assert_int_equal(rt_binary_keys(j, &ch, &dev, v, sizeof v, k, sizeof k, &err), 0);
    assert_string_equal(k, w.cache_key);
    assert_int_equal(rt_jit_keys(j, &ch.vp, &dev, v, sizeof v, k, sizeof k, &err), -1);
    assert_non_null(strstr(err.msg, "bn=48"));
    /* no winner: the default's keys, or an error without a generator */
    ch.winner = NULL, ch.vp = w.vp;
    assert_int_equal(rt_binary_keys(j, &ch, &dev, v, sizeof v, k, sizeof k, &err), 0);
    assert_string_equal(k, now_k);
    assert_int_equal(rt_binary_keys(NULL, &ch, &dev, v, sizeof v, k, sizeof k, &err), -1);
    rt_jit_free(j);
}

/* The runtime's path for a template default (rt_jit_default, then rt_jit_keys, which refuses a variant
 * its template calls invalid) answers every shape of every embedded sweep on an H200. */
struct sweep_ctx {
    rt_jit *j;
    gen_host *h;
    int shapes;
};

static int key_sweep(const char *name, void *arg)
{
    struct sweep_ctx *c = arg;
    rt_devinfo dev = api_h200();
    gen_sweep sw;
    assert_int_equal(gen_sweep_load(c->h, name, &sw), 0);
    for (int i = 0; i < sw.n; i++) {
        core_err err = CORE_ERR_INIT;
        char v[512], k[600], key[512];
        gen_kvset vp;
        gen_kv_keyform(&sw.shapes[i], key, sizeof key);
        if (rt_jit_default(c->j, &sw.shapes[i], &dev, &vp, &err) ||
            rt_jit_keys(c->j, &vp, &dev, v, sizeof v, k, sizeof k, &err))
            fail_msg("sweep %s, %s: %s", name, key, err.msg);
        c->shapes++;
    }
    gen_sweep_free(&sw);
    return 0;
}

static void test_jit__every_sweep_default_is_keyed(void **state)
{
    core_err err = CORE_ERR_INIT;
    struct sweep_ctx c = {rt_jit_new(NULL, &err), gen_host_new(NULL), 0};
    assert_non_null(c.j);
    assert_int_equal(gen_sweep_names(c.h, key_sweep, &c), 0);
    assert_true(c.shapes > 50);
    print_message("%d sweep shapes keyed, %ld templates rendered\n", c.shapes, rt_jit_renders(c.j));
    gen_host_free(c.h);
    rt_jit_free(c.j);
}

static void test_jit__more_questions_than_kept_answers(void **state)
{
    core_err err = CORE_ERR_INIT;
    rt_jit *j = rt_jit_new(NULL, &err);
    rt_devinfo dev = api_h200();
    char first[600] = "";
    for (int g = 1; g <= 80; g++) {  /* more variants (one group size each) than the 64 kept answers */
        char text[256], variant[512], key[600];
        snprintf(text, sizeof text, "family=attn_decode,dtype=bf16,b=1,sq=1,skv=8192,hq=%d,hkv=1,d=128,causal=0", g);
        gen_kvset shape = shape_of(text), vp;
        assert_int_equal(rt_jit_default(j, &shape, &dev, &vp, &err), 0);
        assert_int_equal(rt_jit_keys(j, &vp, &dev, variant, sizeof variant, key, sizeof key, &err), 0);
        if (g == 1)
            snprintf(first, sizeof first, "%s", key);
    }
    /* g=1 was the first of 80 answers kept 64 at a time: it was replaced, so asking again
     * renders again and gives the same key */
    gen_kvset shape = shape_of("family=attn_decode,dtype=bf16,b=1,sq=1,skv=8192,hq=1,hkv=1,d=128,causal=0"), vp;
    char variant[512], key[600];
    assert_int_equal(rt_jit_default(j, &shape, &dev, &vp, &err), 0);
    long before = rt_jit_renders(j);
    assert_int_equal(rt_jit_keys(j, &vp, &dev, variant, sizeof variant, key, sizeof key, &err), 0);
    assert_string_equal(key, first);
    assert_int_equal(rt_jit_renders(j), before + 1);  /* evicted: asked anew */
    rt_jit_free(j);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_jit__default_and_keys_match_the_template_and_are_kept),
        cmocka_unit_test(test_jit__winner_of_an_older_template_is_keyed_anew),
        cmocka_unit_test(test_jit__every_sweep_default_is_keyed),
        cmocka_unit_test(test_jit__more_questions_than_kept_answers),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
