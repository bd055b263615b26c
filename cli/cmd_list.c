/* cli/cmd_list.c: `kforge list`: families, their parameter spaces and variant counts */
#include "cli/cli.h"
#include "gen/sweep.h"
#include "runtime/family.h"
#include "tuner/tune_family.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct count_ctx {
    int valid, total;
};

static int count_cb(const gen_kvset *params, int valid, const char *why, void *arg)
{
    struct count_ctx *c = arg;
    c->total++;
    c->valid += valid;
    return 0;
}

static void print_value(const gen_kv *v, FILE *f)
{
    char js[1024];
    if (v->is_str)
        fputs(gen_json_str(js, sizeof js, v->s), f);
    else
        fprintf(f, "%lld", v->i);
}

struct list_ctx {
    cli_opts *o;
    gen_host *h;
    gen_device dev;
    gen_kvset *shapes;
    int n_shapes;
    int first, rc;
};

static int list_family(const char *family, void *arg)
{
    struct list_ctx *c = arg;
    gen_tmpl *t = gen_tmpl_load(c->h, family);
    if (!t) {
        c->rc = cli_error("%s", gen_host_errmsg(c->h));
        return 0;
    }
    const gen_space *s = gen_tmpl_space(t);
    long long size = 1;
    for (int i = 0; i < s->n; i++)
        size *= s->p[i].n;
    char jf[256], jd[8192], jh[128];
    cli_family_sweeps sw;
    char example[1024], sweeps[2048];
    if (cli_sweeps_of(c->h, family, &sw, NULL) < 0) {
        c->rc = 1;
        return 0;
    }
    cli_sweep_list(&sw, sweeps, sizeof sweeps);
    int have_example = cli_example_shape(c->h, t, &c->dev, example, sizeof example) == 0;
    const gen_kvset *fields = gen_tmpl_shape_fields(t);
    /* what the family table says of it (NULL: a family of a template folder the table does not list) */
    const rt_family *rf = rt_family_find(family);
    const tune_family *tf = tune_family_of(rf);
    static const char *const api_name[] = {"none", "kf_attn", "kf_parts", "kf_kda"};
    if (c->o->csv) {   /* one row per family; lists inside a field joined with ';' */
        char keys[1024] = "", names[2048] = "", num[32];
        for (int i = 0, k = 0; i < fields->n && k < (int)sizeof keys - 64; i++)
            k += snprintf(keys + k, sizeof keys - k, "%s%s", i ? ";" : "", fields->kv[i].name);
        for (int i = 0, k = 0; i < sw.n && k < (int)sizeof names - 80; i++)
            k += snprintf(names + k, sizeof names - k, "%s%s", i ? ";" : "", sw.name[i]);
        snprintf(num, sizeof num, "%lld", size);
        const char *row[] = {family, sw.n ? "false" : "true", names, keys, have_example ? example : NULL, num,
                             gen_tmpl_hash(t), gen_tmpl_doc(t)};
        cli_csv_row(stdout, 8, row);
        return 0;
    }
    if (c->o->json) {
        printf("%s\n {\"family\":%s,\"doc\":%s,\"hash\":%s,\"helper\":%s,\"sweeps\":[",
               c->first ? "" : ",", gen_json_str(jf, sizeof jf, family),
               gen_json_str(jd, sizeof jd, gen_tmpl_doc(t)), gen_json_str(jh, sizeof jh, gen_tmpl_hash(t)),
               sw.n ? "false" : "true");
        for (int i = 0; i < sw.n; i++)
            printf("%s{\"sweep\":%s,\"shapes\":%d}", i ? "," : "", gen_json_str(jf, sizeof jf, sw.name[i]),
                   sw.count[i]);
        printf("],\"shape_fields\":{");
        for (int i = 0; i < fields->n; i++)
            printf("%s%s:%s", i ? "," : "", gen_json_str(jf, sizeof jf, fields->kv[i].name),
                   gen_json_str(jh, sizeof jh, fields->kv[i].s));
        printf("},\"example_shape\":%s,\"space_size\":%lld,", gen_json_str(jd, sizeof jd, have_example ? example : NULL),
               size);
        if (rf)
            printf("\"registered\":true,\"api\":%s,\"tuned\":%s,\"runs\":%s,\"reference\":%s,",
                   rf->api ? gen_json_str(jh, sizeof jh, api_name[rf->api]) : "null", rf->tuned ? "true" : "false",
                   tf->attn_case || tf->runner ? "true" : "false", gen_json_str(jh, sizeof jh, tf->reference));
        else
            printf("\"registered\":false,\"api\":null,\"tuned\":false,\"runs\":false,\"reference\":null,");
        printf("\"params\":{");
    } else {
        printf("%s  %s\n  template hash %s\n", family, gen_tmpl_doc(t), gen_tmpl_hash(t));
        if (sw.n) {
            printf("  in sweeps: ");
            for (int i = 0; i < sw.n; i++)
                printf("%s%s (%d shape%s)", i ? ", " : "", sw.name[i], sw.count[i], sw.count[i] == 1 ? "" : "s");
            printf("\n");
        } else
            printf("  helper: in no sweep (tuned and compiled with the families it serves, or with --shape)\n");
        printf("  shape keys:");
        for (int i = 0; i < fields->n; i++)
            printf(" %s (%s)", fields->kv[i].name, fields->kv[i].s);
        printf("\n");
        if (have_example)
            printf("  example:    kforge gen %s --shape \"%s\"\n", family, example);
        if (rf) {
            printf("  registered: %s%s%s", rf->api ? "served by the C API's " : "no C API",
                   rf->api ? api_name[rf->api] : "", rf->api ? "_plan" : "");
            printf("; %s", rf->tuned ? "timed by kforge tune" : "not tuned");
            if (tf->attn_case || tf->runner)
                printf("; kforge run checks it against %s", tf->reference ? tf->reference : "its reference");
            printf("\n");
        } else
            printf("  registered: no (a template folder's family: gen and compile only)\n");
        printf("  params (%lld variants in the space):\n", size);
    }
    c->first = 0;
    for (int i = 0; i < s->n; i++) {
        const gen_param *p = &s->p[i];
        if (c->o->json)
            printf("%s%s:{\"runtime\":%s,\"values\":[", i ? "," : "", gen_json_str(jf, sizeof jf, p->name),
                   p->runtime ? "true" : "false");
        else
            printf("    %-10s ", p->name);
        for (int k = 0; k < p->n; k++) {
            if (k)
                fputs(c->o->json ? "," : " ", stdout);
            print_value(&p->values[k], stdout);
        }
        if (c->o->json)
            printf("]}");
        else
            printf("%s\n", p->runtime ? "   (launch-time: one binary serves all)" : "");
    }
    if (c->o->json)
        printf("},\"shapes\":[");
    int listed = 0;
    for (int i = 0; i < c->n_shapes; i++) {
        if (strcmp(gen_kv_str(&c->shapes[i], "family"), family))
            continue;
        gen_kvset fixed;
        char key[512];
        gen_shape_key(&c->shapes[i], key, sizeof key);
        struct count_ctx cc = {0, 0};
        if (gen_tmpl_fixed(t, &c->shapes[i], &fixed) || gen_tmpl_enumerate(t, &fixed, &c->dev, count_cb, &cc)) {
            c->rc = cli_error("%s", gen_host_errmsg(c->h));
            continue;
        }
        if (c->o->json)
            printf("%s{\"shape\":%s,\"valid\":%d}", listed ? "," : "", gen_json_str(jd, sizeof jd, key), cc.valid);
        else
            printf("%s    %4d valid on %s for %s\n", listed ? "" : "  sweep shapes:\n", cc.valid,
                   c->dev.arch, key);
        listed++;
    }
    if (c->o->json)
        printf("]}");
    else
        printf("\n");
    return 0;
}

int cmd_list(cli_opts *o)
{
    gen_host *h = cli_host(o);
    if (!h)
        return 1;
    struct list_ctx c = {o, h};
    c.first = 1;
    cli_arch(o, &c.dev, NULL);
    cli_opts so = *o;
    so.shape = NULL;
    c.n_shapes = cli_shapes(&so, h, NULL, &c.shapes);
    if (c.n_shapes < 0) {
        gen_host_free(h);
        return 1;
    }
    if (o->json && o->csv) {
        free(c.shapes);
        gen_host_free(h);
        return cli_usage_error("--csv and --json exclude each other");
    }
    if (o->json)
        printf("[");
    else if (o->csv)
        printf("family,helper,sweeps,shape_keys,example_shape,space_size,hash,doc\n");
    if (o->argc > 0)
        list_family(o->argv[0], &c);
    else
        gen_host_families(h, list_family, &c);
    if (o->json)
        printf("\n]\n");
    free(c.shapes);
    gen_host_free(h);
    return c.rc;
}
