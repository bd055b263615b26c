/* tests/cpu/test_pdl_ptx.c: every kernel a template launches with programmatic dependent launch waits (griddepcontrol.wait) before its first memory access outside its parameters, in the PTX NVRTC makes for sm_90a */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gen/build.h"
#include "gen/kernels.h"
#include "gen/sweep.h"
#include "gen/template.h"

/*
 * A kernel marked pdl (a template's kernels() sets pdl = 1) is placed while the kernel before it in the stream still
 * runs; what it reads may not be written yet until griddepcontrol.wait returns (KF_PDL_ENTRY / KF_PDL_WAIT,
 * templates/common/types.cuh). The GPU suites catch a missing wait only when the race shows (test_api_gpu's chained
 * calls, tests/device_pdl.sh); this test reads the order in the PTX itself, without a GPU: in each marked kernel's
 * .entry body the first griddepcontrol.wait comes before the first instruction that may touch global memory (a load
 * or store not in the param, shared, local or const space, an atomic or reduction outside shared memory, any
 * cp.async, prefetch, texture or surface access, and any call).
 *
 * The set: every shape of every sweep, every valid variant on sm_90a, one variant for each distinct (family, impl,
 * kernel names and pdl marks), so every kernel source a template can launch marked is compiled once.
 */

/* 1 when opcode (a PTX instruction's first word, predicate removed) may access memory a previous kernel wrote. */
static int may_touch_global(const char *op)
{
    static const char *const safe_spaces[] = {".param", ".shared", ".local", ".const"};
    int ldst = !strncmp(op, "ld.", 3) || !strncmp(op, "ldu.", 4) || !strncmp(op, "st.", 3) || !strcmp(op, "ld")
               || !strcmp(op, "st") || !strncmp(op, "atom", 4) || !strncmp(op, "red", 3);
    if (ldst) {
        for (size_t i = 0; i < sizeof safe_spaces / sizeof safe_spaces[0]; i++)
            if (strstr(op, safe_spaces[i]))
                return 0;
        return 1;
    }
    static const char *const always[] = {"cp.async", "cp.reduce.async", "prefetch", "tex.", "tld4", "suld", "sust",
                                         "sured", "multimem", "call", "tensormap"};
    for (size_t i = 0; i < sizeof always / sizeof always[0]; i++)
        if (!strncmp(op, always[i], strlen(always[i])))
            return 1;
    return 0;
}

/* Checks kernel `name` in ptx: 0 when its body waits first; else -1 with why. */
static int check_entry(const char *ptx, const char *name, char *why, size_t whyn)
{
    char pat[96];
    snprintf(pat, sizeof pat, ".entry %s(", name);
    const char *e = strstr(ptx, pat);
    if (!e) {
        snprintf(why, whyn, "no .entry %s in the PTX", name);
        return -1;
    }
    const char *body = strchr(strchr(e, ')') ? strchr(e, ')') : e, '{');
    if (!body) {
        snprintf(why, whyn, ".entry %s has no body", name);
        return -1;
    }
    int depth = 0, line = 0;
    for (const char *s = body; *s; line++) {
        const char *nl = strchr(s, '\n');
        size_t len = nl ? (size_t)(nl - s) : strlen(s);
        char buf[512];
        snprintf(buf, sizeof buf, "%.*s", (int)(len < sizeof buf - 1 ? len : sizeof buf - 1), s);
        for (const char *c = buf; *c; c++)
            depth += *c == '{' ? 1 : *c == '}' ? -1 : 0;
        char *w = buf + strspn(buf, " \t");
        if (*w == '@')                                      /* a predicate: @%p1 or @!%p1 */
            w += strcspn(w, " \t"), w += strspn(w, " \t");
        char op[96];
        snprintf(op, sizeof op, "%.*s", (int)strcspn(w, " \t;"), w);
        if (!strcmp(op, "griddepcontrol.wait"))
            return 0;
        if (*op && *op != '/' && *op != '.' && may_touch_global(op)) {
            snprintf(why, whyn, "%s: '%.80s' (body line %d) before any griddepcontrol.wait", name, w, line);
            return -1;
        }
        if (depth <= 0 && line > 0)
            break;
        if (!nl)
            break;
        s = nl + 1;
    }
    snprintf(why, whyn, "%s: no griddepcontrol.wait in its body", name);
    return -1;
}

