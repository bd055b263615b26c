/* tests/cpu/test_parts_api.c: split-score decode in the runtime without a GPU: description checks, selection with the template default, binding a call, grids */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/jit.h"
#include "runtime/parts_launch.h"
#include "runtime/parts_plan.h"
#include "runtime/select.h"
#include "tests/cpu/api_util.h"

static rt_jit *g_jit;

static kf_parts_desc mla(int hq)
{
    kf_parts_desc d = KF_PARTS_DESC_INIT;
    d.parts = "latent512_rope64";
    d.value = KF_PARTS_VALUE_ALIAS;
    d.dv = 512, d.hq = hq, d.hkv = 1, d.layers = 1, d.page_size = 64;
    d.scale = 0.0722f;
    d.max_batch = 128, d.max_q = 1, d.max_kv = 4096;
    return d;
}

static kf_parts_desc base_delta(int layers)
{
    kf_parts_desc d = KF_PARTS_DESC_INIT;
    d.parts = "base128_delta32";
    d.value = KF_PARTS_VALUE_SEPARATE;
    d.dv = 160, d.hq = 8, d.hkv = 4, d.layers = layers;
    d.scale = 0.08f;
    d.max_batch = 2, d.max_q = 1, d.max_kv = 2048;
    return d;
}

static void expect(kf_parts_desc d, kf_status want, const char *needle)
{
    rt_devinfo dev = api_h200();
    rt_choice ch;
    core_err msg = CORE_ERR_INIT;
    kf_status st = rt_parts_select(&d, &dev, NULL, api_jit_default, g_jit, &ch, &msg);
    if (st != want || !strstr(msg.msg, needle))
        fail_msg("status %d (want %d), message '%s' (want '%s')", st, want, msg.msg, needle);
}

static void test_parts_api__refuses_bad_descriptions(void **state)
{
    (void)state;
    kf_parts_desc d = mla(16);
    d.parts = "latent512rope64";
    expect(d, KF_ERR_ARG, "latent512rope64");
    d = mla(16), d.parts = "latent520_rope64";
    expect(d, KF_ERR_UNSUPPORTED, "520");
    d = mla(16), d.dv = 576;
    expect(d, KF_ERR_ARG, "desc.dv = 576");
    d = base_delta(4), d.dv = 128;
    expect(d, KF_ERR_ARG, "desc.dv = 128");
    d = base_delta(5);
    expect(d, KF_ERR_ARG, "desc.layers must be 1..4, got 5");
    d = mla(16), d.page_size = 48;
    expect(d, KF_ERR_UNSUPPORTED, "desc.page_size = 48");
    d = mla(16), d.scale = 0;
    expect(d, KF_ERR_ARG, "desc.scale");
    d = mla(16), d.max_q = 17;
    expect(d, KF_ERR_UNSUPPORTED, "desc.max_q");
    d = base_delta(1), d.hq = 6;
    expect(d, KF_ERR_ARG, "desc.hq = 6");
}

static void test_parts_api__selects_the_template_default(void **state)
{
    (void)state;
    rt_devinfo dev = api_h200();
    rt_choice a, b;
    core_err msg = CORE_ERR_INIT;
    kf_parts_desc d = mla(128);
    assert_int_equal(rt_parts_select(&d, &dev, NULL, api_jit_default, g_jit, &a, &msg), KF_OK);
    assert_int_equal(rt_parts_select(&d, &dev, NULL, api_jit_default, g_jit, &b, &msg), KF_OK);
    char ka[512], kb[512];
    gen_kv_keyform(&a.vp, ka, sizeof ka);
    gen_kv_keyform(&b.vp, kb, sizeof kb);
    assert_string_equal(ka, kb);   /* pure: same inputs, same answer */
    assert_string_equal(gen_kv_str(&a.shape, "value"), "alias_latent");
    assert_int_equal(gen_kv_int(&a.vp, "tm", 0), 64);
    assert_int_equal(gen_kv_int(&a.vp, "ps", -1), 64);
    /* no JIT and no winner: NOT_TUNED naming the shape */
    assert_int_equal(rt_parts_select(&d, &dev, NULL, NULL, NULL, &a, &msg), KF_ERR_NOT_TUNED);
    assert_non_null(strstr(msg.msg, "latent512_rope64"));
    /* B 1: splits fill the machine, the workspace covers them */
    d.max_batch = 1;
    assert_int_equal(rt_parts_select(&d, &dev, NULL, api_jit_default, g_jit, &a, &msg), KF_OK);
    long long sp = gen_kv_int(&a.vp, "sp", 0);
    assert_true(sp > 1);
    assert_int_equal(a.workspace, (size_t)(sp * 1 * 128 * (512 + 1) * 4));
}

