/* gen/build.c: variants to binaries through the cache: render, key, look up, compile in parallel, store */
#include "gen/build.h"
#include "gen/hash.h"
#include "gen/symbols.h"

#include "kf_rev.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int gen_target_init(gen_target *t, const char *arch, int ptx, const gen_device *dev)
{
    memset(t, 0, sizeof *t);
    if (!gen_arch_ok(arch))
        return -1;
    snprintf(t->arch, sizeof t->arch, "%s", arch);
    t->ptx = ptx;
    if (dev)
        t->dev = *dev;
    else if (gen_device_for_arch(&t->dev, arch))
        gen_device_for_arch(&t->dev, "sm_90a"), snprintf(t->dev.arch, sizeof t->dev.arch, "%s", arch);
    gen_nvrtc_version(t->nvrtc, sizeof t->nvrtc);
    gen_nvrtc_options(arch, ptx, t->options, sizeof t->options);
    snprintf(t->rev, sizeof t->rev, "%s", KF_GIT_REV);
    return 0;
}

int gen_build_render(gen_tmpl *t, const gen_kvset *fixed, const gen_kvset *params, const gen_target *tg, char **src,
                     char **key_src)
{
    char *r;
    *src = NULL;
    if (key_src)
        *key_src = NULL;
    if (gen_tmpl_render(t, fixed, params, &r))
        return -1;
    /* after the render's banner (its first three lines) */
    const char *body = r;
    for (int i = 0; i < 3 && body; i++)
        body = strchr(body, '\n') ? strchr(body, '\n') + 1 : NULL;
    if (!body)
        body = r + strlen(r);
    char target[512], rev[96];
    snprintf(target, sizeof target, "// target: %s%s, NVRTC %s, options: %s\n", tg->arch, tg->ptx ? " (PTX)" : "",
             tg->nvrtc, tg->options);
    snprintf(rev, sizeof rev, "// kforge revision: %s\n", tg->rev[0] ? tg->rev : "unknown");
    size_t head = (size_t)(body - r), tl = strlen(target), rl = strlen(rev), bl = strlen(body);
    char *s = malloc(head + tl + rl + bl + 1), *k = key_src ? malloc(head + tl + bl + 1) : NULL;
    if (!s || (key_src && !k)) {
        free(s), free(k), free(r);
        return gen_host_fail(gen_tmpl_host(t), "out of memory for the source of '%s'", gen_tmpl_family(t));
    }
    memcpy(s, r, head), memcpy(s + head, target, tl), memcpy(s + head + tl, rev, rl), memcpy(s + head + tl + rl, body, bl + 1);
    if (k)
        memcpy(k, r, head), memcpy(k + head, target, tl), memcpy(k + head + tl, body, bl + 1);
    free(r);
    *src = s;
    if (key_src)
        *key_src = k;
    return 0;
}

void gen_cache_key(const char *binary_key, const char *template_hash, const char *source,
                   const gen_target *tg, char *buf, size_t n)
{
    char text[1024], hex[33], src_hex[33];
    gen_hash128_str(source, src_hex);
    snprintf(text, sizeof text, "%s|%s|%s|%s|%s|%s", binary_key, template_hash, src_hex, tg->nvrtc,
             tg->arch, tg->options);
    gen_hash128_str(text, hex);
    hex[16] = 0;
    snprintf(buf, n, "%s.%s%s.%s", binary_key, tg->arch, tg->ptx ? "-ptx" : "", hex);
}

/* Every kernel the binary holds: kernels() of the job's params merged with kernels() of
 * each value of each runtime param (one binary serves them all, e.g. a split count > 1
 * adds the combine kernel). Launch code decides which of them a run launches. */
static int all_kernels(gen_job *j, const gen_device *dev)
{
    const gen_space *s = gen_tmpl_space(j->tmpl);
    j->n_kernels = 0;
    for (int r = -1; r < s->n; r++) {
        if (r >= 0 && !s->p[r].runtime)
            continue;
        for (int v = 0; v < (r < 0 ? 1 : s->p[r].n); v++) {
            gen_kvset p = j->params;
            if (r >= 0) {
                const gen_kv *val = &s->p[r].values[v];
                if (val->is_str)
                    gen_kv_set_str(&p, s->p[r].name, val->s);
                else
                    gen_kv_set_int(&p, s->p[r].name, val->i);
            }
            gen_kernel k[GEN_MAX_KERNELS];
            int n = 0;
            if (gen_tmpl_kernels(j->tmpl, &j->fixed, &p, dev, k, GEN_MAX_KERNELS, &n))
                return -1;
            for (int i = 0; i < n; i++) {
                int seen = 0;
                for (int m = 0; m < j->n_kernels; m++)
                    seen |= strcmp(j->kernels[m].name, k[i].name) == 0;
                if (!seen && j->n_kernels < GEN_MAX_KERNELS)
                    j->kernels[j->n_kernels++] = k[i];
            }
        }
    }
    return 0;
}

