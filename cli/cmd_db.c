/* cli/cmd_db.c: `kforge db info|ls|gc|merge`: look into, clean and merge databases */
#include "cli/cli.h"

#include <stdio.h>
#include <string.h>

static int db_info_cmd(cli_opts *o, db_store *db)
{
    db_info in;
    if (db_get_info(db, &in) != DB_OK)
        return cli_error("%s", db_errmsg(db));
    if (o->json) {
        char jp[4096], jm[64];
        printf("{\"path\":%s,\"schema_version\":%d,\"journal_mode\":%s,\"templates\":%lld,"
               "\"binaries\":%lld,\"binary_bytes\":%lld,\"devices\":%lld,\"runs\":%lld,"
               "\"measurements\":%lld,\"winners\":%lld}\n",
               gen_json_str(jp, sizeof jp, db_path(db)), in.schema_version,
               gen_json_str(jm, sizeof jm, in.journal_mode), in.templates, in.binaries,
               in.binary_bytes, in.devices, in.runs, in.measurements, in.winners);
        return 0;
    }
    printf("database       %s\nschema version %d\njournal mode   %s\ntemplates      %lld\n"
           "binaries       %lld (%.1f MiB)\ndevices        %lld\nruns           %lld\n"
           "measurements   %lld\nwinners        %lld\n",
           db_path(db), in.schema_version, in.journal_mode, in.templates, in.binaries,
           in.binary_bytes / 1048576.0, in.devices, in.runs, in.measurements, in.winners);
    return 0;
}

struct ls_ctx {
    cli_opts *o;
    int n;
};

static int ls_cb(const db_binary *b, void *arg)
{
    struct ls_ctx *c = arg;
    if (c->o->json) {
        char jc[1024], jv[1024], jf[256], ja[64], jn[64], jk[8192];
        printf("%s\n {\"cache_key\":%s,\"variant\":%s,\"family\":%s,\"arch\":%s,"
               "\"nvrtc\":%s,\"bytes\":%zu,\"regs\":%d,\"smem_static\":%d,\"spill_bytes\":%d,"
               "\"compile_ms\":%.1f,\"kernels\":%s}",
               c->n ? "," : "", gen_json_str(jc, sizeof jc, b->cache_key),
               gen_json_str(jv, sizeof jv, b->variant_key), gen_json_str(jf, sizeof jf, b->family),
               gen_json_str(ja, sizeof ja, b->arch), gen_json_str(jn, sizeof jn, b->nvrtc), b->image_size,
               b->regs, b->smem_static, b->spill_bytes, b->compile_ms, gen_json_str(jk, sizeof jk, b->kernels));
    } else if (c->o->csv) {
        char num[5][32];
        snprintf(num[0], sizeof num[0], "%zu", b->image_size);
        snprintf(num[1], sizeof num[1], "%d", b->regs);
        snprintf(num[2], sizeof num[2], "%d", b->smem_static);
        snprintf(num[3], sizeof num[3], "%d", b->spill_bytes);
        snprintf(num[4], sizeof num[4], "%.1f", b->compile_ms);
        const char *row[] = {b->cache_key, b->variant_key, b->family, b->arch, b->nvrtc, num[0], num[1], num[2],
                             num[3], num[4], b->kernels};
        cli_csv_row(stdout, 11, row);
    } else
        printf("%-70s %-7s %8zu B %4d regs %5d B spills %7.0f ms\n", b->variant_key, b->arch,
               b->image_size, b->regs, b->spill_bytes, b->compile_ms);
    c->n++;
    return 0;
}

static int db_ls_cmd(cli_opts *o, db_store *db)
{
    struct ls_ctx c = {o, 0};
    if (o->json)
        printf("[");
    else if (o->csv)
        printf("cache_key,variant,family,arch,nvrtc,bytes,regs,smem_static,spill_bytes,compile_ms,kernels\n");
    if (db_binary_each(db, o->argc > 1 ? o->argv[1] : NULL, ls_cb, &c) != DB_OK)
        return cli_error("%s", db_errmsg(db));
    if (o->json)
        printf("%s]\n", c.n ? "\n" : "");
    else if (!o->csv)
        printf("%d binar%s\n", c.n, c.n == 1 ? "y" : "ies");
    return 0;
}

struct hash_ctx {
    gen_host *h;
    const char *hashes[64];
    int n;
};

static int hash_cb(const char *family, void *arg)
{
    struct hash_ctx *c = arg;
    gen_tmpl *t = gen_tmpl_load(c->h, family);
    if (t && c->n < 64)
        c->hashes[c->n++] = gen_tmpl_hash(t);
    return 0;
}

static int db_gc_cmd(cli_opts *o, db_store *db)
{
    gen_host *h = cli_host(o);
    if (!h)
        return 1;
    struct hash_ctx c = {h};
    gen_host_families(h, hash_cb, &c);
    int removed = 0, rc = 0;
    if (db_gc(db, c.hashes, c.n, &removed) != DB_OK)
        rc = cli_error("%s", db_errmsg(db));
    else if (o->json) {
        char jp[4096];
        printf("{\"path\":%s,\"removed\":%d,\"current_templates\":%d}\n", gen_json_str(jp, sizeof jp, db_path(db)),
               removed, c.n);
    } else
        printf("removed %d binar%s of templates no longer current\n", removed, removed == 1 ? "y" : "ies");
    gen_host_free(h);
    return rc;
}

int cmd_db(cli_opts *o)
{
    if (o->argc < 1)
        return cli_usage_error("'kforge db' needs info, ls, gc or merge");
    const char *sub = o->argv[0];
    if (o->csv && strcmp(sub, "ls"))
        return cli_usage_error("'kforge db %s' does not take --csv (only 'kforge db ls' prints a table)", sub);
    if (o->output && strcmp(sub, "merge"))
        return cli_usage_error("'kforge db %s' does not take -o (only 'kforge db merge' writes a database)", sub);
    if (o->templates && strcmp(sub, "gc"))
        return cli_usage_error("'kforge db %s' does not take --templates (only 'kforge db gc' reads templates)", sub);
    if (o->json && o->csv)
        return cli_usage_error("--csv and --json exclude each other");
    if (!strcmp(sub, "merge"))
        return cmd_db_merge(o);
    if (strcmp(sub, "info") && strcmp(sub, "ls") && strcmp(sub, "gc"))
        return cli_usage_error("unknown 'kforge db' command '%s' (info, ls, gc, merge)", sub);
    db_store *db = cli_open_db(o, 0);
    if (!db)
        return 1;
    int rc = !strcmp(sub, "info") ? db_info_cmd(o, db) : !strcmp(sub, "ls") ? db_ls_cmd(o, db)
                                                                            : db_gc_cmd(o, db);
    db_close(db);
    return rc;
}
