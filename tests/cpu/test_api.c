/* tests/cpu/test_api.c: the public API without a GPU: status text, open errors, selection's and runs' argument checks, checked sizes */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runtime/attn_tmap.h"
#include "runtime/parts_tmap.h"
#include "runtime/family.h"
#include "runtime/jit.h"
#include "runtime/kforge.h"
#include "runtime/parts_plan.h"
#include "runtime/plan.h"
#include "runtime/select.h"
#include "runtime/shape.h"
#include "tests/cpu/api_util.h"

static kf_attn_desc decode(void)
{
    kf_attn_desc d = KF_ATTN_DESC_INIT;
    d.kind = KF_ATTN_DECODE;
    d.dtype = KF_BF16;
    d.hq = 32, d.hkv = 8, d.d = 128;
    d.max_batch = 4, d.max_q = 1, d.max_kv = 4096;
    return d;
}

static int fake_default(void *arg, const gen_kvset *shape, gen_kvset *vp, core_err *e)
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
    rt_devinfo dev = api_h200();
    rt_choice ch;
    core_err msg = CORE_ERR_INIT;
    kf_status st = rt_select(&d, &dev, NULL, fake_default, NULL, &ch, &msg);
    if (st != want || !strstr(msg.msg, needle))
        fail_msg("got %s '%s', want %s with '%s'", kf_status_str(st), msg.msg, kf_status_str(want), needle);
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
    d = decode(), d.page_size = -16, expect(d, KF_ERR_ARG, "desc.page_size must be >= 0 (0: contiguous K/V), got -16");
    /* paged prefill is served (issue 21); the model features' fields */
    d = decode(), d.window = 2, expect(d, KF_ERR_ARG, "desc.window must be 0 or 1, got 2");
    d = decode(), d.window = 1, d.window_left = -3, d.causal = 1, expect(d, KF_ERR_ARG, "desc.window_left must be >= 0 with desc.window, got -3");
    d = decode(), d.window_left = 7, expect(d, KF_ERR_ARG, "desc.window_left = 7 is set but desc.window is 0");
    d = decode(), d.window = 1, d.window_left = 128, expect(d, KF_ERR_UNSUPPORTED, "needs causal attention (desc.causal = 0)");
    d = decode(), d.softcap = -1, expect(d, KF_ERR_ARG, "desc.softcap must be 0 (none) or a finite cap >= 0.001, got -1");
    d = decode(), d.softcap = INFINITY, expect(d, KF_ERR_ARG, "desc.softcap must be 0 (none)");
    d = decode(), d.sinks = 3, expect(d, KF_ERR_ARG, "desc.sinks must be 0 or 1, got 3");
    d = decode(), d.kv_dtype = 5, expect(d, KF_ERR_ARG, "desc.kv_dtype must be KF_KV_SAME or KF_KV_E4M3, got 5");
    d = decode(), d.kv_dtype = KF_KV_E4M3, d.k_strides[1] = 1032, expect(d, KF_ERR_UNSUPPORTED, "desc.k_strides[1] = 1032 breaks 16-byte row alignment of FP8");
    d = decode(), d.page_size = 64, expect(d, KF_OK, "");
}

/* Paged K/V: the pools' strides default to [pages, page_size, Hkv, D]; the page size reaches the kernel. */
static void test_api__paged_strides_resolve(void **state)
{
    kf_attn_desc d = decode();
    d.page_size = 32;
    gen_kvset vp;
    gen_kv_clear(&vp);
    kf_attn_params p;
    rt_attn_base_params(&d, &vp, &p);
    assert_int_equal(p.page_size, 32);
    assert_int_equal(p.k_sb, 32LL * d.hkv * d.d);
    assert_int_equal(p.v_sb, 32LL * d.hkv * d.d);
    assert_int_equal(p.k_ss, (long long)d.hkv * d.d);
    d.page_size = 0;
    rt_attn_base_params(&d, &vp, &p);
    assert_int_equal(p.page_size, 0);
    assert_int_equal(p.k_sb, (long long)d.max_kv * d.hkv * d.d);
}