static void *fake(uintptr_t x) { return (void *)(x << 8); }

static void test_parts_api__binds_a_joint_layer_call(void **state)
{
    (void)state;
    rt_devinfo dev = api_h200();
    rt_choice ch;
    core_err msg = CORE_ERR_INIT;
    kf_parts_desc d = base_delta(4);
    assert_int_equal(rt_parts_select(&d, &dev, NULL, api_jit_default, g_jit, &ch, &msg), KF_OK);
    rt_parts_info info;
    assert_int_equal(rt_parts_check(&d, &dev, &info, &msg), KF_OK);
    gen_kv_set_int(&ch.vp, "sp", 2);   /* a split call: two layers' partials in the workspace */
    kf_parts_params base, p;
    rt_parts_base_params(&info, &ch.vp, &base);
    kf_parts_tensors t;
    memset(&t, 0, sizeof t);
    for (int l = 0; l < 4; l++) {
        for (int k = 0; k < 2; k++) {
            t.q[l][k].ptr = fake(0x100 + 16 * l + k);
            if (k || !l) {   /* part 0 is shared: k[0][0], v[0][0] */
                t.k[l][k].ptr = fake(0x200 + 16 * l + k);
                t.v[l][k].ptr = fake(0x300 + 16 * l + k);
            }
        }
        t.o[l].ptr = fake(0x400 + l);
    }
    t.batch = 2, t.q_len = 1, t.kv_len_all = 100;
    size_t ws = rt_parts_workspace_bytes(&ch.vp, &base);
    assert_int_equal(ws, (size_t)(4 * 2 * 2 * 8 * (160 + 1) * 4));
    assert_int_equal(rt_parts_bind(&info, &base, &ch.vp, ws, fake(0x900), &t, &p, &msg), KF_OK);
    /* caches in tile order: base k, delta k of layers 0..3, base v, delta v of layers 0..3 */
    assert_ptr_equal(p.c[0].p, fake(0x200));
    for (int l = 0; l < 4; l++) {
        assert_ptr_equal(p.c[1 + l].p, fake(0x200 + 16 * l + 1));
        assert_ptr_equal(p.c[6 + l].p, fake(0x300 + 16 * l + 1));
    }
    assert_ptr_equal(p.c[5].p, fake(0x300));
    assert_int_equal(p.c[0].ss, 4 * 128);
    assert_int_equal(p.c[0].sb, 2048LL * 4 * 128);
    assert_int_equal(p.c[1].ss, 4 * 32);
    assert_int_equal(p.q[3][1].ss, 8 * 32);
    assert_int_equal(p.o[2].ss, 8 * 160);
    assert_int_equal(p.skv, 100);
    assert_ptr_equal(p.ws_o[0], fake(0x900));
    assert_ptr_equal((char *)p.ws_o[1], (char *)fake(0x900) + ws / 4);
    unsigned g[3];
    assert_int_equal(rt_parts_grid(&ch.vp, &p, 0, g), 0);
    assert_int_equal(g[0], 2), assert_int_equal(g[1], 4), assert_int_equal(g[2], 2);
    assert_int_equal(rt_parts_launch_count(&ch.vp), 5);
    /* refusals name the field */
    t.o[3].ptr = (char *)fake(0x400) + 2;
    assert_int_equal(rt_parts_bind(&info, &base, &ch.vp, ws, fake(0x900), &t, &p, &msg), KF_ERR_UNSUPPORTED);
    assert_non_null(strstr(msg.msg, "tensors.o[3].ptr"));
    t.o[3].ptr = fake(0x403);
    t.k[2][1].ptr = NULL;
    assert_int_equal(rt_parts_bind(&info, &base, &ch.vp, ws, fake(0x900), &t, &p, &msg), KF_ERR_ARG);
    assert_non_null(strstr(msg.msg, "tensors.k[2][1].ptr is NULL"));
    t.k[2][1].ptr = fake(0x221);
    t.block_table = fake(0x999);
    assert_int_equal(rt_parts_bind(&info, &base, &ch.vp, ws, fake(0x900), &t, &p, &msg), KF_ERR_ARG);
    assert_non_null(strstr(msg.msg, "contiguous"));
    t.block_table = NULL;
    /* what the plan would not read is refused, not ignored */
    static const struct { int what, l, p; const char *needle; } unused[] = {
        {0, 1, 0, "tensors.k[1][0] is set but key part 0 is shared by the layers (k[0][0])"},
        {1, 3, 0, "tensors.v[3][0] is set but key part 0 is shared"},
        {0, 0, 2, "tensors.k[0][2] is set but the plan has fewer key parts"},
        {2, 1, 3, "tensors.q[1][3] is set but the plan has fewer key parts"},
    };
    for (size_t i = 0; i < sizeof unused / sizeof unused[0]; i++) {
        kf_parts_tensors u = t;
        kf_parts_view *v = unused[i].what == 0 ? &u.k[unused[i].l][unused[i].p]
                           : unused[i].what == 1 ? &u.v[unused[i].l][unused[i].p] : &u.q[unused[i].l][unused[i].p];
        v->strides[1] = 64;
        assert_int_equal(rt_parts_bind(&info, &base, &ch.vp, ws, fake(0x900), &u, &p, &msg), KF_ERR_ARG);
        if (!strstr(msg.msg, unused[i].needle))
            fail_msg("case %zu: '%s', want '%s'", i, msg.msg, unused[i].needle);
    }
    kf_parts_tensors u = t;
    u.kv_len = (const int32_t *)((char *)fake(0x77) + 2);
    assert_int_equal(rt_parts_bind(&info, &base, &ch.vp, ws, fake(0x900), &u, &p, &msg), KF_ERR_ARG);
    assert_non_null(strstr(msg.msg, "tensors.kv_len = 0x7702 is not 4-byte aligned"));
    u = t, u.bt_stride = 3;
    assert_int_equal(rt_parts_bind(&info, &base, &ch.vp, ws, fake(0x900), &u, &p, &msg), KF_ERR_ARG);
    assert_non_null(strstr(msg.msg, "tensors.bt_stride = 3 is set but the plan's caches are contiguous"));
    /* fewer layers: the views of layer 3 are refused */
    kf_parts_desc d2 = base_delta(2);
    rt_parts_info info2;
    assert_int_equal(rt_parts_check(&d2, &dev, &info2, &msg), KF_OK);
    assert_int_equal(rt_parts_bind(&info2, &base, &ch.vp, ws, fake(0x900), &t, &p, &msg), KF_ERR_ARG);
    assert_non_null(strstr(msg.msg, "tensors.q[2][0] is set but the plan has fewer layers"));
}

