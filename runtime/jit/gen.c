/* runtime/jit/gen.c: the runtime's generator in libkforge: template defaults, cache keys and NVRTC compiles */
#include "runtime/jit.h"
#include "runtime/device.h"
#include "gen/build.h"
#include "gen/template.h"
#include "gen/variant.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Plans ask the same questions again and again (the default of a shape, the keys of a
 * variant); each answer costs Lua calls and a render, so the last answers are kept. */
#define RT_JIT_MEMO 64
typedef struct rt_memo {
    char in[1200];             /* the question: formatted kvset and the device facts used */
    gen_kvset vp;              /* rt_jit_default's answer */
    char variant[512], key[600];  /* rt_jit_keys' answer */
} rt_memo;

typedef struct rt_memos {
    rt_memo v[RT_JIT_MEMO];
    int n, next;               /* filled entries; the one replaced next (round robin) */
} rt_memos;

struct rt_jit {
    gen_host *host;
    rt_memos dflt, keys;
    long renders;
};

static const rt_memo *memo_find(const rt_memos *m, const char *in)
{
    for (int i = 0; i < m->n; i++)
        if (!strcmp(m->v[i].in, in))
            return &m->v[i];
    return NULL;
}

static rt_memo *memo_slot(rt_memos *m, const char *in)
{
    rt_memo *e = &m->v[m->next];
    m->next = (m->next + 1) % RT_JIT_MEMO;
    if (m->n < RT_JIT_MEMO)
        m->n++;
    memset(e, 0, sizeof *e);
    snprintf(e->in, sizeof e->in, "%s", in);
    return e;
}

/* The question's text; -1 when it does not fit (then it is not memoised). */
static int memo_text(const gen_kvset *set, const rt_devinfo *dev, char *buf, size_t n)
{
    int w = gen_kv_format(set, buf, n);
    if (w < 0)
        return -1;
    int x = snprintf(buf + w, n - (size_t)w, "|%s|%d|%d|%d|%lld", dev->arch, dev->sms, dev->smem_optin,
                     dev->regs_sm, dev->l2);
    return x < 0 || (size_t)x >= n - (size_t)w ? -1 : 0;
}

long rt_jit_renders(const rt_jit *j) { return j ? j->renders : 0; }

rt_jit *rt_jit_new(const char *template_dir, core_err *e)
{
    rt_jit *j = calloc(1, sizeof *j);
    if (j)
        j->host = gen_host_new(template_dir);
    if (!j || !j->host) {
        free(j);
        core_err_set(e, KF_ERR_NOMEM, "out of memory");
        return NULL;
    }
    return j;
}

void rt_jit_free(rt_jit *j)
{
    if (!j)
        return;
    gen_host_free(j->host);
    free(j);
}

/* Splits vp into template, fixed values and params. NULL with KF_ERR_UNSUPPORTED in *e. */
static gen_tmpl *split(rt_jit *j, const gen_kvset *vp, gen_kvset *fixed, gen_kvset *params, core_err *e)
{
    const char *family = gen_kv_str(vp, "family");
    gen_tmpl *t = family ? gen_tmpl_load(j->host, family) : NULL;
    if (!t) {
        core_err_set(e, KF_ERR_UNSUPPORTED, "%s", family ? gen_host_errmsg(j->host) : "variant without a family");
        return NULL;
    }
    gen_kv_clear(fixed);
    gen_kv_clear(params);
    const gen_space *s = gen_tmpl_space(t);
    for (int i = 0; i < vp->n; i++) {
        const gen_kv *e = &vp->kv[i];
        if (!strcmp(e->name, "family"))
            continue;
        int is_param = 0;
        for (int k = 0; k < s->n; k++)
            is_param |= !strcmp(s->p[k].name, e->name);
        gen_kvset *dst = is_param ? params : fixed;
        if (e->is_str)
            gen_kv_set_str(dst, e->name, e->s);
        else
            gen_kv_set_int(dst, e->name, e->i);
    }
    return t;
}