static void test_api__selection_is_pure_and_prefers_winners(void **state)
{
    rt_devinfo dev = api_h200();
    kf_attn_desc d = decode();
    rt_choice a, b;
    core_err msg = CORE_ERR_INIT;
    assert_int_equal(rt_select(&d, &dev, NULL, fake_default, NULL, &a, &msg), KF_OK);
    assert_int_equal(rt_select(&d, &dev, NULL, fake_default, NULL, &b, &msg), KF_OK);
    assert_null(a.winner);
    assert_memory_equal(&a.vp, &b.vp, sizeof a.vp);
    assert_true(a.workspace > 0);  /* sp 4: split partials */
    /* no default and no winner: not tuned, naming the shape */
    assert_int_equal(rt_select(&d, &dev, NULL, NULL, NULL, &a, &msg), KF_ERR_NOT_TUNED);
    assert_non_null(strstr(msg.msg, "skv4096"));
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
    assert_int_equal(rt_select(&d, &dev, &t, NULL, NULL, &a, &msg), KF_OK);
    assert_non_null(a.winner);
    assert_string_equal(a.winner->variant, "near");
    /* a kept default near the shape: this shape's own default, not the other's parameters; without a
     * default (JIT off) the tuned binary serves; on its own shape it is the winner */
    t.v[1].kept_default = 1;
    assert_int_equal(rt_select(&d, &dev, &t, fake_default, NULL, &a, &msg), KF_OK);
    assert_null(a.winner);
    assert_memory_equal(&a.vp, &b.vp, sizeof a.vp);
    assert_int_equal(rt_select(&d, &dev, &t, NULL, NULL, &a, &msg), KF_OK);
    assert_string_equal(a.winner->variant, "near");
    gen_kv_parse(&t.v[1].shape, "family=attn_decode,dtype=bf16,b=4,sq=1,skv=4096,hq=32,hkv=8,d=128,causal=0", err,
                 sizeof err);
    assert_int_equal(rt_select(&d, &dev, &t, fake_default, NULL, &a, &msg), KF_OK);
    assert_non_null(a.winner);
    assert_string_equal(a.winner->variant, "near");
    /* decode winners never cross Sq (it decides the row tile): a Sq 4 winner at the very lengths is passed over */
    gen_kv_parse(&t.v[1].shape, "family=attn_decode,dtype=bf16,b=4,sq=4,skv=4096,hq=32,hkv=8,d=128,causal=0", err,
                 sizeof err);
    t.v[1].kept_default = 0;
    assert_int_equal(rt_select(&d, &dev, &t, fake_default, NULL, &a, &msg), KF_OK);
    assert_non_null(a.winner);
    assert_string_equal(a.winner->variant, "far");
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


/* ---- KDA ------------------------------------------------------------------------- */

static kf_kda_desc kda_prefill(void)
{
    kf_kda_desc d = KF_KDA_DESC_INIT;
    d.mode = KF_KDA_PREFILL;
    d.max_seqs = 3, d.max_tokens = 33;
    d.h = 2, d.hv = 4, d.dk = 128, d.dv = 128;
    d.gate = KF_KDA_GATE_SIGMOID, d.lower_bound = -5.0f;
    d.l2norm = 1, d.beta_sigmoid = 1;
    d.has_initial_state = 1, d.wants_final_state = 1;
    return d;
}

/* The templates' defaults as data: fused small prefill, or the split one (fused=0) when asked. */
static int kda_default(void *arg, const gen_kvset *shape, gen_kvset *vp, core_err *e)
{
    const char *family = gen_kv_str(shape, "family");
    char pe[64];
    gen_kv_clear(vp);
    if (!strcmp(family, "kda_decode"))
        gen_kv_parse(vp, "vsplit=2,w=4", pe, sizeof pe);
    else if (arg)
        gen_kv_parse(vp, "chunk=32,vs=32,w=4,tr=1,fused=0,mma=1", pe, sizeof pe);
    else
        gen_kv_parse(vp, "chunk=16,vs=32,w=4,tr=1,fused=1,mma=1", pe, sizeof pe);
    gen_kv_set_str(vp, "family", family);
    gen_kv_set_int(vp, "dk", gen_kv_int(shape, "dk", 0));
    gen_kv_set_int(vp, "dv", gen_kv_int(shape, "dv", 0));
    return 0;
}

static void expect_kda(kf_kda_desc d, kf_status want, const char *needle)
{
    rt_devinfo dev = api_h200();
    rt_choice ch;
    core_err msg = CORE_ERR_INIT;
    kf_status st = rt_kda_select(&d, &dev, NULL, kda_default, NULL, &ch, &msg);
    if (st != want || !strstr(msg.msg, needle))
        fail_msg("got %s '%s', want %s with '%s'", kf_status_str(st), msg.msg, kf_status_str(want), needle);
}

static void test_api__every_kda_field_is_checked(void **state)
{
    kf_kda_desc d;
    expect_kda(kda_prefill(), KF_OK, "");
    d = kda_prefill(), d.mode = KF_KDA_DECODE, d.max_tokens = 3, expect_kda(d, KF_OK, "");
    d = kda_prefill(), d.mode = 0, expect_kda(d, KF_ERR_ARG, "desc.mode must be KF_KDA_PREFILL or KF_KDA_DECODE, got 0");
    d = kda_prefill(), d.max_seqs = 0, expect_kda(d, KF_ERR_ARG, "desc.max_seqs must be positive, got 0");
    d = kda_prefill(), d.max_seqs = 70000, expect_kda(d, KF_ERR_UNSUPPORTED, "desc.max_seqs = 70000");
    d = kda_prefill(), d.max_tokens = -1, expect_kda(d, KF_ERR_ARG, "desc.max_tokens must be >= 0, got -1");
    d = kda_prefill(), d.h = 0, expect_kda(d, KF_ERR_ARG, "desc.h must be positive, got 0");
    d = kda_prefill(), d.hv = -2, expect_kda(d, KF_ERR_ARG, "desc.hv must be positive, got -2");
    d = kda_prefill(), d.hv = 6, d.h = 4, expect_kda(d, KF_ERR_ARG, "desc.hv (6) must be a multiple of desc.h (4)");
    d = kda_prefill(), d.hv = 70000, d.h = 1, expect_kda(d, KF_ERR_UNSUPPORTED, "desc.hv = 70000");
    d = kda_prefill(), d.dk = 0, expect_kda(d, KF_ERR_ARG, "desc.dk must be positive, got 0");
    d = kda_prefill(), d.dv = -64, expect_kda(d, KF_ERR_ARG, "desc.dv must be positive, got -64");
    d = kda_prefill(), d.dk = 96, expect_kda(d, KF_ERR_UNSUPPORTED, "desc.dk = 96 is not supported (64 or 128)");
    d = kda_prefill(), d.dk = d.dv = 256, expect_kda(d, KF_ERR_UNSUPPORTED, "desc.dk = 256");
    d = kda_prefill(), d.dv = 32, expect_kda(d, KF_ERR_UNSUPPORTED, "desc.dv = 32 is not supported (64 or 128)");
    d = kda_prefill(), d.dv = 64, expect_kda(d, KF_ERR_UNSUPPORTED, "desc.dk = 128 and desc.dv = 64 differ");
    d = kda_prefill(), d.dk = d.dv = 64, expect_kda(d, KF_OK, "");
    d = kda_prefill(), d.gate = 2, expect_kda(d, KF_ERR_ARG, "desc.gate must be KF_KDA_GATE_LOG or KF_KDA_GATE_SIGMOID, got 2");
    d = kda_prefill(), d.lower_bound = -6.0f, expect_kda(d, KF_ERR_ARG, "desc.lower_bound = -6 is outside [-5, 0)");
    d = kda_prefill(), d.lower_bound = 0.0f, expect_kda(d, KF_ERR_ARG, "desc.lower_bound = 0 is outside [-5, 0)");
    d = kda_prefill(), d.lower_bound = NAN, expect_kda(d, KF_ERR_ARG, "desc.lower_bound = nan");
    d = kda_prefill(), d.gate = KF_KDA_GATE_LOG, d.lower_bound = 3.0f, expect_kda(d, KF_OK, "");  /* unused */
    d = kda_prefill(), d.l2norm = 2, expect_kda(d, KF_ERR_ARG, "desc.l2norm must be 0 or 1, got 2");
    d = kda_prefill(), d.beta_sigmoid = -1, expect_kda(d, KF_ERR_ARG, "desc.beta_sigmoid must be 0 or 1, got -1");
    d = kda_prefill(), d.state_layout = 2, expect_kda(d, KF_ERR_ARG, "desc.state_layout must be KF_KDA_STATE_KV or KF_KDA_STATE_VK, got 2");
    d = kda_prefill(), d.has_initial_state = 3, expect_kda(d, KF_ERR_ARG, "desc.has_initial_state must be 0 or 1, got 3");
    d = kda_prefill(), d.wants_final_state = 5, expect_kda(d, KF_ERR_ARG, "desc.wants_final_state must be 0 or 1, got 5");
    d = kda_prefill(), d.scale = -0.5f, expect_kda(d, KF_ERR_ARG, "desc.scale must be finite and >= 0 (0: 1/sqrt(dk)), got -0.5");
    d = kda_prefill(), d.scale = INFINITY, expect_kda(d, KF_ERR_ARG, "desc.scale must be finite");
    d = kda_prefill(), d.q_strides[1] = 1028, expect_kda(d, KF_ERR_UNSUPPORTED, "desc.q_strides[1] = 1028 breaks 16-byte row alignment (must be a multiple of 8 elements)");
    d = kda_prefill(), d.k_strides[2] = 132, expect_kda(d, KF_ERR_UNSUPPORTED, "desc.k_strides[2] = 132");
    d = kda_prefill(), d.v_strides[0] = -8, expect_kda(d, KF_ERR_ARG, "desc.v_strides[0] must be >= 0, got -8");
    d = kda_prefill(), d.o_strides[1] = 7, expect_kda(d, KF_ERR_UNSUPPORTED, "desc.o_strides[1] = 7");
    d = kda_prefill(), d.g_strides[1] = 514, expect_kda(d, KF_ERR_UNSUPPORTED, "desc.g_strides[1] = 514 breaks 16-byte row alignment (must be a multiple of 4 elements)");
    d = kda_prefill(), d.g_strides[2] = 132, expect_kda(d, KF_OK, "");  /* fp32: 4 elements are 16 bytes */
    d = kda_prefill(), d.beta_strides[2] = 1, d.beta_strides[1] = 5, expect_kda(d, KF_OK, "");  /* scalars: any stride */
    d = kda_prefill(), d.beta_strides[1] = -1, expect_kda(d, KF_ERR_ARG, "desc.beta_strides[1] must be >= 0, got -1");
    d = kda_prefill(), d.state_strides[2] = 130, expect_kda(d, KF_ERR_UNSUPPORTED, "desc.state_strides[2] = 130");
    d = kda_prefill(), d.state_strides[0] = -4, expect_kda(d, KF_ERR_ARG, "desc.state_strides[0] must be >= 0, got -4");
    rt_devinfo old = api_h200();
    old.cc_major = 7;
    rt_choice ch;
    core_err msg = CORE_ERR_INIT;
    d = kda_prefill();
    assert_int_equal(rt_kda_select(&d, &old, NULL, kda_default, NULL, &ch, &msg), KF_ERR_UNSUPPORTED);
    assert_non_null(strstr(msg.msg, "sm_80"));
    assert_int_equal(rt_kda_select(NULL, &old, NULL, kda_default, NULL, &ch, &msg), KF_ERR_ARG);
    assert_string_equal(msg.msg, "desc is NULL");
}

static void test_api__kda_selection_is_pure_and_prefers_winners(void **state)
{
    rt_devinfo dev = api_h200();
    kf_kda_desc d = kda_prefill();
    rt_choice a, b;
    core_err msg = CORE_ERR_INIT;
    assert_int_equal(rt_kda_select(&d, &dev, NULL, kda_default, NULL, &a, &msg), KF_OK);
    assert_int_equal(rt_kda_select(&d, &dev, NULL, kda_default, NULL, &b, &msg), KF_OK);
    assert_null(a.winner);
    assert_memory_equal(&a.vp, &b.vp, sizeof a.vp);
    assert_memory_equal(&a.shape, &b.shape, sizeof a.shape);
    assert_string_equal(gen_kv_str(&a.shape, "family"), "kda_prefill");
    assert_int_equal(gen_kv_int(&a.shape, "n", 0), 3);
    assert_int_equal(gen_kv_int(&a.shape, "t", 0), 11);  /* ceil(33 / 3) */
    assert_int_equal(a.workspace, 0);                    /* fused: no workspace */
    /* the split prefill: workspace for the maxima, (total / chunk + n) * hv * slot */
    assert_int_equal(rt_kda_select(&d, &dev, NULL, kda_default, (void *)1, &a, &msg), KF_OK);
    assert_int_equal(a.workspace, (33 / 32 + 3) * 4 * (2 * (3 * 32 * 128 + 32 * 32 + 32 * 128) + 4 * 128));
    d.mode = KF_KDA_DECODE, d.max_tokens = 3;
    assert_int_equal(rt_kda_select(&d, &dev, NULL, kda_default, NULL, &a, &msg), KF_OK);
    assert_string_equal(gen_kv_str(&a.vp, "family"), "kda_decode");
    assert_int_equal(gen_kv_int(&a.shape, "t", 0), 1);
    /* no default and no winner: not tuned, naming the shape */
    assert_int_equal(rt_kda_select(&d, &dev, NULL, NULL, NULL, &a, &msg), KF_ERR_NOT_TUNED);
    assert_non_null(strstr(msg.msg, "kda_decode"));
    assert_non_null(strstr(msg.msg, "n3"));
    assert_non_null(strstr(msg.msg, "hv4"));
    /* a winner of the same family, heads and dims wins, the nearest in n and t; attention winners never */
    rt_table t = {0};
    rt_winner w;
    char err[64];
    memset(&w, 0, sizeof w);
    gen_kv_parse(&w.shape, "family=kda_decode,n=1024,t=1,h=2,hv=4,dk=128,dv=128", err, sizeof err);
    gen_kv_parse(&w.vp, "family=kda_decode,dk=128,dv=128,vsplit=1,w=8", err, sizeof err);
    snprintf(w.variant, sizeof w.variant, "far");
    rt_table_add(&t, &w);
    gen_kv_parse(&w.shape, "family=kda_decode,n=4,t=1,h=2,hv=4,dk=128,dv=128", err, sizeof err);
    gen_kv_parse(&w.vp, "family=kda_decode,dk=128,dv=128,vsplit=4,w=4", err, sizeof err);
    snprintf(w.variant, sizeof w.variant, "near");
    rt_table_add(&t, &w);
    gen_kv_parse(&w.shape, "family=kda_decode,n=3,t=1,h=2,hv=8,dk=128,dv=128", err, sizeof err);
    snprintf(w.variant, sizeof w.variant, "other heads");
    rt_table_add(&t, &w);
    gen_kv_parse(&w.shape, "family=kda_prefill,n=3,t=1,h=2,hv=4,dk=128,dv=128", err, sizeof err);
    snprintf(w.variant, sizeof w.variant, "other family");
    rt_table_add(&t, &w);
    assert_int_equal(rt_kda_select(&d, &dev, &t, NULL, NULL, &a, &msg), KF_OK);
    assert_non_null(a.winner);
    assert_string_equal(a.winner->variant, "near");
    assert_int_equal(gen_kv_int(&a.vp, "vsplit", 0), 4);
    /* an attention description never takes a KDA winner */
    kf_attn_desc ad = decode();
    assert_int_equal(rt_select(&ad, &dev, &t, NULL, NULL, &a, &msg), KF_ERR_NOT_TUNED);
    rt_table_free(&t);
}

static void test_api__kda_strides_resolve(void **state)
{
    kf_kda_desc d = kda_prefill();
    kf_kda_params p;
    rt_kda_base_params(&d, &p);
    assert_int_equal(p.q_st, 2 * 128), assert_int_equal(p.q_sh, 128), assert_int_equal(p.q_sb, 0);
    assert_int_equal(p.v_st, 4 * 128), assert_int_equal(p.o_sh, 128);
    assert_int_equal(p.g_st, 4 * 128), assert_int_equal(p.b_st, 4), assert_int_equal(p.b_sh, 1);
    assert_int_equal(p.h0_sn, 4 * 128 * 128), assert_int_equal(p.ht_sh, 128 * 128), assert_int_equal(p.h0_sr, 128);
    assert_int_equal(p.h0_vfirst, 0), assert_int_equal(p.gate, 1), assert_int_equal(p.dt_sh, 128);
    assert_true(fabsf(p.scale - 0.08838834764f) < 1e-7f);
    d.state_layout = KF_KDA_STATE_VK, d.dk = d.dv = 64, d.state_strides[2] = 68, d.q_strides[1] = 4096, d.scale = 0.5f;
    rt_kda_base_params(&d, &p);
    assert_int_equal(p.ht_vfirst, 1), assert_int_equal(p.h0_sr, 68), assert_int_equal(p.q_st, 4096);
    assert_true(p.scale == 0.5f);
}

/* The real templates' defaults (embedded, through the runtime's JIT host): valid for the plan's maxima,
 * keyed, and with workspace exactly when the split prefill is chosen. */
static void test_api__kda_selection_through_the_templates(void **state)
{
    core_err err = CORE_ERR_INIT;
    char variant[512], key[600];
    rt_jit *j = rt_jit_new(NULL, &err);
    if (!j)
        fail_msg("rt_jit_new: %s", err.msg);
    rt_devinfo dev = api_h200();
    dev.smem_sm = 233472, dev.regs_sm = 65536, dev.l2 = 62914560;
    static const struct { kf_kda_mode mode; int n, tokens, h, hv, d; const char *family; int ws; const char *impl; } cs[] = {
        {KF_KDA_PREFILL, 3, 33, 2, 4, 128, "kda_prefill", 0, "recurrent"},  /* small, short: one launch, no workspace */
        {KF_KDA_PREFILL, 3, 60, 2, 2, 128, "kda_prefill", 0, "recurrent"},  /* t 20: still the recurrence (REC_T) */
        {KF_KDA_PREFILL, 1, 32, 2, 2, 128, "kda_prefill", 1, "mma"},        /* t 32: the chunked path (its W, U) */
        {KF_KDA_PREFILL, 3, 1055, 2, 4, 128, "kda_prefill", 1, "wgmma"},    /* long: split, workspace */
        {KF_KDA_PREFILL, 1, 8192, 16, 16, 64, "kda_prefill", 1, "wgmma"},
        {KF_KDA_DECODE, 64, 64, 4, 8, 128, "kda_decode", 0, NULL},
        {KF_KDA_DECODE, 1024, 1024, 32, 32, 64, "kda_decode", 0, NULL},
    };
    for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++) {
        kf_kda_desc d = kda_prefill();
        d.mode = cs[i].mode, d.max_seqs = cs[i].n, d.max_tokens = cs[i].tokens;
        d.h = cs[i].h, d.hv = cs[i].hv, d.dk = d.dv = cs[i].d;
        rt_choice ch;
        core_err msg = CORE_ERR_INIT;
        kf_status st = rt_kda_select(&d, &dev, NULL, api_jit_default, j, &ch, &msg);
        if (st)
            fail_msg("case %zu: %s: %s", i, kf_status_str(st), msg.msg);
        assert_string_equal(gen_kv_str(&ch.vp, "family"), cs[i].family);
        assert_int_equal(gen_kv_int(&ch.vp, "dk", 0), cs[i].d);
        assert_int_equal(ch.workspace > 0, cs[i].ws);
        if (cs[i].impl)
            assert_string_equal(gen_kv_str(&ch.vp, "impl"), cs[i].impl);
        assert_int_equal(rt_jit_keys(j, &ch.vp, &dev, variant, sizeof variant, key, sizeof key, &err), 0);
        assert_non_null(strstr(variant, cs[i].family));
    }
    rt_jit_free(j);
}

