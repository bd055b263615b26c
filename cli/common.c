/* cli/common.c: messages, database and template set-up, target arch and shape selection for the CLI */
#include "cli/cli.h"
#include "runtime/device.h"
#include "gen/sweep.h"
#include "runtime/cuda.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int cli_error(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("error: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    return 1;
}

int cli_usage_error(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("error: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    return EXIT_USAGE;
}

void cli_progress(const cli_opts *o, const char *fmt, ...)
{
    if (o->quiet)
        return;
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fflush(stderr);
}

db_store *cli_open_db(const cli_opts *o, int create)
{
    const char *path = o->db_path ? o->db_path : getenv("KFORGE_DB");
    if (!path || !*path)
        path = "kforge.db";
    db_store *s = NULL;
    if (db_open(&s, path, create ? DB_CREATE : 0) != DB_OK) {
        cli_error("%s", db_errmsg(s));
        db_close(s);
        return NULL;
    }
    return s;
}

gen_host *cli_host(const cli_opts *o)
{
    gen_host *h = gen_host_new(o->templates);
    if (!h)
        cli_error("cannot start the template host: out of memory");
    return h;
}

const char *cli_arch(const cli_opts *o, gen_device *dev, int *from_gpu)
{
    static char arch[16];
    if (from_gpu)
        *from_gpu = 0;
    if (o->arch) {
        snprintf(arch, sizeof arch, "%s", o->arch);
        if (gen_device_for_arch(dev, arch))
            gen_device_for_arch(dev, "sm_90a"), snprintf(dev->arch, sizeof dev->arch, "%s", arch);
        return arch;
    }
    rt_devinfo info;
    char err[256];
    if (getenv("KFORGE_NO_GPU") == NULL && rt_device_info(0, &info, err, sizeof err) == 0) {
        snprintf(arch, sizeof arch, "%s", info.arch);
        rt_gen_device(&info, dev);
        if (from_gpu)
            *from_gpu = 1;
        return arch;
    }
    snprintf(arch, sizeof arch, "sm_90a");
    gen_device_for_arch(dev, arch);
    return arch;
}

int cli_shapes(const cli_opts *o, gen_host *h, const char *family, gen_kvset **out)
{
    *out = NULL;
    if (o->shape) {
        if (!family)
            return cli_usage_error("--shape needs a FAMILY"), -1;
        gen_kvset *s = calloc(1, sizeof *s);
        char err[256];
        if (gen_kv_parse(s, o->shape, err, sizeof err)) {
            free(s);
            return cli_usage_error("bad --shape: %s", err), -1;
        }
        gen_kv_set_str(s, "family", family);
        *out = s;
        return 1;
    }
    gen_sweep sw;
    if (gen_sweep_load(h, o->sweep ? o->sweep : "default", &sw)) {
        cli_error("cannot load sweep '%s': %s", o->sweep ? o->sweep : "default", gen_host_errmsg(h));
        return -1;
    }
    gen_kvset *v = calloc((size_t)sw.n + 1, sizeof *v);
    int n = 0;
    for (int i = 0; i < sw.n; i++)
        if (!family || !strcmp(gen_kv_str(&sw.shapes[i], "family"), family))
            v[n++] = sw.shapes[i];
    gen_sweep_free(&sw);
    *out = v;
    return n;
}