int gen_build_prepare(gen_job *j, const gen_target *tg)
{
    gen_tmpl *t = j->tmpl;
    /* a point its template calls invalid is never rendered: merged params (a default with some knobs
     * overridden) can name one, e.g. fused 1 kept beside a default's seg 4 */
    char why[256];
    int ok = gen_tmpl_valid(t, &j->fixed, &j->params, &tg->dev, why, sizeof why);
    if (ok < 0)
        return -1;
    if (!ok) {
        char key[512];
        if (gen_variant_key(t, &j->fixed, &j->params, 0, key, sizeof key))
            snprintf(key, sizeof key, "%s", gen_tmpl_family(t));
        return gen_host_fail(gen_tmpl_host(t), "%s: not a valid variant: %s", key, why);
    }
    if (gen_variant_key(t, &j->fixed, &j->params, 0, j->variant_key, sizeof j->variant_key) ||
        gen_variant_key(t, &j->fixed, &j->params, 1, j->binary_key, sizeof j->binary_key))
        return -1;
    char *key_src;
    if (gen_build_render(t, &j->fixed, &j->params, tg, &j->src, &key_src))
        return -1;
    if (all_kernels(j, &tg->dev)) {
        free(key_src);
        return -1;
    }
    if (j->n_kernels == 0) {
        free(key_src);
        return gen_host_fail(gen_tmpl_host(t), "templates/%s.lua: kernels() names no kernel for %s",
                             gen_tmpl_family(t), j->variant_key);
    }
    /* the rendered bytes themselves enter the key: one source, one key, whatever the template's history
     * (all but the banner's kforge revision: see gen_build_render) */
    gen_cache_key(j->binary_key, gen_tmpl_hash(t), key_src, tg, j->cache_key, sizeof j->cache_key);
    free(key_src);
    return 0;
}

void gen_job_free(gen_job *j)
{
    free(j->src);
    j->src = NULL;
    gen_binary_out_free(&j->bin);
}

/* Every kernel the job names must be an entry of its binary; otherwise the binary is
 * dropped and the job fails with the missing name. */
static int check_kernels(gen_job *j, const char *what)
{
    for (int i = 0; i < j->n_kernels; i++) {
        int has = gen_binary_has_kernel(j->bin.image, j->bin.size, j->bin.is_ptx, j->kernels[i].name);
        if (has == 1)
            continue;
        snprintf(j->err, sizeof j->err, "%s: %s: the %s %s kernel '%s' that kernels() of templates/%s.lua names",
                 what, j->binary_key, j->bin.is_ptx ? "PTX" : "cubin", has < 0 ? "cannot be read for" : "lacks",
                 j->kernels[i].name, gen_tmpl_family(j->tmpl));
        gen_binary_out_free(&j->bin);
        return -1;
    }
    return 0;
}

/* ---- the pool ------------------------------------------------------------------ */

struct pool {
    gen_job *jobs;
    int *todo;           /* indices of jobs to compile */
    int n_todo, next;
    int *done_q;         /* finished indices, in order of completion */
    int n_done;
    const gen_target *tg;
    pthread_mutex_t mu;
    pthread_cond_t cv;
};

static void *worker(void *arg)
{
    struct pool *p = arg;
    for (;;) {
        pthread_mutex_lock(&p->mu);
        int k = p->next < p->n_todo ? p->todo[p->next++] : -1;
        pthread_mutex_unlock(&p->mu);
        if (k < 0)
            return NULL;
        gen_job *j = &p->jobs[k];
        const char *names[32], *texts[32];
        int nh = gen_tmpl_headers(j->tmpl, names, texts, 32);
        if (gen_nvrtc_compile_headers(j->src, j->binary_key, p->tg->arch, p->tg->ptx, nh, names, texts,
                                      &j->bin, j->err, sizeof j->err) ||
            check_kernels(j, "nvrtc"))
            j->failed = 1;
        pthread_mutex_lock(&p->mu);
        p->done_q[p->n_done++] = k;
        pthread_cond_signal(&p->cv);
        pthread_mutex_unlock(&p->mu);
    }
}