/* Paged K/V through the templates: the shape says page_size, the contiguous plan's binary serves the paged one
 * (so does a bundle exported without pages; on sm_90a a prefill at page 64 takes the tensor-map impl, wgmma_tma,
 * as contiguous does), and a page size no page map serves (48) takes wgmma_pp. */
static void test_api__paged_plans_share_the_contiguous_binary(void **state)
{
    (void)state;
    core_err err = CORE_ERR_INIT;
    rt_jit *j = rt_jit_new(NULL, &err);
    if (!j)
        fail_msg("rt_jit_new: %s", err.msg);
    rt_devinfo dev = api_h200();
    dev.smem_sm = 233472, dev.regs_sm = 65536, dev.l2 = 62914560;
    for (int prefill = 0; prefill < 2; prefill++) {
        char var[3][512], key[3][600];
        static const int ps[3] = {0, 64, 48};
        for (int paged = 0; paged < 3; paged++) {
            kf_attn_desc d = decode();
            if (prefill)
                d.kind = KF_ATTN_PREFILL, d.causal = 1, d.max_batch = 1, d.max_q = 4096;
            d.page_size = ps[paged];
            rt_choice ch;
            core_err msg = CORE_ERR_INIT;
            kf_status st = rt_select(&d, &dev, NULL, api_jit_default, j, &ch, &msg);
            if (st)
                fail_msg("prefill %d paged %d: %s: %s", prefill, paged, kf_status_str(st), msg.msg);
            assert_int_equal(gen_kv_int(&ch.shape, "page_size", 0), ps[paged]);
            assert_int_equal(rt_jit_keys(j, &ch.vp, &dev, var[paged], sizeof var[0], key[paged], sizeof key[0], &err),
                             0);
        }
        if (prefill) {
            assert_non_null(strstr(var[0], "impl-wgmma_tma"));
            assert_non_null(strstr(var[2], "impl-wgmma_pp"));
        } else {
            assert_string_equal(var[0], var[2]);
            assert_string_equal(key[0], key[2]);
        }
        assert_string_equal(var[0], var[1]);
        assert_string_equal(key[0], key[1]);
    }
    rt_jit_free(j);
}

