/* tests/gpu/gpu_job.c: what the GPU tests do with a built job: plant a mutant in its source, load it, name its values */
#include "tests/gpu/gpu_job.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gen/hash.h"

int gpu_job_mutate(gen_job *j, const char *arch, const char *marker, const char *const *from, const char *const *to,
                   int npairs, int max_lines)
{
    size_t n = strlen(j->src), lines = 1, grow = 0;
    for (const char *c = j->src; *c; c++)
        lines += *c == '\n';
    for (int k = 0; k < npairs; k++)
        if (from[k] && strlen(to[k]) > grow)
            grow = strlen(to[k]);
    char *out = malloc(n + lines * grow + 1), *w = out;
    if (!out) {
        fprintf(stderr, "gpu_job_mutate: out of memory\n");
        abort();
    }
    int planted = 0;
    for (const char *line = j->src; *line;) {
        const char *eol = strchr(line, '\n');
        size_t len = eol ? (size_t)(eol - line + 1) : strlen(line);
        char buf[4096];
        int done = 0;
        if (len < sizeof buf && (max_lines <= 0 || planted < max_lines)) {
            memcpy(buf, line, len);
            buf[len] = 0;
            for (int k = 0; k < npairs && !done && strstr(buf, marker); ++k) {
                char *at = from[k] ? strstr(buf, from[k]) : NULL;
                if (at) {
                    w += sprintf(w, "%.*s%s%s", (int)(at - buf), buf, to[k], at + strlen(from[k]));
                    planted++;
                    done = 1;
                }
            }
        }
        if (!done) {
            memcpy(w, line, len);
            w += len;
        }
        line += len;
    }
    *w = 0;
    if (!planted) {
        free(out);
        return 0;
    }
    free(j->src);
    j->src = out;
    char hex[33];
    gen_hash128_str(out, hex);
    hex[16] = 0;
    snprintf(j->cache_key, sizeof j->cache_key, "%.540s.%s.mutant-%s", j->binary_key, arch, hex);
    return planted;
}

int gpu_job_load(const gen_job *j, rt_module *m, core_err *e)
{
    rt_kernel_desc kd[GEN_MAX_KERNELS];
    for (int i = 0; i < j->n_kernels; ++i) {
        snprintf(kd[i].name, sizeof kd[i].name, "%s", j->kernels[i].name);
        kd[i].threads = j->kernels[i].threads;
        kd[i].smem = j->kernels[i].smem;
        kd[i].pdl = j->kernels[i].pdl;
    }
    return rt_module_load(m, j->bin.image, kd, j->n_kernels, e);
}

void gpu_job_vp(const gen_job *j, const char *family, gen_kvset *vp)
{
    *vp = j->fixed;
    gen_kv_merge(vp, &j->params);
    gen_kv_set_str(vp, "family", family);
}
