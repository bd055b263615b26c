/* cli/cmd_gen.c: `kforge gen`: print the source of one variant exactly as NVRTC sees it */
#include "cli/cli.h"
#include "gen/build.h"
#include "gen/variant.h"
#include "runtime/shape.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
    core_err bad = CORE_ERR_INIT;  /* the checks of the C API (runtime/shape.h) */
    if (rt_shape_check(o->argv[0], &shape, gen_tmpl_shape_fields(*t), RT_NAMES_SHAPE, &bad))
        return cli_usage_error("bad --shape for '%s': %s", o->argv[0], bad.msg);
    cli_arch(o, dev, NULL);
    gen_kvset over;
    gen_kv_clear(&over);
    if (o->params && gen_kv_parse(&over, o->params, err, sizeof err))
        return cli_usage_error("bad --params: %s", err);
    char why[256];
    int rc = gen_variant_resolve(*t, &shape, dev, o->params ? &over : NULL, GEN_RESOLVE_SPACE | GEN_RESOLVE_VALID,
                                 fixed, params, why, sizeof why);
    if (rc < 0)
        return cli_error("%s", gen_host_errmsg(h));
    if (rc) {
        char p[512];
        gen_kv_format(params, p, sizeof p);
        return cli_error("variant '%s' with %s is not valid for %s: %s", o->argv[0], p, dev->arch, why);
    }
    return 0;
}

/* gen --json: the banner's facts (family, template and its hash, variant and binary keys, fixed values
 * and params) and the source, exactly as NVRTC sees it, as one string. */
static int print_json(gen_tmpl *t, const gen_kvset *fixed, const gen_kvset *params, const char *src)
{
    char vkey[1024], bkey[1024], f[1024], p[1024];
    if (gen_variant_key(t, fixed, params, 0, vkey, sizeof vkey) ||
        gen_variant_key(t, fixed, params, 1, bkey, sizeof bkey) || gen_kv_format(fixed, f, sizeof f) < 0 ||
        gen_kv_format(params, p, sizeof p) < 0)
        return cli_error("variant key of '%s' does not fit", gen_tmpl_family(t));
    size_t n = 6 * strlen(src) + 3;   /* every byte escaped as \u00XX at worst, the quotes, the NUL */
    char *js = malloc(n), path[300], jf[256], jt[700], jh[64], jv[2048], jb[2048], jx[2048], jp[2048];
    if (!js)
        return cli_error("out of memory for the source of '%s'", gen_tmpl_family(t));
    snprintf(path, sizeof path, "templates/%s.lua", gen_tmpl_family(t));
    printf("{\"family\":%s,\"template\":%s,\"template_hash\":%s,\"variant\":%s,\"binary_key\":%s,"
           "\"fixed\":%s,\"params\":%s,\"source\":%s}\n",
           gen_json_str(jf, sizeof jf, gen_tmpl_family(t)), gen_json_str(jt, sizeof jt, path),
           gen_json_str(jh, sizeof jh, gen_tmpl_hash(t)), gen_json_str(jv, sizeof jv, vkey),
           gen_json_str(jb, sizeof jb, bkey), gen_json_str(jx, sizeof jx, f), gen_json_str(jp, sizeof jp, p),
           gen_json_str(js, n, src));
    free(js);
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
    gen_target tg;   /* the banner names the target and the kforge revision, as NVRTC sees them */
    if (!rc && gen_target_init(&tg, dev.arch, 0, &dev))
        rc = cli_usage_error("unknown --arch '%s' (sm_90a, sm_90, sm_80, ...)", dev.arch);
    if (!rc && gen_build_render(t, &fixed, &params, &tg, &src, NULL))
        rc = cli_error("%s", gen_host_errmsg(h));
    if (!rc && o->json)
        rc = print_json(t, &fixed, &params, src);
    else if (!rc)
        fputs(src, stdout);
    free(src);
    gen_host_free(h);
    return rc;
}