/* rt_kda_bind: the checks of kf_kda_run, without a device. */
static kf_status bind(const kf_kda_desc *d, const kf_kda_tensors *t, kf_kda_params *a, core_err *e)
{
    rt_devinfo dev = api_h200();
    rt_choice ch;
    kf_kda_params base;
    assert_int_equal(rt_kda_select(d, &dev, NULL, kda_default, NULL, &ch, e), KF_OK);
    rt_kda_base_params(d, &base);
    return rt_kda_bind(d, &base, &ch.vp, ch.workspace, NULL, t, a, e);
}

#define P(x) ((void *)(uintptr_t)(x))

static kf_kda_tensors kda_tensors(void)
{
    kf_kda_tensors t;
    memset(&t, 0, sizeof t);
    t.q = P(0x10000), t.k = P(0x20000), t.v = P(0x30000), t.g = P(0x40000), t.beta = P(0x50000);
    t.a_log = P(0x60000), t.dt_bias = P(0x61000), t.initial_state = P(0x70000), t.final_state = P(0x80000);
    t.o = P(0x90000), t.cu_seqlens = P(0xa0000);
    t.n = 3, t.total = 33;
    return t;
}

static void expect_bind(const kf_kda_desc *d, kf_kda_tensors t, kf_status want, const char *needle)
{
    kf_kda_params a;
    core_err msg = CORE_ERR_INIT;
    kf_status st = bind(d, &t, &a, &msg);
    if (st != want || !strstr(msg.msg, needle))
        fail_msg("got %s '%s', want %s with '%s'", kf_status_str(st), msg.msg, kf_status_str(want), needle);
}

static void test_api__every_kda_tensor_is_checked(void **state)
{
    kf_kda_desc d = kda_prefill();
    kf_kda_tensors t;
    kf_kda_params a;
    core_err msg = CORE_ERR_INIT;
    expect_bind(&d, kda_tensors(), KF_OK, "");
    assert_int_equal(bind(&d, NULL, &a, &msg), KF_ERR_ARG);
    assert_string_equal(msg.msg, "tensors is NULL");
    t = kda_tensors(), t.n = 4, expect_bind(&d, t, KF_ERR_ARG, "tensors.n = 4 is outside 0..3 (the plan's max_seqs)");
    t = kda_tensors(), t.n = -1, expect_bind(&d, t, KF_ERR_ARG, "tensors.n = -1");
    t = kda_tensors(), t.total = 34, expect_bind(&d, t, KF_ERR_ARG, "tensors.total = 34 is outside 0..33 (the plan's max_tokens)");
    t = kda_tensors(), t.cu_seqlens64 = P(0xb0000), expect_bind(&d, t, KF_ERR_ARG, "both set");
    t = kda_tensors(), t.cu_seqlens = NULL, t.total = 32, expect_bind(&d, t, KF_ERR_ARG, "tensors.total = 32 is not a multiple of tensors.n = 3");
    t = kda_tensors(), t.q = NULL, expect_bind(&d, t, KF_ERR_ARG, "tensors.q is NULL");
    t = kda_tensors(), t.k = NULL, expect_bind(&d, t, KF_ERR_ARG, "tensors.k is NULL");
    t = kda_tensors(), t.v = NULL, expect_bind(&d, t, KF_ERR_ARG, "tensors.v is NULL");
    t = kda_tensors(), t.g = NULL, expect_bind(&d, t, KF_ERR_ARG, "tensors.g is NULL");
    t = kda_tensors(), t.beta = NULL, expect_bind(&d, t, KF_ERR_ARG, "tensors.beta is NULL");
    t = kda_tensors(), t.o = NULL, expect_bind(&d, t, KF_ERR_ARG, "tensors.o is NULL");
    t = kda_tensors(), t.a_log = NULL, expect_bind(&d, t, KF_ERR_ARG, "tensors.a_log is NULL");
    t = kda_tensors(), t.dt_bias = NULL, expect_bind(&d, t, KF_OK, "");  /* no bias */
    t = kda_tensors(), t.initial_state = NULL, expect_bind(&d, t, KF_ERR_ARG, "tensors.initial_state is NULL");
    t = kda_tensors(), t.final_state = NULL, expect_bind(&d, t, KF_ERR_ARG, "tensors.final_state is NULL");
    t = kda_tensors(), t.q = P(0x10008), expect_bind(&d, t, KF_ERR_UNSUPPORTED, "tensors.q = 0x10008 is not 16-byte aligned");
    t = kda_tensors(), t.o = P(0x90004), expect_bind(&d, t, KF_ERR_UNSUPPORTED, "tensors.o = 0x90004 is not 16-byte aligned");
    t = kda_tensors(), t.final_state = P(0x80004), expect_bind(&d, t, KF_ERR_UNSUPPORTED, "tensors.final_state = 0x80004 is not 16-byte aligned");
    t = kda_tensors(), t.beta = P(0x50002), expect_bind(&d, t, KF_ERR_ARG, "tensors.beta = 0x50002 is not 4-byte aligned");
    t = kda_tensors(), t.cu_seqlens = NULL, t.cu_seqlens64 = P(0xb0004), expect_bind(&d, t, KF_ERR_ARG, "tensors.cu_seqlens64 = 0xb0004 is not 8-byte aligned");
    t = kda_tensors(), t.workspace = P(0xc0008), expect_bind(&d, t, KF_ERR_UNSUPPORTED, "tensors.workspace = 0xc0008");
    kf_kda_desc lg = d;
    lg.gate = KF_KDA_GATE_LOG, lg.has_initial_state = 0, lg.wants_final_state = 0;
    t = kda_tensors(), t.initial_state = t.final_state = NULL;
    expect_bind(&lg, t, KF_ERR_ARG, "tensors.a_log = 0x60000 is set but the plan's gate is KF_KDA_GATE_LOG");
    t.a_log = NULL, expect_bind(&lg, t, KF_ERR_ARG, "tensors.dt_bias = 0x61000 is set but the plan's gate is KF_KDA_GATE_LOG");
    t.dt_bias = NULL, expect_bind(&lg, t, KF_OK, "");
    t.initial_state = P(0x70000), expect_bind(&lg, t, KF_ERR_ARG, "tensors.initial_state = 0x70000 is set but the plan has has_initial_state = 0");
    t.initial_state = NULL, t.final_state = P(0x80000), expect_bind(&lg, t, KF_ERR_ARG, "tensors.final_state = 0x80000 is set but the plan has wants_final_state = 0");
    /* what reaches the kernel: packed (int64), and padded with the sequence strides of this call */
    t = kda_tensors(), t.cu_seqlens = NULL, t.cu_seqlens64 = P(0xb0000), t.n = 2, t.total = 20;
    assert_int_equal(bind(&d, &t, &a, &msg), KF_OK);
    assert_int_equal(a.cu64, 1), assert_ptr_equal(a.cu_seqlens, P(0xb0000)), assert_int_equal(a.nseq, 2);
    assert_int_equal(a.total, 20), assert_ptr_equal(a.ht, P(0x80000)), assert_ptr_equal(a.a_log, P(0x60000));
    t = kda_tensors(), t.cu_seqlens = NULL, t.n = 3, t.total = 30;
    d.v_strides[0] = 99 * 8;
    assert_int_equal(bind(&d, &t, &a, &msg), KF_OK);
    assert_null(a.cu_seqlens), assert_int_equal(a.t, 10);
    assert_int_equal(a.q_sb, 10 * 2 * 128), assert_int_equal(a.g_sb, 10 * 4 * 128), assert_int_equal(a.b_sb, 10 * 4);
    assert_int_equal(a.v_sb, 99 * 8);  /* declared */
    t.n = 0, t.total = 0;  /* nothing to do */
    assert_int_equal(bind(&d, &t, &a, &msg), KF_OK);
    /* decode plans bind alike; their maxima hold too */
    kf_kda_desc dd = kda_prefill();
    dd.mode = KF_KDA_DECODE, dd.max_tokens = 3;
    t = kda_tensors(), t.total = 3;
    expect_bind(&dd, t, KF_OK, "");
    t.total = 4, expect_bind(&dd, t, KF_ERR_ARG, "tensors.total = 4 is outside 0..3");
}

