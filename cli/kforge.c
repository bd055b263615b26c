/* cli/kforge.c: the kforge command: one table of subcommands, shared options, dispatch */
#include "cli/cli.h"
#include "tuner/tune_select.h"

#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kf_rev.h"

/* The options, one bit each: a command's table entry names those it takes, and the parser refuses the
 * others (exit 2), naming the option and the command. -h/--help is taken by every command. */
enum {
    OPT_DB = 1 << 0, OPT_ARCH = 1 << 1, OPT_TEMPLATES = 1 << 2, OPT_SHAPE = 1 << 3, OPT_PARAMS = 1 << 4,
    OPT_SWEEP = 1 << 5, OPT_JSON = 1 << 6, OPT_QUIET = 1 << 7, OPT_PTX = 1 << 8, OPT_ALL = 1 << 9,
    OPT_MEASURE = 1 << 10, OPT_GPU = 1 << 11, OPT_FAMILY = 1 << 12, OPT_JOBS = 1 << 13, OPT_OUTPUT = 1 << 14,
    OPT_DEVICES = 1 << 15, OPT_SHARD = 1 << 16, OPT_BUDGET = 1 << 17, OPT_STRATEGY = 1 << 18,
    OPT_SEED = 1 << 19, OPT_SAMPLES = 1 << 20, OPT_BAND = 1 << 21, OPT_RETRY = 1 << 22, OPT_MD = 1 << 23,
    OPT_CSV = 1 << 24, OPT_TIMING = 1 << 25, OPT_PAGE = 1 << 26, OPT_REWARM = 1 << 27,
    OPT_PASS = 1u << 31,  /* the command's arguments go to it as they are (bench); only --help is read */
};

/* Each option: its getopt spelling and its line in the help of the commands that take it. */
static const struct cli_opt {
    unsigned bit;
    const char *name;     /* long name; NULL for a short-only option */
    int has_arg;
    int code;             /* getopt's return: the short letter, or 256 + index */
    const char *help;     /* NULL: documented in the command's usage only */
} options[] = {
    {OPT_DB, "db", required_argument, 256, "  --db PATH          database (default $KFORGE_DB or ./kforge.db)\n"},
    {OPT_ARCH, "arch", required_argument, 257,
     "  --arch ARCH        target: sm_90a, sm_90, sm_80, ... (default: the GPU's, else sm_90a)\n"},
    {OPT_TEMPLATES, "templates", required_argument, 258,
     "  --templates DIR    read templates from DIR instead of the embedded copy\n"
     "                     (also $KFORGE_TEMPLATE_DIR)\n"},
    {OPT_SHAPE, "shape", required_argument, 259, NULL},
    {OPT_PARAMS, "params", required_argument, 260, NULL},
    {OPT_SWEEP, "sweep", required_argument, 261, NULL},
    {OPT_JSON, "json", no_argument, 262, "  --json             machine-readable output (JSON; null where a value is unknown)\n"},
    {OPT_CSV, "csv", no_argument, 263, "  --csv              comma-separated values with a header line (empty where --json has null)\n"},
    {OPT_QUIET, "quiet", no_argument, 264, "  --quiet            no progress on stderr\n"},
    {OPT_PTX, "ptx", no_argument, 265, NULL},
    {OPT_ALL, "all", no_argument, 266, NULL},
    {OPT_MEASURE, "measure", no_argument, 267, NULL},
    {OPT_GPU, "gpu", required_argument, 268, NULL},
    {OPT_FAMILY, "family", required_argument, 269, NULL},
    {OPT_DEVICES, "devices", required_argument, 270, NULL},
    {OPT_SHARD, "shard", required_argument, 271, NULL},
    {OPT_BUDGET, "budget", required_argument, 272, NULL},
    {OPT_STRATEGY, "strategy", required_argument, 273, NULL},
    {OPT_SEED, "seed", required_argument, 274, NULL},
    {OPT_SAMPLES, "samples", required_argument, 275, NULL},
    {OPT_BAND, "band-floor", required_argument, 276, NULL},
    {OPT_RETRY, "retry-errors", no_argument, 277, NULL},
    {OPT_MD, "markdown", no_argument, 278, NULL},
    {OPT_TIMING, "timing", required_argument, 279, NULL},
    {OPT_PAGE, "page-size", required_argument, 280, NULL},
    {OPT_REWARM, "rewarm", required_argument, 281, NULL},
    {OPT_JOBS, "jobs", required_argument, 'j', "  -j N               compile threads (default: the number of cores)\n"},
    {OPT_OUTPUT, "output", required_argument, 'o', NULL},
};
#define N_OPTIONS (int)(sizeof options / sizeof options[0])

