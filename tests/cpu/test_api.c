/* tests/cpu/test_api.c: the public API without a GPU: status text, open errors, and selection's argument checks */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/kforge.h"
#include "runtime/select.h"

static rt_devinfo h200(void)
{
    rt_devinfo d;
    memset(&d, 0, sizeof d);
    snprintf(d.name, sizeof d.name, "NVIDIA H200");
    snprintf(d.arch, sizeof d.arch, "sm_90a");
    d.cc_major = 9;
    d.sms = 132;
    d.smem_optin = 232448;
    return d;
}

static kf_attn_desc decode(void)
{
    kf_attn_desc d = KF_ATTN_DESC_INIT;
    d.kind = KF_ATTN_DECODE;
    d.dtype = KF_BF16;
    d.hq = 32, d.hkv = 8, d.d = 128;
    d.max_batch = 4, d.max_q = 1, d.max_kv = 4096;
    return d;
}

static int fake_default(void *arg, const gen_kvset *shape, gen_kvset *vp, char *err, size_t n)
{
    gen_kv_clear(vp);
    gen_kv_set_str(vp, "family", gen_kv_str(shape, "family"));
    gen_kv_set_int(vp, "sp", 4);
    gen_kv_set_int(vp, "d", gen_kv_int(shape, "d", 0));
    gen_kv_set_int(vp, "g", 4);
    gen_kv_set_str(vp, "dtype", "bf16");
    gen_kv_set_int(vp, "causal", 0);
    gen_kv_set_int(vp, "tm", 16);
    return 0;
}

/* One bad field at a time: the status and a message naming the field and its value. */
static void expect(kf_attn_desc d, kf_status want, const char *needle)
{
    rt_devinfo dev = h200();
    rt_choice ch;
    char msg[512];
    kf_status st = rt_select(&d, &dev, NULL, fake_default, NULL, &ch, msg, sizeof msg);
    if (st != want || !strstr(msg, needle))
        fail_msg("got %s '%s', want %s with '%s'", kf_status_str(st), msg, kf_status_str(want), needle);
}

static void test_api__every_field_is_checked(void **state)
{
    kf_attn_desc d;
    d = decode(), d.kind = 7, expect(d, KF_ERR_ARG, "desc.kind");
    d = decode(), d.dtype = 9, expect(d, KF_ERR_ARG, "desc.dtype must be KF_BF16 or KF_FP16, got 9");
    d = decode(), d.hq = 0, expect(d, KF_ERR_ARG, "desc.hq must be positive, got 0");
    d = decode(), d.hkv = -1, expect(d, KF_ERR_ARG, "desc.hkv must be positive, got -1");
    d = decode(), d.hq = 12, expect(d, KF_ERR_ARG, "desc.hq (12) must be a multiple of desc.hkv (8)");
    d = decode(), d.d = 0, expect(d, KF_ERR_ARG, "desc.d must be positive, got 0");
    d = decode(), d.d = 96, expect(d, KF_ERR_UNSUPPORTED, "desc.d = 96");
    d = decode(), d.causal = 2, expect(d, KF_ERR_ARG, "desc.causal must be 0 or 1, got 2");
    d = decode(), d.scale = -1.0f, expect(d, KF_ERR_ARG, "desc.scale");
    d = decode(), d.max_batch = 0, expect(d, KF_ERR_ARG, "desc.max_batch must be positive, got 0");
    d = decode(), d.max_q = -3, expect(d, KF_ERR_ARG, "desc.max_q must be positive, got -3");
    d = decode(), d.max_kv = -1, expect(d, KF_ERR_ARG, "desc.max_kv must be >= 0, got -1");
    d = decode(), d.max_q = 17, expect(d, KF_ERR_UNSUPPORTED, "desc.max_q = 17");
    d = decode(), d.packed_q = 1, expect(d, KF_ERR_UNSUPPORTED, "packed q");
    d = decode(), d.k_strides[1] = 1028, expect(d, KF_ERR_UNSUPPORTED, "desc.k_strides[1] = 1028");
    d = decode(), d.q_strides[0] = -8, expect(d, KF_ERR_ARG, "desc.q_strides[0] must be >= 0, got -8");
    d = decode(), d.o_strides[2] = 12, expect(d, KF_ERR_UNSUPPORTED, "desc.o_strides[2] = 12");
}