/* ---- sizes, open, close and runs (issue 14) ------------------------------------------- */

/* Sizes from the description are checked arithmetic: a product past an int or 63 bits is refused, naming the fields. */
static void test_api__sizes_cannot_overflow(void **state)
{
    kf_attn_desc d;
    /* 268435457 * 16 wraps to 16 in an int: a 16-row split workspace for calls of up to 2^32 rows */
    d = decode(), d.max_batch = 268435457, d.max_q = 16;
    expect(d, KF_ERR_ARG, "desc.max_batch * desc.max_q = 268435457 * 16 is more than 2147483647 query rows");
    /* the contiguous strides of the maxima (max_q * hq * d) past 63 bits */
    d = decode(), d.kind = KF_ATTN_PREFILL, d.max_q = 2147483647, d.max_batch = 1, d.hq = d.hkv = 1 << 30, d.d = 256;
    expect(d, KF_ERR_ARG, "q: 1 x 2147483647 x 1073741824 x 256 elements do not fit in 63 bits");
    /* declared strides whose span over the maxima does not fit */
    d = decode(), d.q_strides[0] = 1LL << 62;
    expect(d, KF_ERR_ARG, "desc.q_strides = {4611686018427387904, 0, 0}");
    d = decode(), d.k_strides[1] = 1LL << 60;
    expect(d, KF_ERR_ARG, "desc.k_strides = {0, 1152921504606846976, 0}");
    /* the split workspace (4 splits of 2^30 rows of 2^22 heads of 257 floats) past 64 bits */
    d = decode(), d.max_batch = 1 << 26, d.max_q = 16, d.hq = d.hkv = 1 << 22, d.d = 256, d.max_kv = 16;
    expect(d, KF_ERR_ARG, "the split workspace of 4 splits x desc.max_batch 67108864 x desc.max_q 16");
    kf_attn_params p;
    memset(&p, 0, sizeof p);
    gen_kvset vp;
    gen_kv_clear(&vp);
    gen_kv_set_str(&vp, "family", "attn_decode");
    gen_kv_set_int(&vp, "d", 256);
    rt_launch l;
    p.splits = 128, p.ws_rows = 2147483647, p.hq = 2147483647;
    assert_int_equal(rt_attn_launch(&vp, &p, &l), 0);
    assert_true(l.ws_bytes == SIZE_MAX);
    p.splits = 2, p.ws_rows = 4, p.hq = 8;
    assert_int_equal(rt_attn_launch(&vp, &p, &l), 0);
    assert_int_equal(l.ws_bytes, 2 * 4 * 8 * 257 * 4);
    assert_int_equal(l.n, 2);   /* the combine kernel runs for split calls only */
    p.splits = 1;
    assert_int_equal(rt_attn_launch(&vp, &p, &l), 0);
    assert_int_equal(l.n, 1);
    assert_int_equal(l.ws_bytes, 0);
    /* KDA: the span of declared strides, the token count n * t */
    kf_kda_desc k = kda_prefill();
    k.q_strides[1] = 1LL << 60;
    expect_kda(k, KF_ERR_ARG, "desc.q_strides = {0, 1152921504606846976, 0}");
    k = kda_prefill(), k.state_strides[0] = 1LL << 62;
    expect_kda(k, KF_ERR_ARG, "desc.state_strides = {4611686018427387904, 0, 0}");
    /* a padded call's sequence stride (tokens per sequence x token stride) past 63 bits */
    k = kda_prefill(), k.max_seqs = 1, k.max_tokens = 2, k.q_strides[1] = 1LL << 62;
    kf_kda_tensors kt = kda_tensors();
    kt.cu_seqlens = NULL, kt.n = 1, kt.total = 2;
    expect_bind(&k, kt, KF_ERR_ARG, "tensors (n 1, total 2): a sequence stride of 2 tokens does not fit in 63 bits");
    k = kda_prefill(), k.max_seqs = 2, k.max_tokens = 2147483647;
    expect_kda(k, KF_ERR_ARG, "desc.max_seqs * tokens per sequence (desc.max_tokens / desc.max_seqs) = 2 * 1073741824");
}

/* The C API and kforge gen / compile check a shape with one function (runtime/shape.h); only the names differ. */
static void test_api__one_shape_check_for_api_and_cli(void **state)
{
    kf_attn_desc d = decode();
    d.hq = 30;
    expect(d, KF_ERR_ARG, "desc.hq (30) must be a multiple of desc.hkv (8)");
    gen_kvset s;
    core_err msg = CORE_ERR_INIT;
    char err[256];
    static const struct { const char *family, *shape; kf_status st; const char *needle; } cs[] = {
        {"attn_decode", "dtype=bf16,b=1,sq=1,skv=4096,hq=32,hkv=8,d=128,causal=0", KF_OK, ""},
        {"attn_decode", "dtype=bf16,b=1,sq=1,skv=4096,hq=30,hkv=8,d=128,causal=0", KF_ERR_ARG, "hq (30) must be a multiple of hkv (8)"},
        {"attn_decode", "dtype=bf16,b=-5,sq=1,skv=4096,hq=32,hkv=8,d=128,causal=0", KF_ERR_ARG, "b must be positive, got -5"},
        {"attn_prefill", "dtype=bf16,b=1,sq=0,skv=4096,hq=32,hkv=8,d=128,causal=1", KF_ERR_ARG, "sq must be positive, got 0"},
        {"attn_prefill", "dtype=bf16,b=1,sq=64,skv=-1,hq=32,hkv=8,d=128,causal=1", KF_ERR_ARG, "skv must be >= 0, got -1"},
        {"attn_decode", "dtype=bf16,b=1,sq=17,skv=4096,hq=32,hkv=8,d=128,causal=0", KF_ERR_UNSUPPORTED, "sq = 17"},
        {"attn_decode", "dtype=bf16,b=1,sq=1,skv=4096,hq=32,hkv=0,d=128,causal=0", KF_ERR_ARG, "hkv must be positive, got 0"},
        {"attn_decode", "dtype=bf16,b=1,sq=1,skv=4096,hq=32,hkv=8,d=128,causal=0,foo=1", KF_ERR_ARG, "unknown shape key 'foo' for 'attn_decode'"},
        {"attn_decode", "dtype=bf16,b=1,sq=1,skv=4096,hq=32,hkv=8,d=128", KF_ERR_ARG, "lacks 'causal'"},
        {"attn_decode", "dtype=bf16,b=x,sq=1,skv=4096,hq=32,hkv=8,d=128,causal=0", KF_ERR_ARG, "b = 'x' must be an integer"},
        {"attn_decode", "dtype=bf16,b=3000000000,sq=1,skv=4096,hq=32,hkv=8,d=128,causal=0", KF_ERR_ARG, "b = 3000000000 is outside"},
        {"attn_decode", "dtype=int8,b=1,sq=1,skv=4096,hq=32,hkv=8,d=128,causal=0", KF_ERR_ARG, "dtype = 'int8' must be bf16 or fp16"},
        {"kda_prefill", "n=3,t=11,h=2,hv=6,dk=128,dv=128", KF_OK, ""},
        {"kda_prefill", "n=3,t=11,h=4,hv=6,dk=128,dv=128", KF_ERR_ARG, "hv (6) must be a multiple of h (4)"},
        {"kda_decode", "n=70000,t=1,h=2,hv=4,dk=128,dv=128", KF_ERR_UNSUPPORTED, "n = 70000"},
        {"attn_parts_decode", "dtype=bf16,b=4,sq=1,skv=4096,hq=16,hkv=1,parts=latent512_rope64,value=alias_latent,dv=512,"
                              "layers=1,page_size=64,causal=0", KF_OK, ""},
        {"attn_parts_decode", "dtype=bf16,b=4,sq=1,skv=4096,hq=16,hkv=1,parts=latent512_rope64,value=alias_rope,dv=512,"
                              "layers=1,page_size=64,causal=0", KF_ERR_ARG, "value = 'alias_rope' must be 'separate' or 'alias_latent'"},
        {"ceil_gemm", "m=0,n=1,k=1", KF_ERR_ARG, "m must be positive, got 0"},
        {"my_family", "x=-1", KF_ERR_ARG, "shape key 'x' = -1 is outside 0..2147483647"},
    };
    for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++) {
        gen_kv_clear(&s);
        assert_int_equal(gen_kv_parse(&s, cs[i].shape, err, sizeof err), 0);
        msg.msg[0] = 0;
        kf_status st = rt_shape_check(cs[i].family, &s, NULL, RT_NAMES_SHAPE, &msg);
        if (st != cs[i].st || !strstr(msg.msg, cs[i].needle))
            fail_msg("case %zu %s: got %s '%s', want %s with '%s'", i, cs[i].shape, kf_status_str(st), msg.msg,
                     kf_status_str(cs[i].st), cs[i].needle);
    }
    /* the template's declared fields decide which keys are known */
    gen_kvset declared;
    gen_kv_clear(&declared);
    gen_kv_set_str(&declared, "x", "int");
    gen_kv_clear(&s);
    gen_kv_set_int(&s, "y", 1);
    assert_int_equal(rt_shape_check("my_family", &s, &declared, RT_NAMES_SHAPE, &msg), KF_ERR_ARG);
    assert_non_null(strstr(msg.msg, "unknown shape key 'y' for 'my_family' (its keys: x)"));
}