/* The split workspace is checked arithmetic: a size past 64 bits is SIZE_MAX (refused), never a wrapped one. */
static void test_parts_api__workspace_cannot_overflow(void **state)
{
    (void)state;
    gen_kvset vp;
    char err[128];
    gen_kv_clear(&vp);
    assert_int_equal(gen_kv_parse(&vp, "family=attn_parts_decode,dv=512,layers=4", err, sizeof err), 0);
    kf_parts_params p;
    memset(&p, 0, sizeof p);
    p.splits = 128, p.ws_rows = 65535 * 16, p.hq = 2147483647;
    assert_true(rt_parts_workspace_bytes(&vp, &p) == SIZE_MAX);
    p.splits = 2, p.ws_rows = 3, p.hq = 5;
    assert_int_equal(rt_parts_workspace_bytes(&vp, &p), 4 * 2 * 3 * 5 * 513 * 4);
}

static void test_parts_api__paged_bt_stride_covers_max_kv(void **state)
{
    (void)state;
    rt_devinfo dev = api_h200();
    core_err msg = CORE_ERR_INIT;
    kf_parts_desc d = mla(16);
    rt_parts_info info;
    assert_int_equal(rt_parts_check(&d, &dev, &info, &msg), KF_OK);
    gen_kvset vp;
    gen_kv_clear(&vp);
    gen_kv_set_str(&vp, "family", "attn_parts_decode");
    kf_parts_params base, p;
    rt_parts_base_params(&info, &vp, &base);
    kf_parts_tensors t;
    memset(&t, 0, sizeof t);
    t.q[0][0].ptr = fake(1), t.q[0][1].ptr = fake(2), t.k[0][0].ptr = fake(3), t.k[0][1].ptr = fake(4);
    t.o[0].ptr = fake(5);
    t.batch = 1, t.q_len = 1, t.kv_len_all = 4096;
    t.block_table = fake(6), t.bt_stride = 63;   /* 4096 keys in pages of 64: 64 pages */
    assert_int_equal(rt_parts_bind(&info, &base, &vp, 0, NULL, &t, &p, &msg), KF_ERR_ARG);
    assert_non_null(strstr(msg.msg, "tensors.bt_stride = 63 is less than the 64 pages"));
    t.bt_stride = 64;
    assert_int_equal(rt_parts_bind(&info, &base, &vp, 0, NULL, &t, &p, &msg), KF_OK);
    /* declared strides whose span over a page does not fit in 63 bits */
    kf_parts_tensors u = t;
    u.k[0][1].strides[1] = 1LL << 60;
    assert_int_equal(rt_parts_bind(&info, &base, &vp, 0, NULL, &u, &p, &msg), KF_ERR_ARG);
    assert_non_null(strstr(msg.msg, "tensors.k[0][1].strides = {0, 1152921504606846976, 0} over [1, 64, 1, 64] span more"));
    t.block_table = (const int32_t *)((char *)fake(6) + 2);
    assert_int_equal(rt_parts_bind(&info, &base, &vp, 0, NULL, &t, &p, &msg), KF_ERR_ARG);
    assert_non_null(strstr(msg.msg, "not 4-byte aligned"));
    /* the maxima's contiguous tensors past 63 bits */
    d = mla(16), d.page_size = 0, d.hq = d.hkv = 1 << 30, d.max_kv = 1 << 30, d.max_batch = 65535;
    assert_int_equal(rt_parts_check(&d, &dev, &info, &msg), KF_ERR_ARG);
    assert_non_null(strstr(msg.msg, "do not fit in 63 bits"));
}

