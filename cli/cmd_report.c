/* cli/cmd_report.c: `kforge report`: the winners per family and GPU with time, throughput, share of the ceiling, speed-up, band, timing and clocks */
#include "cli/cli.h"
#include "tuner/tune_ceiling.h"
#include "tuner/tune_work.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { FMT_TEXT, FMT_MD, FMT_CSV, FMT_JSON };

typedef struct report_ctx {
    db_store *db;
    int fmt;
    char gpu[256], family[64];    /* the table being printed */
    int rows, tables;
    int used[3];                  /* rows compared with each of CEIL_KINDS */
    int fell_back;                /* rows whose "read" ceiling was missing: "copy" instead */
} report_ctx;

static const char *const CEIL_KINDS[3] = {"read", "copy", "gemm_bf16"};
static const char *const CEIL_HOW[3] = {
    "streaming device read, bytes read per second",
    "cuMemcpyDtoD, bytes read + written per second",
    "bf16 GEMM, FLOP/s",
};

typedef struct meas_fig {
    double throughput, frac;
    const char *unit;
    const char *ceiling;          /* the kind frac is against, or NULL */
    char unit_buf[16];
    int n;
} meas_fig;

static int fig_cb(const db_tune_meas *m, void *arg)
{
    meas_fig *f = arg;
    f->throughput = m->throughput;
    f->frac = m->ceiling_frac;
    snprintf(f->unit_buf, sizeof f->unit_buf, "%s", m->throughput_unit ? m->throughput_unit : "");
    f->unit = f->unit_buf;
    f->n = m->n_samples;
    return 1;
}

/* Throughput of the winner's measurement; the share recomputed against today's ceiling of the
 * family's kind (tune_work_ceiling: "read" for decode bytes, "copy" when the GPU has no "read"). */
static void figures(report_ctx *c, const db_winner *w, meas_fig *f)
{
    memset(f, 0, sizeof *f);
    f->throughput = f->frac = NAN;
    f->unit = "";
    if (w->measurement_id)
        db_tune_meas_by_id(c->db, w->measurement_id, fig_cb, f);
    if (isnan(f->throughput))
        return;
    double ceil;
    const char *want = tune_work_ceiling(w->family, f->unit);
    f->ceiling = tune_ceiling_lookup(c->db, w->gpu, want, &ceil);
    if (!f->ceiling)
        return;
    f->frac = f->throughput / ceil;
    for (int i = 0; i < 3; i++)
        c->used[i] += !strcmp(f->ceiling, CEIL_KINDS[i]);
    c->fell_back += strcmp(f->ceiling, want) != 0;
}

/* After the tables: which measured ceiling "% ceiling" is a share of. */
static void footnote(const report_ctx *c)
{
    if (c->fmt != FMT_TEXT && c->fmt != FMT_MD)
        return;
    for (int i = 0, any = 0; i < 3; i++) {
        if (!c->used[i])
            continue;
        if (!any++)
            printf("\n%% ceiling: share of the GPU's ceiling measured by 'kforge doctor --measure'%s\n",
                   c->fmt == FMT_MD ? ":\n" : ":");
        printf(c->fmt == FMT_MD ? "- `%s`: %s\n" : "  %-10s %s\n", CEIL_KINDS[i], CEIL_HOW[i]);
    }
    if (c->fell_back)
        printf("%s%d row%s of bytes read compared with 'copy': no 'read' ceiling stored for the GPU"
               " (run 'kforge doctor --measure' on it to add one)\n", c->fmt == FMT_MD ? "\n" : "", c->fell_back,
               c->fell_back == 1 ? "" : "s");
}

/* "3.90 TB/s", "571 TFLOP/s" */
static void fmt_thr(double v, const char *unit, char *buf, size_t n)
{
    if (isnan(v)) {
        snprintf(buf, n, "-");
        return;
    }
    const char *p = "";
    if (v >= 1e12)
        v /= 1e12, p = "T";
    else if (v >= 1e9)
        v /= 1e9, p = "G";
    else if (v >= 1e6)
        v /= 1e6, p = "M";
    const char *u = !strcmp(unit, "FLOP/s") ? "FLOP/s" : "B/s";
    snprintf(buf, n, "%.3g %s%s", v, p, u);
}

