/* cli/cmd_doctor.c: `kforge doctor`: NVRTC, driver and GPU, database, templates; --measure: the GPU's ceilings */
#include "cli/cli.h"
#include "runtime/device.h"
#include "gen/build.h"
#include "gen/nvrtc.h"
#include "runtime/cuda.h"
#include "tuner/ceil_read.h"
#include "tuner/tune_ceiling.h"
#include "tuner/tune_enum.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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
        return cmd_doctor_measure(o);
    core_err err = CORE_ERR_INIT;
    char nvrtc[16];
    gen_nvrtc_version(nvrtc, sizeof nvrtc);
    rt_devinfo info;
    int gpu = rt_device_info(0, &info, &err) == 0;
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
        char j1[4096], j2[1024], j3[1024], j4[1024];
        printf("{\"nvrtc\":%s,\"gpu\":", gen_json_str(j1, sizeof j1, nvrtc));
        if (gpu)
            printf("{\"name\":%s,\"uuid\":%s,\"arch\":%s,\"sms\":%d,\"driver\":%s}",
                   gen_json_str(j1, sizeof j1, info.name), gen_json_str(j2, sizeof j2, info.uuid),
                   gen_json_str(j3, sizeof j3, info.arch), info.sms, gen_json_str(j4, sizeof j4, info.driver));
        else
            printf("null,\"gpu_error\":%s", gen_json_str(j1, sizeof j1, err.msg));
        printf(",\"db\":%s,\"schema_version\":%d,\"db_status\":%s,\"templates\":%s,"
               "\"templates_ok\":%d,\"templates_bad\":%d}\n",
               gen_json_str(j1, sizeof j1, path), schema, gen_json_str(j2, sizeof j2, dbmsg[0] ? dbmsg : "ok"),
               gen_json_str(j3, sizeof j3, gen_source_describe(gen_host_source(h))), c.ok, c.bad);
    } else {
        printf("nvrtc      %s\n", nvrtc);
        if (gpu)
            printf("gpu        %s (%s), %s, %d SMs, %d MHz, driver API %s, %.1f GiB\n", info.name,
                   info.uuid, info.arch, info.sms, info.clock_mhz, info.driver,
                   info.total_mem / 1073741824.0);
        else
            printf("gpu        none: %s\n", err.msg);
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

/* ---- kforge doctor --measure --------------------------------------------------------- */

/* Builds every ceil_gemm variant for size^3 (through the database's binary cache). */
static int gemm_jobs(cli_opts *o, gen_host *h, const gen_target *tg, db_store *db, gen_job **out, int *n)
{
    *out = NULL;
    *n = 0;
    gen_tmpl *t = gen_tmpl_load(h, "ceil_gemm");
    gen_kvset shape;
    gen_kv_clear(&shape);
    gen_kv_set_int(&shape, "m", TUNE_GEMM_SIZE);
    gen_kv_set_int(&shape, "n", TUNE_GEMM_SIZE);
    gen_kv_set_int(&shape, "k", TUNE_GEMM_SIZE);
    tune_space sp;
    if (!t || tune_enumerate(t, &shape, &tg->dev, &sp))
        return cli_error("%s", gen_host_errmsg(h));
    gen_job *jobs = calloc((size_t)sp.n + 1, sizeof *jobs);
    int rc = 0;
    for (int i = 0; i < sp.n && !rc; i++) {
        jobs[i].tmpl = t;
        jobs[i].fixed = sp.fixed;
        jobs[i].params = sp.v[i].params;
        if (gen_build_prepare(&jobs[i], tg))
            rc = cli_error("%s", gen_host_errmsg(h));
        else
            (*n)++;
    }
    tune_space_free(&sp);
    char dberr[512];
    int threads = o->jobs ? o->jobs : (int)sysconf(_SC_NPROCESSORS_ONLN);
    if (!rc && gen_build_run(jobs, *n, threads, db, tg, NULL, NULL, dberr, sizeof dberr) < 0)
        rc = cli_error("%s", dberr);
    *out = jobs;
    return rc;
}

int cmd_doctor_measure(cli_opts *o)
{
    rt_devinfo info;
    core_err err = CORE_ERR_INIT;
    if (rt_device_info(0, &info, &err))
        return cli_error("%s", err.msg);
    gen_device dev;
    rt_gen_device(&info, &dev);
    gen_target tg;
    if (gen_target_init(&tg, o->arch ? o->arch : info.arch, 0, &dev))
        return cli_usage_error("unknown --arch '%s'", o->arch ? o->arch : info.arch);
    db_store *db = cli_open_db(o, 1);
    gen_host *h = db ? cli_host(o) : NULL;
    if (!h) {
        db_close(db);
        return 1;
    }
    tune_ceiling copy, rd, gemm;
    int rc = 0;
    cli_progress(o, "measuring the device copy ceiling on %s (2 x %llu MiB per copy)\n", info.name,
                 (unsigned long long)(TUNE_COPY_BYTES >> 20));
    if (tune_ceiling_copy(0, TUNE_COPY_BYTES, 30, &copy, &err))
        rc = cli_error("copy ceiling: %s", err.msg);
    else if (db_ceiling_put(db, info.name, "copy", copy.value, "B/s") != DB_OK)
        rc = cli_error("%s", db_errmsg(db));
    if (!rc)
        cli_progress(o, "measuring the device read ceiling (%s streams %llu MiB, built for %s)\n",
                     TUNE_READ_KERNEL, (unsigned long long)(TUNE_READ_BYTES >> 20), tg.arch);
    if (!rc && tune_ceiling_read(0, tg.arch, TUNE_READ_BYTES, 30, &rd, &err))
        rc = cli_error("read ceiling: %s", err.msg);
    else if (!rc && db_ceiling_put(db, info.name, "read", rd.value, "B/s") != DB_OK)
        rc = cli_error("%s", db_errmsg(db));
    gen_job *jobs = NULL;
    int n = 0;
    if (!rc) {
        cli_progress(o, "measuring the bf16 GEMM ceiling (cuBLAS when present and kforge's own kernel, %d^3)\n",
                     TUNE_GEMM_SIZE);
        rc = gemm_jobs(o, h, &tg, db, &jobs, &n);
    }
    if (!rc && tune_ceiling_gemm(0, jobs, n, TUNE_GEMM_SIZE, 30, &gemm, &err))
        rc = cli_error("GEMM ceiling: %s", err.msg);
    else if (!rc && db_ceiling_put(db, info.name, "gemm_bf16", gemm.value, "FLOP/s") != DB_OK)
        rc = cli_error("%s", db_errmsg(db));
    char jg[1024], jv[2048], jc[2048], jr[1024];
    if (!rc && o->json)
        printf("{\"gpu\":%s,\"copy\":{\"value\":%.6g,\"unit\":\"B/s\",\"median_ms\":%.6g,\"spread\":%.4f,"
               "\"how\":\"cuMemcpyDtoD of 1 GiB, bytes read + written\"},"
               "\"read\":{\"value\":%.6g,\"unit\":\"B/s\",\"median_ms\":%.6g,\"spread\":%.4f,\"variant\":%s,"
               "\"how\":\"streaming-read kernel over 1 GiB, bytes read\"},"
               "\"gemm_bf16\":{\"value\":%.6g,\"unit\":\"FLOP/s\",\"median_ms\":%.6g,\"spread\":%.4f,"
               "\"variant\":%s,\"check_rel_err\":%.3g,\"kforge_own\":%.6g,\"cublas\":%s,"
               "\"how\":\"the fastest correct of cuBLAS and kforge's ceil_gemm, 8192^3\"}}\n",
               gen_json_str(jg, sizeof jg, info.name), copy.value, copy.median_ms, copy.spread, rd.value,
               rd.median_ms, rd.spread, gen_json_str(jr, sizeof jr, rd.variant), gemm.value,
               gemm.median_ms, gemm.spread, gen_json_str(jv, sizeof jv, gemm.variant), gemm.check_err,
               gemm.own_value, gen_json_str(jc, sizeof jc, gemm.cublas));
    else if (!rc)
        printf("ceilings of %s, stored in %s:\n"
               "  copy       %.3f TB/s (read + written; cuMemcpyDtoD of 1 GiB, median of %d, spread %.1f%%)\n"
               "  read       %.3f TB/s (read; %s, median of %d, spread %.1f%%)\n"
               "  gemm_bf16  %.1f TFLOP/s (%s, %d^3, median of %d, spread %.1f%%; kforge's own GEMM %.1f;"
               " cuBLAS: %s)\n", info.name, db_path(db), copy.value / 1e12, copy.samples, 100 * copy.spread,
               rd.value / 1e12, rd.variant, rd.samples, 100 * rd.spread,
               gemm.value / 1e12, gemm.variant, TUNE_GEMM_SIZE, gemm.samples, 100 * gemm.spread,
               gemm.own_value / 1e12, gemm.cublas);
    for (int i = 0; i < n; i++)
        gen_job_free(&jobs[i]);
    free(jobs);
    gen_host_free(h);
    db_close(db);
    return rc;
}