/* A paged MLA call of 128 sequences of 4096 keys, Hq 16: q and cache rows of 576, the rope part `rope` bytes into
 * the cache row (1024: bf16, 512: e4m3); no block table */
static kf_parts_tensors mla_call(size_t rope)
{
    kf_parts_tensors t;
    memset(&t, 0, sizeof t);
    t.q[0][0] = (kf_parts_view){fake(1), {0, 16 * 576, 576}};
    t.q[0][1] = (kf_parts_view){(char *)fake(1) + 1024, {0, 16 * 576, 576}};
    t.k[0][0] = (kf_parts_view){fake(2), {64 * 576, 576, 576}};
    t.k[0][1] = (kf_parts_view){(char *)fake(2) + rope, {64 * 576, 576, 576}};
    t.o[0].ptr = fake(3);
    t.batch = 128, t.q_len = 1, t.kv_len_all = 4096;
    return t;
}

static void test_parts_api__paged_mla_call_needs_a_block_table(void **state)
{
    (void)state;
    rt_devinfo dev = api_h200();
    rt_choice ch;
    core_err msg = CORE_ERR_INIT;
    kf_parts_desc d = mla(16);
    assert_int_equal(rt_parts_select(&d, &dev, NULL, api_jit_default, g_jit, &ch, &msg), KF_OK);
    rt_parts_info info;
    assert_int_equal(rt_parts_check(&d, &dev, &info, &msg), KF_OK);
    kf_parts_params base, p;
    rt_parts_base_params(&info, &ch.vp, &base);
    kf_parts_tensors t = mla_call(1024);
    assert_int_equal(rt_parts_bind(&info, &base, &ch.vp, 0, NULL, &t, &p, &msg), KF_ERR_ARG);
    assert_non_null(strstr(msg.msg, "block_table"));
    t.block_table = fake(4), t.bt_stride = 64;
    assert_int_equal(rt_parts_bind(&info, &base, &ch.vp, 0, NULL, &t, &p, &msg), KF_OK);
    assert_int_equal(p.c[1].sb, 64 * 576);
    assert_int_equal(p.q[0][0].sb, 1 * 16 * 512);   /* 0: contiguous [B, q_len, Hq, 512] (the part's own dim) */
    assert_int_equal(p.q[0][0].ss, 16 * 576);
    assert_int_equal(p.lse_sh, 1);
    unsigned g[3];
    assert_int_equal(rt_parts_grid(&ch.vp, &p, 0, g), 0);
    assert_int_equal(g[1], 1), assert_int_equal(g[2], 128);
}

/* The FP8 latent cache: refused outside the absorbed-MLA form, served on sm_90a by impl wg8 at every row count
 * (where the bf16 default is wgmma_tma), its key distinct from the bf16 plan's; a call needs the scales, byte
 * strides in 16s, and a 16-bit plan refuses scales */