static void fmt_pct(double v, char *buf, size_t n)
{
    if (isnan(v))
        snprintf(buf, n, "-");
    else
        snprintf(buf, n, "%.1f%%", 100 * v);
}

static void header(report_ctx *c, const db_winner *w)
{
    snprintf(c->gpu, sizeof c->gpu, "%s", w->gpu);
    snprintf(c->family, sizeof c->family, "%s", w->family);
    const char *cols[] = {"shape", "winner", "ms", "throughput", "% ceiling", "speed-up", "band", "timing",
                          "SM clock, power"};
    if (c->fmt == FMT_TEXT) {
        printf("%s%s, %s\n", c->tables ? "\n" : "", w->gpu, w->family);
        printf("  %-44s %-40s %10s %14s %9s %8s %6s %-15s %s\n", cols[0], cols[1], cols[2], cols[3], cols[4],
               cols[5], cols[6], cols[7], cols[8]);
    } else if (c->fmt == FMT_MD) {
        printf("%s### %s, %s\n\n| shape | winner | ms | throughput | %% ceiling | speed-up | band | timing |"
               " SM clock, power |\n| --- | --- | ---: | ---: | ---: | ---: | ---: | --- | --- |\n",
               c->tables ? "\n" : "", w->gpu, w->family);
    }
    c->tables++;
}

/* The variant key without its family prefix (the shape already names the fixed values). */
static const char *short_key(const db_winner *w)
{
    size_t n = strlen(w->family);
    return !strncmp(w->variant_key, w->family, n) && w->variant_key[n] == '.' ? w->variant_key + n + 1
                                                                               : w->variant_key;
}

