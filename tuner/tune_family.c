/* tuner/tune_family.c: the family table, tuner side (see tune_family.h): one entry per family, in rt_families' order */
#include "tuner/tune_family.h"

#include <stdio.h>
#include <string.h>

#include "tuner/combine_run.h"
#include "tuner/gqa_run.h"
#include "tuner/kda_run.h"
#include "tuner/parts_run.h"

/* ---- the runners through one signature ---------------------------------------------------------- */

static void *gqa_make(const gen_kvset *s, core_err *e) { return tune_gqa_new(s, e); }
static void gqa_release(void *st, tune_ctx *c) { tune_gqa_free(st, c); }
static int gqa_ref(void *st, gen_host *h, const gen_target *tg, gen_job *j) { return tune_gqa_ref_job(st, h, tg, j); }
static int gqa_gate(tune_ctx *c, void *st, const tune_compiled *v, const tune_compiled *ref, int *pass,
                    double *e, char *verdict, size_t n)
{
    return tune_gqa_gate(c, st, v, ref, pass, e, verdict, n);
}
static int gqa_time(tune_ctx *c, void *st, const tune_compiled *v, int s, tune_timing *t)
{
    return tune_gqa_time(c, st, v, s, t);
}

static void *kda_make(const gen_kvset *s, core_err *e) { return tune_kda_new(s, e); }
static void kda_release(void *st, tune_ctx *c) { tune_kda_free(st, c); }
static int kda_gate(tune_ctx *c, void *st, const tune_compiled *v, const tune_compiled *ref, int *pass,
                    double *e, char *verdict, size_t n)
{
    (void)ref;
    return tune_kda_gate(c, st, v, pass, e, verdict, n);
}
static int kda_time(tune_ctx *c, void *st, const tune_compiled *v, int s, tune_timing *t)
{
    return tune_kda_time(c, st, v, s, t);
}

static void *parts_make(const gen_kvset *s, core_err *e) { return tune_parts_new(s, e); }
static void parts_release(void *st, tune_ctx *c) { tune_parts_free(st, c); }
static int parts_gate(tune_ctx *c, void *st, const tune_compiled *v, const tune_compiled *ref, int *pass,
                      double *e, char *verdict, size_t n)
{
    (void)ref;
    return tune_parts_gate(c, st, v, pass, e, verdict, n);
}
static int parts_time(tune_ctx *c, void *st, const tune_compiled *v, int s, tune_timing *t)
{
    return tune_parts_time(c, st, v, s, t);
}

static void *combine_make(const gen_kvset *s, core_err *e) { return tune_combine_new(s, e); }
static void combine_release(void *st, tune_ctx *c) { tune_combine_free(st, c); }
static int combine_gate(tune_ctx *c, void *st, const tune_compiled *v, const tune_compiled *ref, int *pass,
                        double *e, char *verdict, size_t n)
{
    (void)ref;
    return tune_combine_gate(c, st, v, pass, e, verdict, n);
}
static int combine_time(tune_ctx *c, void *st, const tune_compiled *v, int s, tune_timing *t)
{
    return tune_combine_time(c, st, v, s, t);
}

static const tune_runner gqa_runner = {gqa_make, gqa_release, gqa_ref, gqa_gate, gqa_time};
static const tune_runner kda_runner = {kda_make, kda_release, NULL, kda_gate, kda_time};
static const tune_runner parts_runner = {parts_make, parts_release, NULL, parts_gate, parts_time};
static const tune_runner combine_runner = {combine_make, combine_release, NULL, combine_gate, combine_time};

/* ---- the table: one line per family, in rt_family_id order --------------------------------------- */

const tune_family tune_families[RT_FAM_COUNT] = {
    {RT_FAM_ATTN_PREFILL, "attn_prefill", tune_gqa_work_prefill, "read", &gqa_runner, 1, "ref_attn (tuner/ref_attn.c)"},
    {RT_FAM_ATTN_DECODE, "attn_decode", tune_gqa_work_decode, "read", &gqa_runner, 1, "ref_attn (tuner/ref_attn.c)"},
    {RT_FAM_ATTN_NAIVE, "attn_naive", NULL, "read", NULL, 1, "ref_attn (tuner/ref_attn.c)"},
    {RT_FAM_ATTN_COMBINE, "attn_combine", NULL, "read", &combine_runner, 0, "ref_attn_combine (tuner/ref_attn.c)"},
    {RT_FAM_PARTS_DECODE, "attn_parts_decode", tune_parts_work_of, "read", &parts_runner, 0,
     "ref_parts (tuner/ref_parts.c)"},
    {RT_FAM_KDA_PREFILL, "kda_prefill", tune_kda_work, "copy", &kda_runner, 0, "ref_kda (tuner/ref_kda.c)"},
    {RT_FAM_KDA_DECODE, "kda_decode", tune_kda_work, "copy", &kda_runner, 0, "ref_kda (tuner/ref_kda.c)"},
    {RT_FAM_KDA_NAIVE, "kda_naive", NULL, "copy", NULL, 0, "ref_kda (tuner/ref_kda.c)"},
    {RT_FAM_CEIL_GEMM, "ceil_gemm", NULL, "read", NULL, 0, NULL},
};

const tune_family *tune_family_find(const char *name) { return tune_family_of(rt_family_find(name)); }

int tune_family_check(core_err *e)
{
    for (int i = 0; i < RT_FAM_COUNT; i++) {
        const tune_family *t = &tune_families[i];
        const rt_family *r = &rt_families[i];
        if ((int)t->id != i || (int)r->id != i || strcmp(t->name, r->name) || (r->tuned && !t->runner)) {
            return core_err_fail(e, KF_ERR_ARG, "family table: the tuner's entry %d (%s) does not match the runtime's"
                                 " (%s)", i, t->name, r->name);
        }
    }
    return 0;
}
