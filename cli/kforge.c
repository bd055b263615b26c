/* cli/kforge.c: the kforge command: one table of subcommands, shared options, dispatch */
#include "cli/cli.h"
#include "tuner/tune_select.h"

#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kf_rev.h"

struct cli_cmd {
    const char *name;
    cli_fn fn;            /* NULL: reserved for a later release */
    const char *summary;
    const char *usage;    /* full --help text */
};

static const struct cli_cmd commands[] = {
    {"list", cmd_list, "families, their parameter spaces and variant counts",
     "usage: kforge list [FAMILY] [--sweep NAME] [--arch ARCH] [--json]\n"
     "  Lists the template families with their parameter spaces, the number of\n"
     "  variants in each space and how many are valid for each shape of the sweep\n"
     "  (default: the embedded 'default' sweep).\n"},
    {"gen", cmd_gen, "print the CUDA source of one variant, exactly as NVRTC sees it",
     "usage: kforge gen FAMILY --shape S [--params P] [--arch ARCH]\n"
     "  S: shape fields, e.g. \"dtype=bf16,b=1,sq=1,skv=128k,hq=32,hkv=8,d=128,causal=0\"\n"
     "  P: params (default: the template's default for the shape), e.g. \"bn=64,w=4\"\n"},
    {"compile", cmd_compile, "compile variants with NVRTC into the database's binary cache",
     "usage: kforge compile [FAMILY] [--shape S] [--params P | --all] [--sweep NAME]\n"
     "                      [--arch ARCH] [--ptx] [-j N] [--db PATH] [--json]\n"
     "  FAMILY --shape S [--params P]   one variant (default params: the template's default)\n"
     "  FAMILY --shape S --all          every valid variant of the family's space\n"
     "  [FAMILY] --sweep NAME [--all]   the default variant (or all) of every sweep shape\n"
     "  With no FAMILY, --shape or --sweep: --sweep default --all.\n"
     "  A binary already in the database (same cache key) is a cache hit, not recompiled.\n"},
    {"run", cmd_run, "run one variant on the GPU against the reference: error and time",
     "usage: kforge run FAMILY --shape S [--params P] [--timing sustained|burst] [--db PATH] [--json]\n"
     "  Allocates random inputs on the GPU, runs the variant (default params: the\n"
     "  template's default), checks it against the CPU fp64 reference (or, for shapes\n"
     "  too large for the CPU, the GPU naive kernel, itself checked against the CPU\n"
     "  reference by the tests) and prints the errors, the median time and throughput.\n"
     "  Timing as 'kforge tune' takes it (--timing sustained, the default: after a warm-up to\n"
     "  steady state, samples of back-to-back calls over rotating inputs larger than the L2;\n"
     "  burst: one call after an L2 flush a sample), with the SM clock, power and temperature\n"
     "  during the samples (NVML; 'unknown' without it).\n"},
    {"db", cmd_db, "inspect, clean or merge databases: info, ls, gc, merge",
     "usage: kforge db info|ls|gc [--db PATH] [--json]\n"
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
    {"doctor", cmd_doctor, "NVRTC, driver and GPU, database, templates; --measure: GPU ceilings",
     "usage: kforge doctor [--measure] [--db PATH] [--templates DIR] [--json]\n"
     "  Reports the NVRTC version, the CUDA driver and GPU if any, the database path\n"
     "  and schema version, the template folder, and whether every template loads.\n"
     "  --measure  measures GPU 0's ceilings instead and stores them in the database for\n"
     "             'kforge tune' and 'kforge report': copy (cuMemcpyDtoD of 1 GiB, bytes read +\n"
     "             written per second), read (a streaming-read kernel over 1 GiB, bytes read per\n"
     "             second) and gemm_bf16 (the faster of cuBLAS, when present, and kforge's own\n"
     "             bf16 GEMM).\n"},
    {"tune", cmd_tune, "time the variants of a sweep and keep the winners",
     "usage: kforge tune [FAMILY] [--sweep NAME | --shape S] [--db PATH] [--devices 0,1]\n"
     "                   [--shard i/n] [--budget N [--strategy random|halving] [--seed N]]\n"
     "                   [--samples N] [--band-floor F] [--timing sustained|burst] [--retry-errors]\n"
     "                   [-j N] [--quiet] [--json]\n"
     "  Times every valid variant of each shape of the sweep (default: 'default', GQA decode\n"
     "  and prefill; 'kda' holds the KDA rows) on the GPU and keeps the winner per (GPU model,\n"
     "  family, shape). Families: attn_decode, attn_prefill, attn_parts_decode (sweeps\n"
     "  mla_decode, audit_group), kda_prefill, kda_decode (sweep kda).\n"
     "  Every variant passes the correctness gate first (fresh random inputs, poisoned outputs,\n"
     "  against the reference); a wrong one is recorded as 'wrong' and never timed or chosen.\n"
     "  Timings (--timing sustained, the default): the GPU first brought to its steady state\n"
     "  (>= 200 ms back to back, until the SM clock and power settle); each sample a burst of\n"
     "  back-to-back calls over rotating input sets larger than the L2, timed with CUDA events;\n"
     "  the default and the candidates in alternating rounds (D A D B ...; --samples, default 30,\n"
     "  at least 20, in rounds of 10; a shape of more than 8 candidates screens each first with\n"
     "  5 samples and takes the 8 fastest to the rounds); a candidate replaces the default only\n"
     "  when faster than the default timings next to it by more than the band (the spread of\n"
     "  consecutive default rounds, at least --band-floor, default 0.01). SM clock, power and\n"
     "  temperature (NVML) are stored with every measurement. --timing burst: the old way, each\n"
     "  sample one call after an L2 flush, the default timed again at the end as the control.\n"
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
    {"bench", NULL, "(reserved) compare against the peers", ""},
    {"export", cmd_export, "write the winners of one GPU model and their cubins into a bundle",
     "usage: kforge export --gpu NAME [--family F] -o FILE.kfb [--db PATH]\n"
     "  Writes one file (SQLite) with its format version, GPU model, arch, NVRTC version,\n"
     "  the winners for NAME (e.g. \"NVIDIA H200\") and their cubins, each with a SHA-256.\n"
     "  libkforge_rt serves it with no compiler present (kf_config.bundles).\n"},
    {"import", cmd_import, "verify a bundle and merge it into a database",
     "usage: kforge import FILE.kfb [--db PATH]\n"
     "  Verifies the bundle (integrity, format version, checksums) and merges its\n"
     "  binaries and winners into the database.\n"},
    {"report", cmd_report, "winners per family and GPU: time, throughput, share of the ceiling",
     "usage: kforge report [--gpu NAME] [--family F] [--markdown | --csv | --json] [--db PATH]\n"
     "  One table per GPU model and family: shape, winning variant, median time, throughput\n"
     "  (decode: bytes of K+V per second; prefill: FLOP/s, causal counted half), its share of\n"
     "  the GPU's measured ceiling ('kforge doctor --measure': read for bytes read, copy for\n"
     "  KDA's bytes read + written and for bytes read when the database has no read ceiling,\n"
     "  gemm_bf16 for FLOP/s), speed-up over the default variant and the control band. A note\n"
     "  under the tables names the ceilings used (--json and --csv: a 'ceiling' field).\n"},
};
#define N_COMMANDS (int)(sizeof commands / sizeof commands[0])

static const char common_help[] =
    "common options:\n"
    "  --db PATH          database (default $KFORGE_DB or ./kforge.db)\n"
    "  --arch ARCH        target: sm_90a, sm_90, sm_80, ... (default: the GPU's, else sm_90a)\n"
    "  --templates DIR    read templates from DIR instead of the embedded copy\n"
    "                     (also $KFORGE_TEMPLATE_DIR)\n"
    "  -j N               compile threads (default: the number of cores)\n"
    "  --json             machine-readable output\n"
    "  --quiet            no progress on stderr\n"
    "  -h, --help         this help\n";

static void main_help(FILE *f)
{
    fprintf(f, "usage: kforge [--version] <command> [options]\n\n"
               "kforge generates, compiles, tunes and serves specialised attention kernels.\n\n"
               "commands:\n");
    for (int i = 0; i < N_COMMANDS; i++)
        fprintf(f, "  %-9s %s\n", commands[i].name, commands[i].summary);
    fprintf(f, "\n%s\nRun 'kforge <command> --help' for a command's own options.\n", common_help);
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

/* Options and positional arguments of the subcommand cmd (argv[0]) into o. 0, or 2
 * after printing the error. */
static int parse(const char *cmd, int argc, char **argv, cli_opts *o)
{
    enum { O_DB = 256, O_ARCH, O_TEMPLATES, O_SHAPE, O_PARAMS, O_SWEEP, O_JSON, O_QUIET, O_PTX,
           O_ALL, O_MEASURE, O_GPU, O_FAMILY, O_DEVICES, O_SHARD, O_BUDGET, O_STRATEGY, O_SEED,
           O_SAMPLES, O_BAND, O_RETRY, O_MD, O_CSV, O_TIMING };
    static const struct option longopts[] = {
        {"db", required_argument, 0, O_DB},           {"arch", required_argument, 0, O_ARCH},
        {"templates", required_argument, 0, O_TEMPLATES}, {"shape", required_argument, 0, O_SHAPE},
        {"params", required_argument, 0, O_PARAMS},   {"sweep", required_argument, 0, O_SWEEP},
        {"json", no_argument, 0, O_JSON},             {"quiet", no_argument, 0, O_QUIET},
        {"ptx", no_argument, 0, O_PTX},               {"all", no_argument, 0, O_ALL},
        {"measure", no_argument, 0, O_MEASURE},       {"help", no_argument, 0, 'h'},
        {"jobs", required_argument, 0, 'j'},          {"gpu", required_argument, 0, O_GPU},
        {"family", required_argument, 0, O_FAMILY},   {"output", required_argument, 0, 'o'},
        {"devices", required_argument, 0, O_DEVICES}, {"shard", required_argument, 0, O_SHARD},
        {"budget", required_argument, 0, O_BUDGET},   {"strategy", required_argument, 0, O_STRATEGY},
        {"seed", required_argument, 0, O_SEED},       {"samples", required_argument, 0, O_SAMPLES},
        {"band-floor", required_argument, 0, O_BAND}, {"retry-errors", no_argument, 0, O_RETRY},
        {"markdown", no_argument, 0, O_MD},           {"csv", no_argument, 0, O_CSV},
        {"timing", required_argument, 0, O_TIMING},
        {0, 0, 0, 0}};
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
        switch (c) {
        case O_DB: o->db_path = optarg; break;
        case O_ARCH: o->arch = optarg; break;
        case O_TEMPLATES: o->templates = optarg; break;
        case O_SHAPE: o->shape = optarg; break;
        case O_PARAMS: o->params = optarg; break;
        case O_SWEEP: o->sweep = optarg; break;
        case O_JSON: o->json = 1; break;
        case O_QUIET: o->quiet = 1; break;
        case O_PTX: o->ptx = 1; break;
        case O_ALL: o->all = 1; break;
        case O_MEASURE: o->measure = 1; break;
        case O_GPU: o->gpu = optarg; break;
        case O_FAMILY: o->family = optarg; break;
        case 'o': o->output = optarg; break;
        case O_DEVICES: o->devices = optarg; break;
        case O_SHARD: o->shard = optarg; break;
        case O_STRATEGY: o->strategy = optarg; break;
        case O_RETRY: o->retry_errors = 1; break;
        case O_MD: o->markdown = 1; break;
        case O_CSV: o->csv = 1; break;
        case O_TIMING: o->timing = optarg; break;
        case 'h': o->help = 1; break;
        case 'j': {
            char *end;
            long v = strtol(optarg, &end, 10);
            if (*end || v < 1 || v > 256)
                return cli_usage_error("-j wants a number of threads from 1 to 256, got '%s'", optarg);
            o->jobs = (int)v;
            break;
        }
        case O_BUDGET:
            if (parse_long("--budget", optarg, 1, 1000000, &o->budget))
                return EXIT_USAGE;
            break;
        case O_SAMPLES:
            if (parse_long("--samples", optarg, TUNE_MIN_SAMPLES, 100000, &o->samples))
                return EXIT_USAGE;
            break;
        case O_SEED: {
            char *end;
            errno = 0;
            unsigned long long v = strtoull(optarg, &end, 0);
            if (!*optarg || *optarg == '-' || *end || errno)
                return cli_usage_error("--seed wants a whole number from 0 to %llu, got '%s'",
                                       (unsigned long long)-1, optarg);
            o->seed = v;
            break;
        }
        case O_BAND: {
            char *end;
            double v = strtod(optarg, &end);
            if (!*optarg || *end || !(v >= 0 && v < 1))
                return cli_usage_error("--band-floor wants a fraction in [0, 1), got '%s'", optarg);
            o->band_floor = v;
            break;
        }
        case ':':
            return cli_usage_error("option '%s' needs a value", argv[optind - 1]);
        default:
            return cli_usage_error("unknown option '%s' (see 'kforge %s --help')", argv[optind - 1], cmd);
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
    if (!cmd->fn)
        return cli_error("'kforge %s' is reserved and not built yet", cmd->name);
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
    int rc = parse(cmd->name, argc - 1, argv + 1, &o);
    if (rc)
        return rc;
    if (o.help) {
        printf("%s\n%s", cmd->usage, common_help);
        return 0;
    }
    return cmd->fn(&o);
}