struct cli_cmd {
    const char *name;
    cli_fn fn;
    unsigned opts;        /* the OPT_* it takes */
    const char *summary;
    const char *usage;    /* full --help text */
};

static const struct cli_cmd commands[] = {
    {"list", cmd_list, OPT_ARCH | OPT_TEMPLATES | OPT_SWEEP | OPT_JSON | OPT_CSV, "families, their parameter spaces and variant counts",
     "usage: kforge list [FAMILY] [--sweep NAME] [--arch ARCH] [--json | --csv]\n"
     "  Lists the template families: the sweeps that hold each (a family no sweep holds is a\n"
     "  helper: a naive reference, the split-KV combine, the GEMM ceiling), its shape keys and an\n"
     "  example --shape, its parameter space, the number of variants in it and how many are valid\n"
     "  for each shape of the sweep (default: the embedded 'default' sweep).\n"},
    {"gen", cmd_gen, OPT_ARCH | OPT_TEMPLATES | OPT_SHAPE | OPT_PARAMS | OPT_JSON, "print the CUDA source of one variant, exactly as NVRTC sees it",
     "usage: kforge gen FAMILY --shape S [--params P] [--arch ARCH]\n"
     "  S: shape fields, e.g. \"dtype=bf16,b=1,sq=1,skv=128k,hq=32,hkv=8,d=128,causal=0\"\n"
     "  P: params (default: the template's default for the shape), e.g. \"bn=64,w=4\"\n"},
    {"compile", cmd_compile,
     OPT_DB | OPT_ARCH | OPT_TEMPLATES | OPT_SHAPE | OPT_PARAMS | OPT_ALL | OPT_SWEEP | OPT_PTX | OPT_JOBS | OPT_JSON |
         OPT_CSV | OPT_QUIET, "compile variants with NVRTC into the database's binary cache",
     "usage: kforge compile [FAMILY] [--shape S] [--params P | --all] [--sweep NAME]\n"
     "                      [--arch ARCH] [--ptx] [-j N] [--db PATH] [--json | --csv]\n"
     "  FAMILY --shape S [--params P]   one variant (default params: the template's default)\n"
     "  FAMILY --shape S --all          every valid variant of the family's space\n"
     "  [FAMILY] --sweep NAME [--all]   the default variant (or all) of every sweep shape\n"
     "  FAMILY [--all]                  the same over every sweep that holds FAMILY (a helper, in\n"
     "                                  no sweep, needs --shape: 'kforge list FAMILY' gives one)\n"
     "  With no FAMILY, --shape or --sweep: --sweep default --all.\n"
     "  A binary already in the database (same cache key) is a cache hit, not recompiled.\n"},
    {"run", cmd_run, OPT_DB | OPT_ARCH | OPT_TEMPLATES | OPT_SHAPE | OPT_PARAMS | OPT_TIMING | OPT_PAGE | OPT_JSON | OPT_QUIET, "run one variant on the GPU against the reference: error and time",
     "usage: kforge run FAMILY --shape S [--params P] [--timing sustained|burst] [--page-size N] [--db PATH] [--json]\n"
     "  Allocates random inputs on the GPU, runs the variant (default params: the\n"
     "  template's default), checks it against the CPU fp64 reference (or, for shapes\n"
     "  too large for the CPU, the GPU naive kernel, itself checked against the CPU\n"
     "  reference by the tests) and prints the errors, the median time and throughput.\n"
     "  Timing as 'kforge tune' takes it (--timing sustained, the default: after a warm-up to\n"
     "  steady state, samples of back-to-back calls over rotating inputs larger than the L2;\n"
     "  burst: one call after an L2 flush a sample), with the SM clock, power and temperature\n"
     "  during the samples (NVML; 'unknown' without it).\n"
     "  --page-size N  (attn_prefill, attn_decode) K/V in a pool of N-row pages through a shuffled\n"
     "                 block table, as kf_attn_desc.page_size; a shape with kv_dtype=e4m3 runs on\n"
     "                 FP8 K/V with per-head scales (checked only on the CPU fp64 reference).\n"},
    {"db", cmd_db, OPT_DB | OPT_TEMPLATES | OPT_OUTPUT | OPT_JSON | OPT_CSV | OPT_QUIET, "inspect, clean or merge databases: info, ls, gc, merge",
     "usage: kforge db info|gc [--db PATH] [--json]\n"
     "       kforge db ls [FAMILY] [--db PATH] [--json | --csv]\n"
     "       kforge db merge A.db [B.db ...] -o OUT.db [--json] [--quiet]\n"
     "  info   schema version, journal mode, row counts\n"
     "  ls     one line per binary: variant key, arch, size, registers, spills, compile ms\n"
     "  gc     delete binaries of template versions that are no longer current (and not winners)\n"
     "  merge  copies every input into OUT.db (created when missing; an existing kforge database is\n"
     "         added to): templates and binaries (each once), devices, runs, measurements, ceilings\n"
     "         (the later measured one), winners. When two databases hold a winner for the same\n"
     "         (GPU model, family, shape), the better-measured one stays: more samples, then the\n"
     "         smaller relative spread, then the one already in OUT.db; each such conflict is\n"
     "         reported on stderr.\n"},
    {"doctor", cmd_doctor, OPT_DB | OPT_ARCH | OPT_TEMPLATES | OPT_MEASURE | OPT_JOBS | OPT_JSON | OPT_QUIET, "NVRTC, driver and GPU, database, templates; --measure: GPU ceilings",
     "usage: kforge doctor [--measure] [--db PATH] [--templates DIR] [--json]\n"
     "  Reports the NVRTC version, the CUDA driver and GPU if any, the database path\n"
     "  and schema version, the template folder, and whether every template loads.\n"
     "  --measure  measures GPU 0's ceilings instead and stores them in the database for\n"
     "             'kforge tune' and 'kforge report': copy (cuMemcpyDtoD of 1 GiB, bytes read +\n"
     "             written per second), read (a streaming-read kernel over 1 GiB, bytes read per\n"
     "             second) and gemm_bf16 (the faster of cuBLAS, when present, and kforge's own\n"
     "             bf16 GEMM).\n"},
    {"tune", cmd_tune,
     OPT_DB | OPT_ARCH | OPT_TEMPLATES | OPT_SHAPE | OPT_SWEEP | OPT_DEVICES | OPT_SHARD | OPT_BUDGET | OPT_STRATEGY |
         OPT_SEED | OPT_SAMPLES | OPT_BAND | OPT_REWARM | OPT_TIMING | OPT_RETRY | OPT_JOBS | OPT_JSON | OPT_QUIET, "time the variants of a sweep and keep the winners",
     "usage: kforge tune [FAMILY] [--sweep NAME | --shape S] [--db PATH] [--devices 0,1]\n"
     "                   [--shard i/n] [--budget N [--strategy random|halving] [--seed N]]\n"
     "                   [--samples N] [--band-floor F] [--rewarm MS] [--timing sustained|burst]\n"
     "                   [--retry-errors] [-j N] [--quiet] [--json]\n"
     "  Times every valid variant of each shape of the sweep (default: 'default', GQA decode\n"
     "  and prefill; 'kda' holds the KDA rows) on the GPU and keeps the winner per (GPU model,\n"
     "  family, shape). Families: attn_decode, attn_prefill, attn_parts_decode (sweeps\n"
     "  mla_decode, audit_group), kda_prefill, kda_decode (sweep kda).\n"
     "  Every variant passes the correctness gate first: random inputs drawn fresh once per shape\n"
     "  and run and shared by its variants, as is the reference on them; outputs poisoned for each\n"
     "  variant. A wrong one is recorded as 'wrong' and never timed or chosen.\n"
     "  Timings (--timing sustained, the default): the GPU first brought to its steady state\n"
     "  (>= 200 ms back to back, until the SM clock and power settle); each sample a burst of\n"
     "  back-to-back calls over rotating input sets larger than the L2, timed with CUDA events;\n"
     "  the default and the candidates in alternating rounds (D A D B ...; --samples, default 30,\n"
     "  at least 20, in rounds of 3, each slot after 50 ms (at most 100 calls) of its own variant,\n"
     "  or --rewarm MS (1 to 5000) whatever a call takes;\n"
     "  a shape of more than 6 candidates screens each first with 5 samples and takes the 6\n"
     "  fastest to the rounds); a candidate replaces the default only when, over the rounds, it\n"
     "  is faster than the default slots next to it by more than the band (two standard errors\n"
     "  of that paired ratio, from the wander of consecutive default slots; at least\n"
     "  --band-floor, default 0.01; a band wider than 2% after the rounds gets more rounds, up\n"
     "  to as many again, for the band to come within 2%). SM clock, power and temperature (NVML)\n"
     "  are stored with every measurement. --timing burst: the old way, each sample one call\n"
     "  after an L2 flush, the default timed again at the end as the control.\n"
     "  Binaries compile on -j threads ahead of the GPU, shape by shape. Verdicts and timings are\n"
     "  committed as they are taken (a shape's interleaved rounds when they end): after Ctrl-C or\n"
     "  a crash the same command resumes, re-timing at most the rounds of the shape it was in.\n"
     "  A variant that breaks the CUDA context is recorded as 'error' and its worker\n"
     "  restarted (--retry-errors measures such variants again).\n"
     "  --devices 0,1    one worker process per GPU; GPUs of one model share the shapes\n"
     "  --shard i/n      only the i-th of n parts of the shapes (balanced by estimated cost)\n"
     "  --budget N       at most N variants fully timed per shape: a seeded random subset\n"
     "                   (--strategy random, --seed), or successive halving (--strategy halving:\n"
     "                   screen all, keep the best half, repeat, until N remain)\n"
     "  --json           one JSON object per shape on stdout (JSON lines)\n"},
    {"bench", cmd_bench, OPT_PASS, "compare kforge with its peers on the GPU (bench/run.sh)",
     "usage: kforge bench [bench/run.sh options]\n"
     "  Runs the peer-comparison harness of the source tree, bench/run.sh (found beside this\n"
     "  executable's folder, as build/kforge in a clone, or at $KFORGE_BENCH), with the arguments as\n"
     "  given: with none, the sets \"all\" (GQA against PyTorch SDPA and flex_attention) and \"kda\",\n"
     "  each with its time budget, tables appended to bench/RESULTS.md; --set NAME [--rounds N]\n"
     "  [--out DIR] ...: that set only (the options of 'python -m bench run'). Environment:\n"
     "  KFORGE_DB (the tuned winners), KFORGE_LIB, BENCH_SETS, BENCH_TIME_BUDGET, BENCH_KDA_TIME_BUDGET.\n"
     "  Needs a GPU and python3 with torch (CUDA), triton and matplotlib.\n"},
    {"export", cmd_export, OPT_DB | OPT_GPU | OPT_FAMILY | OPT_OUTPUT | OPT_JSON, "write the winners of one GPU model and their cubins into a bundle",
     "usage: kforge export --gpu NAME [--family F] -o FILE.kfb [--db PATH]\n"
     "  Writes one file (SQLite) with its format version, GPU model, arch, NVRTC version,\n"
     "  the winners for NAME (e.g. \"NVIDIA H200\") and their cubins, each with a SHA-256.\n"
     "  libkforge_rt serves it with no compiler present (kf_config.bundles).\n"},
    {"import", cmd_import, OPT_DB, "verify bundles and merge them into a database, all or nothing",
     "usage: kforge import FILE.kfb [FILE.kfb ...] [--db PATH]\n"
     "  Verifies every bundle (integrity, format version, checksums, every row as kf_open\n"
     "  checks it), then merges their binaries and winners into the database in one\n"
     "  transaction: any refusal imports nothing. A later bundle's winner replaces an earlier one's.\n"},
    {"report", cmd_report, OPT_DB | OPT_GPU | OPT_FAMILY | OPT_MD | OPT_CSV | OPT_JSON, "winners per family and GPU: time, throughput, share of the ceiling",
     "usage: kforge report [--gpu NAME] [--family F] [--markdown | --csv | --json] [--db PATH]\n"
     "  One table per GPU model and family: shape, winning variant, median time, throughput\n"
     "  (decode: bytes of K+V per second; prefill: FLOP/s, causal counted half), its share of\n"
     "  the GPU's measured ceiling ('kforge doctor --measure': read for bytes read, copy for\n"
     "  KDA's bytes read + written and for bytes read when the database has no read ceiling,\n"
     "  gemm_bf16 for FLOP/s), speed-up over the default variant and the control band. A note\n"
     "  under the tables names the ceilings used (--json and --csv: a 'ceiling' field).\n"},
};
#define N_COMMANDS (int)(sizeof commands / sizeof commands[0])