/* A context as kf_open leaves it without a device: what kf_close and plans need, without a GPU. */
static kf_ctx *bare_ctx(void)
{
    kf_ctx *c = calloc(1, sizeof *c);
    pthread_mutex_init(&c->mu, NULL);
    return c;
}

/* A plan of d on c that is never launched (its runs are refused before any launch). */
static kf_plan *bare_plan(kf_ctx *c, const kf_attn_desc *d)
{
    kf_plan *p = calloc(1, sizeof *p);
    p->ctx = c;
    p->family = RT_PLAN_ATTN;
    p->d.attn = *d;
    snprintf(p->variant, sizeof p->variant, "attn_decode.test");
    gen_kv_clear(&p->vp);
    rt_attn_base_params(d, &p->vp, &p->base.attn);
    c->plans++;
    return p;
}

static void test_api__open_checks_its_arguments_and_paths_first(void **state)
{
    kf_config cfg = KF_CONFIG_INIT;
    assert_int_equal(kf_open(NULL, &cfg), KF_ERR_ARG);   /* wrote through NULL before */
    assert_int_equal(kf_open(NULL, NULL), KF_ERR_ARG);
    kf_ctx *c = NULL;
    cfg.template_dir = "/nonexistent/kforge-templates";
    assert_int_equal(kf_open(&c, &cfg), KF_ERR_ARG);
    assert_non_null(strstr(kf_errmsg(c), "config.template_dir = '/nonexistent/kforge-templates': No such file"));
    kf_close(c);
    char tmpl[] = "/tmp/kf_test_api_XXXXXX";
    int fd = mkstemp(tmpl);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, "not a database, not a bundle, just some text\n", 45), 45);
    close(fd);
    cfg = (kf_config)KF_CONFIG_INIT;
    cfg.template_dir = tmpl;
    assert_int_equal(kf_open(&c, &cfg), KF_ERR_ARG);
    assert_non_null(strstr(kf_errmsg(c), "is not a directory"));
    kf_close(c);
    /* a bad database or bundle is named also where there is no GPU (was: "no CUDA driver/device found") */
    cfg = (kf_config)KF_CONFIG_INIT;
    cfg.db_path = tmpl;
    assert_int_equal(kf_open(&c, &cfg), KF_ERR_DB);
    assert_non_null(strstr(kf_errmsg(c), tmpl));
    kf_close(c);
    const char *bundles[] = {"/nonexistent/x.kfb"};
    cfg = (kf_config)KF_CONFIG_INIT;
    cfg.bundles = bundles, cfg.n_bundles = 1;
    assert_int_equal(kf_open(&c, &cfg), KF_ERR_BUNDLE);
    assert_non_null(strstr(kf_errmsg(c), "/nonexistent/x.kfb"));
    kf_close(c);
    bundles[0] = tmpl;
    assert_int_equal(kf_open(&c, &cfg), KF_ERR_BUNDLE);
    assert_non_null(strstr(kf_errmsg(c), tmpl));
    kf_close(c);
    const char *none[] = {NULL};
    cfg.bundles = none;
    assert_int_equal(kf_open(&c, &cfg), KF_ERR_ARG);
    assert_non_null(strstr(kf_errmsg(c), "config.bundles[0] is NULL"));
    kf_close(c);
    unlink(tmpl);
}

/* kf_close with a plan alive: the context lives until the plan is freed (a use after free before; the
 * sanitizer build, tests/sanitize.sh, sees it). */
static void test_api__close_before_plan_free_is_safe(void **state)
{
    kf_ctx *c = bare_ctx();
    kf_attn_desc d = decode();
    kf_plan *p = bare_plan(c, &d), *q = bare_plan(c, &d);
    kf_close(c);
    assert_int_equal(c->closed, 1);
    assert_int_equal(kf_attn_run(p, NULL, NULL), KF_ERR_ARG);   /* the plan still reports through its context */
    assert_string_equal(kf_errmsg(p->ctx), "tensors is NULL");
    kf_plan_free(p);
    assert_int_equal(q->ctx->plans, 1);
    kf_plan_free(q);   /* the last plan frees the context */
}

static kf_attn_tensors attn_tensors(void)
{
    kf_attn_tensors t;
    memset(&t, 0, sizeof t);
    t.q = P(0x10000), t.k = P(0x20000), t.v = P(0x30000), t.o = P(0x40000);
    t.batch = 0, t.q_len = 1, t.kv_len_all = 100;   /* batch 0: checked, nothing launched */
    return t;
}

static void expect_run(kf_plan *p, kf_attn_tensors t, kf_status want, const char *needle)
{
    kf_status st = kf_attn_run(p, &t, NULL);
    const char *msg = st ? kf_errmsg(p->ctx) : "";
    if (st != want || !strstr(msg, needle))
        fail_msg("got %s '%s', want %s with '%s'", kf_status_str(st), msg, kf_status_str(want), needle);
}

/* kf_attn_run refuses what the plan would ignore: a block table of a contiguous plan, cu_seqlens_q of a
 * plan without packed q, a misaligned kv_len. */
static void test_api__attn_run_refuses_what_it_would_ignore(void **state)
{
    kf_ctx *c = bare_ctx();
    kf_attn_desc d = decode();
    kf_plan *p = bare_plan(c, &d);
    kf_attn_tensors t;
    expect_run(p, attn_tensors(), KF_OK, "");
    t = attn_tensors(), t.block_table = P(0x50000);
    expect_run(p, t, KF_ERR_ARG, "tensors.block_table = 0x50000 is set but the plan's K/V are contiguous");
    t = attn_tensors(), t.bt_stride = 64;
    expect_run(p, t, KF_ERR_ARG, "tensors.bt_stride = 64 is set but the plan's K/V are contiguous");
    t = attn_tensors(), t.cu_seqlens_q = P(0x60000);
    expect_run(p, t, KF_ERR_ARG, "tensors.cu_seqlens_q = 0x60000 is set but the plan has packed_q = 0");
    t = attn_tensors(), t.total_q = 7;
    expect_run(p, t, KF_ERR_ARG, "tensors.total_q = 7 is set but the plan has packed_q = 0");
    t = attn_tensors(), t.kv_len = P(0x70002);
    expect_run(p, t, KF_ERR_ARG, "tensors.kv_len = 0x70002 is not 4-byte aligned");
    t = attn_tensors(), t.kv_len = P(0x70004);
    expect_run(p, t, KF_OK, "");
    kf_plan_free(p);
    d.page_size = 64;
    p = bare_plan(c, &d);
    t = attn_tensors(), t.block_table = P(0x50000), t.bt_stride = 64;
    expect_run(p, t, KF_OK, "");
    t.bt_stride = 63;
    expect_run(p, t, KF_ERR_ARG, "tensors.bt_stride = 63 is less than the 64 pages");
    kf_plan_free(p);
    d = decode(), d.kind = KF_ATTN_PREFILL, d.packed_q = 1, d.max_q = 128;
    p = bare_plan(c, &d);
    t = attn_tensors(), t.cu_seqlens_q = P(0x60002), t.total_q = 5;
    expect_run(p, t, KF_ERR_ARG, "tensors.cu_seqlens_q = 0x60002 is not 4-byte aligned");
    t.cu_seqlens_q = P(0x60000);
    expect_run(p, t, KF_OK, "");
    kf_plan_free(p);
    kf_close(c);
}