/* ---- the checker itself, on hand-written PTX (each case must come out as stated) */
static void test_pdl_ptx__the_check_reads_the_order(void **state)
{
    (void)state;
    char why[256];
    const char *good = ".visible .entry k(\n\t.param .u64 k_param_0\n)\n{\n\t.reg .b64 %rd<4>;\n"
                       "\tld.param.u64 %rd1, [k_param_0];\n\tld.shared.u32 %r1, [%rd1];\n\tgriddepcontrol.wait;\n"
                       "\tld.global.u32 %r2, [%rd1];\n\tret;\n}\n";
    assert_int_equal(check_entry(good, "k", why, sizeof why), 0);
    const char *early = ".visible .entry k(\n\t.param .u64 k_param_0\n)\n{\n\tld.param.u64 %rd1, [k_param_0];\n"
                        "\t@%p1 ld.global.nc.v4.u32 {%r1, %r2, %r3, %r4}, [%rd1];\n\tgriddepcontrol.wait;\n\tret;\n}\n";
    assert_int_equal(check_entry(early, "k", why, sizeof why), -1);
    assert_non_null(strstr(why, "ld.global.nc"));
    const char *generic = ".entry k(\n)\n{\n\tld.u32 %r1, [%rd1];\n\tgriddepcontrol.wait;\n}\n";
    assert_int_equal(check_entry(generic, "k", why, sizeof why), -1);
    const char *bulk = ".entry k(\n)\n{\n\tcp.async.bulk.tensor.2d.shared::cluster.global [%r1], [%rd1, {%r2, %r3}], [%r4];"
                       "\n\tgriddepcontrol.wait;\n}\n";
    assert_int_equal(check_entry(bulk, "k", why, sizeof why), -1);
    const char *none = ".entry k(\n)\n{\n\tst.shared.u32 [%r1], %r2;\n\tret;\n}\n"
                       ".entry j(\n)\n{\n\tgriddepcontrol.wait;\n}\n";
    assert_int_equal(check_entry(none, "k", why, sizeof why), -1);      /* the next entry's wait is not k's */
    assert_non_null(strstr(why, "no griddepcontrol.wait"));
    assert_int_equal(check_entry(none, "j", why, sizeof why), 0);
    assert_int_equal(check_entry(good, "absent", why, sizeof why), -1);
}

/* ---- the templates' marked kernels */
typedef struct pick {
    gen_job *v;
    int n, cap;
    char (*sig)[512];
} pick;

static gen_host *g_host;
static gen_target g_tg;

/* The variant's signature: family, impl (if the space has one), kernel names with their pdl marks. */
static void signature(gen_tmpl *t, const gen_kvset *params, const gen_kernel *k, int nk, char *buf, size_t n)
{
    const char *impl = gen_kv_str(params, "impl");
    int o = snprintf(buf, n, "%s|%s", gen_tmpl_family(t), impl ? impl : "");
    for (int i = 0; i < nk && o > 0 && (size_t)o < n; i++)
        o += snprintf(buf + o, n - (size_t)o, "|%s%s", k[i].name, k[i].pdl ? "/pdl" : "");
}

struct ectx {
    pick *l;
    gen_tmpl *t;
    const gen_kvset *fixed;
};

static int each_cb(const gen_kvset *params, int valid, const char *why, void *arg)
{
    (void)why;
    struct ectx *c = arg;
    if (!valid)
        return 0;
    gen_kernel k[GEN_MAX_KERNELS];
    int nk = 0;
    if (gen_tmpl_kernels(c->t, c->fixed, params, &g_tg.dev, k, GEN_MAX_KERNELS, &nk))
        fail_msg("kernels(): %s", gen_host_errmsg(g_host));
    int any = 0;
    for (int i = 0; i < nk; i++)
        any |= k[i].pdl;
    if (!any)
        return 0;
    char sig[512];
    signature(c->t, params, k, nk, sig, sizeof sig);
    pick *l = c->l;
    for (int i = 0; i < l->n; i++)
        if (!strcmp(l->sig[i], sig))
            return 0;
    if (l->n == l->cap) {
        l->cap = l->cap ? 2 * l->cap : 64;
        l->v = realloc(l->v, (size_t)l->cap * sizeof *l->v);
        l->sig = realloc(l->sig, (size_t)l->cap * sizeof *l->sig);
    }
    gen_job *j = &l->v[l->n];
    memset(j, 0, sizeof *j);
    j->tmpl = c->t, j->fixed = *c->fixed, j->params = *params;
    if (gen_build_prepare(j, &g_tg))
        fail_msg("prepare %s: %s", sig, gen_host_errmsg(g_host));
    snprintf(l->sig[l->n], sizeof l->sig[0], "%s", sig);
    l->n++;
    return 0;
}

static int each_sweep(const char *name, void *arg)
{
    pick *l = arg;
    gen_sweep sw;
    if (gen_sweep_load(g_host, name, &sw))
        fail_msg("%s", gen_host_errmsg(g_host));
    for (int i = 0; i < sw.n; i++) {
        gen_tmpl *t = gen_tmpl_load(g_host, gen_kv_str(&sw.shapes[i], "family"));
        if (!t)
            fail_msg("%s", gen_host_errmsg(g_host));
        gen_kvset fixed;
        if (gen_tmpl_fixed(t, &sw.shapes[i], &fixed))
            fail_msg("%s", gen_host_errmsg(g_host));
        struct ectx c = {l, t, &fixed};
        if (gen_tmpl_enumerate(t, &fixed, &g_tg.dev, each_cb, &c))
            fail_msg("%s", gen_host_errmsg(g_host));
    }
    gen_sweep_free(&sw);
    return 0;
}