/* The help lines of the options in mask (those with a line of their own). */
static void options_help(FILE *f, unsigned mask)
{
    for (int i = 0; i < N_OPTIONS; i++)
        if ((options[i].bit & mask) && options[i].help)
            fputs(options[i].help, f);
    fputs("  -h, --help         this help\n", f);
}

static void main_help(FILE *f)
{
    fprintf(f, "usage: kforge [--version] <command> [options]\n\n"
               "kforge generates, compiles, tunes and serves specialised attention kernels.\n\n"
               "commands:\n");
    for (int i = 0; i < N_COMMANDS; i++)
        fprintf(f, "  %-9s %s\n", commands[i].name, commands[i].summary);
    fprintf(f, "\noptions shared by the commands that take them:\n");
    options_help(f, ~0u);
    fprintf(f, "\nRun 'kforge <command> --help' for a command's own options.\n");
}

/* A whole number from lo to hi for option opt: 0, or 2 after printing the error. */
static int parse_long(const char *opt, const char *v, long lo, long hi, int *out)
{
    char *end;
    errno = 0;
    long x = strtol(v, &end, 10);
    if (!*v || *end || errno || x < lo || x > hi)
        return cli_usage_error("%s wants a number from %ld to %ld, got '%s'", opt, lo, hi, v);
    *out = (int)x;
    return 0;
}