/* ---- hostile descriptions ------------------------------------------------------------- */

static unsigned long long rng_next(unsigned long long *s)
{
    *s ^= *s << 13, *s ^= *s >> 7, *s ^= *s << 17;
    return *s;
}

static int hostile_int(unsigned long long *s)
{
    static const int v[] = {0, 1, 2, 3, 7, 8, 16, 17, 64, 128, 256, 1024, 4096, 65535, 65536, 1 << 20, 1 << 26,
                            268435457, 1 << 30, 2147483647, -1, -8, -2147483647 - 1};
    return v[rng_next(s) % (sizeof v / sizeof v[0])];
}

static long long hostile_stride(unsigned long long *s)
{
    static const long long v[] = {0, 0, 0, 8, 64, 1024, 1LL << 40, 1LL << 60, 1LL << 62, 9223372036854775800LL, -8};
    return v[rng_next(s) % (sizeof v / sizeof v[0])];
}

static int parts_default(void *arg, const gen_kvset *shape, gen_kvset *vp, core_err *e)
{
    gen_kv_clear(vp);
    gen_kv_set_str(vp, "family", "attn_parts_decode");
    gen_kv_set_int(vp, "sp", 128);
    gen_kv_set_int(vp, "dv", gen_kv_int(shape, "dv", 0));
    gen_kv_set_int(vp, "layers", gen_kv_int(shape, "layers", 1));
    return 0;
}

/* Seeded random descriptions of hostile field values through the three selections (the sanitizer build,
 * tests/sanitize.sh, turns any overflow into a failure): a status from the documented set, a message on
 * refusal, and for the accepted ones a workspace that is not SIZE_MAX. */
static void test_api__hostile_descriptions_are_refused_cleanly(void **state)
{
    unsigned long long s = 0x14;
    rt_devinfo dev = api_h200();
    int ok = 0, refused = 0;
    for (int i = 0; i < 20000; i++) {
        rt_choice ch;
        core_err msg = CORE_ERR_INIT;
        kf_status st;
        int which = (int)(rng_next(&s) % 3);
        if (which == 0) {
            kf_attn_desc d = decode();
            d.kind = rng_next(&s) % 2 ? KF_ATTN_DECODE : KF_ATTN_PREFILL;
            d.hq = hostile_int(&s), d.hkv = rng_next(&s) % 2 ? 1 : hostile_int(&s);
            d.d = rng_next(&s) % 2 ? 128 : hostile_int(&s);
            d.max_batch = hostile_int(&s), d.max_q = hostile_int(&s), d.max_kv = hostile_int(&s);
            d.page_size = rng_next(&s) % 3 ? 0 : hostile_int(&s);
            d.packed_q = d.kind == KF_ATTN_PREFILL && rng_next(&s) % 2;
            for (int k = 0; k < 3; k++)
                d.q_strides[k] = hostile_stride(&s), d.k_strides[k] = hostile_stride(&s);
            st = rt_select(&d, &dev, NULL, fake_default, NULL, &ch, &msg);
            if (st == KF_OK) {
                kf_attn_params p;
                rt_attn_base_params(&d, &ch.vp, &p);
            }
        } else if (which == 1) {
            kf_kda_desc d = kda_prefill();
            d.mode = rng_next(&s) % 2 ? KF_KDA_PREFILL : KF_KDA_DECODE;
            d.max_seqs = hostile_int(&s), d.max_tokens = hostile_int(&s);
            d.h = rng_next(&s) % 2 ? 1 : hostile_int(&s), d.hv = hostile_int(&s);
            d.dk = d.dv = rng_next(&s) % 2 ? 128 : hostile_int(&s);
            for (int k = 0; k < 3; k++)
                d.q_strides[k] = hostile_stride(&s), d.state_strides[k] = hostile_stride(&s);
            st = rt_kda_select(&d, &dev, NULL, kda_default, (void *)(uintptr_t)(rng_next(&s) % 2), &ch, &msg);
        } else {
            kf_parts_desc d = KF_PARTS_DESC_INIT;
            d.parts = rng_next(&s) % 2 ? "latent512_rope64" : "base128_delta32";
            d.value = d.parts[0] == 'l' ? KF_PARTS_VALUE_ALIAS : KF_PARTS_VALUE_SEPARATE;
            d.dv = d.parts[0] == 'l' ? 512 : 160;
            d.hq = hostile_int(&s), d.hkv = rng_next(&s) % 2 ? 1 : hostile_int(&s);
            d.layers = 1 + (int)(rng_next(&s) % 4), d.page_size = rng_next(&s) % 2 ? 64 : 0, d.scale = 0.1f;
            d.max_batch = hostile_int(&s), d.max_q = hostile_int(&s), d.max_kv = hostile_int(&s);
            st = rt_parts_select(&d, &dev, NULL, parts_default, NULL, &ch, &msg);
        }
        if (st != KF_OK && st != KF_ERR_ARG && st != KF_ERR_UNSUPPORTED)
            fail_msg("case %d (family %d): status %s '%s'", i, which, kf_status_str(st), msg.msg);
        if (st != KF_OK && !msg.msg[0])
            fail_msg("case %d (family %d): %s without a message", i, which, kf_status_str(st));
        if (st == KF_OK && ch.workspace == SIZE_MAX)
            fail_msg("case %d (family %d): accepted with an overflowing workspace", i, which);
        st == KF_OK ? ok++ : refused++;
    }
    print_message("%d accepted, %d refused\n", ok, refused);
    assert_true(ok > 100);
    assert_true(refused > 100);
}

/* impl wgmma_tma: the layouts a tensor map cannot describe are refused before any driver call, naming the tensor */
/* attn_prefill sched=persist: a 1-D grid of min(units, SMs) CTAs, a unit two query blocks (m, last - m) of one
 * head; without an SM count (geo.ctas 0) one CTA a unit; sched grid keeps (cdiv(sq, bm), hq, b). */
static void test_api__persistent_prefill_grid(void **state)
{
    (void)state;
    gen_kvset vp;
    gen_kv_clear(&vp);
    gen_kv_set_str(&vp, "family", "attn_prefill");
    gen_kv_set_str(&vp, "impl", "wgmma_tma");
    gen_kv_set_str(&vp, "sched", "persist");
    gen_kv_set_int(&vp, "bm", 192), gen_kv_set_int(&vp, "g", 4), gen_kv_set_int(&vp, "d", 64);
    gen_kv_set_int(&vp, "bn", 128);
    rt_attn_geom geo = rt_attn_geom_of(&vp);
    assert_int_equal(geo.kind, RT_GEOM_PREFILL);
    assert_int_equal(geo.persist, 1);
    kf_attn_params p;
    memset(&p, 0, sizeof p);
    p.b = 2, p.sq = 8192, p.skv = 8192, p.hq = 32, p.hkv = 8;
    unsigned grid[3];
    geo.ctas = 132;   /* 43 query blocks: 22 units a head, 1408 units */
    assert_int_equal(rt_attn_grid_geom(&geo, &p, 0, grid), 0);
    assert_true(grid[0] == 132 && grid[1] == 1 && grid[2] == 1);
    geo.ctas = 0;
    assert_int_equal(rt_attn_grid_geom(&geo, &p, 0, grid), 0);
    assert_true(grid[0] == 22 * 32 * 2 && grid[1] == 1 && grid[2] == 1);
    p.b = 65535, p.sq = 1 << 20, p.hq = 64, p.hkv = 8;   /* 2^32 tiles: past the kernel's int tile index */
    assert_int_equal(rt_attn_grid_geom(&geo, &p, 0, grid), -1);
    p.b = 1, p.sq = 100, p.hq = 4, p.hkv = 1;   /* fewer units than SMs: one CTA a unit */
    geo.ctas = 132;
    assert_int_equal(rt_attn_grid_geom(&geo, &p, 0, grid), 0);
    assert_true(grid[0] == 4 && grid[1] == 1 && grid[2] == 1);
    gen_kv_set_str(&vp, "sched", "grid");
    geo = rt_attn_geom_of(&vp);
    geo.ctas = 132;
    assert_int_equal(geo.persist, 0);
    p.b = 2, p.sq = 8192, p.hq = 32, p.hkv = 8;
    assert_int_equal(rt_attn_grid_geom(&geo, &p, 0, grid), 0);
    assert_true(grid[0] == 43 && grid[1] == 32 && grid[2] == 2);
}

