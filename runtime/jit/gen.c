/* runtime/jit/gen.c: the runtime's generator in libkforge: template defaults, cache keys and NVRTC compiles */
#include "runtime/jit.h"
#include "runtime/device.h"
#include "gen/build.h"
#include "gen/template.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct rt_jit {
    gen_host *host;
};

rt_jit *rt_jit_new(const char *template_dir, char *err, size_t errn)
{
    rt_jit *j = calloc(1, sizeof *j);
    if (j)
        j->host = gen_host_new(template_dir);
    if (!j || !j->host) {
        free(j);
        snprintf(err, errn, "out of memory");
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

/* Splits vp into template, fixed values and params. */
static gen_tmpl *split(rt_jit *j, const gen_kvset *vp, gen_kvset *fixed, gen_kvset *params,
                       char *err, size_t errn)
{
    const char *family = gen_kv_str(vp, "family");
    gen_tmpl *t = family ? gen_tmpl_load(j->host, family) : NULL;
    if (!t) {
        snprintf(err, errn, "%s", family ? gen_host_errmsg(j->host) : "variant without a family");
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

int rt_jit_default(rt_jit *j, const gen_kvset *shape, const rt_devinfo *dev, gen_kvset *vp,
                   char *err, size_t errn)
{
    const char *family = gen_kv_str(shape, "family");
    gen_tmpl *t = family ? gen_tmpl_load(j->host, family) : NULL;
    gen_device g;
    rt_gen_device(dev, &g);
    gen_kvset fixed, params;
    if (!t || gen_tmpl_fixed(t, shape, &fixed) || gen_tmpl_default(t, shape, &g, &params)) {
        snprintf(err, errn, "%s", gen_host_errmsg(j->host));
        return -1;
    }
    char why[256];
    int ok = gen_tmpl_valid(t, &fixed, &params, &g, why, sizeof why);
    if (ok <= 0) {
        snprintf(err, errn, "default variant of '%s' is not valid on %s: %s", family, dev->arch,
                 ok < 0 ? gen_host_errmsg(j->host) : why);
        return -1;
    }
    *vp = fixed;
    gen_kv_merge(vp, &params);
    gen_kv_set_str(vp, "family", family);
    return 0;
}

static int prepare(rt_jit *j, const gen_kvset *vp, const rt_devinfo *dev, gen_job *job,
                   gen_target *tg, char *err, size_t errn)
{
    gen_device g;
    rt_gen_device(dev, &g);
    memset(job, 0, sizeof *job);
    job->tmpl = split(j, vp, &job->fixed, &job->params, err, errn);
    if (!job->tmpl)
        return -1;
    if (gen_target_init(tg, dev->arch, 0, &g)) {
        snprintf(err, errn, "kforge cannot compile for %s", dev->arch);
        return -1;
    }
    if (gen_build_prepare(job, tg)) {
        snprintf(err, errn, "%s", gen_host_errmsg(j->host));
        gen_job_free(job);
        return -1;
    }
    return 0;
}

int rt_jit_keys(rt_jit *j, const gen_kvset *vp, const rt_devinfo *dev, char *variant, size_t vn,
                char *cache_key, size_t cn, char *err, size_t errn)
{
    gen_job job;
    gen_target tg;
    if (prepare(j, vp, dev, &job, &tg, err, errn))
        return -1;
    snprintf(variant, vn, "%s", job.variant_key);
    snprintf(cache_key, cn, "%s", job.cache_key);
    gen_job_free(&job);
    return 0;
}

int rt_jit_compile(rt_jit *j, const gen_kvset *vp, const rt_devinfo *dev, db_store *db,
                   rt_binary *out, char *err, size_t errn)
{
    gen_job job;
    gen_target tg;
    memset(out, 0, sizeof *out);
    if (prepare(j, vp, dev, &job, &tg, err, errn))
        return -1;
    char dberr[512];
    int failed = gen_build_run(&job, 1, 1, db, &tg, NULL, NULL, dberr, sizeof dberr);
    if (failed != 0) {
        snprintf(err, errn, "%s", failed < 0 ? dberr : job.err);
        gen_job_free(&job);
        return -1;
    }
    out->image = job.bin.image;
    out->size = job.bin.size;
    job.bin.image = NULL;
    out->n_kernels = job.n_kernels;
    memcpy(out->kernels, job.kernels, sizeof(gen_kernel) * (size_t)job.n_kernels);
    gen_job_free(&job);
    return 0;
}