/* "--budget" or "-j": the option as a user types it. */
static const char *opt_spelling(const struct cli_opt *op, char *buf, size_t n)
{
    if (op->code < 256)
        snprintf(buf, n, "-%c", op->code);
    else
        snprintf(buf, n, "--%s", op->name);
    return buf;
}

/* Options and positional arguments of the subcommand cmd (argv[0]) into o; an option cmd does not
 * take is refused. 0, or 2 after printing the error. */
static int parse(const struct cli_cmd *cmd, int argc, char **argv, cli_opts *o)
{
    struct option longopts[N_OPTIONS + 2];
    int nl = 0;
    for (int i = 0; i < N_OPTIONS; i++)
        longopts[nl++] = (struct option){options[i].name, options[i].has_arg, 0, options[i].code};
    longopts[nl++] = (struct option){"help", no_argument, 0, 'h'};
    longopts[nl] = (struct option){0, 0, 0, 0};
    optind = 1;
    opterr = 0;
    for (;;) {
        int c = getopt_long(argc, argv, "+:hj:o:", longopts, NULL);
        if (c == -1) {
            /* options and positional arguments may come in any order */
            if (optind >= argc)
                break;
            if (o->argc >= 64)
                return cli_usage_error("too many arguments");
            o->argv[o->argc++] = argv[optind++];
            continue;
        }
        if (c == ':')
            return cli_usage_error("option '%s' needs a value", argv[optind - 1]);
        if (c == 'h') {
            o->help = 1;
            continue;
        }
        const struct cli_opt *op = NULL;
        for (int i = 0; i < N_OPTIONS; i++)
            if (options[i].code == c)
                op = &options[i];
        if (!op)
            return cli_usage_error("unknown option '%s' (see 'kforge %s --help')", argv[optind - 1], cmd->name);
        if (!(cmd->opts & op->bit)) {
            char sp[32];
            return cli_usage_error("'kforge %s' does not take %s (see 'kforge %s --help')", cmd->name,
                                   opt_spelling(op, sp, sizeof sp), cmd->name);
        }
        switch (op->bit) {
        case OPT_DB: o->db_path = optarg; break;
        case OPT_ARCH: o->arch = optarg; break;
        case OPT_TEMPLATES: o->templates = optarg; break;
        case OPT_SHAPE: o->shape = optarg; break;
        case OPT_PARAMS: o->params = optarg; break;
        case OPT_SWEEP: o->sweep = optarg; break;
        case OPT_JSON: o->json = 1; break;
        case OPT_CSV: o->csv = 1; break;
        case OPT_QUIET: o->quiet = 1; break;
        case OPT_PTX: o->ptx = 1; break;
        case OPT_ALL: o->all = 1; break;
        case OPT_MEASURE: o->measure = 1; break;
        case OPT_GPU: o->gpu = optarg; break;
        case OPT_FAMILY: o->family = optarg; break;
        case OPT_OUTPUT: o->output = optarg; break;
        case OPT_DEVICES: o->devices = optarg; break;
        case OPT_SHARD: o->shard = optarg; break;
        case OPT_STRATEGY: o->strategy = optarg; break;
        case OPT_RETRY: o->retry_errors = 1; break;
        case OPT_MD: o->markdown = 1; break;
        case OPT_TIMING: o->timing = optarg; break;
        case OPT_PAGE:
            if (parse_long("--page-size", optarg, 1, 1 << 20, &o->page_size))
                return EXIT_USAGE;
            break;
        case OPT_JOBS: {
            char *end;
            long v = strtol(optarg, &end, 10);
            if (*end || v < 1 || v > 256)
                return cli_usage_error("-j wants a number of threads from 1 to 256, got '%s'", optarg);
            o->jobs = (int)v;
            break;
        }
        case OPT_BUDGET:
            if (parse_long("--budget", optarg, 1, 1000000, &o->budget))
                return EXIT_USAGE;
            break;
        case OPT_SAMPLES:
            if (parse_long("--samples", optarg, TUNE_MIN_SAMPLES, 100000, &o->samples))
                return EXIT_USAGE;
            break;
        case OPT_SEED: {
            char *end;
            errno = 0;
            unsigned long long v = strtoull(optarg, &end, 0);
            if (!*optarg || *optarg == '-' || *end || errno)
                return cli_usage_error("--seed wants a whole number from 0 to %llu, got '%s'",
                                       (unsigned long long)-1, optarg);
            o->seed = v;
            break;
        }
        case OPT_REWARM: {
            char *end;
            double v = strtod(optarg, &end);
            if (!*optarg || *end || !(v >= 1 && v <= 5000))
                return cli_usage_error("--rewarm wants milliseconds from 1 to 5000, got '%s'", optarg);
            o->rewarm_ms = v;
            break;
        }
        case OPT_BAND: {
            char *end;
            double v = strtod(optarg, &end);
            if (!*optarg || *end || !(v >= 0 && v < 1))
                return cli_usage_error("--band-floor wants a fraction in [0, 1), got '%s'", optarg);
            o->band_floor = v;
            break;
        }
        }
    }
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        main_help(stderr);
        return EXIT_USAGE;
    }
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        main_help(stdout);
        return 0;
    }
    if (!strcmp(argv[1], "--version") || !strcmp(argv[1], "version")) {
        printf("kforge %s (%s)\n", "0.1.0", KF_GIT_REV);
        return 0;
    }
    const struct cli_cmd *cmd = NULL;
    for (int i = 0; i < N_COMMANDS; i++)
        if (!strcmp(argv[1], commands[i].name))
            cmd = &commands[i];
    if (!cmd)
        return cli_usage_error("unknown command '%s' (see 'kforge --help')", argv[1]);
    /* the command line as run, for the records of a tuning run */
    static char command[1024];
    size_t n = 0;
    for (int i = 0; i < argc && n + 2 < sizeof command; i++) {
        int k = snprintf(command + n, sizeof command - n, "%s%s", i ? " " : "", i ? argv[i] : "kforge");
        n = k < 0 ? n : n + (size_t)k;
    }
    cli_opts o = {0};
    char *pos[64];
    o.argv = pos;
    o.command = command;
    if (cmd->opts & OPT_PASS) {
        if (argc > 2 && (!strcmp(argv[2], "--help") || !strcmp(argv[2], "-h"))) {
            fputs(cmd->usage, stdout);
            return 0;
        }
        o.argc = argc - 2;
        o.argv = argv + 2;
        return cmd->fn(&o);
    }
    int rc = parse(cmd, argc - 1, argv + 1, &o);
    if (rc)
        return rc;
    if (o.help) {
        printf("%s\noptions:\n", cmd->usage);
        options_help(stdout, cmd->opts);
        return 0;
    }
    return cmd->fn(&o);
}