int rt_jit_default(rt_jit *j, const gen_kvset *shape, const rt_devinfo *dev, gen_kvset *vp, core_err *e)
{
    char q[1200];
    int memo = memo_text(shape, dev, q, sizeof q) == 0;
    const rt_memo *hit = memo ? memo_find(&j->dflt, q) : NULL;
    if (hit) {
        *vp = hit->vp;
        return 0;
    }
    const char *family = gen_kv_str(shape, "family");
    gen_tmpl *t = family ? gen_tmpl_load(j->host, family) : NULL;
    gen_device g;
    rt_gen_device(dev, &g);
    gen_kvset fixed, params;
    char why[256];
    int rc = t ? gen_variant_resolve(t, shape, &g, NULL, GEN_RESOLVE_VALID, &fixed, &params, why, sizeof why) : -1;
    if (rc < 0)   /* the template's error (its file:line) */
        return core_err_fail(e, KF_ERR_UNSUPPORTED, "%s", gen_host_errmsg(j->host));
    if (rc)
        return core_err_fail(e, KF_ERR_UNSUPPORTED, "default variant of '%s' is not valid on %s: %s", family,
                             dev->arch, why);
    *vp = fixed;
    gen_kv_merge(vp, &params);
    gen_kv_set_str(vp, "family", family);
    if (memo)
        memo_slot(&j->dflt, q)->vp = *vp;
    return 0;
}

/* Renders and keys vp's job: 0, or -1 with KF_ERR_UNSUPPORTED (the template refuses the variant, or
 * rendering it failed) in *e. */
static int prepare(rt_jit *j, const gen_kvset *vp, const rt_devinfo *dev, gen_job *job, gen_target *tg, core_err *e)
{
    gen_device g;
    rt_gen_device(dev, &g);
    memset(job, 0, sizeof *job);
    job->tmpl = split(j, vp, &job->fixed, &job->params, e);
    if (!job->tmpl)
        return -1;
    /* a variant the template refuses (a param it lacks or no longer lists, a tile that does not fit
     * this device) is never keyed or compiled */
    char why[512] = "";
    int rc = gen_variant_check(job->tmpl, &job->fixed, &job->params, &g, GEN_RESOLVE_SPACE | GEN_RESOLVE_VALID, why,
                               sizeof why);
    if (rc) {
        char pk[400];
        gen_kv_keyform(&job->params, pk, sizeof pk);
        return core_err_fail(e, KF_ERR_UNSUPPORTED, "%s variant %s is not valid for %s: %s", gen_kv_str(vp, "family"),
                             pk, dev->arch, rc < 0 ? gen_host_errmsg(j->host) : why);
    }
    if (gen_target_init(tg, dev->arch, 0, &g))
        return core_err_fail(e, KF_ERR_UNSUPPORTED, "kforge cannot compile for %s", dev->arch);
    j->renders++;
    if (gen_build_prepare(job, tg)) {
        core_err_set(e, KF_ERR_UNSUPPORTED, "%s", gen_host_errmsg(j->host));   /* as the template's refusal */
        gen_job_free(job);
        return -1;
    }
    return 0;
}

int rt_jit_keys(rt_jit *j, const gen_kvset *vp, const rt_devinfo *dev, char *variant, size_t vn,
                char *cache_key, size_t cn, core_err *e)
{
    char q[1200];
    int memo = memo_text(vp, dev, q, sizeof q) == 0;
    const rt_memo *hit = memo ? memo_find(&j->keys, q) : NULL;
    if (hit) {
        snprintf(variant, vn, "%s", hit->variant);
        snprintf(cache_key, cn, "%s", hit->key);
        return 0;
    }
    gen_job job;
    gen_target tg;
    if (prepare(j, vp, dev, &job, &tg, e))
        return -1;
    snprintf(variant, vn, "%s", job.variant_key);
    snprintf(cache_key, cn, "%s", job.cache_key);
    if (memo) {
        rt_memo *e = memo_slot(&j->keys, q);
        snprintf(e->variant, sizeof e->variant, "%s", job.variant_key);
        snprintf(e->key, sizeof e->key, "%s", job.cache_key);
    }
    gen_job_free(&job);
    return 0;
}

kf_status rt_jit_compile(rt_jit *j, const gen_kvset *vp, const rt_devinfo *dev, db_store *db,
                         rt_binary *out, core_err *e)
{
    gen_job job;
    gen_target tg;
    memset(out, 0, sizeof *out);
    if (prepare(j, vp, dev, &job, &tg, e))
        return e->st;
    char dberr[512];
    int failed = gen_build_run(&job, 1, 1, db, &tg, NULL, NULL, dberr, sizeof dberr);
    if (failed != 0) {
        core_err_set(e, failed < 0 ? KF_ERR_DB : KF_ERR_NVRTC, "%s", failed < 0 ? dberr : job.err);
        gen_job_free(&job);
        return e->st;
    }
    out->image = job.bin.image;
    out->size = job.bin.size;
    job.bin.image = NULL;
    out->n_kernels = job.n_kernels;
    memcpy(out->kernels, job.kernels, sizeof(gen_kernel) * (size_t)job.n_kernels);
    gen_job_free(&job);
    return KF_OK;
}
