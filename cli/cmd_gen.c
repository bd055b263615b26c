/* cli/cmd_gen.c: `kforge gen`: print the source of one variant exactly as NVRTC sees it */
#include "cli/cli.h"

#include <stdio.h>
#include <stdlib.h>

/* The usage error for FAMILY without --shape: an example shape of the family and where its keys are. */
int cli_shape_required(const cli_opts *o, gen_host *h)
{
    gen_tmpl *t = gen_tmpl_load(h, o->argv[0]);
    if (!t)
        return cli_error("%s", gen_host_errmsg(h));
    gen_device dev;
    char example[1024];
    cli_arch(o, &dev, NULL);
    if (cli_example_shape(h, t, &dev, example, sizeof example))
        snprintf(example, sizeof example, "...");
    return cli_usage_error("--shape is required, e.g. --shape \"%s\" (its shape keys: kforge list %s)", example,
                           o->argv[0]);
}

/* Fixed values and params of FAMILY --shape S [--params P] (params over the default). */
int cli_variant(const cli_opts *o, gen_host *h, gen_tmpl **t, gen_kvset *fixed, gen_kvset *params,
                gen_device *dev)
{
    if (o->argc < 1)
        return cli_usage_error("which family? (see 'kforge list')");
    if (!o->shape)
        return cli_shape_required(o, h);
    *t = gen_tmpl_load(h, o->argv[0]);
    if (!*t)
        return cli_error("%s", gen_host_errmsg(h));
    gen_kvset shape;
    gen_kv_clear(&shape);
    char err[256];
    if (gen_kv_parse(&shape, o->shape, err, sizeof err))
        return cli_usage_error("bad --shape: %s", err);
    cli_arch(o, dev, NULL);
    if (gen_tmpl_fixed(*t, &shape, fixed) || gen_tmpl_default(*t, &shape, dev, params))
        return cli_error("%s", gen_host_errmsg(h));
    if (o->params) {
        gen_kvset over;
        gen_kv_clear(&over);
        if (gen_kv_parse(&over, o->params, err, sizeof err))
            return cli_usage_error("bad --params: %s", err);
        gen_kv_merge(params, &over);
    }
    if (gen_tmpl_check_params(*t, params))
        return cli_error("%s", gen_host_errmsg(h));
    char why[256];
    int ok = gen_tmpl_valid(*t, fixed, params, dev, why, sizeof why);
    if (ok < 0)
        return cli_error("%s", gen_host_errmsg(h));
    if (!ok) {
        char p[512];
        gen_kv_format(params, p, sizeof p);
        return cli_error("variant '%s' with %s is not valid for %s: %s", o->argv[0], p, dev->arch, why);
    }
    return 0;
}

int cmd_gen(cli_opts *o)
{
    gen_host *h = cli_host(o);
    if (!h)
        return 1;
    gen_tmpl *t;
    gen_kvset fixed, params;
    gen_device dev;
    int rc = cli_variant(o, h, &t, &fixed, &params, &dev);
    char *src = NULL;
    if (!rc && gen_tmpl_render(t, &fixed, &params, &src))
        rc = cli_error("%s", gen_host_errmsg(h));
    if (!rc)
        fputs(src, stdout);
    free(src);
    gen_host_free(h);
    return rc;
}