static void test_api__selection_is_pure_and_prefers_winners(void **state)
{
    rt_devinfo dev = h200();
    kf_attn_desc d = decode();
    rt_choice a, b;
    char msg[256];
    assert_int_equal(rt_select(&d, &dev, NULL, fake_default, NULL, &a, msg, sizeof msg), KF_OK);
    assert_int_equal(rt_select(&d, &dev, NULL, fake_default, NULL, &b, msg, sizeof msg), KF_OK);
    assert_null(a.winner);
    assert_memory_equal(&a.vp, &b.vp, sizeof a.vp);
    assert_true(a.workspace > 0);  /* sp 4: split partials */
    /* no default and no winner: not tuned, naming the shape */
    assert_int_equal(rt_select(&d, &dev, NULL, NULL, NULL, &a, msg, sizeof msg), KF_ERR_NOT_TUNED);
    assert_non_null(strstr(msg, "skv4096"));
    /* a winner of the same kernel class wins, the nearest in lengths */
    rt_table t = {0};
    rt_winner w;
    memset(&w, 0, sizeof w);
    char err[64];
    gen_kv_parse(&w.shape, "family=attn_decode,dtype=bf16,b=4,sq=1,skv=131072,hq=32,hkv=8,d=128,causal=0", err, sizeof err);
    gen_kv_parse(&w.vp, "family=attn_decode,sp=16,tm=16", err, sizeof err);
    snprintf(w.variant, sizeof w.variant, "far");
    rt_table_add(&t, &w);
    gen_kv_parse(&w.shape, "family=attn_decode,dtype=bf16,b=4,sq=1,skv=8192,hq=32,hkv=8,d=128,causal=0", err, sizeof err);
    snprintf(w.variant, sizeof w.variant, "near");
    rt_table_add(&t, &w);
    gen_kv_parse(&w.shape, "family=attn_decode,dtype=fp16,b=4,sq=1,skv=4096,hq=32,hkv=8,d=128,causal=0", err, sizeof err);
    snprintf(w.variant, sizeof w.variant, "other dtype");
    rt_table_add(&t, &w);
    assert_int_equal(rt_select(&d, &dev, &t, NULL, NULL, &a, msg, sizeof msg), KF_OK);
    assert_non_null(a.winner);
    assert_string_equal(a.winner->variant, "near");
    rt_table_free(&t);
}

static void test_api__open_without_gpu_says_so(void **state)
{
    if (getenv("KFORGE_HAVE_GPU"))
        skip();
    kf_ctx *c = NULL;
    kf_status st = kf_open(&c, NULL);
    assert_non_null(c);
    if (st == KF_OK) {  /* a machine with a GPU: nothing to check here */
        kf_close(c);
        return;
    }
    assert_int_equal(st, KF_ERR_CUDA);
    assert_non_null(strstr(kf_errmsg(c), "no CUDA driver/device found"));
    kf_attn_desc d = decode();
    kf_plan *p = (kf_plan *)1;
    assert_int_equal(kf_attn_plan(c, &d, &p), KF_ERR_CUDA);
    assert_null(p);
    kf_close(c);
    kf_close(NULL);
}

static void test_api__status_text_and_version(void **state)
{
    assert_string_equal(kf_status_str(KF_OK), "ok");
    assert_string_equal(kf_status_str(KF_ERR_NOT_TUNED), "not tuned");
    assert_string_equal(kf_status_str((kf_status)99), "unknown status");
    assert_int_equal(kf_version_number(), KF_VERSION_NUMBER);
    assert_string_equal(kf_version(), "0.1.0");
    kf_config bad = KF_CONFIG_INIT;
    bad.jit = 5;
    kf_ctx *c;
    assert_int_equal(kf_open(&c, &bad), KF_ERR_ARG);
    assert_non_null(strstr(kf_errmsg(c), "config.jit"));
    kf_close(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_api__every_field_is_checked),
        cmocka_unit_test(test_api__selection_is_pure_and_prefers_winners),
        cmocka_unit_test(test_api__open_without_gpu_says_so),
        cmocka_unit_test(test_api__status_text_and_version),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