static int row_cb(const db_winner *w, void *arg)
{
    report_ctx *c = arg;
    if (c->fmt != FMT_CSV && c->fmt != FMT_JSON && (strcmp(c->gpu, w->gpu) || strcmp(c->family, w->family)))
        header(c, w);
    meas_fig f;
    figures(c, w, &f);
    db_clocks k;
    if (!w->measurement_id || db_measure_clocks(c->db, w->measurement_id, &k) != DB_OK)
        db_measure_clocks(c->db, 0, &k);            /* none: every figure unknown */
    const char *timing = k.timing[0] ? k.timing : "-";
    char clk[64] = "-";
    if (!isnan(k.sm_clock_mean))
        snprintf(clk, sizeof clk, "%.0f MHz (min %.0f), %.0f W, %.0f C", k.sm_clock_mean, k.sm_clock_min,
                 k.power_mean, k.temp_max);
    char thr[32], pct[16], sp[16], band[16];
    char jg[1024], jf[256], js[1024], jv[1024], jp[1024];   /* JSON strings */
    fmt_thr(f.throughput, f.unit, thr, sizeof thr);
    fmt_pct(f.frac, pct, sizeof pct);
    fmt_pct(w->band, band, sizeof band);
    if (isnan(w->speedup))
        snprintf(sp, sizeof sp, "-");
    else
        snprintf(sp, sizeof sp, "x%.3f", w->speedup);
    const char *unit = isnan(f.throughput) ? NULL : f.unit;   /* --json null, --csv empty */
    switch (c->fmt) {
    case FMT_TEXT:
        printf("  %-44s %-40s %10.4f %14s %9s %8s %6s %-15s %s\n", w->shape_key, short_key(w), w->median_ms, thr,
               pct, sp, band, timing, clk);
        break;
    case FMT_MD:
        printf("| %s | %s | %.4f | %s | %s | %s | %s | %s | %s |\n", w->shape_key, short_key(w), w->median_ms, thr,
               pct, sp, band, timing, clk);
        break;
    case FMT_CSV: {
        const char *row[] = {w->gpu, w->family, w->shape_key, w->variant_key};
        for (int i = 0; i < 4; i++)
            cli_csv_str(stdout, row[i]), fputc(',', stdout);
        cli_csv_num(stdout, "%.6g", w->median_ms), fputc(',', stdout);
        cli_csv_num(stdout, "%.6g", f.throughput), fputc(',', stdout);
        cli_csv_str(stdout, unit), fputc(',', stdout);
        cli_csv_num(stdout, "%.4f", f.frac), fputc(',', stdout);
        cli_csv_num(stdout, "%.4f", w->speedup), fputc(',', stdout);
        cli_csv_num(stdout, "%.4f", w->band), fputc(',', stdout);
        cli_csv_str(stdout, f.ceiling), fputc(',', stdout);
        cli_csv_str(stdout, k.timing[0] ? k.timing : NULL);
        const double kc[] = {k.sm_clock_mean, k.sm_clock_min, k.power_mean, k.power_max, k.temp_max};
        for (int i = 0; i < 5; i++)
            fputc(',', stdout), cli_csv_num(stdout, "%.1f", kc[i]);   /* unknown: empty */
        fputc('\n', stdout);
        break;
    }
    case FMT_JSON: {
        char n1[32], n2[32], n3[32], n4[32], n5[32], ju[64], jk[64];
        printf("%s\n {\"gpu\":%s,\"family\":%s,\"shape\":%s,\"variant\":%s,\"params\":%s,"
               "\"median_ms\":%s,\"throughput\":%s,\"unit\":%s,\"ceiling_frac\":%s,\"ceiling\":%s,"
               "\"speedup\":%s,\"band\":%s", c->rows ? "," : "", gen_json_str(jg, sizeof jg, w->gpu),
               gen_json_str(jf, sizeof jf, w->family), gen_json_str(js, sizeof js, w->shape_key),
               gen_json_str(jv, sizeof jv, w->variant_key), gen_json_str(jp, sizeof jp, w->params),
               cli_json_num(n1, sizeof n1, "%.6g", w->median_ms), cli_json_num(n2, sizeof n2, "%.6g", f.throughput),
               gen_json_str(ju, sizeof ju, unit), cli_json_num(n3, sizeof n3, "%.4f", f.frac),
               gen_json_str(jk, sizeof jk, f.ceiling), cli_json_num(n4, sizeof n4, "%.4f", w->speedup),
               cli_json_num(n5, sizeof n5, "%.4f", w->band));
        char jt[64], nk[32];
        printf(",\"timing\":%s", gen_json_str(jt, sizeof jt, k.timing[0] ? k.timing : NULL));
        const char *kn[] = {"sm_clock_mean", "sm_clock_min", "power_mean", "power_max", "temp_max"};
        const double kv[] = {k.sm_clock_mean, k.sm_clock_min, k.power_mean, k.power_max, k.temp_max};
        for (int i = 0; i < 5; i++)
            printf(",\"%s\":%s", kn[i], cli_json_num(nk, sizeof nk, "%.1f", kv[i]));
        printf("}");
        break;
    }
    }
    c->rows++;
    return 0;
}

int cmd_report(cli_opts *o)
{
    if (o->argc > 0)
        return cli_usage_error("unexpected argument '%s' (see 'kforge report --help')", o->argv[0]);
    if (o->markdown + o->csv + o->json > 1)
        return cli_usage_error("--markdown, --csv and --json exclude each other");
    int fmt = o->markdown ? FMT_MD : o->csv ? FMT_CSV : o->json ? FMT_JSON : FMT_TEXT;
    const char *gpu = o->gpu, *family = o->family;
    db_store *db = cli_open_db(o, 0);
    if (!db)
        return 1;
    report_ctx c = {db, fmt, "", "", 0, 0, {0}, 0};
    if (fmt == FMT_JSON)
        printf("[");
    else if (fmt == FMT_CSV)   /* the header even when no row follows */
        printf("gpu,family,shape,variant,median_ms,throughput,unit,ceiling_frac,speedup,band,ceiling,"
               "timing,sm_clock_mean,sm_clock_min,power_mean,power_max,temp_max\n");
    int rc = 0;
    if (db_winner_each(db, gpu, family, row_cb, &c) != DB_OK)
        rc = cli_error("%s", db_errmsg(db));
    if (fmt == FMT_JSON)
        printf("%s]\n", c.rows ? "\n" : "");
    else if (!rc && !c.rows && fmt != FMT_CSV)
        printf("no winners%s%s%s%s in %s (run 'kforge tune')\n", gpu ? " for " : "", gpu ? gpu : "",
               family ? " of " : "", family ? family : "", db_path(db));
    else if (!rc)
        footnote(&c);
    db_close(db);
    return rc;
}
