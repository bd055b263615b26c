/* cli/cmd_doctor.c: `kforge doctor`: NVRTC, driver and GPU, database, templates */
#include "cli/cli.h"
#include "gen/nvrtc.h"
#include "runtime/cuda.h"

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

struct tmpl_ctx {
    gen_host *h;
    int ok, bad;
    int json;
};

static int check_tmpl(const char *family, void *arg)
{
    struct tmpl_ctx *c = arg;
    gen_tmpl *t = gen_tmpl_load(c->h, family);
    if (t)
        c->ok++;
    else
        c->bad++;
    if (!c->json)
        printf("  %-16s %s\n", family, t ? gen_tmpl_hash(t) : gen_host_errmsg(c->h));
    return 0;
}

int cmd_doctor(cli_opts *o)
{
    if (o->measure)
        return cli_error("'kforge doctor --measure' is reserved for the tuner and not built yet");
    char nvrtc[16], err[512];
    gen_nvrtc_version(nvrtc, sizeof nvrtc);
    rt_devinfo info;
    int gpu = rt_device_info(0, &info, err, sizeof err) == 0;
    const char *path = o->db_path ? o->db_path : getenv("KFORGE_DB");
    if (!path || !*path)
        path = "kforge.db";
    int schema = -1;
    char dbmsg[512] = "";
    if (access(path, F_OK) == 0) {
        db_store *db = NULL;
        if (db_open(&db, path, DB_READONLY) == DB_OK)
            schema = db_user_version(db);
        else
            snprintf(dbmsg, sizeof dbmsg, "%s", db_errmsg(db));
        db_close(db);
    } else {
        snprintf(dbmsg, sizeof dbmsg, "not created yet");
    }
    gen_host *h = cli_host(o);
    if (!h)
        return 1;
    struct tmpl_ctx c = {h, 0, 0, o->json};
    if (o->json) {
        gen_host_families(h, check_tmpl, &c);
        printf("{\"nvrtc\":\"%s\",\"gpu\":", nvrtc);
        if (gpu)
            printf("{\"name\":\"%s\",\"uuid\":\"%s\",\"arch\":\"%s\",\"sms\":%d,\"driver\":\"%s\"}",
                   info.name, info.uuid, info.arch, info.sms, info.driver);
        else
            printf("null,\"gpu_error\":\"%s\"", err);
        printf(",\"db\":\"%s\",\"schema_version\":%d,\"db_status\":\"%s\",\"templates\":\"%s\","
               "\"templates_ok\":%d,\"templates_bad\":%d}\n",
               path, schema, dbmsg[0] ? dbmsg : "ok", gen_source_describe(gen_host_source(h)), c.ok, c.bad);
    } else {
        printf("nvrtc      %s\n", nvrtc);
        if (gpu)
            printf("gpu        %s (%s), %s, %d SMs, %d MHz, driver API %s, %.1f GiB\n", info.name,
                   info.uuid, info.arch, info.sms, info.clock_mhz, info.driver,
                   info.total_mem / 1073741824.0);
        else
            printf("gpu        none: %s\n", err);
        if (schema >= 0)
            printf("database   %s (schema version %d, this build %d)\n", path, schema, DB_SCHEMA_VERSION);
        else
            printf("database   %s: %s\n", path, dbmsg);
        printf("templates  %s\n", gen_source_describe(gen_host_source(h)));
        gen_host_families(h, check_tmpl, &c);
    }
    gen_host_free(h);
    return c.bad ? 1 : 0;
}
