/* cli/cli.h: what the subcommands of the kforge CLI share: options, messages, set-up */
#ifndef KF_CLI_H
#define KF_CLI_H

#include "db/db.h"
#include "gen/json.h"
#include "gen/kv.h"
#include "gen/template.h"

#define EXIT_USAGE 2

/* Options every subcommand understands (each uses those that apply to it). */
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
    int jobs;                 /* -j N */
    int budget;               /* --budget N (tune; 0: every variant) */
    int samples;              /* --samples N (tune; 0: the tuner's default) */
    unsigned long long seed;  /* --seed N (tune) */
    double band_floor;        /* --band-floor F (tune; 0: the tuner's default) */
    int retry_errors;         /* --retry-errors (tune) */
    int markdown, csv;        /* --markdown, --csv (report) */
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
 * sweep). Returns the count, or -1 after printing an error. *out is malloc'd. */
int cli_shapes(const cli_opts *o, gen_host *h, const char *family, gen_kvset **out);

/* FAMILY --shape S [--params P]: loads the template, fixed values, params (default
 * overridden by --params), checks validity for the target. 0, or an exit code after
 * printing the error. */
int cli_variant(const cli_opts *o, gen_host *h, gen_tmpl **t, gen_kvset *fixed, gen_kvset *params,
                gen_device *dev);

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

#endif