static void test_pdl_ptx__marked_kernels_wait_first(void **state)
{
    (void)state;
    g_host = gen_host_new(NULL);
    assert_int_equal(gen_target_init(&g_tg, "sm_90a", 1, NULL), 0);
    pick l = {0};
    if (gen_sweep_names(g_host, each_sweep, &l))
        fail_msg("%s", gen_host_errmsg(g_host));
    assert_true(l.n > 0);                                    /* no marked kernel at all would check nothing */
    char err[256];
    int threads = (int)sysconf(_SC_NPROCESSORS_ONLN);
    int failed = gen_build_run(l.v, l.n, threads, NULL, &g_tg, NULL, NULL, err, sizeof err);
    int bad = 0, checked = 0;
    for (int i = 0; i < l.n; i++) {
        gen_job *j = &l.v[i];
        if (j->failed) {
            print_error("%s\n", j->err);
            continue;
        }
        for (int k = 0; k < j->n_kernels; k++) {
            if (!j->kernels[k].pdl)
                continue;
            char why[256];
            if (check_entry((const char *)j->bin.image, j->kernels[k].name, why, sizeof why)) {
                print_error("%s: %s\n", j->variant_key, why);
                bad++;
            }
            checked++;
        }
        print_message("  %-60s %s\n", l.sig[i], j->variant_key);
    }
    print_message("%d marked kernels in %d variants: %d wait first, %d do not, %d compiles failed\n", checked, l.n,
                  checked - bad, bad, failed);
    for (int i = 0; i < l.n; i++)
        gen_job_free(&l.v[i]);
    free(l.v), free(l.sig);
    gen_host_free(g_host);
    assert_int_equal(failed, 0);
    assert_int_equal(bad, 0);
}

/* ---- a planted slip: a real marked variant with every griddepcontrol.wait taken out of its source and headers
 * (KF_PDL_ENTRY then only lets the next kernel start, KF_PDL_WAIT is empty) must fail the check */
static char *without_wait(const char *text)
{
    static const char needle[] = "griddepcontrol.wait;";
    size_t n = strlen(text);
    char *out = malloc(n + 1), *o = out;
    for (const char *s = text; *s;) {
        if (!strncmp(s, needle, sizeof needle - 1))
            s += sizeof needle - 1;
        else
            *o++ = *s++;
    }
    *o = '\0';
    return out;
}

static void test_pdl_ptx__a_kernel_without_its_wait_fails(void **state)
{
    (void)state;
    g_host = gen_host_new(NULL);
    assert_int_equal(gen_target_init(&g_tg, "sm_90a", 1, NULL), 0);
    gen_sweep sw;
    if (gen_sweep_load(g_host, "kda", &sw))
        fail_msg("%s", gen_host_errmsg(g_host));
    int planted = 0;
    for (int i = 0; i < sw.n && !planted; i++) {
        gen_tmpl *t = gen_tmpl_load(g_host, gen_kv_str(&sw.shapes[i], "family"));
        gen_kvset fixed, params;
        assert_non_null(t);
        assert_int_equal(gen_tmpl_fixed(t, &sw.shapes[i], &fixed), 0);
        assert_int_equal(gen_tmpl_default(t, &sw.shapes[i], &g_tg.dev, &params), 0);
        gen_job j;
        memset(&j, 0, sizeof j);
        j.tmpl = t, j.fixed = fixed, j.params = params;
        assert_int_equal(gen_build_prepare(&j, &g_tg), 0);
        int k = 0;
        while (k < j.n_kernels && !j.kernels[k].pdl)
            k++;
        if (k == j.n_kernels) {
            gen_job_free(&j);
            continue;
        }
        const char *names[64], *texts[64];
        char *cut[64];
        int nh = gen_tmpl_headers(t, names, texts, 64);
        for (int h = 0; h < nh; h++)
            cut[h] = without_wait(texts[h]);
        char *src = without_wait(j.src), err[1024], why[256];
        assert_null(strstr(src, "griddepcontrol.wait;"));
        gen_binary_out out;
        memset(&out, 0, sizeof out);
        if (gen_nvrtc_compile_headers(src, j.variant_key, g_tg.arch, 1, nh, names, (const char *const *)cut, &out,
                                      err, sizeof err))
            fail_msg("%s", err);
        assert_int_equal(check_entry((const char *)out.image, j.kernels[k].name, why, sizeof why), -1);
        print_message("planted in %s: %s\n", j.variant_key, why);
        planted = 1;
        gen_binary_out_free(&out);
        free(src);
        for (int h = 0; h < nh; h++)
            free(cut[h]);
        gen_job_free(&j);
    }
    gen_sweep_free(&sw);
    gen_host_free(g_host);
    assert_true(planted);
}

int main(void)
{
    unsetenv("KFORGE_TEMPLATE_DIR");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pdl_ptx__the_check_reads_the_order),
        cmocka_unit_test(test_pdl_ptx__a_kernel_without_its_wait_fails),
        cmocka_unit_test(test_pdl_ptx__marked_kernels_wait_first),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