static void test_parts_api__fp8_latent_cache(void **state)
{
    (void)state;
    kf_parts_desc d = base_delta(1);
    d.kv_dtype = KF_KV_E4M3;
    expect(d, KF_ERR_UNSUPPORTED, "value 'separate'");
    d = mla(16), d.kv_dtype = (kf_kv_dtype)7;
    expect(d, KF_ERR_ARG, "desc.kv_dtype must be KF_KV_SAME or KF_KV_E4M3, got 7");
    rt_devinfo dev = api_h200();
    rt_choice ch, c16;
    core_err msg = CORE_ERR_INIT;
    d = mla(128), d.kv_dtype = KF_KV_E4M3;
    assert_int_equal(rt_parts_select(&d, &dev, NULL, api_jit_default, g_jit, &ch, &msg), KF_OK);
    assert_string_equal(gen_kv_str(&ch.vp, "impl"), "wg8");    /* bf16 Hq 128 on sm_90a: wgmma_tma */
    assert_int_equal(gen_kv_int(&ch.vp, "sp", 0), 1);           /* 128 sequences x 8 tiles of 16 rows fill the SMs */
    assert_string_equal(gen_kv_str(&ch.shape, "kv_dtype"), "e4m3");
    kf_parts_desc d16 = mla(128);
    assert_int_equal(rt_parts_select(&d16, &dev, NULL, api_jit_default, g_jit, &c16, &msg), KF_OK);
    assert_string_equal(gen_kv_str(&c16.vp, "impl"), "wgmma_tma");
    assert_null(gen_kv_find(&c16.shape, "kv_dtype"));

    d = mla(16), d.kv_dtype = KF_KV_E4M3;
    assert_int_equal(rt_parts_select(&d, &dev, NULL, api_jit_default, g_jit, &ch, &msg), KF_OK);
    rt_parts_info info;
    assert_int_equal(rt_parts_check(&d, &dev, &info, &msg), KF_OK);
    kf_parts_params base, p;
    rt_parts_base_params(&info, &ch.vp, &base);
    kf_parts_tensors t = mla_call(512);   /* cache strides in bytes */
    t.block_table = fake(4), t.bt_stride = 64;
    assert_int_equal(rt_parts_bind(&info, &base, &ch.vp, 0, NULL, &t, &p, &msg), KF_ERR_ARG);
    assert_non_null(strstr(msg.msg, "tensors.kv_scale.ptr is NULL"));
    t.kv_scale = (kf_parts_view){(char *)fake(5) + 2, {0, 0, 0}};
    assert_int_equal(rt_parts_bind(&info, &base, &ch.vp, 0, NULL, &t, &p, &msg), KF_ERR_ARG);
    assert_non_null(strstr(msg.msg, "not 4-byte aligned"));
    t.kv_scale.ptr = fake(5);
    assert_int_equal(rt_parts_bind(&info, &base, &ch.vp, 0, NULL, &t, &p, &msg), KF_OK);
    assert_int_equal(p.cs.sb, 64), assert_int_equal(p.cs.ss, 1), assert_int_equal(p.cs.sh, 1);   /* [pages, 64, 1] */
    assert_int_equal(p.c[1].sb, 64 * 576);
    t.k[0][0].strides[1] = 584;   /* a multiple of 8 elements, not of 16 bytes */
    assert_int_equal(rt_parts_bind(&info, &base, &ch.vp, 0, NULL, &t, &p, &msg), KF_ERR_UNSUPPORTED);
    assert_non_null(strstr(msg.msg, "multiple of 16 elements"));
    t.k[0][0].strides[1] = 576;
    /* a 16-bit plan refuses the scales */
    d = mla(16);
    assert_int_equal(rt_parts_select(&d, &dev, NULL, api_jit_default, g_jit, &ch, &msg), KF_OK);
    assert_int_equal(rt_parts_check(&d, &dev, &info, &msg), KF_OK);
    rt_parts_base_params(&info, &ch.vp, &base);
    assert_int_equal(rt_parts_bind(&info, &base, &ch.vp, 0, NULL, &t, &p, &msg), KF_ERR_ARG);
    assert_non_null(strstr(msg.msg, "tensors.kv_scale is set"));
}

int main(void)
{
    core_err err = CORE_ERR_INIT;
    const char *src = getenv("KFORGE_SOURCE_DIR");
    char tdir[1024];
    snprintf(tdir, sizeof tdir, "%s/templates", src ? src : ".");
    g_jit = rt_jit_new(src ? tdir : NULL, &err);
    if (!g_jit) {
        fprintf(stderr, "error: %s\n", err.msg);
        return 1;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parts_api__refuses_bad_descriptions),
        cmocka_unit_test(test_parts_api__selects_the_template_default),
        cmocka_unit_test(test_parts_api__binds_a_joint_layer_call),
        cmocka_unit_test(test_parts_api__paged_mla_call_needs_a_block_table),
        cmocka_unit_test(test_parts_api__workspace_cannot_overflow),
        cmocka_unit_test(test_parts_api__paged_bt_stride_covers_max_kv),
        cmocka_unit_test(test_parts_api__fp8_latent_cache),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    rt_jit_free(g_jit);
    return rc;
}
