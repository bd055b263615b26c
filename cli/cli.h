/* cli/cli.h: what the subcommands of the kforge CLI share: options, messages, set-up */
#ifndef KF_CLI_H
#define KF_CLI_H

#include <stdio.h>

#include "db/db.h"
#include "gen/json.h"
#include "gen/kv.h"
#include "gen/template.h"

#define EXIT_USAGE 2

/* The options of the subcommands (the table in cli/kforge.c says which each takes; the others are refused). */
typedef struct cli_opts {
    const char *db_path;      /* --db, $KFORGE_DB, ./kforge.db */
    const char *arch;         /* --arch, else the detected GPU's, else sm_90a */
    const char *templates;    /* --templates, $KFORGE_TEMPLATE_DIR */
    const char *shape;        /* --shape "b=1,sq=1,..." */
    const char *params;       /* --params "bn=64,..." */
    const char *sweep;        /* --sweep NAME */
    const char *gpu;          /* --gpu "NVIDIA H200" */
    const char *family;       /* --family F */
    const char *output;       /* -o PATH */
    const char *devices;      /* --devices 0,1 (tune) */
    const char *shard;        /* --shard i/n (tune) */
    const char *strategy;     /* --strategy random|halving (tune) */
    const char *timing;       /* --timing sustained|burst (tune, run; NULL: sustained) */
    int page_size;            /* --page-size N (run: paged K/V; 0: contiguous) */
    int jobs;                 /* -j N */
    int budget;               /* --budget N (tune; 0: every variant) */
    int samples;              /* --samples N (tune; 0: the tuner's default) */
    unsigned long long seed;  /* --seed N (tune) */
    double band_floor;        /* --band-floor F (tune; 0: the tuner's default) */
    double rewarm_ms;         /* --rewarm MS (tune; 0: the tuner's default) */
    int retry_errors;         /* --retry-errors (tune) */
    int markdown, csv;        /* --markdown (report), --csv (report, compile, db ls) */
    int json, quiet, ptx, all, measure, help;
    const char *command;      /* the command line as run ("kforge tune ..."), recorded by tune */
    int argc;                 /* positional arguments after the subcommand */
    char **argv;
} cli_opts;

struct cli_cmd;
typedef int (*cli_fn)(cli_opts *o);

/* error: ... on stderr; returns 1 (a failed operation). */
int cli_error(const char *fmt, ...);
/* error: ... on stderr; returns 2 (bad usage). */
int cli_usage_error(const char *fmt, ...);
/* Progress line on stderr unless --quiet. */
void cli_progress(const cli_opts *o, const char *fmt, ...);

/* Opens the database (creating it when create); prints the error and returns NULL on failure. */
db_store *cli_open_db(const cli_opts *o, int create);
/* New template host honouring --templates; prints the error on failure. */
gen_host *cli_host(const cli_opts *o);
/* The target arch: --arch, the detected GPU, or sm_90a. dev filled for it. */
const char *cli_arch(const cli_opts *o, gen_device *dev, int *from_gpu);

/* Shapes selected by --shape/--sweep for family (family may be NULL: all of the
 * sweep), a --shape checked as the C API checks a description. Returns the count, or minus
 * the exit code after printing an error (-2 bad usage, -1 a failure). *out is malloc'd. */
int cli_shapes(const cli_opts *o, gen_host *h, const char *family, gen_kvset **out);
/* A shape of --shape or of a sweep through the checks of the C API (runtime/shape.h): 0, or the exit
 * code after printing the error (2 for a bad --shape, 1 for a bad sweep shape). */
int cli_check_shape(const cli_opts *o, gen_host *h, const gen_kvset *shape);

/* The sweeps that hold a family, in name order. */
#define CLI_SWEEPS_MAX 32
typedef struct cli_family_sweeps {
    int n;
    char name[CLI_SWEEPS_MAX][64];
    int count[CLI_SWEEPS_MAX];     /* the family's shapes in each */
    gen_kvset first;               /* the first of them (with "family") */
} cli_family_sweeps;
/* Fills out for family; with shapes, *shapes (malloc'd) gets the family's distinct shapes over every
 * sweep and the count of them is returned, else the count of sweeps; -1 after printing an error. */
int cli_sweeps_of(gen_host *h, const char *family, cli_family_sweeps *out, gen_kvset **shapes);
/* "default, prefill" */
void cli_sweep_list(const cli_family_sweeps *s, char *buf, size_t n);
/* A --shape string that works for t (its first sweep shape; for a family no sweep holds, one made from
 * another family's sweep shape, checked to give a valid default on dev). 0, or -1 with buf "". */
int cli_example_shape(gen_host *h, gen_tmpl *t, const gen_device *dev, char *buf, size_t n);

/* The usage error (2) for FAMILY (o->argv[0]) given no --shape: an example shape and where its keys are. */
int cli_shape_required(const cli_opts *o, gen_host *h);

/* FAMILY --shape S [--params P]: loads the template, fixed values, params (default
 * overridden by --params), checks validity for the target. 0, or an exit code after
 * printing the error. */
int cli_variant(const cli_opts *o, gen_host *h, gen_tmpl **t, gen_kvset *fixed, gen_kvset *params,
                gen_device *dev);

/* --json and --csv share one convention: a value that is unknown (NULL, NaN) is JSON null and an empty
 * CSV field. Strings go to JSON through gen_json_str (NULL: null), to CSV through cli_csv_str. */
/* v formatted with fmt, or null for NaN and infinities. Returns buf. */
const char *cli_json_num(char *buf, size_t n, const char *fmt, double v);
/* One CSV field (RFC 4180): quoted when it holds a comma, a quote or a line break, quotes doubled;
 * NULL writes nothing. */
void cli_csv_str(FILE *f, const char *s);
/* A number with fmt; NaN and infinities write nothing. */
void cli_csv_num(FILE *f, const char *fmt, double v);
/* n string fields (NULL: empty) and the line end. */
void cli_csv_row(FILE *f, int n, const char *const *fields);

int cmd_list(cli_opts *o);
int cmd_gen(cli_opts *o);
int cmd_compile(cli_opts *o);
int cmd_db(cli_opts *o);
int cmd_doctor(cli_opts *o);
int cmd_doctor_measure(cli_opts *o);
int cmd_run(cli_opts *o);
int cmd_export(cli_opts *o);
int cmd_import(cli_opts *o);
int cmd_tune(cli_opts *o);
int cmd_report(cli_opts *o);
int cmd_db_merge(cli_opts *o);
int cmd_bench(cli_opts *o);

#endif