static void test_api__tma_maps_refuse_what_they_cannot_describe(void **state)
{
    (void)state;
    gen_kvset vp;
    gen_kv_clear(&vp);
    gen_kv_set_str(&vp, "family", "attn_prefill");
    gen_kv_set_str(&vp, "impl", "wgmma_tma");
    gen_kv_set_int(&vp, "bm", 128), gen_kv_set_int(&vp, "g", 4), gen_kv_set_int(&vp, "d", 128);
    gen_kv_set_int(&vp, "bn", 128);
    rt_attn_geom geo = rt_attn_geom_of(&vp);
    assert_int_equal(geo.tma, 1);
    assert_int_equal(geo.d, 128);
    assert_int_equal(geo.bn, 128);
    static _Alignas(16) unsigned char buf[64];
    kf_attn_params p;
    memset(&p, 0, sizeof p);
    p.q = p.k = p.v = buf;
    p.b = 1, p.sq = 64, p.skv = 64, p.hq = 32, p.hkv = 8;
    p.q_ss = 32 * 128, p.q_sh = 128, p.q_sb = 64 * 32 * 128;
    p.k_ss = 8 * 128, p.k_sh = 128, p.k_sb = 64 * 8 * 128;
    p.v_ss = p.k_ss, p.v_sh = p.k_sh, p.v_sb = p.k_sb;
    kf_attn_tmaps tm;
    core_err msg = CORE_ERR_INIT;
    kf_attn_params a = p;
    a.v_ss = 8 * 128 + 4;          /* rows 8 bytes past a multiple of 16 */
    assert_int_equal(rt_attn_tmaps(&geo, &a, -1, &tm, &msg), KF_ERR_UNSUPPORTED);
    assert_non_null(strstr(msg.msg, "tensor v's sequence stride"));
    a = p;
    a.k = buf + 8;
    assert_int_equal(rt_attn_tmaps(&geo, &a, -1, &tm, &msg), KF_ERR_UNSUPPORTED);
    assert_non_null(strstr(msg.msg, "tensor k"));
    a = p;
    static const int bt[1] = {0};
    a.block_table = bt;
    a.page_size = 48;             /* paged: boxes of min(bn, page) rows must tile both the page and the block */
    assert_int_equal(rt_attn_tmaps(&geo, &a, -1, &tm, &msg), KF_ERR_UNSUPPORTED);
    assert_non_null(strstr(msg.msg, "page_size 48"));
    static const int ok_ps[] = {8, 16, 32, 64, 128, 256, 1024}, bad_ps[] = {0, 4, 12, 24, 48, 96, 200};
    for (size_t i = 0; i < sizeof ok_ps / sizeof ok_ps[0]; i++)
        assert_true(rt_attn_tma_pages_ok(ok_ps[i], 128) && rt_attn_tma_pages_ok(ok_ps[i], 64));
    for (size_t i = 0; i < sizeof bad_ps / sizeof bad_ps[0]; i++)
        assert_false(rt_attn_tma_pages_ok(bad_ps[i], 128));
    assert_true(rt_attn_tma_pages_ok(192, 64));   /* three 64-key blocks a page */
    assert_false(rt_attn_tma_pages_ok(192, 128));
    a = p;
    static const int cu[2] = {0, 64};
    a.cu_seqlens_k = cu;
    assert_int_equal(rt_attn_tmaps(&geo, &a, -1, &tm, &msg), KF_ERR_UNSUPPORTED);
    assert_non_null(strstr(msg.msg, "total key rows"));
    gen_kv_set_str(&vp, "impl", "wgmma_pp");
    assert_int_equal(rt_attn_geom_of(&vp).tma, 0);
}

/* attn_parts_decode impl=wgmma_tma: the variant takes maps as its second argument; a cache a map cannot describe
 * (a row stride off 16 bytes, a base off 16 bytes) is refused naming it before any driver call; other impls take
 * the params alone */
static void test_api__parts_tensor_maps_refuse_what_they_cannot_describe(void **state)
{
    (void)state;
    gen_kvset vp;
    gen_kv_clear(&vp);
    gen_kv_set_str(&vp, "family", "attn_parts_decode");
    gen_kv_set_str(&vp, "impl", "wgmma_tma");
    gen_kv_set_str(&vp, "parts", "latent512_rope64");
    gen_kv_set_int(&vp, "ps", 64);
    assert_int_equal(rt_parts_tma(&vp), 1);
    static _Alignas(16) uint16_t buf[1024];
    kf_parts_params p;
    memset(&p, 0, sizeof p);
    p.b = 2, p.sq = 1, p.skv = 128, p.hq = 128, p.hkv = 1, p.splits = 1;
    p.c[0] = (kf_parts_tensor){buf, 64 * 576, 576, 576};
    p.c[1] = (kf_parts_tensor){buf + 512, 64 * 576, 576, 576};
    kf_parts_tmaps tm;
    void *args[2];
    core_err msg = CORE_ERR_INIT;
    kf_parts_params a = p;
    a.c[1].ss = 580;               /* rows 8 bytes past a multiple of 16 */
    assert_int_equal(rt_parts_tmaps(&vp, &a, &tm, &msg), KF_ERR_UNSUPPORTED);
    assert_non_null(strstr(msg.msg, "tensor k[0][1]'s sequence stride 580"));
    a = p;
    a.c[0].p = buf + 4;
    assert_int_equal(rt_parts_args(&vp, &a, &tm, args, &msg), KF_ERR_UNSUPPORTED);
    assert_non_null(strstr(msg.msg, "tensor k[0][0]"));
    gen_kv_set_str(&vp, "impl", "wgmma_ksl");
    assert_int_equal(rt_parts_tma(&vp), 0);
    assert_int_equal(rt_parts_args(&vp, &a, &tm, args, &msg), 0);   /* no maps: nothing to refuse */
    assert_ptr_equal(args[0], &a);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_api__parts_tensor_maps_refuse_what_they_cannot_describe),
        cmocka_unit_test(test_api__every_field_is_checked),
        cmocka_unit_test(test_api__paged_strides_resolve),
        cmocka_unit_test(test_api__selection_is_pure_and_prefers_winners),
        cmocka_unit_test(test_api__open_without_gpu_says_so),
        cmocka_unit_test(test_api__status_text_and_version),
        cmocka_unit_test(test_api__every_kda_field_is_checked),
        cmocka_unit_test(test_api__kda_selection_is_pure_and_prefers_winners),
        cmocka_unit_test(test_api__kda_strides_resolve),
        cmocka_unit_test(test_api__kda_selection_through_the_templates),
        cmocka_unit_test(test_api__paged_plans_share_the_contiguous_binary),
        cmocka_unit_test(test_api__every_kda_tensor_is_checked),
        cmocka_unit_test(test_api__sizes_cannot_overflow),
        cmocka_unit_test(test_api__one_shape_check_for_api_and_cli),
        cmocka_unit_test(test_api__open_checks_its_arguments_and_paths_first),
        cmocka_unit_test(test_api__close_before_plan_free_is_safe),
        cmocka_unit_test(test_api__attn_run_refuses_what_it_would_ignore),
        cmocka_unit_test(test_api__hostile_descriptions_are_refused_cleanly),
        cmocka_unit_test(test_api__tma_maps_refuse_what_they_cannot_describe),
        cmocka_unit_test(test_api__persistent_prefill_grid),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