static int store(db_store *db, const gen_job *j, const gen_target *tg, char *dberr, size_t n)
{
    char params[1024], kernels[512];
    gen_kvset all = j->fixed;
    gen_kv_merge(&all, &j->params);
    gen_kv_format(&all, params, sizeof params);
    gen_kernels_format(j->kernels, j->n_kernels, kernels, sizeof kernels);
    db_binary b = {0};
    b.cache_key = (char *)j->cache_key;
    b.variant_key = (char *)j->binary_key;
    b.family = (char *)gen_tmpl_family(j->tmpl);
    b.template_hash = (char *)gen_tmpl_hash(j->tmpl);
    b.arch = (char *)tg->arch;
    b.nvrtc = (char *)tg->nvrtc;
    b.options = (char *)tg->options;
    b.params = params;
    b.kernels = kernels;
    b.image = j->bin.image;
    b.image_size = j->bin.size;
    b.is_ptx = j->bin.is_ptx;
    b.compile_ms = j->bin.ms;
    b.regs = j->bin.regs;
    b.smem_static = j->bin.smem_static;
    b.spill_bytes = j->bin.spill_bytes;
    int inserted = 0;
    if (db_template_put(db, gen_tmpl_family(j->tmpl), gen_tmpl_hash(j->tmpl), gen_tmpl_text(j->tmpl)) ||
        db_binary_put(db, &b, &inserted)) {
        snprintf(dberr, n, "%s", db_errmsg(db));
        return -1;
    }
    return 0;
}

static int lookup(db_store *db, gen_job *j, char *dberr, size_t n)
{
    db_binary b = {0};
    db_rc rc = db_binary_get(db, j->cache_key, &b);
    if (rc == DB_NOTFOUND)
        return 0;
    if (rc != DB_OK) {
        snprintf(dberr, n, "%s", db_errmsg(db));
        return -1;
    }
    j->cache_hit = 1;
    j->bin.image = b.image;
    j->bin.size = b.image_size;
    j->bin.is_ptx = b.is_ptx;
    j->bin.ms = b.compile_ms;
    j->bin.regs = b.regs;
    j->bin.smem_static = b.smem_static;
    j->bin.spill_bytes = b.spill_bytes;
    b.image = NULL;
    db_binary_free(&b);
    return 1;
}

int gen_build_run(gen_job *jobs, int n, int threads, db_store *db, const gen_target *tg,
                  gen_progress_fn progress, void *arg, char *dberr, size_t dberrn)
{
    struct pool p = {0};
    p.jobs = jobs;
    p.tg = tg;
    p.todo = calloc((size_t)n + 1, sizeof(int));
    p.done_q = calloc((size_t)n + 1, sizeof(int));
    pthread_mutex_init(&p.mu, NULL);
    pthread_cond_init(&p.cv, NULL);
    int done = 0, failed = 0, rc = 0;
    for (int i = 0; i < n; i++) {
        int hit = db ? lookup(db, &jobs[i], dberr, dberrn) : 0;
        if (hit < 0) {
            rc = -1;
            goto out;
        }
        if (hit && check_kernels(&jobs[i], "cached binary")) {
            jobs[i].cache_hit = 0;
            jobs[i].failed = 1;
            failed++;
            if (progress)
                progress(&jobs[i], ++done, n, arg);
        } else if (hit) {
            if (progress)
                progress(&jobs[i], ++done, n, arg);
        } else {
            p.todo[p.n_todo++] = i;
        }
    }
    if (threads < 1)
        threads = 1;
    if (threads > p.n_todo)
        threads = p.n_todo;
    pthread_t th[256];
    if (threads > 256)
        threads = 256;
    for (int i = 0; i < threads; i++)
        pthread_create(&th[i], NULL, worker, &p);
    /* The main thread stores each binary as soon as it is built: nothing is lost on a stop. */
    for (int taken = 0; taken < p.n_todo; taken++) {
        pthread_mutex_lock(&p.mu);
        while (p.n_done <= taken)
            pthread_cond_wait(&p.cv, &p.mu);
        int k = p.done_q[taken];
        pthread_mutex_unlock(&p.mu);
        gen_job *j = &jobs[k];
        if (j->failed)
            failed++;
        else if (db && rc == 0 && store(db, j, tg, dberr, dberrn))
            rc = -1;
        if (progress)
            progress(j, ++done, n, arg);
    }
    for (int i = 0; i < threads; i++)
        pthread_join(th[i], NULL);
out:
    pthread_mutex_destroy(&p.mu);
    pthread_cond_destroy(&p.cv);
    free(p.todo);
    free(p.done_q);
    return rc < 0 ? -1 : failed;
}
